//! Directory changes on memory: every format and conversion, checked
//! against the read code's parsers and the format's invariants.

use super::layout::{da_magic, da_to_db, free_db, leaf_db, leaf_ent, split_ptr, DA_COUNT, DA_FORW};
use super::store::MemStore;
use super::*;
use crate::bytes::{be16, be32};
use crate::dir::lookup::{
    name_hash, DA3_HDR_SIZE, DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC,
};
use crate::fs::Fs;
use std::collections::BTreeMap;

fn mem_fs(args: &str) -> Fs {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let p = std::env::temp_dir().join(format!("xfskit-dirw-{}-{k}.img", std::process::id()));
    std::fs::File::create(&p)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    let a: Vec<String> = args.split_whitespace().map(String::from).collect();
    let o = crate::mkfs::parse_mkfs_args(&a).unwrap();
    crate::mkfs::mkfs(&p, &o).unwrap();
    let fs = Fs::open(&p, &crate::OpenOptions::default()).unwrap();
    let _ = std::fs::remove_file(&p);
    fs
}

fn new_dir(fs: &Fs) -> Inode {
    let geo = fs.geometry();
    let mut dp = Inode::new(geo, Ino(131), 0o40755, 1).unwrap();
    let sf = Sf {
        parent: 128,
        ents: Vec::new(),
    };
    sf.store(geo, &mut dp).unwrap();
    dp
}

/// Every entry as the read code's parsers see it, with invariants checked.
fn listing(fs: &Fs, st: &mut MemStore, dp: &Inode) -> BTreeMap<Vec<u8>, u64> {
    let geo = fs.geometry().clone();
    let mut out = BTreeMap::new();
    if dp.format == ForkFormat::Local {
        let p = crate::dir::shortform::parse(fs, dp).unwrap();
        assert_eq!(p.parent.0, 128);
        for e in p.entries {
            out.insert(e.name.to_vec(), e.ino.0);
        }
        return out;
    }
    let bs = geo.dir_blk_size as usize;
    let ldb = leaf_db(&geo);
    let mut ptrs: Vec<(u32, u32)> = Vec::new();
    let mut bests: BTreeMap<u64, u16> = BTreeMap::new();
    let mut last_data = 0;
    for (&db, b) in st.blocks.range(0..ldb) {
        let mut n = 0;
        crate::dir::data::walk(fs, dp.ino.0, db, b, &mut |e| {
            n += 1;
            ptrs.push((name_hash(e.name), super::layout::dataptr(&geo, db, e.off)));
            if e.name != b"." && e.name != b".." {
                out.insert(e.name.to_vec(), e.ino.0);
            }
            true
        })
        .unwrap();
        assert!(n > 0, "empty data block {db}");
        // Best-free table equals a recomputation.
        let mut c = b.clone();
        let end = leaf::data_end(&c);
        dblock::normalize(&geo, dp.ino.0, db, &mut c, end).unwrap();
        assert_eq!(&c[..], &b[..], "block {db} not normalized");
        bests.insert(db, dblock::best(b));
        last_data = db;
    }
    assert_eq!(dp.size, (last_data + 1) * bs as u64);
    let mut leaves: Vec<(u32, u32)> = Vec::new();
    match st.blocks.get(&ldb) {
        None => {
            let b = &st.blocks[&0];
            let (_, l) = crate::dir::data::data_end(&geo, dp.ino.0, 0, b).unwrap();
            let (s, n) = l.unwrap();
            leaves = (0..n).map(|i| leaf_ent(b, s + 8 * i)).collect();
            assert_eq!(st.blocks.len(), 1);
        }
        Some(b) if da_magic(b) == DIR3_LEAF1_MAGIC => {
            let l = leaf::Leaf1::decode(dp.ino.0, ldb, b).unwrap();
            leaves = l.ents.clone();
            assert_eq!(l.bests.len() as u64, last_data + 1);
            for (i, &v) in l.bests.iter().enumerate() {
                assert_eq!(bests.get(&(i as u64)).copied().unwrap_or(0xffff), v);
            }
        }
        Some(_) => {
            // Walk the tree: hash order, parent hashes = child max, sibling chains.
            walk_tree(&geo, st, ldb, None, &mut leaves);
            let fdb = free_db(&geo);
            let per = freeidx::per_block(&geo);
            let mut seen = 0;
            for (&f, b) in st.blocks.range(fdb..) {
                let v = freeidx::bests(dp.ino.0, f, b).unwrap();
                assert_eq!(be32(b, 48) as u64, (f - fdb) * per);
                assert_ne!(v.last(), Some(&0xffff));
                for (i, &x) in v.iter().enumerate() {
                    let db = (f - fdb) * per + i as u64;
                    assert_eq!(bests.get(&db).copied().unwrap_or(0xffff), x);
                    seen += usize::from(x != 0xffff);
                }
                assert_eq!(
                    be32(b, 56) as usize,
                    v.iter().filter(|&&x| x != 0xffff).count()
                );
            }
            assert_eq!(seen, bests.len());
        }
    }
    assert!(
        leaves.windows(2).all(|w| w[0].0 <= w[1].0),
        "leaf hashes out of order"
    );
    let mut a = leaves.clone();
    a.sort();
    ptrs.sort();
    assert_eq!(a, ptrs, "leaf entries do not match data entries");
    for &(_, p) in &leaves {
        assert!(split_ptr(&geo, p).0 < ldb);
    }
    out
}

/// Collects the leaf entries under `db`, checking hashes; returns the max.
fn walk_tree(
    geo: &crate::geometry::Geometry,
    st: &MemStore,
    db: u64,
    level: Option<u16>,
    out: &mut Vec<(u32, u32)>,
) -> u32 {
    let b = &st.blocks[&db];
    let n = usize::from(be16(b, DA_COUNT));
    assert!(n > 0, "empty da block {db}");
    let ents: Vec<(u32, u32)> = (0..n).map(|i| leaf_ent(b, DA3_HDR_SIZE + 8 * i)).collect();
    if da_magic(b) == DA3_NODE_MAGIC {
        let lv = be16(b, 58);
        if let Some(l) = level {
            assert_eq!(lv + 1, l);
        }
        let mut prev_child: Option<u64> = None;
        for &(h, c) in &ents {
            let cdb = da_to_db(geo, c);
            if let Some(p) = prev_child {
                assert_eq!(be32(&st.blocks[&p], DA_FORW), c, "sibling chain");
            }
            prev_child = Some(cdb);
            assert_eq!(
                walk_tree(geo, st, cdb, Some(lv), out),
                h,
                "parent hash of {cdb}"
            );
        }
    } else {
        assert_eq!(da_magic(b), DIR3_LEAFN_MAGIC);
        assert!(level.is_none() || level == Some(1));
        out.extend(ents.iter().copied());
    }
    ents[n - 1].0
}

fn name(i: usize) -> Vec<u8> {
    // Varied lengths; some share hashes with each other rarely.
    let len = 1 + (i * 7919) % 40;
    let mut s = format!("f{i}_");
    while s.len() < len {
        s.push((b'a' + (i % 26) as u8) as char);
    }
    s.into_bytes()
}

fn form_of(st: &mut MemStore, dp: &Inode) -> Form {
    form(st, dp).unwrap()
}

fn run(args: &str, n: usize, every: usize, reverse: bool) -> u16 {
    let fs = mem_fs(args);
    let mut st = MemStore::new(fs.geometry().clone());
    let mut dp = new_dir(&fs);
    let mut want = BTreeMap::new();
    let mut forms = Vec::new();
    for i in 0..n {
        let nm = name(i);
        let ino = 1000 + i as u64 * 3;
        add_in(&mut st, &mut dp, &nm, Ino(ino), 1).unwrap();
        want.insert(nm, ino);
        let f = form_of(&mut st, &dp);
        if forms.last() != Some(&f) {
            forms.push(f);
            assert_eq!(listing(&fs, &mut st, &dp), want, "after add {i}");
        }
        if i % every == 0 {
            assert_eq!(listing(&fs, &mut st, &dp), want, "after add {i}");
        }
    }
    assert_eq!(listing(&fs, &mut st, &dp), want);
    let root = &st.blocks[&leaf_db(fs.geometry())];
    let level = if da_magic(root) == DA3_NODE_MAGIC {
        be16(root, 58)
    } else {
        0
    };
    assert!(matches!(
        add_in(&mut st, &mut dp, &name(0), Ino(5000), 1),
        Err(Error::Exists(_))
    ));
    for (k, v) in &want {
        assert_eq!(lookup_in(&mut st, &dp, k).unwrap(), Some((Ino(*v), 1)));
    }
    assert_eq!(lookup_in(&mut st, &dp, b"..").unwrap().unwrap().0, Ino(128));
    assert_eq!(lookup_in(&mut st, &dp, b"nope").unwrap(), None);
    // Remove in a scrambled order.
    let mut names: Vec<Vec<u8>> = want.keys().cloned().collect();
    let mut x = 12345u64;
    for i in (1..names.len()).rev().filter(|_| !reverse) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        names.swap(i, (x >> 33) as usize % (i + 1));
    }
    if reverse {
        names = want.keys().cloned().collect();
        names.sort_by_key(|n| std::cmp::Reverse(want[n]));
    }
    let mut down = Vec::new();
    for (i, nm) in names.iter().enumerate() {
        let ino = remove_in(&mut st, &mut dp, nm).unwrap();
        assert_eq!(Some(&ino.0), want.get(nm));
        want.remove(nm);
        let f = form_of(&mut st, &dp);
        if down.last() != Some(&f) {
            down.push(f);
            assert_eq!(listing(&fs, &mut st, &dp), want, "after remove {i}");
        }
        if i % every == 0 {
            assert_eq!(listing(&fs, &mut st, &dp), want, "after remove {i}");
        }
    }
    assert!(is_empty_in(&mut st, &dp).unwrap());
    assert_eq!(dp.format, ForkFormat::Local);
    assert!(
        st.blocks.is_empty(),
        "blocks left: {:?}",
        st.blocks.keys().collect::<Vec<_>>()
    );
    eprintln!("{args}: up {forms:?} down {down:?}");
    assert_eq!(
        forms[..],
        [Form::Short, Form::Block, Form::Leaf, Form::Node][..forms.len()]
    );
    // Down the formats in order, ending in short form.
    let rank = |f: &Form| {
        [Form::Short, Form::Block, Form::Leaf, Form::Node]
            .iter()
            .position(|g| g == f)
    };
    assert!(
        down.windows(2).all(|w| rank(&w[0]) > rank(&w[1])),
        "{down:?}"
    );
    assert_eq!(down.last(), Some(&Form::Short));
    if reverse && forms.last() == Some(&Form::Leaf) {
        assert_eq!(down, [Form::Leaf, Form::Block, Form::Short]);
    }
    level
}

#[test]
fn all_formats_4k() {
    assert_eq!(run("-n size=4096", 3000, 97, false), 1);
}

#[test]
fn all_formats_1k_blocks_8k_dirs() {
    assert_eq!(run("-b size=1024 -n size=8192", 5000, 97, true), 1);
}

#[test]
fn deep_tree_two_node_levels() {
    // 504 hash entries per 4k leaf or node: two node levels need > 127000.
    assert_eq!(run("-n size=4096", 260_000, 40_000, false), 2);
}

#[test]
fn all_formats_4k_reverse() {
    assert_eq!(run("-n size=4096", 3000, 97, true), 1);
}

#[test]
fn leaf_form_up_and_down() {
    assert_eq!(run("-n size=4096", 400, 7, true), 0);
    assert_eq!(run("-b size=1024 -n size=65536", 3000, 97, true), 0);
}

#[test]
fn replace_and_wide_inodes() {
    let fs = mem_fs("-n size=4096");
    let mut st = MemStore::new(fs.geometry().clone());
    let mut dp = new_dir(&fs);
    add_in(&mut st, &mut dp, b"a", Ino(200), 1).unwrap();
    assert_eq!(
        replace_in(&mut st, &mut dp, b"a", Ino(300), 2).unwrap(),
        Ino(200)
    );
    assert_eq!(lookup_in(&mut st, &dp, b"a").unwrap(), Some((Ino(300), 2)));
    assert_eq!(
        replace_in(&mut st, &mut dp, b"..", Ino(129), 2).unwrap(),
        Ino(128)
    );
    replace_in(&mut st, &mut dp, b"..", Ino(128), 2).unwrap();
    assert!(matches!(
        remove_in(&mut st, &mut dp, b"zz"),
        Err(Error::NotFound(_))
    ));
    assert!(!is_empty_in(&mut st, &dp).unwrap());
    for i in 0..300 {
        add_in(&mut st, &mut dp, &name(i), Ino(400 + i as u64), 1).unwrap();
    }
    assert_eq!(
        replace_in(&mut st, &mut dp, b"..", Ino(129), 2).unwrap(),
        Ino(128)
    );
    assert_eq!(lookup_in(&mut st, &dp, b"..").unwrap(), Some((Ino(129), 2)));
    replace_in(&mut st, &mut dp, b"..", Ino(128), 2).unwrap();
    assert_eq!(
        replace_in(&mut st, &mut dp, &name(7), Ino(999), 1).unwrap(),
        Ino(407)
    );
    assert_eq!(
        lookup_in(&mut st, &dp, &name(7)).unwrap(),
        Some((Ino(999), 1))
    );
}

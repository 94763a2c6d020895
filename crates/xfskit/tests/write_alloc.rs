//! The free space allocator on fresh mkfs.xfs images: random allocations
//! and frees checked against a model, filling an AG to NoSpace and
//! emptying it again, and fragmenting free space until the bnobt/cntbt
//! have 3 levels. Each ends with fs.sync() and a clean xfs_repair -n.

mod write_common;

use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::alloc::{ag_free_blocks, ag_free_extents, alloc_extent, free_extent, AllocReq, Owner};
use xfskit::geometry::{AgBlock, AgNumber, FsBlock};
use xfskit::{Error, Fs, OpenOptions};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const OWNER: Owner = Owner::Inode {
    ino: xfskit::Ino(128),
    attr_fork: false,
    offset: 0,
    bmbt: false,
};

fn req(target: FsBlock, minlen: u32, maxlen: u32, alignment: u32, ag_only: bool) -> AllocReq {
    AllocReq {
        target,
        minlen,
        maxlen,
        alignment,
        ag_only,
        owner: OWNER,
    }
}

/// The free extents of every AG (as (agno, start, len)), with the
/// blocks on the free lists (they may become free space).
fn all_free(fs: &Fs) -> Vec<(u32, u32, u32)> {
    let mut tp = fs.trans().unwrap();
    let mut out = Vec::new();
    let geo = fs.geometry();
    for a in 0..geo.ag_count {
        for (s, l) in ag_free_extents(&mut tp, AgNumber(a)).unwrap() {
            out.push((a, s, l));
        }
        let ag0 = geo.agb_to_daddr(AgNumber(a), AgBlock(0)).0;
        let spd = u64::from(geo.sect_size >> 9);
        let rd = |sector: u64, v: &xfskit::buf::Verifier<'_>| {
            fs.read_meta(
                xfskit::geometry::Daddr(ag0 + sector * spd),
                geo.sect_size,
                v,
            )
            .unwrap()
        };
        let agf = rd(1, &xfskit::buf::Verifier::Agf { agno: a });
        let agfl = rd(3, &xfskit::buf::Verifier::Agfl { agno: a });
        let be = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        let (first, count) = (be(&agf, 40), be(&agf, 48));
        let size = (geo.sect_size - 36) / 4;
        for i in 0..count {
            let slot = ((first + i) % size) as usize;
            out.push((a, be(&agfl, 36 + 4 * slot), 1));
        }
    }
    out
}

/// Free blocks as the superblock sees them after sync.
fn sb_fdblocks(img: &Path) -> u64 {
    Fs::open(img, &OpenOptions::default())
        .unwrap()
        .geometry()
        .fdblocks
}

/// Allocated extents by filesystem block: (len, agno).
type Model = BTreeMap<u64, u32>;

fn check_new(fs: &Fs, m: &Model, fsb: FsBlock, len: u32, r: &AllocReq) {
    let geo = fs.geometry();
    assert!(len >= r.minlen && len <= r.maxlen, "length {len} for {r:?}");
    assert!(geo.fsb_range_valid(fsb, u64::from(len)), "{fsb:?}+{len}");
    let (_, agbno) = geo.fsb_split(fsb);
    assert_eq!(agbno.0 % r.alignment, 0, "alignment of {agbno:?} for {r:?}");
    if let Some((s, l)) = m.range(..=fsb.0).next_back() {
        assert!(s + u64::from(*l) <= fsb.0, "overlaps {s}+{l}");
    }
    if let Some((s, _)) = m.range(fsb.0..).next() {
        assert!(fsb.0 + u64::from(len) <= *s, "overlaps {s}");
    }
}

fn random_allocs(opts: &str, size: u64, tag: &str) {
    let dir = Scratch::new(tag);
    let img = dir.0.join("a.img");
    mkfs_xfs(&img, size, opts);
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let mut fresh = all_free(&fs);
    // Coalesce touching pieces (free list blocks next to free extents).
    fresh.sort();
    let mut merged: Vec<(u32, u32, u32)> = Vec::new();
    for (a, st, l) in fresh {
        match merged.last_mut() {
            Some(m) if m.0 == a && m.1 + m.2 == st => m.2 += l,
            _ => merged.push((a, st, l)),
        }
    }
    let fresh = merged;
    let in_fresh = |fsb: u64, len: u32| {
        let (a, b) = geo.fsb_split(FsBlock(fsb));
        fresh
            .iter()
            .any(|&(fa, s, l)| fa == a.0 && s <= b.0 && b.0 + len <= s + l)
    };
    let mut m: Model = BTreeMap::new();
    // Owner of each extent (fake inodes with running file offsets, so
    // neighbouring allocations of one inode merge in the rmapbt).
    let mut owners: BTreeMap<u64, Owner> = BTreeMap::new();
    let mut next_off = [0u64; 7];
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut nospace = 0;
    for round in 0..3000 {
        let mut tp = fs.trans().unwrap();
        let free_now = rng.below(100) < 40 && !m.is_empty();
        if free_now {
            let k = rng.next();
            let (&s, &l) = m
                .range(k % (geo.data_blocks << 2)..)
                .next()
                .or_else(|| m.iter().next())
                .unwrap();
            free_extent(&mut tp, FsBlock(s), l, &owners[&s]).unwrap();
            m.remove(&s);
            owners.remove(&s);
        } else {
            let agno = rng.below(u64::from(geo.ag_count)) as u32;
            let agbno = rng.below(u64::from(geo.ag_len(AgNumber(agno)))) as u32;
            let target = geo.fsb_make(AgNumber(agno), AgBlock(agbno));
            let i = rng.below(7) as usize;
            let owner = match i {
                5 => Owner::Inobt,
                6 => Owner::Inode {
                    ino: xfskit::Ino(2000),
                    attr_fork: false,
                    offset: 0,
                    bmbt: true,
                },
                _ => Owner::Inode {
                    ino: xfskit::Ino(1000 + i as u64),
                    attr_fork: i == 4,
                    offset: next_off[i],
                    bmbt: false,
                },
            };
            let mut r = match rng.below(4) {
                0 => req(target, 1, 1, 1, false),
                1 => {
                    let max = 1 + rng.below(2000) as u32;
                    req(target, 1 + max / 4, max, 1, false)
                }
                2 => req(target, 4, 16, [2, 4, 8, 16][rng.below(4) as usize], false),
                _ => req(target, 1, 64, 1, rng.below(2) == 0),
            };
            r.owner = owner;
            match alloc_extent(&mut tp, &r) {
                Ok((fsb, len)) => {
                    check_new(&fs, &m, fsb, len, &r);
                    assert!(in_fresh(fsb.0, len), "{fsb:?}+{len} was not free space");
                    m.insert(fsb.0, len);
                    owners.insert(fsb.0, owner);
                    next_off[i] += u64::from(len);
                }
                Err(Error::NoSpace(_)) => {
                    nospace += 1;
                    let (a, _) = geo.fsb_split(r.target);
                    let mut t2 = fs.trans().unwrap();
                    eprintln!(
                        "NoSpace for {r:?}: AG {} has {} free",
                        a.0,
                        ag_free_blocks(&mut t2, a).unwrap()
                    );
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        tp.commit().unwrap();
    }
    let used: u64 = m.values().map(|&l| u64::from(l)).sum();
    eprintln!(
        "{tag}: {} extents, {used} blocks allocated, {nospace} NoSpace",
        m.len()
    );
    let rmapbt = geo.features.rmapbt;
    if rmapbt {
        check_rmap(&fs, &m, &owners);
    }
    fs.sync().unwrap();
    drop(fs);
    if !rmapbt {
        // With an rmapbt, xfs_repair rightly complains about blocks owned
        // by inodes that do not exist; it runs once everything is freed.
        assert_repair_clean(&img);
    }
    assert_eq!(sb_fdblocks(&img), before - used);
    // Free everything again: free space must be whole again.
    let fs = open_rw(&img);
    for (i, (&s, &l)) in m.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, FsBlock(s), l, &owners[&s]).unwrap();
        tp.commit().unwrap();
        if i % 500 == 0 {
            fs.writeback().unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

/// The rmapbt against the model: records in order without overlaps,
/// none on free space, every allocated extent inside a record of its
/// owner at the right file offset, touching records of one owner merged.
fn check_rmap(fs: &Fs, m: &Model, owners: &BTreeMap<u64, Owner>) {
    let geo = fs.geometry();
    let mut tp = fs.trans().unwrap();
    let mut n = 0;
    for a in 0..geo.ag_count {
        let recs = xfskit::alloc::ag_rmap_records(&mut tp, AgNumber(a)).unwrap();
        let free = ag_free_extents(&mut tp, AgNumber(a)).unwrap();
        n += recs.len();
        for w in recs.windows(2) {
            let (p, q) = (w[0], w[1]);
            assert!(p.0 + p.1 <= q.0, "AG {a}: {p:?} overlaps {q:?}");
            let inode_data = p.2 >> 63 == 0 && p.3 & (1 << 62) == 0;
            let contiguous =
                !inode_data || (p.3 & ((1 << 54) - 1)) + u64::from(p.1) == (q.3 & ((1 << 54) - 1));
            let same = p.2 == q.2 && p.3 >> 61 == q.3 >> 61;
            assert!(
                !(p.0 + p.1 == q.0 && same && contiguous),
                "AG {a}: {p:?} and {q:?} not merged"
            );
        }
        for (s, l) in free {
            let i = recs.partition_point(|r| r.0 + r.1 <= s);
            if let Some(r) = recs.get(i) {
                assert!(r.0 >= s + l, "AG {a}: free {s}+{l} is mapped by {r:?}");
            }
        }
        for (&fsb, &len) in m.range(
            geo.fsb_make(AgNumber(a), AgBlock(0)).0..geo.fsb_make(AgNumber(a + 1), AgBlock(0)).0,
        ) {
            let b = geo.fsb_split(FsBlock(fsb)).1 .0;
            let i = recs.partition_point(|r| r.0 + r.1 <= b);
            let r = recs
                .get(i)
                .copied()
                .unwrap_or_else(|| panic!("{fsb}+{len} unmapped"));
            assert!(
                r.0 <= b && b + len <= r.0 + r.1,
                "{fsb}+{len} not inside {r:?}"
            );
            match owners[&fsb] {
                Owner::Inode {
                    ino,
                    attr_fork,
                    offset,
                    bmbt,
                } => {
                    assert_eq!(r.2, ino.0);
                    assert_eq!(r.3 >> 63 == 1, attr_fork);
                    assert_eq!((r.3 >> 62) & 1 == 1, bmbt);
                    if !bmbt {
                        assert_eq!((r.3 & ((1 << 54) - 1)) + u64::from(b - r.0), offset);
                    }
                }
                Owner::Inobt => assert_eq!(r.2, (-6i64) as u64),
                o => panic!("unexpected owner {o:?}"),
            }
        }
    }
    eprintln!("rmapbt: {n} records checked");
}

#[test]
fn random_allocations_4k() {
    random_allocs("-d agcount=4", 512 << 20, "alloc-4k");
}

#[test]
fn random_allocations_4k_sectors() {
    random_allocs("-s size=4096 -d agcount=3", 384 << 20, "alloc-4ks");
}

#[test]
fn random_allocations_rmapbt_4k() {
    random_allocs("-m rmapbt=1 -d agcount=4", 512 << 20, "alloc-rmap4k");
}

#[test]
fn random_allocations_rmapbt_1k() {
    random_allocs(
        "-m rmapbt=1 -b size=1024 -d agcount=4",
        320 << 20,
        "alloc-rmap1k",
    );
}

#[test]
fn random_allocations_1k() {
    random_allocs("-b size=1024 -d agcount=6", 400 << 20, "alloc-1k");
}

#[test]
fn fill_ag_then_free_everything() {
    let dir = Scratch::new("fill");
    let img = dir.0.join("f.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024 -d agcount=4");
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(2);
    let fresh_free = {
        let mut tp = fs.trans().unwrap();
        ag_free_blocks(&mut tp, ag).unwrap()
    };
    let mut got = Vec::new();
    let mut rng = Rng(77);
    loop {
        let mut tp = fs.trans().unwrap();
        let max = 1 + rng.below(3000) as u32;
        let t = geo.fsb_make(ag, AgBlock(rng.below(u64::from(geo.ag_blocks)) as u32));
        match alloc_extent(&mut tp, &req(t, 1, max, 1, true)) {
            Ok((f, l)) => {
                assert_eq!(geo.fsb_split(f).0, ag);
                got.push((f, l));
                tp.commit().unwrap();
            }
            Err(Error::NoSpace(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let total: u64 = got.iter().map(|g| u64::from(g.1)).sum();
    {
        let mut tp = fs.trans().unwrap();
        let left = ag_free_blocks(&mut tp, ag).unwrap();
        eprintln!(
            "filled AG {}: {} extents, {total} blocks, {left} left free",
            ag.0,
            got.len()
        );
        let reserve = u64::from(xfskit::alloc::AG_RESERVE);
        assert!(left < 16 + reserve, "{left} blocks left free in a full AG");
        assert!(left >= reserve, "the AG reserve was used for file data");
        // Inode btree blocks may still come from the reserve.
        let t = geo.fsb_make(ag, AgBlock(0));
        let mut r = req(t, 1, 1, 1, true);
        r.owner = Owner::Inobt;
        let (b, _) = alloc_extent(&mut tp, &r).unwrap();
        free_extent(&mut tp, b, 1, &Owner::Inobt).unwrap();
        assert!(total + left <= fresh_free + 16);
        drop(tp);
    }
    fs.sync().unwrap();
    assert_repair_clean(&img);
    // Free in random order.
    drop(fs);
    kernel_rw_churn(&img);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    while !got.is_empty() {
        let i = rng.below(got.len() as u64) as usize;
        let (f, l) = got.swap_remove(i);
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, f, l, &OWNER).unwrap();
        tp.commit().unwrap();
    }
    {
        let mut tp = fs.trans().unwrap();
        let ext = ag_free_extents(&mut tp, ag).unwrap();
        let free = ag_free_blocks(&mut tp, ag).unwrap();
        eprintln!("after freeing: {} free extents, {free} blocks", ext.len());
        // Everything is free again except what sits on the free list.
        assert!(ext.len() <= 12, "free space stayed fragmented: {ext:?}");
        assert!(free + 16 >= fresh_free && free <= fresh_free + 16);
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

#[test]
fn fragmented_free_space_grows_and_shrinks_btrees() {
    fragment("-b size=1024 -d agcount=4", "frag");
}

#[test]
fn fragmented_free_space_rmapbt() {
    fragment("-m rmapbt=1 -b size=1024 -d agcount=4", "frag-rmap");
}

/// Owner of block `i` of the fragmentation test's file.
fn frag_owner(i: u64) -> Owner {
    Owner::Inode {
        ino: xfskit::Ino(3000),
        attr_fork: false,
        offset: i,
        bmbt: false,
    }
}

fn fragment(opts: &str, tag: &str) {
    let dir = Scratch::new(tag);
    let img = dir.0.join("g.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    // Take 24000 blocks of AG 1 in big pieces.
    let mut pieces = Vec::new();
    let mut want = 24000u32;
    let mut off = 0u64;
    while want > 0 {
        let mut tp = fs.trans().unwrap();
        let t = geo.fsb_make(ag, AgBlock(0));
        let mut r = req(t, 1, want.min(4000), 1, true);
        r.owner = frag_owner(off);
        let (f, l) = alloc_extent(&mut tp, &r).unwrap();
        off += u64::from(l);
        tp.commit().unwrap();
        pieces.push((f, l));
        want -= l;
    }
    // Free every other block: ~12000 one-block free extents.
    let mut kept = Vec::new();
    let mut n = 0;
    let mut off = 0u64;
    for &(f, l) in &pieces {
        let mut tp = fs.trans().unwrap();
        for i in 0..l {
            let b = FsBlock(f.0 + u64::from(i));
            if i % 2 == 0 {
                free_extent(&mut tp, b, 1, &frag_owner(off)).unwrap();
                n += 1;
            } else {
                kept.push((b, off));
            }
            off += 1;
            if tp.dirty_count() > 40 {
                tp.commit().unwrap();
                tp = fs.trans().unwrap();
            }
        }
        tp.commit().unwrap();
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("freed {n} single blocks; bno/cnt/rmap levels {levels:?}");
    assert!(levels.0 >= 3 && levels.1 >= 3, "levels {levels:?}");
    let rmapbt = geo.features.rmapbt;
    if rmapbt {
        assert!(levels.2 >= 3, "rmapbt levels {levels:?}");
    }
    fs.sync().unwrap();
    drop(fs);
    if !rmapbt {
        // (With an rmapbt, repair objects to the made-up owner inode.)
        assert_repair_clean(&img);
    }
    kernel_rw_churn(&img);
    if !rmapbt {
        assert_repair_clean(&img);
    }
    let fs = open_rw(&img);
    // Free the rest: the extents merge back and the trees shrink.
    for (i, (b, off)) in kept.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, *b, 1, &frag_owner(*off)).unwrap();
        tp.commit().unwrap();
        if i % 1000 == 0 {
            fs.writeback().unwrap();
        }
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("after merging: levels {levels:?}");
    assert_eq!((levels.0, levels.1), (1, 1));
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

/// As root: mounts the image read-write with the kernel, writes and
/// removes files (the kernel allocates from and frees into our free space
/// btrees), unmounts. Prints why when it cannot run.
fn kernel_rw_churn(img: &Path) {
    if !is_root() {
        eprintln!("SKIP kernel read-write mount: needs root");
        return;
    }
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display().to_string();
    let (ok, out) = run(
        "mount",
        &["-o", "loop,nouuid", &img.display().to_string(), &m],
    );
    assert!(ok, "kernel mount: {out}");
    let r = std::panic::catch_unwind(|| {
        for i in 0..40 {
            let data = vec![i as u8; 1024 * (1 + 37 * i)];
            std::fs::write(mnt.join(format!("f{i}")), &data).unwrap();
        }
        let (ok, out) = run("sync", &[]);
        assert!(ok, "{out}");
        for i in 0..40 {
            if i % 3 != 0 {
                std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
            }
        }
        for i in (0..40).step_by(3) {
            let got = std::fs::read(mnt.join(format!("f{i}"))).unwrap();
            assert_eq!(got.len(), 1024 * (1 + 37 * i));
            std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
        }
    });
    let (ok, out) = run("umount", &[&m]);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// bnobt, cntbt and rmapbt levels of an AG, read from its AGF.
fn agf_levels(fs: &Fs, ag: AgNumber) -> (u32, u32, u32) {
    let geo = fs.geometry();
    let d = geo.agb_to_daddr(ag, AgBlock(0)).0 + u64::from(geo.sect_size >> 9);
    let b = fs
        .read_meta(
            xfskit::geometry::Daddr(d),
            geo.sect_size,
            &xfskit::buf::Verifier::Agf { agno: ag.0 },
        )
        .unwrap();
    let be = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    (be(28), be(32), be(36))
}

/// Corrupted free space metadata (valid CRCs, wrong contents) must give
/// errors, never panics or hangs: fragment AG 1 into multi-level trees,
/// then for many single-field corruptions of its btree blocks and AGF,
/// run allocations and frees.
#[test]
fn corrupt_free_space_metadata_never_panics() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let dir = Scratch::new("corrupt");
    let img = dir.0.join("c.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024 -d agcount=4");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    let mut kept = Vec::new();
    {
        let mut tp = fs.trans().unwrap();
        let t = geo.fsb_make(ag, AgBlock(0));
        let (f, l) = alloc_extent(&mut tp, &req(t, 8000, 8000, 1, true)).unwrap();
        tp.commit().unwrap();
        for i in 0..l {
            let mut tp = fs.trans().unwrap();
            let b = FsBlock(f.0 + u64::from(i));
            if i % 2 == 0 {
                free_extent(&mut tp, b, 1, &OWNER).unwrap();
            } else {
                kept.push(b);
            }
            tp.commit().unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let clean = std::fs::read(&img).unwrap();
    let bs = geo.block_size as usize;
    let ag0 = geo.agb_to_daddr(ag, AgBlock(0)).bytes() as usize;
    let btree_blocks: Vec<usize> = (1..geo.ag_blocks as usize)
        .map(|b| ag0 + b * bs)
        .filter(|&o| matches!(&clean[o..o + 4], b"AB3B" | b"AB3C"))
        .collect();
    assert!(
        btree_blocks.len() > 20,
        "found {} btree blocks",
        btree_blocks.len()
    );
    let agf_off = ag0 + geo.sect_size as usize;
    let mut rng = Rng(4242);
    let mut errors = 0;
    for trial in 0..60 {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&img)
            .unwrap();
        f.write_all(&clean).unwrap();
        let (off, len, crc_off) = if trial % 5 == 4 {
            (agf_off, geo.sect_size as usize, 216)
        } else {
            let o = btree_blocks[rng.below(btree_blocks.len() as u64) as usize];
            (o, bs, 52)
        };
        let mut blk = vec![0u8; len];
        f.seek(SeekFrom::Start(off as u64)).unwrap();
        f.read_exact(&mut blk).unwrap();
        let field = if crc_off == 216 {
            // Roots, levels, free list indexes and counters.
            [16, 20, 28, 32, 40, 44, 48, 52, 56, 60][rng.below(10) as usize]
        } else {
            [4, 6, 8, 12, 56 + 4 * rng.below(200) as usize][rng.below(5) as usize]
        };
        let v = rng.next() as u32;
        let v = match rng.below(3) {
            0 => v,
            1 => v % 16,
            _ => u32::MAX - v % 4,
        };
        blk[field..field + 4].copy_from_slice(&v.to_be_bytes());
        xfs_format::crc::stamp(&mut blk, crc_off);
        f.seek(SeekFrom::Start(off as u64)).unwrap();
        f.write_all(&blk).unwrap();
        drop(f);
        let fs = open_rw(&img);
        for _ in 0..60 {
            let mut tp = fs.trans().unwrap();
            let r = if rng.below(2) == 0 && !kept.is_empty() {
                let b = kept[rng.below(kept.len() as u64) as usize];
                free_extent(&mut tp, b, 1, &OWNER).map(|_| ())
            } else {
                let t = geo.fsb_make(ag, AgBlock(rng.below(20000) as u32));
                alloc_extent(&mut tp, &req(t, 1, 1 + rng.below(50) as u32, 1, true)).map(|_| ())
            };
            match r {
                Ok(()) => tp.commit().unwrap(),
                Err(_) => errors += 1,
            }
        }
    }
    eprintln!("corruption trials: {errors} operations failed cleanly");
    assert!(errors > 0, "no corruption was ever noticed");
}

/// Four threads allocating and freeing at once (targets in every AG,
/// falling back across AGs): no deadlock, no block handed out twice,
/// xfs_repair -n clean and free space whole again at the end.
#[test]
fn concurrent_allocations() {
    concurrent("-b size=1024 -d agcount=4", "threads");
}

#[test]
fn concurrent_allocations_rmapbt() {
    concurrent("-m rmapbt=1 -b size=1024 -d agcount=4", "threads-rmap");
}

fn concurrent(opts: &str, tag: &str) {
    let dir = Scratch::new(tag);
    let img = dir.0.join("t.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let all: Vec<Vec<(FsBlock, u32)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let fs = &fs;
                let geo = &geo;
                s.spawn(move || {
                    let mut rng = Rng(1000 + t);
                    let mut mine: Vec<(FsBlock, u32)> = Vec::new();
                    for _ in 0..600 {
                        let mut tp = fs.trans().unwrap();
                        if rng.below(3) == 0 && !mine.is_empty() {
                            let i = rng.below(mine.len() as u64) as usize;
                            let (b, l) = mine.swap_remove(i);
                            free_extent(&mut tp, b, l, &OWNER).unwrap();
                        } else {
                            let ag = AgNumber(((t + rng.below(2)) % 4) as u32);
                            let target = geo.fsb_make(ag, AgBlock(rng.below(70000) as u32));
                            let (b, l) = alloc_extent(
                                &mut tp,
                                &req(target, 1, 1 + rng.below(300) as u32, 1, false),
                            )
                            .unwrap();
                            mine.push((b, l));
                        }
                        tp.commit().unwrap();
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut m: Model = BTreeMap::new();
    for (b, l) in all.iter().flatten() {
        let r = req(*b, 1, *l, 1, false);
        check_new(&fs, &m, *b, *l, &r);
        m.insert(b.0, *l);
    }
    let rmapbt = geo.features.rmapbt;
    fs.sync().unwrap();
    drop(fs);
    if !rmapbt {
        assert_repair_clean(&img);
    }
    let fs = open_rw(&img);
    for (&b, &l) in &m {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, FsBlock(b), l, &OWNER).unwrap();
        tp.commit().unwrap();
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

/// rmap_convert splits a record into unwritten and written parts and
/// merges them back; a free spanning several records unmaps them all.
#[test]
fn rmapbt_convert_and_multi_record_free() {
    let dir = Scratch::new("rmap-conv");
    let img = dir.0.join("r.img");
    mkfs_xfs(&img, 320 << 20, "-m rmapbt=1 -b size=1024 -d agcount=4");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    let owner = |off: u64| Owner::Inode {
        ino: xfskit::Ino(5000),
        attr_fork: false,
        offset: off,
        bmbt: false,
    };
    let recs_of = |fs: &Fs| -> Vec<(u32, u32, u64, u64)> {
        let mut tp = fs.trans().unwrap();
        xfskit::alloc::ag_rmap_records(&mut tp, ag)
            .unwrap()
            .into_iter()
            .filter(|r| r.2 == 5000)
            .collect()
    };
    let mut tp = fs.trans().unwrap();
    let mut r = req(geo.fsb_make(ag, AgBlock(100)), 40, 40, 1, true);
    r.owner = owner(0);
    let (b, l) = alloc_extent(&mut tp, &r).unwrap();
    assert_eq!(l, 40);
    tp.commit().unwrap();
    assert_eq!(recs_of(&fs).len(), 1);
    // Middle 10 blocks unwritten: three records.
    let mut tp = fs.trans().unwrap();
    xfskit::alloc::rmap_convert(&mut tp, FsBlock(b.0 + 10), 10, &owner(10), true).unwrap();
    tp.commit().unwrap();
    let recs = recs_of(&fs);
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_eq!(recs[1].1, 10);
    assert_ne!(recs[1].3 & (1 << 61), 0, "middle record unwritten");
    // Back to written: one record again.
    let mut tp = fs.trans().unwrap();
    xfskit::alloc::rmap_convert(&mut tp, FsBlock(b.0 + 10), 10, &owner(10), false).unwrap();
    tp.commit().unwrap();
    assert_eq!(recs_of(&fs).len(), 1);
    // Unwritten again, then free blocks 5..35 across the three records.
    let mut tp = fs.trans().unwrap();
    xfskit::alloc::rmap_convert(&mut tp, FsBlock(b.0 + 10), 10, &owner(10), true).unwrap();
    free_extent(&mut tp, FsBlock(b.0 + 5), 30, &owner(5)).unwrap();
    tp.commit().unwrap();
    let recs = recs_of(&fs);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!((recs[0].1, recs[1].1), (5, 5));
    assert_eq!(recs[1].3 & ((1 << 54) - 1), 35);
    // A wrong owner or offset is refused.
    let mut tp = fs.trans().unwrap();
    assert!(free_extent(&mut tp, b, 5, &owner(1)).is_err());
    drop(tp);
    let mut tp = fs.trans().unwrap();
    free_extent(&mut tp, b, 5, &owner(0)).unwrap();
    free_extent(&mut tp, FsBlock(b.0 + 35), 5, &owner(35)).unwrap();
    tp.commit().unwrap();
    assert!(recs_of(&fs).is_empty());
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

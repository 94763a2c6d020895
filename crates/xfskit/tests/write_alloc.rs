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

/// The free extents of every AG (as (agno, start, len)).
fn all_free(fs: &Fs) -> Vec<(u32, u32, u32)> {
    let mut tp = fs.trans().unwrap();
    let mut out = Vec::new();
    for a in 0..fs.geometry().ag_count {
        for (s, l) in ag_free_extents(&mut tp, AgNumber(a)).unwrap() {
            out.push((a, s, l));
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
    let fresh = all_free(&fs);
    let in_fresh = |fsb: u64, len: u32| {
        let (a, b) = geo.fsb_split(FsBlock(fsb));
        fresh
            .iter()
            .any(|&(fa, s, l)| fa == a.0 && s <= b.0 && b.0 + len <= s + l)
    };
    let mut m: Model = BTreeMap::new();
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
            free_extent(&mut tp, FsBlock(s), l, &OWNER).unwrap();
            m.remove(&s);
        } else {
            let agno = rng.below(u64::from(geo.ag_count)) as u32;
            let agbno = rng.below(u64::from(geo.ag_len(AgNumber(agno)))) as u32;
            let target = geo.fsb_make(AgNumber(agno), AgBlock(agbno));
            let r = match rng.below(4) {
                0 => req(target, 1, 1, 1, false),
                1 => {
                    let max = 1 + rng.below(2000) as u32;
                    req(target, 1 + max / 4, max, 1, false)
                }
                2 => req(target, 4, 16, [2, 4, 8, 16][rng.below(4) as usize], false),
                _ => req(target, 1, 64, 1, rng.below(2) == 0),
            };
            match alloc_extent(&mut tp, &r) {
                Ok((fsb, len)) => {
                    check_new(&fs, &m, fsb, len, &r);
                    assert!(in_fresh(fsb.0, len), "{fsb:?}+{len} was not free space");
                    m.insert(fsb.0, len);
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
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before - used);
    // Free everything again: free space must be whole again.
    let fs = open_rw(&img);
    for (i, (&s, &l)) in m.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, FsBlock(s), l, &OWNER).unwrap();
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

#[test]
fn random_allocations_4k() {
    random_allocs("-d agcount=4", 512 << 20, "alloc-4k");
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
    let (fresh_free, fresh_fl) = {
        let mut tp = fs.trans().unwrap();
        (ag_free_blocks(&mut tp, ag).unwrap(), ())
    };
    let _ = fresh_fl;
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
        assert!(left < 16, "{left} blocks left free in a full AG");
        assert!(total + left <= fresh_free + 16);
    }
    fs.sync().unwrap();
    assert_repair_clean(&img);
    // Free in random order.
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
    let dir = Scratch::new("frag");
    let img = dir.0.join("g.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024 -d agcount=4");
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    // Take 24000 blocks of AG 1 in big pieces.
    let mut pieces = Vec::new();
    let mut want = 24000u32;
    while want > 0 {
        let mut tp = fs.trans().unwrap();
        let t = geo.fsb_make(ag, AgBlock(0));
        let (f, l) = alloc_extent(&mut tp, &req(t, 1, want.min(4000), 1, true)).unwrap();
        tp.commit().unwrap();
        pieces.push((f, l));
        want -= l;
    }
    // Free every other block: ~12000 one-block free extents.
    let mut kept = Vec::new();
    let mut n = 0;
    for &(f, l) in &pieces {
        let mut tp = fs.trans().unwrap();
        for i in 0..l {
            let b = FsBlock(f.0 + u64::from(i));
            if i % 2 == 0 {
                free_extent(&mut tp, b, 1, &OWNER).unwrap();
                n += 1;
            } else {
                kept.push(b);
            }
            if tp.dirty_count() > 40 {
                tp.commit().unwrap();
                tp = fs.trans().unwrap();
            }
        }
        tp.commit().unwrap();
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("freed {n} single blocks; bno/cnt levels {levels:?}");
    assert!(levels.0 >= 3 && levels.1 >= 3, "levels {levels:?}");
    fs.sync().unwrap();
    assert_repair_clean(&img);
    // Free the rest: the extents merge back and the trees shrink.
    for (i, b) in kept.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, *b, 1, &OWNER).unwrap();
        tp.commit().unwrap();
        if i % 1000 == 0 {
            fs.writeback().unwrap();
        }
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("after merging: levels {levels:?}");
    assert_eq!(levels, (1, 1));
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

/// bnobt and cntbt levels of an AG, read from its AGF.
fn agf_levels(fs: &Fs, ag: AgNumber) -> (u32, u32) {
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
    (be(28), be(32))
}

//! The free space allocator on fresh mkfs.xfs images: random allocations
//! and frees checked against a model, filling an AG to NoSpace and
//! emptying it again, and concurrent allocations in several AGs. Each
//! ends with fs.sync() and a clean xfs_repair -n.

mod alloc_common;
mod write_common;

use alloc_common::*;
use std::collections::BTreeMap;
use write_common::*;
use xfskit::alloc::{ag_free_blocks, ag_free_extents, alloc_extent, free_extent, Owner};
use xfskit::geometry::{AgBlock, AgNumber, FsBlock};
use xfskit::Error;

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

//! The generic btree engine against a BTreeMap model: thousands of random
//! inserts, updates and deletes in a scratch tree whose blocks come from
//! the real allocator of a fresh mkfs.xfs image (1k blocks: small fanout,
//! so trees reach 3+ levels and shrink back). Short-pointer trees with a
//! root block, and long-pointer trees rooted in an inode-like area.
//! After the tree is emptied and its blocks freed, xfs_repair -n must be
//! clean.

mod btree_common;
mod write_common;

use btree_common::*;
use std::collections::{BTreeMap, HashSet};
use write_common::*;
use xfskit::btree::{BtreeOps, Cursor, Dir};
use xfskit::geometry::{AgNumber, Ino};

fn run_random(long: bool, inode_root: bool, tag: &str) {
    run_random_mode(long, inode_root, false, tag)
}

fn run_random_mode(long: bool, inode_root: bool, overlap: bool, tag: &str) {
    run_random_full(long, inode_root, overlap, false, tag)
}

/// A fresh 1k-block image and an empty scratch tree of the given shape
/// whose blocks come from its allocator.
fn new_tree(
    dir: &Scratch,
    long: bool,
    inode_root: bool,
    overlap: bool,
    iroot_records: bool,
) -> (std::path::PathBuf, xfskit::fs::Fs, Cursor<TestOps>) {
    let img = dir.0.join("bt.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024 -d agcount=4");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let mut ops = TestOps {
        long,
        overlap,
        inode_root,
        iroot_records,
        root: 0,
        levels: 1,
        blocks: HashSet::new(),
        block_size: geo.block_size as usize,
        max_levels_seen: 1,
    };
    let mut iroot = Vec::new();
    {
        let mut tp = fs.trans().unwrap();
        if inode_root {
            // A 76-byte fork area: 4 records or 4 key/pointer pairs.
            iroot = vec![0u8; 4 + 4 * 16];
        } else {
            let p = ops.alloc_block(&mut tp, 0).unwrap();
            let d = ops.ptr_daddr(&tp, p).unwrap();
            let id = tp.get_buf(d, geo.block_size, Some(ops.shape().crc_off()));
            let b = tp.buf_mut(id);
            b[0..4].copy_from_slice(&0x4142_3342u32.to_be_bytes());
            b[8..16].fill(0xff);
            b[16..24].copy_from_slice(&d.0.to_be_bytes());
            b[32..48].copy_from_slice(&geo.meta_uuid);
            ops.root = p;
        }
        tp.commit().unwrap();
    }
    let c = Cursor::with_inode_root(ops, iroot);
    (img, fs, c)
}

fn run_random_full(long: bool, inode_root: bool, overlap: bool, iroot_records: bool, tag: &str) {
    let dir = Scratch::new(tag);
    let (img, fs, mut c) = new_tree(&dir, long, inode_root, overlap, iroot_records);
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (long as u64) ^ ((inode_root as u64) << 1));
    let keyspace = 40_000u64;
    // Phase 1: grow; phase 2: shrink to nothing.
    for phase in 0..2 {
        for batch in 0..40 {
            let mut tp = fs.trans().unwrap();
            for _ in 0..400 {
                let k = rng.next() % keyspace;
                let grow = phase == 0 && rng.next() % 10 < 8;
                if grow && rng.next().is_multiple_of(8) {
                    // A run of ascending keys, each after the first put in
                    // beside the one before (insert_next), stepping over
                    // the keys that are present (their records lie between
                    // the run's, sometimes first in the next leaf).
                    let len = 1 + rng.next() % 40;
                    let mut first = true;
                    for rk in k..(k + len).min(keyspace) {
                        if model.contains_key(&rk) {
                            continue;
                        }
                        let v = rng.next() % 1000;
                        if std::mem::take(&mut first) {
                            c.insert(&mut tp, &rec(long, rk, v)).unwrap();
                        } else {
                            c.insert_next(&mut tp, &rec(long, rk, v)).unwrap();
                        }
                        assert_eq!(unrec(long, c.get(&tp).unwrap()), (rk, v));
                        model.insert(rk, v);
                    }
                } else if grow || model.is_empty() && phase == 0 {
                    let v = rng.next() % 1000;
                    if let Some(old) = model.get_mut(&k) {
                        assert!(c.lookup(&mut tp, &key(long, k), Dir::Eq).unwrap());
                        c.update(&mut tp, &rec(long, k, v)).unwrap();
                        *old = v;
                    } else {
                        c.insert(&mut tp, &rec(long, k, v)).unwrap();
                        assert_eq!(unrec(long, c.get(&tp).unwrap()), (k, v));
                        model.insert(k, v);
                    }
                } else {
                    // Delete the record at or after k, if any.
                    let found = c.lookup(&mut tp, &key(long, k), Dir::Ge).unwrap();
                    let want = model.range(k..).next().map(|(a, b)| (*a, *b));
                    assert_eq!(found.then(|| unrec(long, c.get(&tp).unwrap())), want);
                    if let Some((dk, _)) = want {
                        c.delete(&mut tp).unwrap();
                        model.remove(&dk);
                        let next = model.range(dk..).next().map(|(a, b)| (*a, *b));
                        assert_eq!(c.get(&tp).map(|r| unrec(long, r)), next);
                    }
                }
            }
            if batch % 8 == 7 {
                check_model(&mut c, &mut tp, long, &model);
                check_structure(&c, &mut tp);
            }
            tp.commit().unwrap();
            if phase == 1 && model.is_empty() {
                break;
            }
        }
        if phase == 1 {
            // Empty what is left.
            let mut tp = fs.trans().unwrap();
            while c.lookup(&mut tp, &key(long, 0), Dir::Ge).unwrap() {
                let (k, _) = unrec(long, c.get(&tp).unwrap());
                c.delete(&mut tp).unwrap();
                model.remove(&k);
            }
            check_model(&mut c, &mut tp, long, &model);
            check_structure(&c, &mut tp);
            tp.commit().unwrap();
        }
        eprintln!(
            "{tag}: phase {phase}: {} records, {} levels, {} blocks",
            model.len(),
            c.levels(),
            c.ops.blocks.len()
        );
        if phase == 0 {
            assert!(c.ops.max_levels_seen >= 3, "tree never reached 3 levels");
        }
    }
    // Free the remaining (root) blocks.
    let mut tp = fs.trans().unwrap();
    if inode_root && iroot_records {
        // Emptied, the tree is a leaf root in the inode again.
        assert_eq!(
            (c.levels(), c.ops.blocks.len()),
            (1, 0),
            "the tree did not come back into the inode"
        );
    } else if inode_root {
        assert!(
            c.ops.blocks.is_empty() || c.levels() <= 2,
            "leftover levels"
        );
        let left: Vec<u64> = c.ops.blocks.iter().copied().collect();
        for p in left {
            c.ops.free_block(&mut tp, p).unwrap();
        }
    } else {
        assert_eq!(c.levels(), 1, "empty tree should be one leaf");
        let p = c.ops.root;
        c.ops.free_block(&mut tp, p).unwrap();
    }
    assert!(c.ops.blocks.is_empty());
    tp.commit().unwrap();
    fs.sync().unwrap();
    drop(fs);
    let _ = Ino(0);
    assert_repair_clean(&img);
}

#[test]
fn short_btree_random_against_model() {
    run_random(false, false, "bt-short");
}

#[test]
fn overlapping_btree_random_against_model() {
    run_random_mode(false, false, true, "bt-overlap");
}

#[test]
fn long_btree_inode_root_random_against_model() {
    run_random(true, true, "bt-long");
}

/// Ascending inserts into an overlapping tree, every record reaching past
/// all before it: each one raises the high key of every block on its path,
/// up to the root of a 3-level tree (single inserts and runs put in beside
/// the record before).
#[test]
fn overlapping_btree_ascending_high_keys() {
    let dir = Scratch::new("bt-overlap-asc");
    let (_img, fs, mut c) = new_tree(&dir, false, false, true, false);
    let mut model = BTreeMap::new();
    for batch in 0..25u64 {
        let mut tp = fs.trans().unwrap();
        for i in 0..600u64 {
            let k = batch * 600 + i;
            // high_of = k + 49: past every earlier record's end.
            if i % 3 == 0 {
                c.insert(&mut tp, &rec(false, k, 49)).unwrap();
            } else {
                c.insert_next(&mut tp, &rec(false, k, 49)).unwrap();
            }
            model.insert(k, 49);
        }
        check_structure(&c, &mut tp);
        tp.commit().unwrap();
    }
    let mut tp = fs.trans().unwrap();
    check_model(&mut c, &mut tp, false, &model);
    assert!(c.levels() >= 3, "tree of {} levels", c.levels());
}

/// A root in the inode that may hold records (as the realtime rmap
/// btree's): it grows out of the inode and, emptied, comes back as a leaf
/// root with no blocks. (Overlapping keys in such a tree: the realtime
/// rmap tests.)
#[test]
fn leaf_inode_root_random_against_model() {
    run_random_full(true, true, false, true, "bt-leaf-iroot");
}

/// The inobt/finobt ops (root and level in the AGI, inobtcount block
/// counters, blocks from the allocator): grow AG 1's trees to 3 levels
/// with placeholder records and shrink them back to one empty leaf.
#[test]
fn inode_btrees_grow_and_shrink() {
    use xfskit::btree::{InoTree, InobtOps};
    let dir = Scratch::new("bt-inobt");
    let img = dir.0.join("i.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024 -d agcount=4");
    let fs = open_rw(&img);
    let ag = AgNumber(1);
    for tree in [InoTree::Inobt, InoTree::Finobt] {
        let mut rng = Rng(99);
        let mut keys: Vec<u32> = (0..12000u32).map(|i| i * 64).collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.next() as usize % (i + 1));
        }
        let mut max_levels = 0;
        for chunk in keys.chunks(500) {
            let mut tp = fs.trans().unwrap();
            tp.lock_ag(ag);
            let mut c = InobtOps::cursor(&tp, ag, tree);
            for &k in chunk {
                let mut r = [0u8; 16];
                r[..4].copy_from_slice(&k.to_be_bytes());
                r[8..].fill(0xff);
                c.insert(&mut tp, &r).unwrap();
            }
            max_levels = max_levels.max(c.levels());
            tp.commit().unwrap();
        }
        assert!(max_levels >= 3, "{tree:?} reached {max_levels} levels");
        // Walk: every key in order.
        {
            let mut tp = fs.trans().unwrap();
            let mut c = InobtOps::cursor(&tp, ag, tree);
            let mut more = c.lookup(&mut tp, &0u32.to_be_bytes(), Dir::Ge).unwrap();
            let mut n = 0u32;
            while more {
                let r = c.get(&tp).unwrap();
                assert_eq!(u32::from_be_bytes(r[..4].try_into().unwrap()), n * 64);
                n += 1;
                more = c.increment(&mut tp).unwrap();
            }
            assert_eq!(n, 12000);
        }
        for chunk in keys.chunks(500) {
            let mut tp = fs.trans().unwrap();
            tp.lock_ag(ag);
            let mut c = InobtOps::cursor(&tp, ag, tree);
            for &k in chunk {
                assert!(c.lookup(&mut tp, &k.to_be_bytes(), Dir::Eq).unwrap());
                c.delete(&mut tp).unwrap();
            }
            tp.commit().unwrap();
        }
        let tp = &mut fs.trans().unwrap();
        let mut c = InobtOps::cursor(tp, ag, tree);
        assert!(!c.lookup(tp, &0u32.to_be_bytes(), Dir::Ge).unwrap());
        assert_eq!(c.levels(), 1, "{tree:?} shrank back to a leaf");
        eprintln!("{tree:?}: up to {max_levels} levels, back to 1");
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

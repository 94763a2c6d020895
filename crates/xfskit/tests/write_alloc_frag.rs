//! The allocator on fragmented free space: bnobt/cntbt growing to 3 levels
//! and shrinking back, the rmapbt alongside, kernel writes on our images,
//! corrupt free-space metadata (an error, never a panic), and rmapbt
//! record conversion and splitting. Each ends with a clean xfs_repair -n.

mod alloc_common;
mod write_common;

use alloc_common::*;
use write_common::*;
use xfskit::alloc::{alloc_extent, free_extent, Owner};
use xfskit::geometry::{AgBlock, AgNumber, FsBlock};
use xfskit::Fs;

#[test]
fn fragmented_free_space_grows_and_shrinks_btrees() {
    fragment("-b size=1024 -d agcount=4", "frag");
}

#[test]
fn fragmented_free_space_rmapbt() {
    fragment("-m rmapbt=1 -b size=1024 -d agcount=4", "frag-rmap");
}

/// Corrupted free space metadata (valid CRCs, wrong contents) must give
/// errors, never panics or hangs: fragment AG 1 into multi-level trees,
/// then for many single-field corruptions of its btree blocks and AGF,
/// run allocations and frees.
#[test]
fn corrupt_free_space_metadata_never_panics() {
    corrupt_trials("-b size=1024 -d agcount=4", "corrupt");
}

#[test]
fn corrupt_rmapbt_metadata_never_panics() {
    corrupt_trials("-m rmapbt=1 -b size=1024 -d agcount=4", "corrupt-rmap");
}

fn corrupt_trials(opts: &str, tag: &str) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let dir = Scratch::new(tag);
    let img = dir.0.join("c.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    let mut kept = Vec::new();
    {
        let mut tp = fs.trans().unwrap();
        let t = geo.fsb_make(ag, AgBlock(0));
        let mut r = req(t, 8000, 8000, 1, true);
        r.owner = frag_owner(0);
        let (f, l) = alloc_extent(&mut tp, &r).unwrap();
        tp.commit().unwrap();
        for i in 0..l {
            let mut tp = fs.trans().unwrap();
            let b = FsBlock(f.0 + u64::from(i));
            if i % 2 == 0 {
                free_extent(&mut tp, b, 1, &frag_owner(u64::from(i))).unwrap();
            } else {
                kept.push((b, u64::from(i)));
            }
            tp.commit().unwrap();
        }
    }
    let rmapbt = geo.features.rmapbt;
    fs.sync().unwrap();
    drop(fs);
    if !rmapbt {
        assert_repair_clean(&img);
    }
    let clean = std::fs::read(&img).unwrap();
    let bs = geo.block_size as usize;
    let ag0 = geo.agb_to_daddr(ag, AgBlock(0)).bytes() as usize;
    let btree_blocks: Vec<usize> = (1..geo.ag_blocks as usize)
        .map(|b| ag0 + b * bs)
        .filter(|&o| matches!(&clean[o..o + 4], b"AB3B" | b"AB3C" | b"RMB3"))
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
            [4, 6, 8, 12, 56 + 4 * rng.below(230) as usize][rng.below(5) as usize]
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
                let (b, i) = kept[rng.below(kept.len() as u64) as usize];
                free_extent(&mut tp, b, 1, &frag_owner(i)).map(|_| ())
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

/// Unwritten extents on an rmapbt filesystem through the namespace layer:
/// fallocate, writes into the preallocated range (conversion), punches;
/// the rmapbt must carry the unwritten flags exactly as xfs_repair and
/// the kernel expect.
#[test]
fn rmapbt_unwritten_extents_via_namespace() {
    use xfskit::build::{Meta, NodeKind};
    use xfskit::inode::Timestamp;
    let dir = Scratch::new("rmap-unwritten");
    let img = dir.0.join("u.img");
    mkfs_xfs(&img, 320 << 20, "-m rmapbt=1 -b size=1024 -d agcount=4");
    let fs = open_rw(&img);
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let meta = Meta {
        mode: 0o644,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    };
    let root = fs.geometry().root_ino;
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for f in 0..4u64 {
        let name = format!("f{f}").into_bytes();
        let ino = fs
            .create(root, &name, &NodeKind::File { size: 0 }, &meta)
            .unwrap();
        let size = 600_000 + 10_000 * f;
        fs.fallocate(ino, 0, size, false).unwrap();
        let mut data = vec![0u8; size as usize];
        for (k, (off, len)) in [(5_000u64, 3_000u64), (100_000, 50_000), (400_000, 1)]
            .into_iter()
            .enumerate()
        {
            let bytes = vec![(k as u8 + 1) * (f as u8 + 1); len as usize];
            fs.write_at(ino, off, &bytes).unwrap();
            data[off as usize..(off + len) as usize].copy_from_slice(&bytes);
        }
        fs.punch_hole(ino, 200_000, 30_000).unwrap();
        data[200_000..230_000].fill(0);
        fs.fallocate(ino, size, 20_000, true).unwrap();
        want.push((name, data));
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    with_kernel_mount(&img, |mnt| {
        for (name, data) in &want {
            let got = std::fs::read(mnt.join(std::str::from_utf8(name).unwrap())).unwrap();
            assert!(got == *data, "{} differs", String::from_utf8_lossy(name));
        }
    });
}

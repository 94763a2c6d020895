//! Inode allocation when free space is short: sparse chunks on fragmented
//! free space and their merging, full AGs and a full filesystem, and
//! frees of inodes that are not in use.

mod ialloc_common;
mod write_common;

use ialloc_common::*;
use write_common::*;
use xfskit::geometry::{AgNumber, Ino};
use xfskit::ialloc::{alloc_inode, free_inode};
use xfskit::scan::inobt;
use xfskit::Fs;

/// On fragmented free space, new chunks are sparse (4-block pieces):
/// allocate until some are, check, read back through the kernel, free.
#[test]
fn sparse_chunks_on_fragmented_space() {
    let s = Scratch::new("ialloc-sparse");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "-i sparse=1");
    if !kernel_fragment(&img, 4096) {
        return;
    }
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    assert!(
        geo.features.sparse_inodes && geo.spino_align == 4,
        "{:?}",
        geo.spino_align
    );
    let before_chunks = chunks(&fs);
    let in_use = |fs: &Fs| -> u32 { agi_counts(fs).iter().map(|(c, f)| c - f).sum() };
    let used_before = in_use(&fs);
    let mut mine = Vec::new();
    let sparse_count = |fs: &Fs| {
        let mut n = 0;
        for ag in 0..fs.geometry().ag_count {
            inobt::walk(fs, ag, 0, |r| {
                n += usize::from(r.holemask != 0 && r.count < 64);
                Ok(true)
            })
            .unwrap();
        }
        n
    };
    while sparse_count(&fs) < 10 {
        assert!(
            mine.len() < 20000,
            "no sparse chunk after {} inodes",
            mine.len()
        );
        mine.extend(alloc_n(&fs, geo.root_ino, S_IFREG, 64));
    }
    // Every inode allocated is counted in use by the AGIs (which
    // agi_counts checks against the inode btrees), and no other.
    assert_eq!(in_use(&fs), used_before + mine.len() as u32);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &mine);
    // The kernel finds every inode of the sparse chunks.
    assert_kernel_sees(&img, &mine, &[]);
    let fs = open_rw(&img);
    free_all(&fs, &mine);
    assert_restored(fs, &img, &before_chunks, &geo);
}

/// A full AG sends new files to the next one; a full filesystem gives
/// NoSpace once the last free inode is used, and nothing is left half
/// done.
#[test]
fn full_ags_and_full_filesystem() {
    let (_s, img, fs, geo, before_chunks) = fresh_image("ialloc-full", "");
    let t1 = take_all_space(&fs, AgNumber(1));
    let over = alloc_n(&fs, geo.ino_make(AgNumber(1), 64), S_IFREG, 100);
    assert!(
        over.iter().all(|i| geo.ino_agno(*i) == AgNumber(2)),
        "AG 1 full: AG 2 next"
    );
    let mut taken = vec![(AgNumber(1), t1)];
    for ag in [0, 2, 3] {
        taken.push((AgNumber(ag), take_all_space(&fs, AgNumber(ag))));
    }
    // AG 2's chunk has 28 free inodes left, AG 0's root chunk 61.
    let rest = alloc_n(&fs, geo.root_ino, S_IFREG, 61 + 28);
    let mut tp = fs.trans().unwrap();
    match alloc_inode(&mut tp, geo.root_ino, S_IFREG) {
        Err(xfskit::Error::NoSpace(_)) => {}
        other => panic!("expected NoSpace, got {other:?}"),
    }
    drop(tp);
    free_all(&fs, &over);
    free_all(&fs, &rest);
    for (ag, t) in &taken {
        give_back(&fs, *ag, t);
    }
    assert_restored(fs, &img, &before_chunks, &geo);
}

/// Sparse pieces of one chunk allocated at different times merge into
/// one record: AG 1's free space is taken (by our allocator, owner-less
/// for a while), then space around the low half of a few chunk-aligned
/// ranges is given back and used by sparse chunks, then the high halves.
#[test]
fn sparse_pieces_merge() {
    use xfskit::alloc::{free_extent, Owner};
    use xfskit::geometry::AgBlock;
    let s = Scratch::new("ialloc-merge");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "-i sparse=1");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    assert_eq!(
        (geo.spino_align, geo.inode_align, geo.inodes_per_block),
        (4, 8, 8)
    );
    let ag = AgNumber(1);
    let parent = geo.ino_make(ag, 0);
    let before_chunks = chunks(&fs);
    let mut leaked = take_all_space(&fs, ag);
    let give = |fs: &Fs, leaked: &mut std::collections::BTreeSet<u32>, start: u32, len: u32| {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, geo.fsb_make(ag, AgBlock(start)), len, &Owner::Ag).unwrap();
        tp.commit().unwrap();
        for b in start..start + len {
            assert!(leaked.remove(&b));
        }
    };
    // Eight chunk-aligned ranges inside one taken run, 16 blocks apart.
    let (rs, rl) = *runs(&leaked).iter().max_by_key(|r| r.1).unwrap();
    assert!(rl > 400);
    let base = (rs + 64) / 8 * 8;
    let ranges: Vec<u32> = (0..8).map(|k| base + 16 * k).collect();
    // Like the kernel, the allocator wants alignment - 1 blocks of slack:
    // 7-block holes, holding the aligned low half of a chunk range only.
    for &r in &ranges {
        give(&fs, &mut leaked, r - 3, 7);
    }
    // Single free blocks (no aligned 4-block run) for the free list.
    for k in 0..64 {
        give(&fs, &mut leaked, base + 200 + 2 * k + 1, 1);
    }
    let mut mine = alloc_n(&fs, parent, S_IFREG, 8 * 32);
    let recs = chunks(&fs);
    for &r in &ranges {
        let rec = recs
            .get(&(ag.0, r * 8))
            .unwrap_or_else(|| panic!("no record at {r}: {recs:?} {:?}", &mine[..3]));
        assert_eq!(
            (rec.0, rec.2 >> 32),
            (32, u64::from(u32::MAX)),
            "low half only"
        );
    }
    for &r in &ranges {
        give(&fs, &mut leaked, r + 4, 7);
    }
    mine.extend(alloc_n(&fs, parent, S_IFREG, 8 * 32));
    let recs = chunks(&fs);
    for &r in &ranges {
        assert_eq!(recs[&(ag.0, r * 8)], (64, 0, 0), "merged into a full chunk");
    }
    assert!(mine.iter().all(|i| geo.ino_agno(*i) == ag));
    fs.sync().unwrap();
    drop(fs);
    assert_kernel_sees(&img, &mine, &[]);
    let fs = open_rw(&img);
    free_all(&fs, &mine);
    for (s, l) in runs(&leaked.clone()) {
        give(&fs, &mut leaked, s, l);
    }
    assert_restored(fs, &img, &before_chunks, &geo);
}

/// Freeing what is not an in-use inode is refused and changes nothing.
#[test]
fn bad_frees_are_refused() {
    let s = Scratch::new("ialloc-badfree");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ino = alloc_n(&fs, geo.root_ino, S_IFREG, 1)[0];
    free_all(&fs, &[ino]);
    let before = agi_counts(&fs);
    let try_free = |i: Ino| {
        let mut tp = fs.trans().unwrap();
        free_inode(&mut tp, i)
    };
    // Already free, in no chunk, outside the filesystem.
    assert!(matches!(try_free(ino), Err(xfskit::Error::Invalid(_))));
    let nowhere = geo.ino_make(AgNumber(2), 4096);
    assert!(matches!(try_free(nowhere), Err(xfskit::Error::Invalid(_))));
    assert!(try_free(Ino(u64::MAX >> 4)).is_err());
    // A file with blocks must be emptied first.
    let f = alloc_n(&fs, geo.root_ino, S_IFREG, 1)[0];
    {
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(f).unwrap();
        ip.nblocks = 1;
        tp.log_inode(&ip).unwrap();
        assert!(matches!(
            free_inode(&mut tp, f),
            Err(xfskit::Error::Invalid(_))
        ));
    }
    free_all(&fs, &[f]);
    assert_eq!(agi_counts(&fs), before);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

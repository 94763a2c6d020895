//! Inode allocation (crate::ialloc) on images made by mkfs.xfs: inodes
//! taken from existing and new chunks, the directory rotor, freeing
//! inodes and whole chunks, deep inode btrees, concurrent allocation.
//! Checked with xfs_repair -n, our inobt reader and the AGI counters.

mod ialloc_common;
mod write_common;

use ialloc_common::*;
use write_common::*;
use xfskit::geometry::{AgNumber, Ino};
use xfskit::scan::inobt;

#[test]
fn inodes_from_the_root_chunk() {
    let s = Scratch::new("ialloc-root");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let before = agi_counts(&fs);
    let inos = alloc_n(&fs, root, S_IFREG, 61);
    let mut sorted = inos.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 61, "distinct inodes");
    for i in &inos {
        assert_eq!(fs.geometry().ino_agno(*i), AgNumber(0));
        assert!(
            i.0 > root.0 && i.0 < root.0 + 64,
            "inode {} is in the root chunk",
            i.0
        );
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &inos);
    let fs = open_rw(&img);
    let after = agi_counts(&fs);
    assert_eq!(after[0], (before[0].0, before[0].1 - 61));
    assert_eq!(fs.geometry().ifree, u64::from(before[0].1) - 61);
    // Free them in a different order than allocated.
    let (odd, even): (Vec<Ino>, Vec<Ino>) = inos.iter().partition(|i| i.0 % 2 == 1);
    free_all(&fs, &odd);
    free_all(&fs, &even);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(agi_counts(&fs), before);
    // Freed inodes are free on disk (mode 0, core kept) one generation
    // up (alloc_n logs generation 1), and their slots are reused.
    for i in &inos {
        let mut raw = vec![0u8; geo_isize(&fs)];
        fs.read_bytes(fs.geometry().ino_to_bytes(*i), &mut raw)
            .unwrap();
        let be16 = |o: usize| u16::from_be_bytes([raw[o], raw[o + 1]]);
        let gen_off = std::mem::offset_of!(xfs_format::inode::Dinode, di_gen);
        let gen = u32::from_be_bytes(raw[gen_off..gen_off + 4].try_into().unwrap());
        assert_eq!(be16(0), 0x494e, "magic of freed inode {}", i.0);
        assert_eq!(be16(2), 0, "mode of freed inode {}", i.0);
        assert_eq!(gen, 2, "generation of freed inode {}", i.0);
    }
    let again = alloc_n(&fs, root, S_IFREG, 3);
    assert!(again.iter().all(|i| inos.contains(i)));
    free_all(&fs, &again);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

/// Fills every free inode of the parent's AG in a kernel-made image,
/// checks placement and counters, frees them all again.
fn fill_parent_ag(opts: &str) {
    let s = Scratch::new(&format!("ialloc-fill{}", opts.replace([' ', '='], "")));
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let Some(dirs) = kernel_populate(&img, 3, 300) else {
        return;
    };
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let before_chunks = chunks(&fs);
    let before = agi_counts(&fs);
    let parent = dirs[1];
    let pag = geo.ino_agno(parent).0 as usize;
    let nfree = before[pag].1 as usize;
    assert!(
        nfree > 50,
        "the kernel left {nfree} free inodes in AG {pag}"
    );
    let mine = alloc_n(&fs, parent, S_IFREG, nfree);
    assert!(
        mine.iter().all(|i| geo.ino_agno(*i).0 as usize == pag),
        "all in the parent's AG"
    );
    // Near the parent: the first inode comes from the chunk nearest it.
    let pagino = geo.ino_agino(parent);
    let nearest = before_chunks
        .iter()
        .filter(|((a, _), v)| *a as usize == pag && v.1 > 0)
        .map(|((_, s), _)| {
            if pagino < *s {
                s - pagino
            } else {
                pagino.saturating_sub(s + 63)
            }
        })
        .min()
        .unwrap();
    let first = geo.ino_agino(mine[0]);
    let (_, fstart) = *before_chunks
        .range(..=(pag as u32, first))
        .next_back()
        .unwrap()
        .0;
    let d = if pagino < fstart {
        fstart - pagino
    } else {
        pagino.saturating_sub(fstart + 63)
    };
    assert_eq!(
        d, nearest,
        "first inode {} is in a chunk nearest the parent",
        mine[0].0
    );
    let mid = agi_counts(&fs);
    for (ag, c) in mid.iter().enumerate() {
        if ag == pag {
            assert_eq!(*c, (before[ag].0, 0));
        } else {
            assert_eq!(*c, before[ag]);
        }
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &mine);
    let fs = open_rw(&img);
    assert_eq!(fs.geometry().ifree, geo.ifree - nfree as u64);
    // Free in a scattered order.
    let mut order = mine.clone();
    order.sort_by_key(|i| (i.0 * 7919) % 1009);
    free_all(&fs, &order);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    assert_eq!(fs.geometry().ifree, geo.ifree);
    assert_eq!(fs.geometry().icount, geo.icount);
}

#[test]
fn fill_parent_ag_finobt() {
    fill_parent_ag("");
}

#[test]
fn fill_parent_ag_without_finobt() {
    fill_parent_ag("-m finobt=0");
}

#[test]
fn fill_parent_ag_small_blocks() {
    fill_parent_ag("-b size=1024");
}

#[test]
fn fill_parent_ag_2k_inodes_no_sparse() {
    fill_parent_ag("-i size=2048,sparse=0");
}

/// Thousands of files in new chunks of the parent's AG, directories
/// rotating over the AGs, then everything freed in two rounds (half the
/// inodes of each chunk, then the rest, which frees the chunks).
fn many_chunks(opts: &str) {
    let (_s, img, fs, geo, before_chunks) = fresh_image(
        &format!("ialloc-many{}", opts.replace([' ', '='], "")),
        opts,
    );
    let root = geo.root_ino;
    let agcount = geo.ag_count;
    // Directories: consecutive ones land in consecutive AGs.
    let dirs = alloc_n(&fs, root, S_IFDIR, 2 * agcount as usize);
    let ags: Vec<u32> = dirs.iter().map(|d| geo.ino_agno(*d).0).collect();
    for w in ags.windows(2) {
        assert_eq!(w[1], (w[0] + 1) % agcount, "directory rotor: {ags:?}");
    }
    // Files under the root and under a directory in another AG.
    let mut files = alloc_n(&fs, root, S_IFREG, 2000);
    assert!(files.iter().all(|i| geo.ino_agno(*i).0 == 0));
    let other = *dirs.iter().find(|d| geo.ino_agno(**d).0 == 1).unwrap();
    files.extend(alloc_n(&fs, other, S_IFREG, 1000));
    assert!(files[2000..].iter().all(|i| geo.ino_agno(*i).0 == 1));
    let mut all: Vec<Ino> = dirs.iter().chain(files.iter()).copied().collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "every inode handed out once");
    let counts = agi_counts(&fs);
    let icount: u32 = counts.iter().map(|c| c.0).sum();
    let ifree: u32 = counts.iter().map(|c| c.1).sum();
    assert_eq!(u64::from(icount - ifree), geo.icount - geo.ifree + n as u64);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &all);
    assert_kernel_sees(&img, &all, &[]);
    let fs = open_rw(&img);
    assert_eq!(fs.geometry().icount, u64::from(icount));
    assert_eq!(fs.geometry().ifree, u64::from(ifree));
    // Half of each chunk: full chunks go back into the finobt.
    let (a, b): (Vec<Ino>, Vec<Ino>) = all.iter().partition(|i| i.0 % 2 == 0);
    free_all(&fs, &a);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &b);
    assert_kernel_sees(&img, &b, &a);
    let fs = open_rw(&img);
    free_all(&fs, &b);
    fs.sync().unwrap();
    let after = fs.geometry().clone();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks, "only the root chunk is left");
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
    let _ = after;
}

#[test]
fn many_chunks_default() {
    many_chunks("");
}

#[test]
fn many_chunks_without_finobt_or_sparse() {
    many_chunks("-m finobt=0 -i sparse=0");
}

#[test]
fn many_chunks_small_blocks() {
    many_chunks("-b size=1024");
}

#[test]
fn many_chunks_2k_inodes() {
    many_chunks("-i size=2048");
}

#[test]
fn many_chunks_stripe_aligned() {
    many_chunks("-d su=64k,sw=2,agcount=4");
}

/// Enough chunks on 1 KiB blocks that both inode btrees grow several
/// levels (leaf splits, new roots), then shrink again as chunks go.
#[test]
fn deep_inode_btrees() {
    let (_s, img, fs, geo, before_chunks) = fresh_image("ialloc-deep", "-b size=1024");
    let files = alloc_n(&fs, geo.root_ino, S_IFREG, 12000);
    let nchunks = chunks(&fs).len();
    assert!(nchunks >= 12000 / 64, "{nchunks} chunks");
    let root = inobt::read_root(&fs, 0).unwrap();
    assert!(root.levels >= 2, "inobt of {} levels", root.levels);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &files);
    let fs = open_rw(&img);
    // One inode of every chunk first (every chunk enters the finobt),
    // then the rest from the top down.
    let (first, rest): (Vec<Ino>, Vec<Ino>) = files.iter().partition(|i| i.0 % 64 == 5);
    free_all(&fs, &first);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &rest);
    let fs = open_rw(&img);
    let mut rest = rest;
    rest.reverse();
    free_all(&fs, &rest);
    assert_restored(fs, &img, &before_chunks, &geo);
}

/// Threads allocating and freeing at once, in their own AGs and in a
/// shared one: every inode is handed out once and the result is clean.
#[test]
fn concurrent_alloc_and_free() {
    let (_s, img, fs, geo, before_chunks) = fresh_image("ialloc-threads", "");
    // One directory per AG to give each thread a parent there.
    let dirs = alloc_n(&fs, geo.root_ino, S_IFDIR, geo.ag_count as usize);
    let results: Vec<Vec<Ino>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6)
            .map(|t| {
                let fs = &fs;
                let parent = if t < 4 { dirs[t] } else { geo.root_ino };
                sc.spawn(move || {
                    let mine = alloc_n(fs, parent, S_IFREG, 700);
                    // Give back every third one while others allocate.
                    let gone: Vec<Ino> = mine.iter().step_by(3).copied().collect();
                    free_all(fs, &gone);
                    mine.into_iter()
                        .filter(|i| !gone.contains(i))
                        .collect::<Vec<Ino>>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut live: Vec<Ino> = results.into_iter().flatten().collect();
    live.extend(&dirs);
    let n = live.len();
    live.sort();
    live.dedup();
    assert_eq!(live.len(), n, "an inode was handed out twice");
    agi_counts(&fs);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &live);
    let fs = open_rw(&img);
    free_all(&fs, &live);
    assert_restored(fs, &img, &before_chunks, &geo);
}

/// 64 KiB blocks with 512-byte inodes: one block holds two chunks, which
/// are allocated together and never freed (as the kernel does).
#[test]
fn two_chunks_per_block() {
    let s = Scratch::new("ialloc-64k");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 1 << 30, "-b size=65536 -i size=512");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    assert_eq!(geo.inodes_per_block, 128);
    let used0 = geo.icount - geo.ifree;
    let files = alloc_n(&fs, geo.root_ino, S_IFREG, 1000);
    let dirs = alloc_n(&fs, geo.root_ino, S_IFDIR, 8);
    let all: Vec<Ino> = files.iter().chain(&dirs).copied().collect();
    let counts = agi_counts(&fs);
    assert!(counts.iter().all(|c| c.0 % 128 == 0), "{counts:?}");
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &all);
    assert_kernel_sees(&img, &all, &[]);
    let fs = open_rw(&img);
    free_all(&fs, &all);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_kernel_sees(&img, &[], &all);
    let fs = open_rw(&img);
    let g = fs.geometry();
    assert_eq!(g.icount - g.ifree, used0);
    let counts = agi_counts(&fs);
    let total: u32 = counts.iter().map(|c| c.0).sum();
    assert_eq!(u64::from(total), g.icount);
}

#[test]
fn many_chunks_2k_blocks_1k_inodes() {
    many_chunks("-b size=2048 -i size=1024");
}

#[test]
fn many_chunks_odd_sized_last_ag() {
    // 5 AGs, the last one (40 MiB) shorter than the others.
    many_chunks("-d agsize=70m");
}

/// The number of an inode whose whole chunk was freed reads as gone, not
/// as corrupt: the chunk's blocks are free space now, holding whatever
/// was last written there (zeros for a chunk that never reached the
/// disk, so no inode magic or CRC). `Fs::live_inode` is what a FUSE
/// getattr of a number the kernel still knew asks.
#[test]
fn inode_of_a_freed_chunk_reads_as_gone() {
    let s = Scratch::new("ialloc-freed-chunk");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let m = xfskit::build::Meta {
        mode: 0o755,
        uid: 0,
        gid: 0,
        atime: Default::default(),
        mtime: Default::default(),
        ctime: Default::default(),
        crtime: Default::default(),
    };
    // New directories in the root go where the directory rotor says:
    // past the root's chunk, into a chunk of their own, which goes with
    // them. First a chunk that never reached the disk (its blocks read
    // as zeros), then one that did (its blocks keep the directory's last
    // inode as it was written).
    let kind = xfskit::build::NodeKind::Dir;
    let in_root_chunk = |i: Ino| i.0 >= root.0 && i.0 < root.0 + 64;
    let mut n = 0;
    let mut new_dir = |fs: &xfskit::Fs| loop {
        n += 1;
        let name = format!("d{n}");
        let d = fs.create(root, name.as_bytes(), &kind, &m).unwrap();
        if !in_root_chunk(d) {
            return (d, name);
        }
    };
    let gone = |fs: &xfskit::Fs, ino: Ino, when: &str| match fs.live_inode(ino) {
        Ok(None) => {}
        other => panic!("inode {} of a freed chunk ({when}): {other:?}", ino.0),
    };
    let before = chunks(&fs).len();
    let (d, name) = new_dir(&fs);
    fs.rmdir(root, name.as_bytes()).unwrap();
    gone(&fs, d, "never written");
    fs.sync().unwrap();
    gone(&fs, d, "never written, synced");
    assert_eq!(chunks(&fs).len(), before, "the chunk was freed");
    let (e, name) = new_dir(&fs);
    fs.sync().unwrap();
    assert_eq!(chunks(&fs).len(), before + 1, "a chunk of its own");
    fs.rmdir(root, name.as_bytes()).unwrap();
    gone(&fs, e, "written");
    fs.sync().unwrap();
    gone(&fs, e, "written, synced");
    assert_eq!(chunks(&fs).len(), before, "the chunk was freed");
    drop(fs);
    assert_repair_clean(&img);
}

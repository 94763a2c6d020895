//! Inode allocation (crate::ialloc) on images made by mkfs.xfs: inodes
//! taken from existing and new chunks, the directory rotor, freeing
//! inodes and whole chunks, sparse chunks on fragmented free space.
//! Checked with xfs_repair -n, our inobt reader and the AGI counters.

mod write_common;

use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::geometry::{AgNumber, Ino};
use xfskit::ialloc::{alloc_inode, free_inode};
use xfskit::inode::Inode;
use xfskit::scan::inobt;
use xfskit::Fs;

const S_IFREG: u16 = 0o100000;
const S_IFDIR: u16 = 0o040000;

/// Allocates `n` inodes of `mode` under `parent`, one transaction each,
/// and logs them as in-use (empty) inodes.
fn alloc_n(fs: &Fs, parent: Ino, mode: u16, n: usize) -> Vec<Ino> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut tp = fs.trans().unwrap();
        let ino = alloc_inode(&mut tp, parent, mode).unwrap();
        let mut ip = Inode::new(fs.geometry(), ino, mode | 0o644, 1).unwrap();
        if mode == S_IFDIR {
            // An empty short-form directory whose parent is the root.
            let root = fs.geometry().root_ino.0 as u32;
            ip.data_fork = vec![0, 0];
            ip.data_fork.extend_from_slice(&root.to_be_bytes());
            ip.size = 6;
            ip.nlink = 2;
        }
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        out.push(ino);
    }
    out
}

/// Inode size in bytes.
fn geo_isize(fs: &Fs) -> usize {
    fs.geometry().inode_size as usize
}

/// Frees each inode in its own transaction.
fn free_all(fs: &Fs, inos: &[Ino]) {
    for &ino in inos {
        let mut tp = fs.trans().unwrap();
        free_inode(&mut tp, ino).unwrap();
        tp.commit().unwrap();
    }
}

/// Every inobt record of every AG: (agno, startino) -> (count, freecount, free).
fn chunks(fs: &Fs) -> BTreeMap<(u32, u32), (u8, u8, u64)> {
    let mut m = BTreeMap::new();
    for ag in 0..fs.geometry().ag_count {
        inobt::walk(fs, ag, 0, |r| {
            m.insert((ag, r.startino), (r.count, r.freecount, r.free));
            Ok(true)
        })
        .unwrap();
    }
    m
}

/// AGI (count, freecount) per AG, checked against the inobt records.
fn agi_counts(fs: &Fs) -> Vec<(u32, u32)> {
    let recs = chunks(fs);
    (0..fs.geometry().ag_count)
        .map(|ag| {
            let r = inobt::read_root(fs, ag).unwrap();
            let (c, f) = recs
                .iter()
                .filter(|((a, _), _)| *a == ag)
                .fold((0u32, 0u32), |(c, f), (_, v)| {
                    (c + u32::from(v.0), f + u32::from(v.1))
                });
            assert_eq!((r.count, r.freecount), (c, f), "AG {ag}: AGI vs inobt");
            (r.count, r.freecount)
        })
        .collect()
}

/// xfs_repair -n, accepting only complaints about the given inodes being
/// disconnected (they are in use but in no directory): every other line
/// must be one of repair's progress or banner lines.
fn assert_repair_only_disconnected(img: &Path, inos: &[Ino]) {
    let (_, out) = run("xfs_repair", &["-n", &img.display().to_string()]);
    let banner = [
        "Phase ",
        "- ",
        "No modify flag set",
        "Cannot get host filesystem geometry",
        "Repair may fail if there is a sector size mismatch",
        "the image and the host filesystem",
    ];
    for line in out.lines() {
        let l = line.trim();
        if l.is_empty() || banner.iter().any(|b| l.starts_with(b)) {
            continue;
        }
        let num = l
            .strip_prefix("disconnected inode ")
            .or_else(|| l.strip_prefix("disconnected dir inode "))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse::<u64>().ok());
        match num {
            Some(n) if inos.iter().any(|i| i.0 == n) => {}
            _ => panic!("xfs_repair -n complains: {l}\n{out}"),
        }
    }
}

/// The in-use inodes the kernel's bulkstat reports on a read-only loop
/// mount (it walks the inobt and reads every chunk); None when not root.
fn kernel_inodes(img: &Path) -> Option<std::collections::BTreeSet<u64>> {
    with_kernel_mount(img, |m| {
        let (ok, out) = run("xfs_io", &["-c", "bulkstat", &m.display().to_string()]);
        assert!(ok, "bulkstat: {out}");
        out.lines()
            .filter_map(|l| l.trim().strip_prefix("bs_ino = "))
            .map(|v| v.parse::<u64>().unwrap())
            .collect()
    })
}

/// Checks that the kernel's bulkstat lists every inode of `want` and
/// none of `gone`.
fn assert_kernel_sees(img: &Path, want: &[Ino], gone: &[Ino]) {
    if let Some(seen) = kernel_inodes(img) {
        for i in want {
            assert!(seen.contains(&i.0), "kernel bulkstat misses inode {}", i.0);
        }
        for i in gone {
            assert!(
                !seen.contains(&i.0),
                "kernel bulkstat still has freed inode {}",
                i.0
            );
        }
    }
}

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

/// As root: loop-mounts `img`, makes directories d0..d{n-1} with
/// `files` files each, removes every third file, unmounts. Returns the
/// directories' inode numbers, or None when not root.
fn kernel_populate(img: &Path, dirs: usize, files: usize) -> Option<Vec<Ino>> {
    use std::os::unix::fs::MetadataExt;
    with_rw_mount(img, "populating", |mnt| {
        let mut inos = Vec::new();
        for d in 0..dirs {
            let dir = mnt.join(format!("d{d}"));
            std::fs::create_dir(&dir).unwrap();
            inos.push(Ino(std::fs::metadata(&dir).unwrap().ino()));
            for f in 0..files {
                std::fs::write(dir.join(format!("f{f}")), b"").unwrap();
            }
            for f in (0..files).step_by(3) {
                std::fs::remove_file(dir.join(format!("f{f}"))).unwrap();
            }
        }
        inos
    })
}

/// As root: loop-mounts `img` read-write, runs `f` on the mount point and
/// unmounts (also when `f` panics). None (after saying why) when not root.
fn with_rw_mount<T>(img: &Path, what: &str, f: impl FnOnce(&Path) -> T) -> Option<T> {
    if !is_root() {
        eprintln!("SKIP: {what} an image through the kernel needs root (loop mount)");
        return None;
    }
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display().to_string();
    let (ok, out) = run("mount", &["-o", "loop", &img.display().to_string(), &m]);
    assert!(ok, "mount: {out}");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mnt)));
    let (ok, out) = run("umount", &[&m]);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    match r {
        Ok(v) => Some(v),
        Err(e) => std::panic::resume_unwind(e),
    }
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
    let s = Scratch::new(&format!("ialloc-many{}", opts.replace([' ', '='], "")));
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let root = geo.root_ino;
    let before_chunks = chunks(&fs);
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
    let s = Scratch::new("ialloc-deep");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "-b size=1024");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let before_chunks = chunks(&fs);
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
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
}

/// Preallocates `len` bytes of a new file; false on ENOSPC.
fn falloc(path: &Path, len: u64) -> bool {
    use rustix::fs::{fallocate, FallocateFlags};
    let Ok(f) = std::fs::File::create(path) else {
        return false; // no inode left
    };
    let ok = fallocate(&f, FallocateFlags::empty(), 0, len).is_ok();
    if !ok {
        drop(f);
        std::fs::remove_file(path).unwrap();
    }
    ok
}

/// Punches `len` bytes at `off` out of a file.
fn punch(path: &Path, off: u64, len: u64) {
    use rustix::fs::{fallocate, FallocateFlags};
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    fallocate(&f, mode, off, len).unwrap_or_else(|e| panic!("punch {}: {e}", path.display()));
}

/// As root: fills the filesystem through the kernel, then punches a
/// 7-block hole into every 16 blocks of the big files, so that free
/// space is fragments holding an aligned 4-block run but no aligned
/// 8-block run. False when not root.
fn kernel_fragment(img: &Path, bs: u64) -> bool {
    with_rw_mount(img, "fragmenting", |mnt| {
        let m = mnt.display().to_string();
        let (ok, out) = run("xfs_io", &["-x", "-c", "resblks 0", &m]);
        assert!(ok, "resblks: {out}");
        let mut big = Vec::new();
        for (size, n) in [(8u64 << 20, 64), (256 << 10, 512), (bs, 4096)] {
            for i in 0..n {
                let p = mnt.join(format!("fill-{size}-{i}"));
                if !falloc(&p, size) {
                    break;
                }
                if size > bs {
                    big.push((p, size));
                }
            }
        }
        for (p, size) in &big {
            let mut off = 0;
            while off + 16 * bs <= *size {
                punch(p, off + 4 * bs, 7 * bs);
                off += 16 * bs;
            }
        }
    })
    .is_some()
}

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
    let c = agi_counts(&fs);
    let total: u32 = c.iter().map(|x| x.0).sum();
    assert_eq!(u64::from(total), geo.icount + (total as u64 - geo.icount));
    fs.sync().unwrap();
    drop(fs);
    assert_repair_only_disconnected(&img, &mine);
    // The kernel finds every inode of the sparse chunks.
    assert_kernel_sees(&img, &mine, &[]);
    let fs = open_rw(&img);
    free_all(&fs, &mine);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
}

/// Threads allocating and freeing at once, in their own AGs and in a
/// shared one: every inode is handed out once and the result is clean.
#[test]
fn concurrent_alloc_and_free() {
    let s = Scratch::new("ialloc-threads");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let before_chunks = chunks(&fs);
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
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
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

/// Runs of consecutive block numbers.
fn runs(blocks: &std::collections::BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some((s, l)) if *s + *l == b => *l += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// Takes every free block of AG `agno` with our allocator (owner-less
/// until given back) and returns the AG blocks taken.
fn take_all_space(fs: &Fs, agno: AgNumber) -> std::collections::BTreeSet<u32> {
    use xfskit::alloc::{alloc_extent, AllocReq, Owner};
    use xfskit::geometry::AgBlock;
    let geo = fs.geometry();
    let mut taken = std::collections::BTreeSet::new();
    loop {
        let mut tp = fs.trans().unwrap();
        let req = AllocReq {
            target: geo.fsb_make(agno, AgBlock(0)),
            minlen: 1,
            maxlen: geo.ag_blocks,
            alignment: 1,
            ag_only: true,
            owner: Owner::Ag,
        };
        match alloc_extent(&mut tp, &req) {
            Ok((fsb, len)) => {
                tp.commit().unwrap();
                let (a, b) = geo.fsb_split(fsb);
                assert_eq!(a, agno);
                taken.extend(b.0..b.0 + len);
            }
            Err(xfskit::Error::NoSpace(_)) => return taken,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Gives back blocks taken by [`take_all_space`].
fn give_back(fs: &Fs, agno: AgNumber, taken: &std::collections::BTreeSet<u32>) {
    use xfskit::alloc::{free_extent, Owner};
    use xfskit::geometry::AgBlock;
    for (s, l) in runs(taken) {
        let mut tp = fs.trans().unwrap();
        free_extent(
            &mut tp,
            fs.geometry().fsb_make(agno, AgBlock(s)),
            l,
            &Owner::Ag,
        )
        .unwrap();
        tp.commit().unwrap();
    }
}

/// A full AG sends new files to the next one; a full filesystem gives
/// NoSpace once the last free inode is used, and nothing is left half
/// done.
#[test]
fn full_ags_and_full_filesystem() {
    let s = Scratch::new("ialloc-full");
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, "");
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let before_chunks = chunks(&fs);
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
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
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
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = open_rw(&img);
    assert_eq!(chunks(&fs), before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
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

#[test]
fn many_chunks_2k_blocks_1k_inodes() {
    many_chunks("-b size=2048 -i size=1024");
}

#[test]
fn many_chunks_odd_sized_last_ag() {
    // 5 AGs, the last one (40 MiB) shorter than the others.
    many_chunks("-d agsize=70m");
}

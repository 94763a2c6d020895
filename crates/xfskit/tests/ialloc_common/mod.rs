//! Helpers shared by the inode allocation tests: allocating and freeing
//! inodes in transactions, reading back the inobt and AGI counters,
//! xfs_repair and kernel bulkstat checks, and ways to fragment or fill
//! the free space of an image.
#![allow(dead_code)]

use crate::write_common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use xfskit::geometry::{AgNumber, Geometry, Ino};
use xfskit::ialloc::{alloc_inode, free_inode};
use xfskit::inode::Inode;
use xfskit::scan::inobt;
use xfskit::Fs;

pub const S_IFREG: u16 = 0o100000;

pub const S_IFDIR: u16 = 0o040000;

/// Allocates `n` inodes of `mode` under `parent`, one transaction each,
/// and logs them as in-use (empty) inodes.
pub fn alloc_n(fs: &Fs, parent: Ino, mode: u16, n: usize) -> Vec<Ino> {
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
pub fn geo_isize(fs: &Fs) -> usize {
    fs.geometry().inode_size as usize
}

/// Frees each inode in its own transaction.
pub fn free_all(fs: &Fs, inos: &[Ino]) {
    for &ino in inos {
        let mut tp = fs.trans().unwrap();
        free_inode(&mut tp, ino).unwrap();
        tp.commit().unwrap();
    }
}

/// The inode chunks of every AG, as [`chunks`] lists them.
pub type Chunks = BTreeMap<(u32, u32), (u8, u8, u64)>;

/// A fresh 320 MiB image `a.img` made with mkfs.xfs `opts` in a new
/// scratch directory named after `tag`, open for writing, with its
/// geometry and its inode chunks as made.
pub fn fresh_image(tag: &str, opts: &str) -> (Scratch, PathBuf, Fs, Geometry, Chunks) {
    let s = Scratch::new(tag);
    let img = s.0.join("a.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let before = chunks(&fs);
    (s, img, fs, geo, before)
}

/// Syncs and closes `fs` (all it allocated freed again); then
/// `xfs_repair -n` must find `img` clean, and its inode chunks and its
/// counters of inodes, free inodes and free blocks must be as they were
/// (`before_chunks`, `geo`).
pub fn assert_restored(fs: Fs, img: &Path, before_chunks: &Chunks, geo: &Geometry) {
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(img);
    let fs = open_rw(img);
    assert_eq!(chunks(&fs), *before_chunks);
    let g = fs.geometry();
    assert_eq!(
        (g.icount, g.ifree, g.fdblocks),
        (geo.icount, geo.ifree, geo.fdblocks)
    );
}

/// Every inobt record of every AG: (agno, startino) -> (count, freecount, free).
pub fn chunks(fs: &Fs) -> Chunks {
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
pub fn agi_counts(fs: &Fs) -> Vec<(u32, u32)> {
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
pub fn assert_repair_only_disconnected(img: &Path, inos: &[Ino]) {
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
pub fn kernel_inodes(img: &Path) -> Option<std::collections::BTreeSet<u64>> {
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
pub fn assert_kernel_sees(img: &Path, want: &[Ino], gone: &[Ino]) {
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

/// As root: loop-mounts `img`, makes directories d0..d{n-1} with
/// `files` files each, removes every third file, unmounts. Returns the
/// directories' inode numbers, or None when not root.
pub fn kernel_populate(img: &Path, dirs: usize, files: usize) -> Option<Vec<Ino>> {
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
pub fn with_rw_mount<T>(img: &Path, what: &str, f: impl FnOnce(&Path) -> T) -> Option<T> {
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
    let (ok, out) = xfskit_testkit::umount(&mnt);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    match r {
        Ok(v) => Some(v),
        Err(e) => std::panic::resume_unwind(e),
    }
}

/// Preallocates `len` bytes of a new file; false on ENOSPC.
pub fn falloc(path: &Path, len: u64) -> bool {
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
pub fn punch(path: &Path, off: u64, len: u64) {
    use rustix::fs::{fallocate, FallocateFlags};
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    fallocate(&f, mode, off, len).unwrap_or_else(|e| panic!("punch {}: {e}", path.display()));
}

/// As root: fills the filesystem through the kernel, then punches a
/// 7-block hole into every 16 blocks of the big files, so that free
/// space is fragments holding an aligned 4-block run but no aligned
/// 8-block run. False when not root.
pub fn kernel_fragment(img: &Path, bs: u64) -> bool {
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

/// Runs of consecutive block numbers.
pub fn runs(blocks: &std::collections::BTreeSet<u32>) -> Vec<(u32, u32)> {
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
pub fn take_all_space(fs: &Fs, agno: AgNumber) -> std::collections::BTreeSet<u32> {
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
pub fn give_back(fs: &Fs, agno: AgNumber, taken: &std::collections::BTreeSet<u32>) {
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

//! Block mapping writes (crate::bmap) on images made by mkfs.xfs, with
//! empty files made by the kernel: sequential appends, thousands of
//! separate extents (a bmbt of depth two or more), punched holes that
//! shrink the tree back to extents, unwritten ranges and their
//! conversion, truncation. Proof: xfs_repair -n clean, our reader and a
//! kernel mount read back the data.

mod write_common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use write_common::*;
use xfskit::bmap;
use xfskit::geometry::{AgBlock, AgNumber, FsBlock};
use xfskit::inode::{Fork, ForkFormat, Inode};
use xfskit::{Fs, Ino, OpenOptions};

/// Makes an image with `n` empty files f0..f{n-1} made by the kernel;
/// returns their inode numbers. None when not root.
fn image_with_files(img: &Path, opts: &str, n: usize) -> Option<Vec<u64>> {
    if !is_root() {
        eprintln!("SKIP: making files with the kernel needs root");
        return None;
    }
    mkfs_xfs(img, 512 << 20, &format!("-m rmapbt=0 {opts}"));
    let mnt = img.with_extension("mk");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            "loop",
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    assert!(ok, "mount: {out}");
    let mut inos = Vec::new();
    for i in 0..n {
        let p = mnt.join(format!("f{i}"));
        std::fs::File::create(&p).unwrap();
        inos.push(std::fs::metadata(&p).unwrap().ino());
    }
    let (ok, out) = write_common::umount(&mnt);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    Some(inos)
}

/// The byte a file holds at `pos` (depends on the file and block).
fn pattern(file: u64, pos: u64) -> u8 {
    ((pos / 512).wrapping_mul(31) ^ file.wrapping_mul(7) ^ (pos % 512)) as u8
}

/// Maps `lblk..lblk+len` of `ino` (unwritten or not), writes the pattern
/// into the written blocks, grows the size to `size_to` at least; one
/// transaction.
fn map_and_write(fs: &Fs, ino: u64, lblk: u64, len: u64, unwritten: bool, size_to: u64) {
    map_near(fs, ino, lblk, len, unwritten, size_to, None)
}

fn map_near(
    fs: &Fs,
    ino: u64,
    lblk: u64,
    len: u64,
    unwritten: bool,
    size_to: u64,
    hint: Option<FsBlock>,
) {
    let bs = u64::from(fs.geometry().block_size);
    let mut tp = fs.trans().unwrap();
    let mut ip = tp.read_inode(Ino(ino)).unwrap();
    let map = bmap::alloc_range(&mut tp, &mut ip, Fork::Data, lblk, len, unwritten, hint).unwrap();
    assert_eq!(map.iter().map(|e| e.len).sum::<u64>(), len);
    ip.size = ip.size.max(size_to);
    tp.log_inode(&ip).unwrap();
    tp.commit().unwrap();
    for e in map.iter().filter(|e| !e.unwritten) {
        write_blocks(fs, ino, e.offset, e.start, e.len, bs);
    }
}

fn write_blocks(fs: &Fs, ino: u64, lblk: u64, start: FsBlock, len: u64, bs: u64) {
    let daddr = fs.geometry().fsb_to_daddr(start);
    let data: Vec<u8> = (lblk * bs..(lblk + len) * bs)
        .map(|p| pattern(ino, p))
        .collect();
    fs.write_data(daddr.0 * 512, &data).unwrap();
}

/// What the file should read as: pattern where written, zeros elsewhere.
fn expected(ino: u64, size: u64, bs: u64, written: &dyn Fn(u64) -> bool) -> Vec<u8> {
    (0..size)
        .map(|p| if written(p / bs) { pattern(ino, p) } else { 0 })
        .collect()
}

fn inode(fs: &Fs, ino: u64) -> Inode {
    let mut tp = fs.trans().unwrap();
    tp.read_inode(Ino(ino)).unwrap()
}

fn root_level(ip: &Inode) -> u16 {
    u16::from_be_bytes([ip.data_fork[0], ip.data_fork[1]])
}

struct Want {
    ino: u64,
    name: String,
    data: Vec<u8>,
}

fn check_all(img: &Path, wants: &[Want]) {
    assert_repair_clean(img);
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    for w in wants {
        let ip = fs.inode(Ino(w.ino)).unwrap();
        assert_eq!(ip.size, w.data.len() as u64, "{}", w.name);
        let mut got = vec![0u8; w.data.len()];
        let n = xfskit::inode::read_at(&fs, &ip, 0, &mut got).unwrap();
        assert_eq!(n, got.len());
        assert!(got == w.data, "our reader: {} differs", w.name);
    }
    drop(fs);
    with_kernel_mount(img, |mnt| {
        for w in wants {
            let got = std::fs::read(mnt.join(&w.name)).unwrap();
            assert!(got == w.data, "kernel: {} differs", w.name);
        }
    });
}

fn scenario(tag: &str, opts: &str) {
    let dir = Scratch::new(&format!("bmap-{tag}"));
    let img = dir.0.join("img");
    let Some(inos) = image_with_files(&img, opts, 5) else {
        return;
    };
    let fs = open_rw(&img);
    let bs = u64::from(fs.geometry().block_size);
    let mut wants = Vec::new();

    // f0: sequential appends, one block per transaction, starting in free
    // space (AG 1): each lands right after the last, one extent.
    let seq = inos[0];
    let hint = Some(fs.geometry().fsb_make(AgNumber(1), AgBlock(1000)));
    for i in 0..300 {
        map_near(&fs, seq, i, 1, false, (i + 1) * bs, hint);
    }
    let ip = inode(&fs, seq);
    {
        let mut tp = fs.trans().unwrap();
        let m = bmap::extents(&mut tp, &ip, Fork::Data).unwrap();
        eprintln!("{tag}: sequential map {m:?}");
    }
    assert_eq!(ip.format, ForkFormat::Extents);
    assert!(
        ip.nextents <= 2,
        "sequential appends made {} extents",
        ip.nextents
    );
    assert_eq!(ip.nblocks, 300);
    wants.push(Want {
        ino: seq,
        name: "f0".into(),
        data: expected(seq, 300 * bs, bs, &|_| true),
    });

    // f1: every other block, 3000 extents: a bmbt with a root of level >= 2
    // on 1k blocks.
    let frag = inos[1];
    let n = 3000u64;
    for i in 0..n {
        map_and_write(&fs, frag, 2 * i, 1, false, (2 * i + 1) * bs);
    }
    let ip = inode(&fs, frag);
    assert_eq!(ip.format, ForkFormat::Btree);
    assert_eq!(ip.nextents, n);
    let level = root_level(&ip);
    eprintln!(
        "{tag}: {n} extents, root level {level}, {} blocks",
        ip.nblocks
    );
    if bs == 1024 {
        assert!(level >= 2, "root level {level}");
    }
    wants.push(Want {
        ino: frag,
        name: "f1".into(),
        data: expected(frag, (2 * n - 1) * bs, bs, &|b| b % 2 == 0),
    });

    // f2: the same, then punch almost everything: back to extents format.
    let punch = inos[2];
    for i in 0..n {
        map_and_write(&fs, punch, 2 * i, 1, false, (2 * i + 1) * bs);
    }
    let keep = |b: u64| b.is_multiple_of(2) && (b < 6 || b.is_multiple_of(1000));
    let mut b = 0;
    while b < 2 * n {
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(Ino(punch)).unwrap();
        for x in b..b + 64 {
            if !keep(x) {
                bmap::unmap_range(&mut tp, &mut ip, Fork::Data, x, 1).unwrap();
            }
        }
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        b += 64;
    }
    let ip = inode(&fs, punch);
    assert_eq!(
        ip.format,
        ForkFormat::Extents,
        "{} extents left, forkoff {}, fork {} bytes",
        ip.nextents,
        ip.forkoff,
        ip.data_fork.len()
    );
    let left = (0..2 * n).filter(|b| keep(*b)).count() as u64;
    assert_eq!(ip.nextents, left);
    assert_eq!(ip.nblocks, left);
    wants.push(Want {
        ino: punch,
        name: "f2".into(),
        data: expected(punch, (2 * n - 1) * bs, bs, &keep),
    });

    // f3: an unwritten range, part of it written and converted.
    let unw = inos[3];
    map_and_write(&fs, unw, 0, 64, true, 64 * bs);
    {
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(Ino(unw)).unwrap();
        let map = bmap::extents(&mut tp, &ip, Fork::Data).unwrap();
        assert!(map.iter().all(|e| e.unwritten));
        bmap::convert_unwritten(&mut tp, &mut ip, Fork::Data, 16, 16).unwrap();
        let map = bmap::extents(&mut tp, &ip, Fork::Data).unwrap();
        for e in &map {
            let lo = e.offset.max(16);
            let hi = e.end().min(32);
            if lo < hi {
                assert!(!e.unwritten);
                let start = FsBlock(e.start.0 + (lo - e.offset));
                write_blocks(&fs, unw, lo, start, hi - lo, bs);
            }
        }
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        if map.len() == 1 {
            panic!("conversion did not split the extent: {map:?}");
        }
    }
    wants.push(Want {
        ino: unw,
        name: "f3".into(),
        data: expected(unw, 64 * bs, bs, &|b| (16..32).contains(&b)),
    });

    // f4: a few extents, then truncated to nothing.
    let tr = inos[4];
    for i in 0..40 {
        map_and_write(&fs, tr, 3 * i, 2, false, (3 * i + 2) * bs);
    }
    {
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(Ino(tr)).unwrap();
        bmap::unmap_range(&mut tp, &mut ip, Fork::Data, 0, u64::MAX).unwrap();
        ip.size = 0;
        assert_eq!((ip.nextents, ip.nblocks), (0, 0));
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
    }
    wants.push(Want {
        ino: tr,
        name: "f4".into(),
        data: Vec::new(),
    });

    fs.sync().unwrap();
    drop(fs);
    check_all(&img, &wants);

    // Truncate the deep tree too, and check the image again.
    let fs = open_rw(&img);
    let mut tp = fs.trans().unwrap();
    let mut ip = tp.read_inode(Ino(frag)).unwrap();
    bmap::unmap_range(&mut tp, &mut ip, Fork::Data, 0, u64::MAX).unwrap();
    ip.size = 0;
    assert_eq!(ip.format, ForkFormat::Extents);
    assert_eq!((ip.nextents, ip.nblocks), (0, 0));
    tp.log_inode(&ip).unwrap();
    tp.commit().unwrap();
    fs.sync().unwrap();
    drop(fs);
    wants[1].data.clear();
    check_all(&img, &wants);
}

#[test]
fn bmap_1k_blocks() {
    scenario("1k", "-b size=1024");
}

#[test]
fn bmap_4k_blocks() {
    scenario("4k", "");
}

#[test]
fn bmap_4k_blocks_2k_inodes() {
    scenario("2kino", "-i size=2048");
}

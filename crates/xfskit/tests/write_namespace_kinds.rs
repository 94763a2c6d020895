//! The namespace layer on single scenarios: every inode kind and odd
//! names read back by the kernel, the lazy change counter, and a full
//! image that gives NoSpace and stays valid.

mod namespace_common;
mod write_common;

use namespace_common::*;
use std::os::unix::fs::MetadataExt;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino};

#[test]
fn every_kind_and_names_read_back_by_kernel() {
    let s = Scratch::new("kinds");
    let img = s.0.join("img");
    mkfs_xfs(&img, 400 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let d = fs
        .create(root, b"dir with spaces", &NodeKind::Dir, &meta(0o750, 7))
        .unwrap();
    fs.create(
        d,
        b"chr",
        &NodeKind::CharDev { major: 1, minor: 3 },
        &meta(0o666, 0),
    )
    .unwrap();
    fs.create(
        d,
        b"blk",
        &NodeKind::BlockDev {
            major: 8,
            minor: 200_000,
        },
        &meta(0o660, 0),
    )
    .unwrap();
    fs.create(d, b"fifo", &NodeKind::Fifo, &meta(0o644, 0))
        .unwrap();
    fs.create(d, b"sock", &NodeKind::Socket, &meta(0o755, 0))
        .unwrap();
    let long: Vec<u8> = vec![b'z'; 255];
    fs.create(d, &long, &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    assert!(matches!(
        fs.create(
            d,
            &[b'y'; 256],
            &NodeKind::File { size: 0 },
            &meta(0o644, 0)
        ),
        Err(xfskit::Error::Invalid(_))
    ));
    assert!(matches!(
        fs.create(d, b"fifo", &NodeKind::Fifo, &meta(0o644, 0)),
        Err(xfskit::Error::Exists(_))
    ));
    // A sparse file: data at 0 and at 10 MiB.
    let f = fs
        .create(
            root,
            b"sparse",
            &NodeKind::File { size: 0 },
            &meta(0o644, 0),
        )
        .unwrap();
    fs.write_at(f, 0, b"start").unwrap();
    fs.write_at(f, 10 << 20, b"end").unwrap();
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    with_kernel_mount(&img, |mnt| {
        let dd = mnt.join("dir with spaces");
        let m = std::fs::metadata(&dd).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o750, 7));
        let r = std::fs::symlink_metadata(dd.join("blk")).unwrap().rdev();
        assert_eq!((libc::major(r), libc::minor(r)), (8, 200_000));
        let sp = mnt.join("sparse");
        let m = std::fs::metadata(&sp).unwrap();
        assert_eq!(m.len(), (10 << 20) + 3);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "the hole was allocated: {} blocks",
            m.blocks()
        );
        let b = std::fs::read(&sp).unwrap();
        assert_eq!(&b[..5], b"start");
        assert_eq!(&b[10 << 20..], b"end");
        assert!(b[5..10 << 20].iter().all(|&x| x == 0));
    });
}

#[test]
fn change_counter_is_lazy() {
    let s = Scratch::new("cc");
    let img = s.0.join("img");
    mkfs_xfs(&img, 400 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let f = fs
        .create(root, b"f", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    let a = fs.change_cookie(f).unwrap();
    fs.write_at(f, 0, b"one").unwrap();
    let b = fs.change_cookie(f).unwrap();
    assert_ne!(a, b, "a change between two queries must move the cookie");
    // Unqueried changes: only the first after a query increments.
    fs.write_at(f, 0, b"two").unwrap();
    fs.write_at(f, 0, b"three").unwrap();
    fs.chmod(f, 0o600).unwrap();
    let c = fs.change_cookie(f).unwrap();
    assert_eq!(c, b + 1, "unqueried changes must not increment");
    let d = fs.change_cookie(f).unwrap();
    assert_eq!(c, d, "no change, no increment");
    fs.sync().unwrap();
    drop(fs);
    // The counter is on disk.
    let fs = Fs::open(&img, &Default::default()).unwrap();
    assert_eq!(fs.inode(f).unwrap().changecount, c);
    assert_repair_clean(&img);
}

#[test]
fn full_image_gives_no_space_and_stays_valid() {
    let s = Scratch::new("full");
    let img = s.0.join("img");
    mkfs_xfs(&img, 300 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let chunk = vec![0xa5u8; 4 << 20];
    let mut written: Vec<(Ino, u64)> = Vec::new();
    let mut err = None;
    'fill: for i in 0..1000 {
        let name = format!("f{i}");
        let ino = match fs.create(
            root,
            name.as_bytes(),
            &NodeKind::File { size: 0 },
            &meta(0o644, 0),
        ) {
            Ok(ino) => ino,
            Err(e) => {
                err = Some(e);
                break;
            }
        };
        let mut size = 0u64;
        for _ in 0..8 {
            if let Err(e) = fs.write_at(ino, size, &chunk) {
                err = Some(e);
                written.push((ino, size));
                break 'fill;
            }
            size += chunk.len() as u64;
        }
        written.push((ino, size));
    }
    assert!(
        matches!(err, Some(xfskit::Error::NoSpace(_))),
        "expected NoSpace, got {err:?}"
    );
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &Default::default()).unwrap();
    for (ino, size) in written {
        let ip = fs.inode(ino).unwrap();
        assert_eq!(
            ip.size, size,
            "inode {} keeps exactly what was written",
            ino.0
        );
        let mut b = vec![0u8; 4096];
        if size > 0 {
            xfskit::inode::read_at(&fs, &ip, size - 4096, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 0xa5));
        }
    }
}

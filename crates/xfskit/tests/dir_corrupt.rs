//! Corrupted directory blocks: a flipped byte is caught by the CRC, and
//! structurally bad entries (with a fixed-up CRC) give errors, never panics.
//! Needs root (loop mounts); otherwise prints SKIP.

mod dir_common;

use dir_common::{cannot_run, ino_of, mkfs_mounted, populate, Image};
use xfskit::inode::{extents, Fork};
use xfskit::{dir, Error, Fs, Ino, OpenOptions};

/// An image with a 50-entry block-form directory (4 KiB blocks, 64 KiB
/// directory blocks so all entries share one block); returns the image
/// bytes, the directory inode and the byte offset of its first block.
fn image_with_block_dir() -> Option<(Image, u64, u64, usize)> {
    if let Some(why) = cannot_run() {
        xfskit_testkit::skip("dir_corrupt", &why);
        return None;
    }
    let mut img = mkfs_mounted("corrupt", &["-n", "size=65536"]);
    let d = img.mnt.join("d");
    populate(&d, 50);
    let ino = ino_of(&d);
    img.umount();
    let fs = Fs::open(&img.path, &OpenOptions::default()).expect("open");
    let inode = fs.inode(Ino(ino)).expect("inode");
    let map = extents(&fs, &inode, Fork::Data).expect("extents");
    let geo = fs.geometry();
    assert_eq!(map[0].offset, 0);
    assert!(
        map[0].len >= u64::from(geo.dir_blk_fsbs()),
        "first directory block is split"
    );
    let off = geo.fsb_to_daddr(map[0].start).bytes();
    let len = geo.dir_blk_size as usize;
    Some((img, ino, off, len))
}

/// Writes `block` at byte `off` of the image file.
fn patch(img: &Image, off: u64, block: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img.path)
        .expect("open image");
    f.write_all_at(block, off).expect("patch image");
}

fn read_block(img: &Image, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    std::fs::File::open(&img.path)
        .expect("open image")
        .read_exact_at(&mut b, off)
        .expect("read block");
    b
}

fn open(img: &Image) -> Fs {
    Fs::open(&img.path, &OpenOptions::default()).expect("open")
}

#[test]
fn flipped_byte_is_bad_crc() {
    let Some((img, ino, off, len)) = image_with_block_dir() else {
        return;
    };
    let fs = open(&img);
    let inode = fs.inode(Ino(ino)).expect("inode");
    assert_eq!(dir::read_dir(&fs, &inode).expect("clean read").len(), 50);
    let mut bad = read_block(&img, off, len);
    bad[200] ^= 0x20;
    patch(&img, off, &bad);
    let fs = open(&img);
    let inode = fs.inode(Ino(ino)).expect("inode");
    match dir::read_dir(&fs, &inode) {
        Err(Error::BadCrc { what, .. }) => assert_eq!(what, "directory block"),
        other => panic!("expected a bad CRC, got {other:?}"),
    }
    assert!(matches!(
        dir::lookup(&fs, &inode, b"whatever"),
        Err(Error::BadCrc { .. })
    ));
}

#[test]
fn mangled_entries_never_panic() {
    let Some((img, ino, off, len)) = image_with_block_dir() else {
        return;
    };
    let clean = read_block(&img, off, len);
    let mut errors = 0;
    // Overwrite each byte of the first 2 KiB of entries and the block tail
    // with a few values, re-stamp the CRC, and read.
    let positions = (64..2048).chain(len - 64..len);
    for (n, pos) in positions.enumerate() {
        let val = [0x00u8, 0xff, 0x07, 0x80][n % 4];
        let mut blk = clean.clone();
        if blk[pos] == val {
            continue;
        }
        blk[pos] = val;
        xfs_format::crc::stamp(&mut blk, 4);
        patch(&img, off, &blk);
        let fs = open(&img);
        let inode = fs.inode(Ino(ino)).expect("inode");
        let r = dir::read_dir(&fs, &inode);
        let _ = dir::lookup(&fs, &inode, b"entry-000003");
        let _ = dir::parent(&fs, &inode);
        if let Err(e) = r {
            assert!(matches!(e, Error::Corrupt { .. }), "unexpected error {e}");
            errors += 1;
        }
    }
    assert!(errors > 100, "only {errors} mangled blocks were rejected");
}

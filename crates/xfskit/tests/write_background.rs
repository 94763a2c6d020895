//! Background writeback: once 32 MiB of file data (or 128 MiB of metadata)
//! is pending, a writer thread writes the pending set while transactions go
//! on. Files and directories made across many such writebacks must read
//! back right at every moment (while a stream is in flight, after it, and
//! after reopening), the write counts must show the writebacks happened,
//! and the image must pass `xfs_repair -n`.

mod namespace_common;
mod write_common;

use namespace_common::meta;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino};

/// Content of file `i` (4 KiB to 1 MiB, depending on `i`).
fn content(i: usize) -> Vec<u8> {
    let len = 4096 + (i * 7919) % (1 << 20);
    (0..len)
        .map(|k| (k as u64 * 31 + i as u64 * 7) as u8)
        .collect()
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let inode = fs.inode(ino).unwrap();
    let mut out = vec![0u8; inode.size as usize];
    let n = xfskit::inode::read_at(fs, &inode, 0, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn files_read_back_across_background_writebacks() {
    let s = Scratch::new("bgwb");
    let img = s.0.join("img");
    mkfs_xfs(&img, 1 << 30, "");
    let mut made: Vec<(Vec<u8>, Ino, usize)> = Vec::new();
    {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        let dirs: Vec<Ino> = (0..8)
            .map(|d| {
                fs.create(
                    root,
                    format!("d{d}").as_bytes(),
                    &NodeKind::Dir,
                    &meta(0o40755, 0),
                )
                .unwrap()
            })
            .collect();
        let mut data_bytes = 0usize;
        let mut i = 0usize;
        // About 200 MiB of data: six or more background writebacks.
        while data_bytes < 200 << 20 {
            let c = content(i);
            let name = format!("f{i:05}").into_bytes();
            let dir = dirs[i % dirs.len()];
            let ino = if c.len() <= 1 << 20 && !i.is_multiple_of(3) {
                fs.create_file(dir, &name, &meta(0o100644, 0), &c, &[])
                    .unwrap()
            } else {
                // Written in pieces through write_at, the other data path.
                let ino = fs
                    .create(dir, &name, &NodeKind::File { size: 0 }, &meta(0o100644, 0))
                    .unwrap();
                for (k, piece) in c.chunks(100_000).enumerate() {
                    fs.write_at(ino, (k * 100_000) as u64, piece).unwrap();
                }
                ino
            };
            data_bytes += c.len();
            made.push((name, ino, i));
            // Read back an earlier file now and then, whatever is in flight.
            if i.is_multiple_of(17) {
                let (_, ino, j) = made[i / 2];
                assert!(
                    read_all(&fs, ino) == content(j),
                    "file {j} differs before sync"
                );
            }
            i += 1;
        }
        let before = fs.write_stats();
        assert!(
            before.writes > 0 && before.bytes >= 150 << 20,
            "no background writeback happened before sync: {before:?}"
        );
        eprintln!(
            "{} files, {data_bytes} bytes of data, before sync: {before:?}",
            made.len()
        );
        fs.sync().unwrap();
        for (_, ino, j) in made.iter().step_by(5) {
            assert!(
                read_all(&fs, *ino) == content(*j),
                "file {j} differs after sync"
            );
        }
    }
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &Default::default()).unwrap();
    for (name, _, j) in &made {
        let dir = format!("d{}", j % 8);
        let mut path = format!("/{dir}/").into_bytes();
        path.extend_from_slice(name);
        let inode = fs.lookup_path(&path).unwrap();
        assert!(
            read_all(&fs, inode.ino) == content(*j),
            "file {j} differs after reopening"
        );
    }
}

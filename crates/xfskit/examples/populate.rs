//! Library-level population benchmark: creates FILES files of SIZE bytes
//! spread over DIRS directories in an existing (fresh) XFS image through
//! the write engine, then syncs. Prints files/s and the writes issued.
//! Each file is made by `Fs::create_file` (one transaction), or by
//! `Fs::create` + `Fs::write_at_opt` when POPULATE_SEPARATE=1.
//! Usage: populate IMAGE FILES SIZE DIRS

use std::time::Instant;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::Timestamp;
use xfskit::{Fs, OpenOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        eprintln!("usage: populate IMAGE FILES SIZE DIRS");
        std::process::exit(2);
    }
    let files: u64 = a[2].parse().expect("FILES");
    let size: usize = a[3].parse().expect("SIZE");
    let dirs: u64 = a[4].parse().expect("DIRS");
    let separate = std::env::var_os("POPULATE_SEPARATE").is_some_and(|v| v == "1");
    let t0 = Instant::now();
    let fs = Fs::open_rw(a[1].as_ref(), &OpenOptions::default()).expect("open");
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let meta = |mode| Meta {
        mode,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    };
    let root = fs.geometry().root_ino;
    let data = vec![0x5au8; size];
    let mut d = Vec::new();
    for i in 0..dirs {
        d.push(
            fs.create(
                root,
                format!("d{i}").as_bytes(),
                &NodeKind::Dir,
                &meta(0o755),
            )
            .expect("mkdir"),
        );
    }
    for i in 0..files {
        let dir = d[(i % dirs) as usize];
        if separate {
            let ino = fs
                .create(
                    dir,
                    format!("f{i}").as_bytes(),
                    &NodeKind::File { size: size as u64 },
                    &meta(0o644),
                )
                .expect("create");
            if size > 0 {
                fs.write_at_opt(ino, 0, &data, false).expect("write");
            }
        } else {
            fs.create_file(dir, format!("f{i}").as_bytes(), &meta(0o644), &data, &[])
                .expect("create_file");
        }
    }
    let t_ops = t0.elapsed().as_secs_f64();
    fs.sync().expect("sync");
    let total = t0.elapsed().as_secs_f64();
    let s = fs.write_stats();
    println!(
        "{files} files of {size} B in {dirs} dirs: {total:.2} s ({:.0} files/s; {t_ops:.2} s before sync); {} writes, {} MiB, {:.0} KiB per write",
        files as f64 / total,
        s.writes,
        s.bytes >> 20,
        s.bytes as f64 / 1024.0 / s.writes.max(1) as f64
    );
}

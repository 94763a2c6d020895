//! The journal benchmark's workload through the library: DIRS
//! directories, FILES files of 4 KiB (each created, then written: two
//! transactions, as a program's open and write are), every other file
//! renamed into the next directory, every fourth unlinked, then a sync.
//! Prints one line of `key=value`: seconds, operations, the log's bytes.
//! Usage: journal_workload IMAGE FILES DIRS [--no-journal]

use std::time::Instant;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::Timestamp;
use xfskit::{Fs, OpenOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: journal_workload IMAGE FILES DIRS [--no-journal]");
        std::process::exit(2);
    }
    let files: u64 = a[2].parse().expect("FILES");
    let dirs: u64 = a[3].parse().expect("DIRS");
    let no_journal = a.get(4).is_some_and(|s| s == "--no-journal");
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
    let t0 = Instant::now();
    let fs = Fs::open_rw(
        a[1].as_ref(),
        &OpenOptions {
            no_journal,
            ..Default::default()
        },
    )
    .expect("open");
    let root = fs.geometry().root_ino;
    let data = vec![0x5au8; 4096];
    let mut ops = 0u64;
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
        ops += 1;
    }
    for i in 0..files {
        let dir = d[(i % dirs) as usize];
        let ino = fs
            .create(
                dir,
                format!("f{i}").as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644),
            )
            .expect("create");
        fs.write_at(ino, 0, &data).expect("write");
        ops += 2;
    }
    for i in (0..files).step_by(2) {
        let from = d[(i % dirs) as usize];
        let to = d[((i + 1) % dirs) as usize];
        fs.rename(
            from,
            format!("f{i}").as_bytes(),
            to,
            format!("r{i}").as_bytes(),
        )
        .expect("rename");
        ops += 1;
    }
    for i in (1..files).step_by(4) {
        let dir = d[(i % dirs) as usize];
        fs.unlink(dir, format!("f{i}").as_bytes()).expect("unlink");
        ops += 1;
    }
    fs.sync().expect("sync");
    let secs = t0.elapsed().as_secs_f64();
    let st = fs.log_stats();
    println!(
        "seconds={secs:.3} ops={ops} log_bytes={} checkpoints={} records={}",
        st.bytes, st.checkpoints, st.records
    );
}

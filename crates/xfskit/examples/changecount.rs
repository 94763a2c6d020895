//! Measures what querying the change counter after every write costs.
//! Usage: changecount IMAGE WRITES   (IMAGE: a fresh XFS image, changed)
//! Prints the time of WRITES small writes without queries, then with a
//! query (Fs::change_cookie) after each, and the overhead in percent.

use std::time::Instant;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::Timestamp;
use xfskit::{Fs, OpenOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: changecount IMAGE WRITES");
        std::process::exit(2);
    }
    let n: u64 = args[2].parse().expect("WRITES must be a number");
    let fs = Fs::open_rw(args[1].as_ref(), &OpenOptions::default()).expect("open");
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let meta = Meta {
        mode: 0o644,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    };
    let root = fs.geometry().root_ino;
    let buf = vec![7u8; 512];
    let mut results = Vec::new();
    for (round, query) in [(0, false), (1, true), (2, false), (3, true)] {
        let name = format!("f{round}");
        let ino = fs
            .create(root, name.as_bytes(), &NodeKind::File { size: 0 }, &meta)
            .expect("create");
        fs.write_at(ino, 0, &vec![0u8; 1 << 20]).expect("prefill");
        let start = Instant::now();
        let mut last = 0;
        for i in 0..n {
            fs.write_at(ino, (i * 512) % (1 << 20), &buf)
                .expect("write");
            if query {
                last = fs.change_cookie(ino).expect("query");
            }
        }
        let secs = start.elapsed().as_secs_f64();
        results.push((query, secs, last));
    }
    fs.sync().expect("sync");
    // Best of the two rounds of each kind.
    let best = |q: bool| {
        results
            .iter()
            .filter(|r| r.0 == q)
            .map(|r| r.1)
            .fold(f64::MAX, f64::min)
    };
    let plain = best(false);
    let queried = best(true);
    let last_cookie = results
        .iter()
        .filter(|r| r.0)
        .map(|r| r.2)
        .max()
        .unwrap_or(0);
    println!("writes\t{n}");
    println!("no queries\t{plain:.3} s\t{:.0} writes/s", n as f64 / plain);
    println!(
        "query after each\t{queried:.3} s\t{:.0} writes/s",
        n as f64 / queried
    );
    println!("overhead\t{:.1} %", (queried / plain - 1.0) * 100.0);
    println!("cookie after queried run\t{last_cookie} (each queried write bumps it)");
}

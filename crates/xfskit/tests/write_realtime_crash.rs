//! Crash safety of realtime writes: a realtime workload (new files, data
//! appended and overwritten, truncation and removal freeing realtime
//! extents, a log force in the middle) runs on a data device that stops
//! accepting writes after its N-th write (or tears that write), for N
//! spread over every write the workload issues. After each crash xfskit's
//! recovery (`Fs::open_rw`, which replays the log) must leave what
//! xfs_repair -n -r 6.15 and xfskit's check accept, every file present
//! holding the data of some state the workload passed through (old or
//! new), and every file made durable by the log force still there. The
//! same on a classic section and on realtime groups (mkfs.xfs 6.15,
//! `-m metadir=1,rmapbt=0,reflink=0`, two groups; and with Linux 6.18's
//! defaults, whose realtime rmap btree changes with every mapping).

mod crash_common;
mod namespace_common;
mod write_common;

use std::path::Path;
use std::sync::Arc;

use crash_common::{CrashDevice, Shared};
use namespace_common::meta;
use write_common::*;
use xfskit::build::{Meta, NodeKind};
use xfskit::{Fs, Ino, OpenOptions};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Every content each file name had at some point of the workload.
type History = Vec<(&'static str, Vec<u8>)>;

fn find(fs: &Fs, dir: Ino, name: &str) -> Option<Ino> {
    let d = fs.inode(dir).ok()?;
    xfskit::dir::lookup(fs, &d, name.as_bytes()).ok().flatten()
}

/// The workload (stops at the first error: the device crashed). Records
/// in `h` every content a file had; returns after the log force whether
/// it went through.
fn workload(fs: &Fs, h: &mut History) -> bool {
    let bs = fs.geometry().block_size as usize;
    let root = fs.geometry().root_ino;
    let Some(rt) = find(fs, root, "rt") else {
        return false;
    };
    let Some(old) = find(fs, rt, "old") else {
        return false;
    };
    let mut forced = false;
    let mut step = || -> xfskit::Result<()> {
        let a = fs.create(rt, b"a", &NodeKind::File { size: 0 }, &meta(0o644, 0))?;
        h.push(("a", Vec::new()));
        let mut va = pattern(1, 9 * bs + 5);
        fs.write_at(a, 0, &va)?;
        h.push(("a", va.clone()));
        let over = pattern(2, 3 * bs);
        fs.write_at(old, bs as u64 + 7, &over)?;
        let mut vo = h.iter().rev().find(|x| x.0 == "old").unwrap().1.clone();
        vo[bs + 7..4 * bs + 7].copy_from_slice(&over);
        h.push(("old", vo.clone()));
        fs.truncate(old, 2 * bs as u64)?;
        vo.truncate(2 * bs);
        h.push(("old", vo.clone()));
        fs.force_log()?;
        forced = true;
        let b = fs.create(rt, b"b", &NodeKind::File { size: 0 }, &meta(0o644, 0))?;
        h.push(("b", Vec::new()));
        let vb = pattern(3, 20 * bs);
        fs.write_at(b, 0, &vb)?;
        h.push(("b", vb));
        let more = pattern(4, 4 * bs);
        fs.write_at(a, va.len() as u64, &more)?;
        va.extend_from_slice(&more);
        h.push(("a", va));
        fs.unlink(rt, b"old")?;
        fs.sync()
    };
    let _ = step();
    forced
}

#[test]
fn realtime_writes_survive_a_crash_at_every_point() {
    crash_case(
        "realtime_writes_survive_a_crash_at_every_point",
        "rtw-crash",
        mkfs_rt,
        "-r extsize=8k",
    );
}

#[test]
fn realtime_group_writes_survive_a_crash_at_every_point() {
    crash_case(
        "realtime_group_writes_survive_a_crash_at_every_point",
        "rtw-crash-rg",
        mkfs_615_rtg,
        "-m metadir=1,rmapbt=0,reflink=0 -r rgcount=2 -r extsize=8k",
    );
}

#[test]
fn realtime_group_rmap_writes_survive_a_crash_at_every_point() {
    // Linux 6.18's defaults with a metadata directory: a realtime rmap
    // btree and a realtime refcount btree per group.
    crash_case(
        "realtime_group_rmap_writes_survive_a_crash_at_every_point",
        "rtw-crash-rg-rmap",
        mkfs_615_rtg,
        &format!("{} -r rgcount=2", conf_618_metadir(true)),
    );
}

fn crash_case(test: &str, tag: &str, mkfs: fn(&Path, u64, &Path, u64, &str), opts: &str) {
    if skip_without_615(test) {
        return;
    }
    let s = Scratch::new(tag);
    let (base, base_rt) = (s.0.join("base.img"), s.0.join("base.rt"));
    mkfs(&base, 300 << 20, &base_rt, 8 << 20, opts);
    let bs = 4096;
    let mut h0: History = Vec::new();
    {
        let fs = open_rw_rt(&base, &base_rt);
        let root = fs.geometry().root_ino;
        let rt = fs
            .create(
                root,
                b"rt",
                &NodeKind::Dir,
                &Meta {
                    mode: 0o755,
                    ..meta(0o644, 0)
                },
            )
            .unwrap();
        fs.set_realtime(rt, true).unwrap();
        let old = fs
            .create(rt, b"old", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        let v = pattern(9, 6 * bs + 100);
        fs.write_at(old, 0, &v).unwrap();
        h0.push(("old", v));
        fs.sync().unwrap();
    }
    // A run without a crash counts the writes.
    let total = {
        let rt = s.0.join("count.rt");
        std::fs::copy(&base_rt, &rt).unwrap();
        let dev = Arc::new(CrashDevice::new(&base, None, false));
        let fs = Fs::from_device_rw(
            Box::new(Shared(dev.clone())),
            &OpenOptions {
                rtdev: Some(rt),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let mut h = h0.clone();
        assert!(workload(&fs, &mut h));
        drop(fs);
        dev.writes()
    };
    assert!(total > 4, "only {total} writes");
    let stride = (total / 24).max(1);
    let (img, rt) = (s.0.join("crash.img"), s.0.join("crash.rt"));
    let mut runs = 0;
    for limit in (1..=total).step_by(stride as usize) {
        let tear = limit % 2 == 0;
        std::fs::copy(&base_rt, &rt).unwrap();
        let dev = Arc::new(CrashDevice::new(&base, Some(limit), tear));
        {
            let g = Fs::open(&base, &OpenOptions::default()).unwrap();
            let g = g.geometry();
            let lo = g.fsb_to_daddr(g.log_start).bytes();
            dev.set_log(lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size));
        }
        let mut h = h0.clone();
        let forced = match Fs::from_device_rw(
            Box::new(Shared(dev.clone())),
            &OpenOptions {
                rtdev: Some(rt.clone()),
                ..OpenOptions::default()
            },
        ) {
            Ok(fs) => workload(&fs, &mut h),
            Err(_) => false,
        };
        dev.revive();
        dev.save(&base, &img);
        // Our recovery, then the oracles.
        let what = format!(
            "crash at write {limit}/{total}{}",
            if tear { " (torn)" } else { "" }
        );
        {
            let fs = open_rw_rt(&img, &rt);
            fs.sync().unwrap();
        }
        let (ok, out) = run_615(
            "xfs_repair",
            &[
                "-n",
                "-r",
                &rt.display().to_string(),
                &img.display().to_string(),
            ],
        );
        assert!(ok, "{what}: xfs_repair -n -r 6.15:\n{out}");
        let fs = Fs::open(
            &img,
            &OpenOptions {
                rtdev: Some(rt.clone()),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
        assert!(
            report.problems.is_empty(),
            "{what}: xfskit check: {:#?}",
            report.problems
        );
        let root = fs.geometry().root_ino;
        let dir = find(&fs, root, "rt").unwrap();
        for name in ["old", "a", "b"] {
            let Some(ino) = find(&fs, dir, name) else {
                if forced && name == "a" {
                    panic!("{what}: 'a' lost after the log force");
                }
                continue;
            };
            let ip = fs.inode(ino).unwrap();
            let mut got = vec![0u8; ip.size as usize];
            xfskit::inode::read_at(&fs, &ip, 0, &mut got).unwrap();
            assert!(
                h.iter().any(|(n, v)| *n == name && *v == got),
                "{what}: '{name}' ({} bytes) holds data of no state it passed through",
                got.len()
            );
        }
        runs += 1;
    }
    println!("{runs} crash points of {total} writes");
}

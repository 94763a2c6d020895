//! `mkfs -d concurrency=` and `-l concurrency=` (AGs and a log sized for a
//! number of writer threads) against mkfs.xfs 7.2: the same geometry
//! summary for each size and option set (`-N`, nothing written), the same
//! refusals, and images xfs_repair 7.2 finds clean.

mod common;

use common::fixtures::{xfskit_output, xfsprogs_72_or_skip};
use common::TempDir;
use std::fs::File;
use std::process::Command;

/// Sizes (bytes) of the sparse targets.
const SIZES: &[u64] = &[512 << 20, 2 << 30, 64 << 30, 10 << 40];

const OPTS: &[&str] = &[
    "-d concurrency=2",
    "-d concurrency=8",
    "-d concurrency=16",
    "-d concurrency=33",
    "-d concurrency=1000",
    "-d concurrency=nr_cpus",
    "-d concurrency",
    "-d concurrency=0",
    "-l concurrency=8",
    "-l concurrency=64",
    "-l concurrency=5000",
    "-d concurrency=64 -l concurrency=64",
    "-d su=64k,sw=4,concurrency=20",
    "-b size=1024 -d concurrency=12 -l concurrency=12",
    "-d agcount=4,concurrency=8",
    "-d concurrency=8 -d agsize=1g",
    "-l size=64m,concurrency=8",
    "-l concurrency=-1",
    "-d concurrency=abc",
    // Not concurrency, but summarised the same way: the log's AG.
    "-l agnum=0",
    "-l agnum=3",
    "-l agnum=4",
    "-l agnum=-1",
];

/// What a mkfs prints for `-N`: its stdout, or on failure the first line
/// of its stderr without the program's prefix.
fn said(out: &std::process::Output) -> String {
    if out.status.success() {
        return String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("xfskit mkfs: ");
    format!("failed: {first}")
}

#[test]
fn concurrency_geometry_matches_mkfs_xfs_72() {
    let Some(bin) = xfsprogs_72_or_skip("concurrency_geometry_matches_mkfs_xfs_72") else {
        return;
    };
    let dir = TempDir::new("mkfs-concurrency");
    let img = dir.path().join("t.img");
    let p = img.to_str().unwrap();
    let mut diffs = Vec::new();
    let mut changed = 0;
    for &size in SIZES {
        File::create(&img).unwrap().set_len(size).unwrap();
        let plain = Command::new(bin.join("mkfs.xfs"))
            .args(["-N", "-f", p])
            .output()
            .unwrap();
        for opts in OPTS {
            let mut args: Vec<&str> = opts.split_whitespace().collect();
            args.extend(["-N", "-f", p]);
            let theirs = said(
                &Command::new(bin.join("mkfs.xfs"))
                    .args(&args)
                    .output()
                    .unwrap(),
            );
            let mut ours_args = vec!["mkfs"];
            ours_args.extend(&args);
            let ours = said(&xfskit_output(&ours_args));
            if theirs != ours {
                diffs.push(format!(
                    "size {size} [{opts}]:\n--- mkfs.xfs 7.2\n{theirs}\n--- xfskit\n{ours}"
                ));
            }
            changed += usize::from(!theirs.starts_with("failed") && theirs != said(&plain));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} differ:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    // The options must have changed some geometry, or the comparison shows
    // nothing about them.
    assert!(
        changed >= 10,
        "only {changed} rows differ from the plain geometry"
    );
}

#[test]
fn concurrency_images_are_clean() {
    let Some(bin) = xfsprogs_72_or_skip("concurrency_images_are_clean") else {
        return;
    };
    let dir = TempDir::new("mkfs-concurrency-img");
    let img = dir.path().join("t.img");
    let p = img.to_str().unwrap();
    for opts in ["-d concurrency=16 -l concurrency=16", "-l concurrency=100"] {
        File::create(&img).unwrap().set_len(64 << 30).unwrap();
        let mut args = vec!["mkfs", "-q", "-f"];
        args.extend(opts.split_whitespace());
        args.push(p);
        let out = xfskit_output(&args);
        assert!(out.status.success(), "xfskit mkfs {opts}: {out:?}");
        let repair = Command::new(bin.join("xfs_repair"))
            .args(["-n", p])
            .output()
            .unwrap();
        assert!(
            repair.status.success(),
            "xfs_repair -n 7.2 after mkfs {opts}:\n{}{}",
            String::from_utf8_lossy(&repair.stdout),
            String::from_utf8_lossy(&repair.stderr)
        );
    }
}

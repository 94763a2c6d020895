//! Writeback of `xfskit build`, counted from outside: `strace` records
//! every write-type system call the build makes to the image file (mkfs's
//! headers included), and the test holds the build to the bound of
//! at most one write call per 256 KiB written (plus a few for the headers
//! of a small image). The image must still be clean for `xfs_repair -n`.

mod common;

use common::{repair_check, TempDir};
use std::path::Path;
use std::process::Command;

/// Files and directories of the source tree: 98 MB of 4 KiB files (three
/// times the 32 MiB of file data the engine holds before writing back, so
/// the count covers writebacks in the middle of the build) spread over
/// directories the way bench/build.sh spreads them (round robin), so that
/// inode chunks and directory blocks fall between the data runs.
const FILES: usize = 24_000;
const DIRS: usize = 100;

fn make_tree(root: &Path) {
    for d in 0..DIRS {
        std::fs::create_dir_all(root.join(format!("d{d:03}"))).unwrap();
    }
    let mut block = vec![0u8; 4096];
    for i in 0..FILES {
        block[..8].copy_from_slice(&(i as u64).to_le_bytes());
        std::fs::write(root.join(format!("d{:03}/f{i:06}", i % DIRS)), &block).unwrap();
    }
}

/// Write-type calls on `img` in an `strace -y` log: (calls, bytes).
fn image_writes(log: &str, img: &str) -> (u64, u64) {
    let (mut calls, mut bytes) = (0u64, 0u64);
    for line in log.lines() {
        let is_write = ["pwrite64(", "pwritev(", "pwritev2(", "write(", "writev("]
            .iter()
            .any(|c| line.contains(c));
        if !is_write || !line.contains(&format!("<{img}>")) {
            continue;
        }
        calls += 1;
        if let Some(n) = line
            .rsplit("= ")
            .next()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            bytes += n;
        }
    }
    (calls, bytes)
}

#[test]
fn build_writes_at_most_one_call_per_256_kib() {
    if Command::new("strace").arg("-V").output().is_err() {
        // scripts/test.sh installs strace; without it nothing can be counted.
        panic!("strace is not installed: cannot count the build's writes (scripts/test.sh installs it)");
    }
    let tmp = TempDir::new("build-writes");
    let src = tmp.path().join("src");
    make_tree(&src);
    let img = tmp.path().join("out.img");
    let log = tmp.path().join("strace.log");
    let out = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-qq",
            "--seccomp-bpf",
            "-e",
            "trace=write,writev,pwrite64,pwritev,pwritev2",
            "-o",
        ])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_xfskit"))
        .arg("build")
        .arg(&src)
        .arg(&img)
        .output()
        .expect("run strace");
    assert!(
        out.status.success(),
        "xfskit build under strace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let img_s = std::fs::canonicalize(&img).unwrap().display().to_string();
    let (calls, bytes) = image_writes(&std::fs::read_to_string(&log).unwrap(), &img_s);
    let data = (FILES * 4096) as u64;
    assert!(
        bytes >= data,
        "only {bytes} bytes written to the image, the files alone are {data}"
    );
    // The headers of the few AGs of a small image and the superblock at
    // the end may each take a call of their own.
    let allowed = bytes / (256 << 10) + 16;
    eprintln!("{calls} write calls for {bytes} bytes (at most {allowed} allowed)");
    assert!(
        calls <= allowed,
        "{calls} write calls for {bytes} bytes: more than one per 256 KiB (+16)"
    );
    let (code, text) = repair_check(&img);
    assert_eq!(code, 0, "xfs_repair -n found problems:\n{text}");
}

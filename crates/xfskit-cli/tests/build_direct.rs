//! Cold sources: `xfskit build` reads large files that are not in the page
//! cache with `O_DIRECT`, straight into the aligned buffers it writes to the
//! image, and the rest of a large file on a read-ahead thread. The test
//! builds a tree of large, odd-sized and sparse files after dropping them
//! from the page cache, with one and two jobs and with direct I/O turned
//! off, and holds each image to `xfs_repair -n` and to the source's exact
//! contents (read back by `xfskit cat` and, as root, by the kernel). A cold
//! build must also leave the large files out of the page cache: the
//! observable proof that the direct path was taken.

mod common;

use common::{assert_kernel_sees, repair_check, require_root, walk_host, TempDir};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

fn xfskit(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xfskit"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run xfskit")
}

/// Deterministic bytes that differ at every offset (xorshift).
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Dense files: (name, size). Sizes around the reader's limits: 256 KiB
/// (plain memory below), 1 MiB (one buffer), 8 MiB (what a reader thread
/// reads ahead) and 4 MiB past it (the read-ahead thread).
const FILES: &[(&str, usize)] = &[
    ("small", 1000),
    ("a", 300 * 1024 + 123),
    ("b", 1 << 20),
    ("c", (3 << 20) + 5),
    ("d", (9 << 20) + 777),
    ("e", (21 << 20) + 3 * 4096 + 1),
];

fn make_tree(root: &Path) -> Vec<std::path::PathBuf> {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let mut paths = Vec::new();
    for (i, (name, size)) in FILES.iter().enumerate() {
        let p = root.join("sub").join(name);
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(&pattern(i as u64 + 7, *size)).unwrap();
        // Written back, so that the page cache can drop it.
        f.sync_all().unwrap();
        paths.push(p);
    }
    // Sparse: 40 MiB with 6 MiB of data at 1 MiB, 100 KiB at 20 MiB and
    // 5,000 bytes at the end.
    let p = root.join("sparse");
    let mut f = std::fs::File::create(&p).unwrap();
    f.set_len(40 << 20).unwrap();
    for (at, n, seed) in [
        (1u64 << 20, 6usize << 20, 91u64),
        (20 << 20, 100 << 10, 92),
        ((40 << 20) - 5000, 5000, 93),
    ] {
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&pattern(seed, n)).unwrap();
    }
    f.sync_all().unwrap();
    paths.push(p);
    paths
}

/// Drops `p` from the page cache (GNU dd: `iflag=nocache count=0`).
fn evict(p: &Path) {
    let ok = Command::new("dd")
        .arg(format!("if={}", p.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "dd could not drop {} from the page cache", p.display());
}

/// Bytes of `p` in the page cache (util-linux fincore), if it can tell.
fn cached_bytes(p: &Path) -> Option<u64> {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(p)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// True when files in `dir` take `O_DIRECT` reads (not every filesystem
/// does; tmpfs before Linux 6.6 does not).
fn direct_works(dir: &Path) -> bool {
    let p = dir.join("probe");
    std::fs::write(&p, vec![1u8; 8192]).unwrap();
    let ok = Command::new("dd")
        .arg(format!("if={}", p.display()))
        .args(["of=/dev/null", "bs=4096", "iflag=direct", "status=none"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let _ = std::fs::remove_file(&p);
    ok
}

#[test]
fn cold_large_files_are_read_direct_and_land_exactly() {
    let tmp = TempDir::new("build-direct");
    let src = tmp.path().join("src");
    let paths = make_tree(&src);
    let direct = direct_works(tmp.path());
    if !direct {
        println!(
            "NOTE: {} takes no O_DIRECT reads: only the buffered fallback is tested",
            tmp.path().display()
        );
    }
    let src_s = src.display().to_string();
    for (label, jobs, env) in [
        ("direct, 1 job", "1", &[][..]),
        ("direct, 2 jobs", "2", &[][..]),
        ("buffered", "1", &[("XFSKIT_NO_DIRECT", "1")][..]),
    ] {
        let img = tmp.path().join("img");
        let img_s = img.display().to_string();
        for p in &paths {
            evict(p);
        }
        let out = xfskit(
            &[
                "build", "-q", "-f", "--size", "300m", "--jobs", jobs, &src_s, &img_s,
            ],
            env,
        );
        assert!(
            out.status.success(),
            "{label}: build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, text) = repair_check(&img);
        assert_eq!(code, 0, "{label}: xfs_repair -n found problems:\n{text}");
        // Direct reads leave large files uncached; buffered ones fill the
        // cache. Only a few pages per request may come in (the cache is
        // asked, without waiting, whether it holds the first page).
        if direct && env.is_empty() {
            for p in &paths[2..] {
                let Some(c) = cached_bytes(p) else {
                    println!("NOTE: fincore unavailable: page cache use not checked");
                    break;
                };
                let size = std::fs::metadata(p).unwrap().len();
                assert!(
                    c * 20 < size,
                    "{label}: {} has {c} of {size} bytes in the page cache after a cold build",
                    p.display()
                );
            }
        }
        // Every file, byte for byte, through xfskit's own reader.
        for (p, name) in paths.iter().zip(
            FILES
                .iter()
                .map(|(n, _)| format!("/sub/{n}"))
                .chain(["/sparse".to_string()]),
        ) {
            let got = xfskit(&["cat", &img_s, &name], &[]);
            assert!(got.status.success(), "{label}: cat {name} failed");
            let want = std::fs::read(p).unwrap();
            assert!(
                got.stdout == want,
                "{label}: {name} differs ({} bytes read, {} expected)",
                got.stdout.len(),
                want.len()
            );
        }
        if require_root("build_direct kernel read-back") {
            let want: Vec<common::Entry> = walk_host(&src)
                .into_iter()
                .filter(|e| !e.path.is_empty())
                .collect();
            assert_kernel_sees(&img, &tmp.path().join("mnt"), &want, false, label);
        }
        std::fs::remove_file(&img).unwrap();
    }
}

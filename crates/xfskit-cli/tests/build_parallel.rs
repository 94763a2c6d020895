//! `xfskit build --jobs N` from a tar archive and from a directory: the
//! tree (a dozen
//! directories over several AGs, thousands of small files, large and
//! sparse files, hard links within and across directories, symlinks,
//! xattrs, a fifo, other owners) is built with one and with several
//! writing threads. Every image must pass `xfs_repair -n` and
//! `xfskit check`, and the kernel must read back exactly the source tree.
//! An error met by a worker thread (an xattr name XFS cannot store) must
//! fail the build and leave no image behind.

mod common;

use common::{assert_kernel_sees, repair_check, require_root, walk_host, TempDir};
use std::path::Path;
use std::process::Command;

fn xfskit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .expect("run xfskit")
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(st.success(), "command failed: {cmd}");
}

/// Deterministic contents of `n` bytes.
fn body(seed: usize, n: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Makes the source tree under `root`.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    let mut k = 0;
    for d in 0..12 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        for i in 0..250 {
            k += 1;
            let n = match i % 9 {
                0 => 0,
                1 => 4096,
                2 => 70_000,
                _ => (i * 53 + d * 7) % 6000 + 1,
            };
            let p = if i % 5 == 0 {
                dir.join("sub").join(format!("s{i}"))
            } else {
                dir.join(format!("f{i}"))
            };
            std::fs::write(p, body(k, n)).unwrap();
        }
    }
    // Files larger than one chunk (1 MiB), one not block-aligned.
    std::fs::write(root.join("d0/big"), body(1, 3 << 20)).unwrap();
    std::fs::write(root.join("d7/sub/big"), body(2, (5 << 20) + 123)).unwrap();
    let r = root.display();
    sh(&format!(
        "set -e; cd {r}
         dd if=/dev/urandom of=d3/sparse bs=4096 count=2 seek=2000 conv=notrunc 2>/dev/null
         dd if=/dev/urandom of=d3/sparse bs=4096 count=1 conv=notrunc 2>/dev/null
         ln d0/f1 d0/f1-link; ln d0/f2 d1/from-d0; ln d9/sub/s5 d2/sub/from-d9
         ln d0/big d11/big-link; ln d4/f3 d4/sub/l1; ln d4/f3 d5/l2
         ln -s f1 d0/sl; ln -s ../d6/f7 d8/sub/sl; ln -s /no/such/target d10/dangling
         mkfifo d5/fifo
         setfattr -n user.one -v hello d0/f3
         setfattr -n user.big -v \"$(head -c 3000 /dev/zero | tr '\\0' a)\" d1/f4
         setfattr -n user.onbig -v x d0/big
         setfattr -n user.dir -v y d2
         for i in 1 2 3 4 6 7 8; do setfattr -n user.n$i -v v$i d6/f11; done
         chown 1000:100 d3/f4 d3; chmod 4755 d3/f6; chmod 1777 d10
         touch -d '2001-02-03 04:05:06.789' d9/f8 d9"
    ));
}

fn tar_of(src: &Path, tar: &Path) {
    sh(&format!(
        "tar --xattrs --xattrs-include='*' --sparse --format=pax --numeric-owner -C {} -cf {} .",
        src.display(),
        tar.display()
    ));
}

/// Builds `img` from `tar` with `--jobs jobs`; checks repair, check and
/// (as root) the kernel's view against `want`.
fn build_and_verify(tar: &Path, img: &Path, jobs: &str, mkfs: &[&str], want: &[common::Entry]) {
    let (t, i) = (tar.display().to_string(), img.display().to_string());
    let mut args = vec!["build", "-q", "--jobs", jobs, &t, &i];
    args.extend_from_slice(mkfs);
    let out = xfskit(&args);
    assert!(
        out.status.success(),
        "xfskit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, text) = repair_check(img);
    assert_eq!(
        code, 0,
        "--jobs {jobs}: xfs_repair -n found problems:\n{text}"
    );
    let out = xfskit(&["check", &i]);
    assert!(
        out.status.success(),
        "--jobs {jobs}: xfskit check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    if !require_root("build_parallel kernel read-back") {
        return;
    }
    let what = format!("--jobs {jobs}");
    assert_kernel_sees(img, &img.with_extension("mnt"), want, false, &what);
}

#[test]
fn tar_build_with_several_jobs_matches_the_source() {
    let tmp = TempDir::new("build-par");
    let src = tmp.path().join("src");
    make_tree(&src);
    // The archive's "." entry is optional, so the root is not compared.
    let want: Vec<common::Entry> = walk_host(&src)
        .into_iter()
        .filter(|e| !e.path.is_empty())
        .collect();
    assert!(want.len() > 3000, "{} entries", want.len());
    let tar = tmp.path().join("src.tar");
    tar_of(&src, &tar);
    let cases: [(&str, &[&str]); 4] = [
        ("1", &[]),
        ("4", &[]),
        ("3", &["--size", "1g", "-d", "agcount=8"]),
        // The automatic size: before directory blocks were allocated as one
        // extent of their full length, this tree failed here with "no 8
        // contiguous blocks for a directory block" (any number of jobs).
        ("2", &["-b", "size=1024", "-n", "size=8192"]),
    ];
    for (jobs, mkfs) in cases {
        let img = tmp.path().join(format!("j{jobs}.img"));
        build_and_verify(&tar, &img, jobs, mkfs, &want);
        std::fs::remove_file(&img).unwrap();
    }
}

/// One ustar member (`kind` b'0' file, b'x' pax header) of `data`.
fn member(out: &mut Vec<u8>, name: &str, kind: u8, data: &[u8]) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let mut field = |at: usize, len: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    field(100, 8, 0o644);
    field(108, 8, 0);
    field(116, 8, 0);
    field(124, 12, data.len() as u64);
    field(136, 12, 1_700_000_000);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// A pax record "LEN key=value\n".
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut n = body.len() + 1;
    while format!("{n}").len() + body.len() != n {
        n += 1;
    }
    format!("{n}{body}").into_bytes()
}

#[test]
fn worker_error_fails_the_build_and_leaves_no_image() {
    let tmp = TempDir::new("build-par-err");
    let mut tar = Vec::new();
    member(&mut tar, "a/", b'5', b"");
    member(&mut tar, "b/", b'5', b"");
    for i in 0..400 {
        member(
            &mut tar,
            &format!("{}/f{i}", ["a", "b"][i % 2]),
            b'0',
            b"data",
        );
    }
    // An xattr name of 300 bytes: XFS stores at most 255.
    let long = format!("SCHILY.xattr.user.{}", "n".repeat(300));
    member(&mut tar, "pax", b'x', &pax_record(&long, "v"));
    member(&mut tar, "b/bad", b'0', b"data");
    for i in 0..400 {
        member(&mut tar, &format!("a/g{i}"), b'0', b"more");
    }
    tar.resize(tar.len() + 1024, 0);
    let tar_path = tmp.path().join("bad.tar");
    std::fs::write(&tar_path, &tar).unwrap();
    for jobs in ["1", "4"] {
        let img = tmp.path().join(format!("bad{jobs}.img"));
        let (t, i) = (tar_path.display().to_string(), img.display().to_string());
        let out = xfskit(&["build", "-q", "--jobs", jobs, &t, &i]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--jobs {jobs}: the build succeeded");
        assert!(
            err.contains("xattr name of 300 bytes"),
            "--jobs {jobs}: {err}"
        );
        assert!(!img.exists(), "--jobs {jobs}: a failed build left {i}");
    }
}

#[test]
fn directory_build_with_several_jobs_matches_the_source() {
    let tmp = TempDir::new("build-par-dir");
    let src = tmp.path().join("src");
    make_tree(&src);
    let want = walk_host(&src);
    let s = src.display().to_string();
    for jobs in ["4", "1"] {
        let img = tmp.path().join(format!("dir{jobs}.img"));
        let i = img.display().to_string();
        let out = xfskit(&["build", "-q", "--jobs", jobs, &s, &i]);
        assert!(
            out.status.success(),
            "--jobs {jobs}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, text) = repair_check(&img);
        assert_eq!(code, 0, "dir --jobs {jobs}: xfs_repair -n:\n{text}");
        let out = xfskit(&["check", &i]);
        assert!(out.status.success(), "dir --jobs {jobs}: xfskit check");
        if !require_root("build_parallel directory read-back") {
            continue;
        }
        let what = format!("dir --jobs {jobs}");
        assert_kernel_sees(&img, &img.with_extension("mnt"), &want, true, &what);
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn reproducible_ignores_jobs() {
    let tmp = TempDir::new("build-par-repro");
    let src = tmp.path().join("src");
    make_tree(&src);
    let tar = tmp.path().join("src.tar");
    tar_of(&src, &tar);
    let t = tar.display().to_string();
    let mut images = Vec::new();
    for jobs in ["4", "1"] {
        let img = tmp.path().join(format!("r{jobs}.img"));
        let i = img.display().to_string();
        let out = xfskit(&["build", "-q", "--reproducible", "--jobs", jobs, &t, &i]);
        assert!(
            out.status.success(),
            "--reproducible --jobs {jobs}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        images.push(std::fs::read(&img).unwrap());
    }
    assert!(
        images[0] == images[1],
        "--reproducible with --jobs 4 and 1 gave different images"
    );
}

/// A ustar hard link member `name` naming the earlier `target`.
fn link_member(out: &mut Vec<u8>, name: &str, target: &str) {
    let start = out.len();
    member(out, name, b'1', b"");
    let h = &mut out[start..start + 512];
    h[157..157 + target.len()].copy_from_slice(target.as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// An archive of one directory of 3,000 files, eight of 250, a file in
/// directories the archive only implies, then `tail` (hard links, or bad
/// entries), written to `path`.
fn far_links_archive(path: &Path, tail: &dyn Fn(&mut Vec<u8>)) {
    let mut tar = Vec::new();
    member(&mut tar, "big/", b'5', b"");
    for i in 0..3000 {
        member(
            &mut tar,
            &format!("big/f{i:05}"),
            b'0',
            format!("b{i}").as_bytes(),
        );
    }
    for d in 0..8 {
        member(&mut tar, &format!("d{d}/"), b'5', b"");
        for i in 0..250 {
            member(
                &mut tar,
                &format!("d{d}/f{i:03}"),
                b'0',
                format!("d{d}.{i}").as_bytes(),
            );
        }
    }
    member(&mut tar, "imp/deep/file", b'0', b"implied");
    tail(&mut tar);
    tar.resize(tar.len() + 1024, 0);
    std::fs::write(path, &tar).unwrap();
}

/// `xfskit ls -l IMG PATH`'s link count.
fn nlink(img: &str, path: &str) -> u32 {
    let out = xfskit(&["ls", "-l", img, path]);
    assert!(out.status.success(), "ls -l {path}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Hard links to files thousands of entries earlier, in the same and in
/// other directories, to a link, to a file in implied directories and to
/// the file just queued: the build keeps no table of paths and reads each
/// target back from its directory (after that directory's worker caught
/// up). Every way of running the workers gives the same tree, xfs_repair
/// -n finds nothing, and the kernel sees one inode behind each group.
#[test]
fn hard_links_far_apart_name_the_right_inodes() {
    let tmp = TempDir::new("build-far-links");
    let tar = tmp.path().join("links.tar");
    far_links_archive(&tar, &|t| {
        link_member(t, "d7/far", "big/f00000");
        link_member(t, "big/same", "big/f00001");
        link_member(t, "d3/chain", "d7/far");
        link_member(t, "d0/recent", "d7/f249");
        link_member(t, "d5/imp", "imp/deep/file");
        link_member(t, "new/one", "d2/f100");
    });
    let groups: [&[&str]; 5] = [
        &["big/f00000", "d7/far", "d3/chain"],
        &["big/f00001", "big/same"],
        &["d7/f249", "d0/recent"],
        &["imp/deep/file", "d5/imp"],
        &["d2/f100", "new/one"],
    ];
    let t = tar.display().to_string();
    let cases: [(&str, &[&str]); 3] = [
        ("1", &[]),
        ("4", &[]),
        ("3", &["--size", "1g", "-d", "agcount=8"]),
    ];
    let mut first_listing: Option<Vec<u8>> = None;
    for (jobs, mkfs) in cases {
        let img = tmp.path().join(format!("links{jobs}.img"));
        let i = img.display().to_string();
        let mut args = vec!["build", "-q", "--jobs", jobs, &t, &i];
        args.extend_from_slice(mkfs);
        let out = xfskit(&args);
        assert!(
            out.status.success(),
            "--jobs {jobs}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, text) = repair_check(&img);
        assert_eq!(code, 0, "--jobs {jobs}: xfs_repair -n:\n{text}");
        let out = xfskit(&["check", &i]);
        assert!(out.status.success(), "--jobs {jobs}: xfskit check");
        for g in groups {
            let want = xfskit(&["cat", &i, g[0]]).stdout;
            assert!(!want.is_empty(), "--jobs {jobs}: {} is empty", g[0]);
            for p in g.iter() {
                assert_eq!(nlink(&i, p), g.len() as u32, "--jobs {jobs}: {p}");
                assert_eq!(xfskit(&["cat", &i, p]).stdout, want, "--jobs {jobs}: {p}");
            }
        }
        let listing = xfskit(&["ls", "-lR", &i, "/"]).stdout;
        match &first_listing {
            None => first_listing = Some(listing),
            Some(f) => assert!(*f == listing, "--jobs {jobs}: ls -lR differs from --jobs 1"),
        }
        if require_root("build_parallel far hard links (kernel inode numbers)") {
            let mnt = img.with_extension("mnt");
            std::fs::create_dir_all(&mnt).unwrap();
            let m = mnt.display();
            sh(&format!("mount -o loop,ro {i} {m}"));
            let inos: Vec<Vec<u64>> = groups
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|p| {
                            use std::os::unix::fs::MetadataExt;
                            std::fs::metadata(mnt.join(p)).map(|m| m.ino())
                        })
                        .collect::<std::io::Result<_>>()
                })
                .collect::<std::io::Result<_>>()
                .unwrap_or_default();
            sh(&format!("umount {m}"));
            assert_eq!(
                inos.len(),
                groups.len(),
                "--jobs {jobs}: stat through the kernel"
            );
            for (g, inos) in groups.iter().zip(&inos) {
                assert!(
                    inos.iter().all(|&n| n == inos[0]),
                    "--jobs {jobs}: {g:?} {inos:?}"
                );
            }
            let firsts: std::collections::BTreeSet<u64> = inos.iter().map(|v| v[0]).collect();
            assert_eq!(
                firsts.len(),
                groups.len(),
                "--jobs {jobs}: groups share an inode"
            );
        }
        std::fs::remove_file(&img).unwrap();
    }
}

/// Without a table of paths, a hard link to a directory or to a path no
/// earlier entry made, a name given twice and a file's name used as a
/// directory are still refused, naming the path, and leave no image.
#[test]
fn bad_links_and_duplicates_are_refused_without_a_path_table() {
    let tmp = TempDir::new("build-bad-links");
    let tar = tmp.path().join("bad.tar");
    type Tail = fn(&mut Vec<u8>);
    let cases: [(Tail, &[&str]); 5] = [
        (
            |t| link_member(t, "d0/l", "d1"),
            &["d0/l", "d1", "not an earlier file"],
        ),
        (
            |t| link_member(t, "d0/l", "d0/f999"),
            &["d0/l", "d0/f999", "not an earlier file"],
        ),
        (
            |t| link_member(t, "d0/l", "nodir/f"),
            &["d0/l", "nodir/f", "not an earlier file"],
        ),
        (
            |t| member(t, "big/f00007", b'0', b"again"),
            &["f00007", "appears twice"],
        ),
        (
            |t| member(t, "d4/f010/x", b'0', b"under a file"),
            &["f010", "used as a directory"],
        ),
    ];
    for (tail, words) in cases {
        far_links_archive(&tar, &tail);
        for jobs in ["1", "4"] {
            let img = tmp.path().join(format!("bad{jobs}.img"));
            let (t, i) = (tar.display().to_string(), img.display().to_string());
            let out = xfskit(&["build", "-q", "--jobs", jobs, &t, &i]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "--jobs {jobs} {words:?}: the build succeeded"
            );
            for w in words {
                assert!(err.contains(w), "--jobs {jobs}: {w:?} not in {err}");
            }
            assert!(!img.exists(), "--jobs {jobs}: a failed build left {i}");
        }
    }
}

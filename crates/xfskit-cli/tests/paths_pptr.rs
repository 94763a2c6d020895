//! Paths from parent pointers: on an image the kernel filled (mkfs.xfs
//! 6.15 with the 6.18 defaults: parent pointers), `xfskit bulkstat --paths`
//! and `xfskit stat` give every inode the set of paths a walk of the
//! kernel's mount finds, and what `xfs_io -c "parent -p"` 6.15 prints;
//! without parent pointers, bulkstat --paths finds the same from an index
//! of every directory entry.

mod common;

use common::fixtures::{xfskit_output as xfskit, LoopMount};

use common::{is_root, skip, TempDir};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn run_ok(c: &mut Command, what: &str) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Inode number -> every path the kernel shows for it (walk of the mount).
fn kernel_paths(root: &Path) -> BTreeMap<u64, BTreeSet<String>> {
    let mut out: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    out.entry(std::fs::metadata(root).expect("root").ino())
        .or_default()
        .insert("/".into());
    let mut todo = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = todo.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir") {
            let e = e.expect("entry");
            let name = String::from_utf8_lossy(e.file_name().as_bytes()).into_owned();
            let path = format!("{rel}/{name}");
            let m = std::fs::symlink_metadata(e.path()).expect("lstat");
            out.entry(m.ino()).or_default().insert(path.clone());
            if m.is_dir() {
                todo.push((e.path(), path));
            }
        }
    }
    out
}

/// Fills the mounted filesystem: directories, files, hard links in several
/// directories (one file with enough links for a leaf attr fork), a deep
/// path, odd names, renames and removed links. Returns files to ask
/// xfs_io about.
fn fill(m: &Path) -> Vec<PathBuf> {
    use std::fs;
    let p = |r: &str| m.join(r);
    for d in ["a/b/c", "d", "e/f", "many", "sp ace"] {
        fs::create_dir_all(p(d)).expect("mkdir");
    }
    fs::write(p("a/one"), b"1").expect("write");
    fs::write(p("a/b/two"), b"2").expect("write");
    for d in ["d/two_link", "e/f/two_again", "sp ace/two with space"] {
        fs::hard_link(p("a/b/two"), p(d)).expect("link");
    }
    // Many links: the attr fork leaves short form.
    fs::write(p("many/target"), b"t").expect("write");
    for i in 0..150 {
        fs::hard_link(
            p("many/target"),
            p(&format!("many/link_{i:03}_{}", "x".repeat(i % 40))),
        )
        .expect("link");
    }
    for i in (0..150).step_by(7) {
        fs::remove_file(p(&format!("many/link_{i:03}_{}", "x".repeat(i % 40)))).expect("unlink");
    }
    // Many files in one directory.
    for i in 0..400 {
        fs::write(p(&format!("d/file{i}")), b"").expect("write");
    }
    // A deep path.
    let mut deep = String::from("deep");
    for i in 0..120 {
        deep.push_str(&format!("/level{i:03}"));
    }
    fs::create_dir_all(p(&deep)).expect("mkdir deep");
    let deep_file = format!("{deep}/bottom");
    fs::write(p(&deep_file), b"deep").expect("write");
    fs::hard_link(p(&deep_file), p("a/deep_link")).expect("link");
    // A long name and other kinds.
    let long = "L".repeat(255);
    fs::write(p(&format!("e/{long}")), b"").expect("write");
    std::os::unix::fs::symlink("a/one", p("e/sym")).expect("symlink");
    run_ok(Command::new("mkfifo").arg(p("e/fifo")), "mkfifo");
    // Renames: a directory with links below it, a file, across directories.
    fs::rename(p("a/b"), p("e/b_moved")).expect("rename dir");
    fs::rename(p("a/one"), p("d/one_renamed")).expect("rename file");
    fs::rename(p("deep/level000/level001"), p("sp ace/level001")).expect("rename deep");
    // A link removed, a file removed.
    fs::remove_file(p("e/f/two_again")).expect("unlink");
    fs::remove_file(p("d/file7")).expect("unlink");
    vec![
        p("e/b_moved/two"),
        p("many/target"),
        p("d/one_renamed"),
        p("a/deep_link"),
        p("e/b_moved/c"),
    ]
}

#[test]
fn paths_match_the_kernel_and_xfs_io() {
    const TEST: &str = "paths_match_the_kernel_and_xfs_io";
    if !is_root() {
        skip(TEST, "needs root for a read-write loop mount");
        return;
    }
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(
            TEST,
            "xfsprogs 6.15 is missing (mkfs.xfs with parent pointers, xfs_io parent)",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-paths");
    let img = tmp.path().join("pptr.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(320 << 20))
        .expect("create image");
    run_ok(
        Command::new(x615.join("libexec/mkfs.xfs"))
            .env("LD_LIBRARY_PATH", x615.join("lib"))
            .args(["-q", "-f", "-c"])
            .arg(format!(
                "options={}",
                x615.join("conf/lts_6.18.conf").display()
            ))
            .arg(&img),
        "mkfs.xfs 6.15",
    );
    let mnt = tmp.path().join("mnt");
    let (want, from_xfs_io) = {
        let m = LoopMount::rw(&img, &mnt);
        let ask = fill(m.path());
        let want = kernel_paths(m.path());
        let mut from_xfs_io = BTreeMap::new();
        for f in &ask {
            let o = run_ok(
                Command::new(x615.join("libexec/xfs_io"))
                    .env("LD_LIBRARY_PATH", x615.join("lib"))
                    .args(["-c", "parent -p"])
                    .arg(f),
                "xfs_io parent -p",
            );
            let prefix = s(m.path()).to_owned();
            let paths: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_owned())
                .collect();
            let ino = std::fs::symlink_metadata(f).expect("lstat").ino();
            from_xfs_io.insert(ino, paths);
        }
        (want, from_xfs_io)
    };
    // Unmounted (the guard dropped): read the image.
    let o = xfskit(&["bulkstat", "--paths", "--json", s(&img)]);
    assert!(
        o.status.success(),
        "bulkstat --paths: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut got: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let ino = v["ino"].as_u64().expect("ino");
        let paths = v["paths"]
            .as_array()
            .unwrap_or_else(|| panic!("inode {ino} has no paths array: {line}"));
        got.insert(
            ino,
            paths
                .iter()
                .map(|p| p.as_str().expect("path string").to_owned())
                .collect(),
        );
    }
    assert!(want.len() > 500, "{} inodes in the walk", want.len());
    let mut diffs = Vec::new();
    for (ino, paths) in &want {
        if got.get(ino) != Some(paths) {
            diffs.push(format!(
                "inode {ino}: kernel {paths:?}, xfskit {:?}",
                got.get(ino)
            ));
        }
    }
    for (ino, paths) in &got {
        if !want.contains_key(ino) {
            diffs.push(format!(
                "inode {ino}: not in the kernel's walk, xfskit {paths:?}"
            ));
        }
    }
    assert!(diffs.is_empty(), "bulkstat --paths:\n{}", diffs.join("\n"));
    // The table has the same paths, each on a line starting with a tab.
    let o = xfskit(&["bulkstat", "--paths", s(&img)]);
    assert!(o.status.success());
    let tabbed = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('\t'))
        .count();
    assert_eq!(tabbed, want.values().map(BTreeSet::len).sum::<usize>());

    // xfs_io 6.15 parent -p agrees, and stat --inode / stat PATH too.
    for (ino, paths) in &from_xfs_io {
        assert_eq!(
            Some(paths),
            want.get(ino),
            "xfs_io parent -p of inode {ino}"
        );
        let o = xfskit(&["stat", "--json", "--inode", &ino.to_string(), s(&img)]);
        assert!(o.status.success(), "stat --inode {ino}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let got: BTreeSet<String> = v["paths"]
            .as_array()
            .expect("paths")
            .iter()
            .map(|p| p.as_str().expect("string").to_owned())
            .collect();
        assert_eq!(&got, paths, "stat --inode {ino}");
        let first = paths.iter().next().expect("a path");
        let o = xfskit(&["stat", s(&img), first]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains(&format!("paths ({}):", paths.len())),
            "stat {first}: {text}"
        );
        for p in paths {
            assert!(
                text.contains(&format!("\n  {p}\n")),
                "stat {first}: {p} in {text}"
            );
        }
    }
    damaged_generation(&x615, &img, &want);
}

/// The inode whose path set holds `path`.
fn ino_of(paths: &BTreeMap<u64, BTreeSet<String>>, path: &str) -> u64 {
    *paths
        .iter()
        .find(|(_, ps)| ps.contains(path))
        .unwrap_or_else(|| panic!("{path} in the walk"))
        .0
}

/// A directory's generation changed behind its children's pointers: the
/// paths of a child are an error naming it (stat: exit 5; bulkstat: the
/// record says so, the scan goes on, exit 5).
fn damaged_generation(x615: &Path, img: &Path, want: &BTreeMap<u64, BTreeSet<String>>) {
    let bad = img.with_extension("bad.img");
    std::fs::copy(img, &bad).expect("copy");
    let dir = ino_of(want, "/d");
    let child = ino_of(want, "/d/one_renamed");
    run_ok(
        Command::new(x615.join("libexec/xfs_db"))
            .env("LD_LIBRARY_PATH", x615.join("lib"))
            .args([
                "-x",
                "-c",
                &format!("inode {dir}"),
                "-c",
                "write core.gen 12345",
            ])
            .arg(&bad),
        "xfs_db write core.gen",
    );
    let o = xfskit(&["stat", "--inode", &child.to_string(), s(&bad)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "stat of a child: {err}");
    assert!(
        err.contains(&format!("inode {child}")) && err.contains("generation"),
        "{err}"
    );
    let o = xfskit(&["bulkstat", "--paths", "--json", s(&bad)]);
    assert_eq!(o.status.code(), Some(5));
    let text = String::from_utf8_lossy(&o.stdout);
    let errors = text
        .lines()
        .filter(|l| l.contains("\"paths_error\""))
        .count();
    // Every inode with a name in /d: its files (less the one removed),
    // the renamed one and the linked one; no other.
    assert_eq!(errors, 401, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(text.lines().count(), want.len());
    std::fs::remove_file(&bad).ok();
}

/// The paths bulkstat --paths --json prints, by inode.
fn bulkstat_paths(args: &[&str]) -> (BTreeMap<u64, BTreeSet<String>>, String) {
    let o = xfskit(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut got = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let paths = v["paths"].as_array().expect("a paths array");
        got.insert(
            v["ino"].as_u64().expect("ino"),
            paths
                .iter()
                .map(|p| p.as_str().expect("path string").to_owned())
                .collect(),
        );
    }
    (got, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Without parent pointers (Debian's mkfs.xfs 6.1), --paths reads every
/// directory first and indexes its entries: every inode gets the paths
/// the kernel's walk finds, with the index in memory and, under a small
/// --memory, in temporary files. stat shows no paths there.
#[test]
fn paths_without_parent_pointers_come_from_every_directory() {
    const TEST: &str = "paths_without_parent_pointers_come_from_every_directory";
    if !is_root() {
        skip(TEST, "needs root for a read-write loop mount");
        return;
    }
    let tmp = TempDir::new("xfskit-nopptr");
    let img = tmp.path().join("plain.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(320 << 20))
        .expect("create image");
    run_ok(
        Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&img),
        "mkfs.xfs",
    );
    let mnt = tmp.path().join("mnt");
    let want = {
        let m = LoopMount::rw(&img, &mnt);
        fill(m.path());
        // Enough entries that a 1 MiB index spills.
        std::fs::create_dir(m.path().join("bulk")).expect("mkdir");
        for i in 0..40_000 {
            std::fs::write(m.path().join(format!("bulk/f{i:05}")), b"").expect("write");
        }
        kernel_paths(m.path())
    };
    for (memory, where_) in [("256m", "in memory"), ("1m", "in temporary files")] {
        let (got, err) = bulkstat_paths(&[
            "bulkstat",
            "--paths",
            "--json",
            "--stats",
            "--memory",
            memory,
            s(&img),
        ]);
        assert!(err.contains(where_), "--memory {memory}: {err}");
        let diffs: Vec<String> = want
            .iter()
            .filter(|(ino, p)| got.get(ino) != Some(p))
            .map(|(ino, p)| format!("inode {ino}: kernel {p:?}, xfskit {:?}", got.get(ino)))
            .chain(
                got.keys()
                    .filter(|ino| !want.contains_key(ino))
                    .map(|ino| format!("inode {ino}: not in the kernel's walk")),
            )
            .take(20)
            .collect();
        assert!(diffs.is_empty(), "--memory {memory}:\n{}", diffs.join("\n"));
    }
    assert!(want.len() > 40_500, "{} inodes", want.len());
    let o = xfskit(&["bulkstat", "--memory", "1m", s(&img)]);
    assert_eq!(o.status.code(), Some(2), "--memory without --paths");
    let o = xfskit(&["stat", "--json", "--inode", "128", s(&img)]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(v["paths"].is_null());
    assert_eq!(v["ino"], 128);
    let o = xfskit(&["stat", "--inode", "99999999999", s(&img)]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "an inode number outside the filesystem"
    );
}

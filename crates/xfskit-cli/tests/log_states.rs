//! Writing into every clean log state that xfsprogs and the kernel leave.
//!
//! `xfs_repair -L`, `xfs_copy`, `xfs_admin -U` and `xfs_mdrestore` clear
//! the log with libxfs: an unmount record at block 0 of a new cycle (2 or
//! more) and, behind it, blocks of the previous cycle with zeroed blocks
//! between. mkfs.xfs leaves an unmount record alone at block 0 of cycle 1.
//! From each state xfskit must write (an offline edit, a second one, the
//! read-write mount, `recover`) and leave a clean log each time; then
//! `xfs_repair -n` (xfsprogs 7.2) is clean, and the kernel mounts the image
//! and reads what was written.

mod common;

use common::fixtures::xfskit_ok as xfskit;

use common::fixtures::{tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::{is_root, must_umount, skip, TempDir};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// (clean, head block, head cycle) as `xfskit log` reports them.
fn log_state(img: &Path) -> (bool, u64, u32) {
    let out = xfskit(&["log", s(img)]);
    let clean = out.lines().next().is_some_and(|l| l.ends_with(", clean"));
    let head = out
        .lines()
        .find_map(|l| l.strip_prefix("head: block "))
        .unwrap_or_else(|| panic!("no head in:\n{out}"));
    let (b, c) = head.split_once(" cycle ").unwrap();
    (clean, b.parse().unwrap(), c.parse().unwrap())
}

fn assert_clean_log(img: &Path, after: &str) {
    let (clean, b, c) = log_state(img);
    assert!(
        clean,
        "{after}: the log is not clean (head {b} cycle {c}):\n{}",
        xfskit(&["log", "--transactions", s(img)])
    );
}

fn assert_repair_clean(bin: &Path, img: &Path, after: &str) {
    let out = Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{after}: xfs_repair -n 7.2 found problems:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh 512 MiB filesystem of mkfs.xfs 7.2's defaults.
fn mkfs(bin: &Path, img: &Path) {
    fs::File::create(img).unwrap().set_len(512 << 20).unwrap();
    tool_72(bin, "mkfs.xfs", &["-q", "-f", s(img)]);
}

/// The states, each made in `dir` from a fresh filesystem whose log was
/// first moved along by edits (so that a cleared log starts a new cycle).
fn make_state(bin: &Path, dir: &Path, state: &str) -> PathBuf {
    let base = dir.join("base.img");
    mkfs(bin, &base);
    if state == "mkfs" {
        return base;
    }
    xfskit(&["mkdir", s(&base), "/before"]);
    xfskit(&["cp", "/etc/hostname", &format!("{}:/before/", s(&base))]);
    let img = dir.join("state.img");
    match state {
        "xfs_repair -L" => {
            fs::rename(&base, &img).unwrap();
            tool_72(bin, "xfs_repair", &["-L", s(&img)]);
        }
        "xfs_copy" => {
            tool_72(bin, "xfs_copy", &[s(&base), s(&img)]);
        }
        "xfs_admin -U" => {
            fs::rename(&base, &img).unwrap();
            tool_72(bin, "xfs_admin", &["-U", "generate", s(&img)]);
        }
        "xfs_mdrestore" => {
            let dump = dir.join("md");
            // -o: names kept, so that the files written before are found.
            tool_72(bin, "xfs_metadump", &["-o", s(&base), s(&dump)]);
            tool_72(bin, "xfs_mdrestore", &[s(&dump), s(&img)]);
        }
        _ => unreachable!("{state}"),
    }
    img
}

const STATES: [&str; 5] = [
    "mkfs",
    "xfs_repair -L",
    "xfs_copy",
    "xfs_admin -U",
    "xfs_mdrestore",
];

/// Two edits in a row, then (as root) the read-write mount, then an edit
/// again; the log clean after each and the result clean and readable.
#[test]
fn edits_and_mounts_start_from_every_cleared_log() {
    let Some(bin) = xfsprogs_72_or_skip("edits_and_mounts_start_from_every_cleared_log") else {
        return;
    };
    for state in STATES {
        let tmp = TempDir::new("xfskit-logstate");
        let img = make_state(&bin, tmp.path(), state);
        let (clean, head, cycle) = log_state(&img);
        assert!(clean, "{state}: the tool left a dirty log");
        if state != "mkfs" {
            // The state this test is about: a new cycle begun at block 0.
            assert!(
                head == 0 && cycle > 1,
                "{state}: the log's head is block {head} of cycle {cycle}"
            );
        }
        let i = s(&img);
        xfskit(&["mkdir", i, "/one"]);
        assert_clean_log(&img, &format!("{state}, then mkdir"));
        xfskit(&["cp", "/etc/passwd", &format!("{i}:/one/passwd")]);
        assert_clean_log(&img, &format!("{state}, then mkdir and cp"));
        assert_repair_clean(&bin, &img, &format!("{state}, then two edits"));
        let want = fs::read("/etc/passwd").unwrap();
        let got = xfskit_output(&["cat", i, "/one/passwd"]).stdout;
        assert_eq!(got, want, "{state}: /one/passwd reads back wrong");
        if !is_root() || !Path::new("/dev/fuse").exists() {
            continue;
        }
        // The read-write mount, then an edit after it.
        let mnt = tmp.path().join("fuse");
        fs::create_dir_all(&mnt).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["mount", i, s(&mnt)])
            .spawn()
            .unwrap();
        wait_mounted(&mnt, &mut child);
        fs::write(mnt.join("two"), b"written through the mount\n").unwrap();
        must_umount(&mnt);
        assert!(
            child.wait().unwrap().success(),
            "{state}: xfskit mount failed"
        );
        assert_clean_log(&img, &format!("{state}, then the mount"));
        xfskit(&["mkdir", i, "/three"]);
        assert_clean_log(&img, &format!("{state}, then the mount and mkdir"));
        assert_repair_clean(&bin, &img, &format!("{state}, then the mount and mkdir"));
        // The kernel reads it all and writes, and xfskit writes after it.
        let k = tmp.path().join("kernel");
        fs::create_dir_all(&k).unwrap();
        let st = Command::new("mount")
            .args(["-o", "loop,nouuid", i, s(&k)])
            .status()
            .unwrap();
        assert!(st.success(), "{state}: the kernel did not mount the image");
        let read = (
            fs::read(k.join("one/passwd")),
            fs::read(k.join("two")),
            k.join("three").is_dir(),
            fs::write(k.join("by-kernel"), b"k\n"),
        );
        must_umount(&k);
        assert_eq!(
            read.0.unwrap(),
            want,
            "{state}: the kernel reads /one/passwd"
        );
        assert_eq!(
            read.1.unwrap(),
            b"written through the mount\n",
            "{state}: the kernel reads /two"
        );
        assert!(read.2, "{state}: the kernel finds no /three");
        read.3.unwrap();
        xfskit(&["mkdir", i, "/four"]);
        assert_clean_log(&img, &format!("{state}, then the kernel and mkdir"));
        assert_repair_clean(&bin, &img, &format!("{state}, then the kernel and mkdir"));
    }
    if !is_root() {
        skip(
            "edits_and_mounts_start_from_every_cleared_log (mount and kernel parts)",
            "not root",
        );
    }
}

/// `xfskit recover` of each state leaves a log that the next two edits
/// write into cleanly.
#[test]
fn recover_then_edits_from_every_cleared_log() {
    let Some(bin) = xfsprogs_72_or_skip("recover_then_edits_from_every_cleared_log") else {
        return;
    };
    for state in STATES {
        let tmp = TempDir::new("xfskit-logstate-rec");
        let img = make_state(&bin, tmp.path(), state);
        let i = s(&img);
        xfskit(&["recover", i]);
        assert_clean_log(&img, &format!("{state}, then recover"));
        xfskit(&["mkdir", i, "/a"]);
        xfskit(&["mkdir", i, "/a/b"]);
        assert_clean_log(&img, &format!("{state}, then recover and two edits"));
        assert_repair_clean(&bin, &img, &format!("{state}, then recover and two edits"));
        let ls = xfskit(&["ls", i, "/a"]);
        assert!(
            ls.lines().any(|l| l.ends_with('b')),
            "{state}: /a holds {ls}"
        );
    }
}

/// Waits until `mnt` is a mount point (the server is up), or fails when
/// the server exits first.
fn wait_mounted(mnt: &Path, child: &mut std::process::Child) {
    let want = fs::canonicalize(mnt).unwrap();
    // A bound against a hang only: the mount is normally up in well under
    // a second.
    let t0 = std::time::Instant::now();
    loop {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "no FUSE mount at {}",
            mnt.display()
        );
        let mounts = fs::read_to_string("/proc/mounts").unwrap();
        if mounts
            .lines()
            .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
        {
            return;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("xfskit mount exited before mounting: {st}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

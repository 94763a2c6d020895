//! Helpers shared by the tests that mount images (the kernel's loop mount
//! and xfskit's FUSE mount): why a test cannot run here, running a command,
//! whether a directory is a mount point, and a scratch directory that
//! unmounts what is left mounted in it. Included by path from the FUSE
//! crate's tests and the CLI's tests, so the two never drift apart.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Why a mount test cannot run on this machine (not root, no /dev/fuse,
/// no mkfs.xfs), or None when it can.
pub fn skip_reason() -> Option<String> {
    let uid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if uid != 0 {
        return Some("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if Command::new("mkfs.xfs").arg("-V").output().is_err() {
        return Some("mkfs.xfs is not installed".into());
    }
    None
}

/// Runs `cmd` with `args`; panics unless it succeeds.
pub fn run(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "{cmd} {args:?} failed: {st}");
}

/// True when `dir` is a mount point.
/// Unmounts `mnt` or panics. A mount is busy while any process has a file
/// in it; a child that another test thread is starting holds copies of
/// every file this thread has open until it execs, which on a loaded
/// machine may take a while, so a busy unmount is tried again (up to 50
/// times, 200 ms apart).
pub fn must_umount(mnt: &Path) {
    let mut last = String::new();
    for _ in 0..50 {
        let out = Command::new("umount").arg(mnt).output().expect("umount");
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        if !last.contains("busy") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("umount {}: {last}", mnt.display());
}

pub fn is_mounted(dir: &Path) -> bool {
    let want = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

/// A scratch directory with `fuse` and `kernel` mount points; on drop it
/// unmounts them (lazily) if still mounted, stops the mount process if
/// one is kept in `child`, and removes everything.
pub struct Scratch {
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Scratch {
    /// A fresh scratch directory under the temporary directory, with
    /// empty `kernel` and `fuse` mount points in it.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xfskit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("kernel")).unwrap();
        fs::create_dir_all(dir.join("fuse")).unwrap();
        Scratch { dir, child: None }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for m in ["fuse", "kernel"] {
            let p = self.dir.join(m);
            if is_mounted(&p) {
                let _ = Command::new("umount").arg("-l").arg(&p).status();
            }
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

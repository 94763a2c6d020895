//! Helpers shared by the tests that mount images (the kernel's loop mount
//! and xfskit's FUSE mount): why a test cannot run here, running a command,
//! and a scratch directory that unmounts what is left mounted in it and
//! stops the FUSE server (unmounting itself and the scratch directory come
//! from xfskit-testkit). Included by path from the FUSE crate's tests and
//! the CLI's tests, so the two never drift apart.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Why a mount test cannot run on this machine (not root, no /dev/fuse,
/// no mkfs.xfs), or None when it can.
pub fn skip_reason() -> Option<String> {
    if !xfskit_testkit::is_root() {
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

pub use xfskit_testkit::{is_mounted, must_umount};

/// A scratch directory with `fuse` and `kernel` mount points; on drop it
/// unmounts them (lazily) if still mounted, stops the mount process if
/// one is kept in `child`, and removes everything.
pub struct Scratch {
    pub dir: PathBuf,
    pub child: Option<Child>,
    tmp: xfskit_testkit::Scratch,
}

impl Scratch {
    /// A fresh scratch directory under the temporary directory, with
    /// empty `kernel` and `fuse` mount points in it.
    pub fn new(tag: &str) -> Scratch {
        let tmp = xfskit_testkit::Scratch::new(tag);
        tmp.mkdir("kernel");
        tmp.mkdir("fuse");
        Scratch {
            dir: tmp.path().to_path_buf(),
            child: None,
            tmp,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The mounts first (the FUSE one while its server still runs),
        // then the server; `tmp` removes the directory after.
        xfskit_testkit::umount_all_in(self.tmp.path());
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

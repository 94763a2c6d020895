//! `umount` that waits out a mount that is busy for a moment.
//!
//! A mount is busy while any process has a file or its working directory in
//! it. Two such holders come and go by themselves: a walk of /tmp by another
//! program beside the tests (find, du), and a child that another test
//! thread of the same binary is starting, which holds copies of every file
//! this thread has open until it execs (on a loaded machine the child may
//! wait for a CPU between the two). So a busy unmount is tried again, up to
//! 50 times 200 ms apart, before its failure is returned.

use std::path::Path;
use std::process::Command;

/// Runs `umount mnt`: whether it worked, and umount's output.
pub fn umount(mnt: &Path) -> (bool, String) {
    let mut last = String::new();
    for _ in 0..50 {
        let out = match Command::new("umount").arg(mnt).output() {
            Ok(o) => o,
            Err(e) => return (false, format!("umount: {e}")),
        };
        if out.status.success() {
            return (true, String::new());
        }
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !last.contains("busy") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    (false, last)
}

/// Unmounts `mnt` or panics with umount's message.
#[allow(dead_code)]
pub fn must_umount(mnt: &Path) {
    let (ok, out) = umount(mnt);
    assert!(ok, "umount {}: {out}", mnt.display());
}

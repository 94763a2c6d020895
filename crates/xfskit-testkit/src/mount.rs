//! `umount` that waits out a mount that is busy for a moment.
//!
//! A mount is busy while any process has a file or its working directory in
//! it. Two such holders come and go by themselves: a walk of /tmp by another
//! program beside the tests (find, du), and a child that another test
//! thread of the same binary is starting, which holds copies of every file
//! this thread has open until it execs (on a loaded machine the child may
//! wait for a CPU between the two). So a busy unmount is tried again, up to
//! 50 times 200 ms apart, before its failure is returned.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `umount mnt`, again while it is busy: whether it worked, and
/// umount's output when it did not.
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

/// Unmounts `mnt` (see [`umount`]); true when it worked.
pub fn umount_retrying(mnt: &Path) -> bool {
    umount(mnt).0
}

/// Unmounts `mnt` (see [`umount`]) or panics with umount's message,
/// unless the thread is already unwinding (a guard's `drop` calls it
/// then, and a second panic would abort). A caller that ignored a failed
/// unmount would let the test go on to read an image the kernel still
/// has mounted, whose superblock counters it has not written yet.
pub fn must_umount(mnt: &Path) {
    let (ok, out) = umount(mnt);
    if !ok && !std::thread::panicking() {
        panic!("umount {}: {out}", mnt.display());
    }
}

/// The mount points in /proc/mounts (octal escapes such as `\040` for a
/// space decoded).
fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .map(|m| PathBuf::from(unescape(m)))
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// True when `dir` is a mount point.
pub fn is_mounted(dir: &Path) -> bool {
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mount_points().contains(&want)
}

/// Unmounts whatever is mounted at or below `dir`, deepest first: a plain
/// unmount, and a lazy one if that fails (for a guard's `drop`, which
/// must not leave mounts behind).
pub fn umount_all_in(dir: &Path) {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return;
    };
    let mut below: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&dir))
        .collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in below {
        let ok = Command::new("umount")
            .arg(&m)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&m).output();
        }
    }
}

/// A mount point, unmounted (see [`must_umount`]) when dropped, so that a
/// test that fails part way does not leave its mounts behind.
#[derive(Debug)]
pub struct Mounted(pub PathBuf);

impl Mounted {
    /// Runs `mount <args> <at>` (making `at` if missing); panics unless it
    /// works.
    pub fn new(args: &[&str], at: &Path) -> Mounted {
        std::fs::create_dir_all(at).unwrap_or_else(|e| panic!("mkdir {}: {e}", at.display()));
        let o = Command::new("mount")
            .args(args)
            .arg(at)
            .output()
            .unwrap_or_else(|e| panic!("mount: {e}"));
        assert!(
            o.status.success(),
            "mount {args:?} {}: {}{}",
            at.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Mounted(at.to_path_buf())
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        must_umount(&self.0);
    }
}

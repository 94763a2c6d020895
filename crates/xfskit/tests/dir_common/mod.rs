//! Shared helpers for the directory tests: images made by mkfs.xfs and
//! populated through a kernel loop mount.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../umount_retry/mod.rs"]
#[allow(clippy::duplicate_mod)] // several helper modules of one test file include it
mod umount_retry;

/// A sparse image file and, while populated, its mount point.
pub struct Image {
    pub path: PathBuf,
    pub mnt: PathBuf,
    mounted: bool,
}

/// Returns why the root-only tests cannot run, if they cannot.
pub fn cannot_run() -> Option<String> {
    if euid() != Some(0) {
        return Some("not root (loop mounts need root)".into());
    }
    for tool in ["mkfs.xfs", "xfs_db", "mount", "umount"] {
        if Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

fn euid() -> Option<u32> {
    let out = Command::new("id").arg("-u").output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

impl Image {
    /// Makes a 300 MiB image with `mkfs.xfs -f <args>` and mounts it.
    pub fn mkfs_mounted(tag: &str, args: &[&str]) -> Image {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let base =
            std::env::temp_dir().join(format!("xfskit-dir-{}-{tag}-{n}", std::process::id()));
        let path = base.with_extension("img");
        let mnt = base.with_extension("mnt");
        let f = std::fs::File::create(&path).expect("create image");
        f.set_len(300 << 20).expect("size image");
        drop(f);
        let st = Command::new("mkfs.xfs")
            .args(["-q", "-f"])
            .args(args)
            .arg(&path)
            .status()
            .expect("mkfs.xfs");
        assert!(st.success(), "mkfs.xfs {args:?} failed");
        std::fs::create_dir_all(&mnt).expect("mount point");
        let mut img = Image {
            path,
            mnt,
            mounted: false,
        };
        let st = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img.path)
            .arg(&img.mnt)
            .status()
            .expect("mount");
        assert!(st.success(), "mount failed");
        img.mounted = true;
        img
    }

    /// Unmounts (flushing everything to the image).
    pub fn unmount(&mut self) {
        if self.mounted {
            umount_retry::must_umount(&self.mnt);
            self.mounted = false;
        }
    }

    /// Runs xfs_db read-only with the given commands; returns stdout.
    pub fn xfs_db(&self, cmds: &[String]) -> String {
        let mut c = Command::new("xfs_db");
        c.arg("-r");
        for cmd in cmds {
            c.arg("-c").arg(cmd);
        }
        let out = c.arg(&self.path).output().expect("xfs_db");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.mnt).status();
        }
        let _ = std::fs::remove_dir(&self.mnt);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A long, distinct entry name.
pub fn long_name(i: usize) -> String {
    format!("entry-{i:06}-{}", "x".repeat(150 + i % 60))
}

/// Creates `n` empty files with long names in `dir`.
pub fn populate(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for i in 0..n {
        std::fs::File::create(dir.join(long_name(i))).expect("create file");
    }
}

/// (name, inode) pairs of a directory as the kernel lists it, sorted.
pub fn kernel_listing(dir: &Path) -> Vec<(Vec<u8>, u64)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::DirEntryExt;
    let mut v: Vec<(Vec<u8>, u64)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().as_bytes().to_vec(), e.ino())
        })
        .collect();
    v.sort();
    v
}

/// Inode number of a path.
pub fn ino_of(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).expect("stat").ino()
}

//! Shared helpers for the directory tests: images made by mkfs.xfs and
//! populated through a kernel loop mount.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// An image made by mkfs.xfs, with its mount point.
pub use xfskit_testkit::LoopImage as Image;

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

/// Makes a 300 MiB image with `mkfs.xfs -f <args>` and mounts it.
pub fn mkfs_mounted(tag: &str, args: &[&str]) -> Image {
    let mut img = Image::mkfs(&format!("dir-{tag}"), 300 << 20, args);
    img.mount("loop");
    img
}

/// Runs xfs_db read-only on `img` with the given commands; returns stdout.
pub fn xfs_db(img: &Image, cmds: &[String]) -> String {
    let mut c = Command::new("xfs_db");
    c.arg("-r");
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    let out = c.arg(&img.path).output().expect("xfs_db");
    String::from_utf8_lossy(&out.stdout).into_owned()
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

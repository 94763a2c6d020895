//! An image file made by mkfs.xfs, loop-mounted by the kernel.

use crate::{must_umount, Scratch};
use std::path::PathBuf;
use std::process::Command;

/// A sparse image file made by the installed mkfs.xfs in its own scratch
/// directory, and a mount point beside it (`mnt`). Dropping it unmounts
/// the image if a failed step left it mounted and removes both.
#[derive(Debug)]
pub struct LoopImage {
    /// The image file.
    pub path: PathBuf,
    /// Its mount point.
    pub mnt: PathBuf,
    mounted: bool,
    _dir: Scratch,
}

impl LoopImage {
    /// A `size`-byte sparse file formatted with `mkfs.xfs -q -f <args>`;
    /// panics unless mkfs.xfs succeeds.
    pub fn mkfs(tag: &str, size: u64, args: &[&str]) -> LoopImage {
        let dir = Scratch::new(tag);
        let path = dir.join("fs.img");
        let mnt = dir.mkdir("mnt");
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        let o = Command::new("mkfs.xfs")
            .args(["-q", "-f"])
            .args(args)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("mkfs.xfs: {e}"));
        assert!(
            o.status.success(),
            "mkfs.xfs {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        LoopImage {
            path,
            mnt,
            mounted: false,
            _dir: dir,
        }
    }

    /// Mounts the image at `mnt` with `mount -o <opts>` (`loop` and
    /// more); panics unless it works.
    pub fn mount(&mut self, opts: &str) {
        let o = Command::new("mount")
            .args(["-o", opts])
            .arg(&self.path)
            .arg(&self.mnt)
            .output()
            .unwrap_or_else(|e| panic!("mount: {e}"));
        assert!(
            o.status.success(),
            "mount -o {opts} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        self.mounted = true;
    }

    /// Unmounts the image if it is mounted (see [`must_umount`]), which
    /// writes everything the kernel holds to the image.
    pub fn umount(&mut self) {
        if self.mounted {
            must_umount(&self.mnt);
            self.mounted = false;
        }
    }
}

//! Images for the edit and build-into-disk tests, made with the real tools:
//! a bare filesystem (mkfs.xfs), a GPT disk (sgdisk, then mkfs.xfs through
//! a loop device over the partition) and a qcow2 copy of such a disk
//! (qemu-img convert). Each can be checked with xfs_repair -n (and
//! qemu-img check) and mounted by the kernel.

use super::disks::{partx_range, sh, sparse_file, DevMount, LoopRange};
use std::path::{Path, PathBuf};

pub const MIB: u64 = 1 << 20;

/// What holds the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The file is the filesystem.
    Bare,
    /// A raw GPT disk, XFS in partition 2.
    Gpt,
    /// A qcow2 GPT disk, XFS in partition 2.
    Qcow2,
}

/// One test image.
pub struct Image {
    pub kind: Kind,
    pub path: PathBuf,
    /// Scratch directory for raw copies of qcow2 images.
    scratch: PathBuf,
}

impl Image {
    /// Makes an image of `kind` holding an empty filesystem of 320 MiB.
    pub fn make(kind: Kind, dir: &Path) -> Image {
        let raw = dir.join(format!("{kind:?}.raw"));
        match kind {
            Kind::Bare => {
                sparse_file(&raw, 320 * MIB);
                sh(&format!("mkfs.xfs -q '{}'", raw.display()));
            }
            Kind::Gpt | Kind::Qcow2 => {
                sparse_file(&raw, 350 * MIB);
                sh(&format!(
                    "sgdisk -n1:2048:+8M -t1:ef00 -n2:0:+320M -t2:8300 '{}' >/dev/null",
                    raw.display()
                ));
                let (s, n) = partx_range(&raw, 2);
                let l = LoopRange::new(&raw, s, n);
                sh(&format!("mkfs.xfs -q {}", l.dev));
            }
        }
        let path = if kind == Kind::Qcow2 {
            let q = dir.join("disk.qcow2");
            sh(&format!(
                "qemu-img convert -O qcow2 '{}' '{}' && rm -f '{0}'",
                raw.display(),
                q.display()
            ));
            q
        } else {
            raw
        };
        Image {
            kind,
            path,
            scratch: dir.to_path_buf(),
        }
    }

    /// The image path as a string.
    pub fn s(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }

    /// A raw file holding the disk (the qcow2 converted), kept until the
    /// next call.
    fn raw(&self) -> PathBuf {
        if self.kind != Kind::Qcow2 {
            return self.path.clone();
        }
        let r = self.scratch.join("qcow2-as-raw.img");
        sh(&format!(
            "rm -f '{1}'; qemu-img convert -O raw '{}' '{}'",
            self.path.display(),
            r.display()
        ));
        r
    }

    /// A loop device over the filesystem.
    pub fn loop_dev(&self) -> LoopRange {
        let raw = self.raw();
        let (s, n) = match self.kind {
            Kind::Bare => (0, std::fs::metadata(&raw).expect("stat").len()),
            _ => partx_range(&raw, 2),
        };
        LoopRange::new(&raw, s, n)
    }

    /// xfs_repair -n finds the filesystem clean and, for qcow2, qemu-img
    /// check finds the file clean; `after` names the step in failures.
    pub fn assert_clean(&self, after: &str) {
        if self.kind == Kind::Qcow2 {
            let out = sh(&format!(
                "qemu-img check '{}' 2>&1 && echo QCOW2-CLEAN || true",
                self.path.display()
            ));
            assert!(
                out.contains("QCOW2-CLEAN"),
                "{:?} after {after}: qemu-img check:\n{out}",
                self.kind
            );
        }
        let l = self.loop_dev();
        let out = sh(&format!(
            "{} -n {} 2>&1 && echo REPAIR-CLEAN || true",
            super::fixtures::repair_sh(),
            l.dev
        ));
        assert!(
            out.contains("REPAIR-CLEAN"),
            "{:?} after {after}: xfs_repair -n:\n{out}",
            self.kind
        );
    }

    /// Mounts the filesystem read-only with the kernel (at `dir`) and runs `f`.
    pub fn with_mount<T>(&self, dir: &Path, f: impl FnOnce(&Path) -> T) -> T {
        let l = self.loop_dev();
        let m = DevMount::new(&l.dev, dir, true);
        let r = f(&m.dir);
        drop(m);
        drop(l);
        r
    }
}

/// The walk of `root` with modification times cleared except where
/// `keep_time` says they were set on purpose.
pub fn walk_times(root: &Path, keep_time: impl Fn(&str) -> bool) -> Vec<super::Entry> {
    let mut w = super::walk_host(root);
    for e in &mut w {
        if !keep_time(&e.path) {
            e.mtime_sec = 0;
            e.mtime_nsec = 0;
        }
    }
    w
}

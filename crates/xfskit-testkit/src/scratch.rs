//! Scratch directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh temporary directory, removed on drop. Before it is removed,
/// whatever is still mounted in it (a `mnt` a failed test did not
/// unmount, a FUSE mount) is unmounted (see [`crate::umount_all_in`]).
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new, empty directory under the temporary directory, named
    /// after `tag` (prefixed `xfskit-` unless it already is), the process
    /// id and a counter, so that the tests of one binary never share one.
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pre = if tag.starts_with("xfskit") {
            ""
        } else {
            "xfskit-"
        };
        let p = std::env::temp_dir().join(format!("{pre}{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        Scratch(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` in the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }

    /// Makes the directory `name` in it (and its parents); returns its path.
    pub fn mkdir(&self, name: impl AsRef<Path>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::umount_all_in(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

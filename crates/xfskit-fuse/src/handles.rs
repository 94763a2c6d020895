//! Open file and directory handles, keyed by the FUSE `fh`.
//!
//! A regular file's handle holds a [`FileReader`] with the file's extent
//! map, loaded once at open; reads through the handle do no metadata I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use xfskit::inode::{FileReader, Inode};

/// What an open handle refers to.
#[derive(Clone)]
pub enum Handle {
    /// An open regular file with its cached mapping.
    File(Arc<FileReader<'static>>),
    /// An open directory with its inode.
    Dir(Arc<Inode>),
}

/// The table of open handles.
#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    map: RwLock<HashMap<u64, Handle>>,
}

impl Handles {
    /// Stores `h` and returns its new `fh` (never 0).
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        if let Ok(mut m) = self.map.write() {
            m.insert(fh, h);
        }
        fh
    }

    /// The handle `fh`, if open.
    pub fn get(&self, fh: u64) -> Option<Handle> {
        self.map.read().ok()?.get(&fh).cloned()
    }

    /// Forgets `fh`.
    pub fn remove(&self, fh: u64) {
        if let Ok(mut m) = self.map.write() {
            m.remove(&fh);
        }
    }
}

//! Files that lose their last name while open, and directories removed
//! or replaced by a rename while open, stay usable (a directory statable,
//! with no links) until the kernel lets go of them, as on a kernel mount.
//!
//! The kernel holds a FUSE inode for as long as it has a lookup count on
//! it: every reply that hands it an inode (lookup, create, mknod, mkdir,
//! symlink, link) adds one, FORGET takes them back. With `no_open` the
//! kernel sends no OPEN or RELEASE, so the lookup count is the only sign
//! of an open file. An unlink, rmdir or rename that drops the last link of an
//! inode the kernel still holds leaves it an orphan in the engine (link
//! count 0, on the AGI unlinked list); the FORGET that brings its count
//! to zero frees it, and so does the end of the mount.
//!
//! The counts have their own lock, held only for a moment and never
//! while the engine works: the engine asks [`XfsFuse::in_use`] in the
//! middle of an unlink transaction. The orphans have another, held while
//! one is freed (the engine frees one at a time); a count reaching zero
//! and an orphan being recorded both look under it, so an orphan is freed
//! exactly once whichever comes first.

use crate::errno::to_errno;
use crate::ops::XfsFuse;
use fuser::Errno;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use xfskit::Ino;

/// Lookup counts and orphans of a read-write mount.
#[derive(Default)]
pub(crate) struct Orphans {
    lookups: Mutex<HashMap<u64, u64>>,
    orphans: Mutex<HashSet<u64>>,
}

impl XfsFuse {
    /// Counts one more kernel reference to `ino` (a reply handed it out).
    pub(crate) fn count_lookup(&self, ino: Ino) {
        if !self.writable {
            return;
        }
        if let Ok(mut l) = self.orphans.lookups.lock() {
            *l.entry(ino.0).or_insert(0) += 1;
        }
    }

    /// True while the kernel holds `ino`.
    pub(crate) fn in_use(&self, ino: Ino) -> bool {
        self.orphans
            .lookups
            .lock()
            .map(|l| l.contains_key(&ino.0))
            .unwrap_or(true)
    }

    /// FORGET: the kernel drops `n` references to `ino`; an orphan whose
    /// count reaches zero is freed.
    pub(crate) fn forget_lookups(&self, ino: Ino, n: u64) {
        if !self.writable {
            return;
        }
        let gone = match self.orphans.lookups.lock() {
            Ok(mut l) => match l.get_mut(&ino.0) {
                Some(c) if *c > n => {
                    *c -= n;
                    false
                }
                Some(_) => {
                    l.remove(&ino.0);
                    true
                }
                None => false,
            },
            Err(_) => false,
        };
        if !gone {
            return;
        }
        if let Ok(mut o) = self.orphans.orphans.lock() {
            if o.remove(&ino.0) {
                self.free(ino);
            }
        }
    }

    /// Records `ino`, just left without names, as an orphan, or frees it
    /// at once if the kernel let go of it meanwhile.
    pub(crate) fn keep_orphan(&self, ino: Ino) {
        let Ok(mut o) = self.orphans.orphans.lock() else {
            return;
        };
        if self.in_use(ino) {
            o.insert(ino.0);
        } else {
            self.free(ino);
        }
    }

    /// Frees every orphan (the mount is ending).
    pub(crate) fn free_all_orphans(&self) {
        let Ok(mut o) = self.orphans.orphans.lock() else {
            return;
        };
        let all: Vec<u64> = o.drain().collect();
        for ino in all {
            self.free(Ino(ino));
        }
    }

    /// Frees one orphan (called with the orphans locked, which keeps frees
    /// one at a time as the engine wants); a failure is logged, not fatal.
    fn free(&self, ino: Ino) {
        if self.fs.is_shut_down() {
            // Nothing is written any more: the orphan stays on its
            // unlinked list, which the next mount's recovery frees.
            return;
        }
        self.behind.settle(ino);
        if let Err(e) = self.fs.free_orphan(ino) {
            let errno: Errno = to_errno(&e);
            eprintln!(
                "xfskit-fuse: freeing unlinked inode {} failed: {e} ({errno:?})",
                ino.0
            );
        }
    }
}

//! Counters kept in memory between transactions: the superblock's lazy
//! counters' deltas, and which inodes' change counters were queried.

use crate::buf::fasthash::FastSet;
use std::sync::Mutex;

/// Superblock counters changed by transactions (lazy counters: kept in
/// memory, written to the primary superblock at sync).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SbDelta {
    /// Allocated inodes.
    pub icount: i64,
    /// Free inodes among the allocated ones.
    pub ifree: i64,
    /// Free data blocks.
    pub fdblocks: i64,
}

impl SbDelta {
    /// Adds `o` to `self`.
    pub fn add(&mut self, o: &SbDelta) {
        self.icount += o.icount;
        self.ifree += o.ifree;
        self.fdblocks += o.fdblocks;
    }
}

/// Inodes whose change counter was queried since its last increment.
#[derive(Default)]
pub struct ChangeQueries(Mutex<FastSet<u64>>);

impl ChangeQueries {
    /// Marks inode `ino`'s change counter as seen by someone.
    pub(super) fn mark(&self, ino: u64) {
        super::state::lock(&self.0).insert(ino);
    }

    /// True (once) when `ino`'s counter was queried since its last
    /// increment.
    pub(super) fn take(&self, ino: u64) -> bool {
        super::state::lock(&self.0).remove(&ino)
    }
}

//! The pending set: committed metadata not yet written back.
//!
//! A commit publishes its buffers and inodes here (`WriteState::publish`)
//! and adds them to the journal's next checkpoint, under one lock, so a
//! checkpoint holds all of a transaction or none of it. Committed buffers
//! live in `dirty`, keyed by byte offset, until writeback
//! (`writeback.rs`). Reads consult them (`WriteState::get`) before the
//! cache and the device, so committed state is always what the next
//! transaction sees.

use super::state::{lock, WriteState};
use super::SbDelta;
use crate::geometry::Ino;
use crate::log::buftype::BufKind;
use crate::log::cil::DirtyMap;
use crate::log::item_inode::Icreate;
use std::sync::Arc;

/// Counts of the writes issued, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Write system calls (a vectored write counts once).
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// A committed buffer waiting for writeback. Its CRC is stamped at
/// writeback, once, however many transactions changed it.
#[derive(Clone)]
pub struct Pending {
    /// The bytes (CRC field stale until writeback).
    pub data: Arc<[u8]>,
    /// Where the CRC goes, if the block has one.
    pub crc_off: Option<usize>,
    /// Where the block's LSN goes and the LSN of the last checkpoint that
    /// logged it (stamped at writeback, before the CRC).
    pub lsn: Option<(usize, u64)>,
}

/// What a commit hands the pending set and the journal, applied at once
/// under the pending set's lock so a checkpoint holds all of a transaction
/// or none of it.
/// A changed buffer as a commit hands it over: byte offset, the pending
/// copy, and its dirty chunks and kind (None: not logged).
pub(crate) type CommitBuf = (u64, Pending, Option<(DirtyMap, BufKind)>);

#[derive(Default)]
pub(crate) struct Commit {
    /// Changed buffers.
    pub bufs: Vec<CommitBuf>,
    /// Changed inodes: byte offset, number, bytes (CRC stamped), and
    /// whether the log needs them (not when an icreate covers them).
    pub inodes: Vec<(u64, Ino, Arc<[u8]>, bool)>,
    /// New inode chunks, logged as icreate items.
    pub icreates: Vec<Icreate>,
    /// Freed byte ranges.
    pub freed: Vec<(u64, u64)>,
    /// Freed buffers: byte offset and length.
    pub stale: Vec<(u64, usize)>,
    /// Byte ranges allocated to file data.
    pub allocated: Vec<(u64, u64)>,
    /// Byte ranges whose reference count dropped.
    pub unshared: Vec<(u64, u64)>,
    /// Done items to log (the regions of each).
    pub done: Vec<Vec<Vec<u8>>>,
    /// Changed dquot records, logged as dquot items.
    pub dquots: Vec<crate::log::cil::CilDquot>,
    /// Byte offsets of the inodes (among `inodes`, logged) whose
    /// `di_next_unlinked` changed: their clusters are logged as inode
    /// buffers too.
    pub unlinked: Vec<u64>,
}

/// What the committer should do after publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Nothing.
    Nothing,
    /// Write the pending set back (it passed its limits, or the log needs
    /// its tail moved).
    Writeback,
    /// Write the next checkpoint (it grew large).
    Force,
}

impl WriteState {
    /// The committed, not yet written, bytes at byte offset `off` with
    /// exactly `len` bytes, if any.
    pub fn get(&self, off: u64, len: usize) -> Option<Arc<[u8]>> {
        let d = lock(&self.dirty);
        if let Some(b) = d.get(off) {
            return (b.data.len() == len).then(|| b.data.clone());
        }
        // Still held while looking: a buffer moves from `dirty` to the
        // flight under this lock, so it is always in one of them.
        let f = lock(&self.inflight);
        f.as_ref().and_then(|f| f.stream.get(off, len))
    }

    /// Publishes a transaction: drops what it freed, queues cancels for
    /// freed blocks the log holds, publishes its buffers and inodes and adds
    /// them to the next checkpoint, all under one lock; then applies its
    /// counter deltas. Says what the caller should do next.
    pub(crate) fn publish(&self, c: Commit, delta: &SbDelta) -> After {
        let mut added = 0usize;
        let mut removed = 0usize;
        let next;
        {
            let mut d = lock(&self.dirty);
            let mut j = self.journal.get().map(lock);
            for &(lo, hi) in &c.freed {
                for k in d.keys_in(lo, hi) {
                    if let Some(old) = d.remove(k) {
                        removed += old.data.len();
                    }
                }
                if let Some(j) = j.as_mut() {
                    j.freed(lo, hi);
                }
            }
            for &(off, len) in &c.stale {
                if let Some(old) = d.remove(off) {
                    removed += old.data.len();
                }
                if let Some(j) = j.as_mut() {
                    j.freed(off, off + len as u64);
                }
            }
            if let Some(j) = j.as_mut() {
                for &(lo, hi) in &c.allocated {
                    j.allocated(lo, hi);
                }
                for &(lo, hi) in &c.unshared {
                    j.unshared(lo, hi);
                }
            }
            for (off, b, log) in c.bufs {
                if let (Some(j), Some((map, kind))) = (j.as_mut(), log) {
                    j.add_buf(off, b.data.clone(), map, kind);
                }
                added += b.data.len();
                if let Some(old) = d.insert(off, b) {
                    removed += old.data.len();
                }
            }
            if let Some(j) = j.as_mut() {
                for r in c.done {
                    j.add_done(r);
                }
                for q in c.dquots {
                    j.add_dquot(q);
                }
                for ic in c.icreates {
                    // Checked at open: the geometry maps every cluster.
                    if let Err(e) = j.add_icreate(ic) {
                        debug_assert!(false, "{e}");
                    }
                }
            }
            for (off, ino, data, logged) in c.inodes {
                if let (Some(j), true) = (j.as_mut(), logged) {
                    if let Err(e) = j.add_inode(off, ino, data.clone()) {
                        debug_assert!(false, "{e}");
                    }
                }
                added += data.len();
                let p = Pending {
                    data,
                    crc_off: None,
                    lsn: None,
                };
                if let Some(old) = d.insert(off, p) {
                    removed += old.data.len();
                }
            }
            if let Some(j) = j.as_mut() {
                for off in c.unlinked {
                    j.add_unlinked(off);
                }
            }
            lock(&self.counters).add(delta);
            next = match j.as_ref() {
                Some(j) if j.is_held() => After::Nothing,
                Some(j) if j.needs_tail_move() => After::Writeback,
                Some(j) if j.cil_full() => After::Force,
                _ => After::Nothing,
            };
        }
        let held = next == After::Nothing && self.journal.get().is_some_and(|j| lock(j).is_held());
        for &(lo, hi) in &c.freed {
            self.forget_data(lo, hi);
        }
        for &(off, len) in &c.stale {
            self.forget_data(off, off + len as u64);
        }
        if self.account(added, removed) && !held {
            After::Writeback
        } else {
            next
        }
    }

    /// Counts published bytes; true when past the limit.
    fn account(&self, added: usize, removed: usize) -> bool {
        let mut n = lock(&self.dirty_bytes);
        *n = (*n + added).saturating_sub(removed);
        *n >= self.dirty_limit
    }

    /// Accumulated counter deltas since open.
    pub fn counters(&self) -> SbDelta {
        *lock(&self.counters)
    }

    /// Write statistics so far.
    pub fn stats(&self) -> WriteStats {
        *lock(&self.stats)
    }
}

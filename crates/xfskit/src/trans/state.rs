//! What an open-for-writing filesystem keeps between transactions, one
//! part per concern, each in its own file:
//!
//! - the pending set of committed metadata not yet written back and the
//!   superblock counter deltas (`pending.rs`), written back sorted and
//!   merged, with the journal's checkpoints first (`writeback.rs`, the
//!   writer thread in `flight.rs`);
//! - the data write combiner (`combiner.rs`, its runs in `datarun.rs`);
//! - the journal handle (`log_handle.rs`);
//! - per-AG and per-inode lock sets (`locks.rs`);
//! - allocation policy: rotors, filestreams, realtime frees (`policy.rs`);
//! - the clock (`clock.rs`), inode generation numbers (`generations.rs`),
//!   change counters queried (`counters.rs`) and quota state
//!   (`quota_state.rs`).
//!
//! The pending set, the combiner, the writer and the journal are locked
//! together by writeback and checkpoints (in that order: the writer, the
//! data runs, the pending set, the journal), so they are fields of
//! [`WriteState`] itself, its methods split by concern over those files;
//! the other parts are structs of their own.

use super::clock::Clock;
use super::counters::{ChangeQueries, SbDelta};
use super::datarun::DataRun;
use super::dirty::Dirty;
use super::flight::{join, Flight};
use super::generations::Generations;
use super::locks::LockSet;
use super::log_handle::LogHandle;
use super::pending::WriteStats;
use super::policy::AllocPolicy;
use super::quota_state::QuotaState;
use crate::log::journal::{Journal, LogStats};
use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, MutexGuard};

/// Write-side state of an open filesystem.
pub struct WriteState {
    /// Committed buffers not yet written back (`pending.rs`).
    pub(super) dirty: Mutex<Dirty>,
    /// Their bytes.
    pub(super) dirty_bytes: Mutex<usize>,
    /// Superblock counter deltas since open.
    pub(super) counters: Mutex<SbDelta>,
    /// Writes back once this many committed bytes are pending.
    pub dirty_limit: usize,
    /// Pending file data (`combiner.rs`).
    pub(super) data: Mutex<DataRun>,
    /// Streams started by `queue` (the first are smaller).
    pub(super) streams: AtomicU32,
    /// Writes pending file data back once this many bytes are pending.
    pub data_limit: usize,
    /// Write statistics (`writeback.rs`).
    pub(super) stats: Mutex<WriteStats>,
    /// Reused buffer for gathering short pieces of one write.
    pub(super) scratch: Mutex<Vec<u8>>,
    /// Held by whoever writes back (synchronously or by starting or
    /// waiting for a writer thread), so writebacks never overlap.
    pub(super) writer: Mutex<()>,
    /// The pending set being written by a writer thread, if any.
    pub(super) inflight: Mutex<Option<Flight>>,
    /// The tail the log may move to when the writer thread's stream is
    /// written.
    pub(super) flight_tail: Mutex<Option<u64>>,
    /// Largest single write.
    pub max_write: usize,
    /// The log writer (none: changes go in place at writeback only, as a
    /// build of a new image does).
    pub(super) journal: LogHandle,
    /// Per-AG locks.
    pub ags: LockSet,
    /// Per-inode locks.
    pub inodes: LockSet,
    /// Where allocations start, and what they wait for.
    pub alloc: AllocPolicy,
    /// The time stamped on changes.
    pub clock: Clock,
    /// Source of inode generation numbers.
    gens: Generations,
    /// Inodes whose change counter was queried since its last increment.
    queried: ChangeQueries,
    /// Quota "checked" bits and accounting.
    pub(crate) quota: QuotaState,
}

/// Locks `m`, taking over a lock whose holder panicked.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WriteState {
    /// Fresh state.
    pub fn new() -> WriteState {
        WriteState {
            dirty: Mutex::new(Dirty::default()),
            dirty_bytes: Mutex::new(0),
            counters: Mutex::new(SbDelta::default()),
            dirty_limit: 128 << 20,
            data: Mutex::new(DataRun::default()),
            streams: AtomicU32::new(0),
            data_limit: 32 << 20,
            stats: Mutex::new(WriteStats::default()),
            scratch: Mutex::new(Vec::new()),
            writer: Mutex::new(()),
            inflight: Mutex::new(None),
            flight_tail: Mutex::new(None),
            max_write: 8 << 20,
            journal: LogHandle::default(),
            ags: LockSet::default(),
            inodes: LockSet::default(),
            alloc: AllocPolicy::default(),
            clock: Clock::default(),
            gens: Generations::new(),
            queried: ChangeQueries::default(),
            quota: QuotaState::default(),
        }
    }

    /// Turns on the journal: every commit is logged before it is written
    /// in place.
    pub(crate) fn set_journal(&mut self, j: Journal) {
        self.journal.set(j);
    }

    /// True when changes go through the log.
    pub fn journaled(&self) -> bool {
        self.journal.is_on()
    }

    /// What the log writer wrote so far.
    pub fn log_stats(&self) -> LogStats {
        self.journal.stats()
    }

    /// True when bytes `lo..hi` were freed since the last checkpoint (the
    /// kernel's busy extents): an allocation for file data there must
    /// force the log first, or a crash could show the old owner with the
    /// new owner's data.
    pub fn busy(&self, lo: u64, hi: u64) -> bool {
        self.journal.busy(lo, hi)
    }

    /// Holds checkpoints back until [`Self::release_log`]: what commits
    /// meanwhile reaches the log in one checkpoint (recovery's mapping
    /// exchanges, finished in several transactions under one intent).
    pub(crate) fn hold_log(&self) {
        self.journal.hold();
    }

    /// Ends [`Self::hold_log`].
    pub(crate) fn release_log(&self) {
        self.journal.release();
    }

    /// A new intent id, unique among the intents of the live log (0
    /// without a journal, where no intent is logged).
    pub(crate) fn intent_id(&self) -> u64 {
        self.journal.intent_id()
    }

    /// Lets the tail of a resumed log move (see `Journal::resume`).
    pub(crate) fn unpin_log(&self) {
        self.journal.unpin();
    }

    /// The AG where the next new directory's inode search starts, the
    /// rotor advanced by one (atomically, so threads spread too).
    pub fn next_dir_ag(&self, agcount: u32) -> u32 {
        self.alloc.next_dir_ag(agcount)
    }

    /// Notes that realtime extents were freed (see [`Self::take_rt_freed`]).
    pub(crate) fn note_rt_freed(&self) {
        self.alloc.note_rt_freed();
    }

    /// True (once) when realtime extents were freed since the last call:
    /// the caller forces the log before writing data into realtime
    /// extents, so the free is on disk before new data lands in space an
    /// old owner may still map on disk (the kernel's busy extents).
    pub(crate) fn take_rt_freed(&self) -> bool {
        self.alloc.take_rt_freed()
    }

    /// Fixes the time stamped on changes (reproducible builds), or
    /// returns to the system clock with `None`.
    pub fn set_fixed_time(&self, t: Option<(i64, u32)>) {
        self.clock.set_fixed(t);
    }

    /// The time to stamp on a change.
    pub fn now(&self) -> (i64, u32) {
        self.clock.now()
    }

    /// Seeds the generation number sequence (reproducible builds).
    pub fn seed_generations(&self, seed: u64) {
        self.gens.seed(seed);
    }

    /// The next inode generation number: a sequence that looks random
    /// (splitmix64 over a counter), from a random start unless seeded. A
    /// fixed start would give a file made in an inode number freed since an
    /// earlier opening the very generation the old file had, and a file
    /// handle of the old file (NFS, open_by_handle_at) would open the new
    /// one; kernel XFS gives new inodes random generations.
    pub fn next_gen(&self) -> u32 {
        self.gens.next()
    }

    /// Marks inode `ino`'s change counter as seen by someone.
    pub fn mark_queried(&self, ino: u64) {
        self.queried.mark(ino);
    }

    /// True (once) when `ino`'s counter was queried since its last
    /// increment: the next change must increment it.
    pub fn take_queried(&self, ino: u64) -> bool {
        self.queried.take(ino)
    }
}

impl Drop for WriteState {
    fn drop(&mut self) {
        // Never leave a writer thread behind: its writes end before the
        // device is closed.
        let h = lock(&self.inflight).as_mut().and_then(|f| f.handle.take());
        if let Some(h) = h {
            let _ = join(h);
        }
    }
}

impl Default for WriteState {
    fn default() -> Self {
        WriteState::new()
    }
}

//! What an open-for-writing filesystem keeps between transactions:
//! committed metadata not yet written back, per-AG and per-inode locks,
//! superblock counter deltas, and the data write combiner.
//!
//! Committed buffers live in `dirty`, keyed by byte offset, until
//! [`WriteState::writeback`] writes them sorted by address with adjacent
//! buffers merged into one vectored write. Reads consult `dirty` before the
//! cache and the device, so committed state is always what the next
//! transaction sees.

use super::datarun::{pieces_at, DataRun, Piece, Run};
use super::dirty::Dirty;
use super::flight::{join, Flight, Stream, Writer};
use super::locks::LockSet;
use crate::buf::fasthash::FastSet;
use crate::dev::aligned::{self, AlignedBuf, SharedBytes};
use crate::dev::Device;
use crate::error::Result;
use crate::geometry::Ino;
use crate::log::buftype::BufKind;
use crate::log::cil::DirtyMap;
use crate::log::item_inode::Icreate;
use crate::log::journal::{Journal, LogStats};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

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

/// Write-side state of an open filesystem.
pub struct WriteState {
    dirty: Mutex<Dirty>,
    dirty_bytes: Mutex<usize>,
    counters: Mutex<SbDelta>,
    data: Mutex<DataRun>,
    stats: Mutex<WriteStats>,
    /// Reused buffer for gathering short pieces of one write.
    scratch: Mutex<Vec<u8>>,
    /// Held by whoever writes back (synchronously or by starting or
    /// waiting for a writer thread), so writebacks never overlap.
    writer: Mutex<()>,
    /// The pending set being written by a writer thread, if any.
    inflight: Mutex<Option<Flight>>,
    /// Streams started by [`WriteState::queue`] (the first are smaller).
    streams: std::sync::atomic::AtomicU32,
    /// Inodes whose change counter was queried since its last increment.
    queried: Mutex<FastSet<u64>>,
    /// The time stamped on changes (None: the system clock).
    fixed_time: Mutex<Option<(i64, u32)>>,
    /// Directories keep their times when entries are added (a build sets
    /// each directory's times itself, once).
    pub keep_dir_times: std::sync::atomic::AtomicBool,
    /// Source of inode generation numbers.
    gen: std::sync::atomic::AtomicU64,
    /// The AG where the next new directory's inode search starts
    /// (crate::ialloc's rotor).
    pub dir_rotor: std::sync::atomic::AtomicU32,
    /// The realtime group where the next file without realtime extents
    /// starts looking (the kernel's realtime group rotor).
    pub rtg_rotor: std::sync::atomic::AtomicU32,
    /// Per-AG locks.
    pub ags: LockSet,
    /// Realtime extents were freed since the last log force: they may not
    /// take new data until the free is on disk (see `take_rt_freed`).
    rt_freed: std::sync::atomic::AtomicBool,
    /// Directories' data streams (see [`crate::alloc::filestream`]).
    pub filestreams: crate::alloc::filestream::Filestreams,
    /// Per-inode locks.
    pub inodes: LockSet,
    /// Writes back once this many committed bytes are pending.
    pub dirty_limit: usize,
    /// Largest single write.
    pub max_write: usize,
    /// Writes pending file data back once this many bytes are pending.
    pub data_limit: usize,
    /// The log writer (None: changes go in place at writeback only, as a
    /// build of a new image does).
    journal: Option<Mutex<Journal>>,
    /// The tail the log may move to when the writer thread's stream is
    /// written.
    flight_tail: Mutex<Option<u64>>,
    /// The superblock's quota "checked" bits, until the first transaction
    /// clears them (writes do not keep dquots: see `Fs::trans`).
    pub(crate) quota_chkd: std::sync::atomic::AtomicU16,
    /// Held while they are cleared.
    pub(crate) quota_lock: Mutex<()>,
    /// Quota accounting (None: the superblock accounts no quota).
    pub(crate) quota: Option<crate::quota::acct::Acct>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WriteState {
    /// Notes that realtime extents were freed (see [`Self::take_rt_freed`]).
    pub(crate) fn note_rt_freed(&self) {
        self.rt_freed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// True (once) when realtime extents were freed since the last call:
    /// the caller forces the log before writing data into realtime
    /// extents, so the free is on disk before new data lands in space an
    /// old owner may still map on disk (the kernel's busy extents).
    pub(crate) fn take_rt_freed(&self) -> bool {
        self.rt_freed
            .swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    /// Fresh state.
    pub fn new() -> WriteState {
        WriteState {
            dirty: Mutex::new(Dirty::default()),
            dirty_bytes: Mutex::new(0),
            counters: Mutex::new(SbDelta::default()),
            data: Mutex::new(DataRun::default()),
            stats: Mutex::new(WriteStats::default()),
            scratch: Mutex::new(Vec::new()),
            writer: Mutex::new(()),
            inflight: Mutex::new(None),
            streams: std::sync::atomic::AtomicU32::new(0),
            queried: Mutex::new(FastSet::default()),
            fixed_time: Mutex::new(None),
            keep_dir_times: std::sync::atomic::AtomicBool::new(false),
            gen: std::sync::atomic::AtomicU64::new(random_seed()),
            dir_rotor: std::sync::atomic::AtomicU32::new(0),
            rtg_rotor: std::sync::atomic::AtomicU32::new(0),
            ags: LockSet::default(),
            rt_freed: std::sync::atomic::AtomicBool::new(false),
            filestreams: Default::default(),
            inodes: LockSet::default(),
            dirty_limit: 128 << 20,
            max_write: 8 << 20,
            data_limit: 32 << 20,
            journal: None,
            flight_tail: Mutex::new(None),
            quota_chkd: std::sync::atomic::AtomicU16::new(0),
            quota_lock: Mutex::new(()),
            quota: None,
        }
    }

    /// Turns on the journal: every commit is logged before it is written
    /// in place.
    pub(crate) fn set_journal(&mut self, j: Journal) {
        self.journal = Some(Mutex::new(j));
    }

    /// True when changes go through the log.
    pub fn journaled(&self) -> bool {
        self.journal.is_some()
    }

    /// What the log writer wrote so far.
    pub fn log_stats(&self) -> LogStats {
        self.journal
            .as_ref()
            .map(|j| lock(j).stats())
            .unwrap_or_default()
    }

    /// The AG where the next new directory's inode search starts, the
    /// rotor advanced by one (atomically, so threads spread too).
    pub fn next_dir_ag(&self, agcount: u32) -> u32 {
        use std::sync::atomic::Ordering;
        let prev = self
            .dir_rotor
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((v % agcount + 1) % agcount)
            })
            .unwrap_or(0);
        prev % agcount
    }

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
            let mut j = self.journal.as_ref().map(lock);
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
        let held =
            next == After::Nothing && self.journal.as_ref().is_some_and(|j| lock(j).is_held());
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

    /// Writes the next checkpoint to the log and flushes it (fsync, or a
    /// checkpoint that grew large). Nothing is written in place.
    pub fn force_log(&self, dev: &dyn Device) -> Result<()> {
        self.force_log_for(dev, None)
    }

    /// [`Self::force_log`], skipped when `inode` (the byte offset of an
    /// inode) is given and the committed item list does not hold it: its
    /// last change, and every change before it, is in a checkpoint on disk
    /// already (the kernel's fsync forces the log only up to the inode's
    /// last commit). Returns whether a checkpoint was needed.
    pub fn force_log_for(&self, dev: &dyn Device, inode: Option<u64>) -> Result<()> {
        let Some(jm) = &self.journal else {
            return Ok(());
        };
        if let Some(off) = inode {
            // Checkpoints are written under the writer lock: none is in
            // flight while it is held, so the list tells the truth.
            let _w = lock(&self.writer);
            if !lock(jm).cil.inodes.contains_key(&off) {
                return Ok(());
            }
        }
        let _w = lock(&self.writer);
        // A stream still being written may hold data this checkpoint makes
        // reachable (it was queued before its transaction committed).
        self.finish_flight()?;
        for attempt in 0..2 {
            let mut data = lock(&self.data);
            let mut d = lock(&self.dirty);
            let mut j = lock(jm);
            match self.checkpoint(dev, &mut data, &mut d, &mut j) {
                Err(crate::error::Error::NoSpace(_)) if attempt == 0 => {
                    // The writer thread's writes move the tail.
                    drop(j);
                    drop(d);
                    drop(data);
                    self.finish_flight()?;
                }
                r => return r.map(|_| ()),
            }
        }
        Ok(())
    }

    /// True when bytes `lo..hi` were freed since the last checkpoint (the
    /// kernel's busy extents): an allocation for file data there must
    /// force the log first, or a crash could show the old owner with the
    /// new owner's data.
    pub fn busy(&self, lo: u64, hi: u64) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| lock(j).overlaps_freed(lo, hi))
    }

    /// Holds checkpoints back until [`Self::release_log`]: what commits
    /// meanwhile reaches the log in one checkpoint (recovery's mapping
    /// exchanges, finished in several transactions under one intent).
    pub(crate) fn hold_log(&self) {
        if let Some(jm) = &self.journal {
            lock(jm).hold();
        }
    }

    /// Ends [`Self::hold_log`].
    pub(crate) fn release_log(&self) {
        if let Some(jm) = &self.journal {
            lock(jm).release();
        }
    }

    /// A new intent id, unique among the intents of the live log (0
    /// without a journal, where no intent is logged).
    pub(crate) fn intent_id(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| lock(j).intent_id())
    }

    /// Lets the tail of a resumed log move (see `Journal::resume`).
    pub(crate) fn unpin_log(&self) {
        if let Some(jm) = &self.journal {
            lock(jm).unpin();
        }
    }

    /// Writes an unmount record: everything must be in place (after a
    /// sync's writeback and flush).
    pub(crate) fn unmount_log(&self, dev: &dyn Device) -> Result<()> {
        if let Some(jm) = &self.journal {
            let _w = lock(&self.writer);
            let _d = lock(&self.dirty);
            lock(jm).unmount(dev)?;
        }
        Ok(())
    }

    /// Drops pending file data in bytes `lo..hi`, so pending data and
    /// pending metadata never cover the same bytes.
    fn forget_data(&self, lo: u64, hi: u64) {
        let mut dr = lock(&self.data);
        let first = dr.runs.range(..lo).next_back().map(|(&s, _)| s);
        let keys: Vec<u64> = first
            .into_iter()
            .chain(dr.runs.range(lo..hi).map(|(&s, _)| s))
            .collect();
        for s in keys {
            let Some(v) = dr.runs.remove(&s) else {
                continue;
            };
            let e = s + v.len() as u64;
            if e <= lo || s >= hi {
                dr.runs.insert(s, v);
                continue;
            }
            let mut kept = 0usize;
            if s < lo {
                let head = v.copy_range(0, (lo - s) as usize);
                kept += head.len();
                dr.runs.insert(s, Run::Aligned(head));
            }
            if e > hi {
                let tail = v.copy_range((hi - s) as usize, v.len());
                kept += tail.len();
                dr.runs.insert(hi, Run::Aligned(tail));
            }
            dr.bytes = dr.bytes.saturating_sub(v.len() - kept);
            v.recycle();
        }
    }

    /// Marks inode `ino`'s change counter as seen by someone.
    pub fn mark_queried(&self, ino: u64) {
        lock(&self.queried).insert(ino);
    }

    /// True (once) when `ino`'s counter was queried since its last
    /// increment: the next change must increment it.
    pub fn take_queried(&self, ino: u64) -> bool {
        lock(&self.queried).remove(&ino)
    }

    /// Fixes the time stamped on changes (reproducible builds), or
    /// returns to the system clock with `None`.
    pub fn set_fixed_time(&self, t: Option<(i64, u32)>) {
        *lock(&self.fixed_time) = t;
    }

    /// The time to stamp on a change.
    pub fn now(&self) -> (i64, u32) {
        if let Some(t) = *lock(&self.fixed_time) {
            return t;
        }
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (d.as_secs() as i64, d.subsec_nanos())
    }

    /// Seeds the generation number sequence (reproducible builds).
    pub fn seed_generations(&self, seed: u64) {
        self.gen.store(seed, std::sync::atomic::Ordering::Relaxed);
    }

    /// The next inode generation number: a sequence that looks random
    /// (splitmix64 over a counter), from a random start unless seeded. A
    /// fixed start would give a file made in an inode number freed since an
    /// earlier opening the very generation the old file had, and a file
    /// handle of the old file (NFS, open_by_handle_at) would open the new
    /// one; kernel XFS gives new inodes random generations.
    pub fn next_gen(&self) -> u32 {
        let n = self
            .gen
            .fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = n;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }

    /// Copies pending file data at byte `off` into `buf` when the write
    /// combiner holds all of those bytes in one run (the newest copy of
    /// them); false when they must be read from the device.
    pub fn read_pending(&self, off: u64, buf: &mut [u8]) -> bool {
        lock(&self.data).read(off, buf)
    }

    /// Writes pending file data now (before reading file data back).
    pub fn flush_data(&self, dev: &dyn Device) -> Result<()> {
        let _w = lock(&self.writer);
        self.finish_flight()?;
        let mut d = lock(&self.data);
        if d.runs.is_empty() {
            return Ok(());
        }
        // Data of blocks the committed list allocates may land any time
        // before the checkpoint that maps them (on disk the blocks are
        // still free, and blocks freed since the last checkpoint are never
        // allocated to file data before it); other data overwrites blocks
        // the disk already gives its file, but maybe to other files too: a
        // block whose reference count dropped since the last checkpoint
        // (another file's copy-on-write, unlink or truncate left this file
        // its only owner) is still shared on disk until that checkpoint,
        // which then goes first.
        if let Some(jm) = &self.journal {
            let mut pending = lock(&self.dirty);
            let mut j = lock(jm);
            if d.runs
                .iter()
                .any(|(&o, r)| j.overlaps_unshared(o, o + r.len() as u64))
            {
                self.checkpoint(dev, &mut d, &mut pending, &mut j)?;
            }
        }
        let runs = std::mem::take(&mut d.runs);
        d.bytes = 0;
        let r = self.writer_for(dev, |w| {
            w.sorted(runs.iter().flat_map(|(off, v)| pieces_at(*off, v)))
        });
        runs.into_values().for_each(Run::recycle);
        r
    }

    /// Runs `f` with a [`Writer`] on `dev` using the shared scratch buffer,
    /// adding its counts to the statistics.
    fn writer_for(
        &self,
        dev: &dyn Device,
        f: impl FnOnce(&mut Writer<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = lock(&self.scratch);
        let mut st = WriteStats::default();
        let r = f(&mut Writer {
            dev,
            max_write: self.max_write,
            scratch: &mut scratch,
            stats: &mut st,
        });
        let mut s = lock(&self.stats);
        s.writes += st.writes;
        s.bytes += st.bytes;
        r
    }

    /// Waits for the writer thread, if one is running, and returns what it
    /// met. Its stream stays readable until its writes have returned.
    /// Callers hold `writer`.
    fn finish_flight(&self) -> Result<()> {
        let h = lock(&self.inflight).as_mut().and_then(|f| f.handle.take());
        let Some(h) = h else {
            return Ok(());
        };
        let (r, st, scratch) = join(h);
        {
            let mut s = lock(&self.stats);
            s.writes += st.writes;
            s.bytes += st.bytes;
        }
        if !scratch.is_empty() {
            *lock(&self.scratch) = scratch;
        }
        let done = lock(&self.inflight).take();
        if let Some(stream) = done.and_then(|f| Arc::try_unwrap(f.stream).ok()) {
            stream.runs.into_values().for_each(Run::recycle);
        }
        let tail = lock(&self.flight_tail).take();
        if r.is_ok() {
            self.written_back(tail);
        }
        r
    }

    /// Accumulated counter deltas since open.
    pub fn counters(&self) -> SbDelta {
        *lock(&self.counters)
    }

    /// Write statistics so far.
    pub fn stats(&self) -> WriteStats {
        *lock(&self.stats)
    }

    /// Queues file data at byte offset `off` (copied). Data that
    /// continues a pending run is appended to it; everything is written
    /// back sorted, adjacent runs merged, once `data_limit` bytes are
    /// pending or at writeback.
    pub fn write_data(&self, dev: &Arc<dyn Device>, off: u64, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.queue(dev, off, Piece::Copied(bytes))
    }

    /// Like [`WriteState::write_data`] for data already in an aligned
    /// buffer: the buffer itself is queued and written from where it is.
    pub fn write_data_owned(&self, dev: &Arc<dyn Device>, off: u64, buf: AlignedBuf) -> Result<()> {
        if buf.is_empty() {
            aligned::give(buf);
            return Ok(());
        }
        self.queue(dev, off, Piece::Moved(buf))
    }

    /// Like [`WriteState::write_data`] for data in a vector handed over:
    /// queued as it is (whole blocks: the caller pads it).
    pub fn write_data_vec(&self, dev: &Arc<dyn Device>, off: u64, v: Vec<u8>) -> Result<()> {
        if v.is_empty() {
            return Ok(());
        }
        self.queue(dev, off, Piece::Vec(v))
    }

    /// Like [`WriteState::write_data_vec`] for a piece of a shared buffer:
    /// queued where it lies (with its zero padding), followed by `zeros`
    /// more zero bytes.
    pub fn write_data_shared(
        &self,
        dev: &Arc<dyn Device>,
        off: u64,
        b: SharedBytes,
        zeros: usize,
    ) -> Result<()> {
        if b.padded().is_empty() && zeros == 0 {
            return Ok(());
        }
        self.queue(dev, off, Piece::Shared(b, zeros))
    }

    fn queue(&self, dev: &Arc<dyn Device>, off: u64, piece: Piece<'_>) -> Result<()> {
        let end = off + piece.len() as u64;
        let mut d = lock(&self.data);
        if d.overlaps(off, end) {
            // Rewriting pending data (an unaligned append's first block, a
            // rewrite, a freed and reused block; the same inode's blocks
            // are only written under its lock): merged in memory, the new
            // bytes over the old, instead of writing the old ones first.
            d.merge(off, piece);
        } else {
            d.insert(off, piece);
        }
        // Pending data waits until `data_limit`, then goes out in one sorted
        // stream together with the pending metadata, which lies between its
        // runs (inode chunks, directory blocks): long merged writes. Writing
        // the data alone would cut the stream at every metadata block, to be
        // written separately later (bench/build.sh, 100,000 small files:
        // 4,983 writes with data written as it came, 3,280 with data alone at
        // a 256 MiB limit, 179 with everything at that limit). The limit is
        // 32 MiB: the run buffers are recycled, so a build touches 32 MiB of
        // fresh memory instead of 256 (page faults 88,000 -> 19,000, a
        // quarter less CPU), for 903 writes of 517 KiB on average.
        //
        // The device should not wait for the first 32 MiB, though: the first
        // streams go out at an eighth, a quarter and a half of the limit, so
        // that writing starts early in a build (100,000 small files from a
        // tar: the first writer thread starts 18-20 ms after the build's
        // first thread instead of 72-74 ms).
        let ramp = 3u32.saturating_sub(self.streams.load(std::sync::atomic::Ordering::Relaxed));
        if d.bytes >= self.data_limit >> ramp {
            drop(d);
            self.streams
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.journal.is_some() {
                return self.data_background(dev);
            }
            return self.writeback_background(dev);
        }
        Ok(())
    }

    /// Writes the committed list to the log, file data first: a checkpoint
    /// never makes reachable blocks that do not hold their data yet. Only
    /// data landing where metadata was freed since the last checkpoint
    /// waits for the checkpoint that frees it (it stays in `data`).
    fn checkpoint(
        &self,
        dev: &dyn Device,
        data: &mut DataRun,
        pending: &mut Dirty,
        j: &mut Journal,
    ) -> Result<Option<u64>> {
        let runs = if j.cil.is_empty() {
            BTreeMap::new()
        } else {
            take_data_first(data, j)
        };
        if !runs.is_empty() {
            let r = self.writer_for(dev, |w| {
                w.sorted(runs.iter().flat_map(|(off, v)| pieces_at(*off, v)))
            });
            runs.into_values().for_each(Run::recycle);
            r?;
            dev.flush()?;
        }
        j.force(dev, |off, lo, lsn| pending.set_lsn(off, lo, lsn))
    }

    /// Takes the whole pending set (metadata and data) as one stream,
    /// after writing everything it holds to the log. Callers hold
    /// `writer`; `data` and `dirty` are locked here, in that order, and
    /// stay locked while `then` runs (readers wait for it). Returns what
    /// `then` returned and the log tail once the stream is in place.
    fn take_stream<T>(
        &self,
        dev: &dyn Device,
        then: impl FnOnce(Stream) -> T,
    ) -> Result<(T, Option<u64>)> {
        let mut data = lock(&self.data);
        let mut pending = lock(&self.dirty);
        let mut tail = None;
        if let Some(jm) = &self.journal {
            let mut j = lock(jm);
            self.checkpoint(dev, &mut data, &mut pending, &mut j)?;
            tail = Some(j.head_lsn());
        }
        let runs = std::mem::take(&mut data.runs);
        data.bytes = 0;
        let meta = std::mem::take(&mut *pending);
        *lock(&self.dirty_bytes) = 0;
        let r = then(Stream { meta, runs });
        drop(pending);
        drop(data);
        Ok((r, tail))
    }

    /// The log may move its tail to `t` (the stream behind it is written).
    fn written_back(&self, t: Option<u64>) {
        if let (Some(jm), Some(t)) = (&self.journal, t) {
            lock(jm).written_back(t);
        }
    }

    /// Writes every pending data run and committed buffer, sorted by
    /// address, adjacent buffers merged into vectored writes, after any
    /// writeback already under way. Returns when everything is written;
    /// readers wait meanwhile, so they never miss it.
    pub fn writeback(&self, dev: &dyn Device) -> Result<()> {
        let _w = lock(&self.writer);
        self.finish_flight()?;
        let (r, tail) = self.take_stream(dev, |stream| {
            let r = self.writer_for(dev, |w| stream.write_with(w));
            stream.runs.into_values().for_each(Run::recycle);
            r
        })?;
        r?;
        self.written_back(tail);
        Ok(())
    }

    /// With the journal, pending file data past its limit: the data of
    /// blocks the next checkpoint allocates goes to a writer thread alone,
    /// without a checkpoint (the kernel writes data without forcing its
    /// log either), so checkpoints stay large and buffers are logged once
    /// per checkpoint. When no such data is pending, a full writeback.
    fn data_background(&self, dev: &Arc<dyn Device>) -> Result<()> {
        let Some(jm) = &self.journal else {
            return self.writeback_background(dev);
        };
        let _w = lock(&self.writer);
        self.finish_flight()?;
        let runs = {
            let mut data = lock(&self.data);
            let _pending = lock(&self.dirty);
            take_data_first(&mut data, &lock(jm))
        };
        if runs.is_empty() {
            drop(_w);
            return self.writeback_background(dev);
        }
        let scratch = std::mem::take(&mut *lock(&self.scratch));
        let stream = Stream {
            meta: Dirty::default(),
            runs,
        };
        let f = Flight::start(stream, dev.clone(), self.max_write, scratch);
        *lock(&self.inflight) = Some(f);
        *lock(&self.flight_tail) = None;
        Ok(())
    }

    /// Like [`WriteState::writeback`], but the writing is done by a writer
    /// thread while the caller goes on; the pending set stays readable
    /// until it is written. Waits for the previous writer thread first
    /// (and returns its error, if it met one).
    pub fn writeback_background(&self, dev: &Arc<dyn Device>) -> Result<()> {
        let _w = lock(&self.writer);
        self.finish_flight()?;
        let scratch = std::mem::take(&mut *lock(&self.scratch));
        let ((), tail) = self.take_stream(dev.as_ref(), |stream| {
            let f = Flight::start(stream, dev.clone(), self.max_write, scratch);
            *lock(&self.inflight) = Some(f);
        })?;
        *lock(&self.flight_tail) = tail;
        Ok(())
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

/// Takes out of `data` the runs that go to disk ahead of the next
/// checkpoint: data of blocks it allocates ([`Journal::data_first`]). A
/// run that merged such data with data in place elsewhere (an append that
/// filled the file's last block and went on into new ones) is cut at the
/// allocation's edges and only the pieces in the new blocks are taken:
/// the checkpoint must never make reachable blocks that do not hold their
/// data yet.
fn take_data_first(data: &mut DataRun, j: &Journal) -> BTreeMap<u64, Run> {
    let early: Vec<u64> = data
        .runs
        .iter()
        .filter(|(&o, r)| j.holds_data_first(o, o + r.len() as u64))
        .map(|(&o, _)| o)
        .collect();
    let mut runs = BTreeMap::new();
    for o in early {
        let Some(r) = data.runs.remove(&o) else {
            continue;
        };
        let end = o + r.len() as u64;
        if j.data_first(o, end) {
            data.bytes = data.bytes.saturating_sub(r.len());
            runs.insert(o, r);
            continue;
        }
        let mut cuts = j.data_cuts(o, end);
        cuts.push(end);
        let mut at = o;
        for c in cuts {
            let piece = Run::Aligned(r.copy_range((at - o) as usize, (c - o) as usize));
            if j.data_first(at, c) {
                data.bytes = data.bytes.saturating_sub(piece.len());
                runs.insert(at, piece);
            } else {
                data.runs.insert(at, piece);
            }
            at = c;
        }
        r.recycle();
    }
    runs
}

/// A random 64-bit value: std's hash keys, which come from the operating
/// system's random source, over the clock.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(t.as_nanos());
    h.finish()
}

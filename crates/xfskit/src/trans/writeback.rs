//! Writing the pending set back: every pending data run and committed
//! buffer sorted by address, adjacent ones merged into vectored writes,
//! on the caller's thread or by a writer thread (`flight.rs`); and with
//! the journal, the checkpoints written to the log first (file data of
//! blocks a checkpoint allocates goes ahead of it).

use super::combiner::take_data_first;
use super::datarun::{pieces_at, DataRun, Run};
use super::dirty::Dirty;
use super::flight::{join, Flight, Stream, Writer};
use super::state::{lock, WriteState};
use super::WriteStats;
use crate::dev::Device;
use crate::error::Result;
use crate::log::journal::Journal;
use std::collections::BTreeMap;
use std::sync::Arc;

impl WriteState {
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
        let Some(jm) = self.journal.get() else {
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

    /// Writes an unmount record: everything must be in place (after a
    /// sync's writeback and flush).
    pub(crate) fn unmount_log(&self, dev: &dyn Device) -> Result<()> {
        if let Some(jm) = self.journal.get() {
            let _w = lock(&self.writer);
            let _d = lock(&self.dirty);
            lock(jm).unmount(dev)?;
        }
        Ok(())
    }

    /// Runs `f` with a [`Writer`] on `dev` using the shared scratch buffer,
    /// adding its counts to the statistics.
    pub(super) fn writer_for(
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
    pub(super) fn finish_flight(&self) -> Result<()> {
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

    /// Writes the committed list to the log, file data first: a checkpoint
    /// never makes reachable blocks that do not hold their data yet. Only
    /// data landing where metadata was freed since the last checkpoint
    /// waits for the checkpoint that frees it (it stays in `data`).
    pub(super) fn checkpoint(
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
        if let Some(jm) = self.journal.get() {
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
        if let (Some(jm), Some(t)) = (self.journal.get(), t) {
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
    pub(super) fn data_background(&self, dev: &Arc<dyn Device>) -> Result<()> {
        let Some(jm) = self.journal.get() else {
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

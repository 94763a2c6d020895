//! The data write combiner: file data queued in runs (`datarun.rs`) until
//! it is written back with the pending metadata, read back from there
//! while it waits, and dropped where its blocks are freed.

use super::datarun::{pieces_at, DataRun, Piece, Run};
use super::state::{lock, WriteState};
use crate::dev::aligned::{self, AlignedBuf, SharedBytes};
use crate::dev::Device;
use crate::error::Result;
use crate::log::journal::Journal;
use std::collections::BTreeMap;
use std::sync::Arc;

impl WriteState {
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
        if let Some(jm) = self.journal.get() {
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
            if self.journal.is_on() {
                return self.data_background(dev);
            }
            return self.writeback_background(dev);
        }
        Ok(())
    }

    /// Drops pending file data in bytes `lo..hi`, so pending data and
    /// pending metadata never cover the same bytes.
    pub(super) fn forget_data(&self, lo: u64, hi: u64) {
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
}

/// Takes out of `data` the runs that go to disk ahead of the next
/// checkpoint: data of blocks it allocates ([`Journal::data_first`]). A
/// run that merged such data with data in place elsewhere (an append that
/// filled the file's last block and went on into new ones) is cut at the
/// allocation's edges and only the pieces in the new blocks are taken:
/// the checkpoint must never make reachable blocks that do not hold their
/// data yet.
pub(super) fn take_data_first(data: &mut DataRun, j: &Journal) -> BTreeMap<u64, Run> {
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

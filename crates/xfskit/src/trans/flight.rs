//! Writing the pending set: the sorted, merged stream of committed
//! metadata and file data, written either on the caller's thread (at sync)
//! or by a writer thread while transactions go on (when the pending set
//! passes its limits).
//!
//! A background writeback takes the whole pending set as a [`Stream`] and
//! keeps it visible to readers ([`Stream::get`]) until every write of it has
//! returned, so a read never falls between the pending set and the device.
//! At most one stream is in flight: the next writeback, a sync, or a read
//! of file data first waits for it, so writes of the same block always
//! reach the device in the order they were committed.

use super::datarun::{pieces_at, Run};
use super::dirty::Dirty;
use super::pending::{Pending, WriteStats};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Most pieces in one vectored write (the kernel's IOV_MAX is 1024).
const MAX_IOV: usize = 1024;

/// Pieces at least this long are written from their own buffer; shorter
/// ones (inodes) are copied together first.
const OWN_PIECE: usize = 4096;

/// A pending set taken for writing: committed buffers and file data runs
/// (never overlapping: freeing blocks drops both).
#[derive(Default)]
pub(crate) struct Stream {
    pub(crate) meta: Dirty,
    pub(crate) runs: BTreeMap<u64, Run>,
}

impl Stream {
    /// The committed buffer at `off` of exactly `len` bytes, if any.
    pub(crate) fn get(&self, off: u64, len: usize) -> Option<Arc<[u8]>> {
        self.meta
            .get(off)
            .filter(|b| b.data.len() == len)
            .map(|b| b.data.clone())
    }

    /// Writes everything through `w`, sorted by address: each block's CRC
    /// stamped once, metadata and data merged so that interleaved blocks
    /// still make long writes.
    pub(crate) fn write_with(&self, w: &mut Writer<'_>) -> Result<()> {
        let mut stamped: Vec<(u64, std::borrow::Cow<'_, [u8]>)> =
            self.meta.sorted().map(|(off, p)| (off, stamp(p))).collect();
        stamped.extend(
            self.runs
                .iter()
                .flat_map(|(off, v)| pieces_at(*off, v))
                .map(|(off, b)| (off, std::borrow::Cow::Borrowed(b))),
        );
        stamped.sort_by_key(|(off, _)| *off);
        w.sorted(stamped.iter().map(|(off, b)| (*off, &b[..])))
    }
}

/// The bytes of `p` as they go to the device: the LSN of the last
/// checkpoint that logged it, then the CRC, stamped.
fn stamp(p: &Pending) -> std::borrow::Cow<'_, [u8]> {
    match p.crc_off {
        Some(c) => {
            let mut v = p.data.to_vec();
            if let Some((off, lsn)) = p.lsn {
                if off + 8 <= v.len() {
                    v[off..off + 8].copy_from_slice(&lsn.to_be_bytes());
                }
            }
            xfs_format::crc::stamp(&mut v, c);
            std::borrow::Cow::Owned(v)
        }
        None => std::borrow::Cow::Borrowed(&p.data[..]),
    }
}

/// Issues merged writes and counts them.
pub(crate) struct Writer<'a> {
    pub(crate) dev: &'a dyn Device,
    pub(crate) max_write: usize,
    pub(crate) scratch: &'a mut Vec<u8>,
    pub(crate) stats: &'a mut WriteStats,
}

impl Writer<'_> {
    /// Writes pieces given in increasing offset order, adjacent pieces
    /// merged into one write of at most `max_write` bytes.
    pub(crate) fn sorted<'b>(
        &mut self,
        pieces: impl Iterator<Item = (u64, &'b [u8])>,
    ) -> Result<()> {
        let mut batch: Vec<&[u8]> = Vec::new();
        let (mut start, mut end, mut len) = (0u64, 0u64, 0usize);
        for (off, b) in pieces {
            if !batch.is_empty()
                && (off != end || len + b.len() > self.max_write || batch.len() == MAX_IOV)
            {
                self.slices(start, &batch)?;
                batch.clear();
                len = 0;
            }
            if batch.is_empty() {
                start = off;
                end = off;
            }
            end += b.len() as u64;
            len += b.len();
            batch.push(b);
        }
        if !batch.is_empty() {
            self.slices(start, &batch)?;
        }
        Ok(())
    }

    fn slices(&mut self, off: u64, slices: &[&[u8]]) -> Result<()> {
        if slices.len() <= MAX_IOV {
            self.dev.write_vectored_at(slices, off).map_err(Error::Io)?;
        } else {
            // Many small pieces (inodes between data runs): runs of pieces
            // under a block are copied into the reused buffer, larger ones
            // are written from where they are, in one vectored write.
            let iov = gather(slices, self.scratch);
            let parts: Vec<&[u8]> = iov
                .iter()
                .map(|p| match *p {
                    Part::Own(i) => slices[i],
                    Part::Copied(a, b) => &self.scratch[a..b],
                })
                .collect();
            if parts.len() <= MAX_IOV {
                self.dev.write_vectored_at(&parts, off).map_err(Error::Io)?;
            } else {
                let joined = slices.concat();
                self.dev.write_at(&joined, off).map_err(Error::Io)?;
            }
        }
        self.stats.writes += 1;
        self.stats.bytes += slices.iter().map(|b| b.len() as u64).sum::<u64>();
        Ok(())
    }
}

/// One piece of a gathered write: a slice written from its own buffer, or
/// a range of the scratch buffer holding several short slices.
enum Part {
    Own(usize),
    Copied(usize, usize),
}

/// Copies runs of short slices into `scratch` (cleared first; its memory is
/// kept between writes) and lists the pieces of the write in order.
fn gather(slices: &[&[u8]], scratch: &mut Vec<u8>) -> Vec<Part> {
    scratch.clear();
    let mut parts = Vec::new();
    for (i, s) in slices.iter().enumerate() {
        if s.len() >= OWN_PIECE {
            parts.push(Part::Own(i));
            continue;
        }
        let a = scratch.len();
        scratch.extend_from_slice(s);
        match parts.last_mut() {
            Some(Part::Copied(_, end)) if *end == a => *end = scratch.len(),
            _ => parts.push(Part::Copied(a, scratch.len())),
        }
    }
    parts
}

/// What the writer thread hands back: its counts and its scratch buffer.
type Outcome = (Result<()>, WriteStats, Vec<u8>);

/// A stream being written by a writer thread.
pub(crate) struct Flight {
    /// What is being written, readable meanwhile.
    pub(crate) stream: Arc<Stream>,
    /// The writer; taken by whoever waits for it.
    pub(crate) handle: Option<JoinHandle<Outcome>>,
}

impl Flight {
    /// Starts writing `stream` on a new thread.
    pub(crate) fn start(
        stream: Stream,
        dev: Arc<dyn Device>,
        max_write: usize,
        mut scratch: Vec<u8>,
    ) -> Flight {
        let stream = Arc::new(stream);
        let s = stream.clone();
        let handle = std::thread::spawn(move || {
            let mut stats = WriteStats::default();
            let r = s.write_with(&mut Writer {
                dev: dev.as_ref(),
                max_write,
                scratch: &mut scratch,
                stats: &mut stats,
            });
            (r, stats, scratch)
        });
        Flight {
            stream,
            handle: Some(handle),
        }
    }
}

/// Waits for a writer thread.
pub(crate) fn join(h: JoinHandle<Outcome>) -> Outcome {
    h.join().unwrap_or_else(|_| {
        (
            Err(Error::Invalid("the writeback thread panicked".into())),
            WriteStats::default(),
            Vec::new(),
        )
    })
}

//! Writing the pending set: the sorted, merged stream of committed
//! metadata and file data, written either on the caller's thread (at sync)
//! or by the writer thread while transactions go on (when the pending set
//! passes its limits).
//!
//! A background writeback hands the whole pending set as a [`Stream`] to
//! the [`Pipeline`]: one long-lived writer thread that writes the streams
//! in the order they were handed over, so writes of the same block always
//! reach the device in the order they were committed. One stream is being
//! written and at most one more waits behind it, so when the device is the
//! slower side it goes from one stream to the next without a pause, and
//! memory stays bounded. Every stream stays visible to readers
//! ([`Pipeline::get`]) until its writes have returned, so a read never falls
//! between the pending set and the device. A sync, or a read of file data,
//! first waits until the pipeline is empty.

use super::dirty::Dirty;
use super::state::WriteStats;
use super::state::{pieces_at, Run};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
    /// Writes everything through `w`, sorted by address: each block's CRC
    /// stamped once, metadata and data merged so that interleaved blocks
    /// still make long writes. Both are kept sorted, so they are merged as
    /// they are written: the first write goes out without a sort of the
    /// whole stream before it.
    pub(crate) fn write_with(&self, w: &mut Writer<'_>) -> Result<()> {
        // Copies of the blocks that carry a CRC, stamped (headers, btree
        // and directory blocks: few; inodes carry their own).
        let stamped: Vec<Vec<u8>> = self
            .meta
            .sorted()
            .filter_map(|(_, p)| p.crc_off.map(|c| stamp(&p.data, c)))
            .collect();
        let mut copies = stamped.iter();
        let meta = self.meta.sorted().map(move |(off, p)| {
            let b = match p.crc_off {
                Some(_) => copies.next().map_or(&p.data[..], |v| &v[..]),
                None => &p.data[..],
            };
            (off, b)
        });
        let data = self.runs.iter().flat_map(|(off, v)| pieces_at(*off, v));
        w.sorted(merge(meta, data))
    }
}

/// Two iterators sorted by offset, merged into one.
fn merge<'a>(
    a: impl Iterator<Item = (u64, &'a [u8])>,
    b: impl Iterator<Item = (u64, &'a [u8])>,
) -> impl Iterator<Item = (u64, &'a [u8])> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y.0 < x.0 => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// A copy of `data` with its CRC at `crc_off` stamped.
fn stamp(data: &[u8], crc_off: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    xfs_format::crc::stamp(&mut v, crc_off);
    v
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

/// Streams waiting behind the one being written, at most.
const QUEUED: usize = 1;

/// The writer thread and the streams handed to it.
pub(crate) struct Pipeline {
    state: Mutex<PipeState>,
    /// Signalled when a stream is handed over, when one is written, and at
    /// close.
    cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct PipeState {
    /// Oldest first; the front one is being written.
    streams: VecDeque<Arc<Stream>>,
    /// The first error a write met, until someone is told.
    error: Option<Error>,
    /// Counts of the writes made by the writer thread.
    stats: WriteStats,
    closing: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pipeline {
    pub(crate) fn new() -> Arc<Pipeline> {
        Arc::new(Pipeline {
            state: Mutex::new(PipeState::default()),
            cv: Condvar::new(),
            thread: Mutex::new(None),
        })
    }

    fn wait_until(&self, mut done: impl FnMut(&PipeState) -> bool) -> MutexGuard<'_, PipeState> {
        let mut s = lock(&self.state);
        while !done(&s) {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s
    }

    /// The newest committed buffer at `off` among the streams not yet
    /// written, if it is exactly `len` bytes.
    pub(crate) fn get(&self, off: u64, len: usize) -> Option<Arc<[u8]>> {
        let s = lock(&self.state);
        let b = s.streams.iter().rev().find_map(|st| st.meta.get(off))?;
        (b.data.len() == len).then(|| b.data.clone())
    }

    /// Waits until a stream can be handed over without more than
    /// [`QUEUED`] waiting; returns the error a write met, if any.
    pub(crate) fn wait_room(&self) -> Result<()> {
        let mut s = self.wait_until(|s| s.streams.len() <= QUEUED || s.error.is_some());
        s.error.take().map_or(Ok(()), Err)
    }

    /// Waits until every stream handed over is written; returns the error
    /// a write met, if any.
    pub(crate) fn wait_empty(&self) -> Result<()> {
        let mut s = self.wait_until(|s| s.streams.is_empty());
        s.error.take().map_or(Ok(()), Err)
    }

    /// Counts of the writes the writer thread made.
    pub(crate) fn stats(&self) -> WriteStats {
        lock(&self.state).stats
    }

    /// Starts the writer thread (writing to `dev`) unless it runs.
    pub(crate) fn start(self: &Arc<Self>, dev: &Arc<dyn Device>, max_write: usize) -> Result<()> {
        let mut t = lock(&self.thread);
        if t.is_none() {
            let (p, dev) = (self.clone(), dev.clone());
            let h = std::thread::Builder::new()
                .name("xfskit-writer".into())
                .spawn(move || p.run(dev.as_ref(), max_write))
                .map_err(Error::Io)?;
            *t = Some(h);
        }
        Ok(())
    }

    /// Hands `stream` to the writer thread. Callers start it and wait for
    /// room first ([`Pipeline::start`], [`Pipeline::wait_room`]).
    pub(crate) fn push(&self, stream: Stream) {
        lock(&self.state).streams.push_back(Arc::new(stream));
        self.cv.notify_all();
    }

    /// The writer thread: writes the front stream, then drops it, until
    /// closed. After a failed write the streams behind it are dropped
    /// unwritten (the error goes to whoever waits next).
    fn run(&self, dev: &dyn Device, max_write: usize) {
        let mut scratch = Vec::new();
        loop {
            let (stream, failed) = {
                let s = self.wait_until(|s| !s.streams.is_empty() || s.closing);
                match s.streams.front() {
                    Some(f) => (f.clone(), s.error.is_some()),
                    None => return,
                }
            };
            let mut stats = WriteStats::default();
            let r = if failed {
                Ok(())
            } else {
                // A panic must not leave the stream queued forever (whoever
                // waits for the pipeline would hang): it becomes the error.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    stream.write_with(&mut Writer {
                        dev,
                        max_write,
                        scratch: &mut scratch,
                        stats: &mut stats,
                    })
                }))
                .unwrap_or_else(|_| Err(Error::Invalid("the writeback thread panicked".into())))
            };
            drop(stream);
            let done = {
                let mut s = lock(&self.state);
                s.stats.writes += stats.writes;
                s.stats.bytes += stats.bytes;
                if let Err(e) = r {
                    s.error.get_or_insert(e);
                }
                s.streams.pop_front()
            };
            // Readers clone buffers, never the stream, so this is the last
            // reference: its data buffers go back to the pool.
            if let Some(st) = done.and_then(|d| Arc::try_unwrap(d).ok()) {
                st.runs.into_values().for_each(Run::recycle);
            }
            self.cv.notify_all();
        }
    }

    /// Stops the writer thread once every stream handed over is written.
    pub(crate) fn close(&self) {
        lock(&self.state).closing = true;
        self.cv.notify_all();
        if let Some(h) = lock(&self.thread).take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::trans::state::Pending;
    use std::io;

    /// A memory device whose writes wait for a gate, recording their
    /// offsets in order; writes at `fail_at` fail.
    struct Gated {
        mem: MemDevice,
        open: Mutex<bool>,
        cv: Condvar,
        order: Mutex<Vec<u64>>,
        fail_at: Option<u64>,
    }

    impl Gated {
        fn new(fail_at: Option<u64>) -> Arc<Gated> {
            Arc::new(Gated {
                mem: MemDevice::new(1 << 20),
                open: Mutex::new(false),
                cv: Condvar::new(),
                order: Mutex::new(Vec::new()),
                fail_at,
            })
        }
        fn open(&self) {
            *lock(&self.open) = true;
            self.cv.notify_all();
        }
    }

    impl Device for Gated {
        fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
            self.mem.read_at(buf, off)
        }
        fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
            let mut o = lock(&self.open);
            while !*o {
                o = self.cv.wait(o).unwrap();
            }
            lock(&self.order).push(off);
            if self.fail_at == Some(off) {
                return Err(io::Error::other("injected write error"));
            }
            self.mem.write_at(buf, off)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            self.mem.len()
        }
    }

    /// A stream with a 512-byte buffer of `fill` at `meta_off` and a data
    /// block of `fill` at `data_off`.
    fn stream(meta_off: u64, data_off: u64, fill: u8) -> Stream {
        let mut s = Stream::default();
        let data: Arc<[u8]> = vec![fill; 512].into();
        s.meta.insert(
            meta_off,
            Pending {
                data,
                crc_off: None,
            },
        );
        s.runs.insert(data_off, Run::Plain(vec![fill; 4096]));
        s
    }

    #[test]
    fn streams_written_in_order_newest_visible_meanwhile() {
        let g = Gated::new(None);
        let dev: Arc<dyn Device> = g.clone();
        let p = Pipeline::new();
        p.start(&dev, 1 << 20).unwrap();
        // The same block in both streams: the later version must win, on
        // the device and for readers while both wait.
        p.wait_room().unwrap();
        p.push(stream(0, 8192, 1));
        p.wait_room().unwrap();
        p.push(stream(0, 16384, 2));
        assert_eq!(p.get(0, 512).as_deref(), Some(&[2u8; 512][..]));
        assert_eq!(p.get(0, 4096), None, "a buffer of another length");
        assert_eq!(lock(&p.state).streams.len(), 2);
        g.open();
        p.wait_empty().unwrap();
        assert_eq!(*lock(&g.order), vec![0, 8192, 0, 16384]);
        let mut b = [0u8; 512];
        g.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [2u8; 512]);
        assert_eq!(p.get(0, 512), None, "written streams are dropped");
        assert_eq!(p.stats().writes, 4);
        p.close();
    }

    #[test]
    fn a_failed_write_is_reported_once_and_later_streams_are_dropped() {
        let g = Gated::new(Some(8192));
        let dev: Arc<dyn Device> = g.clone();
        let p = Pipeline::new();
        p.start(&dev, 1 << 20).unwrap();
        p.push(stream(0, 8192, 1));
        p.push(stream(4096, 16384, 2));
        g.open();
        assert!(p.wait_empty().is_err());
        assert_eq!(
            *lock(&g.order),
            vec![0, 8192],
            "nothing written after the failure"
        );
        assert!(p.wait_empty().is_ok(), "the error is reported once");
        p.close();
    }

    /// A device whose writes panic.
    struct Panicky;

    impl Device for Panicky {
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            panic!("injected panic in a write");
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            1 << 20
        }
    }

    #[test]
    fn a_panicking_write_becomes_an_error_not_a_hang() {
        let dev: Arc<dyn Device> = Arc::new(Panicky);
        let p = Pipeline::new();
        p.start(&dev, 1 << 20).unwrap();
        p.push(stream(0, 8192, 1));
        let e = p.wait_empty().unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
        // The thread goes on: a later stream is taken (and fails too).
        p.push(stream(0, 8192, 2));
        assert!(p.wait_empty().is_err());
        p.close();
    }

    #[test]
    fn merge_keeps_offsets_sorted() {
        let (x, y) = ([1u8; 4], [2u8; 4]);
        let a = [(0u64, &x[..]), (8, &x[..]), (20, &x[..])];
        let b = [(4u64, &y[..]), (12, &y[..]), (24, &y[..]), (28, &y[..])];
        let got: Vec<u64> = merge(a.into_iter(), b.into_iter()).map(|p| p.0).collect();
        assert_eq!(got, vec![0, 4, 8, 12, 20, 24, 28]);
    }
}

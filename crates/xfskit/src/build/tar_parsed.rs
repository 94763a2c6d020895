//! Tar parsing on a thread of its own: headers are parsed and file data
//! is gathered there, in batches, while the engine thread only creates.
//!
//! A batch holds entries and the data of their files back to back in one
//! buffer (a small file's data is read straight into it), up to
//! [`BATCH_BYTES`] of data or [`BATCH_ITEMS`] entries. At most [`DEPTH`]
//! batches wait in the channel, and emptied ones go back to the thread for
//! reuse, so memory is bounded whatever the archive. An error on the
//! thread reaches the consumer in order, after the entries parsed before
//! it.
//!
//! Both this and the plain [`TarReader`] are [`Entries`]: the feed takes
//! either.

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::feed::CHUNK_BYTES;
use super::tar_reader::{TarEntry, TarKind, TarReader};
use crate::error::{Error, Result};

/// Data bytes per batch.
const BATCH_BYTES: usize = 2 << 20;
/// Entries per batch.
const BATCH_ITEMS: usize = 1024;
/// Batches waiting in the channel.
const DEPTH: usize = 4;

/// A source of archive entries and their data.
pub(crate) trait Entries {
    /// The next entry, or `None` at the end of the archive.
    fn next_entry(&mut self) -> Result<Option<TarEntry>>;

    /// The current entry's data: `each(file offset, bytes)` in increasing
    /// offset order, at most `buf.len()` bytes at a time. A file that is
    /// not sparse and fits in `buf` comes in one call.
    fn data(
        &mut self,
        e: &TarEntry,
        buf: &mut [u8],
        each: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()>;

    /// The whole data of the current entry, when it was read ahead into a
    /// vector of its own (a small file, not sparse): handed over, with
    /// room to pad it to whole 4 KiB blocks. None: use [`Entries::data`].
    fn take_whole(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
}

impl<R: Read> Entries for TarReader<R> {
    fn next_entry(&mut self) -> Result<Option<TarEntry>> {
        TarReader::next_entry(self)
    }

    fn data(
        &mut self,
        e: &TarEntry,
        buf: &mut [u8],
        each: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        TarReader::data(self, e, buf, each)
    }
}

enum Item {
    Entry(Box<TarEntry>),
    /// Data of the entry before: file offset and its range in `bytes`.
    Chunk(u64, usize, usize),
    /// All the data of the (small) entry before, in a vector of its own.
    Whole(Vec<u8>),
    /// An entry already handed out.
    Taken,
}

#[derive(Default)]
struct Batch {
    items: Vec<Item>,
    /// Data area (its length is its capacity: zeroed once, reused).
    bytes: Vec<u8>,
    used: usize,
    /// Bytes in `Whole` items.
    owned: usize,
}

impl Batch {
    fn full(&self) -> bool {
        self.items.len() >= BATCH_ITEMS || self.used + self.owned >= BATCH_BYTES
    }
}

/// The consumer's side of a parsing thread.
pub(crate) struct Parsed {
    rx: Receiver<Result<Batch>>,
    back: SyncSender<Batch>,
    cur: Batch,
    pos: usize,
    ended: bool,
    handle: Option<JoinHandle<()>>,
}

/// The thread's side: sends full batches, takes emptied ones back.
struct Sender {
    tx: SyncSender<Result<Batch>>,
    spare: Receiver<Batch>,
    b: Batch,
}

impl Sender {
    fn fresh(&self) -> Batch {
        let mut b = self.spare.try_recv().unwrap_or_default();
        b.items.clear();
        b.used = 0;
        b.owned = 0;
        if b.bytes.len() < BATCH_BYTES + CHUNK_BYTES {
            b.bytes.resize(BATCH_BYTES + CHUNK_BYTES, 0);
        }
        b
    }

    /// Sends the batch so far; false when the consumer is gone.
    fn flush(&mut self) -> bool {
        let next = self.fresh();
        let b = std::mem::replace(&mut self.b, next);
        self.tx.send(Ok(b)).is_ok()
    }

    /// Parses the whole archive; false when the consumer went away.
    fn run<R: Read>(&mut self, r: &mut TarReader<R>, buf: &mut [u8]) -> Result<bool> {
        while let Some(e) = r.next_entry()? {
            let small = e.kind == TarKind::File
                && e.sparse.is_none()
                && e.size > 0
                && e.size <= CHUNK_BYTES as u64;
            let entry = Box::new(e);
            if small {
                // Read straight into a vector the engine queues as it is
                // (one piece: not sparse and no larger than a chunk), with
                // room for the zeros to the block's end.
                let n = entry.size as usize;
                let mut v = Vec::with_capacity(n.next_multiple_of(4096));
                v.resize(n, 0);
                r.data(&entry, &mut v, |_, _| Ok(()))?;
                self.b.owned += n;
                self.b.items.push(Item::Entry(entry));
                self.b.items.push(Item::Whole(v));
            } else if entry.kind != TarKind::File || entry.size == 0 {
                self.b.items.push(Item::Entry(entry));
            } else {
                self.b.items.push(Item::Entry(entry.clone()));
                let mut err = None;
                r.data(&entry, buf, |off, d| {
                    if self.b.used + d.len() > self.b.bytes.len() && !self.flush() {
                        err = Some(());
                        return Err(Error::Invalid("consumer gone".into()));
                    }
                    let s = self.b.used;
                    self.b.bytes[s..s + d.len()].copy_from_slice(d);
                    self.b.used += d.len();
                    self.b.items.push(Item::Chunk(off, s, s + d.len()));
                    Ok(())
                })
                .or_else(|e| if err.is_some() { Ok(()) } else { Err(e) })?;
                if err.is_some() {
                    return Ok(false);
                }
            }
            if self.b.full() && !self.flush() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Parsed {
    /// Starts a thread parsing the archive `inner`.
    pub(crate) fn start(inner: Box<dyn Read + Send>) -> Result<Parsed> {
        let (tx, rx) = sync_channel::<Result<Batch>>(DEPTH);
        let (back, spare) = sync_channel::<Batch>(DEPTH + 2);
        let handle = std::thread::Builder::new()
            .name("xfskit-tar".into())
            .spawn(move || {
                let mut s = Sender {
                    tx,
                    spare,
                    b: Batch::default(),
                };
                s.b = s.fresh();
                let mut r = TarReader::new(inner);
                let mut buf = vec![0u8; CHUNK_BYTES];
                match s.run(&mut r, &mut buf) {
                    Ok(true) => {
                        // The channel closing after this batch is the end.
                        let b = std::mem::take(&mut s.b);
                        let _ = s.tx.send(Ok(b));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        let b = std::mem::take(&mut s.b);
                        if s.tx.send(Ok(b)).is_ok() {
                            let _ = s.tx.send(Err(e));
                        }
                    }
                }
            })
            .map_err(|e| Error::Io(std::io::Error::other(format!("tar thread: {e}"))))?;
        Ok(Parsed {
            rx,
            back,
            cur: Batch::default(),
            pos: 0,
            ended: false,
            handle: Some(handle),
        })
    }

    /// Makes the next item current, receiving the next batch when this
    /// one is used up; false at the end of the archive.
    fn advance(&mut self) -> Result<bool> {
        while self.pos == self.cur.items.len() {
            if self.ended {
                return Ok(false);
            }
            match self.rx.recv() {
                Ok(Ok(b)) => {
                    let old = std::mem::replace(&mut self.cur, b);
                    let _ = self.back.try_send(old);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(_) => {
                    self.ended = true;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

impl Entries for Parsed {
    fn next_entry(&mut self) -> Result<Option<TarEntry>> {
        while self.advance()? {
            let it = std::mem::replace(&mut self.cur.items[self.pos], Item::Taken);
            self.pos += 1;
            if let Item::Entry(e) = it {
                return Ok(Some(*e));
            }
            // Data the caller did not ask for: skipped.
        }
        Ok(None)
    }

    fn data(
        &mut self,
        _e: &TarEntry,
        _buf: &mut [u8],
        each: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        while self.advance()? {
            match &self.cur.items[self.pos] {
                Item::Chunk(off, s, t) => {
                    let (off, s, t) = (*off, *s, *t);
                    self.pos += 1;
                    each(off, &self.cur.bytes[s..t])?;
                }
                Item::Whole(v) => {
                    self.pos += 1;
                    each(0, v)?;
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn take_whole(&mut self) -> Result<Option<Vec<u8>>> {
        if !self.advance()? || !matches!(self.cur.items[self.pos], Item::Whole(_)) {
            return Ok(None);
        }
        let it = std::mem::replace(&mut self.cur.items[self.pos], Item::Taken);
        self.pos += 1;
        match it {
            Item::Whole(v) => Ok(Some(v)),
            _ => Ok(None),
        }
    }
}

impl Drop for Parsed {
    fn drop(&mut self) {
        // The thread's next send fails once the receiver is gone.
        let (_, rx) = sync_channel(0);
        drop(std::mem::replace(&mut self.rx, rx));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

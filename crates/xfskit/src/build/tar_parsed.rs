//! Tar parsing on a thread of its own: headers are parsed and file data
//! is gathered there, in batches, while the engine thread only creates.
//!
//! A batch holds entries and the data of their files in one pooled buffer
//! aligned for direct I/O, up to [`BATCH_ITEMS`] entries or the buffer's
//! size. A small file's data is read straight into it at a 4 KiB boundary,
//! zero-padded to the next one, and is written to the image from there:
//! the engine queues the piece where it lies ([`FileData::Shared`]), so
//! the bytes are copied once, from the archive stream into the buffer.
//! The buffer goes back to the pool when the last of its pieces has been
//! written. At most [`DEPTH`] batches wait in the channel, and emptied ones
//! go back to the thread for reuse, so memory is bounded whatever the
//! archive. An error on the thread reaches the consumer in order, after
//! the entries parsed before it.
//!
//! Both this and the plain [`TarReader`] are [`Entries`]: the feed takes
//! either.

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::feed::CHUNK_BYTES;
use super::tar_reader::{TarEntry, TarKind, TarReader};
use crate::dev::aligned::{self, AlignedBuf, SharedBuf, SharedBytes};
use crate::dev::FileData;
use crate::error::{Error, Result};
use std::sync::Arc;

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
    fn take_whole(&mut self) -> Result<Option<FileData>> {
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
    /// Data of the entry before: file offset and its range in the data.
    Chunk(u64, usize, usize),
    /// All the data of the (small) entry before: its start in the data (a
    /// 4 KiB boundary) and length; zeros follow to the next boundary.
    Slot(usize, usize),
    /// All the data of the (small) entry before, in a vector of its own.
    Whole(Vec<u8>),
    /// An entry already handed out.
    Taken,
}

/// Size of a batch's data buffer (and so the most data in a batch).
const BATCH_DATA: usize = aligned::POOL_BUF;

/// Alignment (and padding) of small files in a batch's data.
const SLOT: usize = aligned::ALIGN;

#[derive(Default)]
struct Batch {
    items: Vec<Item>,
    /// The data while the batch is filled (its length is its capacity).
    filling: Option<AlignedBuf>,
    /// The data once the batch is sent, shared with the pieces cut from it.
    data: Option<Arc<SharedBuf>>,
    used: usize,
    /// Bytes in `Whole` items (counted against the batch's size too).
    owned: usize,
}

impl Batch {
    fn full(&self) -> bool {
        self.items.len() >= BATCH_ITEMS || self.used + self.owned >= BATCH_DATA
    }

    /// The bytes being filled.
    fn area(&mut self) -> &mut [u8] {
        self.filling.as_mut().map_or(&mut [], |b| b.as_mut_slice())
    }

    /// The data as sent.
    fn bytes(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.as_slice())
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
        b.data = None;
        b.used = 0;
        b.owned = 0;
        let mut area = aligned::take(BATCH_DATA);
        area.set_len(BATCH_DATA);
        b.filling = Some(area);
        b
    }

    /// Sends the batch so far; false when the consumer is gone.
    fn flush(&mut self) -> bool {
        let next = self.fresh();
        let mut b = std::mem::replace(&mut self.b, next);
        if let Some(mut area) = b.filling.take() {
            area.set_len(b.used);
            b.data = Some(SharedBuf::new(area));
        }
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
            if small && SharedBuf::may_share() {
                // Read straight into the batch's data, at a block boundary
                // (one piece: not sparse and no larger than a chunk).
                let n = entry.size as usize;
                // (A large file's chunk before may have left `used` at
                // any byte.)
                let slot = n.next_multiple_of(SLOT);
                if self.b.used.next_multiple_of(SLOT) + slot > BATCH_DATA && !self.flush() {
                    return Ok(false);
                }
                let s = self.b.used.next_multiple_of(SLOT);
                let area = &mut self.b.area()[s..s + slot];
                r.data(&entry, &mut area[..n], |_, _| Ok(()))?;
                area[n..].fill(0);
                self.b.used = s + slot;
                self.b.items.push(Item::Entry(entry));
                self.b.items.push(Item::Slot(s, n));
            } else if small {
                // Too many batches' data still waits to be written: a
                // vector of its own, with room for the zeros to the
                // block's end.
                let n = entry.size as usize;
                let mut v = Vec::with_capacity(n.next_multiple_of(SLOT));
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
                    if self.b.used + d.len() > BATCH_DATA && !self.flush() {
                        err = Some(());
                        return Err(Error::Invalid("consumer gone".into()));
                    }
                    let s = self.b.used;
                    self.b.area()[s..s + d.len()].copy_from_slice(d);
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
                super::readahead::yield_cpu();
                let mut s = Sender {
                    tx,
                    spare,
                    b: Batch::default(),
                };
                s.b = s.fresh();
                let mut r = TarReader::new(inner);
                let mut buf = vec![0u8; CHUNK_BYTES];
                match s.run(&mut r, &mut buf) {
                    // The channel closing after this batch is the end.
                    Ok(true) => {
                        let _ = s.flush();
                    }
                    Ok(false) => {}
                    Err(e) => {
                        if s.flush() {
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
                    let mut old = std::mem::replace(&mut self.cur, b);
                    // Its data stays alive as long as pieces of it do.
                    old.data = None;
                    old.items.clear();
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
                    each(off, &self.cur.bytes()[s..t])?;
                }
                Item::Slot(s, n) => {
                    let (s, n) = (*s, *n);
                    self.pos += 1;
                    each(0, &self.cur.bytes()[s..s + n])?;
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

    fn take_whole(&mut self) -> Result<Option<FileData>> {
        if !self.advance()? {
            return Ok(None);
        }
        let data = match std::mem::replace(&mut self.cur.items[self.pos], Item::Taken) {
            Item::Slot(s, n) => {
                let pad = n.next_multiple_of(SLOT) - n;
                let shared = self
                    .cur
                    .data
                    .clone()
                    .and_then(|d| SharedBytes::new(d, s, n, pad));
                FileData::Shared(
                    shared
                        .ok_or_else(|| Error::Invalid(format!("tar batch: no data at {s}+{n}")))?,
                )
            }
            Item::Whole(v) => FileData::Owned(v),
            other => {
                // Not whole data: left for `data` or `next_entry`.
                self.cur.items[self.pos] = other;
                return Ok(None);
            }
        };
        self.pos += 1;
        Ok(Some(data))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header for regular file `name` of `size` bytes.
    fn header(name: &str, size: usize) -> [u8; 512] {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let mut octal = |at: usize, len: usize, v: u64| {
            let s = format!("{v:0w$o}\0", w = len - 1);
            h[at..at + len].copy_from_slice(s.as_bytes());
        };
        octal(100, 8, 0o644);
        octal(108, 8, 0);
        octal(116, 8, 0);
        octal(124, 12, size as u64);
        octal(136, 12, 0);
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    fn contents(i: usize, size: usize) -> Vec<u8> {
        (0..size)
            .map(|j| (i * 31 + j * 7 % 253 + 1) as u8)
            .collect()
    }

    /// The shared-buffer count is process-wide: these tests take turns.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// An archive of files `sizes` long, and its end.
    fn archive(sizes: &[usize]) -> Vec<u8> {
        let mut tar = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            tar.extend_from_slice(&header(&format!("f{i}"), n));
            tar.extend_from_slice(&contents(i, n));
            tar.resize(tar.len().next_multiple_of(512), 0);
        }
        tar.resize(tar.len() + 1024, 0);
        tar
    }

    /// With the shared buffers all taken, small files come in vectors of
    /// their own, whole and right, and batches stay bounded.
    #[test]
    fn small_files_copied_past_the_shared_limit() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let held: Vec<_> = (0..aligned::SHARED_LIMIT)
            .map(|_| SharedBuf::new(AlignedBuf::with_capacity(1)))
            .collect();
        let sizes: Vec<usize> = (0..300).map(|i| [1, 4096, 70_000, 9000][i % 4]).collect();
        let mut p = Parsed::start(Box::new(std::io::Cursor::new(archive(&sizes)))).unwrap();
        for (i, &n) in sizes.iter().enumerate() {
            let e = p.next_entry().unwrap().expect("an entry");
            assert_eq!(e.path, format!("f{i}").into_bytes());
            // The batch in hand holds about a buffer's worth of data.
            let held: usize = (p.cur.items.iter())
                .map(|it| if let Item::Whole(v) = it { v.len() } else { 0 })
                .sum();
            assert!(held <= BATCH_DATA + CHUNK_BYTES, "a batch of {held} bytes");
            match p.take_whole().unwrap() {
                Some(FileData::Owned(v)) => assert!(v == contents(i, n), "file {i}"),
                other => panic!("file {i}: {other:?}"),
            }
        }
        assert!(p.next_entry().unwrap().is_none());
        drop(held);
    }

    /// Small files come out shared, each at a block boundary of the batch
    /// data with zeros to the next one; the others come as chunks; the
    /// bytes are the archive's either way, across several batches.
    #[test]
    fn small_files_shared_in_place() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut sizes = vec![
            1,
            511,
            512,
            4095,
            4096,
            4097,
            70_000,
            CHUNK_BYTES,
            CHUNK_BYTES + 1,
            0,
        ];
        sizes.extend(std::iter::repeat_n(4096, 600));
        sizes.extend([3, CHUNK_BYTES - 1, 9000]);
        let mut p = Parsed::start(Box::new(std::io::Cursor::new(archive(&sizes)))).unwrap();
        let mut kept = Vec::new();
        let mut buf = vec![0u8; CHUNK_BYTES];
        for (i, &n) in sizes.iter().enumerate() {
            let e = p.next_entry().unwrap().expect("an entry");
            assert_eq!(e.path, format!("f{i}").into_bytes());
            let want = contents(i, n);
            match p.take_whole().unwrap() {
                Some(FileData::Shared(b)) => {
                    assert!(n > 0 && n <= CHUNK_BYTES, "file {i} of {n} bytes shared");
                    assert!(b.as_slice() == want.as_slice(), "file {i}: bytes differ");
                    let padded = b.padded();
                    assert_eq!(padded.len(), n.next_multiple_of(SLOT), "file {i}");
                    assert_eq!(padded.as_ptr().addr() % SLOT, 0, "file {i} unaligned");
                    assert!(padded[n..].iter().all(|&x| x == 0), "file {i}: padding");
                    kept.push(b);
                }
                Some(FileData::Owned(_)) => {
                    panic!("file {i}: copied though shared buffers were free")
                }
                None => {
                    assert!(n == 0 || n > CHUNK_BYTES, "file {i} of {n} bytes not whole");
                    let mut got = Vec::new();
                    p.data(&e, &mut buf, &mut |off, d| {
                        assert_eq!(off as usize, got.len());
                        got.extend_from_slice(d);
                        Ok(())
                    })
                    .unwrap();
                    assert!(got == want, "file {i}: bytes differ");
                }
            }
        }
        assert!(p.next_entry().unwrap().is_none());
        // Several batches, each one shared buffer, kept alive by its pieces.
        let mut bufs: Vec<*const u8> = kept
            .iter()
            .map(|b| {
                b.padded()
                    .as_ptr()
                    .wrapping_sub(b.padded().as_ptr().addr() % BATCH_DATA)
            })
            .collect();
        bufs.dedup();
        assert!(bufs.len() >= 3, "{} batches", bufs.len());
        // Every piece still reads right after all the batches were made.
        for b in &kept {
            assert!(b.padded()[b.len()..].iter().all(|&x| x == 0));
        }
    }
}

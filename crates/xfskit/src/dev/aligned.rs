//! Memory for direct I/O: byte buffers that start on a 4 KiB boundary and
//! never move, and a process-wide pool that hands them out again.
//!
//! File data travels in these from the source read to the device write:
//! read into one (with `O_DIRECT` when the source is not cached), queued
//! by value in the write state, written from where it is with `O_DIRECT`,
//! and returned to the pool. No copy on the way, and no fresh memory to
//! fault in for every file.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Alignment of the start of every buffer (and of direct I/O offsets and
/// lengths): the largest logical block size devices use.
pub const ALIGN: usize = 4096;

/// Capacity of the large buffers the pool keeps (source reads).
pub const POOL_BUF: usize = 1 << 20;

/// Capacity of the small buffers the pool keeps: runs of small writes,
/// which metadata blocks (inode chunks, directory blocks) cut every few
/// hundred KiB, so a 1 MiB buffer per run would sit mostly empty.
pub const RUN_BUF: usize = 256 << 10;

/// Most bytes of buffers kept in the pool; more are freed.
const POOL_BYTES: usize = 256 << 20;

/// A byte buffer whose start is aligned to [`ALIGN`], with a fixed
/// capacity: it never reallocates, so the alignment holds for its life.
pub struct AlignedBuf {
    /// Initialized memory with `ALIGN` bytes of room to align the start.
    mem: Vec<u8>,
    /// Offset of the aligned start in `mem`.
    skip: usize,
    /// Bytes in use from the start.
    len: usize,
}

impl AlignedBuf {
    /// A new buffer of at least `cap` bytes (rounded up to [`ALIGN`]).
    pub fn with_capacity(cap: usize) -> AlignedBuf {
        let cap = cap.div_ceil(ALIGN).max(1) * ALIGN;
        let mem = vec![0u8; cap + ALIGN];
        let skip = mem.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { mem, skip, len: 0 }
    }

    /// A buffer holding a copy of `bytes`, with room for no more.
    pub fn copy_of(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::with_capacity(bytes.len());
        b.extend_from_slice(bytes);
        b
    }

    /// Bytes the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.mem.len() - ALIGN
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no bytes are in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes in use.
    pub fn as_slice(&self) -> &[u8] {
        &self.mem[self.skip..self.skip + self.len]
    }

    /// The bytes in use, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.mem[self.skip..self.skip + self.len]
    }

    /// Sets the bytes in use to `len` (at most the capacity). Bytes that
    /// come into use keep whatever the memory held (zero when new, old
    /// contents when pooled): callers overwrite them.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }

    /// Appends `bytes` if they fit; false (and nothing appended) if not.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.capacity() - self.len {
            return false;
        }
        let at = self.skip + self.len;
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        true
    }

    /// Zeroes the bytes in use from `from` on.
    pub fn zero_from(&mut self, from: usize) {
        let s = self.skip;
        if from < self.len {
            self.mem[s + from..s + self.len].fill(0);
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} of {} bytes)", self.len, self.capacity())
    }
}

struct Pool {
    /// Free buffers of [`POOL_BUF`] bytes.
    large: Vec<AlignedBuf>,
    /// Free buffers of [`RUN_BUF`] bytes.
    small: Vec<AlignedBuf>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    large: Vec::new(),
    small: Vec::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An empty buffer of at least `cap` bytes: a pooled one when `cap` is at
/// most [`POOL_BUF`] and the pool has one, a new one otherwise.
pub fn take(cap: usize) -> AlignedBuf {
    if cap <= POOL_BUF {
        let mut p = pool();
        if let Some(mut b) = p.large.pop() {
            p.bytes -= b.capacity();
            b.len = 0;
            return b;
        }
        drop(p);
        return AlignedBuf::with_capacity(POOL_BUF);
    }
    AlignedBuf::with_capacity(cap)
}

/// An empty buffer of [`RUN_BUF`] bytes (pooled when the pool has one).
pub fn take_small() -> AlignedBuf {
    let mut p = pool();
    if let Some(mut b) = p.small.pop() {
        p.bytes -= b.capacity();
        b.len = 0;
        return b;
    }
    drop(p);
    AlignedBuf::with_capacity(RUN_BUF)
}

/// Returns a buffer to the pool (buffers of the pool's two sizes only, up
/// to the pool's limit; others are freed).
pub fn give(b: AlignedBuf) {
    let cap = b.capacity();
    if cap != POOL_BUF && cap != RUN_BUF {
        return;
    }
    let mut p = pool();
    if p.bytes + cap <= POOL_BYTES {
        p.bytes += cap;
        if cap == POOL_BUF {
            p.large.push(b);
        } else {
            p.small.push(b);
        }
    }
}

/// A pooled buffer whose bytes are shared by pieces cut from it (the data
/// of a batch of tar members, whose small files are queued for writing
/// where they lie): back to the pool when the last piece is dropped.
pub struct SharedBuf(Option<AlignedBuf>);

/// [`SharedBuf`]s alive in the process.
static SHARED_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Most [`SharedBuf`]s that may be alive before their makers use buffers
/// of each piece's own instead: a shared buffer stays alive while any
/// piece of it waits to be written, so pieces scattered over many buffers
/// would otherwise pin memory out of proportion to the data pending.
pub const SHARED_LIMIT: usize = 160;

impl SharedBuf {
    /// Shares `b`'s bytes in use.
    pub fn new(b: AlignedBuf) -> Arc<SharedBuf> {
        SHARED_LIVE.fetch_add(1, Ordering::Relaxed);
        Arc::new(SharedBuf(Some(b)))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |b| b.as_slice())
    }

    /// True while fewer than [`SHARED_LIMIT`] shared buffers are alive.
    pub fn may_share() -> bool {
        SHARED_LIVE.load(Ordering::Relaxed) < SHARED_LIMIT
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        SHARED_LIVE.fetch_sub(1, Ordering::Relaxed);
        if let Some(b) = self.0.take() {
            give(b);
        }
    }
}

/// Bytes inside a [`SharedBuf`], followed there by `zeros` zero bytes, so
/// that the piece can be written as whole blocks from where it is.
#[derive(Clone)]
pub struct SharedBytes {
    buf: Arc<SharedBuf>,
    start: usize,
    len: usize,
    zeros: usize,
}

impl SharedBytes {
    /// Bytes `start..start + len` of `buf`; None unless they lie inside it
    /// and the `zeros` bytes after them do too and are all zero.
    pub fn new(buf: Arc<SharedBuf>, start: usize, len: usize, zeros: usize) -> Option<SharedBytes> {
        let end = start.checked_add(len)?.checked_add(zeros)?;
        let b = buf.as_slice().get(start..end)?;
        if !b[len..].iter().all(|&x| x == 0) {
            return None;
        }
        Some(SharedBytes {
            buf,
            start,
            len,
            zeros,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf.as_slice()[self.start..self.start + self.len]
    }

    /// The bytes and the zeros after them.
    pub fn padded(&self) -> &[u8] {
        &self.buf.as_slice()[self.start..self.start + self.len + self.zeros]
    }

    /// Number of bytes (the zeros after them not counted).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A file's contents handed over to the engine: a vector of its own, or
/// a piece of a buffer shared with other files (a tar batch's data).
#[derive(Clone)]
pub enum FileData {
    /// In a vector of its own (queued as it is, padded in place).
    Owned(Vec<u8>),
    /// In a shared buffer (queued where it lies).
    Shared(SharedBytes),
}

impl FileData {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            FileData::Owned(v) => v,
            FileData::Shared(s) => s.as_slice(),
        }
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for FileData {
    fn default() -> FileData {
        FileData::Owned(Vec::new())
    }
}

impl From<Vec<u8>> for FileData {
    fn from(v: Vec<u8>) -> FileData {
        FileData::Owned(v)
    }
}

impl std::fmt::Debug for FileData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileData::Owned(v) => write!(f, "FileData::Owned({} bytes)", v.len()),
            FileData::Shared(s) => write!(f, "FileData::Shared({} bytes)", s.len()),
        }
    }
}

/// Most zero bytes [`zeros`] gives: the largest block size.
pub const ZEROS_MAX: usize = 65536;

/// Zeros to pad shared pieces to whole blocks with, aligned for direct I/O.
#[repr(C, align(4096))]
struct Zeros([u8; ZEROS_MAX]);

static ZEROS: Zeros = Zeros([0; ZEROS_MAX]);

/// `n` zero bytes (at most [`ZEROS_MAX`]), aligned for direct I/O.
pub fn zeros(n: usize) -> &'static [u8] {
    &ZEROS.0[..n.min(ZEROS_MAX)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_fixed_and_pooled() {
        let mut b = take(100);
        assert_eq!(b.as_slice().as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.capacity(), POOL_BUF);
        assert!(b.extend_from_slice(&[7u8; 5000]));
        assert!(!b.extend_from_slice(&vec![1u8; POOL_BUF]));
        assert_eq!(b.len(), 5000);
        b.set_len(ALIGN * 2);
        b.zero_from(5000);
        assert!(b.as_slice()[5000..].iter().all(|&x| x == 0));
        assert_eq!(b.as_slice()[4999], 7);
        let big = AlignedBuf::with_capacity(POOL_BUF + 1);
        assert_eq!(big.capacity(), POOL_BUF + ALIGN);
        assert_eq!(big.as_slice().as_ptr() as usize % ALIGN, 0);
        give(b);
        give(big);
        let again = take(1);
        assert!(again.is_empty());
        let s = take_small();
        assert_eq!(s.capacity(), RUN_BUF);
        assert_eq!(s.as_slice().as_ptr() as usize % ALIGN, 0);
        give(s);
        assert_eq!(again.as_slice().as_ptr() as usize % ALIGN, 0);
        let c = AlignedBuf::copy_of(b"abc");
        assert_eq!(c.as_slice(), b"abc");
    }
}

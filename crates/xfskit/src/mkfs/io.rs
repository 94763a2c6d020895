//! Output side of mkfs: sorted, merged, vectored writes, and zeroing or
//! discarding ranges without writing zeros where the target allows it.
//!
//! Regular files: discard is a hole punch over the whole file, zeroing is a
//! hole punch (falling back to `FALLOC_FL_ZERO_RANGE`, then to zero writes).
//! Block devices: discard is `fallocate(PUNCH_HOLE)` (the kernel issues a
//! discard that reads back zeros), zeroing is `FALLOC_FL_ZERO_RANGE` (the
//! kernel's zero-out); both fall back to zero writes for zeroing.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::{fallocate, FallocateFlags};

use crate::dev::Device;

/// Size of the zero buffer used when zeroing has to write.
const ZERO_CHUNK: usize = 1 << 20;
/// Alignment of memory, offsets and lengths of `O_DIRECT` writes (the
/// largest logical sector size in use, and the page size).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Where mkfs writes: a file or block device, or any engine [`Device`].
pub(crate) enum Sink<'a> {
    /// An open file or block device, with a second handle opened with
    /// `O_DIRECT` when the target allows it (see [`Sink::direct`]).
    File {
        file: &'a File,
        block_device: bool,
        direct: Option<&'a File>,
    },
    /// An engine device (tests, memory images).
    Device(&'a dyn Device),
}

/// Counters of what was written, for reports and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct IoStats {
    /// Write system calls (or device write calls) made.
    pub write_calls: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

impl Sink<'_> {
    /// Write several buffers contiguous on disk from `off`.
    fn write_vectored(&self, bufs: &[&[u8]], off: u64, stats: &mut IoStats) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        stats.bytes_written += total as u64;
        match self {
            Sink::Device(d) => {
                stats.write_calls += 1;
                d.write_vectored_at(bufs, off)
            }
            Sink::File { file, .. } => {
                stats.write_calls += crate::dev::pwritev_all(file, bufs, off)?;
                Ok(())
            }
        }
    }

    /// Write one buffer at byte offset `off`.
    pub fn write_all_at(&self, buf: &[u8], off: u64, stats: &mut IoStats) -> io::Result<()> {
        self.write_vectored(&[buf], off, stats)
    }

    /// The `O_DIRECT` handle, if the target has one.
    pub fn direct(&self) -> Option<&File> {
        match self {
            Sink::File { direct, .. } => *direct,
            Sink::Device(_) => None,
        }
    }

    /// Write `buf` at `off` through the `O_DIRECT` handle: `buf`, `off` and
    /// the length must be aligned to [`DIRECT_ALIGN`].  Returns false (and
    /// writes nothing) when the target refuses direct I/O for this request,
    /// so the caller can fall back to [`Sink::write_all_at`].
    pub fn write_direct(&self, buf: &[u8], off: u64, stats: &mut IoStats) -> io::Result<bool> {
        let Some(f) = self.direct() else {
            return Ok(false);
        };
        let mut done = 0usize;
        while done < buf.len() {
            match rustix::io::pwrite(f, &buf[done..], off + done as u64) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short write")),
                Ok(n) => {
                    stats.write_calls += 1;
                    done += n;
                }
                Err(rustix::io::Errno::INVAL) if done == 0 => return Ok(false),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        stats.bytes_written += buf.len() as u64;
        Ok(true)
    }

    /// Make `[off, off+len)` read as zeros, preferably without writing.
    pub fn zero_range(&self, off: u64, len: u64, stats: &mut IoStats) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if let Sink::File {
            file, block_device, ..
        } = self
        {
            let modes: &[FallocateFlags] = if *block_device {
                &[FallocateFlags::ZERO_RANGE]
            } else {
                &[
                    FallocateFlags::PUNCH_HOLE.union(FallocateFlags::KEEP_SIZE),
                    FallocateFlags::ZERO_RANGE.union(FallocateFlags::KEEP_SIZE),
                ]
            };
            for &m in modes {
                if fallocate(file, m, off, len).is_ok() {
                    return Ok(());
                }
            }
        }
        let zeros = vec![0u8; ZERO_CHUNK];
        let mut pos = off;
        while pos < off + len {
            let n = (off + len - pos).min(ZERO_CHUNK as u64) as usize;
            self.write_vectored(&[&zeros[..n]], pos, stats)?;
            pos += n as u64;
        }
        Ok(())
    }

    /// Discard the whole target (`len` bytes); failure is not an error.
    pub fn discard_all(&self, len: u64) -> bool {
        match self {
            Sink::File { file, .. } => {
                let m = FallocateFlags::PUNCH_HOLE.union(FallocateFlags::KEEP_SIZE);
                fallocate(file, m, 0, len).is_ok()
            }
            Sink::Device(_) => false,
        }
    }

    /// Make every write durable.
    pub fn flush(&self) -> io::Result<()> {
        match self {
            Sink::File { file, .. } => file.sync_all(),
            Sink::Device(d) => d.flush(),
        }
    }

    /// Read into `buf` from `off` (for signature detection).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        match self {
            Sink::File { file, .. } => file.read_exact_at(buf, off),
            Sink::Device(d) => d.read_at(buf, off),
        }
    }
}

/// A batch of writes: sorted by address and merged where contiguous before
/// they are issued.
#[derive(Default)]
pub(crate) struct WriteBatch {
    items: Vec<(u64, Vec<u8>)>,
}

impl WriteBatch {
    /// Queue `data` for byte offset `off`.
    pub fn push(&mut self, off: u64, data: Vec<u8>) {
        if !data.is_empty() {
            self.items.push((off, data));
        }
    }

    /// Issue every queued write, merging adjacent buffers into one vectored
    /// write.  Overlapping buffers are written in queue order (later wins).
    pub fn flush_to(&mut self, sink: &Sink<'_>, stats: &mut IoStats) -> io::Result<()> {
        let mut items = std::mem::take(&mut self.items);
        items.sort_by_key(|i| i.0);
        let mut i = 0;
        while i < items.len() {
            let start = items[i].0;
            let mut end = start + items[i].1.len() as u64;
            let mut j = i + 1;
            while j < items.len() && items[j].0 == end {
                end += items[j].1.len() as u64;
                j += 1;
            }
            // An overlap (not expected) is written separately, in order.
            let bufs: Vec<&[u8]> = items[i..j].iter().map(|x| x.1.as_slice()).collect();
            sink.write_vectored(&bufs, start, stats)?;
            i = j;
        }
        Ok(())
    }
}

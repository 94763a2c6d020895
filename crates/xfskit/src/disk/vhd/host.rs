//! The host file of a VHD or VDI written in place: it grows as blocks are
//! allocated at its end, so its length is kept here (and not fixed at
//! open, as [`crate::dev::FileDevice`]'s is). Shared by both formats.

use crate::dev::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A local image file open for reading and writing, locked.
pub(crate) struct HostFile {
    file: File,
    len: AtomicU64,
}

impl HostFile {
    /// Opens the existing file at `path` for writing (locked, as every
    /// writer of an image is).
    pub(crate) fn open(path: &Path) -> Result<HostFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        crate::dev::lock_for_writing(&file, path)?;
        let len = file.metadata()?.len();
        Ok(HostFile {
            file,
            len: AtomicU64::new(len),
        })
    }

    /// Creates `path`, which must not exist, empty.
    pub(crate) fn create_new(path: &Path) -> Result<HostFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        crate::dev::lock_for_writing(&file, path)?;
        Ok(HostFile {
            file,
            len: AtomicU64::new(0),
        })
    }

    /// Makes the file `len` bytes long (the new bytes are zeros, a hole).
    pub(crate) fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }
}

fn named(path: &Path, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl Device for HostFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.len.load(Ordering::Acquire))
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the image file",
            ));
        }
        self.file.read_exact_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)?;
        self.len.fetch_max(off + buf.len() as u64, Ordering::AcqRel);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }
}

/// Reads `buf` from `file` at `off`; the part past the file's end reads as
/// zeros (a block whose tail was never written, a file cut short), as QEMU
/// reads it.
pub(crate) fn read_padded(file: &dyn Device, buf: &mut [u8], off: u64) -> io::Result<()> {
    let n = file.len().saturating_sub(off).min(buf.len() as u64) as usize;
    buf[n..].fill(0);
    if n > 0 {
        file.read_at(&mut buf[..n], off)?;
    }
    Ok(())
}

/// 16 bytes for a new image's UUID: derived from `SOURCE_DATE_EPOCH`, the
/// size and `salt` when that is set (a reproducible build gives the same
/// file), from the system's random source otherwise.
pub(crate) fn new_uuid(size: u64, salt: &[u8]) -> [u8; 16] {
    let mut u = [0u8; 16];
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok();
    let random = epoch.is_none()
        && File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut u))
            .is_ok();
    if !random {
        // FNV-1a over the inputs, spread over 16 bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = match &epoch {
            Some(e) => e.as_bytes().to_vec(),
            None => [
                now.to_le_bytes(),
                u64::from(std::process::id()).to_le_bytes(),
            ]
            .concat(),
        };
        for chunk in [&seed[..], &size.to_le_bytes(), salt] {
            for &b in chunk {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        u[..8].copy_from_slice(&h.to_le_bytes());
        let h2 = h.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ size;
        u[8..].copy_from_slice(&h2.to_le_bytes());
    }
    // A version 4 (random) UUID, RFC 4122 variant.
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// The time a new image is stamped with: `SOURCE_DATE_EPOCH` when set,
/// else now (Unix seconds).
pub(crate) fn stamp_time() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        })
}

//! An in-memory device for tests and for building images in memory.

use super::Device;
use std::io;
use std::sync::RwLock;

/// A device held in a `Vec<u8>`.
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `len` bytes.
    pub fn new(len: usize) -> MemDevice {
        MemDevice {
            data: RwLock::new(vec![0; len]),
        }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice {
            data: RwLock::new(bytes),
        }
    }

    /// A copy of the contents.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.data.read().map(|d| d.clone()).unwrap_or_default()
    }
}

fn range(off: u64, n: usize, len: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(off).map_err(|_| eof())?;
    let end = start.checked_add(n).ok_or_else(eof)?;
    if end > len {
        return Err(eof());
    }
    Ok(start..end)
}

fn eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "access past the end of the memory device",
    )
}

fn poisoned() -> io::Error {
    io::Error::other("memory device lock poisoned")
}

impl Device for MemDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let d = self.data.read().map_err(|_| poisoned())?;
        let r = range(off, buf.len(), d.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut d = self.data.write().map_err(|_| poisoned())?;
        let r = range(off, buf.len(), d.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.data.read().map(|d| d.len() as u64).unwrap_or(0)
    }
}

//! A local image file written in place that grows as a container format
//! allocates at its end (qcow2 clusters, VMDK grains, VHD, VHDX and VDI
//! blocks): its length is kept here, not fixed at open as
//! [`super::FileDevice`]'s is.

use super::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A growing image file open for reading and writing.
pub struct GrowFile {
    file: File,
    len: AtomicU64,
}

fn named(path: &Path, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl GrowFile {
    /// Opens the existing file at `path` for writing, locked as every
    /// writer of an image is.
    pub fn open(path: &Path) -> Result<GrowFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        super::lock_for_writing(&file, path)?;
        Ok(GrowFile::from_file(file)?)
    }

    /// Creates `path`, which must not exist, empty and locked.
    pub fn create_new(path: &Path) -> Result<GrowFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        super::lock_for_writing(&file, path)?;
        Ok(GrowFile::from_file(file)?)
    }

    /// `file`, opened (and locked) by the caller, at its current length.
    pub fn from_file(file: File) -> io::Result<GrowFile> {
        let len = file.metadata()?.len();
        Ok(GrowFile {
            file,
            len: AtomicU64::new(len),
        })
    }

    /// Makes the file `len` bytes long (new bytes are zeros, a hole).
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }

    /// Makes the file at least `len` bytes long.
    pub fn grow(&self, len: u64) -> io::Result<()> {
        if len > self.len.load(Ordering::Acquire) {
            self.file.set_len(len)?;
            self.len.fetch_max(len, Ordering::AcqRel);
        }
        Ok(())
    }
}

impl Device for GrowFile {
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

//! Positional block devices: the only way the engine touches storage.

pub mod aligned;
mod concat;
pub mod extlog;
mod file;
mod gate;
mod grow;
mod mem;
pub mod overlay;
pub mod undo;
mod window;

pub use aligned::{AlignedBuf, FileData, SharedBytes};
pub use concat::Concat;
pub use extlog::{WithLog, EXTERNAL_LOG_BASE};
pub(crate) use file::lock_for_writing;
pub(crate) use file::pwritev_all;
pub use file::FileDevice;
pub use gate::{shut_down as gate_error, Gate};
pub use grow::GrowFile;
pub use mem::MemDevice;
pub use overlay::{Overlay, OverlayDevice};
pub use undo::UndoDevice;
pub use window::Window;

use std::io;
use std::mem::MaybeUninit;

/// A device addressed by byte offset. Methods take `&self` so that many
/// threads (one per AG) can read at once.
pub trait Device: Send + Sync {
    /// Fills `buf` from byte offset `off`; reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Writes `buf` at byte offset `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Writes several buffers that are contiguous on disk, starting at `off`.
    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        let mut pos = off;
        for b in bufs {
            self.write_at(b, pos)?;
            pos += b.len() as u64;
        }
        Ok(())
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True when the device has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hints that the range will be read soon; the default does nothing.
    fn will_need(&self, _off: u64, _len: u64) {}
    /// As [`Device::read_at`] into memory that may not be initialized yet
    /// (a new buffer the data goes to directly); on success every byte is.
    /// The default zeroes it first; devices that read with a system call
    /// fill it without that pass.
    fn read_uninit_at(&self, buf: &mut [MaybeUninit<u8>], off: u64) -> io::Result<()> {
        self.read_at(zeroed(buf), off)
    }
    /// An external log device beside this one ([`WithLog`]): where its
    /// byte 0 is addressed and its length. Wrappers pass it on.
    fn log_base(&self) -> Option<(u64, u64)> {
        None
    }
}

pub use crate::sys::zeroed;

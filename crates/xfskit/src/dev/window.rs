//! A byte range of another device, seen as a device of its own: a partition
//! of a disk image, or a filesystem inside a qcow2 disk.

use super::Device;
use std::io;
use std::sync::Arc;

/// The bytes `start..start + len` of `inner`. Every access is checked
/// against the window, so a filesystem inside a partition can never read or
/// write its neighbours.
pub struct Window {
    inner: Arc<dyn Device>,
    start: u64,
    len: u64,
}

impl Window {
    /// A window of `len` bytes at `start`; fails when it does not lie inside
    /// `inner`.
    pub fn new(inner: Arc<dyn Device>, start: u64, len: u64) -> io::Result<Window> {
        let end = start.checked_add(len).ok_or_else(|| outside(start, len))?;
        if end > inner.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "window {start}..{end} runs past the end of the device ({} bytes)",
                    inner.len()
                ),
            ));
        }
        Ok(Window { inner, start, len })
    }

    /// Where the window starts on the inner device.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The absolute offset of `n` bytes at `off`, when they lie inside.
    fn map(&self, off: u64, n: usize) -> io::Result<u64> {
        let end = off
            .checked_add(n as u64)
            .ok_or_else(|| outside(off, n as u64))?;
        if end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "access {off}..{end} past the end of a {}-byte partition",
                    self.len
                ),
            ));
        }
        Ok(self.start + off)
    }
}

fn outside(off: u64, n: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("access of {n} bytes at {off} overflows"),
    )
}

impl Device for Window {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let abs = self.map(off, buf.len())?;
        self.inner.read_at(buf, abs)
    }

    fn read_uninit_at(&self, buf: &mut [std::mem::MaybeUninit<u8>], off: u64) -> io::Result<()> {
        let abs = self.map(off, buf.len())?;
        self.inner.read_uninit_at(buf, abs)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let abs = self.map(off, buf.len())?;
        self.inner.write_at(buf, abs)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let abs = self.map(off, total)?;
        self.inner.write_vectored_at(bufs, abs)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn will_need(&self, off: u64, len: u64) {
        if let Ok(abs) = self.map(off, 0) {
            let len = len.min(self.len - off);
            self.inner.will_need(abs, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn disk() -> Arc<dyn Device> {
        Arc::new(MemDevice::from_bytes(
            (0..=255u8).cycle().take(4096).collect(),
        ))
    }

    #[test]
    fn reads_and_writes_inside_only() {
        let w = Window::new(disk(), 1000, 100).unwrap();
        assert_eq!(w.len(), 100);
        let mut b = [0u8; 4];
        w.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [232, 233, 234, 235]);
        w.read_at(&mut b, 96).unwrap();
        assert!(w.read_at(&mut b, 97).is_err());
        assert!(w.read_at(&mut b, u64::MAX - 1).is_err());
        w.write_at(&[9, 9], 98).unwrap();
        assert!(w.write_at(&[9, 9], 99).is_err());
        assert!(w.write_vectored_at(&[&[1; 50], &[2; 51]], 0).is_err());
    }

    #[test]
    fn refuses_a_window_past_the_end() {
        assert!(Window::new(disk(), 4000, 97).is_err());
        assert!(Window::new(disk(), u64::MAX, 2).is_err());
        assert!(Window::new(disk(), 4000, 96).is_ok());
    }
}

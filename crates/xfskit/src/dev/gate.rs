//! A device that can be cut off: once [`Gate::close`] is called every read,
//! write and flush fails with EIO, as a kernel filesystem's I/O does after
//! a shutdown (XFS_IOC_GOINGDOWN). What reached the device before stays.

use super::Device;
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `inner`, until closed.
pub struct Gate {
    inner: Arc<dyn Device>,
    closed: AtomicBool,
}

impl Gate {
    /// Passes every call to `inner` while open.
    pub fn new(inner: Arc<dyn Device>) -> Gate {
        Gate {
            inner,
            closed: AtomicBool::new(false),
        }
    }

    /// Cuts the device off for good.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn open(&self) -> io::Result<()> {
        if self.is_closed() {
            return Err(shut_down());
        }
        Ok(())
    }
}

/// The error of any I/O after a shutdown.
pub fn shut_down() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl Device for Gate {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.open()?;
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.open()?;
        self.inner.write_at(buf, off)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        self.open()?;
        self.inner.write_vectored_at(bufs, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.open()?;
        self.inner.flush()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_uninit_at(&self, buf: &mut [MaybeUninit<u8>], off: u64) -> io::Result<()> {
        self.open()?;
        self.inner.read_uninit_at(buf, off)
    }
    fn will_need(&self, off: u64, len: u64) {
        if !self.is_closed() {
            self.inner.will_need(off, len)
        }
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_means_eio_and_nothing_written() {
        let mem: Arc<dyn Device> = Arc::new(crate::dev::MemDevice::new(4096));
        let g = Gate::new(mem.clone());
        g.write_at(&[1; 512], 0).unwrap();
        g.close();
        assert_eq!(
            g.write_at(&[2; 512], 0).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        let mut b = [0u8; 512];
        assert!(g.read_at(&mut b, 0).is_err());
        mem.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [1; 512]);
    }
}

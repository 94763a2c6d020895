//! A data device with an external log device beside it (`--logdev`,
//! `mount -o logdev=`). The log is seen at byte [`EXTERNAL_LOG_BASE`] and
//! up, so the log reader, the journal and recovery address it as they
//! address an internal log, through the one device an `Fs` holds.

use super::Device;
use std::io;
use std::sync::Arc;

/// Where an external log's byte 0 appears in the combined address space:
/// far past any data device (64 PiB).
pub const EXTERNAL_LOG_BASE: u64 = 1 << 56;

/// The data device, with the log device mapped at [`EXTERNAL_LOG_BASE`].
pub struct WithLog {
    data: Arc<dyn Device>,
    log: Arc<dyn Device>,
}

impl WithLog {
    /// `data` with `log` beside it.
    pub fn new(data: Arc<dyn Device>, log: Arc<dyn Device>) -> WithLog {
        WithLog { data, log }
    }

    /// The log device alone.
    pub fn log(&self) -> &Arc<dyn Device> {
        &self.log
    }

    fn route(&self, off: u64, len: usize) -> io::Result<(&dyn Device, u64)> {
        let end = off.saturating_add(len as u64);
        if off >= EXTERNAL_LOG_BASE {
            Ok((self.log.as_ref(), off - EXTERNAL_LOG_BASE))
        } else if end <= self.data.len() || end <= EXTERNAL_LOG_BASE {
            Ok((self.data.as_ref(), off))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an I/O that spans the data device and the external log",
            ))
        }
    }
}

impl Device for WithLog {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let (d, o) = self.route(off, buf.len())?;
        d.read_at(buf, o)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let (d, o) = self.route(off, buf.len())?;
        d.write_at(buf, o)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        let (d, o) = self.route(off, n)?;
        d.write_vectored_at(bufs, o)
    }
    fn flush(&self) -> io::Result<()> {
        // The log first: a flush orders both devices' completed writes.
        self.log.flush()?;
        self.data.flush()
    }
    fn len(&self) -> u64 {
        self.data.len()
    }
    fn will_need(&self, off: u64, len: u64) {
        if off < EXTERNAL_LOG_BASE {
            self.data.will_need(off, len)
        }
    }
    fn read_uninit_at(&self, buf: &mut [std::mem::MaybeUninit<u8>], off: u64) -> io::Result<()> {
        let (d, o) = self.route(off, buf.len())?;
        d.read_uninit_at(buf, o)
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        Some((EXTERNAL_LOG_BASE, self.log.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn routes_by_address() {
        let d = WithLog::new(
            Arc::new(MemDevice::from_bytes(vec![1u8; 4096])),
            Arc::new(MemDevice::from_bytes(vec![2u8; 4096])),
        );
        let mut b = [0u8; 512];
        d.read_at(&mut b, 512).unwrap();
        assert_eq!(b[0], 1);
        d.read_at(&mut b, EXTERNAL_LOG_BASE + 512).unwrap();
        assert_eq!(b[0], 2);
        d.write_at(&[3u8; 512], EXTERNAL_LOG_BASE).unwrap();
        d.read_at(&mut b, EXTERNAL_LOG_BASE).unwrap();
        assert_eq!(b[0], 3);
        assert!(d.read_at(&mut [0u8; 1024], 3584).is_err());
        assert_eq!(d.log_base(), Some((EXTERNAL_LOG_BASE, 4096)));
    }
}

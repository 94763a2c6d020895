//! A device seen through an overlay of replaced sectors: what log
//! recovery produces before anything is written. Reads return the
//! overlay's sectors where it has them and the device's bytes elsewhere;
//! writes go to the overlay only, so the device is never changed.

use super::Device;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, RwLock};

/// Bytes per overlay sector.
pub const SECTOR: u64 = 512;

/// Sector-granular replacement bytes, keyed by disk address (512-byte
/// units).
#[derive(Debug, Default, Clone)]
pub struct Overlay {
    sectors: BTreeMap<u64, Box<[u8; SECTOR as usize]>>,
}

impl Overlay {
    /// An empty overlay.
    pub fn new() -> Overlay {
        Overlay::default()
    }

    /// Number of sectors held.
    pub fn len(&self) -> usize {
        self.sectors.len()
    }

    /// True when nothing was replaced.
    pub fn is_empty(&self) -> bool {
        self.sectors.is_empty()
    }

    /// Replaces the sectors from disk address `daddr` with `bytes` (a
    /// multiple of 512 bytes; a partial last sector is ignored).
    pub fn put(&mut self, daddr: u64, bytes: &[u8]) {
        for (i, c) in bytes.chunks_exact(SECTOR as usize).enumerate() {
            match self.sectors.get_mut(&(daddr + i as u64)) {
                Some(s) => s.copy_from_slice(c),
                None => {
                    let mut s = Box::new([0u8; SECTOR as usize]);
                    s.copy_from_slice(c);
                    self.sectors.insert(daddr + i as u64, s);
                }
            }
        }
    }

    /// The bytes of `n` sectors from `daddr` when the overlay holds all of
    /// them.
    pub fn get_all(&self, daddr: u64, n: u64) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity((n * SECTOR) as usize);
        let mut want = daddr;
        for (&d, s) in self.sectors.range(daddr..daddr + n) {
            if d != want {
                return None;
            }
            out.extend_from_slice(&s[..]);
            want += 1;
        }
        (want == daddr + n).then_some(out)
    }

    /// Copies the overlay's sectors that intersect byte range
    /// `[off, off + buf.len())` into `buf`.
    pub fn patch(&self, buf: &mut [u8], off: u64) {
        if buf.is_empty() {
            return;
        }
        let end = off + buf.len() as u64;
        let first = off / SECTOR;
        let last = (end - 1) / SECTOR;
        for (&d, s) in self.sectors.range(first..=last) {
            let s_start = d * SECTOR;
            let lo = s_start.max(off);
            let hi = (s_start + SECTOR).min(end);
            buf[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&s[(lo - s_start) as usize..(hi - s_start) as usize]);
        }
    }

    /// Runs of adjacent sectors: (disk address, bytes), in address order.
    pub fn runs(&self) -> Vec<(u64, Vec<u8>)> {
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        for (&d, s) in &self.sectors {
            match out.last_mut() {
                Some((start, v)) if *start + v.len() as u64 / SECTOR == d => {
                    v.extend_from_slice(&s[..])
                }
                _ => out.push((d, s.to_vec())),
            }
        }
        out
    }
}

/// A read-only view of a device with an overlay on top.
pub struct OverlayDevice {
    inner: Arc<dyn Device>,
    overlay: RwLock<Overlay>,
}

impl OverlayDevice {
    /// Shows `inner` through `overlay`.
    pub fn new(inner: Arc<dyn Device>, overlay: Overlay) -> OverlayDevice {
        OverlayDevice {
            inner,
            overlay: RwLock::new(overlay),
        }
    }
}

impl Device for OverlayDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)?;
        let o = self
            .overlay
            .read()
            .map_err(|_| io::Error::other("overlay lock poisoned"))?;
        o.patch(buf, off);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if !off.is_multiple_of(SECTOR) || !(buf.len() as u64).is_multiple_of(SECTOR) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "overlay writes must be whole 512-byte sectors",
            ));
        }
        let in_log = self
            .inner
            .log_base()
            .is_some_and(|(b, n)| off >= b && off + buf.len() as u64 <= b + n);
        if !in_log && off + buf.len() as u64 > self.inner.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "write past the end of the device",
            ));
        }
        let mut o = self
            .overlay
            .write()
            .map_err(|_| io::Error::other("overlay lock poisoned"))?;
        o.put(off / SECTOR, buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn will_need(&self, off: u64, len: u64) {
        self.inner.will_need(off, len)
    }

    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn reads_see_overlay() {
        let mem = MemDevice::from_bytes(vec![1u8; 4096]);
        let mut o = Overlay::new();
        o.put(2, &[9u8; 1024]);
        let dev = OverlayDevice::new(Arc::new(mem), o);
        let mut b = vec![0u8; 2048];
        dev.read_at(&mut b, 600).unwrap();
        assert!(b[..424].iter().all(|&x| x == 1));
        assert!(b[424..424 + 1024].iter().all(|&x| x == 9));
        assert!(b[1448..].iter().all(|&x| x == 1));
        dev.write_at(&[5u8; 512], 0).unwrap();
        let mut c = vec![0u8; 4];
        dev.read_at(&mut c, 508).unwrap();
        assert_eq!(c, [5, 5, 5, 5]);
        assert_eq!(dev.overlay.read().unwrap().runs().len(), 2);
    }
}

//! A device that crashes: writes land in an in-memory overlay of a base
//! image until the limit, after which every write and flush fails (see
//! [`CrashDevice`]). Shared by the crash tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use xfskit::dev::Device;

/// Writes land in an in-memory overlay of a base image; the `limit`-th
/// write (counting from 1) and every later one fail, the `limit`-th
/// after writing its first half when `tear` is set: cut at a 512-byte
/// boundary in the log (whose blocks carry cycle stamps for exactly this),
/// at a 4 KiB boundary elsewhere (the atomic write unit XFS relies on for
/// its metadata blocks, as the kernel does).
pub struct CrashDevice {
    base: std::fs::File,
    len: u64,
    sectors: Mutex<BTreeMap<u64, [u8; 512]>>,
    writes: Mutex<u64>,
    limit: Mutex<Option<u64>>,
    tear: bool,
    /// Byte range of the log.
    log: Mutex<(u64, u64)>,
}

impl CrashDevice {
    /// Where the log is (byte range), for torn writes.
    pub fn set_log(&self, lo: u64, hi: u64) {
        *self.log.lock().unwrap() = (lo, hi);
    }

    /// The machine comes back: writes succeed again, on top of what the
    /// crash left (a recovery after the crash, without copying the image).
    pub fn revive(&self) {
        *self.limit.lock().unwrap() = None;
    }

    /// Writes asked for so far (the failed ones included).
    pub fn writes(&self) -> u64 {
        *self.writes.lock().unwrap()
    }

    pub fn new(base: &Path, limit: Option<u64>, tear: bool) -> CrashDevice {
        let f = std::fs::File::open(base).unwrap();
        let len = f.metadata().unwrap().len();
        CrashDevice {
            base: f,
            len,
            sectors: Mutex::new(BTreeMap::new()),
            writes: Mutex::new(0),
            limit: Mutex::new(limit),
            tear,
            log: Mutex::new((0, 0)),
        }
    }

    fn put(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut s = self.sectors.lock().unwrap();
        let mut pos = 0usize;
        while pos < buf.len() {
            let abs = off + pos as u64;
            let sec = abs / 512;
            let within = (abs % 512) as usize;
            let n = (512 - within).min(buf.len() - pos);
            let mut cur = match s.get(&sec) {
                Some(c) => *c,
                None => {
                    let mut c = [0u8; 512];
                    std::os::unix::fs::FileExt::read_exact_at(&self.base, &mut c, sec * 512)?;
                    c
                }
            };
            cur[within..within + n].copy_from_slice(&buf[pos..pos + n]);
            s.insert(sec, cur);
            pos += n;
        }
        Ok(())
    }

    /// The image as the crash left it, written to `out`.
    /// The sectors (512-byte units) written since the device was made.
    pub fn touched(&self) -> Vec<u64> {
        self.sectors.lock().unwrap().keys().copied().collect()
    }

    pub fn save(&self, base: &Path, out: &Path) {
        let st = std::process::Command::new("cp")
            .arg("--sparse=always")
            .arg(base)
            .arg(out)
            .status()
            .expect("run cp");
        assert!(st.success(), "cp {} {}", base.display(), out.display());
        let f = std::fs::OpenOptions::new().write(true).open(out).unwrap();
        for (sec, b) in self.sectors.lock().unwrap().iter() {
            std::os::unix::fs::FileExt::write_all_at(&f, b, sec * 512).unwrap();
        }
    }
}

impl Device for CrashDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off + buf.len() as u64 > self.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        std::os::unix::fs::FileExt::read_exact_at(&self.base, buf, off)?;
        let s = self.sectors.lock().unwrap();
        let first = off / 512;
        let last = (off + buf.len() as u64).div_ceil(512);
        for (&sec, b) in s.range(first..last) {
            let so = sec * 512;
            let lo = so.max(off);
            let hi = (so + 512).min(off + buf.len() as u64);
            buf[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&b[(lo - so) as usize..(hi - so) as usize]);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = {
            let mut w = self.writes.lock().unwrap();
            *w += 1;
            *w
        };
        match *self.limit.lock().unwrap() {
            Some(l) if n > l => Err(io::Error::other("crashed")),
            Some(l) if n == l => {
                if self.tear {
                    let (lo, hi) = *self.log.lock().unwrap();
                    let unit = if off >= lo && off < hi { 511 } else { 4095 };
                    let half = (buf.len() / 2) & !unit;
                    self.put(&buf[..half], off)?;
                }
                Err(io::Error::other("crashed"))
            }
            _ => self.put(buf, off),
        }
    }

    fn flush(&self) -> io::Result<()> {
        match *self.limit.lock().unwrap() {
            Some(l) if *self.writes.lock().unwrap() >= l => Err(io::Error::other("crashed")),
            _ => Ok(()),
        }
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Shares a device (a crash device unless said otherwise) between the
/// filesystem, which takes a `Box`, and the test, which keeps an `Arc`.
pub struct Shared<D: Device + ?Sized = CrashDevice>(pub Arc<D>);

impl<D: Device + ?Sized> Device for Shared<D> {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.0.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
}

/// Recovers `img` (left as it is) on a crash device that fails from its
/// `limit`-th write (tearing that one when `tear`); returns the device,
/// with what the crash left, and what recovery returned.
pub fn recover_on(
    img: &Path,
    limit: Option<u64>,
    tear: bool,
) -> (
    Arc<CrashDevice>,
    xfskit::Result<xfskit::log::recover::RecoverReport>,
) {
    let dev = Arc::new(CrashDevice::new(img, limit, tear));
    if let Ok(fs) = xfskit::Fs::open(img, &xfskit::OpenOptions::default()) {
        let g = fs.geometry();
        let lo = g.fsb_to_daddr(g.log_start).bytes();
        dev.set_log(lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size));
    }
    let r = xfskit::log::recover::recover_device(
        Arc::new(Shared(dev.clone())),
        &xfskit::log::recover::RecoverOptions::default(),
    );
    (dev, r)
}

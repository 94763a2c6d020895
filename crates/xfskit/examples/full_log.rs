//! Leaves an image whose log is as full as the journal lets it get, for
//! the recovery benchmark: metadata-only work (directories, empty files,
//! small xattrs, renames, unlinks) through the library with no pending
//! limits, on a device that "crashes" at the first write outside the log.
//! With no file data, the only writes outside the log are the writeback
//! that starts when the live log passes three quarters of its size, so
//! the image is left with about that much live log, dirty.
//! Usage: full_log IMAGE

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use xfskit::build::{Meta, NodeKind};
use xfskit::dev::{Device, FileDevice};
use xfskit::inode::Timestamp;
use xfskit::{Fs, OpenOptions};

/// Passes writes inside the log through; the first write elsewhere fails
/// and so does every write after it.
struct StopOutsideLog {
    inner: FileDevice,
    log: (u64, u64),
    stopped: Arc<AtomicBool>,
}

impl Device for StopOutsideLog {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let in_log = off >= self.log.0 && off + buf.len() as u64 <= self.log.1;
        if self.stopped.load(Ordering::SeqCst) || !in_log {
            self.stopped.store(true, Ordering::SeqCst);
            return Err(io::Error::other("stopped: the log is full"));
        }
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(io::Error::other("stopped"));
        }
        self.inner.flush()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let Some(img) = a.get(1) else {
        eprintln!("usage: full_log IMAGE");
        std::process::exit(2);
    };
    let geo = Fs::open(img.as_ref(), &OpenOptions::default())
        .expect("open")
        .geometry()
        .clone();
    let lo = geo.fsb_to_daddr(geo.log_start).bytes();
    let hi = lo + u64::from(geo.log_blocks) * u64::from(geo.block_size);
    let stopped = Arc::new(AtomicBool::new(false));
    let dev = StopOutsideLog {
        inner: FileDevice::open_read_write(img.as_ref()).expect("open for writing"),
        log: (lo, hi),
        stopped: stopped.clone(),
    };
    let fs = Fs::from_device_rw(
        Box::new(dev),
        &OpenOptions {
            pending_limits: Some((usize::MAX / 2, usize::MAX / 2)),
            ..Default::default()
        },
    )
    .expect("open for writing");
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let meta = |mode| Meta {
        mode,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    };
    let root = fs.geometry().root_ino;
    let mut ops = 0u64;
    let result = (|| -> xfskit::Result<()> {
        for d in 0.. {
            let dir = fs.create(
                root,
                format!("d{d}").as_bytes(),
                &NodeKind::Dir,
                &meta(0o755),
            )?;
            for i in 0..1000 {
                let name = format!("file-with-a-longer-name-{i}");
                let ino = fs.create(
                    dir,
                    name.as_bytes(),
                    &NodeKind::File { size: 0 },
                    &meta(0o644),
                )?;
                fs.set_xattr(ino, b"user.tag", format!("value {d} {i}").as_bytes())?;
                ops += 2;
                if i % 4 == 0 {
                    fs.rename(dir, name.as_bytes(), dir, format!("renamed-{i}").as_bytes())?;
                    ops += 1;
                }
                if i % 7 == 0 {
                    fs.unlink(dir, name.as_bytes())
                        .or_else(|_| fs.unlink(dir, format!("renamed-{i}").as_bytes()))?;
                    ops += 1;
                }
            }
            ops += 1;
        }
        Ok(())
    })();
    let s = fs.log_stats();
    eprintln!(
        "stopped after {ops} operations ({}); log bytes written {}, log size {}",
        result.err().map(|e| e.to_string()).unwrap_or_default(),
        s.bytes,
        hi - lo
    );
    std::mem::forget(fs);
}

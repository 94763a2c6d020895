//! Crash safety of writes into VHD and VDI containers: a small edit (a
//! directory and a 300 KB file, a sync, a writeback; then a directory and
//! a 3 MB file, which needs new container blocks, the same way) runs on
//! the filesystem inside a dynamic VHD and a dynamic VDI made by qemu-img, opened in
//! place on a host file that stops taking writes after its N-th (that one
//! torn at a sector), for every N the edit issues. After each crash the
//! container opens again, xfskit's log recovery runs, the filesystem is
//! check-clean and holds either the old tree or a prefix of the edit's
//! steps (each file with all its data). SKIP without mkfs.xfs or
//! qemu-img.

mod crash_common;
mod write_common;

use crash_common::Shared;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use write_common::{mkfs_xfs, run, Scratch};
use xfskit::build::{Meta, NodeKind};
use xfskit::dev::Device;
use xfskit::inode::{FileReader, Timestamp};
use xfskit::{Fs, OpenOptions};

/// An image file in memory that grows as it is written, and fails every
/// write (and flush) from its `limit`-th on, writing the first half (cut
/// at a sector) of that one.
struct HostMem {
    bytes: Mutex<Vec<u8>>,
    writes: Mutex<u64>,
    limit: Option<u64>,
}

impl HostMem {
    fn new(bytes: Vec<u8>, limit: Option<u64>) -> HostMem {
        HostMem {
            bytes: Mutex::new(bytes),
            writes: Mutex::new(0),
            limit,
        }
    }

    fn put(&self, buf: &[u8], off: u64) {
        let mut b = self.bytes.lock().unwrap();
        let end = off as usize + buf.len();
        if b.len() < end {
            b.resize(end, 0);
        }
        b[off as usize..end].copy_from_slice(buf);
    }
}

impl Device for HostMem {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let b = self.bytes.lock().unwrap();
        let end = off as usize + buf.len();
        if end > b.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        buf.copy_from_slice(&b[off as usize..end]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = {
            let mut w = self.writes.lock().unwrap();
            *w += 1;
            *w
        };
        match self.limit {
            Some(l) if n > l => Err(io::Error::other("crashed")),
            Some(l) if n == l => {
                self.put(&buf[..(buf.len() / 2) & !511], off);
                Err(io::Error::other("crashed"))
            }
            _ => {
                self.put(buf, off);
                Ok(())
            }
        }
    }

    fn flush(&self) -> io::Result<()> {
        match self.limit {
            Some(l) if *self.writes.lock().unwrap() >= l => Err(io::Error::other("crashed")),
            _ => Ok(()),
        }
    }

    fn len(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
}

type OpenOn = fn(&Path, Arc<dyn Device>) -> xfskit::Result<Arc<dyn Device>>;

fn meta(mode: u16) -> Meta {
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    Meta {
        mode,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

fn content(n: u32, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|k| (k.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// The edit, step by step: a directory, a file in it, a sync and a
/// writeback of the metadata in place, then the same again.
/// A path and, for a file, its content's (length, seed).
type Step = (&'static [u8], Option<(u32, u32)>);

const STEPS: [Step; 4] = [
    (b"/d", None),
    (b"/d/f", Some((300_000, 1))),
    (b"/e", None),
    (b"/e/g", Some((3_000_000, 2))),
];

fn edit(fs: &Fs) -> xfskit::Result<()> {
    let root = fs.geometry().root_ino;
    let d = fs.create(root, b"d", &NodeKind::Dir, &meta(0o40755))?;
    fs.create_file(d, b"f", &meta(0o100644), &content(300_000, 1), &[])?;
    fs.sync()?;
    fs.writeback()?;
    let e = fs.create(root, b"e", &NodeKind::Dir, &meta(0o40755))?;
    fs.create_file(e, b"g", &meta(0o100644), &content(3_000_000, 2), &[])?;
    fs.sync()?;
    fs.writeback()
}

/// How many of the steps the filesystem holds: always a prefix, each
/// file whole.
fn state(fs: &Fs, what: &str) -> usize {
    let mut n = 0;
    for (i, (path, data)) in STEPS.iter().enumerate() {
        let name = String::from_utf8_lossy(path);
        let Ok(ino) = fs.lookup_path(path) else {
            for (later, _) in &STEPS[i..] {
                assert!(
                    fs.lookup_path(later).is_err(),
                    "{what}: {} is there without {name}",
                    String::from_utf8_lossy(later)
                );
            }
            break;
        };
        match data {
            None => assert_eq!(
                ino.mode & 0o170000,
                0o040000,
                "{what}: {name} is no directory"
            ),
            Some((len, seed)) => {
                let want = content(*len, *seed);
                assert_eq!(ino.size, want.len() as u64, "{what}: {name} size");
                let r = FileReader::new(fs, &ino).expect("reader");
                let mut got = vec![0u8; want.len()];
                let mut off = 0;
                while off < got.len() {
                    let k = r.read_at(off as u64, &mut got[off..]).expect("read");
                    assert!(k > 0, "{what}: short read of {name}");
                    off += k;
                }
                assert!(got == want, "{what}: {name} holds other data");
            }
        }
        n += 1;
    }
    n
}

fn crash_every_write(name: &str, image: &Path, open_on: OpenOn) {
    let base = std::fs::read(image).expect("read the image");
    // A run that never crashes counts the host writes of the edit.
    let total = {
        let h = Arc::new(HostMem::new(base.clone(), Some(u64::MAX)));
        let dev = open_on(image, h.clone()).expect("open");
        let fs = Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default()).unwrap();
        edit(&fs).unwrap();
        drop(fs);
        // The edit allocated container blocks (the file grew), so the
        // cuts fall inside allocations too.
        assert!(
            h.len() > base.len() as u64,
            "{name}: no block was allocated"
        );
        let n = *h.writes.lock().unwrap();
        n
    };
    assert!(total > 3, "{name}: only {total} host writes");
    let mut seen = [0u32; STEPS.len() + 1];
    for limit in 1..=total + 1 {
        let what = format!("{name}, crash at host write {limit} of {total}");
        let h = Arc::new(HostMem::new(base.clone(), Some(limit)));
        if let Ok(dev) = open_on(image, h.clone()) {
            if let Ok(fs) = Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default()) {
                let _ = edit(&fs);
            }
        }
        let after = h.bytes.lock().unwrap().clone();
        let back: Arc<dyn Device> = Arc::new(HostMem::new(after, None));
        let dev = open_on(image, back)
            .unwrap_or_else(|e| panic!("{what}: the container does not open: {e}"));
        let fs = Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default())
            .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        let s = state(&fs, &what);
        seen[s] += 1;
        let report = xfskit::check::check(&fs, &Default::default())
            .unwrap_or_else(|e| panic!("{what}: check failed: {e}"));
        assert!(
            report.is_clean(),
            "{what}: check finds problems: {report:?}"
        );
    }
    println!("{name}: {total} host writes, crashes leaving 0..=4 steps done: {seen:?}");
    assert!(seen[0] > 0 && seen[STEPS.len()] > 0, "{name}: {seen:?}");
}

#[test]
fn edits_inside_vhd_and_vdi_survive_a_crash_at_every_write() {
    let name = "edits_inside_vhd_and_vdi_survive_a_crash_at_every_write";
    for t in ["mkfs.xfs", "qemu-img"] {
        if !run("sh", &["-c", &format!("command -v {t}")]).0 {
            write_common::skip(name, &format!("{t} is not installed"));
            return;
        }
    }
    let s = Scratch::new("vhd-crash");
    let raw = s.0.join("fs.img");
    mkfs_xfs(&raw, 320 << 20, "");
    let vhd = s.0.join("fs.vhd");
    let vdi = s.0.join("fs.vdi");
    for (fmt, out) in [("vpc", &vhd), ("vdi", &vdi)] {
        let (ok, o) = run(
            "qemu-img",
            &[
                "convert",
                "-O",
                fmt,
                &raw.display().to_string(),
                &out.display().to_string(),
            ],
        );
        assert!(ok, "qemu-img convert -O {fmt}: {o}");
    }
    crash_every_write("dynamic VHD", &vhd, xfskit::disk::vhd::open_rw_on);
    crash_every_write("dynamic VDI", &vdi, xfskit::disk::vdi::open_rw_on);
}

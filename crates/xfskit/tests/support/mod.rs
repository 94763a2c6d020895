//! Shared helpers for the engine's integration tests: images made by the
//! real mkfs.xfs and populated through a kernel loop mount, a device that
//! overlays byte patches on an image, and a full tree walk.
#![allow(dead_code, unused_imports)]

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use xfskit::dev::{Device, FileDevice};
use xfskit::inode::{FileReader, FileType};
use xfskit::{Fs, Ino, OpenOptions};

pub use xfskit_testkit::{can_mount, Scratch};

pub fn run(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "{cmd} {args:?} failed");
}

/// Makes a 300 MiB image with mkfs.xfs `args`, mounts it at `<scratch>/mnt`,
/// runs `populate(mnt)`, unmounts. Returns the image path.
pub fn make_image(s: &Scratch, args: &[&str], populate: impl FnOnce(&Path)) -> PathBuf {
    let img = s.0.join("fs.img");
    let f = std::fs::File::create(&img).expect("image");
    f.set_len(300 << 20).expect("size");
    drop(f);
    let mut a = vec!["-q", "-f"];
    a.extend_from_slice(args);
    let imgs = img.to_str().expect("utf8 path");
    a.push(imgs);
    run("mkfs.xfs", &a);
    let mnt = s.0.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mnt");
    run(
        "mount",
        &["-o", "loop,nouuid", imgs, mnt.to_str().expect("utf8")],
    );
    populate(&mnt);
    xfskit_testkit::must_umount(&mnt);
    img
}

/// Writes `n` blocks of `bs` bytes at every other block, giving `n` extents.
pub fn write_fragmented(path: &Path, n: u64, bs: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::create(path).expect("create");
    let buf: Vec<u8> = (0..bs).map(|i| (i % 251) as u8).collect();
    for i in 0..n {
        f.write_all_at(&buf, 2 * i * bs).expect("write");
    }
    f.sync_all().expect("sync");
}

/// An image with byte patches laid over it.
pub struct PatchedDevice {
    inner: FileDevice,
    patches: BTreeMap<u64, u8>,
    len: u64,
}

impl PatchedDevice {
    pub fn new(path: &Path) -> PatchedDevice {
        let inner = FileDevice::open_read_only(path).expect("open image");
        let len = inner.len();
        PatchedDevice {
            inner,
            patches: BTreeMap::new(),
            len,
        }
    }

    /// Pretends the device ends at `len`.
    pub fn truncate(&mut self, len: u64) {
        self.len = len;
    }

    pub fn set(&mut self, off: u64, b: u8) {
        self.patches.insert(off, b);
    }

    pub fn read_vec(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read_at(&mut v, off).expect("read");
        v
    }

    /// Overwrites bytes.
    pub fn write(&mut self, off: u64, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            self.patches.insert(off + i as u64, *b);
        }
    }

    /// XORs one byte.
    pub fn flip(&mut self, off: u64, mask: u8) {
        let b = self.read_vec(off, 1)[0];
        self.set(off, b ^ mask);
    }

    /// Recomputes a CRC-32C stored at `crc_off` of the object at `off..off+len`.
    pub fn restamp(&mut self, off: u64, len: usize, crc_off: usize) {
        let mut v = self.read_vec(off, len);
        xfs_format::crc::stamp(&mut v, crc_off);
        self.write(off + crc_off as u64, &v[crc_off..crc_off + 4]);
    }
}

impl Device for PatchedDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off + buf.len() as u64 > self.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past end"));
        }
        self.inner.read_at(buf, off)?;
        for (&o, &b) in self.patches.range(off..off + buf.len() as u64) {
            buf[(o - off) as usize] = b;
        }
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "read-only test device",
        ))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// Opens `dev` with norecovery off.
pub fn open(dev: PatchedDevice) -> xfskit::Result<Fs> {
    Fs::from_device(Box::new(dev), &OpenOptions::default())
}

/// Walks the whole tree reading everything (contents, xattrs, link
/// targets); returns the number of inodes visited or the first error.
pub fn walk_all(fs: &Fs) -> xfskit::Result<usize> {
    let mut seen: HashSet<Ino> = HashSet::new();
    let mut stack = vec![fs.geometry().root_ino];
    let mut buf = vec![0u8; 1 << 20];
    while let Some(ino) = stack.pop() {
        if !seen.insert(ino) {
            continue;
        }
        let inode = fs.inode(ino)?;
        xfskit::attr::list(fs, &inode)?;
        match inode.file_type {
            FileType::Dir => {
                for e in xfskit::dir::read_dir(fs, &inode)? {
                    stack.push(e.ino);
                }
            }
            FileType::File => {
                let r = FileReader::new(fs, &inode)?;
                let mut off = 0;
                while off < r.size() {
                    let n = r.read_at(off, &mut buf)?;
                    if n == 0 {
                        break;
                    }
                    off += n as u64;
                }
            }
            FileType::Symlink => {
                xfskit::symlink::read_link(fs, &inode)?;
            }
            _ => {}
        }
        if seen.len() > 1_000_000 {
            panic!("walk visited more than a million inodes on a small test image");
        }
    }
    Ok(seen.len())
}

/// Runs `check` on the image at `img` (three threads), twice: with the
/// default memory bound and with the smallest one, which spills the
/// namespace records to a temporary file; both must find the same.
pub fn run_check(img: &Path) -> xfskit::check::CheckReport {
    let fs = Fs::open(img, &OpenOptions::default()).expect("open");
    let opts = xfskit::check::CheckOptions {
        threads: 3,
        ..Default::default()
    };
    let report = xfskit::check::check(&fs, &opts).expect("check runs");
    let spilled = xfskit::check::check(
        &fs,
        &xfskit::check::CheckOptions {
            threads: 3,
            memory: 1,
            ..Default::default()
        },
    )
    .expect("check runs with a spill");
    let sorted = |r: &xfskit::check::CheckReport| {
        let mut v: Vec<String> = r.problems.iter().map(|p| p.to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(
        sorted(&report),
        sorted(&spilled),
        "check in memory and check spilling its records disagree"
    );
    assert_eq!(report.stats, spilled.stats);
    report
}

/// `len` bytes of the image file at byte `off`.
pub fn rd(img: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).expect("open");
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).expect("read");
    b
}

/// Writes `b` into the image file at byte `off`.
pub fn wr(img: &Path, off: u64, b: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(img)
        .expect("rw");
    f.write_all_at(b, off).expect("write");
}

/// The big-endian u32 at `o` of `b`.
pub fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

/// The big-endian u64 at `o` of `b`.
pub fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

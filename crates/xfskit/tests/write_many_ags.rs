//! The write engine's cost follows the work, not the number of AGs: the
//! same changes (directories rotating over AGs, small files in them) on a
//! filesystem of 64 AGs and on one of 4,096 AGs must read and write about
//! the same number of bytes, counted by a device wrapper. The 64-AG image
//! must then pass `xfs_repair -n`; the 4,096-AG one is verified by
//! `xfskit check` (xfs_repair 6.1 takes 38 s on 2,048 empty AGs and ten
//! minutes on 8,192 here, too long for a test).

mod namespace_common;
mod write_common;

use namespace_common::meta;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::dev::{Device, FileDevice};
use xfskit::{Fs, OpenOptions};

/// Reads and bytes seen by a [`Counting`] device.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    written: AtomicU64,
}

/// Counts the calls and bytes going to the device.
struct Counting {
    inner: FileDevice,
    counts: Arc<Counts>,
}

impl Device for Counting {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.counts.reads.fetch_add(1, Ordering::Relaxed);
        self.counts
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.counts
            .written
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.write_at(buf, off)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> std::io::Result<()> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.counts.written.fetch_add(n as u64, Ordering::Relaxed);
        self.inner.write_vectored_at(bufs, off)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

/// A sparse image of `ags` AGs made by the library's mkfs.
fn make(dir: &Path, ags: u32) -> PathBuf {
    let img = dir.join(format!("ags{ags}.img"));
    mkfs_many_ags(&img, ags);
    img
}

/// Runs the workload; returns (reads, bytes read, bytes written).
fn workload(img: &Path) -> (u64, u64, u64) {
    let counts = Arc::new(Counts::default());
    let dev = Counting {
        inner: FileDevice::open_read_write(img).unwrap(),
        counts: counts.clone(),
    };
    let fs = Fs::from_device_rw(Box::new(dev), &OpenOptions::default()).unwrap();
    let root = fs.geometry().root_ino;
    let data = vec![0x5au8; 4096];
    // Directories rotate over the AGs; files go near their directory.
    for d in 0..48 {
        let dir = fs
            .create(
                root,
                format!("d{d}").as_bytes(),
                &NodeKind::Dir,
                &meta(0o40755, 0),
            )
            .unwrap();
        for f in 0..10 {
            fs.create_file(
                dir,
                format!("f{f}").as_bytes(),
                &meta(0o100644, 0),
                &data,
                &[],
            )
            .unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs);
    (
        counts.reads.load(Ordering::Relaxed),
        counts.read_bytes.load(Ordering::Relaxed),
        counts.written.load(Ordering::Relaxed),
    )
}

#[test]
fn write_cost_does_not_follow_the_ag_count() {
    let s = Scratch::new("manyags");
    let small = make(&s.0, 64);
    let big = make(&s.0, 4096);
    let a = workload(&small);
    let b = workload(&big);
    eprintln!("64 AGs: {a:?}; 4,096 AGs: {b:?} (reads, bytes read, bytes written)");
    assert!(
        b.0 <= 2 * a.0 + 64,
        "device reads grow with the AG count: {} with 64 AGs, {} with 4,096",
        a.0,
        b.0
    );
    assert!(
        b.1 <= 2 * a.1 + (1 << 20),
        "bytes read grow with the AG count: {} with 64 AGs, {} with 4,096",
        a.1,
        b.1
    );
    assert!(
        b.2 <= 2 * a.2 + (1 << 20),
        "bytes written grow with the AG count: {} with 64 AGs, {} with 4,096",
        a.2,
        b.2
    );
    assert_repair_clean(&small);
    let fs = Fs::open(&big, &OpenOptions::default()).unwrap();
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    assert!(
        report.is_clean(),
        "xfskit check on 4,096 AGs: {:?}",
        &report.problems[..report.problems.len().min(5)]
    );
    assert_eq!(report.stats.ags, 4096);
}

//! Crash safety of writing in place into a monolithicSparse VMDK, proven
//! by crashing: a small edit (a new file whose blocks fall in grains not
//! yet allocated, then a sync) runs on a VMDK whose host file stops
//! taking writes after its N-th write, for every N the edit issues. After
//! each crash (the cut write lost, or torn at a 4 KiB boundary) the VMDK
//! opens, xfskit's log recovery runs, and the tree is
//! the old one or the new one (the file whole), the old file intact, and
//! `xfskit check` clean. The host is in memory and grows as grains are
//! appended. Needs mkfs.xfs; otherwise SKIP.

mod crash_common;
mod namespace_common;

use crash_common::Shared;
use namespace_common::meta;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use xfskit::check::{check, CheckOptions};
use xfskit::dev::Device;
use xfskit::disk::vmdk;
use xfskit::inode::FileReader;
use xfskit::{Fs, OpenOptions};

/// A host file in memory that grows; the `limit`-th write and every later
/// one (and every flush after the cut) fail.
struct MemHost {
    data: Mutex<Vec<u8>>,
    writes: Mutex<u64>,
    limit: Option<u64>,
    /// The cut write lands in part: its first half, at a 4 KiB boundary.
    tear: bool,
}

impl MemHost {
    fn new(data: Vec<u8>, limit: Option<u64>, tear: bool) -> MemHost {
        MemHost {
            data: Mutex::new(data),
            writes: Mutex::new(0),
            limit,
            tear,
        }
    }
    fn crashed(&self) -> bool {
        self.limit
            .is_some_and(|l| *self.writes.lock().unwrap() >= l)
    }
}

impl Device for MemHost {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let d = self.data.lock().unwrap();
        let end = off as usize + buf.len();
        if end > d.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        buf.copy_from_slice(&d[off as usize..end]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = {
            let mut w = self.writes.lock().unwrap();
            *w += 1;
            *w
        };
        let buf = match self.limit {
            Some(l) if n > l => return Err(io::Error::other("crashed")),
            Some(l) if n == l => {
                let half = (buf.len() / 2) & !4095;
                if self.tear && half > 0 {
                    self.put(&buf[..half], off);
                }
                return Err(io::Error::other("crashed"));
            }
            _ => buf,
        };
        self.put(buf, off);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        if self.crashed() {
            Err(io::Error::other("crashed"))
        } else {
            Ok(())
        }
    }
    fn len(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
}

impl MemHost {
    fn put(&self, buf: &[u8], off: u64) {
        let mut d = self.data.lock().unwrap();
        let end = off as usize + buf.len();
        if end > d.len() {
            d.resize(end, 0);
        }
        d[off as usize..end].copy_from_slice(buf);
    }
}

fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|k| (k as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

fn read_file(fs: &Fs, path: &[u8]) -> xfskit::Result<Vec<u8>> {
    let inode = fs.lookup_path(path)?;
    let r = FileReader::new(fs, &inode)?;
    let mut got = vec![0u8; inode.size as usize];
    let mut off = 0;
    while off < got.len() {
        let n = r.read_at(off as u64, &mut got[off..])?;
        assert!(n > 0, "short read");
        off += n;
    }
    Ok(got)
}

/// The edit: one new file of 300 KB, then a sync.
fn edit(fs: &Fs) -> xfskit::Result<()> {
    let root = fs.geometry().root_ino;
    fs.create_file(root, b"new", &meta(0o100644, 0), &content(300_000, 7), &[])?;
    fs.sync()
}

fn open_fs(img: &Path, host: Arc<MemHost>) -> xfskit::Result<Fs> {
    let dev = vmdk::open_rw_on(img, host)?;
    Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default())
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-vmdk-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_crash_at_every_host_write_leaves_old_or_new() {
    let name = "a_crash_at_every_host_write_leaves_old_or_new";
    let have = Command::new("sh")
        .args(["-c", "command -v mkfs.xfs"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        xfskit_testkit::skip(name, "mkfs.xfs is not installed");
        return;
    }
    let d = scratch();
    let raw = d.join("fs.raw");
    let img = d.join("disk.vmdk");
    let size: u64 = 300 << 20;
    std::fs::File::create(&raw).unwrap().set_len(size).unwrap();
    let o = Command::new("mkfs.xfs")
        .args(["-q", "-f"])
        .arg(&raw)
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfs.xfs: {o:?}");
    // The filesystem copied into a new VMDK through the writer.
    {
        let new = vmdk::create(&img, vmdk::disk_size(size), false).unwrap();
        let bytes = std::fs::read(&raw).unwrap();
        for (i, c) in bytes.chunks(1 << 20).enumerate() {
            if c.iter().any(|&b| b != 0) {
                new.device.write_at(c, (i as u64) << 20).unwrap();
            }
        }
        new.finish().unwrap();
    }
    {
        let dev = vmdk::open_rw(&img).unwrap();
        let fs = Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default()).unwrap();
        let root = fs.geometry().root_ino;
        fs.create_file(root, b"old", &meta(0o100644, 0), &content(70_000, 1), &[])
            .unwrap();
        fs.sync().unwrap();
    }
    let base = std::fs::read(&img).unwrap();
    // The edit without a crash: how many host writes it takes.
    let full = Arc::new(MemHost::new(base.clone(), None, false));
    {
        let fs = open_fs(&img, full.clone()).unwrap();
        edit(&fs).unwrap();
    }
    let total = *full.writes.lock().unwrap();
    assert!(full.len() > base.len() as u64, "the edit appended no grain");
    eprintln!("{name}: {total} host writes; crashing at each");
    let (mut old, mut new) = (0, 0);
    for (n, tear) in (1..=total).flat_map(|n| [(n, false), (n, true)]) {
        let what = format!("crash at host write {n} of {total} (torn: {tear})");
        let host = Arc::new(MemHost::new(base.clone(), Some(n), tear));
        let r = open_fs(&img, host.clone()).and_then(|fs| edit(&fs));
        assert!(r.is_err(), "{what}: the edit succeeded");
        let left = host.data.lock().unwrap().clone();
        let after = Arc::new(MemHost::new(left, None, false));
        let fs = open_fs(&img, after)
            .unwrap_or_else(|e| panic!("{what}: the VMDK or its log does not recover: {e}"));
        assert_eq!(
            read_file(&fs, b"/old").unwrap(),
            content(70_000, 1),
            "{what}: /old"
        );
        match read_file(&fs, b"/new") {
            Ok(b) => {
                assert_eq!(b, content(300_000, 7), "{what}: /new differs");
                new += 1;
            }
            Err(xfskit::Error::NotFound(_)) => old += 1,
            Err(e) => panic!("{what}: /new: {e}"),
        }
        fs.sync().unwrap();
        let rep = check(&fs, &CheckOptions::default()).unwrap();
        assert!(rep.is_clean(), "{what}: check: {:#?}", rep.problems);
    }
    eprintln!("{name}: old state after {old} crashes, new after {new}");
    assert!(old > 0, "no crash left the old state");
    let _ = std::fs::remove_dir_all(&d);
}

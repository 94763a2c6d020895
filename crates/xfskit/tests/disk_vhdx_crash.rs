//! Crash safety of XFS inside a dynamic VHDX written in place: a small
//! edit (a directory and a file of 12 MiB, reaching blocks the VHDX has not allocated, then a sync) runs on a VHDX
//! whose host file stops taking writes after its N-th write, for every N
//! the edit issues (and again with that write torn in half). After each cut the VHDX opens for writing (its log
//! replayed onto the file), xfskit's XFS log recovery runs, and the
//! filesystem must be the old state or the new one, and consistent
//! (xfskit's check finds no problems). A few of the cut files are written
//! out and `qemu-img check -r all` must replay and accept them (then a
//! plain check must be clean). Needs mkfs.xfs; qemu-img is optional.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use xfskit::build::{Meta, NodeKind};
use xfskit::dev::Device;
use xfskit::disk::container::NewFormat;
use xfskit::disk::vhdx;
use xfskit::inode::{FileReader, Timestamp};
use xfskit::{Fs, OpenOptions};

const MIB: u64 = 1 << 20;

use xfskit_testkit::{have_tool as have, skip};

/// A host file in memory over a base file: writes land in a map of
/// 512-byte sectors (growing the file when past its end) until the
/// `limit`-th, which with every later write and flush fails.
struct Host {
    base: Arc<Vec<u8>>,
    sectors: Mutex<BTreeMap<u64, [u8; 512]>>,
    len: Mutex<u64>,
    writes: Mutex<u64>,
    limit: Mutex<Option<u64>>,
    /// The `limit`-th write lands in part (its first half, cut at a 512
    /// byte boundary) before failing.
    tear: bool,
}

impl Host {
    fn new(base: Arc<Vec<u8>>, limit: Option<u64>, tear: bool) -> Host {
        let len = base.len() as u64;
        Host {
            base,
            sectors: Mutex::new(BTreeMap::new()),
            len: Mutex::new(len),
            writes: Mutex::new(0),
            limit: Mutex::new(limit),
            tear,
        }
    }

    fn revive(&self) {
        *self.limit.lock().unwrap() = None;
    }

    fn crashed(&self) -> bool {
        let l = *self.limit.lock().unwrap();
        l.is_some_and(|l| *self.writes.lock().unwrap() >= l)
    }

    fn byte_sector(&self, sec: u64) -> [u8; 512] {
        if let Some(s) = self.sectors.lock().unwrap().get(&sec) {
            return *s;
        }
        let mut c = [0u8; 512];
        let at = (sec * 512) as usize;
        if at < self.base.len() {
            let n = (self.base.len() - at).min(512);
            c[..n].copy_from_slice(&self.base[at..at + n]);
        }
        c
    }

    /// The file as the crash left it.
    fn bytes(&self) -> Vec<u8> {
        let len = *self.len.lock().unwrap() as usize;
        let mut v = self.base.as_ref().clone();
        v.resize(len, 0);
        for (sec, b) in self.sectors.lock().unwrap().iter() {
            let at = (*sec * 512) as usize;
            let n = (len - at).min(512);
            v[at..at + n].copy_from_slice(&b[..n]);
        }
        v
    }
}

impl Device for Host {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off + buf.len() as u64 > *self.len.lock().unwrap() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        let mut pos = 0usize;
        while pos < buf.len() {
            let abs = off + pos as u64;
            let within = (abs % 512) as usize;
            let n = (512 - within).min(buf.len() - pos);
            let s = self.byte_sector(abs / 512);
            buf[pos..pos + n].copy_from_slice(&s[within..within + n]);
            pos += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = {
            let mut w = self.writes.lock().unwrap();
            *w += 1;
            *w
        };
        let limit = *self.limit.lock().unwrap();
        if limit.is_some_and(|l| n > l) {
            return Err(io::Error::other("crashed"));
        }
        if limit == Some(n) {
            if self.tear {
                let half = (buf.len() / 2) & !511;
                self.put(&buf[..half], off);
            }
            return Err(io::Error::other("crashed"));
        }
        if std::env::var_os("VHDX_TRACE").is_some() {
            eprintln!("write {n}: {} bytes at {off:#x}", buf.len());
        }
        self.put(buf, off);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        if self.crashed() {
            return Err(io::Error::other("crashed"));
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        *self.len.lock().unwrap()
    }
}

impl Host {
    fn put(&self, buf: &[u8], off: u64) {
        let mut pos = 0usize;
        while pos < buf.len() {
            let abs = off + pos as u64;
            let within = (abs % 512) as usize;
            let k = (512 - within).min(buf.len() - pos);
            let mut s = self.byte_sector(abs / 512);
            s[within..within + k].copy_from_slice(&buf[pos..pos + k]);
            self.sectors.lock().unwrap().insert(abs / 512, s);
            pos += k;
        }
        let mut l = self.len.lock().unwrap();
        *l = (*l).max(off + buf.len() as u64);
    }
}

/// Shares a device (the host, or the disk inside the VHDX).
struct Shared<D: Device + ?Sized>(Arc<D>);

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

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

const OLD_LEN: usize = 100_000;
const NEW_LEN: usize = 12 * MIB as usize + 1234;

/// The edit: /d and /d/f (12 MiB, into blocks not yet allocated), a
/// sync. Errors after the cut are expected; true when the sync returned.
fn edit(host: Arc<Host>) -> bool {
    let Ok(v) = vhdx::open_rw_on(Path::new("cut.vhdx"), host) else {
        return false;
    };
    let Ok(fs) = Fs::from_device_rw(Box::new(Shared(v)), &OpenOptions::default()) else {
        return false;
    };
    let root = fs.geometry().root_ino;
    if let Ok(d) = fs.create(root, b"d", &NodeKind::Dir, &meta(0o40755)) {
        let _ = fs.create_file(d, b"f", &meta(0o100644), &data(NEW_LEN, 9), &[]);
    }
    fs.sync().is_ok()
}

fn read_file(fs: &Fs, path: &[u8]) -> Option<Vec<u8>> {
    let inode = fs.lookup_path(path).ok()?;
    let r = FileReader::new(fs, &inode).expect("reader");
    let mut got = vec![0u8; inode.size as usize];
    let mut off = 0;
    while off < got.len() {
        let n = r.read_at(off as u64, &mut got[off..]).expect("read");
        assert!(n > 0, "short read");
        off += n;
    }
    Some(got)
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-vhdx-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn vhdx_edit_cut_at_every_write() {
    let name = "vhdx_edit_cut_at_every_write";
    if !have("mkfs.xfs") {
        return skip(name, "mkfs.xfs is not installed");
    }
    let dir = tmpdir();
    // A filesystem with one file, copied into a new dynamic VHDX.
    let raw = dir.join("fs.img");
    std::fs::File::create(&raw)
        .and_then(|f| f.set_len(300 * MIB))
        .expect("raw");
    let o = Command::new("mkfs.xfs")
        .args(["-q", "-f", raw.to_str().expect("utf-8")])
        .output()
        .expect("mkfs.xfs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    {
        let fs = Fs::open_rw(&raw, &OpenOptions::default()).expect("open raw");
        let root = fs.geometry().root_ino;
        fs.create_file(root, b"old", &meta(0o100644), &data(OLD_LEN, 1), &[])
            .expect("old file");
        fs.sync().expect("sync");
    }
    let img = dir.join("fs.vhdx");
    {
        let new = NewFormat::Vhdx.create(&img, 300 * MIB).expect("create");
        let bytes = std::fs::read(&raw).expect("read raw");
        for (i, c) in bytes.chunks(MIB as usize).enumerate() {
            if c.iter().any(|&b| b != 0) {
                new.device.write_at(c, i as u64 * MIB).expect("copy");
            }
        }
        new.finish().expect("finish");
    }
    std::fs::remove_file(&raw).ok();
    let base = Arc::new(std::fs::read(&img).expect("read vhdx"));
    // The whole edit, to count its writes.
    let full = Arc::new(Host::new(base.clone(), None, false));
    assert!(edit(full.clone()), "the edit fails without a crash");
    let total = *full.writes.lock().unwrap();
    println!("the edit issues {total} host writes");
    assert!(total > 10);
    let qemu = have("qemu-img");
    let mut states = [0usize; 3];
    let mut replayed_logs = 0;
    let mut cuts = 0;
    for (cut, tear) in (1..=total + 1).flat_map(|c| [(c, false), (c, true)]) {
        cuts += 1;
        let host = Arc::new(Host::new(base.clone(), Some(cut), tear));
        let synced = edit(host.clone());
        // The machine comes back.
        host.revive();
        let crashed = host.bytes();
        // Read-only: the log (if any) replayed in memory.
        let pending = vhdx::open_vhdx(
            Path::new("cut.vhdx"),
            Box::new(Host::new(Arc::new(crashed.clone()), None, false)),
            &|_: &Path, n: &str| Err(xfskit::Error::Unsupported(n.to_string())),
        )
        .unwrap_or_else(|e| panic!("cut {cut}: read-only open: {e}"))
        .replayed_entries()
            > 0;
        if pending {
            replayed_logs += 1;
        }
        // qemu-img on the files with a log to replay and on a few others.
        if qemu && (pending || cut % (total / 4).max(1) == 0 || cut == total) {
            let p = dir.join(format!("cut-{cut}-{tear}.vhdx"));
            std::fs::write(&p, &crashed).expect("write out");
            let ps = p.to_str().expect("utf-8");
            let o = Command::new("qemu-img")
                .args(["check", "-r", "all", ps])
                .output()
                .expect("qemu-img");
            assert!(
                o.status.success(),
                "cut {cut}: qemu-img check -r all:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            let o = Command::new("qemu-img")
                .args(["check", ps])
                .output()
                .expect("qemu-img");
            assert!(
                o.status.success(),
                "cut {cut}: qemu-img check after the replay:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            std::fs::remove_file(&p).ok();
        }
        let v = vhdx::open_rw_on(Path::new("cut.vhdx"), host.clone())
            .unwrap_or_else(|e| panic!("cut {cut}: the VHDX does not open: {e}"));
        let disk: Arc<dyn Device> = v;
        xfskit::log::recover::recover_device(
            disk.clone(),
            &xfskit::log::recover::RecoverOptions::default(),
        )
        .unwrap_or_else(|e| panic!("cut {cut}: XFS log recovery: {e}"));
        disk.flush().expect("flush");
        if qemu && pending {
            // What our replay and XFS's recovery leave: a clean file.
            let p = dir.join(format!("after-{cut}-{tear}.vhdx"));
            std::fs::write(&p, host.bytes()).expect("write out");
            let o = Command::new("qemu-img")
                .args(["check", p.to_str().expect("utf-8")])
                .output()
                .expect("qemu-img");
            assert!(
                o.status.success(),
                "cut {cut}: qemu-img check after our replay:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            std::fs::remove_file(&p).ok();
        }
        let fs = Fs::from_device(Box::new(Shared(disk.clone())), &OpenOptions::default())
            .unwrap_or_else(|e| panic!("cut {cut}: the filesystem does not open: {e}"));
        let old = read_file(&fs, b"/old").unwrap_or_else(|| panic!("cut {cut}: /old is gone"));
        assert!(old == data(OLD_LEN, 1), "cut {cut}: /old changed");
        let state = match read_file(&fs, b"/d/f") {
            None => 0,
            Some(f) if f == data(NEW_LEN, 9) => 1,
            Some(f) => {
                // xfskit logs a new file before its data is written: until
                // the sync its blocks may read as they were (zeros here,
                // blocks the VHDX had not allocated).
                assert!(
                    !synced && f.len() <= NEW_LEN,
                    "cut {cut}: /d/f is not the new file after the sync returned: {} bytes",
                    f.len()
                );
                2
            }
        };
        states[state] += 1;
        if synced {
            assert_eq!(
                state, 1,
                "cut {cut}: the sync returned, /d/f is not the new file"
            );
        }
        let r = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default())
            .unwrap_or_else(|e| panic!("cut {cut}: check: {e}"));
        assert!(
            r.problems.is_empty(),
            "cut {cut}: check finds problems: {:?}",
            r.problems
        );
    }
    println!(
        "{cuts} cuts (each write cut, then torn): {} old, {} new, {} with the new file's data not yet written, {replayed_logs} with a VHDX log to replay",
        states[0],
        states[1],
        states[2]
    );
    assert!(states[0] > 0 && states[1] > 0);
    assert!(replayed_logs > 0, "no cut left a VHDX log to replay");
    if !qemu {
        println!("qemu-img is not installed: the cut files were not given to qemu-img check");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

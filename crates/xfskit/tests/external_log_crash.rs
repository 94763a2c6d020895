//! Crashes with an external log: a workload journals into a log device
//! beside the data device, and both stop accepting writes after the N-th
//! write to either (one count, as one machine losing power), for writes N
//! across the workload. After each crash xfskit's replay from the log
//! device shows every file made durable (`force_log` returned) and none
//! that was never made, `Fs::recover` with the log device leaves an image
//! `xfs_repair -n -l` (7.2) passes, and, as root, the kernel mounts the
//! crashed copy with `-o logdev=` (its own replay) and sees the same names.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::CrashDevice;
use namespace_common::meta;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::dev::{Device, WithLog};
use xfskit::{Fs, OpenOptions};

/// Counts writes to both devices; from the `limit`-th on they fail.
struct Cut {
    inner: WithLog,
    writes: AtomicU64,
    limit: u64,
}

impl Device for Cut {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if self.writes.fetch_add(1, Ordering::SeqCst) + 1 >= self.limit {
            return Err(io::Error::other("crashed"));
        }
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        if self.writes.load(Ordering::SeqCst) + 1 >= self.limit {
            return Err(io::Error::other("crashed"));
        }
        self.inner.flush()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

const FILES: usize = 10;

/// Runs the workload until the crash; returns the files made durable,
/// the files attempted and the writes issued.
fn workload(img: &Path, log: &Path, limit: u64) -> (usize, usize, u64, [Arc<CrashDevice>; 2]) {
    let d = Arc::new(CrashDevice::new(img, None, false));
    let l = Arc::new(CrashDevice::new(log, None, false));
    let cut = Cut {
        inner: WithLog::new(
            Arc::new(crash_common::Shared(d.clone())),
            Arc::new(crash_common::Shared(l.clone())),
        ),
        writes: AtomicU64::new(0),
        limit,
    };
    let cut = Arc::new(cut);
    let (mut durable, mut tried) = (0, 0);
    let r = (|| -> xfskit::Result<()> {
        let fs = Fs::from_device_rw(Box::new(Fwd(cut.clone())), &OpenOptions::default())?;
        let root = fs.root()?.ino;
        let dir = fs.create(root, b"d", &NodeKind::Dir, &meta(0o755, 0))?;
        fs.force_log()?;
        for n in 0..FILES {
            tried = n + 1;
            let name = format!("f{n}");
            fs.create(
                dir,
                name.as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644, 0),
            )?;
            fs.force_log()?;
            durable = n + 1;
        }
        fs.sync()
    })();
    let _ = r;
    (durable, tried, cut.writes.load(Ordering::SeqCst), [d, l])
}

struct Fwd(Arc<Cut>);

impl Device for Fwd {
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
    fn log_base(&self) -> Option<(u64, u64)> {
        self.0.log_base()
    }
}

fn names(img: &Path, log: &Path) -> usize {
    let opts = OpenOptions {
        logdev: Some(log.to_path_buf()),
        ..Default::default()
    };
    let fs = Fs::open(img, &opts).unwrap();
    match fs.lookup_path(b"/d") {
        Ok(d) => xfskit::dir::read_dir(&fs, &d)
            .unwrap()
            .iter()
            .filter(|e| e.name.first() == Some(&b'f'))
            .count(),
        Err(_) => 0,
    }
}

#[test]
fn external_log_crash_every_write() {
    if skip_without_72("external_log_crash_every_write") {
        return;
    }
    let bin = xfsprogs_72_bin().unwrap();
    let s = Scratch::new("extlog-crash");
    let (img, log) = (s.0.join("d.img"), s.0.join("l.img"));
    std::fs::File::create(&img)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    std::fs::File::create(&log)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let l = format!("logdev={},size=64m", log.display());
    let st = std::process::Command::new(bin.join("mkfs.xfs"))
        .args(["-q", "-f", "-l", &l])
        .arg(&img)
        .status()
        .unwrap();
    assert!(st.success());
    let (_, _, total, _) = workload(&img, &log, u64::MAX);
    assert!(total > 10, "only {total} writes");
    eprintln!("external log crash: {total} writes, a crash at each");
    let root = is_root();
    for limit in 1..=total {
        let (durable, tried, _, [d, lg]) = workload(&img, &log, limit);
        let (ci, cl) = (s.0.join("c.img"), s.0.join("c.log"));
        d.save(&img, &ci);
        lg.save(&log, &cl);
        let seen = names(&ci, &cl);
        assert!(
            seen >= durable && seen <= tried,
            "crash at write {limit}: {seen} files seen, {durable} durable, {tried} tried"
        );
        if root && limit % 4 == 1 {
            let (ki, kl) = (s.0.join("k.img"), s.0.join("k.log"));
            std::fs::copy(&ci, &ki).unwrap();
            std::fs::copy(&cl, &kl).unwrap();
            let k = kernel_names(&ki, &kl);
            assert_eq!(k, seen, "crash at write {limit}: the kernel's replay");
        }
        let opts = xfskit::log::recover::RecoverOptions {
            logdev: Some(cl.clone()),
            ..Default::default()
        };
        Fs::recover(&ci, &opts).unwrap();
        let o = std::process::Command::new(bin.join("xfs_repair"))
            .arg("-n")
            .arg("-l")
            .arg(&cl)
            .arg(&ci)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "crash at write {limit}: xfs_repair -n -l:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(
            names(&ci, &cl),
            seen,
            "crash at write {limit}: after recover"
        );
    }
}

/// Files in /d after a kernel mount (its log replay) with `-o logdev=`.
fn kernel_names(img: &Path, log: &Path) -> usize {
    let attach = |p: &Path| {
        let (ok, out) = run("losetup", &["-f", "--show", p.to_str().unwrap()]);
        assert!(ok, "losetup: {out}");
        out.trim().to_string()
    };
    let (ld, ll) = (attach(img), attach(log));
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &[
            "-t",
            "xfs",
            "-o",
            &format!("logdev={ll}"),
            &ld,
            mnt.to_str().unwrap(),
        ],
    );
    let n = if ok {
        let n = std::fs::read_dir(mnt.join("d"))
            .map(|d| d.count())
            .unwrap_or(0);
        kernel_umount(&mnt);
        n
    } else {
        usize::MAX
    };
    run("losetup", &["-d", &ld]);
    run("losetup", &["-d", &ll]);
    assert!(ok, "mount -o logdev: {out}");
    n
}

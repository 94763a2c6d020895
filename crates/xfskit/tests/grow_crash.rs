//! Crash safety of `grow::grow`, proven by crashing: the grow (the old
//! last AG extended, new AGs added) runs on a device that stops accepting
//! writes after its N-th write (or tears that write), for every N it
//! issues. After each crash xfskit's recovery and (as root) the kernel's
//! give either the old size or the new one in the primary superblock, an
//! image `xfs_repair -n` 7.2 finds clean apart from secondary superblocks
//! a crash after the logged primary left with the old size; the same grow
//! run again finishes it, clean, and the file written before reads back.

mod crash_common;
mod namespace_common;
mod support;
mod write_common;

use crash_common::{CrashDevice, Shared};
use namespace_common::*;
use std::path::Path;
use std::sync::Arc;
use support::{be32, be64};
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::grow;
use xfskit::{Fs, OpenOptions};

const BIG: u64 = 700 << 20;

/// (dblocks, agcount) of every superblock the primary's agcount names.
fn sizes(img: &Path) -> Vec<(u64, u32)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).unwrap();
    let mut sb = [0u8; 512];
    f.read_exact_at(&mut sb, 0).unwrap();
    let bsize = u64::from(be32(&sb, 4));
    let agblocks = u64::from(be32(&sb, 84));
    (0..be32(&sb, 88))
        .map(|a| {
            let mut s = [0u8; 512];
            f.read_exact_at(&mut s, u64::from(a) * agblocks * bsize)
                .unwrap();
            (be64(&s, 8), be32(&s, 88))
        })
        .collect()
}

fn open_dev(dev: Arc<CrashDevice>) -> xfskit::Result<Fs> {
    Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default())
}

fn grow_fs(fs: &Fs) -> xfskit::Result<()> {
    let bs = u64::from(fs.geometry().block_size);
    let plan = grow::plan(fs.geometry(), BIG / bs)?;
    grow::grow(fs, &plan)
}

fn file_reads_back(img: &Path, what: &str) {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let ip = fs
        .lookup_path(b"/hello")
        .unwrap_or_else(|e| panic!("{what}: /hello: {e}"));
    let mut data = [0u8; 6];
    let n = xfskit::inode::read_at(&fs, &ip, 0, &mut data).unwrap();
    assert_eq!(&data[..n], b"grown\n", "{what}: /hello");
}

fn crash_at_every_write(tag: &str, tear: bool) {
    let Some(bin) = xfsprogs_72_bin() else {
        skip(tag, "no xfsprogs 7.2");
        return;
    };
    let s = Scratch::new(tag);
    let base = s.0.join("base");
    let d = format!("size=300m,agcount=3,file,name={}", base.display());
    let (ok, out) = run(
        bin.join("mkfs.xfs").to_str().unwrap(),
        &["-q", "-f", "-d", &d],
    );
    assert!(ok, "mkfs.xfs 7.2: {out}");
    {
        let fs = Fs::open_rw(&base, &OpenOptions::default()).unwrap();
        let root = fs.geometry().root_ino;
        let ino = fs
            .create(root, b"hello", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        fs.write_at(ino, 0, b"grown\n").unwrap();
        fs.sync().unwrap();
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&base)
        .unwrap()
        .set_len(BIG)
        .unwrap();
    let old = sizes(&base);
    let dev = Arc::new(CrashDevice::new(&base, None, false));
    {
        let fs = open_dev(dev.clone()).unwrap();
        grow_fs(&fs).unwrap();
    }
    let total = dev.writes();
    let full = s.0.join("full");
    dev.save(&base, &full);
    let new = sizes(&full);
    assert!(
        new.len() > old.len() && new.iter().all(|&x| x == new[0]),
        "{new:?}"
    );
    let (ok, out) = repair_72(&full);
    assert!(
        ok,
        "{tag}: xfs_repair -n after the grow without a crash:\n{out}"
    );
    eprintln!("{tag}: {total} writes; crashing at each");
    let lo = {
        let fs = Fs::open(&base, &OpenOptions::default()).unwrap();
        let g = fs.geometry();
        let lo = g.fsb_to_daddr(g.log_start).bytes();
        (lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size))
    };
    let (img, ours) = (s.0.join("img"), s.0.join("ours"));
    let (mut seen_old, mut seen_new, mut lagging) = (0, 0, 0);
    for n in 1..=total {
        let what = format!("{tag}: crash at write {n} of {total} (torn: {tear})");
        let dev = Arc::new(CrashDevice::new(&base, Some(n), tear));
        dev.set_log(lo.0, lo.1);
        let r = open_dev(dev.clone()).and_then(|fs| grow_fs(&fs));
        assert!(r.is_err(), "{what}: the grow succeeded");
        dev.save(&base, &img);
        run(
            "cp",
            &[
                "--sparse=always",
                img.to_str().unwrap(),
                ours.to_str().unwrap(),
            ],
        );
        {
            let fs = Fs::open_rw(&ours, &OpenOptions::default())
                .unwrap_or_else(|e| panic!("{what}: xfskit recovery failed: {e}"));
            fs.sync().unwrap();
        }
        let got = sizes(&ours);
        let (ok, out) = repair_72(&ours);
        if got[0] == old[0] {
            seen_old += 1;
            assert_eq!(got, old, "{what}");
            assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
        } else {
            assert_eq!(got[0], new[0], "{what}: {got:?}");
            seen_new += 1;
            if got != new {
                lagging += 1;
                // Only the copies left with the old size may be reported:
                // xfs_repair -n calls them bad, skips their AGs, and so
                // counts fewer free blocks than the superblock says.
                let other: Vec<&str> = out
                    .lines()
                    .filter(|l| {
                        l.starts_with("would ")
                            || l.starts_with("bad ")
                            || l.contains("rror")
                            || l.contains("counted")
                    })
                    .filter(|l| {
                        !l.starts_with("would reset bad sb for ag ")
                            && !l.starts_with("bad uncorrected agheader ")
                            && !l.starts_with("sb_fdblocks ")
                    })
                    .collect();
                assert!(
                    other.is_empty(),
                    "{what}: xfs_repair -n finds more than lagging copies:\n{out}"
                );
            } else {
                assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
            }
        }
        file_reads_back(&ours, &what);
        {
            let fs = Fs::open_rw(&ours, &OpenOptions::default()).unwrap();
            grow_fs(&fs).unwrap_or_else(|e| panic!("{what}: the grow again: {e}"));
        }
        assert_eq!(sizes(&ours), new, "{what}: after the grow again");
        let (ok, out) = repair_72(&ours);
        assert!(ok, "{what}: xfs_repair -n after the grow again:\n{out}");
        file_reads_back(&ours, &what);
        if is_root() {
            if let Err(e) = kernel_replay(&img) {
                panic!("{what}: the kernel cannot mount it: {e}");
            }
            let got = sizes(&img);
            assert!(got[0] == old[0] || got[0] == new[0], "{what}: {got:?}");
        }
    }
    assert!(
        seen_old > 0 && seen_new > 0 && lagging > 0,
        "{tag}: crashes left old {seen_old}, new {seen_new}, lagging copies {lagging}"
    );
    if !is_root() {
        skip(&format!("{tag} (kernel recovery part)"), "needs root");
    }
}

fn repair_72(img: &Path) -> (bool, String) {
    let bin = xfsprogs_72_bin().unwrap();
    run(
        bin.join("xfs_repair").to_str().unwrap(),
        &["-n", img.to_str().unwrap()],
    )
}

#[test]
fn grow_crash_at_every_write() {
    crash_at_every_write("grow-crash", false);
}

#[test]
fn grow_crash_at_every_write_torn() {
    crash_at_every_write("grow-crash-torn", true);
}

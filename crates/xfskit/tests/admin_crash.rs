//! Crash safety of `admin::add_features`, proven by crashing: the change
//! (every feature xfsprogs 7.2 can add, the inode btree counters included)
//! runs on a device that stops accepting writes after its N-th write (or
//! tears that write), for every N it issues. After each crash xfskit's
//! recovery and (as root) the kernel's give an image `xfs_repair -n` 7.2
//! finds clean, with either the old features in every superblock or the
//! new ones in every superblock; the same change run again on the
//! recovered image finishes it, clean. With more AGs than
//! `admin::LOGGED_SB_AGS` the secondary superblocks are written in place
//! after the logged primary: a crash there leaves copies behind, which
//! the run again brings in line.

mod crash_common;
mod write_common;

use crash_common::{CrashDevice, Shared};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use write_common::*;
use xfskit::admin::{self, Feature};
use xfskit::{Fs, OpenOptions};

const FEATURES: [Feature; 4] = [
    Feature::Inobtcount,
    Feature::Bigtime,
    Feature::Nrext64,
    Feature::Exchange,
];
/// (ro_compat, incompat) bits the four set.
const NEW_RO: u32 = 0x8;
const NEW_INC: u32 = 0x8 | 0x20 | 0x40;

fn xfsprogs_72() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    d.join("xfs_repair").exists().then_some(d)
}

fn repair_72(bin: &Path, img: &Path) -> (bool, String) {
    run(
        bin.join("xfs_repair").to_str().unwrap(),
        &["-n", img.to_str().unwrap()],
    )
}

/// mkfs.xfs 7.2 with the four features off and `files` files in one
/// directory (1 KiB blocks: a two-level inode btree for 6000), `ags` AGs.
fn mkfs_old(bin: &Path, img: &Path, dir: &Path, files: u32, ags: u32, size: &str) {
    let src = dir.join("content");
    std::fs::write(&src, b"before\n").unwrap();
    let mut p = String::from("/dummy\n0 0\nd--755 0 0\nd d--755 0 0\n");
    for i in 0..files {
        p.push_str(&format!("f{i} ---644 0 0 {}\n", src.display()));
    }
    p.push_str("$\n$\n");
    let proto = dir.join("proto");
    std::fs::write(&proto, p).unwrap();
    let d = format!("size={size},agcount={ags},file,name={}", img.display());
    // The environment of xfstests lets mkfs.xfs make AGs smaller than its
    // 64 MiB log floor (130 AGs in 2 GiB).
    let out = std::process::Command::new(bin.join("mkfs.xfs"))
        .env("TEST_DIR", "/tmp")
        .env("TEST_DEV", "/dev/null")
        .env("QA_CHECK_FS", "1")
        .args([
            "-q",
            "-f",
            "-b",
            "size=1024",
            "-d",
            &d,
            "-m",
            "bigtime=0,inobtcount=0,rmapbt=0",
            "-i",
            "nrext64=0,exchange=0",
            "-n",
            "parent=0",
            "-p",
            proto.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.xfs 7.2: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (ro_compat, incompat) of every AG's superblock, read from the image.
fn sb_features(img: &Path) -> Vec<(u32, u32)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).unwrap();
    let mut sb = [0u8; 512];
    f.read_exact_at(&mut sb, 0).unwrap();
    let be = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    let bsize = u64::from(be(&sb, 4));
    let agblocks = u64::from(be(&sb, 84));
    let agcount = be(&sb, 88);
    (0..agcount)
        .map(|a| {
            let mut s = [0u8; 512];
            f.read_exact_at(&mut s, u64::from(a) * agblocks * bsize)
                .unwrap();
            (be(&s, 212), be(&s, 216))
        })
        .collect()
}

fn open_dev(dev: Arc<CrashDevice>) -> xfskit::Result<Fs> {
    Fs::from_device_rw(Box::new(Shared(dev)), &OpenOptions::default())
}

fn copy(a: &Path, b: &Path) {
    let (ok, o) = run(
        "cp",
        &["--sparse=always", a.to_str().unwrap(), b.to_str().unwrap()],
    );
    assert!(ok, "cp: {o}");
}

/// Crashes the change at every write (torn when `tear`); `logged`: every
/// superblock copy is in the logged transaction (few AGs).
fn crash_at_every_write(tag: &str, ags: u32, size: &str, files: u32, tear: bool, logged: bool) {
    let Some(bin) = xfsprogs_72() else {
        skip(tag, "no xfsprogs 7.2 at ../shared/xfsprogs-7.2");
        return;
    };
    let s = Scratch::new(tag);
    let base = s.0.join("base");
    mkfs_old(&bin, &base, &s.0, files, ags, size);
    let old = sb_features(&base);
    assert_eq!(old.len() as u32, ags);
    assert_eq!(ags <= admin::LOGGED_SB_AGS, logged);
    let (ro0, inc0) = old[0];
    let new = vec![(ro0 | NEW_RO, inc0 | NEW_INC); ags as usize];
    // The run without a crash: writes counted.
    let dev = Arc::new(CrashDevice::new(&base, None, false));
    {
        let fs = open_dev(dev.clone()).unwrap();
        let r = admin::add_features(&fs, &FEATURES).unwrap();
        assert!(r.iter().all(|x| x.1), "{r:?}");
    }
    let total = dev.writes();
    let full = s.0.join("full");
    dev.save(&base, &full);
    assert_eq!(sb_features(&full), new, "{tag}: the run without a crash");
    let (ok, out) = repair_72(&bin, &full);
    assert!(
        ok,
        "{tag}: xfs_repair -n after the run without a crash:\n{out}"
    );
    eprintln!("{tag}: {total} writes; crashing at each (every 13th among many in-place copies)");
    let lo = {
        let fs = Fs::open(&base, &OpenOptions::default()).unwrap();
        let g = fs.geometry();
        let lo = g.fsb_to_daddr(g.log_start).bytes();
        (lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size))
    };
    let (img, ours) = (s.0.join("img"), s.0.join("ours"));
    let mut mixed = 0;
    let (mut seen_old, mut seen_new) = (0, 0);
    for n in 1..=total {
        // Every write of the logged part; among the many secondary copies
        // written in place, every 13th.
        if n > 16 && n + 4 < total && n % 13 != 0 {
            continue;
        }
        let what = format!("{tag}: crash at write {n} of {total} (torn: {tear})");
        let dev = Arc::new(CrashDevice::new(&base, Some(n), tear));
        dev.set_log(lo.0, lo.1);
        let r = open_dev(dev.clone()).and_then(|fs| admin::add_features(&fs, &FEATURES));
        assert!(r.is_err(), "{what}: the change succeeded");
        dev.save(&base, &img);
        copy(&img, &ours);
        // xfskit's recovery.
        {
            let fs = Fs::open_rw(&ours, &OpenOptions::default())
                .unwrap_or_else(|e| panic!("{what}: xfskit recovery failed: {e}"));
            fs.sync().unwrap();
        }
        let got = sb_features(&ours);
        if got[0] == old[0] {
            seen_old += 1;
        } else if got[0] == new[0] {
            seen_new += 1;
        }
        let (ok, out) = repair_72(&bin, &ours);
        if logged {
            assert!(got == old || got == new, "{what}: features {got:x?}");
            assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
        } else {
            // The primary decides; the copies written in place may lag.
            assert!(got[0] == old[0] || got[0] == new[0], "{what}: {got:x?}");
            if got[1..] != new[1..] && got[1..] != old[1..] || got[0] != got[ags as usize - 1] {
                mixed += 1;
                assert!(
                    out.lines()
                        .filter(|l| l.starts_with("would ") || l.starts_with("bad "))
                        .all(|l| l.contains("feature mismatch in AG")),
                    "{what}: xfs_repair -n finds more than lagging copies:\n{out}"
                );
            } else {
                assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
            }
        }
        // Run again: done, clean.
        {
            let fs = Fs::open_rw(&ours, &OpenOptions::default()).unwrap();
            admin::add_features(&fs, &FEATURES)
                .unwrap_or_else(|e| panic!("{what}: the change again: {e}"));
        }
        assert_eq!(sb_features(&ours), new, "{what}: after the change again");
        let (ok, out) = repair_72(&bin, &ours);
        assert!(ok, "{what}: xfs_repair -n after the change again:\n{out}");
        // The kernel's recovery of the crashed image.
        if is_root() {
            if let Err(e) = kernel_replay(&img) {
                panic!("{what}: the kernel cannot mount it: {e}");
            }
            let got = sb_features(&img);
            assert!(got[0] == old[0] || got[0] == new[0], "{what}: {got:x?}");
            if logged {
                assert!(got == old || got == new, "{what}: features {got:x?}");
                let (ok, out) = repair_72(&bin, &img);
                assert!(
                    ok,
                    "{what}: xfs_repair -n after the kernel's recovery:\n{out}"
                );
            }
        }
    }
    assert!(
        seen_old > 0 && seen_new > 0,
        "{tag}: the crashes left only one state (old {seen_old}, new {seen_new})"
    );
    if !logged {
        assert!(
            mixed > 0,
            "{tag}: no crash point fell among the in-place copies"
        );
    }
    if !is_root() {
        skip(&format!("{tag} (kernel recovery part)"), "needs root");
    }
}

#[test]
fn add_features_crash_at_every_write() {
    crash_at_every_write("admin-crash", 4, "300m", 6000, false, true);
}

#[test]
fn add_features_crash_at_every_write_torn() {
    crash_at_every_write("admin-crash-torn", 4, "300m", 6000, true, true);
}

#[test]
fn add_features_crash_with_secondaries_in_place() {
    crash_at_every_write("admin-crash-many", 130, "2100m", 100, false, false);
}

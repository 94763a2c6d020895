//! The undo file, proven by crashing: a workload of creates, writes and
//! removes runs on an undo device over a device that stops accepting
//! writes after its N-th write, for every N the workload issues (torn
//! writes too); after each crash the undo file puts the image back byte
//! for byte as it was before the workload, whatever the crash left.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{CrashDevice, Shared};
use namespace_common::meta;
use std::sync::Arc;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::dev::undo::{restore, RestoreOptions};
use xfskit::dev::{Device, UndoDevice};

use xfskit::{Fs, OpenOptions};

fn workload(fs: &Fs) -> xfskit::Result<()> {
    let root = fs.geometry().root_ino;
    let d = fs.create(root, b"dir", &NodeKind::Dir, &meta(0o755, 0))?;
    for i in 0..6u32 {
        let f = fs.create(
            d,
            format!("f{i}").as_bytes(),
            &NodeKind::File { size: 0 },
            &meta(0o644, 1000),
        )?;
        fs.write_at(f, 0, &vec![i as u8 + 1; 5000 + 3000 * i as usize])?;
    }
    fs.sync()?;
    fs.unlink(d, b"f2")?;
    fs.sync()
}

/// True when every sector the crash device holds reads as in `orig`
/// (the others are the base image's, which is `orig`).
fn same_as(dev: &CrashDevice, orig: &[u8]) -> bool {
    let mut s = [0u8; 512];
    dev.touched().iter().all(|&sec| {
        dev.read_at(&mut s, sec * 512).unwrap();
        s[..] == orig[sec as usize * 512..][..512]
    })
}

#[test]
fn undo_puts_the_image_back_after_a_crash_at_every_write() {
    let s = Scratch::new("undo-crash");
    let base = s.0.join("base");
    mkfs_xfs(&base, 320 << 20, "");
    let orig = std::fs::read(&base).unwrap();
    // The run without a crash: writes counted, and undone.
    let dev = Arc::new(CrashDevice::new(&base, None, false));
    let undo = s.0.join("u0");
    {
        let u = UndoDevice::create(Box::new(Shared(dev.clone())), &undo).unwrap();
        let fs = Fs::from_device_rw(Box::new(u), &OpenOptions::default()).unwrap();
        workload(&fs).unwrap();
    }
    let total = dev.writes();
    assert!(total > 10, "only {total} writes");
    assert!(!same_as(&dev, &orig), "the workload changed nothing");
    restore(&undo, dev.as_ref(), &RestoreOptions::default()).unwrap();
    assert!(same_as(&dev, &orig), "undo after the full run");
    eprintln!("{total} writes; crashing at each, whole and torn");
    for tear in [false, true] {
        for n in 1..=total {
            let what = format!("crash at write {n} of {total} (torn: {tear})");
            let dev = Arc::new(CrashDevice::new(&base, Some(n), tear));
            let undo = s.0.join(format!("u-{n}-{tear}"));
            let r = UndoDevice::create(Box::new(Shared(dev.clone())), &undo).and_then(|u| {
                let fs = Fs::from_device_rw(Box::new(u), &OpenOptions::default())?;
                workload(&fs)
            });
            assert!(r.is_err(), "{what}: the workload succeeded");
            dev.revive();
            let got = restore(&undo, dev.as_ref(), &RestoreOptions::default())
                .unwrap_or_else(|e| panic!("{what}: restore: {e}"));
            assert!(
                !got.torn_tail,
                "{what}: the undo file's own writes were not cut"
            );
            assert!(same_as(&dev, &orig), "{what}: not the image from before");
            std::fs::remove_file(&undo).unwrap();
        }
    }
}

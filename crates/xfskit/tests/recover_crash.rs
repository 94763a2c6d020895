//! Recovery's own work is crash-safe. After replaying a dirty log, recovery
//! finishes the intents the log left unfinished (extent frees, reverse
//! mapping, reference count and block-mapping updates), frees the inodes
//! left on the unlinked lists and the copy-on-write staging extents, and
//! only then leaves the log clean. A crash anywhere in that must lose
//! nothing and break nothing.
//!
//! The dirty image is the kernel's: fragmented files being removed and
//! cloned files being overwritten on a filesystem with an rmapbt and
//! reflink, files unlinked while still open, and a shutdown while that
//! runs, retried until the log holds unfinished intents and the unlinked
//! lists hold inodes. xfskit's recovery of it then runs on a device that
//! fails every write from the N-th on (the N-th torn in half for odd N),
//! for every N up to the writes the whole recovery makes. Each crashed
//! image is recovered again by xfskit, which must succeed, give a tree
//! equal to the kernel's recovery of the dirty image and pass `check`;
//! every few N (and the last ones) the kernel also mounts the crashed
//! image, replaying whatever the interrupted recovery logged, and must see
//! the same tree, with `xfs_repair -n` clean after it and after xfskit's
//! recovery.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{recover_on, Shared};
use namespace_common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use write_common::*;
use xfskit::log::recover::{recover_device, RecoverOptions, RecoverReport};
use xfskit::{Fs, OpenOptions};

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn must(cmd: &str, args: &[&str]) {
    let (ok, out) = run(cmd, args);
    assert!(ok, "{cmd} {args:?}: {out}");
}

/// Writes `n` 4 KiB blocks every other block of `path` (as many extents).
fn write_fragmented(path: &Path, n: u64, pat: u8) {
    let mut args = vec!["-f".to_string()];
    for i in 0..n {
        args.push("-c".into());
        args.push(format!("pwrite -q -S {pat:#x} {} 4096", i * 8192));
    }
    args.extend(["-c".into(), "fsync".into(), s(path)]);
    must(
        "xfs_io",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
}

/// A dirty image from the kernel whose recovery has intents to finish and
/// unlinked inodes to free, or None after some tries.
fn dirty_image(dir: &Path) -> Option<(PathBuf, RecoverReport)> {
    let img = dir.join("dirty.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    for attempt in 0..10u32 {
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(300 << 20))
            .unwrap();
        must(
            "mkfs.xfs",
            &["-q", "-f", "-m", "rmapbt=1,reflink=1", &s(&img)],
        );
        must("mount", &["-o", "loop", &s(&img), &s(&mnt)]);
        for f in 0..4u8 {
            let p = mnt.join(format!("f{f}"));
            write_fragmented(&p, 1200, 0x41 + f);
            must(
                "cp",
                &["--reflink=always", &s(&p), &s(&mnt.join(format!("c{f}")))],
            );
        }
        std::fs::create_dir_all(mnt.join("held")).unwrap();
        for h in 0..6 {
            write_fragmented(&mnt.join(format!("held/h{h}")), 40, 0x61 + h);
        }
        must("sync", &[]);
        // Files held open while their names go: on the unlinked lists at
        // the shutdown. Removals and overwrites of clones in flight.
        let script = format!(
            "cd {m}/held && exec 3<h0 4<h1 5<h2 6<h3 7<h4 8<h5 && rm -f h0 h1 h2 h3 h4 h5 && cd / && \
             (rm -f {m}/f0 {m}/f1 & for f in 2 3; do xfs_io -c 'pwrite -q -S 0x77 0 6000000' {m}/c$f & done; rm -f {m}/f2 & wait) & \
             sleep 0.{d}; xfs_io -x -c 'shutdown -f' {m}; wait",
            m = s(&mnt),
            d = 1 + attempt % 4
        );
        let _ = Command::new("bash").args(["-c", &script]).status();
        let (ok, out) = write_common::umount(&mnt);
        assert!(ok, "umount: {out}");
        let (_, r) = recover_on(&img, None, false);
        let rep = match r {
            Ok(rep) => rep,
            Err(e) => panic!("recovery of the dirty image (no crash): {e}"),
        };
        let intents = rep.efi_extents_freed + rep.rui_updates;
        println!(
            "attempt {attempt}: {} extents freed, {} updates, {} inodes freed from the unlinked lists",
            rep.efi_extents_freed, rep.rui_updates, rep.unlinked.freed
        );
        if intents > 0 && rep.unlinked.freed > 0 {
            return Some((img, rep));
        }
    }
    None
}

/// The tree the kernel sees on `img`, mounted read-write (so that it
/// replays the log) and unmounted again.
fn kernel_tree(img: &Path) -> Tree {
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    must("mount", &["-o", "loop,nouuid", &s(img), &s(&mnt)]);
    let t = std::panic::catch_unwind(|| walk_host(&mnt));
    let (ok, out) = write_common::umount(&mnt);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    t.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Copies an image, keeping its holes.
fn copy(from: &Path, to: &Path) {
    must("cp", &["--sparse=always", &s(from), &s(to)]);
}

fn repair_clean(img: &Path, what: &str) {
    let (ok, out) = run("xfs_repair", &["-n", "-f", &s(img)]);
    assert!(ok, "{what}: xfs_repair -n:\n{out}");
}

/// Cuts the recovery of `img` at write `n` of `total` (torn when odd), then
/// recovers again and compares the tree and check; every `stride`-th point
/// and the last ones also go through the kernel's recovery and xfs_repair.
#[allow(clippy::too_many_arguments)]
fn crash_point(
    img: &Path,
    n: u64,
    total: u64,
    stride: u64,
    want: &Tree,
    crashed: &Path,
    again: &Path,
    kernel_looks: &std::sync::atomic::AtomicU64,
) {
    let tear = n % 2 == 1;
    let (dev, r) = recover_on(img, Some(n), tear);
    assert!(
        r.is_err(),
        "write {n} of {total} failed, yet recovery returned"
    );
    let what = format!(
        "crash at write {n} of {total}{}",
        if tear { " (torn)" } else { "" }
    );
    let look = n.is_multiple_of(stride) || n + 6 > total;
    if look {
        dev.save(img, crashed);
    }
    // The machine comes back and xfskit recovers what the crash left.
    dev.revive();
    if let Err(e) = recover_device(Arc::new(Shared(dev.clone())), &RecoverOptions::default()) {
        panic!("{what}: recovery after the crash: {e}");
    }
    let fs = Fs::from_device(Box::new(Shared(dev.clone())), &OpenOptions::default()).unwrap();
    assert_tree_eq(want, &walk_lib(&fs), &what);
    let report = xfskit::check::check(
        &fs,
        &xfskit::check::CheckOptions {
            threads: 1,
            progress: None,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        report.is_clean(),
        "{what}: check after recovery: {:?}",
        report.problems
    );
    drop(fs);
    if look {
        kernel_looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        dev.save(img, again);
        repair_clean(again, &format!("{what}, recovered by xfskit"));
        let got = kernel_tree(crashed);
        assert_tree_eq(want, &got, &format!("{what}, recovered by the kernel"));
        repair_clean(crashed, &format!("{what}, recovered by the kernel"));
    }
}

#[test]
fn recovery_interrupted_at_every_write() {
    if skip_unless_root("recovery_interrupted_at_every_write") {
        return;
    }
    let scratch = Scratch::new("recover-crash");
    let dir = scratch.0.clone();
    let Some((img, full)) = dirty_image(&dir) else {
        panic!("no shutdown left both unfinished intents and unlinked inodes in 10 tries");
    };
    let kimg = dir.join("kernel.img");
    copy(&img, &kimg);
    let want = kernel_tree(&kimg);
    repair_clean(&kimg, "the kernel's recovery");
    // How many writes the whole recovery makes; and its result matches.
    let (dev, r) = recover_on(&img, None, false);
    r.unwrap();
    let total = dev.writes();
    let whole = dir.join("whole.img");
    dev.save(&img, &whole);
    assert_tree_eq(
        &want,
        &walk_lib(&Fs::open(&whole, &OpenOptions::default()).unwrap()),
        "uninterrupted recovery",
    );
    println!(
        "recovery makes {total} writes ({} extents freed, {} inodes freed)",
        full.efi_extents_freed, full.unlinked.freed
    );
    // The kernel's look is slow: every few writes, and every one of the
    // last writes (the work after replay and the unmount record).
    let stride = (total / 8).max(1);
    let kernel_looks = std::sync::atomic::AtomicU64::new(0);
    let next = std::sync::atomic::AtomicU64::new(1);
    // Two workers take the crash points in turn (each point is
    // independent: its own device over the same dirty image).
    std::thread::scope(|sc| {
        for w in 0..2 {
            let (img, dir, want, next, kernel_looks) = (&img, &dir, &want, &next, &kernel_looks);
            sc.spawn(move || {
                let crashed = dir.join(format!("crashed{w}.img"));
                let again = dir.join(format!("again{w}.img"));
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n > total {
                        break;
                    }
                    crash_point(img, n, total, stride, want, &crashed, &again, kernel_looks);
                }
            });
        }
    });
    let kernel_looks = kernel_looks.into_inner();
    println!("{total} crash points, {kernel_looks} also recovered by the kernel");
}

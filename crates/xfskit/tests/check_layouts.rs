//! Valid layouts other than today's mkfs defaults are no problems to
//! `check`: what xfs_repair -n accepts, check accepts.

mod write_common;

use write_common::*;
use xfskit::check::{check, CheckOptions};
use xfskit::{Fs, OpenOptions};

/// A filesystem of one AG keeps its internal log in AG 0, before the first
/// inode chunk: the root inode is after the log (xfs_repair computes it
/// so), not at 128.
#[test]
fn one_ag_root_after_the_log() {
    if skip_without_615("one_ag_root_after_the_log") {
        return;
    }
    let s = Scratch::new("one-ag");
    let img = s.0.join("one.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let p = img.display().to_string();
    // mkfs.xfs makes one AG only for test suites (fstests' variables).
    let dir = xfsprogs_615().unwrap();
    let out = std::process::Command::new(dir.join("libexec/mkfs.xfs"))
        .env("LD_LIBRARY_PATH", dir.join("lib"))
        .env("TEST_DEV", "/dev/null")
        .env("TEST_DIR", "/tmp")
        .env("QA_CHECK_FS", "1")
        .args(["-q", "-f", "-d", "agcount=1", &p])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, rep) = run_615("xfs_repair", &["-n", "-o", "force_geometry", &p]);
    assert!(ok, "xfs_repair -n 6.15: {rep}");
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_eq!(fs.geometry().ag_count, 1);
    assert!(
        fs.geometry().root_ino.0 > 128,
        "root {}",
        fs.geometry().root_ino.0
    );
    let r = check(&fs, &CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
}

/// mkfs.xfs 6.15 with `opts` (one AG allowed) on a new image of `mib` MiB.
fn mkfs_615_test(img: &std::path::Path, mib: u64, opts: &[&str]) {
    std::fs::File::create(img)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    let dir = xfsprogs_615().unwrap();
    let out = std::process::Command::new(dir.join("libexec/mkfs.xfs"))
        .env("LD_LIBRARY_PATH", dir.join("lib"))
        .env("TEST_DEV", "/dev/null")
        .env("TEST_DIR", "/tmp")
        .env("QA_CHECK_FS", "1")
        .args(["-q", "-f"])
        .args(opts)
        .arg(img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.xfs {opts:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stripe unit aligns the first inode chunk only when it is a multiple
/// of the inode chunk alignment; otherwise the chunk alignment does
/// (libxfs's ialloc_align, which xfs_repair's root inode rule follows).
/// Every layout here is accepted by xfs_repair -n, and by check.
#[test]
fn stripe_units_that_do_not_align_inodes() {
    if skip_without_615("stripe_units_that_do_not_align_inodes") {
        return;
    }
    let s = Scratch::new("stripes");
    let layouts: &[&[&str]] = &[
        &["-d", "agcount=1,su=8k,sw=2"],
        &["-d", "agcount=4,su=8k,sw=2"],
        &["-b", "size=1024", "-d", "agcount=1,su=2k,sw=2"],
        &["-b", "size=1024", "-d", "agcount=1,su=16k,sw=2"],
        &["-b", "size=2048", "-d", "agcount=1,su=4k,sw=3"],
        &["-i", "size=2048", "-d", "agcount=1,su=8k,sw=2"],
        &["-d", "agcount=1,su=32k,sw=2"],
        &["-m", "metadir=1", "-d", "agcount=1,su=8k,sw=2"],
    ];
    let mut unaligned = 0;
    for (k, opts) in layouts.iter().enumerate() {
        let img = s.0.join(format!("s{k}.img"));
        mkfs_615_test(&img, 64, opts);
        let p = img.display().to_string();
        let (ok, rep) = run_615("xfs_repair", &["-n", "-o", "force_geometry", &p]);
        assert!(ok, "{opts:?}: xfs_repair -n 6.15: {rep}");
        let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
        let g = fs.geometry();
        if g.stripe_unit > 0 && !g.stripe_unit.is_multiple_of(g.inode_align) {
            unaligned += 1;
        }
        let r = check(&fs, &CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "{opts:?}: {:#?}", r.problems);
    }
    // The cases that matter: stripe units the inode alignment overrides.
    assert!(
        unaligned >= 4,
        "only {unaligned} layouts have such a stripe unit"
    );
}

/// A stripe unit changed after mkfs (xfs_db here, a mount option once):
/// the root directory is no longer where the new unit puts it. xfs_repair
/// -n says so and would change the unit back; check says so too, and does
/// not also call the realtime inodes misplaced.
#[test]
fn stripe_unit_changed_after_mkfs() {
    if skip_without_615("stripe_unit_changed_after_mkfs") {
        return;
    }
    let s = Scratch::new("stripe-changed");
    let img = s.0.join("c.img");
    mkfs_615_test(&img, 64, &["-d", "agcount=4,su=32k,sw=2"]);
    let p = img.display().to_string();
    let (ok, rep) = run_615(
        "xfs_db",
        &[
            "-x",
            "-c",
            "sb 0",
            "-c",
            "write -d unit 128",
            "-c",
            "write -d width 256",
            &p,
        ],
    );
    assert!(ok, "xfs_db: {rep}");
    let (ok, rep) = run_615("xfs_repair", &["-n", &p]);
    assert!(
        !ok && rep.contains("unaligned location"),
        "xfs_repair -n 6.15: {rep}"
    );
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let r = check(&fs, &CheckOptions::default()).unwrap();
    let text: Vec<String> = r.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(r.problems.len(), 1, "{text:#?}");
    assert!(
        text[0].contains("valid root directory") && text[0].contains("stripe unit 128"),
        "{text:#?}"
    );
}

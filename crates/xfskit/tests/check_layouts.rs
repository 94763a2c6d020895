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
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, rep) = run_615("xfs_repair", &["-n", "-o", "force_geometry", &p]);
    assert!(ok, "xfs_repair -n 6.15: {rep}");
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_eq!(fs.geometry().ag_count, 1);
    assert!(fs.geometry().root_ino.0 > 128, "root {}", fs.geometry().root_ino.0);
    let r = check(&fs, &CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
}

//! External logs (`mkfs.xfs -l logdev=`, `--logdev FILE`).
//!
//! Offline (xfsprogs 7.2): without --logdev the log is neither read nor
//! written (writes and recover refuse, exit 3, naming --logdev); a log
//! device of another filesystem or too small is refused (exit 2); with it,
//! edits journal into the log device and xfs_repair -n -l is clean.
//! As root: the kernel dirties the external log (writes, then a forced
//! shutdown), xfskit reads the tree with the log replayed from the log
//! device, and `xfskit recover --logdev` leaves the AG headers the kernel's
//! own replay leaves; the kernel then mounts what xfskit wrote.

mod common;

use common::fixtures::xfskit_ok as xfskit;

use common::fixtures::with_logdev_mount as with_mount;
use common::fixtures::{tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::{is_root, skip, TempDir};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Exit code and stderr of a failing xfskit run.
fn xfskit_fails(args: &[&str]) -> (i32, String) {
    let o = xfskit_output(args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A 300 MiB data file and a 64 MiB external log made by mkfs.xfs 7.2.
fn make(bin: &Path, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let img = dir.join(format!("{name}.img"));
    let log = dir.join(format!("{name}.log"));
    for (p, n) in [(&img, 300u64 << 20), (&log, 64 << 20)] {
        fs::File::create(p).unwrap().set_len(n).unwrap();
    }
    let l = format!("logdev={},size=64m", s(&log));
    tool_72(bin, "mkfs.xfs", &["-q", "-f", "-l", &l, s(&img)]);
    (img, log)
}

fn repair_clean(bin: &Path, img: &Path, log: &Path) {
    let o = Command::new(bin.join("xfs_repair"))
        .args(["-n", "-l", s(log), s(img)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "xfs_repair -n -l: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn offline_edits_and_refusals() {
    let Some(bin) = xfsprogs_72_or_skip("offline_edits_and_refusals") else {
        return;
    };
    let t = TempDir::new("extlog");
    let (img, log) = make(&bin, t.path(), "a");
    let (other, olog) = make(&bin, t.path(), "b");
    let (i, l) = (s(&img), s(&log));

    let (rc, err) = xfskit_fails(&["mkdir", i, "/x"]);
    assert_eq!(rc, 3, "{err}");
    assert!(err.contains("--logdev"), "{err}");
    let (rc, err) = xfskit_fails(&["recover", i]);
    assert_eq!(rc, 3, "{err}");
    assert!(err.contains("--logdev"), "{err}");
    let (rc, err) = xfskit_fails(&["log", i]);
    assert_eq!(rc, 3, "{err}");
    // Another filesystem's log, a short device, a log for an internal log.
    let (rc, err) = xfskit_fails(&["ls", "--logdev", s(&olog), i, "/"]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("another filesystem"), "{err}");
    let short = t.path().join("short.log");
    fs::File::create(&short).unwrap().set_len(1 << 20).unwrap();
    let (rc, err) = xfskit_fails(&["ls", "--logdev", s(&short), i, "/"]);
    assert_eq!(rc, 2, "{err}");
    let o = xfskit_output(&["check", i]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("external log"),
        "{}",
        common::output_text_of(&o)
    );

    xfskit(&["mkdir", "--logdev", l, i, "/x"]);
    let src = t.path().join("in.txt");
    fs::write(&src, b"external log data\n").unwrap();
    xfskit(&["cp", "--logdev", l, s(&src), &format!("{i}:/x/in.txt")]);
    assert_eq!(
        xfskit(&["cat", "--logdev", l, i, "/x/in.txt"]),
        "external log data\n"
    );
    assert!(xfskit(&["log", "--logdev", l, i]).contains("clean"));
    repair_clean(&bin, &img, &log);
    xfskit(&["check", "--logdev", l, i]);
    // The other filesystem's log was not touched.
    repair_clean(&bin, &other, &olog);

    // xfs_admin -U rewrites the external log: so does admin -U --logdev.
    let u = "11111111-2222-3333-4444-555555555555";
    let (rc, err) = xfskit_fails(&["admin", "-U", u, i]);
    assert_eq!(rc, 3, "{err}");
    assert!(err.contains("--logdev"), "{err}");
    xfskit(&["admin", "--logdev", l, "-U", u, i]);
    let lp = tool_72(&bin, "xfs_logprint", &["-l", l, i]);
    assert!(lp.contains(&format!("uuid: {u}")), "{lp}");
    let sb = tool_72(
        &bin,
        "xfs_db",
        &["-r", "-l", l, "-c", "sb 0", "-c", "p uuid", i],
    );
    assert!(sb.contains(u), "{sb}");
    repair_clean(&bin, &img, &log);
    assert_eq!(
        xfskit(&["cat", "--logdev", l, i, "/x/in.txt"]),
        "external log data\n"
    );
}

#[test]
fn kernel_dirty_log_replayed_and_recovered() {
    let Some(bin) = xfsprogs_72_or_skip("kernel_dirty_log") else {
        return;
    };
    if !is_root() || !Path::new("/usr/sbin/xfs_io").exists() {
        return skip("kernel_dirty_log", "needs root and /usr/sbin/xfs_io");
    }
    let t = TempDir::new("extlog-k");
    let (img, log) = make(&bin, t.path(), "k");
    let mnt = t.path().join("m");
    fs::create_dir(&mnt).unwrap();
    with_mount(&img, &log, &mnt, |m| {
        fs::create_dir(m.join("d")).unwrap();
        for n in 0..40 {
            let f = m.join(format!("d/f{n}"));
            fs::write(&f, format!("file {n}\n")).unwrap();
            fs::File::open(&f).unwrap().sync_all().unwrap();
        }
        // Names only the log holds at the shutdown.
        fs::create_dir(m.join("e")).unwrap();
        for n in 0..30 {
            fs::File::create(m.join(format!("e/g{n}"))).unwrap();
        }
        let st = Command::new("/usr/sbin/xfs_io")
            .args(["-x", "-c", "shutdown -f", s(m)])
            .status()
            .unwrap();
        assert!(st.success());
    });
    let (i, l) = (s(&img), s(&log));
    assert!(xfskit(&["log", "--logdev", l, i]).contains("dirty"));
    // Read with the log replayed in memory from the log device.
    let ls = xfskit(&["ls", "--logdev", l, i, "/d"]);
    assert_eq!(ls.lines().count(), 40, "{ls}");
    assert_eq!(xfskit(&["cat", "--logdev", l, i, "/d/f7"]), "file 7\n");

    // The kernel's replay of a copy against xfskit recover's.
    let (ki, kl) = (t.path().join("kcopy.img"), t.path().join("kcopy.log"));
    fs::copy(&img, &ki).unwrap();
    fs::copy(&log, &kl).unwrap();
    let mut kernel_e = 0;
    with_mount(&ki, &kl, &mnt, |m| {
        kernel_e = fs::read_dir(m.join("e")).map(|d| d.count()).unwrap_or(0);
    });
    let e = xfskit(&["ls", "--logdev", l, i, "/e"]);
    assert_eq!(e.lines().count(), kernel_e, "{e}");
    assert!(kernel_e > 0, "the log held no names of /e");
    xfskit(&["recover", "--logdev", l, i]);
    repair_clean(&bin, &img, &log);
    repair_clean(&bin, &ki, &kl);
    for ag in 0..4 {
        for h in ["agf", "agi"] {
            let c = format!("{h} {ag}");
            let a = tool_72(&bin, "xfs_db", &["-r", "-l", l, "-c", &c, "-c", "p", i]);
            let b = tool_72(
                &bin,
                "xfs_db",
                &["-r", "-l", s(&kl), "-c", &c, "-c", "p", s(&ki)],
            );
            assert_eq!(a, b, "{c}");
        }
    }
    // xfskit writes into the recovered log; the kernel reads it back.
    xfskit(&["mkdir", "--logdev", l, i, "/d/new"]);
    with_mount(&img, &log, &mnt, |m| {
        assert!(m.join("d/new").is_dir());
        assert_eq!(fs::read_to_string(m.join("d/f39")).unwrap(), "file 39\n");
    });
    repair_clean(&bin, &img, &log);
}

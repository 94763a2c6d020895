//! Immutable and append-only inodes through a read-write `xfskit mount`:
//! every call the kernel refuses on kernel XFS (EPERM) is refused through
//! the mount too, and what it allows goes through. The flags are set by
//! the kernel (xfs_io chattr) on a loop mount; the same calls then run on
//! a kernel mount of a copy of the image and through the FUSE mount, and
//! their errnos must be equal. Needs root, /dev/fuse and xfsprogs.

mod common;

use common::rwmount::{as_user, c, err_of, errno, skip_rw as skip, RwMount};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

fn run(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?}");
}

/// Opens `p` for writing (read and write with `rdwr`) and closes it
/// without writing: the errno of the open, or 0 (the kernel refuses
/// at open what the flags forbid, before any write).
fn open_only(p: &Path, rdwr: bool, append: bool, trunc: bool) -> i32 {
    let mut o = OpenOptions::new();
    o.read(rdwr).write(true).append(append).truncate(trunc);
    err_of(o.open(p).map(drop))
}

/// Opens `p` with `flags` and writes a byte: the first errno, or 0.
fn open_write(p: &Path, append: bool, trunc: bool) -> i32 {
    let mut o = OpenOptions::new();
    o.write(true).append(append).truncate(trunc);
    match o.open(p) {
        Err(e) => e.raw_os_error().unwrap_or(-1),
        Ok(mut f) => err_of(f.write_all(b"x").and_then(|()| f.sync_all())),
    }
}

fn utimes(p: &Path, explicit: bool) -> i32 {
    let ts = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 0,
        },
    ];
    let t = if explicit {
        ts.as_ptr()
    } else {
        std::ptr::null()
    };
    // SAFETY: a valid path and a null or two-element array.
    errno(unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), t, 0) } as i64)
}

fn fallocate(p: &Path, mode: i32) -> i32 {
    let f = match OpenOptions::new().append(true).open(p) {
        Ok(f) => f,
        Err(e) => return e.raw_os_error().unwrap_or(-1),
    };
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor.
    errno(unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, 4096) } as i64)
}

fn setxattr(p: &Path) -> i32 {
    let n = std::ffi::CString::new("user.k").unwrap();
    // SAFETY: valid strings and a 1-byte value.
    errno(unsafe { libc::setxattr(c(p).as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) } as i64)
}

/// The calls, run under `root`; (what, errno) for each, in order.
fn calls(root: &Path) -> Vec<(String, i32)> {
    let d = root.join("fx");
    let mut out = Vec::new();
    let mut rec = |what: String, e: i32| out.push((what, e));
    for f in ["imm", "app", "plain"] {
        let p = d.join(f);
        rec(
            format!("{f}: write without O_APPEND"),
            open_write(&p, false, false),
        );
        rec(
            format!("{f}: write with O_APPEND"),
            open_write(&p, true, false),
        );
        rec(format!("{f}: open O_TRUNC"), open_write(&p, false, true));
        rec(
            format!("{f}: open O_WRONLY only"),
            open_only(&p, false, false, false),
        );
        rec(
            format!("{f}: open O_RDWR only"),
            open_only(&p, true, false, false),
        );
        rec(
            format!("{f}: open O_WRONLY|O_APPEND only"),
            open_only(&p, false, true, false),
        );
        rec(
            format!("{f}: open O_RDWR|O_TRUNC only"),
            open_only(&p, true, false, true),
        );
        rec(
            format!("{f}: truncate"),
            err_of(
                OpenOptions::new()
                    .append(true)
                    .open(&p)
                    .and_then(|h| h.set_len(3)),
            ),
        );
        rec(
            format!("{f}: chmod"),
            errno(unsafe { libc::chmod(c(&p).as_ptr(), 0o600) } as i64),
        );
        rec(
            format!("{f}: chown"),
            errno(unsafe { libc::chown(c(&p).as_ptr(), 7, 7) } as i64),
        );
        rec(format!("{f}: utimes explicit"), utimes(&p, true));
        rec(format!("{f}: utimes now"), utimes(&p, false));
        rec(format!("{f}: setxattr"), setxattr(&p));
        rec(format!("{f}: fallocate"), fallocate(&p, 0));
        rec(
            format!("{f}: punch"),
            fallocate(&p, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE),
        );
        rec(
            format!("{f}: link"),
            err_of(fs::hard_link(&p, d.join(format!("{f}-link")))),
        );
        rec(
            format!("{f}: rename"),
            err_of(fs::rename(&p, d.join(format!("{f}-moved")))),
        );
        // unlink last: on the plain file it succeeds.
        let target = if d.join(format!("{f}-moved")).exists() {
            d.join(format!("{f}-moved"))
        } else {
            p.clone()
        };
        rec(format!("{f}: unlink"), err_of(fs::remove_file(&target)));
    }
    for dir in ["dimm", "dapp", "dplain"] {
        let p = d.join(dir);
        rec(
            format!("{dir}: create"),
            err_of(fs::write(p.join("new"), b"n")),
        );
        rec(
            format!("{dir}: mkdir"),
            err_of(fs::create_dir(p.join("sub"))),
        );
        rec(
            format!("{dir}: symlink"),
            err_of(symlink("t", p.join("sl"))),
        );
        rec(
            format!("{dir}: link in"),
            err_of(fs::hard_link(d.join("spare"), p.join("hl"))),
        );
        rec(
            format!("{dir}: rename in"),
            err_of(fs::rename(d.join(format!("mv-{dir}")), p.join("moved-in"))),
        );
        rec(
            format!("{dir}: rename within"),
            err_of(fs::rename(p.join("x"), p.join("y"))),
        );
        rec(
            format!("{dir}: rename out"),
            err_of(fs::rename(p.join("z"), d.join(format!("out-{dir}")))),
        );
        rec(
            format!("{dir}: unlink"),
            err_of(fs::remove_file(p.join("w"))),
        );
        rec(format!("{dir}: rmdir"), err_of(fs::remove_dir(p.join("e"))));
        rec(
            format!("{dir}: chmod"),
            errno(unsafe { libc::chmod(c(&p).as_ptr(), 0o700) } as i64),
        );
    }
    // An append-only set-user-id file appended to by its owner (no
    // CAP_FSETID): the kernel drops the set-id bits and writes.
    let sh = format!("echo x >> {}", d.join("appsuid").display());
    let (ok, _) = as_user(1000, &["sh", "-c", &sh]);
    rec(
        "appsuid: append as its owner".into(),
        if ok { 0 } else { 1 },
    );
    let mode = {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(d.join("appsuid"))
            .map(|m| m.mode() & 0o7777)
            .unwrap_or(0)
    };
    rec(format!("appsuid: mode after {mode:04o}"), 0);
    // What the refused calls left alone.
    for f in ["imm", "app", "appsuid"] {
        let got = fs::read(d.join(f)).unwrap_or_default();
        out.push((
            format!("{f}: contents {:?}", String::from_utf8_lossy(&got)),
            0,
        ));
    }
    out
}

#[test]
fn immutable_and_append_only_refuse_what_the_kernel_refuses() {
    if skip("immutable_and_append_only_refuse_what_the_kernel_refuses") {
        return;
    }
    let mut m = RwMount::new("iflags", 320, &[]);
    m.unmount();
    // Fixtures made and flagged by the kernel.
    let kdir = m.dir.join("kernel-setup");
    fs::create_dir_all(&kdir).unwrap();
    run(&[
        "mount",
        "-o",
        "loop",
        m.image.to_str().unwrap(),
        kdir.to_str().unwrap(),
    ]);
    let d = kdir.join("fx");
    fs::create_dir(&d).unwrap();
    for f in ["imm", "app", "plain", "spare", "appsuid"] {
        fs::write(d.join(f), b"0123456789").unwrap();
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(d.join("appsuid"), Some(1000), Some(1000)).unwrap();
        fs::set_permissions(d.join("appsuid"), fs::Permissions::from_mode(0o6775)).unwrap();
    }
    for dir in ["dimm", "dapp", "dplain"] {
        let p = d.join(dir);
        fs::create_dir(&p).unwrap();
        for n in ["x", "z", "w"] {
            fs::write(p.join(n), n).unwrap();
        }
        fs::create_dir(p.join("e")).unwrap();
        fs::write(d.join(format!("mv-{dir}")), b"m").unwrap();
    }
    let fx = |flag: &str, p: &Path| {
        run(&[
            "xfs_io",
            "-c",
            &format!("chattr +{flag}"),
            p.to_str().unwrap(),
        ])
    };
    fx("i", &d.join("imm"));
    fx("a", &d.join("app"));
    fx("a", &d.join("appsuid"));
    fx("i", &d.join("dimm"));
    fx("a", &d.join("dapp"));
    common::must_umount(&kdir);
    // The kernel's answers, on a copy.
    let copy = m.dir.join("kernel.img");
    fs::copy(&m.image, &copy).unwrap();
    run(&[
        "mount",
        "-o",
        "loop",
        copy.to_str().unwrap(),
        kdir.to_str().unwrap(),
    ]);
    let kernel = calls(&kdir);
    common::must_umount(&kdir);
    // Answers that do not depend on the kernel alone.
    let has = |what: &str, e: i32| {
        assert!(
            kernel.iter().any(|(w, x)| w == what && *x == e),
            "kernel: {what} = {e}? {kernel:#?}"
        )
    };
    has("imm: write with O_APPEND", libc::EPERM);
    has("app: write with O_APPEND", 0);
    has("app: write without O_APPEND", libc::EPERM);
    has("plain: unlink", 0);
    has("dapp: create", 0);
    has("dapp: unlink", libc::EPERM);
    has("app: open O_WRONLY only", libc::EPERM);
    has("imm: open O_RDWR|O_TRUNC only", libc::EPERM);
    has("appsuid: append as its owner", 0);
    has("appsuid: mode after 0775", 0);
    // The same through the FUSE mount, and after a remount the image
    // holds what the kernel's copy holds.
    m.mount(&[]);
    let fuse = calls(&m.mnt);
    for (k, f) in kernel.iter().zip(&fuse) {
        assert_eq!(f, k, "through xfskit mount against the kernel");
    }
    assert_eq!(fuse.len(), kernel.len());
    m.finish();
}

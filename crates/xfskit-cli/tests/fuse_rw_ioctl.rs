//! The ioctls a read-write `xfskit mount` answers, against kernel XFS:
//! chattr/lsattr (FS_IOC_GETFLAGS/SETFLAGS), xfs_io's chproj/lsproj,
//! extsize and lsattr (FS_IOC_FSGETXATTR/FSSETXATTR), the label
//! (FS_IOC_GETFSLABEL/SETFSLABEL). The same script runs on a kernel loop
//! mount of a copy of the image and through the FUSE mount; outputs and
//! errnos must be equal, what the mount set must be on the image (a kernel
//! mount and `xfs_admin` see it), and `xfs_repair -n` must be clean.
//! Needs root, /dev/fuse and xfsprogs.

mod common;

use common::rwmount::{as_user, c, err_of, errno, skip_rw as skip, RwMount};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;
const FS_NOCOW_FL: u32 = 0x0080_0000;
const FS_IMMUTABLE_FL: u32 = 0x10;

fn run(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?}");
}

/// Runs `args` in `root`; exit success and stdout and stderr, with the
/// root's path taken out of them.
fn out(root: &Path, args: &[&str]) -> String {
    let o = Command::new(args[0])
        .args(&args[1..])
        .current_dir(root)
        .output()
        .unwrap();
    let text = format!(
        "{} {}{}",
        o.status.success(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    text.replace(root.to_str().unwrap(), "ROOT")
}

fn ioctl_u32(p: &Path, req: libc::c_ulong, v: &mut u32) -> i32 {
    let f = match fs::File::open(p) {
        Ok(f) => f,
        Err(e) => return e.raw_os_error().unwrap_or(-1),
    };
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor and a 4-byte argument, as the flags
    // ioctls take it.
    errno(unsafe { libc::ioctl(f.as_raw_fd(), req, v as *mut u32) } as i64)
}

/// Sets extent size hint `bytes` as xfs_io's extsize does: the flag for
/// the inode's type and the size; the errno and the fsxattr afterwards.
fn set_extsize(p: &Path, bytes: u32) -> String {
    let (e, mut v) = fsx(p, None);
    if e != 0 {
        return format!("get {e}");
    }
    v[0] |= if p.is_dir() { 0x1000 } else { 0x800 };
    v[1] = bytes;
    let (e, _) = fsx(p, Some(v));
    let (_, after) = fsx(p, None);
    format!("{e} {after:?}")
}

/// `struct fsxattr` as five words and padding.
fn fsx(p: &Path, set: Option<[u32; 5]>) -> (i32, [u32; 5]) {
    let f = fs::File::open(p).unwrap();
    use std::os::fd::AsRawFd;
    let mut buf = [0u32; 7];
    let req = match set {
        Some(v) => {
            buf[..5].copy_from_slice(&v);
            FS_IOC_FSSETXATTR
        }
        None => FS_IOC_FSGETXATTR,
    };
    // SAFETY: an open descriptor and a 28-byte buffer (sizeof fsxattr).
    let e = errno(unsafe { libc::ioctl(f.as_raw_fd(), req, buf.as_mut_ptr()) } as i64);
    (e, buf[..5].try_into().unwrap())
}

fn open_write(p: &Path, append: bool) -> i32 {
    let mut o = OpenOptions::new();
    o.write(true).append(append);
    match o.open(p) {
        Err(e) => e.raw_os_error().unwrap_or(-1),
        Ok(mut f) => err_of(f.write_all(b"x").and_then(|()| f.sync_all())),
    }
}

fn truncate(p: &Path) -> i32 {
    // SAFETY: a valid path.
    errno(unsafe { libc::truncate(c(p).as_ptr(), 1) } as i64)
}

fn setxattr(p: &Path) -> i32 {
    let (n, v) = (c(Path::new("user.k")), b"v");
    // SAFETY: valid strings and buffer.
    errno(unsafe { libc::setxattr(c(p).as_ptr(), n.as_ptr(), v.as_ptr().cast(), 1, 0) } as i64)
}

/// The fixture: made through the mount (or the kernel), unflagged.
fn make_fixture(root: &Path) {
    let d = root.join("fx");
    fs::create_dir(&d).unwrap();
    for f in ["imm", "app", "plain", "user", "data", "spare"] {
        fs::write(d.join(f), b"0123456789").unwrap();
    }
    for dir in ["dimm", "dapp", "dproj"] {
        fs::create_dir(d.join(dir)).unwrap();
        fs::write(d.join(dir).join("x"), b"x").unwrap();
    }
    fs::File::create(d.join("empty")).unwrap();
    std::os::unix::fs::chown(d.join("user"), Some(1000), Some(1000)).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
}

/// The script: what each step printed or its errno, in order.
fn script(root: &Path) -> Vec<(String, String)> {
    let d = root.join("fx");
    let mut log: Vec<(String, String)> = Vec::new();
    let mut rec = |what: &str, v: String| log.push((what.to_string(), v));
    let s = |p: &str| d.join(p).to_str().unwrap().to_string();
    // chattr and lsattr.
    for (flag, p) in [
        ("+i", "imm"),
        ("+a", "app"),
        ("+i", "dimm"),
        ("+a", "dapp"),
        ("+dA", "plain"),
        ("+S", "spare"),
    ] {
        rec(
            &format!("chattr {flag} {p}"),
            out(root, &["chattr", flag, &s(p)]),
        );
    }
    rec(
        "lsattr",
        out(
            root,
            &[
                "lsattr",
                "-d",
                &s("imm"),
                &s("app"),
                &s("plain"),
                &s("spare"),
                &s("dimm"),
                &s("dapp"),
            ],
        ),
    );
    rec("chattr -S spare", out(root, &["chattr", "-S", &s("spare")]));
    rec("lsattr spare", out(root, &["lsattr", &s("spare")]));
    // What XFS does not keep, and who may change flags.
    let mut f = 0u32;
    rec(
        "getflags plain",
        format!(
            "{} {f:#x}",
            ioctl_u32(&d.join("plain"), FS_IOC_GETFLAGS, &mut f)
        ),
    );
    let mut nocow = f | FS_NOCOW_FL;
    rec(
        "setflags nocow",
        ioctl_u32(&d.join("plain"), FS_IOC_SETFLAGS, &mut nocow).to_string(),
    );
    rec(
        "user chattr +i own file",
        format!("{:?}", as_user(1000, &["chattr", "+i", &s("user")]).0),
    );
    rec(
        "user chattr +d own file",
        format!("{:?}", as_user(1000, &["chattr", "+d", &s("user")]).0),
    );
    rec(
        "user chattr +d root's file",
        format!("{:?}", as_user(1000, &["chattr", "+d", &s("data")]).0),
    );
    rec("lsattr user", out(root, &["lsattr", &s("user")]));
    // What the flags forbid.
    for p in ["imm", "app"] {
        let fp = d.join(p);
        rec(&format!("{p}: append"), open_write(&fp, true).to_string());
        rec(&format!("{p}: write"), open_write(&fp, false).to_string());
        rec(&format!("{p}: truncate"), truncate(&fp).to_string());
        rec(&format!("{p}: setxattr"), setxattr(&fp).to_string());
        rec(
            &format!("{p}: chmod"),
            err_of(fs::set_permissions(&fp, fs::Permissions::from_mode(0o600))).to_string(),
        );
        rec(
            &format!("{p}: link"),
            err_of(fs::hard_link(&fp, d.join(format!("{p}-link")))).to_string(),
        );
        rec(
            &format!("{p}: rename"),
            err_of(fs::rename(&fp, d.join(format!("{p}-moved")))).to_string(),
        );
        rec(
            &format!("{p}: unlink"),
            err_of(fs::remove_file(&fp)).to_string(),
        );
        rec(
            &format!("{p}: contents"),
            String::from_utf8_lossy(&fs::read(&fp).unwrap_or_default()).into_owned(),
        );
    }
    for p in ["dimm", "dapp"] {
        let dp = d.join(p);
        rec(
            &format!("{p}: create"),
            err_of(fs::write(dp.join("new"), b"n")).to_string(),
        );
        rec(
            &format!("{p}: unlink"),
            err_of(fs::remove_file(dp.join("x"))).to_string(),
        );
    }
    // Project ids and extent size hints (xfs_io, FS_IOC_FS[GS]ETXATTR).
    let xio = |cmd: &str, p: &str| out(root, &["xfs_io", "-c", cmd, &s(p)]);
    rec("chproj 42 empty", xio("chproj 42", "empty"));
    rec("lsproj empty", xio("lsproj", "empty"));
    // xfs_io's extsize refuses any filesystem that statfs does not call
    // XFS (a FUSE mount says FUSE): the hint goes through the ioctl itself.
    rec("extsize 64k empty", set_extsize(&d.join("empty"), 65536));
    rec("extsize 1000 spare", set_extsize(&d.join("spare"), 1000));
    rec("extsize 64k data", set_extsize(&d.join("data"), 65536));
    rec("chattr +P dproj", xio("chattr +P", "dproj"));
    rec("chproj 7 dproj", xio("chproj 7", "dproj"));
    rec("extsize 1m dproj", set_extsize(&d.join("dproj"), 1 << 20));
    rec("extsize 2^31 dproj", set_extsize(&d.join("dproj"), 1 << 31));
    fs::write(d.join("dproj/inherits"), b"i").unwrap();
    rec("lsproj inherits", xio("lsproj", "dproj/inherits"));
    let (e, mut v) = fsx(&d.join("dproj/inherits"), None);
    // Kernel XFS gives a new file an attribute fork up front when a
    // security module may add xattrs; xfskit does when one is set.
    v[0] &= !0x8000_0000;
    rec("fsgetxattr inherits", format!("{e} {v:?}"));
    rec("xfs_io lsattr empty", xio("lsattr", "empty"));
    rec("xfs_io lsattr dproj", xio("lsattr", "dproj"));
    let (e, v) = fsx(&d.join("empty"), None);
    rec("fsgetxattr empty", format!("{e} {v:?}"));
    let (e, _) = fsx(&d.join("dproj"), Some([0x800, 65536, 0, 0, 0]));
    rec("fssetxattr EXTSIZE on a directory", e.to_string());
    let (e, _) = fsx(&d.join("empty"), Some([0, 0, 0, 70000, 0]));
    rec("fssetxattr projid 70000", e.to_string());
    let (e, v) = fsx(&d.join("empty"), None);
    rec("fsgetxattr empty after", format!("{e} {v:?}"));
    // The label, on the filesystem's root.
    let xr = |cmd: &str| out(root, &["xfs_io", "-c", cmd, root.to_str().unwrap()]);
    rec("label", xr("label"));
    rec("label -s", xr("label -s fromtest"));
    rec("label -s too long", xr("label -s 0123456789abc"));
    rec("label after", xr("label"));
    log
}

/// What the image must show afterwards, read by a kernel mount.
fn persisted(root: &Path) -> Vec<(String, String)> {
    let d = root.join("fx");
    let s = |p: &str| d.join(p).to_str().unwrap().to_string();
    let mut v = vec![
        (
            "fsx empty".to_string(),
            format!("{:?}", fsx(&d.join("empty"), None)),
        ),
        (
            "fsx dproj".to_string(),
            format!("{:?}", fsx(&d.join("dproj"), None)),
        ),
        (
            "lsattr".to_string(),
            out(
                root,
                &[
                    "lsattr",
                    "-d",
                    &s("imm"),
                    &s("app"),
                    &s("plain"),
                    &s("spare"),
                    &s("dimm"),
                    &s("dapp"),
                    &s("user"),
                ],
            ),
        ),
    ];
    for (what, cmd, p) in [
        ("lsproj", "lsproj", "empty"),
        ("lsattr", "lsattr", "dproj"),
        ("lsproj", "lsproj", "dproj/inherits"),
    ] {
        v.push((
            format!("{what} {p}"),
            out(root, &["xfs_io", "-c", cmd, &s(p)]),
        ));
    }
    v
}

/// Clears the flags that would stop the final tree comparison's walk and
/// a later removal.
fn unflag(root: &Path) {
    let d = root.join("fx");
    for p in ["imm", "app", "dimm", "dapp"] {
        run(&["chattr", "-i", "-a", d.join(p).to_str().unwrap()]);
    }
    let mut f = 0u32;
    assert_eq!(ioctl_u32(&d.join("imm"), FS_IOC_GETFLAGS, &mut f), 0);
    assert_eq!(f & FS_IMMUTABLE_FL, 0);
}

fn kernel_mount(image: &Path, dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    run(&[
        "mount",
        "-o",
        "loop",
        image.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
}

#[test]
fn file_attributes_and_label_match_kernel_xfs() {
    if skip("file_attributes_and_label_match_kernel_xfs") {
        return;
    }
    let mut m = RwMount::new("ioctl", 320, &["-m", "reflink=1"]);
    make_fixture(&m.mnt);
    m.unmount();
    let copy = m.dir.join("kernel.img");
    fs::copy(&m.image, &copy).unwrap();
    let kdir = m.dir.join("kmnt");
    kernel_mount(&copy, &kdir);
    let kernel = script(&kdir);
    common::must_umount(&kdir);
    // The kernel's answers that the comparison relies on.
    let has = |what: &str, want: &str| {
        let got = kernel
            .iter()
            .find(|(w, _)| w == what)
            .map(|(_, v)| v.as_str());
        assert!(
            got.is_some_and(|g| g.contains(want)),
            "kernel: {what} = {got:?}, wanted {want:?}"
        );
    };
    has("imm: append", &libc::EPERM.to_string());
    has("app: append", "0");
    has("app: write", &libc::EPERM.to_string());
    has("setflags nocow", &libc::EOPNOTSUPP.to_string());
    has("user chattr +i own file", "false");
    has("user chattr +d own file", "true");
    has("lsproj inherits", "projid = 7");
    has("label after", "fromtest");

    m.mount(&[]);
    let fuse = script(&m.mnt);
    for (k, f) in kernel.iter().zip(&fuse) {
        assert_eq!(f, k, "through xfskit mount against the kernel");
    }
    assert_eq!(fuse.len(), kernel.len());
    let want = persisted(&m.mnt);
    m.unmount();

    // What the mount wrote, as the kernel and xfsprogs read it.
    kernel_mount(&m.image, &kdir);
    let seen = persisted(&kdir);
    common::must_umount(&kdir);
    assert_eq!(seen, want, "the kernel reads what the mount set");
    let lab = Command::new("xfs_admin")
        .args(["-l", m.image.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&lab.stdout).trim(),
        "label = \"fromtest\""
    );
    let info = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["info", "--json", m.image.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("\"label\": \"fromtest\""),
        "xfskit info: {}",
        String::from_utf8_lossy(&info.stdout)
    );
    m.mount(&[]);
    unflag(&m.mnt);
    m.finish();
}

//! `xfskit mount --read-only` against the kernel: build a tree with the
//! kernel's XFS on a loop device, then walk the image both through the
//! kernel (loop mount, read-only) and through xfskit's FUSE mount and
//! compare every file's metadata, contents, link target and xattrs.
//! Needs root, /dev/fuse and mkfs.xfs; prints SKIP otherwise.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../xfskit-fuse/tests/support/mounts.rs"]
mod mounts;

use mounts::{is_mounted, run, skip_reason, Scratch};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let r = unsafe {
        libc::lsetxattr(
            cstr(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) {
    // SAFETY: valid path string.
    let r = unsafe { libc::mknod(cstr(p).as_ptr(), mode, dev) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// getxattr with an explicit buffer size: Ok(len) or Err(errno).
fn get_xattr_raw(p: &Path, name: &str, size: usize) -> Result<(usize, Vec<u8>), i32> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes.
    let r = unsafe { libc::lgetxattr(cstr(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    buf.truncate(r as usize);
    Ok((r as usize, buf))
}

/// All xattrs (name -> value) of `p`, read with the size-probe protocol.
fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    // SAFETY: a null buffer with size 0 asks for the needed size.
    let need = unsafe { libc::llistxattr(cstr(p).as_ptr(), std::ptr::null_mut(), 0) };
    assert!(
        need >= 0,
        "listxattr {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    let mut buf = vec![0u8; need as usize];
    // SAFETY: the buffer holds `need` bytes.
    let got = unsafe { libc::llistxattr(cstr(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(got, need, "listxattr size changed on {}", p.display());
    let mut out = BTreeMap::new();
    for name in buf.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let (len, _) =
            get_xattr_raw(p, &name, 0).unwrap_or_else(|e| panic!("probe {name}: errno {e}"));
        let (_, v) =
            get_xattr_raw(p, &name, len).unwrap_or_else(|e| panic!("get {name}: errno {e}"));
        out.insert(name, v);
    }
    out
}

fn populate(root: &Path) {
    fs::write(root.join("hello"), b"hello world\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(root.join("big"), &big).unwrap();
    // Sparse: data at 0, a hole, data at 10 MiB, size past the last block.
    {
        use std::os::unix::fs::FileExt;
        let f = fs::File::create(root.join("sparse")).unwrap();
        f.write_at(b"start", 0).unwrap();
        f.write_at(b"middle", 10 << 20).unwrap();
        f.set_len(20 << 20).unwrap();
    }
    fs::write(root.join("empty"), b"").unwrap();
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::write(root.join("a/b/c/deep"), b"deep file").unwrap();
    // A directory large enough for the leaf/node forms and several readdir calls.
    fs::create_dir(root.join("many")).unwrap();
    for i in 0..3000 {
        fs::write(
            root.join(format!("many/file-with-a-longish-name-{i:05}")),
            i.to_string(),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("hello", root.join("link-short")).unwrap();
    std::os::unix::fs::symlink("x".repeat(600), root.join("link-long")).unwrap();
    std::os::unix::fs::symlink("a/b/c", root.join("link-dir")).unwrap();
    fs::hard_link(root.join("hello"), root.join("hello-hardlink")).unwrap();
    set_xattr(&root.join("hello"), "user.small", b"hello world");
    set_xattr(&root.join("hello"), "user.remote", &vec![0xabu8; 9000]);
    set_xattr(&root.join("hello"), "trusted.secret", b"t");
    set_xattr(&root.join("a"), "user.on-dir", b"d");
    for i in 0..60 {
        set_xattr(
            &root.join("big"),
            &format!("user.attr-number-{i}"),
            format!("value {i}").as_bytes(),
        );
    }
    mknod(
        &root.join("chardev"),
        libc::S_IFCHR | 0o640,
        libc::makedev(1, 3),
    );
    mknod(
        &root.join("blockdev"),
        libc::S_IFBLK | 0o600,
        libc::makedev(259, 70000),
    );
    mknod(&root.join("fifo"), libc::S_IFIFO | 0o644, 0);
    // POSIX ACLs: XFS stores them as trusted.SGI_ACL_*; both mounts must
    // show system.posix_acl_* with the same values (compared by `compare`).
    fs::write(root.join("acl-file"), b"acl\n").unwrap();
    fs::set_permissions(root.join("acl-file"), fs::Permissions::from_mode(0o640)).unwrap();
    set_xattr(
        &root.join("acl-file"),
        "system.posix_acl_access",
        &linux_acl(&[
            (ACL_USER_OBJ, 6, None),
            (ACL_USER, 4, Some(ACL_READER)),
            (ACL_GROUP_OBJ, 4, None),
            (ACL_GROUP, 6, Some(55)),
            (ACL_MASK, 6, None),
            (ACL_OTHER, 0, None),
        ]),
    );
    fs::create_dir(root.join("acl-dir")).unwrap();
    set_xattr(
        &root.join("acl-dir"),
        "system.posix_acl_default",
        &linux_acl(&[
            (ACL_USER_OBJ, 7, None),
            (ACL_USER, 5, Some(8)),
            (ACL_GROUP_OBJ, 5, None),
            (ACL_MASK, 5, None),
            (ACL_OTHER, 0, None),
        ]),
    );
    // Inherits the default ACL as its access ACL.
    fs::write(root.join("acl-dir/inherited"), b"x").unwrap();
}

const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
/// A user that may read `acl-file` only through its ACL.
const ACL_READER: u32 = 4321;

/// A `system.posix_acl_*` value: version 2, then (tag, perm, id) entries.
fn linux_acl(entries: &[(u16, u16, Option<u32>)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.unwrap_or(u32::MAX).to_le_bytes());
    }
    v
}

/// Whether user and group `uid` can read `p` (through setpriv), or None
/// when setpriv is missing.
fn can_read_as(uid: u32, p: &Path) -> Option<bool> {
    let id = uid.to_string();
    let out = Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", "cat"])
        .arg(p)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    Some(out.success())
}

/// Compares the entry at `rel` under both roots, recursing into directories.
fn compare(k: &Path, f: &Path, rel: &Path, seen: &mut usize) {
    let (kp, fp) = (k.join(rel), f.join(rel));
    let km = fs::symlink_metadata(&kp).unwrap();
    let fm =
        fs::symlink_metadata(&fp).unwrap_or_else(|e| panic!("fuse lstat {}: {e}", fp.display()));
    let what = rel.display();
    // The roots are different inodes' mount points only in st_dev.
    assert_eq!(km.ino(), fm.ino(), "ino of {what}");
    assert_eq!(km.mode(), fm.mode(), "mode of {what}");
    assert_eq!(km.nlink(), fm.nlink(), "nlink of {what}");
    assert_eq!(
        (km.uid(), km.gid()),
        (fm.uid(), fm.gid()),
        "owner of {what}"
    );
    assert_eq!(km.size(), fm.size(), "size of {what}");
    assert_eq!(km.blocks(), fm.blocks(), "blocks of {what}");
    assert_eq!(km.blksize(), fm.blksize(), "blksize of {what}");
    assert_eq!(km.rdev(), fm.rdev(), "rdev of {what}");
    assert_eq!(
        (km.mtime(), km.mtime_nsec()),
        (fm.mtime(), fm.mtime_nsec()),
        "mtime of {what}"
    );
    assert_eq!(
        (km.ctime(), km.ctime_nsec()),
        (fm.ctime(), fm.ctime_nsec()),
        "ctime of {what}"
    );
    assert_eq!(
        (km.atime(), km.atime_nsec()),
        (fm.atime(), fm.atime_nsec()),
        "atime of {what}"
    );
    if !km.file_type().is_symlink() {
        assert_eq!(xattrs(&kp), xattrs(&fp), "xattrs of {what}");
    }
    *seen += 1;
    let t = km.file_type();
    if t.is_file() {
        assert!(
            fs::read(&kp).unwrap() == fs::read(&fp).unwrap(),
            "contents of {what}"
        );
    } else if t.is_symlink() {
        assert_eq!(
            fs::read_link(&kp).unwrap(),
            fs::read_link(&fp).unwrap(),
            "target of {what}"
        );
    } else if t.is_dir() {
        let names = |p: &Path| {
            let mut v: Vec<_> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        let (kn, fnames) = (names(&kp), names(&fp));
        assert_eq!(kn.len(), fnames.len(), "entry count of {what}");
        assert!(kn == fnames, "entries of {what}");
        for n in kn {
            compare(k, f, &rel.join(n), seen);
        }
    } else {
        assert!(t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket());
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

#[test]
fn fuse_mount_matches_kernel() {
    if let Some(why) = skip_reason() {
        xfskit_testkit::skip("fuse_mount_matches_kernel", &why);
        return;
    }
    let mut scratch = Scratch::new("fuse-test");
    let dir = scratch.dir.clone();
    let img = dir.join("img");
    let (kdir, fdir) = (dir.join("kernel"), dir.join("fuse"));
    fs::File::create(&img).unwrap().set_len(320 << 20).unwrap();
    run("mkfs.xfs", &["-q", "-f", img.to_str().unwrap()]);
    run(
        "mount",
        &["-o", "loop", img.to_str().unwrap(), kdir.to_str().unwrap()],
    );
    populate(&kdir);
    mounts::must_umount(&kdir);
    run(
        "mount",
        &[
            "-o",
            "loop,ro",
            img.to_str().unwrap(),
            kdir.to_str().unwrap(),
        ],
    );

    // Read-write is refused with exit code 2.
    let child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["mount", "--read-only"])
        .arg(&img)
        .arg(&fdir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    scratch.child = Some(child);
    let t0 = Instant::now();
    while !is_mounted(&fdir) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the FUSE mount did not appear"
        );
        if let Some(st) = scratch.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("xfskit mount exited early: {st}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        mounts
            .lines()
            .any(|l| l.starts_with("xfskit:") && l.contains(" fuse.xfskit ro,")),
        "mount type and options: {mounts}"
    );

    let mut seen = 0;
    compare(&kdir, &fdir, Path::new(""), &mut seen);
    assert!(seen > 3000, "walked only {seen} entries");

    // ACLs are listed under their Linux names and enforced like the kernel's.
    let acl = xattrs(&fdir.join("acl-file"));
    assert!(
        acl.contains_key("system.posix_acl_access") && acl.contains_key("trusted.SGI_ACL_FILE"),
        "acl-file xattrs: {:?}",
        acl.keys()
    );
    assert!(xattrs(&fdir.join("acl-dir")).contains_key("system.posix_acl_default"));
    match (
        can_read_as(ACL_READER, &kdir.join("acl-file")),
        can_read_as(ACL_READER, &fdir.join("acl-file")),
    ) {
        (Some(k), Some(f)) => {
            assert!(k, "the kernel refused the ACL reader");
            assert_eq!(k, f, "ACL reader allowed by the kernel, not by FUSE");
            // A user named in no ACL entry is refused by both.
            assert_eq!(
                can_read_as(ACL_READER + 1, &fdir.join("acl-file")),
                Some(false)
            );
        }
        _ => println!("setpriv is missing: ACL enforcement not checked"),
    }

    // `xfskit extract` restores ACLs as ACLs (on ext4 or XFS alike).
    let out = dir.join("extracted");
    let st = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["extract", "-q", "--path", "/acl-dir"])
        .arg(&img)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "xfskit extract of acl-dir: {st}");
    for (rel, name) in [
        ("", "system.posix_acl_default"),
        ("inherited", "system.posix_acl_access"),
    ] {
        let want = get_xattr_raw(&kdir.join("acl-dir").join(rel), name, 4096);
        let got = get_xattr_raw(&out.join(rel), name, 4096);
        assert!(want.is_ok(), "kernel has no {name} on acl-dir/{rel}");
        assert_eq!(got, want, "{name} of extracted acl-dir/{rel}");
    }

    // errnos
    assert_eq!(
        errno_of(fs::metadata(fdir.join("no-such-file"))),
        libc::ENOENT
    );
    assert_eq!(errno_of(fs::metadata(fdir.join("hello/x"))), libc::ENOTDIR);
    assert_eq!(
        get_xattr_raw(&fdir.join("hello"), "user.missing", 64).unwrap_err(),
        libc::ENODATA
    );
    assert_eq!(
        get_xattr_raw(&fdir.join("hello"), "user.small", 0)
            .unwrap()
            .0,
        11
    );
    assert_eq!(
        get_xattr_raw(&fdir.join("hello"), "user.small", 4).unwrap_err(),
        libc::ERANGE
    );
    assert_eq!(
        get_xattr_raw(&fdir.join("hello"), "user.remote", 100).unwrap_err(),
        libc::ERANGE
    );
    assert_eq!(
        errno_of(fs::OpenOptions::new().write(true).open(fdir.join("hello"))),
        libc::EROFS
    );
    assert_eq!(errno_of(fs::File::create(fdir.join("new"))), libc::EROFS);
    // Reads at odd offsets and sizes, past EOF, and in the sparse hole.
    {
        use std::os::unix::fs::FileExt;
        let f = fs::File::open(fdir.join("sparse")).unwrap();
        let mut b = vec![1u8; 6];
        f.read_exact_at(&mut b, 10 << 20).unwrap();
        assert_eq!(&b, b"middle");
        f.read_exact_at(&mut b, 5 << 20).unwrap();
        assert_eq!(b, vec![0u8; 6]);
        assert_eq!(f.read_at(&mut b, 30 << 20).unwrap(), 0);
    }
    let df = Command::new("df").arg(&fdir).output().unwrap();
    assert!(df.status.success(), "statfs on the mount failed");

    // SIGTERM unmounts and exits 0.
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let mut child = scratch.child.take().unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("xfskit mount did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(!is_mounted(&fdir), "still mounted after SIGTERM");
}

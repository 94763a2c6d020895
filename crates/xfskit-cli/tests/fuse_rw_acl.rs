//! POSIX ACLs through a read-write `xfskit mount`, against the kernel: the
//! same steps (default ACLs inherited by files and directories instead of
//! the umask, an access ACL set and kept in step with chmod, an ACL the
//! mode says all of not stored, reads allowed and refused by a named-user
//! entry) run on a kernel XFS mount and on the FUSE mount must leave the
//! same modes and ACLs and allow the same reads. Ends like every
//! read-write test: `xfs_repair -n` clean, the kernel shows the tree the
//! mount showed. Needs root, /dev/fuse and xfsprogs; prints SKIP otherwise.

mod common;

use common::hostwalk::read_xattrs;
use common::rwmount::{as_user, c, errno, skip_rw, RwMount};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const NONE: u32 = u32::MAX;

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn setxattr(p: &Path, name: &str, v: &[u8]) {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid strings and a live buffer.
    let r = unsafe { libc::setxattr(c(p).as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(errno(r as i64), 0, "setxattr {name} on {}", p.display());
}

fn create(p: &Path, mode: u32) {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(p)
        .unwrap();
}

/// A path's mode and xattrs.
type Seen = (u32, BTreeMap<Vec<u8>, Vec<u8>>);

/// The steps; returns what they leave: per path the mode and xattrs, and
/// whether user 1000 could read each probe.
fn steps(root: &Path) -> (BTreeMap<String, Seen>, Vec<bool>) {
    let p = |s: &str| root.join(s);
    let d = p("d");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let def = acl(&[
        (USER_OBJ, 7, NONE),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NONE),
        (MASK, 7, NONE),
        (OTHER, 1, NONE),
    ]);
    setxattr(&d, "system.posix_acl_default", &def);
    create(&p("d/f"), 0o666);
    fs::create_dir(p("d/sub")).unwrap();
    create(&p("d/sub/g"), 0o640);
    create(&p("plain"), 0o666);
    create(&p("a"), 0o640);
    fs::write(p("a"), b"secret").unwrap();
    setxattr(
        &p("a"),
        "system.posix_acl_access",
        &acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 4, 1000),
            (GROUP_OBJ, 4, NONE),
            (MASK, 4, NONE),
            (OTHER, 0, NONE),
        ]),
    );
    let a = p("a").to_str().unwrap().to_string();
    let mut reads = vec![as_user(1000, &["cat", &a]).0];
    fs::set_permissions(p("a"), fs::Permissions::from_mode(0o600)).unwrap();
    reads.push(as_user(1000, &["cat", &a]).0);
    reads.push(as_user(1001, &["cat", &a]).0);
    create(&p("b"), 0o600);
    setxattr(
        &p("b"),
        "system.posix_acl_access",
        &acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 5, NONE), (OTHER, 4, NONE)]),
    );
    let mut out = BTreeMap::new();
    for rel in ["d", "d/f", "d/sub", "d/sub/g", "plain", "a", "b"] {
        let mode = fs::metadata(p(rel)).unwrap().mode();
        out.insert(rel.to_string(), (mode, read_xattrs(&p(rel)).unwrap()));
    }
    (out, reads)
}

/// Runs `f` on a kernel XFS loop mount of a fresh 320 MiB image (the
/// kernel's answers to compare with) and returns what it returns.
fn on_kernel<T>(tag: &str, f: impl FnOnce(&Path) -> T + std::panic::UnwindSafe) -> T {
    let kdir = std::env::temp_dir().join(format!("xfskit-{tag}-kernel-{}", std::process::id()));
    let _ = fs::remove_dir_all(&kdir);
    fs::create_dir_all(kdir.join("mnt")).unwrap();
    let kimg = kdir.join("img");
    fs::File::create(&kimg).unwrap().set_len(320 << 20).unwrap();
    assert!(Command::new("mkfs.xfs")
        .args(["-q", "-f"])
        .arg(&kimg)
        .status()
        .unwrap()
        .success());
    let km = kdir.join("mnt");
    assert!(Command::new("mount")
        .arg("-o")
        .arg("loop")
        .arg(&kimg)
        .arg(&km)
        .status()
        .unwrap()
        .success());
    let out = std::panic::catch_unwind(|| f(&km));
    let unmounted = common::umount_retrying(&km);
    let _ = fs::remove_dir_all(&kdir);
    let out = out.unwrap();
    assert!(unmounted, "umount {} failed", km.display());
    out
}

#[test]
fn acls_work_as_on_the_kernel() {
    if skip_rw("acls_work_as_on_the_kernel") {
        return;
    }
    // SAFETY: umask has no preconditions; both runs use the same one.
    unsafe { libc::umask(0o022) };
    // The kernel's answers, on an image of its own.
    let kernel = on_kernel("acl", steps);
    let m = RwMount::new("acl", 320, &[]);
    let fuse = steps(&m.mnt);
    assert_eq!(fuse.1, kernel.1, "reads by user 1000 and 1001 (allowed?)");
    assert_eq!(
        kernel.1,
        vec![true, false, false],
        "the kernel's own answers"
    );
    for (path, k) in &kernel.0 {
        let f = &fuse.0[path];
        assert_eq!(format!("{:o}", f.0), format!("{:o}", k.0), "mode of {path}");
        assert_eq!(f.1, k.1, "xattrs of {path}");
    }
    m.finish();
}

/// Who sets an ACL in [`setxattr_as`]: fs user and group, supplementary
/// groups, and whether CAP_FSETID stays (it matters for root only: any
/// other user has no capabilities).
#[derive(Debug, Clone, Copy)]
struct Who {
    uid: u32,
    gid: u32,
    groups: &'static [u32],
    fsetid: bool,
}

/// Takes CAP_FSETID out of this process's effective capabilities.
/// Returns false when the kernel refuses.
///
/// # Safety
/// Only system calls: safe in the child of a fork.
unsafe fn drop_fsetid() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: the header and two data words capget and capset expect.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) != 0 {
            return false;
        }
        // CAP_FSETID is capability 4.
        d[0].effective &= !(1 << 4);
        libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) == 0
    }
}

/// Sets xattr `name` of `p` to `v` from a child process that is `who`;
/// returns the errno (0: set).
fn setxattr_as(p: &Path, name: &str, v: &[u8], who: Who) -> i32 {
    let path = c(p);
    let n = std::ffi::CString::new(name).unwrap();
    let groups: Vec<libc::gid_t> = who.groups.to_vec();
    // SAFETY: the child makes only system calls, then exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: system calls on buffers made before the fork.
        unsafe {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setresgid(who.gid, who.gid, who.gid) == 0
                && (who.fsetid || drop_fsetid())
                && libc::setresuid(who.uid, who.uid, who.uid) == 0;
            if !ok {
                libc::_exit(255);
            }
            let r = libc::setxattr(path.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0);
            libc::_exit(if r == 0 { 0 } else { *libc::__errno_location() });
        }
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    assert!(libc::WIFEXITED(st), "child setting {name} died: {st}");
    let code = libc::WEXITSTATUS(st);
    assert_ne!(code, 255, "could not become {who:?}");
    code
}

/// generic/375's rule, in several cases: an access ACL set by an owner
/// outside the file's group (without CAP_FSETID) clears set-group-id; a
/// supplementary group, the file's group, or CAP_FSETID keep it. Returns
/// each case's mode after its ACL.
fn set_gid_cases(root: &Path) -> Vec<(String, String)> {
    use std::os::unix::fs::chown;
    let equiv = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 7, NONE), (OTHER, 7, NONE)]);
    let named = acl(&[
        (USER_OBJ, 7, NONE),
        (USER, 5, 1002),
        (GROUP_OBJ, 5, NONE),
        (MASK, 7, NONE),
        (OTHER, 5, NONE),
    ]);
    let user = |gid, groups| Who {
        uid: 1000,
        gid,
        groups,
        fsetid: false,
    };
    let root_who = |fsetid| Who {
        uid: 0,
        gid: 0,
        groups: &[],
        fsetid,
    };
    let cases: [(&str, bool, Who, &[u8]); 8] = [
        ("owner-other-group", false, user(1001, &[]), &equiv),
        ("owner-other-group-named", false, user(1001, &[]), &named),
        ("owner-other-group-dir", true, user(1001, &[]), &equiv),
        (
            "owner-supplementary-group",
            false,
            user(1001, &[1000]),
            &equiv,
        ),
        ("owner-own-group", false, user(1000, &[]), &equiv),
        ("owner-own-group-named", false, user(1000, &[]), &named),
        ("root", false, root_who(true), &equiv),
        ("root-without-fsetid", false, root_who(false), &equiv),
    ];
    let mut out = Vec::new();
    for (name, dir, who, value) in cases {
        let p = root.join(name);
        if dir {
            fs::create_dir(&p).unwrap();
        } else {
            create(&p, 0o644);
        }
        chown(&p, Some(1000), Some(1000)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o2755)).unwrap();
        let e = setxattr_as(&p, "system.posix_acl_access", value, who);
        assert_eq!(e, 0, "{name}: setxattr as {who:?}");
        let mode = fs::metadata(&p).unwrap().mode() & 0o7777;
        out.push((name.to_string(), format!("{mode:04o}")));
    }
    out
}

#[test]
fn acl_set_clears_set_group_id_as_the_kernel_does() {
    if skip_rw("acl_set_clears_set_group_id_as_the_kernel_does") {
        return;
    }
    let kernel = on_kernel("acl-sgid", set_gid_cases);
    let want = |name: &str| kernel.iter().find(|(n, _)| n == name).unwrap().1.clone();
    // The kernel's own answers (generic/375 and the cases around it).
    assert_eq!(want("owner-other-group"), "0777");
    assert_eq!(want("owner-supplementary-group"), "2777");
    assert_eq!(want("root"), "2777");
    assert_eq!(want("root-without-fsetid"), "0777");
    let m = RwMount::new("acl-sgid", 320, &[]);
    let fuse = set_gid_cases(&m.mnt);
    assert_eq!(fuse, kernel, "modes after the ACL was set (FUSE, kernel)");
    m.finish();
}

fn fallocate(f: &fs::File, off: i64, len: i64) -> i32 {
    use std::os::fd::AsRawFd;
    // SAFETY: a live descriptor.
    errno(unsafe { libc::fallocate(f.as_raw_fd(), 0, off, len) } as i64)
}

/// Allocates blocks to a new file `p` until not one more block fits.
fn fill(p: &Path) {
    let f = fs::File::create(p).unwrap();
    let (mut off, mut len) = (0i64, 64i64 << 20);
    while len >= 4096 {
        match fallocate(&f, off, len) {
            0 => off += len,
            libc::ENOSPC => len /= 2,
            e => panic!("fallocate of {len} bytes at {off}: errno {e}"),
        }
    }
    assert_eq!(
        fallocate(&f, off, 4096),
        libc::ENOSPC,
        "room after the fill"
    );
}

#[test]
fn acl_refused_for_want_of_space_leaves_the_mode() {
    if skip_rw("acl_refused_for_want_of_space_leaves_the_mode") {
        return;
    }
    let mut m = RwMount::new("acl-enospc", 320, &[]);
    let f = m.p("f");
    create(&f, 0o700);
    // Read for 400 named users (FUSE passes ACLs of up to a page): far
    // more than the inode's attribute fork holds, so the ACL needs blocks
    // of its own. Its mode is 0740.
    let mut entries = vec![(USER_OBJ, 7, NONE)];
    entries.extend((2000..2400).map(|u| (USER, 4, u)));
    entries.extend([(GROUP_OBJ, 4, NONE), (MASK, 4, NONE), (OTHER, 0, NONE)]);
    let big = acl(&entries);
    // Kernel XFS keeps blocks in reserve that data may not have and
    // trusted attributes (ACLs among them) may: after the same fill it
    // sets this ACL. xfskit keeps no such reserve (the fill gets those
    // blocks too) and refuses; what is checked is generic/449's point,
    // that a refused ACL changes nothing.
    fill(&m.p("fill"));
    let before = fs::metadata(&f).unwrap();
    let name = "system.posix_acl_access";
    let root = Who {
        uid: 0,
        gid: 0,
        groups: &[],
        fsetid: true,
    };
    assert_eq!(setxattr_as(&f, name, &big, root), libc::ENOSPC);
    let seen = |p: &Path| {
        let s = fs::metadata(p).unwrap();
        (s.mode(), s.ctime(), s.ctime_nsec())
    };
    let want = (before.mode(), before.ctime(), before.ctime_nsec());
    assert_eq!(format!("{:o}", before.mode()), "100700");
    assert_eq!(seen(&f), want, "mode and ctime after the refused ACL");
    assert!(!read_xattrs(&f).unwrap().contains_key(name.as_bytes()));
    m.unmount();
    m.mount(&[]);
    assert_eq!(seen(&f), want, "mode and ctime after a remount");
    assert!(!read_xattrs(&f).unwrap().contains_key(name.as_bytes()));
    // With room again the same ACL is taken, and the mode follows it.
    fs::remove_file(m.p("fill")).unwrap();
    assert_eq!(setxattr_as(&f, name, &big, root), 0);
    assert_eq!(format!("{:o}", fs::metadata(&f).unwrap().mode()), "100740");
    m.finish();
}

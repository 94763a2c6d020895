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

#[test]
fn acls_work_as_on_the_kernel() {
    if skip_rw("acls_work_as_on_the_kernel") {
        return;
    }
    // SAFETY: umask has no preconditions; both runs use the same one.
    unsafe { libc::umask(0o022) };
    // The kernel's answers, on an image of its own.
    let kdir = std::env::temp_dir().join(format!("xfskit-acl-kernel-{}", std::process::id()));
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
    let kernel = std::panic::catch_unwind(|| steps(&km));
    let unmounted = common::umount_retrying(&km);
    let _ = fs::remove_dir_all(&kdir);
    let kernel = kernel.unwrap();
    assert!(unmounted, "umount {} failed", km.display());
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

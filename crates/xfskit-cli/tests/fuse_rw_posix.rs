//! The POSIX surface of a read-write `xfskit mount`: every namespace call
//! with the errnos kernel XFS gives, link counts, and what the kernel and
//! xfs_repair find afterwards. Each test makes a fresh image with
//! mkfs.xfs, works through the FUSE mount, then unmounts, runs
//! `xfs_repair -n` and compares a kernel loop mount with what the FUSE
//! mount showed. Needs root, /dev/fuse and xfsprogs; prints SKIP otherwise.

mod common;

use common::rwmount::{c, err_of, errno, skip_rw as skip, RwMount};
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn mkdir(p: &Path) -> i32 {
    // SAFETY: a valid path string.
    errno(unsafe { libc::mkdir(c(p).as_ptr(), 0o755) } as i64)
}

fn rename2(a: &Path, b: &Path, flags: u32) -> i32 {
    // SAFETY: valid path strings.
    errno(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            c(a).as_ptr(),
            libc::AT_FDCWD,
            c(b).as_ptr(),
            flags,
        )
    } as i64)
}

fn nlink(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().nlink()
}

#[test]
fn names_and_their_errnos() {
    if skip("names_and_their_errnos") {
        return;
    }
    let m = RwMount::new("names", 320, &[]);
    let p = |s: &str| m.p(s);
    fs::write(p("f"), b"file").unwrap();
    assert_eq!(mkdir(&p("d")), 0);
    // EEXIST
    assert_eq!(mkdir(&p("d")), libc::EEXIST);
    assert_eq!(mkdir(&p("f")), libc::EEXIST);
    assert_eq!(
        err_of(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p("f"))
        ),
        libc::EEXIST
    );
    assert_eq!(err_of(fs::hard_link(p("f"), p("d"))), libc::EEXIST);
    assert_eq!(err_of(symlink("x", p("f"))), libc::EEXIST);
    // ENOENT
    assert_eq!(err_of(fs::File::open(p("missing"))), libc::ENOENT);
    assert_eq!(err_of(fs::remove_file(p("missing"))), libc::ENOENT);
    assert_eq!(err_of(fs::remove_dir(p("missing"))), libc::ENOENT);
    assert_eq!(err_of(fs::rename(p("missing"), p("x"))), libc::ENOENT);
    assert_eq!(err_of(fs::write(p("nodir/x"), b"")), libc::ENOENT);
    // ENOTDIR
    assert_eq!(mkdir(&p("f/x")), libc::ENOTDIR);
    assert_eq!(err_of(fs::remove_dir(p("f"))), libc::ENOTDIR);
    assert_eq!(err_of(fs::rename(p("d"), p("f"))), libc::ENOTDIR);
    // EISDIR
    assert_eq!(err_of(fs::remove_file(p("d"))), libc::EISDIR);
    assert_eq!(
        err_of(fs::OpenOptions::new().write(true).open(p("d"))),
        libc::EISDIR
    );
    assert_eq!(err_of(fs::rename(p("f"), p("d"))), libc::EISDIR);
    // ENOTEMPTY
    fs::write(p("d/inside"), b"").unwrap();
    assert_eq!(err_of(fs::remove_dir(p("d"))), libc::ENOTEMPTY);
    assert_eq!(mkdir(&p("e")), 0);
    assert_eq!(err_of(fs::rename(p("e"), p("d"))), libc::ENOTEMPTY);
    // EINVAL: a directory into itself or below itself.
    assert_eq!(mkdir(&p("d/sub")), 0);
    assert_eq!(err_of(fs::rename(p("d"), p("d/sub/d"))), libc::EINVAL);
    assert_eq!(err_of(fs::rename(p("d"), p("d/x"))), libc::EINVAL);
    // ENAMETOOLONG: names over 255 bytes, symlink targets of 1024 or more.
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    fs::write(p(&n255), b"255").unwrap();
    assert_eq!(err_of(fs::write(p(&n256), b"")), libc::ENAMETOOLONG);
    assert_eq!(mkdir(&p(&n256)), libc::ENAMETOOLONG);
    assert_eq!(err_of(fs::metadata(p(&n256))), libc::ENAMETOOLONG);
    assert_eq!(err_of(fs::rename(p("f"), p(&n256))), libc::ENAMETOOLONG);
    assert_eq!(err_of(fs::hard_link(p("f"), p(&n256))), libc::ENAMETOOLONG);
    symlink("t".repeat(1023), p("long-link")).unwrap();
    assert_eq!(
        fs::read_link(p("long-link")).unwrap().as_os_str().len(),
        1023
    );
    assert_eq!(
        err_of(symlink("t".repeat(1024), p("too-long"))),
        libc::ENAMETOOLONG
    );
    // ELOOP: O_NOFOLLOW on a symlink, and a loop of links.
    symlink("f", p("to-f")).unwrap();
    assert_eq!(
        err_of(
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(p("to-f"))
        ),
        libc::ELOOP
    );
    symlink("loop-b", p("loop-a")).unwrap();
    symlink("loop-a", p("loop-b")).unwrap();
    assert_eq!(err_of(fs::File::open(p("loop-a"))), libc::ELOOP);
    assert_eq!(fs::read(p("to-f")).unwrap(), b"file");
    // Renames: over a file, onto another link of itself, NOREPLACE, EXCHANGE.
    fs::write(p("g"), b"g").unwrap();
    fs::hard_link(p("g"), p("g2")).unwrap();
    fs::write(p("h"), b"h").unwrap();
    fs::rename(p("h"), p("g")).unwrap();
    assert_eq!(fs::read(p("g")).unwrap(), b"h");
    assert_eq!(nlink(&p("g2")), 1);
    fs::hard_link(p("g"), p("g3")).unwrap();
    fs::rename(p("g"), p("g3")).unwrap();
    assert!(
        p("g").exists() && p("g3").exists(),
        "rename onto a link of itself does nothing"
    );
    assert_eq!(
        rename2(&p("g"), &p("g2"), libc::RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(rename2(&p("g"), &p("g4"), libc::RENAME_NOREPLACE), 0);
    // EXCHANGE swaps two names: files, and a file with a directory
    // across parents (link counts and '..' follow the directory).
    assert_eq!(rename2(&p("g4"), &p("g2"), libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(p("g4")).unwrap(), b"g");
    assert_eq!(fs::read(p("g2")).unwrap(), b"h");
    assert_eq!(
        rename2(&p("g4"), &p("nothere"), libc::RENAME_EXCHANGE),
        libc::ENOENT
    );
    fs::create_dir(p("xa")).unwrap();
    fs::create_dir(p("xb")).unwrap();
    fs::create_dir(p("xa/dir")).unwrap();
    fs::write(p("xb/file"), b"xf").unwrap();
    assert_eq!(
        rename2(&p("xa/dir"), &p("xb/file"), libc::RENAME_EXCHANGE),
        0
    );
    assert!(p("xb/file").is_dir() && p("xa/dir").is_file());
    assert_eq!((nlink(&p("xa")), nlink(&p("xb"))), (2, 3));
    assert_eq!(
        fs::canonicalize(p("xb/file/..")).unwrap(),
        fs::canonicalize(p("xb")).unwrap()
    );
    assert_eq!(
        rename2(&p("xb"), &p("xb/file"), libc::RENAME_EXCHANGE),
        libc::EINVAL
    );
    // Directory link counts follow mkdir, rmdir and moves between parents.
    assert_eq!(nlink(&p("d")), 3);
    assert_eq!(nlink(&p("e")), 2);
    fs::rename(p("d/sub"), p("e/sub")).unwrap();
    assert_eq!((nlink(&p("d")), nlink(&p("e"))), (2, 3));
    assert_eq!(
        fs::canonicalize(p("e/sub/..")).unwrap(),
        fs::canonicalize(p("e")).unwrap()
    );
    fs::rename(p("e"), p("d/e")).unwrap();
    assert_eq!(nlink(&p("d")), 3);
    fs::create_dir(p("empty")).unwrap();
    fs::rename(p("empty"), p("d/e/sub")).unwrap();
    assert_eq!(nlink(&p("d/e")), 3);
    // Hard links count, and survive the first name's removal.
    fs::hard_link(p("f"), p("d/f-link")).unwrap();
    assert_eq!(nlink(&p("f")), 2);
    fs::remove_file(p("f")).unwrap();
    assert_eq!(fs::read(p("d/f-link")).unwrap(), b"file");
    assert_eq!(nlink(&p("d/f-link")), 1);
    // Special files.
    // SAFETY: valid path strings.
    unsafe {
        assert_eq!(libc::mkfifo(c(&p("fifo")).as_ptr(), 0o640), 0);
        assert_eq!(
            libc::mknod(
                c(&p("chr")).as_ptr(),
                libc::S_IFCHR | 0o600,
                libc::makedev(1, 7)
            ),
            0
        );
        assert_eq!(
            libc::mknod(
                c(&p("blk")).as_ptr(),
                libc::S_IFBLK | 0o600,
                libc::makedev(259, 70000)
            ),
            0
        );
    }
    let sock = std::os::unix::net::UnixListener::bind(p("sock")).unwrap();
    drop(sock);
    let md = fs::symlink_metadata(p("blk")).unwrap();
    assert_eq!(md.rdev(), libc::makedev(259, 70000));
    assert!(fs::symlink_metadata(p("sock"))
        .unwrap()
        .file_type()
        .is_socket_like());
    // A directory big enough for the leaf and node forms, then emptied.
    fs::create_dir(p("many")).unwrap();
    for i in 0..1500 {
        fs::write(
            p(&format!("many/entry-with-a-long-name-{i:05}")),
            i.to_string(),
        )
        .unwrap();
    }
    for i in (0..1500).step_by(2) {
        fs::remove_file(p(&format!("many/entry-with-a-long-name-{i:05}"))).unwrap();
    }
    assert_eq!(fs::read_dir(p("many")).unwrap().count(), 750);
    m.finish();
}

trait SocketLike {
    fn is_socket_like(&self) -> bool;
}

impl SocketLike for fs::FileType {
    fn is_socket_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_socket(self)
    }
}

#[test]
fn permissions_as_the_kernel_checks_them() {
    if skip("permissions_as_the_kernel_checks_them") {
        return;
    }
    use common::rwmount::as_user;
    let m = RwMount::new("perm", 320, &[]);
    let p = |s: &str| m.p(s);
    let s = |s: &str| m.p(s).to_str().unwrap().to_string();
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    // A user cannot create in root's 0755 directory, nor read a 0600 file.
    let (ok, err) = as_user(1000, &["touch", &s("u")]);
    assert!(!ok && err.contains("Permission denied"), "{err}");
    fs::write(p("secret"), b"s").unwrap();
    fs::set_permissions(p("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, err) = as_user(1000, &["cat", &s("secret")]);
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // Nor change its mode or owner.
    let (ok, err) = as_user(1000, &["chmod", "0777", &s("secret")]);
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    let (ok, err) = as_user(1000, &["chown", "1000", &s("secret")]);
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    // The sticky bit: only the owner (or root) removes or renames.
    fs::create_dir(p("tmp")).unwrap();
    fs::set_permissions(p("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(as_user(1000, &["touch", &s("tmp/mine")]).0);
    assert_eq!(fs::metadata(p("tmp/mine")).unwrap().uid(), 1000);
    assert_eq!(fs::metadata(p("tmp/mine")).unwrap().gid(), 1000);
    let (ok, err) = as_user(1001, &["rm", "-f", &s("tmp/mine")]);
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    let (ok, err) = as_user(1001, &["mv", &s("tmp/mine"), &s("tmp/theirs")]);
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    assert!(as_user(1000, &["mv", &s("tmp/mine"), &s("tmp/renamed")]).0);
    // A set-group-id directory gives its group, and the bit to subdirectories.
    fs::create_dir(p("sgid")).unwrap();
    std::os::unix::fs::chown(p("sgid"), Some(0), Some(50)).unwrap();
    fs::set_permissions(p("sgid"), fs::Permissions::from_mode(0o2777)).unwrap();
    fs::write(p("sgid/file"), b"").unwrap();
    fs::create_dir(p("sgid/sub")).unwrap();
    assert!(as_user(1000, &["mkdir", &s("sgid/user-sub")]).0);
    for (rel, dir) in [
        ("sgid/file", false),
        ("sgid/sub", true),
        ("sgid/user-sub", true),
    ] {
        let md = fs::metadata(p(rel)).unwrap();
        assert_eq!(md.gid(), 50, "group of {rel}");
        assert_eq!(md.mode() & 0o2000 != 0, dir, "set-group-id bit of {rel}");
    }
    // Writing by a non-root owner clears set-user-id and set-group-id.
    fs::write(p("tmp/prog"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(p("tmp/prog"), Some(1000), Some(1000)).unwrap();
    fs::set_permissions(p("tmp/prog"), fs::Permissions::from_mode(0o6775)).unwrap();
    assert!(as_user(1000, &["sh", "-c", &format!("echo x >> {}", s("tmp/prog"))]).0);
    assert_eq!(fs::metadata(p("tmp/prog")).unwrap().mode() & 0o7777, 0o775);
    // So does chown, even by root.
    fs::set_permissions(p("tmp/prog"), fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(p("tmp/prog"), Some(1001), None).unwrap();
    let md = fs::metadata(p("tmp/prog")).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (1001, 0o755));
    m.finish();
}

#[test]
fn open_files_outlive_their_names() {
    if skip("open_files_outlive_their_names") {
        return;
    }
    use std::os::unix::fs::FileExt;
    let m = RwMount::new("orphans", 320, &[]);
    let p = |s: &str| m.p(s);
    // Unlinked while open: reads, writes, fstat and ftruncate still work.
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(p("a"))
        .unwrap();
    f.write_all_at(&vec![5u8; 300_000], 0).unwrap();
    fs::remove_file(p("a")).unwrap();
    assert!(!p("a").exists());
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.write_all_at(b"after", 300_000).unwrap();
    let mut b = vec![0u8; 5];
    f.read_exact_at(&mut b, 300_000).unwrap();
    assert_eq!(&b, b"after");
    f.set_len(10).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 10);
    // Replaced by a rename while open: the old contents stay readable.
    fs::write(p("b"), b"old contents").unwrap();
    let g = fs::File::open(p("b")).unwrap();
    fs::write(p("c"), b"new").unwrap();
    fs::rename(p("c"), p("b")).unwrap();
    let mut s = String::new();
    std::io::Read::read_to_string(&mut &g, &mut s).unwrap();
    assert_eq!(s, "old contents");
    assert_eq!(fs::read(p("b")).unwrap(), b"new");
    // Many at once, closed in another order than they were unlinked.
    let mut held = Vec::new();
    for i in 0..20 {
        let path = p(&format!("many{i}"));
        fs::write(&path, vec![i as u8; 5000]).unwrap();
        held.push(fs::File::open(&path).unwrap());
        fs::remove_file(&path).unwrap();
    }
    for i in (0..20).step_by(2).chain((1..20).step_by(2)) {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut &held[i], &mut v).unwrap();
        assert_eq!(v, vec![i as u8; 5000]);
    }
    // A directory removed while open stays statable, with no links.
    fs::create_dir(p("gone")).unwrap();
    let d = fs::File::open(p("gone")).unwrap();
    fs::remove_dir(p("gone")).unwrap();
    let md = d.metadata().unwrap();
    assert!(md.is_dir() && md.nlink() == 0, "fstat of a removed dir");
    let used_open = inodes_used(&m.mnt);
    drop(d);
    for i in (0..20).rev().step_by(3) {
        held.remove(i);
    }
    drop(held);
    drop((f, g));
    // The kernel forgets them once closed: the inodes are freed then.
    let t0 = std::time::Instant::now();
    while inodes_used(&m.mnt) > used_open - 23 {
        assert!(
            t0.elapsed().as_secs() < 10,
            "unlinked inodes not freed after close: {} in use, {used_open} before",
            inodes_used(&m.mnt)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    m.finish();
}

/// What fstat of an open directory says after a rename replaced it and
/// after an rmdir removed it (generic/035): (is a directory, mode, links,
/// size) each time, the directories made in `root`, each the first in its
/// chunk or not as the directory rotor places it.
fn open_dirs_replaced(root: &Path) -> Vec<(bool, u32, u64, u64)> {
    use std::os::unix::fs::DirBuilderExt;
    let mut out = Vec::new();
    for i in 0..6 {
        let (a, b) = (root.join(format!("a{i}")), root.join(format!("b{i}")));
        fs::DirBuilder::new().mode(0o750).create(&a).unwrap();
        fs::DirBuilder::new().mode(0o700).create(&b).unwrap();
        let fd = fs::File::open(&b).unwrap();
        fs::rename(&a, &b).unwrap();
        let md = fd.metadata().unwrap();
        out.push((md.is_dir(), md.mode(), md.nlink(), md.len()));
        let fd2 = fs::File::open(&b).unwrap();
        fs::remove_dir(&b).unwrap();
        let md = fd2.metadata().unwrap();
        out.push((md.is_dir(), md.mode(), md.nlink(), md.len()));
        assert_eq!(err_of(fs::read_dir(&b)), libc::ENOENT);
    }
    out
}

/// generic/035: a directory replaced by a rename, or removed, while open
/// keeps its inode until the last close, with no links, as on the kernel
/// (which answers the same on a loop mount of its own image); freed then.
#[test]
fn open_directories_outlive_their_names() {
    if skip("open_directories_outlive_their_names") {
        return;
    }
    let kdir = std::env::temp_dir().join(format!("xfskit-opendir-kernel-{}", std::process::id()));
    let _ = fs::remove_dir_all(&kdir);
    fs::create_dir_all(kdir.join("mnt")).unwrap();
    let kimg = kdir.join("img");
    fs::File::create(&kimg).unwrap().set_len(320 << 20).unwrap();
    assert!(common::fixtures::test_mkfs(&[])
        .args(["-q", "-f"])
        .arg(&kimg)
        .status()
        .unwrap()
        .success());
    let km = kdir.join("mnt");
    let mounted = std::process::Command::new("mount")
        .args(["-o", "loop"])
        .arg(&kimg)
        .arg(&km)
        .status()
        .unwrap()
        .success();
    assert!(mounted, "kernel mount of {}", kimg.display());
    let kernel = std::panic::catch_unwind(|| open_dirs_replaced(&km));
    let unmounted = common::umount_retrying(&km);
    let _ = fs::remove_dir_all(&kdir);
    let kernel = kernel.unwrap();
    assert!(unmounted, "umount {} failed", km.display());
    assert!(kernel.iter().all(|k| k.0 && k.2 == 0), "kernel: {kernel:?}");
    let m = RwMount::new("opendir", 320, &[]);
    let used = inodes_used(&m.mnt);
    let fuse = open_dirs_replaced(&m.mnt);
    assert_eq!(fuse, kernel, "fstat of open replaced directories");
    // Closed, they are forgotten by the kernel and freed.
    let t0 = std::time::Instant::now();
    while inodes_used(&m.mnt) > used {
        assert!(
            t0.elapsed().as_secs() < 10,
            "removed directories not freed after close: {} in use, {used} before",
            inodes_used(&m.mnt)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    m.finish();
}

/// Inodes in use on the filesystem of `p` (f_files - f_ffree).
fn inodes_used(p: &Path) -> u64 {
    // SAFETY: a plain struct filled by statvfs.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a live struct.
    assert_eq!(unsafe { libc::statvfs(c(p).as_ptr(), &mut s) }, 0);
    s.f_files - s.f_ffree
}

/// Runs the set-id and file capability cases under `root` (a mount) and
/// returns each file's mode, and whether it still has a capability, after
/// its operation.
fn set_id_cases(root: &Path) -> Vec<(String, String, bool)> {
    use common::rwmount::as_user;
    use std::os::unix::fs::chown;
    let d = root.join("setid");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let s = |n: &str| d.join(n).to_str().unwrap().to_string();
    // (name, mode, with a capability, who acts, what it does); every
    // file belongs to 1000:1000.
    let cases: [(&str, u32, bool, u32, &str); 14] = [
        ("user-append", 0o6775, false, 1000, "append"),
        ("user-truncate", 0o6775, false, 1000, "truncate"),
        ("user-open-trunc", 0o4755, false, 1000, "otrunc"),
        ("user-append-sgid-no-gx", 0o2764, false, 1000, "append"),
        ("user-append-plain", 0o0775, false, 1000, "append"),
        ("root-append", 0o6775, false, 0, "append"),
        ("root-truncate", 0o6775, false, 0, "truncate"),
        ("root-chown", 0o6775, false, 0, "chown"),
        ("root-chown-sgid-no-gx", 0o6745, false, 0, "chown"),
        ("root-chgrp", 0o2775, false, 0, "chgrp"),
        ("cap-root-append", 0o0755, true, 0, "append"),
        ("cap-root-truncate", 0o0755, true, 0, "truncate"),
        ("cap-root-chown", 0o4755, true, 0, "chown"),
        ("cap-root-chmod", 0o0755, true, 0, "chmod"),
    ];
    let mut out = Vec::new();
    for (name, mode, cap, who, op) in cases {
        let p = d.join(name);
        fs::write(&p, b"0123456789").unwrap();
        chown(&p, Some(1000), Some(1000)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        if cap {
            let st = std::process::Command::new("setcap")
                .args(["cap_net_raw+ep", &s(name)])
                .status()
                .unwrap();
            assert!(st.success(), "setcap {name}");
            assert!(has_capability(&p), "no capability on {name} after setcap");
        }
        let sh = match op {
            "append" => format!("echo x >> {}", s(name)),
            "truncate" => format!("truncate -s 3 {}", s(name)),
            "otrunc" => format!(": > {}", s(name)),
            "chown" => format!("chown 1001 {}", s(name)),
            "chgrp" => format!("chgrp 1001 {}", s(name)),
            "chmod" => format!("chmod 0750 {}", s(name)),
            _ => unreachable!(),
        };
        if who == 0 {
            let st = std::process::Command::new("sh")
                .args(["-c", &sh])
                .status()
                .unwrap();
            assert!(st.success(), "{sh}");
        } else {
            let (ok, err) = as_user(who, &["sh", "-c", &sh]);
            assert!(ok, "{sh}: {err}");
        }
        out.push(set_id_state(&d, name));
    }
    out
}

fn has_capability(p: &Path) -> bool {
    let name = std::ffi::CString::new("security.capability").unwrap();
    // SAFETY: valid strings; a zero-sized query writes nothing.
    unsafe { libc::getxattr(c(p).as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

fn set_id_state(dir: &Path, name: &str) -> (String, String, bool) {
    let p = dir.join(name);
    let mode = fs::metadata(&p).unwrap().mode() & 0o7777;
    (name.to_string(), format!("{mode:04o}"), has_capability(&p))
}

#[test]
fn set_id_bits_cleared_as_the_kernel_clears_them() {
    if skip("set_id_bits_cleared_as_the_kernel_clears_them") {
        return;
    }
    // The kernel's own XFS first.
    let mut m = RwMount::new("setid", 320, &[]);
    m.unmount();
    let kdir = m.dir.join("kernel");
    fs::create_dir_all(&kdir).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "xfs", "-o", "loop"])
        .arg(&m.image)
        .arg(&kdir)
        .status()
        .unwrap();
    assert!(st.success(), "kernel mount");
    let kernel = set_id_cases(&kdir);
    fs::remove_dir_all(kdir.join("setid")).unwrap();
    common::must_umount(&kdir);
    // The expected answers do not depend on the kernel alone.
    let expect = |name: &str, mode: &str, cap: bool| {
        assert!(
            kernel.contains(&(name.into(), mode.into(), cap)),
            "{name}: {kernel:?}"
        )
    };
    expect("user-append", "0775", false);
    expect("root-append", "6775", false);
    expect("cap-root-chmod", "0750", true);
    for args in [&[][..], &["--writeback-cache"][..]] {
        m.mount(args);
        let fuse = set_id_cases(&m.mnt);
        assert_eq!(fuse, kernel, "mount {args:?} against the kernel");
        // After a remount the modes are what the image holds, not only
        // what the kernel's attribute cache showed.
        m.unmount();
        m.mount(&[]);
        for k in &kernel {
            let now = set_id_state(&m.p("setid"), &k.0);
            assert_eq!(&now, k, "after a remount from {args:?}");
        }
        fs::remove_dir_all(m.p("setid")).unwrap();
        m.unmount();
    }
    m.mount(&[]);
    m.finish();
}

/// renameat2's RENAME_WHITEOUT (what overlayfs asks of its upper
/// filesystem): the file moves and a whiteout, a character device 0:0
/// without permission bits, takes its old name; a directory too. Over an
/// existing target the target goes. On a parent-pointer filesystem
/// (XFSKIT_TEST_MKFS=6.18) the whiteout gets its parent pointer, which
/// xfs_repair 6.15 checks at the end.
#[test]
fn rename_whiteout_leaves_a_whiteout() {
    if skip("rename_whiteout_leaves_a_whiteout") {
        return;
    }
    let m = RwMount::new("whiteout", 320, &[]);
    let p = |s: &str| m.p(s);
    fs::write(p("f"), b"file").unwrap();
    fs::write(p("g"), b"target").unwrap();
    assert_eq!(mkdir(&p("d")), 0);
    assert_eq!(mkdir(&p("e")), 0);
    fs::write(p("d/inner"), b"in d").unwrap();
    let is_whiteout = |q: &Path| {
        use std::os::unix::fs::FileTypeExt;
        let md = fs::symlink_metadata(q).unwrap();
        md.file_type().is_char_device() && md.rdev() == 0 && md.mode() & 0o7777 == 0
    };
    assert_eq!(rename2(&p("f"), &p("e/f2"), libc::RENAME_WHITEOUT), 0);
    assert!(is_whiteout(&p("f")), "no whiteout at f");
    assert_eq!(fs::read(p("e/f2")).unwrap(), b"file");
    // Over an existing target, which goes.
    assert_eq!(rename2(&p("e/f2"), &p("g"), libc::RENAME_WHITEOUT), 0);
    assert!(is_whiteout(&p("e/f2")), "no whiteout at e/f2");
    assert_eq!(fs::read(p("g")).unwrap(), b"file");
    // A directory, to another directory.
    let e_links = nlink(&p("e"));
    assert_eq!(rename2(&p("d"), &p("e/d"), libc::RENAME_WHITEOUT), 0);
    assert!(is_whiteout(&p("d")), "no whiteout at d");
    assert_eq!(fs::read(p("e/d/inner")).unwrap(), b"in d");
    assert_eq!(nlink(&p("e")), e_links + 1);
    // With RENAME_EXCHANGE it is refused.
    assert_eq!(
        rename2(
            &p("g"),
            &p("e/d"),
            libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE
        ),
        libc::EINVAL
    );
    m.finish();
}

/// The per-mount options /proc/self/mountinfo shows for mount point `mnt`
/// (its sixth field: rw or ro, nosuid, nodev, noexec, noatime...).
fn mount_flags(mnt: &Path) -> Vec<String> {
    let want = fs::canonicalize(mnt).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4).map(Path::new) == Some(want.as_path()))
        .unwrap_or_else(|| panic!("{} is not in /proc/self/mountinfo", want.display()));
    let flags = line.split(' ').nth(5).unwrap();
    flags.split(',').map(str::to_string).collect()
}

/// As mount(8) takes them, the last of two conflicting options wins
/// (`-o suid,nosuid` is nosuid, `-o nosuid -o suid` suid), in one list or
/// across several `-o`, for each pair: suid, dev, exec, atime, rw.
#[test]
fn conflicting_mount_options_last_one_wins() {
    if skip("conflicting_mount_options_last_one_wins") {
        return;
    }
    let mut m = RwMount::new("options", 320, &[]);
    let cases: [(&[&str], &[&str], &[&str]); 7] = [
        (&["-o", "suid,nosuid"], &["nosuid"], &[]),
        (&["-o", "nosuid", "-o", "suid"], &[], &["nosuid"]),
        (&["-o", "dev,nodev,exec"], &["nodev"], &["noexec"]),
        (
            &["-o", "nodev,noexec", "-o", "dev,exec"],
            &[],
            &["nodev", "noexec"],
        ),
        (&["-o", "atime,noatime"], &["noatime"], &[]),
        (&["-o", "ro,rw"], &["rw"], &["ro"]),
        (&["-o", "rw", "-o", "nosuid,ro"], &["ro", "nosuid"], &["rw"]),
    ];
    for (args, set, unset) in cases {
        m.unmount();
        m.mount(args);
        let flags = mount_flags(&m.mnt);
        for f in set {
            assert!(
                flags.iter().any(|x| x == f),
                "{args:?}: no {f} in {flags:?}"
            );
        }
        for f in unset {
            assert!(!flags.iter().any(|x| x == f), "{args:?}: {f} in {flags:?}");
        }
        // The last of ro and rw decides whether the mount writes.
        let name = format!("written-{}", args.join(""));
        let wrote = err_of(fs::write(m.p(&name), b"x"));
        let ro = flags.iter().any(|x| x == "ro");
        assert_eq!(wrote, if ro { libc::EROFS } else { 0 }, "{args:?}: write");
    }
    m.unmount();
    m.mount(&[]);
    m.finish();
}

/// One writer at a time (generic/732 mounts one filesystem twice, which the
/// kernel serves from one superblock): while an image is mounted
/// read-write, a second read-write mount and an offline edit are refused
/// with a message that says why, and change nothing; reading it offline
/// still works; once the mount is gone the edit works.
#[test]
fn a_second_writer_of_a_mounted_image_is_refused() {
    if skip("a_second_writer_of_a_mounted_image_is_refused") {
        return;
    }
    let m = RwMount::new("twowriters", 300, &[]);
    fs::write(m.p("kept"), b"first writer\n").unwrap();
    let img = m.image.to_str().unwrap().to_string();
    let second = m.dir.join("second");
    fs::create_dir_all(&second).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        &["mount", &img, second.to_str().unwrap()][..],
        &["mkdir", &img, "/x"],
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "xfskit {args:?}: {err}");
        assert!(
            err.contains("open for writing by another process"),
            "xfskit {args:?}: {err}"
        );
    }
    let o = run(&["ls", &img, "/"]);
    assert!(o.status.success(), "ls while mounted: {o:?}");
    assert!(!m.p("x").exists(), "the refused mkdir made /x");
    // Once the mount is gone, its lock is too: the edit works, and the
    // image mounts again with the edit in it.
    let mut m = m;
    m.unmount();
    let o = run(&["mkdir", &img, "/x"]);
    assert!(o.status.success(), "mkdir after the unmount: {o:?}");
    m.mount(&[]);
    assert!(m.p("x").is_dir());
    m.finish();
}

/// One statx field set of `p`, asking the kernel for `mask` only (as
/// `stat -c %A` asks for the mode alone): what its attribute cache holds
/// for those fields unless they were invalidated.
fn statx_of(p: &Path, mask: u32) -> libc::statx {
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(libc::AT_FDCWD, c(p).as_ptr(), 0, mask, &mut st) };
    assert_eq!(errno(r.into()), 0, "statx {}", p.display());
    st
}

fn ns(t: libc::statx_timestamp) -> i128 {
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// As mount(8) mounts a kernel XFS for root, the mount is suid and dev
/// unless told otherwise: a device node opens (generic/184, 306, 434).
/// Attributes a request changes without answering with them are seen by
/// the next stat that asks only for them: set-id bits a direct write by
/// the owner drops (generic/355) and the ctime of a file attribute ioctl
/// (generic/277).
#[test]
fn root_mounts_devices_and_stat_sees_changes_at_once() {
    if skip("root_mounts_devices_and_stat_sees_changes_at_once") {
        return;
    }
    let m = RwMount::new("devattrs", 320, &[]);
    let flags = mount_flags(&m.mnt);
    for f in ["nosuid", "nodev"] {
        assert!(!flags.iter().any(|x| x == f), "{f} in {flags:?}");
    }
    let null = m.p("null");
    let r = unsafe {
        libc::mknod(
            c(&null).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        )
    };
    assert_eq!(errno(r.into()), 0, "mknod");
    assert_eq!(err_of(fs::write(&null, b"into the null device")), 0);

    // A direct write by an owner without CAP_FSETID drops set-user-id,
    // and set-group-id where the group may execute.
    use common::rwmount::as_user;
    let f = m.p("setid");
    fs::write(&f, vec![7u8; 8192]).unwrap();
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6754)).unwrap();
    assert_eq!(statx_of(&f, libc::STATX_MODE).stx_mode & 0o7777, 0o6754);
    let out = format!("of={}", f.display());
    let (ok, err) = as_user(
        1000,
        &[
            "dd",
            "if=/dev/zero",
            &out,
            "bs=4096",
            "count=1",
            "oflag=direct",
            "conv=notrunc",
            "status=none",
        ],
    );
    assert!(ok, "direct write as the owner: {err}");
    assert_eq!(
        statx_of(&f, libc::STATX_MODE).stx_mode & 0o7777,
        0o754,
        "mode after the direct write"
    );

    // fallocate by a caller without CAP_FSETID outside the file's group
    // drops both bits, even set-group-id without group execute
    // (generic/683-685); root's keeps them.
    let h = m.p("falloc");
    fs::write(&h, b"").unwrap();
    fs::set_permissions(&h, fs::Permissions::from_mode(0o6666)).unwrap();
    let (ok, err) = as_user(1000, &["fallocate", "-l", "8192", &h.display().to_string()]);
    assert!(ok, "fallocate as another user: {err}");
    assert_eq!(
        statx_of(&h, libc::STATX_MODE).stx_mode & 0o7777,
        0o666,
        "after fallocate"
    );
    fs::set_permissions(&h, fs::Permissions::from_mode(0o6666)).unwrap();
    let st = std::process::Command::new("fallocate")
        .args(["-l", "16384"])
        .arg(&h)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        statx_of(&h, libc::STATX_MODE).stx_mode & 0o7777,
        0o6666,
        "root's fallocate"
    );

    // FS_IOC_SETFLAGS stamps ctime; a stat asking for ctime alone sees it.
    let g = m.p("flags");
    fs::write(&g, b"x").unwrap();
    let before = ns(statx_of(&g, libc::STATX_CTIME).stx_ctime);
    let file = fs::File::open(&g).unwrap();
    let noatime: libc::c_long = 0x80; // FS_NOATIME_FL
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0x4008_6602, // FS_IOC_SETFLAGS
            &noatime,
        )
    };
    assert_eq!(errno(r.into()), 0, "FS_IOC_SETFLAGS");
    drop(file);
    let after = ns(statx_of(&g, libc::STATX_CTIME).stx_ctime);
    assert!(after > before, "ctime {before} -> {after} after chattr");
    m.finish();
}

/// The atime options as the kernel's (generic/003), kept by the server
/// (FUSE leaves access times to it): relatime by default (the first read
/// after a change stamps atime, the next does not), strictatime (every
/// read that opens the file again), noatime (none), nodiratime (listing a
/// directory leaves its atime); the words reach the kernel's FUSE, which
/// refuses them as mount data, no more.
#[test]
fn reads_stamp_access_times_as_the_mount_options_say() {
    if skip("reads_stamp_access_times_as_the_mount_options_say") {
        return;
    }
    let atime = |p: &Path| ns(statx_of(p, libc::STATX_ATIME).stx_atime);
    let mut m = RwMount::new("atime", 320, &[]);
    let f = m.p("file");
    fs::write(&f, b"read me").unwrap();
    let d = m.p("dir");
    fs::create_dir(&d).unwrap();
    let a0 = atime(&f);
    fs::read(&f).unwrap();
    let a1 = atime(&f);
    assert!(
        a1 > a0,
        "relatime: the first read after a change stamps ({a0} -> {a1})"
    );
    fs::read(&f).unwrap();
    assert_eq!(atime(&f), a1, "relatime: a second read does not");
    let d0 = atime(&d);
    fs::read_dir(&d).unwrap().for_each(drop);
    let d1 = atime(&d);
    assert!(d1 > d0, "relatime: listing a new directory stamps it");

    m.unmount();
    m.mount(&["-o", "strictatime"]);
    let s0 = atime(&f);
    fs::read(&f).unwrap();
    let s1 = atime(&f);
    fs::read(&f).unwrap();
    let s2 = atime(&f);
    assert!(
        s0 < s1 && s1 < s2,
        "strictatime: every read stamps ({s0} {s1} {s2})"
    );

    m.unmount();
    m.mount(&["-o", "noatime"]);
    let g = m.p("other");
    fs::write(&g, b"not stamped").unwrap();
    let n0 = atime(&g);
    fs::read(&g).unwrap();
    assert_eq!(atime(&g), n0, "noatime");

    m.unmount();
    m.mount(&["-o", "relatime,nodiratime,lazytime"]);
    let e = m.p("dir2");
    fs::create_dir(&e).unwrap();
    let e0 = atime(&e);
    fs::read_dir(&e).unwrap().for_each(drop);
    assert_eq!(atime(&e), e0, "nodiratime");
    let h = m.p("third");
    fs::write(&h, b"stamped").unwrap();
    let h0 = atime(&h);
    fs::read(&h).unwrap();
    assert!(atime(&h) > h0, "relatime files under nodiratime");
    m.finish();
}

/// Mounts `image` with the kernel's XFS through a loop device at `dir`
/// (created); returns `dir`.
fn kernel_mount(image: &Path, dir: &Path) -> std::path::PathBuf {
    fs::create_dir_all(dir).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "xfs", "-o", "loop"])
        .arg(image)
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success(), "kernel mount of {}", image.display());
    dir.to_path_buf()
}

/// XFS_IOC_GOINGDOWN (fstests' godown, `xfs_io -x -c shutdown`): what was
/// written before it survives (the mount makes every committed change
/// durable first), every request after it fails with EIO, nothing more
/// reaches the image, so its log is left to replay; the kernel's recovery
/// and xfskit's then give the same files, and xfs_repair -n is clean.
#[test]
fn shutdown_leaves_the_log_to_replay() {
    if skip("shutdown_leaves_the_log_to_replay") {
        return;
    }
    let mut m = RwMount::new("godown", 320, &[]);
    fs::write(m.p("synced"), b"synced data").unwrap();
    fs::File::open(m.p("synced")).unwrap().sync_all().unwrap();
    fs::write(m.p("unsynced"), b"written, not synced").unwrap();
    fs::create_dir(m.p("dir")).unwrap();
    let d = fs::File::open(&m.mnt).unwrap();
    let flags: u32 = 1; // LOGFLUSH, as godown -f
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&d),
            0x8004_587d, // XFS_IOC_GOINGDOWN
            &flags,
        )
    };
    assert_eq!(errno(r.into()), 0, "XFS_IOC_GOINGDOWN");
    drop(d);
    assert_eq!(
        err_of(fs::write(m.p("after"), b"x")),
        libc::EIO,
        "create after"
    );
    let listed = fs::read_dir(m.p("dir")).and_then(|r| r.collect::<Result<Vec<_>, _>>());
    assert_eq!(err_of(listed), libc::EIO, "readdir after");
    m.unmount();
    // The log is dirty: xfs_repair -n refuses to check it.
    let (rc, _) = common::repair_check(&m.image);
    assert_ne!(rc, 0, "xfs_repair -n of an image whose log needs replay");
    let copy = m.dir.join("copy.img");
    fs::copy(&m.image, &copy).unwrap();
    // The kernel replays the log.
    let kdir = kernel_mount(&copy, &m.dir.join("kernel"));
    let kernel: Vec<(String, Vec<u8>)> = ["synced", "unsynced"]
        .iter()
        .map(|n| (n.to_string(), fs::read(kdir.join(n)).unwrap()))
        .collect();
    assert!(kdir.join("dir").is_dir());
    common::must_umount(&kdir);
    assert_eq!(
        common::repair_check(&copy).0,
        0,
        "xfs_repair -n after the kernel"
    );
    // xfskit's own replay, at the next mount, gives the same.
    m.mount(&[]);
    for (n, data) in &kernel {
        assert_eq!(
            &fs::read(m.p(n)).unwrap(),
            data,
            "{n} after xfskit's replay"
        );
    }
    assert_eq!(kernel[0].1, b"synced data");
    assert_eq!(kernel[1].1, b"written, not synced");
    m.finish();
}

/// Inodes in use on the filesystem mounted at `dir`, as statfs counts
/// them (allocated less free).
fn inodes_in_use(dir: &std::path::Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "statvfs");
    (st.f_files - st.f_ffree) as u64
}

/// Open files unlinked before a shutdown are orphans on the AGI's
/// unlinked lists, chained through each inode's `di_next_unlinked`,
/// which recovery takes only from inode buffer items of the clusters
/// (not from inode items): after the kernel's replay and after xfskit's,
/// every orphan is freed, no inode is in use beyond those with names,
/// and xfs_repair -n is clean.
#[test]
fn shutdown_with_orphans_replays_their_unlinked_chains() {
    if skip("shutdown_with_orphans_replays_their_unlinked_chains") {
        return;
    }
    let mut m = RwMount::new("godown-orphans", 320, &[]);
    fs::write(m.p("named"), b"kept").unwrap();
    fs::create_dir(m.p("d")).unwrap();
    let named = inodes_in_use(&m.mnt);
    let mut open = Vec::new();
    for i in 0..300 {
        let p = m.p(&format!("d/o{i}"));
        open.push(fs::File::create(&p).unwrap());
        fs::remove_file(&p).unwrap();
    }
    assert_eq!(inodes_in_use(&m.mnt), named + 300, "orphans in use");
    let d = fs::File::open(&m.mnt).unwrap();
    let flags: u32 = 1; // LOGFLUSH
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&d),
            0x8004_587d, // XFS_IOC_GOINGDOWN
            &flags,
        )
    };
    assert_eq!(errno(r.into()), 0, "XFS_IOC_GOINGDOWN");
    drop(d);
    drop(open);
    m.unmount();
    let copy = m.dir.join("copy.img");
    fs::copy(&m.image, &copy).unwrap();
    let kdir = kernel_mount(&copy, &m.dir.join("kernel"));
    let kernel_used = inodes_in_use(&kdir);
    common::must_umount(&kdir);
    let (rc, out) = common::repair_check(&copy);
    assert_eq!(rc, 0, "xfs_repair -n after the kernel's replay:\n{out}");
    assert_eq!(
        kernel_used, named,
        "inodes in use after the kernel's replay"
    );
    // A mount -o ro replays into the image as the kernel's does, orphans
    // freed, so that the image is clean after it (generic/417).
    let (rc, _) = common::repair_check(&m.image);
    assert_ne!(rc, 0, "xfs_repair -n passed an image with a dirty log");
    m.mount(&["-o", "ro"]);
    assert_eq!(
        inodes_in_use(&m.mnt),
        named,
        "inodes in use after xfskit's replay"
    );
    assert_eq!(fs::read(m.p("named")).unwrap(), b"kept");
    m.unmount();
    let (rc, out) = common::repair_check(&m.image);
    assert_eq!(rc, 0, "xfs_repair -n after xfskit's mount -o ro:\n{out}");
    m.mount(&[]);
    assert_eq!(inodes_in_use(&m.mnt), named, "inodes in use read-write");
    m.finish();
}

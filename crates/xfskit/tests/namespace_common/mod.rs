//! Helpers shared by the namespace tests: what a path holds (`Desc`), the
//! tree as xfskit's reader and as a kernel mount see it, and the
//! comparison of two trees.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::{FileType, Timestamp};
use xfskit::{Fs, Ino};

/// What a path holds, as compared between the model and the readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desc {
    pub kind: char,
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

pub type Tree = BTreeMap<Vec<u8>, Desc>;

pub fn meta(mode: u16, uid: u32) -> Meta {
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 123_456_789,
    };
    Meta {
        mode,
        uid,
        gid: uid + 1,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

/// Reads the whole tree with xfskit's read engine.
pub fn walk_lib(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    let root = fs.root().unwrap();
    walk_lib_dir(fs, &root, b"", &mut out);
    out
}

pub fn walk_lib_dir(fs: &Fs, dir: &xfskit::inode::Inode, prefix: &[u8], out: &mut Tree) {
    for e in xfskit::dir::read_dir(fs, dir).unwrap() {
        let ip = fs.inode(e.ino).unwrap();
        let mut path = prefix.to_vec();
        path.push(b'/');
        path.extend_from_slice(&e.name);
        let (kind, data) = match ip.file_type {
            FileType::Dir => ('d', Vec::new()),
            FileType::File => {
                let mut b = vec![0u8; ip.size as usize];
                let n = xfskit::inode::read_at(fs, &ip, 0, &mut b).unwrap();
                assert_eq!(
                    n,
                    b.len(),
                    "short read of {}",
                    String::from_utf8_lossy(&path)
                );
                ('f', b)
            }
            FileType::Symlink => ('l', xfskit::symlink::read_link(fs, &ip).unwrap()),
            FileType::CharDev => ('c', format!("{:?}", ip.rdev_major_minor()).into_bytes()),
            FileType::BlockDev => ('b', format!("{:?}", ip.rdev_major_minor()).into_bytes()),
            FileType::Fifo => ('p', Vec::new()),
            FileType::Socket => ('s', Vec::new()),
        };
        let xattrs = xfskit::attr::list(fs, &ip)
            .unwrap()
            .into_iter()
            .map(|x| (x.full_name(), x.value))
            .collect();
        out.insert(
            path.clone(),
            Desc {
                kind,
                mode: ip.mode & 0o7777,
                uid: ip.uid,
                gid: ip.gid,
                nlink: ip.nlink,
                data,
                xattrs,
            },
        );
        if ip.file_type == FileType::Dir {
            walk_lib_dir(fs, &ip, &path, out);
        }
    }
}

/// Reads the tree through the kernel (a mounted image).
pub fn walk_host(root: &Path) -> Tree {
    let mut out = Tree::new();
    walk_host_dir(root, b"", &mut out);
    out
}

pub fn walk_host_dir(dir: &Path, prefix: &[u8], out: &mut Tree) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mut path = prefix.to_vec();
        path.push(b'/');
        path.extend_from_slice(e.file_name().as_bytes());
        let ft = m.file_type();
        use std::os::unix::fs::FileTypeExt;
        let (kind, data) = if ft.is_dir() {
            ('d', Vec::new())
        } else if ft.is_file() {
            ('f', std::fs::read(&p).unwrap())
        } else if ft.is_symlink() {
            (
                'l',
                std::fs::read_link(&p)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else if ft.is_char_device() || ft.is_block_device() {
            let r = m.rdev();
            let mm = format!("{:?}", (libc::major(r), libc::minor(r))).into_bytes();
            (if ft.is_char_device() { 'c' } else { 'b' }, mm)
        } else if ft.is_fifo() {
            ('p', Vec::new())
        } else {
            ('s', Vec::new())
        };
        let mut xattrs = BTreeMap::new();
        for name in xattr_names(&p) {
            // The kernel shows XFS's ACLs under system.*; the model keeps
            // the trusted.SGI_ACL_* names xfskit's reader reports.
            if name.starts_with(b"system.") {
                continue;
            }
            // Linux refuses user.* on anything but files and directories.
            if name.starts_with(b"user.") && !(ft.is_dir() || ft.is_file()) {
                continue;
            }
            xattrs.insert(name.clone(), xattr_get(&p, &name));
        }
        out.insert(
            path.clone(),
            Desc {
                kind,
                mode: (m.mode() & 0o7777) as u16,
                uid: m.uid(),
                gid: m.gid(),
                nlink: m.nlink() as u32,
                data,
                xattrs,
            },
        );
        if ft.is_dir() {
            walk_host_dir(&p, &path, out);
        }
    }
}

pub fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn xattr_names(p: &Path) -> Vec<Vec<u8>> {
    let c = cpath(p);
    let mut buf = vec![0u8; 1 << 20];
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
    assert!(n >= 0, "llistxattr {}", p.display());
    buf.truncate(n as usize);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| s.to_vec())
        .collect()
}

pub fn xattr_get(p: &Path, name: &[u8]) -> Vec<u8> {
    let c = cpath(p);
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 1 << 17];
    let r = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr() as *mut _,
            buf.len(),
        )
    };
    assert!(r >= 0, "lgetxattr {}", p.display());
    buf.truncate(r as usize);
    buf
}

pub fn assert_tree_eq(want: &Tree, got: &Tree, who: &str) {
    for (p, d) in want {
        match got.get(p) {
            None => panic!("{who}: missing {}", String::from_utf8_lossy(p)),
            Some(g) if g != d => {
                let short = |d: &Desc| {
                    format!(
                        "{} mode {:o} uid {} gid {} nlink {} {} bytes xattrs {:?}",
                        d.kind,
                        d.mode,
                        d.uid,
                        d.gid,
                        d.nlink,
                        d.data.len(),
                        d.xattrs
                            .keys()
                            .map(|k| String::from_utf8_lossy(k).into_owned())
                            .collect::<Vec<_>>()
                    )
                };
                let first_diff = d.data.iter().zip(&g.data).position(|(a, b)| a != b);
                if let Some(i) = first_diff {
                    let e = (i + 64).min(g.data.len());
                    eprintln!(
                        "want {:02x?}\ngot  {:02x?}",
                        &d.data[i..e.min(d.data.len())],
                        &g.data[i..e]
                    );
                }
                panic!(
                    "{who}: {} differs:\n want {}\n got  {}\n first data difference at {:?}",
                    String::from_utf8_lossy(p),
                    short(d),
                    short(g),
                    first_diff
                );
            }
            _ => {}
        }
    }
    for p in got.keys() {
        assert!(
            want.contains_key(p),
            "{who}: unexpected {}",
            String::from_utf8_lossy(p)
        );
    }
}

/// A realtime directory /rt (RTINHERIT) and an empty realtime file
/// `name` in it.
pub fn rt_dir_and_file(fs: &Fs, name: &[u8]) -> (Ino, Ino) {
    let root = fs.geometry().root_ino;
    let dir = fs
        .create(root, b"rt", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    fs.set_realtime(dir, true).unwrap();
    let file = fs
        .create(dir, name, &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    (dir, file)
}

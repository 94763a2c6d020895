//! End-to-end tests of the write engine through the namespace layer:
//! random operation sequences run against an in-memory model; after each
//! sequence the image must pass `xfs_repair -n`, and both xfskit's reader
//! and (as root) the kernel must see exactly the model.

mod write_common;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use write_common::*;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::{FileType, Timestamp};
use xfskit::{Fs, Ino};

/// What a path holds, as compared between the model and the readers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Desc {
    kind: char,
    mode: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

type Tree = BTreeMap<Vec<u8>, Desc>;

fn meta(mode: u16, uid: u32) -> Meta {
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

/// A tiny deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Reads the whole tree with xfskit's read engine.
fn walk_lib(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    let root = fs.root().unwrap();
    walk_lib_dir(fs, &root, b"", &mut out);
    out
}

fn walk_lib_dir(fs: &Fs, dir: &xfskit::inode::Inode, prefix: &[u8], out: &mut Tree) {
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
fn walk_host(root: &Path) -> Tree {
    let mut out = Tree::new();
    walk_host_dir(root, b"", &mut out);
    out
}

fn walk_host_dir(dir: &Path, prefix: &[u8], out: &mut Tree) {
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

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn xattr_names(p: &Path) -> Vec<Vec<u8>> {
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

fn xattr_get(p: &Path, name: &[u8]) -> Vec<u8> {
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

/// The model: paths -> descriptions, plus which paths share an inode.
struct Model {
    tree: Tree,
    ino: BTreeMap<Vec<u8>, Ino>,
}

impl Model {
    fn parent(path: &[u8]) -> Vec<u8> {
        let i = path.iter().rposition(|&b| b == b'/').unwrap();
        path[..i].to_vec()
    }
    fn dirs(&self) -> Vec<Vec<u8>> {
        let mut v = vec![Vec::new()];
        v.extend(
            self.tree
                .iter()
                .filter(|(_, d)| d.kind == 'd')
                .map(|(p, _)| p.clone()),
        );
        v
    }
    fn links_of(&self, ino: Ino) -> Vec<Vec<u8>> {
        self.ino
            .iter()
            .filter(|(_, &i)| i == ino)
            .map(|(p, _)| p.clone())
            .collect()
    }
    /// Applies a change to every path that names `ino`.
    fn update(&mut self, ino: Ino, f: impl Fn(&mut Desc)) {
        for p in self.links_of(ino) {
            f(self.tree.get_mut(&p).unwrap());
        }
    }
    fn children(&self, dir: &[u8]) -> Vec<Vec<u8>> {
        self.tree
            .keys()
            .filter(|p| {
                p.len() > dir.len()
                    && p.starts_with(dir)
                    && p[dir.len()] == b'/'
                    && !p[dir.len() + 1..].contains(&b'/')
            })
            .cloned()
            .collect()
    }
}

fn dir_ino(fs: &Fs, m: &Model, dir: &[u8]) -> Ino {
    if dir.is_empty() {
        fs.geometry().root_ino
    } else {
        m.ino[dir]
    }
}

/// One random operation, applied to the filesystem and the model.
fn step(fs: &Fs, m: &mut Model, rng: &mut Rng, n: usize) {
    let dirs = m.dirs();
    let dir = dirs[rng.below(dirs.len() as u64) as usize].clone();
    let dino = dir_ino(fs, m, &dir);
    let name = format!("n{}_{}", n, "x".repeat(rng.below(40) as usize)).into_bytes();
    let mut path = dir.clone();
    path.push(b'/');
    path.extend_from_slice(&name);
    let files: Vec<Vec<u8>> = m
        .tree
        .iter()
        .filter(|(_, d)| d.kind == 'f')
        .map(|(p, _)| p.clone())
        .collect();
    let all: Vec<Vec<u8>> = m.tree.keys().cloned().collect();
    match rng.below(14) {
        0..=3 => {
            let mode = 0o600 + rng.below(0o177) as u16;
            let ino = fs
                .create(dino, &name, &NodeKind::File { size: 0 }, &meta(mode, 1000))
                .unwrap();
            let len = [0u64, 1, 100, 4096, 5000, 70_000, 300_000][rng.below(7) as usize];
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (n as u8)).collect();
            fs.write_at(ino, 0, &data).unwrap();
            trace(format!(
                "create ino {} {} len {len}",
                ino.0,
                String::from_utf8_lossy(&path)
            ));
            m.ino.insert(path.clone(), ino);
            m.tree.insert(
                path,
                Desc {
                    kind: 'f',
                    mode,
                    uid: 1000,
                    gid: 1001,
                    nlink: 1,
                    data,
                    xattrs: BTreeMap::new(),
                },
            );
        }
        4 => {
            let ino = fs
                .create(dino, &name, &NodeKind::Dir, &meta(0o755, 0))
                .unwrap();
            m.ino.insert(path.clone(), ino);
            m.tree.insert(
                path,
                Desc {
                    kind: 'd',
                    mode: 0o755,
                    uid: 0,
                    gid: 1,
                    nlink: 2,
                    data: vec![],
                    xattrs: BTreeMap::new(),
                },
            );
            if !dir.is_empty() {
                m.tree.get_mut(&dir).unwrap().nlink += 1;
            }
        }
        5 => {
            let len = [1usize, 60, 300, 1000, 1023][rng.below(5) as usize];
            let t: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let ino = fs
                .create(dino, &name, &NodeKind::Symlink(t.clone()), &meta(0o777, 5))
                .unwrap();
            m.ino.insert(path.clone(), ino);
            m.tree.insert(
                path,
                Desc {
                    kind: 'l',
                    mode: 0o777,
                    uid: 5,
                    gid: 6,
                    nlink: 1,
                    data: t,
                    xattrs: BTreeMap::new(),
                },
            );
        }
        6 if !files.is_empty() => {
            // Write at a random offset (maybe past the end: a hole).
            let f = &files[rng.below(files.len() as u64) as usize];
            let ino = m.ino[f];
            let cur = m.tree[f].data.len() as u64;
            let off = rng.below(cur + 20_000);
            let len = rng.below(20_000) + 1;
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ 0x5a).collect();
            fs.write_at(ino, off, &data).unwrap();
            trace(format!(
                "write ino {} off {off} len {len} (size was {cur})",
                ino.0
            ));
            m.update(ino, |d| {
                let end = (off + len) as usize;
                if d.data.len() < end {
                    d.data.resize(end, 0);
                }
                d.data[off as usize..end].copy_from_slice(&data);
            });
        }
        7 if !files.is_empty() => {
            let f = &files[rng.below(files.len() as u64) as usize];
            let ino = m.ino[f];
            let cur = m.tree[f].data.len() as u64;
            let size = rng.below(cur + 10_000);
            fs.truncate(ino, size).unwrap();
            trace(format!("truncate ino {} {cur} -> {size}", ino.0));
            m.update(ino, |d| d.data.resize(size as usize, 0));
        }
        8 if !files.is_empty() => {
            let f = &files[rng.below(files.len() as u64) as usize];
            let ino = m.ino[f];
            let cur = m.tree[f].data.len() as u64;
            let off = rng.below(cur + 1);
            let len = rng.below(cur - off + 1);
            fs.punch_hole(ino, off, len).unwrap();
            trace(format!(
                "punch ino {} off {off} len {len} size {cur}",
                ino.0
            ));
            m.update(ino, |d| d.data[off as usize..(off + len) as usize].fill(0));
        }
        9 if !files.is_empty() => {
            let f = files[rng.below(files.len() as u64) as usize].clone();
            let ino = m.ino[&f];
            fs.link(dino, &name, ino).unwrap();
            let mut d = m.tree[&f].clone();
            d.nlink += 1;
            m.ino.insert(path.clone(), ino);
            m.tree.insert(path, d);
            let nl = m.links_of(ino).len() as u32;
            m.update(ino, |d| d.nlink = nl);
        }
        10 if !all.is_empty() => {
            let p = all[rng.below(all.len() as u64) as usize].clone();
            let ino = m.ino[&p];
            let key = format!("user.k{}", rng.below(30)).into_bytes();
            let vlen = [0usize, 5, 200, 3000, 70_000.min(65536)][rng.below(5) as usize];
            let val: Vec<u8> = (0..vlen).map(|i| (i % 251) as u8).collect();
            fs.set_xattr(ino, &key, &val).unwrap();
            m.update(ino, |d| {
                d.xattrs.insert(key.clone(), val.clone());
            });
        }
        11 if !all.is_empty() => {
            let p = all[rng.below(all.len() as u64) as usize].clone();
            let ino = m.ino[&p];
            if let Some(k) = m.tree[&p].xattrs.keys().next().cloned() {
                fs.remove_xattr(ino, &k).unwrap();
                m.update(ino, |d| {
                    d.xattrs.remove(&k);
                });
            }
        }
        12 if !all.is_empty() => {
            // Remove something (an empty directory or any non-directory).
            let p = all[rng.below(all.len() as u64) as usize].clone();
            let par = Model::parent(&p);
            let pino = dir_ino(fs, m, &par);
            let nm = &p[par.len() + 1..];
            let d = m.tree[&p].clone();
            if d.kind == 'd' {
                if !m.children(&p).is_empty() {
                    return;
                }
                fs.rmdir(pino, nm).unwrap();
                if !par.is_empty() {
                    m.tree.get_mut(&par).unwrap().nlink -= 1;
                }
            } else {
                fs.unlink(pino, nm).unwrap();
            }
            let ino = m.ino.remove(&p).unwrap();
            m.tree.remove(&p);
            let nl = m.links_of(ino).len() as u32;
            m.update(ino, |d| d.nlink = nl);
        }
        13 if !all.is_empty() => {
            // Rename a non-directory into a random directory (over an
            // existing non-directory sometimes).
            let p = all[rng.below(all.len() as u64) as usize].clone();
            if m.tree[&p].kind == 'd' {
                return;
            }
            let par = Model::parent(&p);
            let pino = dir_ino(fs, m, &par);
            let target = if rng.below(3) == 0 {
                files
                    .iter()
                    .find(|f| **f != p && m.ino[*f] != m.ino[&p])
                    .cloned()
            } else {
                None
            };
            let (tdir, tname) = match &target {
                Some(t) => {
                    let tp = Model::parent(t);
                    let n = t[tp.len() + 1..].to_vec();
                    (tp, n)
                }
                None => (dir.clone(), name.clone()),
            };
            let tino = dir_ino(fs, m, &tdir);
            fs.rename(pino, &p[par.len() + 1..], tino, &tname).unwrap();
            let mut np = tdir.clone();
            np.push(b'/');
            np.extend_from_slice(&tname);
            if let Some(old) = m.ino.remove(&np) {
                m.tree.remove(&np);
                let nl = m.links_of(old).len() as u32;
                m.update(old, |d| d.nlink = nl);
            }
            let ino = m.ino.remove(&p).unwrap();
            let d = m.tree.remove(&p).unwrap();
            m.ino.insert(np.clone(), ino);
            m.tree.insert(np, d);
        }
        _ => {}
    }
}

fn trace(s: String) {
    if std::env::var_os("XFSKIT_TRACE").is_some() {
        eprintln!("{s}");
    }
}

fn run_sequence(tag: &str, mkfs_opts: &str, seed: u64, ops: usize) {
    let s = Scratch::new(tag);
    let img = s.0.join("img");
    mkfs_xfs(&img, 512 << 20, mkfs_opts);
    let mut m = Model {
        tree: Tree::new(),
        ino: BTreeMap::new(),
    };
    {
        let fs = open_rw(&img);
        let mut rng = Rng(seed);
        for n in 0..ops {
            step(&fs, &mut m, &mut rng, n);
        }
        fs.sync().unwrap();
        let got = walk_lib(&fs);
        drop(fs);
        assert_repair_clean(&img);
        assert_tree_eq(&m.tree, &got, "xfskit reader (same handle)");
    }
    let fs = Fs::open(&img, &Default::default()).unwrap();
    assert_tree_eq(&m.tree, &walk_lib(&fs), "xfskit reader (reopened)");
    // The kernel does not show user.* xattrs of symlinks and special files.
    let mut seen_by_kernel = m.tree.clone();
    for d in seen_by_kernel.values_mut() {
        if d.kind != 'f' && d.kind != 'd' {
            d.xattrs.retain(|k, _| !k.starts_with(b"user."));
        }
    }
    with_kernel_mount(&img, |mnt| {
        assert_tree_eq(&seen_by_kernel, &walk_host(mnt), "kernel")
    });
}

fn assert_tree_eq(want: &Tree, got: &Tree, who: &str) {
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

#[test]
fn random_ops_4k() {
    for seed in [1u64, 2, 3] {
        run_sequence(&format!("r4k{seed}"), "", 0x1234_5678 + seed, 400);
    }
}

#[test]
fn random_ops_1k_blocks_small_dirs() {
    run_sequence("r1k", "-b size=1024 -n size=4096 -i size=512", 99, 600);
}

#[test]
fn random_ops_big_inodes_64k_dirs() {
    run_sequence("r64k", "-i size=2048 -n size=65536", 7, 400);
}

#[test]
fn every_kind_and_names_read_back_by_kernel() {
    let s = Scratch::new("kinds");
    let img = s.0.join("img");
    mkfs_xfs(&img, 400 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let d = fs
        .create(root, b"dir with spaces", &NodeKind::Dir, &meta(0o750, 7))
        .unwrap();
    fs.create(
        d,
        b"chr",
        &NodeKind::CharDev { major: 1, minor: 3 },
        &meta(0o666, 0),
    )
    .unwrap();
    fs.create(
        d,
        b"blk",
        &NodeKind::BlockDev {
            major: 8,
            minor: 200_000,
        },
        &meta(0o660, 0),
    )
    .unwrap();
    fs.create(d, b"fifo", &NodeKind::Fifo, &meta(0o644, 0))
        .unwrap();
    fs.create(d, b"sock", &NodeKind::Socket, &meta(0o755, 0))
        .unwrap();
    let long: Vec<u8> = vec![b'z'; 255];
    fs.create(d, &long, &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    assert!(matches!(
        fs.create(
            d,
            &[b'y'; 256],
            &NodeKind::File { size: 0 },
            &meta(0o644, 0)
        ),
        Err(xfskit::Error::Invalid(_))
    ));
    assert!(matches!(
        fs.create(d, b"fifo", &NodeKind::Fifo, &meta(0o644, 0)),
        Err(xfskit::Error::Exists(_))
    ));
    // A sparse file: data at 0 and at 10 MiB.
    let f = fs
        .create(
            root,
            b"sparse",
            &NodeKind::File { size: 0 },
            &meta(0o644, 0),
        )
        .unwrap();
    fs.write_at(f, 0, b"start").unwrap();
    fs.write_at(f, 10 << 20, b"end").unwrap();
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    with_kernel_mount(&img, |mnt| {
        let dd = mnt.join("dir with spaces");
        let m = std::fs::metadata(&dd).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o750, 7));
        let r = std::fs::symlink_metadata(dd.join("blk")).unwrap().rdev();
        assert_eq!((libc::major(r), libc::minor(r)), (8, 200_000));
        let sp = mnt.join("sparse");
        let m = std::fs::metadata(&sp).unwrap();
        assert_eq!(m.len(), (10 << 20) + 3);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "the hole was allocated: {} blocks",
            m.blocks()
        );
        let b = std::fs::read(&sp).unwrap();
        assert_eq!(&b[..5], b"start");
        assert_eq!(&b[10 << 20..], b"end");
        assert!(b[5..10 << 20].iter().all(|&x| x == 0));
    });
}

#[test]
fn change_counter_is_lazy() {
    let s = Scratch::new("cc");
    let img = s.0.join("img");
    mkfs_xfs(&img, 400 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let f = fs
        .create(root, b"f", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    let a = fs.change_cookie(f).unwrap();
    fs.write_at(f, 0, b"one").unwrap();
    let b = fs.change_cookie(f).unwrap();
    assert_ne!(a, b, "a change between two queries must move the cookie");
    // Unqueried changes: only the first after a query increments.
    fs.write_at(f, 0, b"two").unwrap();
    fs.write_at(f, 0, b"three").unwrap();
    fs.chmod(f, 0o600).unwrap();
    let c = fs.change_cookie(f).unwrap();
    assert_eq!(c, b + 1, "unqueried changes must not increment");
    let d = fs.change_cookie(f).unwrap();
    assert_eq!(c, d, "no change, no increment");
    fs.sync().unwrap();
    drop(fs);
    // The counter is on disk.
    let fs = Fs::open(&img, &Default::default()).unwrap();
    assert_eq!(fs.inode(f).unwrap().changecount, c);
    assert_repair_clean(&img);
}

#[test]
fn full_image_gives_no_space_and_stays_valid() {
    let s = Scratch::new("full");
    let img = s.0.join("img");
    mkfs_xfs(&img, 300 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let chunk = vec![0xa5u8; 4 << 20];
    let mut written: Vec<(Ino, u64)> = Vec::new();
    let mut err = None;
    'fill: for i in 0..1000 {
        let name = format!("f{i}");
        let ino = match fs.create(
            root,
            name.as_bytes(),
            &NodeKind::File { size: 0 },
            &meta(0o644, 0),
        ) {
            Ok(ino) => ino,
            Err(e) => {
                err = Some(e);
                break;
            }
        };
        let mut size = 0u64;
        for _ in 0..8 {
            if let Err(e) = fs.write_at(ino, size, &chunk) {
                err = Some(e);
                written.push((ino, size));
                break 'fill;
            }
            size += chunk.len() as u64;
        }
        written.push((ino, size));
    }
    assert!(
        matches!(err, Some(xfskit::Error::NoSpace(_))),
        "expected NoSpace, got {err:?}"
    );
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &Default::default()).unwrap();
    for (ino, size) in written {
        let ip = fs.inode(ino).unwrap();
        assert_eq!(
            ip.size, size,
            "inode {} keeps exactly what was written",
            ino.0
        );
        let mut b = vec![0u8; 4096];
        if size > 0 {
            xfskit::inode::read_at(&fs, &ip, size - 4096, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 0xa5));
        }
    }
}

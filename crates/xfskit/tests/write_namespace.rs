//! End-to-end tests of the write engine through the namespace layer:
//! random operation sequences run against an in-memory model; after each
//! sequence the image must pass `xfs_repair -n`, and both xfskit's reader
//! and (as root) the kernel must see exactly the model.

mod namespace_common;
mod write_common;

use namespace_common::*;
use std::collections::BTreeMap;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino};

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
            let vlen = [0usize, 5, 200, 3000, 65536][rng.below(5) as usize];
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
    run_sequence_with(tag, mkfs_opts, seed, ops, None)
}

fn run_sequence_with(
    tag: &str,
    mkfs_opts: &str,
    seed: u64,
    ops: usize,
    pending_limits: Option<(usize, usize)>,
) {
    let s = Scratch::new(tag);
    let img = s.0.join("img");
    mkfs_xfs(&img, 512 << 20, mkfs_opts);
    let mut m = Model {
        tree: Tree::new(),
        ino: BTreeMap::new(),
    };
    {
        let opts = xfskit::fs::OpenOptions {
            pending_limits,
            ..Default::default()
        };
        let fs = Fs::open_rw(&img, &opts).unwrap();
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

/// Writebacks after every few transactions, in the background: blocks
/// are read back from the pending set, the stream in flight and the
/// device while others are freed and reused.
#[test]
fn random_ops_frequent_writebacks() {
    for seed in [4u64, 5] {
        let limits = Some((48 << 10, 16 << 10));
        run_sequence_with(&format!("rwb{seed}"), "", 0x9e37_0000 + seed, 500, limits);
    }
}

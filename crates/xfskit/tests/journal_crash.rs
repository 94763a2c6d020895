//! Crash safety, proven by crashing: a workload runs on a device that
//! stops accepting writes after its N-th write (or tears that write in
//! half), for every N the workload issues. After each crash the kernel
//! mounts the image (replaying our log), `xfs_repair -n` is clean after
//! unmount, and the tree is exactly the model's tree after some operation
//! no earlier than the last that was made durable (`force_log`, `fsync`
//! or `sync` returned). xfskit's own recovery (`Fs::open_rw` of the
//! crashed image) gives the same tree, and `xfs_repair -n` is clean after
//! it too.

mod namespace_common;
mod write_common;

use namespace_common::*;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::dev::Device;
use xfskit::{Fs, Ino, OpenOptions};

/// Writes land in an in-memory overlay of a base image; the `limit`-th
/// write (counting from 1) and every later one fail, the `limit`-th
/// after writing its first half when `tear` is set: cut at a 512-byte
/// boundary in the log (whose blocks carry cycle stamps for exactly this),
/// at a 4 KiB boundary elsewhere (the atomic write unit XFS relies on for
/// its metadata blocks, as the kernel does).
struct CrashDevice {
    base: std::fs::File,
    len: u64,
    sectors: Mutex<BTreeMap<u64, [u8; 512]>>,
    writes: Mutex<u64>,
    limit: Option<u64>,
    tear: bool,
    /// Byte range of the log.
    log: Mutex<(u64, u64)>,
}

impl CrashDevice {
    fn new(base: &Path, limit: Option<u64>, tear: bool) -> CrashDevice {
        let f = std::fs::File::open(base).unwrap();
        let len = f.metadata().unwrap().len();
        CrashDevice {
            base: f,
            len,
            sectors: Mutex::new(BTreeMap::new()),
            writes: Mutex::new(0),
            limit,
            tear,
            log: Mutex::new((0, 0)),
        }
    }

    fn put(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut s = self.sectors.lock().unwrap();
        let mut pos = 0usize;
        while pos < buf.len() {
            let abs = off + pos as u64;
            let sec = abs / 512;
            let within = (abs % 512) as usize;
            let n = (512 - within).min(buf.len() - pos);
            let mut cur = match s.get(&sec) {
                Some(c) => *c,
                None => {
                    let mut c = [0u8; 512];
                    std::os::unix::fs::FileExt::read_exact_at(&self.base, &mut c, sec * 512)?;
                    c
                }
            };
            cur[within..within + n].copy_from_slice(&buf[pos..pos + n]);
            s.insert(sec, cur);
            pos += n;
        }
        Ok(())
    }

    /// The image as the crash left it, written to `out`.
    fn save(&self, base: &Path, out: &Path) {
        let (ok, o) = run(
            "cp",
            &[
                "--sparse=always",
                &base.display().to_string(),
                &out.display().to_string(),
            ],
        );
        assert!(ok, "cp: {o}");
        let f = std::fs::OpenOptions::new().write(true).open(out).unwrap();
        for (sec, b) in self.sectors.lock().unwrap().iter() {
            std::os::unix::fs::FileExt::write_all_at(&f, b, sec * 512).unwrap();
        }
    }
}

impl Device for CrashDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off + buf.len() as u64 > self.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"));
        }
        std::os::unix::fs::FileExt::read_exact_at(&self.base, buf, off)?;
        let s = self.sectors.lock().unwrap();
        let first = off / 512;
        let last = (off + buf.len() as u64).div_ceil(512);
        for (&sec, b) in s.range(first..last) {
            let so = sec * 512;
            let lo = so.max(off);
            let hi = (so + 512).min(off + buf.len() as u64);
            buf[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&b[(lo - so) as usize..(hi - so) as usize]);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let n = {
            let mut w = self.writes.lock().unwrap();
            *w += 1;
            *w
        };
        match self.limit {
            Some(l) if n > l => Err(io::Error::other("crashed")),
            Some(l) if n == l => {
                if self.tear {
                    let (lo, hi) = *self.log.lock().unwrap();
                    let unit = if off >= lo && off < hi { 511 } else { 4095 };
                    let half = (buf.len() / 2) & !unit;
                    self.put(&buf[..half], off)?;
                }
                Err(io::Error::other("crashed"))
            }
            _ => self.put(buf, off),
        }
    }

    fn flush(&self) -> io::Result<()> {
        match self.limit {
            Some(l) if *self.writes.lock().unwrap() >= l => Err(io::Error::other("crashed")),
            _ => Ok(()),
        }
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// What the workload made, as the readers report it.
#[derive(Clone, Default)]
struct Model {
    paths: BTreeMap<Vec<u8>, usize>,
    nodes: HashMap<usize, Desc>,
    inos: HashMap<usize, Ino>,
    next: usize,
}

impl Model {
    fn tree(&self) -> Tree {
        let mut t = Tree::new();
        for (p, id) in &self.paths {
            let mut d = self.nodes[id].clone();
            d.nlink = if d.kind == 'd' {
                2 + self
                    .paths
                    .iter()
                    .filter(|(q, i)| {
                        self.nodes[i].kind == 'd'
                            && q.len() > p.len()
                            && q.starts_with(p)
                            && q[p.len()] == b'/'
                            && !q[p.len() + 1..].contains(&b'/')
                    })
                    .count() as u32
            } else {
                self.paths.values().filter(|i| *i == id).count() as u32
            };
            t.insert(p.clone(), d);
        }
        t
    }

    fn add(&mut self, path: Vec<u8>, d: Desc, ino: Ino) {
        let id = self.next;
        self.next += 1;
        self.nodes.insert(id, d);
        self.inos.insert(id, ino);
        self.paths.insert(path, id);
    }
}

fn desc(kind: char, mode: u16, uid: u32) -> Desc {
    Desc {
        kind,
        mode,
        uid,
        gid: uid + 1,
        nlink: 0,
        data: Vec::new(),
        xattrs: BTreeMap::new(),
    }
}

/// How a run ended.
struct Outcome {
    /// Model states: before anything, then after each call (a call that
    /// failed counts as done: its transaction may have reached the log).
    states: Vec<Tree>,
    /// Index of the last state made durable.
    durable: usize,
}

impl Outcome {
    /// Records the model's state after a call; passes its result on.
    fn after<T>(&mut self, m: &Model, r: xfskit::Result<T>) -> xfskit::Result<T> {
        self.states.push(m.tree());
        r
    }

    /// A durability call: on success everything so far is durable.
    fn durable(&mut self, r: xfskit::Result<()>) -> xfskit::Result<()> {
        if r.is_ok() {
            self.durable = self.states.len() - 1;
        }
        r
    }
}

fn join(dir: &[u8], name: &str) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name.as_bytes());
    p
}

/// The workload: directories, files with data, xattrs small and remote,
/// hard links, renames, truncates, unlinks, and durable points of every
/// kind. Stops at the first error (the device crashed).
fn workload(fs: &Fs, steps: u32) -> Outcome {
    let root = fs.geometry().root_ino;
    let mut m = Model::default();
    let mut out = Outcome {
        states: vec![m.tree()],
        durable: 0,
    };
    let _ = (|| -> xfskit::Result<()> {
        let mut rng = Rng(0xc4a5);
        let mut dirs: Vec<(Vec<u8>, Ino)> = vec![(Vec::new(), root)];
        let mut files: Vec<Vec<u8>> = Vec::new();
        for step in 0..steps {
            match step % 12 {
                0 if dirs.len() < 5 => {
                    let (pp, pino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let name = format!("d{step}");
                    let r = fs.create(pino, name.as_bytes(), &NodeKind::Dir, &meta(0o750, 3));
                    let ino = *r.as_ref().unwrap_or(&Ino(0));
                    m.add(join(&pp, &name), desc('d', 0o750, 3), ino);
                    out.after(&m, r)?;
                    dirs.push((join(&pp, &name), ino));
                }
                5 => {
                    let r = fs.force_log();
                    out.durable(r)?;
                }
                9 if step % 36 == 9 => {
                    let r = fs.sync();
                    out.durable(r)?;
                }
                9 if step % 36 == 21 => {
                    // In place without an unmount record: LSNs stamped,
                    // the tail moves at the next checkpoint.
                    fs.writeback()?;
                }
                7 if !files.is_empty() => {
                    let p = files[rng.below(files.len() as u64) as usize].clone();
                    let id = m.paths[&p];
                    let ino = m.inos[&id];
                    match rng.below(4) {
                        0 => {
                            let v = rng.bytes(2500);
                            let r = fs.set_xattr(ino, b"user.big", &v);
                            let x = &mut m.nodes.get_mut(&id).unwrap().xattrs;
                            x.insert(b"user.big".to_vec(), v);
                            out.after(&m, r)?;
                        }
                        1 => {
                            let r = fs.truncate(ino, 10);
                            m.nodes.get_mut(&id).unwrap().data.truncate(10);
                            out.after(&m, r)?;
                        }
                        2 => {
                            let (dp, dino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                            let name = format!("h{step}");
                            let r = fs.link(dino, name.as_bytes(), ino);
                            m.paths.insert(join(&dp, &name), id);
                            out.after(&m, r)?;
                            files.push(join(&dp, &name));
                        }
                        _ => {
                            let r = fs.fsync(ino);
                            out.durable(r)?;
                        }
                    }
                }
                11 if files.len() > 3 => {
                    let i = rng.below(files.len() as u64) as usize;
                    let p = files.remove(i);
                    let (pp, name) = split(&p);
                    let pino = dir_ino(&dirs, &pp);
                    if rng.below(2) == 0 {
                        let r = fs.unlink(pino, &name);
                        m.paths.remove(&p);
                        out.after(&m, r)?;
                    } else {
                        let (dp, dino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                        let nn = format!("m{step}");
                        let r = fs.rename(pino, &name, dino, nn.as_bytes());
                        let id = m.paths.remove(&p).unwrap();
                        m.paths.insert(join(&dp, &nn), id);
                        out.after(&m, r)?;
                        files.push(join(&dp, &nn));
                    }
                }
                _ => {
                    let (pp, pino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let name = format!("f{step}");
                    let p = join(&pp, &name);
                    let r = fs.create(
                        pino,
                        name.as_bytes(),
                        &NodeKind::File { size: 0 },
                        &meta(0o640, 7),
                    );
                    let ino = *r.as_ref().unwrap_or(&Ino(0));
                    m.add(p.clone(), desc('f', 0o640, 7), ino);
                    out.after(&m, r)?;
                    files.push(p.clone());
                    let id = m.paths[&p];
                    let n = rng.below(6000) as usize;
                    let data = rng.bytes(n);
                    let r = fs.write_at(ino, 0, &data);
                    m.nodes.get_mut(&id).unwrap().data = data;
                    out.after(&m, r)?;
                    if step % 4 == 1 {
                        let r = fs.set_xattr(ino, b"user.s", b"x");
                        let x = &mut m.nodes.get_mut(&id).unwrap().xattrs;
                        x.insert(b"user.s".to_vec(), b"x".to_vec());
                        out.after(&m, r)?;
                    }
                }
            }
        }
        Ok(())
    })();
    out
}

fn split(p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let i = p.iter().rposition(|&b| b == b'/').unwrap();
    (p[..i].to_vec(), p[i + 1..].to_vec())
}

fn dir_ino(dirs: &[(Vec<u8>, Ino)], p: &[u8]) -> Ino {
    dirs.iter().find(|(q, _)| q == p).unwrap().1
}

/// Shares a crash device between the filesystem and the test.
struct Shared(Arc<CrashDevice>);

impl Device for Shared {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.0.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
}

fn open(dev: Arc<CrashDevice>) -> xfskit::Result<Fs> {
    let fs = Fs::from_device_rw(
        Box::new(Shared(dev.clone())),
        &OpenOptions {
            pending_limits: Some((256 << 10, 128 << 10)),
            ..Default::default()
        },
    )?;
    let g = fs.geometry();
    let lo = g.fsb_to_daddr(g.log_start).bytes();
    *dev.log.lock().unwrap() = (lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size));
    Ok(fs)
}

/// Panics naming the differences from the closest acceptable state.
fn no_state_matches(states: &[Tree], from: usize, got: &Tree, what: &str) -> ! {
    let diff = |w: &Tree| -> Vec<String> {
        let mut d: Vec<String> = w
            .iter()
            .filter(|(p, x)| got.get(*p) != Some(*x))
            .map(|(p, _)| format!("-{}", String::from_utf8_lossy(p)))
            .collect();
        d.extend(
            got.iter()
                .filter(|(p, x)| w.get(*p) != Some(*x))
                .map(|(p, _)| format!("+{}", String::from_utf8_lossy(p))),
        );
        d
    };
    let (k, d) = (from..states.len())
        .map(|k| (k, diff(&states[k])))
        .min_by_key(|(_, d)| d.len())
        .unwrap();
    eprintln!(
        "{what}: closest state {k} (durable {from}, last {}): {d:?}",
        states.len() - 1
    );
    assert_tree_eq(&states[k], got, what);
    unreachable!()
}

/// Mounts read-write and unmounts (the kernel replays the log).
fn kernel_recover(img: &Path) -> Result<(), String> {
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            "loop",
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    if !ok {
        return Err(out);
    }
    let (ok, out) = run("umount", &[&mnt.display().to_string()]);
    assert!(ok, "umount: {out}");
    Ok(())
}

/// Steps of the workload.
const STEPS: u32 = 100;

fn crash_everywhere(tag: &str, tear: bool, stride: u64) {
    if !is_root() {
        eprintln!("SKIP {tag}: the kernel's log replay needs root (loop mount)");
        return;
    }
    let s = Scratch::new(tag);
    let base = s.0.join("base");
    mkfs_xfs(&base, 320 << 20, "");
    // The run without a crash: every write counted, the final tree right.
    let dev = Arc::new(CrashDevice::new(&base, None, false));
    let fs = open(dev.clone()).unwrap();
    let full = workload(&fs, STEPS);
    fs.sync().unwrap();
    let want = full.states.last().unwrap().clone();
    assert_tree_eq(&want, &walk_lib(&fs), "the run without a crash");
    drop(fs);
    let total = *dev.writes.lock().unwrap();
    eprintln!("{tag}: about {total} writes; crashing at every {stride}");
    let img = s.0.join("img");
    let mut n = 1;
    let mut runs = 0;
    loop {
        let dev = Arc::new(CrashDevice::new(&base, Some(n), tear));
        let r = open(dev.clone());
        let Ok(fs) = r else {
            panic!("open failed at crash point {n}");
        };
        let got = workload(&fs, STEPS);
        let finished = got.states.len() == full.states.len() && {
            let r = fs.sync();
            r.is_ok()
        };
        drop(fs);
        if finished {
            break;
        }
        runs += 1;
        dev.save(&base, &img);
        // xfskit's own recovery of the same crashed image, on a copy.
        let ours = s.0.join("ours");
        let (ok, o) = run(
            "cp",
            &[
                "--sparse=always",
                &img.display().to_string(),
                &ours.display().to_string(),
            ],
        );
        assert!(ok, "cp: {o}");
        let ours_tree = {
            let fs = Fs::open_rw(&ours, &OpenOptions::default())
                .unwrap_or_else(|e| panic!("crash at write {n}: xfskit recovery failed: {e}"));
            fs.sync().unwrap();
            walk_lib(&fs)
        };
        let (ok, out) = run("xfs_repair", &["-n", &ours.display().to_string()]);
        assert!(
            ok,
            "crash at write {n}: xfs_repair -n after xfskit's recovery:\n{out}"
        );
        if let Err(e) = kernel_recover(&img) {
            panic!("crash at write {n} (tear {tear}): the kernel cannot replay our log: {e}");
        }
        let (ok, out) = run("xfs_repair", &["-n", &img.display().to_string()]);
        assert!(ok, "crash at write {n}: xfs_repair -n after replay:\n{out}");
        let rfs = Fs::open(&img, &OpenOptions::default()).unwrap();
        let tree = walk_lib(&rfs);
        let hit = (got.durable..got.states.len()).any(|k| got.states[k] == tree);
        if !hit {
            no_state_matches(
                &got.states,
                got.durable,
                &tree,
                &format!("crash at write {n}"),
            );
        }
        assert_tree_eq(
            &tree,
            &ours_tree,
            &format!("crash at write {n}: xfskit recover vs the kernel"),
        );
        n += stride;
    }
    assert!(runs > 10, "only {runs} crash points");
    eprintln!("{tag}: {runs} crash points replayed by the kernel");
}

#[test]
fn kernel_replays_after_a_crash_at_every_write() {
    crash_everywhere("crash-cut", false, 1);
}

#[test]
fn kernel_replays_after_a_torn_write_at_every_write() {
    crash_everywhere("crash-tear", true, 1);
}

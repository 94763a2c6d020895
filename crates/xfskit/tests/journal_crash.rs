//! Crash safety, proven by crashing: a workload runs on a device that
//! stops accepting writes after its N-th write (or tears that write in
//! half), for every N the workload issues. After each crash the kernel
//! mounts the image (replaying our log), `xfs_repair -n` is clean after
//! unmount, and the tree is exactly the model's tree after some operation
//! no earlier than the last that was made durable (`force_log`, `fsync`
//! or `sync` returned). xfskit's own recovery (`Fs::open_rw` of the
//! crashed image) gives the same tree, and `xfs_repair -n` is clean after
//! it too.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{CrashDevice, Shared};

use namespace_common::*;
use std::collections::{BTreeMap, HashMap};

use std::path::Path;
use std::sync::Arc;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino, OpenOptions};

/// What the workload made, as the readers report it.
#[derive(Clone, Default)]
struct Model {
    paths: BTreeMap<Vec<u8>, usize>,
    nodes: HashMap<usize, Desc>,
    inos: HashMap<usize, Ino>,
    /// The state after the last call that certainly logged each node's
    /// inode (an fsync of it makes that state durable).
    last: HashMap<usize, usize>,
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
    /// For each state, the node (file) each path names: file data is
    /// matched by file, whatever its name was when the data was written.
    ids: Vec<BTreeMap<Vec<u8>, usize>>,
    /// Index of the last state made durable.
    durable: usize,
    /// Index of the last state whose file data was made durable too (a
    /// log force leaves data overwritten in place unwritten; `fsync` and
    /// `sync` write it).
    data_durable: usize,
}

impl Outcome {
    /// Records the model's state after a call; passes its result on.
    fn after<T>(&mut self, m: &Model, r: xfskit::Result<T>) -> xfskit::Result<T> {
        self.states.push(m.tree());
        self.ids.push(m.paths.clone());
        r
    }

    /// A durability call: on success everything so far is durable.
    fn durable(&mut self, r: xfskit::Result<()>) -> xfskit::Result<()> {
        if r.is_ok() {
            self.durable = self.states.len() - 1;
            self.data_durable = self.durable;
        }
        r
    }

    /// Notes that the last call logged node `id`'s inode.
    fn touch(&self, m: &mut Model, id: usize) {
        m.last.insert(id, self.states.len() - 1);
    }

    /// An fsync of node `id`: on success, the state after its last logged
    /// change is durable (the kernel forces its log up to the inode's last
    /// commit; nothing later need be).
    fn fsynced(&mut self, m: &Model, id: usize, r: xfskit::Result<()>) -> xfskit::Result<()> {
        if r.is_ok() {
            let k = m.last.get(&id).copied().unwrap_or(0);
            self.durable = self.durable.max(k);
            self.data_durable = self.data_durable.max(k);
        }
        r
    }

    /// A log force: the metadata so far is durable, data overwritten in
    /// place need not be.
    fn durable_meta(&mut self, r: xfskit::Result<()>) -> xfskit::Result<()> {
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
        ids: vec![m.paths.clone()],
        durable: 0,
        data_durable: 0,
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
                            out.touch(&mut m, id);
                        }
                        1 => {
                            let r = fs.truncate(ino, 10);
                            m.nodes.get_mut(&id).unwrap().data.truncate(10);
                            out.after(&m, r)?;
                            out.touch(&mut m, id);
                        }
                        2 => {
                            let (dp, dino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                            let name = format!("h{step}");
                            let r = fs.link(dino, name.as_bytes(), ino);
                            m.paths.insert(join(&dp, &name), id);
                            out.after(&m, r)?;
                            out.touch(&mut m, id);
                            files.push(join(&dp, &name));
                        }
                        _ => {
                            let r = fs.fsync(ino);
                            out.fsynced(&m, id, r)?;
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
                        let id = m.paths.remove(&p).unwrap();
                        out.after(&m, r)?;
                        out.touch(&mut m, id);
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
                    let (ino, id) = new_file(
                        fs, &mut m, &mut out, &mut rng, &dirs, &mut files, step, 6000,
                    )?;
                    if step % 4 == 1 {
                        let r = fs.set_xattr(ino, b"user.s", b"x");
                        let x = &mut m.nodes.get_mut(&id).unwrap().xattrs;
                        x.insert(b"user.s".to_vec(), b"x".to_vec());
                        out.after(&m, r)?;
                        out.touch(&mut m, id);
                    }
                }
            }
        }
        Ok(())
    })();
    out
}

/// Creates the file `f{step}` in one of `dirs` picked at random and
/// writes fewer than `max` random bytes to it, following both in the
/// model and in `files`; returns its inode and its id in the model.
#[allow(clippy::too_many_arguments)]
fn new_file(
    fs: &Fs,
    m: &mut Model,
    out: &mut Outcome,
    rng: &mut Rng,
    dirs: &[(Vec<u8>, Ino)],
    files: &mut Vec<Vec<u8>>,
    step: u32,
    max: u64,
) -> xfskit::Result<(Ino, usize)> {
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
    out.after(m, r)?;
    files.push(p.clone());
    let id = m.paths[&p];
    out.touch(m, id);
    let n = rng.below(max) as usize;
    let data = rng.bytes(n);
    let r = fs.write_at(ino, 0, &data);
    m.nodes.get_mut(&id).unwrap().data = data;
    out.after(m, r)?;
    if n > 0 {
        out.touch(m, id);
    }
    Ok((ino, id))
}

fn split(p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let i = p.iter().rposition(|&b| b == b'/').unwrap();
    (p[..i].to_vec(), p[i + 1..].to_vec())
}

fn dir_ino(dirs: &[(Vec<u8>, Ino)], p: &[u8]) -> Ino {
    dirs.iter().find(|(q, _)| q == p).unwrap().1
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
    dev.set_log(lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size));
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

/// True when `tree` is one of the model's states from `from` on. File
/// data overwritten in place is not journaled (in XFS neither): a write
/// the crash interrupted may have reached some of its 4 KiB blocks and
/// not others, and a write after a rename that did not survive reaches
/// the file under its old name. So metadata, sizes and xattrs must be
/// exactly those of a state, and each 4 KiB block of a file's data that of
/// the same file (under any of its names) in some state from `data_from`
/// on (the last point file data was made durable, at or before `from`).
fn state_matches(out: &Outcome, from: usize, data_from: usize, tree: &Tree) -> bool {
    let states = &out.states;
    let block_ok = |node: Option<usize>, path: &Vec<u8>, i: usize, got: &[u8]| {
        (data_from..states.len()).any(|j| {
            let names: Vec<&Vec<u8>> = match node {
                Some(n) => out.ids[j]
                    .iter()
                    .filter(|(_, &v)| v == n)
                    .map(|(p, _)| p)
                    .collect(),
                None => vec![path],
            };
            names.into_iter().any(|q| {
                states[j].get(q).is_some_and(|d| {
                    let lo = i * 4096;
                    let mut want = d
                        .data
                        .get(lo..(lo + 4096).min(d.data.len()))
                        .unwrap_or(&[])
                        .to_vec();
                    want.resize(got.len(), 0);
                    want == got
                })
            })
        })
    };
    (from..states.len()).any(|k| {
        let st = &states[k];
        st.len() == tree.len()
            && st.iter().zip(tree.iter()).all(|((pa, a), (pb, b))| {
                if pa != pb || a.data.len() != b.data.len() {
                    return false;
                }
                let mut a2 = a.clone();
                a2.data = b.data.clone();
                a2 == *b
                    && (a.data == b.data
                        || b.data
                            .chunks(4096)
                            .enumerate()
                            .all(|(i, c)| block_ok(out.ids[k].get(pb).copied(), pb, i, c)))
            })
    })
}

/// Checks one crashed run: xfskit's recovery and the kernel's of the
/// image `dev` left, both `xfs_repair -n` clean, the kernel's tree one of
/// the model's states from the last durable one on, and ours the same.
fn check_crash(dir: &Path, base: &Path, img: &Path, dev: &CrashDevice, got: &Outcome, what: &str) {
    dev.save(base, img);
    // xfskit's own recovery of the same crashed image, on a copy.
    let ours = dir.join("ours");
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
            .unwrap_or_else(|e| panic!("{what}: xfskit recovery failed: {e}"));
        fs.sync().unwrap();
        walk_lib(&fs)
    };
    let (ok, out) = repair_n(&ours);
    assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
    if let Err(e) = kernel_replay(img) {
        panic!("{what}: the kernel cannot replay our log: {e}");
    }
    let (ok, out) = repair_n(img);
    assert!(ok, "{what}: xfs_repair -n after replay:\n{out}");
    let rfs = Fs::open(img, &OpenOptions::default()).unwrap();
    let tree = walk_lib(&rfs);
    if !state_matches(got, got.durable, got.data_durable, &tree) {
        no_state_matches(&got.states, got.durable, &tree, what);
    }
    assert_tree_eq(
        &tree,
        &ours_tree,
        &format!("{what}: xfskit recover vs the kernel"),
    );
}

/// Steps of the workload.
const STEPS: u32 = 100;

fn crash_everywhere(tag: &str, tear: bool, stride: u64) {
    crash_everywhere_on(tag, tear, stride, false)
}

/// [`crash_everywhere`] on a filesystem with the xfsprogs 6.18 defaults
/// (parent pointers, exchange-range, rmapbt) when `pptr`.
fn crash_everywhere_on(tag: &str, tear: bool, stride: u64, pptr: bool) {
    if skip_unless_root(tag) || (pptr && skip_without_615(tag)) {
        return;
    }
    let s = Scratch::new(tag);
    let base = s.0.join("base");
    if pptr {
        mkfs_618(&base, 320 << 20, "");
    } else {
        mkfs_xfs(&base, 320 << 20, "");
    }
    // The run without a crash: every write counted, the final tree right.
    let dev = Arc::new(CrashDevice::new(&base, None, false));
    let fs = open(dev.clone()).unwrap();
    let full = workload(&fs, STEPS);
    fs.sync().unwrap();
    let want = full.states.last().unwrap().clone();
    assert_tree_eq(&want, &walk_lib(&fs), "the run without a crash");
    drop(fs);
    let total = dev.writes();
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
        check_crash(
            &s.0,
            &base,
            &img,
            &dev,
            &got,
            &format!("crash at write {n} (tear {tear})"),
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

/// The same workload on a filesystem with parent pointers: every name
/// change also changes a parent pointer, in the same checkpoint.
#[test]
fn parent_pointers_survive_a_crash_at_every_write() {
    crash_everywhere_on("crash-cut-pptr", false, 1, true);
}

/// A block two files shared on disk and one of them let go of in the
/// committed list (its copy-on-write, unlink or truncate dropped the
/// reference count) is still the other's on disk until the next
/// checkpoint: an in-place overwrite by the file that now owns it alone
/// must not reach the disk before that checkpoint. The random workload
/// found it (seeds from 25, seed 29, crash at write 77): fsync wrote the
/// overwrite first, and a crash before the log write left the other file
/// with the overwriting file's data. Here: `b` a clone of `a`, synced;
/// then `b` written (copy-on-write), `a` overwritten in place, `a`
/// fsynced; crashed at every write, cut and torn, each image recovered by
/// the kernel and by xfskit.
#[test]
fn overwrite_of_a_block_another_file_just_let_go_waits_for_its_checkpoint() {
    if skip_unless_root("overwrite_of_a_block_another_file_just_let_go_waits_for_its_checkpoint") {
        return;
    }
    let s = Scratch::new("crash-unshare");
    let base = s.0.join("base");
    mkfs_xfs(&base, 320 << 20, "-m reflink=1");
    let old = vec![0x11u8; 16384];
    let (b_new, a_new) = (vec![0x22u8; 4096], vec![0x33u8; 4096]);
    let (a, b) = {
        let fs = open_rw(&base);
        let root = fs.geometry().root_ino;
        let file = |n: &[u8]| {
            fs.create(root, n, &NodeKind::File { size: 0 }, &meta(0o644, 0))
                .unwrap()
        };
        let (a, b) = (file(b"a"), file(b"b"));
        fs.write_at(a, 0, &old).unwrap();
        fs.clone_range(a, 0, b, 0, 0).unwrap();
        fs.sync().unwrap();
        (a, b)
    };
    let runs = crash_at_every_write(
        &s,
        &base,
        &|fs| {
            if fs.write_at(b, 0, &b_new).is_err() {
                return 0;
            }
            if fs.write_at(a, 0, &a_new).is_err() {
                return 1;
            }
            if fs.fsync(a).is_err() {
                return 2;
            }
            usize::MAX
        },
        &|what, tree, done| {
            let block0 = |p: &[u8]| tree[&p.to_vec()].data[..4096].to_vec();
            let (ga, gb) = (block0(b"/a"), block0(b"/b"));
            assert!(
                gb == old[..4096] || gb == b_new,
                "{what}: b holds {:#x}s, neither its old data nor its own write",
                gb[0]
            );
            assert!(
                ga == old[..4096] || ga == a_new,
                "{what}: a holds {:#x}s",
                ga[0]
            );
            if done >= 3 {
                assert!(ga == a_new && gb == b_new, "{what}: lost an fsynced write");
            }
        },
    );
    assert!(runs >= 6, "only {runs} crash points");
}

/// Runs `steps` on a crash device over `base` cut (then torn) at every
/// write until a run finishes; after each crash both recoveries (xfskit's
/// on a copy, then the kernel's, `xfs_repair -n` clean) must pass `check`
/// on the recovered tree, told how many steps returned. Returns the
/// crash points.
fn crash_at_every_write(
    s: &Scratch,
    base: &Path,
    steps: &dyn Fn(&Fs) -> usize,
    check: &dyn Fn(&str, &Tree, usize),
) -> usize {
    let (img, ours) = (s.0.join("img"), s.0.join("ours"));
    let mut runs = 0;
    for tear in [false, true] {
        for n in 1.. {
            let dev = Arc::new(CrashDevice::new(base, Some(n), tear));
            let fs = open(dev.clone()).unwrap();
            let done = steps(&fs);
            let finished = done == usize::MAX && fs.sync().is_ok();
            drop(fs);
            if finished {
                break;
            }
            runs += 1;
            dev.save(base, &img);
            std::fs::copy(&img, &ours).unwrap();
            let steps_done = if done == usize::MAX {
                "all".to_string()
            } else {
                done.to_string()
            };
            let what = format!("crash at write {n} (tear {tear}), {steps_done} steps returned");
            let fs = Fs::open_rw(&ours, &OpenOptions::default())
                .unwrap_or_else(|e| panic!("{what}: xfskit recovery failed: {e}"));
            fs.sync().unwrap();
            check(&format!("{what}, xfskit's recovery"), &walk_lib(&fs), done);
            drop(fs);
            let (ok, out) = repair_n(&ours);
            assert!(ok, "{what}: xfs_repair -n after xfskit's recovery:\n{out}");
            if let Err(e) = kernel_replay(&img) {
                panic!("{what}: the kernel cannot replay our log: {e}");
            }
            let (ok, out) = repair_n(&img);
            assert!(ok, "{what}: xfs_repair -n after replay:\n{out}");
            let rfs = Fs::open(&img, &OpenOptions::default()).unwrap();
            check(
                &format!("{what}, the kernel's recovery"),
                &walk_lib(&rfs),
                done,
            );
        }
    }
    runs
}

/// A write that fills a hole and goes on over the next, existing block
/// is one pending run when the hole gets the block just before it: part in
/// a block the next checkpoint allocates, part in place. The new block's
/// data must reach the disk before that checkpoint makes it reachable (the
/// random workload's seed 128, seeds from 81: the whole run waited for the
/// writeback after the checkpoint, and a crash between showed what the
/// block held before).
#[test]
fn a_write_into_a_new_block_reaches_the_disk_before_it_is_mapped() {
    if skip_unless_root("a_write_into_a_new_block_reaches_the_disk_before_it_is_mapped") {
        return;
    }
    let s = Scratch::new("crash-fill");
    let base = s.0.join("base");
    mkfs_xfs(&base, 320 << 20, "");
    let (a, disk) = {
        let fs = open_rw(&base);
        let root = fs.geometry().root_ino;
        let a = fs
            .create(root, b"a", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        fs.write_at(a, 0, &[0x11u8; 12288]).unwrap();
        fs.sync().unwrap();
        fs.punch_hole(a, 4096, 4096).unwrap();
        fs.sync().unwrap();
        let i = fs.lookup_path(b"/a").unwrap();
        let ext = xfskit::inode::extents(&fs, &i, xfskit::inode::Fork::Data).unwrap();
        (
            a,
            ext.iter()
                .map(|e| (e.offset, e.start.0))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(disk.len(), 2, "the hole splits the file's extent: {disk:?}");
    let runs = crash_at_every_write(
        &s,
        &base,
        &|fs| {
            if fs.write_at(a, 4096, &[0x22u8; 8192]).is_err() {
                return 0;
            }
            if fs.force_log().is_err() {
                return 1;
            }
            usize::MAX
        },
        &|what, tree, done| {
            let got = &tree[&b"/a".to_vec()].data;
            assert_eq!(got.len(), 12288, "{what}: size");
            let block = |i: usize| &got[i * 4096..(i + 1) * 4096];
            assert!(block(0).iter().all(|&b| b == 0x11), "{what}: block 0");
            let b1 = block(1)[0];
            assert!(
                block(1).iter().all(|&b| b == b1) && (b1 == 0 || b1 == 0x22),
                "{what}: the block that filled the hole holds {b1:#x}s, neither the hole nor its data"
            );
            assert!(done < 2 || b1 == 0x22, "{what}: the forced write is gone");
            let b2 = block(2)[0];
            assert!(
                block(2).iter().all(|&b| b == b2) && (b2 == 0x11 || b2 == 0x22),
                "{what}: block 2"
            );
        },
    );
    assert!(runs >= 6, "only {runs} crash points");
}

/// A clone shares the source's blocks as the source's data stood when it
/// was cloned, pending writes included (the kernel writes both files'
/// dirty pages before it remaps): a punch's partial-block zeroing still
/// pending when the clone's checkpoint reached the log left the clone,
/// after a crash, with data it never had (the random workload's seed 343,
/// seeds from 81).
#[test]
fn a_clone_never_shares_blocks_without_the_data_it_was_cloned_with() {
    if skip_unless_root("a_clone_never_shares_blocks_without_the_data_it_was_cloned_with") {
        return;
    }
    let s = Scratch::new("crash-clone");
    let base = s.0.join("base");
    mkfs_xfs(&base, 320 << 20, "-m reflink=1");
    let data = vec![0x11u8; 16384];
    let a = {
        let fs = open_rw(&base);
        let root = fs.geometry().root_ino;
        let a = fs
            .create(root, b"a", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        fs.write_at(a, 0, &data).unwrap();
        fs.sync().unwrap();
        a
    };
    let mut punched = data.clone();
    punched[1000..4096].fill(0);
    let runs = crash_at_every_write(
        &s,
        &base,
        &|fs| {
            // A clone of another file first, so that what a clone reads
            // (AG headers, btree roots) is cached: a read from the device
            // would write the pending data first and hide the bug.
            let root = fs.geometry().root_ino;
            let warm = (|| {
                let x = fs.create(root, b"x", &NodeKind::File { size: 0 }, &meta(0o644, 0))?;
                fs.write_at(x, 0, &[0x44u8; 4096])?;
                let y = fs.create(root, b"y", &NodeKind::File { size: 0 }, &meta(0o644, 0))?;
                fs.clone_range(x, 0, y, 0, 0)
            })();
            if warm.is_err() || fs.punch_hole(a, 1000, 3096).is_err() {
                return 0;
            }
            // A new file: its inode is in memory, so nothing is read from
            // the device before the clone.
            let b = fs.create(root, b"b", &NodeKind::File { size: 0 }, &meta(0o644, 0));
            if b.and_then(|b| fs.clone_range(a, 0, b, 0, 0)).is_err() {
                return 1;
            }
            if fs.force_log().is_err() {
                return 2;
            }
            usize::MAX
        },
        &|what, tree, done| {
            let Some(got) = tree.get(&b"/b".to_vec()).map(|d| &d.data) else {
                assert!(done < 3, "{what}: the forced clone is gone");
                return;
            };
            if got.is_empty() {
                assert!(done < 3, "{what}: the forced clone is gone");
                return;
            }
            assert!(
                *got == punched,
                "{what}: the clone holds data it was not cloned with"
            );
        },
    );
    assert!(runs >= 6, "only {runs} crash points");
}

/// A random workload from `seed`: creates, overwrites at random offsets
/// (copy-on-write where blocks are shared), whole-file clones, truncates,
/// hole punches, links, renames, unlinks, xattrs and directories, with
/// durable points of every kind. Stops at the first error.
fn random_workload(fs: &Fs, seed: u64, steps: u32) -> Outcome {
    let root = fs.geometry().root_ino;
    let mut m = Model::default();
    let mut out = Outcome {
        states: vec![m.tree()],
        ids: vec![m.paths.clone()],
        durable: 0,
        data_durable: 0,
    };
    let _ = (|| -> xfskit::Result<()> {
        let mut rng = Rng(seed | 1);
        let mut dirs: Vec<(Vec<u8>, Ino)> = vec![(Vec::new(), root)];
        let mut files: Vec<Vec<u8>> = Vec::new();
        for step in 0..steps {
            let pick = |rng: &mut Rng, files: &[Vec<u8>]| {
                files[rng.below(files.len() as u64) as usize].clone()
            };
            let op = if files.len() < 2 { 0 } else { rng.below(16) };
            if std::env::var("XFSKIT_CRASH_TRACE").is_ok() {
                eprintln!(
                    "step {step} op {op} state {} files {:?}",
                    out.states.len() - 1,
                    files
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect::<Vec<_>>()
                );
            }
            match op {
                0..=2 => {
                    new_file(
                        fs, &mut m, &mut out, &mut rng, &dirs, &mut files, step, 40_000,
                    )?;
                }
                3 | 4 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let size = m.nodes[&id].data.len() as u64;
                    let off = rng.below(size + 5000) as usize;
                    let n = 1 + rng.below(9000) as usize;
                    let v = rng.bytes(n);
                    if std::env::var("XFSKIT_CRASH_TRACE").is_ok() {
                        eprintln!(
                            "  write {} ino {} at {off} len {}",
                            String::from_utf8_lossy(&p),
                            m.inos[&id].0,
                            v.len()
                        );
                    }
                    let r = fs.write_at(m.inos[&id], off as u64, &v);
                    let d = &mut m.nodes.get_mut(&id).unwrap().data;
                    if d.len() < off + v.len() {
                        d.resize(off + v.len(), 0);
                    }
                    d[off..off + v.len()].copy_from_slice(&v);
                    out.after(&m, r)?;
                    out.touch(&mut m, id);
                }
                5 => {
                    // A clone of a whole file into a new one.
                    let src = pick(&mut rng, &files);
                    let sid = m.paths[&src];
                    let (pp, pino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let name = format!("c{step}");
                    let p = join(&pp, &name);
                    let r = fs.create(
                        pino,
                        name.as_bytes(),
                        &NodeKind::File { size: 0 },
                        &meta(0o600, 9),
                    );
                    let ino = *r.as_ref().unwrap_or(&Ino(0));
                    m.add(p.clone(), desc('f', 0o600, 9), ino);
                    out.after(&m, r)?;
                    files.push(p.clone());
                    let id = m.paths[&p];
                    out.touch(&mut m, id);
                    if std::env::var("XFSKIT_CRASH_TRACE").is_ok() {
                        eprintln!(
                            "  clone {} ino {} -> {} ino {}",
                            String::from_utf8_lossy(&src),
                            m.inos[&sid].0,
                            String::from_utf8_lossy(&p),
                            ino.0
                        );
                    }
                    let r = fs.clone_range(m.inos[&sid], 0, ino, 0, 0);
                    let data = m.nodes[&sid].data.clone();
                    let cloned = !data.is_empty();
                    m.nodes.get_mut(&id).unwrap().data = data;
                    out.after(&m, r)?;
                    if cloned {
                        out.touch(&mut m, id);
                    }
                }
                6 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let size = m.nodes[&id].data.len() as u64;
                    let to = rng.below(size + 1);
                    if std::env::var("XFSKIT_CRASH_TRACE").is_ok() {
                        eprintln!(
                            "  truncate {} ino {} to {to} from {size}",
                            String::from_utf8_lossy(&p),
                            m.inos[&id].0
                        );
                    }
                    let r = fs.truncate(m.inos[&id], to);
                    m.nodes.get_mut(&id).unwrap().data.resize(to as usize, 0);
                    out.after(&m, r)?;
                    out.touch(&mut m, id);
                }
                7 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let size = m.nodes[&id].data.len() as u64;
                    let off = rng.below(size + 1);
                    let len = rng.below(20_000);
                    if std::env::var("XFSKIT_CRASH_TRACE").is_ok() {
                        eprintln!(
                            "  punch {} ino {} at {off} len {len} size {size}",
                            String::from_utf8_lossy(&p),
                            m.inos[&id].0
                        );
                    }
                    let r = fs.punch_hole(m.inos[&id], off, len);
                    let d = &mut m.nodes.get_mut(&id).unwrap().data;
                    let end = ((off + len) as usize).min(d.len());
                    if (off as usize) < end {
                        d[off as usize..end].fill(0);
                    }
                    out.after(&m, r)?;
                }
                8 => {
                    let i = rng.below(files.len() as u64) as usize;
                    let p = files.remove(i);
                    let (pp, name) = split(&p);
                    let r = fs.unlink(dir_ino(&dirs, &pp), &name);
                    let id = m.paths.remove(&p).unwrap();
                    out.after(&m, r)?;
                    out.touch(&mut m, id);
                }
                9 => {
                    let i = rng.below(files.len() as u64) as usize;
                    let p = files.remove(i);
                    let (pp, name) = split(&p);
                    let (dp, dino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let nn = format!("m{step}");
                    let r = fs.rename(dir_ino(&dirs, &pp), &name, dino, nn.as_bytes());
                    let id = m.paths.remove(&p).unwrap();
                    m.paths.insert(join(&dp, &nn), id);
                    out.after(&m, r)?;
                    files.push(join(&dp, &nn));
                }
                10 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let (dp, dino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let name = format!("h{step}");
                    let r = fs.link(dino, name.as_bytes(), m.inos[&id]);
                    m.paths.insert(join(&dp, &name), id);
                    out.after(&m, r)?;
                    out.touch(&mut m, id);
                    files.push(join(&dp, &name));
                }
                11 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let n = if rng.below(2) == 0 { 20 } else { 3000 };
                    let v = rng.bytes(n);
                    let name = format!("user.x{}", rng.below(3));
                    let r = fs.set_xattr(m.inos[&id], name.as_bytes(), &v);
                    m.nodes
                        .get_mut(&id)
                        .unwrap()
                        .xattrs
                        .insert(name.into_bytes(), v);
                    out.after(&m, r)?;
                    out.touch(&mut m, id);
                }
                12 if dirs.len() < 6 => {
                    let (pp, pino) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                    let name = format!("d{step}");
                    let r = fs.create(pino, name.as_bytes(), &NodeKind::Dir, &meta(0o750, 3));
                    let ino = *r.as_ref().unwrap_or(&Ino(0));
                    m.add(join(&pp, &name), desc('d', 0o750, 3), ino);
                    out.after(&m, r)?;
                    dirs.push((join(&pp, &name), ino));
                }
                13 => {
                    let p = pick(&mut rng, &files);
                    let id = m.paths[&p];
                    let r = fs.fsync(m.inos[&id]);
                    out.fsynced(&m, id, r)?;
                }
                14 => {
                    let r = fs.force_log();
                    out.durable_meta(r)?;
                }
                _ => {
                    if rng.below(3) == 0 {
                        let r = fs.sync();
                        out.durable(r)?;
                    } else {
                        fs.writeback()?;
                    }
                }
            }
        }
        Ok(())
    })();
    out
}

/// The random crash property: random workloads (one per seed), each cut
/// or torn at random writes; every crash recovered by the kernel and by
/// xfskit to a model state no earlier than the last durable point.
#[test]
fn random_workloads_crashed_at_random_writes() {
    random_crashes("crash-random", false, "XFSKIT_CRASH_SEEDS", 25);
}

/// The random workloads on filesystems with parent pointers (fewer seeds
/// by default: `XFSKIT_CRASH_PPTR_SEEDS` sets the last).
#[test]
fn random_workloads_with_parent_pointers_crashed_at_random_writes() {
    random_crashes("crash-random-pptr", true, "XFSKIT_CRASH_PPTR_SEEDS", 12);
}

fn random_crashes(tag: &str, pptr: bool, seeds_var: &str, default_seeds: u64) {
    if skip_unless_root(tag) || (pptr && skip_without_615(tag)) {
        return;
    }
    let s = Scratch::new(tag);
    let base = s.0.join("base");
    if pptr {
        mkfs_618(&base, 320 << 20, "");
    } else {
        mkfs_xfs(&base, 320 << 20, "");
    }
    let img = s.0.join("img");
    let seeds: u64 = std::env::var(seeds_var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_seeds);
    let mut pick = Rng(0x7a11_c0de);
    let mut crashes = 0;
    let first: u64 = std::env::var("XFSKIT_CRASH_FIRST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in first..=seeds {
        let dev = Arc::new(CrashDevice::new(&base, None, false));
        let fs = open(dev.clone()).unwrap();
        let full = random_workload(&fs, seed, 120);
        fs.sync().unwrap();
        assert_tree_eq(
            full.states.last().unwrap(),
            &walk_lib(&fs),
            &format!("seed {seed} without a crash"),
        );
        drop(fs);
        let total = dev.writes();
        for _ in 0..3 {
            let n = 1 + pick.below(total);
            let tear = pick.below(2) == 0;
            let dev = Arc::new(CrashDevice::new(&base, Some(n), tear));
            let fs = open(dev.clone())
                .unwrap_or_else(|e| panic!("seed {seed}: open failed at write {n}: {e}"));
            let got = random_workload(&fs, seed, 120);
            let finished = got.states.len() == full.states.len() && fs.sync().is_ok();
            drop(fs);
            if finished {
                continue;
            }
            crashes += 1;
            check_crash(
                &s.0,
                &base,
                &img,
                &dev,
                &got,
                &format!("seed {seed}, crash at write {n} of {total} (tear {tear})"),
            );
        }
    }
    // XFSKIT_CRASH_SEEDS is the last seed run, XFSKIT_CRASH_FIRST the first.
    let runs = seeds.saturating_sub(first) + 1;
    assert!(
        crashes >= runs as usize,
        "only {crashes} crashes in seeds {first} to {seeds}"
    );
    eprintln!("{tag}: {crashes} random crashes over seeds {first} to {seeds} recovered");
}

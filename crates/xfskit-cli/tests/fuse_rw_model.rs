//! A read-write `xfskit mount` against an in-memory model, and statfs
//! against the kernel's.
//!
//! The random test runs a seeded sequence of writes, truncates,
//! fallocates, hole punches, creates, links, unlinks, renames, mkdirs,
//! rmdirs and xattr changes through the mount, predicts every result
//! (errnos included) with a model, checks reads against it as it goes and
//! every file at the end, then unmounts: `xfs_repair -n` must be clean and
//! the kernel must show the tree the mount showed. `XFSKIT_SEED` and
//! `XFSKIT_OPS` pick another sequence. The statfs test compares what the
//! mount answers with what a kernel mount of the same image answers,
//! read-write and read-only. Needs root, /dev/fuse and xfsprogs; prints
//! SKIP otherwise.

mod common;

use common::rwmount::{err_of, errno, skip_rw as skip, RwMount};
use common::LoopMount;
use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

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

/// The model: paths of files (to an inode id) and directories, contents
/// and xattrs by inode id.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, usize>,
    dirs: Vec<String>,
    data: Vec<Vec<u8>>,
    xattrs: Vec<BTreeMap<String, Vec<u8>>>,
}

/// Largest offset the test writes at.
const SPAN: u64 = 3 << 20;

impl Model {
    fn pick_file(&self, r: &mut Rng) -> Option<(String, usize)> {
        if self.files.is_empty() {
            return None;
        }
        let i = r.below(self.files.len() as u64) as usize;
        self.files.iter().nth(i).map(|(k, v)| (k.clone(), *v))
    }
    fn pick_dir(&self, r: &mut Rng) -> String {
        self.dirs[r.below(self.dirs.len() as u64) as usize].clone()
    }
    fn new_name(&self, r: &mut Rng) -> String {
        let d = self.pick_dir(r);
        let n = format!("n{}", r.below(12));
        if d.is_empty() {
            n
        } else {
            format!("{d}/{n}")
        }
    }
    fn has_children(&self, d: &str) -> bool {
        let pre = format!("{d}/");
        self.files.keys().any(|k| k.starts_with(&pre))
            || self.dirs.iter().any(|k| k.starts_with(&pre))
    }
}

fn fallocate(p: &Path, mode: i32, off: u64, len: u64) -> i32 {
    let f = fs::OpenOptions::new().write(true).open(p).unwrap();
    // SAFETY: an open descriptor.
    errno(unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) } as i64)
}

fn check_read(m: &RwMount, path: &str, want: &[u8], off: u64, len: u64) {
    let f = fs::File::open(m.p(path)).unwrap();
    let mut buf = vec![0u8; len as usize];
    let n = f.read_at(&mut buf, off).unwrap();
    let end = (off as usize + len as usize)
        .min(want.len())
        .max(off as usize);
    let expect = want.get(off as usize..end).unwrap_or(&[]);
    assert_eq!(n, expect.len(), "read length of {path} at {off}");
    assert!(buf[..n] == *expect, "contents of {path} at {off}+{len}");
}

#[test]
fn random_operations_match_a_model() {
    if skip("random_operations_match_a_model") {
        return;
    }
    let seed: u64 = std::env::var("XFSKIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234);
    let ops: usize = std::env::var("XFSKIT_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2500);
    println!("seed {seed}, {ops} operations");
    let m = RwMount::new("model", 320, &[]);
    let mut r = Rng(seed | 1);
    let mut md = Model {
        dirs: vec![String::new()],
        ..Default::default()
    };
    for i in 0..ops {
        let what = r.below(100);
        let ctx = format!("op {i} (seed {seed})");
        match what {
            // write
            0..=24 => {
                let Some((path, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let off = r.below(SPAN);
                let cap = if r.below(4) == 0 { 300_000 } else { 9000 };
                let len = 1 + r.below(cap);
                let fill = (r.next() & 0xff) as u8;
                let bytes: Vec<u8> = (0..len).map(|k| fill.wrapping_add(k as u8)).collect();
                let f = fs::OpenOptions::new().write(true).open(m.p(&path)).unwrap();
                f.write_all_at(&bytes, off).unwrap();
                let d = &mut md.data[id];
                let end = (off + len) as usize;
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[off as usize..end].copy_from_slice(&bytes);
            }
            // truncate
            25..=31 => {
                let Some((path, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let size = r.below(SPAN);
                let f = fs::OpenOptions::new().write(true).open(m.p(&path)).unwrap();
                f.set_len(size).unwrap();
                md.data[id].resize(size as usize, 0);
            }
            // fallocate, punch, zero range
            32..=39 => {
                let Some((path, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let off = r.below(SPAN);
                let len = 1 + r.below(200_000);
                let (mode, zero, grow) = match r.below(4) {
                    0 => (0, false, true),
                    1 => (libc::FALLOC_FL_KEEP_SIZE, false, false),
                    2 => (
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        true,
                        false,
                    ),
                    _ => (libc::FALLOC_FL_ZERO_RANGE, true, true),
                };
                assert_eq!(
                    fallocate(&m.p(&path), mode, off, len),
                    0,
                    "{ctx}: fallocate {mode:#x}"
                );
                let d = &mut md.data[id];
                let end = (off + len) as usize;
                if zero {
                    let hi = end.min(d.len());
                    if (off as usize) < hi {
                        d[off as usize..hi].fill(0);
                    }
                }
                if grow && d.len() < end {
                    d.resize(end, 0);
                }
            }
            // read back
            40..=49 => {
                let Some((path, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let off = r.below(SPAN);
                let len = 1 + r.below(100_000);
                check_read(&m, &path, &md.data[id], off, len);
                let size = fs::metadata(m.p(&path)).unwrap().len();
                assert_eq!(size, md.data[id].len() as u64, "{ctx}: size of {path}");
            }
            // create (O_EXCL)
            50..=61 => {
                let path = md.new_name(&mut r);
                let got = err_of(
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(m.p(&path)),
                );
                let exists = md.files.contains_key(&path) || md.dirs.contains(&path);
                assert_eq!(
                    got,
                    if exists { libc::EEXIST } else { 0 },
                    "{ctx}: create {path}"
                );
                if !exists {
                    md.files.insert(path, md.data.len());
                    md.data.push(Vec::new());
                    md.xattrs.push(BTreeMap::new());
                }
            }
            // unlink
            62..=68 => {
                let path = md.new_name(&mut r);
                let got = err_of(fs::remove_file(m.p(&path)));
                let want = if md.files.remove(&path).is_some() {
                    0
                } else if md.dirs.contains(&path) {
                    libc::EISDIR
                } else {
                    libc::ENOENT
                };
                assert_eq!(got, want, "{ctx}: unlink {path}");
            }
            // exchange two files
            69..=71 => {
                let (Some((a, ia)), Some((b, ib))) = (md.pick_file(&mut r), md.pick_file(&mut r))
                else {
                    continue;
                };
                let (ca, cb) = (common::rwmount::c(&m.p(&a)), common::rwmount::c(&m.p(&b)));
                // SAFETY: valid path strings.
                let got = errno(unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        ca.as_ptr(),
                        libc::AT_FDCWD,
                        cb.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                } as i64);
                assert_eq!(got, 0, "{ctx}: exchange {a} {b}");
                md.files.insert(a, ib);
                md.files.insert(b, ia);
            }
            // rename a file
            72..=78 => {
                let Some((from, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let to = md.new_name(&mut r);
                let got = err_of(fs::rename(m.p(&from), m.p(&to)));
                // Onto an ancestor of the source the VFS says ENOTEMPTY
                // before it looks at the types.
                let want = if !md.dirs.contains(&to) {
                    0
                } else if from.starts_with(&format!("{to}/")) {
                    libc::ENOTEMPTY
                } else {
                    libc::EISDIR
                };
                assert_eq!(got, want, "{ctx}: rename {from} {to}");
                if want == 0 && md.files.get(&to) != Some(&id) {
                    md.files.remove(&from);
                    md.files.insert(to, id);
                }
            }
            // link
            79..=83 => {
                let Some((from, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let to = md.new_name(&mut r);
                let got = err_of(fs::hard_link(m.p(&from), m.p(&to)));
                let exists = md.files.contains_key(&to) || md.dirs.contains(&to);
                assert_eq!(
                    got,
                    if exists { libc::EEXIST } else { 0 },
                    "{ctx}: link {from} {to}"
                );
                if !exists {
                    md.files.insert(to, id);
                }
            }
            // mkdir / rmdir
            84..=91 => {
                let path = md.new_name(&mut r);
                if r.below(2) == 0 {
                    let got = err_of(fs::create_dir(m.p(&path)));
                    let exists = md.files.contains_key(&path) || md.dirs.contains(&path);
                    assert_eq!(
                        got,
                        if exists { libc::EEXIST } else { 0 },
                        "{ctx}: mkdir {path}"
                    );
                    if !exists && path.matches('/').count() < 3 {
                        md.dirs.push(path);
                    } else if !exists {
                        fs::remove_dir(m.p(&path)).unwrap();
                    }
                } else {
                    let got = err_of(fs::remove_dir(m.p(&path)));
                    let want = if md.files.contains_key(&path) {
                        libc::ENOTDIR
                    } else if !md.dirs.contains(&path) {
                        libc::ENOENT
                    } else if md.has_children(&path) {
                        libc::ENOTEMPTY
                    } else {
                        0
                    };
                    assert_eq!(got, want, "{ctx}: rmdir {path}");
                    if want == 0 {
                        md.dirs.retain(|d| d != &path);
                    }
                }
            }
            // xattrs
            _ => {
                let Some((path, id)) = md.pick_file(&mut r) else {
                    continue;
                };
                let name = format!("user.k{}", r.below(30));
                let cpath = common::rwmount::c(&m.p(&path));
                let cname = std::ffi::CString::new(name.clone()).unwrap();
                if r.below(3) == 0 {
                    // SAFETY: valid strings.
                    let got =
                        errno(unsafe { libc::removexattr(cpath.as_ptr(), cname.as_ptr()) } as i64);
                    let want = if md.xattrs[id].remove(&name).is_some() {
                        0
                    } else {
                        libc::ENODATA
                    };
                    assert_eq!(got, want, "{ctx}: removexattr {path} {name}");
                } else {
                    let cap = if r.below(5) == 0 { 5000 } else { 60 };
                    let len = r.below(cap) as usize;
                    let v: Vec<u8> = (0..len).map(|k| (k as u8) ^ (id as u8)).collect();
                    // SAFETY: valid strings and a live buffer.
                    let got = errno(unsafe {
                        libc::setxattr(
                            cpath.as_ptr(),
                            cname.as_ptr(),
                            v.as_ptr().cast(),
                            v.len(),
                            0,
                        )
                    } as i64);
                    assert_eq!(got, 0, "{ctx}: setxattr {path} {name}");
                    md.xattrs[id].insert(name, v);
                }
            }
        }
    }
    // Every file, whole, with its xattrs and link count.
    for (path, &id) in &md.files {
        let got = fs::read(m.p(path)).unwrap();
        assert!(got == md.data[id], "final contents of {path}");
        let links = md.files.values().filter(|&&v| v == id).count() as u64;
        assert_eq!(
            std::os::unix::fs::MetadataExt::nlink(&fs::metadata(m.p(path)).unwrap()),
            links,
            "links of {path}"
        );
        let got = common::hostwalk::read_xattrs(&m.p(path)).unwrap();
        let want: BTreeMap<Vec<u8>, Vec<u8>> = md.xattrs[id]
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
            .collect();
        assert_eq!(got, want, "xattrs of {path}");
    }
    println!(
        "{} files, {} directories at the end",
        md.files.len(),
        md.dirs.len()
    );
    m.finish();
}

/// (f_blocks, f_bfree, f_bavail, f_files, f_ffree) of a mounted directory.
fn statvfs(p: &Path) -> (u64, u64, u64, u64, u64) {
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let cp = common::rwmount::c(p);
    // SAFETY: a valid path and a live struct.
    assert_eq!(unsafe { libc::statvfs(cp.as_ptr(), &mut s) }, 0);
    (s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree)
}

fn statfs_case(tag: &str, mkfs: &[&str]) {
    let mut m = RwMount::new(tag, 400, mkfs);
    // Some files, a large one, some removed: free space and inodes move.
    for i in 0..300 {
        fs::write(m.p(&format!("f{i}")), vec![1u8; (i * 97) % 20_000]).unwrap();
    }
    fs::write(m.p("large"), vec![2u8; 30 << 20]).unwrap();
    for i in (0..300).step_by(3) {
        fs::remove_file(m.p(&format!("f{i}"))).unwrap();
    }
    // A removed file is freed when the kernel forgets its inode, a moment
    // after the unlink: wait until the counts stop moving.
    let mut fuse_rw = statvfs(&m.mnt);
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = statvfs(&m.mnt);
        if now == fuse_rw {
            break;
        }
        fuse_rw = now;
    }
    m.unmount();
    let kdir = m.dir.join("kernel-statfs");
    fs::create_dir_all(&kdir).unwrap();
    let img = m.image.to_str().unwrap().to_string();
    let st = Command::new("mount")
        .args(["-o", "loop", &img, kdir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success(), "kernel mount");
    let kernel_rw = statvfs(&kdir);
    common::must_umount(&kdir);
    assert_eq!(
        fuse_rw, kernel_rw,
        "{tag}: statfs read-write (blocks, bfree, bavail, files, ffree)"
    );
    m.mount(&["--read-only"]);
    let fuse_ro = statvfs(&m.mnt);
    m.unmount();
    let kernel_ro = {
        let k = LoopMount::new(&m.image, &kdir).unwrap();
        statvfs(k.path())
    };
    assert_eq!(fuse_ro, kernel_ro, "{tag}: statfs read-only");
    let (code, out) = common::repair_check(&m.image);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn statfs_matches_the_kernel() {
    if skip("statfs_matches_the_kernel") {
        return;
    }
    statfs_case("statfs-default", &[]);
    statfs_case("statfs-rmap", &["-m", "rmapbt=1", "-d", "agcount=5"]);
}

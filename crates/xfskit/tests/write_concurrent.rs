//! The write engine used from several threads at once: `Fs` is shared by
//! reference between scoped threads that each create many files (with
//! data and xattrs through `create_file`, some through `create` +
//! `write_at_opt`), hard links and a few directories. Some threads work in
//! directories of their own (which sit in different AGs), some share one
//! directory. After `sync` the image must pass `xfs_repair -n`, and
//! xfskit's reader (and, as root, the kernel) must find every name with
//! the contents it was given.

mod namespace_common;
mod write_common;

use namespace_common::meta;
use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino};

/// Contents of file `i` of thread `t`: mostly small, some spanning many
/// blocks.
fn data(t: usize, i: usize) -> Vec<u8> {
    // Every 15th file is large: the threads together pass the engine's
    // pending-data limit (32 MiB) several times, so background writebacks
    // run while they keep creating.
    let n = match i % 11 {
        _ if i % 15 == 7 => 300_000,
        0 => 0,
        1 => 1,
        2 => 4096,
        3 => 9000,
        _ => 100 + (i * 37) % 3000,
    };
    (0..n).map(|k| (k * 31 + i * 7 + t * 101) as u8).collect()
}

/// Xattrs of file `i` of thread `t`.
fn xattrs(t: usize, i: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    match i % 6 {
        0 => vec![(b"user.who".to_vec(), format!("t{t} f{i}").into_bytes())],
        3 => vec![
            (b"user.a".to_vec(), vec![b'a'; 50]),
            (b"trusted.big".to_vec(), vec![(i % 251) as u8; 2000]),
        ],
        _ => Vec::new(),
    }
}

/// Extended attributes: (name, value) pairs.
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// What one thread made: path -> (contents, xattrs), and link path -> path.
#[derive(Default)]
struct Made {
    files: BTreeMap<String, (Vec<u8>, Xattrs)>,
    links: Vec<(String, String)>,
    dirs: Vec<String>,
}

/// Thread `t`'s work: `n` files in `dir` (named `dir_name`), a hard link to
/// every 13th file, a subdirectory every 150 files that gets a few files
/// of its own; now and then everything pending is written back.
fn work(fs: &Fs, t: usize, dir: Ino, dir_name: &str, n: usize) -> Made {
    let mut m = Made::default();
    let mut sub: Option<(Ino, String)> = None;
    let mut inos = Vec::new();
    for i in 0..n {
        let (body, xs) = (data(t, i), xattrs(t, i));
        let (pdir, pname) = match (&sub, i % 3) {
            (Some((d, p)), 0) => (*d, p.clone()),
            _ => (dir, dir_name.to_string()),
        };
        let name = format!("t{t}-file-{i}");
        let ino = if i % 4 == 1 {
            let kind = NodeKind::File {
                size: body.len() as u64,
            };
            let ino = fs
                .create(pdir, name.as_bytes(), &kind, &meta(0o644, 0))
                .unwrap();
            if !body.is_empty() {
                fs.write_at_opt(ino, 0, &body, false).unwrap();
            }
            for (k, v) in &xs {
                fs.set_xattr_opt(ino, k, v, false).unwrap();
            }
            ino
        } else {
            let xr: Vec<(&[u8], &[u8])> = xs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            fs.create_file(pdir, name.as_bytes(), &meta(0o644, 0), &body, &xr)
                .unwrap()
        };
        let path = format!("{pname}/{name}");
        inos.push((ino, path.clone()));
        m.files.insert(path, (body, xs));
        if i % 13 == 5 {
            // A link in the thread's own directory to an earlier file.
            let (target, tpath) = inos[i / 2].clone();
            let lname = format!("t{t}-link-{i}");
            fs.link(dir, lname.as_bytes(), target).unwrap();
            m.links.push((format!("{dir_name}/{lname}"), tpath));
        }
        if i % 400 == 200 + 50 * t {
            // Pending metadata and data go out while others keep writing.
            fs.writeback().unwrap();
        }
        if i % 150 == 149 {
            let dname = format!("t{t}-sub-{i}");
            let d = fs
                .create(dir, dname.as_bytes(), &NodeKind::Dir, &meta(0o755, 0))
                .unwrap();
            let p = format!("{dir_name}/{dname}");
            m.dirs.push(p.clone());
            sub = Some((d, p));
        }
    }
    m
}

fn run_threads(tag: &str, opts: &str, threads: usize, shared: usize, n: usize) {
    let s = Scratch::new(tag);
    let img = s.0.join("c.img");
    mkfs_xfs(&img, 1 << 30, opts);
    let fs = open_rw(&img);
    assert!(fs.geometry().ag_count >= 4, "the test wants 4+ AGs");
    let root = fs.geometry().root_ino;
    // Own directories (rotated across AGs) plus one shared directory.
    let mut dirs = Vec::new();
    for t in 0..threads {
        let name = format!("own{t}");
        let d = fs
            .create(root, name.as_bytes(), &NodeKind::Dir, &meta(0o755, 0))
            .unwrap();
        dirs.push((d, name));
    }
    let common = fs
        .create(root, b"common", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    let ags: std::collections::BTreeSet<u32> = dirs
        .iter()
        .map(|(d, _)| fs.geometry().ino_agno(*d).0)
        .collect();
    assert!(ags.len() >= 2, "own directories all in one AG: {ags:?}");
    let made: Vec<Made> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (fs, dirs) = (&fs, &dirs);
                sc.spawn(move || {
                    if t < shared {
                        work(fs, t, common, "common", n)
                    } else {
                        work(fs, t, dirs[t].0, &dirs[t].1, n)
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    verify_engine(&img, &made);
    with_kernel_mount(&img, |mnt| verify_kernel(mnt, &made));
}

fn verify_engine(img: &Path, made: &[Made]) {
    let fs = Fs::open(img, &xfskit::OpenOptions::default()).unwrap();
    for m in made {
        for d in &m.dirs {
            let ip = fs.lookup_path(format!("/{d}").as_bytes()).unwrap();
            assert_eq!(ip.mode & 0o170000, 0o040000, "{d} is not a directory");
        }
        for (p, (body, xs)) in &m.files {
            let ip = fs.lookup_path(format!("/{p}").as_bytes()).unwrap();
            assert_eq!(ip.size, body.len() as u64, "{p} size");
            let mut b = vec![0u8; body.len()];
            let got = xfskit::inode::read_at(&fs, &ip, 0, &mut b).unwrap();
            assert_eq!(got, b.len(), "{p} short read");
            assert!(b == *body, "{p} contents differ");
            let have: BTreeMap<Vec<u8>, Vec<u8>> = xfskit::attr::list(&fs, &ip)
                .unwrap()
                .into_iter()
                .map(|x| (x.full_name(), x.value))
                .collect();
            let want: BTreeMap<Vec<u8>, Vec<u8>> = xs.iter().cloned().collect();
            assert_eq!(have, want, "{p} xattrs");
        }
        for (l, p) in &m.links {
            let a = fs.lookup_path(format!("/{l}").as_bytes()).unwrap();
            let b = fs.lookup_path(format!("/{p}").as_bytes()).unwrap();
            assert_eq!(a.ino, b.ino, "{l} is not a link to {p}");
            assert_eq!(a.nlink, 2, "{l} nlink");
        }
    }
}

fn verify_kernel(mnt: &Path, made: &[Made]) {
    use std::os::unix::fs::MetadataExt;
    for m in made {
        for (p, (body, _)) in &m.files {
            let got = std::fs::read(mnt.join(p)).unwrap();
            assert!(got == *body, "kernel reads {p} differently");
        }
        for (l, p) in &m.links {
            let a = std::fs::metadata(mnt.join(l)).unwrap();
            let b = std::fs::metadata(mnt.join(p)).unwrap();
            assert_eq!(a.ino(), b.ino(), "kernel: {l} vs {p}");
        }
        for d in &m.dirs {
            assert!(mnt.join(d).is_dir(), "kernel: {d}");
        }
    }
}

#[test]
fn four_threads_own_directories() {
    run_threads("own4", "-d agcount=4", 4, 0, 1200);
}

#[test]
fn four_threads_two_share_a_directory() {
    run_threads("mix4", "-d agcount=8", 4, 2, 1200);
}

#[test]
fn three_threads_share_one_directory_small_blocks() {
    run_threads("all3", "-d agcount=4 -b size=1024 -n size=8192", 3, 3, 900);
}

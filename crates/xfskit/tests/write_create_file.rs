//! `Fs::create_file` (a file created with its data and xattrs in one
//! transaction) and `Fs::create_files` / `create_files_owned` (several of
//! one directory in one transaction) must give what `create` + `write_at_opt` + `set_xattr_opt`
//! give (with data in vectors of their own or in one shared buffer): the same image is built each way (fixed time, seeded
//! generations) and compared inode by inode through xfskit's reader; the
//! one-transaction image must pass `xfs_repair -n`, and (as root) the
//! kernel must read back every file's data. Directories grow through the
//! block, leaf and node forms on the way (the directory fast paths).

mod write_common;

use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::build::{Meta, NodeKind};
use xfskit::dev::aligned::{SharedBuf, SharedBytes};
use xfskit::dev::FileData;
use xfskit::inode::Timestamp;
use xfskit::namespace::{NewFile, NewFileOwned};
use xfskit::{Error, Fs, Ino};

const SIZES: [usize; 9] = [0, 1, 100, 4095, 4096, 4097, 12_293, 70_000, 1_500_000];

fn meta(mode: u16) -> Meta {
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 5,
    };
    Meta {
        mode,
        uid: 1000,
        gid: 100,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

/// The contents of file `i`.
fn data(i: usize) -> Vec<u8> {
    let n = if i % 97 == 50 { SIZES[8] } else { SIZES[i % 8] };
    (0..n).map(|k| (k * 7 + i * 13) as u8).collect()
}

/// The xattrs of file `i`.
fn xattrs(i: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    match i % 5 {
        0 => vec![(b"user.tag".to_vec(), format!("file {i}").into_bytes())],
        1 => vec![
            (b"user.a".to_vec(), vec![b'a'; 40]),
            (b"trusted.big".to_vec(), vec![(i % 251) as u8; 3000]),
        ],
        _ => Vec::new(),
    }
}

/// How the files are made.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// create + write_at_opt + set_xattr_opt.
    Separate,
    /// create_file, one file per call.
    One,
    /// create_files, runs of up to 7 files of one directory per call.
    Batch,
}

/// Builds `files` files over `dirs` directories, one way or another.
fn build(img: &Path, opts: &str, files: usize, dirs: usize, way: Way) -> Vec<(Vec<u8>, Ino)> {
    mkfs_xfs(img, 512 << 20, opts);
    let fs = open_rw(img);
    fs.set_fixed_time(Some(Timestamp {
        sec: 1_700_000_100,
        nsec: 0,
    }))
    .unwrap();
    fs.seed_generations(42).unwrap();
    let root = fs.geometry().root_ino;
    let d: Vec<Ino> = (0..dirs)
        .map(|k| {
            fs.create(
                root,
                format!("d{k}").as_bytes(),
                &NodeKind::Dir,
                &meta(0o755),
            )
            .unwrap()
        })
        .collect();
    let mut out = Vec::new();
    if way == Way::Batch {
        // File i goes to directory i % dirs, as in the other ways; each
        // directory's files are made in runs.
        for (k, &dir) in d.iter().enumerate() {
            let mine: Vec<usize> = (0..files).filter(|i| i % dirs == k).collect();
            for (r, run) in mine.chunks(7).enumerate() {
                let names: Vec<Vec<u8>> = run
                    .iter()
                    .map(|i| format!("file-number-{i}").into_bytes())
                    .collect();
                let bodies: Vec<Vec<u8>> = run.iter().map(|&i| data(i)).collect();
                let xs: Vec<Vec<(Vec<u8>, Vec<u8>)>> = run.iter().map(|&i| xattrs(i)).collect();
                let xr: Vec<Vec<(&[u8], &[u8])>> = xs
                    .iter()
                    .map(|x| x.iter().map(|(n, v)| (&n[..], &v[..])).collect())
                    .collect();
                let m = meta(0o640);
                let batch: Vec<NewFile<'_>> = (0..run.len())
                    .map(|j| NewFile {
                        name: &names[j],
                        meta: &m,
                        data: &bodies[j],
                        xattrs: &xr[j],
                    })
                    .collect();
                // Every other run hands its data over (create_files_owned);
                // every fourth, as pieces of one shared buffer, each at a
                // 4 KiB boundary with zeros to the next (as a tar build
                // does).
                let inos = if r % 4 == 3 {
                    let slots: Vec<usize> = bodies
                        .iter()
                        .map(|b| b.len().next_multiple_of(4096))
                        .collect();
                    let mut area =
                        xfskit::dev::AlignedBuf::with_capacity(slots.iter().sum::<usize>().max(1));
                    let mut at = Vec::new();
                    for (b, slot) in bodies.iter().zip(&slots) {
                        at.push(area.len());
                        assert!(area.extend_from_slice(b));
                        assert!(area.extend_from_slice(&vec![0; slot - b.len()]));
                    }
                    let shared = SharedBuf::new(area);
                    let owned: Vec<NewFileOwned> = (0..run.len())
                        .map(|j| {
                            let n = bodies[j].len();
                            let piece = SharedBytes::new(shared.clone(), at[j], n, slots[j] - n)
                                .expect("a piece inside the buffer, zeros after it");
                            NewFileOwned {
                                name: names[j].clone(),
                                meta: m.clone(),
                                data: FileData::Shared(piece),
                                xattrs: xs[j].clone(),
                            }
                        })
                        .collect();
                    drop(shared);
                    fs.create_files_owned(dir, owned).unwrap()
                } else if r % 2 == 1 {
                    let owned: Vec<NewFileOwned> = (0..run.len())
                        .map(|j| NewFileOwned {
                            name: names[j].clone(),
                            meta: m.clone(),
                            data: bodies[j].clone().into(),
                            xattrs: xs[j].clone(),
                        })
                        .collect();
                    fs.create_files_owned(dir, owned).unwrap()
                } else {
                    fs.create_files(dir, &batch).unwrap()
                };
                assert_eq!(inos.len(), run.len());
                for (j, ino) in inos.into_iter().enumerate() {
                    let mut path = format!("/d{k}/").into_bytes();
                    path.extend_from_slice(&names[j]);
                    out.push((run[j], path, ino));
                }
            }
        }
        out.sort();
        let mut out: Vec<(Vec<u8>, Ino)> = out.into_iter().map(|(_, p, i)| (p, i)).collect();
        // A batch with a name that exists fails whole: none of its files
        // is made, and the image stays valid.
        let m = meta(0o600);
        let batch = [
            NewFile {
                name: b"batch-new-1",
                meta: &m,
                data: b"one",
                xattrs: &[],
            },
            NewFile {
                name: b"file-number-0",
                meta: &m,
                data: b"x",
                xattrs: &[],
            },
            NewFile {
                name: b"batch-new-2",
                meta: &m,
                data: b"two",
                xattrs: &[],
            },
        ];
        let r = fs.create_files(d[0], &batch);
        assert!(matches!(r, Err(Error::Exists(_))), "{r:?}");
        for n in ["/d0/batch-new-1", "/d0/batch-new-2"] {
            assert!(
                fs.lookup_path(n.as_bytes()).is_err(),
                "{n} exists after a failed batch"
            );
        }
        fs.sync().unwrap();
        out.shrink_to_fit();
        return out;
    }
    let mut out = Vec::new();
    for i in 0..files {
        let name = format!("file-number-{i}").into_bytes();
        let (body, xs) = (data(i), xattrs(i));
        let ino = if way == Way::One {
            let xr: Vec<(&[u8], &[u8])> = xs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            fs.create_file(d[i % dirs], &name, &meta(0o640), &body, &xr)
                .unwrap()
        } else {
            let kind = NodeKind::File {
                size: body.len() as u64,
            };
            let ino = fs.create(d[i % dirs], &name, &kind, &meta(0o640)).unwrap();
            fs.write_at_opt(ino, 0, &body, false).unwrap();
            for (n, v) in &xs {
                fs.set_xattr_opt(ino, n, v, false).unwrap();
            }
            ino
        };
        let mut path = format!("/d{}/", i % dirs).into_bytes();
        path.extend_from_slice(&name);
        out.push((path, ino));
    }
    if way == Way::One {
        // An existing name is refused and changes nothing.
        let r = fs.create_file(d[0], b"file-number-0", &meta(0o600), b"x", &[]);
        assert!(matches!(r, Err(Error::Exists(_))), "{r:?}");
    }
    fs.sync().unwrap();
    out
}

/// What the reader sees of one file.
fn describe(fs: &Fs, ino: Ino) -> (String, Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let ip = fs.inode(ino).unwrap();
    let mut b = vec![0u8; ip.size as usize];
    let n = xfskit::inode::read_at(fs, &ip, 0, &mut b).unwrap();
    assert_eq!(n, b.len(), "short read of inode {}", ino.0);
    let x = xfskit::attr::list(fs, &ip)
        .unwrap()
        .into_iter()
        .map(|x| (x.full_name(), x.value))
        .collect();
    let fields = format!(
        "mode {:o} uid {} gid {} nlink {} size {} nblocks {} times {:?} {:?} {:?} {:?}",
        ip.mode,
        ip.uid,
        ip.gid,
        ip.nlink,
        ip.size,
        ip.nblocks,
        ip.atime,
        ip.mtime,
        ip.ctime,
        ip.crtime
    );
    (fields, b, x)
}

fn check(tag: &str, opts: &str, files: usize, dirs: usize) {
    check_way(tag, opts, files, dirs, Way::One);
}

fn check_way(tag: &str, opts: &str, files: usize, dirs: usize, way: Way) {
    let s = Scratch::new(tag);
    let (a, b) = (s.0.join("fast.img"), s.0.join("slow.img"));
    let fast = build(&a, opts, files, dirs, way);
    let slow = build(&b, opts, files, dirs, Way::Separate);
    assert_repair_clean(&a);
    assert_repair_clean(&b);
    let o = xfskit::OpenOptions::default();
    let (fa, fb) = (Fs::open(&a, &o).unwrap(), Fs::open(&b, &o).unwrap());
    for ((pa, ia), (pb, ib)) in fast.iter().zip(&slow) {
        assert_eq!(pa, pb);
        let found = fa.lookup_path(pa).unwrap();
        assert_eq!(found.ino, *ia, "{}", String::from_utf8_lossy(pa));
        if way == Way::One {
            // Made in the same order: the same inodes.
            assert_eq!(ia, ib, "{}", String::from_utf8_lossy(pa));
        }
        let (da, db) = (describe(&fa, *ia), describe(&fb, *ib));
        assert_eq!(da, db, "{} differs", String::from_utf8_lossy(pa));
        let i: usize = String::from_utf8_lossy(pa)
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(da.1, data(i), "{} contents", String::from_utf8_lossy(pa));
    }
    with_kernel_mount(&a, |m| {
        for (p, _) in &fast {
            let rel = String::from_utf8_lossy(&p[1..]).into_owned();
            let got = std::fs::read(m.join(&rel)).unwrap();
            let i: usize = rel.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(got, data(i), "kernel reads {rel}");
        }
    });
}

#[test]
fn create_file_matches_separate_calls_4k() {
    check("cf4k", "", 1500, 2);
}

#[test]
fn create_file_matches_separate_calls_small_blocks() {
    check("cf1k", "-b size=1024 -n size=8192 -i size=512", 900, 3);
}

#[test]
fn create_file_large_inodes() {
    check("cf2k", "-i size=2048", 300, 1);
}

#[test]
fn create_files_matches_separate_calls_4k() {
    check_way("cb4k", "", 1500, 2, Way::Batch);
}

#[test]
fn create_files_matches_separate_calls_small_blocks_rmapbt() {
    check_way(
        "cb1k",
        "-b size=1024 -n size=8192 -m rmapbt=1",
        900,
        3,
        Way::Batch,
    );
}

/// With `keep_dir_times` on, adding entries (create, a batch, a link, a
/// subdirectory) leaves the directory's times as it was made; off, each
/// addition stamps the change time.
#[test]
fn keep_dir_times_leaves_directories_alone() {
    let s = Scratch::new("keeptimes");
    let img = s.0.join("img");
    mkfs_xfs(&img, 300 << 20, "");
    let fs = open_rw(&img);
    let now = Timestamp {
        sec: 1_800_000_000,
        nsec: 0,
    };
    fs.set_fixed_time(Some(now)).unwrap();
    let root = fs.geometry().root_ino;
    for keep in [true, false] {
        fs.keep_dir_times(keep).unwrap();
        assert_eq!(fs.keeps_dir_times(), keep);
        let name = format!("d{keep}");
        let d = fs
            .create(root, name.as_bytes(), &NodeKind::Dir, &meta(0o40755))
            .unwrap();
        let f = fs
            .create(d, b"a", &NodeKind::File { size: 0 }, &meta(0o100644))
            .unwrap();
        let m = meta(0o100644);
        let batch: Vec<NewFile<'_>> = (0..3)
            .map(|i| NewFile {
                name: [b"b", b"c", b"e"][i],
                meta: &m,
                data: b"xyz",
                xattrs: &[],
            })
            .collect();
        fs.create_files(d, &batch).unwrap();
        fs.link(d, b"l", f).unwrap();
        fs.create(d, b"sub", &NodeKind::Dir, &meta(0o40755))
            .unwrap();
        let ip = fs.inode(d).unwrap();
        let want = if keep { meta(0).mtime } else { now };
        assert_eq!((ip.mtime, ip.ctime), (want, want), "keep_dir_times {keep}");
        assert_eq!(ip.nlink, 3);
    }
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

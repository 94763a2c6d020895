//! dir::write on fresh mkfs.xfs images: a directory grows through every
//! format (short form, block, leaf, node) and shrinks back in a scrambled
//! order; at each checkpoint the image passes `xfs_repair -n`, our reader
//! lists exactly the expected names, and (as root) so does the kernel.

mod write_common;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use write_common::*;
use xfskit::dir::write as dw;
use xfskit::inode::{ForkFormat, Inode};
use xfskit::{Fs, Ino};

/// Files the entries point to (each also linked once from the root).
const FILES: usize = 4;

struct Setup {
    dir: Ino,
    files: Vec<Ino>,
}

fn setup(fs: &Fs) -> Setup {
    let geo = fs.geometry();
    let root_ino = geo.root_ino;
    let mut tp = fs.trans().unwrap();
    let mut root = tp.read_inode(root_ino).unwrap();
    let d = xfskit::ialloc::alloc_inode(&mut tp, root_ino, 0o40755).unwrap();
    let mut dp = Inode::new(geo, d, 0o40755, 1).unwrap();
    dw::init(&mut tp, &mut dp, root_ino).unwrap();
    dp.nlink = 2;
    dw::add(&mut tp, &mut root, b"d", d, 2).unwrap();
    root.nlink += 1;
    tp.log_inode(&dp).unwrap();
    let mut files = Vec::new();
    for i in 0..FILES {
        let f = xfskit::ialloc::alloc_inode(&mut tp, root_ino, 0o100644).unwrap();
        let ip = Inode::new(geo, f, 0o100644, 1).unwrap();
        tp.log_inode(&ip).unwrap();
        dw::add(&mut tp, &mut root, format!("base{i}").as_bytes(), f, 1).unwrap();
        files.push(f);
    }
    tp.log_inode(&root).unwrap();
    tp.commit().unwrap();
    Setup { dir: d, files }
}

fn entry_name(i: usize) -> Vec<u8> {
    // Lengths 1..=60, distinct.
    let mut s = format!("{i:x}.");
    let len = 1 + (i * 37) % 60;
    while s.len() < len {
        s.push((b'a' + (i % 26) as u8) as char);
    }
    s.into_bytes()
}

fn form(fs: &Fs, dp: &Inode) -> &'static str {
    if dp.format == ForkFormat::Local {
        return "short";
    }
    let geo = fs.geometry();
    let map = xfskit::inode::extents(fs, dp, xfskit::inode::Fork::Data).unwrap();
    let leaf_lblk = (32u64 << 30) >> geo.block_log;
    let free_lblk = (64u64 << 30) >> geo.block_log;
    let has = |a: u64| map.iter().any(|e| e.offset <= a && a < e.offset + e.len);
    let tree = if dp.format == ForkFormat::Btree {
        "btree"
    } else {
        "node"
    };
    if has(free_lblk) {
        tree
    } else if has(leaf_lblk) {
        "leaf"
    } else {
        "block"
    }
}

/// Syncs and checks the image against `want` (name -> file index).
fn checkpoint(
    fs: &Fs,
    img: &std::path::Path,
    s: &Setup,
    want: &BTreeMap<Vec<u8>, usize>,
) -> &'static str {
    // Each file: one root link plus its entries in the directory.
    let mut tp = fs.trans().unwrap();
    for (k, &f) in s.files.iter().enumerate() {
        let mut ip = tp.read_inode(f).unwrap();
        ip.nlink = 1 + want.values().filter(|&&v| v == k).count() as u32;
        tp.log_inode(&ip).unwrap();
    }
    tp.commit().unwrap();
    fs.sync().unwrap();
    assert_repair_clean(img);
    let dp = fs.inode(s.dir).unwrap();
    let ours: BTreeMap<Vec<u8>, usize> = xfskit::dir::read_dir(fs, &dp)
        .unwrap()
        .into_iter()
        .map(|e| {
            let k = s
                .files
                .iter()
                .position(|&f| f == e.ino)
                .expect("entry points to a known file");
            (e.name, k)
        })
        .collect();
    assert_eq!(&ours, want, "our reader");
    for (n, &k) in want.iter().take(50) {
        assert_eq!(xfskit::dir::lookup(fs, &dp, n).unwrap(), Some(s.files[k]));
    }
    with_kernel_mount(img, |mnt| {
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(mnt.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .collect();
        names.sort();
        let w: Vec<Vec<u8>> = want.keys().cloned().collect();
        assert_eq!(names, w, "kernel listing");
    });
    form(fs, &dp)
}

fn grow_and_shrink(tag: &str, opts: &str, checkpoints: &[usize], expect: &[&str]) {
    let sc = Scratch::new(tag);
    let img = sc.0.join("fs.img");
    mkfs_xfs(&img, 1 << 30, opts);
    let fs = open_rw(&img);
    let s = setup(&fs);
    let n = *checkpoints.last().unwrap();
    let mut want: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    let mut seen: Vec<&'static str> = vec![checkpoint(&fs, &img, &s, &want)];
    for i in 0..n {
        let mut tp = fs.trans().unwrap();
        let mut dp = tp.read_inode(s.dir).unwrap();
        let nm = entry_name(i);
        dw::add(&mut tp, &mut dp, &nm, s.files[i % FILES], 1).unwrap();
        tp.log_inode(&dp).unwrap();
        tp.commit().unwrap();
        want.insert(nm, i % FILES);
        if checkpoints.contains(&(i + 1)) {
            let f = checkpoint(&fs, &img, &s, &want);
            if seen.last() != Some(&f) {
                seen.push(f);
            }
        }
    }
    eprintln!("{tag}: grew through {seen:?}");
    assert_eq!(seen, expect, "formats on the way up");
    // Remove in a scrambled order.
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut down = vec![];
    for (k, &i) in order.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        let mut dp = tp.read_inode(s.dir).unwrap();
        let nm = entry_name(i);
        let got = dw::remove(&mut tp, &mut dp, &nm).unwrap();
        assert_eq!(got, s.files[i % FILES]);
        tp.log_inode(&dp).unwrap();
        tp.commit().unwrap();
        want.remove(&nm);
        let left = n - k - 1;
        if left == 0 || checkpoints.contains(&left) {
            let f = checkpoint(&fs, &img, &s, &want);
            if down.last() != Some(&f) {
                down.push(f);
            }
        }
    }
    eprintln!("{tag}: shrank through {down:?}");
    assert_eq!(down.last(), Some(&"short"));
    let mut tp = fs.trans().unwrap();
    let dp = tp.read_inode(s.dir).unwrap();
    assert!(dw::is_empty(&mut tp, &dp).unwrap());
}

#[test]
fn dir_4k_blocks() {
    grow_and_shrink(
        "4k",
        "-b size=4096 -n size=4096",
        &[5, 60, 300, 1500, 4000],
        &["short", "block", "leaf", "node"],
    );
}

#[test]
fn dir_1k_blocks_8k_dirs() {
    grow_and_shrink(
        "1k8k",
        "-b size=1024 -n size=8192",
        &[5, 30, 250, 1300, 5000],
        &["short", "block", "leaf", "node"],
    );
}

#[test]
fn dir_1k_blocks_64k_dirs() {
    grow_and_shrink(
        "1k64k",
        "-b size=1024 -n size=65536",
        &[5, 30, 1200, 3000, 12000],
        &["short", "block", "leaf", "node"],
    );
}

/// Two directories growing in turn get interleaved blocks, so their
/// forks outgrow the inode and become bmbt btrees ("btree" form); then
/// "..", replace and removal of everything.
#[test]
fn dir_btree_form_interleaved() {
    let sc = Scratch::new("btree");
    let img = sc.0.join("fs.img");
    mkfs_xfs(&img, 1 << 30, "-b size=4096 -n size=4096");
    let fs = open_rw(&img);
    let a = setup(&fs);
    // A second directory under the root, entries to the same files.
    let mut tp = fs.trans().unwrap();
    let root_ino = fs.geometry().root_ino;
    let mut root = tp.read_inode(root_ino).unwrap();
    let d2 = xfskit::ialloc::alloc_inode(&mut tp, root_ino, 0o40755).unwrap();
    let mut dp2 = Inode::new(fs.geometry(), d2, 0o40755, 1).unwrap();
    dw::init(&mut tp, &mut dp2, root_ino).unwrap();
    dp2.nlink = 2;
    dw::add(&mut tp, &mut root, b"e", d2, 2).unwrap();
    root.nlink += 1;
    tp.log_inode(&dp2).unwrap();
    tp.log_inode(&root).unwrap();
    tp.commit().unwrap();
    let b = Setup {
        dir: d2,
        files: a.files.clone(),
    };
    let n = 6000;
    let mut want = BTreeMap::new();
    for i in 0..n {
        for s in [&a, &b] {
            let mut tp = fs.trans().unwrap();
            let mut dp = tp.read_inode(s.dir).unwrap();
            dw::add(&mut tp, &mut dp, &entry_name(i), s.files[i % FILES], 1).unwrap();
            tp.log_inode(&dp).unwrap();
            tp.commit().unwrap();
        }
        want.insert(entry_name(i), i % FILES);
    }
    // Both directories point at the files: count their links twice.
    let both = |w: &BTreeMap<Vec<u8>, usize>| {
        let mut tp = fs.trans().unwrap();
        for (k, &f) in a.files.iter().enumerate() {
            let mut ip = tp.read_inode(f).unwrap();
            ip.nlink = 1 + 2 * w.values().filter(|&&v| v == k).count() as u32;
            tp.log_inode(&ip).unwrap();
        }
        tp.commit().unwrap();
    };
    both(&want);
    fs.sync().unwrap();
    assert_repair_clean(&img);
    let fa = form(&fs, &fs.inode(a.dir).unwrap());
    let fb = form(&fs, &fs.inode(b.dir).unwrap());
    eprintln!("interleaved: {fa} {fb}");
    assert_eq!((fa, fb), ("btree", "btree"));
    // Replace an entry and "..", check, put them back.
    let mut tp = fs.trans().unwrap();
    let mut dp = tp.read_inode(a.dir).unwrap();
    let nm = entry_name(77);
    assert_eq!(
        dw::replace(&mut tp, &mut dp, &nm, a.files[0], 1).unwrap(),
        a.files[77 % FILES]
    );
    assert_eq!(
        dw::lookup(&mut tp, &dp, &nm).unwrap(),
        Some((a.files[0], 1))
    );
    assert_eq!(
        dw::replace(&mut tp, &mut dp, b"..", d2, 2).unwrap(),
        root_ino
    );
    assert_eq!(dw::lookup(&mut tp, &dp, b"..").unwrap(), Some((d2, 2)));
    dw::replace(&mut tp, &mut dp, b"..", root_ino, 2).unwrap();
    dw::replace(&mut tp, &mut dp, &nm, a.files[77 % FILES], 1).unwrap();
    assert!(!dw::is_empty(&mut tp, &dp).unwrap());
    assert!(matches!(
        dw::add(&mut tp, &mut dp, &nm, a.files[0], 1),
        Err(xfskit::Error::Exists(_))
    ));
    tp.log_inode(&dp).unwrap();
    tp.commit().unwrap();
    // Remove everything from both, checking at a few points.
    let keys: Vec<Vec<u8>> = want.keys().cloned().collect();
    for (k, nm) in keys.iter().enumerate() {
        for s in [&a, &b] {
            let mut tp = fs.trans().unwrap();
            let mut dp = tp.read_inode(s.dir).unwrap();
            dw::remove(&mut tp, &mut dp, nm).unwrap();
            tp.log_inode(&dp).unwrap();
            tp.commit().unwrap();
        }
        want.remove(nm);
        if [3000, 500, 0].contains(&(n - k - 1)) {
            both(&want);
            fs.sync().unwrap();
            assert_repair_clean(&img);
            for s in [&a, &b] {
                let dp = fs.inode(s.dir).unwrap();
                let got: Vec<Vec<u8>> = xfskit::dir::read_dir(&fs, &dp)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.name)
                    .collect();
                assert_eq!(got.len(), want.len());
                assert!(got.iter().all(|g| want.contains_key(g)));
            }
        }
    }
    assert_eq!(form(&fs, &fs.inode(a.dir).unwrap()), "short");
    with_kernel_mount(&img, |mnt| {
        assert_eq!(std::fs::read_dir(mnt.join("d")).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(mnt.join("e")).unwrap().count(), 0);
    });
}

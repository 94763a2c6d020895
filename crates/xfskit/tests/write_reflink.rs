//! Shared blocks (reflink, on by default in mkfs.xfs): files the kernel
//! cloned, and clones made by xfskit, stay correct through xfskit's
//! writes, truncates, punches and unlinks. A write to a shared block goes
//! to new blocks (copy-on-write) and leaves the other files as they were;
//! freeing a shared extent only drops its owner count. Checked with
//! `xfs_repair -n` (which rebuilds the reference counts from every file)
//! and by reading every file back through a kernel mount.

mod namespace_common;
mod write_common;

use namespace_common::*;
use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino};

/// What each file of the root directory must hold.
type Model = BTreeMap<String, Vec<u8>>;

fn ino_of(fs: &Fs, name: &str) -> Ino {
    fs.lookup_path(format!("/{name}").as_bytes()).unwrap().ino
}

fn read_lib(fs: &Fs, name: &str) -> Vec<u8> {
    let ip = fs.lookup_path(format!("/{name}").as_bytes()).unwrap();
    let mut buf = vec![0u8; ip.size as usize];
    let n = xfskit::inode::read_at(fs, &ip, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn write(fs: &Fs, m: &mut Model, name: &str, off: usize, data: &[u8]) {
    fs.write_at(ino_of(fs, name), off as u64, data).unwrap();
    let f = m.get_mut(name).unwrap();
    if f.len() < off + data.len() {
        f.resize(off + data.len(), 0);
    }
    f[off..off + data.len()].copy_from_slice(data);
}

fn check_all(fs: &Fs, m: &Model, when: &str) {
    if let (true, Ok(mut tp)) = (std::env::var("XFSKIT_DEBUG_REFC").is_ok(), fs.trans()) {
        for ag in 0..fs.geometry().ag_count {
            let r = xfskit::alloc::ag_refcount_records(&mut tp, xfskit::geometry::AgNumber(ag))
                .unwrap();
            eprintln!("{when}: AG {ag}: {r:?}");
        }
    }
    for (name, want) in m {
        let got = read_lib(fs, name);
        assert!(got == *want, "{when}: /{name} differs (xfskit read)");
    }
}

fn check_kernel(img: &Path, m: &Model) {
    with_kernel_mount(img, |mnt| {
        for (name, want) in m {
            let got = std::fs::read(mnt.join(name)).unwrap();
            assert!(got == *want, "/{name} differs through the kernel");
        }
        let mut names: Vec<String> = std::fs::read_dir(mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let want: Vec<String> = m.keys().cloned().collect();
        assert_eq!(names, want, "names through the kernel");
    });
}

/// The engine's own clones, then copy-on-write, truncates, punches and
/// unlinks on them; needs no root (the kernel read-back runs as root).
#[test]
fn library_clones_stay_consistent() {
    library_clones("reflink-lib", "");
}

/// The same with a reverse mapping btree, whose records overlap where
/// blocks are shared.
#[test]
fn library_clones_with_rmapbt() {
    library_clones("reflink-lib-rmap", "-m rmapbt=1");
}

fn library_clones(tag: &str, opts: &str) {
    let s = Scratch::new(tag);
    let img = s.0.join("r.img");
    mkfs_xfs(&img, 300 << 20, opts);
    let mut rng = Rng(0x5eed_1234);
    let mut m = Model::new();
    {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        for name in ["a", "b", "c", "d", "e"] {
            fs.create(
                root,
                name.as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644, 7),
            )
            .unwrap();
            m.insert(name.to_string(), Vec::new());
        }
        // a: 300 KiB of data with a hole in the middle.
        let head = rng.bytes(100 << 10);
        write(&fs, &mut m, "a", 0, &head);
        let tail = rng.bytes(100 << 10);
        write(&fs, &mut m, "a", 200 << 10, &tail);
        // b, c: whole clones of a; d: a clone of a's second 100 KiB+.
        for name in ["b", "c"] {
            let n = fs
                .clone_range(ino_of(&fs, "a"), 0, ino_of(&fs, name), 0, 0)
                .unwrap();
            assert_eq!(n, 300 << 10);
            m.insert(name.to_string(), m["a"].clone());
        }
        fs.clone_range(ino_of(&fs, "a"), 64 << 10, ino_of(&fs, "d"), 0, 236 << 10)
            .unwrap();
        m.insert("d".into(), m["a"][64 << 10..].to_vec());
        check_all(&fs, &m, "after cloning");
        // Writes into shared blocks: partial blocks at both ends.
        let w = rng.bytes(10_000);
        write(&fs, &mut m, "b", 5_000, &w);
        let w = rng.bytes(3);
        write(&fs, &mut m, "a", 4095, &w);
        check_all(&fs, &m, "after copy-on-write");
        // Truncate inside a shared block, punch a shared range, unlink.
        fs.truncate(ino_of(&fs, "c"), 70_001).unwrap();
        m.get_mut("c").unwrap().truncate(70_001);
        fs.punch_hole(ino_of(&fs, "d"), 8192, 20_000).unwrap();
        m.get_mut("d").unwrap()[8192..28_192].fill(0);
        fs.unlink(root, b"a").unwrap();
        m.remove("a");
        check_all(&fs, &m, "after truncate, punch and unlink");
        // Clone over existing data, then extend the clone by writing.
        fs.clone_range(ino_of(&fs, "b"), 0, ino_of(&fs, "e"), 0, 0)
            .unwrap();
        m.insert("e".into(), m["b"].clone());
        let w = rng.bytes(50_000);
        write(&fs, &mut m, "e", 290_000, &w);
        fs.unlink(root, b"b").unwrap();
        m.remove("b");
        check_all(&fs, &m, "at the end");
        fs.sync().unwrap();
    }
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &Default::default()).unwrap();
    check_all(&fs, &m, "reopened");
    drop(fs);
    check_kernel(&img, &m);
}

/// Files the kernel cloned (`cp --reflink`), then changed by xfskit.
#[test]
fn kernel_clones_changed_by_xfskit() {
    kernel_clones("kernel_clones_changed_by_xfskit", "");
}

/// The same with a reverse mapping btree.
#[test]
fn kernel_clones_with_rmapbt() {
    kernel_clones("kernel_clones_with_rmapbt", "-m rmapbt=1");
}

fn kernel_clones(test: &str, opts: &str) {
    if !is_root() {
        xfskit_testkit::skip(test, "needs root for the kernel's clones");
        if let Ok(p) = std::env::var("XFSKIT_SKIP_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(p) {
                let _ = writeln!(f, "write_reflink::{test}: needs root");
            }
        }
        return;
    }
    let s = Scratch::new(test);
    let img = s.0.join("k.img");
    mkfs_xfs(&img, 300 << 20, opts);
    let mut rng = Rng(0xc10e_5eed);
    let mut m = Model::new();
    let mnt = s.0.join("mnt");
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
    assert!(ok, "mount: {out}");
    let a = rng.bytes(1 << 20);
    std::fs::write(mnt.join("a"), &a).unwrap();
    m.insert("a".into(), a.clone());
    for name in ["b", "c", "d"] {
        let (ok, out) = run(
            "cp",
            &[
                "--reflink=always",
                &mnt.join("a").display().to_string(),
                &mnt.join(name).display().to_string(),
            ],
        );
        assert!(ok, "cp --reflink: {out}");
        m.insert(name.into(), a.clone());
    }
    let (ok, out) = write_common::umount(&mnt);
    assert!(ok, "umount: {out}");
    assert_repair_clean(&img);
    {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        let w = rng.bytes(70_000);
        write(&fs, &mut m, "b", 123_457, &w);
        fs.truncate(ino_of(&fs, "c"), 500_001).unwrap();
        m.get_mut("c").unwrap().truncate(500_001);
        fs.unlink(root, b"a").unwrap();
        m.remove("a");
        fs.punch_hole(ino_of(&fs, "d"), 4096 * 10, 4096 * 20)
            .unwrap();
        m.get_mut("d").unwrap()[4096 * 10..4096 * 30].fill(0);
        fs.create(root, b"e", &NodeKind::File { size: 0 }, &meta(0o600, 0))
            .unwrap();
        fs.clone_range(ino_of(&fs, "d"), 0, ino_of(&fs, "e"), 0, 0)
            .unwrap();
        m.insert("e".into(), m["d"].clone());
        check_all(&fs, &m, "xfskit's changes");
        fs.sync().unwrap();
    }
    assert_repair_clean(&img);
    check_kernel(&img, &m);
    // The kernel can go on using the clones: remove every file, and the
    // filesystem is back to no shared blocks and clean.
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            "loop",
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    assert!(ok, "mount: {out}");
    for name in m.keys() {
        std::fs::remove_file(mnt.join(name)).unwrap();
    }
    let (ok, out) = write_common::umount(&mnt);
    assert!(ok, "umount: {out}");
    assert_repair_clean(&img);
}

/// Truncating a shared file inside its last block: the block is copied
/// first, and the part past the new size reads as zeros when the file
/// grows again, in the truncated file only.
#[test]
fn truncate_inside_a_shared_block() {
    let s = Scratch::new("reflink-trunc");
    let img = s.0.join("t.img");
    mkfs_xfs(&img, 300 << 20, "");
    let mut rng = Rng(42);
    let mut m = Model::new();
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    for name in ["a", "b"] {
        fs.create(
            root,
            name.as_bytes(),
            &NodeKind::File { size: 0 },
            &meta(0o644, 7),
        )
        .unwrap();
        m.insert(name.to_string(), Vec::new());
    }
    let data = rng.bytes(4246);
    write(&fs, &mut m, "a", 0, &data);
    fs.clone_range(ino_of(&fs, "a"), 0, ino_of(&fs, "b"), 0, 0)
        .unwrap();
    m.insert("b".into(), data.clone());
    let w = rng.bytes(4831);
    write(&fs, &mut m, "b", 4982, &w);
    fs.truncate(ino_of(&fs, "b"), 8941).unwrap();
    m.get_mut("b").unwrap().truncate(8941);
    check_all(&fs, &m, "after the clone's changes");
    fs.truncate(ino_of(&fs, "a"), 1319).unwrap();
    m.get_mut("a").unwrap().truncate(1319);
    check_all(&fs, &m, "after the truncate");
    let w = rng.bytes(5236);
    write(&fs, &mut m, "a", 5421, &w);
    check_all(&fs, &m, "after growing again");
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
}

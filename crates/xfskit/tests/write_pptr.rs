//! Parent pointers kept by every write path, on filesystems made by
//! mkfs.xfs with the xfsprogs 6.18 defaults (parent pointers,
//! exchange-range, rmapbt, nrext64).
//!
//! What every inode's parent pointers must be follows from the tree: one
//! pointer (name, directory, directory generation) per directory entry
//! that names it. After each workload the tests compare that with what
//! xfskit reads back, run xfs_repair -n 6.15 (which checks parent
//! pointers both ways) and, as root, compare with the kernel's own
//! answer (`XFS_IOC_GETPARENTS` through xfs_io 6.15's `parent`), then let
//! the kernel change the tree further and check again.

mod namespace_common;
mod write_common;

use namespace_common::{meta, walk_host, walk_lib};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino, OpenOptions};

/// Every inode's parent pointers: inode -> set of (name, parent, parent gen).
type Pptrs = BTreeMap<u64, BTreeSet<(Vec<u8>, u64, u32)>>;

/// Inode number -> one path to it, for every inode but the root.
type Paths = BTreeMap<u64, Vec<u8>>;

/// The pointers the tree implies, and those xfskit reads, and a path of
/// each inode.
fn expected_and_read(fs: &Fs) -> (Pptrs, Pptrs, Paths) {
    let mut want = Pptrs::new();
    let mut got = Pptrs::new();
    let mut paths = Paths::new();
    let root = fs.root().unwrap();
    let mut todo = vec![(root.clone(), Vec::new())];
    let mut seen = BTreeSet::new();
    while let Some((dir, prefix)) = todo.pop() {
        for e in xfskit::dir::read_dir(fs, &dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            want.entry(e.ino.0)
                .or_default()
                .insert((e.name.clone(), dir.ino.0, dir.gen));
            let mut path = prefix.clone();
            path.push(b'/');
            path.extend_from_slice(&e.name);
            paths.entry(e.ino.0).or_insert_with(|| path.clone());
            if seen.insert(e.ino.0) {
                let ip = fs.inode(e.ino).unwrap();
                let p: BTreeSet<_> = xfskit::attr::parent_pointers(fs, &ip)
                    .unwrap()
                    .into_iter()
                    .collect();
                got.insert(e.ino.0, p);
                if ip.file_type == xfskit::inode::FileType::Dir {
                    todo.push((ip, path));
                }
            }
        }
    }
    // The root has no parent pointer.
    let rp = xfskit::attr::parent_pointers(fs, &root).unwrap();
    assert!(rp.is_empty(), "the root has parent pointers: {rp:?}");
    (want, got, paths)
}

/// Checks the pointers xfskit reads against the tree, then xfs_repair
/// 6.15, then (as root) the kernel's answer for every inode; returns the
/// pointers.
fn verify(img: &Path, what: &str) -> Pptrs {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let (want, got, paths) = expected_and_read(&fs);
    for (ino, w) in &want {
        let g = got.get(ino).cloned().unwrap_or_default();
        assert_eq!(
            &g,
            w,
            "{what}: inode {ino} ({}): parent pointers read differ from the tree's names",
            String::from_utf8_lossy(&paths[ino])
        );
    }
    let gens: BTreeMap<u64, u32> = paths
        .keys()
        .map(|&i| (i, fs.inode(Ino(i)).unwrap().gen))
        .collect();
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{what}: xfskit check: {report:?}");
    drop(fs);
    assert_repair_615_clean(img);
    if is_root() {
        with_kernel_mount(img, |mnt| {
            for (ino, path) in &paths {
                let k = kernel_parents(mnt, *ino, gens[ino]);
                assert_eq!(
                    &k,
                    &want[ino],
                    "{what}: the kernel's parent pointers of {} (inode {ino}) differ",
                    String::from_utf8_lossy(path)
                );
            }
        });
    }
    want
}

/// The kernel's parent pointers of inode `ino` (generation `gen`) of the
/// filesystem mounted at `mnt` (xfs_io 6.15 `parent -s INO GEN`, by
/// handle, so that devices and symlinks are asked too: one
/// "ino:gen:namelen:name" per line).
fn kernel_parents(mnt: &Path, ino: u64, gen: u32) -> BTreeSet<(Vec<u8>, u64, u32)> {
    let cmd = format!("parent -s {ino} {gen}");
    let (ok, out) = run_615("xfs_io", &["-r", "-c", &cmd, &mnt.display().to_string()]);
    assert!(ok, "xfs_io {cmd}: {out}");
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.splitn(4, ':');
            let ino: u64 = it.next().unwrap().trim().parse().expect(l);
            let gen: u32 = it.next().unwrap().trim().parse().expect(l);
            let _len = it.next().unwrap();
            let name = it.next().unwrap().as_bytes().to_vec();
            (name, ino, gen)
        })
        .collect()
}

fn lookup(fs: &Fs, path: &str) -> Ino {
    fs.lookup_path(path.as_bytes()).unwrap().ino
}

/// Every namespace operation of the engine on a 6.18-default filesystem.
fn workload(fs: &Fs) {
    let root = fs.geometry().root_ino;
    let dir = NodeKind::Dir;
    let file = NodeKind::File { size: 0 };
    let a = fs.create(root, b"a", &dir, &meta(0o755, 0)).unwrap();
    let b = fs.create(root, b"b", &dir, &meta(0o755, 0)).unwrap();
    let sub = fs.create(a, b"sub", &dir, &meta(0o755, 0)).unwrap();
    fs.create(sub, b"inner", &file, &meta(0o644, 0)).unwrap();
    for i in 0..12 {
        fs.create(a, format!("f{i}").as_bytes(), &file, &meta(0o644, 0))
            .unwrap();
    }
    // The batched create and the build fast path.
    let m = meta(0o644, 7);
    let names: Vec<Vec<u8>> = (0..20).map(|i| format!("batch{i}").into_bytes()).collect();
    let files: Vec<xfskit::namespace::NewFile<'_>> = names
        .iter()
        .map(|n| xfskit::namespace::NewFile {
            name: n,
            meta: &m,
            data: b"hello",
            xattrs: &[(b"user.k", b"v")],
        })
        .collect();
    fs.create_files(b, &files).unwrap();
    fs.create_file(b, b"fast", &m, b"data", &[(b"user.x", b"y")])
        .unwrap();
    // Other kinds, and symlinks on both sides of the inline limit (the
    // attribute fork made at creation shrinks the data fork).
    fs.create(a, b"fifo", &NodeKind::Fifo, &meta(0o644, 0))
        .unwrap();
    fs.create(
        a,
        b"chr",
        &NodeKind::CharDev { major: 1, minor: 3 },
        &meta(0o644, 0),
    )
    .unwrap();
    fs.create(
        a,
        b"short",
        &NodeKind::Symlink(b"target".to_vec()),
        &meta(0o777, 0),
    )
    .unwrap();
    fs.create(
        a,
        b"long",
        &NodeKind::Symlink(vec![b'x'; 250]),
        &meta(0o777, 0),
    )
    .unwrap();
    // Many hard links with long names: the pointers go from short form to
    // a leaf, then to a node with several leaves; then half go away.
    let f0 = lookup(fs, "/a/f0");
    for i in 0..70 {
        let name = format!("{:0>200}", i);
        fs.link(b, name.as_bytes(), f0).unwrap();
    }
    for i in (0..70).step_by(2) {
        let name = format!("{:0>200}", i);
        fs.unlink(b, name.as_bytes()).unwrap();
    }
    // User xattrs beside the pointers.
    fs.set_xattr(f0, b"user.big", &[7u8; 3000]).unwrap();
    // Renames: in one directory, across directories, over a file, over
    // another name of the same file, a directory across, an exchange.
    fs.rename(a, b"f1", a, b"f1r").unwrap();
    fs.rename(a, b"f2", b, b"f2moved").unwrap();
    fs.rename(a, b"f3", b, b"batch3").unwrap();
    let name1 = format!("{:0>200}", 1);
    fs.rename(a, b"f4", b, name1.as_bytes()).unwrap();
    fs.link(a, b"f5b", lookup(fs, "/a/f5")).unwrap();
    fs.rename(a, b"f5", a, b"f5b").unwrap();
    fs.rename(a, b"sub", b, b"sub2").unwrap();
    fs.exchange(a, b"f6", b, b"f2moved").unwrap();
    fs.exchange(a, b"f7", a, b"f8").unwrap();
    // Removals.
    fs.unlink(a, b"f9").unwrap();
    let e = fs.create(a, b"empty", &dir, &meta(0o755, 0)).unwrap();
    let _ = e;
    fs.rmdir(a, b"empty").unwrap();
    fs.link(a, b"f10b", lookup(fs, "/a/f10")).unwrap();
    fs.unlink(a, b"f10").unwrap();
}

#[test]
fn every_write_path_keeps_parent_pointers() {
    every_write_path("every_write_path_keeps_parent_pointers", false);
}

/// The same on a filesystem with a metadata directory tree: its inodes
/// (and their parent pointers) are left alone, the metadir superblock
/// fields are kept, xfs_repair -n 6.15 finds nothing.
#[test]
fn every_write_path_on_metadir_filesystems() {
    every_write_path("every_write_path_on_metadir_filesystems", true);
}

/// The metadir superblock fields (bytes 264..288 of sector 0).
fn metadir_fields(img: &Path) -> Vec<u8> {
    let mut sb = vec![0u8; 512];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(img).unwrap(), &mut sb, 0)
        .unwrap();
    sb[264..288].to_vec()
}

fn every_write_path(test: &str, metadir: bool) {
    if skip_without_615(test) {
        return;
    }
    let s = Scratch::new(if metadir {
        "metadir-paths"
    } else {
        "pptr-paths"
    });
    let img = s.0.join("p.img");
    if metadir {
        mkfs_618_metadir(&img, 512 << 20, "");
    } else {
        mkfs_618(&img, 512 << 20, "");
    }
    let fields = metadir_fields(&img);
    if metadir {
        assert_ne!(fields, vec![0u8; 24], "no metadir fields");
    }
    {
        let fs = open_rw(&img);
        workload(&fs);
        fs.sync().unwrap();
    }
    let want = verify(&img, "after xfskit's workload");
    // The file of many links: its own name, 35 of the 70 links left, one
    // of them replaced by a rename; its pointers went through node form.
    let most = want.values().map(|s| s.len()).max().unwrap();
    assert_eq!(most, 35, "pointers of the many-links file");
    if is_root() {
        // The kernel changes the tree xfskit wrote, then xfskit again.
        let mnt = img.with_extension("kmnt");
        kernel_mount_rw_at(&img, &mnt).unwrap();
        std::fs::rename(mnt.join("a/f1r"), mnt.join("b/f1k")).unwrap();
        std::fs::hard_link(mnt.join("b/fast"), mnt.join("a/fastlink")).unwrap();
        std::fs::remove_file(mnt.join("b/batch0")).unwrap();
        std::fs::create_dir(mnt.join("a/kdir")).unwrap();
        std::fs::write(mnt.join("a/kdir/kfile"), b"k").unwrap();
        kernel_umount(&mnt);
        let _ = std::fs::remove_dir(&mnt);
        verify(&img, "after the kernel's changes");
        {
            let fs = open_rw(&img);
            let a = lookup(&fs, "/a");
            let kdir = lookup(&fs, "/a/kdir");
            fs.rename(kdir, b"kfile", a, b"kfile2").unwrap();
            fs.unlink(a, b"fastlink").unwrap();
            fs.sync().unwrap();
        }
        verify(&img, "after xfskit changed the kernel's tree");
    }
    assert_eq!(metadir_fields(&img), fields, "the metadir fields changed");
}

/// The tree xfskit wrote reads back the same through a kernel mount.
#[test]
fn kernel_reads_what_xfskit_wrote_on_pptr_filesystems() {
    kernel_reads_what_xfskit_wrote("kernel_reads_what_xfskit_wrote_on_pptr_filesystems", false);
}

/// The same on a metadata directory filesystem, with file data written,
/// overwritten, truncated and punched too.
#[test]
fn kernel_reads_what_xfskit_wrote_on_metadir_filesystems() {
    kernel_reads_what_xfskit_wrote(
        "kernel_reads_what_xfskit_wrote_on_metadir_filesystems",
        true,
    );
}

fn kernel_reads_what_xfskit_wrote(test: &str, metadir: bool) {
    if skip_without_615(test) || skip_unless_root(test) {
        return;
    }
    let s = Scratch::new(if metadir {
        "metadir-kernel"
    } else {
        "pptr-kernel"
    });
    let img = s.0.join("p.img");
    if metadir {
        mkfs_618_metadir(&img, 512 << 20, "");
    } else {
        mkfs_618(&img, 512 << 20, "");
    }
    let lib = {
        let fs = open_rw(&img);
        workload(&fs);
        if metadir {
            data_workload(&fs);
        }
        fs.sync().unwrap();
        walk_lib(&fs)
    };
    if metadir {
        assert_repair_615_clean(&img);
    }
    let host = with_kernel_mount(&img, walk_host).unwrap();
    assert_eq!(lib.len(), host.len());
    for (p, d) in &lib {
        assert_eq!(Some(d), host.get(p), "{}", String::from_utf8_lossy(p));
    }
}

/// Names changed behind the parent pointers' back (the feature bit off
/// for a moment): xfs_repair -n 6.15 and xfskit check both find the
/// pointer left dangling and the entry left without one.
#[test]
fn check_flags_parent_pointers_that_disagree_with_the_tree() {
    if skip_without_615("check_flags_parent_pointers_that_disagree_with_the_tree") {
        return;
    }
    let s = Scratch::new("pptr-check");
    let img = s.0.join("p.img");
    mkfs_618(&img, 512 << 20, "");
    {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        let a = fs
            .create(root, b"a", &NodeKind::Dir, &meta(0o755, 0))
            .unwrap();
        let x = fs
            .create(a, b"x", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        fs.link(root, b"y", x).unwrap();
        fs.sync().unwrap();
    }
    verify(&img, "before the damage");
    let parent = xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT;
    set_incompat(&img, parent, false);
    {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        let a = lookup(&fs, "/a");
        fs.unlink(root, b"y").unwrap();
        fs.rename(a, b"x", a, b"z").unwrap();
        fs.sync().unwrap();
    }
    set_incompat(&img, parent, true);
    let (ok, out) = run_615("xfs_repair", &["-n", &img.display().to_string()]);
    assert!(!ok, "xfs_repair -n 6.15 found nothing:\n{out}");
    assert!(out.contains("parent pointer"), "xfs_repair -n 6.15:\n{out}");
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    let said: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let x = lookup(&fs, "/a/z").0;
    let has = |needle: &str| {
        report.problems.iter().any(|p| {
            p.what == "parent pointer"
                && p.location == xfskit::Location::Inode(x)
                && p.detail.contains(needle)
        })
    };
    assert!(
        has("'y' -> directory"),
        "dangling pointer not reported: {said:#?}"
    );
    assert!(
        has("'x' -> directory"),
        "stale pointer not reported: {said:#?}"
    );
    assert!(
        has("missing for entry 'z'"),
        "missing pointer not reported: {said:#?}"
    );
}

/// File data: a large file written in pieces, overwritten, truncated,
/// punched, preallocated; a clone of it.
fn data_workload(fs: &Fs) {
    let root = fs.geometry().root_ino;
    let d = fs
        .create(root, b"data", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    let f = fs
        .create(d, b"big", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 13 % 251) as u8).collect();
    for k in 0..5u64 {
        fs.write_at(f, k << 20, &chunk).unwrap();
    }
    fs.write_at(f, 12345, &[9u8; 70_000]).unwrap();
    fs.truncate(f, (4 << 20) + 777).unwrap();
    fs.punch_hole(f, 1 << 20, 256 << 10).unwrap();
    let g = fs
        .create(d, b"prealloc", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    fs.fallocate(g, 0, 1 << 20, false).unwrap();
    fs.write_at(g, 4096, b"in the middle").unwrap();
    for i in 0..200 {
        let h = fs
            .create(
                d,
                format!("small{i}").as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o600, 3),
            )
            .unwrap();
        fs.write_at(h, 0, format!("{i}").as_bytes()).unwrap();
    }
}

//! Placement by filestreams (each directory's files in one AG, parallel
//! directories in different AGs) and the flags new inodes take from their
//! directory, compared with what the kernel does on the same image.

mod namespace_common;
mod write_common;

use namespace_common::meta;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::inode::Fork;
use xfskit::{Fs, Ino, OpenOptions};

/// The AGs holding the data of each directory's files under `parent`.
fn data_ags(fs: &Fs, parent: &[u8], dirs: &[&str]) -> BTreeMap<String, BTreeSet<u32>> {
    let geo = fs.geometry();
    let mut out = BTreeMap::new();
    for d in dirs {
        let mut path = parent.to_vec();
        path.extend_from_slice(d.as_bytes());
        let dir = fs.lookup_path(&path).unwrap();
        let mut ags = BTreeSet::new();
        for e in xfskit::dir::read_dir(fs, &dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let ip = fs.inode(e.ino).unwrap();
            for x in xfskit::inode::extents(fs, &ip, Fork::Data).unwrap() {
                ags.insert(geo.fsb_split(x.start).0 .0);
            }
        }
        out.insert(d.to_string(), ags);
    }
    out
}

/// Files written into `dirs` in turn (one file of each, then the next
/// round), each 64 KiB, as parallel writers would interleave them.
fn interleaved_files(fs: &Fs, dirs: &[Ino], rounds: usize) {
    let data = vec![0x5au8; 64 << 10];
    for r in 0..rounds {
        for (i, d) in dirs.iter().enumerate() {
            let name = format!("f{r}-{i}");
            let f = fs
                .create(
                    *d,
                    name.as_bytes(),
                    &NodeKind::File { size: 0 },
                    &meta(0o644, 0),
                )
                .unwrap();
            fs.write_at(f, 0, &data).unwrap();
        }
    }
}

#[test]
fn streams_keep_each_directory_in_its_own_ag() {
    let s = Scratch::new("fstrm");
    let img = s.0.join("img");
    let names = ["d0", "d1", "d2", "d3"];
    for streams in [false, true] {
        mkfs_xfs(&img, 1 << 30, "-d agcount=4");
        let fs = Fs::open_rw(
            &img,
            &OpenOptions {
                filestreams: streams,
                ..Default::default()
            },
        )
        .unwrap();
        let root = fs.geometry().root_ino;
        // Four directories whose inodes all sit in AG 0.
        let dirs: Vec<Ino> = names
            .iter()
            .map(|n| {
                fs.mkdir_from(root, n.as_bytes(), &meta(0o755, 0), 0)
                    .unwrap()
            })
            .collect();
        for d in &dirs {
            assert_eq!(fs.geometry().ino_agno(*d).0, 0, "directory inode in AG 0");
        }
        interleaved_files(&fs, &dirs, 8);
        if streams {
            let live = fs.filestreams().unwrap().streams();
            assert_eq!(live.len(), 4, "one live stream per directory: {live:?}");
        }
        fs.sync().unwrap();
        drop(fs);
        let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
        let ags = data_ags(&fs, b"/", &names);
        if streams {
            let mut seen = BTreeSet::new();
            for (d, a) in &ags {
                assert_eq!(a.len(), 1, "{d}: its files' data in one AG: {ags:?}");
                seen.insert(*a.iter().next().unwrap());
            }
            assert_eq!(seen.len(), 4, "each directory in its own AG: {ags:?}");
        } else {
            // Without streams the data goes near the inodes: AG 0.
            for (d, a) in &ags {
                assert_eq!(a, &BTreeSet::from([0]), "{d} without streams: {ags:?}");
            }
        }
        drop(fs);
        assert_repair_clean(&img);
    }
}

/// Mounts `img` read-write with the kernel at a fresh directory, runs `f`
/// there, unmounts.
fn kernel_rw(img: &Path, opts: &str, f: impl FnOnce(&Path)) {
    let mnt = img.with_extension("kmnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let o = if opts.is_empty() {
        "loop".to_string()
    } else {
        format!("loop,{opts}")
    };
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            &o,
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    assert!(ok, "kernel mount: {out}");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mnt)));
    let (ok, out) = write_common::umount(&mnt);
    assert!(ok, "umount: {out}");
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

fn sh(cmd: &str) {
    let (ok, out) = run("sh", &["-c", cmd]);
    assert!(ok, "{cmd}: {out}");
}

#[test]
fn filestreams_pick_the_ags_the_kernel_picks() {
    if skip_unless_root("filestreams_pick_the_ags_the_kernel_picks") {
        return;
    }
    let s = Scratch::new("fstrm-k");
    let img = s.0.join("img");
    let names = ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"];
    let busy = ["d0", "d4", "d1"];
    // The kernel: eight directories (the rotor spreads them over the four
    // AGs, so d0 and d4 share one), then files written in turn into d0, d4
    // and d1, each fsynced so that its blocks are allocated in that order.
    mkfs_xfs(&img, 1 << 30, "-d agcount=4");
    kernel_rw(&img, "filestreams", |m| {
        let k = m.join("k");
        std::fs::create_dir(&k).unwrap();
        for n in names {
            std::fs::create_dir(k.join(n)).unwrap();
        }
        for r in 0..6 {
            for (i, d) in busy.iter().enumerate() {
                let p = k.join(d).join(format!("f{r}-{i}"));
                sh(&format!(
                    "xfs_io -f -c 'pwrite -q 0 64k' -c fsync {}",
                    p.display()
                ));
            }
        }
    });
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let kernel = data_ags(&fs, b"/k/", &busy);
    let kdirs: Vec<u32> = names
        .iter()
        .map(|n| {
            let d = fs.lookup_path(format!("/k/{n}").as_bytes()).unwrap();
            fs.geometry().ino_agno(d.ino).0
        })
        .collect();
    drop(fs);
    // The same with xfskit, directories placed where the kernel put its.
    let fs = Fs::open_rw(
        &img,
        &OpenOptions {
            filestreams: true,
            ..Default::default()
        },
    )
    .unwrap();
    let root = fs.geometry().root_ino;
    let x = fs
        .create(root, b"x", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    let mut by_name = BTreeMap::new();
    for (n, ag) in names.iter().zip(&kdirs) {
        let d = fs
            .mkdir_from(x, n.as_bytes(), &meta(0o755, 0), *ag)
            .unwrap();
        assert_eq!(
            fs.geometry().ino_agno(d).0,
            *ag,
            "{n} placed as the kernel's"
        );
        by_name.insert(*n, d);
    }
    let dirs: Vec<Ino> = busy.iter().map(|n| by_name[n]).collect();
    interleaved_files(&fs, &dirs, 6);
    fs.sync().unwrap();
    drop(fs);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let ours = data_ags(&fs, b"/x/", &busy);
    drop(fs);
    assert_eq!(
        kdirs[0], kdirs[4],
        "the rotor put d0 and d4 in one AG: {kdirs:?}"
    );
    for (d, a) in &kernel {
        assert_eq!(a.len(), 1, "kernel: {d} in one AG: {kernel:?}");
    }
    assert_ne!(kernel["d0"], kernel["d4"], "kernel: d0 and d4 apart");
    assert_eq!(ours, kernel, "xfskit's streams against the kernel's");
    assert_repair_clean(&img);
}

/// (flags, flags2 hint bits, extent size, CoW extent size, project id).
fn inherited(fs: &Fs, path: &str) -> (u16, u64, u32, u32, u32) {
    let ip = fs.lookup_path(path.as_bytes()).unwrap();
    let hint2 = xfs_format::inode::XFS_DIFLAG2_COWEXTSIZE | xfs_format::inode::XFS_DIFLAG2_DAX;
    (
        ip.flags,
        ip.flags2 & hint2,
        ip.extsize,
        ip.cowextsize,
        ip.projid,
    )
}

#[test]
fn new_inodes_inherit_what_the_kernel_passes_on() {
    if skip_unless_root("new_inodes_inherit_what_the_kernel_passes_on") {
        return;
    }
    let s = Scratch::new("inherit");
    let img = s.0.join("img");
    mkfs_xfs(&img, 512 << 20, "");
    // Directories with every inheritable flag and hint, one with a few,
    // one with none; the kernel makes one of each kind in each.
    let dirs = [
        (
            "all",
            "-c 'chproj 42' -c 'chattr +PSAdsf' -c 'extsize 64k' -c 'cowextsize 128k'",
        ),
        ("nosym", "-c 'chattr +nA'"),
        ("some", "-c 'chproj 7' -c 'chattr +Sdt'"),
        ("none", ""),
    ];
    let kinds = ["file", "dir", "link", "fifo"];
    kernel_rw(&img, "", |m| {
        for (d, attrs) in dirs {
            let p = m.join(d);
            std::fs::create_dir(&p).unwrap();
            if !attrs.is_empty() {
                sh(&format!("xfs_io {attrs} {}", p.display()));
            }
            std::fs::write(p.join("k-file"), b"").unwrap();
            std::fs::create_dir(p.join("k-dir")).unwrap();
            let made = std::os::unix::fs::symlink("target", p.join("k-link"));
            if d == "nosym" {
                let e = made.expect_err("the kernel made a symlink under +n");
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
            } else {
                made.unwrap();
            }
            sh(&format!("mkfifo {}", p.join("k-fifo").display()));
        }
    });
    let fs = open_rw(&img);
    for (d, _) in dirs {
        let dir = fs.lookup_path(format!("/{d}").as_bytes()).unwrap().ino;
        let m = meta(0o755, 0);
        fs.create(dir, b"x-file", &NodeKind::File { size: 0 }, &m)
            .unwrap();
        fs.create(dir, b"x-dir", &NodeKind::Dir, &m).unwrap();
        let made = fs.create(dir, b"x-link", &NodeKind::Symlink(b"target".to_vec()), &m);
        if d == "nosym" {
            assert!(
                matches!(made, Err(xfskit::Error::NotPermitted(_))),
                "a symlink under +n: {made:?}"
            );
        } else {
            made.unwrap();
        }
        fs.create(dir, b"x-fifo", &NodeKind::Fifo, &m).unwrap();
    }
    fs.sync().unwrap();
    drop(fs);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let mut nonzero = 0;
    for (d, _) in dirs {
        for k in kinds {
            if d == "nosym" && k == "link" {
                continue;
            }
            let want = inherited(&fs, &format!("/{d}/k-{k}"));
            let got = inherited(&fs, &format!("/{d}/x-{k}"));
            assert_eq!(got, want, "/{d}/x-{k} against the kernel's /{d}/k-{k}");
            if want != (0, 0, 0, 0, 0) {
                nonzero += 1;
            }
        }
    }
    // Files and directories of "all" and "some", and the project id of
    // their symlinks and fifos, at least.
    assert!(
        nonzero >= 8,
        "the kernel passed on too little to compare: {nonzero}"
    );
    drop(fs);
    assert_repair_clean(&img);
}

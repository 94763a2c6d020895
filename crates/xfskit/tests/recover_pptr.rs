//! Unfinished parent pointer intents (PPTR set, remove, replace ATTRIs)
//! are finished by recovery as the kernel finishes them.
//!
//! mkfs.xfs 6.1 cannot make a parent-pointer filesystem, but the kernel
//! mounts its image once the PARENT incompat bit is set in every AG's
//! superblock. The kernel then creates files, directories and hard links,
//! writing real parent pointers. With the bit cleared for a moment (the
//! write engine refuses parent-pointer filesystems), xfskit logs PPTR
//! ATTRIs without their ATTRDs into a crashed log; the bit goes back on.
//! One copy is recovered by the kernel's mount, the other by
//! `Fs::recover`: the parent pointers of every inode must be identical,
//! in on-disk order. Bad PPTR ATTRIs (wrong generation, wrong value
//! size) are refused by both.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{recover_on, Shared};
use std::sync::Arc;

use std::path::Path;
use write_common::*;
use xfs_format::log_intent::*;
use xfskit::check::{check, CheckOptions};
use xfskit::log::attr::{attri_regions, Attri};
use xfskit::log::recover::RecoverOptions;
use xfskit::{Fs, OpenOptions};

const PARENT: u32 = xfs_format::attr::XFS_ATTR_PARENT as u32;
const INCOMPAT_PARENT: u32 = xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT;

/// The parent record of directory `ino` with generation `gen`.
fn rec(ino: u64, gen: u32) -> Vec<u8> {
    let mut v = ino.to_be_bytes().to_vec();
    v.extend_from_slice(&gen.to_be_bytes());
    v
}

/// One inode: a path, its number, its parent pointers in on-disk order
/// (name, parent inode, parent generation).
type Entry = (String, u64, Vec<(Vec<u8>, u64, u32)>);
/// Every in-use inode reachable from the root.
type Pptrs = Vec<Entry>;

fn pptrs(img: &Path) -> Pptrs {
    pptrs_of(&Fs::open(img, &OpenOptions::default()).unwrap())
}

fn pptrs_of(fs: &Fs) -> Pptrs {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), fs.geometry().root_ino)];
    // Each inode under its shallowest path, first in byte order (links).
    let key = |p: &String| (p.matches('/').count(), p.clone());
    let mut first = std::collections::BTreeMap::<u64, String>::new();
    while let Some((path, ino)) = todo.pop() {
        let ip = fs.inode(ino).unwrap();
        let e = first.entry(ino.0).or_insert_with(|| path.clone());
        if key(&path) < key(e) {
            *e = path.clone();
        }
        if ip.file_type == xfskit::inode::FileType::Dir {
            for e in xfskit::dir::read_dir(fs, &ip).unwrap() {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                todo.push((
                    format!("{path}/{}", String::from_utf8_lossy(&e.name)),
                    e.ino,
                ));
            }
        }
    }
    for (ino, path) in first {
        let ip = fs.inode(xfskit::Ino(ino)).unwrap();
        let p = xfskit::attr::parent_pointers(fs, &ip).unwrap();
        out.push((path, ino, p));
    }
    out.sort();
    out
}

fn get<'a>(p: &'a Pptrs, path: &str) -> &'a Entry {
    p.iter()
        .find(|(n, _, _)| n == path)
        .unwrap_or_else(|| panic!("{path} missing"))
}

fn gen_of(img: &Path, ino: u64) -> u32 {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    fs.inode(xfskit::Ino(ino)).unwrap().gen
}

fn pptr_attri(id: u64, ino: u64, igen: u32, op: u32, name: &[u8], value: &[u8]) -> Attri {
    Attri {
        id,
        rec_blk: 0,
        ino,
        igen,
        op,
        filter: PARENT,
        name: name.to_vec(),
        new_name: Vec::new(),
        value: value.to_vec(),
        new_value: Vec::new(),
    }
}

/// A parent-pointer filesystem populated by the kernel. Returns its
/// parent pointers as xfskit reads them.
fn base(img: &Path) -> Pptrs {
    mkfs_xfs(img, 320 << 20, "");
    set_incompat(img, INCOMPAT_PARENT, true);
    let mnt = img.with_extension("mnt");
    kernel_mount_rw_at(img, &mnt).unwrap_or_else(|e| panic!("mount with parent pointers: {e}"));
    let m = mnt.display().to_string();
    let script = format!(
        "set -e; cd {m}; mkdir -p d e; for f in a b c dup missing; do echo $f > $f; done; \
         echo h > h; for i in $(seq 1 40); do ln h d/link-with-a-long-name-$i; done; \
         echo s > d/s; ln d/s e/s; mkdir d/sub; echo l > l; \
         for i in $(seq 1 12); do ln l e/l$i; done"
    );
    let (ok, out) = run("bash", &["-c", &script]);
    assert!(ok, "populate: {out}");
    kernel_umount(&mnt);
    let _ = std::fs::remove_dir(&mnt);
    pptrs(img)
}

/// Logs `items` (one transaction each) with xfskit's journaled engine
/// (parent bit cleared meanwhile) and drops it without writing back.
fn crash_with(img: &Path, items: &[Vec<Vec<u8>>]) {
    set_incompat(img, INCOMPAT_PARENT, false);
    {
        let fs = open_rw(img);
        for regions in items {
            let mut tp = fs.trans().unwrap();
            tp.log_raw_item(regions.clone());
            tp.commit().unwrap();
        }
        fs.force_log().unwrap();
    }
    set_incompat(img, INCOMPAT_PARENT, true);
}

/// xfskit check's findings on `img`, as sorted lines.
fn check_findings(img: &Path) -> Vec<String> {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let r = check(
        &fs,
        &CheckOptions {
            threads: 2,
            progress: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut v: Vec<String> = r.problems.iter().map(|p| p.to_string()).collect();
    v.sort();
    v
}

#[test]
fn kernel_and_xfskit_finish_pptr_attris_alike() {
    if skip_unless_root("kernel_and_xfskit_finish_pptr_attris_alike") {
        return;
    }
    let s = Scratch::new("pptr");
    let img = s.0.join("img");
    let before = base(&img);
    let root = get(&before, "").1;
    let root_gen = gen_of(&img, root);
    let (_, d, _) = get(&before, "/d").clone();
    let (_, e, _) = get(&before, "/e").clone();
    let dgen = gen_of(&img, d);
    let egen = gen_of(&img, e);
    // The kernel wrote the pointers the tree implies.
    let a = get(&before, "/a");
    assert_eq!(a.2, vec![(b"a".to_vec(), root, root_gen)], "{before:?}");
    let h = get(&before, "/h");
    assert_eq!(h.2.len(), 41, "{h:?}");
    assert_eq!(get(&before, "/d/sub").2, vec![(b"sub".to_vec(), d, dgen)]);
    let f = |p: &str| {
        let (_, ino, _) = get(&before, p);
        (*ino, gen_of(&img, *ino))
    };
    let (ia, ga) = f("/a");
    let (ib, gb) = f("/b");
    let (ic, gc) = f("/c");
    let (idup, gdup) = f("/dup");
    let (imiss, gmiss) = f("/missing");
    let (ih, gh) = f("/h");
    let (is, gs) = f("/d/s");
    let (il, gl) = f("/l");
    let (isub, gsub) = f("/d/sub");
    use XFS_ATTRI_OP_FLAGS_PPTR_REMOVE as RM;
    use XFS_ATTRI_OP_FLAGS_PPTR_REPLACE as REP;
    use XFS_ATTRI_OP_FLAGS_PPTR_SET as SET;
    let replace = |id, ino, igen, old: &[u8], ov: Vec<u8>, new: &[u8], nv: Vec<u8>| {
        let mut x = pptr_attri(id, ino, igen, REP, old, &ov);
        x.new_name = new.to_vec();
        x.new_value = nv;
        x
    };
    let list = vec![
        // Short form: a new pointer, an existing one set again, removes
        // of an existing and a missing one, replaces.
        pptr_attri(0x301, ia, ga, SET, b"a-in-d", &rec(d, dgen)),
        pptr_attri(0x302, idup, gdup, SET, b"dup", &rec(root, root_gen)),
        pptr_attri(0x303, ib, gb, RM, b"b", &rec(root, root_gen)),
        pptr_attri(0x304, imiss, gmiss, RM, b"missing", &rec(d, dgen)),
        replace(
            0x305,
            ic,
            gc,
            b"c",
            rec(root, root_gen),
            b"c-moved",
            rec(e, egen),
        ),
        // Same name, another parent: a second pointer of that name.
        pptr_attri(0x306, is, gs, SET, b"s", &rec(root, root_gen)),
        // Replace whose old pointer is not there.
        replace(0x307, il, gl, b"nope", rec(d, dgen), b"l13", rec(e, egen)),
        // Leaf: remove, set, replace among 41 pointers.
        pptr_attri(0x308, ih, gh, RM, b"link-with-a-long-name-7", &rec(d, dgen)),
        pptr_attri(0x309, ih, gh, SET, b"link-in-e", &rec(e, egen)),
        replace(
            0x30a,
            ih,
            gh,
            b"link-with-a-long-name-20",
            rec(d, dgen),
            b"h-again",
            rec(root, root_gen),
        ),
        pptr_attri(0x30b, ih, gh, RM, b"h", &rec(d, dgen)),
        // A directory's pointer.
        replace(
            0x30c,
            isub,
            gsub,
            b"sub",
            rec(d, dgen),
            b"sub2",
            rec(e, egen),
        ),
        // Replace onto a pointer that is there already (set by 0x301).
        replace(
            0x30d,
            ia,
            ga,
            b"a",
            rec(root, root_gen),
            b"a-in-d",
            rec(d, dgen),
        ),
        // A set on the root directory, which has no attribute fork.
        pptr_attri(0x30e, root, root_gen, SET, b"root", &rec(d, dgen)),
    ];
    crash_with(&img, &list.iter().map(attri_regions).collect::<Vec<_>>());
    if let Some(d) = std::env::var_os("XFSKIT_PPTR_DUMP") {
        std::fs::copy(&img, Path::new(&d).join("crashed.img")).unwrap();
    }
    let kimg = s.0.join("kernel.img");
    let ximg = s.0.join("xfskit.img");
    std::fs::copy(&img, &kimg).unwrap();
    std::fs::copy(&img, &ximg).unwrap();

    let kmnt = s.0.join("kmnt");
    kernel_mount_rw_at(&kimg, &kmnt).unwrap_or_else(|e| panic!("kernel replay: {e}"));
    let (ok, ls) = run("ls", &["-laR", &kmnt.display().to_string()]);
    assert!(ok, "{ls}");
    kernel_umount(&kmnt);
    let kernel = pptrs(&kimg);

    let r = Fs::recover(&ximg, &RecoverOptions::default()).unwrap();
    assert_eq!(r.rui_updates, list.len());
    let ours = pptrs(&ximg);
    kernel_mount_rw_at(&ximg, &kmnt).unwrap_or_else(|e| panic!("mount after xfskit recover: {e}"));
    let (ok, ls2) = run("ls", &["-laR", &kmnt.display().to_string()]);
    assert!(ok, "{ls2}");
    kernel_umount(&kmnt);
    let _ = std::fs::remove_dir(&kmnt);
    assert_eq!(ls.replace("kmnt", ""), ls2.replace("kmnt", ""));

    // The intents did what they say (so the comparison means something).
    let k = |p: &str| get(&kernel, p).2.clone();
    assert_eq!(k("/a"), vec![(b"a-in-d".to_vec(), d, dgen)]);
    assert!(k("").is_empty());
    assert_eq!(k("/dup").len(), 1);
    assert!(k("/b").is_empty());
    assert_eq!(k("/c"), vec![(b"c-moved".to_vec(), e, egen)]);
    assert_eq!(k("/d/s").len(), 3);
    assert!(k("/l").contains(&(b"l13".to_vec(), e, egen)));
    assert_eq!(k("/h").len(), 41);
    assert_eq!(k("/d/sub"), vec![(b"sub2".to_vec(), e, egen)]);
    for ((kp, ki, kv), (xp, xi, xv)) in kernel.iter().zip(&ours) {
        assert_eq!((kp, ki), (xp, xi));
        assert_eq!(kv, xv, "{kp}: parent pointers differ (kernel, xfskit)");
    }
    assert_eq!(kernel, ours);
    // The intents set pointers the tree does not back (and removed some
    // it does): check reports those, and only those, alike on both.
    let kf = check_findings(&kimg);
    let xf = check_findings(&ximg);
    assert!(!kf.is_empty(), "check finds the pointers the intents left");
    assert!(
        kf.iter().all(|p| p.starts_with("parent pointer")),
        "xfskit check of the kernel's result: {kf:#?}"
    );
    assert_eq!(kf, xf, "check's findings differ (kernel, xfskit)");
    let n: usize = kernel.iter().map(|x| x.2.len()).sum();
    println!(
        "{} PPTR ATTRIs finished alike; {} inodes, {n} parent pointers compared",
        list.len(),
        kernel.len()
    );
}

/// A bad PPTR ATTRI: both recoveries refuse it, ours naming the log
/// record and writing nothing.
#[test]
fn bad_pptr_attris_are_refused() {
    if skip_unless_root("bad_pptr_attris_are_refused") {
        return;
    }
    let s = Scratch::new("pptr-bad");
    let img = s.0.join("img");
    let before = base(&img);
    let root = get(&before, "").1;
    let root_gen = gen_of(&img, root);
    let (_, ia, _) = get(&before, "/a").clone();
    let ga = gen_of(&img, ia);
    let good = pptr_attri(
        0x401,
        ia,
        ga,
        XFS_ATTRI_OP_FLAGS_PPTR_SET,
        b"x",
        &rec(root, root_gen),
    );
    let mut wrong_gen = good.clone();
    wrong_gen.igen = ga.wrapping_add(1);
    // A value of 16 bytes instead of a 12-byte parent record.
    let mut r16 = attri_regions(&good);
    r16[0][32] = 16;
    r16[2].resize(16, 0);
    // A parent record naming inode 0.
    let mut zero = good.clone();
    zero.value = rec(0, 0);
    for (tag, regions, want) in [
        ("parent-ino", attri_regions(&zero), "parent inode 0"),
        ("generation", attri_regions(&wrong_gen), "generation"),
        ("value-size", r16, "value of 16 bytes"),
    ] {
        let cimg = s.0.join(format!("{tag}.img"));
        std::fs::copy(&img, &cimg).unwrap();
        crash_with(&cimg, &[regions]);
        let bytes = std::fs::read(&cimg).unwrap();
        let e = Fs::recover(&cimg, &RecoverOptions::default()).unwrap_err();
        let msg = e.to_string();
        println!("{tag}: xfskit: {msg}");
        assert!(msg.contains("log block") && msg.contains(want), "{msg}");
        assert!(std::fs::read(&cimg).unwrap() == bytes, "{tag}: wrote");
        let mnt = s.0.join("bmnt");
        match kernel_mount_rw_at(&cimg, &mnt) {
            Ok(()) => {
                kernel_umount(&mnt);
                panic!("{tag}: the kernel replayed the bad ATTRI");
            }
            Err(k) => println!("{tag}: kernel refused: {k}"),
        }
        let _ = std::fs::remove_dir(&mnt);
    }
}

/// xfskit's recovery of PPTR ATTRIs crashed at every write (torn every
/// other time) and recovered again gives the kernel's parent pointers.
#[test]
fn pptr_recovery_interrupted_at_every_write() {
    if skip_unless_root("pptr_recovery_interrupted_at_every_write") {
        return;
    }
    let s = Scratch::new("pptr-crash");
    let img = s.0.join("img");
    let before = base(&img);
    let root = get(&before, "").1;
    let root_gen = gen_of(&img, root);
    let (_, d, _) = get(&before, "/d").clone();
    let dgen = gen_of(&img, d);
    let f = |p: &str| {
        let (_, ino, _) = get(&before, p);
        (*ino, gen_of(&img, *ino))
    };
    let (ia, ga) = f("/a");
    let (ib, gb) = f("/b");
    let (ih, gh) = f("/h");
    use XFS_ATTRI_OP_FLAGS_PPTR_REMOVE as RM;
    use XFS_ATTRI_OP_FLAGS_PPTR_SET as SET;
    let list = [
        pptr_attri(0x501, ia, ga, SET, b"a-in-d", &rec(d, dgen)),
        pptr_attri(0x502, ib, gb, RM, b"b", &rec(root, root_gen)),
        pptr_attri(0x503, ih, gh, RM, b"link-with-a-long-name-3", &rec(d, dgen)),
        pptr_attri(0x504, ih, gh, SET, b"another", &rec(root, root_gen)),
    ];
    crash_with(&img, &list.iter().map(attri_regions).collect::<Vec<_>>());
    let kimg = s.0.join("kernel.img");
    std::fs::copy(&img, &kimg).unwrap();
    let kmnt = s.0.join("kmnt");
    kernel_mount_rw_at(&kimg, &kmnt).unwrap_or_else(|e| panic!("kernel replay: {e}"));
    kernel_umount(&kmnt);
    let want = pptrs(&kimg);
    let (dev, r) = recover_on(&img, None, false);
    assert_eq!(r.unwrap().rui_updates, list.len());
    let total = dev.writes();
    let fs = Fs::from_device(Box::new(Shared(dev.clone())), &OpenOptions::default()).unwrap();
    assert_eq!(want, pptrs_of(&fs), "uninterrupted recovery");
    drop(fs);
    let crashed = s.0.join("crashed.img");
    for n in 1..=total {
        let tear = n % 2 == 1;
        let (dev, r) = recover_on(&img, Some(n), tear);
        assert!(
            r.is_err(),
            "write {n} of {total} failed, yet recovery returned"
        );
        if n == total / 2 {
            dev.save(&img, &crashed);
        }
        dev.revive();
        if let Err(e) = xfskit::log::recover::recover_device(
            Arc::new(Shared(dev.clone())),
            &RecoverOptions::default(),
        ) {
            panic!("crash at write {n}: recovery after the crash: {e}");
        }
        let fs = Fs::from_device(Box::new(Shared(dev.clone())), &OpenOptions::default()).unwrap();
        assert_eq!(want, pptrs_of(&fs), "crash at write {n} of {total}");
        drop(fs);
    }
    // The middle crash point, recovered by the kernel.
    kernel_mount_rw_at(&crashed, &kmnt).unwrap_or_else(|e| panic!("kernel after a crash: {e}"));
    kernel_umount(&kmnt);
    let _ = std::fs::remove_dir(&kmnt);
    assert_eq!(
        want,
        pptrs(&crashed),
        "middle crash recovered by the kernel"
    );
    println!("{total} crash points recovered to the kernel's parent pointers");
}

//! Unfinished attribute intents (ATTRIs) are finished by recovery as the
//! kernel finishes them.
//!
//! This kernel never logs ATTRIs by itself here, so the test writes them:
//! an image made by mkfs.xfs gets files and xattrs, then xfskit's
//! journaled engine logs ATTRIs without their ATTRDs, forces the log and
//! is dropped without writing back (a crash), with the logged-xattrs
//! log-incompat bit set as the kernel wants it. One copy is mounted by the
//! kernel (which replays the log and finishes the ATTRIs), the other is
//! recovered by `Fs::recover`; every file must then have the same xattrs
//! through a kernel mount, and `xfs_repair -n` must be clean on both.
//! Bad ATTRIs are refused by both, with an error naming the log record
//! and nothing written.

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{recover_on, Shared};
use namespace_common::*;
use std::path::Path;
use std::sync::Arc;
use write_common::*;
use xfs_format::log_intent::*;
use xfskit::build::NodeKind;
use xfskit::log::attr::{attri_regions, Attri};
use xfskit::log::recover::{recover_device, RecoverOptions};
use xfskit::{Fs, Ino, OpenOptions};

const ROOT: u32 = xfs_format::attr::XFS_ATTR_ROOT as u32;
const SECURE: u32 = xfs_format::attr::XFS_ATTR_SECURE as u32;

/// Sets or clears the logged-xattrs log-incompat bit of the primary
/// superblock (the kernel reads only that one), restamping its CRC.
fn set_log_xattrs(img: &Path, on: bool) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .unwrap();
    let mut sb = vec![0u8; 512];
    f.read_exact_at(&mut sb, 0).unwrap();
    let sect = usize::from(u16::from_be_bytes([sb[102], sb[103]]));
    let mut sb = vec![0u8; sect];
    f.read_exact_at(&mut sb, 0).unwrap();
    let mut w = u32::from_be_bytes(sb[220..224].try_into().unwrap());
    let bit = xfs_format::sb::XFS_SB_FEAT_INCOMPAT_LOG_XATTRS;
    if on {
        w |= bit;
    } else {
        w &= !bit;
    }
    sb[220..224].copy_from_slice(&w.to_be_bytes());
    xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
    f.write_all_at(&sb, 0).unwrap();
}

fn new_file(fs: &Fs, name: &str) -> Ino {
    let root = fs.geometry().root_ino;
    let ino = fs
        .create(
            root,
            name.as_bytes(),
            &NodeKind::File { size: 0 },
            &meta(0o644, 0),
        )
        .unwrap();
    fs.write_at(ino, 0, name.as_bytes()).unwrap();
    ino
}

fn value(tag: u64, len: usize) -> Vec<u8> {
    Rng(tag.wrapping_mul(0x9e37_79b9) | 1).bytes(len)
}

/// An ATTRI for `ino`.
fn attri(id: u64, ino: Ino, op: u32, filter: u32, name: &[u8], val: &[u8]) -> Attri {
    Attri {
        id,
        rec_blk: 0,
        ino: ino.0,
        igen: 0,
        op,
        filter,
        name: name.to_vec(),
        new_name: Vec::new(),
        value: val.to_vec(),
        new_value: Vec::new(),
    }
}

/// Makes the base image: files with xattrs in every attr fork format,
/// written in place (clean log).
fn base(img: &Path) -> Vec<(String, Ino)> {
    mkfs_xfs(img, 320 << 20, "");
    let fs = open_rw(img);
    let mut files = Vec::new();
    // Short form.
    for n in [
        "sf-new",
        "sf-set-existing",
        "sf-replace",
        "sf-remove",
        "sf-remove-missing",
    ] {
        let ino = new_file(&fs, n);
        fs.set_xattr(ino, b"user.a", b"one").unwrap();
        fs.set_xattr(ino, b"trusted.t", b"two").unwrap();
        fs.set_xattr(ino, b"security.s", b"three").unwrap();
        files.push((n.to_string(), ino));
    }
    // No attr fork at all.
    files.push(("bare".into(), new_file(&fs, "bare")));
    // Leaf: a few dozen attributes; and one with a remote value.
    for n in ["leaf-set", "leaf-remove", "leaf-remote-remove", "leaf-big"] {
        let ino = new_file(&fs, n);
        for i in 0..30u64 {
            fs.set_xattr(ino, format!("user.k{i:03}").as_bytes(), &value(i, 60))
                .unwrap();
        }
        fs.set_xattr(ino, b"user.remote", &value(99, 6000)).unwrap();
        files.push((n.to_string(), ino));
    }
    // Node: enough attributes for a da-btree above the leaves.
    let ino = new_file(&fs, "node");
    for i in 0..400u64 {
        fs.set_xattr(ino, format!("user.n{i:04}").as_bytes(), &value(i, 40))
            .unwrap();
    }
    files.push(("node".into(), ino));
    // A directory with inline entries.
    let root = fs.geometry().root_ino;
    let d = fs
        .create(root, b"dir", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    files.push(("dir".into(), d));
    let d2 = fs
        .create(root, b"dir2", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    fs.set_xattr(d2, b"user.d", b"x").unwrap();
    files.push(("dir2".into(), d2));
    fs.sync().unwrap();
    drop(fs);
    // The attr forks are in the formats the names say.
    for (n, ino) in &files {
        let want = if n.starts_with("sf-") {
            "core.aformat = 1 (local)"
        } else if n.starts_with("leaf-") {
            "hdr.info.hdr.magic = 0x3bee"
        } else if n == "node" {
            "hdr.info.hdr.magic = 0x3ebe"
        } else {
            continue;
        };
        let (ok, out) = run(
            "xfs_db",
            &[
                "-r",
                "-c",
                &format!("inode {}", ino.0),
                "-c",
                "p core.aformat",
                "-c",
                "ablock 0",
                "-c",
                "p hdr.info.hdr.magic",
                &img.display().to_string(),
            ],
        );
        assert!(ok && out.contains(want), "{n}: {out}");
    }
    files
}

/// The intents the crash leaves unfinished (one transaction each).
fn intents(files: &[(String, Ino)]) -> Vec<Attri> {
    let f = |n: &str| files.iter().find(|(m, _)| m == n).unwrap().1;
    use XFS_ATTRI_OP_FLAGS_REMOVE as RM;
    use XFS_ATTRI_OP_FLAGS_REPLACE as REP;
    use XFS_ATTRI_OP_FLAGS_SET as SET;
    vec![
        attri(0x101, f("sf-new"), SET, 0, b"new", b"fresh value"),
        attri(
            0x102,
            f("sf-set-existing"),
            SET,
            0,
            b"a",
            b"set over the old one",
        ),
        attri(0x103, f("sf-replace"), REP, SECURE, b"s", b"replaced"),
        attri(0x104, f("sf-remove"), RM, ROOT, b"t", b""),
        attri(0x105, f("sf-remove-missing"), RM, 0, b"nothing", b""),
        attri(0x106, f("bare"), SET, ROOT, b"first", &value(7, 100)),
        attri(0x107, f("leaf-set"), SET, 0, b"k007", &value(8, 200)),
        attri(0x108, f("leaf-remove"), RM, 0, b"k010", b""),
        attri(0x109, f("leaf-remote-remove"), RM, 0, b"remote", b""),
        attri(0x10a, f("leaf-big"), SET, 0, b"huge", &value(9, 20000)),
        attri(0x10b, f("node"), REP, 0, b"n0123", &value(10, 9000)),
        attri(0x10c, f("node"), SET, SECURE, b"sec", b"in a node"),
        attri(0x10d, f("dir"), SET, 0, b"on-a-dir", &value(11, 300)),
        attri(0x10f, f("dir2"), SET, 0, b"dir-attr", &value(12, 300)),
        attri(0x110, f("leaf-set"), SET, 0, b"empty", b""),
        attri(
            0x10e,
            f("sf-new"),
            REP,
            ROOT,
            b"not-there-yet",
            b"replace makes it",
        ),
    ]
}

/// Opens `img` with the journaled engine, logs `items` (one transaction
/// each), forces the log and drops the filesystem without writing back.
fn crash_with(img: &Path, items: &[Vec<Vec<u8>>]) {
    let fs = open_rw(img);
    for regions in items {
        let mut tp = fs.trans().unwrap();
        tp.log_raw_item(regions.clone());
        tp.commit().unwrap();
    }
    fs.force_log().unwrap();
    // Dropped without sync: the intents are only in the log.
}

/// Every file's xattrs as `getfattr -R -d -m - -e hex` prints them under
/// a kernel mount, paths relative to the mount.
fn kernel_xattrs(mnt: &Path) -> String {
    let (ok, out) = run(
        "getfattr",
        &[
            "-R",
            "-d",
            "-m",
            "-",
            "-e",
            "hex",
            "--absolute-names",
            &mnt.display().to_string(),
        ],
    );
    assert!(ok, "getfattr: {out}");
    out.replace(&mnt.display().to_string(), "")
}

/// Mounts `img` read-write (the kernel replays and finishes intents),
/// reads the xattrs, unmounts. Err with dmesg's tail when the mount fails.
fn kernel_mount_rw(img: &Path) -> Result<String, String> {
    let mnt = img.with_extension("kmnt");
    kernel_mount_rw_at(img, &mnt)?;
    let x = kernel_xattrs(&mnt);
    kernel_umount(&mnt);
    let _ = std::fs::remove_dir(&mnt);
    Ok(x)
}

fn copy(src: &Path, dst: &Path) {
    std::fs::copy(src, dst).unwrap();
}

#[test]
fn kernel_and_xfskit_finish_attris_alike() {
    if skip_unless_root("kernel_and_xfskit_finish_attris_alike") {
        return;
    }
    let s = Scratch::new("attri");
    let img = s.0.join("img");
    let files = base(&img);
    let list = intents(&files);
    set_log_xattrs(&img, true);
    crash_with(&img, &list.iter().map(attri_regions).collect::<Vec<_>>());

    // What `xfskit log` sees: every ATTRI unfinished.
    {
        let fs = Fs::open(
            &img,
            &OpenOptions {
                norecovery: true,
                ..Default::default()
            },
        )
        .unwrap();
        let c = xfskit::log::read_log(fs.device(), fs.geometry()).unwrap();
        let open = xfskit::log::intents::unfinished(&c.transactions).unwrap();
        assert_eq!(open.len(), list.len(), "{open:?}");
    }

    if let Some(d) = std::env::var_os("XFSKIT_ATTRI_DUMP") {
        copy(&img, &Path::new(&d).join("crashed.img"));
    }
    let kimg = s.0.join("kernel.img");
    let ximg = s.0.join("xfskit.img");
    copy(&img, &kimg);
    copy(&img, &ximg);

    let kernel = kernel_mount_rw(&kimg).unwrap_or_else(|e| panic!("kernel replay: {e}"));
    assert_repair_clean(&kimg);

    let r = Fs::recover(&ximg, &RecoverOptions::default()).unwrap();
    println!(
        "xfskit recover: {} records, {} attribute updates",
        r.records, r.rui_updates
    );
    assert_eq!(r.rui_updates, list.len());
    assert_repair_clean(&ximg);
    // The log is clean: the log-incompat bit goes, as the kernel's
    // unmount clears it.
    for (which, p) in [("kernel", &kimg), ("xfskit", &ximg)] {
        let fs = Fs::open(p, &OpenOptions::default()).unwrap();
        assert_eq!(fs.geometry().features_log_incompat, 0, "{which}");
    }
    let ours = kernel_mount_rw(&ximg).unwrap_or_else(|e| panic!("mount after recover: {e}"));
    assert_repair_clean(&ximg);

    if let Some(d) = std::env::var_os("XFSKIT_ATTRI_DUMP") {
        std::fs::write(Path::new(&d).join("kernel.txt"), &kernel).unwrap();
        std::fs::write(Path::new(&d).join("xfskit.txt"), &ours).unwrap();
    }
    // The intents did what they say (so the comparison means something).
    for want in [
        "# file: /sf-new\n",
        "user.new=0x",
        "trusted.not-there-yet=0x",
        "user.huge=0x",
        "security.sec=0x",
        "user.dir-attr=0x",
    ] {
        assert!(
            kernel.contains(want),
            "kernel result lacks {want}:\n{kernel}"
        );
    }
    // A set on an inode without an attribute fork is done without a
    // change: the kernel adds the fork before it logs such an intent.
    assert!(!kernel.contains("trusted.first=") && !kernel.contains("user.on-a-dir="));
    let file = |n: &str| {
        kernel
            .split("# file: ")
            .find(|b| b.starts_with(&format!("/{n}\n")))
            .unwrap_or("")
            .to_string()
    };
    assert!(!file("sf-remove").contains("trusted.t="));
    assert!(file("sf-remove-missing").contains("trusted.t="));
    assert!(!file("leaf-remove").contains("user.k010="));
    assert!(file("leaf-set").contains("user.k010="));
    // A set with an empty value: two regions, no value region.
    assert!(file("leaf-set").contains("user.empty="));
    assert!(!file("leaf-remote-remove").contains("user.remote="));
    assert!(kernel.contains(&format!(
        "user.a=0x{}",
        b"set over the old one"
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )));
    assert_eq!(
        kernel, ours,
        "xattrs differ after the kernel's and xfskit's recovery"
    );
    println!(
        "{} ATTRIs finished alike; {} bytes of getfattr output compared",
        list.len(),
        kernel.len()
    );
}

/// A log whose ATTRI is bad: both recoveries refuse it, ours with an
/// error naming the log record and without writing anything.
fn refused(tag: &str, items: Vec<Vec<Vec<u8>>>, bit: bool, want: &str) {
    let s = Scratch::new(tag);
    let img = s.0.join("img");
    let files = base(&img);
    let _ = files;
    if bit {
        set_log_xattrs(&img, true);
    }
    crash_with(&img, &items);
    let before = std::fs::read(&img).unwrap();
    let e = Fs::recover(&img, &RecoverOptions::default()).unwrap_err();
    let msg = e.to_string();
    println!("{tag}: xfskit: {msg}");
    assert!(msg.contains("log block"), "{msg}");
    assert!(msg.contains(want), "{msg}");
    assert!(
        std::fs::read(&img).unwrap() == before,
        "{tag}: the refused recovery wrote to the image"
    );
    match kernel_mount_rw(&img) {
        Ok(x) => panic!("{tag}: the kernel replayed the bad ATTRI:\n{x}"),
        Err(k) => println!("{tag}: kernel refused: {}", k.lines().next().unwrap_or("")),
    }
}

#[test]
fn bad_attris_are_refused() {
    if skip_unless_root("bad_attris_are_refused") {
        return;
    }
    let ino = Ino(131);
    let good = attri(0x201, ino, XFS_ATTRI_OP_FLAGS_SET, 0, b"name", b"value");
    // A name length the name region does not hold.
    let mut r = attri_regions(&good);
    r[0][28] = 9;
    refused("attri-len", vec![r], true, "name of 9 bytes");
    // Unknown operation flags.
    let mut r = attri_regions(&good);
    r[0][25] = 0x10;
    refused("attri-flags", vec![r], true, "unknown operation flags");
    // Two namespaces at once.
    let mut r = attri_regions(&good);
    r[0][36] = (ROOT | SECURE) as u8;
    refused("attri-filter", vec![r], true, "more than one namespace");
    // A good ATTRI on a free inode: found only as it is finished, yet
    // before anything is written.
    refused(
        "attri-free",
        vec![attri_regions(&attri(
            0x202,
            Ino(190),
            XFS_ATTRI_OP_FLAGS_SET,
            0,
            b"name",
            b"value",
        ))],
        true,
        "inode 190",
    );
    // A good ATTRI without the log-incompat bit the kernel requires.
    refused(
        "attri-nobit",
        vec![attri_regions(&good)],
        false,
        "log-incompat",
    );
}

/// The tree (xattrs included) the kernel sees on `img` after replaying it.
fn kernel_tree(img: &Path) -> Tree {
    let mnt = img.with_extension("tmnt");
    kernel_mount_rw_at(img, &mnt).unwrap_or_else(|e| panic!("mount {}: {e}", img.display()));
    let t = std::panic::catch_unwind(|| walk_host(&mnt));
    kernel_umount(&mnt);
    let _ = std::fs::remove_dir(&mnt);
    t.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// xfskit's recovery of ATTRIs crashed at every write (half-written
/// every other time): recovering again, by xfskit or (at some of the
/// points) by the kernel, gives what the kernel's recovery gives.
#[test]
fn attri_recovery_interrupted_at_every_write() {
    if skip_unless_root("attri_recovery_interrupted_at_every_write") {
        return;
    }
    let s = Scratch::new("attri-crash");
    let img = s.0.join("img");
    let files = base(&img);
    let list = intents(&files);
    set_log_xattrs(&img, true);
    crash_with(&img, &list.iter().map(attri_regions).collect::<Vec<_>>());
    let kimg = s.0.join("kernel.img");
    copy(&img, &kimg);
    let want = kernel_tree(&kimg);
    // Opening the crashed image replays and finishes in memory alike.
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "in-memory recovery");
    drop(fs);
    let (dev, r) = recover_on(&img, None, false);
    assert_eq!(r.unwrap().rui_updates, list.len());
    let total = dev.writes();
    let fs = Fs::from_device(Box::new(Shared(dev.clone())), &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "uninterrupted recovery");
    drop(fs);
    let crashed = s.0.join("crashed.img");
    let again = s.0.join("again.img");
    let stride = (total / 6).max(1);
    let mut kernel_looks = 0;
    for n in 1..=total {
        let tear = n % 2 == 1;
        let (dev, r) = recover_on(&img, Some(n), tear);
        assert!(
            r.is_err(),
            "write {n} of {total} failed, yet recovery returned"
        );
        let what = format!(
            "crash at write {n} of {total}{}",
            if tear { " (torn)" } else { "" }
        );
        let look = n % stride == 0 || n + 3 > total;
        if look {
            dev.save(&img, &crashed);
        }
        dev.revive();
        if let Err(e) = recover_device(Arc::new(Shared(dev.clone())), &RecoverOptions::default()) {
            panic!("{what}: recovery after the crash: {e}");
        }
        let fs = Fs::from_device(Box::new(Shared(dev.clone())), &OpenOptions::default()).unwrap();
        assert_tree_eq(&want, &walk_lib(&fs), &what);
        drop(fs);
        if look {
            kernel_looks += 1;
            dev.save(&img, &again);
            assert_repair_clean(&again);
            assert_tree_eq(
                &want,
                &kernel_tree(&crashed),
                &format!("{what}, recovered by the kernel"),
            );
            assert_repair_clean(&crashed);
        }
    }
    println!("{total} crash points, {kernel_looks} also recovered by the kernel");
}

//! `xfskit admin`: the label and UUID, against xfsprogs 7.2's xfs_admin.
//!
//! Each change is made with xfskit on one image and with xfs_admin on a
//! copy; then the superblock of every AG must carry the same fields
//! (`xfs_db -c 'sb N' -c p`; the primary's LSN and CRC aside: xfskit
//! journals the primary, xfs_admin writes it in place), `xfs_admin -l -u`
//! prints the same label and UUID, meta_uuid and the META_UUID feature are
//! what xfs_admin leaves, `xfs_repair -n` is clean, the log is clean and
//! every log record header names the new UUID (xfs_logprint). As root the
//! kernel mounts the result, writes to it, and an xfskit edit after it
//! leaves a clean log; partitioned and qcow2 disks too.

mod common;

use common::fixtures::xfskit_ok as xfskit;

use common::disks::{sh, DevMount};
use common::editimg::{Image, Kind};
use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::{require_root, skip, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

const META_UUID_BIT: u32 = 0x4;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A 300 MiB image made by mkfs.xfs 7.2 (`debian`: the system's mkfs.xfs).
fn mkfs(bin: &Path, img: &Path, debian: bool, extra: &[&str]) {
    mkfs_d(bin, img, debian, "size=300m", extra)
}

/// [`mkfs`] with `-d` options `d` (the file's name added).
fn mkfs_d(bin: &Path, img: &Path, debian: bool, d: &str, extra: &[&str]) {
    let mkfs = if debian {
        PathBuf::from("mkfs.xfs")
    } else {
        bin.join("mkfs.xfs")
    };
    let arg = format!("{d},file,name={}", s(img));
    let out = Command::new(mkfs)
        .args(["-q", "-f", "-d", &arg])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs: {}", output_text(&out));
}

/// `xfs_db -r -c 'sb N' -c 'p FIELD'`'s value.
fn sb_field(bin: &Path, img: &Path, agno: u32, field: &str) -> String {
    let out = tool_72(
        bin,
        "xfs_db",
        &[
            "-r",
            "-c",
            &format!("sb {agno}"),
            "-c",
            &format!("p {field}"),
            s(img),
        ],
    );
    out.trim()
        .strip_prefix(&format!("{field} = "))
        .unwrap_or_else(|| panic!("no {field} in {out}"))
        .to_string()
}

fn incompat(bin: &Path, img: &Path, agno: u32) -> u32 {
    let v = sb_field(bin, img, agno, "features_incompat");
    u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
}

/// Every field of AG `agno`'s superblock as xfs_db prints it; the
/// primary's `lsn` and `crc` left out (see the module comment).
fn sb_fields(bin: &Path, img: &Path, agno: u32) -> Vec<String> {
    let out = tool_72(
        bin,
        "xfs_db",
        &["-r", "-c", &format!("sb {agno}"), "-c", "p", s(img)],
    );
    out.lines()
        .filter(|l| agno != 0 || !(l.starts_with("lsn = ") || l.starts_with("crc = ")))
        .map(str::to_string)
        .collect()
}

/// The superblocks of every AG of `a` and `b` carry the same fields.
fn assert_same_sbs(bin: &Path, a: &Path, b: &Path, after: &str) {
    let ags: u32 = sb_field(bin, a, 0, "agcount").parse().unwrap();
    assert!(ags > 1, "one AG only");
    for agno in 0..ags {
        let (x, y) = (sb_fields(bin, a, agno), sb_fields(bin, b, agno));
        let diff: Vec<String> = x
            .iter()
            .zip(&y)
            .filter(|(p, q)| p != q)
            .map(|(p, q)| format!("xfskit {p} / xfs_admin {q}"))
            .collect();
        assert!(
            diff.is_empty() && x.len() == y.len(),
            "{after}: superblock of AG {agno} differs from xfs_admin's:\n{}",
            diff.join("\n")
        );
    }
}

/// xfs_repair -n (7.2) is clean, the log is clean and every record header
/// in it names `uuid` (when given).
fn assert_clean(bin: &Path, img: &Path, uuid: Option<&str>, after: &str) {
    let out = Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{after}: xfs_repair -n:\n{}",
        output_text(&out)
    );
    let log = xfskit(&["log", s(img)]);
    assert!(
        log.lines().next().is_some_and(|l| l.ends_with(", clean")),
        "{after}: log not clean:\n{log}"
    );
    if let Some(u) = uuid {
        let lp = tool_72(bin, "xfs_logprint", &[s(img)]);
        let uuids: Vec<&str> = lp
            .lines()
            .filter_map(|l| l.trim().strip_prefix("uuid: "))
            .map(|r| r.split_whitespace().next().unwrap_or(""))
            .collect();
        assert!(
            !uuids.is_empty(),
            "{after}: xfs_logprint shows no record:\n{lp}"
        );
        assert!(
            uuids.iter().all(|x| *x == u),
            "{after}: log records name another UUID than {u}: {uuids:?}"
        );
    }
}

/// `xfs_admin -l -u` of both images prints the same label and UUID, which
/// are `label` and `uuid`.
fn assert_admin_prints(bin: &Path, a: &Path, b: &Path, label: &str, uuid: &str, after: &str) {
    let want = format!("label = \"{label}\"\nUUID = {uuid}\n");
    for img in [a, b] {
        assert_eq!(
            tool_72(bin, "xfs_admin", &["-l", "-u", s(img)]),
            want,
            "{after}: {img:?}"
        );
    }
    assert_eq!(
        xfskit(&["admin", "-l", "-u", s(a)]),
        want,
        "{after}: xfskit admin -l -u"
    );
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

#[test]
fn label_set_clear_and_too_long() {
    let Some(bin) = xfsprogs_72_or_skip("label_set_clear_and_too_long") else {
        return;
    };
    let t = TempDir::new("admin-label");
    for debian in [false, true] {
        let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
        mkfs(&bin, &a, debian, &["-L", "first"]);
        copy(&a, &b);
        let uuid = sb_field(&bin, &a, 0, "uuid");
        assert_admin_prints(&bin, &a, &b, "first", &uuid, "mkfs");
        for (arg, label) in [
            ("root", "root"),
            ("abcdefghijkl", "abcdefghijkl"),
            ("--", ""),
        ] {
            let after = format!("-L {arg} (debian mkfs: {debian})");
            let out = xfskit(&["admin", "-L", arg, s(&a)]);
            assert_eq!(
                out,
                format!("writing all SBs\nnew label = \"{label}\"\n"),
                "{after}"
            );
            tool_72(&bin, "xfs_admin", &["-L", arg, s(&b)]);
            assert_admin_prints(&bin, &a, &b, label, &uuid, &after);
            assert_same_sbs(&bin, &a, &b, &after);
            assert_clean(&bin, &a, None, &after);
        }
        // 13 bytes: refused, nothing written.
        let before = std::fs::read(&a).unwrap();
        let o = xfskit_output(&["admin", "-L", "abcdefghijklm", s(&a)]);
        assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("at most 12 bytes"),
            "{}",
            output_text(&o)
        );
        assert!(
            std::fs::read(&a).unwrap() == before,
            "a refused label changed the image"
        );
        // Twelve bytes of a multi-byte name fit; thirteen do not.
        xfskit(&["admin", "-L", "ééééé", s(&a)]);
        assert_eq!(
            tool_72(&bin, "xfs_admin", &["-l", s(&a)]),
            "label = \"ééééé\"\n"
        );
        let o = xfskit_output(&["admin", "-L", "éééééééx", s(&a)]);
        assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
        // An xfskit edit after the change works and leaves a clean log.
        xfskit(&["mkdir", s(&a), "/after"]);
        assert_clean(&bin, &a, None, "mkdir after -L");
    }
}

/// The UUID changes of one run: each made with xfskit on `a` and
/// xfs_admin on `b`, checked after each.
fn uuid_steps(bin: &Path, a: &Path, b: &Path, after: &str) {
    let orig = sb_field(bin, a, 0, "uuid");
    let ags: u32 = sb_field(bin, a, 0, "agcount").parse().unwrap();
    let explicit = "6a2f1c3e-9b7d-4e21-8f55-0c1d2e3f4a5b";
    // (argument, the UUID after it, META_UUID set after it)
    let mut steps: Vec<(String, String, bool)> = vec![
        (explicit.into(), explicit.into(), true),
        ("generate".into(), String::new(), true),
        ("restore".into(), orig.clone(), false),
        (
            "nil".into(),
            "00000000-0000-0000-0000-000000000000".into(),
            true,
        ),
        (
            "NIL".into(),
            "00000000-0000-0000-0000-000000000000".into(),
            true,
        ),
        // The metadata UUID given explicitly clears the feature too.
        (orig.to_uppercase(), orig.clone(), false),
    ];
    for (arg, want, meta_set) in steps.iter_mut() {
        let step = format!("{after}: -U {arg}");
        let out = xfskit(&["admin", "-U", arg, s(a)]);
        let new = out
            .lines()
            .find_map(|l| l.strip_prefix("new UUID = "))
            .unwrap_or_else(|| panic!("{step}: no new UUID in:\n{out}"))
            .to_string();
        assert_eq!(
            out,
            format!("Clearing log and setting UUID\nwriting all SBs\nnew UUID = {new}\n"),
            "{step}"
        );
        if want.is_empty() {
            assert_ne!(new, orig, "{step}: generate gave the old UUID");
            *want = new.clone();
        }
        assert_eq!(&new, want, "{step}");
        // xfs_admin makes the same change on the copy (the generated UUID
        // given explicitly).
        let theirs = if arg == "generate" {
            want.clone()
        } else {
            arg.clone()
        };
        tool_72(bin, "xfs_admin", &["-U", &theirs, s(b)]);
        assert_admin_prints(bin, a, b, "", want, &step);
        for agno in 0..ags {
            let set = incompat(bin, a, agno) & META_UUID_BIT != 0;
            assert_eq!(set, *meta_set, "{step}: META_UUID in AG {agno}");
            let meta = sb_field(bin, a, agno, "meta_uuid");
            let want_meta = if *meta_set {
                orig.clone()
            } else {
                "00000000-0000-0000-0000-000000000000".into()
            };
            assert_eq!(meta, want_meta, "{step}: meta_uuid of AG {agno}");
        }
        assert_same_sbs(bin, a, b, &step);
        assert_clean(bin, a, Some(want), &step);
    }
    // Restore without META_UUID: nothing to do, nothing printed.
    let before = std::fs::read(a).unwrap();
    assert_eq!(xfskit(&["admin", "-U", "restore", s(a)]), "");
    assert!(
        std::fs::read(a).unwrap() == before,
        "{after}: a restore with nothing to do wrote"
    );
    // Invalid: refused before anything is opened.
    let o = xfskit_output(&["admin", "-U", "6a2f1c3e-9b7d-4e21-8f55-0c1d2e3f4a5", s(a)]);
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    // An xfskit edit after the changes works and leaves a clean log.
    xfskit(&["admin", "-U", explicit, s(a)]);
    xfskit(&["mkdir", s(a), "/after"]);
    assert_clean(bin, a, Some(explicit), &format!("{after}: mkdir after -U"));
}

#[test]
fn uuid_generate_explicit_nil_restore() {
    let Some(bin) = xfsprogs_72_or_skip("uuid_generate_explicit_nil_restore") else {
        return;
    };
    let t = TempDir::new("admin-uuid");
    for debian in [false, true] {
        let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
        mkfs(&bin, &a, debian, &[]);
        copy(&a, &b);
        uuid_steps(&bin, &a, &b, &format!("debian mkfs: {debian}"));
    }
    // A log of 4k sectors with a stripe unit, and more AGs.
    let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
    mkfs_d(
        &bin,
        &a,
        false,
        "size=1g,agcount=12",
        &["-s", "size=4096", "-l", "su=32k"],
    );
    copy(&a, &b);
    uuid_steps(&bin, &a, &b, "4k sectors, log su=32k, 12 AGs");
}

#[test]
fn label_and_uuid_in_qcow2() {
    let Some(bin) = xfsprogs_72_or_skip("label_and_uuid_in_qcow2") else {
        return;
    };
    if let Some(t) = common::missing_tool(&["qemu-img"]) {
        return skip("label_and_uuid_in_qcow2", &format!("no {t}"));
    }
    let t = TempDir::new("admin-qcow2");
    let (raw, q, back) = (
        t.path().join("raw.img"),
        t.path().join("fs.qcow2"),
        t.path().join("back.img"),
    );
    mkfs(&bin, &raw, false, &[]);
    sh(&format!(
        "qemu-img convert -O qcow2 '{}' '{}'",
        s(&raw),
        s(&q)
    ));
    let u = "0f0e0d0c-0b0a-4908-8706-050403020100";
    let out = xfskit(&["admin", "-L", "inqcow", "-U", u, s(&q)]);
    assert!(
        out.contains("new label = \"inqcow\"") && out.contains(&format!("new UUID = {u}")),
        "{out}"
    );
    assert_eq!(
        xfskit(&["admin", "-l", "-u", s(&q)]),
        format!("label = \"inqcow\"\nUUID = {u}\n")
    );
    let check = sh(&format!(
        "qemu-img check '{}' 2>&1 && echo QCOW2-CLEAN || true",
        s(&q)
    ));
    assert!(check.contains("QCOW2-CLEAN"), "{check}");
    sh(&format!(
        "qemu-img convert -O raw '{}' '{}'",
        s(&q),
        s(&back)
    ));
    tool_72(&bin, "xfs_admin", &["-L", "inqcow", "-U", u, s(&raw)]);
    assert_admin_prints(&bin, &back, &raw, "inqcow", u, "qcow2");
    assert_same_sbs(&bin, &back, &raw, "qcow2");
    assert_clean(&bin, &back, Some(u), "qcow2");
    xfskit(&["mkdir", s(&q), "/after"]);
    sh(&format!(
        "rm -f '{1}'; qemu-img convert -O raw '{}' '{}'",
        s(&q),
        s(&back)
    ));
    assert_clean(&bin, &back, Some(u), "qcow2, mkdir after");
}

/// Mounts `dev` read-write with the kernel, writes a file, unmounts.
fn kernel_writes(dev: &str, mnt: &Path, name: &str) {
    let m = DevMount::new(dev, mnt, false);
    std::fs::write(m.dir.join(name), b"written by the kernel\n").unwrap();
    drop(m);
}

#[test]
fn kernel_mounts_and_writes_after_changes() {
    if !require_root("kernel_mounts_and_writes_after_changes") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("kernel_mounts_and_writes_after_changes") else {
        return;
    };
    let t = TempDir::new("admin-kernel");
    let mnt = t.path().join("mnt");
    let configs: [(bool, &str, &[&str]); 3] = [
        (false, "size=300m", &[]),
        (true, "size=300m", &[]),
        (
            false,
            "size=1g,agcount=12",
            &["-s", "size=4096", "-l", "su=32k"],
        ),
    ];
    for (debian, d, extra) in configs {
        let img = t.path().join("k.img");
        mkfs_d(&bin, &img, debian, d, extra);
        let l = s(&img).to_string();
        for (i, args) in [
            vec!["-U", "generate"],
            vec!["-L", "kern"],
            vec!["-U", "nil"],
            vec!["-U", "restore"],
            vec!["-L", "--", "-U", "generate"],
        ]
        .into_iter()
        .enumerate()
        {
            let after = format!("{args:?} (debian mkfs: {debian}, -d {d} {extra:?})");
            let mut a = vec!["admin"];
            a.extend(&args);
            a.push(&l);
            xfskit(&a);
            let loopdev = sh(&format!("losetup -f --show '{l}'")).trim().to_string();
            kernel_writes(&loopdev, &mnt, &format!("k{i}"));
            sh(&format!("losetup -d {loopdev}"));
            assert_clean(&bin, &img, None, &format!("{after}, kernel write"));
            xfskit(&["mkdir", &l, &format!("/x{i}")]);
            assert_clean(
                &bin,
                &img,
                None,
                &format!("{after}, kernel write, xfskit mkdir"),
            );
            let ls = xfskit(&["ls", &l, "/"]);
            assert!(
                ls.contains(&format!("k{i}")) && ls.contains(&format!("x{i}")),
                "{after}: {ls}"
            );
        }
    }
}

#[test]
fn uuid_refuses_a_dirty_log() {
    if !require_root("uuid_refuses_a_dirty_log") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("uuid_refuses_a_dirty_log") else {
        return;
    };
    let t = TempDir::new("admin-dirty");
    let img = t.path().join("d.img");
    mkfs(&bin, &img, false, &[]);
    let mnt = t.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    sh(&format!("mount -o loop '{}' '{}'", s(&img), s(&mnt)));
    std::fs::write(mnt.join("f"), b"data").unwrap();
    let shut = Command::new("xfs_io")
        .args(["-x", "-c", "shutdown -f"])
        .arg(&mnt)
        .status()
        .unwrap();
    common::must_umount(&mnt);
    assert!(shut.success());
    let before = std::fs::read(&img).unwrap();
    // xfs_admin refuses it too (and exits 0).
    let copy_img = t.path().join("copy.img");
    copy(&img, &copy_img);
    let theirs = tool_72(&bin, "xfs_admin", &["-U", "generate", s(&copy_img)]);
    assert!(theirs.contains("needs to\nbe replayed"), "{theirs}");
    for args in [vec!["-U", "generate"], vec!["-L", "x", "-U", "generate"]] {
        let mut a = vec!["admin"];
        a.extend(&args);
        a.push(s(&img));
        let o = xfskit_output(&a);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", output_text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("xfskit recover"), "{err}");
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{args:?}: the image changed"
        );
    }
    xfskit(&["recover", s(&img)]);
    let out = xfskit(&["admin", "-U", "generate", s(&img)]);
    let new = out
        .lines()
        .find_map(|l| l.strip_prefix("new UUID = "))
        .unwrap()
        .to_string();
    assert_clean(&bin, &img, Some(&new), "-U after recover");
    assert!(xfskit(&["ls", s(&img), "/"]).contains('f'));
}

#[test]
fn partitioned_and_qcow2_disks() {
    if !require_root("partitioned_and_qcow2_disks") {
        return;
    }
    if let Some(t) = common::missing_tool(&["sgdisk", "qemu-img"]) {
        return skip("partitioned_and_qcow2_disks", &format!("no {t}"));
    }
    let t = TempDir::new("admin-disks");
    for kind in [Kind::Gpt, Kind::Qcow2] {
        let dir = t.path().join(format!("{kind:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let img = Image::make(kind, &dir);
        let u = "11223344-5566-4778-8899-aabbccddeeff";
        xfskit(&["admin", "-L", "disk", "-U", u, img.s()]);
        assert_eq!(
            xfskit(&["admin", "-l", "-u", img.s()]),
            format!("label = \"disk\"\nUUID = {u}\n"),
            "{kind:?}"
        );
        img.assert_clean(&format!("{kind:?}: admin"));
        // The kernel mounts it (a raw copy for qcow2) and writes.
        let l = img.loop_dev();
        let blkid = sh(&format!("blkid -o export {}", l.dev));
        assert!(
            blkid.contains(&format!("UUID={u}")) && blkid.contains("LABEL=disk"),
            "{blkid}"
        );
        kernel_writes(&l.dev, &dir.join("mnt"), "k");
        drop(l);
        xfskit(&["mkdir", img.s(), "/after"]);
        img.assert_clean(&format!("{kind:?}: admin, mkdir"));
    }
}

// ---- -O: adding features, against xfsprogs 7.2's xfs_admin -O ----

/// The feature bits (ro_compat, incompat) 7.2 can add, by `-O` name.
const ADDABLE: [(&str, u32, u32); 4] = [
    ("bigtime", 0, 0x8),
    ("inobtcount", 0x8, 0),
    ("nrext64", 0, 0x20),
    ("exchange", 0, 0x40),
];

/// xfs_repair 7.2's line when it adds the feature.
fn adding_line(name: &str) -> &'static str {
    match name {
        "bigtime" => "Adding large timestamp support to filesystem.",
        "inobtcount" => "Adding inode btree counts to filesystem.",
        "nrext64" => "Adding nrext64 to filesystem.",
        "exchange" => "Adding file exchange-range support to filesystem.",
        _ => unreachable!(),
    }
}

/// A mkfs.xfs protofile: a root with `hello`, a directory `d` of `n`
/// files (an inode btree of two levels with 1 KiB blocks and n = 6000).
fn protofile(dir: &Path, n: u32) -> PathBuf {
    let src = dir.join("content");
    std::fs::write(&src, b"made before the change\n").unwrap();
    let mut p = format!(
        "/dummy\n0 0\nd--755 0 0\nhello ---644 0 0 {}\nd d--755 0 0\n",
        s(&src)
    );
    for i in 0..n {
        p.push_str(&format!("f{i} ---644 0 0 {}\n", s(&src)));
    }
    p.push_str("$\n$\n");
    let f = dir.join("proto");
    std::fs::write(&f, p).unwrap();
    f
}

/// mkfs.xfs 7.2 with the four addable features (and rmapbt and parent
/// pointers, which 7.2 cannot add) off, populated from `proto`.
fn mkfs_old(bin: &Path, img: &Path, proto: &Path, d: &str, extra: &[&str]) {
    let mut a = vec![
        "-m",
        "bigtime=0,inobtcount=0,rmapbt=0",
        "-i",
        "nrext64=0,exchange=0",
        "-n",
        "parent=0",
        "-p",
        s(proto),
    ];
    a.extend(extra);
    mkfs_d(bin, img, false, d, &a);
}

/// (ro_compat, incompat) of AG `agno`'s superblock.
fn features(bin: &Path, img: &Path, agno: u32) -> (u32, u32) {
    let ro = sb_field(bin, img, agno, "features_ro_compat");
    let ro = u32::from_str_radix(ro.trim_start_matches("0x"), 16).unwrap();
    (ro, incompat(bin, img, agno))
}

/// Every superblock of `a` carries the features of `b`'s (xfs_admin's) and
/// each AGI the same inode btree counters.
fn assert_same_features(bin: &Path, a: &Path, b: &Path, after: &str) {
    let ags: u32 = sb_field(bin, a, 0, "agcount").parse().unwrap();
    for agno in 0..ags {
        assert_eq!(
            features(bin, a, agno),
            features(bin, b, agno),
            "{after}: features of AG {agno}'s superblock (xfskit, xfs_admin)"
        );
    }
}

/// The tree as xfskit reads it: `ls -l -R /`.
fn tree(img: &Path) -> String {
    xfskit(&["ls", "-l", "-R", s(img), "/"])
}

/// xfs_repair -n 7.2 clean and a clean log.
fn assert_repair_clean(bin: &Path, img: &Path, after: &str) {
    assert_clean(bin, img, None, after);
}

#[test]
fn features_added_one_by_one_as_xfs_admin_adds_them() {
    let Some(bin) = xfsprogs_72_or_skip("features_added_one_by_one_as_xfs_admin_adds_them") else {
        return;
    };
    let t = TempDir::new("admin-features");
    let proto = protofile(t.path(), 6000);
    // 1 KiB blocks: the inode btree of AG 0 has two levels.
    let configs: [(&str, &[&str]); 2] = [("size=300m", &["-b", "size=1024"]), ("size=300m", &[])];
    for (d, extra) in configs {
        let base = t.path().join("base.img");
        mkfs_old(&bin, &base, &proto, d, extra);
        let before = tree(&base);
        let (ro0, inc0) = features(&bin, &base, 0);
        assert_eq!((ro0 & 0x8, inc0 & 0x68), (0, 0), "mkfs left a feature on");
        for (name, ro, inc) in ADDABLE {
            let after = format!("-O {name}=1 ({extra:?})");
            let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
            copy(&base, &a);
            copy(&base, &b);
            let out = xfskit(&["admin", "-O", &format!("{name}=1"), s(&a)]);
            assert_eq!(out, format!("{}\n", adding_line(name)), "{after}");
            let theirs = tool_72(&bin, "xfs_admin", &["-O", &format!("{name}=1"), s(&b)]);
            assert!(theirs.contains(adding_line(name)), "{after}: {theirs}");
            assert_same_features(&bin, &a, &b, &after);
            assert_eq!(features(&bin, &a, 0), (ro0 | ro, inc0 | inc), "{after}");
            assert_repair_clean(&bin, &a, &after);
            // xfs_db and xfs_admin read what xfskit set.
            let version = tool_72(&bin, "xfs_db", &["-r", "-c", "version", s(&a)]);
            let word = match name {
                "bigtime" => "BIGTIME",
                "inobtcount" => "INOBTCNT",
                "nrext64" => "NREXT64",
                _ => "EXCHANGE",
            };
            assert!(version.contains(word), "{after}: xfs_db version: {version}");
            let id = tool_72(&bin, "xfs_admin", &["-l", "-u", s(&a)]);
            assert_eq!(
                id,
                tool_72(&bin, "xfs_admin", &["-l", "-u", s(&base)]),
                "{after}"
            );
            if name == "inobtcount" {
                let ags: u32 = sb_field(&bin, &a, 0, "agcount").parse().unwrap();
                for agno in 0..ags {
                    let q = |img: &Path| {
                        tool_72(
                            &bin,
                            "xfs_db",
                            &[
                                "-r",
                                "-c",
                                &format!("agi {agno}"),
                                "-c",
                                "p level ino_blocks fino_blocks",
                                s(img),
                            ],
                        )
                    };
                    let ours = q(&a);
                    assert!(
                        !ours.contains("ino_blocks = 0"),
                        "{after}: AG {agno}: {ours}"
                    );
                    if agno == 0 && extra.is_empty() {
                        // Same trees on both sides (xfs_repair rebuilds
                        // its own): the same counts.
                        assert_eq!(ours, q(&b), "{after}: AG {agno}");
                    }
                }
            }
            assert_eq!(tree(&a), before, "{after}: the tree changed");
            // Again: nothing to add.
            let again = xfskit(&["admin", "-O", &format!("{name}=1"), s(&a)]);
            assert!(again.starts_with("Filesystem already"), "{after}: {again}");
            // xfskit writes to it afterwards and it stays clean.
            xfskit(&["mkdir", s(&a), "/after"]);
            xfskit(&["cp", s(&proto), &format!("{}:/after/p", s(&a))]);
            assert_repair_clean(&bin, &a, &format!("{after}, then an xfskit edit"));
        }
        // All four at once, as 7.2's mkfs would have made them.
        let a = t.path().join("all.img");
        copy(&base, &a);
        let out = xfskit(&[
            "admin",
            "-O",
            "bigtime=1,inobtcount=1",
            "-O",
            "nrext64=1,exchange=1",
            s(&a),
        ]);
        for (name, _, _) in ADDABLE {
            assert!(out.contains(adding_line(name)), "{out}");
        }
        let ags: u32 = sb_field(&bin, &a, 0, "agcount").parse().unwrap();
        for agno in 0..ags {
            assert_eq!(
                features(&bin, &a, agno),
                (ro0 | 0x8, inc0 | 0x68),
                "AG {agno}"
            );
        }
        assert_repair_clean(&bin, &a, "all four");
        assert_eq!(tree(&a), before);
    }
}

/// An image of Debian's mkfs.xfs 6.1 defaults brought forward to what 7.2
/// can add: it has bigtime and inobtcount already, nrext64 and exchange
/// are added; rmapbt and parent pointers, which 7.2's mkfs makes but 7.2
/// cannot add, are refused by name.
#[test]
fn debian_61_defaults_brought_forward() {
    let Some(bin) = xfsprogs_72_or_skip("debian_61_defaults_brought_forward") else {
        return;
    };
    let t = TempDir::new("admin-forward");
    let proto = protofile(t.path(), 3000);
    let (a, b) = (t.path().join("a.img"), t.path().join("b.img"));
    let arg = format!("size=300m,file,name={}", s(&a));
    let out = Command::new("mkfs.xfs")
        .args(["-q", "-f", "-d", &arg, "-p", s(&proto)])
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs 6.1: {}", output_text(&out));
    copy(&a, &b);
    let before = tree(&a);
    let all = "bigtime=1,inobtcount=1,nrext64=1,exchange=1";
    let out = xfskit(&["admin", "-O", all, s(&a)]);
    assert_eq!(
        out,
        "Filesystem already has inode btree counts.\n\
         Filesystem already supports large timestamps.\n\
         Adding nrext64 to filesystem.\n\
         Adding file exchange-range support to filesystem.\n"
    );
    // xfs_repair 7.2 stops at the first feature the filesystem already
    // has, adding none (and exits 0): it is given only the missing ones.
    let theirs = Command::new(bin.join("xfs_repair"))
        .args(["-c", "bigtime=1,nrext64=1", s(&b)])
        .output()
        .unwrap();
    assert!(output_text(&theirs).contains("Filesystem already supports large timestamps."));
    assert_eq!(
        features(&bin, &b, 0),
        (0xd, 0xb),
        "xfs_repair -c added after all"
    );
    let theirs = tool_72(&bin, "xfs_admin", &["-O", "nrext64=1,exchange=1", s(&b)]);
    assert!(theirs.contains("Adding nrext64"), "{theirs}");
    assert_same_features(&bin, &a, &b, "6.1 brought forward");
    // 7.2's mkfs features but rmapbt (ro 0x2) and parent (incompat 0x80).
    assert_eq!(features(&bin, &a, 0), (0xd, 0x6b));
    assert_repair_clean(&bin, &a, "6.1 brought forward");
    assert_eq!(tree(&a), before);
    for (name, opt) in [("rmapbt", "-m rmapbt=1"), ("parent", "-n parent=1")] {
        let img_before = std::fs::read(&a).unwrap();
        let o = xfskit_output(&["admin", "-O", &format!("{name}=1"), s(&a)]);
        assert_eq!(o.status.code(), Some(3), "{name}: {}", output_text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("the {name} feature cannot be added")) && err.contains(opt),
            "{err}"
        );
        assert!(
            std::fs::read(&a).unwrap() == img_before,
            "{name}: refused, yet written"
        );
        // 7.2 refuses it too.
        let theirs = Command::new(bin.join("xfs_repair"))
            .args(["-c", &format!("{name}=1"), s(&b)])
            .output()
            .unwrap();
        assert!(!theirs.status.success(), "xfs_repair 7.2 added {name}");
    }
}

/// What xfs_repair 7.2 refuses is refused, and bad arguments are usage
/// errors (exit 2); nothing is written either way.
#[test]
fn features_refused() {
    let Some(bin) = xfsprogs_72_or_skip("features_refused") else {
        return;
    };
    let t = TempDir::new("admin-refused");
    let v4 = t.path().join("v4.img");
    mkfs(&bin, &v4, true, &["-m", "crc=0"]);
    let plain = t.path().join("plain.img");
    mkfs(
        &bin,
        &plain,
        false,
        &[
            "-m",
            "reflink=0,rmapbt=0,finobt=0,inobtcount=0",
            "-i",
            "exchange=0",
            "-n",
            "parent=0",
        ],
    );
    let cases: [(&Path, &str, u8, &str); 10] = [
        (
            &v4,
            "bigtime=1",
            3,
            "Large timestamp feature only supported on V5 filesystems.",
        ),
        (
            &v4,
            "nrext64=1",
            3,
            "Nrext64 only supported on V5 filesystems.",
        ),
        (
            &plain,
            "inobtcount=1",
            3,
            "Inode btree count feature requires free inode btree",
        ),
        (
            &plain,
            "exchange=1",
            3,
            "File exchange-range feature cannot be added without reflink",
        ),
        (
            &plain,
            "bigtime=1,finobt=1",
            3,
            "the finobt feature cannot be added",
        ),
        (&plain, "frobnicate=1", 2, "unknown feature 'frobnicate'"),
        (&plain, "bigtime=0", 2, "bigtime only supports upgrades"),
        (&plain, "bigtime", 2, "-O bigtime requires a value"),
        (&plain, "bigtime=yes", 2, "the value must be 1"),
        (
            &plain,
            "lazycount=0",
            3,
            "Cannot disable lazy-counters on V5 fs",
        ),
    ];
    for (img, arg, code, msg) in cases {
        let before = std::fs::read(img).unwrap();
        let o = xfskit_output(&["admin", "-L", "x", "-O", arg, s(img)]);
        assert_eq!(
            o.status.code(),
            Some(i32::from(code)),
            "-O {arg}: {}",
            output_text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(msg), "-O {arg}: {err}");
        assert!(
            std::fs::read(img).unwrap() == before,
            "-O {arg}: refused, yet written"
        );
    }
    // lazycount=1 is a no-op on v5, as with xfs_repair.
    assert_eq!(
        xfskit(&["admin", "-O", "lazycount=1", s(&plain)]),
        "Lazy-counters are already enabled\n"
    );
    // nrext64 raises the smallest log the kernel mounts: a log of the
    // minimum without it is refused (xfs_repair 7.2 refuses it too).
    // mkfs.xfs makes a log under 64 MiB in the environment of xfstests.
    let small = t.path().join("small.img");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let qa = |args: &[&str]| {
        Command::new(bin.join("mkfs.xfs"))
            .env("TEST_DIR", "/tmp")
            .env("TEST_DEV", "/dev/null")
            .env("QA_CHECK_FS", "1")
            .args(["-f", "-i", "nrext64=0"])
            .args(args)
            .arg(&small)
            .output()
            .unwrap()
    };
    let o = qa(&["-l", "size=512b"]);
    let text = output_text(&o);
    let min = text
        .split("minimum size is ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no minimum log size in: {text}"));
    let o = qa(&["-q", "-l", &format!("size={min}b")]);
    assert!(o.status.success(), "{}", output_text(&o));
    let before = std::fs::read(&small).unwrap();
    let o = xfskit_output(&["admin", "-O", "nrext64=1", s(&small)]);
    assert_eq!(o.status.code(), Some(3), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("Filesystem log too small to upgrade filesystem; need "),
        "{}",
        output_text(&o)
    );
    assert!(
        std::fs::read(&small).unwrap() == before,
        "refused, yet written"
    );
    let theirs = Command::new(bin.join("xfs_admin"))
        .args(["-O", "nrext64=1", s(&small)])
        .output()
        .unwrap();
    assert!(
        output_text(&theirs).contains("Filesystem log too small"),
        "{}",
        output_text(&theirs)
    );
    // The same minimum as 7.2's.
    let need = |t: &str| {
        t.split("need ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string)
    };
    let ours = need(&String::from_utf8_lossy(&o.stderr));
    assert!(ours.is_some());
    assert_eq!(ours, need(&output_text(&theirs)), "the minimum log size");
    // bigtime does not change the reservations: added.
    xfskit(&["admin", "-O", "bigtime=1", s(&small)]);
}

/// As root: files written by the kernel before the change, every feature
/// added, the kernel mounts the result, reads the same tree, writes to it;
/// xfs_repair -n is clean after each step.
#[test]
fn kernel_reads_the_same_tree_after_features_are_added() {
    if !require_root("kernel_reads_the_same_tree_after_features_are_added") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("kernel_reads_the_same_tree_after_features_are_added")
    else {
        return;
    };
    let t = TempDir::new("admin-features-kernel");
    let mnt = t.path().join("mnt");
    let proto = protofile(t.path(), 10);
    let listing = |img: &Path| -> String {
        let loopdev = sh(&format!("losetup -f --show '{}'", s(img)))
            .trim()
            .to_string();
        let m = DevMount::new(&loopdev, &mnt, true);
        let l = sh(&format!(
            "cd '{}' && find . -printf '%p %y %m %s %T@ %n\\n' | sort && find . -type f -exec md5sum {{}} + | sort",
            s(&m.dir)
        ));
        drop(m);
        sh(&format!("losetup -d {loopdev}"));
        l
    };
    for (debian, feats) in [
        (false, "bigtime=1"),
        (false, "inobtcount=1"),
        (false, "nrext64=1"),
        (false, "exchange=1"),
        (false, "bigtime=1,inobtcount=1,nrext64=1,exchange=1"),
        (true, "nrext64=1,exchange=1"),
    ] {
        let after = format!("-O {feats} (debian mkfs: {debian})");
        let img = t.path().join("k.img");
        if debian {
            mkfs_d(&bin, &img, true, "size=300m", &[]);
        } else {
            mkfs_old(&bin, &img, &proto, "size=300m", &[]);
        }
        // The kernel writes files (old-format inodes) before the change.
        let loopdev = sh(&format!("losetup -f --show '{}'", s(&img)))
            .trim()
            .to_string();
        let m = DevMount::new(&loopdev, &mnt, false);
        sh(&format!(
            "cd '{}' && mkdir -p k && for i in $(seq 1 500); do echo $i > k/f$i; done && touch -d 1999-01-01 k/f1 && dd if=/dev/urandom of=k/big bs=64k count=40 status=none",
            s(&m.dir)
        ));
        drop(m);
        sh(&format!("losetup -d {loopdev}"));
        let before = listing(&img);
        xfskit(&["admin", "-O", feats, s(&img)]);
        assert_repair_clean(&bin, &img, &after);
        assert_eq!(
            listing(&img),
            before,
            "{after}: the kernel reads another tree"
        );
        let loopdev = sh(&format!("losetup -f --show '{}'", s(&img)))
            .trim()
            .to_string();
        kernel_writes(&loopdev, &mnt, "written-after");
        if feats.contains("bigtime") || debian {
            // The kernel sees the feature: a time past 2038 is kept
            // (clamped to 2038 without bigtime), on an old inode too.
            let m = DevMount::new(&loopdev, &mnt, false);
            let y = sh(&format!(
                "cd '{}' && touch -d 2100-01-01 k/f2 && date -r k/f2 +%Y",
                s(&m.dir)
            ));
            assert_eq!(y.trim(), "2100", "{after}");
            drop(m);
        }
        sh(&format!("losetup -d {loopdev}"));
        assert_repair_clean(&bin, &img, &format!("{after}, kernel write"));
        xfskit(&["mkdir", s(&img), "/x"]);
        assert_repair_clean(&bin, &img, &format!("{after}, kernel write, xfskit mkdir"));
    }
}

#[test]
fn features_added_in_qcow2() {
    let Some(bin) = xfsprogs_72_or_skip("features_added_in_qcow2") else {
        return;
    };
    if let Some(t) = common::missing_tool(&["qemu-img"]) {
        return skip("features_added_in_qcow2", &format!("no {t}"));
    }
    let t = TempDir::new("admin-features-qcow2");
    let proto = protofile(t.path(), 100);
    let (raw, q, back) = (
        t.path().join("raw.img"),
        t.path().join("fs.qcow2"),
        t.path().join("back.img"),
    );
    mkfs_old(&bin, &raw, &proto, "size=300m", &[]);
    let (ro0, inc0) = features(&bin, &raw, 0);
    let before = tree(&raw);
    sh(&format!(
        "qemu-img convert -O qcow2 '{}' '{}'",
        s(&raw),
        s(&q)
    ));
    let out = xfskit(&[
        "admin",
        "-O",
        "bigtime=1,inobtcount=1,nrext64=1,exchange=1",
        s(&q),
    ]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let check = sh(&format!(
        "qemu-img check '{}' 2>&1 && echo QCOW2-CLEAN || true",
        s(&q)
    ));
    assert!(check.contains("QCOW2-CLEAN"), "{check}");
    sh(&format!(
        "qemu-img convert -O raw '{}' '{}'",
        s(&q),
        s(&back)
    ));
    let ags: u32 = sb_field(&bin, &back, 0, "agcount").parse().unwrap();
    for agno in 0..ags {
        assert_eq!(
            features(&bin, &back, agno),
            (ro0 | 0x8, inc0 | 0x68),
            "AG {agno}"
        );
    }
    assert_repair_clean(&bin, &back, "qcow2 -O");
    assert_eq!(tree(&back), before);
}

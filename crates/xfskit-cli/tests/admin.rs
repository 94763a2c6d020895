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

use common::disks::{sh, DevMount};
use common::editimg::{Image, Kind};
use common::fixtures::{output_text, xfskit_output};
use common::{require_root, skip, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

const META_UUID_BIT: u32 = 0x4;

/// xfsprogs 7.2's commands beside the project (`../shared/xfsprogs-7.2`).
fn xfsprogs_72() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    d.join("xfs_admin").exists().then_some(d)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs xfsprogs 7.2's `name`; panics with its output on failure.
fn tool(bin: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(bin.join(name)).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
    text
}

/// Runs xfskit, which must succeed; returns stdout.
fn xfskit(args: &[&str]) -> String {
    let o = xfskit_output(args);
    assert!(o.status.success(), "xfskit {args:?}: {}", output_text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
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
    let out = tool(
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
    let out = tool(
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
        let lp = tool(bin, "xfs_logprint", &[s(img)]);
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
            tool(bin, "xfs_admin", &["-l", "-u", s(img)]),
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
    let Some(bin) = xfsprogs_72() else {
        return skip("label_set_clear_and_too_long", "no xfsprogs 7.2");
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
            tool(&bin, "xfs_admin", &["-L", arg, s(&b)]);
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
            tool(&bin, "xfs_admin", &["-l", s(&a)]),
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
        tool(bin, "xfs_admin", &["-U", &theirs, s(b)]);
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
    let Some(bin) = xfsprogs_72() else {
        return skip("uuid_generate_explicit_nil_restore", "no xfsprogs 7.2");
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
    let Some(bin) = xfsprogs_72() else {
        return skip("label_and_uuid_in_qcow2", "no xfsprogs 7.2");
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
    tool(&bin, "xfs_admin", &["-L", "inqcow", "-U", u, s(&raw)]);
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
    let Some(bin) = xfsprogs_72() else {
        return skip("kernel_mounts_and_writes_after_changes", "no xfsprogs 7.2");
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
    let Some(bin) = xfsprogs_72() else {
        return skip("uuid_refuses_a_dirty_log", "no xfsprogs 7.2");
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
    let theirs = tool(&bin, "xfs_admin", &["-U", "generate", s(&copy_img)]);
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

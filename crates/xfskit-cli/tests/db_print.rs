//! `xfskit db`: the superblock and AG header prints compared line by line
//! with `xfs_db -r -c 'HEADER N' -c print` of xfsprogs 7.2 and of Debian's
//! 6.1, on images of mkfs.xfs 6.1 and 7.2 defaults, v4, metadir with a
//! realtime device and zoned, and on headers with damage poked in.

mod common;

use common::{skip, TempDir};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn xfskit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .expect("run xfskit")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// xfsprogs 7.2 beside the project (`../shared/xfsprogs-7.2`).
fn x72() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    d.join("xfs_db").exists().then_some(d)
}

/// Debian's xfs_db (6.1), or the 7.2 one.
fn xfs_db(v72: bool) -> Command {
    match x72().filter(|_| v72) {
        Some(d) => Command::new(d.join("xfs_db")),
        None => Command::new("/usr/sbin/xfs_db"),
    }
}

fn run_db(v72: bool, img: &Path, cmds: &[&str]) -> String {
    let mut c = xfs_db(v72);
    c.arg("-r");
    for x in cmds {
        c.args(["-c", x]);
    }
    let o = c.arg(img).output().expect("run xfs_db");
    assert!(o.status.success(), "xfs_db {cmds:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ours(img: &Path, args: &[&str]) -> String {
    let mut a = vec!["db", s(img)];
    a.extend_from_slice(args);
    let o = xfskit(&a);
    assert!(
        o.status.success(),
        "xfskit {a:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Makes an image of `size` bytes with mkfs.xfs (7.2's when `v72`) and
/// `opts`; the file is made first, so `opts` may name more files.
fn mkfs(v72: bool, img: &Path, size: u64, opts: &[&str]) {
    std::fs::File::create(img)
        .and_then(|f| f.set_len(size))
        .expect("create image");
    let mut c = match x72().filter(|_| v72) {
        Some(d) => Command::new(d.join("mkfs.xfs")),
        None => Command::new("/usr/sbin/mkfs.xfs"),
    };
    let o = c
        .args(["-q", "-f"])
        .args(opts)
        .arg(img)
        .output()
        .expect("mkfs.xfs");
    assert!(o.status.success(), "mkfs.xfs {opts:?}: {o:?}");
}

/// Compares every header of AGs 0, 1 and the last with xfs_db's print,
/// line by line, with 7.2's xfs_db and, when `with_61`, Debian's.
fn compare_headers(img: &Path, agcount: u32, with_61: bool) {
    let mut ags = vec![0, 1, agcount - 1];
    ags.dedup();
    for h in ["sb", "agf", "agi", "agfl"] {
        for &a in &ags {
            let a = a.to_string();
            let got = ours(img, &[h, &a]);
            let mut tools = vec![true];
            if with_61 {
                tools.push(false);
            }
            for v72 in tools {
                let want = run_db(v72, img, &[&format!("{h} {a}"), "print"]);
                let tool = if v72 { "7.2" } else { "6.1" };
                for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
                    assert_eq!(
                        g,
                        w,
                        "{} {h} {a}, line {}, xfs_db {tool}",
                        img.display(),
                        i + 1
                    );
                }
                assert_eq!(
                    got.lines().count(),
                    want.lines().count(),
                    "{} {h} {a}: line count, xfs_db {tool}\nours:\n{got}\nxfs_db:\n{want}",
                    img.display()
                );
                assert_eq!(got, want);
            }
        }
    }
}

fn agcount(img: &Path) -> u32 {
    let out = run_db(true, img, &["sb 0", "print agcount"]);
    out.trim()
        .strip_prefix("agcount = ")
        .and_then(|v| v.parse().ok())
        .expect("agcount")
}

#[test]
fn headers_match_xfs_db_on_each_mkfs() {
    let Some(_) = x72() else {
        skip(
            "headers_match_xfs_db_on_each_mkfs",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let d = tmp.path();
    // (name, mkfs 7.2?, size, options, xfs_db 6.1 reads it too)
    let rt = d.join("rt.dev");
    std::fs::File::create(&rt)
        .and_then(|f| f.set_len(256 << 20))
        .expect("rt device");
    let rtopt = format!("size=128m,rtdev={}", rt.display());
    let cases: Vec<(&str, bool, u64, Vec<&str>, bool)> = vec![
        ("d61.img", false, 1 << 30, vec![], true),
        ("d72.img", true, 1 << 30, vec![], true),
        ("v4.img", false, 512 << 20, vec!["-m", "crc=0"], true),
        (
            "v4b.img",
            false,
            300 << 20,
            vec![
                "-m",
                "crc=0",
                "-b",
                "size=2048",
                "-s",
                "size=1024",
                "-L",
                "l?b\"l",
            ],
            true,
        ),
        (
            "mdrt.img",
            true,
            512 << 20,
            vec!["-m", "metadir=1", "-r", &rtopt, "-L", "md"],
            false,
        ),
        (
            "zoned.img",
            true,
            4 << 30,
            vec!["-r", "zoned=1,start=1g"],
            false,
        ),
    ];
    for (name, v72, size, opts, with_61) in cases {
        let img = d.join(name);
        mkfs(v72, &img, size, &opts);
        compare_headers(&img, agcount(&img), with_61);
    }
}

/// Damage xfs_db still prints: a label with characters it escapes, an
/// unlinked list in one AGI bucket (the array's spacing), a free list slot
/// of 0 (skipped), and the CRCs then bad.
#[test]
fn damaged_headers_match_xfs_db() {
    let Some(_) = x72() else {
        skip("damaged_headers_match_xfs_db", "xfsprogs 7.2 is missing");
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("d.img");
    mkfs(true, &img, 1 << 30, &[]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open");
    let agblocks = 65536u64 * 4096;
    // AG 1: label bytes of the superblock copy, AGI bucket 5 and 63, AGFL slot 2.
    f.write_all_at(b"a\\b\t\x7f\xe9 '?\n", agblocks + 108)
        .expect("poke");
    f.write_all_at(&77u32.to_be_bytes(), agblocks + 1024 + 40 + 4 * 5)
        .expect("poke");
    f.write_all_at(&640u32.to_be_bytes(), agblocks + 1024 + 40 + 4 * 63)
        .expect("poke");
    f.write_all_at(&0u32.to_be_bytes(), agblocks + 1536 + 36 + 4 * 2)
        .expect("poke");
    // AG 2: one bucket before the last, so a trailing space follows it.
    f.write_all_at(&9u32.to_be_bytes(), 2 * agblocks + 1024 + 40 + 4 * 7)
        .expect("poke");
    drop(f);
    for (h, a) in [("sb", "1"), ("agi", "1"), ("agfl", "1"), ("agi", "2")] {
        let got = ours(&img, &[h, a]);
        let mut want = run_db(true, &img, &[&format!("{h} {a}"), "print"]);
        if h == "agi" {
            // xfs_db reads every AGI when it starts, reports the bad CRC
            // on stderr ("Metadata CRC error detected ... xfs_agi"), and
            // then prints the cached buffer's CRC as correct.
            let o = xfs_db(true)
                .args(["-r", "-c", &format!("agi {a}"), "-c", "print crc"])
                .arg(&img)
                .output()
                .expect("xfs_db");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("CRC error") && err.contains("xfs_agi"),
                "{err}"
            );
            want = want.replace("(correct)", "(bad)");
        }
        assert_eq!(got, want, "{h} {a}");
        assert!(got.contains("(bad)"), "{h} {a}: the CRC is bad now:\n{got}");
    }
    let agi2 = ours(&img, &["agi", "2"]);
    assert!(agi2.contains("unlinked[0-63] = 7:9 \n"), "{agi2}");
}

/// --json carries the same values: every decimal and hex field of
/// xfs_db's print is the number under its name.
#[test]
fn json_has_xfs_db_values() {
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("j.img");
    mkfs(false, &img, 1 << 30, &[]);
    for h in ["sb", "agf", "agi"] {
        let o = xfskit(&["db", "--json", s(&img), h, "1"]);
        assert!(o.status.success(), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["header"], h);
        assert_eq!(v["agno"], 1);
        let want = run_db(false, &img, &[&format!("{h} 1"), "print"]);
        let mut n = 0;
        for line in want.lines() {
            let (name, val) = line.split_once(" = ").expect("name = value");
            let num = match val.strip_prefix("0x") {
                Some(x) => u64::from_str_radix(x, 16).ok(),
                None => val.parse::<u64>().ok(),
            };
            match (num, val) {
                (Some(x), _) => assert_eq!(v["fields"][name], x, "{h} {name}"),
                (None, "null") => assert!(v["fields"][name].is_null(), "{h} {name}"),
                _ => continue,
            }
            n += 1;
        }
        assert!(n > 10, "{h}: only {n} fields compared");
    }
    let o = xfskit(&["db", "--json", s(&img), "agi", "0"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["fields"]["crc"]["state"], "correct");
}

#[test]
fn bad_ag_number_is_a_usage_error() {
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("b.img");
    mkfs(false, &img, 512 << 20, &[]);
    let o = xfskit(&["db", s(&img), "agf", "4"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("AG") && err.contains('4'), "{err}");
}

/// Runs `xfskit db IMG freesp ARGS` and xfs_db's `freesp ARGS`, 7.2's
/// against the default layout and 6.1's against --classic.
fn compare_freesp(img: &Path, args: &[&str]) {
    let mut ours_args = vec!["freesp"];
    ours_args.extend_from_slice(args);
    let cmd = format!("freesp {}", args.join(" "));
    // xfs_db 7.2 drops the bins -h asks for (see the help): only 6.1 then.
    if !args.contains(&"-h") {
        let got = ours(img, &ours_args);
        let want = run_db(true, img, &[&cmd]);
        assert_eq!(got, want, "{}: {cmd} against xfs_db 7.2", img.display());
    }
    ours_args.insert(1, "--classic");
    let got = ours(img, &ours_args);
    let want = run_db(false, img, &[&cmd]);
    assert_eq!(
        got,
        want,
        "{}: {cmd} --classic against xfs_db 6.1",
        img.display()
    );
}

const FREESP_ARGS: &[&[&str]] = &[
    &[],
    &["-s"],
    &["-c", "-s"],
    &["-a", "1"],
    &["-a", "0", "-a", "2", "-s"],
    &["-d"],
    &["-h", "3", "-h", "100", "-s"],
    &["-e", "1000"],
    &["-e", "1", "-s"],
    &["-m", "4"],
    &["-A", "8", "-s"],
    &["-b", "-c"],
];

#[test]
fn freesp_matches_xfs_db_on_fresh_images() {
    let Some(_) = x72() else {
        skip(
            "freesp_matches_xfs_db_on_fresh_images",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    for (name, v72, opts) in [
        ("d61.img", false, vec![]),
        ("d72.img", true, vec![]),
        ("v4.img", false, vec!["-m", "crc=0"]),
    ] {
        let img = tmp.path().join(name);
        mkfs(v72, &img, 1 << 30, &opts);
        for a in FREESP_ARGS {
            compare_freesp(&img, a);
        }
    }
}

/// Free space after the kernel made and removed many small files: one
/// KiB blocks, so the by-block and by-size btrees grow past one level.
#[test]
fn freesp_matches_xfs_db_after_kernel_churn() {
    if !common::require_root("freesp_matches_xfs_db_after_kernel_churn") {
        return;
    }
    let Some(_) = x72() else {
        skip(
            "freesp_matches_xfs_db_after_kernel_churn",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("churn.img");
    mkfs(false, &img, 320 << 20, &["-b", "size=1024"]);
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let st = Command::new("mount")
        .args(["-t", "xfs", "-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .status()
        .expect("mount");
    assert!(st.success(), "mount");
    let block = vec![0x5au8; 1024];
    for d in 0..4 {
        let dir = mnt.join(format!("d{d}"));
        std::fs::create_dir(&dir).expect("mkdir");
        for i in 0..1500 {
            let n = 1 + (i * 7 + d) % 3;
            std::fs::write(dir.join(format!("f{i}")), block.repeat(n)).expect("write");
        }
    }
    let _ = Command::new("sync").status();
    for d in 0..4 {
        for i in (0..1500).filter(|i| i % 2 == 0 || i % 7 == 3) {
            std::fs::remove_file(mnt.join(format!("d{d}/f{i}"))).expect("rm");
        }
    }
    common::must_umount(&mnt);
    let levels = ours(&img, &["agf", "0"]);
    assert!(
        levels.contains("bnolevel = 2") || levels.contains("bnolevel = 3"),
        "the churn should give AG 0 a by-block btree of two levels or more:\n{levels}"
    );
    for a in FREESP_ARGS {
        compare_freesp(&img, a);
    }
}

/// A damaged AGF or free space btree block is an error naming the AG and
/// the block (exit 5), not a panic or a silent skip.
#[test]
fn freesp_names_damaged_blocks() {
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("bad.img");
    mkfs(false, &img, 512 << 20, &[]);
    let agf = ours(&img, &["agf", "1"]);
    let bnoroot: u64 = agf
        .lines()
        .find_map(|l| l.strip_prefix("bnoroot = "))
        .and_then(|v| v.parse().ok())
        .expect("bnoroot");
    let agblocks = 32768u64 * 4096;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open");
    f.write_all_at(b"XXXX", agblocks + bnoroot * 4096)
        .expect("poke");
    let o = xfskit(&["db", s(&img), "freesp"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains(&format!("AG 1 block {bnoroot}")), "{err}");
    // -a 0 does not read AG 1.
    let o = xfskit(&["db", s(&img), "freesp", "-a", "0"]);
    assert!(o.status.success(), "{o:?}");
    // The AGF of AG 2.
    f.write_all_at(b"XXXX", 2 * agblocks + 512).expect("poke");
    let o = xfskit(&["db", s(&img), "freesp", "-a", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("AGF") && err.contains("AG 2"), "{err}");
}

/// `xfskit db IMG frag ARGS` against xfs_db's `frag ARGS`, 7.2's and,
/// when `with_61`, 6.1's.
fn compare_frag(img: &Path, args: &[&str], with_61: bool) {
    let mut a = vec!["frag"];
    a.extend_from_slice(args);
    let got = ours(img, &a);
    let cmd = a.join(" ");
    let mut tools = vec![true];
    if with_61 {
        tools.push(false);
    }
    for v72 in tools {
        let want = run_db(v72, img, &[&cmd]);
        assert_eq!(got, want, "{}: {cmd}, xfs_db 7.2: {v72}", img.display());
    }
}

const FRAG_ARGS: &[&[&str]] = &[
    &[],
    &["-v"],
    &["-f"],
    &["-d"],
    &["-a"],
    &["-l", "-q"],
    &["-R", "-r"],
];

#[test]
fn frag_matches_xfs_db_on_fresh_images() {
    let Some(_) = x72() else {
        skip(
            "frag_matches_xfs_db_on_fresh_images",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let rt = tmp.path().join("rt.dev");
    std::fs::File::create(&rt)
        .and_then(|f| f.set_len(128 << 20))
        .expect("rt device");
    let rtopt = format!("size=64m,rtdev={}", rt.display());
    for (name, v72, opts, with_61) in [
        ("d61.img", false, vec![], true),
        ("d72.img", true, vec![], true),
        ("v4.img", false, vec!["-m", "crc=0"], true),
        (
            "mdrt.img",
            true,
            vec!["-m", "metadir=1", "-r", &rtopt],
            false,
        ),
    ] {
        let img = tmp.path().join(name);
        mkfs(v72, &img, 1 << 30, &opts);
        for a in FRAG_ARGS {
            compare_frag(&img, a, with_61);
        }
    }
}

/// Fragmentation after the kernel wrote files in interleaved pieces (data
/// forks in btree format), large directories, long symlinks and xattrs big
/// enough for attribute leaf blocks, then removed some.
#[test]
fn frag_matches_xfs_db_after_kernel_churn() {
    if !common::require_root("frag_matches_xfs_db_after_kernel_churn") {
        return;
    }
    let Some(_) = x72() else {
        skip(
            "frag_matches_xfs_db_after_kernel_churn",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    for (name, v72) in [("c61.img", false), ("c72.img", true)] {
        let img = tmp.path().join(name);
        mkfs(v72, &img, 1 << 30, &[]);
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir_all(&mnt).expect("mkdir");
        let st = Command::new("mount")
            .args(["-t", "xfs", "-o", "loop"])
            .arg(&img)
            .arg(&mnt)
            .status()
            .expect("mount");
        assert!(st.success(), "mount");
        // Three files written a block at a time in turn, synced as they
        // go, so their extents interleave.
        let mut files: Vec<std::fs::File> = (0..3)
            .map(|i| std::fs::File::create(mnt.join(format!("frag{i}"))).expect("create"))
            .collect();
        let block = vec![0xa5u8; 4096];
        for n in 0..120u64 {
            for f in &mut files {
                f.write_all_at(&block, n * 8192).expect("write");
                f.sync_data().expect("sync");
            }
        }
        drop(files);
        let dir = mnt.join("big");
        std::fs::create_dir(&dir).expect("mkdir");
        for i in 0..2000 {
            std::fs::write(dir.join(format!("name-{i:05}-padding-padding")), b"x").expect("write");
        }
        for i in 0..40 {
            let target = "t".repeat(300 + i);
            std::os::unix::fs::symlink(&target, mnt.join(format!("l{i}"))).expect("symlink");
            let p = mnt.join(format!("x{i}"));
            std::fs::write(&p, b"").expect("write");
            for k in 0..(i % 5 + 1) {
                let st = Command::new("setfattr")
                    .args([
                        "-n",
                        &format!("user.a{k}"),
                        "-v",
                        &"v".repeat(2000 + 100 * k),
                    ])
                    .arg(&p)
                    .status()
                    .expect("setfattr");
                assert!(st.success());
            }
        }
        for i in (0..2000).step_by(3) {
            std::fs::remove_file(dir.join(format!("name-{i:05}-padding-padding"))).expect("rm");
        }
        std::fs::remove_file(mnt.join("frag1")).expect("rm");
        common::must_umount(&mnt);
        let v = ours(&img, &["frag", "-v"]);
        assert!(
            v.lines().any(|l| l
                .split_whitespace()
                .nth(3)
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > 40)),
            "a file should have more extents than its inode holds:\n{v}"
        );
        for a in FRAG_ARGS {
            compare_frag(&img, a, true);
        }
    }
}

/// A damaged inode is an error naming it (exit 5).
#[test]
fn frag_names_a_damaged_inode() {
    let Some(_) = x72() else {
        skip("frag_names_a_damaged_inode", "xfsprogs 7.2 is missing");
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("bad.img");
    mkfs(true, &img, 512 << 20, &[]);
    let out = run_db(true, &img, &["convert inode 128 byte"]);
    // "0x10000 (65536)"
    let byte: u64 = out
        .split(['(', ')'])
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("convert: {out}"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open");
    f.write_all_at(b"\xff\xff", byte + 300).expect("poke");
    let o = xfskit(&["db", s(&img), "frag"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("inode 128"), "{err}");
}

/// Which fields xfs_db prints as "null" when all ones, and which as
/// numbers: every number field of a zoned metadir superblock copy set to
/// all ones.
#[test]
fn all_ones_superblock_fields_match_xfs_db() {
    let Some(_) = x72() else {
        skip(
            "all_ones_superblock_fields_match_xfs_db",
            "xfsprogs 7.2 is missing",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-dbprint");
    let img = tmp.path().join("z.img");
    mkfs(true, &img, 4 << 30, &["-r", "zoned=1,start=1g"]);
    let agblocks: u64 = run_db(true, &img, &["sb 0", "print agblocks"])
        .trim()
        .strip_prefix("agblocks = ")
        .and_then(|v| v.parse().ok())
        .expect("agblocks");
    let sb1 = agblocks * 4096;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open");
    // Every field but the magic, sizes, logs and the feature words.
    let fields: &[(u64, usize)] = &[
        (8, 8),
        (16, 8),
        (24, 8),
        (48, 8),
        (56, 8),
        (64, 8),
        (72, 8),
        (80, 4),
        (84, 4),
        (88, 4),
        (92, 4),
        (96, 4),
        (106, 2),
        (125, 3),
        (128, 8),
        (136, 8),
        (144, 8),
        (152, 8),
        (160, 8),
        (168, 8),
        (176, 2),
        (178, 1),
        (179, 1),
        (180, 4),
        (184, 4),
        (188, 4),
        (192, 1),
        (196, 4),
        (228, 4),
        (232, 8),
        (240, 8),
        (264, 8),
        (272, 4),
        (276, 4),
        (281, 1),
        (288, 8),
        (296, 8),
    ];
    for &(off, n) in fields {
        f.write_all_at(&vec![0xff; n], sb1 + off).expect("poke");
    }
    drop(f);
    let got = ours(&img, &["sb", "1"]);
    let want = run_db(true, &img, &["sb 1", "print"]);
    assert_eq!(got, want);
    assert!(got.contains("rgextents = null") && got.contains("rtreserved = 18446744073709551615"));
    // The AGF and AGI of AG 1, every field past the magic number.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open");
    f.write_all_at(&[0xff; 92], sb1 + 512 + 4).expect("poke");
    f.write_all_at(&[0xff; 8], sb1 + 512 + 208).expect("poke");
    f.write_all_at(&[0xff; 292], sb1 + 1024 + 4).expect("poke");
    f.write_all_at(&[0xff; 24], sb1 + 1024 + 320).expect("poke");
    drop(f);
    for h in ["agf", "agi"] {
        let got = ours(&img, &[h, "1"]);
        // xfs_db reads the AG headers when it starts and then calls the
        // cached buffers' CRCs correct (see damaged_headers_match_xfs_db).
        let want = run_db(true, &img, &[&format!("{h} 1"), "print"]).replace("(correct)", "(bad)");
        assert_eq!(got, want, "{h}");
        assert!(got.contains("null"), "{got}");
    }
}

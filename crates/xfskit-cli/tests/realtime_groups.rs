//! Realtime groups (`mkfs.xfs -m metadir=1 -r rtdev=FILE,rgcount=N` 6.15)
//! read with their device (`--rtdev FILE`): realtime files' data, whose
//! realtime block numbers are `group << rgblklog | block in group` while the
//! groups lie end to end on the device, through cat, extract, stat, ls,
//! bulkstat and the read-only mount, against the bytes the image was made
//! from; `info` against `xfs_db -R` 6.15.
//!
//! The images (common/rtimg.rs): three groups of 5,462 one-block extents on
//! a 64 MiB device (the last group 5,460), so group numbers leave a gap
//! (rgblklog 13): a file reading from the wrong place shows. Files in
//! groups 0, 1 and 2, one with mappings in two groups and a hole, one
//! unwritten extent over stale bytes.

mod common;

use common::fixtures::{output_text, xfskit_output as xfskit};
use common::rtimg::{field, make_with, run_ok, s, tool, Layout, RtFile, RtImage, BS};
use common::skip;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bits a group block number takes (5,462 blocks a group).
const RG_LOG: u64 = 13;

fn rtb(group: u64, block: u64) -> u64 {
    (group << RG_LOG) | block
}

fn rtg_files() -> Vec<RtFile> {
    vec![
        // 20 blocks in group 0, past the realtime superblock's extent.
        RtFile {
            name: "zero",
            size: 20 * BS - 123,
            extents: vec![(0, rtb(0, 100), 20, false)],
        },
        // Blocks 0-3 in group 1, a hole, blocks 8-15 near group 2's end.
        RtFile {
            name: "two",
            size: 16 * BS,
            extents: vec![(0, rtb(1, 10), 4, false), (8, rtb(2, 5000), 8, false)],
        },
        // Preallocated at the start of group 2: reads as zeros.
        RtFile {
            name: "prealloc",
            size: 4 * BS,
            extents: vec![(0, rtb(2, 0), 4, true)],
        },
    ]
}

fn rtg_layout(files: Vec<RtFile>, used: u64) -> Layout {
    Layout {
        rt_bytes: 64 << 20,
        internal_start: 0,
        extsize: "4k",
        rt_opts: ",rgcount=3",
        mkfs_args: vec!["-m", "metadir=1", "-d", "agcount=2"],
        rtgroups: true,
        reflink_files: false,
        files,
        used,
    }
}

/// The image with [`rtg_files`]; None (after recording the skip) without
/// xfsprogs 6.15.
fn make(test: &str) -> Option<RtImage> {
    // The files' 36 blocks and the realtime superblock's extent.
    let im = make_with(test, rtg_layout(rtg_files(), 36 + 1))?;
    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print rgcount rgextents rgblklog"])
            .arg(&im.img),
        "xfs_db sb",
    );
    assert_eq!(field(&sb, "rgcount"), 3, "{sb}");
    assert_eq!(field(&sb, "rgextents"), 5462, "{sb}");
    assert_eq!(field(&sb, "rgblklog"), RG_LOG, "{sb}");
    Some(im)
}

#[test]
fn rtgroup_files_read_with_rtdev() {
    const TEST: &str = "rtgroup_files_read_with_rtdev";
    let Some(im) = make(TEST) else { return };
    let dest = im.assert_files_read_with_rtdev("/two");
    let (img, rtdev) = (s(&im.img), s(&im.rtdev));
    // The metadata directory tree stays hidden.
    let mut names: Vec<String> = std::fs::read_dir(&dest)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["prealloc", "sub", "two", "zero"]);

    // stat: the realtime device's 512-byte units, groups end to end
    // (group 1 starts at block 5,462, group 2 at 10,924).
    let o = xfskit(&["stat", img, "/two"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stat: {}", output_text(&o));
    let data = text.split("data fork:").nth(1).expect("data fork table");
    let rows: Vec<Vec<&str>> = data
        .lines()
        .take_while(|l| !l.contains("attr fork"))
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let d1 = (5462 + 10) * 8;
    let d2 = (2 * 5462 + 5000) * 8;
    assert_eq!(
        rows[0][..4],
        ["0:", "[0..31]:", &format!("{d1}..{}", d1 + 31), "32"],
        "{text}"
    );
    assert_eq!(
        rows[2][..4],
        ["2:", "[64..127]:", &format!("{d2}..{}", d2 + 63), "64"],
        "{text}"
    );

    let o = xfskit(&["ls", "--rtdev", rtdev, img, "/"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["prealloc", "sub", "two", "zero"],
        "{}",
        output_text(&o)
    );

    // bulkstat: the user files with their realtime flag and block counts;
    // none of the group's metadata files.
    let o = xfskit(&["bulkstat", "--json", img]);
    assert!(o.status.success(), "bulkstat: {}", output_text(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let recs: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let regular: Vec<&serde_json::Value> = recs
        .iter()
        .filter(|r| r["mode"].as_u64().unwrap_or(0) & 0o170000 == 0o100000)
        .collect();
    // zero, two, prealloc and sub/plain: nothing of /rtgroups.
    assert_eq!(regular.len(), 4, "{text}");
    let mut rt_blocks: Vec<u64> = regular
        .iter()
        .filter(|r| r["xflags"].as_u64().unwrap_or(0) & 1 != 0)
        .map(|r| r["blocks"].as_u64().unwrap_or(0))
        .collect();
    rt_blocks.sort();
    assert_eq!(rt_blocks, [4, 12, 20], "{text}");
}

#[test]
fn rtgroup_info_equals_xfs_db() {
    const TEST: &str = "rtgroup_info_equals_xfs_db";
    let Some(im) = make(TEST) else { return };
    im.assert_info_equals_xfs_db("rgcount=3");
}

/// The wrong device, a device of another filesystem, and writing.
#[test]
fn rtgroup_device_refused_when_wrong() {
    const TEST: &str = "rtgroup_device_refused_when_wrong";
    let Some(im) = make(TEST) else { return };
    let img = s(&im.img);
    // The right size, but no realtime superblock.
    let blank = im.dir.join("blank");
    std::fs::File::create(&blank)
        .and_then(|f| f.set_len(64 << 20))
        .expect("blank");
    let o = xfskit(&["cat", "--rtdev", s(&blank), img, "/zero"]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("realtime superblock"), "{text}");
    // Mappings past the last group and past the end of their group:
    // errors naming the group, exit 5.
    let ls = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "ls /"])
            .arg(&im.img),
        "xfs_db ls",
    );
    let ino = ls
        .lines()
        .find(|l| l.ends_with(" zero (good)"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("zero's inode")
        .to_string();
    for (rtb, want) in [
        (rtb(7, 10), "realtime group 7 block 10"),
        (rtb(1, 5460), "realtime group 1 block 5460"),
    ] {
        let copy = im.dir.join("bad.img");
        std::fs::copy(&im.img, &copy).expect("copy");
        run_ok(
            tool(&im.x615, "xfs_db")
                .args(["-x", "-c", &format!("inode {ino}")])
                .args(["-c", &format!("write -d u3.bmx[0].startblock {rtb}")])
                .arg(&copy),
            "xfs_db write",
        );
        let o = xfskit(&["cat", "--rtdev", s(&im.rtdev), s(&copy), "/zero"]);
        let text = output_text(&o);
        assert_eq!(o.status.code(), Some(5), "{text}");
        assert!(text.contains(want), "{text}");
    }
    // Writing works with the device (the realtime rmap btree kept), and
    // xfs_repair -n -r 6.15 finds the result clean.
    let o = xfskit(&["mkdir", "--rtdev", s(&im.rtdev), img, "/new"]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    // Extents that xfs_repair put in the groups' rmap btrees are freed.
    for (path, size) in [("/zero", "0"), ("/two", "8192")] {
        let o = xfskit(&["truncate", "--rtdev", s(&im.rtdev), "-s", size, img, path]);
        assert_eq!(o.status.code(), Some(0), "{path}: {}", output_text(&o));
    }
    let (ok, out) = im.repair_n();
    assert!(ok, "xfs_repair -n -r after writing: {out}");
    // Without the device writing is refused, naming it.
    let o = xfskit(&["mkdir", img, "/new2"]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(text.contains("--rtdev"), "{text}");
}

#[test]
fn rtgroup_files_through_the_read_only_mount() {
    const TEST: &str = "rtgroup_files_through_the_read_only_mount";
    if !common::is_root() || !Path::new("/dev/fuse").exists() {
        skip(TEST, "needs root and /dev/fuse for a FUSE mount");
        return;
    }
    let Some(im) = make(TEST) else { return };
    im.assert_read_through_read_only_mount();
}

fn check(im: &RtImage, img: &Path, rtdev: &Path) -> (Option<i32>, String) {
    let o = xfskit(&["check", "--rtdev", s(rtdev), s(img)]);
    let _ = im;
    (o.status.code(), output_text(&o))
}

fn assert_clean(im: &RtImage, what: &str) {
    let (code, text) = check(im, &im.img, &im.rtdev);
    assert_eq!(
        code,
        Some(0),
        "{what}: check --rtdev on a valid image: {text}"
    );
    assert!(!text.contains("not checked"), "{what}: {text}");
}

/// Valid images of other shapes check clean, as `xfs_repair -n -r` finds
/// them (make_with asserts that): extents of four blocks in eleven groups
/// of 1,536 blocks without rmap or reflink; a group whose rmap btree is a
/// root and a leaf block (40 files); files sharing realtime blocks
/// (reflink), counted in the group's refcount btree.
#[test]
fn rtgroup_check_clean_on_several_layouts() {
    const TEST: &str = "rtgroup_check_clean_on_several_layouts";
    let Some(im) = make(TEST) else { return };
    assert_clean(&im, "rgcount=3, rmapbt and reflink");

    // 1,536-block groups: rgblklog 11, group g at realtime block g << 11.
    let files = vec![
        RtFile {
            name: "a",
            size: 8 * BS,
            extents: vec![(0, (3 << 11) | 16, 8, false)],
        },
        RtFile {
            name: "b",
            size: 12 * BS,
            extents: vec![(0, (10 << 11) | 1020, 4, false), (4, 4, 8, true)],
        },
    ];
    let layout = Layout {
        extsize: "16k",
        rt_opts: ",rgsize=6m",
        mkfs_args: vec!["-m", "metadir=1,rmapbt=0,reflink=0", "-d", "agcount=2"],
        ..rtg_layout(files, 2 + 1 + 2 + 1)
    };
    let Some(im) = make_with(TEST, layout) else {
        return;
    };
    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print rgcount rgblklog"])
            .arg(&im.img),
        "xfs_db sb",
    );
    assert_eq!(
        (field(&sb, "rgcount"), field(&sb, "rgblklog")),
        (11, 11),
        "{sb}"
    );
    for (path, want) in &im.files {
        let o = xfskit(&["cat", "--rtdev", s(&im.rtdev), s(&im.img), path]);
        assert!(o.stdout == *want, "cat {path}: {}", output_text(&o));
    }
    assert_clean(&im, "extsize 16k, rgsize 6m, no rmapbt/reflink");

    // 40 files of two blocks in group 1: the rmap btree needs a leaf block.
    let names: Vec<&'static str> = (0..40)
        .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
        .collect();
    let files = names
        .iter()
        .enumerate()
        .map(|(i, &name)| RtFile {
            name,
            size: 2 * BS,
            extents: vec![(0, rtb(1, 100 + 3 * i as u64), 2, false)],
        })
        .collect();
    let Some(im) = make_with(TEST, rtg_layout(files, 80 + 1)) else {
        return;
    };
    let rmap = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "path -m /rtgroups/1.rmap"])
            .args(["-c", "print u3.rtrmapbt.level"])
            .arg(&im.img),
        "xfs_db rmap",
    );
    assert_eq!(field(&rmap, "u3.rtrmapbt.level"), 1, "{rmap}");
    assert_clean(&im, "a two-level realtime rmap btree");
    // The root's key for its leaf made wrong: check names it (xfs_repair -n
    // 6.15 rebuilds the tree without a word), the records still compared.
    let copy = im.dir.join("key.img");
    std::fs::copy(&im.img, &copy).expect("copy");
    let mut c = tool(&im.x615, "xfs_db");
    c.arg("-x").arg("-R").arg(&im.rtdev);
    c.args(["-c", "path -m /rtgroups/1.rmap"]);
    c.args(["-c", "write -d u3.rtrmapbt.keys[1].startblock 101"]);
    run_ok(c.arg(&copy), "xfs_db write");
    let (code, text) = check(&im, &copy, &im.rtdev);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("the parent's key differs"), "{text}");
    assert!(text.contains("1 problem(s)"), "{text}");
    // The root pointing twice at its leaf: found, walked once.
    let mut c = tool(&im.x615, "xfs_db");
    c.arg("-x").arg("-R").arg(&im.rtdev);
    c.args(["-c", "path -m /rtgroups/1.rmap"]);
    let leaf = field(
        &run_ok(
            c.args(["-c", "print u3.rtrmapbt.ptrs[1]"]).arg(&im.img),
            "xfs_db",
        ),
        "u3.rtrmapbt.ptrs[1]",
    );
    let mut c = tool(&im.x615, "xfs_db");
    c.arg("-x").arg("-R").arg(&im.rtdev);
    c.args(["-c", "path -m /rtgroups/1.rmap"]);
    c.args(["-c", "write -d u3.rtrmapbt.numrecs 2"]);
    c.args(["-c", &format!("write -d u3.rtrmapbt.ptrs[2] {leaf}")]);
    run_ok(c.arg(&im.img), "xfs_db write");
    let (ok, _) = im.repair_n();
    assert!(
        !ok,
        "a doubled rmap btree pointer: xfs_repair -n found nothing"
    );
    let (code, text) = check(&im, &im.img, &im.rtdev);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("pointed to twice"), "{text}");

    // Two files sharing eight blocks of group 2, one more mapping them.
    let files = vec![
        RtFile {
            name: "orig",
            size: 8 * BS,
            extents: vec![(0, rtb(2, 40), 8, false)],
        },
        RtFile {
            name: "clone",
            size: 8 * BS,
            extents: vec![(0, rtb(2, 40), 8, false)],
        },
        RtFile {
            name: "part",
            size: 2 * BS,
            extents: vec![(0, rtb(2, 44), 2, false)],
        },
    ];
    let layout = Layout {
        extsize: "",
        reflink_files: true,
        ..rtg_layout(files, 8 + 1)
    };
    let Some(im) = make_with(TEST, layout) else {
        return;
    };
    let refc = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "path -m /rtgroups/2.refcount"])
            .args(["-c", "print u3.rtrefcbt.numrecs"])
            .arg(&im.img),
        "xfs_db refcount",
    );
    assert_eq!(field(&refc, "u3.rtrefcbt.numrecs"), 3, "{refc}");
    assert_clean(&im, "shared realtime blocks");
    // A reference count off by one: both find it.
    let mut c = tool(&im.x615, "xfs_db");
    c.arg("-x").arg("-R").arg(&im.rtdev);
    c.args(["-c", "path -m /rtgroups/2.refcount"]);
    c.args(["-c", "write u3.rtrefcbt.recs[2].refcount 5"]);
    run_ok(c.arg(&im.img), "xfs_db write");
    let (ok, _) = im.repair_n();
    assert!(!ok, "a refcount off by one: xfs_repair -n found nothing");
    let (code, text) = check(&im, &im.img, &im.rtdev);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("realtime refcount btree"), "{text}");
}

/// One damage each, to a copy of the image and its realtime device: both
/// `xfs_repair -n -r` 6.15 and `check --rtdev` find it, and check names the
/// structure.
#[test]
fn rtgroup_check_at_repair_parity() {
    const TEST: &str = "rtgroup_check_at_repair_parity";
    let Some(im) = make(TEST) else { return };
    assert_clean(&im, "as made");
    let db = |img: &Path, rtdev: &Path, cmds: &[&str]| {
        let mut c = tool(&im.x615, "xfs_db");
        c.arg("-x").arg("-R").arg(rtdev);
        for k in cmds {
            c.args(["-c", k]);
        }
        run_ok(c.arg(img), "xfs_db write")
    };
    // The disk address of block 0 of a group's metadata file.
    let bno = |file: &str| -> u64 {
        let out = db(
            &im.img,
            &im.rtdev,
            &[
                &format!("path -m /rtgroups/{file}"),
                "dblock 0",
                "print bno",
            ],
        );
        field(&out, "bno")
    };
    let flip = |path: &Path, off: u64| {
        let h = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open");
        let mut b = [0u8; 1];
        h.read_exact_at(&mut b, off).expect("read");
        h.write_all_at(&[b[0] ^ 0x40], off).expect("write");
    };
    let bitmap1 = bno("1.bitmap") * 512;
    type Damage<'a> = Box<dyn Fn(&Path, &Path) + 'a>;
    let cases: Vec<(&str, &str, Damage)> = vec![
        (
            "a bitmap word of group 1 (file \"two\"'s extents marked free)",
            "realtime bitmap",
            Box::new(|i: &Path, r: &Path| {
                db(
                    i,
                    r,
                    &[
                        "path -m /rtgroups/1.bitmap",
                        "dblock 0",
                        "write rtwords[0] 0xffffffff",
                    ],
                );
            }),
        ),
        (
            "a summary count of group 1",
            "realtime summary",
            Box::new(|i: &Path, r: &Path| {
                db(
                    i,
                    r,
                    &[
                        "path -m /rtgroups/1.summary",
                        "dblock 0",
                        "write suminfo[12] 2",
                    ],
                );
            }),
        ),
        (
            "a bitmap block's CRC",
            "bad CRC",
            Box::new(move |i: &Path, _: &Path| flip(i, bitmap1 + 200)),
        ),
        (
            "the realtime superblock's label",
            "realtime superblock",
            Box::new(|i: &Path, r: &Path| {
                db(i, r, &["rtsb", "write fname \"other\""]);
            }),
        ),
        (
            "the realtime superblock's CRC",
            "realtime superblock",
            Box::new(|_: &Path, r: &Path| flip(r, 9)),
        ),
        (
            "an rmap record's length",
            "realtime rmap btree",
            Box::new(|i: &Path, r: &Path| {
                db(
                    i,
                    r,
                    &[
                        "path -m /rtgroups/1.rmap",
                        "write u3.rtrmapbt.recs[1].blockcount 3",
                    ],
                );
            }),
        ),
        (
            "the free realtime extent count",
            "frextents",
            Box::new(|i: &Path, r: &Path| {
                db(i, r, &["sb 0", "write frextents 100"]);
            }),
        ),
        // Hostile input: refused before anything is sized by it.
        (
            "a realtime group count of 4,000,000,000",
            "realtime groups",
            Box::new(|i: &Path, r: &Path| {
                db(i, r, &["sb 0", "write -d rgcount 4000000000"]);
            }),
        ),
        (
            "group 1's bitmap inode made a directory",
            "not a regular file",
            Box::new(|i: &Path, r: &Path| {
                db(
                    i,
                    r,
                    &["path -m /rtgroups/1.bitmap", "write core.mode 040755"],
                );
            }),
        ),
    ];
    for (name, want, damage) in cases {
        let img = im.dir.join("damaged.img");
        let rtdev = im.dir.join("damaged.rtdev");
        std::fs::copy(&im.img, &img).expect("copy");
        std::fs::copy(&im.rtdev, &rtdev).expect("copy");
        damage(&img, &rtdev);
        let o = tool(&im.x615, "xfs_repair")
            .args(["-n", "-r"])
            .arg(&rtdev)
            .arg(&img)
            .output()
            .expect("xfs_repair -n");
        assert!(!o.status.success(), "{name}: xfs_repair -n found nothing");
        let (code, text) = check(&im, &img, &rtdev);
        assert_eq!(code, Some(1), "{name}: check: {text}");
        assert!(text.contains(want), "{name}: check: {text}");
    }
}

/// Zoned files: one in group 2, one in group 5 with a hole and another
/// mapping in group 7 (groups of `rg_log`-bit numbers).
fn zoned_files(rg_log: u64) -> Vec<RtFile> {
    let z = |g: u64, b: u64| (g << rg_log) | b;
    vec![
        RtFile {
            name: "zone2",
            size: 8 * BS - 10,
            extents: vec![(0, z(2, 0), 8, false)],
        },
        RtFile {
            name: "zones",
            size: 20 * BS,
            extents: vec![(0, z(5, 0), 4, false), (10, z(7, 0), 10, false)],
        },
    ]
}

/// Reads, `info`, a clean check, an rmap damage found by both, and
/// writing refused naming zoned.
fn zoned_case(test: &str, layout: Layout) {
    let internal = layout.internal_start > 0;
    let Some(im) = make_with(test, layout) else {
        return;
    };
    let img = s(&im.img);
    let mut rt_args: Vec<&str> = Vec::new();
    if !internal {
        rt_args.extend(["--rtdev", s(&im.rtdev)]);
    }
    let with = |cmd: &str, rest: &[&str]| {
        let mut a = vec![cmd];
        a.extend(&rt_args);
        a.push(img);
        a.extend(rest);
        xfskit(&a)
    };
    for (path, want) in &im.files {
        let o = with("cat", &[path]);
        assert!(o.status.success(), "cat {path}: {}", output_text(&o));
        assert!(o.stdout == *want, "cat {path}: the bytes differ");
    }
    let dest = im.dir.join("out");
    let o = with("extract", &["-q", s(&dest)]);
    assert_eq!(o.status.code(), Some(0), "extract: {}", output_text(&o));
    for (path, want) in &im.files {
        let got = std::fs::read(dest.join(&path[1..])).expect("extracted");
        assert!(got == *want, "extract {path}: the bytes differ");
    }
    let o = xfskit(&["bulkstat", "--json", img]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "bulkstat: {}", output_text(&o));
    let rt: Vec<u64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["xflags"].as_u64().unwrap_or(0) & 1 != 0)
        .map(|r| r["blocks"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(rt, [8, 14], "{text}");

    let mut db = tool(&im.x615, "xfs_db");
    db.arg("-r");
    if !internal {
        db.arg("-R").arg(&im.rtdev);
    }
    let want = run_ok(db.args(["-c", "info"]).arg(&im.img), "xfs_db info");
    let o = with("info", &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), want, "info vs xfs_db");
    assert!(want.contains("zoned=1"), "{want}");

    let (code, text) = check(&im, &im.img, &im.rtdev);
    let text = if internal {
        let o = xfskit(&["check", img]);
        assert_eq!(o.status.code(), Some(0), "check: {}", output_text(&o));
        output_text(&o)
    } else {
        assert_eq!(code, Some(0), "check --rtdev: {text}");
        text
    };
    assert!(!text.contains("not checked"), "{text}");

    // An rmap record of group 5 shortened.
    let copy = im.dir.join("damaged.img");
    std::fs::copy(&im.img, &copy).expect("copy");
    let mut c = tool(&im.x615, "xfs_db");
    c.arg("-x");
    if !internal {
        c.arg("-R").arg(&im.rtdev);
    }
    c.args(["-c", "path -m /rtgroups/5.rmap"]);
    c.args(["-c", "write u3.rtrmapbt.recs[1].blockcount 3"]);
    run_ok(c.arg(&copy), "xfs_db write");
    let mut r = tool(&im.x615, "xfs_repair");
    r.arg("-n");
    if !internal {
        r.arg("-r").arg(&im.rtdev);
    }
    let o = r.arg(&copy).output().expect("xfs_repair -n");
    assert!(!o.status.success(), "xfs_repair -n found nothing");
    let mut a = vec!["check"];
    a.extend(&rt_args);
    a.push(s(&copy));
    let o = xfskit(&a);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("realtime rmap btree"), "{text}");

    let o = with("mkdir", &["/new"]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(text.contains("zoned"), "{text}");
}

/// A zoned filesystem on a separate device (mkfs.xfs 6.15 takes a regular
/// file as the zoned device): eleven zones of 1,536 blocks (group numbers
/// 11 bits, so a gap between them). Zoned sections keep no free count on
/// disk (sb_frextents is 0), so all 16,384 extents count as used here.
#[test]
fn zoned_on_a_separate_device() {
    const TEST: &str = "zoned_on_a_separate_device";
    // The root without rtinherit (zoned makes it the default), so the
    // protofile's plain file can hold data: mkfs.xfs writes no realtime
    // data.
    let layout = Layout {
        extsize: "",
        rt_opts: ",zoned=1,rgsize=6m",
        mkfs_args: vec!["-d", "agcount=2,rtinherit=0"],
        ..rtg_layout(zoned_files(11), 16384)
    };
    zoned_case(TEST, layout);
}

/// A zoned section inside the data device from block 16,384 (`-r
/// zoned=1,start=16384b`): eight zones of 14,336 blocks, read without any
/// realtime device.
#[test]
fn zoned_inside_the_data_device() {
    const TEST: &str = "zoned_inside_the_data_device";
    let layout = Layout {
        rt_bytes: 512 << 20,
        internal_start: 16384,
        extsize: "",
        rt_opts: ",zoned=1,start=16384b,rgcount=8",
        mkfs_args: vec!["-d", "agcount=2,rtinherit=0"],
        ..rtg_layout(zoned_files(14), 114688)
    };
    zoned_case(TEST, layout);
}

/// Writes through the edits on realtime groups without rmap or reflink:
/// `mkdir --realtime`, `cp` (a file larger than a group, so its extents
/// go to more than one group), `truncate` and `rm`, beside the files
/// mkfs.xfs made; the data read back, `check --rtdev` and `xfs_repair -n
/// -r` 6.15 clean after the writes and after the frees.
#[test]
fn rtgroup_edits_write_and_free() {
    const TEST: &str = "rtgroup_edits_write_and_free";
    let mut layout = rtg_layout(rtg_files(), 36 + 1);
    layout.mkfs_args = vec!["-m", "metadir=1,rmapbt=0,reflink=0", "-d", "agcount=2"];
    let Some(im) = make_with(TEST, layout) else {
        return;
    };
    let (img, rtdev) = (s(&im.img), s(&im.rtdev));
    let src = im.dir.join("big");
    // 5,462 blocks a group: 6,000 blocks cannot stay in one.
    let big = common::rtimg::pattern(7, 6000 * BS as usize + 77);
    std::fs::write(&src, &big).expect("big");
    let run = |args: &[&str]| {
        let o = xfskit(args);
        assert!(o.status.success(), "{args:?}: {}", output_text(&o));
        o
    };
    run(&["mkdir", "--rtdev", rtdev, "--realtime", img, "/rt"]);
    run(&["cp", "--rtdev", rtdev, s(&src), &format!("{img}:/rt/big")]);
    let o = run(&["cat", "--rtdev", rtdev, img, "/rt/big"]);
    assert!(o.stdout == big, "the copy reads back different");
    let o = run(&["stat", "--rtdev", rtdev, img, "/rt/big"]);
    assert!(
        output_text(&o).contains("RT-BLOCK-RANGE"),
        "{}",
        output_text(&o)
    );
    let o = run(&["cat", "--rtdev", rtdev, img, "/two"]);
    assert_eq!(o.stdout, im.files.iter().find(|f| f.0 == "/two").unwrap().1);
    assert_clean(&im, "after cp");
    let (ok, out) = im.repair_n();
    assert!(ok, "xfs_repair -n -r after cp: {out}");
    run(&["truncate", "--rtdev", rtdev, "-s", "100000", img, "/rt/big"]);
    let o = run(&["cat", "--rtdev", rtdev, img, "/rt/big"]);
    assert!(o.stdout == big[..100000], "the truncated copy differs");
    run(&["rm", "--rtdev", rtdev, img, "/rt/big", "/zero"]);
    assert_clean(&im, "after truncate and rm");
    let (ok, out) = im.repair_n();
    assert!(ok, "xfs_repair -n -r after rm: {out}");
    // Everything but the files mkfs.xfs made and the realtime superblock is free.
    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print frextents rextents"])
            .arg(&im.img),
        "xfs_db sb",
    );
    assert_eq!(
        field(&sb, "frextents"),
        field(&sb, "rextents") - 16 - 1,
        "{sb}"
    );
}

/// A realtime group filesystem made by `xfskit mkfs` (without rmap or
/// reflink, three groups) takes realtime writes as one mkfs.xfs 6.15
/// made does: `mkdir --realtime`, `cp` of a file larger than a group,
/// read back; `check --rtdev` and `xfs_repair -n -r` 6.15 clean.
#[test]
fn xfskit_mkfs_rtgroups_take_realtime_writes() {
    const TEST: &str = "xfskit_mkfs_rtgroups_take_realtime_writes";
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(TEST, "xfsprogs 6.15 is not beside the project");
        return;
    };
    let tmp = common::TempDir::new("xfskit-mkfs-rtg");
    let (img, rt) = (tmp.path().join("img"), tmp.path().join("rt"));
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(300 << 20))
        .expect("img");
    std::fs::File::create(&rt)
        .and_then(|f| f.set_len(64 << 20))
        .expect("rt");
    let (img_s, rt_s) = (s(&img), s(&rt));
    let run = |args: &[&str]| {
        let o = xfskit(args);
        assert!(o.status.success(), "{args:?}: {}", output_text(&o));
        o
    };
    let rarg = format!("rtdev={rt_s},rgcount=3");
    run(&[
        "mkfs",
        "-m",
        "metadir=1,rmapbt=0,reflink=0",
        "-d",
        "agcount=2",
        "-r",
        &rarg,
        img_s,
    ]);
    let repair = |what: &str| {
        let o = tool(&x615, "xfs_repair")
            .args(["-n", "-r", rt_s, img_s])
            .output()
            .expect("xfs_repair");
        assert!(
            o.status.success(),
            "xfs_repair -n -r {what}: {}",
            output_text(&o)
        );
        let o = xfskit(&["check", "--rtdev", rt_s, img_s]);
        assert!(
            o.status.success(),
            "check --rtdev {what}: {}",
            output_text(&o)
        );
    };
    repair("after mkfs");
    let sb = run_ok(
        tool(&x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print rgcount rextents frextents"])
            .arg(&img),
        "xfs_db sb",
    );
    assert_eq!(field(&sb, "rgcount"), 3, "{sb}");
    let src = tmp.path().join("big");
    // A group holds a third of 16,384 blocks: 6,000 cannot stay in one.
    let big = common::rtimg::pattern(9, 6000 * BS as usize + 5);
    std::fs::write(&src, &big).expect("big");
    run(&["mkdir", "--rtdev", rt_s, "--realtime", img_s, "/rt"]);
    run(&["cp", "--rtdev", rt_s, s(&src), &format!("{img_s}:/rt/big")]);
    let o = run(&["cat", "--rtdev", rt_s, img_s, "/rt/big"]);
    assert!(o.stdout == big, "the copy reads back different");
    let o = run(&["stat", "--rtdev", rt_s, img_s, "/rt/big"]);
    assert!(
        output_text(&o).contains("RT-BLOCK-RANGE"),
        "{}",
        output_text(&o)
    );
    repair("after cp");
    let after = run_ok(
        tool(&x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print frextents"])
            .arg(&img),
        "xfs_db sb",
    );
    assert_eq!(
        field(&after, "frextents"),
        field(&sb, "frextents") - 6001,
        "{after}"
    );
}

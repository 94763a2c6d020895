//! Classic realtime sections read with their device (`--rtdev FILE`):
//! realtime files' data through cat, extract and the read-only mount,
//! against the bytes the image was made from; the device checked against
//! the superblock; `check --rtdev` against `xfs_repair -n -r` 6.15.
//!
//! The images: mkfs.xfs 6.15 with `-r rtdev=FILE,extsize=16k` (four blocks
//! a realtime extent) and a protofile of empty files (neither mkfs.xfs nor
//! this kernel writes realtime data), then each made a realtime file with
//! xfs_db (flag, size, extent records in realtime blocks: a file of one
//! extent, one of two extents with a hole between them, one unwritten
//! extent), its data written to the realtime device at those blocks, and
//! `xfs_repair -r` run to make the realtime bitmap, summary and free
//! count agree; `xfs_repair -n -r` then proves the image valid.

mod common;

use common::fixtures::{output_text, xfskit_output as xfskit};
use common::rtimg::{field, make_with, run_ok, s, tool, Layout, RtFile, RtImage, BS};
use common::skip;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn rt_files() -> Vec<RtFile> {
    vec![
        // 100,000 bytes in 7 realtime extents from realtime block 0.
        RtFile {
            name: "one",
            size: 100_000,
            extents: vec![(0, 0, 28, false)],
        },
        // Blocks 0-3 at realtime block 64, a hole, blocks 8-15 at 200.
        RtFile {
            name: "two",
            size: 16 * BS - 100,
            extents: vec![(0, 64, 4, false), (8, 200, 8, false)],
        },
        // Preallocated: reads as zeros whatever the device holds there.
        RtFile {
            name: "prealloc",
            size: 4 * BS,
            extents: vec![(0, 400, 4, true)],
        },
    ]
}

/// Makes the image; None (after recording the skip) without xfsprogs 6.15.
fn make(test: &str) -> Option<RtImage> {
    make_with(test, Layout::default())
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            rt_bytes: 64 << 20,
            internal_start: 0,
            extsize: "16k",
            rt_opts: "",
            mkfs_args: Vec::new(),
            rtgroups: false,
            reflink_files: false,
            files: rt_files(),
            used: 7 + 3 + 1,
        }
    }
}

#[test]
fn realtime_files_read_with_rtdev() {
    const TEST: &str = "realtime_files_read_with_rtdev";
    let Some(im) = make(TEST) else { return };
    im.assert_files_read_with_rtdev("/one");
    let (img, rtdev) = (s(&im.img), s(&im.rtdev));

    // stat maps a realtime file's data in realtime device units (512
    // bytes), without AG columns, as xfs_bmap -v does.
    let o = xfskit(&["stat", img, "/two"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stat: {}", output_text(&o));
    let data = text.split("data fork:").nth(1).expect("data fork table");
    assert!(
        data.contains("RT-BLOCK-RANGE") && !data.contains("AG-OFFSET"),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = data
        .lines()
        .take_while(|l| !l.contains("attr fork"))
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..4], ["0:", "[0..31]:", "512..543", "32"], "{text}");
    assert_eq!(rows[1][..4], ["1:", "[32..63]:", "hole", "32"], "{text}");
    assert_eq!(
        rows[2][..4],
        ["2:", "[64..127]:", "1600..1663", "64"],
        "{text}"
    );

    // The listing comes from the directories, as without the device.
    let o = xfskit(&["ls", "--rtdev", rtdev, img, "/"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["one", "prealloc", "sub", "two"],
        "{}",
        output_text(&o)
    );
}

#[test]
fn rtdev_refused_when_wrong() {
    const TEST: &str = "rtdev_refused_when_wrong";
    let Some(im) = make(TEST) else { return };
    let img = s(&im.img);
    // A device smaller than the realtime section.
    let small = im.dir.join("small");
    std::fs::File::create(&small)
        .and_then(|f| f.set_len(32 << 20))
        .expect("small");
    let o = xfskit(&["cat", "--rtdev", s(&small), img, "/one"]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.contains("realtime device") && text.contains("33554432 bytes"),
        "{text}"
    );
    // A device that does not exist.
    let o = xfskit(&["cat", "--rtdev", s(&im.dir.join("nothing")), img, "/one"]);
    assert_eq!(o.status.code(), Some(4), "{}", output_text(&o));
    assert!(output_text(&o).contains("realtime device"));
    // A filesystem without a realtime section.
    let plain = im.dir.join("plain.img");
    std::fs::File::create(&plain)
        .and_then(|f| f.set_len(64 << 20))
        .expect("plain");
    run_ok(
        tool(&im.x615, "mkfs.xfs")
            .env("TEST_DEV", "/dev/null")
            .env("TEST_DIR", "/tmp")
            .env("QA_CHECK_FS", "1")
            .args(["-q", "-f"])
            .arg(&plain),
        "mkfs.xfs",
    );
    let o = xfskit(&["ls", "--rtdev", s(&im.rtdev), s(&plain), "/"]);
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    assert!(output_text(&o).contains("no realtime section"));
    // Writing needs the device; with it, the edit is made and checks clean.
    let o = xfskit(&["mkdir", img, "/new"]);
    assert_eq!(o.status.code(), Some(3), "{}", output_text(&o));
    assert!(output_text(&o).contains("--rtdev"), "{}", output_text(&o));
    let o = xfskit(&["mkdir", "--rtdev", s(&im.rtdev), img, "/new"]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    let o = xfskit(&["check", "--rtdev", s(&im.rtdev), img]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
}

#[test]
fn realtime_files_through_the_read_only_mount() {
    const TEST: &str = "realtime_files_through_the_read_only_mount";
    if !common::is_root() || !Path::new("/dev/fuse").exists() {
        skip(TEST, "needs root and /dev/fuse for a FUSE mount");
        return;
    }
    let Some(im) = make(TEST) else { return };
    im.assert_read_through_read_only_mount();
}

#[test]
fn info_names_the_realtime_device_as_xfs_db_does() {
    const TEST: &str = "info_names_the_realtime_device_as_xfs_db_does";
    let Some(im) = make(TEST) else { return };
    im.assert_info_equals_xfs_db("rtextents=4096");
}

/// `check --rtdev` and `xfs_repair -n -r` on the image as made, then with
/// one damage each: both find nothing on the first and something on each
/// damaged copy.
#[test]
fn check_realtime_section_at_repair_parity() {
    const TEST: &str = "check_realtime_section_at_repair_parity";
    let Some(im) = make(TEST) else { return };
    let check = |img: &Path| {
        let o = xfskit(&["check", "--rtdev", s(&im.rtdev), s(img)]);
        (o.status.code(), output_text(&o))
    };
    let (code, text) = check(&im.img);
    assert_eq!(code, Some(0), "check --rtdev on a valid image: {text}");
    assert!(!text.contains("not checked"), "{text}");

    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print rbmino rsumino rextslog"])
            .arg(&im.img),
        "xfs_db sb",
    );
    let block_of = |ino: u64| -> u64 {
        let out = run_ok(
            tool(&im.x615, "xfs_db")
                .args(["-r", "-c", &format!("inode {ino}"), "-c", "bmap"])
                .arg(&im.img),
            "xfs_db bmap",
        );
        let w: Vec<&str> = out.split_whitespace().collect();
        let k = w.iter().position(|&t| t == "startblock").expect("bmap");
        w[k + 1].parse().expect("startblock")
    };
    let bm = block_of(field(&sb, "rbmino")) * BS;
    let su = block_of(field(&sb, "rsumino")) * BS;
    let ino_two = {
        let ls = run_ok(
            tool(&im.x615, "xfs_db")
                .args(["-r", "-c", "ls /"])
                .arg(&im.img),
            "ls",
        );
        ls.lines()
            .find(|l| l.ends_with(" two (good)"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .expect("two")
    };
    type Damage = Box<dyn Fn(&Path)>;
    let poke = |off: u64, f: Box<dyn Fn(u32) -> u32>| -> Damage {
        Box::new(move |img: &Path| {
            let h = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(img)
                .expect("open");
            let mut w = [0u8; 4];
            h.read_exact_at(&mut w, off).expect("read");
            h.write_all_at(&f(u32::from_le_bytes(w)).to_le_bytes(), off)
                .expect("write");
        })
    };
    let x615 = im.x615.clone();
    let damages: Vec<(&str, &str, Damage)> = vec![
        // Realtime extent 100 (file "prealloc"'s) marked free in the bitmap.
        (
            "a bitmap bit flipped",
            "realtime bitmap",
            poke(bm + 12, Box::new(|w| w ^ (1 << 4))),
        ),
        // One more free run of 2^0 extents counted in bitmap block 0.
        (
            "a summary count changed",
            "realtime summary",
            poke(su, Box::new(|w| w + 1)),
        ),
        // File "two"'s second mapping moved onto file "one"'s extents.
        (
            "two files sharing a realtime extent",
            "also mapped by inode",
            Box::new(move |img: &Path| {
                run_ok(
                    tool(&x615, "xfs_db")
                        .args(["-x", "-c", &format!("inode {ino_two}")])
                        .args(["-c", "write -d u3.bmx[1].startblock 16"])
                        .arg(img),
                    "xfs_db write",
                );
            }),
        ),
    ];
    for (name, want, damage) in damages {
        let copy = im.dir.join("damaged.img");
        std::fs::copy(&im.img, &copy).expect("copy");
        damage(&copy);
        let o = tool(&im.x615, "xfs_repair")
            .args(["-n", "-r"])
            .arg(&im.rtdev)
            .arg(&copy)
            .output()
            .expect("xfs_repair -n");
        assert!(!o.status.success(), "{name}: xfs_repair -n found nothing");
        let (code, text) = check(&copy);
        assert_eq!(code, Some(1), "{name}: check: {text}");
        assert!(text.contains(want), "{name}: check: {text}");
    }
}

/// A realtime device of 1 GiB with one block a realtime extent: eight
/// bitmap blocks. Mappings across a bitmap block boundary and in later
/// blocks read back and check clean; a flipped bit in bitmap block 5 and a
/// free run counted in the wrong bitmap block are flagged by both.
#[test]
fn bitmap_of_several_blocks() {
    const TEST: &str = "bitmap_of_several_blocks";
    const PER: u64 = BS * 8; // realtime extents a bitmap block covers
    let layout = Layout {
        rt_bytes: 1 << 30,
        internal_start: 0,
        extsize: "4k",
        rt_opts: "",
        mkfs_args: Vec::new(),
        rtgroups: false,
        reflink_files: false,
        files: vec![
            RtFile {
                name: "across",
                size: 16 * BS,
                extents: vec![(0, PER - 8, 16, false)],
            },
            RtFile {
                name: "later",
                size: 10 * BS,
                extents: vec![(0, 3 * PER + 5, 3, false), (5, 7 * PER + 100, 5, false)],
            },
        ],
        used: 16 + 3 + 5,
    };
    let Some(im) = make_with(TEST, layout) else {
        return;
    };
    let (img, rtdev) = (s(&im.img), s(&im.rtdev));
    for (path, want) in &im.files {
        let o = xfskit(&["cat", "--rtdev", rtdev, img, path]);
        assert!(o.status.success(), "cat {path}: {}", output_text(&o));
        assert!(o.stdout == *want, "cat {path}: the bytes differ");
    }
    let o = xfskit(&["check", "--rtdev", rtdev, img]);
    assert_eq!(o.status.code(), Some(0), "check: {}", output_text(&o));

    let sb = run_ok(
        tool(&im.x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c", "print rbmino rsumino rbmblocks"])
            .arg(&im.img),
        "xfs_db sb",
    );
    assert_eq!(field(&sb, "rbmblocks"), 8, "{sb}");
    // The bitmap and summary files' first blocks (mkfs makes each one
    // extent).
    let block_of = |ino: u64| -> u64 {
        let out = run_ok(
            tool(&im.x615, "xfs_db")
                .args(["-r", "-c", &format!("inode {ino}"), "-c", "bmap"])
                .arg(&im.img),
            "xfs_db bmap",
        );
        let w: Vec<&str> = out.split_whitespace().collect();
        let k = w.iter().position(|&t| t == "startblock").expect("bmap");
        w[k + 1].parse().expect("startblock")
    };
    let bm = block_of(field(&sb, "rbmino")) * BS;
    let su = block_of(field(&sb, "rsumino")) * BS;
    let xor_word = |img: &Path, off: u64, x: u32| {
        let h = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(img)
            .expect("open");
        let mut w = [0u8; 4];
        h.read_exact_at(&mut w, off).expect("read");
        h.write_all_at(&(u32::from_le_bytes(w) ^ x).to_le_bytes(), off)
            .expect("write");
    };
    // Bitmap block 5, word 9: a free extent marked used. Summary: a free
    // run of 2^10 extents counted in bitmap block 6, where none starts
    // (index level * rbmblocks + block).
    let cases: Vec<(&str, u64, u32, &str)> = vec![
        (
            "bitmap block 5",
            bm + 5 * BS + 9 * 4,
            0x10,
            "realtime bitmap",
        ),
        ("summary word", su + 4 * (8 * 10 + 6), 1, "realtime summary"),
    ];
    for (name, off, x, want) in cases {
        let copy = im.dir.join("damaged.img");
        std::fs::copy(&im.img, &copy).expect("copy");
        xor_word(&copy, off, x);
        let o = tool(&im.x615, "xfs_repair")
            .args(["-n", "-r"])
            .arg(&im.rtdev)
            .arg(&copy)
            .output()
            .expect("xfs_repair -n");
        assert!(!o.status.success(), "{name}: xfs_repair -n found nothing");
        let o = xfskit(&["check", "--rtdev", rtdev, s(&copy)]);
        let text = output_text(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: check: {text}");
        assert!(text.contains(want), "{name}: {text}");
    }
}

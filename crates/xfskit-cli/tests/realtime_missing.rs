//! A filesystem with a realtime section, opened without its realtime
//! device (`--rtdev` not given): a realtime file's data is
//! reported as exactly that, "needs the realtime device: --rtdev", exit 3,
//! never as corruption. `cat` of it exits 3; `extract` skips it, extracts
//! the rest and exits 3; `check` finds nothing wrong, says the realtime
//! section was not checked and exits 3; writes are refused (exit 3).
//!
//! The image: mkfs.xfs 6.15 with `-r rtdev=FILE` and a protofile (an empty
//! file and a small one), then, as neither mkfs nor this kernel can write
//! realtime data, the empty file made a realtime file of two realtime
//! blocks with xfs_db, and the realtime bitmap, summary and free extent
//! count changed to match; `xfs_repair -n -r` 6.15 proves the image valid.

mod common;

use common::fixtures::{output_text, xfskit_output as xfskit};
use common::{skip, TempDir};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn tool(x615: &Path, name: &str) -> Command {
    let mut c = Command::new(x615.join("libexec").join(name));
    c.env("LD_LIBRARY_PATH", x615.join("lib"));
    c
}

fn run_ok(c: &mut Command, what: &str) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `name = value` lines of xfs_db's print, as numbers.
fn field(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name} = ")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

/// The filesystem block that holds block 0 of inode `ino`'s data fork (AG 0).
fn first_block(x615: &Path, img: &Path, ino: u64) -> u64 {
    let out = run_ok(
        tool(x615, "xfs_db")
            .args(["-r", "-c", &format!("inode {ino}"), "-c", "bmap"])
            .arg(img),
        "xfs_db bmap",
    );
    // "data offset 0 startblock 15 (0/15) count 1 flag 0"
    let w: Vec<&str> = out.split_whitespace().collect();
    let k = w
        .iter()
        .position(|&t| t == "startblock")
        .expect("bmap line");
    w[k + 1].parse().expect("startblock")
}

#[test]
fn realtime_file_without_the_realtime_device() {
    const TEST: &str = "realtime_file_without_the_realtime_device";
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(TEST, "xfsprogs 6.15 is missing (mkfs.xfs -r rtdev, xfs_db)");
        return;
    };
    let tmp = TempDir::new("xfskit-rt");
    let img = tmp.path().join("rt.img");
    let rtdev = tmp.path().join("rt.rtdev");
    for f in [&img, &rtdev] {
        std::fs::File::create(f)
            .and_then(|h| h.set_len(64 << 20))
            .expect("create image");
    }
    let plain = tmp.path().join("plain");
    std::fs::write(&plain, b"on the data device\n").expect("write");
    let proto = tmp.path().join("proto");
    std::fs::write(
        &proto,
        format!(
            "/\n0 0\nd--755 0 0\nrtfile ---644 0 0 /dev/null\nplain ---644 0 0 {}\n$\n$\n",
            plain.display()
        ),
    )
    .expect("protofile");
    run_ok(
        tool(&x615, "mkfs.xfs")
            .env("TEST_DEV", "/dev/null")
            .env("TEST_DIR", "/tmp")
            .env("QA_CHECK_FS", "1")
            .args(["-q", "-f", "-r"])
            .arg(format!("rtdev={}", rtdev.display()))
            .arg("-p")
            .arg(&proto)
            .arg(&img),
        "mkfs.xfs 6.15 -r rtdev",
    );
    let sb = run_ok(
        tool(&x615, "xfs_db")
            .args(["-r", "-c", "sb 0", "-c"])
            .arg("print rextents rbmino rsumino rbmblocks rextslog frextents blocksize")
            .arg(&img),
        "xfs_db sb",
    );
    let (rext, rbm, rsum) = (
        field(&sb, "rextents"),
        field(&sb, "rbmino"),
        field(&sb, "rsumino"),
    );
    let (rbmblocks, rextslog) = (field(&sb, "rbmblocks"), field(&sb, "rextslog"));
    let bs = field(&sb, "blocksize");
    assert_eq!((rbmblocks, 1u64 << rextslog), (1, rext), "{sb}");
    let ls = run_ok(
        tool(&x615, "xfs_db").args(["-r", "-c", "ls /"]).arg(&img),
        "xfs_db ls",
    );
    let ino = ls
        .lines()
        .find(|l| l.ends_with(" rtfile (good)"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("rtfile in {ls}"));

    // Realtime extents 0 and 1 allocated: the bitmap (host-endian words,
    // a set bit is a free extent), the summary (one free extent of 2^14 in
    // bitmap block 0 becomes one of 2^13), the free count, and the file.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open image");
    let bm = first_block(&x615, &img, rbm) * bs;
    f.write_all_at(&0xffff_fffcu32.to_le_bytes(), bm)
        .expect("bitmap");
    let su = first_block(&x615, &img, rsum) * bs;
    f.write_all_at(&1u32.to_le_bytes(), su + 4 * (rextslog - 1))
        .expect("summary");
    f.write_all_at(&0u32.to_le_bytes(), su + 4 * rextslog)
        .expect("summary");
    drop(f);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&rtdev)
        .and_then(|f| f.write_all_at(&[0x5a; 8192], 0))
        .expect("realtime data");
    let set = |c: &str| ["-c".to_string(), format!("write -d {c}")];
    let mut args = vec!["-x".to_string(), "-c".into(), "sb 0".into()];
    args.extend(set(&format!("frextents {}", rext - 2)));
    args.extend(["-c".into(), format!("inode {ino}")]);
    for c in [
        "core.realtime 1",
        "core.size 8192",
        "core.nextents 1",
        "core.nblocks 2",
        "u3.bmx[0].startoff 0",
        "u3.bmx[0].startblock 0",
        "u3.bmx[0].blockcount 2",
        "u3.bmx[0].extentflag 0",
    ] {
        args.extend(set(c));
    }
    run_ok(tool(&x615, "xfs_db").args(&args).arg(&img), "xfs_db writes");
    run_ok(
        tool(&x615, "xfs_repair")
            .args(["-n", "-r"])
            .arg(&rtdev)
            .arg(&img),
        "xfs_repair -n -r 6.15 on the realtime image",
    );

    let needs = "needs the realtime device: --rtdev";
    let o = xfskit(&["ls", s(&img), "/"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["plain", "rtfile"],
        "ls: {}",
        output_text(&o)
    );
    let o = xfskit(&["cat", s(&img), "/plain"]);
    assert_eq!(o.stdout, b"on the data device\n", "cat /plain");
    let o = xfskit(&["cat", s(&img), "/rtfile"]);
    assert_eq!(o.status.code(), Some(3), "cat /rtfile: {}", output_text(&o));
    assert!(
        o.stdout.is_empty(),
        "cat /rtfile printed data from the data device"
    );
    assert!(output_text(&o).contains(needs), "{}", output_text(&o));

    let dest = tmp.path().join("out");
    let o = xfskit(&["extract", "-q", s(&img), s(&dest)]);
    assert_eq!(o.status.code(), Some(3), "extract: {}", output_text(&o));
    assert!(output_text(&o).contains(needs), "{}", output_text(&o));
    assert_eq!(
        std::fs::read(dest.join("plain")).expect("plain extracted"),
        b"on the data device\n"
    );
    assert!(
        !dest.join("rtfile").exists(),
        "extract left a stand-in rtfile"
    );

    let o = xfskit(&["check", s(&img)]);
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(3), "check: {text}");
    assert!(
        text.contains("no problems") && text.contains(needs),
        "{text}"
    );
    assert!(!text.contains("outside the data section"), "{text}");

    let o = xfskit(&["mkdir", s(&img), "/new"]);
    assert_eq!(o.status.code(), Some(3), "mkdir: {}", output_text(&o));
    assert!(output_text(&o).contains(needs), "{}", output_text(&o));
}

/// Realtime groups (a metadata directory tree with a realtime section)
/// opened without their device: the namespace reads, and `check` says the
/// realtime section needs the device (exit 3), not that anything is wrong.
#[test]
fn realtime_groups_without_their_device() {
    const TEST: &str = "realtime_groups_without_their_device";
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(
            TEST,
            "xfsprogs 6.15 is missing (mkfs.xfs -m metadir=1 -r rtdev)",
        );
        return;
    };
    let tmp = TempDir::new("xfskit-rtg");
    let img = tmp.path().join("rtg.img");
    let rtdev = tmp.path().join("rtg.rtdev");
    for f in [&img, &rtdev] {
        std::fs::File::create(f)
            .and_then(|h| h.set_len(128 << 20))
            .expect("create image");
    }
    run_ok(
        tool(&x615, "mkfs.xfs")
            .env("TEST_DEV", "/dev/null")
            .env("TEST_DIR", "/tmp")
            .env("QA_CHECK_FS", "1")
            .args(["-q", "-f", "-m", "metadir=1", "-r"])
            .arg(format!("rtdev={}", rtdev.display()))
            .arg(&img),
        "mkfs.xfs 6.15 -m metadir=1 -r rtdev",
    );
    let o = xfskit(&["check", s(&img)]);
    assert_eq!(o.status.code(), Some(3), "check: {}", output_text(&o));
    assert!(
        output_text(&o).contains("needs the realtime device: --rtdev")
            && output_text(&o).contains("no problems"),
        "{}",
        output_text(&o)
    );
    for cmd in ["ls", "bulkstat"] {
        let mut args = vec![cmd, s(&img)];
        if cmd == "ls" {
            args.push("/");
        }
        let o = xfskit(&args);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", output_text(&o));
    }
    // Realtime groups are written with their device only.
    let o = xfskit(&["mkdir", s(&img), "/new"]);
    assert_eq!(o.status.code(), Some(3), "mkdir: {}", output_text(&o));
    assert!(
        output_text(&o).contains("needs the realtime device: --rtdev"),
        "{}",
        output_text(&o)
    );
}

//! Realtime files written through the command line and the read-write
//! mount on a classic realtime section that `xfskit mkfs -r rtdev=` made:
//! `mkdir --realtime` marks a directory RTINHERIT, `cp` into it makes
//! realtime files, `truncate` and `rm` free their realtime extents, and a
//! read-write `xfskit mount --rtdev` writes realtime files too. What was
//! written reads back (cat --rtdev), `check --rtdev` finds nothing, and
//! xfs_repair -n -r 6.15 finds the image clean (the kernel here has no
//! realtime support, so it cannot be the oracle).

mod common;

use common::fixtures::{output_text, xfskit_output as xfskit};
use common::{skip, TempDir};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn ok(args: &[&str]) -> String {
    let o = xfskit(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "xfskit {args:?}: {}",
        output_text(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn cat(img: &Path, rt: &Path, path: &str) -> Vec<u8> {
    let o = xfskit(&["cat", "--rtdev", s(rt), s(img), path]);
    assert_eq!(o.status.code(), Some(0), "cat {path}: {}", output_text(&o));
    o.stdout
}

/// xfs_repair -n -r of xfsprogs 6.15 must find the image clean.
fn repair_clean(x615: &Path, img: &Path, rt: &Path) {
    let o = Command::new(x615.join("libexec/xfs_repair"))
        .env("LD_LIBRARY_PATH", x615.join("lib"))
        .args(["-n", "-r", s(rt), s(img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "xfs_repair -n -r: {}", output_text(&o));
}

fn setup(
    test: &str,
) -> Option<(
    TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
)> {
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(test, "xfsprogs 6.15 not found beside the project");
        return None;
    };
    let dir = TempDir::new("rtw-cli");
    let (img, rt) = (dir.path().join("d.img"), dir.path().join("rt.img"));
    for (p, n) in [(&img, 1u64 << 30), (&rt, 64 << 20)] {
        std::fs::File::create(p).unwrap().set_len(n).unwrap();
    }
    let r = format!("rtdev={},extsize=16k", s(&rt));
    ok(&["mkfs", "-q", "-r", &r, s(&img)]);
    ok(&["mkdir", "--rtdev", s(&rt), "--realtime", s(&img), "/rt"]);
    Some((dir, x615, img, rt))
}

#[test]
fn realtime_files_through_the_edits() {
    const TEST: &str = "realtime_files_through_the_edits";
    let Some((dir, x615, img, rt)) = setup(TEST) else {
        return;
    };
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("tree")).unwrap();
    let big = pattern(1, 1_000_003);
    let small = pattern(2, 77);
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("tree/small"), &small).unwrap();
    let dest = format!("{}:/rt/", s(&img));
    ok(&["cp", "--rtdev", s(&rt), s(&src.join("big")), &dest]);
    ok(&["cp", "-r", "--rtdev", s(&rt), s(&src.join("tree")), &dest]);
    assert_eq!(cat(&img, &rt, "/rt/big"), big);
    assert_eq!(cat(&img, &rt, "/rt/tree/small"), small);
    // Realtime files: XFS_DIFLAG_REALTIME (0x1) and nothing else.
    let st = ok(&["stat", "--rtdev", s(&rt), "--json", s(&img), "/rt/big"]);
    assert!(st.contains("\"flags\": \"0x1\""), "{st}");
    ok(&[
        "truncate",
        "--rtdev",
        s(&rt),
        "-s",
        "5000",
        s(&img),
        "/rt/big",
    ]);
    assert_eq!(cat(&img, &rt, "/rt/big"), &big[..5000]);
    ok(&["rm", "--rtdev", s(&rt), s(&img), "/rt/tree/small"]);
    let o = xfskit(&["check", "--rtdev", s(&rt), s(&img)]);
    assert_eq!(o.status.code(), Some(0), "check: {}", output_text(&o));
    repair_clean(&x615, &img, &rt);
    // Without the device: writing is refused, naming it.
    let o = xfskit(&["mkdir", s(&img), "/x"]);
    assert_eq!(o.status.code(), Some(3), "{}", output_text(&o));
    assert!(output_text(&o).contains("--rtdev"), "{}", output_text(&o));
}

fn is_mounted(dir: &Path) -> bool {
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

#[test]
fn realtime_files_through_the_read_write_mount() {
    const TEST: &str = "realtime_files_through_the_read_write_mount";
    if let Some(why) = common::rwmount::rw_skip_reason() {
        skip(TEST, &why);
        return;
    }
    let Some((dir, x615, img, rt)) = setup(TEST) else {
        return;
    };
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["mount", "--rtdev", s(&rt), s(&img), s(&mnt)])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !is_mounted(&mnt) {
        assert!(t0.elapsed() < Duration::from_secs(20), "no FUSE mount");
        if let Some(st) = child.try_wait().unwrap() {
            panic!("xfskit mount exited early: {st}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let data = pattern(3, 300_000);
    let r = (|| -> std::io::Result<Vec<u8>> {
        std::fs::write(mnt.join("rt/f"), &data)?;
        std::fs::write(mnt.join("rt/g"), &data[..1000])?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("rt/g"))?;
        f.set_len(100)?;
        drop(f);
        std::fs::remove_file(mnt.join("rt/g"))?;
        std::fs::read(mnt.join("rt/f"))
    })();
    common::must_umount(&mnt);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "xfskit mount exited with {st}");
    assert_eq!(r.unwrap(), data, "read through the mount");
    assert_eq!(cat(&img, &rt, "/rt/f"), data);
    let st = ok(&["stat", "--rtdev", s(&rt), "--json", s(&img), "/rt/f"]);
    assert!(st.contains("\"flags\": \"0x1\""), "{st}");
    let o = xfskit(&["check", "--rtdev", s(&rt), s(&img)]);
    assert_eq!(o.status.code(), Some(0), "check: {}", output_text(&o));
    repair_clean(&x615, &img, &rt);
}

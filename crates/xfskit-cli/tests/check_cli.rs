//! `xfskit check` at the command line: every fixture image is clean
//! (exit 0, "no problems"), and copies with one damaged structure exit 1
//! and name that structure; with the smallest `--memory` bound (records
//! spilled to a temporary file) every report is the same.

mod common;

use common::{fixture_names, unpack_fixture, TempDir};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

/// Runs `xfskit check IMAGE` with `extra` options; returns (exit code,
/// stdout and stderr).
fn check_with(img: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .arg("check")
        .args(extra)
        .arg(img)
        .output()
        .expect("run xfskit check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The report's problem lines, sorted (the summary line, which holds the
/// time taken, left out).
fn problems(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("checked "))
        .collect();
    v.sort_unstable();
    v
}

/// Runs `xfskit check IMAGE`, and again with the smallest memory bound
/// (the namespace records spilled to a temporary file): both must give
/// the same exit code and problems.
fn check(img: &Path) -> (i32, String) {
    let (code, text) = check_with(img, &[]);
    let dir = img.with_extension("spill");
    std::fs::create_dir_all(&dir).expect("spill directory");
    let tmpdir = dir.to_str().expect("utf-8 path");
    let (code2, text2) = check_with(img, &["--memory", "1k", "--tmpdir", tmpdir]);
    assert_eq!(
        (code, problems(&text)),
        (code2, problems(&text2)),
        "{}: check with --memory 1k differs",
        img.display()
    );
    assert!(
        std::fs::read_dir(&dir).expect("list").next().is_none(),
        "the spill file outlived the check"
    );
    std::fs::remove_dir(&dir).expect("remove spill directory");
    (code, text)
}

fn read(img: &Path, off: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(img).expect("open image");
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).expect("read image");
    b
}

/// Flips every bit of one byte (the CRC is left stale on purpose).
fn flip(img: &Path, off: u64) {
    let f = OpenOptions::new()
        .write(true)
        .open(img)
        .expect("open image");
    let b = read(img, off, 1);
    f.write_all_at(&[!b[0]], off).expect("write image");
}

/// Superblock fields needed to find structures (offsets of xfs_dsb).
struct Sb {
    blocksize: u64,
    sectsize: u64,
    inodesize: u64,
    inopblog: u32,
    rootino: u64,
}

fn superblock(img: &Path) -> Sb {
    let b = read(img, 0, 512);
    let be16 = |o: usize| u64::from(u16::from_be_bytes([b[o], b[o + 1]]));
    let be32 = |o: usize| u64::from(u32::from_be_bytes(b[o..o + 4].try_into().expect("4")));
    let be64 = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().expect("8"));
    Sb {
        blocksize: be32(4),
        rootino: be64(56),
        sectsize: be16(102),
        inodesize: be16(104),
        inopblog: u32::from(b[123]),
    }
}

#[test]
fn every_fixture_is_clean() {
    let names = fixture_names();
    assert!(!names.is_empty(), "no fixtures found");
    let tmp = TempDir::new("xfskit-check-cli");
    for name in &names {
        let img = unpack_fixture(name, tmp.path());
        let (code, text) = check(&img);
        assert_eq!(code, 0, "{name}: xfskit check exit {code}:\n{text}");
        assert!(text.contains("no problems"), "{name}: {text}");
        std::fs::remove_file(&img).expect("remove image");
    }
}

#[test]
fn damaged_copies_fail_and_name_the_structure() {
    let names = fixture_names();
    let name = names.first().expect("a fixture");
    let tmp = TempDir::new("xfskit-check-cli-bad");
    let clean = unpack_fixture(name, tmp.path());
    let sb = superblock(&clean);
    // AG 0: AGF in sector 1, AGI in sector 2; the root inode in AG 0.
    let root_off = (sb.rootino >> sb.inopblog) * sb.blocksize
        + (sb.rootino & ((1 << sb.inopblog) - 1)) * sb.inodesize;
    // (name, byte to damage, a line the report must hold)
    let cases = [
        (
            "agf",
            sb.sectsize + 40,
            "AGF: AG 0 sector 1: bad CRC".to_string(),
        ),
        (
            "agi",
            2 * sb.sectsize + 40,
            "AGI: AG 0 sector 2: bad CRC".to_string(),
        ),
        // di_uid, inside the CRC-covered core.
        (
            "root-inode",
            root_off + 8,
            format!("inode: inode {}: bad CRC", sb.rootino),
        ),
    ];
    for (tag, off, line) in cases {
        let img = tmp.path().join(format!("{tag}.img"));
        std::fs::copy(&clean, &img).expect("copy image");
        flip(&img, off);
        let (code, text) = check(&img);
        assert_eq!(code, 1, "{tag}: want exit 1, got {code}:\n{text}");
        assert!(
            text.lines().any(|l| l == line),
            "{tag}: no line '{line}' in:\n{text}"
        );
        assert!(!text.contains("no problems"), "{tag}: {text}");
        std::fs::remove_file(&img).expect("remove image");
    }
}

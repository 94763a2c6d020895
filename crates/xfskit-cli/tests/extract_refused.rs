//! `xfskit extract` (and `xfskit cp IMAGE:SRC DEST`) onto a destination
//! that refuses some entries: an ext4 that cannot hold an 8000-byte xattr,
//! a 1 MiB tmpfs that cannot hold a 2 MiB file. Everything else must be
//! extracted (contents and directory times checked), each refusal
//! reported with its path, a summary line printed and the exit status 6;
//! with --strict the extraction stops at the refusal.

mod common;

use common::fixtures::{output_text as text, xfskit_output as xfskit};

use common::{require_root, TempDir};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use xfskit_testkit::Mounted;

fn sh(script: &str) {
    let o = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
}

/// The source tree: (path, contents) of its files, then its directories
/// with the mtime each is given (seconds, nanoseconds).
const FILES: &[(&str, &[u8])] = &[
    ("top.txt", b"top level\n"),
    ("a/one.txt", b"one\n"),
    (
        "a/big-xattr.txt",
        b"this file has a user.big xattr of 8000 bytes\n",
    ),
    ("a/b/two.txt", b"two\n"),
    ("a/b/three.txt", b"three\n"),
    ("c/four.txt", b"four\n"),
];
const DIRS: &[(&str, i64, u32)] = &[
    ("a", 1_600_000_000, 123_456_789),
    ("a/b", 1_600_000_100, 5),
    ("c", 1_500_000_000, 999_999_999),
];

fn set_mtime(path: &Path, sec: i64, nsec: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let t = [
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec.into(),
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec.into(),
        },
    ];
    // SAFETY: a valid C string and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), t.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat {}", path.display());
}

/// Builds the image of FILES and DIRS (plus `extra` files) with `xfskit
/// build`, then gives a/big-xattr.txt its 8000-byte user.big.
fn make_image(tmp: &Path, extra: &[(&str, Vec<u8>)]) -> PathBuf {
    let src = tmp.join("src");
    for (p, data) in FILES
        .iter()
        .map(|(p, d)| (*p, d.to_vec()))
        .chain(extra.iter().cloned())
    {
        let path = src.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
    }
    for (d, sec, nsec) in DIRS {
        set_mtime(&src.join(d), *sec, *nsec);
    }
    let img = tmp.join("x.img");
    let (s, i) = (src.display().to_string(), img.display().to_string());
    let o = xfskit(&["build", "-q", &s, &i]);
    assert!(o.status.success(), "build: {}", text(&o));
    let value = format!("0x{}", "ab".repeat(8000));
    let o = xfskit(&[
        "setfattr",
        "-n",
        "user.big",
        "-v",
        &value,
        &i,
        "/a/big-xattr.txt",
    ]);
    assert!(o.status.success(), "setfattr: {}", text(&o));
    img
}

/// Every file of FILES (and `extra`, unless listed in `missing`) is in
/// `out` with its contents, and every directory has its mtime.
fn assert_extracted(out: &Path, extra: &[(&str, Vec<u8>)], missing: &[&str]) {
    for (p, data) in FILES
        .iter()
        .map(|(p, d)| (*p, d.to_vec()))
        .chain(extra.iter().cloned())
    {
        let path = out.join(p);
        if missing.contains(&p) {
            assert!(!path.exists(), "{p} should not have been kept");
            continue;
        }
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(got == data, "{p}: different contents ({} bytes)", got.len());
    }
    for (d, sec, nsec) in DIRS {
        let md = std::fs::metadata(out.join(d)).unwrap();
        assert_eq!(
            (md.mtime(), md.mtime_nsec()),
            (*sec, i64::from(*nsec)),
            "mtime of directory {d}"
        );
    }
}

#[test]
fn extract_goes_on_past_an_xattr_ext4_refuses() {
    if !require_root("extract_goes_on_past_an_xattr_ext4_refuses") {
        return;
    }
    if let Some(t) = common::missing_tool(&["mkfs.ext4"]) {
        panic!("{t} is missing (e2fsprogs)");
    }
    let tmp = TempDir::new("extract-ext4");
    let img = make_image(tmp.path(), &[]);
    let ext4 = tmp.path().join("ext4.img");
    sh(&format!(
        "truncate -s 64M {0} && mkfs.ext4 -q -F -b 4096 -O ^ea_inode {0}",
        ext4.display()
    ));
    let mnt = tmp.path().join("mnt");
    let _m = Mounted::new(&["-o", "loop", &ext4.display().to_string()], &mnt);
    let i = img.display().to_string();

    let out = mnt.join("out");
    let o = xfskit(&["extract", &i, &out.display().to_string()]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(6), "{all}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let want = format!(
        "xfskit: extract: {}: setting xattr user.big (8000 bytes): ",
        out.join("a/big-xattr.txt").display()
    );
    assert!(stderr.contains(&want), "no line {want:?}:\n{all}");
    assert!(
        stderr.contains("xfskit: extract: 1 entry not fully extracted (1 xattr)"),
        "no summary line:\n{all}"
    );
    assert_extracted(&out, &[], &[]);
    // The refused xattr is the only thing missing: the file is there.
    let fmd = std::fs::metadata(out.join("a/big-xattr.txt")).unwrap();
    assert!(fmd.is_file());

    // --strict: stops there, with an I/O error naming it.
    let out2 = mnt.join("strict");
    let o = xfskit(&["extract", "--strict", &i, &out2.display().to_string()]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(4), "{all}");
    assert!(all.contains("setting xattr user.big (8000 bytes)"), "{all}");
    assert!(!all.contains("not fully extracted"), "{all}");

    // cp out of the image is extract: the same, reported as cp.
    let out3 = mnt.join("cp");
    let o = xfskit(&["cp", "-a", &format!("{i}:/a"), &out3.display().to_string()]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(6), "{all}");
    assert!(
        all.contains("xfskit cp: 1 entry not fully extracted (1 xattr)"),
        "{all}"
    );
    assert_eq!(std::fs::read(out3.join("b/two.txt")).unwrap(), b"two\n");
}

/// A file with more xattrs than ext4's one xattr block holds: the first
/// five refused are named, one line counts the rest, and the summary
/// counts them all.
#[test]
fn extract_counts_a_files_many_refused_xattrs_in_one_line() {
    if !require_root("extract_counts_a_files_many_refused_xattrs_in_one_line") {
        return;
    }
    if let Some(t) = common::missing_tool(&["mkfs.ext4"]) {
        panic!("{t} is missing (e2fsprogs)");
    }
    let tmp = TempDir::new("extract-ext4-many");
    let img = make_image(tmp.path(), &[]);
    let i = img.display().to_string();
    // 40 xattrs of 300 bytes: about 12 KiB, three times what ext4 holds.
    let value = format!("0x{}", "cd".repeat(300));
    for k in 0..40 {
        let name = format!("user.m{k:02}");
        let o = xfskit(&["setfattr", "-n", &name, "-v", &value, &i, "/top.txt"]);
        assert!(o.status.success(), "setfattr {name}: {}", text(&o));
    }
    let ext4 = tmp.path().join("ext4.img");
    sh(&format!(
        "truncate -s 64M {0} && mkfs.ext4 -q -F -b 4096 -O ^ea_inode {0}",
        ext4.display()
    ));
    let mnt = tmp.path().join("mnt");
    let _m = Mounted::new(&["-o", "loop", &ext4.display().to_string()], &mnt);

    let out = mnt.join("out");
    let o = xfskit(&["extract", &i, &out.display().to_string()]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(6), "{all}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let top = format!("xfskit: extract: {}: ", out.join("top.txt").display());
    let named = stderr
        .lines()
        .filter(|l| l.starts_with(&top) && l.contains("setting xattr user.m"))
        .filter(|l| !l.contains(" more xattrs not set"))
        .count();
    assert_eq!(named, 5, "five refused xattrs named:\n{all}");
    let more: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&top) && l.contains(" more xattrs not set"))
        .collect();
    assert_eq!(more.len(), 1, "one line counts the rest:\n{all}");
    let n: usize = more[0][top.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {:?}", more[0]));
    // The xattrs ext4 kept are on the copy; with those refused, all 40.
    let kept = (0..40)
        .filter(|k| {
            let name = std::ffi::CString::new(format!("user.m{k:02}")).unwrap();
            let path =
                std::ffi::CString::new(out.join("top.txt").into_os_string().into_encoded_bytes())
                    .unwrap();
            // SAFETY: two valid C strings; a zero-length buffer asks only for the size.
            unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) == 300 }
        })
        .count();
    assert!(kept > 0 && kept < 35, "ext4 kept {kept} of the 40:\n{all}");
    assert_eq!(
        kept + 5 + n,
        40,
        "kept {kept}, named 5, counted {n}:\n{all}"
    );
    let summary = format!(
        "xfskit: extract: 2 entries not fully extracted ({} xattrs)",
        5 + n + 1
    );
    assert!(stderr.contains(&summary), "no {summary:?}:\n{all}");
    assert_extracted(&out, &[], &[]);
}

#[test]
fn extract_goes_on_past_a_file_a_full_tmpfs_refuses() {
    if !require_root("extract_goes_on_past_a_file_a_full_tmpfs_refuses") {
        return;
    }
    let tmp = TempDir::new("extract-tmpfs");
    // 2 MiB that do not compress to nothing, in the middle of the tree.
    let big: Vec<u8> = (0u32..2 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let extra = [("a/b/huge.bin", big)];
    let img = make_image(tmp.path(), &extra);
    let mnt = tmp.path().join("small");
    let _m = Mounted::new(&["-t", "tmpfs", "-o", "size=1m", "tmpfs"], &mnt);
    let out = mnt.join("out");
    // One worker: the other files are not written while the big one
    // fills the filesystem (it is removed once refused).
    let o = xfskit(&[
        "extract",
        "--threads",
        "1",
        &img.display().to_string(),
        &out.display().to_string(),
    ]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(6), "{all}");
    let want = format!(
        "xfskit: extract: {}: writing its contents ({} bytes)",
        out.join("a/b/huge.bin").display(),
        2 << 20
    );
    assert!(all.contains(&want), "no line {want:?}:\n{all}");
    assert!(all.contains("No space left on device"), "{all}");
    assert!(all.contains("not fully extracted (1 file"), "{all}");
    assert_extracted(&out, &extra, &["a/b/huge.bin"]);
}

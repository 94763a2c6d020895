//! `xfskit mdrestore` against xfs_mdrestore 7.2: dumps made by xfs_metadump
//! 7.2 (v1 and v2; -o, obfuscated, -a) of several images restore to files
//! byte-identical to what xfs_mdrestore 7.2 writes; -i prints the same
//! line; an external-log dump needs --logdev; damaged or truncated dumps
//! are errors naming the record and offset (exit 5), never a panic.

mod common;

use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::{is_root, skip, TempDir};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether two files hold the same bytes (and have the same length).
fn same_bytes(a: &Path, b: &Path) -> Result<(), String> {
    let (mut fa, mut fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    let (la, lb) = (fa.metadata().unwrap().len(), fb.metadata().unwrap().len());
    if la != lb {
        return Err(format!("sizes differ: {la} and {lb}"));
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut off = 0u64;
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return Ok(());
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            let i = (0..n).find(|&i| ba[i] != bb[i]).unwrap();
            return Err(format!("first difference at byte {}", off + i as u64));
        }
        off += n as u64;
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A tree with files, directories (short form and block/leaf sized),
/// symlinks (inline and remote) and xattrs, built into an image by
/// `xfskit build`.
fn built_image(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::create_dir_all(src.join("a/b/c")).unwrap();
    for i in 0..400 {
        std::fs::write(
            src.join(format!("big/file-with-a-long-name-{i:04}")),
            [b'x'; 10],
        )
        .unwrap();
    }
    std::fs::write(src.join("a/b/c/data"), vec![7u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("short", src.join("a/lnk")).unwrap();
    std::os::unix::fs::symlink("t/".repeat(300), src.join("a/longlnk")).unwrap();
    let img = dir.join("built.img");
    let out = xfskit_output(&["build", "-q", "-f", "--size", "1g", s(&src), s(&img)]);
    assert!(out.status.success(), "build: {}", output_text(&out));
    let out = xfskit_output(&[
        "setfattr",
        "-n",
        "user.colour",
        "-v",
        "blue",
        s(&img),
        "/a/b/c/data",
    ]);
    assert!(out.status.success(), "setfattr: {}", output_text(&out));
    img
}

/// xfs_metadump's option sets: names as they are, obfuscated, whole blocks.
const EVERY: &[&[&str]] = &[&["-o"], &[], &["-a", "-o"]];

/// Dumps `img` with each option set of `all` and both versions, restores each
/// dump with xfs_mdrestore and xfskit, and compares.
fn compare_restores(bin: &Path, dir: &Path, img: &Path, label: &str, all: &[&[&str]]) {
    let md = dir.join(format!("{}.md", label.replace(' ', "-")));
    let (want, got) = (dir.join("want.img"), dir.join("got.img"));
    for &opts in all {
        for v in ["1", "2"] {
            let mut args: Vec<&str> = opts.to_vec();
            args.extend(["-v", v, s(img), s(&md)]);
            tool_72(bin, "xfs_metadump", &args);
            tool_72(bin, "xfs_mdrestore", &[s(&md), s(&want)]);
            let out = xfskit_output(&["mdrestore", s(&md), s(&got)]);
            assert!(
                out.status.success(),
                "{label} {args:?}: {}",
                output_text(&out)
            );
            if let Err(e) = same_bytes(&want, &got) {
                panic!("{label}: xfs_metadump {args:?}, restored: {e}");
            }
            let want_i = tool_72(bin, "xfs_mdrestore", &["-i", s(&md)]);
            let out = xfskit_output(&["mdrestore", "-i", s(&md)]);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                want_i,
                "{label} {args:?} -i"
            );
        }
    }
}

#[test]
fn restores_equal_xfs_mdrestore() {
    let Some(bin) = xfsprogs_72_or_skip("restores_equal_xfs_mdrestore") else {
        return;
    };
    let dir = TempDir::new("mdrestore");
    let d = dir.path();
    // mkfs.xfs 7.2's defaults, empty.
    let plain = d.join("plain.img");
    File::create(&plain).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&plain)]);
    compare_restores(&bin, d, &plain, "mkfs 7.2", &[&["-o"]]);
    std::fs::remove_file(&plain).unwrap();
    // A populated tree.
    let built = built_image(d);
    compare_restores(&bin, d, &built, "xfskit build", EVERY);
    std::fs::remove_file(&built).unwrap();
    // v4 from Debian's mkfs.xfs 6.1: quota inode numbers of 0 come back as NULLFSINO.
    if Path::new("/usr/sbin/mkfs.xfs").exists() {
        let v4 = d.join("v4.img");
        File::create(&v4).unwrap().set_len(512 << 20).unwrap();
        let out = Command::new("/usr/sbin/mkfs.xfs")
            .args(["-q", "-m", "crc=0", s(&v4)])
            .output()
            .unwrap();
        assert!(out.status.success(), "mkfs.xfs 6.1 -m crc=0: {out:?}");
        compare_restores(&bin, d, &v4, "v4", &[&["-o"], &[]]);
        std::fs::remove_file(&v4).unwrap();
    } else {
        skip(
            "restores_equal_xfs_mdrestore (v4 part)",
            "/usr/sbin/mkfs.xfs not found",
        );
    }
    // A metadata directory filesystem.
    let mdir = d.join("metadir.img");
    File::create(&mdir).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", "-m", "metadir=1", s(&mdir)]);
    compare_restores(&bin, d, &mdir, "metadir", &[&[]]);
}

#[test]
fn dirty_log_restores_equal() {
    let Some(bin) = xfsprogs_72_or_skip("dirty_log_restores_equal") else {
        return;
    };
    if !is_root() {
        skip(
            "dirty_log_restores_equal",
            "a dirty log is made by a kernel mount shut down: needs root",
        );
        return;
    }
    let dir = TempDir::new("mdrestore-dirty");
    let d = dir.path();
    let img = d.join("dirty.img");
    File::create(&img).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&img)]);
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-o", "loop", s(&img), s(&mnt)])
        .status()
        .unwrap();
    if !st.success() {
        skip("dirty_log_restores_equal", "loop mount failed");
        return;
    }
    for i in 0..40 {
        std::fs::write(mnt.join(format!("f{i}")), b"x").unwrap();
    }
    tool_72(&bin, "xfs_io", &["-x", "-c", "shutdown -f", s(&mnt)]);
    common::must_umount(&mnt);
    let md = d.join("dirty.md");
    tool_72(&bin, "xfs_metadump", &["-o", s(&img), s(&md)]);
    let i = xfskit_output(&["mdrestore", "-i", s(&md)]);
    assert!(
        String::from_utf8_lossy(&i.stdout).contains("dirty log"),
        "{}",
        output_text(&i)
    );
    compare_restores(&bin, d, &img, "dirty log", &[&["-o"], &[]]);
}

#[test]
fn external_log_needs_logdev() {
    let Some(bin) = xfsprogs_72_or_skip("external_log_needs_logdev") else {
        return;
    };
    let dir = TempDir::new("mdrestore-extlog");
    let d = dir.path();
    let (img, log) = (d.join("fs.img"), d.join("log.img"));
    File::create(&img).unwrap().set_len(512 << 20).unwrap();
    File::create(&log).unwrap().set_len(64 << 20).unwrap();
    tool_72(
        &bin,
        "mkfs.xfs",
        &["-q", "-l", &format!("logdev={}", s(&log)), s(&img)],
    );
    let md = d.join("fs.md");
    tool_72(
        &bin,
        "xfs_metadump",
        &["-o", "-v", "2", "-l", s(&log), s(&img), s(&md)],
    );
    let out = xfskit_output(&["mdrestore", s(&md), s(&d.join("x.img"))]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--logdev"),
        "{}",
        output_text(&out)
    );
    let (wi, wl, gi, gl) = (
        d.join("w.img"),
        d.join("w.log"),
        d.join("g.img"),
        d.join("g.log"),
    );
    tool_72(&bin, "xfs_mdrestore", &["-l", s(&wl), s(&md), s(&wi)]);
    let out = xfskit_output(&["mdrestore", "--logdev", s(&gl), s(&md), s(&gi)]);
    assert!(out.status.success(), "{}", output_text(&out));
    same_bytes(&wi, &gi).expect("data device");
    same_bytes(&wl, &gl).expect("log device");
}

#[test]
fn damaged_dumps_are_named_errors() {
    let Some(bin) = xfsprogs_72_or_skip("damaged_dumps_are_named_errors") else {
        return;
    };
    let dir = TempDir::new("mdrestore-damaged");
    let d = dir.path();
    let img = d.join("fs.img");
    File::create(&img).unwrap().set_len(512 << 20).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&img)]);
    let out_img = d.join("out.img");
    for v in ["1", "2"] {
        let md = d.join(format!("fs.md{v}"));
        tool_72(&bin, "xfs_metadump", &["-o", "-v", v, s(&img), s(&md)]);
        let bytes = std::fs::read(&md).unwrap();
        let bad = d.join("bad.md");
        // Cut short at several places: inside the header, the first record,
        // the superblock, and later.
        for cut in [3, 10, 30, 600, 5000, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&bad, &bytes[..cut]).unwrap();
            let out = xfskit_output(&["mdrestore", s(&bad), s(&out_img)]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(5),
                "v{v} cut at {cut}: {}",
                output_text(&out)
            );
            assert!(
                err.contains("of the metadump") && err.contains("truncated"),
                "v{v} cut at {cut}: {err}"
            );
        }
        // A record address far past the end of the device.
        let mut b = bytes.clone();
        let off = if v == "1" {
            8 + 8 * 3
        } else {
            let len = u32::from_be_bytes(b[32..36].try_into().unwrap()) as usize * 512;
            36 + len
        };
        b[off + 2] = 0x0f;
        std::fs::write(&bad, &b).unwrap();
        let out = xfskit_output(&["mdrestore", s(&bad), s(&out_img)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(5),
            "v{v} bad address: {}",
            output_text(&out)
        );
        assert!(
            err.contains("past its end") && err.contains("byte"),
            "v{v}: {err}"
        );
        // Not a metadump at all.
        let out = xfskit_output(&["mdrestore", s(&img), s(&out_img)]);
        assert_eq!(out.status.code(), Some(5), "{}", output_text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not a metadump"));
    }
}

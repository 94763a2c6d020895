//! `xfskit metadump` against xfs_metadump 7.2: the dump of an image,
//! restored by xfs_mdrestore 7.2, is byte-identical to xfs_metadump -a -o's
//! dump restored (v1 and v2 files; images from mkfs.xfs 7.2, `xfskit
//! build`, mkfs.xfs 6.1 v4, a metadata directory, and as root a kernel-made
//! tree and a dirty log); the restored image passes `xfs_repair -n` 7.2 and
//! `xfskit check`; a qcow2 GPT disk is dumped through the shared disk
//! opening, its restored image listing the same tree.

mod common;

use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_bin};
use common::{is_root, skip, TempDir};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn same_file(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .args(["-s", s(a), s(b)])
        .status()
        .unwrap()
        .success()
}

fn xfskit_ok(args: &[&str]) -> String {
    let out = xfskit_output(args);
    assert!(
        out.status.success(),
        "xfskit {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repair_clean(bin: &Path, img: &Path, what: &str) {
    let out = Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    assert!(out.status.success(), "xfs_repair -n of {what}: {out:?}");
}

/// Dumps `img` with xfskit (v1, v2) and xfs_metadump -a -o, restores all
/// with xfs_mdrestore 7.2 and compares the restored images.
fn compare(bin: &Path, dir: &Path, img: &Path, label: &str) {
    let (want_md, got_md) = (dir.join("want.md"), dir.join("got.md"));
    let (want, got) = (dir.join("want.img"), dir.join("got.img"));
    for v in ["1", "2"] {
        tool_72(
            bin,
            "xfs_metadump",
            &["-a", "-o", "-v", v, s(img), s(&want_md)],
        );
        tool_72(bin, "xfs_mdrestore", &[s(&want_md), s(&want)]);
        xfskit_ok(&["metadump", "-o", "-a", "-v", v, s(img), s(&got_md)]);
        let i = tool_72(bin, "xfs_mdrestore", &["-i", s(&got_md)]);
        let wi = tool_72(bin, "xfs_mdrestore", &["-i", s(&want_md)]);
        assert_eq!(
            i.split_once(':').unwrap().1,
            wi.split_once(':').unwrap().1,
            "{label}: -i of v{v}"
        );
        tool_72(bin, "xfs_mdrestore", &[s(&got_md), s(&got)]);
        assert!(
            same_file(&want, &got),
            "{label}: xfskit metadump -v {v} restored differs from xfs_metadump -a -o restored"
        );
    }
    if i_dirty(bin, &got_md) {
        // The restored dirty log replays (as a kernel mount would), then repair is clean.
        xfskit_ok(&["recover", s(&got)]);
    }
    repair_clean(bin, &got, label);
}

fn i_dirty(bin: &Path, md: &Path) -> bool {
    tool_72(bin, "xfs_mdrestore", &["-i", s(md)]).contains("dirty log")
}

#[test]
fn dumps_restore_as_xfs_metadump_s() {
    let Some(bin) = xfsprogs_72_bin() else {
        skip(
            "dumps_restore_as_xfs_metadump_s",
            "xfsprogs 7.2 not found at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let dir = TempDir::new("metadump");
    let d = dir.path();
    let plain = d.join("plain.img");
    File::create(&plain).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&plain)]);
    compare(&bin, d, &plain, "mkfs 7.2");
    std::fs::remove_file(&plain).unwrap();

    let src = d.join("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    for i in 0..2000 {
        std::fs::write(
            src.join(format!("big/a-rather-long-file-name-{i:05}")),
            b"x",
        )
        .unwrap();
    }
    std::fs::write(src.join("a/b/data"), vec![3u8; 200_000]).unwrap();
    std::os::unix::fs::symlink("t/".repeat(400), src.join("a/longlink")).unwrap();
    let built = d.join("built.img");
    xfskit_ok(&["build", "-q", "-f", "--size", "1g", s(&src), s(&built)]);
    for i in 0..30 {
        xfskit_ok(&[
            "setfattr",
            "-n",
            &format!("user.attr{i}"),
            "-v",
            &"v".repeat(200),
            s(&built),
            "/a/b/data",
        ]);
    }
    xfskit_ok(&[
        "setfattr",
        "-n",
        "user.remote",
        "-v",
        &"r".repeat(5000),
        s(&built),
        "/a",
    ]);
    compare(&bin, d, &built, "xfskit build");
    // The restored image holds the same tree (sizes, modes, xattrs are metadata).
    let got = d.join("got.img");
    let check = xfskit_output(&["check", s(&got)]);
    assert!(
        check.status.success(),
        "xfskit check of the restored image: {}",
        output_text(&check)
    );
    assert_eq!(
        xfskit_ok(&["ls", "-lR", s(&built), "/"]),
        xfskit_ok(&["ls", "-lR", s(&got), "/"]),
        "the restored tree"
    );
    assert_eq!(
        xfskit_ok(&["getfattr", "-d", s(&built), "/a/b/data"]),
        xfskit_ok(&["getfattr", "-d", s(&got), "/a/b/data"])
    );
    std::fs::remove_file(&built).unwrap();

    if Path::new("/usr/sbin/mkfs.xfs").exists() {
        let v4 = d.join("v4.img");
        File::create(&v4).unwrap().set_len(512 << 20).unwrap();
        let out = Command::new("/usr/sbin/mkfs.xfs")
            .args(["-q", "-m", "crc=0", s(&v4)])
            .output()
            .unwrap();
        assert!(out.status.success(), "mkfs.xfs 6.1 -m crc=0: {out:?}");
        compare(&bin, d, &v4, "v4");
        std::fs::remove_file(&v4).unwrap();
    }
    let mdir = d.join("metadir.img");
    File::create(&mdir).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", "-m", "metadir=1", s(&mdir)]);
    compare(&bin, d, &mdir, "metadir");
}

#[test]
fn kernel_tree_and_dirty_log() {
    let Some(bin) = xfsprogs_72_bin() else {
        skip(
            "kernel_tree_and_dirty_log",
            "xfsprogs 7.2 not found at ../shared/xfsprogs-7.2",
        );
        return;
    };
    if !is_root() {
        skip(
            "kernel_tree_and_dirty_log",
            "the tree is made by a kernel loop mount: needs root",
        );
        return;
    }
    let dir = TempDir::new("metadump-kernel");
    let d = dir.path();
    let img = d.join("k.img");
    File::create(&img).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&img)]);
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if !Command::new("mount")
        .args(["-o", "loop", s(&img), s(&mnt)])
        .status()
        .unwrap()
        .success()
    {
        skip("kernel_tree_and_dirty_log", "loop mount failed");
        return;
    }
    std::fs::create_dir(mnt.join("big")).unwrap();
    for i in 0..3000 {
        std::fs::write(mnt.join(format!("big/entry-{i}")), b"").unwrap();
    }
    for i in (0..3000).step_by(7) {
        std::fs::remove_file(mnt.join(format!("big/entry-{i}"))).unwrap();
    }
    // A file of many extents: a bmbt.
    {
        use std::os::unix::fs::FileExt;
        let f = File::create(mnt.join("frag")).unwrap();
        for i in 0..600u64 {
            f.write_all_at(&[1u8; 4096], i * 8192).unwrap();
        }
        f.sync_all().unwrap();
    }
    std::os::unix::fs::symlink("y/".repeat(500), mnt.join("remote-link")).unwrap();
    let st = Command::new("setfattr")
        .args([
            "-n",
            "user.big",
            "-v",
            &"z".repeat(3000),
            s(&mnt.join("frag")),
        ])
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        skip(
            "kernel_tree_and_dirty_log (xattr)",
            "setfattr not available",
        );
    }
    Command::new("sync").status().unwrap();
    std::fs::write(mnt.join("late"), b"late").unwrap();
    tool_72(&bin, "xfs_io", &["-x", "-c", "shutdown -f", s(&mnt)]);
    common::must_umount(&mnt);
    compare(&bin, d, &img, "kernel tree, dirty log");
    let i = tool_72(&bin, "xfs_mdrestore", &["-i", s(&d.join("got.md"))]);
    assert!(i.contains("dirty log"), "{i}");
}

#[test]
fn qcow2_gpt_disk_is_dumped() {
    let Some(bin) = xfsprogs_72_bin() else {
        skip(
            "qcow2_gpt_disk_is_dumped",
            "xfsprogs 7.2 not found at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let dir = TempDir::new("metadump-qcow2");
    let d = dir.path();
    let src = d.join("src");
    std::fs::create_dir_all(src.join("x/y")).unwrap();
    for i in 0..100 {
        std::fs::write(src.join(format!("x/y/f{i}")), b"abc").unwrap();
    }
    let disk: PathBuf = d.join("disk.qcow2");
    xfskit_ok(&[
        "build",
        "-q",
        "-f",
        "--gpt",
        "--format",
        "qcow2",
        "--size",
        "600m",
        s(&src),
        s(&disk),
    ]);
    let md = d.join("disk.md");
    xfskit_ok(&["metadump", "-o", "-a", s(&disk), s(&md)]);
    let got = d.join("got.img");
    tool_72(&bin, "xfs_mdrestore", &[s(&md), s(&got)]);
    repair_clean(&bin, &got, "the qcow2 disk's restored dump");
    assert_eq!(
        xfskit_ok(&["ls", "-lR", s(&disk), "/"]),
        xfskit_ok(&["ls", "-lR", s(&got), "/"])
    );
}

#[test]
fn unsupported_modes_are_refused() {
    let dir = TempDir::new("metadump-refused");
    let img = dir.path().join("fs.img");
    File::create(&img).unwrap().set_len(300 << 20).unwrap();
    xfskit_ok(&["mkfs", "-q", s(&img)]);
    for args in [&["metadump", "-a"][..], &["metadump", "-o"]] {
        let mut a = args.to_vec();
        let out_md = dir.path().join("x.md");
        a.extend([s(&img), s(&out_md)]);
        let out = xfskit_output(&a);
        assert_eq!(out.status.code(), Some(3), "{a:?}: {}", output_text(&out));
    }
    // Realtime groups: not dumped yet.
    let Some(bin) = xfsprogs_72_bin() else {
        skip(
            "unsupported_modes_are_refused (realtime groups)",
            "xfsprogs 7.2 not found",
        );
        return;
    };
    let (rg, rt) = (dir.path().join("rg.img"), dir.path().join("rt.img"));
    File::create(&rg).unwrap().set_len(512 << 20).unwrap();
    File::create(&rt).unwrap().set_len(256 << 20).unwrap();
    tool_72(
        &bin,
        "mkfs.xfs",
        &[
            "-q",
            "-m",
            "metadir=1",
            "-r",
            &format!("rtdev={},rgcount=2", s(&rt)),
            s(&rg),
        ],
    );
    let md = dir.path().join("rg.md");
    let out = xfskit_output(&["metadump", "-o", "-a", "--rtdev", s(&rt), s(&rg), s(&md)]);
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("realtime groups"));
}

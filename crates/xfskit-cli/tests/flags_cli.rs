//! `xfskit chattr`, `lsattr`, `chproj` and `lsproj` against xfs_io 7.2 on
//! a kernel mount of the same image: what xfskit sets offline, xfs_io
//! reads back through the kernel (the same lines, in the same order), and
//! what xfs_io sets through the kernel, xfskit reads; xfs_repair -n 7.2
//! finds the result clean, and a file the kernel makes in a directory
//! given `chproj --inherit` takes its project id.

mod common;

use common::disks::sh;
use common::fixtures::{tool_72, xfskit_output as xfskit, xfsprogs_72_or_skip};
use common::TempDir;
use std::path::Path;

fn ok(args: &[&str]) -> String {
    let o = xfskit(args);
    assert!(
        o.status.success(),
        "xfskit {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The image mounted read-write by the kernel for the length of `f`.
fn with_mount<T>(img: &Path, mnt: &Path, f: impl FnOnce(&str) -> T) -> T {
    sh(&format!(
        "mount -t xfs -o loop {} {}",
        img.display(),
        mnt.display()
    ));
    let r = f(mnt.to_str().unwrap());
    common::must_umount(mnt);
    r
}

/// xfs_io's lines with the mount point cut off the paths, so that they
/// read as xfskit's (`/d/f`).
fn strip(text: &str, mnt: &str) -> String {
    text.replace(&format!(" {mnt}/"), " /")
        .replace(&format!(" {mnt} "), " / ")
        .replace(&format!(" {mnt}\n"), " /\n")
}

#[test]
fn flags_and_project_ids_match_xfs_io_both_ways() {
    if !common::require_root("flags_and_project_ids_match_xfs_io_both_ways") {
        return;
    }
    let Some(bin) = xfsprogs_72_or_skip("flags_and_project_ids_match_xfs_io_both_ways") else {
        return;
    };
    let t = TempDir::new("xfskit-flags");
    let img = t.path().join("a.img");
    let mnt = t.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let imgs = img.to_str().unwrap();
    sh(&format!("truncate -s 600M {imgs}"));
    tool_72(&bin, "mkfs.xfs", &["-q", imgs]);
    // A tree made offline.
    let src = t.path().join("src");
    sh(&format!(
        "mkdir -p {s}/d/e/g {s}/p/q && echo hi > {s}/d/f && echo x > {s}/d/e/b && \
         ln -s f {s}/d/l && echo y > {s}/p/q/r",
        s = src.display()
    ));
    ok(&[
        "cp",
        "-a",
        &format!("{}/.", src.display()),
        &format!("{imgs}:/"),
    ]);
    ok(&["chattr", imgs, "+iA", "/d/f"]);
    ok(&["chattr", "-R", imgs, "+d", "/d"]);
    ok(&["chattr", "-D", imgs, "+n", "/d"]);
    ok(&["chattr", imgs, "-d", "/d/e/b"]);
    ok(&["chproj", "-R", "--inherit", imgs, "42", "/p"]);
    ok(&["chproj", imgs, "70000", "/d/l"]);
    let ours = ok(&["lsattr", "-R", imgs, "/"]);
    assert!(ours.contains("--i--Ad---------X /d/f \n"), "{ours}");
    let ours_v = ok(&["lsattr", "-v", imgs, "/d/f", "/p"]);
    let ours_proj = ok(&["lsproj", "-R", imgs, "/"]);
    assert!(ours_proj.contains("[42] /p/q/r\n"), "{ours_proj}");
    assert_eq!(ok(&["lsproj", imgs, "/d/l"]), "projid = 70000\n");
    let (r, text) = common::repair_check(&img);
    assert_eq!(r, 0, "xfs_repair -n after the edits:\n{text}");
    // xfs_io opens what it lists: a bound keeps a hang from stalling the run.
    let x72 = |args: &str| {
        sh(&format!(
            "timeout 120 {} {args}",
            bin.join("xfs_io").display()
        ))
    };
    let kernel = with_mount(&img, &mnt, |m| {
        let k = (
            strip(&x72(&format!("-r -c 'lsattr -R' {m}")), m),
            strip(&x72(&format!("-r -c 'lsattr -v' {m}/d/f {m}/p")), m),
            strip(&x72(&format!("-r -c 'lsproj -R' {m}")), m),
        );
        // The kernel's new file in the inheriting directory takes its id.
        std::fs::write(format!("{m}/p/q/new"), b"n").unwrap();
        assert_eq!(x72(&format!("-r -c lsproj {m}/p/q/new")), "projid = 42\n");
        // Changes through the kernel, for xfskit to read.
        x72(&format!("-r -c 'chattr -i' {m}/d/f"));
        x72(&format!("-r -c 'chattr +s' {m}/d/e"));
        x72(&format!("-r -c 'chproj -D 9' {m}/d"));
        k
    });
    assert_eq!(ours, kernel.0, "lsattr -R: xfskit, then xfs_io");
    assert_eq!(ours_v, kernel.1, "lsattr -v");
    // xfs_io 7.2's lsproj follows symlinks (its lsattr does not): the
    // link's own id is read with xfs_db instead.
    let no_link = |t: &str| {
        t.lines()
            .filter(|l| !l.ends_with(" /d/l"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(no_link(&ours_proj), no_link(&kernel.2), "lsproj -R");
    assert!(ours_proj.contains("[70000] /d/l\n"), "{ours_proj}");
    let link: serde_json::Value =
        serde_json::from_str(ok(&["lsattr", "--json", imgs, "/d/l"]).trim()).unwrap();
    let ino = link["ino"].to_string();
    let db = tool_72(
        &bin,
        "xfs_db",
        &[
            "-r",
            "-c",
            &format!("inode {ino}"),
            "-c",
            "p core.projid_lo core.projid_hi",
            imgs,
        ],
    );
    assert!(
        db.contains("core.projid_lo = 4464") && db.contains("core.projid_hi = 1"),
        "70000 is 1 << 16 | 4464: {db}"
    );
    let after = with_mount(&img, &mnt, |m| {
        (
            strip(&x72(&format!("-r -c 'lsattr -R' {m}")), m),
            strip(&x72(&format!("-r -c 'lsproj -R' {m}")), m),
        )
    });
    assert_eq!(ok(&["lsattr", "-R", imgs, "/"]), after.0);
    assert_eq!(
        no_link(&ok(&["lsproj", "-R", imgs, "/"])),
        no_link(&after.1)
    );
    assert!(after.1.contains("[9] /d/e/g\n") && after.1.contains("[0] /d/f\n"));
    let json = ok(&["lsattr", "--json", imgs, "/d/e"]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["flags"], "----s-d--n------X", "{json}");
    assert_eq!(v["projid"], 9, "{json}");
}

#[test]
fn bad_flags_and_missing_paths_are_errors() {
    let t = TempDir::new("xfskit-flags-bad");
    let img = t.path().join("a.img");
    let imgs = img.to_str().unwrap();
    sh(&format!("truncate -s 300M {imgs}"));
    ok(&["mkfs", "-q", imgs]);
    ok(&["mkdir", imgs, "/d"]);
    for (flags, why) in [
        ("+z", "unknown flag 'z'"),
        ("+X", "cannot be changed"),
        ("i", "start with +"),
    ] {
        let o = xfskit(&["chattr", imgs, flags, "/d"]);
        assert_eq!(o.status.code(), Some(2), "{flags}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(why), "{flags}: {e}");
    }
    let o = xfskit(&["chattr", imgs, "+i", "/missing", "/d"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/missing"));
    // The path that exists was still changed.
    assert_eq!(
        ok(&["lsattr", imgs, "/d"]).split(' ').next(),
        Some("--i-------------X")
    );
    let o = xfskit(&["lsproj", imgs, "/nope"]);
    assert_eq!(o.status.code(), Some(1));
    let o = xfskit(&["chproj", imgs, "x1", "/d"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a project id that is not a number"
    );
}

//! The inspection commands: `info` against xfs_db on several mkfs variants,
//! `ls`, `cat` and `stat` on a golden fixture with known content, and the
//! documented exit codes.

mod common;

use common::{digest_bytes, require_root, unpack_fixture, LoopMount, TempDir};
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Makes an empty image of `size` bytes with mkfs.xfs and `opts`.
fn mkfs(dir: &Path, name: &str, size: u64, opts: &[&str]) -> PathBuf {
    let img = dir.join(name);
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(size))
        .expect("create image");
    let out = Command::new("mkfs.xfs")
        .args(["-q", "-f"])
        .args(opts)
        .arg(&img)
        .output()
        .expect("run mkfs.xfs");
    assert!(
        out.status.success(),
        "mkfs.xfs {opts:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    img
}

/// Runs `xfs_db -r -c info` on `img`: Debian's (6.1) or, with `dir`, the
/// 6.15 build there.
fn xfs_db_info(dir: Option<&Path>, img: &Path) -> String {
    let mut c = match dir {
        Some(d) => {
            let mut c = Command::new(d.join("libexec/xfs_db"));
            c.env("LD_LIBRARY_PATH", d.join("lib"));
            c
        }
        None => Command::new("xfs_db"),
    };
    let out = c
        .args(["-r", "-c", "info"])
        .arg(img)
        .output()
        .expect("run xfs_db");
    assert!(
        out.status.success(),
        "xfs_db info {}: {}",
        img.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// xfskit's 6.15 layout without what 6.15 added to xfs_db 6.1's: the
/// exchange/metadir and realtime group lines, and ", parent=N".
fn as_61(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains(" exchange=") && !l.contains(" rgcount=") && !l.contains(" zoned="))
        .map(|l| match l.find(", parent=") {
            Some(i) => format!("{}\n", &l[..i]),
            None => format!("{l}\n"),
        })
        .collect()
}

/// `xfskit info` is byte-identical to `xfs_db -c info` of xfsprogs 6.15
/// (and, less the fields 6.15 added, to Debian's 6.1) on images of several
/// mkfs variants: Debian's mkfs.xfs (6.1 defaults), mkfs.xfs 6.15 with
/// the 6.18 defaults (parent pointers, exchange-range, rmapbt, nrext64),
/// and with metadata directory trees (its realtime group fields).
#[test]
fn info_matches_xfs_db() {
    let tmp = TempDir::new("xfskit-info");
    let x615 = common::fixtures::xfsprogs_615();
    // (name, size, options, made by mkfs.xfs 6.15 with the 6.18 defaults)
    let variants: &[(&str, u64, &[&str], bool)] = &[
        ("default", 320 << 20, &[], false),
        ("b1k", 320 << 20, &["-b", "size=1024"], false),
        (
            "b64k_noreflink",
            600 << 20,
            &["-b", "size=65536", "-m", "reflink=0"],
            false,
        ),
        (
            "sect4k_ino2k",
            320 << 20,
            &["-s", "size=4096", "-i", "size=2048"],
            false,
        ),
        ("stripe", 1 << 30, &["-d", "su=64k,sw=4"], false),
        ("rmapbt", 400 << 20, &["-m", "rmapbt=1"], false),
        ("nrext64", 400 << 20, &["-i", "nrext64=1"], false),
        (
            "rmap_nrext64",
            400 << 20,
            &["-m", "rmapbt=1", "-i", "nrext64=1"],
            false,
        ),
        (
            "plain",
            320 << 20,
            &[
                "-m",
                "finobt=0,bigtime=0,inobtcount=0",
                "-i",
                "sparse=0",
                "-n",
                "size=8192,ftype=1",
            ],
            false,
        ),
        (
            "logsu",
            1 << 30,
            &["-l", "su=32k", "-d", "agcount=7"],
            false,
        ),
        ("defaults_618", 320 << 20, &[], true),
        ("defaults_618_b1k", 320 << 20, &["-b", "size=1024"], true),
        (
            "defaults_618_ag5_sect4k",
            600 << 20,
            &["-d", "agcount=5", "-s", "size=4096"],
            true,
        ),
        // mkfs.xfs 6.15's own defaults with a metadata directory tree.
        ("metadir", 320 << 20, &["-m", "metadir=1"], true),
        (
            "metadir_b1k",
            320 << 20,
            &["-m", "metadir=1", "-b", "size=1024"],
            true,
        ),
        (
            "metadir_stripe",
            1 << 30,
            &["-m", "metadir=1", "-d", "su=64k,sw=4"],
            true,
        ),
    ];
    let mut failures = Vec::new();
    let mut compared_615 = 0;
    for (name, size, opts, new_defaults) in variants {
        let img = tmp.path().join(format!("{name}.img"));
        if *new_defaults {
            let Some(d) = &x615 else { continue };
            std::fs::File::create(&img)
                .and_then(|f| f.set_len(*size))
                .expect("create image");
            let conf = d.join("conf/lts_6.18.conf");
            let mut mkfs = Command::new(d.join("libexec/mkfs.xfs"));
            mkfs.env("LD_LIBRARY_PATH", d.join("lib"))
                .args(["-q", "-f"]);
            // The 6.18 defaults name metadir=0: metadir rows use 6.15's own.
            if !name.starts_with("metadir") {
                mkfs.arg("-c").arg(format!("options={}", conf.display()));
            }
            let out = mkfs
                .args(*opts)
                .arg(&img)
                .output()
                .expect("run mkfs.xfs 6.15");
            assert!(
                out.status.success(),
                "mkfs.xfs 6.15 {opts:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            mkfs(tmp.path(), &format!("{name}.img"), *size, opts);
        }
        let got = xfskit(&["info", s(&img)]);
        assert!(
            got.status.success(),
            "xfskit info {name}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        let got = stdout(&got);
        if let Some(d) = &x615 {
            let want = xfs_db_info(Some(d), &img);
            compared_615 += 1;
            if got != want {
                failures.push(format!("{name}:\n--- xfs_db 6.15\n{want}--- xfskit\n{got}"));
            }
        }
        // Debian's xfs_db 6.1 refuses the features it does not know.
        if !*new_defaults {
            let want = xfs_db_info(None, &img);
            if as_61(&got) != want {
                failures.push(format!(
                    "{name} (less 6.15's fields):\n--- xfs_db 6.1\n{want}--- xfskit\n{got}"
                ));
            }
        }
        let json = xfskit(&["info", "--json", s(&img)]);
        let v: serde_json::Value =
            serde_json::from_slice(&json.stdout).expect("info --json is JSON");
        assert!(
            v["data"]["blocks"].as_u64().unwrap_or(0) > 0,
            "{name}: json has data.blocks"
        );
        let f = &v["features"];
        for key in [
            "crc",
            "finobt",
            "rmapbt",
            "reflink",
            "inobtcount",
            "ftype",
            "sparse",
            "bigtime",
            "nrext64",
            "exchange",
            "parent",
            "metadir",
            "rtgroups",
            "zoned",
            "needsrepair",
            "meta_uuid",
            "log_xattrs",
        ] {
            assert!(f[key].is_boolean(), "{name}: features.{key} in {f}");
        }
        // The named features agree with the text.
        for (key, field) in [
            ("parent", "parent="),
            ("exchange", "exchange="),
            ("rmapbt", "rmapbt="),
            ("nrext64", "nrext64="),
            ("reflink", "reflink="),
        ] {
            let on = got.contains(&format!("{field}1"));
            assert_eq!(f[key].as_bool(), Some(on), "{name}: features.{key}");
        }
        if name.starts_with("metadir") {
            assert_eq!(f["metadir"], true, "{name}: features.metadir");
            assert!(
                v["inodes"]["metadir"].as_u64().is_some(),
                "{name}: inodes.metadir"
            );
        } else if *new_defaults {
            assert_eq!(
                f["parent"], true,
                "{name}: 6.18 defaults have parent pointers"
            );
            assert_eq!(v["naming"]["parent"], true, "{name}: naming.parent");
        }
        std::fs::remove_file(&img).ok();
    }
    if x615.is_none() {
        common::skip(
            "info_matches_xfs_db",
            "xfsprogs 6.15 is missing: compared with xfs_db 6.1 only, less 6.15's fields",
        );
    } else {
        assert!(
            compared_615 >= 13,
            "compared {compared_615} images with 6.15"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

struct Fixture {
    _tmp: TempDir,
    img: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = TempDir::new("xfskit-inspect");
    let img = unpack_fixture("a_default", tmp.path());
    Fixture { _tmp: tmp, img }
}

#[test]
fn ls_lists_known_names() {
    let f = fixture();
    let o = xfskit(&["ls", s(&f.img), "/links"]);
    assert!(o.status.success());
    let names: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(
        names,
        [
            "h1",
            "h2",
            "h3",
            "long_symlink",
            "max_symlink",
            "short_symlink"
        ]
    );

    let o = xfskit(&["ls", "-la", s(&f.img), "/links"]);
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    assert!(
        lines[0].starts_with("drwxr-xr-x") && lines[0].ends_with(" ."),
        "{text}"
    );
    assert!(lines[1].ends_with(" .."), "{text}");
    let short = lines
        .iter()
        .find(|l| l.contains("short_symlink"))
        .expect("short_symlink line");
    assert!(
        short.starts_with("lrwxrwxrwx") && short.ends_with("short_symlink -> short"),
        "{short}"
    );

    let o = xfskit(&["ls", "-R", s(&f.img), "/dirs"]);
    let text = stdout(&o);
    assert!(text.starts_with("/dirs:\n"), "{text}");
    assert!(text.contains("\n/dirs/shortform:\n"), "{text}");

    let o = xfskit(&["ls", "-l", s(&f.img), "/special"]);
    let text = stdout(&o);
    assert!(
        text.lines()
            .any(|l| l.starts_with('c') && l.contains("null_chr")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with('p') && l.ends_with("fifo")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with('s') && l.ends_with("socket")),
        "{text}"
    );
}

#[test]
fn cat_streams_contents() {
    let f = fixture();
    let o = xfskit(&["cat", s(&f.img), "/links/short_symlink"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "cat of a symlink is a usage error"
    );
    let one = xfskit(&["cat", s(&f.img), "/files/one_extent"]);
    assert!(one.status.success());
    assert_eq!(one.stdout.len(), 12411);
    let sparse = xfskit(&["cat", s(&f.img), "/files/sparse"]);
    assert_eq!(sparse.stdout.len(), 100 << 20);
    let falloc = xfskit(&["cat", s(&f.img), "/files/falloc_only"]);
    assert!(falloc.stdout.iter().all(|&b| b == 0) && falloc.stdout.len() == 2 << 20);
    if !require_root("cat_streams_contents (kernel comparison)") {
        return;
    }
    let mnt = f._tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let m = LoopMount::new(&f.img, &mnt).expect("mount");
    for (p, got) in [
        ("files/one_extent", &one.stdout),
        ("files/sparse", &sparse.stdout),
    ] {
        let want = std::fs::read(m.path().join(p)).expect("read through kernel");
        assert_eq!(digest_bytes(got), digest_bytes(&want), "{p}");
    }
    let many = xfskit(&["cat", s(&f.img), "/files/many_extents"]);
    let want = std::fs::read(m.path().join("files/many_extents")).expect("read");
    assert!(many.stdout == want, "many_extents differs");
}

#[test]
fn stat_shows_fields_xattrs_and_extents() {
    let f = fixture();
    let o = xfskit(&["stat", s(&f.img), "/files/sparse"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(text.contains("size: 104857600"), "{text}");
    assert!(text.contains(" EXT: FILE-OFFSET"), "{text}");
    assert!(text.contains("hole"), "{text}");
    assert!(text.contains("010000"), "unwritten flag shown: {text}");
    let o = xfskit(&["stat", s(&f.img), "/xattrs/remote"]);
    let text = stdout(&o);
    assert!(text.contains("security.small = \"s\""), "{text}");
    assert!(
        text.contains("trusted.r64k = 0x") && text.contains("(65536 bytes)"),
        "{text}"
    );
    assert!(text.contains("attr fork:\n EXT:"), "{text}");
    let o = xfskit(&["stat", "--json", s(&f.img), "/links/short_symlink"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stat --json is JSON");
    assert_eq!(v["target"], "short");
    assert_eq!(v["type"], "Symlink");
    assert_eq!(v["mtime"]["sec"], 1577836800);
}

#[test]
fn exit_codes() {
    let f = fixture();
    let img = s(&f.img);
    for args in [
        vec!["ls", img, "/no/such"],
        vec!["cat", img, "/nope"],
        vec!["stat", img, "/files/nope"],
        vec!["cat", img, "/dirs"],
        vec![
            "extract",
            "--path",
            "/nope",
            img,
            "/tmp/xfskit-never-created",
        ],
    ] {
        assert_eq!(xfskit(&args).status.code(), Some(1), "{args:?}");
    }
    let tmp = TempDir::new("xfskit-exit");
    let v4 = mkfs(tmp.path(), "v4.img", 300 << 20, &["-m", "crc=0"]);
    // v4 is read (ls exits 0) but never written (exit 3).
    assert_eq!(xfskit(&["ls", s(&v4)]).status.code(), Some(0), "v4 is read");
    assert_eq!(
        xfskit(&["mkdir", s(&v4), "/d"]).status.code(),
        Some(3),
        "v4 is read-only"
    );
    let dest = tmp.path().join("notempty");
    std::fs::create_dir_all(dest.join("x")).expect("mkdir");
    assert_eq!(
        xfskit(&["extract", img, s(&dest)]).status.code(),
        Some(2),
        "non-empty dest"
    );
    if !require_root("exit_codes (dirty log)") {
        return;
    }
    let dirty = mkfs(tmp.path(), "dirty.img", 300 << 20, &[]);
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    assert!(Command::new("mount")
        .args(["-o", "loop"])
        .arg(&dirty)
        .arg(&mnt)
        .status()
        .expect("mount")
        .success());
    std::fs::write(mnt.join("f"), b"data").expect("write");
    let shut = Command::new("xfs_io")
        .args(["-x", "-c", "shutdown -f"])
        .arg(&mnt)
        .status()
        .expect("xfs_io");
    common::must_umount(&mnt);
    assert!(shut.success(), "xfs_io shutdown");
    // A dirty log is replayed in memory: the file is there, the image
    // unchanged.
    let before = std::fs::read(&dirty).expect("read image");
    let out = xfskit(&["ls", s(&dirty)]);
    assert_eq!(out.status.code(), Some(0), "dirty log replayed in memory");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == "f"),
        "the file written before the shutdown"
    );
    assert!(
        std::fs::read(&dirty).expect("read image") == before,
        "image unchanged"
    );
    assert_eq!(
        xfskit(&["ls", "--norecovery", s(&dirty)]).status.code(),
        Some(0),
        "norecovery reads it"
    );
}

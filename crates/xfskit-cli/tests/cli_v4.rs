//! v4 (crc=0) filesystems at the command line: images made by mkfs.xfs
//! from a protofile over a source tree the test writes, then every read
//! command compared with that source (and `info` with xfs_db), `check`
//! clean where `xfs_repair -n` is, damage found by both, and every write
//! path refused with the v4 message (exit 3), the image unchanged.

mod common;

use common::fixtures::{output_text, repair_check, xfskit_output};
use common::skip;
use common::TempDir;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const V4_MSG: &str = "v4 filesystems (crc=0) are read-only in xfskit";

/// A deterministic source tree: short-form, block, leaf and node
/// directories, small, empty, multi-extent-sized and sparse files.
fn make_source(dir: &Path) {
    fs::create_dir_all(dir.join("blockdir")).unwrap();
    fs::create_dir_all(dir.join("leafdir")).unwrap();
    fs::create_dir_all(dir.join("nodedir")).unwrap();
    fs::create_dir_all(dir.join("empty")).unwrap();
    fs::write(dir.join("small.txt"), b"hello v4\n").unwrap();
    fs::write(dir.join("zero"), b"").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| ((i * 7 + 3) % 251) as u8).collect();
    fs::write(dir.join("big.bin"), &big).unwrap();
    let f = fs::File::create(dir.join("sparse.bin")).unwrap();
    for i in 0..40u64 {
        f.write_all_at(&vec![i as u8 + 1; 4096], i * 65536).unwrap();
    }
    for i in 0..20 {
        fs::write(dir.join(format!("blockdir/f{i}")), i.to_string()).unwrap();
    }
    for i in 0..300 {
        fs::write(
            dir.join(format!("leafdir/entry_with_longer_name_{i:05}")),
            b"",
        )
        .unwrap();
    }
    for i in 0..3000 {
        fs::write(dir.join(format!("nodedir/n{i:06}_padding_padding")), b"").unwrap();
    }
}

const LONG_TARGET_PARTS: usize = 60;

fn long_target() -> String {
    (0..LONG_TARGET_PARTS)
        .map(|i| format!("dir{i:03}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// A protofile for `src`: every file and directory, plus inline and
/// remote symlinks, devices and a fifo at the root.
fn protofile(src: &Path) -> String {
    fn walk(d: &Path, out: &mut Vec<String>) {
        let mut names: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let p = d.join(&n);
            let n = n.to_string_lossy();
            if p.is_dir() {
                out.push(format!("{n} d--755 1000 100"));
                walk(&p, out);
                out.push("$".into());
            } else {
                out.push(format!("{n} ---644 1000 100 {}", p.display()));
            }
        }
    }
    let mut out = vec!["/dev/null".to_string(), "0 0".into(), "d--755 0 0".into()];
    walk(src, &mut out);
    out.push("lnk_short l--777 0 0 small.txt".into());
    out.push(format!("lnk_long l--777 0 0 {}", long_target()));
    out.push("cdev c--600 0 0 4 64".into());
    out.push("bdev b--660 0 6 8 1".into());
    out.push("fifo p--644 0 0".into());
    out.push("$".into());
    out.join("\n") + "\n"
}

/// mkfs.xfs `tool` (Debian's 6.1, or 6.15's path) with v4 options `opts`.
fn mkfs_v4(tool: Option<&Path>, img: &Path, proto: &Path, opts: &[&str]) -> bool {
    let f = fs::File::create(img).unwrap();
    f.set_len(64 << 20).unwrap();
    let mut c = match tool {
        Some(d) => {
            let mut c = Command::new(d.join("libexec/mkfs.xfs"));
            c.env("LD_LIBRARY_PATH", d.join("lib"));
            c
        }
        None => Command::new("mkfs.xfs"),
    };
    c.env("TEST_DIR", "/tmp")
        .env("TEST_DEV", "/dev/null")
        .env("QA_CHECK_FS", "1")
        .args(["-q", "-f", "-m", "crc=0"])
        .args(opts)
        .arg("-p")
        .arg(proto)
        .arg(img);
    let out = c.output().expect("run mkfs.xfs");
    if !out.status.success() {
        eprintln!(
            "mkfs.xfs {opts:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

struct Images {
    _dir: TempDir,
    src: PathBuf,
    /// (name, image)
    imgs: Vec<(String, PathBuf)>,
}

fn images(test: &str) -> Option<Images> {
    if common::missing_tool(&["mkfs.xfs", "xfs_repair"]).is_some() {
        skip(test, "mkfs.xfs or xfs_repair not installed");
        return None;
    }
    let dir = TempDir::new("cli-v4");
    let src = dir.path().join("src");
    make_source(&src);
    let proto = dir.path().join("proto");
    fs::write(&proto, protofile(&src)).unwrap();
    let mut imgs = Vec::new();
    let variants: [(&str, &[&str]); 3] = [
        ("default", &[]),
        (
            "ftype0-attr1-i256-logv1",
            &["-n", "ftype=0", "-i", "size=256,attr=1", "-l", "version=1"],
        ),
        ("i512-ftype1", &["-i", "size=512", "-n", "ftype=1"]),
    ];
    for (name, opts) in variants {
        let img = dir.path().join(format!("{name}.img"));
        assert!(mkfs_v4(None, &img, &proto, opts), "mkfs.xfs 6.1 {name}");
        imgs.push((format!("6.1-{name}"), img));
    }
    // xfsprogs 6.15 keeps holes of protofile sources: a sparse file of 40
    // extents is a btree-format file with 256-byte inodes.
    if let Some(d) = common::fixtures::xfsprogs_615() {
        let img = dir.path().join("615.img");
        assert!(mkfs_v4(
            Some(&d),
            &img,
            &proto,
            &["-n", "ftype=0", "-i", "size=256,attr=1"]
        ));
        imgs.push(("6.15-ftype0-i256".into(), img));
    } else {
        skip(
            test,
            "xfsprogs 6.15 not beside the project: the btree-format file is not covered",
        );
    }
    Some(Images {
        _dir: dir,
        src,
        imgs,
    })
}

fn run_ok(args: &[&str]) -> Vec<u8> {
    let o = xfskit_output(args);
    assert!(o.status.success(), "xfskit {args:?}: {}", output_text(&o));
    o.stdout
}

#[test]
fn v4_read_commands_match_the_source() {
    let Some(im) = images("v4_read_commands_match_the_source") else {
        return;
    };
    for (name, img) in &im.imgs {
        let i = img.to_str().unwrap();
        // ls of every directory equals the source's names.
        for d in ["", "blockdir", "leafdir", "nodedir", "empty"] {
            let out = run_ok(&["ls", i, &format!("/{d}")]);
            let mut got: Vec<String> = String::from_utf8(out)
                .unwrap()
                .lines()
                .map(String::from)
                .collect();
            got.sort();
            let mut want: Vec<String> = fs::read_dir(im.src.join(d))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            if d.is_empty() {
                want.extend(["lnk_short", "lnk_long", "cdev", "bdev", "fifo"].map(String::from));
            }
            want.sort();
            assert_eq!(got, want, "{name}: ls /{d}");
        }
        // cat equals the source bytes.
        for f in ["small.txt", "zero", "big.bin", "sparse.bin", "blockdir/f7"] {
            let got = run_ok(&["cat", i, &format!("/{f}")]);
            assert_eq!(got, fs::read(im.src.join(f)).unwrap(), "{name}: cat /{f}");
        }
        // extract: the tree, its modes, owners and symlink targets.
        let out = im._dir.path().join(format!("out-{name}"));
        run_ok(&["extract", i, out.to_str().unwrap()]);
        for f in ["big.bin", "sparse.bin", "nodedir/n002999_padding_padding"] {
            assert_eq!(
                fs::read(out.join(f)).unwrap(),
                fs::read(im.src.join(f)).unwrap(),
                "{name}: extracted {f}"
            );
        }
        assert_eq!(fs::read_dir(out.join("nodedir")).unwrap().count(), 3000);
        let md = fs::symlink_metadata(out.join("big.bin")).unwrap();
        assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o644, 1000, 100));
        assert_eq!(
            fs::read_link(out.join("lnk_long"))
                .unwrap()
                .to_str()
                .unwrap(),
            long_target(),
            "{name}: remote symlink"
        );
        assert_eq!(
            fs::read_link(out.join("lnk_short"))
                .unwrap()
                .to_str()
                .unwrap(),
            "small.txt"
        );
        // stat names the device numbers the protofile gave.
        let st = String::from_utf8(run_ok(&["ls", "-l", i, "/"])).unwrap();
        assert!(
            st.lines()
                .any(|l| l.starts_with("crw-------") && l.contains("4, 64")),
            "{name}: {st}"
        );
        assert!(
            st.lines()
                .any(|l| l.starts_with("brw-rw----") && l.contains("8, 1")),
            "{name}: {st}"
        );
        // bulkstat sees every inode: the source's files and directories,
        // the five specials and the root.
        let bs = String::from_utf8(run_ok(&["bulkstat", i])).unwrap();
        let n = bs
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .count();
        // 3320 in the three big directories, 4 root files, 4 directories.
        assert_eq!(
            n,
            3320 + 4 + 4 + 5 + 1,
            "{name}: bulkstat rows\n{}",
            &bs[..bs.len().min(400)]
        );
        // check and xfs_repair -n agree: clean.
        let o = xfskit_output(&["check", i]);
        assert!(o.status.success(), "{name}: check: {}", output_text(&o));
        let (rc, text) = repair_check(img);
        assert_eq!(rc, 0, "{name}: xfs_repair -n: {text}");
    }
}

#[test]
fn v4_info_matches_xfs_db() {
    let Some(d) = common::fixtures::xfsprogs_615() else {
        skip(
            "v4_info_matches_xfs_db",
            "xfsprogs 6.15 not beside the project",
        );
        return;
    };
    let Some(im) = images("v4_info_matches_xfs_db") else {
        return;
    };
    for (name, img) in &im.imgs {
        let got = run_ok(&["info", img.to_str().unwrap()]);
        let want = Command::new(d.join("libexec/xfs_db"))
            .env("LD_LIBRARY_PATH", d.join("lib"))
            .args(["-r", "-c", "info"])
            .arg(img)
            .output()
            .unwrap();
        let want = String::from_utf8_lossy(&want.stdout).replace(img.to_str().unwrap(), "");
        let got = String::from_utf8(got)
            .unwrap()
            .replace(img.to_str().unwrap(), "");
        assert_eq!(got, want, "{name}: info");
    }
}

#[test]
fn v4_writes_are_refused() {
    let Some(im) = images("v4_writes_are_refused") else {
        return;
    };
    let (_, img) = &im.imgs[0];
    let before = fs::read(img).unwrap();
    let i = img.to_str().unwrap();
    let mnt = im._dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    for args in [
        vec!["mkdir", i, "/new"],
        vec!["touch", i, "/small.txt"],
        vec!["rm", i, "/zero"],
        vec!["setfattr", "-n", "user.a", "-v", "b", i, "/zero"],
        vec!["recover", i],
        vec!["mount", i, m],
    ] {
        let o = xfskit_output(&args);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", output_text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(V4_MSG),
            "{args:?}: {}",
            output_text(&o)
        );
    }
    assert!(
        fs::read(img).unwrap() == before,
        "a refused write changed the image"
    );
}

/// Byte offset of the first filesystem block of `path`'s data fork, from xfs_db.
fn first_block_bytes(img: &Path, path: &str) -> u64 {
    let o = Command::new("xfs_db")
        .args(["-r", "-c", &format!("path {path}"), "-c", "bmap"])
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    // "data offset 0 startblock 1234 (0/1234) count 1 flag 0"
    // AG-encoded: take agno/agbno from the "(a/b)" form.
    let pair = text
        .split_whitespace()
        .find(|w| w.starts_with('(') && w.contains('/'))
        .unwrap();
    let pair = pair.trim_matches(|c| c == '(' || c == ')');
    let (ag, bno) = pair.split_once('/').unwrap();
    let (ag, bno): (u64, u64) = (ag.parse().unwrap(), bno.parse().unwrap());
    let (agblocks, bsize) = (4096u64, 4096u64);
    (ag * agblocks + bno) * bsize
}

fn inode_bytes(img: &Path, path: &str) -> u64 {
    let o = Command::new("xfs_db")
        .args(["-r", "-c", &format!("path {path}"), "-c", "stack"])
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    // "byte offset 12345, length 256"
    text.split("byte offset ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no inode offset for {path}: {text}"))
}

#[test]
fn v4_damage_is_found_by_check_and_xfs_repair() {
    let Some(im) = images("v4_damage_is_found_by_check_and_xfs_repair") else {
        return;
    };
    let (_, clean) = &im.imgs[1];
    // 64 MiB images of 4 AGs: 4096 blocks of 4 KiB per AG (mkfs's layout
    // for this size, checked by info below).
    let info = String::from_utf8(run_ok(&["info", clean.to_str().unwrap()])).unwrap();
    assert!(
        info.contains("agsize=4096 blks") && info.contains("bsize=4096"),
        "{info}"
    );
    // A directory data block with a bad magic.
    let img = im._dir.path().join("bad-dir.img");
    fs::copy(clean, &img).unwrap();
    let off = first_block_bytes(&img, "/blockdir");
    let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(b"XD2X", off).unwrap();
    drop(f);
    let o = xfskit_output(&["check", img.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", output_text(&o));
    let text = output_text(&o);
    assert!(text.contains("bad magic"), "{text}");
    assert_ne!(
        repair_check(&img).0,
        0,
        "xfs_repair -n misses the bad directory magic"
    );
    let o = xfskit_output(&["ls", img.to_str().unwrap(), "/blockdir"]);
    assert_eq!(o.status.code(), Some(5), "{}", output_text(&o));
    // An inode with a bad magic.
    let img = im._dir.path().join("bad-inode.img");
    fs::copy(clean, &img).unwrap();
    let off = inode_bytes(&img, "/small.txt");
    let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(b"XX", off).unwrap();
    drop(f);
    let o = xfskit_output(&["check", img.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", output_text(&o));
    assert!(output_text(&o).contains("inode"), "{}", output_text(&o));
    assert_ne!(
        repair_check(&img).0,
        0,
        "xfs_repair -n misses the bad inode magic"
    );
    let o = xfskit_output(&["cat", img.to_str().unwrap(), "/small.txt"]);
    assert_eq!(o.status.code(), Some(5), "{}", output_text(&o));
}

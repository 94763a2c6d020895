//! Build sources against a recording mock target: a directory tree with
//! every kind of entry, the same tree as tars made by GNU tar (plain, gzip,
//! zstd, xz; pax and gnu formats), truncated and malformed archives, id
//! maps, and the size estimate.

#[path = "build_source/mock.rs"]
mod mock;
#[path = "build_source/tarw.rs"]
mod tarw;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use mock::Mock;
use xfskit::build::feed::{FeedOptions, FeedStats};
use xfskit::build::idmap::{parse_map, parse_owner, IdMap};
use xfskit::build::size::{self, Layout, Slack};
use xfskit::build::source_tar::TarSource;
use xfskit::build::{source_dir, source_tar, NodeKind};
use xfskit::inode::Timestamp;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "command failed: {cmd}");
}

fn opts(ids: &IdMap) -> FeedOptions<'_> {
    FeedOptions {
        ids,
        default_time: Timestamp { sec: 0, nsec: 0 },
        one_file_system: false,
        progress: None,
        jobs: 1,
    }
}

fn layout() -> Layout {
    Layout {
        block_size: 4096,
        dir_block_size: 4096,
        inode_size: 512,
    }
}

/// A tree with every kind of entry tar can carry. Returns whether device
/// nodes were made (root only).
fn make_tree(root: &Path) -> bool {
    let r = root.display();
    sh(&format!(
        "set -e; cd {r}; mkdir -p a/b/c empty 'sp ace'; echo hello > a/hello.txt; : > empty.txt
         head -c 3000000 /dev/urandom > a/b/big.bin
         printf 'x%.0s' $(seq 1 300) > a/b/c/$(printf 'n%.0s' $(seq 1 200))
         truncate -s 10M sparse.img; printf 'head' | dd of=sparse.img conv=notrunc 2>/dev/null
         printf 'tail' | dd of=sparse.img bs=1 seek=8388608 conv=notrunc 2>/dev/null
         ln -s a/hello.txt link; ln -s $(printf 'L%.0s' $(seq 1 900)) longlink
         ln a/hello.txt a/b/hard1; ln a/hello.txt 'sp ace/hard2'
         mkfifo fifo; chmod 4755 a/hello.txt; chmod 1777 'sp ace'
         setfattr -n user.color -v blue a/hello.txt; setfattr -n user.dir -v yes a/b
         setfattr -n user.bin -v 0x00ff10 empty.txt
         touch -h -d '2001-02-03 04:05:06.123456789' link a/b/big.bin a/b"
    ));
    if Command::new("setfacl").arg("--version").output().is_ok() {
        sh(&format!(
            "cd {r} && setfacl -m u:1234:r-x,g:99:rw- empty && setfacl -d -m u:1234:r-- empty"
        ));
    }
    if is_root() {
        sh(&format!(
            "cd {r} && mknod chr c 1 7 && mknod blk b 7 200 && chown 1000:1000 a/b/big.bin \
             && setfattr -n trusted.t -v 1 empty.txt"
        ));
        true
    } else {
        println!("SKIP: device nodes and trusted xattrs need root");
        false
    }
}

fn feed_dir(root: &Path, ids: &IdMap) -> (Mock, FeedStats) {
    let mut m = Mock::new();
    let s = source_dir::feed(root, &mut m, &opts(ids)).expect("feed dir");
    (m, s)
}

fn feed_tar(path: &Path, ids: &IdMap) -> xfskit::Result<(Mock, FeedStats)> {
    let mut m = Mock::new();
    let src = TarSource::open(path)?;
    let s = source_tar::feed(&src, &mut m, &opts(ids))?;
    Ok((m, s))
}

#[test]
fn directory_source_records_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    let devices = make_tree(&root);
    let sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
    let (m, s) = feed_dir(&root, &IdMap::default());
    drop(sock);
    assert_eq!(s.files, 5);
    assert_eq!(s.hardlinks, 2);
    assert_eq!(s.symlinks, 2);
    assert_eq!(s.specials, if devices { 4 } else { 2 });
    assert_eq!(s.dirs, 6);
    // Sparse: only the two data blocks, not 10 MiB.
    let sp = m.lookup("sparse.img").unwrap();
    assert_eq!(sp.kind, NodeKind::File { size: 10 << 20 });
    let written: usize = sp.data.iter().map(|d| d.1.len()).sum();
    assert!(written <= 2 * 65536, "sparse file wrote {written} bytes");
    let c = m.contents("sparse.img");
    assert_eq!(&c[..4], b"head");
    assert_eq!(&c[8 << 20..(8 << 20) + 4], b"tail");
    // Big file in order, content intact.
    let host = std::fs::read(root.join("a/b/big.bin")).unwrap();
    assert_eq!(m.contents("a/b/big.bin"), host);
    // Hard links share the inode.
    let h = m.lookup("a/hello.txt").unwrap();
    assert_eq!(h.nlink, 3);
    assert_eq!(h.meta.mode, 0o4755);
    assert_eq!(m.lookup("sp ace").unwrap().meta.mode, 0o1777);
    assert_eq!(h.xattrs.get(&b"user.color"[..]).unwrap(), b"blue");
    assert_eq!(
        m.lookup("empty.txt").unwrap().xattrs[&b"user.bin"[..]],
        vec![0, 0xff, 0x10]
    );
    let link = m.lookup("link").unwrap();
    assert_eq!(link.kind, NodeKind::Symlink(b"a/hello.txt".to_vec()));
    assert_eq!(
        (link.meta.mtime.sec, link.meta.mtime.nsec),
        (981_173_106, 123_456_789)
    );
    assert_eq!(m.lookup("a/b").unwrap().meta.mtime.nsec, 123_456_789);
    assert_eq!(m.lookup("fifo").unwrap().kind, NodeKind::Fifo);
    assert_eq!(m.lookup("sock").unwrap().kind, NodeKind::Socket);
    if devices {
        assert_eq!(
            m.lookup("chr").unwrap().kind,
            NodeKind::CharDev { major: 1, minor: 7 }
        );
        assert_eq!(
            m.lookup("blk").unwrap().kind,
            NodeKind::BlockDev {
                major: 7,
                minor: 200
            }
        );
        assert_eq!(m.lookup("a/b/big.bin").unwrap().meta.uid, 1000);
    }
    let e = m.lookup("empty").unwrap();
    if e.xattrs.contains_key(&b"system.posix_acl_access"[..]) {
        assert!(e.xattrs.contains_key(&b"system.posix_acl_default"[..]));
    } else {
        println!("SKIP: no ACL support on the test filesystem");
    }
    // Same walk twice: same calls in the same order.
    let (m2, _) = feed_dir(&root, &IdMap::default());
    assert_eq!(m.render(true), m2.render(true));
}

#[test]
fn gnu_tar_archives_give_the_same_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    make_tree(&root);
    let (want, _) = feed_dir(&root, &IdMap::default());
    let want = want.render(true);
    let d = dir.path().display();
    let r = root.display();
    let variants = [
        ("pax.tar", "--format=pax", ""),
        ("pax00.tar", "--format=pax --sparse-version=0.0", ""),
        ("pax01.tar", "--format=pax --sparse-version=0.1", ""),
        ("gnu.tar", "--format=gnu", ""),
        ("pax.tar.gz", "--format=pax", "gzip -c"),
        ("pax.tar.zst", "--format=pax", "zstd -q -c"),
        ("pax.tar.xz", "--format=pax", "xz -c"),
    ];
    for (name, fmt, comp) in variants {
        let meta = if fmt == "--format=gnu" {
            ""
        } else {
            "--xattrs --xattrs-include='*' --acls"
        };
        let tar = format!("tar {meta} --sparse {fmt} -C {r} -cf - .");
        let cmd = if comp.is_empty() {
            format!("{tar} > {d}/{name}")
        } else {
            format!("{tar} | {comp} > {d}/{name}")
        };
        sh(&cmd);
        let (got, _) = feed_tar(&dir.path().join(name), &IdMap::default()).expect(name);
        let mut got = got.render(true);
        if fmt == "--format=gnu" {
            // The gnu format has whole-second times and no xattrs.
            got = strip(&got);
            assert_eq!(got, strip(&strip_xattrs(&want)), "{name}");
        } else {
            assert_eq!(got, want, "{name}");
        }
    }
}

fn strip(s: &str) -> String {
    s.lines()
        .map(|l| match l.find(" mtime=") {
            Some(i) => {
                let rest = &l[i + 7..];
                let end = rest.find(' ').unwrap_or(rest.len());
                let secs = rest[..end].split('.').next().unwrap();
                format!("{} mtime={secs}{}\n", &l[..i], &rest[end..])
            }
            None => format!("{l}\n"),
        })
        .collect()
}

fn strip_xattrs(s: &str) -> String {
    s.lines()
        .map(|l| {
            let keep: Vec<&str> = l
                .split(' ')
                .filter(|w| {
                    !w.starts_with("user.")
                        && !w.starts_with("system.")
                        && !w.starts_with("trusted.")
                })
                .collect();
            format!("{}\n", keep.join(" "))
        })
        .collect()
}

#[test]
fn truncated_and_malformed_archives_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    make_tree(&root);
    let full = dir.path().join("full.tar");
    sh(&format!(
        "tar --format=pax -C {} -cf {} .",
        root.display(),
        full.display()
    ));
    let bytes = std::fs::read(&full).unwrap();
    // Cut inside the data of the 3 MB file.
    let pos = bytes.windows(7).position(|w| w == b"big.bin").unwrap();
    let cut = dir.path().join("cut.tar");
    std::fs::write(&cut, &bytes[..pos + 1_000_000]).unwrap();
    let err = feed_tar(&cut, &IdMap::default())
        .err()
        .expect("truncated tar must fail")
        .to_string();
    assert!(
        err.contains("big.bin") && err.contains("truncated"),
        "{err}"
    );
    // Cut at a block boundary between members: no end-of-archive marker.
    let mut at = 512 * (pos / 512 - 2);
    while bytes[at..at + 512].iter().all(|&b| b == 0) {
        at -= 512;
    }
    std::fs::write(&cut, &bytes[..at]).unwrap();
    let err = feed_tar(&cut, &IdMap::default())
        .err()
        .expect("cut tar must fail")
        .to_string();
    assert!(err.contains("truncated"), "{err}");
    // Compressed and cut.
    sh(&format!(
        "gzip -c {} | head -c 200000 > {}/cut.tar.gz",
        full.display(),
        dir.path().display()
    ));
    let err = feed_tar(&dir.path().join("cut.tar.gz"), &IdMap::default())
        .err()
        .unwrap();
    assert!(matches!(err, xfskit::Error::Corrupt { .. }), "{err}");
    // Not a tar at all.
    std::fs::write(&cut, vec![7u8; 2048]).unwrap();
    let err = feed_tar(&cut, &IdMap::default()).err().unwrap().to_string();
    assert!(err.contains("checksum"), "{err}");
}

#[test]
fn names_and_order_in_hand_made_archives() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.tar");
    let long = "n".repeat(256);
    // A name over 255 bytes is refused with its path.
    std::fs::write(&p, tarw::archive(&[tarw::file(&format!("d/{long}"), b"x")])).unwrap();
    let err = feed_tar(&p, &IdMap::default()).err().unwrap().to_string();
    assert!(
        err.contains(&format!("d/{long}")) && err.contains("255"),
        "{err}"
    );
    // '..' is refused.
    std::fs::write(&p, tarw::archive(&[tarw::file("a/../../etc/x", b"x")])).unwrap();
    assert!(feed_tar(&p, &IdMap::default()).is_err());
    // Duplicate files are refused; duplicate directories merge.
    std::fs::write(
        &p,
        tarw::archive(&[tarw::file("f", b"1"), tarw::file("f", b"2")]),
    )
    .unwrap();
    let err = feed_tar(&p, &IdMap::default()).err().unwrap().to_string();
    assert!(err.contains("f: appears twice"), "{err}");
    // Children before their directory; the directory's header still applies.
    let entries = [
        tarw::file("x/y/z.txt", b"zz"),
        tarw::dir("x/y", 0o700, 1234),
        tarw::dir("x/y", 0o750, 1235),
        tarw::hardlink("x/y/again", "x/y/z.txt"),
        tarw::dir("./", 0o711, 99),
    ];
    std::fs::write(&p, tarw::archive(&entries)).unwrap();
    let (m, s) = feed_tar(&p, &IdMap::default()).unwrap();
    assert_eq!(s.hardlinks, 1);
    let y = m.lookup("x/y").unwrap();
    assert_eq!((y.meta.mode, y.meta.mtime.sec), (0o750, 1235));
    let x = m.lookup("x").unwrap();
    assert_eq!((x.meta.mode, x.meta.mtime.sec), (0o755, 0));
    let root = m.lookup("").unwrap();
    assert_eq!((root.meta.mode, root.meta.mtime.sec), (0o711, 99));
    assert_eq!(m.lookup("x/y/again").unwrap().nlink, 2);
    // A hard link to nothing is refused.
    std::fs::write(&p, tarw::archive(&[tarw::hardlink("a", "missing")])).unwrap();
    assert!(feed_tar(&p, &IdMap::default()).is_err());
}

#[test]
fn id_maps_apply_to_both_sources() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f"), b"data").unwrap();
    std::fs::set_permissions(root.join("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let me = rustix::process::geteuid().as_raw();
    let forced = IdMap {
        owner: Some(parse_owner("7:8").unwrap()),
        ..Default::default()
    };
    let (m, _) = feed_dir(&root, &forced);
    for (_, ino) in m.paths() {
        let meta = &m.nodes[&ino].meta;
        assert_eq!((meta.uid, meta.gid), (7, 8));
    }
    let shifted = IdMap {
        owner: None,
        uids: parse_map(&format!("{me}:100000:10"), "--uid-map").unwrap(),
        gids: parse_map("0:5000:65536", "--gid-map").unwrap(),
    };
    let (m, _) = feed_dir(&root, &shifted);
    let f = m.lookup("f").unwrap();
    assert_eq!(f.meta.uid, 100000);
    // The tar's implied directories get owner 0:0 through the map too.
    let p = dir.path().join("t.tar");
    std::fs::write(&p, tarw::archive(&[tarw::file("d/f", b"x")])).unwrap();
    let (m, _) = feed_tar(&p, &shifted).unwrap();
    let d = m.lookup("d").unwrap();
    assert_eq!((d.meta.uid, d.meta.gid), (shifted.uid(0), 5000));
}

#[test]
fn size_estimate_fits_and_is_not_wasteful() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    make_tree(&root);
    let l = layout();
    let c = source_dir::scan(&root, &l, false).unwrap();
    let (_, fed) = feed_dir(&root, &IdMap::default());
    assert_eq!(c.files, fed.files);
    assert_eq!(c.dirs, fed.dirs);
    assert_eq!(c.hardlinks, fed.hardlinks);
    assert_eq!(c.data_bytes, fed.bytes);
    let tar = dir.path().join("t.tar");
    sh(&format!(
        "tar --xattrs --sparse --format=pax -C {} -cf {} .",
        root.display(),
        tar.display()
    ));
    let ct = source_tar::scan(&TarSource::open(&tar).unwrap(), &l).unwrap();
    assert_eq!(
        (ct.files, ct.dirs, ct.hardlinks, ct.data_bytes),
        (c.files, c.dirs, c.hardlinks, c.data_bytes)
    );
    let auto = size::auto_size(&c, &Default::default(), &Slack::default()).unwrap();
    assert_eq!(auto, size::MIN_IMAGE_BYTES);

    // A tree of 20,000 files of 4 KiB: fits, and is not much larger than
    // the data and inodes it holds.
    let big = dir.path().join("many");
    std::fs::create_dir(&big).unwrap();
    let block = vec![1u8; 4096];
    for d in 0..40 {
        let sub = big.join(format!("dir{d:03}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..500 {
            std::fs::write(sub.join(format!("file-{f:05}")), &block).unwrap();
        }
    }
    let c = source_dir::scan(&big, &l, false).unwrap();
    assert_eq!(c.files, 20_000);
    assert_eq!(c.data_blocks, 20_000);
    assert!(c.dir_blocks >= 40 * 4, "{c:?}");
    let opts = xfskit::mkfs::MkfsOptions::default();
    let bytes = size::auto_size(
        &c,
        &opts,
        &Slack {
            percent: 0,
            bytes: 0,
        },
    )
    .unwrap();
    assert_eq!(bytes, size::MIN_IMAGE_BYTES);
    let none = Slack {
        percent: 0,
        bytes: 0,
    };
    let mut scaled = c.clone();
    for _ in 0..5 {
        scaled.files += c.files;
        scaled.data_blocks += c.data_blocks;
        scaled.dir_blocks += c.dir_blocks;
    }
    let bytes = size::auto_size(&scaled, &opts, &none).unwrap();
    let payload = (scaled.data_blocks + scaled.dir_blocks) * 4096 + scaled.inodes() * 512;
    assert!(bytes > payload, "{bytes} <= {payload}");
    assert!(
        bytes < payload + payload / 4 + (80 << 20),
        "{bytes} vs {payload}"
    );
}

#[test]
fn build_runs_mkfs_then_the_engine() {
    use xfskit::build::{build, write_engine, BuildOptions, Source};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f"), b"hello").unwrap();
    let image = dir.path().join("img");
    let opts = BuildOptions {
        reproducible: true,
        source_date_epoch: Some(1_700_000_000),
        ..Default::default()
    };
    let src = Source::open(&root).unwrap();
    let mut recorded = None;
    let r = build(&src, &image, &opts, |img, rep, populate| {
        assert_eq!(img, image.as_path());
        assert_eq!(rep.geometry.dblocks * 4096, size::MIN_IMAGE_BYTES);
        let mut m = Mock::new();
        populate(&mut m)?;
        recorded = Some(m);
        Ok(())
    })
    .unwrap();
    assert_eq!(r.fed.files, 1);
    assert_eq!(recorded.unwrap().contents("f"), b"hello");
    let img = std::fs::read(&image).unwrap();
    assert_eq!(&img[..4], b"XFSB");
    assert_eq!(img.len() as u64, size::MIN_IMAGE_BYTES);
    // Reproducible: a second build gives the same bytes.
    let image2 = dir.path().join("img2");
    build(&src, &image2, &opts, |_, _, populate| {
        populate(&mut Mock::new()).map(|_| ())
    })
    .unwrap();
    assert!(
        std::fs::read(&image2).unwrap() == img,
        "reproducible images differ"
    );
    // An existing image is refused without -f.
    let err = build(&src, &image, &opts, |_, _, _| Ok(()))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("-f"), "{err}");
    // An image inside the source directory is refused.
    let err = build(&src, &root.join("x.img"), &opts, |_, _, _| Ok(()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("inside the source"), "{err}");
    // A failing engine removes the image the build created.
    let image3 = dir.path().join("img3");
    let err = build(&src, &image3, &opts, |_, _, _| {
        Err(xfskit::Error::NoSpace("test".into()))
    })
    .err()
    .unwrap();
    assert!(matches!(err, xfskit::Error::NoSpace(_)), "{err}");
    assert!(!image3.exists());
    // The real engine builds an image xfs_repair accepts.
    let image4 = dir.path().join("img4");
    build(&src, &image4, &opts, write_engine).unwrap();
    // The default features (xfsprogs 6.18's) need xfs_repair 6.15 when
    // it is beside the project; without it, an image of 6.1's features is
    // built again for Debian's xfs_repair.
    let dir615 =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-6.15");
    let mut repair = if dir615.join("libexec/xfs_repair").exists() {
        let mut c = std::process::Command::new(dir615.join("libexec/xfs_repair"));
        c.env("LD_LIBRARY_PATH", dir615.join("lib"));
        c
    } else {
        let mut o61 = BuildOptions {
            reproducible: true,
            source_date_epoch: Some(1_700_000_000),
            ..Default::default()
        };
        o61.mkfs.defaults = Some(xfskit::mkfs::Defaults::V6_1);
        std::fs::remove_file(&image4).unwrap();
        build(&src, &image4, &o61, write_engine).unwrap();
        std::process::Command::new("xfs_repair")
    };
    let out = repair.arg("-n").arg(&image4).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The census against reality: copy a tree into a kernel-mounted XFS image
/// and compare the blocks it took with the estimate (root and loop only).
#[test]
fn estimate_matches_a_kernel_copy() {
    if !is_root() || !Path::new("/dev/loop-control").exists() {
        xfskit_testkit::skip(
            "estimate_matches_a_kernel_copy",
            "needs root and loop devices",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir(&root).unwrap();
    make_tree(&root);
    for i in 0..30 {
        let sub = root.join(format!("m{i}"));
        std::fs::create_dir(&sub).unwrap();
        for j in 0..300u64 {
            let len = ((j * 7919) % 20000) as usize;
            std::fs::write(
                sub.join(format!("file-with-a-longer-name-{j}")),
                vec![b'x'; len],
            )
            .unwrap();
        }
    }
    let d = root.display();
    let c = source_dir::scan(&root, &layout(), false).unwrap();
    let est = (c.content_blocks() + c.inode_blocks(&layout(), 4)) * 4096;
    let img = dir.path().join("img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (i, m) = (img.display(), mnt.display());
    sh(&format!(
        "truncate -s 1g {i} && mkfs.xfs -q {i} && mount -o loop {i} {m}"
    ));
    let free = || {
        let out = Command::new("stat")
            .args(["-f", "-c", "%f"])
            .arg(&mnt)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let before = free();
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("cp -a {d}/. {m}/ && sync"))
        .status()
        .unwrap()
        .success();
    let used = (before - free()) * 4096;
    sh(&format!("umount {m}"));
    assert!(ok, "cp -a failed");
    println!("estimate {est} bytes, kernel used {used} bytes");
    assert!(est >= used, "estimate {est} < used {used}");
    assert!(
        est <= used + used / 4 + (2 << 20),
        "estimate {est} much larger than used {used}"
    );
}

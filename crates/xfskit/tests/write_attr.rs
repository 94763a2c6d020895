//! attr::write against real filesystems: inodes made by the kernel get
//! attributes set, replaced and removed across every format boundary
//! (short form, leaf, node, remote values); at each boundary the image
//! must pass `xfs_repair -n`, xfskit's reader must return exactly the
//! model, and (as root) the kernel must show the same.

mod attr_common;
mod write_common;

use attr_common::*;
use write_common::*;
use xfskit::attr::{self, Namespace};
use xfskit::inode::ForkFormat;

/// Short form only: a few small attributes on a file, a directory, a
/// symlink and the root directory (made by mkfs: no attr fork yet);
/// replace; remove all (the fork goes).
fn short_form(tag: &str, opts: &str) {
    let Some(mut img) = image(tag, opts, &["f", "d/", "@l", "."]) else {
        return;
    };
    assert_eq!(img.fs().inode(img.files[3].1).unwrap().forkoff, 0);
    let mut rng = Rng(7);
    for f in 0..4 {
        for (i, ns) in NS.iter().enumerate() {
            let v = rng.bytes(5 + i * 7);
            img.set(f, *ns, format!("a{i}").as_bytes(), &v);
        }
        img.set(f, Namespace::User, b"empty", b"");
        assert_eq!(
            img.aformat(f),
            Some(ForkFormat::Local),
            "{}",
            img.files[f].0
        );
    }
    img.check("short form");
    for f in 0..4 {
        img.set(f, Namespace::User, b"a0", b"replaced");
        img.set(f, Namespace::Trusted, b"a1", &[1; 60]);
    }
    img.check("short form replace");
    for f in 0..4 {
        let keys: Vec<_> = img.files[f].2.keys().cloned().collect();
        for (ns, n) in keys {
            img.remove(f, ns, &n);
        }
        let ip = img.fs().inode(img.files[f].1).unwrap();
        assert_eq!(
            ip.forkoff, 0,
            "{}: fork removed with the last attribute",
            img.files[f].0
        );
    }
    img.check("short form emptied");
}

#[test]
fn short_form_4k() {
    short_form("sf4k", "");
}

#[test]
fn short_form_inode512() {
    short_form("sf512", "-i size=512");
}

#[test]
fn short_form_inode2048() {
    short_form("sf2048", "-i size=2048");
}

/// Every format: sf -> leaf -> node with remote values, replaces that
/// move values between local and remote, then removal of everything in
/// random order, checked at each boundary.
fn all_formats(tag: &str, opts: &str, many: usize) {
    let Some(mut img) = image(tag, opts, &["sf", "leaf", "node", "remote", "d/", "@l"]) else {
        return;
    };
    let mut rng = Rng(0x9e3779b97f4a7c15);
    // Short form.
    for f in 0..6 {
        img.set(f, Namespace::User, b"first", b"1");
    }
    // Leaf: dozens of attributes.
    for f in [1usize, 4, 5] {
        for i in 0..80 {
            let n = rng.below(40) as usize;
            let v = rng.bytes(n);
            img.set(f, NS[i % 3], format!("leaf.attr.{i}").as_bytes(), &v);
        }
        assert_eq!(img.aformat(f), Some(ForkFormat::Extents));
    }
    // Node: hundreds.
    for i in 0..many {
        let n = rng.below(60) as usize;
        let v = rng.bytes(n);
        img.set(2, NS[i % 3], format!("node-{i:05}-name").as_bytes(), &v);
    }
    // Remote: 64 KiB values, and values just around the local limit.
    let bsize = img.fs().geometry().block_size as usize;
    for (i, len) in [65536usize, 65536, bsize * 3 / 4, bsize, 1, 70, 5000]
        .iter()
        .enumerate()
    {
        let v = rng.bytes(*len);
        img.set(3, NS[i % 3], format!("remote{i}").as_bytes(), &v);
    }
    // The node file needs several leaves under a node; the remote file
    // two 64 KiB values in blocks of their own.
    let nb = |img: &Img, f: usize| img.fs().inode(img.files[f].1).unwrap().nblocks;
    assert!(nb(&img, 2) >= 4, "node file has {} blocks", nb(&img, 2));
    assert!(
        nb(&img, 3) as usize >= 2 * 65536 / bsize,
        "remote file has {} blocks",
        nb(&img, 3)
    );
    eprintln!(
        "{tag}: node file {} blocks, remote file {}",
        nb(&img, 2),
        nb(&img, 3)
    );
    img.check("grown");
    // Replace: sizes cross local <-> remote.
    for (f, key) in [(3usize, "remote0"), (3, "remote5"), (1, "leaf.attr.3")] {
        let ns = img.files[f]
            .2
            .keys()
            .find(|(_, n)| n == key.as_bytes())
            .unwrap()
            .0;
        let len = if img.files[f].2[&(ns, key.as_bytes().to_vec())].len() > 1000 {
            10
        } else {
            20000
        };
        let v = rng.bytes(len);
        img.set(f, ns, key.as_bytes(), &v);
    }
    let keys: Vec<_> = img.files[2].2.keys().cloned().collect();
    for (ns, n) in keys.iter().step_by(7) {
        let len = [0usize, 5, 100, 3000, 9000][rng.below(5) as usize];
        let v = rng.bytes(len);
        img.set(2, *ns, n, &v);
    }
    img.check("replaced");
    // Remove everything in random order, checking halfway.
    for f in 0..6 {
        let mut keys: Vec<_> = img.files[f].2.keys().cloned().collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let half = keys.len() / 2;
        for (j, (ns, n)) in keys.iter().enumerate() {
            img.remove(f, *ns, n);
            if f == 2 && j == half {
                img.check("node half removed");
            }
        }
        let ip = img.fs().inode(img.files[f].1).unwrap();
        assert_eq!(
            ip.forkoff, 0,
            "{}: fork removed with the last attribute",
            img.files[f].0
        );
        assert_eq!(ip.anextents, 0);
    }
    img.check("all removed");
}

#[test]
fn all_formats_4k() {
    all_formats("all4k", "", 700);
}

#[test]
fn all_formats_1k() {
    all_formats("all1k", "-b size=1024", 400);
}

#[test]
fn all_formats_inode512() {
    all_formats("all512", "-i size=512", 300);
}

#[test]
fn all_formats_inode2048() {
    all_formats("all2048", "-i size=2048", 300);
}

/// Removing what is not there.
#[test]
fn remove_missing_is_noattr() {
    let Some(mut img) = image("noattr", "", &["f"]) else {
        return;
    };
    img.set(0, Namespace::User, b"x", b"y");
    let fs = img.fs();
    let mut tp = fs.trans().unwrap();
    let mut ip = tp.read_inode(img.files[0].1).unwrap();
    let r = attr::write::remove(&mut tp, &mut ip, Namespace::Trusted, b"x");
    assert!(matches!(r, Err(xfskit::Error::NoAttr(_))), "{r:?}");
}

//! attr::write on larger shapes: deep attr trees on 1 KiB blocks, hash
//! collisions, attr forks next to data forks of every format, and a big
//! local directory that must make room for its first big attribute.

mod attr_common;
mod write_common;

use attr_common::*;
use write_common::*;
use xfskit::attr::{self, Namespace};
use xfskit::inode::ForkFormat;

/// A two-level da btree on 1 KiB blocks: thousands of attributes make
/// nodes split (and the root split again); removing them all in random
/// order empties leaves and nodes until the root collapses back to one
/// leaf, short form and no fork.
#[test]
fn deep_tree_1k() {
    let Some(mut img) = image("deep1k", "-b size=1024", &["f"]) else {
        return;
    };
    let mut rng = Rng(42);
    let n = 6000;
    for i in 0..n {
        let len = rng.below(12) as usize;
        let v = rng.bytes(len);
        img.set(0, NS[i % 3], format!("k{i}").as_bytes(), &v);
    }
    // More leaves than one 1 KiB node can index: the root split.
    let blocks = img.fs().inode(img.files[0].1).unwrap().nblocks;
    assert!(blocks > 1 + 121 + 2, "only {blocks} blocks");
    img.check("deep tree grown");
    let mut keys: Vec<_> = img.files[0].2.keys().cloned().collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (j, (ns, k)) in keys.iter().enumerate() {
        img.remove(0, *ns, k);
        if j == n * 3 / 4 {
            img.check("deep tree three quarters removed");
        }
    }
    assert_eq!(img.fs().inode(img.files[0].1).unwrap().forkoff, 0);
    img.check("deep tree emptied");
}

/// Names that all hash alike: 12-byte names where toggling bit 0 of one
/// byte and bit 7 of the next leaves the hash alone (512 names per
/// hash), so one hash spans several leaves.
#[test]
fn hash_collisions_1k() {
    let Some(mut img) = image("coll1k", "-b size=1024", &["f"]) else {
        return;
    };
    let base = *b"abcdefghijkl";
    let mut names = Vec::new();
    for bits in 0u32..512 {
        let mut n = base;
        for t in 0..9 {
            if bits & (1 << t) != 0 {
                // pairs (0,1) (1,2) (2,3) in each 4-byte chunk
                let (chunk, k) = (t / 3, t % 3);
                let i = chunk * 4 + k;
                n[i] ^= 1;
                n[i + 1] ^= 0x80;
            }
        }
        names.push(n);
    }
    let h0 = attr::name_hash(&names[0]);
    assert!(names.iter().all(|n| attr::name_hash(n) == h0));
    let mut rng = Rng(5);
    for (i, n) in names.iter().enumerate() {
        let len = rng.below(30) as usize;
        let v = rng.bytes(len);
        img.set(0, NS[i % 3], n, &v);
        if i % 5 == 0 {
            img.set(0, Namespace::User, format!("other{i}").as_bytes(), b"x");
        }
    }
    img.check("same-hash names");
    for (i, n) in names.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        let v = rng.bytes(100);
        img.set(0, NS[i % 3], n, &v);
    }
    img.check("same-hash names replaced");
    for (i, n) in names.iter().enumerate().rev() {
        img.remove(0, NS[i % 3], n);
    }
    img.check("same-hash names removed");
}

/// Inodes whose data fork limits the attr fork: data extents in the
/// inode (the fork offset may not cut them), a data btree root (the
/// fork offset stays put; the empty short-form list stays when the last
/// attribute goes, as the kernel leaves it), a fifo (device format).
fn data_forks(tag: &str, opts: &str) {
    let Some(mut img) = image(tag, opts, &["%frag9", "%btree300", "|fifo"]) else {
        return;
    };
    assert_eq!(
        img.fs().inode(img.files[1].1).unwrap().format,
        ForkFormat::Btree
    );
    let mut rng = Rng(99);
    for round in 0..2 {
        for f in 0..3 {
            for i in 0..60 {
                let len = rng.below(20) as usize;
                let v = rng.bytes(len);
                img.set(f, NS[i % 3], format!("r{round}-{i}").as_bytes(), &v);
                let ip = img.fs().inode(img.files[f].1).unwrap();
                if ip.format == ForkFormat::Extents {
                    assert!(ip.nextents * 16 <= u64::from(ip.forkoff) * 8);
                }
            }
        }
        img.check("data forks grown");
        for f in 0..3 {
            let keys: Vec<_> = img.files[f].2.keys().cloned().collect();
            for (ns, n) in keys {
                img.remove(f, ns, &n);
            }
        }
        img.check("data forks emptied");
        assert_eq!(img.fs().inode(img.files[0].1).unwrap().forkoff, 0);
        assert_eq!(img.fs().inode(img.files[2].1).unwrap().forkoff, 0);
        assert_eq!(img.aformat(1), Some(ForkFormat::Local));
    }
    // A first attribute too big for short form on inodes without a fork.
    for f in [0usize, 2] {
        let v = rng.bytes(65536);
        img.set(f, Namespace::Trusted, b"big", &v);
        assert_eq!(img.aformat(f), Some(ForkFormat::Extents));
    }
    img.check("big first attribute");
    for f in [0usize, 2] {
        img.remove(f, Namespace::Trusted, b"big");
        assert_eq!(img.fs().inode(img.files[f].1).unwrap().forkoff, 0);
    }
    img.check("big first attribute removed");
    // 20 data extents fill a fork-less 512-byte inode past where the
    // attr fork goes: the data extents move to a btree, as the kernel does.
    assert_eq!(img.fs().geometry().inode_size, 512);
    let ino = img.files[0].1;
    for i in 9..20u64 {
        img.fs().write_at(ino, i * 8192, &[2u8; 4096]).unwrap();
    }
    let ip = img.fs().inode(ino).unwrap();
    assert_eq!(
        (ip.forkoff, ip.format, ip.nextents),
        (0, ForkFormat::Extents, 20)
    );
    img.set(0, Namespace::User, b"after", b"extents");
    let ip = img.fs().inode(ino).unwrap();
    assert_eq!(ip.format, ForkFormat::Btree);
    img.check("data extents pushed into a btree");
}

#[test]
fn data_forks_4k() {
    data_forks("df4k", "");
}

#[test]
fn data_forks_inode512() {
    data_forks("df512", "-i size=512");
}

/// The mkfs root directory (no attr fork) with a short-form directory
/// larger than the default data area gets a first attribute too big for
/// short form: the fork starts just past the directory entries.
#[test]
fn big_local_dir_first_big_attr() {
    let names: Vec<String> = (0..15).map(|i| format!("entry{i:03}")).collect();
    let mut all: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    all.push(".");
    let Some(mut img) = image("bigdir", "", &all) else {
        return;
    };
    let root = img.files.len() - 1;
    let ip = img.fs().inode(img.files[root].1).unwrap();
    assert_eq!((ip.forkoff, ip.format), (0, ForkFormat::Local));
    assert!(ip.size > 196, "root directory of {} bytes", ip.size);
    let mut rng = Rng(3);
    let v = rng.bytes(300);
    img.set(root, Namespace::Security, b"label", &v);
    img.check("big local dir, first attribute in a leaf");
    img.remove(root, Namespace::Security, b"label");
    assert_eq!(img.fs().inode(img.files[root].1).unwrap().forkoff, 0);
    img.check("big local dir, attribute removed");
}

/// A file whose data extents are a btree and whose attr fork went away
/// with its last attribute: the next attribute gives it a fork next to
/// the btree root again (as the kernel does: the root keeps its room),
/// short form and then leaf, and the root's pointers move with the fork
/// boundary.
#[test]
fn attr_fork_again_next_to_a_data_btree() {
    let Some(mut img) = image("btreefirst", "", &["f"]) else {
        return;
    };
    // A file the engine makes has no attr fork (the kernel may give its
    // new files one); 200 separate extents make its data fork a btree.
    let root = img.fs().geometry().root_ino;
    let meta = xfskit::build::Meta {
        mode: 0o644,
        uid: 0,
        gid: 0,
        atime: Default::default(),
        mtime: Default::default(),
        ctime: Default::default(),
        crtime: Default::default(),
    };
    let kind = xfskit::build::NodeKind::File { size: 0 };
    let ino = img.fs().create(root, b"g", &kind, &meta).unwrap();
    img.files.push(("g".into(), ino, Default::default()));
    for i in 0..200u64 {
        img.fs().write_at(ino, i * 8192, &[3u8; 4096]).unwrap();
    }
    let ip = img.fs().inode(ino).unwrap();
    assert_eq!((ip.format, ip.forkoff), (ForkFormat::Btree, 0));
    img.set(1, Namespace::User, b"first", b"attribute");
    assert_eq!(img.aformat(1), Some(ForkFormat::Local));
    img.check("first attribute next to a data btree");
    let mut rng = Rng(7);
    for i in 0..40 {
        let v = rng.bytes(100);
        img.set(1, NS[i % 3], format!("more{i}").as_bytes(), &v);
    }
    assert_eq!(img.aformat(1), Some(ForkFormat::Extents));
    img.check("attributes in a leaf next to a data btree");
}

//! Extended attributes in every on-disk format, written by the kernel on a
//! loop-mounted image made by mkfs.xfs, read back with xfskit and compared
//! with what we set and what getfattr reported while mounted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use xfskit::attr::{self, Namespace};
use xfskit::geometry::Ino;
use xfskit::inode::{extents, Fork, ForkFormat};
use xfskit::{Error, Fs, OpenOptions};
use xfskit_testkit::LoopImage;

type Attrs = BTreeMap<Vec<u8>, Vec<u8>>;
/// Full names and values to set on one file.
type AttrList = Vec<(String, Vec<u8>)>;

fn can_run() -> bool {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref().ok() != Some("0") {
        xfskit_testkit::skip("attr_formats", "needs root for loop mounts");
        return false;
    }
    for tool in ["mkfs.xfs", "getfattr", "mount"] {
        if Command::new("which")
            .arg(tool)
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            xfskit_testkit::skip("attr_formats", &format!("{tool} is not installed"));
            return false;
        }
    }
    true
}

fn set(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("setxattr {name} on {}: {e}", path.display()));
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// What getfattr shows for `path` (every namespace, hex values).
fn getfattr(path: &Path) -> Attrs {
    let out = Command::new("getfattr")
        .args(["-d", "-m", "-", "--absolute-names", "-e", "hex"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "getfattr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = Attrs::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, val) = match line.split_once('=') {
            Some((n, v)) => (n, v.strip_prefix("0x").map(unhex).unwrap_or_default()),
            None => (line, Vec::new()),
        };
        m.insert(name.as_bytes().to_vec(), val);
    }
    m
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7) % 251) as u8)
        .collect()
}

/// The test files: name, attributes to set.
fn plan() -> Vec<(&'static str, AttrList)> {
    let small = (0..3)
        .map(|i| (format!("user.s{i}"), format!("v{i}").into_bytes()))
        .collect();
    let leaf = (0..30)
        .map(|i| (format!("user.leaf_attribute_{i:02}"), pattern(i, 40 + i)))
        .collect();
    let mut node: Vec<(String, Vec<u8>)> = (0..2000)
        .map(|i| {
            (
                format!("user.node_attribute_name_{i:04}"),
                pattern(i, 10 + i % 40),
            )
        })
        .collect();
    node.push(("user.big_in_node".into(), pattern(9, 7000)));
    let remote = vec![
        ("user.r5000".into(), pattern(1, 5000)),
        ("user.r65000".into(), pattern(2, 65000)),
        ("user.tiny".into(), b"t".to_vec()),
        ("user.empty".into(), Vec::new()),
    ];
    let ns = vec![
        ("trusted.t1".into(), b"trusted value".to_vec()),
        ("security.s1".into(), b"security value".to_vec()),
        ("user.u1".into(), b"user value".to_vec()),
        ("trusted.SGI_ACL_FILE".into(), pattern(3, 36)),
        ("trusted.big".into(), pattern(4, 3000)),
    ];
    vec![
        ("shortform", small),
        ("leaf", leaf),
        ("node", node),
        ("remote", remote),
        ("namespaces", ns),
    ]
}

fn xfskit_attrs(fs: &Fs, ino: u64) -> Attrs {
    let inode = fs.inode(Ino(ino)).unwrap();
    let list = attr::list(fs, &inode).unwrap_or_else(|e| panic!("list inode {ino}: {e}"));
    let n = list.len();
    let m: Attrs = list.into_iter().map(|x| (x.full_name(), x.value)).collect();
    assert_eq!(m.len(), n, "duplicate names in inode {ino}");
    m
}

/// Magic and (for nodes) level of attr fork block 0, read raw.
fn attr_root(fs: &Fs, ino: u64) -> (u16, u16) {
    let inode = fs.inode(Ino(ino)).unwrap();
    let map = extents(fs, &inode, Fork::Attr).unwrap();
    let e = xfskit::inode::lookup(&map, 0).unwrap();
    let fsb = xfskit::geometry::FsBlock(e.start.0 - e.offset);
    let mut b = [0u8; 64];
    fs.read_bytes(fs.geometry().fsb_to_daddr(fsb).bytes(), &mut b)
        .unwrap();
    let magic = u16::from_be_bytes([b[8], b[9]]);
    let level = if magic == 0x3ebe {
        u16::from_be_bytes([b[58], b[59]])
    } else {
        0
    };
    (magic, level)
}

fn roundtrip(tag: &str, mkfs_args: &[&str]) {
    let mut img = LoopImage::mkfs(&format!("attr-{tag}"), 300 << 20, mkfs_args);
    img.mount("loop");
    let mut files = Vec::new();
    for (name, attrs) in plan() {
        let p = img.mnt.join(name);
        std::fs::write(&p, b"data").unwrap();
        for (n, v) in &attrs {
            set(&p, n, v);
        }
        let ino = rustix::fs::stat(&p).unwrap().st_ino;
        let want: Attrs = attrs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.clone()))
            .collect();
        let seen = getfattr(&p);
        files.push((name, ino, want, seen));
    }
    img.umount();
    let fs = Fs::open(&img.path, &OpenOptions::default()).unwrap();
    for (name, ino, want, seen) in &files {
        let got = xfskit_attrs(&fs, *ino);
        // getfattr may show system-generated attributes (an SELinux label);
        // everything it shows must be on disk too, and what we set must match exactly.
        for (k, v) in seen {
            assert_eq!(
                got.get(k),
                Some(v),
                "{tag}/{name}: {} as getfattr saw it",
                String::from_utf8_lossy(k)
            );
        }
        for (k, v) in want {
            assert_eq!(
                got.get(k).map(|v| v.len()),
                Some(v.len()),
                "{tag}/{name}: {}",
                String::from_utf8_lossy(k)
            );
            assert!(
                got.get(k) == Some(v),
                "{tag}/{name}: value of {} differs",
                String::from_utf8_lossy(k)
            );
        }
        let inode = fs.inode(Ino(*ino)).unwrap();
        let names = attr::list_names(&fs, &inode).unwrap();
        assert_eq!(names.len(), got.len());
        for n in &names {
            assert_eq!(
                n.value_len as usize,
                got[&attr::full_name(n.ns, &n.name)].len()
            );
        }
        for (k, v) in want {
            let (ns, short) = attr::parse_full_name(k).unwrap();
            assert_eq!(attr::get(&fs, &inode, ns, short).unwrap().as_ref(), Some(v));
        }
        assert_eq!(
            attr::get(&fs, &inode, Namespace::User, b"no-such-attr").unwrap(),
            None
        );
        match *name {
            "leaf" if tag == "default" => assert_eq!(
                attr_root(&fs, *ino),
                (0x3bee, 0),
                "default/leaf: block 0 should be a leaf"
            ),
            "node" if tag == "b1k" => assert_eq!(
                attr_root(&fs, *ino),
                (0x3ebe, 2),
                "b1k/node: root should be a level-2 node"
            ),
            "shortform" => assert_eq!(
                inode.aformat,
                ForkFormat::Local,
                "{tag}: 3 small attrs should be shortform"
            ),
            "node" => {
                assert_eq!(
                    attr_root(&fs, *ino).0,
                    0x3ebe,
                    "{tag}/node: block 0 should be a node"
                );
                let blocks: u64 = extents(&fs, &inode, Fork::Attr)
                    .unwrap()
                    .iter()
                    .map(|e| e.len)
                    .sum();
                assert!(blocks > 2, "{tag}: 2000 attrs in {blocks} blocks");
            }
            _ => assert_ne!(
                inode.aformat,
                ForkFormat::Local,
                "{tag}/{name} should use attr blocks"
            ),
        }
    }
    println!("{tag}: {} files compared", files.len());
}

#[test]
fn all_formats_default_geometry() {
    if can_run() {
        roundtrip("default", &[]);
    }
}

#[test]
fn all_formats_1k_blocks() {
    if can_run() {
        roundtrip("b1k", &["-b", "size=1024"]);
    }
}

#[test]
fn all_formats_2k_inodes() {
    if can_run() {
        roundtrip("i2k", &["-i", "size=2048"]);
    }
}

/// Flips a byte of attr fork block `dablk` of `ino` on the image.
fn flip_attr_block(img: &Path, ino: u64, dablk: u64, at: u64) {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let inode = fs.inode(Ino(ino)).unwrap();
    let map = extents(&fs, &inode, Fork::Attr).unwrap();
    let e = xfskit::inode::lookup(&map, dablk).unwrap();
    let fsb = xfskit::geometry::FsBlock(e.start.0 + dablk - e.offset);
    let off = fs.geometry().fsb_to_daddr(fsb).bytes() + at;
    drop(fs);
    let mut b = std::fs::read(img).unwrap();
    b[off as usize] ^= 0x5a;
    std::fs::write(img, b).unwrap();
}

#[test]
fn corrupt_leaf_and_remote_blocks_are_reported() {
    if !can_run() {
        return;
    }
    let mut img = LoopImage::mkfs("attr-corrupt", 300 << 20, &[]);
    img.mount("loop");
    let leaf = img.mnt.join("leaf");
    std::fs::write(&leaf, b"x").unwrap();
    for i in 0..30 {
        set(&leaf, &format!("user.a{i}"), &pattern(i, 30));
    }
    let rmt = img.mnt.join("remote");
    std::fs::write(&rmt, b"x").unwrap();
    set(&rmt, "user.big", &pattern(5, 9000));
    let leaf_ino = rustix::fs::stat(&leaf).unwrap().st_ino;
    let rmt_ino = rustix::fs::stat(&rmt).unwrap().st_ino;
    img.umount();

    // Find the remote value's first block before corrupting anything.
    let fs = Fs::open(&img.path, &OpenOptions::default()).unwrap();
    assert_eq!(
        xfskit_attrs(&fs, rmt_ino)[&b"user.big"[..]],
        pattern(5, 9000)
    );
    let map = extents(&fs, &fs.inode(Ino(rmt_ino)).unwrap(), Fork::Attr).unwrap();
    let rmt_blk = map
        .iter()
        .flat_map(|e| e.offset..e.end())
        .find(|&b| b != 0)
        .unwrap();
    drop(fs);

    flip_attr_block(&img.path, leaf_ino, 0, 300);
    flip_attr_block(&img.path, rmt_ino, rmt_blk, 1000);
    let fs = Fs::open(&img.path, &OpenOptions::default()).unwrap();
    let inode = fs.inode(Ino(leaf_ino)).unwrap();
    match attr::list(&fs, &inode) {
        Err(Error::BadCrc { what, .. }) => assert_eq!(what, "dir/attr btree block"),
        other => panic!("corrupt leaf: {other:?}"),
    }
    let inode = fs.inode(Ino(rmt_ino)).unwrap();
    // The names are still readable; the value is not.
    assert_eq!(attr::list_names(&fs, &inode).unwrap().len(), 1);
    match attr::get(&fs, &inode, Namespace::User, b"big") {
        Err(Error::BadCrc { what, .. }) => assert_eq!(what, "remote attribute value block"),
        other => panic!("corrupt remote value: {other:?}"),
    }
}

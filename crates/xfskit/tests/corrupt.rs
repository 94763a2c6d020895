//! Bad input: per metadata type, a byte flip or truncation gives the
//! specific error naming the structure and its location; random mutations
//! never panic or hang.

mod support;

use std::os::unix::fs::symlink;
use std::path::Path;
use support::*;
use xfskit::buf::Verifier;
use xfskit::geometry::{AgBlock, AgNumber, Daddr};
use xfskit::inode::{extents, Fork};
use xfskit::{Error, Fs, Ino, Location};

fn populate(m: &Path) {
    std::fs::create_dir(m.join("blockdir")).unwrap();
    for i in 0..50 {
        std::fs::write(m.join(format!("blockdir/entry-number-{i:04}")), b"x").unwrap();
    }
    std::fs::create_dir(m.join("leafdir")).unwrap();
    for i in 0..600 {
        std::fs::write(
            m.join(format!("leafdir/a-rather-long-file-name-{i:05}")),
            b"",
        )
        .unwrap();
    }
    write_fragmented(&m.join("multi"), 10, 4096);
    write_fragmented(&m.join("bmbt"), 300, 4096);
    symlink("t".repeat(900), m.join("longlink")).unwrap();
    std::fs::write(m.join("attrleaf"), b"a").unwrap();
    for i in 0..40 {
        run(
            "setfattr",
            &[
                "-n",
                &format!("user.attribute-{i:03}"),
                "-v",
                "some value",
                m.join("attrleaf").to_str().unwrap(),
            ],
        );
    }
    std::fs::write(m.join("attrremote"), b"r").unwrap();
    run(
        "setfattr",
        &[
            "-n",
            "user.big",
            "-v",
            &"v".repeat(8000),
            m.join("attrremote").to_str().unwrap(),
        ],
    );
}

fn lookup(fs: &Fs, name: &str) -> xfskit::inode::Inode {
    fs.lookup_path(format!("/{name}").as_bytes())
        .unwrap_or_else(|e| panic!("lookup {name}: {e}"))
}

struct Img {
    _s: Scratch,
    path: std::path::PathBuf,
}

fn image() -> Option<Img> {
    if !can_mount("corrupt") {
        return None;
    }
    let s = Scratch::new("corrupt");
    let path = make_image(
        &s,
        &["-m", "uuid=4f2a0c1e-8d6b-4e0a-9d5e-0123456789ab"],
        populate,
    );
    Some(Img { _s: s, path })
}

fn expect_badcrc(r: xfskit::Result<impl std::fmt::Debug>, what: &str, loc: Location) {
    match r {
        Err(Error::BadCrc { what: w, location }) => {
            assert_eq!(w, what, "structure named");
            assert_eq!(location, loc, "location named");
        }
        other => panic!("expected BadCrc in {what} at {loc}, got {other:?}"),
    }
}

fn expect_corrupt(
    r: xfskit::Result<impl std::fmt::Debug>,
    what: &str,
    detail_has: &str,
) -> Location {
    match r {
        Err(Error::Corrupt {
            what: w,
            location,
            detail,
        }) => {
            assert_eq!(w, what, "structure named ({detail})");
            assert!(
                detail.contains(detail_has),
                "detail {detail:?} lacks {detail_has:?}"
            );
            location
        }
        other => panic!("expected corrupt {what}, got {other:?}"),
    }
}

#[test]
fn each_structure_reports_its_own_error() {
    let Some(img) = image() else { return };
    let clean = open(PatchedDevice::new(&img.path)).expect("clean image opens");
    assert!(walk_all(&clean).expect("clean walk") > 650);
    let geo = clean.geometry().clone();
    let bs = u64::from(geo.block_size);

    // Superblock: magic, then CRC.
    let mut d = PatchedDevice::new(&img.path);
    d.flip(0, 0xff);
    expect_corrupt(open(d).map(|_| ()), "superblock", "magic");
    let mut d = PatchedDevice::new(&img.path);
    d.flip(88, 0x01); // sb_agcount
    expect_badcrc(open(d).map(|_| ()), "superblock", Location::Sb(0));

    // Truncated device.
    let mut d = PatchedDevice::new(&img.path);
    d.truncate(1 << 20);
    expect_corrupt(open(d).map(|_| ()), "device", "bytes");

    // AG headers and the inode btree root.
    let agf = geo.agb_to_daddr(AgNumber(1), AgBlock(0)).0 + 1;
    let mut d = PatchedDevice::new(&img.path);
    d.flip(agf * 512 + 52, 0x10);
    let fs = open(d).unwrap();
    let r = fs.read_meta(Daddr(agf), geo.sect_size, &Verifier::Agf { agno: 1 });
    expect_badcrc(r, "AGF", Location::Other("AG 1 sector 1".into()));
    let agi = geo.agb_to_daddr(AgNumber(0), AgBlock(0)).0 + 2;
    let agi_raw = PatchedDevice::new(&img.path).read_vec(agi * 512, 512);
    let ino_root = u32::from_be_bytes(agi_raw[20..24].try_into().unwrap());
    let root_daddr = geo.agb_to_daddr(AgNumber(0), AgBlock(ino_root));
    let mut d = PatchedDevice::new(&img.path);
    d.flip(root_daddr.bytes() + 100, 0x04);
    let fs = open(d).unwrap();
    let r = fs.read_meta(
        root_daddr,
        geo.block_size,
        &Verifier::ShortBtree {
            magic: 0x4941_4233,
            agno: 0,
            level: None,
        },
    );
    expect_badcrc(
        r,
        "inobt block",
        Location::AgBlock {
            agno: 0,
            agbno: ino_root,
        },
    );

    // Root inode CRC.
    let root = geo.root_ino;
    let mut d = PatchedDevice::new(&img.path);
    d.flip(geo.ino_to_bytes(root) + 8, 0x01);
    let fs = open(d).unwrap();
    expect_badcrc(fs.root(), "inode", Location::Inode(root.0));

    // An extent count far beyond what the fork holds, with a valid CRC:
    // must be refused before anything is allocated for it.
    let multi = lookup(&clean, "multi");
    let off = geo.ino_to_bytes(multi.ino);
    let mut d = PatchedDevice::new(&img.path);
    d.write(off + 76, &u32::MAX.to_be_bytes());
    d.restamp(off, geo.inode_size as usize, 100);
    let fs = open(d).unwrap();
    let inode = fs.inode(multi.ino).expect("inode itself decodes");
    expect_corrupt(extents(&fs, &inode, Fork::Data), "extent map", "do not fit");

    // Data fork btree block.
    let bm = lookup(&clean, "bmbt");
    assert_eq!(
        bm.format,
        xfskit::inode::ForkFormat::Btree,
        "bmbt file is in btree format"
    );
    let maxrecs = (bm.data_fork.len() - 4) / 16;
    let p = 4 + maxrecs * 8;
    let child = u64::from_be_bytes(bm.data_fork[p..p + 8].try_into().unwrap());
    let child_daddr = geo.fsb_to_daddr(xfskit::geometry::FsBlock(child));
    let mut d = PatchedDevice::new(&img.path);
    d.flip(child_daddr.bytes() + 200, 0x80);
    let fs = open(d).unwrap();
    expect_badcrc(
        extents(&fs, &bm, Fork::Data),
        "bmbt block",
        Location::Daddr(child_daddr.0),
    );

    // Directory data block.
    let bd = lookup(&clean, "blockdir");
    let e = extents(&clean, &bd, Fork::Data).unwrap()[0];
    let daddr = geo.fsb_to_daddr(e.start);
    let mut d = PatchedDevice::new(&img.path);
    d.flip(daddr.bytes() + 300, 0x01);
    let fs = open(d).unwrap();
    let r = xfskit::dir::read_dir(&fs, &bd);
    match r {
        Err(Error::BadCrc { what, .. }) => assert_eq!(what, "directory block"),
        other => panic!("expected BadCrc in the directory block, got {other:?}"),
    }

    // Attribute leaf block and remote value block.
    let al = lookup(&clean, "attrleaf");
    let e = extents(&clean, &al, Fork::Attr).unwrap()[0];
    let daddr = geo.fsb_to_daddr(e.start);
    let mut d = PatchedDevice::new(&img.path);
    d.flip(daddr.bytes() + 1000, 0x01);
    let fs = open(d).unwrap();
    match xfskit::attr::list(&fs, &al) {
        Err(Error::BadCrc { .. }) => {}
        other => panic!("expected BadCrc in the attr leaf, got {other:?}"),
    }
    let ar = lookup(&clean, "attrremote");
    let map = extents(&clean, &ar, Fork::Attr).unwrap();
    // The value lives after the leaf block (attr fork block 1 onwards).
    let remote = xfskit::inode::lookup(&map, 1).expect("remote value block mapped");
    let fsb = xfskit::geometry::FsBlock(remote.start.0 + (1 - remote.offset));
    let daddr = geo.fsb_to_daddr(fsb);
    let mut d = PatchedDevice::new(&img.path);
    d.flip(daddr.bytes() + 100, 0x01);
    let fs = open(d).unwrap();
    expect_badcrc(
        xfskit::attr::list(&fs, &ar),
        "remote attribute value block",
        Location::Daddr(daddr.0),
    );

    // Remote symlink block.
    let ll = lookup(&clean, "longlink");
    let e = extents(&clean, &ll, Fork::Data).unwrap()[0];
    let daddr = geo.fsb_to_daddr(e.start);
    let mut d = PatchedDevice::new(&img.path);
    d.flip(daddr.bytes() + 60, 0x01);
    let fs = open(d).unwrap();
    expect_badcrc(
        xfskit::symlink::read_link(&fs, &ll),
        "remote symlink block",
        Location::Daddr(daddr.0),
    );

    let _ = (bs, Ino(0));
}

/// A tiny deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_metadata_mutations_never_panic() {
    let Some(img) = image() else { return };
    let clean = open(PatchedDevice::new(&img.path)).unwrap();
    let geo = clean.geometry().clone();
    // Metadata regions: AG 0 headers, every inode of the tree, fork blocks of
    // directories, attr forks and symlinks. (offset, len, crc offset)
    let mut targets: Vec<(u64, usize, usize)> =
        vec![(0, 512, 224), (512, 512, 216), (1024, 512, 312)];
    let root = clean.root().unwrap();
    let mut inos = vec![root.ino];
    for e in xfskit::dir::read_dir(&clean, &root).unwrap() {
        inos.push(e.ino);
    }
    for ino in inos {
        let inode = clean.inode(ino).unwrap();
        targets.push((geo.ino_to_bytes(ino), geo.inode_size as usize, 100));
        let meta = inode.file_type != xfskit::inode::FileType::File;
        if meta {
            for e in extents(&clean, &inode, Fork::Data).unwrap().iter().take(8) {
                targets.push((
                    geo.fsb_to_daddr(e.start).bytes(),
                    geo.block_size as usize,
                    4,
                ));
            }
        }
        if inode.has_attr_fork() {
            for e in extents(&clean, &inode, Fork::Attr).unwrap().iter().take(4) {
                targets.push((
                    geo.fsb_to_daddr(e.start).bytes(),
                    geo.block_size as usize,
                    12,
                ));
            }
        }
    }
    let iterations: u64 = std::env::var("XFSKIT_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0, 0);
    for it in 0..iterations {
        let (off, len, crc) = targets[(rng.next() % targets.len() as u64) as usize];
        let mut d = PatchedDevice::new(&img.path);
        for _ in 0..1 + rng.next() % 4 {
            let at = rng.next() % len as u64;
            d.flip(off + at, 1 << (rng.next() % 8));
        }
        if rng.next().is_multiple_of(2) {
            d.restamp(off, len, crc);
        }
        let start = std::time::Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open(d).and_then(|fs| walk_all(&fs))
        }));
        match r {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("iteration {it}: panic on a mutation of {off}+{len}"),
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "iteration {it} took {:?}",
            start.elapsed()
        );
    }
    println!("{iterations} mutations: {ok} still readable, {err} refused with an error");
    assert!(err > 0, "no mutation was detected at all");
}

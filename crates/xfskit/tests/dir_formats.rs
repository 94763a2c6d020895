//! Directory reading against real filesystems: mkfs.xfs images populated
//! through the kernel, then listed, looked up and compared with what the
//! kernel reported. Needs root (loop mounts); otherwise prints SKIP.

mod dir_common;

use dir_common::{
    cannot_run, ino_of, kernel_listing, long_name, mkfs_mounted, populate, xfs_db, Image,
};
use std::collections::BTreeSet;
use xfskit::buf::verify::Verifier;
use xfskit::dir::{self, data::DirMap, lookup as dlookup};
use xfskit::inode::ForkFormat;
use xfskit::{Fs, Ino, OpenOptions};

const SIZES: [usize; 5] = [3, 50, 500, 5000, 20000];

/// The directory form the library sees.
fn form(fs: &Fs, ino: u64) -> &'static str {
    let inode = fs.inode(Ino(ino)).expect("dir inode");
    match inode.format {
        ForkFormat::Local => return "shortform",
        ForkFormat::Btree => return "btree",
        _ => {}
    }
    let map = DirMap::new(fs, &inode).expect("dir map");
    let leaf = map.leaf_first_db();
    if !map.is_mapped(leaf) {
        return "block";
    }
    let magics = [
        dlookup::DIR3_LEAF1_MAGIC,
        dlookup::DIR3_LEAFN_MAGIC,
        dlookup::DA3_NODE_MAGIC,
    ];
    let b = map
        .read(
            leaf,
            &Verifier::Da3 {
                magics: &magics,
                owner: ino,
            },
        )
        .expect("leaf block");
    if u16::from_be_bytes([b[8], b[9]]) == dlookup::DIR3_LEAF1_MAGIC {
        "leaf"
    } else {
        "node"
    }
}

/// core.format as xfs_db prints it ("local", "extents", "btree").
fn db_format(img: &Image, ino: u64) -> String {
    let out = xfs_db(img, &[format!("inode {ino}"), "print core.format".into()]);
    out.split('(')
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or("?")
        .to_string()
}

/// A directory's path, inode and kernel listing.
type DirRecord = (String, u64, Vec<(Vec<u8>, u64)>);

struct Recorded {
    dirs: Vec<DirRecord>,
    links: Vec<(String, u64, Vec<u8>)>,
}

fn build(img: &Image) -> Recorded {
    let mut dirs = Vec::new();
    for n in SIZES {
        let rel = format!("d{n}");
        let p = img.mnt.join(&rel);
        populate(&p, n);
        // Fragment the big directories: interleave file data with directory
        // growth so the directory's extents cannot merge (btree form).
        if n == 20000 {
            for i in (0..n).step_by(4) {
                std::fs::write(p.join(long_name(i)), b"data").expect("write");
            }
            let sub = p.join("sub");
            std::fs::create_dir(&sub).expect("subdir");
            populate(&sub, 3);
        }
        dirs.push((rel, ino_of(&p), kernel_listing(&p)));
    }
    let sub = img.mnt.join("d20000/sub");
    dirs.push(("d20000/sub".into(), ino_of(&sub), kernel_listing(&sub)));
    // Short names stay inline in the inode (shortform).
    let sf = img.mnt.join("sf");
    std::fs::create_dir(&sf).expect("mkdir sf");
    for name in ["a", "bb", "ccc"] {
        std::fs::File::create(sf.join(name)).expect("create");
    }
    std::fs::create_dir(sf.join("subdir")).expect("mkdir");
    dirs.push(("sf".into(), ino_of(&sf), kernel_listing(&sf)));
    let mut links = Vec::new();
    for (name, len) in [
        ("short", 10usize),
        ("mid", 300),
        ("long", 1000),
        ("max", 1023),
    ] {
        let target: String = (0..len)
            .map(|i| {
                if i % 50 == 49 {
                    '/'
                } else {
                    (b'a' + (i % 26) as u8) as char
                }
            })
            .collect();
        let p = img.mnt.join(format!("link-{name}"));
        std::os::unix::fs::symlink(&target, &p).expect("symlink");
        links.push((format!("link-{name}"), ino_of(&p), target.into_bytes()));
    }
    dirs.push((String::new(), ino_of(&img.mnt), kernel_listing(&img.mnt)));
    Recorded { dirs, links }
}

fn check(tag: &str, args: &[&str]) -> BTreeSet<&'static str> {
    let mut img = mkfs_mounted(tag, args);
    let rec = build(&img);
    img.umount();
    let fs = Fs::open(&img.path, &OpenOptions::default()).expect("open");
    let mut forms = BTreeSet::new();
    for (rel, ino, want) in &rec.dirs {
        let inode = fs
            .lookup_path(rel.as_bytes())
            .unwrap_or_else(|e| panic!("{tag}: lookup_path {rel}: {e}"));
        assert_eq!(
            inode.ino.0, *ino,
            "{tag}: {rel} resolved to the wrong inode"
        );
        let entries =
            dir::read_dir(&fs, &inode).unwrap_or_else(|e| panic!("{tag}: read_dir {rel}: {e}"));
        let mut got: Vec<(Vec<u8>, u64)> =
            entries.iter().map(|e| (e.name.clone(), e.ino.0)).collect();
        got.sort();
        assert_eq!(got.len(), want.len(), "{tag}: {rel}: entry count");
        assert!(
            got == *want,
            "{tag}: {rel}: listing differs from the kernel's"
        );
        // Cookies strictly increase, and resuming after one continues there.
        assert!(
            entries.windows(2).all(|w| w[0].cookie < w[1].cookie),
            "{tag}: {rel}: cookies not increasing"
        );
        if entries.len() > 2 {
            let mid = entries.len() / 2;
            let mut rest = Vec::new();
            dir::for_each_entry(&fs, &inode, entries[mid].cookie, &mut |e| {
                rest.push(e);
                true
            })
            .expect("resume");
            assert_eq!(
                rest,
                entries[mid + 1..],
                "{tag}: {rel}: resume after a cookie"
            );
        }
        // Hashed lookups agree with the listing.
        let step = (want.len() / 300).max(1);
        for (name, ino) in want.iter().step_by(step) {
            let got = dir::lookup(&fs, &inode, name)
                .unwrap_or_else(|e| panic!("{tag}: lookup in {rel}: {e}"));
            assert_eq!(
                got,
                Some(Ino(*ino)),
                "{tag}: {rel}: lookup {}",
                String::from_utf8_lossy(name)
            );
        }
        for missing in [
            &b"no-such-entry"[..],
            b"entry-999999-x",
            long_name(want.len() + 7).as_bytes(),
        ] {
            assert_eq!(
                dir::lookup(&fs, &inode, missing).expect("lookup missing"),
                None,
                "{tag}: {rel}: phantom entry"
            );
        }
        let parent = dir::parent(&fs, &inode).expect("parent");
        let up = fs
            .lookup_path(format!("{rel}/..").as_bytes())
            .expect("dotdot");
        assert_eq!(parent, up.ino, "{tag}: {rel}: parent");
        let f = form(&fs, *ino);
        let dbf = db_format(&img, *ino);
        let want_db = match f {
            "shortform" => "local",
            "btree" => "btree",
            _ => "extents",
        };
        assert_eq!(dbf, want_db, "{tag}: {rel}: xfs_db format vs ours ({f})");
        println!("{tag}: {rel:>10}: {:>5} entries, {f} ({dbf})", want.len());
        forms.insert(f);
    }
    for (name, ino, target) in &rec.links {
        let inode = fs
            .lookup_path(format!("/{name}").as_bytes())
            .expect("link lookup");
        assert_eq!(inode.ino.0, *ino);
        let got = xfskit::symlink::read_link(&fs, &inode)
            .unwrap_or_else(|e| panic!("{tag}: {name}: {e}"));
        assert!(got == *target, "{tag}: {name}: target differs");
        let remote = inode.format != ForkFormat::Local;
        assert_eq!(
            remote,
            target.len() > 300,
            "{tag}: {name}: unexpected symlink format {:?}",
            inode.format
        );
    }
    // Errors for bad paths.
    assert!(matches!(
        fs.lookup_path(b"/d3/nope"),
        Err(xfskit::Error::NotFound(_))
    ));
    let file = format!("/d3/{}/x", long_name(0));
    assert!(matches!(
        fs.lookup_path(file.as_bytes()),
        Err(xfskit::Error::NotDir(_))
    ));
    forms
}

#[test]
fn all_formats_match_kernel_listing() {
    if let Some(why) = cannot_run() {
        xfskit_testkit::skip("all_formats_match_kernel_listing", &why);
        return;
    }
    let configs: [(&str, &[&str]); 4] = [
        ("b4k", &[]),
        ("b1k", &["-b", "size=1024"]),
        ("n64k", &["-n", "size=65536"]),
        ("b1k-n8k", &["-b", "size=1024", "-n", "size=8192"]),
    ];
    let mut all = BTreeSet::new();
    for (tag, args) in configs {
        let forms = check(tag, args);
        println!("{tag}: forms reached {forms:?}");
        all.extend(forms);
    }
    for f in ["shortform", "block", "leaf", "node", "btree"] {
        assert!(
            all.contains(f),
            "no directory reached the {f} form: {all:?}"
        );
    }
}

//! `check` against real filesystems: clean images made by mkfs.xfs and
//! populated through the kernel must have no problems (and xfs_repair -n
//! must agree); each corruption of a copy must be found by both.
//! Needs root (loop mounts); otherwise prints SKIP.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{be32, can_mount, make_image, rd, wr, write_fragmented, Scratch};
use xfskit::check::{check, CheckOptions, CheckReport};
use xfskit::geometry::{AgBlock, AgNumber};
use xfskit::inode::{self, Fork};
use xfskit::{Fs, Ino, OpenOptions};

fn populate(mnt: &Path) {
    let p = |s: &str| mnt.join(s);
    std::fs::create_dir_all(p("a/b/c")).expect("mkdir");
    std::fs::create_dir_all(p("blk")).expect("mkdir");
    for i in 0..50 {
        std::fs::write(p(&format!("blk/f{i}")), format!("file {i}\n")).expect("write");
    }
    std::fs::create_dir_all(p("many")).expect("mkdir");
    for i in 0..400 {
        std::fs::write(p(&format!("many/entry-with-a-longer-name-{i}")), b"").expect("write");
    }
    std::fs::write(p("a/data"), vec![7u8; 3 << 20]).expect("write");
    std::fs::hard_link(p("a/data"), p("a/b/hard")).expect("link");
    std::os::unix::fs::symlink("a/data", p("sym")).expect("symlink");
    write_fragmented(&p("frag"), 400, 4096);
    let big = "v".repeat(3000);
    for f in ["a/data", "frag", "blk"] {
        let st = Command::new("setfattr")
            .args(["-n", "user.big", "-v", &big])
            .arg(p(f))
            .status()
            .expect("setfattr");
        assert!(st.success());
    }
    for i in 0..40 {
        let st = Command::new("setfattr")
            .args(["-n", &format!("user.k{i}"), "-v", "x"])
            .arg(p("a/b/c"))
            .status()
            .expect("setfattr");
        assert!(st.success());
    }
    // Free some inodes so chunks have free slots after used ones.
    for i in (0..400).step_by(3) {
        std::fs::remove_file(p(&format!("many/entry-with-a-longer-name-{i}"))).expect("rm");
    }
}

fn run_check(img: &Path) -> CheckReport {
    let fs = Fs::open(img, &OpenOptions::default()).expect("open");
    check(
        &fs,
        &CheckOptions {
            threads: 4,
            progress: None,
            ..Default::default()
        },
    )
    .expect("check runs")
}

fn repair_n(img: &Path) -> (bool, String) {
    let o = Command::new("xfs_repair")
        .arg("-n")
        .arg(img)
        .output()
        .expect("xfs_repair");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

fn show(r: &CheckReport) -> String {
    r.problems.iter().map(|p| format!("  {p}\n")).collect()
}

#[test]
fn clean_images_have_no_problems() {
    if !can_mount("clean_images_have_no_problems") {
        return;
    }
    let sets: [&[&str]; 3] = [
        &[],
        &["-m", "finobt=0,reflink=0", "-i", "sparse=0"],
        &["-b", "size=1024", "-m", "rmapbt=1", "-n", "size=8192"],
    ];
    for args in sets {
        let s = Scratch::new("check-clean");
        let img = make_image(&s, args, populate);
        let r = run_check(&img);
        assert!(r.is_clean(), "mkfs {args:?}: problems:\n{}", show(&r));
        println!("mkfs {args:?}: {:?}", r.stats);
        assert!(
            r.stats.inodes > 300 && r.stats.directories >= 6,
            "{:?}",
            r.stats
        );
        let (ok, out) = repair_n(&img);
        assert!(ok, "xfs_repair -n not clean for {args:?}:\n{out}");
    }
}

/// Reads `len` bytes at `off`, lets `f` change them, restamps the CRC at `crc` and writes back.
fn patch(img: &Path, off: u64, len: usize, crc: Option<usize>, f: impl FnOnce(&mut [u8])) {
    let mut b = rd(img, off, len);
    f(&mut b);
    if let Some(c) = crc {
        xfs_format::crc::stamp(&mut b, c);
    }
    wr(img, off, &b);
}

struct Case {
    name: &'static str,
    /// A problem's `what` or detail must contain this.
    expect: &'static str,
}

/// Corrupts `img` for case `name`, using the engine to find structures.
fn corrupt(img: &Path, name: &str) {
    let fs = Fs::open(img, &OpenOptions::default()).expect("open");
    let geo = fs.geometry().clone();
    let bs = u64::from(geo.block_size);
    let ss = geo.sect_size as usize;
    let agf = rd(img, u64::from(geo.sect_size), ss);
    let agi = rd(img, 2 * u64::from(geo.sect_size), ss);
    let lookup = |path: &str| -> Ino {
        let mut ino = geo.root_ino;
        for c in path.split('/') {
            let d = fs.inode(ino).expect("dir");
            ino = xfskit::dir::lookup(&fs, &d, c.as_bytes())
                .expect("lookup")
                .expect("exists");
        }
        ino
    };
    match name {
        "inobt_crc" => {
            let root = u64::from(be32(&agi, 20));
            patch(img, root * bs + 200, 1, None, |b| b[0] ^= 0x5a);
        }
        "agf_freeblks" => patch(img, u64::from(geo.sect_size), ss, Some(216), |b| {
            let v = be32(b, 52) + 7;
            b[52..56].copy_from_slice(&v.to_be_bytes());
        }),
        "bnobt_crosslink" => {
            let data = fs.inode(lookup("a/data")).expect("inode");
            let ext = inode::extents(&fs, &data, Fork::Data).expect("extents");
            let (agno, agbno) = geo.fsb_split(ext[0].start);
            let agf_off = geo.agb_to_daddr(agno, AgBlock(0)).bytes() + u64::from(geo.sect_size);
            let agf = rd(img, agf_off, ss);
            assert_eq!(be32(&agf, 28), 1, "bnobt is a single leaf");
            let root = geo.agb_to_daddr(agno, AgBlock(be32(&agf, 16))).bytes();
            // Make the first free extent start inside the file's first extent.
            patch(img, root, bs as usize, Some(52), |b| {
                let len = be32(b, 60);
                b[56..60].copy_from_slice(&(agbno.0 + 1).to_be_bytes());
                b[60..64].copy_from_slice(&len.min(4).to_be_bytes());
            });
        }
        "nlink" => {
            let ino = lookup("a/data");
            patch(
                img,
                geo.ino_to_bytes(ino),
                geo.inode_size as usize,
                Some(100),
                |b| {
                    let v = be32(b, 16) + 1;
                    b[16..20].copy_from_slice(&v.to_be_bytes());
                },
            );
        }
        "dirent_free" => {
            let dir = fs.inode(lookup("blk")).expect("dir");
            let target = lookup("blk/f7");
            // A free inode in the same chunk: zero mode, valid magic.
            let chunk0 = target.0 & !63;
            let free = (chunk0..chunk0 + 64)
                .map(Ino)
                .find(|&i| {
                    let r = rd(img, geo.ino_to_bytes(i), 4);
                    r[0..2] == [0x49, 0x4e] && r[2..4] == [0, 0]
                })
                .expect("a free inode in the chunk");
            let ext = inode::extents(&fs, &dir, Fork::Data).expect("dir extents");
            let off = geo.fsb_to_daddr(ext[0].start).bytes();
            let dbs = geo.dir_blk_size as usize;
            patch(img, off, dbs, Some(4), |b| {
                let pos = (64..dbs - 4)
                    .step_by(8)
                    .find(|&o| {
                        be32(b, o + 4) as u64 == target.0
                            && b[o + 8] == 2
                            && &b[o + 9..o + 11] == b"f7"
                    })
                    .expect("entry f7 in block 0");
                b[pos..pos + 8].copy_from_slice(&free.0.to_be_bytes());
            });
        }
        "free_inode_crc" => {
            let target = lookup("blk/f7");
            let chunk0 = target.0 & !63;
            let free = (chunk0..chunk0 + 64)
                .map(Ino)
                .find(|&i| {
                    let r = rd(img, geo.ino_to_bytes(i), 4);
                    r[0..2] == [0x49, 0x4e] && r[2..4] == [0, 0]
                })
                .expect("a free inode in the chunk");
            patch(img, geo.ino_to_bytes(free) + 40, 1, None, |b| b[0] ^= 0x10);
        }
        "sb_counters" => patch(img, 0, ss, Some(224), |b| {
            let ic = u64::from_be_bytes(b[128..136].try_into().expect("8")) + 64;
            b[128..136].copy_from_slice(&ic.to_be_bytes());
            let fd = u64::from_be_bytes(b[144..152].try_into().expect("8")) - 10;
            b[144..152].copy_from_slice(&fd.to_be_bytes());
        }),
        _ => panic!("unknown case {name}"),
    }
    let _ = (agf, AgNumber(0));
}

#[test]
fn corruptions_are_found() {
    if !can_mount("corruptions_are_found") {
        return;
    }
    let s = Scratch::new("check-corrupt");
    let img = make_image(&s, &[], populate);
    assert!(run_check(&img).is_clean());
    let cases = [
        Case {
            name: "inobt_crc",
            expect: "inobt block",
        },
        Case {
            name: "agf_freeblks",
            expect: "agf_freeblks",
        },
        Case {
            name: "bnobt_crosslink",
            expect: "cross-linked",
        },
        Case {
            name: "nlink",
            expect: "nlink",
        },
        Case {
            name: "dirent_free",
            // The name is read again when the report is made.
            expect: "entry 'f7' points at inode",
        },
        Case {
            name: "free_inode_crc",
            expect: "free inode",
        },
        Case {
            name: "sb_counters",
            expect: "sb_icount",
        },
    ];
    for c in cases {
        let copy: PathBuf = s.0.join(format!("{}.img", c.name));
        let st = Command::new("cp")
            .arg("--sparse=always")
            .arg(&img)
            .arg(&copy)
            .status()
            .expect("cp");
        assert!(st.success());
        corrupt(&copy, c.name);
        let (ok, out) = repair_n(&copy);
        assert!(!ok, "{}: xfs_repair -n found nothing:\n{out}", c.name);
        let r = run_check(&copy);
        assert!(!r.is_clean(), "{}: check found nothing", c.name);
        assert!(
            r.problems
                .iter()
                .any(|p| p.what.contains(c.expect) || p.detail.contains(c.expect)),
            "{}: no problem mentions {:?}:\n{}",
            c.name,
            c.expect,
            show(&r)
        );
        println!(
            "{}: {} problem(s), first: {}",
            c.name, r.stats.problems_total, r.problems[0]
        );
        let _ = std::fs::remove_file(&copy);
    }
}

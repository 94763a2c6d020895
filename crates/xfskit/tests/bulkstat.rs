//! Compares `xfskit::scan` with the kernel's bulkstat (`xfs_io -c bulkstat`)
//! on images made by mkfs.xfs and filled through a loop mount.
//! Needs root (loop mounts); prints SKIP otherwise.

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;
use xfskit::scan::{self, Bstat, BulkstatOptions};
use xfskit::{Fs, OpenOptions};
use xfskit_testkit::LoopImage;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8 output")
}

fn can_run(test: &str) -> bool {
    if run("id", &["-u"]).trim() != "0" {
        xfskit_testkit::skip(test, "not root, cannot loop-mount XFS images");
        return false;
    }
    for tool in ["mkfs.xfs", "xfs_io"] {
        if Command::new(tool).arg("-V").output().is_err() {
            xfskit_testkit::skip(test, &format!("{tool} is not installed"));
            return false;
        }
    }
    true
}

/// Fills the mounted filesystem with a few thousand inodes of every kind.
fn populate(root: &Path) {
    let w = |p: &Path, len: usize| std::fs::write(p, vec![0x5au8; len]).expect("write");
    let mut xio: Vec<String> = Vec::new();
    for d in 0..80u32 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir(&dir).expect("mkdir");
        for i in 0..40u32 {
            let n = d * 40 + i;
            let p = dir.join(format!("f{i}"));
            match n % 10 {
                0..=3 => w(&p, [0, 1, 100, 4096, 5000, 70_000][(n as usize) % 6]),
                4 => symlink(format!("target-{n}"), &p).expect("symlink"),
                5 => symlink("x".repeat(300 + n as usize % 700), &p).expect("long symlink"),
                6 => std::fs::create_dir(&p).expect("subdir"),
                7 => {
                    // A fragmented file: every other 4 KiB block written.
                    let f = std::fs::File::create(&p).expect("create");
                    for k in 0..(n as u64 % 40) {
                        std::os::unix::fs::FileExt::write_at(&f, &[1u8; 4096], k * 8192)
                            .expect("pwrite");
                    }
                }
                8 => {
                    let kind = ["c", "b", "p"][(n as usize / 10) % 3];
                    let mut args = vec!["-m", "640", p.to_str().expect("utf8"), kind];
                    let (ma, mi) = (format!("{}", n % 300), format!("{}", n * 7 % 250_000));
                    if kind != "p" {
                        args.push(&ma);
                        args.push(&mi);
                    }
                    run("mknod", &args);
                }
                _ => w(&p, 12),
            }
            if n % 10 != 4 && n % 10 != 5 {
                std::fs::set_permissions(
                    &p,
                    std::fs::Permissions::from_mode(
                        [0o644, 0o600, 0o755, 0o4711, 0o1777, 0o2750][(n as usize) % 6],
                    ),
                )
                .expect("chmod");
            }
            std::os::unix::fs::lchown(&p, Some(n % 7 * 1000), Some(n % 5 * 100)).expect("chown");
            let openable = ![4, 5, 8].contains(&(n % 10));
            match if openable { n % 37 } else { 0 } {
                1 => xio.push(format!("-c|chattr +i|{}", p.display())),
                2 => xio.push(format!("-c|chattr +aAdS|{}", p.display())),
                3 if n % 10 == 6 => xio.push(format!("-c|extsize 65536|{}", p.display())),
                4 => xio.push(format!("-c|chproj {}|{}", n, p.display())),
                5 if n % 10 == 6 => xio.push(format!("-c|chattr +Pt|{}", p.display())),
                _ => {}
            }
            if n % 13 == 0 && ![4, 5, 8].contains(&(n % 10)) {
                rustix::fs::setxattr(
                    &p,
                    format!("user.k{n}").as_str(),
                    &vec![7u8; (n as usize * 31) % 3000],
                    rustix::fs::XattrFlags::empty(),
                )
                .expect("setxattr");
            }
        }
        // Free some inodes inside chunks.
        for i in (0..40).step_by(7) {
            let p = dir.join(format!("f{i}"));
            if p.is_dir() {
                std::fs::remove_dir(&p).expect("rmdir");
            } else {
                std::fs::remove_file(&p).expect("unlink");
            }
        }
        std::fs::hard_link(dir.join("f1"), dir.join("hardlink")).expect("link");
    }
    // Enough inodes in one directory (so one AG) for a multi-level inobt
    // with 1 KiB blocks (60 records per leaf).
    let many = root.join("many");
    std::fs::create_dir(&many).expect("mkdir");
    for i in 0..5000 {
        std::fs::File::create(many.join(format!("e{i}"))).expect("create");
    }
    // xfs_io commands are applied file by file.
    assert!(xio.len() > 50);
    for c in xio {
        let parts: Vec<&str> = c.split('|').collect();
        if Path::new(parts[2]).exists() {
            run("xfs_io", &parts);
        }
    }
}

/// Parses `xfs_io -c bulkstat` output: `bs_ino = N` starts a record, then
/// one `\tbs_field = value` line per field.
fn parse_kernel(out: &str) -> BTreeMap<u64, BTreeMap<String, String>> {
    let mut all = BTreeMap::new();
    let mut cur: Option<(u64, BTreeMap<String, String>)> = None;
    for line in out.lines() {
        let Some((k, v)) = line.trim().split_once(" = ") else {
            continue;
        };
        if k == "bs_ino" {
            if let Some((i, m)) = cur.take() {
                all.insert(i, m);
            }
            cur = Some((v.parse().expect("ino"), BTreeMap::new()));
        } else if let Some((_, m)) = cur.as_mut() {
            m.insert(k.to_string(), v.to_string());
        }
    }
    if let Some((i, m)) = cur.take() {
        all.insert(i, m);
    }
    all
}

fn num(s: &str) -> i128 {
    if let Some(h) = s.strip_prefix("0x") {
        i128::from_str_radix(h, 16).expect("hex")
    } else if s.len() > 1 && s.starts_with('0') {
        i128::from_str_radix(&s[1..], 8).expect("octal")
    } else {
        s.parse().expect("decimal")
    }
}

/// xfs_io prints times as `seconds.nanoseconds` with the nanoseconds as a
/// plain integer (not zero-padded).
fn time(s: &str) -> i128 {
    let (sec, nsec) = s.split_once('.').expect("time");
    let sec: i128 = sec.parse().expect("sec");
    let nsec: i128 = nsec.parse().expect("nsec");
    sec * 1_000_000_000 + if sec < 0 { -nsec } else { nsec }
}

fn compare(ours: &Bstat, k: &BTreeMap<String, String>) -> Vec<String> {
    let f = |name: &str| {
        k.get(name)
            .map(|v| num(v))
            .unwrap_or_else(|| panic!("kernel output lacks {name}"))
    };
    let t = |name: &str| time(&k[name]);
    let pairs: [(&str, i128, i128); 21] = [
        ("mode", ours.mode.into(), f("bs_mode")),
        ("nlink", ours.nlink.into(), f("bs_nlink")),
        ("uid", ours.uid.into(), f("bs_uid")),
        ("gid", ours.gid.into(), f("bs_gid")),
        ("rdev", ours.rdev.into(), f("bs_rdev")),
        ("blksize", ours.blksize.into(), f("bs_blksize")),
        ("size", ours.size.into(), f("bs_size")),
        ("blocks", ours.blocks.into(), f("bs_blocks")),
        ("xflags", ours.xflags.into(), f("bs_xflags")),
        ("extents", ours.extents.into(), f("bs_extents64")),
        ("aextents", ours.aextents.into(), f("bs_aextents")),
        ("forkoff", ours.forkoff.into(), f("bs_forkoff")),
        ("gen", ours.gen.into(), f("bs_gen")),
        ("projectid", ours.projectid.into(), f("bs_projectid")),
        (
            "extsize_blks",
            ours.extsize_blks.into(),
            f("bs_extsize_blks"),
        ),
        (
            "cowextsize_blks",
            ours.cowextsize_blks.into(),
            f("bs_cowextsize_blks"),
        ),
        ("atime", ours.atime, t("bs_atime")),
        ("mtime", ours.mtime, t("bs_mtime")),
        ("ctime", ours.ctime, t("bs_ctime")),
        ("btime", ours.btime, t("bs_btime")),
        ("ino", ours.ino.into(), ours.ino.into()),
    ];
    pairs
        .iter()
        .filter(|(_, a, b)| a != b)
        .map(|(n, a, b)| format!("inode {} {n}: ours {a}, kernel {b}", ours.ino))
        .collect()
}

fn check_variant(tag: &str, mkfs_args: &[&str]) {
    let mut s = LoopImage::mkfs(&format!("bulkstat-{tag}"), 300 << 20, mkfs_args);
    s.mount("loop");
    populate(&s.mnt);
    s.umount();
    // A fresh read-only mount: no delayed allocations or cached state,
    // so the kernel reports exactly what is on disk.
    s.mount("loop,ro");
    let kernel = parse_kernel(&run(
        "xfs_io",
        &["-c", "bulkstat", s.mnt.to_str().expect("utf8")],
    ));
    s.umount();
    assert!(
        kernel.len() > 2000,
        "{tag}: kernel reported only {} inodes",
        kernel.len()
    );

    let fs = Fs::open(&s.path, &OpenOptions::default()).expect("open");
    let mut ours: Vec<Bstat> = Vec::new();
    let stats = scan::for_each_batch(&fs, &BulkstatOptions::default(), |b| {
        ours.extend_from_slice(b);
        Ok(())
    })
    .expect("bulkstat");
    assert_eq!(stats.inodes as usize, ours.len());
    assert!(
        ours.windows(2).all(|w| w[0].ino < w[1].ino),
        "{tag}: not in inode order"
    );
    let our_inos: Vec<u64> = ours.iter().map(|b| b.ino).collect();
    let kernel_inos: Vec<u64> = kernel.keys().copied().collect();
    assert_eq!(our_inos, kernel_inos, "{tag}: different inode sets");
    let mut diffs = Vec::new();
    for b in &ours {
        diffs.extend(compare(b, &kernel[&b.ino]));
    }
    assert!(
        diffs.is_empty(),
        "{tag}: {} differences, first: {:#?}",
        diffs.len(),
        &diffs[..diffs.len().min(20)]
    );

    // Every way of running the scan gives the same answer.
    for opts in [
        BulkstatOptions {
            threads: 1,
            batch: 1,
            ..Default::default()
        },
        BulkstatOptions {
            threads: 3,
            batch: 64,
            ..Default::default()
        },
    ] {
        let mut v = Vec::new();
        scan::for_each_batch(&fs, &opts, |b| {
            v.extend_from_slice(b);
            Ok(())
        })
        .expect("bulkstat");
        assert!(v == ours, "{tag}: {opts:?} differs");
    }
    let unordered = std::sync::Mutex::new(Vec::new());
    scan::bulkstat(&fs, &BulkstatOptions::default(), |b| {
        unordered.lock().expect("lock").extend_from_slice(b)
    })
    .expect("bulkstat");
    let mut unordered = unordered.into_inner().expect("lock");
    unordered.sort_by_key(|b| b.ino);
    assert!(unordered == ours, "{tag}: unordered scan differs");

    // --ag and --start-ino select subsets.
    let geo = fs.geometry();
    for ag in 0..geo.ag_count {
        let mut v = Vec::new();
        scan::for_each_batch(
            &fs,
            &BulkstatOptions {
                ag: Some(ag),
                ..Default::default()
            },
            |b| {
                v.extend_from_slice(b);
                Ok(())
            },
        )
        .expect("bulkstat ag");
        let want: Vec<&Bstat> = ours
            .iter()
            .filter(|b| geo.ino_agno(xfskit::Ino(b.ino)).0 == ag)
            .collect();
        assert!(v.iter().eq(want.into_iter()), "{tag}: AG {ag} differs");
    }
    let mid = ours[ours.len() / 2].ino + 1;
    let mut v = Vec::new();
    scan::for_each_batch(
        &fs,
        &BulkstatOptions {
            start_ino: Some(mid),
            ..Default::default()
        },
        |b| {
            v.extend_from_slice(b);
            Ok(())
        },
    )
    .expect("bulkstat start");
    assert!(
        v.iter().eq(ours.iter().filter(|b| b.ino >= mid)),
        "{tag}: start_ino differs"
    );
    assert!(scan::for_each_batch(
        &fs,
        &BulkstatOptions {
            ag: Some(geo.ag_count),
            ..Default::default()
        },
        |_| Ok(())
    )
    .is_err());
    if geo.block_size == 1024 {
        assert!(
            stats.inobt_blocks > u64::from(geo.ag_count) + 1,
            "{tag}: expected a multi-level inobt: {stats:?}"
        );
    }
    println!("{tag}: {} inodes match the kernel; {stats:?}", ours.len());
}

#[test]
fn matches_kernel_bulkstat_default() {
    if can_run("matches_kernel_bulkstat_default") {
        check_variant("default", &[]);
    }
}

#[test]
fn matches_kernel_bulkstat_sparse_1k_blocks() {
    if can_run("matches_kernel_bulkstat_sparse_1k_blocks") {
        check_variant("sparse1k", &["-i", "sparse=1", "-b", "size=1024"]);
    }
}

#[test]
fn matches_kernel_bulkstat_2k_inodes() {
    if can_run("matches_kernel_bulkstat_2k_inodes") {
        check_variant("isize2k", &["-i", "size=2048"]);
    }
}

//! Write filesystems with `xfskit::mkfs` and compare them with what the
//! installed mkfs.xfs (6.1) writes for the same options, UUID and size.
//!
//! Small images are compared whole, byte for byte, except the timestamps and
//! CRCs of the three in-use inodes.  Large sparse images are compared at the
//! start of AG 0, AG 1, the middle AG, the log AG and the last AG (headers and
//! btree roots), the root inode chunk and the first log record.  Images up to
//! 1 TiB are checked with `xfs_repair -n`.  Sizes above 16 TiB need a scratch
//! filesystem that holds such sparse files: `$XFSKIT_SCRATCH`, or (as root) a
//! tmpfs mounted for the test; without either those rows print SKIP.

mod write_common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use write_common::run;

use xfskit::mkfs::{mkfs_with, parse_mkfs_args, MkfsError, Timestamp, WriteOptions};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const TS: Timestamp = Timestamp {
    secs: 1_700_000_000,
    nsec: 0,
};

fn need_tools() {
    for t in ["mkfs.xfs", "xfs_repair", "xfs_db"] {
        assert!(
            Command::new(t).arg("-V").output().is_ok(),
            "{t} (xfsprogs) is required for these tests"
        );
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-mkfs-write-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Panics with every difference found, one row per line, unless none.
fn assert_no_row_differs(errs: &[String]) {
    assert!(
        errs.is_empty(),
        "{} rows differ:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

fn sparse(path: &Path, size: u64) {
    let _ = std::fs::remove_file(path);
    File::create(path).unwrap().set_len(size).unwrap();
}

fn ours(path: &Path, opts: &str) -> Result<xfskit::mkfs::MkfsReport, MkfsError> {
    // The installed mkfs.xfs is 6.1: its defaults (a row's own --defaults,
    // later, wins).
    let mut args: Vec<String> = vec!["--defaults".into(), "6.1".into()];
    args.extend(opts.split_whitespace().map(String::from));
    args.extend([
        "-m".into(),
        format!("uuid={UUID}"),
        path.display().to_string(),
    ]);
    let o = parse_mkfs_args(&args)?;
    mkfs_with(
        path,
        &o,
        &WriteOptions {
            timestamp: Some(TS),
            progress: None,
        },
    )
}

/// The geometry summary mkfs.xfs 6.15 prints (`-N`: nothing written) for
/// `opts` on `r`, against the one xfskit printed for the same options on
/// `o`: None when equal (the image names aside).
fn summary_diff_615(
    opts: &str,
    r: &Path,
    report: &xfskit::mkfs::MkfsReport,
    o: &Path,
) -> Option<String> {
    let mut args: Vec<&str> = opts.split_whitespace().collect();
    let p = r.display().to_string();
    args.extend(["-f", "-N", &p]);
    let out = write_common::command_615_qa("mkfs.xfs")
        .args(&args)
        .output()
        .unwrap();
    // Only the summary's lines (a config file adds a line of its own).
    let theirs: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            [
                "meta-data=",
                "data     =",
                "naming   =",
                "log      =",
                "realtime =",
                "         =",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(|l| format!("{}\n", l.replacen(&p, "IMG", 1)))
        .collect();
    // Without a feature mkfs.xfs 6.1 lacks, xfskit prints 6.1's form: the
    // same but for 6.15's lines of those features, realtime groups and zones.
    let newer = ["exchange=1", "metadir=1", "parent=1"]
        .iter()
        .any(|f| theirs.contains(f));
    let theirs = if newer {
        theirs
    } else {
        theirs
            .lines()
            .filter(|l| {
                !["exchange=", "rgcount=", "zoned="]
                    .iter()
                    .any(|f| l.contains(f))
            })
            .map(|l| format!("{}\n", l.trim_end_matches(", parent=0")))
            .collect()
    };
    let ours = xfskit::mkfs::geometry_summary(&report.geometry).replacen(
        &o.display().to_string(),
        "IMG",
        1,
    );
    (theirs != ours)
        .then(|| format!("summary differs:\n--- mkfs.xfs 6.15 -N\n{theirs}--- xfskit\n{ours}"))
}

fn reference(path: &Path, opts: &str) {
    let mut args: Vec<&str> = opts.split_whitespace().collect();
    let u = format!("uuid={UUID}");
    let p = path.display().to_string();
    args.extend(["-q", "-m", &u, &p]);
    let (ok, out) = run("mkfs.xfs", &args);
    assert!(ok, "mkfs.xfs {opts} failed: {out}");
}

fn read(f: &File, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).unwrap();
    b
}

struct Sb {
    bs: u64,
    agblocks: u64,
    agcount: u64,
    logstart: u64,
    rootino: u64,
    isize: u64,
    inopblog: u32,
    agblklog: u32,
    logblocks: u64,
    metadir: bool,
}

fn sb(f: &File) -> Sb {
    let s = read(f, 0, 512);
    let u32at = |o: usize| u64::from(u32::from_be_bytes(s[o..o + 4].try_into().unwrap()));
    let u64at = |o: usize| u64::from_be_bytes(s[o..o + 8].try_into().unwrap());
    Sb {
        bs: u32at(4),
        logstart: u64at(48),
        rootino: u64at(56),
        agblocks: u32at(84),
        agcount: u32at(88),
        isize: u64::from(u16::from_be_bytes([s[104], s[105]])),
        inopblog: u32::from(s[123]),
        agblklog: u32::from(s[124]),
        logblocks: u32at(96),
        metadir: u32at(216) & 0x100 != 0,
    }
}

/// Which mkfs.xfs made the reference image.
#[derive(Clone, Copy, PartialEq)]
enum Ref {
    /// Debian's mkfs.xfs 6.1.
    Installed,
    /// mkfs.xfs 6.15 beside the project: it gives every inode of the root
    /// chunk but the root a random generation, so those are masked too
    /// (with the CRCs of the whole chunk).
    V615,
}

/// Is byte `off` a timestamp or CRC of one of the three in-use inodes (or,
/// for mkfs.xfs 6.15, a generation or CRC of any inode of the chunk)?
fn masked(sb: &Sb, off: u64, r: Ref) -> bool {
    let chunk = (sb.rootino >> sb.inopblog) * sb.bs;
    let n = if r == Ref::V615 { 64 } else { 3 };
    if off < chunk || off >= chunk + n * sb.isize {
        return false;
    }
    let i = (off - chunk) / sb.isize;
    let b = (off - chunk) % sb.isize;
    // mkfs.xfs 6.1 leaves the access time alone; 6.15 stamps it too.
    let first = if r == Ref::V615 { 32 } else { 40 };
    let in_use = i < 3 && ((first..56).contains(&b) || (144..152).contains(&b));
    let gen = r == Ref::V615 && (92..96).contains(&b);
    in_use || gen || (100..104).contains(&b)
}

/// For mkfs.xfs 6.15: is byte `off` (at `rel` in the reference bytes `x`,
/// read from an inode-aligned place) a timestamp, generation or CRC of any
/// v3 inode, or the generation in a parent pointer (the parent's random
/// generation) of a short-form attribute fork?
fn masked_615_inode(x: &[u8], base: u64, rel: usize, isize: u64) -> bool {
    let off = base + rel as u64;
    let start = (rel as u64 - (off % isize)) as usize;
    let Some(ino) = x.get(start..start + isize as usize) else {
        return false;
    };
    if &ino[..2] != b"IN" || ino[4] != 3 {
        return false;
    }
    let b = rel - start;
    if (32..56).contains(&b) || (92..104).contains(&b) || (144..152).contains(&b) {
        return true;
    }
    // A local attribute fork whose first entry is a parent pointer.
    let (forkoff, aformat) = (usize::from(ino[82]) * 8, ino[83]);
    if forkoff == 0 || aformat != 1 {
        return false;
    }
    let a = 176 + forkoff;
    let (namelen, flags) = (usize::from(ino[a + 4]), ino[a + 6]);
    let gen = a + 7 + namelen + 8;
    flags & 8 != 0 && (gen..gen + 4).contains(&b)
}

/// Compare `[off, off+len)` of both images; returns a description of the
/// first differences.
fn cmp_region(
    a: &File,
    b: &File,
    sb: &Sb,
    what: &str,
    (off, len): (u64, u64),
    r: Ref,
) -> Option<String> {
    const CHUNK: u64 = 8 << 20;
    let mut pos = off;
    while pos < off + len {
        let n = CHUNK.min(off + len - pos) as usize;
        let (x, y) = (read(a, pos, n), read(b, pos, n));
        if x != y {
            let d: Vec<u64> = (0..n as u64)
                .filter(|&i| {
                    x[i as usize] != y[i as usize]
                        && !masked(sb, pos + i, r)
                        && !(r == Ref::V615 && masked_615_inode(&x, pos, i as usize, sb.isize))
                })
                .take(8)
                .map(|i| pos + i)
                .collect();
            if !d.is_empty() {
                return Some(format!("{what}: bytes differ at {d:?}"));
            }
        }
        pos += n as u64;
    }
    None
}

fn compare(r: &Path, o: &Path, whole: bool, rf: Ref) -> Vec<String> {
    let (a, b) = (File::open(r).unwrap(), File::open(o).unwrap());
    let s = sb(&a);
    let mut errs = Vec::new();
    if whole {
        let len = a.metadata().unwrap().len();
        errs.extend(cmp_region(&a, &b, &s, "image", (0, len), rf));
        return errs;
    }
    let log_ag = s.logstart >> s.agblklog;
    let mut ags = vec![0, 1, (s.agcount - 1) / 2, log_ag, s.agcount - 1];
    ags.dedup();
    for ag in ags {
        let n = (16 * s.bs).min(s.agblocks * s.bs);
        errs.extend(cmp_region(
            &a,
            &b,
            &s,
            &format!("AG {ag} headers"),
            (ag * s.agblocks * s.bs, n),
            rf,
        ));
    }
    let chunk = (s.rootino >> s.inopblog) * s.bs;
    errs.extend(cmp_region(
        &a,
        &b,
        &s,
        "root inode chunk",
        (chunk, 64 * s.isize),
        rf,
    ));
    let log = (log_ag * s.agblocks + (s.logstart & ((1 << s.agblklog) - 1))) * s.bs;
    errs.extend(cmp_region(&a, &b, &s, "log start", (log, 256 * 1024), rf));
    if s.metadir {
        // The metadata directory's second chunk follows the log's end
        // (past the AG's free list and an alignment).
        let end = log + s.logblocks * s.bs;
        errs.extend(cmp_region(
            &a,
            &b,
            &s,
            "after the log",
            (end, 512 * 1024),
            rf,
        ));
    }
    errs
}

fn repair_clean(path: &Path) -> Result<(), String> {
    let (ok, out) = run("xfs_repair", &["-n", &path.display().to_string()]);
    if ok {
        Ok(())
    } else {
        Err(format!("xfs_repair -n {}: {out}", path.display()))
    }
}

/// One row: make both images, compare, optionally repair-check ours.
fn row(dir: &Path, size: u64, opts: &str, whole: bool, repair: bool) -> Vec<String> {
    let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
    sparse(&r, size);
    sparse(&o, size);
    reference(&r, opts);
    let mut errs = match ours(&o, opts) {
        Ok(_) => compare(&r, &o, whole, Ref::Installed),
        Err(e) => vec![format!("xfskit mkfs failed: {e}")],
    };
    if repair && errs.is_empty() {
        errs.extend(repair_clean(&o).err());
    }
    let _ = std::fs::remove_file(&r);
    let _ = std::fs::remove_file(&o);
    errs.into_iter()
        .map(|e| format!("size {size} [{opts}]: {e}"))
        .collect()
}

const G: u64 = 1 << 30;
const T: u64 = 1 << 40;
const P: u64 = 1 << 50;

/// (size, options, compare whole image, run xfs_repair)
const SMALL: &[(u64, &str, bool, bool)] = &[
    (300 << 20, "", true, true),
    (G, "", true, true),
    (G, "-m rmapbt=1", true, true),
    (G, "-s size=4096", true, true),
    (2 * G, "-d su=64k,sw=4", true, true),
    (G, "-b size=1024", true, true),
    (2 * G, "-b size=65536", true, true),
    (G, "-i size=2048 -m reflink=0,bigtime=0", true, true),
    (5 * G, "-m finobt=0 -L hello", false, true),
    (4 * G, "-d su=256k,sw=2 -l su=256k", false, true),
    (G, "-l sunit=64 -s size=4096", true, true),
    (G, "-i sparse=0 -m inobtcount=0", true, true),
    (3 * G, "-d agcount=7", false, true),
    (G, "-i nrext64=1", true, true),
    (2 * G, "-n size=65536 -i perblock=8", true, true),
    (G, "-m rmapbt=1,reflink=0 -d su=32k,sw=8", true, true),
    (G, "-i sparse=0 -b size=65536", true, true),
    (G, "-m reflink=0,bigtime=0,inobtcount=0", true, true),
    (600 << 20, "-d agcount=2 -b size=2048", true, true),
    (100 * G, "", false, true),
    (T, "", false, true),
    (T, "-m rmapbt=1 -d su=1m,sw=4", false, true),
    (8 * T, "-i size=1024", false, false),
];

#[test]
fn headers_match_mkfs_xfs_small() {
    need_tools();
    let dir = tmpdir("small");
    let mut errs = Vec::new();
    for &(size, opts, whole, repair) in SMALL {
        errs.extend(row(&dir, size, opts, whole, repair));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_row_differs(&errs);
}

/// A directory on a filesystem that holds sparse files beyond 16 TiB.
struct BigScratch {
    dir: PathBuf,
    mounted: bool,
}

impl BigScratch {
    fn get() -> Option<BigScratch> {
        if let Ok(d) = std::env::var("XFSKIT_SCRATCH") {
            let dir = PathBuf::from(d).join(format!("mkfs-write-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            return Some(BigScratch {
                dir,
                mounted: false,
            });
        }
        if !is_root() {
            return None;
        }
        let dir = tmpdir("bigtmpfs");
        let (ok, out) = run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=12g",
                "xfskit-test",
                &dir.display().to_string(),
            ],
        );
        if !ok {
            eprintln!("cannot mount tmpfs: {out}");
            return None;
        }
        Some(BigScratch { dir, mounted: true })
    }
}

impl Drop for BigScratch {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run("umount", &[&self.dir.display().to_string()]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn headers_match_mkfs_xfs_huge() {
    need_tools();
    let Some(s) = BigScratch::get() else {
        xfskit_testkit::skip(
            "headers_match_mkfs_xfs_huge",
            "set XFSKIT_SCRATCH or run as root (tmpfs)",
        );
        return;
    };
    let mut errs = Vec::new();
    for (size, opts) in [
        (16 * T, ""),
        (100 * T, "-m rmapbt=1"),
        (P, ""),
        (16 * P, ""),
    ] {
        errs.extend(row(&s.dir, size, opts, false, false));
    }
    assert_no_row_differs(&errs);
}

#[test]
fn root_inode_prints_like_mkfs_xfs() {
    need_tools();
    let dir = tmpdir("print");
    let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
    sparse(&r, G);
    sparse(&o, G);
    reference(&r, "");
    ours(&o, "").unwrap();
    let show = |p: &Path, ino: &str| {
        let (ok, out) = run(
            "xfs_db",
            &[
                "-r",
                &p.display().to_string(),
                "-c",
                &format!("inode {ino}"),
                "-c",
                "print",
            ],
        );
        assert!(ok, "{out}");
        out.lines()
            .filter(|l| !(l.contains("time") || l.contains(".crc") || l.contains("crtime")))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for ino in ["128", "129", "130", "131", "191"] {
        assert_eq!(show(&r, ino), show(&o, ino), "inode {ino}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reproducible_with_uuid_and_timestamp() {
    let dir = tmpdir("repro");
    let (a, b) = (dir.join("a.img"), dir.join("b.img"));
    sparse(&a, 2 * G);
    sparse(&b, 2 * G);
    ours(&a, "-m rmapbt=1").unwrap();
    ours(&b, "-m rmapbt=1").unwrap();
    let (fa, fb) = (File::open(&a).unwrap(), File::open(&b).unwrap());
    // Byte-identical, inode times and CRCs included.
    let step = 8usize << 20;
    for i in 0..(2 * G) / step as u64 {
        assert!(
            read(&fa, i * step as u64, step) == read(&fb, i * step as u64, step),
            "chunk {i} differs"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_and_leaves_target_unchanged() {
    let dir = tmpdir("refuse");
    let p = dir.join("t.img");
    // Too small.
    sparse(&p, 100 << 20);
    std::fs::write(&p, b"keep me").unwrap();
    File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    assert!(matches!(ours(&p, "-f"), Err(MkfsError::Geometry(_))));
    assert_eq!(read(&File::open(&p).unwrap(), 0, 7), b"keep me");
    // Bad combination.
    sparse(&p, G);
    assert!(ours(&p, "-m finobt=0,inobtcount=1").is_err());
    // Existing signatures without -f, each left in place.
    let sigs: [(u64, &[u8]); 4] = [
        (1080, &[0x53, 0xef]),
        (0x10040, b"_BHRfS_M"),
        (4086, b"SWAPSPACE2"),
        (512, b"EFI PART"),
    ];
    for (off, magic) in sigs {
        sparse(&p, G);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(magic, off)
            .unwrap();
        assert!(
            matches!(ours(&p, ""), Err(MkfsError::Exists(_))),
            "signature at {off}"
        );
        assert_eq!(read(&File::open(&p).unwrap(), off, magic.len()), magic);
    }
    // With -f it is overwritten; then an existing XFS is refused too.
    ours(&p, "-f").unwrap();
    assert!(matches!(ours(&p, ""), Err(MkfsError::Exists(_))));
    ours(&p, "-f -d agcount=8").unwrap();
    repair_clean(&p).unwrap();
    // Unwritable target: a directory.
    assert!(matches!(
        ours(&dir, ""),
        Err(MkfsError::Io(_)) | Err(MkfsError::Geometry(_))
    ));
    // A missing file is created only with -d size.
    let q = dir.join("new.img");
    assert!(ours(&q, "").is_err());
    assert!(!q.exists());
    ours(&q, "-d size=512m").unwrap();
    assert_eq!(q.metadata().unwrap().len(), 512 << 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dry_run_writes_nothing() {
    let dir = tmpdir("dry");
    let p = dir.join("t.img");
    sparse(&p, G);
    let r = ours(&p, "-N").unwrap();
    assert_eq!(r.stats.write_calls, 0);
    assert!(read(&File::open(&p).unwrap(), 0, 4096)
        .iter()
        .all(|&b| b == 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_mounts_and_writes() {
    need_tools();
    if !is_root() {
        xfskit_testkit::skip("kernel_mounts_and_writes", "needs root for loop mounts");
        return;
    }
    let dir = tmpdir("mount");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    for (size, opts) in [
        (G, ""),
        (2 * G, "-m rmapbt=1 -b size=1024"),
        (3 * G, "-s size=4096 -d su=64k,sw=2"),
    ] {
        let p = dir.join("k.img");
        sparse(&p, size);
        ours(&p, opts).unwrap();
        let (ok, out) = run(
            "mount",
            &[
                "-o",
                "loop",
                &p.display().to_string(),
                &mnt.display().to_string(),
            ],
        );
        assert!(ok, "mount [{opts}]: {out}");
        let data: Vec<u8> = (0..6u32 << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
        let written = (|| -> std::io::Result<()> {
            std::fs::write(mnt.join("a.bin"), &data)?;
            std::fs::create_dir(mnt.join("d"))?;
            std::fs::write(mnt.join("d/b.bin"), &data[..1 << 20])?;
            assert_eq!(std::fs::read(mnt.join("a.bin"))?, data);
            Ok(())
        })();
        let (ok, out) = write_common::umount(&mnt);
        assert!(ok, "umount: {out}");
        written.unwrap();
        repair_clean(&p).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_device_matches_file_target() {
    use xfskit::dev::MemDevice;
    let size = 512u64 << 20;
    let dev = MemDevice::new(size as usize);
    // As ours(): xfsprogs 6.1's defaults.
    let args: Vec<String> = [
        "--defaults",
        "6.1",
        "-m",
        &format!("uuid={UUID}"),
        "-L",
        "mem",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = parse_mkfs_args(&args).unwrap();
    let w = WriteOptions {
        timestamp: Some(TS),
        progress: None,
    };
    let r = xfskit::mkfs::mkfs_device(&dev, &o, &w).unwrap();
    assert!(r.stats.write_calls > 0);
    let dir = tmpdir("mem");
    let (a, b) = (dir.join("mem.img"), dir.join("file.img"));
    std::fs::write(&a, dev.to_bytes()).unwrap();
    sparse(&b, size);
    ours(&b, "-L mem").unwrap();
    assert!(
        std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
        "memory and file images differ"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows made with the feature defaults of newer xfsprogs: (size, options
/// for mkfs.xfs 6.15, options for xfskit, compare whole image).
const NEWER: &[(u64, &str, &str, bool)] = &[
    (
        G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1",
        "--defaults 6.18",
        true,
    ),
    (
        300 << 20,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1",
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1",
        true,
    ),
    (
        5 * G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1 -i size=1024",
        "--defaults 6.18 -i size=1024",
        false,
    ),
    (G, "-m rmapbt=1 -i nrext64=1", "--defaults 6.12", true),
    // 64 KiB blocks: the default log is the reservation minimum, above
    // the 64 MiB default (here 1127 blocks with parent pointers, 2570
    // without).
    (
        16 * G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1 -b size=65536",
        "--defaults 6.18 -b size=65536",
        false,
    ),
    (
        16 * G,
        "-m rmapbt=1 -i nrext64=1 -b size=65536",
        "--defaults 6.12 -b size=65536",
        false,
    ),
    // 64 KiB blocks in AGs of 4,096 blocks: free-space btrees that can
    // never pass one level, where xfsprogs 6.8 and later keep a shorter
    // free list than 6.1 (so the root inode comes earlier).
    (
        G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1 -b size=65536",
        "--defaults 6.18 -b size=65536",
        true,
    ),
    (
        G,
        "-m rmapbt=1 -i nrext64=1 -b size=65536",
        "--defaults 6.12 -b size=65536",
        true,
    ),
    // mkfs.xfs 6.15's own defaults are those of the 6.12 line.
    (
        G,
        "-n parent=1 -m reflink=0",
        "--defaults 6.12 -n parent=1 -m reflink=0",
        true,
    ),
    (
        G,
        "-n parent=1 -i exchange=0",
        "--defaults 6.12 -n parent=1 -i exchange=0",
        true,
    ),
    (
        100 * G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1",
        "--defaults 6.18",
        false,
    ),
];

/// The headers xfskit writes with `--defaults 6.18`, `-n parent=1` and
/// `-i exchange=1` equal mkfs.xfs 6.15's, and xfs_repair 6.15 finds them
/// clean; `-c options=` reads mkfs.xfs's own config file.
#[test]
fn headers_match_mkfs_xfs_615_newer_defaults() {
    need_tools();
    if write_common::skip_without_615("headers_match_mkfs_xfs_615_newer_defaults") {
        return;
    }
    let dir = tmpdir("newer");
    let conf = write_common::xfsprogs_615()
        .unwrap()
        .join("conf/lts_6.18.conf")
        .display()
        .to_string();
    let conf_opt = format!("-c options={conf}");
    let mut rows: Vec<(u64, &str, String, bool)> = NEWER
        .iter()
        .map(|&(s, r, o, w)| (s, r, o.to_string(), w))
        .collect();
    rows.push((
        G,
        "-n parent=1 -i exchange=1 -m rmapbt=1 -i nrext64=1",
        conf_opt,
        true,
    ));
    let mut errs = Vec::new();
    for (size, ref_opts, our_opts, whole) in &rows {
        let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
        sparse(&r, *size);
        sparse(&o, *size);
        let mut args: Vec<&str> = ref_opts.split_whitespace().collect();
        let u = format!("uuid={UUID}");
        let p = r.display().to_string();
        args.extend(["-q", "-m", &u, &p]);
        let (ok, out) = write_common::run_615("mkfs.xfs", &args);
        assert!(ok, "mkfs.xfs 6.15 {ref_opts}: {out}");
        let mut e = match ours(&o, our_opts) {
            Ok(rep) => {
                let mut e = compare(&r, &o, *whole, Ref::V615);
                let opts = format!("{ref_opts} -m uuid={UUID}");
                e.extend(summary_diff_615(&opts, &r, &rep, &o));
                e
            }
            Err(e) => vec![format!("xfskit mkfs failed: {e}")],
        };
        if e.is_empty() {
            let (ok, out) = write_common::run_615("xfs_repair", &["-n", &o.display().to_string()]);
            if !ok {
                e.push(format!("xfs_repair -n 6.15: {out}"));
            }
        }
        errs.extend(
            e.into_iter()
                .map(|e| format!("size {size} [{our_opts}]: {e}")),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_row_differs(&errs);
}

/// Option sets compared with mkfs.xfs 7.2 (its own defaults; xfskit's
/// default profile is the same): (size, options for both, compare the
/// whole image).
const V72: &[(u64, &str, bool)] = &[
    (2 * G, "", true),
    (G, "-m autofsck=check", true),
    (G, "-m autofsck=optimize -i size=2048", true),
    (G, "-m autofsck=none -i size=1024", true),
    (G, "-m autofsck", true),
    (G, "-m autofsck=repair,autofsck=0", true),
    (G, "-m rmapbt=0", true),
    (G, "-n parent=0", true),
    (G, "-n parent=0 -m rmapbt=0,autofsck=1", true),
    (G, "-m metadir=1", true),
    (2 * G, "-b size=65536", true),
    (G, "-b size=1024 -m autofsck=check", true),
    (2 * G, "-l agnum=0", true),
    (2 * G, "-l agnum=1 -d su=64k,sw=4", true),
    (2 * G, "-l agnum=3 -m metadir=1", true),
    (100 * G, "", false),
];

/// xfskit's default profile and `-m autofsck=` give the headers and root
/// directory mkfs.xfs 7.2 writes (the root's `xfs:autofsck` attribute, the
/// attribute bit where mkfs.xfs sets it, the secondary superblocks from
/// before the attribute), with mkfs.xfs 7.2's warnings; each config file of
/// 7.2 (`lts_*.conf`, `-c options=`) gives what 7.2 makes with it; and
/// xfs_repair 7.2 finds every image clean.
#[test]
fn headers_match_mkfs_xfs_72() {
    need_tools();
    if write_common::skip_without_72("headers_match_mkfs_xfs_72") {
        return;
    }
    let bin = write_common::xfsprogs_72_bin().unwrap();
    let confs = bin.join("../conf");
    let dir = tmpdir("v72");
    let mut rows: Vec<(u64, String, bool)> =
        V72.iter().map(|&(s, o, w)| (s, o.to_string(), w)).collect();
    for lts in ["4.19", "5.4", "5.10", "5.15", "6.1", "6.6", "6.12", "6.18"] {
        let conf = confs.join(format!("lts_{lts}.conf"));
        assert!(conf.exists(), "{} missing", conf.display());
        rows.push((G, format!("-c options={}", conf.display()), true));
    }
    rows.push((
        G,
        format!(
            "-c options={} -m autofsck=check",
            confs.join("lts_6.1.conf").display()
        ),
        true,
    ));
    let mut errs = Vec::new();
    let mut attrs = 0;
    for (size, opts, whole) in &rows {
        let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
        sparse(&r, *size);
        sparse(&o, *size);
        let mut args: Vec<&str> = opts.split_whitespace().collect();
        let u = format!("uuid={UUID}");
        let p = r.display().to_string();
        args.extend(["-q", "-m", &u, &p]);
        let out = Command::new(bin.join("mkfs.xfs"))
            .args(&args)
            .output()
            .unwrap();
        // mkfs.xfs 7.2 prints these warnings on stdout.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "mkfs.xfs 7.2 {opts}: {said}");
        let theirs: Vec<&str> = said
            .lines()
            .filter(|l| l.contains("less effective"))
            .collect();
        let mut e = match ours(&o, &format!("--defaults 7.2 {opts}")) {
            Ok(rep) => {
                let mut e = compare(&r, &o, *whole, Ref::V615);
                let mine: Vec<&str> = rep
                    .geometry
                    .warnings
                    .iter()
                    .map(String::as_str)
                    .filter(|l| l.contains("less effective"))
                    .collect();
                if mine != theirs {
                    e.push(format!(
                        "warnings: mkfs.xfs 7.2 {theirs:?}, xfskit {mine:?}"
                    ));
                }
                attrs += usize::from(rep.geometry.autofsck.is_some());
                e
            }
            Err(e) => vec![format!("xfskit mkfs failed: {e}")],
        };
        if e.is_empty() {
            let out = Command::new(bin.join("xfs_repair"))
                .args(["-n", &o.display().to_string()])
                .output()
                .unwrap();
            if !out.status.success() {
                e.push(format!(
                    "xfs_repair -n 7.2: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        errs.extend(e.into_iter().map(|e| format!("size {size} [{opts}]: {e}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_row_differs(&errs);
    // The rows without an attribute are -m rmapbt=0 and -n parent=0 alone.
    assert_eq!(attrs, rows.len() - 2, "rows whose root has xfs:autofsck");
}

/// Rows of `-m metadir=1` (no realtime section): (size, options for both,
/// compare the whole image).
/// mkfs.xfs 6.15 takes `-m metadir=1` and its own defaults; xfskit the same
/// with `--defaults 6.12` (6.15's defaults are those of the 6.12 line).
const METADIR: &[(u64, &str, bool)] = &[
    (G, "", false),
    (300 << 20, "", true),
    (2 * G, "-d su=64k,sw=4", false),
    (G, "-b size=1024", false),
    (G, "-i size=1024", false),
    (3 * G, "-d agcount=7", false),
    (G, "-n parent=1 -m rmapbt=1", false),
    (G, "-n parent=1 -i size=2048", false),
    (G, "-i sparse=0 -m reflink=0", false),
    (600 << 20, "-d agcount=2 -b size=2048", false),
];

/// `xfskit mkfs -m metadir=1` writes what mkfs.xfs 6.15 writes, byte for
/// byte (whole images, or the headers of the AGs, the first chunk, the log
/// and what follows it: superblocks with the metadir fields, AG headers,
/// the metadata directory root beside the root directory, its `rtgroups`
/// directory in a chunk of the log's AG, the log), but for timestamps,
/// random generations (also inside a parent pointer) and CRCs; xfs_repair
/// -n 6.15 finds ours clean.
#[test]
fn metadir_headers_match_mkfs_xfs_615() {
    need_tools();
    if write_common::skip_without_615("metadir_headers_match_mkfs_xfs_615") {
        return;
    }
    let dir = tmpdir("metadir");
    let mut errs = Vec::new();
    for &(size, opts, whole) in METADIR {
        let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
        sparse(&r, size);
        sparse(&o, size);
        let mut args: Vec<&str> = opts.split_whitespace().collect();
        let u = format!("uuid={UUID},metadir=1");
        let p = r.display().to_string();
        args.extend(["-q", "-m", &u, &p]);
        // Sizes under 300 MB and single-AG layouts are test-only for mkfs.xfs.
        let out = write_common::command_615_qa("mkfs.xfs")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mkfs.xfs 6.15 {opts}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut e = match ours(&o, &format!("--defaults 6.12 -m metadir=1 {opts}")) {
            Ok(rep) => {
                let mut e = compare(&r, &o, whole, Ref::V615);
                let opts = format!("{opts} -m uuid={UUID},metadir=1");
                e.extend(summary_diff_615(&opts, &r, &rep, &o));
                e
            }
            Err(e) => vec![format!("xfskit mkfs failed: {e}")],
        };
        if e.is_empty() {
            let (ok, out) = write_common::run_615("xfs_repair", &["-n", &o.display().to_string()]);
            if !ok {
                e.push(format!("xfs_repair -n 6.15: {out}"));
            }
        }
        errs.extend(e.into_iter().map(|e| format!("size {size} [{opts}]: {e}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_row_differs(&errs);
}

/// A metadir filesystem made by xfskit takes the engine's writes (a
/// directory, files in several extents), stays clean for xfs_repair 6.15,
/// and the kernel mounts it and reads back what was written; files the
/// kernel writes there are clean too.
#[test]
fn metadir_kernel_mounts_and_reads_xfskit_writes() {
    need_tools();
    if write_common::skip_without_615("metadir_kernel_mounts_and_reads_xfskit_writes")
        || write_common::skip_unless_root("metadir_kernel_mounts_and_reads_xfskit_writes")
    {
        return;
    }
    use xfskit::build::{Meta, NodeKind};
    use xfskit::inode::Timestamp as T;
    let dir = tmpdir("metadir-mount");
    let p = dir.join("k.img");
    sparse(&p, G);
    ours(&p, "--defaults 6.18 -m metadir=1").unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
    {
        let fs = write_common::open_rw(&p);
        let root = fs.geometry().root_ino;
        let t = T {
            sec: 1_700_000_000,
            nsec: 0,
        };
        let meta = Meta {
            mode: 0o755,
            uid: 0,
            gid: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        };
        let d = fs.create(root, b"d", &NodeKind::Dir, &meta).unwrap();
        for k in 0..20u32 {
            let name = format!("f{k}");
            let f = fs
                .create(d, name.as_bytes(), &NodeKind::File { size: 0 }, &meta)
                .unwrap();
            fs.write_at(f, 0, &data[..(k as usize + 1) * 4096]).unwrap();
        }
        let big = fs
            .create(root, b"big", &NodeKind::File { size: 0 }, &meta)
            .unwrap();
        fs.write_at(big, 0, &data).unwrap();
        fs.sync().unwrap();
    }
    write_common::assert_repair_615_clean(&p);
    let read = write_common::with_kernel_mount(&p, |mnt| {
        assert_eq!(std::fs::read(mnt.join("big")).unwrap(), data);
        for k in 0..20usize {
            let got = std::fs::read(mnt.join(format!("d/f{k}"))).unwrap();
            assert_eq!(got, &data[..(k + 1) * 4096], "d/f{k}");
        }
    });
    assert!(read.is_some());
    let mnt = dir.join("rw");
    write_common::kernel_mount_rw_at(&p, &mnt).unwrap();
    let w = std::fs::write(mnt.join("by-kernel"), &data[..1 << 20]);
    write_common::kernel_umount(&mnt);
    w.unwrap();
    write_common::assert_repair_615_clean(&p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows of `-r rtdev=` (classic realtime sections): (data size, realtime
/// device size, `-r` sub-options after rtdev, other options).
const REALTIME: &[(u64, u64, &str, &str)] = &[
    (G, 100 << 20, "", ""),
    (G, 100 * G, "", ""),
    (G, 10 * G, ",extsize=65536", ""),
    (G, 3 * G, ",extsize=20480", ""),
    (G, 3 * G, ",size=1000m", ""),
    (2 * G, 5 * G, "", "-b size=1024"),
    (G, G, ",size=12345b", "-n parent=1"),
    (G, T, ",extsize=1m", "-i sparse=0"),
    (2 * G, 2 * G, "", "-d su=64k,sw=2"),
];

/// `xfskit mkfs -r rtdev=FILE,size=,extsize=` writes the superblocks, the
/// realtime bitmap and summary inodes and their blocks (placed in AG 0 as
/// mkfs.xfs's allocator places them) as mkfs.xfs 6.15 writes them, byte
/// for byte (every AG's headers, the log, AG 0's first 4 MiB; times,
/// generations and CRCs of inodes aside); xfs_repair -n -r 6.15 finds ours clean, and so does
/// xfskit's own check with the device.
#[test]
fn realtime_headers_match_mkfs_xfs_615() {
    need_tools();
    if write_common::skip_without_615("realtime_headers_match_mkfs_xfs_615") {
        return;
    }
    realtime_rows("realtime", REALTIME, "");
}

/// Make each row's filesystem with mkfs.xfs 6.15 and with xfskit (options
/// `extra` before the row's own), each with its own realtime device;
/// compare the data devices (every AG's headers, the log and what follows
/// it, AG 0's first 4 MiB), the realtime devices' first 64 KiB and the
/// geometry summaries; then xfs_repair -n -r 6.15 and xfskit's check with
/// the device on ours.
fn realtime_rows(tag: &str, rows: &[(u64, u64, &str, &str)], extra: &str) {
    let dir = tmpdir(tag);
    let (rt_ref, rt) = (dir.join("rt-ref.img"), dir.join("rt.img"));
    let rts = rt.display().to_string();
    let rts_ref = rt_ref.display().to_string();
    let mut errs = Vec::new();
    for &(size, rtsize, ropts, opts) in rows {
        let opts = format!("{extra} {opts}");
        let (r, o) = (dir.join("ref.img"), dir.join("ours.img"));
        sparse(&r, size);
        sparse(&o, size);
        sparse(&rt, rtsize);
        sparse(&rt_ref, rtsize);
        let mut args: Vec<&str> = opts.split_whitespace().collect();
        let u = format!("uuid={UUID}");
        let rarg_ref = format!("rtdev={rts_ref}{ropts}");
        let rarg = format!("rtdev={rts}{ropts}");
        let p = r.display().to_string();
        args.extend(["-q", "-m", &u, "-r", &rarg_ref, &p]);
        let out = write_common::command_615_qa("mkfs.xfs")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mkfs.xfs 6.15 -r {rarg_ref} {opts}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut e = match ours(&o, &format!("--defaults 6.12 -r {rarg} {opts}")) {
            Ok(mut rep) => {
                // Every AG's headers, the log, and AG 0's first 4 MiB:
                // the root chunk and the realtime files' blocks near it.
                let mut e = compare(&r, &o, false, Ref::V615);
                let (a, b) = (File::open(&r).unwrap(), File::open(&o).unwrap());
                e.extend(cmp_region(&a, &b, &sb(&a), "AG 0", (0, 4 << 20), Ref::V615));
                let (a, b) = (File::open(&rt_ref).unwrap(), File::open(&rt).unwrap());
                let n = (64 << 10).min(rtsize);
                if read(&a, 0, n as usize) != read(&b, 0, n as usize) {
                    e.push("the realtime devices' first 64 KiB differ".into());
                }
                if let Some(rtl) = rep.geometry.rt.as_mut() {
                    rtl.name = rts_ref.clone();
                }
                let sopts = format!("{opts} -m uuid={UUID} -r {rarg_ref}");
                e.extend(summary_diff_615(&sopts, &r, &rep, &o));
                e
            }
            Err(e) => vec![format!("xfskit mkfs failed: {e}")],
        };
        if e.is_empty() {
            let (ok, out) =
                write_common::run_615("xfs_repair", &["-n", "-r", &rts, &o.display().to_string()]);
            if !ok {
                e.push(format!("xfs_repair -n -r 6.15: {out}"));
            }
            let fs = xfskit::Fs::open(
                &o,
                &xfskit::OpenOptions {
                    rtdev: Some(rt.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
            let report =
                xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
            if !report.problems.is_empty() || !report.unchecked.is_empty() {
                e.push(format!(
                    "xfskit check: {:?} unchecked {:?}",
                    report.problems, report.unchecked
                ));
            }
        }
        errs.extend(
            e.into_iter()
                .map(|e| format!("size {size} rt {rtsize} [{ropts} {opts}]: {e}")),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_row_differs(&errs);
}

/// Rows of realtime groups (`-m metadir=1` with `-r rtdev=`): (data size,
/// realtime device size, `-r` sub-options after rtdev, other options).
/// mkfs.xfs 6.15's defaults have reflink on, which on a realtime section
/// needs one-block realtime extents.
const RTGROUPS: &[(u64, u64, &str, &str)] = &[
    (G, 100 << 20, "", ""),
    (G, G, ",rgcount=4", "-m reflink=0"),
    (G, 3 * G, ",rgsize=1g", ""),
    (G, 2 * G, ",rgcount=3", "-m rmapbt=1"),
    (G, 3 * G, ",extsize=65536", "-m reflink=0"),
    (
        G,
        5 * G,
        ",extsize=20480,rgcount=2",
        "-m reflink=0,rmapbt=1",
    ),
    (2 * G, 2 * G, "", "-m reflink=0 -b size=1024"),
    (G, G, ",rgcount=2", "-b size=8192 -m rmapbt=1"),
    (G, G, "", "-n parent=1 -i nrext64=1 -m rmapbt=1"),
];

/// `xfskit mkfs -m metadir=1 -r rtdev=FILE[,rgcount=|rgsize=]` writes what
/// mkfs.xfs 6.15 writes for realtime groups (the superblocks' group
/// fields, the realtime superblock, `/rtgroups` with each group's bitmap,
/// summary, rmap and refcount inodes, the bitmap and summary blocks with
/// their headers, the free counts), but for inode times, generations and
/// CRCs; the summaries print the same; xfs_repair -n -r 6.15 and xfskit's
/// check find ours clean. The last rows take mkfs.xfs's 6.18 config file.
#[test]
fn rtgroups_headers_match_mkfs_xfs_615() {
    need_tools();
    if write_common::skip_without_615("rtgroups_headers_match_mkfs_xfs_615") {
        return;
    }
    realtime_rows("rtgroups", RTGROUPS, "-m metadir=1");
    // mkfs.xfs refuses an option both in the file and on the command
    // line: the 6.18 file with metadir turned on.
    let text = std::fs::read_to_string(
        write_common::xfsprogs_615()
            .unwrap()
            .join("conf/lts_6.18.conf"),
    )
    .unwrap();
    assert!(text.contains("metadir=0"), "{text}");
    let conf = tmpdir("rtgroups-conf").join("lts_6.18_metadir.conf");
    std::fs::write(&conf, text.replace("metadir=0", "metadir=1")).unwrap();
    let extra = format!("-c options={}", conf.display());
    realtime_rows(
        "rtgroups-618",
        &[(G, G, ",rgcount=2", ""), (G, 2 * G, "", "-d agcount=5")],
        &extra,
    );
    let _ = std::fs::remove_dir_all(conf.parent().unwrap());
}

/// Realtime options xfskit does not make are refused before anything is
/// written: reflink/rmapbt asked for on a classic realtime section, group
/// options without metadir, reflink with realtime extents over a block,
/// zoned sections, a size past the device.
#[test]
fn realtime_refusals() {
    let dir = tmpdir("rt-refuse");
    let rt = dir.join("rt.img");
    sparse(&rt, 64 << 20);
    let o = dir.join("o.img");
    let r = rt.display().to_string();
    for (opts, want) in [
        (format!("-m reflink=1 -r rtdev={r}"), "realtime groups"),
        (format!("-r rtdev={r},rgcount=4"), "metadir=1"),
        (
            format!("-m metadir=1,reflink=1 -r rtdev={r},extsize=8k"),
            "extent sizes > 1",
        ),
        (
            format!("-m metadir=1 -r rtdev={r},rgcount=2,rgsize=8m"),
            "mutually exclusive",
        ),
        (format!("-r rtdev={r},zoned=1"), "zoned"),
        (format!("-r rtdev={r},size=1g"), "too large"),
        ("-r size=10m".to_string(), "non-existent rt subvolume"),
        (format!("-r rtdev={r},extsize=6000"), "not a multiple"),
    ] {
        sparse(&o, G);
        let err = match ours(&o, &opts) {
            Ok(_) => panic!("{opts}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{opts}: {err}");
        let head = read(&File::open(&o).unwrap(), 0, 4096);
        assert!(
            head.iter().all(|&b| b == 0),
            "{opts}: the target was written"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! `xfskit mkfs -l logdev=FILE[,size=,sunit=,sectsize=]`: an external log.
//!
//! Against mkfs.xfs 7.2 with the same options, UUID and sizes: every AG's
//! headers and btree roots are the same bytes, so is the root inode chunk
//! (inode times, generations and CRCs aside), and the log devices are
//! identical (zeroed over the log's length, a first record with the
//! unmount record); the log lines of the summaries agree; xfs_repair -n -l
//! 7.2 finds ours clean. What mkfs.xfs refuses is refused with its words
//! (a missing log file, a log device too small or past 2 GiB, a size past
//! the device, logdev with internal or agnum), and nothing is written.
//! As root the kernel mounts ours with `-o logdev=` (loop devices for
//! both), writes, and xfskit's own edits with --logdev stay clean.

mod common;

use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::fixtures::{with_logdev_mount as with_mount, Loops};
use common::{is_root, must_umount, skip, TempDir};
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn sparse(p: &Path, n: u64) {
    let _ = fs::remove_file(p);
    File::create(p).unwrap().set_len(n).unwrap();
}

fn read(f: &File, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).unwrap();
    b
}

fn be32(b: &[u8], o: usize) -> u64 {
    u64::from(u32::from_be_bytes(b[o..o + 4].try_into().unwrap()))
}

/// Is byte `rel` of the inode-aligned buffer `x` a timestamp, generation
/// or CRC of a v3 inode (mkfs.xfs 7.2 gives the chunk's inodes random
/// generations)?
fn inode_noise(x: &[u8], rel: usize, isize: usize) -> bool {
    let start = rel - rel % isize;
    let ino = &x[start..start + isize];
    if &ino[..2] != b"IN" || ino[4] != 3 {
        return false;
    }
    let b = rel - start;
    (32..56).contains(&b) || (92..104).contains(&b) || (144..152).contains(&b)
}

/// Differences between the two data images: each AG's first 16 blocks,
/// and the root inode chunk (masked as above).
fn compare_data(r: &Path, o: &Path) -> Vec<String> {
    let (a, b) = (File::open(r).unwrap(), File::open(o).unwrap());
    let sb = read(&a, 0, 512);
    let bs = be32(&sb, 4);
    let agblocks = be32(&sb, 84);
    let agcount = be32(&sb, 88);
    let rootino = u64::from_be_bytes(sb[56..64].try_into().unwrap());
    let isize = u64::from(u16::from_be_bytes([sb[104], sb[105]]));
    let inopblog = u32::from(sb[123]);
    let mut errs = Vec::new();
    for ag in 0..agcount {
        let off = ag * agblocks * bs;
        let n = (16 * bs) as usize;
        let (x, y) = (read(&a, off, n), read(&b, off, n));
        if let Some(i) = (0..n).find(|&i| x[i] != y[i]) {
            errs.push(format!("AG {ag} headers differ at byte {}", off + i as u64));
        }
    }
    let chunk = (rootino >> inopblog) * bs;
    let n = (64 * isize) as usize;
    let (x, y) = (read(&a, chunk, n), read(&b, chunk, n));
    let d: Vec<usize> = (0..n)
        .filter(|&i| x[i] != y[i] && !inode_noise(&x, i, isize as usize))
        .take(8)
        .collect();
    if !d.is_empty() {
        errs.push(format!("root inode chunk at {chunk} differs at {d:?}"));
    }
    errs
}

/// The summary's two log lines, with the log device's name taken out.
fn log_lines(text: &str, log: &Path) -> String {
    let mut out = String::new();
    let mut take = 0;
    for l in text.lines() {
        if l.starts_with("log      =") {
            take = 2;
        }
        if take > 0 {
            out += &l.replacen(s(log), "LOG", 1);
            out.push('\n');
            take -= 1;
        }
    }
    out
}

fn repair_clean(bin: &Path, img: &Path, log: &Path, rt: Option<&PathBuf>) -> Result<(), String> {
    let mut c = Command::new(bin.join("xfs_repair"));
    c.args(["-n", "-l", s(log)]);
    if let Some(rt) = rt {
        c.args(["-r", s(rt)]);
    }
    let o = c.arg(s(img)).output().unwrap();
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("xfs_repair -n -l: {}", output_text(&o)))
    }
}

/// Rows: (data size, log device size, `-l` sub-options after logdev,
/// other options).
const ROWS: &[(u64, u64, &str, &str)] = &[
    (G, 100 * M, "", ""),
    (G, 200 * M, ",size=64m", ""),
    (G, 100 * M, ",sunit=64", ""),
    (G, 100 * M, "", "-b size=1024"),
    (2 * G, 128 * M, "", "-s size=4096"),
    (G, 100 * M, ",sectsize=4096", ""),
    (2 * G, 100 * M, "", "-d su=64k,sw=4"),
    (G, 3 * G / 2, "", "-m rmapbt=0"),
    (300 * M, 64 * M, ",su=32k", "-n parent=0"),
    (G, 100 * M, "", "-m reflink=0 -r rtdev=RT"),
];

/// Make each row's filesystem with `mkfs` (mkfs.xfs) and with xfskit
/// (`ours` options first), each with its own log device; compare the data
/// devices, the log devices and the summaries' log lines; xfs_repair -n -l
/// 7.2 on ours. Returns the differences.
fn rows_against(
    bin: &Path,
    mkfs: &Path,
    ours: &[&str],
    rows: &[(u64, u64, &str, &str)],
) -> Vec<String> {
    let t = TempDir::new("mkfs-logdev");
    let d = t.path();
    let (r, o, rl, ol) = (
        d.join("ref.img"),
        d.join("ours.img"),
        d.join("ref.log"),
        d.join("ours.log"),
    );
    let mut errs = Vec::new();
    for &(size, lsize, lopts, opts) in rows {
        for (p, n) in [(&r, size), (&o, size), (&rl, lsize), (&ol, lsize)] {
            sparse(p, n);
        }
        // RT in the options: a realtime device (each side makes its own).
        let rt = d.join("rt.img");
        if opts.contains("RT") {
            sparse(&rt, 200 * M);
        }
        let opts = &opts.replace("RT", s(&rt));
        let u = format!("uuid={UUID}");
        let la = format!("logdev={}{lopts}", s(&rl));
        let mut args: Vec<&str> = opts.split_whitespace().collect();
        args.extend(["-f", "-m", &u, "-l", &la, s(&r)]);
        let out = Command::new(mkfs).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{} {args:?}: {}",
            mkfs.display(),
            output_text(&out)
        );
        let theirs = String::from_utf8_lossy(&out.stdout).into_owned();
        if opts.contains("rtdev") {
            sparse(&rt, 200 * M);
        }
        let lb = format!("logdev={}{lopts}", s(&ol));
        let mut args: Vec<&str> = vec!["mkfs", "--timestamp", "1700000000"];
        args.extend(ours);
        args.extend(opts.split_whitespace());
        args.extend(["-m", &u, "-l", &lb, s(&o)]);
        let out = xfskit_output(&args);
        let row = format!("size {size} log {lsize} [{lopts} {opts}]");
        if !out.status.success() {
            errs.push(format!("{row}: xfskit mkfs: {}", output_text(&out)));
            continue;
        }
        let mine = String::from_utf8_lossy(&out.stdout);
        let mut e = compare_data(&r, &o);
        let (a, b) = (fs::read(&rl).unwrap(), fs::read(&ol).unwrap());
        if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
            e.push(format!("the log devices differ at byte {i}"));
        }
        let (lt, lo) = (log_lines(&theirs, &rl), log_lines(&mine, &ol));
        if lt != lo || lt.is_empty() {
            e.push(format!("log lines: mkfs.xfs\n{lt}xfskit\n{lo}"));
        }
        if e.is_empty() {
            e.extend(repair_clean(bin, &o, &ol, opts.contains("rtdev").then_some(&rt)).err());
        }
        errs.extend(e.into_iter().map(|e| format!("{row}: {e}")));
    }
    errs
}

/// xfskit mkfs with an external log writes the data device and the log
/// device mkfs.xfs 7.2 writes for the same options; xfs_repair -n -l 7.2
/// finds ours clean.
#[test]
fn external_log_matches_mkfs_xfs_72() {
    let Some(bin) = xfsprogs_72_or_skip("external_log_matches_mkfs_xfs_72") else {
        return;
    };
    let errs = rows_against(&bin, &bin.join("mkfs.xfs"), &[], ROWS);
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

/// The same against Debian's mkfs.xfs 6.1 (xfskit with `--defaults 6.1`).
#[test]
fn external_log_matches_mkfs_xfs_61() {
    let Some(bin) = xfsprogs_72_or_skip("external_log_matches_mkfs_xfs_61") else {
        return;
    };
    let mkfs = Path::new("/usr/sbin/mkfs.xfs");
    if !mkfs.exists() {
        return skip("external_log_matches_mkfs_xfs_61", "no /usr/sbin/mkfs.xfs");
    }
    let rows = &[
        (G, 100 * M, "", ""),
        (G, 200 * M, ",size=80m", "-b size=1024"),
        (2 * G, 100 * M, ",sunit=16", "-d su=64k,sw=4"),
        (G, 100 * M, "", "-s size=4096 -m rmapbt=1"),
    ];
    let errs = rows_against(&bin, mkfs, &["--defaults", "6.1"], rows);
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

/// What mkfs.xfs 7.2 refuses, xfskit refuses with the same words, and the
/// target stays unwritten.
#[test]
fn external_log_refusals() {
    let t = TempDir::new("mkfs-logdev-no");
    let d = t.path();
    let img = d.join("d.img");
    let small = d.join("small.log");
    let tiny = d.join("tiny.log");
    let huge = d.join("huge.log");
    let ok = d.join("ok.log");
    sparse(&small, 32 * M);
    sparse(&tiny, M);
    sparse(&huge, 3 * G);
    sparse(&ok, 100 * M);
    let missing = d.join("missing.log");
    let (sm, ti, hu, okl, mi) = (s(&small), s(&tiny), s(&huge), s(&ok), s(&missing));
    let rows: Vec<(String, &str)> = vec![
        (format!("logdev={mi}"), "Error accessing specified device"),
        (
            format!("logdev={mi},size=64m"),
            "Error accessing specified device",
        ),
        (
            format!("logdev={mi},file=1"),
            "if -l file then -l name and -l size are required",
        ),
        (format!("logdev={sm}"), "Log size must be at least 64MiB."),
        (
            format!("logdev={ti}"),
            "external log device size 256 blocks too small, must be at least 2560 blocks",
        ),
        (
            format!("logdev={hu}"),
            "log size 3221225472 bytes too large, maximum size is 2136997888 bytes",
        ),
        (
            format!("logdev={okl},size=200m"),
            "size 200m specified for log subvolume is too large, maximum is 25600 blocks",
        ),
        (
            format!("logdev={okl},internal=1"),
            "Cannot specify both -l logdev and -l internal",
        ),
        (
            format!("logdev={okl},agnum=1"),
            "Cannot specify both -l logdev and -l agnum",
        ),
        ("internal=0".to_string(), "No log device name specified"),
        (
            format!("logdev={okl},concurrency=4"),
            "Cannot specify both -l logdev and -l concurrency",
        ),
        (format!("logdev={}", s(&img)), "is the data device"),
    ];
    for (l, want) in rows {
        sparse(&img, G);
        let o = xfskit_output(&["mkfs", "-q", "-l", &l, s(&img)]);
        let text = output_text(&o);
        assert!(!o.status.success(), "-l {l}: accepted\n{text}");
        assert!(text.contains(want), "-l {l}: wanted {want:?}\n{text}");
        let head = read(&File::open(&img).unwrap(), 0, 4096);
        assert!(
            head.iter().all(|&b| b == 0),
            "-l {l}: the target was written"
        );
    }
    assert!(!missing.exists(), "a missing log file was created");
    // Not made by xfskit: a metadata directory with an external log.
    sparse(&img, G);
    let la = format!("logdev={okl}");
    let o = xfskit_output(&["mkfs", "-q", "-m", "metadir=1", "-l", &la, s(&img)]);
    assert!(
        output_text(&o).contains("metadata directory with an external log"),
        "{}",
        output_text(&o)
    );
    // A log sector over the data sector is made (as mkfs.xfs makes it),
    // with a warning: the kernel refuses to mount it.
    sparse(&img, G);
    let la = format!("logdev={okl},sectsize=4096");
    let o = xfskit_output(&["mkfs", "-q", "-l", &la, s(&img)]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Linux will not mount"),
        "{}",
        output_text(&o)
    );
    // -l sectsize on an internal log, as mkfs.xfs.
    sparse(&img, G);
    let o = xfskit_output(&["mkfs", "-q", "-l", "sectsize=4096", s(&img)]);
    assert!(
        output_text(&o).contains("Can't change sector size on internal log!"),
        "{}",
        output_text(&o)
    );
}

fn xfskit_ok(args: &[&str]) -> String {
    let o = xfskit_output(args);
    assert!(o.status.success(), "xfskit {args:?}: {}", output_text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The kernel mounts what xfskit mkfs made with `-o logdev=`, writes and
/// reads; xfskit then writes with --logdev and the kernel reads that back;
/// xfs_repair -n -l stays clean throughout.
#[test]
fn external_log_kernel_mounts_and_xfskit_writes() {
    let Some(bin) = xfsprogs_72_or_skip("external_log_kernel_mounts") else {
        return;
    };
    if !is_root() {
        return skip("external_log_kernel_mounts", "needs root for loop mounts");
    }
    let t = TempDir::new("mkfs-logdev-k");
    let (img, log): (PathBuf, PathBuf) = (t.path().join("k.img"), t.path().join("k.log"));
    sparse(&img, G);
    sparse(&log, 64 * M);
    let la = format!("logdev={}", s(&log));
    xfskit_ok(&["mkfs", "-q", "-l", &la, s(&img)]);
    repair_clean(&bin, &img, &log, None).unwrap();
    let mnt = t.path().join("m");
    fs::create_dir(&mnt).unwrap();
    with_mount(&img, &log, &mnt, |m| {
        fs::create_dir(m.join("k")).unwrap();
        for n in 0..50 {
            fs::write(m.join(format!("k/f{n}")), format!("kernel {n}\n")).unwrap();
        }
    });
    repair_clean(&bin, &img, &log, None).unwrap();
    let (i, l) = (s(&img), s(&log));
    assert_eq!(xfskit_ok(&["cat", "--logdev", l, i, "/k/f7"]), "kernel 7\n");
    xfskit_ok(&["mkdir", "--logdev", l, i, "/d"]);
    let src = t.path().join("in.txt");
    fs::write(&src, b"from xfskit\n").unwrap();
    xfskit_ok(&["cp", "--logdev", l, s(&src), &format!("{i}:/d/in.txt")]);
    repair_clean(&bin, &img, &log, None).unwrap();
    with_mount(&img, &log, &mnt, |m| {
        assert_eq!(
            fs::read_to_string(m.join("d/in.txt")).unwrap(),
            "from xfskit\n"
        );
        assert_eq!(fs::read_to_string(m.join("k/f49")).unwrap(), "kernel 49\n");
        fs::write(m.join("d/more"), b"more\n").unwrap();
    });
    repair_clean(&bin, &img, &log, None).unwrap();
    assert_eq!(xfskit_ok(&["cat", "--logdev", l, i, "/d/more"]), "more\n");
}

/// `xfskit build` takes the same `-l logdev=`: the image is filled through
/// the log device, xfs_repair -n -l 7.2 finds it clean and xfskit reads
/// the files back with --logdev.
#[test]
fn build_with_an_external_log() {
    let Some(bin) = xfsprogs_72_or_skip("build_with_an_external_log") else {
        return;
    };
    let t = TempDir::new("mkfs-logdev-build");
    let src = t.path().join("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    for n in 0..20 {
        fs::write(src.join(format!("a/b/f{n}")), format!("built {n}\n")).unwrap();
    }
    let (img, log) = (t.path().join("b.img"), t.path().join("b.log"));
    sparse(&log, 64 * M);
    let la = format!("logdev={}", s(&log));
    xfskit_ok(&["build", s(&src), s(&img), "-l", &la]);
    repair_clean(&bin, &img, &log, None).unwrap();
    let (i, l) = (s(&img), s(&log));
    assert_eq!(
        xfskit_ok(&["cat", "--logdev", l, i, "/a/b/f19"]),
        "built 19\n"
    );
    let sb = tool_72(
        &bin,
        "xfs_db",
        &["-r", "-l", l, "-c", "sb 0", "-c", "p logstart logblocks", i],
    );
    assert!(
        sb.contains("logstart = 0") && sb.contains("logblocks = 16384"),
        "{sb}"
    );
}

/// On block devices (loop devices for the data and the log): xfskit mkfs
/// makes what mkfs.xfs 7.2 makes there (superblock and log device), and
/// the kernel mounts it and writes.
#[test]
fn external_log_on_block_devices() {
    let Some(bin) = xfsprogs_72_or_skip("external_log_on_block_devices") else {
        return;
    };
    if !is_root() {
        return skip(
            "external_log_on_block_devices",
            "needs root for loop devices",
        );
    }
    let t = TempDir::new("mkfs-logdev-bdev");
    let (img, log) = (t.path().join("b.img"), t.path().join("b.log"));
    sparse(&img, G);
    sparse(&log, 100 * M);
    let loops = Loops(vec![Loops::attach(&img), Loops::attach(&log)]);
    let (d, l) = (loops.0[0].as_str(), loops.0[1].as_str());
    let u = format!("uuid={UUID}");
    let la = format!("logdev={l}");
    let print = |dev: &str| {
        let o = Command::new(bin.join("xfs_db"))
            .args(["-r", "-l", l, "-c", "sb 0", "-c", "p", dev])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let theirs = tool_72(&bin, "mkfs.xfs", &["-q", "-f", "-m", &u, "-l", &la, d]);
    let (sb_theirs, log_theirs) = (print(d), read(&File::open(l).unwrap(), 0, 1 << 20));
    let ours = xfskit_ok(&["mkfs", "-q", "-f", "-m", &u, "-l", &la, d]);
    assert_eq!(theirs.trim(), ours.trim());
    assert_eq!(sb_theirs, print(d), "superblocks");
    assert!(
        log_theirs == read(&File::open(l).unwrap(), 0, 1 << 20),
        "log devices"
    );
    let mnt = t.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "xfs", "-o", &la, d, s(&mnt)])
        .status()
        .unwrap();
    assert!(st.success(), "mount -o {la}");
    fs::write(mnt.join("f"), b"on loop devices\n").unwrap();
    must_umount(&mnt);
    repair_clean(&bin, Path::new(d), Path::new(l), None).unwrap();
    assert_eq!(
        xfskit_ok(&["cat", "--logdev", l, d, "/f"]),
        "on loop devices\n"
    );
}

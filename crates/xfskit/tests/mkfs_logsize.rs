//! The smallest log: xfskit's minimum log size against mkfs.xfs's (Debian's
//! 6.1 and 6.15) over a grid of geometries and features, default log sizes
//! against mkfs.xfs's where the minimum decides them, the kernel's own
//! minimum (read from its refusal to mount) against the engine's, and a
//! log of exactly the minimum made by xfskit mounted by the kernel.
//!
//! mkfs.xfs prints its minimum when asked for a log below it
//! (`-l size=2m`, the smallest size its option parser takes): "log size
//! 512 blocks too small, minimum size is N blocks". xfskit must refuse the
//! same request with the same words.

mod write_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use write_common::*;
use xfskit::log::resv::{min_log_blocks, ResvGeometry, Rules};
use xfskit::mkfs::{compute_geometry, mkfs_with, parse_mkfs_args, TargetKind, WriteOptions};
use xfskit::{Fs, OpenOptions};

const CONF_618: &str = "conf/lts_6.18.conf";

/// The number in "minimum size is N blocks", if the text has it.
fn min_in(text: &str) -> Option<u64> {
    let rest = text.split("minimum size is ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The line of `text` that names the minimum (for the message comparison).
fn min_line(text: &str) -> Option<String> {
    text.lines()
        .find(|l| l.contains("minimum size is"))
        .map(|l| l.trim().to_string())
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// Which mkfs.xfs answers for a grid point.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    /// Debian's mkfs.xfs 6.1; xfskit gets `--defaults 6.1`.
    Deb61,
    /// mkfs.xfs 6.15; the options name every feature or the 6.18 config.
    V615,
}

fn mkfs_cmd(tool: Tool, qa: bool) -> Command {
    let mut c = match tool {
        Tool::Deb61 => Command::new("mkfs.xfs"),
        Tool::V615 => {
            let dir = xfsprogs_615().unwrap();
            let mut c = Command::new(dir.join("libexec/mkfs.xfs"));
            c.env("LD_LIBRARY_PATH", dir.join("lib"));
            c
        }
    };
    if qa {
        c.env("TEST_DIR", "/tmp")
            .env("TEST_DEV", "/dev/null")
            .env("QA_CHECK_FS", "1");
    }
    c
}

/// `opts` with `@CONF` replaced by `-c options=` of the 6.18 defaults.
fn expand(opts: &str) -> String {
    match xfsprogs_615() {
        Some(dir) => opts.replace(
            "@CONF",
            &format!("-c options={}", dir.join(CONF_618).display()),
        ),
        None => opts.to_string(),
    }
}

fn run_mkfs(tool: Tool, qa: bool, args: &[String]) -> String {
    let o = mkfs_cmd(tool, qa)
        .args(args)
        .output()
        .expect("run mkfs.xfs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// xfskit's mkfs options for the same command line.
fn our_opts(tool: Tool, args: &[String]) -> xfskit::mkfs::MkfsOptions {
    let mut a = Vec::new();
    if tool == Tool::Deb61 {
        a.extend(["--defaults".to_string(), "6.1".to_string()]);
    }
    a.extend(args.iter().cloned());
    parse_mkfs_args(&a).unwrap_or_else(|e| panic!("xfskit parses {a:?}: {e}"))
}

/// Explicit features for mkfs.xfs 6.15 and xfskit alike.
fn feats(
    rmap: u8,
    reflink: u8,
    nrext64: u8,
    parent: u8,
    metadir: u8,
    finobt: u8,
    sparse: u8,
) -> String {
    let exchange = u8::from(parent == 1 || metadir == 1);
    format!(
        "-m crc=1,finobt={finobt},inobtcount={finobt},rmapbt={rmap},reflink={reflink},bigtime=1,metadir={metadir} \
         -i sparse={sparse},nrext64={nrext64},exchange={exchange} -n parent={parent}"
    )
}

struct Point {
    tool: Tool,
    opts: String,
    size: u64,
    rt_size: u64,
}

fn grid() -> Vec<Point> {
    let mut v = Vec::new();
    let mut add = |tool: Tool, opts: String, size: u64, rt_size: u64| {
        v.push(Point {
            tool,
            opts,
            size,
            rt_size,
        })
    };
    let g = 1u64 << 30;
    // Block sizes, with each release's defaults and with no optional btrees.
    for bs in [1024, 2048, 4096, 8192, 16384, 32768, 65536] {
        add(Tool::Deb61, format!("-b size={bs}"), g, 0);
        add(Tool::V615, format!("@CONF -b size={bs}"), g, 0);
        add(
            Tool::V615,
            format!("{} -b size={bs}", feats(0, 0, 0, 0, 0, 0, 0)),
            g,
            0,
        );
        add(
            Tool::V615,
            format!("{} -b size={bs}", feats(1, 1, 1, 0, 1, 1, 1)),
            g,
            0,
        );
    }
    // Sector and inode sizes.
    for extra in [
        "-s size=4096",
        "-i size=1024",
        "-i size=2048",
        "-b size=65536 -s size=4096 -i size=2048",
        "-b size=1024 -i size=512",
        "-n size=65536",
        "-b size=2048 -n size=32768",
    ] {
        add(Tool::Deb61, extra.to_string(), g, 0);
        add(Tool::V615, format!("@CONF {extra}"), g, 0);
    }
    // Feature combinations at 4 KiB blocks (6.15 only knows parent and metadir).
    for rmap in 0..2 {
        for reflink in 0..2 {
            for nrext64 in 0..2 {
                for parent in 0..2 {
                    add(
                        Tool::V615,
                        feats(rmap, reflink, nrext64, parent, 0, 1, 1),
                        g,
                        0,
                    );
                }
                add(Tool::Deb61, feats61(rmap, reflink, nrext64, 1, 1), g, 0);
            }
        }
    }
    for (finobt, sparse) in [(0, 1), (1, 0), (0, 0)] {
        add(Tool::Deb61, feats61(1, 1, 0, finobt, sparse), g, 0);
        add(Tool::V615, feats(1, 1, 1, 1, 0, finobt, sparse), g, 0);
    }
    for parent in 0..2 {
        add(Tool::V615, feats(1, 1, 1, parent, 1, 1, 1), g, 0);
        add(
            Tool::V615,
            format!("{} -b size=1024", feats(0, 0, 0, parent, 1, 1, 1)),
            g,
            0,
        );
    }
    // Log stripe units.
    for su in ["32k", "64k", "256k"] {
        add(Tool::Deb61, format!("-l su={su}"), g, 0);
        add(Tool::V615, format!("@CONF -l su={su}"), g, 0);
        add(
            Tool::V615,
            format!("{} -l su={su}", feats(1, 0, 1, 0, 0, 1, 1)),
            g,
            0,
        );
    }
    add(Tool::V615, "@CONF -b size=65536 -l su=256k".into(), g, 0);
    add(Tool::Deb61, "-d su=64k,sw=4".into(), g, 0);
    // Small and large AGs.
    for (d, size) in [
        ("-d size=64m", 64 << 20),
        ("-d agcount=1", g),
        ("-d agcount=64", 8 * g),
        ("", 1 << 40),
        ("", 8 << 40),
        ("-b size=65536", 8 << 40),
        ("-b size=1024", 1 << 40),
    ] {
        add(Tool::Deb61, d.to_string(), size, 0);
        add(Tool::V615, format!("@CONF {d}"), size, 0);
        add(
            Tool::V615,
            format!("{} {d}", feats(1, 0, 0, 0, 0, 1, 1)),
            size,
            0,
        );
    }
    // A classic realtime section (no rmapbt or reflink there).
    for extra in [
        "",
        "-b size=65536",
        "-r extsize=65536",
        "-b size=1024 -r extsize=1m",
    ] {
        add(
            Tool::Deb61,
            format!("-m rmapbt=0,reflink=0 {extra}"),
            g,
            4 * g,
        );
        add(
            Tool::V615,
            format!("{} {extra}", feats(0, 0, 1, 1, 0, 1, 1)),
            g,
            4 * g,
        );
    }
    v
}

/// Explicit features for Debian's mkfs.xfs 6.1 (no parent pointers or
/// metadata directory there).
fn feats61(rmap: u8, reflink: u8, nrext64: u8, finobt: u8, sparse: u8) -> String {
    format!(
        "-m crc=1,finobt={finobt},inobtcount={finobt},rmapbt={rmap},reflink={reflink},bigtime=1 \
         -i sparse={sparse},nrext64={nrext64}"
    )
}

/// The image (and realtime device) a grid point runs on, with its
/// command-line options (the realtime device named, the log asked at
/// `log_size`).
fn point_args(dir: &Path, i: usize, p: &Point, log_size: &str) -> (PathBuf, Vec<String>) {
    let img = dir.join(format!("p{i}.img"));
    let _ = std::fs::remove_file(&img);
    std::fs::File::create(&img)
        .unwrap()
        .set_len(p.size)
        .unwrap();
    let mut opts = expand(&p.opts);
    if p.rt_size > 0 {
        let rt = dir.join(format!("p{i}.rt"));
        let _ = std::fs::remove_file(&rt);
        std::fs::File::create(&rt)
            .unwrap()
            .set_len(p.rt_size)
            .unwrap();
        opts = format!("{opts} -r rtdev={}", rt.display());
    }
    let mut args = words(&opts);
    if !log_size.is_empty() {
        args.extend(["-l".into(), format!("size={log_size}")]);
    }
    (img, args)
}

#[test]
fn minimum_matches_mkfs_xfs_over_the_grid() {
    if skip_without_615("minimum_matches_mkfs_xfs_over_the_grid") {
        return;
    }
    let dir = Scratch::new("logmin");
    let mut failures = Vec::new();
    let points = grid();
    let mut compared = 0;
    for (i, p) in points.iter().enumerate() {
        let (img, args) = point_args(&dir.0, i, p, "2m");
        let mut theirs_args = args.clone();
        theirs_args.extend(["-N".into(), "-f".into(), img.display().to_string()]);
        let out = run_mkfs(p.tool, false, &theirs_args);
        let Some(want) = min_line(&out) else {
            failures.push(format!(
                "{:?} {}: mkfs.xfs names no minimum:\n{out}",
                p.tool, p.opts
            ));
            continue;
        };
        let o = our_opts(p.tool, &args);
        let got = match compute_geometry(&o, p.size, TargetKind::File) {
            Ok(g) => format!("accepted a log of {} blocks", g.logblocks),
            Err(e) => e.to_string(),
        };
        compared += 1;
        if got != want {
            failures.push(format!(
                "{:?} {}:\n  mkfs.xfs: {want}\n  xfskit:   {got}",
                p.tool, p.opts
            ));
        }
        let _ = std::fs::remove_file(&img);
    }
    eprintln!("{compared} of {} grid points compared", points.len());
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(compared, points.len());
}

/// The `blocks=` of mkfs.xfs's `log =internal log` summary line.
fn summary_log_blocks(out: &str) -> Option<u64> {
    let line = out.lines().find(|l| l.starts_with("log "))?;
    let rest = line.split("blocks=").nth(1)?;
    rest.split(',').next()?.trim().parse().ok()
}

#[test]
fn default_log_matches_mkfs_xfs_where_the_minimum_decides() {
    if skip_without_615("default_log_matches_mkfs_xfs_where_the_minimum_decides") {
        return;
    }
    let dir = Scratch::new("logdefault");
    let m = 1u64 << 20;
    // Under 300 MB the default log is the minimum itself (fstests'
    // environment lets mkfs.xfs make these); with 64 KiB blocks the
    // minimum passes the 64 MiB default on larger filesystems too.
    let rows: Vec<(Tool, String, u64)> = vec![
        (Tool::V615, "@CONF".into(), 128 * m),
        (Tool::V615, "@CONF -b size=1024".into(), 200 * m),
        (Tool::V615, "@CONF -i size=2048".into(), 100 * m),
        (Tool::V615, "@CONF -l su=256k".into(), 128 * m),
        (Tool::V615, feats(1, 0, 1, 0, 0, 1, 1), 128 * m),
        (Tool::V615, feats(1, 1, 1, 1, 1, 1, 1), 128 * m),
        (
            Tool::V615,
            format!("{} -b size=65536", feats(1, 1, 1, 0, 0, 1, 1)),
            512 * m,
        ),
        (
            Tool::V615,
            format!("{} -b size=65536", feats(1, 0, 1, 0, 0, 1, 1)),
            2048 * m,
        ),
        (Tool::V615, "@CONF -b size=65536".into(), 512 * m),
        (Tool::Deb61, String::new(), 128 * m),
        (Tool::Deb61, "-b size=1024".into(), 64 * m),
        (Tool::Deb61, "-b size=65536".into(), 512 * m),
        (Tool::Deb61, "-b size=65536 -m rmapbt=1".into(), 4096 * m),
    ];
    let mut failures = Vec::new();
    for (i, (tool, opts, size)) in rows.iter().enumerate() {
        let p = Point {
            tool: *tool,
            opts: opts.clone(),
            size: *size,
            rt_size: 0,
        };
        let (img, args) = point_args(&dir.0, i, &p, "");
        let mut theirs = args.clone();
        theirs.extend(["-N".into(), "-f".into(), img.display().to_string()]);
        let out = run_mkfs(*tool, true, &theirs);
        let Some(want) = summary_log_blocks(&out) else {
            failures.push(format!(
                "{tool:?} {opts} ({size}): no log size from mkfs.xfs:\n{out}"
            ));
            continue;
        };
        let mut o = our_opts(*tool, &args);
        o.unsupported = true;
        match compute_geometry(&o, *size, TargetKind::File) {
            Ok(g) if u64::from(g.logblocks) == want => {}
            Ok(g) => failures.push(format!(
                "{tool:?} {opts} ({size}): mkfs.xfs {want} blocks, xfskit {}",
                g.logblocks
            )),
            Err(e) => failures.push(format!("{tool:?} {opts} ({size}): xfskit refuses: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The kernel's minimum for `img`: its log is shrunk to 512 blocks in the
/// superblock (xfs_db), the kernel refuses to mount it and names its
/// minimum. None when the kernel's message is not found.
fn kernel_minimum(img: &Path) -> Result<u64, String> {
    let (ok, out) = run_615(
        "xfs_db",
        &[
            "-x",
            "-c",
            "sb 0",
            "-c",
            "write -d logblocks 512",
            &img.display().to_string(),
        ],
    );
    if !ok {
        return Err(format!("xfs_db: {out}"));
    }
    let (ok, loopdev) = run("losetup", &["-f", "--show", &img.display().to_string()]);
    if !ok {
        return Err(format!("losetup: {loopdev}"));
    }
    let loopdev = loopdev.trim().to_string();
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (mounted, out) = run("mount", &["-o", "ro", &loopdev, &mnt.display().to_string()]);
    if mounted {
        let _ = umount(&mnt);
    }
    let _ = run("losetup", &["-d", &loopdev]);
    let _ = std::fs::remove_dir(&mnt);
    if mounted {
        return Err("the kernel mounted a log of 512 blocks".into());
    }
    let name = loopdev.trim_start_matches("/dev/");
    let tag = format!("XFS ({name}): Log size 512 blocks too small");
    let dmesg = run("dmesg", &[]).1;
    dmesg
        .lines()
        .rev()
        .find(|l| l.contains(&tag))
        .and_then(min_in)
        .ok_or_else(|| format!("no kernel message {tag:?} (mount said: {out})"))
}

#[test]
fn engine_minimum_is_the_kernels() {
    if skip_unless_root("engine_minimum_is_the_kernels")
        || skip_without_615("engine_minimum_is_the_kernels")
    {
        return;
    }
    let dir = Scratch::new("logkernel");
    let rows = [
        "@CONF",
        "@CONF -b size=1024",
        "@CONF -b size=65536",
        "@CONF -i size=2048 -s size=4096",
        "@CONF -l su=256k",
        "@CONF -l su=64k",
        "-m rmapbt=1,reflink=0",
        "-m rmapbt=0,reflink=0 -i nrext64=0",
        "-m rmapbt=1,reflink=1 -i nrext64=0",
        "-m metadir=1",
    ];
    let mut failures = Vec::new();
    for (i, opts) in rows.iter().enumerate() {
        let img = dir.0.join(format!("k{i}.img"));
        let _ = std::fs::remove_file(&img);
        std::fs::File::create(&img)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let mut args = words(&expand(opts));
        args.extend(["-q".into(), "-f".into(), img.display().to_string()]);
        let out = run_mkfs(Tool::V615, true, &args);
        let geo = match Fs::open(&img, &OpenOptions::default()) {
            Ok(fs) => fs.geometry().clone(),
            Err(e) => {
                failures.push(format!("{opts}: mkfs.xfs said {out}; open: {e}"));
                continue;
            }
        };
        let ours = min_log_blocks(&ResvGeometry::from_geometry(&geo), Rules::Kernel);
        let kernel = match kernel_minimum(&img) {
            Ok(k) => k,
            Err(e) => {
                failures.push(format!("{opts}: {e}"));
                continue;
            }
        };
        if ours != kernel {
            failures.push(format!("{opts}: kernel minimum {kernel}, xfskit {ours}"));
            continue;
        }
        // The engine refuses to write where the kernel refuses to mount,
        // and says why with both sizes; reading still works.
        match Fs::open_rw(&img, &OpenOptions::default()) {
            Ok(_) => failures.push(format!("{opts}: a log of 512 blocks opened for writing")),
            Err(e) => {
                let msg = e.to_string();
                if !msg.contains("512 blocks")
                    || !msg.contains(&format!("minimum size is {kernel} blocks"))
                {
                    failures.push(format!("{opts}: refusal does not name the sizes: {msg}"));
                }
            }
        }
        match Fs::open(&img, &OpenOptions::default()) {
            Err(e) => failures.push(format!("{opts}: read-only open refused: {e}")),
            // check says why the kernel will not mount it (a warning, not a
            // problem: xfs_repair -n reports nothing of the kind).
            Ok(fs) => match xfskit::check::check(&fs, &Default::default()) {
                Err(e) => failures.push(format!("{opts}: check failed: {e}")),
                Ok(r) => {
                    let want =
                        format!("the log is 512 blocks, below the minimum of {kernel} blocks");
                    if !r.warnings.iter().any(|w| w.contains(&want)) {
                        failures.push(format!(
                            "{opts}: check's warnings {:?} lack {want:?}",
                            r.warnings
                        ));
                    }
                }
            },
        }
        let _ = std::fs::remove_file(&img);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn log_of_exactly_the_minimum_mounts() {
    if skip_unless_root("log_of_exactly_the_minimum_mounts")
        || skip_without_615("log_of_exactly_the_minimum_mounts")
    {
        return;
    }
    let dir = Scratch::new("logexact");
    let rows: [(&str, u64); 6] = [
        ("@CONF", 512 << 20),
        // Under 300 MB (fstests' sizes).
        ("@CONF -d agcount=2", 128 << 20),
        ("@CONF -d agcount=1", 128 << 20),
        // AGs of more than 8,184 blocks of 64 KiB: in smaller ones the free
        // space btrees have one level, and mkfs.xfs 6.15 fills the AGFL with
        // fewer blocks than 6.1 (whose layout xfskit makes) before the root.
        ("@CONF -b size=65536", 16 << 30),
        ("--defaults 6.1 -m rmapbt=1", 512 << 20),
        ("@CONF -b size=2048 -i size=1024", 512 << 20),
    ];
    for (i, (opts, size)) in rows.iter().enumerate() {
        let img = dir.0.join(format!("e{i}.img"));
        let _ = std::fs::remove_file(&img);
        std::fs::File::create(&img).unwrap().set_len(*size).unwrap();
        let base = words(&expand(opts));
        let parse = |log: &str| {
            let mut a = base.clone();
            a.extend(["-l".into(), format!("size={log}"), "-f".into()]);
            a.push(img.display().to_string());
            let mut o = parse_mkfs_args(&a).unwrap();
            o.unsupported = true;
            o
        };
        // xfskit's minimum, from its own refusal of a smaller log.
        let min = match compute_geometry(&parse("2m"), *size, TargetKind::File) {
            Err(e) => min_in(&e.to_string()).unwrap_or_else(|| panic!("{opts}: {e}")),
            Ok(g) => panic!("{opts}: a 2 MiB log ({} blocks) was accepted", g.logblocks),
        };
        let below = parse(&format!("{}b", min - 1));
        let err = mkfs_with(&img, &below, &WriteOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{opts}: a log of {} blocks was made", min - 1));
        assert_eq!(
            err.to_string(),
            format!(
                "log size {} blocks too small, minimum size is {min} blocks",
                min - 1
            ),
            "{opts}"
        );
        let report = mkfs_with(&img, &parse(&format!("{min}b")), &WriteOptions::default())
            .unwrap_or_else(|e| panic!("{opts}: {min} blocks: {e}"));
        assert_eq!(u64::from(report.geometry.logblocks), min, "{opts}");
        let mnt = dir.0.join(format!("e{i}.mnt"));
        kernel_mount_rw_at(&img, &mnt)
            .unwrap_or_else(|e| panic!("{opts}: log of {min} blocks: {e}"));
        std::fs::write(mnt.join("f"), vec![7u8; 1 << 20]).unwrap();
        kernel_umount(&mnt);
        let _ = std::fs::remove_dir(&mnt);
        if opts.contains("agcount=1") {
            // xfs_repair checks one AG only when told to.
            let (ok, out) = run_615(
                "xfs_repair",
                &["-n", "-o", "force_geometry", &img.display().to_string()],
            );
            assert!(ok, "{opts}: xfs_repair -n (6.15): {out}");
        } else {
            assert_repair_615_clean(&img);
        }
        // The engine writes to it too.
        let fs = Fs::open_rw(&img, &OpenOptions::default())
            .unwrap_or_else(|e| panic!("{opts}: engine refuses the minimum log: {e}"));
        fs.sync().unwrap();
        drop(fs);
        let _ = std::fs::remove_file(&img);
    }
}

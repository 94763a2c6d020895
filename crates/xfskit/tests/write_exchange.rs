//! `Fs::exchange_range` against the kernel's XFS_IOC_EXCHANGE_RANGE: two
//! identical images (mkfs.xfs 6.15 with the 6.18 defaults: exchange-range,
//! reflink, rmapbt, parent pointers) with files of several extents, holes,
//! unwritten and shared blocks; the kernel exchanges on one (xfs_io 6.15
//! `exchangerange` through a loop mount), xfskit the same ranges on the
//! other; contents, sizes, extent maps and the reflink flags must agree and
//! `xfs_repair -n` 6.15 be clean on both. Then the refusals, a crash
//! at every write of one exchange, an exchange of thousands of pairs of
//! mappings in the smallest log mkfs.xfs allows (many checkpoints, the
//! log's tail following the chain of intents), and a crash at every
//! write of an exchange of many steps, each step written back as it
//! commits (recovery finishes the exchange from its last intent).

mod crash_common;
mod namespace_common;
mod write_common;

use crash_common::{CrashDevice, Shared};
use namespace_common::meta;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use write_common::*;
use xfskit::inode::Fork;
use xfskit::namespace::ExchangeFlags;
use xfskit::{Error, Fs, Ino, OpenOptions};

const K: u64 = 1024;
const FILES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

fn xfs_io(args: &[&str]) {
    let (ok, out) = run_615("xfs_io", args);
    assert!(
        ok && !out.contains("Invalid") && !out.contains("rror"),
        "xfs_io {args:?}: {out}"
    );
}

/// The files: `a` and `b` of interleaved extents (each write fsynced),
/// a hole punched in `a`, preallocation past its end, blocks shared with
/// `c`; `b` ending in a partial block; `d` sharing blocks with `c` and
/// ending in a partial block; `e` plain; `f` (shared blocks) and `g`
/// (plain) of five blocks each, exchanged whole: Linux 6.18.44 leaves the
/// reflink flag on `f` (and sets it on `g`), where earlier kernels moved
/// it to `g` alone.
fn populate(mnt: &Path) {
    let p = |n: &str| mnt.join(n).display().to_string();
    let (a, b, c, d, e) = (p("a"), p("b"), p("c"), p("d"), p("e"));
    xfs_io(&["-f", "-c", "pwrite -S 0x33 0 64k", "-c", "fsync", &c]);
    for i in 0..6u64 {
        let wa = format!("pwrite -S {:#x} {}k 16k", 0x10 + i, i * 16);
        let wb = format!("pwrite -S {:#x} {}k 12k", 0x40 + i, i * 16);
        xfs_io(&["-f", "-c", &wa, "-c", "fsync", &a]);
        xfs_io(&["-f", "-c", &wb, "-c", "fsync", &b]);
    }
    xfs_io(&["-c", "fpunch 32k 8k", "-c", "falloc 100k 24k", &a]);
    xfs_io(&["-c", &format!("reflink {c} 0 48k 16k"), &a]);
    xfs_io(&[
        "-c",
        "falloc 72k 8k",
        "-c",
        "truncate 92283",
        "-c",
        "fsync",
        &b,
    ]);
    xfs_io(&["-f", "-c", &format!("reflink {c} 0 0 12k"), &d]);
    xfs_io(&["-c", "pwrite -S 0x77 12k 100", "-c", "fsync", &d]);
    xfs_io(&["-f", "-c", "pwrite -S 0x88 0 20k", "-c", "fsync", &e]);
    let (f, g) = (p("f"), p("g"));
    xfs_io(&["-f", "-c", &format!("reflink {c} 0 0 16k"), &f]);
    xfs_io(&["-c", "pwrite -S 0x99 16k 4k", "-c", "fsync", &f]);
    xfs_io(&["-f", "-c", "pwrite -S 0xaa 0 18k", "-c", "fsync", &g]);
}

/// One exchange: (file1, off1, file2, off2, len, flags); len None: to EOF.
type Op = (
    &'static str,
    u64,
    &'static str,
    u64,
    Option<u64>,
    ExchangeFlags,
);

fn ops() -> Vec<Op> {
    vec![
        ("a", 16 * K, "b", 32 * K, Some(40 * K), ExchangeFlags::NONE),
        ("b", 0, "a", 0, Some(64 * K), ExchangeFlags::FILE1_WRITTEN),
        ("d", 0, "e", 0, None, ExchangeFlags::NONE),
        ("a", 8 * K, "b", 8 * K, None, ExchangeFlags::DSYNC),
        ("f", 0, "g", 0, None, ExchangeFlags::NONE),
    ]
}

fn kernel_exchange(mnt: &Path, op: &Op) {
    let (f1, o1, f2, o2, len, flags) = *op;
    let mut cmd = String::from("exchangerange");
    if flags.contains(ExchangeFlags::FILE1_WRITTEN) {
        cmd.push_str(" -w");
    }
    if flags.contains(ExchangeFlags::DSYNC) {
        cmd.push_str(" -f");
    }
    cmd.push_str(&format!(" -s {o1} -d {o2}"));
    if let Some(l) = len {
        cmd.push_str(&format!(" -l {l}"));
    }
    cmd.push_str(&format!(" {}", mnt.join(f1).display()));
    xfs_io(&["-c", &cmd, &mnt.join(f2).display().to_string()]);
}

fn ino(fs: &Fs, name: &str) -> Ino {
    fs.lookup_path(format!("/{name}").as_bytes()).unwrap().ino
}

fn our_exchange(fs: &Fs, op: &Op) {
    let (f1, o1, f2, o2, len, flags) = *op;
    let flags = if len.is_none() {
        flags | ExchangeFlags::TO_EOF
    } else {
        flags
    };
    fs.exchange_range(ino(fs, f1), o1, ino(fs, f2), o2, len.unwrap_or(0), flags)
        .unwrap_or_else(|e| panic!("{op:?}: {e}"));
}

/// What is compared: size, data, extents (offset, block, length,
/// unwritten), reflink and large-extent-count flags.
type Snap = BTreeMap<String, (u64, Vec<u8>, Vec<(u64, u64, u64, bool)>, u64)>;

fn snapshot(img: &Path) -> Snap {
    snapshot_of(img, &FILES)
}

fn snapshot_of(img: &Path, names: &[&str]) -> Snap {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let mut m = Snap::new();
    for &n in names {
        let ip = fs.lookup_path(format!("/{n}").as_bytes()).unwrap();
        let mut data = vec![0u8; ip.size as usize];
        let got = xfskit::inode::read_at(&fs, &ip, 0, &mut data).unwrap();
        data.truncate(got);
        let ext = xfskit::inode::extents(&fs, &ip, Fork::Data)
            .unwrap()
            .iter()
            .map(|e| (e.offset, e.start.0, e.len, e.unwritten))
            .collect();
        let flags = ip.flags2
            & (xfs_format::inode::XFS_DIFLAG2_REFLINK | xfs_format::inode::XFS_DIFLAG2_NREXT64);
        m.insert(n.to_string(), (ip.size, data, ext, flags));
    }
    m
}

/// Contents as a kernel mount reads them.
fn kernel_contents(img: &Path) -> Option<BTreeMap<String, Vec<u8>>> {
    with_kernel_mount(img, |mnt| {
        FILES
            .iter()
            .map(|n| (n.to_string(), std::fs::read(mnt.join(n)).unwrap()))
            .collect()
    })
}

fn describe(a: &Snap, b: &Snap) -> String {
    let mut out = String::new();
    for (n, x) in a {
        let y = &b[n];
        if x != y {
            out.push_str(&format!(
                "{n}: kernel size {} flags {:#x} extents {:?}\n   xfskit size {} flags {:#x} extents {:?}\n   data equal: {}\n",
                x.0, x.3, x.2, y.0, y.3, y.2, x.1 == y.1
            ));
        }
    }
    out
}

#[test]
fn exchanges_match_the_kernel() {
    if skip_unless_root("exchanges_match_the_kernel")
        || skip_without_615("exchanges_match_the_kernel")
    {
        return;
    }
    let s = Scratch::new("xchg-kernel");
    let (kimg, ximg) = (s.0.join("kernel.img"), s.0.join("xfskit.img"));
    mkfs_618(&kimg, 320 << 20, "");
    let mnt = s.0.join("mnt");
    kernel_mount_rw_at(&kimg, &mnt).unwrap();
    populate(&mnt);
    kernel_umount(&mnt);
    std::fs::copy(&kimg, &ximg).unwrap();
    let before = snapshot(&kimg);
    assert!(
        before["a"].2.len() >= 5,
        "a has few extents: {:?}",
        before["a"].2
    );

    kernel_mount_rw_at(&kimg, &mnt).unwrap();
    for op in ops() {
        kernel_exchange(&mnt, &op);
    }
    kernel_umount(&mnt);

    let fs = Fs::open_rw(&ximg, &OpenOptions::default()).unwrap();
    let t0 = fs.inode(ino(&fs, "a")).unwrap().mtime;
    for op in ops() {
        our_exchange(&fs, &op);
    }
    for n in ["a", "b", "d", "e", "f", "g"] {
        let ip = fs.inode(ino(&fs, n)).unwrap();
        assert!(
            ip.mtime >= t0 && ip.ctime == ip.mtime,
            "{n}: times not updated"
        );
    }
    fs.sync().unwrap();
    drop(fs);

    let (k, x) = (snapshot(&kimg), snapshot(&ximg));
    assert_ne!(before, k, "the kernel's exchanges changed nothing");
    for (n, (size, _, ext, flags)) in &k {
        let unwritten = ext.iter().filter(|e| e.3).count();
        eprintln!(
            "{n}: size {} -> {size}, {} -> {} extents ({unwritten} unwritten), flags {:#x} -> {flags:#x}",
            before[n].0,
            before[n].2.len(),
            ext.len(),
            before[n].3
        );
    }
    assert!(
        k == x,
        "xfskit and the kernel differ:\n{}",
        describe(&k, &x)
    );
    assert_repair_615_clean(&kimg);
    assert_repair_615_clean(&ximg);
    let (kc, xc) = (kernel_contents(&kimg), kernel_contents(&ximg));
    assert_eq!(kc, xc, "contents through kernel mounts differ");
}

#[test]
fn refusals() {
    if skip_without_615("refusals") {
        return;
    }
    let s = Scratch::new("xchg-refuse");
    let img = s.0.join("img");
    mkfs_618(&img, 320 << 20, "");
    let fs = Fs::open_rw(&img, &OpenOptions::default()).unwrap();
    let root = fs.geometry().root_ino;
    let meta = meta(0o644, 0);
    let mk = |n: &[u8], size: usize| {
        let i = fs
            .create(root, n, &xfskit::build::NodeKind::File { size: 0 }, &meta)
            .unwrap();
        fs.write_at(i, 0, &vec![0x5a; size]).unwrap();
        i
    };
    let (f1, f2) = (mk(b"f1", 40960), mk(b"f2", 40960 + 100));
    let dir = fs
        .create(root, b"d", &xfskit::build::NodeKind::Dir, &meta)
        .unwrap();
    let none = ExchangeFlags::NONE;
    let invalid = |r: xfskit::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::Invalid(_))), "{what}: {r:?}");
    };
    invalid(
        fs.exchange_range(f1, 1, f2, 0, 4096, none),
        "unaligned offset",
    );
    invalid(
        fs.exchange_range(f1, 0, f2, 4096, 100, none),
        "unaligned length",
    );
    invalid(fs.exchange_range(f1, 0, f2, 0, 45056, none), "past EOF");
    invalid(
        fs.exchange_range(f1, 45056, f2, 0, 0, none),
        "start past EOF",
    );
    invalid(fs.exchange_range(f1, 0, f2, 0, u64::MAX, none), "past i64");
    invalid(
        fs.exchange_range(f1, 0, f2, 0, 4096, ExchangeFlags::from_bits(0x10)),
        "unknown flag",
    );
    // f2's partial last block into the middle of f1.
    invalid(
        fs.exchange_range(f2, 0, f1, 0, 40960 + 100, none),
        "partial block",
    );
    invalid(fs.exchange_range(f1, 0, f1, 4096, 8192, none), "overlap");
    assert!(matches!(
        fs.exchange_range(f1, 0, dir, 0, 4096, none),
        Err(Error::IsDir(_))
    ));
    assert!(matches!(
        fs.exchange_range(f1, 0, f1, 16384, 4096, none),
        Err(Error::Unsupported(_))
    ));
    // A dry run and a zero length change nothing.
    let before = fs.inode(f1).unwrap();
    fs.exchange_range(f1, 0, f2, 0, 8192, ExchangeFlags::DRY_RUN)
        .unwrap();
    fs.exchange_range(f1, 0, f2, 0, 0, none).unwrap();
    assert_eq!(fs.inode(f1).unwrap().mtime, before.mtime);
    fs.sync().unwrap();
    drop(fs);

    // Without the feature.
    let plain = s.0.join("plain");
    mkfs_xfs(&plain, 320 << 20, "");
    let fs = Fs::open_rw(&plain, &OpenOptions::default()).unwrap();
    let root = fs.geometry().root_ino;
    let a = fs
        .create(
            root,
            b"a",
            &xfskit::build::NodeKind::File { size: 0 },
            &meta,
        )
        .unwrap();
    let b = fs
        .create(
            root,
            b"b",
            &xfskit::build::NodeKind::File { size: 0 },
            &meta,
        )
        .unwrap();
    assert!(matches!(
        fs.exchange_range(a, 0, b, 0, 0, ExchangeFlags::TO_EOF),
        Err(Error::Unsupported(_))
    ));
}

/// Opens `dev` read-write and tells it where the log is (for torn writes).
fn open_crashing(dev: &Arc<CrashDevice>, opts: &OpenOptions) -> xfskit::Result<Fs> {
    let fs = Fs::from_device_rw(Box::new(Shared(dev.clone())), opts)?;
    let g = fs.geometry();
    let lo = g.fsb_to_daddr(g.log_start).bytes();
    dev.set_log(lo, lo + u64::from(g.log_blocks) * u64::from(g.block_size));
    Ok(fs)
}

/// What a crash sweep saw: crashes, recoveries to the old files, to the
/// new ones, and crashes during the exchange that recovery finished.
#[derive(Default)]
struct Sweep {
    crashes: u32,
    old: u32,
    new: u32,
    finished: u32,
}

/// Cuts the writes of `run` (an exchange and its sync on an image of
/// `base`) at every point, whole and torn, until a run completes. After
/// each crash both recoveries, xfskit's and the kernel's, must give the
/// files `names` as in `old` or as in `new` with `xfs_repair -n` 6.15
/// clean; with `same`, the two recoveries must also agree with each
/// other. `run` returns whether the crash came before the exchange
/// returned, and the result of the whole. Two workers take the crash
/// points in turn (each point is independent: its own device over the
/// same base image, its own copies); every point before the first run
/// that completes is checked.
fn crash_sweep(
    s: &Scratch,
    base: &Path,
    opts: &OpenOptions,
    names: &[&str],
    (old, new): (&Snap, &Snap),
    same: bool,
    run: impl Fn(&Fs) -> (bool, xfskit::Result<()>) + Sync,
) -> Sweep {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    let seen = Mutex::new(Sweep::default());
    for tear in [false, true] {
        let next = AtomicU64::new(1);
        // The first crash point whose run completed: no point after it
        // is taken.
        let end = AtomicU64::new(u64::MAX);
        std::thread::scope(|sc| {
            for w in 0..2 {
                let (next, end, seen, run) = (&next, &end, &seen, &run);
                let img = s.0.join(format!("img{w}"));
                let ours = s.0.join(format!("ours{w}"));
                sc.spawn(move || loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= end.load(Ordering::Relaxed) {
                        break;
                    }
                    let dev = Arc::new(CrashDevice::new(base, Some(n), tear));
                    let fs = open_crashing(&dev, opts).unwrap();
                    let (during, r) = run(&fs);
                    drop(fs);
                    if r.is_ok() {
                        end.fetch_min(n, Ordering::Relaxed);
                        break;
                    }
                    let x = crash_point(&dev, base, &img, &ours, n, tear, names, (old, new), same);
                    let mut seen = seen.lock().unwrap();
                    seen.crashes += 1;
                    if x == *old {
                        seen.old += 1;
                    } else {
                        seen.new += 1;
                        if during {
                            seen.finished += 1;
                        }
                    }
                });
            }
        });
        assert!(
            end.into_inner() < u64::MAX,
            "no run completed (tear {tear})"
        );
    }
    seen.into_inner().unwrap()
}

/// Checks one crash point of [`crash_sweep`] and returns the files as
/// xfskit's recovery left them.
#[allow(clippy::too_many_arguments)]
fn crash_point(
    dev: &CrashDevice,
    base: &Path,
    img: &Path,
    ours: &Path,
    n: u64,
    tear: bool,
    names: &[&str],
    (old, new): (&Snap, &Snap),
    same: bool,
) -> Snap {
    dev.save(base, img);
    std::fs::copy(img, ours).unwrap();
    let what = format!("crash at write {n} (tear {tear})");
    let fs = Fs::open_rw(ours, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: xfskit recovery failed: {e}"));
    fs.sync().unwrap();
    drop(fs);
    let x = snapshot_of(ours, names);
    assert!(
        x == *old || x == *new,
        "{what}, xfskit's recovery: {}",
        describe(new, &x)
    );
    assert_repair_615_clean(ours);
    if let Err(e) = kernel_replay(img) {
        panic!("{what}: the kernel cannot replay our log: {e}");
    }
    assert_repair_615_clean(img);
    let k = snapshot_of(img, names);
    assert!(
        k == *old || k == *new,
        "{what}, the kernel's recovery: {}",
        describe(new, &k)
    );
    if same {
        assert!(
            k == x,
            "{what}: the kernel's recovery and xfskit's differ:\n{}",
            describe(&k, &x)
        );
    }
    x
}

/// A crash at every write of one exchange (and the sync after it): both
/// recoveries give the files before or after it, whole, and a clean
/// `xfs_repair -n` 6.15.
#[test]
fn a_crashed_exchange_recovers_old_or_new() {
    if skip_unless_root("a_crashed_exchange_recovers_old_or_new")
        || skip_without_615("a_crashed_exchange_recovers_old_or_new")
    {
        return;
    }
    let s = Scratch::new("xchg-crash");
    let base = s.0.join("base");
    mkfs_618(&base, 320 << 20, "");
    let mnt = s.0.join("mnt");
    kernel_mount_rw_at(&base, &mnt).unwrap();
    populate(&mnt);
    kernel_umount(&mnt);
    let old = snapshot(&base);
    let op: Op = ("a", 0, "b", 0, None, ExchangeFlags::NONE);
    let new = {
        let img = s.0.join("new");
        std::fs::copy(&base, &img).unwrap();
        let fs = Fs::open_rw(&img, &OpenOptions::default()).unwrap();
        our_exchange(&fs, &op);
        fs.sync().unwrap();
        drop(fs);
        snapshot(&img)
    };
    assert_ne!(old, new);
    let (f1, _, f2, _, _, _) = op;
    let seen = crash_sweep(
        &s,
        &base,
        &OpenOptions::default(),
        &FILES,
        (&old, &new),
        false,
        |fs| {
            let r = fs
                .exchange_range(ino(fs, f1), 0, ino(fs, f2), 0, 0, ExchangeFlags::TO_EOF)
                .and_then(|_| fs.sync());
            (false, r)
        },
    );
    eprintln!(
        "{} crashes: {} recovered the old files, {} the new",
        seen.crashes, seen.old, seen.new
    );
    assert!(seen.crashes > 0 && seen.old > 0 && seen.new > 0);
}

/// The smallest log mkfs.xfs 6.15 makes with the 6.18 defaults on a
/// 320 MB filesystem of 4 KiB blocks: 2001 blocks (8 MB).
const SMALL_LOG: &str = "-l size=2001b";

/// Blocks of `m` written (one in every other block); `n` is written
/// whole over twice as many, so exchanging them whole takes twice as
/// many pairs of mappings.
const LONG: u64 = 10000;

/// `m`: `blocks` single-block extents between holes; `n`: `n_size`
/// bytes written whole.
fn populate_sparse(mnt: &Path, blocks: u64, n_size: u64) {
    let mut cmds: Vec<String> = (0..blocks)
        .map(|i| format!("pwrite -S {:#x} {}k 4k", 0x20 + i % 64, i * 8))
        .collect();
    cmds.push("fsync".into());
    let m = mnt.join("m").display().to_string();
    let mut args: Vec<&str> = vec!["-f"];
    for c in &cmds {
        args.extend(["-c", c]);
    }
    args.push(&m);
    xfs_io(&args);
    let whole = format!("pwrite -S 0x6e -b 1m 0 {n_size}");
    let n = mnt.join("n").display().to_string();
    xfs_io(&["-f", "-c", &whole, "-c", "fsync", &n]);
}

/// An image of the smallest log with `m` and `n` made by the kernel.
fn sparse_image(img: &Path, mnt: &Path, blocks: u64, n_size: u64) {
    mkfs_618_qa(img, 320 << 20, SMALL_LOG);
    kernel_mount_rw_at(img, mnt).unwrap();
    populate_sparse(mnt, blocks, n_size);
    kernel_umount(mnt);
}

#[test]
fn a_long_exchange_in_the_smallest_log_matches_the_kernel() {
    if skip_unless_root("a_long_exchange_in_the_smallest_log_matches_the_kernel")
        || skip_without_615("a_long_exchange_in_the_smallest_log_matches_the_kernel")
    {
        return;
    }
    let s = Scratch::new("xchg-long");
    let (kimg, ximg) = (s.0.join("kernel.img"), s.0.join("xfskit.img"));
    let mnt = s.0.join("mnt");
    sparse_image(&kimg, &mnt, LONG, LONG * 8192 + 300);
    std::fs::copy(&kimg, &ximg).unwrap();
    let names = ["m", "n"];
    let before = snapshot_of(&kimg, &names);
    assert!(
        before["m"].2.len() as u64 >= LONG,
        "m has {} extents",
        before["m"].2.len()
    );
    let op: Op = ("m", 0, "n", 0, None, ExchangeFlags::NONE);

    kernel_mount_rw_at(&kimg, &mnt).unwrap();
    kernel_exchange(&mnt, &op);
    kernel_umount(&mnt);

    let fs = Fs::open_rw(&ximg, &OpenOptions::default()).unwrap();
    let g = fs.geometry();
    let log = u64::from(g.log_blocks) * u64::from(g.block_size);
    assert_eq!(g.log_blocks, 2001);
    let s0 = fs.log_stats();
    let t = std::time::Instant::now();
    our_exchange(&fs, &op);
    let s1 = fs.log_stats();
    eprintln!(
        "{} pairs' exchange: {:?}, {} checkpoints, {} log bytes ({} log)",
        2 * LONG,
        t.elapsed(),
        s1.checkpoints - s0.checkpoints,
        s1.bytes - s0.bytes,
        log
    );
    // The chain spans several checkpoints and logs more than a
    // sixteenth of the log (which one transaction could not).
    assert!(s1.checkpoints - s0.checkpoints >= 2);
    assert!(
        s1.bytes - s0.bytes > log / 16,
        "logged only {}",
        s1.bytes - s0.bytes
    );
    fs.sync().unwrap();
    drop(fs);

    let (k, x) = (snapshot_of(&kimg, &names), snapshot_of(&ximg, &names));
    assert_ne!(before, k, "the kernel's exchange changed nothing");
    assert!(
        k == x,
        "xfskit and the kernel differ:\n{}",
        describe(&k, &x)
    );
    assert_repair_615_clean(&kimg);
    assert_repair_615_clean(&ximg);
}

/// Blocks of `m` in the crash test: some 20 pairs of mappings (each a
/// checkpoint and its writeback; about 100 writes, each cut, whole and
/// torn).
const STEPS: u64 = 10;

/// A crash at every write of an exchange of many steps, each written back
/// as it commits (a pending limit of a few blocks), in the smallest log:
/// the log then holds the chain of intents cut after any step. Recovery,
/// the kernel's (by a loop mount) and xfskit's, finishes the exchange
/// from the last intent: the files are as before the exchange or as
/// after it, whole, both recoveries agree, `xfs_repair -n` 6.15 is clean.
///
/// Why the files end in the same block: when an exchange to the ends of
/// the files gives one file more blocks than it had, Linux 6.18's
/// recovery (of its own logs as of ours) sets the new size on disk but
/// not in the inode it holds in memory, and when that inode is let go
/// it trims the blocks past the old size as if they were preallocation:
/// that file loses the other's last blocks (a hole instead), with a
/// clean `xfs_repair`. xfskit's recovery finishes the exchange whole.
#[test]
fn a_crash_at_every_write_of_a_chained_exchange_recovers() {
    if skip_unless_root("a_crash_at_every_write_of_a_chained_exchange_recovers")
        || skip_without_615("a_crash_at_every_write_of_a_chained_exchange_recovers")
    {
        return;
    }
    let s = Scratch::new("xchg-chain-crash");
    let base = s.0.join("base");
    let mnt = s.0.join("mnt");
    // `n` one block shorter than `m` (its last one partial), so that
    // the exchange changes neither file's count of blocks: see below.
    sparse_image(&base, &mnt, STEPS, (2 * STEPS - 1) * 4096 - 100);
    let names = ["m", "n"];
    let old = snapshot_of(&base, &names);
    let opts = OpenOptions {
        pending_limits: Some((4 << 10, 1 << 20)),
        ..OpenOptions::default()
    };
    let exchange =
        |fs: &Fs| fs.exchange_range(ino(fs, "m"), 0, ino(fs, "n"), 0, 0, ExchangeFlags::TO_EOF);
    // The run without a crash: what "after" is, and how many writes.
    let (new, writes, checkpoints) = {
        let dev = Arc::new(CrashDevice::new(&base, None, false));
        let fs = open_crashing(&dev, &opts).unwrap();
        let c0 = fs.log_stats().checkpoints;
        exchange(&fs).unwrap();
        let c = fs.log_stats().checkpoints - c0;
        fs.sync().unwrap();
        drop(fs);
        let img = s.0.join("new");
        dev.save(&base, &img);
        assert_repair_615_clean(&img);
        (snapshot_of(&img, &names), dev.writes(), c)
    };
    assert_ne!(old, new);
    eprintln!("the exchange: {checkpoints} checkpoints, {writes} writes with its sync");
    assert!(checkpoints >= 10, "only {checkpoints} checkpoints");
    let seen = crash_sweep(
        &s,
        &base,
        &opts,
        &names,
        (&old, &new),
        true,
        |fs| match exchange(fs) {
            Err(e) => (true, Err(e)),
            Ok(()) => (false, fs.sync()),
        },
    );
    eprintln!(
        "{} crashes of {writes} writes: {} recovered the old files, \
         {} cut the exchange part way and recovery finished it",
        seen.crashes, seen.old, seen.finished
    );
    assert!(seen.crashes > 0 && seen.old > 0 && seen.finished > 0);
}

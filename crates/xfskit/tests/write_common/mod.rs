//! Shared helpers for write-engine tests: fresh images made by the real
//! mkfs.xfs, xfs_repair -n, and a kernel loop mount.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;
use xfskit::{Fs, OpenOptions};

/// Runs a command, returning success and its combined output.
pub fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    run_command(Command::new(cmd).args(args), cmd)
}

/// Runs `c`, returning success and its combined output (`name` in the
/// error when it cannot start).
fn run_command(c: &mut Command, name: &str) -> (bool, String) {
    match c.output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("cannot run {name}: {e}")),
    }
}

pub use xfskit_testkit::{is_root, skip, Scratch};

/// True (after printing why and recording the skip in
/// `$XFSKIT_SKIP_LOG`, so that it is not counted as passed) when test
/// `test` needs root for a kernel mount and is not root.
pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    skip(test, "needs root for a kernel mount");
    true
}

/// Makes a `size`-byte image at `path` with the installed mkfs.xfs and
/// extra options (e.g. "-b size=1024 -n size=8192").
pub fn mkfs_xfs(path: &Path, size: u64, opts: &str) {
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    let mut args: Vec<&str> = opts.split_whitespace().collect();
    let p = path.display().to_string();
    args.extend(["-q", "-f", &p]);
    let (ok, out) = run("mkfs.xfs", &args);
    assert!(ok, "mkfs.xfs {opts}: {out}");
}

/// Opens an image for writing.
pub fn open_rw(path: &Path) -> Fs {
    Fs::open_rw(path, &OpenOptions::default()).unwrap()
}

/// Panics with xfs_repair's findings unless `xfs_repair -n` is clean.
pub fn assert_repair_clean(path: &Path) {
    let (ok, out) = run("xfs_repair", &["-n", &path.display().to_string()]);
    assert!(
        ok,
        "xfs_repair -n {} found problems:\n{out}",
        path.display()
    );
}

/// Loop-mounts `img` read-write at `mnt` (made if missing), so that the
/// kernel replays its log; the error names what failed, with the
/// kernel's last messages. The mount point is removed again on failure.
pub fn kernel_mount_rw_at(img: &Path, mnt: &Path) -> Result<(), String> {
    std::fs::create_dir_all(mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            "loop,nouuid",
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    if ok {
        return Ok(());
    }
    let dmesg = run("dmesg", &[]).1;
    let tail: Vec<&str> = dmesg.lines().rev().take(15).collect();
    let _ = std::fs::remove_dir(mnt);
    Err(format!(
        "kernel mount (log replay) failed: {out}\n{tail:#?}"
    ))
}

/// Unmounts `mnt`, which must succeed.
pub fn kernel_umount(mnt: &Path) {
    let (ok, out) = umount(mnt);
    assert!(ok, "umount {}: {out}", mnt.display());
}

pub use xfskit_testkit::umount;

/// Mounts `img` read-write and unmounts it, so that the kernel replays
/// its log (see [`kernel_mount_rw_at`]).
pub fn kernel_replay(img: &Path) -> Result<(), String> {
    let mnt = img.with_extension("rmnt");
    kernel_mount_rw_at(img, &mnt)?;
    kernel_umount(&mnt);
    let _ = std::fs::remove_dir(&mnt);
    Ok(())
}

/// Loop-mounts `img` read-only at a fresh directory, runs `f` on the
/// mount point, unmounts. Returns None (after printing why) when not root.
pub fn with_kernel_mount<T>(img: &Path, f: impl FnOnce(&Path) -> T) -> Option<T> {
    if !is_root() {
        eprintln!("SKIP kernel mount: needs root");
        return None;
    }
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &[
            "-o",
            "loop,ro,nouuid",
            &img.display().to_string(),
            &mnt.display().to_string(),
        ],
    );
    assert!(ok, "kernel mount of {} failed: {out}", img.display());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mnt)));
    let (ok, out) = umount(&mnt);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    match r {
        Ok(v) => Some(v),
        Err(e) => std::panic::resume_unwind(e),
    }
}

/// A tiny deterministic generator (xorshift64), so failures reproduce
/// from the seed a test prints or fixes.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Makes a sparse image at `img` of `ags` AGs of 128 MiB (small AGs, yet
/// room for the smallest log in one) with the library's mkfs, which is far
/// faster than mkfs.xfs at thousands of AGs.
pub fn mkfs_many_ags(img: &Path, ags: u32) {
    use xfskit::mkfs::{mkfs_with, parse_mkfs_args, WriteOptions};
    std::fs::File::create(img)
        .expect("create")
        .set_len(u64::from(ags) * (128 << 20))
        .expect("set_len");
    let args: Vec<String> = [
        "--defaults",
        "6.1",
        "-d",
        &format!("agcount={ags}"),
        img.to_str().expect("utf-8 path"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let o = parse_mkfs_args(&args).expect("mkfs args");
    let g = mkfs_with(
        img,
        &o,
        &WriteOptions {
            timestamp: None,
            progress: None,
        },
    )
    .expect("mkfs");
    assert_eq!(
        g.geometry.agcount, ags,
        "mkfs made {} AGs",
        g.geometry.agcount
    );
}

/// The xfsprogs 6.15 build beside the project (`../shared/xfsprogs-6.15`,
/// or `$XFSKIT_XFSPROGS_615`), when it is there.
pub fn xfsprogs_615() -> Option<PathBuf> {
    let dir = match std::env::var_os("XFSKIT_XFSPROGS_615") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-6.15"),
    };
    dir.join("libexec/xfs_repair").exists().then_some(dir)
}

/// Runs xfsprogs 6.15's `tool` (mkfs.xfs, xfs_repair, xfs_db, xfs_io)
/// with its private library; panics when the build is not there (check
/// [`skip_without_615`] first).
pub fn run_615(tool: &str, args: &[&str]) -> (bool, String) {
    let dir = xfsprogs_615().expect("xfsprogs 6.15 beside the project");
    run_command(
        Command::new(dir.join("libexec").join(tool))
            .args(args)
            .env("LD_LIBRARY_PATH", dir.join("lib")),
        tool,
    )
}

/// True (after recording the skip) when xfsprogs 6.15 is not beside the
/// project or cannot run (its libraries missing).
pub fn skip_without_615(test: &str) -> bool {
    let why = match xfsprogs_615() {
        None => "xfsprogs 6.15 not found at ../shared/xfsprogs-6.15".to_string(),
        Some(_) => match run_615("xfs_repair", &["-V"]) {
            (true, _) => return false,
            (false, out) => format!("xfsprogs 6.15 does not run: {}", out.trim()),
        },
    };
    skip(test, &why);
    true
}

/// Makes a `size`-byte image with mkfs.xfs 6.15 and the on-disk defaults
/// of xfsprogs 6.18 (parent pointers, exchange-range, rmapbt, nrext64),
/// plus `opts`.
pub fn mkfs_618(path: &Path, size: u64, opts: &str) {
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    let conf = xfsprogs_615().unwrap().join("conf/lts_6.18.conf");
    let conf = format!("options={}", conf.display());
    let mut args: Vec<&str> = vec!["-c", &conf];
    args.extend(opts.split_whitespace());
    let p = path.display().to_string();
    args.extend(["-q", "-f", &p]);
    let (ok, out) = run_615("mkfs.xfs", &args);
    assert!(ok, "mkfs.xfs 6.15 (6.18 defaults) {opts}: {out}");
}

/// A command running xfsprogs 6.15's `tool` in the environment of
/// xfstests (`TEST_DIR`, `TEST_DEV`, `QA_CHECK_FS`), under which mkfs.xfs
/// accepts filesystems under 300 MB, one AG and logs under 64 MiB.
pub fn command_615_qa(tool: &str) -> Command {
    let dir = xfsprogs_615().expect("xfsprogs 6.15 beside the project");
    let mut c = Command::new(dir.join("libexec").join(tool));
    c.env("LD_LIBRARY_PATH", dir.join("lib"))
        .env("TEST_DIR", "/tmp")
        .env("TEST_DEV", "/dev/null")
        .env("QA_CHECK_FS", "1");
    c
}

/// [`mkfs_618`] with the environment of xfstests (`TEST_DIR`, `TEST_DEV`,
/// `QA_CHECK_FS`), under which mkfs.xfs 6.15 accepts logs smaller than
/// 64 MiB (down to the minimum its log reservations allow) and
/// filesystems under 300 MB.
pub fn mkfs_618_qa(path: &Path, size: u64, opts: &str) {
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    let dir = xfsprogs_615().expect("xfsprogs 6.15 beside the project");
    let conf = format!("options={}", dir.join("conf/lts_6.18.conf").display());
    let mut args: Vec<&str> = vec!["-c", &conf];
    args.extend(opts.split_whitespace());
    let p = path.display().to_string();
    args.extend(["-q", "-f", &p]);
    let (ok, out) = run_command(command_615_qa("mkfs.xfs").args(&args), "mkfs.xfs");
    assert!(ok, "mkfs.xfs 6.15 (6.18 defaults, QA) {opts}: {out}");
}

/// As [`mkfs_618`], with a metadata directory tree (`metadir=1` in a copy
/// of the 6.18 defaults, which name it: mkfs.xfs refuses an option given
/// both in the file and on the command line).
pub fn mkfs_618_metadir(path: &Path, size: u64, opts: &str) {
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    let conf = xfsprogs_615().unwrap().join("conf/lts_6.18.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("metadir=0"), "{}: {text}", conf.display());
    let mine = path.with_extension("metadir.conf");
    std::fs::write(&mine, text.replace("metadir=0", "metadir=1")).unwrap();
    let conf = format!("options={}", mine.display());
    let mut args: Vec<&str> = vec!["-c", &conf];
    args.extend(opts.split_whitespace());
    let p = path.display().to_string();
    args.extend(["-q", "-f", &p]);
    let (ok, out) = run_615("mkfs.xfs", &args);
    assert!(ok, "mkfs.xfs 6.15 (6.18 defaults, metadir) {opts}: {out}");
}

/// Panics with xfs_repair 6.15's findings unless `xfs_repair -n` is clean.
pub fn assert_repair_615_clean(path: &Path) {
    let (ok, out) = run_615("xfs_repair", &["-n", &path.display().to_string()]);
    assert!(
        ok,
        "xfs_repair -n (6.15) {} found problems:\n{out}",
        path.display()
    );
}

/// `xfs_repair -n` of `path`: xfsprogs 6.15's when the image has features
/// Debian's 6.1 does not know (parent pointers, exchange-range) and 6.15
/// is beside the project, else the installed one. Returns success and
/// its output.
pub fn repair_n(path: &Path) -> (bool, String) {
    use std::os::unix::fs::FileExt;
    let mut sb = [0u8; 224];
    let newer = std::fs::File::open(path)
        .and_then(|f| f.read_exact_at(&mut sb, 0))
        .is_ok()
        && &sb[..4] == b"XFSB"
        && u32::from_be_bytes(sb[216..220].try_into().unwrap()) & !0x3f != 0;
    if newer && xfsprogs_615().is_some() {
        run_615("xfs_repair", &["-n", &path.display().to_string()])
    } else {
        run("xfs_repair", &["-n", &path.display().to_string()])
    }
}

/// Sets or clears incompat feature `bits` in every AG's superblock,
/// restamping each CRC.
pub fn set_incompat(img: &Path, bits: u32, on: bool) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .unwrap();
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    let mut sb = vec![0u8; 512];
    f.read_exact_at(&mut sb, 0).unwrap();
    let sect = usize::from(u16::from_be_bytes([sb[102], sb[103]]));
    let ag_bytes = u64::from(be32(&sb, 4)) * u64::from(be32(&sb, 84));
    for ag in 0..u64::from(be32(&sb, 88)) {
        let mut sb = vec![0u8; sect];
        f.read_exact_at(&mut sb, ag * ag_bytes).unwrap();
        let mut inc = be32(&sb, 216);
        if on {
            inc |= bits;
        } else {
            inc &= !bits;
        }
        sb[216..220].copy_from_slice(&inc.to_be_bytes());
        xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
        f.write_all_at(&sb, ag * ag_bytes).unwrap();
    }
    f.sync_all().unwrap();
}

/// Makes the empty image files `img` (`size` bytes) and `rt` (`rtsize`
/// bytes); returns the mkfs options of `opts` but its `-r` ones, and
/// those joined to `rtdev=RT` (the argument of one `-r`).
fn rt_files_and_args(
    img: &Path,
    size: u64,
    rt: &Path,
    rtsize: u64,
    opts: &str,
) -> (Vec<String>, String) {
    for (p, n) in [(img, size), (rt, rtsize)] {
        let _ = std::fs::remove_file(p);
        std::fs::File::create(p).unwrap().set_len(n).unwrap();
    }
    let mut args: Vec<String> = Vec::new();
    let mut r = format!("rtdev={}", rt.display());
    let mut it = opts.split_whitespace();
    while let Some(a) = it.next() {
        if a == "-r" {
            r = format!("{r},{}", it.next().unwrap());
        } else {
            args.push(a.to_string());
        }
    }
    (args, r)
}

/// Makes a `size`-byte image at `img` with xfskit's mkfs and a realtime
/// section on `rt` (`rtsize` bytes), `opts` being further mkfs.xfs
/// options (e.g. "-r extsize=16k"; their -r sub-options join rtdev's).
pub fn mkfs_rt(img: &Path, size: u64, rt: &Path, rtsize: u64, opts: &str) {
    let (mut args, r) = rt_files_and_args(img, size, rt, rtsize, opts);
    args.extend(["-q".into(), "-r".into(), r, img.display().to_string()]);
    let o = xfskit::mkfs::parse_mkfs_args(&args).unwrap();
    xfskit::mkfs::mkfs_with(img, &o, &xfskit::mkfs::WriteOptions::default()).unwrap();
}

/// A realtime group filesystem made by mkfs.xfs 6.15 (its own defaults,
/// the xfstests environment so that small sizes pass): `-m metadir=1`
/// plus `opts`; `-r` options in `opts` join `rtdev=RT` (as [`mkfs_rt`]).
pub fn mkfs_615_rtg(img: &Path, size: u64, rt: &Path, rtsize: u64, opts: &str) {
    let (mut args, r) = rt_files_and_args(img, size, rt, rtsize, opts);
    let dir = xfsprogs_615().expect("xfsprogs 6.15 beside the project");
    args.extend([
        "-q".into(),
        "-f".into(),
        "-r".into(),
        r,
        img.display().to_string(),
    ]);
    let (ok, out) = run_command(
        Command::new(dir.join("libexec/mkfs.xfs"))
            .args(&args)
            .env("LD_LIBRARY_PATH", dir.join("lib"))
            .env("TEST_DIR", "/tmp")
            .env("TEST_DEV", "/dev/null")
            .env("QA_CHECK_FS", "1"),
        "mkfs.xfs",
    );
    assert!(ok, "mkfs.xfs 6.15 {opts} -r {rtsize} bytes: {out}");
}

/// Opens an image with its realtime device for writing.
pub fn open_rw_rt(img: &Path, rt: &Path) -> Fs {
    Fs::open_rw(
        img,
        &OpenOptions {
            rtdev: Some(rt.to_path_buf()),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// Panics with xfs_repair 6.15's findings unless `xfs_repair -n -r RT`
/// finds the image clean.
pub fn assert_repair_615_rt_clean(img: &Path, rt: &Path) {
    let (ok, out) = run_615(
        "xfs_repair",
        &[
            "-n",
            "-r",
            &rt.display().to_string(),
            &img.display().to_string(),
        ],
    );
    assert!(
        ok,
        "xfs_repair -n -r (6.15) {} found problems:\n{out}",
        img.display()
    );
}

/// `-c options=FILE` for mkfs.xfs 6.15 with the defaults of Linux 6.18
/// (its `lts_6.18.conf`) plus a metadata directory, `reflink` as given:
/// with a realtime device, realtime groups with a realtime rmap btree
/// per group (and a refcount btree with reflink). mkfs.xfs refuses an
/// option given both there and on its command line, so the file says
/// it. Empty without xfsprogs 6.15 (the caller's test skips).
pub fn conf_618_metadir(reflink: bool) -> String {
    let Some(dir) = xfsprogs_615() else {
        return String::new();
    };
    let base = std::fs::read_to_string(dir.join("conf/lts_6.18.conf")).unwrap();
    let text: String = base
        .lines()
        .map(|l| match l.trim() {
            "metadir=0" => "metadir=1".to_string(),
            "reflink=1" if !reflink => "reflink=0".to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("metadir=1"), "lts_6.18.conf changed:\n{base}");
    // One file per variant, replaced whole (written aside, then renamed):
    // tests run side by side, and nothing piles up in the temp directory.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let tmp = std::env::temp_dir();
    let path = tmp.join(format!(
        "xfskit-618-metadir-reflink{}.conf",
        u8::from(reflink)
    ));
    let aside = tmp.join(format!(
        "xfskit-618-metadir-{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&aside, text + "\n").unwrap();
    std::fs::rename(&aside, &path).unwrap();
    format!("-c options={}", path.display())
}

/// An extent-free intent for realtime blocks (EFI_RT) of one extent, as
/// the kernel logs it (the 64-bit EFI format: type, size 1, one extent,
/// the intent's id, then start and length).
pub fn efi_rt_item(id: u64, start: u64, len: u32) -> Vec<u8> {
    efi_item_of(xfs_format::log_item::XFS_LI_EFI_RT, id, start, len)
}

/// An extent-free intent (EFI) of one extent of the data device.
pub fn efi_item(id: u64, start: u64, len: u32) -> Vec<u8> {
    efi_item_of(xfs_format::log_item::XFS_LI_EFI, id, start, len)
}

fn efi_item_of(kind: u16, id: u64, start: u64, len: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&start.to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v
}

/// A realtime reverse-mapping update intent (RUI_RT) of one mapping:
/// `owner`'s `len` blocks at realtime block `start`, file offset
/// `offset`, update kind and fork flags `flags` (XFS_RMAP_EXTENT_*).
pub fn rui_rt_item(id: u64, owner: u64, start: u64, offset: u64, len: u32, flags: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&xfs_format::log_item::XFS_LI_RUI_RT.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&owner.to_le_bytes());
    v.extend_from_slice(&start.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&flags.to_le_bytes());
    v
}

/// Makes inode `ino` of `img` (realtime device `rt`) let go of its data
/// behind the filesystem's back with xfs_db 6.15: no extents, size 0,
/// no blocks. What it mapped stays allocated, owned by nobody.
pub fn drop_data_fork_615(img: &Path, rt: &Path, ino: u64) {
    let (ok, out) = run_615(
        "xfs_db",
        &[
            "-x",
            "-R",
            &rt.display().to_string(),
            "-c",
            &format!("inode {ino}"),
            "-c",
            "write core.nextents 0",
            "-c",
            "write core.size 0",
            "-c",
            "write core.nblocks 0",
            &img.display().to_string(),
        ],
    );
    assert!(ok, "xfs_db: {out}");
}

/// xfsprogs 7.2's commands beside the project (`../shared/xfsprogs-7.2/bin`,
/// each of which runs its binary with the libraries it needs), when there.
pub fn xfsprogs_72_bin() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    dir.join("mkfs.xfs").exists().then_some(dir)
}

/// True (after recording the skip) when xfsprogs 7.2 is not beside the
/// project or does not run.
pub fn skip_without_72(test: &str) -> bool {
    let why = match xfsprogs_72_bin() {
        None => "xfsprogs 7.2 not found at ../shared/xfsprogs-7.2".to_string(),
        Some(bin) => match Command::new(bin.join("mkfs.xfs")).arg("-V").output() {
            Ok(o) if o.status.success() => return false,
            Ok(o) => format!(
                "xfsprogs 7.2 does not run: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("xfsprogs 7.2 does not run: {e}"),
        },
    };
    skip(test, &why);
    true
}

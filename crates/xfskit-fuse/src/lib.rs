//! FUSE adapter for xfskit: serves an XFS image, read-only or read-write,
//! through the kernel's FUSE driver (via `fuser`, which mounts with fusermount3 or
//! directly when root).
//!
//! This crate is the only place engine errors become errnos ([`errno`]).

mod acl;
mod acl_ops;
mod attrs;
mod bdi;
mod behind;
mod cache;
mod copy;
mod creds;
mod data;
mod dirplus;
mod dispatch;
pub mod errno;
mod handles;
mod ioctl;
mod names;
mod ops;
mod orphans;
mod placement;
mod pool;
mod statfs;
mod uring;
mod wire;
mod xattr;

pub use ops::XfsFuse;
pub use uring::kernel_allows as io_uring_allowed;

use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use std::io;
use std::path::Path;
use std::time::Duration;
use xfskit::namespace::AtimePolicy;
use xfskit::Fs;

/// Default READ workers: enough reads in flight to keep an SSD or a
/// virtual disk busy; they sleep on I/O, so they cost little CPU.
pub const DEFAULT_READ_THREADS: usize = 8;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Source name shown in /proc/mounts (after "xfskit:").
    pub source: String,
    /// Extra comma-separated mount options given by the user (`-o`).
    pub extra: Vec<String>,
    /// How long the kernel may cache attributes and names.
    pub ttl: Duration,
    /// Request-serving threads.
    pub threads: usize,
    /// Extra threads for READs that overlap other requests (0: none).
    pub read_threads: usize,
    /// Read-write: let the kernel keep written data in its page cache and
    /// send it in page-aligned WRITEs at writeback (FUSE's writeback cache)
    /// instead of one WRITE per write(2). Off by default: measured with
    /// bench/mount.sh it made random 4 KiB writes 25 times faster (as fast
    /// as kernel XFS) but small-file creation slower (a SETATTR of the
    /// times per file at close), and a full image then fails fsync and
    /// close with ENOSPC, not the write(2) as kernel XFS does.
    pub writeback_cache: bool,
    /// With the writeback cache: the share (percent) of the machine's
    /// dirty page limit the mount may hold, instead of FUSE's strict 1%
    /// (see `bdi`); 0 keeps the kernel's. Needs root; a warning otherwise.
    pub max_dirty: u8,
    /// Take requests through io_uring, one queue per CPU served on that
    /// CPU (see `uring`), where the kernel offers it; otherwise, and by
    /// default when the fuse module's `enable_uring` is off, read them
    /// from /dev/fuse.
    pub io_uring: bool,
    /// Through io_uring, answer a checked WRITE before it is done and do
    /// it on another CPU (see `behind`).
    pub write_behind: bool,
}

/// How long a read-write mount lets the kernel cache attributes and
/// names: only the kernel's own requests change the image, and it drops
/// what they change, so this only bounds how stale a mistake can stay.
/// At 1 s a walk of a big tree outlived its own entries: `du -s` after
/// `find -ls` over /usr/share (59,886 entries, cold) took 1.3 s of LOOKUPs
/// and GETATTRs at 1 s and 0.25 s at 60 s (the kernel's XFS: 0.30 s).
pub const RW_TTL: Duration = Duration::from_secs(60);

/// The default of [`MountOptions::max_dirty`]. 4 KiB writes at random
/// offsets of a 256 MiB file with the writeback cache (2 cores, 24 GiB):
/// 51,000 a second at FUSE's strict 1%, 360,000 at 50%, where the
/// kernel's own XFS did 236,000 to 322,000.
pub const DEFAULT_MAX_DIRTY: u8 = 50;

impl Default for MountOptions {
    fn default() -> Self {
        // Leave a core to the programs reading the mount: on a two-core
        // machine one serving thread answered small synchronous requests
        // (random 4 KiB reads, open+read+close of small files) faster than
        // two, which only add wake-ups on a busy CPU; bigger machines get
        // threads for concurrent readers.
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .saturating_sub(1)
            .clamp(1, 8);
        MountOptions {
            source: String::new(),
            extra: Vec::new(),
            ttl: Duration::from_secs(3600),
            threads,
            read_threads: DEFAULT_READ_THREADS,
            writeback_cache: false,
            max_dirty: DEFAULT_MAX_DIRTY,
            io_uring: uring::kernel_allows(),
            write_behind: true,
        }
    }
}

/// A mounted filesystem whose requests are not being served yet.
pub struct Mounted {
    session: Session<&'static XfsFuse>,
    xfs: &'static XfsFuse,
}

/// Unmounts a [`Mounted`] filesystem from another thread (a signal handler
/// thread, say); [`Mounted::serve`] then returns.
pub struct Unmounter(SessionUnmounter);

impl Unmounter {
    /// Unmounts; harmless if already unmounted.
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

impl Mounted {
    /// A handle that unmounts this filesystem.
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the filesystem is unmounted; a read-write
    /// filesystem is then written back and flushed (clean on the device).
    pub fn serve(self) -> io::Result<()> {
        let served = self.session.run();
        let fs = self.xfs.fs;
        if fs.is_shut_down() {
            // XFS_IOC_GOINGDOWN: nothing more is written; the log holds
            // what was committed and the next mount replays it.
            eprintln!("xfskit mount: the filesystem was shut down: the image is not written back (its log is replayed at the next mount)");
            // The shutdown was asked for: the mount ends as it should,
            // whatever the requests after it met.
            if let Err(e) = served {
                eprintln!("xfskit mount: after the shutdown: {e}");
            }
            return Ok(());
        }
        if fs.is_writable() {
            // Writes answered but not yet done are done first.
            self.xfs.behind.settle_all();
            fs.sync()
                .map_err(|e| io::Error::other(format!("writing the image back: {e}")))?;
        }
        served
    }
}

/// The fuser mount options for `opts`, running as user `euid`, read-only
/// unless `writable`.
pub fn fuser_config(opts: &MountOptions, euid: u32, writable: bool) -> Config {
    let mut o = vec![
        if writable {
            MountOption::RW
        } else {
            MountOption::RO
        },
        MountOption::FSName(format!("xfskit:{}", opts.source)),
        MountOption::Subtype("xfskit".into()),
        MountOption::DefaultPermissions,
    ];
    if euid == 0 {
        // As root fuser calls mount(2) itself with type "fuse" and keeps
        // `Subtype` for fusermount3 only; the kernel takes the subtype as a
        // mount option too, so /proc/mounts shows "fuse.xfskit" either way.
        o.push(MountOption::CUSTOM("subtype=xfskit".into()));
        // mount(8) run by root mounts suid and dev unless told otherwise,
        // kernel XFS included; fuser's own default would be nosuid,nodev.
        o.push(MountOption::Suid);
        o.push(MountOption::Dev);
    }
    for s in words(&opts.extra) {
        if SERVED_ATIME.contains(&s) {
            // FUSE inodes are S_NOATIME to the VFS: access times are the
            // server's (atime_policies), and the kernel's FUSE refuses
            // these words as mount data (EINVAL).
            continue;
        }
        let opt = parse_option(s);
        // As mount(8) reads them, the last of two opposite options wins
        // (fuser refuses a list holding both); this also lets `ro` or `rw`
        // override the access chosen above.
        if let Some(other) = opposite(&opt) {
            o.retain(|x| *x != other);
        }
        if !o.contains(&opt) {
            o.push(opt);
        }
    }
    let mut c = Config::default();
    c.mount_options = o;
    c.acl = if euid == 0 {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(opts.threads.max(1));
    c.clone_fd = opts.threads > 1;
    c
}

/// The words of comma-separated `-o` lists, in order.
fn words(lists: &[String]) -> impl Iterator<Item = &str> {
    lists
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
}

/// Access-time words that mount(8) turns into mount flags and the
/// server keeps itself (see [`atime_policies`]).
const SERVED_ATIME: [&str; 8] = [
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "diratime",
    "nodiratime",
    "lazytime",
    "nolazytime",
];

/// When reads stamp access times, for files and for directories, as the
/// kernel reads the `-o` words: relatime unless `noatime` (the last of it
/// and `atime`) or `strictatime` (which wins over `noatime`, as the
/// kernel's MS_STRICTATIME does); directories as files unless
/// `nodiratime`. `lazytime` only delays the kernel's writes of the times.
pub fn atime_policies(extra: &[String]) -> (AtimePolicy, AtimePolicy) {
    let (mut noatime, mut strict, mut nodiratime) = (false, false, false);
    for w in words(extra) {
        match w {
            "noatime" => noatime = true,
            "atime" => noatime = false,
            "strictatime" => strict = true,
            "nostrictatime" => strict = false,
            "nodiratime" => nodiratime = true,
            "diratime" => nodiratime = false,
            _ => {}
        }
    }
    let files = if strict {
        AtimePolicy::Strict
    } else if noatime {
        AtimePolicy::Never
    } else {
        AtimePolicy::Relative
    };
    let dirs = if nodiratime {
        AtimePolicy::Never
    } else {
        files
    };
    (files, dirs)
}

/// Whether the last of `ro` and `rw` in the `-o` lists `extra` is `rw`
/// (true), `ro` (false), or neither is there (None): the access they ask
/// for, the last one winning as in mount(8).
pub fn asks_rw(extra: &[String]) -> Option<bool> {
    words(extra)
        .filter_map(|w| match w {
            "rw" => Some(true),
            "ro" => Some(false),
            _ => None,
        })
        .last()
}

/// The option that `o` turns off (suid and nosuid, dev and nodev, exec
/// and noexec, atime and noatime, ro and rw, sync and async), if any.
fn opposite(o: &MountOption) -> Option<MountOption> {
    use MountOption as M;
    Some(match o {
        M::Suid => M::NoSuid,
        M::NoSuid => M::Suid,
        M::Dev => M::NoDev,
        M::NoDev => M::Dev,
        M::Exec => M::NoExec,
        M::NoExec => M::Exec,
        M::Atime => M::NoAtime,
        M::NoAtime => M::Atime,
        M::RO => M::RW,
        M::RW => M::RO,
        M::Sync => M::Async,
        M::Async => M::Sync,
        _ => return None,
    })
}

/// One `-o` word as a fuser option.
fn parse_option(s: &str) -> MountOption {
    match s {
        "ro" => MountOption::RO,
        "rw" => MountOption::RW,
        "dev" => MountOption::Dev,
        "nodev" => MountOption::NoDev,
        "suid" => MountOption::Suid,
        "nosuid" => MountOption::NoSuid,
        "exec" => MountOption::Exec,
        "noexec" => MountOption::NoExec,
        "atime" => MountOption::Atime,
        "noatime" => MountOption::NoAtime,
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        "dirsync" => MountOption::DirSync,
        "default_permissions" => MountOption::DefaultPermissions,
        "auto_unmount" => MountOption::AutoUnmount,
        other => MountOption::CUSTOM(other.to_string()),
    }
}

/// Mounts `fs` at `mountpoint`, read-write when `fs` was opened for
/// writing, else read-only. The filesystem is kept for the rest of the
/// process (open files borrow it from any serving thread).
pub fn mount(fs: Fs, mountpoint: &Path, opts: &MountOptions) -> io::Result<Mounted> {
    if !fs.is_writable() && asks_rw(&opts.extra) == Some(true) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "`rw` needs an image opened for writing",
        ));
    }
    let fs: &'static Fs = Box::leak(Box::new(fs));
    let config = fuser_config(opts, nix_euid(), fs.is_writable());
    let mut xfs = XfsFuse::new(fs, opts.ttl, opts.read_threads);
    xfs.writeback_cache = opts.writeback_cache && fs.is_writable();
    let pool = xfs.read_pool();
    xfs.want_uring = opts.io_uring;
    xfs.write_behind = opts.write_behind;
    (xfs.atime, xfs.dir_atime) = atime_policies(&opts.extra);
    // Kept for the rest of the process: every serving thread borrows it.
    let xfs: &'static XfsFuse = Box::leak(Box::new(xfs));
    let session = Session::new(xfs, mountpoint, &config)?;
    let _ = xfs.notifier.set(session.notifier());
    if opts.writeback_cache && fs.is_writable() && opts.max_dirty > 0 {
        if let Err(e) = bdi::raise_dirty_limit(mountpoint, opts.max_dirty) {
            eprintln!(
                "xfskit mount: warning: the writeback cache keeps FUSE's 1% dirty limit ({e})"
            );
        }
    }
    if let Some(fd) = pool::dup_device(&session) {
        pool.watch(fd);
    }
    // INIT is done: requests go through io_uring once every CPU's queue
    // has an entry registered.
    if xfs.uring_granted.load(std::sync::atomic::Ordering::Relaxed) {
        match pool::dup_device(&session) {
            Some(fd) => uring::start(xfs, Box::leak(Box::new(fd))),
            None => eprintln!("xfskit mount: warning: no FUSE device for io_uring"),
        }
    } else {
        // Requests come from /dev/fuse: its serving threads are pinned one
        // per CPU and run SCHED_IDLE while requests flow (see placement).
        placement::Placement::start_dev(opts.threads);
    }
    Ok(Mounted { session, xfs })
}

fn nix_euid() -> u32 {
    // /proc/self belongs to the effective user; this avoids an unsafe libc call.
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(extra: &[&str], writable: bool) -> Vec<MountOption> {
        let opts = MountOptions {
            extra: extra.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        fuser_config(&opts, 0, writable).mount_options
    }

    #[test]
    fn the_last_of_two_opposite_options_wins() {
        let o = options(&["suid,nosuid"], true);
        assert!(o.contains(&MountOption::NoSuid) && !o.contains(&MountOption::Suid));
        let o = options(&["nosuid", "suid"], true);
        assert!(o.contains(&MountOption::Suid) && !o.contains(&MountOption::NoSuid));
        let o = options(&["noexec,nodev,exec", "noatime,atime,sync,async"], true);
        for gone in [MountOption::NoExec, MountOption::NoAtime, MountOption::Sync] {
            assert!(!o.contains(&gone), "{gone:?} in {o:?}");
        }
        for kept in [MountOption::NoDev, MountOption::Exec, MountOption::Async] {
            assert!(o.contains(&kept), "no {kept:?} in {o:?}");
        }
        // `ro` overrides the read-write default, and a later `rw` it.
        let o = options(&["ro"], true);
        assert!(o.contains(&MountOption::RO) && !o.contains(&MountOption::RW));
        let o = options(&["ro", "rw"], true);
        assert!(o.contains(&MountOption::RW) && !o.contains(&MountOption::RO));
    }

    #[test]
    fn root_mounts_suid_and_dev_unless_told_otherwise() {
        let o = options(&[], true);
        assert!(o.contains(&MountOption::Suid) && o.contains(&MountOption::Dev));
        let o = options(&["nosuid,nodev"], true);
        assert!(!o.contains(&MountOption::Suid) && !o.contains(&MountOption::Dev));
        let user = fuser_config(&MountOptions::default(), 1000, true).mount_options;
        assert!(!user.contains(&MountOption::Suid) && !user.contains(&MountOption::Dev));
    }

    #[test]
    fn atime_words_are_the_servers() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        use AtimePolicy::*;
        assert_eq!(atime_policies(&l(&[])), (Relative, Relative));
        assert_eq!(atime_policies(&l(&["relatime"])), (Relative, Relative));
        assert_eq!(atime_policies(&l(&["nodiratime"])), (Relative, Never));
        assert_eq!(atime_policies(&l(&["noatime"])), (Never, Never));
        assert_eq!(
            atime_policies(&l(&["noatime", "atime"])),
            (Relative, Relative)
        );
        assert_eq!(
            atime_policies(&l(&["strictatime,noatime"])),
            (Strict, Strict)
        );
        assert_eq!(
            atime_policies(&l(&["ro,strictatime,nodiratime"])),
            (Strict, Never)
        );
        // None of them reaches the kernel as mount data (it refuses them).
        let o = options(&["relatime,strictatime,nodiratime,lazytime,noexec"], true);
        assert!(o.contains(&MountOption::NoExec));
        assert!(!o
            .iter()
            .any(|x| matches!(x, MountOption::CUSTOM(c) if c.contains("atime"))));
    }

    #[test]
    fn ro_or_rw_asked_for() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(asks_rw(&l(&["nosuid"])), None);
        assert_eq!(asks_rw(&l(&["rw,nosuid", "ro"])), Some(false));
        assert_eq!(asks_rw(&l(&["ro,rw"])), Some(true));
    }
}

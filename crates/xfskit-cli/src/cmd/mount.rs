//! `xfskit mount`: serve an image through FUSE in the foreground until it
//! is unmounted (`fusermount3 -u`, `umount`) or the process gets SIGINT,
//! SIGTERM or SIGHUP, which unmount it cleanly. Read-write when the image
//! can be opened for writing (the image is written back and flushed at
//! unmount, and at every fsync), read-only with `--read-only`, with
//! `--norecovery`, or when the image cannot be written (a URL's image,
//! read in place, is never written).

use crate::cmd::out::errln;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::{Error, Fs, OpenOptions};

/// Arguments of `xfskit mount`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device, or the URL of an image read in place
    /// (s3://, gs://, az://, http(s)://; mounted read-only).
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount read-only and never write the image: a dirty log is replayed
    /// in memory only (the default is read-write when the image is
    /// writable). `-o ro` is a kernel mount's read-only instead: a dirty
    /// log is first replayed into the image when it can be written.
    #[arg(long)]
    pub read_only: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// Extra mount options, comma-separated (e.g. `-o noexec,nosuid`); of
    /// two opposite ones (suid and nosuid, ro and rw...) the last wins, as
    /// with mount(8); `ro` mounts read-only (see --read-only). Run by root the mount is suid
    /// and dev, as mount(8) mounts a kernel XFS (`-o nosuid,nodev` for an
    /// untrusted image). Access times as the kernel keeps them: `relatime`
    /// (the default), `strictatime`, `noatime`, `nodiratime`.
    /// `filestreams` is XFS's: read-write, each directory's files get their
    /// data from one AG, and directories written at the same time get
    /// different AGs (as the kernel's `-o filestreams`; without it, only
    /// files under a directory with the filestream flag, `chattr +S` in
    /// xfs_io, do).
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Threads serving requests (default: one less than the CPUs, 1 to 8;
    /// at least 2 read-write).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: Option<u16>,
    /// Extra threads for READs that overlap other requests (default 8; 0:
    /// every READ is answered by the thread that received it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=64))]
    pub read_threads: Option<u16>,
    /// Read-write: let the kernel's page cache gather written data and send
    /// it at writeback (FUSE's writeback cache). Much faster for small
    /// random writes, a little slower for creating many small files; a full
    /// image then fails fsync and close with ENOSPC instead of the write
    /// itself.
    #[arg(long)]
    pub writeback_cache: bool,
    /// With --writeback-cache, as root: the percentage of the kernel's dirty
    /// page limit the mount may hold (FUSE gives a mount 1%, strictly,
    /// which throttles small random writes); 0 keeps the kernel's setting.
    #[arg(long, value_name = "PCT", default_value_t = xfskit_fuse::DEFAULT_MAX_DIRTY,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub max_dirty: u8,
    /// How requests reach the mount: `auto` takes them through io_uring,
    /// one queue per CPU served on that CPU, on a read-write mount when the
    /// fuse module allows it (/sys/module/fuse/parameters/enable_uring,
    /// Linux 6.14 and later), and from /dev/fuse otherwise (a read-only
    /// mount keeps its pool of READ threads there); `on` asks for io_uring
    /// (still falling back if the kernel declines it); `off` keeps
    /// /dev/fuse.
    #[arg(long, value_name = "WHEN", default_value = "auto",
          value_parser = ["auto", "on", "off"])]
    pub io_uring: String,
    /// Through io_uring, a WRITE is checked (permissions, flags, room) and
    /// answered at once, and done by a worker on another CPU while the
    /// writer goes on, as kernel XFS defers allocation to writeback;
    /// whatever reads the file's size, data or blocks waits for it, and so
    /// does fsync, which reports a write that failed after all. Near a full
    /// filesystem writes are done in place. `off` does every write before
    /// answering it.
    #[arg(long, value_name = "WHEN", default_value = "on",
          value_parser = ["on", "off"])]
    pub write_behind: String,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    if !args.mountpoint.is_dir() {
        errln!(
            "xfskit mount: {} is not a directory",
            args.mountpoint.display()
        );
        return Ok(ExitCode::from(2));
    }
    let (filestreams, extra) = xfs_options(&args.options);
    // `-o ro` (unless a later `rw` overrides it) is --read-only.
    let read_only = args.read_only || xfskit_fuse::asks_rw(&extra) == Some(false);
    let fs = open(&args, read_only, filestreams)?;
    let mode = if fs.is_writable() {
        "read-write"
    } else {
        "read-only"
    };
    // Catch the signals before mounting so none can kill us with the mount up.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let mut opts = xfskit_fuse::MountOptions {
        source: args.image.display().to_string(),
        extra,
        writeback_cache: args.writeback_cache,
        max_dirty: args.max_dirty,
        write_behind: args.write_behind == "on",
        ..Default::default()
    };
    opts.io_uring = match args.io_uring.as_str() {
        "on" => true,
        "off" => false,
        _ => fs.is_writable() && xfskit_fuse::io_uring_allowed(),
    };
    if let Some(n) = args.threads {
        opts.threads = usize::from(n);
    }
    if let Some(n) = args.read_threads {
        opts.read_threads = usize::from(n);
    }
    if fs.is_writable() {
        opts.ttl = xfskit_fuse::RW_TTL;
        if args.threads.is_none() {
            // Writers wait on their transactions: with 4 writers, 2 serving
            // threads took 2.4 s where 1 took 3.9 s (20,000 files of 4 KiB,
            // 2 cores); a lone writer took 3.0 s with either.
            opts.threads = opts.threads.max(2);
        }
    }
    let mut mounted = xfskit_fuse::mount(fs, &args.mountpoint, &opts)?;
    let mut unmounter = mounted.unmounter();
    let where_ = args.mountpoint.display().to_string();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                errln!("xfskit mount: signal {sig}, unmounting {where_}");
                if let Err(e) = unmounter.unmount() {
                    // Busy: detach it instead, so the serving loop still ends.
                    errln!("xfskit mount: unmount failed: {e}; detaching lazily");
                    let lazy = std::process::Command::new("umount")
                        .arg("-l")
                        .arg(&where_)
                        .status();
                    if !matches!(lazy, Ok(s) if s.success()) {
                        errln!("xfskit mount: lazy unmount of {where_} failed too");
                    }
                }
            }
        })?;
    errln!(
        "xfskit mount: {} mounted {mode} on {}",
        args.image.display(),
        args.mountpoint.display()
    );
    mounted.serve()?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the image (bare, a partition of a disk, an LVM volume, qcow2)
/// for writing unless `read_only` or it cannot be written (a read-only
/// file or device), then read-only. A dirty log is recovered first.
fn open(args: &Args, read_only: bool, filestreams: bool) -> Result<Fs, Error> {
    let remote = super::remote_url(&args.image).is_some();
    if read_only && !args.read_only && !args.norecovery && !remote {
        // `-o ro`, as mount(8) passes it: a kernel mount read-only still
        // replays a dirty log into the device (and frees the inodes left
        // unlinked), so that the filesystem is clean afterwards.
        replay_for_ro(args, filestreams)?;
    }
    if read_only || args.norecovery {
        return super::open_in(&args.image, &args.disk, args.norecovery);
    }
    if remote {
        // Read in place through the remote device, which cannot write.
        errln!(
            "xfskit mount: {} is a URL: mounting read-only",
            args.image.display()
        );
        return super::open_in(&args.image, &args.disk, false);
    }
    let img = xfskit::disk::open(
        &args.image,
        &xfskit::disk::ImageOptions {
            partition: args.disk.partition,
            lv: args.disk.lv.clone(),
            writable: true,
        },
    );
    let img = match img {
        Err(Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            errln!(
                "xfskit mount: {} cannot be written ({e}); mounting read-only",
                args.image.display()
            );
            return super::open_in(&args.image, &args.disk, false);
        }
        r => r?,
    };
    for note in &img.notes {
        errln!("xfskit: warning: {}: {note}", args.image.display());
    }
    let opts = OpenOptions {
        filestreams,
        ..Default::default()
    };
    let fs = Fs::from_device_rw(
        super::with_undo(img.device, &args.disk)?,
        &super::with_rtdev(&opts, &args.disk),
    )?;
    // As a kernel mount of a quota filesystem: the limits refuse writes
    // past them (EDQUOT).
    fs.enforce_quotas(true);
    Ok(fs)
}

/// For `-o ro`: replays a dirty log into the image when the image can be
/// written, as a kernel mount does. An image that cannot be written (or
/// whose format xfskit does not write) keeps its log, which the read-only
/// mount then replays in memory.
fn replay_for_ro(args: &Args, filestreams: bool) -> Result<(), Error> {
    let probe = super::open_in(&args.image, &args.disk, true)?;
    let dirty = matches!(probe.log_state(), xfskit::log::LogState::Dirty(_));
    drop(probe);
    if !dirty {
        return Ok(());
    }
    match open(args, false, filestreams) {
        Ok(fs) if fs.is_writable() => {
            fs.sync()?;
            errln!(
                "xfskit mount: replayed the log into {}, as a kernel mount -o ro does",
                args.image.display()
            );
        }
        Ok(_) => {}
        Err(e) => errln!(
            "xfskit mount: the log of {} is replayed in memory only: {e}",
            args.image.display()
        ),
    }
    Ok(())
}

/// Takes the XFS options out of `-o` lists: (filestreams, the rest for FUSE).
fn xfs_options(lists: &[String]) -> (bool, Vec<String>) {
    let mut filestreams = false;
    let mut rest = Vec::new();
    for list in lists {
        let kept: Vec<&str> = list
            .split(',')
            .filter(|o| {
                let ours = *o == "filestreams";
                filestreams |= ours;
                !ours && !o.is_empty()
            })
            .collect();
        if !kept.is_empty() {
            rest.push(kept.join(","));
        }
    }
    (filestreams, rest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn filestreams_is_taken_out_of_the_fuse_options() {
        let (f, rest) = super::xfs_options(&["noexec,filestreams".into(), "filestreams".into()]);
        assert!(f);
        assert_eq!(rest, vec!["noexec".to_string()]);
        let (f, rest) = super::xfs_options(&["nosuid".into()]);
        assert!(!f);
        assert_eq!(rest, vec!["nosuid".to_string()]);
    }
}

//! `xfskit mount`: serve an image read-only through FUSE in the foreground
//! until it is unmounted (`fusermount3 -u`, `umount`) or the process gets
//! SIGINT, SIGTERM or SIGHUP, which unmount it cleanly.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::Error;

/// Arguments of `xfskit mount`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount read-only (required: read-write is not supported yet).
    #[arg(long)]
    pub read_only: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// Extra mount options, comma-separated (e.g. `-o noexec,nosuid`).
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Threads serving requests (default: one less than the CPUs, 1 to 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: Option<u16>,
    /// Extra threads for READs that overlap other requests (default 8; 0:
    /// every READ is answered by the thread that received it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=64))]
    pub read_threads: Option<u16>,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    if !args.read_only {
        eprintln!("xfskit mount: read-write mounts are not supported yet; pass --read-only");
        return Ok(ExitCode::from(2));
    }
    if !args.mountpoint.is_dir() {
        eprintln!(
            "xfskit mount: {} is not a directory",
            args.mountpoint.display()
        );
        return Ok(ExitCode::from(2));
    }
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    // Catch the signals before mounting so none can kill us with the mount up.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let mut opts = xfskit_fuse::MountOptions {
        source: args.image.display().to_string(),
        extra: args.options,
        ..Default::default()
    };
    if let Some(n) = args.threads {
        opts.threads = usize::from(n);
    }
    if let Some(n) = args.read_threads {
        opts.read_threads = usize::from(n);
    }
    let mut mounted = xfskit_fuse::mount(fs, &args.mountpoint, &opts)?;
    let mut unmounter = mounted.unmounter();
    let where_ = args.mountpoint.display().to_string();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                eprintln!("xfskit mount: signal {sig}, unmounting {where_}");
                if let Err(e) = unmounter.unmount() {
                    // Busy: detach it instead, so the serving loop still ends.
                    eprintln!("xfskit mount: unmount failed: {e}; detaching lazily");
                    let lazy = std::process::Command::new("umount")
                        .arg("-l")
                        .arg(&where_)
                        .status();
                    if !matches!(lazy, Ok(s) if s.success()) {
                        eprintln!("xfskit mount: lazy unmount of {where_} failed too");
                    }
                }
            }
        })?;
    eprintln!(
        "xfskit mount: {} mounted read-only on {}",
        args.image.display(),
        args.mountpoint.display()
    );
    mounted.serve()?;
    Ok(ExitCode::SUCCESS)
}

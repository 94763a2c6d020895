//! Subcommands. Each module has `Args` (clap) and `run(Args) -> Result<ExitCode>`.

use crate::cmd::out::errln;
pub mod admin;
pub mod build;
pub mod bulkstat;
pub mod cat;
pub mod check;
pub mod db;
pub mod deleted;
pub mod docs;
pub mod edit;
pub mod extract;
pub mod grow;
pub mod info;
pub mod log;
pub mod ls;
pub mod mdrestore;
pub mod metadump;
pub mod mkfs;
pub mod mount;
pub mod out;
pub mod parts;
pub mod quota;
pub mod quotacheck;
pub mod recover;
pub mod repair;
pub mod stat;
pub mod timeline;
pub mod undo;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xfskit::{Error, Fs, OpenOptions};

/// Maps an engine error to the documented exit code.
pub fn exit_code(e: &Error) -> ExitCode {
    ExitCode::from(code_of(e))
}

/// The documented exit code of `e` as a number.
pub fn code_of(e: &Error) -> u8 {
    match e {
        Error::NotFound(_) | Error::NotDir(_) | Error::IsDir(_) | Error::NoAttr(_) => 1,
        Error::Exists(_) | Error::NotEmpty(_) | Error::NotPermitted(_) => 1,
        Error::Invalid(_) => 2,
        Error::Unsupported(_) | Error::DirtyLog(_) => 3,
        Error::Io(e) if xfskit::disk::is_corruption(e) => 5,
        Error::Io(_) => 4,
        Error::BadCrc { .. } | Error::Corrupt { .. } => 5,
        Error::NoSpace(_) | Error::QuotaExceeded(_) | Error::ReadOnly => 4,
    }
}

/// The worse of two exit statuses: every failure is worse than 6 (done,
/// with some entries incomplete), which is worse than 0; among failures
/// the higher number wins.
pub fn worse(a: u8, b: u8) -> u8 {
    let rank = |c: u8| match c {
        0 => 0,
        6 => 1,
        c => u16::from(c) + 1,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// The message printed for `e`: a damaged disk image found while reading
/// (a bad qcow2 cluster pointer) is said to be corrupt, not an I/O error.
pub fn message(e: &Error) -> String {
    match e {
        Error::Io(io) if xfskit::disk::is_corruption(io) => io.to_string(),
        _ => e.to_string(),
    }
}

/// Opens an image read-only with the common options (no `--partition`:
/// a disk's one XFS partition is found alone).
#[allow(dead_code)] // for subcommands that take no DiskArgs
pub fn open(image: &Path, norecovery: bool) -> Result<Fs, Error> {
    open_in(image, &DiskArgs::default(), norecovery)
}

/// Where the filesystem lies in a disk image: every command that takes an
/// image flattens these into its arguments.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DiskArgs {
    /// When IMAGE is a partitioned disk (raw or qcow2) with more than one
    /// XFS partition: the number of the one to use, as `xfskit parts` lists
    /// it. With one XFS partition it is found without this.
    #[arg(long, value_name = "N")]
    pub partition: Option<u32>,
    /// When the disk holds LVM2 logical volumes with more than one XFS: the
    /// one to use, as VG/LV (`xfskit parts` lists them). Linear volumes only.
    #[arg(long, value_name = "VG/LV")]
    pub lv: Option<String>,
    /// The realtime device (a file or block device) of a filesystem with a
    /// realtime section, as `xfs_db -R` and `mount -o rtdev=` take it:
    /// realtime files' data is read from it and `check` checks the
    /// realtime section with it.
    #[arg(long, value_name = "FILE")]
    pub rtdev: Option<PathBuf>,
    /// The external log device (a file or block device) of a filesystem
    /// made with `mkfs.xfs -l logdev=`, as `xfs_db -l`, `xfs_repair -l` and
    /// `mount -o logdev=` take it: a dirty log is replayed from it, `log`,
    /// `recover` and `check` read it, and edits journal into it. Without
    /// it such a filesystem is read without its log (changes only the log
    /// holds are not seen) and writing is refused.
    #[arg(long, value_name = "FILE")]
    pub logdev: Option<PathBuf>,
    /// For commands that write: save the old contents of every block the
    /// command overwrites in FILE (a new file) first, so that `xfskit undo
    /// FILE IMAGE` can put the filesystem back as it was (as e2fsck -z).
    #[arg(long, value_name = "FILE")]
    pub undo: Option<PathBuf>,
}

impl DiskArgs {
    /// How to open the image: the partition and volume given.
    pub fn image_options(&self, writable: bool) -> xfskit::disk::ImageOptions {
        xfskit::disk::ImageOptions {
            partition: self.partition,
            lv: self.lv.clone(),
            writable,
        }
    }
}

/// `--memory SIZE` (check, repair) in bytes; 0 when not given.
pub fn parse_memory(m: Option<&str>) -> Result<usize, Error> {
    match m {
        None => Ok(0),
        Some(m) => match xfskit::build::size::parse_size(m) {
            Ok(xfskit::build::size::SizeSpec::Fixed(b)) => {
                Ok(usize::try_from(b).unwrap_or(usize::MAX))
            }
            _ => Err(Error::Invalid(format!(
                "--memory takes a size like 256m or 2g, not {m:?}"
            ))),
        },
    }
}

/// Set once an undo file was made (`--undo`).
pub static UNDO_MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The filesystem's device, behind an undo file when `--undo` was given.
pub fn with_undo(
    dev: Box<dyn xfskit::dev::Device>,
    disk: &DiskArgs,
) -> Result<Box<dyn xfskit::dev::Device>, Error> {
    Ok(match &disk.undo {
        Some(path) => {
            let u = xfskit::dev::UndoDevice::create(dev, path)?;
            UNDO_MADE.store(true, std::sync::atomic::Ordering::Relaxed);
            Box::new(u)
        }
        None => dev,
    })
}

/// Opens the filesystem in an image (bare, partitioned disk or qcow2)
/// read-only with the common options.
pub fn open_in(image: &Path, disk: &DiskArgs, norecovery: bool) -> Result<Fs, Error> {
    let opts = OpenOptions {
        norecovery,
        ..Default::default()
    };
    open_with(image, disk, &opts)
}

/// [`open_in`] with every option.
pub fn open_with(image: &Path, disk: &DiskArgs, opts: &OpenOptions) -> Result<Fs, Error> {
    let iopts = disk.image_options(false);
    let img = match remote_url(image) {
        Some(url) => open_remote(url, &iopts)?,
        None => xfskit::disk::open(image, &iopts)?,
    };
    for note in &img.notes {
        errln!("xfskit: warning: {}: {note}", image.display());
    }
    let fs = Fs::from_device(img.device, &with_rtdev(opts, disk))?;
    if *fs.log_state() == xfskit::log::LogState::External {
        errln!(
            "xfskit: warning: {}: the external log was not read (give its device with --logdev): changes only the log holds are not seen",
            image.display()
        );
    }
    Ok(fs)
}

/// `opts` with the realtime and external log devices of `disk`, when
/// they were given.
pub fn with_rtdev(opts: &OpenOptions, disk: &DiskArgs) -> OpenOptions {
    let mut o = opts.clone();
    if disk.rtdev.is_some() {
        o.rtdev = disk.rtdev.clone();
    }
    if disk.logdev.is_some() {
        o.logdev = disk.logdev.clone();
    }
    o
}

/// The URL in `image` when it names an object in object storage or on an
/// HTTP server (`s3://`, `gs://`, `az://`, `http(s)://`), read in place.
pub fn remote_url(image: &Path) -> Option<&str> {
    let s = image.to_str()?;
    is_url(s).then_some(s)
}

#[cfg(feature = "remote")]
fn is_url(s: &str) -> bool {
    xfskit_remote::is_url(s)
}

#[cfg(not(feature = "remote"))]
fn is_url(s: &str) -> bool {
    ["s3://", "gs://", "az://", "http://", "https://"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// Opens the filesystem in the image at `url` (credentials and endpoint
/// from the environment: AWS_*, GOOGLE_*, AZURE_*).
#[cfg(feature = "remote")]
pub fn open_remote(
    url: &str,
    opts: &xfskit::disk::ImageOptions,
) -> Result<xfskit::disk::Image, Error> {
    xfskit_remote::open_image(url, &[], opts)
}

#[cfg(not(feature = "remote"))]
pub fn open_remote(
    url: &str,
    _opts: &xfskit::disk::ImageOptions,
) -> Result<xfskit::disk::Image, Error> {
    Err(Error::Unsupported(format!(
        "{url}: this xfskit was built without the `remote` feature"
    )))
}

/// Prints what remote images cost (requests, bytes) on standard error when
/// the environment sets XFSKIT_REMOTE_STATS.
pub fn print_remote_stats() {
    #[cfg(feature = "remote")]
    if std::env::var_os("XFSKIT_REMOTE_STATS").is_some() {
        let t = xfskit_remote::totals();
        errln!(
            "xfskit: remote: {} requests, {} bytes fetched",
            t.requests,
            t.bytes
        );
    }
}

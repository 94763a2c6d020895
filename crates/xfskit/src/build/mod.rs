//! Building populated images: sources (directory, tar) feeding a
//! [`BuildTarget`].
//!
//! [`build`] runs the whole of `xfskit build`: it scans the source once to
//! size the image ([`size`]), makes the filesystem with [`crate::mkfs`], then
//! hands a populate callback to the write engine, which opens the new image
//! as a [`BuildTarget`], lets the source fill it, and commits. The engine is
//! a parameter; [`write_engine`] is the one place the real engine plugs in.

mod dir_parallel;
mod dir_walk;
mod dir_xattr;
pub mod disk;
pub mod engine;
pub mod feed;
pub mod idmap;
pub mod prefetch;
mod read_data;
mod readahead;
pub mod size;
pub mod source_dir;
pub mod source_tar;
mod tar_dispatch;
mod tar_parsed;
mod tar_pax;
pub mod tar_reader;
mod tar_sparse;
pub mod target;
pub mod workers;

pub use engine::FsTarget;
pub use target::{BuildTarget, Meta, NodeKind};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::inode::Timestamp;
use crate::mkfs::{mkfs_with, MkfsError, MkfsGeometry, MkfsOptions, MkfsReport, WriteOptions};
use feed::{FeedOptions, FeedStats, ProgressFn};
use idmap::IdMap;
use size::{Census, Layout, SizeSpec, Slack};
use source_tar::TarSource;

/// What to build from.
pub enum Source {
    /// A host directory, walked.
    Dir(PathBuf),
    /// A tar archive (file or spooled standard input).
    Tar(TarSource),
}

impl Source {
    /// `-` is a tar archive on standard input (read as it comes when the
    /// size is given; spooled to `$TMPDIR` for sizing otherwise), a
    /// directory is walked, anything else is read as a tar archive.
    pub fn open(arg: &Path) -> Result<Source> {
        if arg.as_os_str() == "-" {
            let stdin: Box<dyn std::io::Read + Send> = Box::new(std::io::stdin());
            return Ok(Source::Tar(TarSource::stream(stdin, "standard input")));
        }
        let m = std::fs::metadata(arg).map_err(|e| feed::io_at(arg, e))?;
        if m.is_dir() {
            Ok(Source::Dir(arg.to_path_buf()))
        } else {
            Ok(Source::Tar(TarSource::open(arg)?))
        }
    }

    /// First pass: what the source holds, counted for sizing.
    pub fn scan(&self, l: &Layout, one_file_system: bool) -> Result<Census> {
        match self {
            Source::Dir(p) => source_dir::scan(p, l, one_file_system),
            Source::Tar(t) => source_tar::scan(t, l),
        }
    }

    /// Second pass: feeds everything into `t`.
    pub fn feed(&self, t: &mut dyn BuildTarget, opts: &FeedOptions<'_>) -> Result<FeedStats> {
        match self {
            Source::Dir(p) => source_dir::feed(p, t, opts),
            Source::Tar(s) => source_tar::feed(s, t, opts),
        }
    }
}

/// Everything `xfskit build` takes besides the source and the image.
#[derive(Default)]
pub struct BuildOptions<'a> {
    /// mkfs.xfs options (`-b`, `-i`, `-n`, `-m`, `-L`, `-f`, ...). `-d size=`
    /// counts as `--size`.
    pub mkfs: MkfsOptions,
    /// Image size.
    pub size: SizeSpec,
    /// Room added to an automatic size.
    pub slack: Slack,
    /// Owner mapping.
    pub ids: IdMap,
    /// Same input, same bytes: a UUID derived from the epoch (unless
    /// `-m uuid=` is given) and the epoch as the mkfs time.
    pub reproducible: bool,
    /// The epoch; `None`: `SOURCE_DATE_EPOCH` from the environment, else 0.
    pub source_date_epoch: Option<i64>,
    /// Directory sources: stay on the source's filesystem.
    pub one_file_system: bool,
    /// Running counts while the image is filled.
    pub progress: Option<ProgressFn<'a>>,
    /// Threads writing into the image (0 or 1: one). Reproducible builds
    /// use one: with more, allocation order depends on timing.
    pub jobs: usize,
}

/// The size decision, before anything is written.
#[derive(Debug, Clone)]
pub struct BuildPlan {
    /// What the source holds.
    pub census: Census,
    /// False when the source was not scanned ahead (the size was given):
    /// `census` is then empty.
    pub scanned: bool,
    /// The image size in bytes (`None`: the whole block device).
    pub image_bytes: Option<u64>,
    /// The geometry mkfs will write.
    pub geometry: MkfsGeometry,
    /// mkfs options with the size and reproducibility choices applied.
    pub mkfs: MkfsOptions,
    /// The time stamped by mkfs (`None`: mkfs's default).
    pub mkfs_time: Option<Timestamp>,
    /// Time spent scanning.
    pub scan_elapsed: Duration,
}

/// What [`build`] did.
#[derive(Debug, Clone)]
pub struct BuildReport {
    /// The size decision.
    pub plan: BuildPlan,
    /// The UUID of the new filesystem.
    pub uuid: [u8; 16],
    /// What the source fed in.
    pub fed: FeedStats,
    /// Wall time of the whole build.
    pub elapsed: Duration,
}

/// The callback a write engine runs once it has the image open as a target.
pub type Populate<'a> = &'a mut dyn FnMut(&mut dyn BuildTarget) -> Result<FeedStats>;

/// Converts an mkfs error to the engine's error (exit codes follow).
pub fn mkfs_error(e: MkfsError) -> Error {
    match e {
        MkfsError::BadOption(m) | MkfsError::Geometry(m) | MkfsError::Exists(m) => {
            Error::Invalid(m)
        }
        MkfsError::Unsupported(m) => Error::Unsupported(m),
        MkfsError::Io(m) => Error::Io(std::io::Error::other(m)),
    }
}

/// The epoch of a reproducible build and of implied tar directories.
pub fn epoch(opts: &BuildOptions<'_>) -> i64 {
    opts.source_date_epoch
        .or_else(|| {
            std::env::var("SOURCE_DATE_EPOCH")
                .ok()
                .and_then(|s| s.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A UUID that depends only on `epoch` (version 8, "custom", RFC 9562).
pub fn reproducible_uuid(epoch: i64) -> [u8; 16] {
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in b"xfskit build".iter().chain(epoch.to_le_bytes().iter()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&fnv(1).to_be_bytes());
    u[8..].copy_from_slice(&fnv(2).to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x80;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

fn is_block_device(image: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(image).is_ok_and(|m| m.file_type().is_block_device())
}

/// Scans the source and decides the image size and geometry; writes nothing.
pub fn plan(source: &Source, image: &Path, opts: &BuildOptions<'_>) -> Result<BuildPlan> {
    plan_with(source, image, opts, opts.size, false)
}

/// [`plan`] for a filesystem of `spec`; `must_fit`: scan the source even
/// when the size is given, and refuse one that does not fit (a build into
/// an existing partition, which must not be wiped for nothing).
pub fn plan_with(
    source: &Source,
    image: &Path,
    opts: &BuildOptions<'_>,
    spec: SizeSpec,
    must_fit: bool,
) -> Result<BuildPlan> {
    let mut mkfs = opts.mkfs.clone();
    mkfs.data_name
        .get_or_insert_with(|| image.display().to_string());
    let layout = Layout::for_options(&mkfs)?;
    let mut spec = spec;
    if let Some(d) = mkfs.data_size.take() {
        if spec != SizeSpec::Auto {
            return Err(Error::Invalid(
                "give the size once: --size or -d size=".into(),
            ));
        }
        let v = crate::mkfs::convert_size(&d, layout.block_size, 512)
            .filter(|&v| v > 0)
            .ok_or_else(|| Error::Invalid(format!("bad -d size={d}")))?;
        spec = SizeSpec::Fixed(v as u64);
    }
    // The source is scanned ahead only to size the image (and for a dry
    // run's report). With the size given, the build goes straight to
    // writing, as mkfs.xfs -p does; a source too large for the image ends
    // in the same NoSpace error, from the build instead of before it.
    // Scanning costs a walk of the whole tree: 4 of the 19 seconds of a
    // cold build of this machine's /usr.
    let scan = spec == SizeSpec::Auto || mkfs.dry_run || must_fit;
    let t0 = Instant::now();
    let census = if scan {
        source.scan(&layout, opts.one_file_system)?
    } else {
        Census::default()
    };
    let scan_elapsed = t0.elapsed();
    let image_bytes = if is_block_device(image) {
        if let SizeSpec::Fixed(n) = spec {
            mkfs.data_size = Some(n.to_string());
        }
        None
    } else {
        let n = match spec {
            SizeSpec::Auto => size::auto_size(&census, &mkfs, &opts.slack)?,
            SizeSpec::Fixed(n) => n,
        };
        mkfs.data_size = Some(n.to_string());
        Some(n)
    };
    let mut mkfs_time = None;
    if opts.reproducible {
        let e = epoch(opts);
        mkfs.uuid.get_or_insert(reproducible_uuid(e));
        mkfs_time = Some(Timestamp { sec: e, nsec: 0 });
    }
    let geometry = match image_bytes {
        Some(n) => crate::mkfs::compute_geometry(&mkfs, n, crate::mkfs::TargetKind::File),
        None => crate::mkfs::plan(image, &mkfs).map(|(g, _)| g),
    }
    .map_err(mkfs_error)?;
    let none = Slack {
        percent: 0,
        bytes: 0,
    };
    if scan && !size::fits(&census, &geometry, &none) {
        let l = Layout::from_geometry(&geometry);
        let need = size::needed_blocks(&census, &l, &none, u64::from(geometry.agcount));
        return Err(Error::NoSpace(format!(
            "the source needs about {} MiB of free space; {} of {} MiB has {} MiB{}",
            (need * l.block_size) >> 20,
            if must_fit { "a partition" } else { "an image" },
            (geometry.dblocks * l.block_size) >> 20,
            (geometry.fdblocks * l.block_size) >> 20,
            if must_fit {
                ""
            } else {
                " (use --size auto or a larger --size)"
            }
        )));
    }
    Ok(BuildPlan {
        census,
        scanned: scan,
        image_bytes,
        geometry,
        mkfs,
        mkfs_time,
        scan_elapsed,
    })
}

/// Builds `image` from `source`: plan, mkfs, then `engine` opens the image
/// and runs the populate callback it is given. An image file this call
/// created is removed again when a later step fails (an existing one is left
/// empty). An existing non-empty
/// image file is refused unless `-f` is among the mkfs options.
pub fn build(
    source: &Source,
    image: &Path,
    opts: &BuildOptions<'_>,
    engine: impl FnOnce(&Path, &MkfsReport, Populate<'_>) -> Result<()>,
) -> Result<BuildReport> {
    let start = Instant::now();
    let existing = std::fs::metadata(image).ok();
    if let Some(m) = &existing {
        if m.is_file() && m.len() > 0 && !opts.mkfs.force {
            return Err(Error::Invalid(format!(
                "{} exists and is not empty (use -f to overwrite it)",
                image.display()
            )));
        }
    }
    if let Source::Dir(dir) = source {
        let parent = match image.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if let (Ok(d), Ok(p)) = (dir.canonicalize(), parent.canonicalize()) {
            if p.starts_with(&d) {
                return Err(Error::Invalid(format!(
                    "{} is inside the source directory {}",
                    image.display(),
                    dir.display()
                )));
            }
        }
    }
    let plan = plan(source, image, opts)?;
    if existing.as_ref().is_some_and(|m| m.is_file()) {
        // Start from an empty file so the image is exactly the planned size.
        std::fs::File::options()
            .write(true)
            .open(image)
            .and_then(|f| f.set_len(0))
            .map_err(|e| feed::io_at(image, e))?;
    }
    let created = existing.is_none();
    let result = (|| {
        let w = WriteOptions {
            timestamp: plan.mkfs_time.map(|t| crate::mkfs::Timestamp {
                secs: t.sec,
                nsec: t.nsec,
            }),
            progress: None,
        };
        let report = mkfs_with(image, &plan.mkfs, &w).map_err(mkfs_error)?;
        let feed_opts = FeedOptions {
            ids: &opts.ids,
            default_time: Timestamp {
                sec: epoch(opts),
                nsec: 0,
            },
            one_file_system: opts.one_file_system,
            progress: opts.progress,
            jobs: if opts.reproducible { 1 } else { opts.jobs },
        };
        let mut fed = None;
        let mut populate = |t: &mut dyn BuildTarget| {
            let s = source.feed(t, &feed_opts)?;
            fed = Some(s.clone());
            Ok(s)
        };
        engine(image, &report, &mut populate)?;
        let fed = fed.ok_or_else(|| {
            Error::Invalid("the write engine returned without populating the image".into())
        })?;
        Ok((report.uuid, fed))
    })();
    match result {
        Ok((uuid, fed)) => Ok(BuildReport {
            plan,
            uuid,
            fed,
            elapsed: start.elapsed(),
        }),
        Err(e) => {
            // A source that fails part way leaves no half-filled image: a
            // file this call created is removed, an existing one (emptied
            // above) is emptied again.
            if created {
                let _ = std::fs::remove_file(image);
            } else if existing.as_ref().is_some_and(|m| m.is_file()) {
                let _ = std::fs::File::options()
                    .write(true)
                    .open(image)
                    .and_then(|f| f.set_len(0));
            }
            Err(e)
        }
    }
}

/// THE WRITE ENGINE HOOK: opens the freshly made `image` as a
/// [`BuildTarget`], calls `populate` with it, then commits and syncs.
/// Until the write engine lands this reports that it is missing.
pub fn write_engine(image: &Path, mkfs: &MkfsReport, populate: Populate<'_>) -> Result<()> {
    // A new image is built without the journal: a failed build leaves no
    // image, and the build runs at full speed.
    let fs = crate::Fs::open_rw(
        image,
        &crate::OpenOptions {
            no_journal: true,
            logdev: mkfs.geometry.logdev.as_ref().map(std::path::PathBuf::from),
            ..Default::default()
        },
    )?;
    populate_fs(&fs, mkfs, populate)
}

/// Fills the freshly made filesystem `fs` (opened for writing without the
/// journal) through `populate`, then syncs it.
pub fn populate_fs(fs: &crate::Fs, mkfs: &MkfsReport, populate: Populate<'_>) -> Result<()> {
    // Everything the build changes is stamped with the time mkfs gave the
    // root directory (SOURCE_DATE_EPOCH when reproducible), and inode
    // generations follow from the UUID: the same input and options give
    // the same bytes.
    let root = fs.root()?;
    fs.set_fixed_time(Some(root.ctime))?;
    let seed = mkfs
        .uuid
        .iter()
        .fold(0u64, |h, &b| h.rotate_left(8) ^ u64::from(b));
    fs.seed_generations(seed)?;
    // Every feed gives a directory its times when it makes it, or sets
    // them once nothing more is added to it.
    fs.keep_dir_times(true)?;
    let mut target = FsTarget::new(fs);
    populate(&mut target)?;
    fs.sync()
}

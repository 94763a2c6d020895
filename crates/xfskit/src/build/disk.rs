//! `xfskit build` into disk images: into an existing partition of a raw or
//! qcow2 disk, or a new disk (a GPT with one XFS partition, a VM disk file
//! of any format [`NewFormat`] names, or both). The filesystem is made with
//! [`crate::mkfs::mkfs_device`] on a window over the partition (or over
//! the whole disk) and filled by
//! the same feed and write engine as a bare image ([`super::populate_fs`]),
//! without the journal.

use std::path::Path;
use std::time::Instant;

use super::feed::{io_at, FeedOptions, FeedStats};
use super::size::SizeSpec;
use super::{
    epoch, mkfs_error, plan, plan_with, populate_fs, BuildOptions, BuildPlan, BuildReport, Source,
};
use crate::dev::{Device, Window};
use crate::disk::container::NewFormat;
use crate::disk::gpt_write::{self, LINUX_FS};
use crate::error::{Error, Result};
use crate::mkfs::{MkfsReport, WriteOptions};

/// Where a build writes, besides a bare image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskTarget {
    /// Partition N of an existing disk image (raw or qcow2): the
    /// filesystem fills the partition; the rest of the disk is untouched.
    Partition(u32),
    /// A new disk image file: with `gpt`, a GPT disk holding one XFS
    /// partition ("Linux filesystem" type, at 1 MiB, 1 MiB aligned), in
    /// the file format `format` (qcow2, VMDK, VHD, VHDX, VDI or raw).
    New {
        /// Partition the disk with a GPT.
        gpt: bool,
        /// The file format.
        format: NewFormat,
    },
}

/// Makes the filesystem on `dev`, fills it from `source` and syncs it.
fn make_and_fill(
    source: &Source,
    dev: Box<dyn Device>,
    plan: &BuildPlan,
    opts: &BuildOptions<'_>,
) -> Result<(MkfsReport, FeedStats)> {
    let w = WriteOptions {
        timestamp: plan.mkfs_time.map(|t| crate::mkfs::Timestamp {
            secs: t.sec,
            nsec: t.nsec,
        }),
        progress: None,
    };
    let report = crate::mkfs::mkfs_device(dev.as_ref(), &plan.mkfs, &w).map_err(mkfs_error)?;
    dev.flush()?;
    let fs = crate::Fs::from_device_rw(
        dev,
        &crate::OpenOptions {
            no_journal: true,
            logdev: report
                .geometry
                .logdev
                .as_ref()
                .map(std::path::PathBuf::from),
            ..Default::default()
        },
    )?;
    let feed_opts = FeedOptions {
        ids: &opts.ids,
        default_time: crate::inode::Timestamp {
            sec: epoch(opts),
            nsec: 0,
        },
        one_file_system: opts.one_file_system,
        progress: opts.progress,
        jobs: if opts.reproducible { 1 } else { opts.jobs },
    };
    let mut fed = None;
    let mut populate = |t: &mut dyn super::BuildTarget| {
        let s = source.feed(t, &feed_opts)?;
        fed = Some(s.clone());
        Ok(s)
    };
    populate_fs(&fs, &report, &mut populate)?;
    let fed = fed.ok_or_else(|| Error::Invalid("the image was not populated".into()))?;
    Ok((report, fed))
}

/// Builds `source` into `disk` as `target` says.
pub fn build_disk(
    source: &Source,
    disk: &Path,
    target: DiskTarget,
    opts: &BuildOptions<'_>,
) -> Result<BuildReport> {
    let start = Instant::now();
    match target {
        DiskTarget::Partition(n) => {
            if opts.size != SizeSpec::Auto || opts.mkfs.data_size.is_some() {
                return Err(Error::Invalid(
                    "with --partition the filesystem fills the partition: give no --size".into(),
                ));
            }
            // Opened read-only first: nothing is written until the source
            // is known to fit.
            let (_, part) = crate::disk::open_partition(disk, n, false)?;
            let plan = plan_with(source, disk, opts, SizeSpec::Fixed(part.size_bytes), true)
                .map_err(|e| match e {
                    Error::NoSpace(m) => Error::NoSpace(format!(
                        "partition {n} of {} is too small: {m}",
                        disk.display()
                    )),
                    Error::Invalid(m) => Error::Invalid(format!(
                        "partition {n} of {} ({} MiB): {m}",
                        disk.display(),
                        part.size_bytes >> 20
                    )),
                    e => e,
                })?;
            if plan.mkfs.dry_run {
                return Err(Error::Invalid(
                    "-N with --partition: use xfskit build -N on the source alone".into(),
                ));
            }
            let (dev, _) = crate::disk::open_partition(disk, n, true)?;
            let (report, fed) = make_and_fill(source, dev, &plan, opts)?;
            Ok(BuildReport {
                plan,
                uuid: report.uuid,
                fed,
                elapsed: start.elapsed(),
            })
        }
        DiskTarget::New { gpt, format } => new_disk(source, disk, gpt, format, opts, start),
    }
}

fn new_disk(
    source: &Source,
    image: &Path,
    gpt: bool,
    format: NewFormat,
    opts: &BuildOptions<'_>,
    start: Instant,
) -> Result<BuildReport> {
    if let Ok(m) = std::fs::metadata(image) {
        if !m.is_file() {
            return Err(Error::Invalid(format!(
                "{}: --gpt and --format write image files",
                image.display()
            )));
        }
        if m.len() > 0 && !opts.mkfs.force {
            return Err(Error::Invalid(format!(
                "{} exists and is not empty (use -f to overwrite it)",
                image.display()
            )));
        }
    }
    if let Source::Dir(dir) = source {
        let parent = image
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
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
    if plan.mkfs.dry_run {
        return Err(Error::Invalid(
            "-N with --gpt or --format: use xfskit build -N alone".into(),
        ));
    }
    let fs_bytes = plan
        .image_bytes
        .ok_or_else(|| Error::Invalid("no image size was decided".into()))?;
    let mut layout = if gpt {
        gpt_write::layout_for(fs_bytes)
    } else {
        let b = fs_bytes.div_ceil(512) * 512;
        gpt_write::Layout {
            disk_bytes: b,
            start_bytes: 0,
            size_bytes: b,
        }
    };
    // The format may round the disk up (a fixed VHD for Azure: whole MiB);
    // a GPT's backup table then moves to the new end, the partition keeps
    // its size, and a bare filesystem keeps its own size inside the disk.
    layout.disk_bytes = format.disk_size(layout.disk_bytes);
    match std::fs::remove_file(image) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_at(image, e)),
        _ => {}
    }
    let result = (|| -> Result<(MkfsReport, FeedStats)> {
        let new = format.create(image, layout.disk_bytes)?;
        let dev = new.device.clone();
        let window = Window::new(dev.clone(), layout.start_bytes, layout.size_bytes)?;
        let (report, fed) = make_and_fill(source, Box::new(window), &plan, opts)?;
        if gpt {
            // The GUIDs follow from the filesystem's UUID: a reproducible
            // build gives the same disk bytes.
            let mut seed = report.uuid;
            seed.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b ^= 0xA5u8.rotate_left(i as u32));
            gpt_write::write_single(dev.as_ref(), &layout, &LINUX_FS, "xfs", seed)?;
        }
        drop(dev);
        new.finish()?;
        Ok((report, fed))
    })();
    match result {
        Ok((report, fed)) => Ok(BuildReport {
            plan,
            uuid: report.uuid,
            fed,
            elapsed: start.elapsed(),
        }),
        Err(e) => {
            let _ = std::fs::remove_file(image);
            Err(e)
        }
    }
}

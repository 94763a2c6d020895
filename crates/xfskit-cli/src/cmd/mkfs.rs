//! `xfskit mkfs [--profile NAME] [--timestamp SECS] [--partition N] [mkfs.xfs options] TARGET`.
//!
//! Everything after the xfskit-only options is parsed with mkfs.xfs syntax
//! (`-b size=4096 -d agcount=8 -m reflink=0 -L label -f -N -K -q ...`).

use crate::cmd::out::{errln, out, outln};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use xfskit::disk::container::NewFormat;
use xfskit::mkfs::{
    geometry_summary, mkfs_with, parse_mkfs_args, MkfsOptions, Timestamp, WriteOptions,
};

/// Arguments of `xfskit mkfs`.
#[derive(clap::Args)]
#[command(disable_help_flag = false)]
pub struct Args {
    /// Feature profile applied to options not given explicitly:
    /// `default` (mkfs.xfs 7.2), `6.1`, `conservative` (old kernels and GRUB), or `help`.
    #[arg(long)]
    pub profile: Option<String>,
    /// The feature defaults of an xfsprogs release (4.19, 5.4, 5.10, 5.15,
    /// 6.1, 6.6, 6.12, 6.18, 7.2 (the default); a later release takes the
    /// newest), for filesystems that kernels of that release must mount.
    /// Options given explicitly (and `-c options=FILE`) still win.
    #[arg(long, value_name = "VERSION")]
    pub defaults: Option<String>,
    /// Seconds since the epoch for new inode times (else SOURCE_DATE_EPOCH, else now).
    #[arg(long)]
    pub timestamp: Option<i64>,
    /// Make the filesystem in partition N of TARGET, a partitioned disk
    /// image (raw or qcow2; `xfskit parts` lists the partitions).
    #[arg(long, value_name = "N")]
    pub partition: Option<u32>,
    /// Write TARGET as a new disk image file of this format: raw (the
    /// default), qcow2, vmdk, vmdk-stream, vhd, vhd-fixed, vhdx or vdi; needs
    /// -d size= (the disk may be rounded up as the format demands; the
    /// filesystem keeps the size given).
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// mkfs.xfs options followed by the target image or device.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// Named sets of feature choices.
const PROFILES: &[(&str, &str)] = &[
    ("default", "mkfs.xfs 7.2 defaults: crc, finobt, sparse, reflink, rmapbt, bigtime, inobtcount, nrext64, parent pointers, exchange-range; the root directory's xfs:autofsck=repair"),
    ("6.1", "mkfs.xfs 6.1 defaults (Debian 12): crc, finobt, sparse, reflink, bigtime, inobtcount; no rmapbt, nrext64, parent pointers or exchange-range"),
    (
        "conservative",
        "readable by Linux >= 4.2 and GRUB 2.02..2.06: finobt, sparse; no reflink, bigtime, inobtcount, rmapbt, nrext64",
    ),
];

fn apply_profile(name: &str, o: &mut MkfsOptions) -> Result<(), String> {
    match name {
        "default" => Ok(()),
        "6.1" => {
            o.defaults.get_or_insert(xfskit::mkfs::Defaults::V6_1);
            Ok(())
        }
        "conservative" => {
            o.reflink.get_or_insert(false);
            o.bigtime.get_or_insert(false);
            o.inobtcount.get_or_insert(false);
            o.rmapbt.get_or_insert(false);
            o.nrext64.get_or_insert(false);
            o.parent.get_or_insert(false);
            o.exchange.get_or_insert(false);
            Ok(())
        }
        _ => Err(format!("unknown profile {name:?}; try --profile help")),
    }
}

/// Pull `--profile X` / `--timestamp N` out of the raw list (they may follow
/// mkfs.xfs options, where clap hands them over untouched).
fn take_long(raw: &mut Vec<String>, name: &str) -> Option<String> {
    let flag = format!("--{name}");
    let eq = format!("--{name}=");
    let i = raw.iter().position(|a| a == &flag || a.starts_with(&eq))?;
    let a = raw.remove(i);
    if let Some(v) = a.strip_prefix(&eq) {
        return Some(v.to_string());
    }
    (i < raw.len()).then(|| raw.remove(i))
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    errln!("xfskit mkfs: {msg}");
    ExitCode::from(1)
}

/// Makes the filesystem in a new disk image file of `format` at `target`.
fn new_container(
    target: &std::path::Path,
    format: NewFormat,
    opts: &MkfsOptions,
    w: &WriteOptions<'_>,
) -> Result<xfskit::mkfs::MkfsReport, String> {
    let Some(size) = opts.data_size.as_deref() else {
        return Err(format!(
            "--format {format} makes a new image: give its size with -d size="
        ));
    };
    let bytes = match xfskit::build::size::parse_size(size) {
        Ok(xfskit::build::size::SizeSpec::Fixed(b)) => b,
        _ => return Err(format!("-d size={size}: not a size")),
    };
    match std::fs::metadata(target) {
        Ok(m) if !m.is_file() => {
            return Err(format!(
                "{}: --format writes an image file",
                target.display()
            ))
        }
        Ok(m) if m.len() > 0 && !opts.force => {
            return Err(format!(
                "{} exists and is not empty (use -f to overwrite it)",
                target.display()
            ))
        }
        Ok(_) => std::fs::remove_file(target).map_err(|e| format!("{}: {e}", target.display()))?,
        Err(_) => {}
    }
    let made = (|| {
        let disk = format
            .create(target, format.disk_size(bytes))
            .map_err(|e| e.to_string())?;
        let fs_bytes = bytes.div_ceil(512) * 512;
        let window = xfskit::dev::Window::new(disk.device.clone(), 0, fs_bytes)
            .map_err(|e| e.to_string())?;
        let r = xfskit::mkfs::mkfs_device(&window, opts, w).map_err(|e| e.to_string())?;
        drop(window);
        disk.finish().map_err(|e| e.to_string())?;
        Ok(r)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(target);
    }
    made
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let mut raw = args.args;
    let profile = take_long(&mut raw, "profile").or(args.profile);
    let ts_text = take_long(&mut raw, "timestamp");
    let defaults = take_long(&mut raw, "defaults").or(args.defaults);
    let partition = match take_long(&mut raw, "partition").map(|p| p.parse::<u32>()) {
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return Ok(fail("--partition takes a partition number")),
        None => args.partition,
    };
    let format = match take_long(&mut raw, "format").or(args.format) {
        None => NewFormat::Raw,
        Some(f) => match NewFormat::parse(&f) {
            Some(f) => f,
            None => return Ok(fail(format!("unknown --format {f}: {}", NewFormat::NAMES))),
        },
    };
    let timestamp = match ts_text.map(|t| t.parse::<i64>()) {
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => return Ok(fail("--timestamp takes whole seconds since the epoch")),
        None => args.timestamp,
    };
    if profile.as_deref() == Some("help") {
        for (n, d) in PROFILES {
            outln!("{n:<14}{d}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut opts = match parse_mkfs_args(&raw) {
        Ok(o) => o,
        Err(e) => return Ok(fail(e)),
    };
    if let Some(d) = &defaults {
        match xfskit::mkfs::Defaults::parse(d) {
            Ok(d) => opts.defaults = Some(d),
            Err(e) => return Ok(fail(e)),
        }
    }
    if let Some(p) = &profile {
        if let Err(e) = apply_profile(p, &mut opts) {
            return Ok(fail(e));
        }
    }
    let Some(target) = opts.data_name.clone().map(PathBuf::from) else {
        return Ok(fail("no target given: xfskit mkfs [options] IMAGE|DEVICE"));
    };
    let bar = std::sync::OnceLock::<indicatif::ProgressBar>::new();
    let show_bar = !opts.quiet && !opts.dry_run && std::io::stderr().is_terminal();
    let progress = move |done: u64, total: u64| {
        if show_bar && total >= 4096 {
            let b = bar.get_or_init(|| {
                let b = indicatif::ProgressBar::new(total);
                b.set_message("AG headers");
                b
            });
            b.set_position(done);
            if done == total {
                b.finish_and_clear();
            }
        }
    };
    let w = WriteOptions {
        timestamp: timestamp.map(|secs| Timestamp { secs, nsec: 0 }),
        progress: Some(&progress),
    };
    let made = match partition {
        _ if format != NewFormat::Raw && !opts.dry_run => {
            if partition.is_some() {
                return Ok(fail(
                    "--partition makes the filesystem in an existing disk: no --format",
                ));
            }
            new_container(&target, format, &opts, &w)
        }
        // Into partition N of a disk image (raw or qcow2): through a window.
        Some(n) => xfskit::disk::open_partition(&target, n, !opts.dry_run)
            .map_err(|e| e.to_string())
            .and_then(|(dev, _)| {
                xfskit::mkfs::mkfs_device(dev.as_ref(), &opts, &w)
                    .map_err(|e| e.to_string())
                    .and_then(|r| dev.flush().map(|_| r).map_err(|e| e.to_string()))
            }),
        None => mkfs_with(&target, &opts, &w).map_err(|e| e.to_string()),
    };
    match made {
        Ok(r) => {
            let g = &r.geometry;
            for warn in &g.warnings {
                errln!("{warn}");
            }
            if !opts.quiet || opts.dry_run {
                out!("{}", geometry_summary(g));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(fail(e)),
    }
}

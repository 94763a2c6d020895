//! `xfskit build [OPTIONS] SOURCE IMAGE [mkfs.xfs options]`: a populated
//! XFS image from a directory or a tar archive, without root.

use crate::cmd::out::{out, outln};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use xfskit::build::disk::{build_disk, DiskTarget};
use xfskit::build::feed::FeedStats;
use xfskit::build::idmap::{parse_map, parse_owner, IdMap};
use xfskit::build::size::{parse_size, parse_slack};
use xfskit::build::{build, plan, write_engine, BuildOptions, BuildPlan, Source};
use xfskit::disk::container::NewFormat;
use xfskit::mkfs::{geometry_summary, parse_mkfs_args};
use xfskit::Error;

/// The long help text (also used by main.rs).
pub const LONG_ABOUT: &str = "\
Make an XFS image file holding a copy of SOURCE, without root, a loop device or \
a kernel mount.

SOURCE is a directory (walked without following symlinks, entries in byte order of \
their names), a tar archive (plain, gzip, zstd or xz, recognised by content), or '-' \
for a tar archive on standard input (read once as it comes when --size is given; \
spooled to $TMPDIR first with --size auto, which reads it twice).

Copied: file data (holes stay holes), directories, symlinks, hard links, device \
nodes, fifos, sockets (directories only), permissions with set-id and sticky bits, \
numeric owners, nanosecond atime/mtime/ctime, creation time where the source has one, \
and user, trusted and security xattrs and POSIX ACLs. Tar archives may list entries \
in any order; directories they imply get mode 0755, owner 0:0 and the time \
SOURCE_DATE_EPOCH (else 0). A name listed twice is an error unless both are directories.

IMAGE is an image file (created, or emptied with -f) or a block device. With --size \
auto (the default) the source is scanned first and the image is the smallest that \
holds it plus --slack, and at least 300 MiB, the smallest filesystem mkfs.xfs 6.1 \
makes. With a size given, nothing is scanned ahead: a source that does not fit \
fails with exit code 4 when the image fills, and the image is removed.

mkfs.xfs options may follow SOURCE and IMAGE (or come before them): -b size=, \
-i size=, -n size=, -m crc=1,reflink=,bigtime=,uuid=..., -d agcount=, -l size=, \
-l logdev=FILE (an external log on FILE, which must exist; use the image with \
--logdev FILE), -L label, -f (overwrite IMAGE), -N (print the plan, write nothing), -q (quiet).

Disk images, all without root: --gpt makes IMAGE a GPT disk with one XFS partition \
(type Linux filesystem 0FC63DAF-8483-4772-8E79-3D69D8477DE4, starting at 1 MiB, its \
size rounded up to 1 MiB, protective MBR, backup table at the end); --format FMT \
writes the disk directly in a VM disk format (with or without --gpt): qcow2 (v3), \
vmdk (monolithicSparse, VMware Workstation), vmdk-stream (streamOptimized, for ESXi \
and OVA packages; compressed, written once), vhd (dynamic), vhd-fixed (fixed, a whole \
number of MiB: what Azure takes), vhdx (dynamic, Hyper-V) or vdi (dynamic, VirtualBox); \
--partition N builds into partition N of an existing raw or VM disk: the filesystem fills the partition, the source is \
scanned first and refused (exit code 4, nothing written) when it does not fit, and \
an existing filesystem in the partition needs -f. The rest of the disk is not touched.

Exit codes: 0 success; 2 usage error or bad source; 3 unsupported; 4 I/O error or \
no space; 5 corrupt archive, partition table or qcow2 file.";

const AFTER_HELP: &str = "\
Examples:
  xfskit build rootfs/ rootfs.img
  xfskit build --owner 0:0 --reproducible rootfs.tar.zst rootfs.img -L root
  tar -C dir -c . | xfskit build - out.img -b size=4096 -m reflink=0
  xfskit build --size 2g --uid-map 1000:0 --gid-map 1000:0 home/ home.img -f
  xfskit build --gpt --format qcow2 rootfs/ disk.qcow2
  xfskit build --gpt --format vhd-fixed rootfs/ azure.vhd
  xfskit build --partition 3 rootfs.tar disk.img -f";

/// Arguments of `xfskit build`.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Image size: `auto` (smallest that fits, plus slack) or a size such as 512m, 4g.
    #[arg(long, value_name = "auto|SIZE", default_value = "auto")]
    pub size: String,
    /// Free room added to an automatic size: PCT%, SIZE or PCT%+SIZE.
    #[arg(long, value_name = "SPEC", default_value = "10%+16m")]
    pub slack: String,
    /// Give every inode this numeric owner (wins over the maps).
    #[arg(long, value_name = "UID:GID")]
    pub owner: Option<String>,
    /// Map user ids: FROM:TO[:COUNT],... (ranges, as in /proc/PID/uid_map).
    #[arg(long, value_name = "MAP")]
    pub uid_map: Option<String>,
    /// Map group ids: FROM:TO[:COUNT],...
    #[arg(long, value_name = "MAP")]
    pub gid_map: Option<String>,
    /// Same input, same image bytes: the UUID comes from SOURCE_DATE_EPOCH (default
    /// 0) unless -m uuid= is given, and mkfs stamps that time. Source times are kept.
    #[arg(long)]
    pub reproducible: bool,
    /// Do not descend into directories on other filesystems (they stay empty).
    #[arg(long)]
    pub one_file_system: bool,
    /// Threads writing into the image (default: half the CPUs, at least one:
    /// each writer needs a thread reading the source beside it). Work is
    /// split by allocation group. --reproducible uses one.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Print a JSON summary on standard output.
    #[arg(long)]
    pub json: bool,
    /// Build into partition N of IMAGE, an existing partitioned disk (raw or
    /// qcow2): the filesystem fills the partition, the source must fit in it
    /// (checked before anything is written), the rest of the disk is untouched.
    #[arg(long, value_name = "N")]
    pub partition: Option<u32>,
    /// Make IMAGE a new GPT disk holding one XFS partition (type Linux
    /// filesystem, starting at 1 MiB, 1 MiB aligned; protective MBR and
    /// backup table at the end).
    #[arg(long)]
    pub gpt: bool,
    /// The feature defaults of an xfsprogs release (4.19, 5.4, 5.10, 5.15,
    /// 6.1, 6.6, 6.12, 6.18, 7.2 (the default)), for images that kernels of that release
    /// must mount; options given explicitly still win.
    #[arg(long, value_name = "VERSION")]
    pub defaults: Option<String>,
    /// The file format of a new IMAGE: raw (default), qcow2, vmdk,
    /// vmdk-stream, vhd, vhd-fixed, vhdx or vdi (combine with --gpt for a
    /// partitioned disk).
    #[arg(long, value_name = "FORMAT", default_value = "raw")]
    pub format: String,
    /// SOURCE, IMAGE and mkfs.xfs options.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..,
        value_name = "SOURCE IMAGE [MKFS OPTIONS]"
    )]
    pub args: Vec<String>,
}

/// Long options that may also appear among the trailing arguments.
const LONG_VALUES: &[&str] = &[
    "size",
    "slack",
    "owner",
    "uid-map",
    "gid-map",
    "jobs",
    "partition",
    "format",
    "defaults",
];
const LONG_FLAGS: &[&str] = &["reproducible", "one-file-system", "json", "gpt"];

fn usage(msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{msg} (see xfskit build --help)"))
}

/// Pulls xfskit options out of the raw trailing list (clap hands over
/// everything after the first positional untouched).
fn take_long(raw: &mut Vec<String>, a: &mut Args) -> Result<(), Error> {
    let mut i = 0;
    while i < raw.len() {
        let s = raw[i].clone();
        let Some(body) = s.strip_prefix("--") else {
            i += 1;
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if LONG_FLAGS.contains(&name) {
            raw.remove(i);
            match name {
                "reproducible" => a.reproducible = true,
                "one-file-system" => a.one_file_system = true,
                "gpt" => a.gpt = true,
                _ => a.json = true,
            }
        } else if LONG_VALUES.contains(&name) {
            raw.remove(i);
            let v = match inline {
                Some(v) => v,
                None if i < raw.len() => raw.remove(i),
                None => return Err(usage(format!("--{name} needs a value"))),
            };
            match name {
                "size" => a.size = v,
                "slack" => a.slack = v,
                "owner" => a.owner = Some(v),
                "uid-map" => a.uid_map = Some(v),
                "jobs" => a.jobs = Some(v.parse().map_err(|_| usage(format!("bad --jobs {v}")))?),
                "partition" => {
                    a.partition = Some(
                        v.parse()
                            .map_err(|_| usage(format!("bad --partition {v}")))?,
                    )
                }
                "format" => a.format = v,
                "defaults" => a.defaults = Some(v),
                _ => a.gid_map = Some(v),
            }
        } else if body.is_empty() {
            i += 1;
        } else {
            return Err(usage(format!("unknown option --{name}")));
        }
    }
    Ok(())
}

/// Splits mkfs.xfs options from the two positional arguments.
fn split_positional(raw: &[String]) -> Result<(Vec<String>, Vec<String>), Error> {
    let (mut pos, mut mkfs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < raw.len() {
        let a = &raw[i];
        i += 1;
        if a == "--" {
            pos.extend(raw[i..].iter().cloned());
            break;
        }
        if a == "-" || !a.starts_with('-') {
            pos.push(a.clone());
            continue;
        }
        mkfs.push(a.clone());
        // A value-taking letter at the end of a cluster takes the next word.
        let letters = &a[1..];
        if let Some(k) = letters.find(|c| "bdilLmns".contains(c)) {
            if k + 1 == letters.len() && i < raw.len() {
                mkfs.push(raw[i].clone());
                i += 1;
            }
        }
    }
    Ok((pos, mkfs))
}

fn print_plan(p: &BuildPlan) {
    let c = &p.census;
    outln!(
        "source: {} dirs, {} files, {} symlinks, {} special, {} hard links, {} xattrs, {} bytes of data",
        c.dirs, c.files, c.symlinks, c.specials, c.hardlinks, c.xattrs, c.data_bytes
    );
    outln!(
        "needs: {} data + {} directory + {} xattr + {} symlink + {} extent map blocks, {} inodes",
        c.data_blocks,
        c.dir_blocks,
        c.xattr_blocks,
        c.symlink_blocks,
        c.bmbt_blocks,
        c.inodes()
    );
    if let Some(n) = p.image_bytes {
        outln!("image: {n} bytes ({} MiB)", n >> 20);
    }
    out!("{}", geometry_summary(&p.geometry));
}

fn hex(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Runs the command.
pub fn run(mut args: Args) -> Result<ExitCode, Error> {
    let mut raw = std::mem::take(&mut args.args);
    take_long(&mut raw, &mut args)?;
    let (pos, mkfs_args) = split_positional(&raw)?;
    let [source, image] = <[String; 2]>::try_from(pos)
        .map_err(|p| usage(format!("expected SOURCE and IMAGE, got {p:?}")))?;
    let mut mkfs = parse_mkfs_args(&mkfs_args).map_err(usage)?;
    if let Some(d) = &args.defaults {
        mkfs.defaults = Some(xfskit::mkfs::Defaults::parse(d).map_err(usage)?);
    }
    let ids = IdMap {
        owner: args.owner.as_deref().map(parse_owner).transpose()?,
        uids: match &args.uid_map {
            Some(m) => parse_map(m, "--uid-map")?,
            None => Vec::new(),
        },
        gids: match &args.gid_map {
            Some(m) => parse_map(m, "--gid-map")?,
            None => Vec::new(),
        },
    };
    let quiet = mkfs.quiet;
    let dry_run = mkfs.dry_run;
    let qflags = mkfs.qflags;
    let show_bar = !quiet && !args.json && !dry_run && std::io::stderr().is_terminal();
    let bar = show_bar.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    });
    let progress = |s: &FeedStats| {
        if let Some(b) = &bar {
            if s.entries().is_multiple_of(256) {
                b.set_message(format!("{} entries, {} MiB", s.entries(), s.bytes >> 20));
            }
        }
    };
    let opts = BuildOptions {
        mkfs,
        size: parse_size(&args.size)?,
        slack: parse_slack(&args.slack)?,
        ids,
        reproducible: args.reproducible,
        source_date_epoch: None,
        one_file_system: args.one_file_system,
        progress: Some(&progress),
        jobs: match args.jobs {
            Some(0) => return Err(usage("--jobs must be at least 1")),
            Some(n) => n,
            // On 2 CPUs one writer is faster than two (100,000 files from a
            // tar: 0.46-0.53 s against 0.51-0.57 s): the source's reading
            // and parsing threads need the other CPU.
            None => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        },
    };
    let image = PathBuf::from(image);
    let src = Source::open(std::path::Path::new(&source))?;
    if dry_run {
        let p = plan(&src, &image, &opts)?;
        if args.json {
            let c = &p.census;
            let g = &p.geometry;
            let v = serde_json::json!({
                "image": image.display().to_string(),
                "image_bytes": g.dblocks * u64::from(g.blocksize),
                "agcount": g.agcount, "blocksize": g.blocksize, "inodesize": g.inodesize,
                "dirs": c.dirs, "files": c.files, "symlinks": c.symlinks,
                "specials": c.specials, "hardlinks": c.hardlinks, "xattrs": c.xattrs,
                "data_bytes": c.data_bytes, "data_blocks": c.data_blocks,
                "dir_blocks": c.dir_blocks, "xattr_blocks": c.xattr_blocks,
                "symlink_blocks": c.symlink_blocks, "bmbt_blocks": c.bmbt_blocks,
                "inodes": c.inodes(),
            });
            outln!("{v}");
        } else {
            print_plan(&p);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(format) = NewFormat::parse(&args.format) else {
        return Err(usage(format!(
            "unknown --format {}: {}",
            args.format,
            NewFormat::NAMES
        )));
    };
    let container = format != NewFormat::Raw;
    let r = match (args.partition, args.gpt || container) {
        (Some(_), true) => {
            return Err(usage(
                "--partition builds into an existing disk: no --gpt or --format",
            ))
        }
        (Some(n), false) => build_disk(&src, &image, DiskTarget::Partition(n), &opts),
        (None, true) => build_disk(
            &src,
            &image,
            DiskTarget::New {
                gpt: args.gpt,
                format,
            },
            &opts,
        ),
        (None, false) => build(&src, &image, &opts, write_engine),
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let r = r?;
    // Quota options: the quota files and counts made now, as the kernel's
    // first quota mount would make them (a bare image; the quota flags of
    // a disk's filesystem are left for the kernel to count).
    if qflags & 0x0049 != 0 && args.partition.is_none() && !args.gpt && !container && !dry_run {
        let fs = super::edit::open_rw(&image, &super::DiskArgs::default())?;
        xfskit::quota::enable(
            fs,
            &xfskit::quota::EnableOptions {
                user: qflags & 0x0001 != 0,
                group: qflags & 0x0040 != 0,
                project: qflags & 0x0008 != 0,
                enforce: false,
            },
        )?;
    }
    let f = &r.fed;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let files_per_s = f.entries() as f64 / secs;
    let g = &r.plan.geometry;
    let image_bytes = g.dblocks * u64::from(g.blocksize);
    if args.json {
        let v = serde_json::json!({
            "image": image.display().to_string(),
            "image_bytes": image_bytes,
            "uuid": hex(&r.uuid),
            "dirs": f.dirs, "files": f.files, "symlinks": f.symlinks,
            "specials": f.specials, "hardlinks": f.hardlinks, "xattrs": f.xattrs,
            "bytes": f.bytes,
            "seconds": secs, "scan_seconds": r.plan.scan_elapsed.as_secs_f64(),
            "entries_per_second": files_per_s,
        });
        outln!("{v}");
    } else if !quiet {
        outln!(
            "{}: {} dirs, {} files, {} symlinks, {} special, {} hard links, {} MiB of data \
             in {secs:.2} s ({files_per_s:.0} entries/s); image {} MiB, uuid {}",
            image.display(),
            f.dirs,
            f.files,
            f.symlinks,
            f.specials,
            f.hardlinks,
            f.bytes >> 20,
            image_bytes >> 20,
            hex(&r.uuid)
        );
    }
    Ok(ExitCode::SUCCESS)
}

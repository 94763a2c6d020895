//! `xfskit admin`: show or change the label and UUID of an image and add
//! features, with xfs_admin's flags and output.

use crate::cmd::out::{errln, outln};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::admin::{self, NewUuid};
use xfskit::OpenOptions;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Show or change the label and the UUID of an XFS image and add features to
it, as xfs_admin does, with its flags and its output.

  -l          prints the label: label = \"...\"
  -u          prints the UUID: UUID = ...
  -L LABEL    sets the label in every superblock (all AGs); at most 12 bytes.
              `-L --` clears it (so do `-L ''` and xfs_db's `\"\"`).
  -U UUID     sets the UUID in every superblock: a UUID written as
              8-4-4-4-12 hexadecimal digits, `generate` (a new random one),
              `nil` (all zeros) or `restore` (back to the UUID the metadata
              is stamped with; nothing to do when it already is).
  -O FEATURE=1[,FEATURE=1...]
              adds features offline, as xfs_admin -O (xfs_repair -c) of
              xfsprogs 7.2 does; -O may be given more than once:
                bigtime=1     timestamps to 2486 (incompat bit; inodes
                              change format as they are next written)
                inobtcount=1  inode btree block counters in every AGI
                              (ro_compat bit; needs finobt)
                nrext64=1     64-bit extent counters (incompat bit; needs
                              a log large enough for its transactions)
                exchange=1    file exchange-range (incompat bit; needs
                              reflink)
                lazycount=1   always on for v5: nothing to do
              These are all xfsprogs 7.2 can add. finobt, rmapbt, reflink,
              parent, metadir, sparse, ftype and crc cannot be added to an
              existing filesystem (by 7.2 neither): refused, exit 3; make
              a new filesystem with them and copy the files into it.

Changes are made first (the label, then the UUID, then the features),
then -l and -u print what the image holds. A label longer than 12 bytes is refused (exit 2):
xfs_admin on an unmounted filesystem cuts it to 12 bytes with a warning,
which can split a character, and the kernel's online label change
refuses it.

On a v5 (crc) filesystem a new UUID does not rewrite the metadata, which
keeps the UUID it was stamped with: when the new UUID differs from it, the
META_UUID incompat feature is set and sb_meta_uuid keeps the old UUID (a
kernel older than 4.3 will not mount it); when the UUID becomes equal to
it again (`restore`, or that UUID given), the feature is cleared. The
superblock copies of every AG get the same fields as xfs_admin gives them.

Crash safety: the primary superblock is changed through the filesystem's
log (a journaled transaction, written back, the log left clean), then the
secondary copies are written with their CRCs; a label change interrupted
part way leaves the new label in the primary and is finished by running
the command again. Log records carry the filesystem UUID and the kernel
refuses to mount a filesystem whose log names another, so -U rewrites the
log, as xfs_admin clears it (\"Clearing log and setting UUID\"): the log
must be clean first. A log that needs replay is refused (exit 3): run
`xfskit recover IMAGE`, or mount and unmount the filesystem, then -U
again. After the superblock, an unmount record carrying the new UUID goes
at the log head, and the log's other blocks are stamped as empty records
with the new UUID, each in the cycle it had, so the kernel, xfs_repair
and `xfskit log` find a clean log. Interrupted between the superblock and
the log, the image holds the new UUID and a log naming the old one, which
the kernel refuses to mount until the same `xfskit admin -U` is run again.

-O prints xfs_repair's line for each feature (\"Adding nrext64 to
filesystem.\") or, when the filesystem already has it, \"Filesystem already
supports nrext64.\" and goes on with the others (xfs_repair 7.2 stops there
and adds none). inobtcount first counts the blocks of each AG's inode and
free inode btrees into its AGI, through the log; then the feature bits go
into the primary superblock and, with at most 128 AGs, into every
secondary copy in the same logged transaction, so a crash at any write
leaves the old features or the new ones in every copy. With more AGs the
secondary copies are written in place after the logged primary, and the
same command run again brings copies an interrupted run left behind in
line. Refused (exit 3), as xfs_repair 7.2 refuses them: any feature on a
v4 filesystem, inobtcount without finobt, exchange without reflink, and a
log smaller than the minimum with the new features (xfs_repair 7.2's
number, a few blocks above the kernel's). Existing
inodes keep their format (the kernel and xfskit convert each one to
bigtime and nrext64 as they next write it); the tree is unchanged.

IMAGE may be a bare XFS filesystem, a partitioned disk (MBR or GPT, LVM2
linear volumes) or a qcow2 file holding either (--partition N or --lv
VG/LV when there are several). -l and -u only read (URLs too); -L and -U
and -O need a writable v5 filesystem (v4 is read-only in xfskit, exit 3;
filesystems with realtime groups are refused, exit 3, as their realtime
superblock is not updated). -l and -u warn, as xfs_admin does, when a
secondary superblock carries another label or UUID than the primary.

Exit codes: 0 done; 2 usage error, an invalid UUID, a label too long, an
unknown feature or a value other than 1; 3 unsupported filesystem, -U on a
log that needs replay, or a feature that cannot be added; 4 I/O error;
5 corrupt superblock. (xfs_admin exits 0 after an invalid UUID and after
refusing a dirty log.)

Examples:
  xfskit admin -l -u disk.img
  xfskit admin -L root disk.qcow2
  xfskit admin -L -- disk.img                # clear the label
  xfskit admin -U generate disk.img          # a copy of an image gets its own UUID
  xfskit admin -U restore disk.img
  xfskit admin -O bigtime=1,inobtcount=1,nrext64=1,exchange=1 old.img";

/// Arguments of `xfskit admin`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true)))]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    /// Print the label (`label = "..."`).
    #[arg(short = 'l', long = "show-label", group = "what")]
    pub show_label: bool,
    /// Print the UUID (`UUID = ...`).
    #[arg(short = 'u', long = "show-uuid", group = "what")]
    pub show_uuid: bool,
    /// Set the label (at most 12 bytes; `--` clears it).
    #[arg(
        short = 'L',
        long = "label",
        value_name = "LABEL",
        allow_hyphen_values = true,
        group = "what"
    )]
    pub label: Option<OsString>,
    /// Set the UUID: a UUID, `generate`, `nil` or `restore`.
    #[arg(
        short = 'U',
        long = "uuid",
        value_name = "UUID|generate|nil|restore",
        group = "what"
    )]
    pub uuid: Option<String>,
    /// Add features: bigtime, inobtcount, nrext64, exchange (each =1;
    /// comma-separated or -O given again).
    #[arg(
        short = 'O',
        long = "feature",
        value_name = "FEATURE=1[,FEATURE=1...]",
        group = "what",
        action = clap::ArgAction::Append
    )]
    pub features: Vec<String>,
    #[command(flatten)]
    pub disk: super::DiskArgs,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    // Arguments first: nothing is opened for a bad one.
    let label = match &args.label {
        Some(l) => match admin::label_from_arg(l.as_bytes()) {
            Ok(l) => Some(l),
            Err(e) => {
                errln!("xfskit admin: {}", super::message(&e));
                return Ok(ExitCode::from(2));
            }
        },
        None => None,
    };
    let uuid = match &args.uuid {
        Some(u) => match NewUuid::parse(u) {
            Some(n) => Some(n),
            None => {
                errln!("xfskit admin: invalid UUID: {u}");
                return Ok(ExitCode::from(2));
            }
        },
        None => None,
    };
    let mut features: Vec<admin::Feature> = Vec::new();
    for arg in &args.features {
        match admin::parse_features(arg) {
            Ok(f) => features.extend(f),
            Err(e) => {
                errln!("xfskit admin: {}", super::message(&e));
                return Ok(ExitCode::from(super::code_of(&e)));
            }
        }
    }
    features.sort();
    features.dedup();
    if !features.is_empty() {
        // Refused before anything is written (the label and UUID too).
        let opts = OpenOptions {
            norecovery: true,
            ..Default::default()
        };
        let fs = super::open_with(&args.image, &args.disk, &opts)?;
        if let Err(e) = admin::check_features(fs.geometry(), &features) {
            errln!(
                "xfskit admin: {}: {}",
                args.image.display(),
                super::message(&e)
            );
            return Ok(ExitCode::from(super::code_of(&e)));
        }
    }
    if uuid.is_some() {
        // Before any read-write open, which would replay the log.
        let opts = OpenOptions {
            norecovery: true,
            ..Default::default()
        };
        let fs = super::open_with(&args.image, &args.disk, &opts)?;
        match admin::require_clean_log(&fs) {
            Err(xfskit::Error::DirtyLog(why)) => {
                errln!(
                    "xfskit admin: {}: {why}: replay it first with `xfskit recover {}` (or mount and unmount the filesystem), then run this again",
                    args.image.display(),
                    args.image.display()
                );
                return Ok(ExitCode::from(3));
            }
            r => r?,
        }
    }
    if let Some(l) = &label {
        let fs = super::edit::open_rw(&args.image, &args.disk)?;
        admin::set_label(&fs, l)?;
        outln!("writing all SBs");
        outln!("new label = \"{}\"", String::from_utf8_lossy(l));
    }
    if let Some(n) = uuid {
        // Opened again after a label change: the log was written since.
        let fs = super::edit::open_rw(&args.image, &args.disk)?;
        if let Some(u) = admin::set_uuid(&fs, n)? {
            outln!("Clearing log and setting UUID");
            outln!("writing all SBs");
            outln!("new UUID = {}", admin::uuid_string(&u));
        }
    }
    if !features.is_empty() {
        // Opened again after a label or UUID change.
        let fs = super::edit::open_rw(&args.image, &args.disk)?;
        for (f, added) in admin::add_features(&fs, &features)? {
            if added {
                outln!("{}", f.adding_message());
            } else {
                outln!("{}", f.already_message());
            }
        }
    }
    if args.show_label || args.show_uuid {
        let fs = super::open_in(&args.image, &args.disk, false)?;
        let id = admin::identity(&fs)?;
        if args.show_label {
            if let Some(ag) = id.label_differs {
                outln!("warning: AG {ag} label differs");
            }
            outln!("label = \"{}\"", String::from_utf8_lossy(&id.label));
        }
        if args.show_uuid {
            if let Some(ag) = id.uuid_differs {
                outln!("warning: UUID in AG {ag} differs to the primary SB");
            }
            outln!("UUID = {}", admin::uuid_string(&id.uuid));
        }
    }
    Ok(ExitCode::SUCCESS)
}

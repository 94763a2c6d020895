//! `xfskit quotacheck`: quotas turned on offline, the counts made as the
//! kernel's first quota mount makes them.

use crate::cmd::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Turn user, group and project quotas on in an XFS image, offline, as the
kernel's first mount with -o uquota,gquota,pquota does: the quota files are
made (or, when the superblock names some, their records are recounted),
every inode's blocks, realtime blocks and inode are counted into the records
of its user, group and project, grace timers are started for ids past a
soft limit, and the superblock's accounting, enforcement and \"checked\"
flags are set. The kernel's next quota mount then runs no quotacheck, and
`xfs_repair -n` compares the counts. From then on every xfskit write (edits,
build into the image, the read-write mount) keeps them exact.

Without -u, -g or -p all three are turned on (a v4 filesystem keeps groups
or projects, not both). --noenforce accounts without enforcing limits (the
uqnoenforce mount options). On a filesystem with a metadata directory
(mkfs.xfs -m metadir=1) the files are /quota/user, group and project of that
tree, as the kernel makes them. Accounting flags without \"checked\" (from
mkfs -m uquota,...) are completed; refused when the superblock marks the
counts of a kind asked for checked already.

Each step is a journaled transaction: an interrupted run leaves the
counts marked unchecked, and the kernel recounts at its next quota mount.

Exit status: 0 on success; 1 quotas are on already; 2 usage error; 3
unsupported; 4 I/O error or no space; 5 the filesystem is damaged.

Examples:
  xfskit quotacheck disk.img
  xfskit quotacheck -p --json disk.img";

/// Arguments of `xfskit quotacheck`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    #[command(flatten)]
    pub kinds: super::quota::KindArgs,
    /// Account without enforcing the limits.
    #[arg(long)]
    pub noenforce: bool,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let [user, group, project] = args.kinds.chosen();
    let opts = xfskit::quota::EnableOptions {
        user,
        group,
        project,
        enforce: !args.noenforce,
    };
    let fs = super::edit::open_rw(&args.image, &args.disk)?;
    let done = match xfskit::quota::enable(fs, &opts) {
        Ok(d) => d,
        Err(xfskit::Error::Invalid(m)) if m.contains("quotas are on already") => {
            crate::cmd::out::errln!("xfskit quotacheck: {m}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    if args.json {
        let v: Vec<_> = done
            .iter()
            .map(|k| {
                serde_json::json!({
                    "kind": k.kind.name(),
                    "inode": k.ino,
                    "made": k.made,
                    "ids": k.ids,
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
    } else {
        for k in &done {
            outln!(
                "{} quota: {} file inode {}, {} ids counted",
                k.kind.name(),
                if k.made { "new" } else { "existing" },
                k.ino,
                k.ids
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

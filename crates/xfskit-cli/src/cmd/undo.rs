//! `xfskit undo FILE IMAGE`: put back what a command run with `--undo FILE`
//! overwrote.

use crate::cmd::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::dev::undo::{restore, RestoreOptions};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Put an XFS image back as it was before a command that was run with
--undo FILE (an edit, admin, grow, quotacheck or the read-write mount): the
old contents of every block that command overwrote, which it saved in FILE
before each write, are written back, so the filesystem reads byte for byte as
it did before the command (for a VM disk file, the disk it holds; blocks the
container allocated stay allocated). As e2undo does for e2fsck -z.

Give the same --partition or --lv as the command had. Refused when the
filesystem is not the one FILE was made for (another size, or a UUID that is
neither its UUID nor its metadata UUID, which keeps the first UUID after
xfs_admin -U on a v5 filesystem), unless --force. A FILE whose
last record was cut by a crash is restored up to that record, which the
crash kept from reaching the image. Run it once: a second run puts the same
old contents back again.

Exit codes: 0 restored; 1 refused (not this filesystem) or bad arguments; 4
I/O error; 5 FILE damaged before its last record (nothing written).";

/// Arguments of `xfskit undo`.
#[derive(clap::Args)]
pub struct Args {
    /// The undo file a command wrote with --undo.
    pub file: PathBuf,
    /// The image the command changed.
    pub image: PathBuf,
    /// Say what would be put back, write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Put it back even on a filesystem with another UUID.
    #[arg(long)]
    pub force: bool,
    /// Partition and volume selection, as for the command that wrote FILE.
    #[command(flatten)]
    pub disk: super::DiskArgs,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    if args.disk.undo.is_some() {
        return Err(xfskit::Error::Invalid(
            "xfskit undo takes the undo file as its first argument, not --undo".into(),
        ));
    }
    let img = xfskit::disk::open(&args.image, &args.disk.image_options(!args.dry_run))?;
    let r = restore(
        &args.file,
        img.device.as_ref(),
        &RestoreOptions {
            dry_run: args.dry_run,
            force: args.force,
        },
    )?;
    let verb = if args.dry_run {
        "would put back"
    } else {
        "put back"
    };
    outln!(
        "{verb} {} ranges, {} bytes, from {}",
        r.records,
        r.bytes,
        args.file.display()
    );
    if r.torn_tail {
        outln!("the last record was cut short by a crash: its write never reached the image");
    }
    Ok(ExitCode::SUCCESS)
}

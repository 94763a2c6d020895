//! `xfskit info`: the geometry block of xfs_info (xfsprogs 6.15), read
//! from an image.

use crate::cmd::out::{out, outln};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::info::{render_rt, to_json};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Print the geometry and features of an XFS image.

The text output is laid out exactly like `xfs_info` (and `xfs_db -r -c info`)
of xfsprogs 6.15, so the two can be compared with diff: beside the fields of
older releases it shows exchange= and metadir= (meta-data), parent= (naming)
and the realtime group lines (rgcount=, rgsize=, zoned=, start=, reserved=),
for every filesystem. The first field shows the image path as given. With
--json every field is printed by name, every feature bit of the superblock
as a named boolean under \"features\", and the raw feature words as well.

The image is opened read-only; a filesystem whose log needs replay is
refused unless --norecovery is given.

Examples:
  xfskit info disk.img
  xfskit info --json disk.img | jq .data.blocks
  diff <(xfskit info disk.img) <(xfs_db -r -c info disk.img)   # xfs_db 6.15";

/// Arguments of `xfskit info`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// Print JSON instead of the xfs_info layout.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let g = fs.geometry();
    if args.json {
        let state = format!("{:?}", fs.log_state()).to_lowercase();
        let v = to_json(g, &state);
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?
        );
    } else {
        let rtdev = args.disk.rtdev.as_ref().map(|p| p.to_string_lossy());
        out!(
            "{}",
            render_rt(g, &args.image.to_string_lossy(), rtdev.as_deref())
        );
    }
    Ok(ExitCode::SUCCESS)
}

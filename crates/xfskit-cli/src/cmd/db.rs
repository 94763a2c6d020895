//! `xfskit db`: xfs_db's read-only inspection commands (sb, agf, agi,
//! agfl print), with xfs_db's output.

use crate::cmd::out::{out, outln};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::db::fields::{self, Header};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Print on-disk structures of an XFS image the way xfs_db prints them.

Each subcommand does what the xfs_db command of the same name does when
run read-only, with the same output, so the two can be compared with diff:

  sb [AGNO]     the superblock copy of an AG (`xfs_db -r -c 'sb AGNO' -c print`)
  agf [AGNO]    the AG free space header (`-c 'agf AGNO' -c print`)
  agi [AGNO]    the AG inode header (`-c 'agi AGNO' -c print`)
  agfl [AGNO]   the AG free list (`-c 'agfl AGNO' -c print`)

AGNO is 0 when left out. The headers are printed field by field with
xfs_db's names and value formats (decimal, %#x hex, \"null\" for an all-ones
block or inode number, nothing for an unset rmap or refcount root, the
label quoted and escaped, arrays as INDEX:VALUE of the slots xfs_db shows);
the metadata directory fields (metadirino, rgcount, rgextents, rgblklog,
pad) on a metadir filesystem and rtstart, rtreserved on a zoned one, as
xfsprogs 7.2 prints them. The CRC is checked: \"(correct)\", \"(bad)\", or
\"(unchecked)\" on a v4 filesystem. The sector is read raw, as xfs_db reads
it, so a damaged header still prints. With --json the same fields by name.

The image is only read and its log is not replayed (xfs_db -r does not
replay it either): the structures are shown as they are on disk.

Examples:
  xfskit db disk.img sb
  xfskit db disk.img agf 1
  xfskit db --json disk.img agi 0 | jq .fields.freecount
  diff <(xfskit db disk.img sb 0) <(xfs_db -r -c 'sb 0' -c print disk.img)";

/// Arguments of `xfskit db`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Print JSON instead of xfs_db's layout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub what: What,
}

/// The xfs_db commands.
#[derive(clap::Subcommand)]
pub enum What {
    /// The superblock of an AG (xfs_db `sb N` then `print`).
    Sb {
        /// The AG (0 when left out).
        agno: Option<u32>,
    },
    /// The free space header of an AG (xfs_db `agf N` then `print`).
    Agf {
        /// The AG (0 when left out).
        agno: Option<u32>,
    },
    /// The inode header of an AG (xfs_db `agi N` then `print`).
    Agi {
        /// The AG (0 when left out).
        agno: Option<u32>,
    },
    /// The free list of an AG (xfs_db `agfl N` then `print`).
    Agfl {
        /// The AG (0 when left out).
        agno: Option<u32>,
    },
}

fn json_out(v: &serde_json::Value) -> Result<(), xfskit::Error> {
    let s = serde_json::to_string_pretty(v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?;
    outln!("{s}");
    Ok(())
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, true)?;
    let (header, agno) = match args.what {
        What::Sb { agno } => (Header::Sb, agno),
        What::Agf { agno } => (Header::Agf, agno),
        What::Agi { agno } => (Header::Agi, agno),
        What::Agfl { agno } => (Header::Agfl, agno),
    };
    let f = fields::read(&fs, header, agno.unwrap_or(0))?;
    if args.json {
        json_out(&fields::to_json(&f))?;
    } else {
        out!("{}", fields::render(&f));
    }
    Ok(ExitCode::SUCCESS)
}

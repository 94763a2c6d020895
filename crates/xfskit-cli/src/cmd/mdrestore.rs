//! `xfskit mdrestore`: turn an xfs_metadump file (v1 or v2) back into an
//! image, as xfs_mdrestore does.

use crate::cmd::out::{errln, outln};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xfskit::metadump;

/// The long help of `xfskit mdrestore`.
pub const LONG_ABOUT: &str = "Restore a metadata dump made by xfs_metadump (or `xfskit metadump`)
into a filesystem image, as xfs_mdrestore does.

Both formats are read: v1 (index blocks of 512-byte sector addresses,
\"XFSM\") and v2 (a header, then extent records naming the data device, the
external log or the realtime device, \"XMD2\"). OUT is made a sparse file of
the size the superblock gives (sb_dblocks blocks); every block the dump
holds is written at its address and everything else reads as zeros, so the
image holds the filesystem's metadata and no file data. The primary
superblock is written last, with sb_inprogress clear and its CRC
recomputed, as xfs_mdrestore writes it: the result is byte for byte what
xfs_mdrestore 7.2 restores from the same dump. OUT may also be a block
device, which must be large enough.

A v2 dump of a filesystem with an external log holds the log's contents and
needs --logdev FILE to put them in; one with realtime device contents needs
--rtdev FILE. A dump that is damaged or cut short is an error naming the
record and its byte offset in the dump (exit 5); what was written so far
stays in OUT.

METADUMP may be `-` for standard input.

Exit codes: 0 restored; 2 usage (OUT missing, a log device a dump does not
need or lacks); 3 a v2 dump with incompat flags this version does not know;
4 I/O error; 5 not a metadump, or a damaged or truncated one.

Examples:
  xfskit mdrestore fs.md fs.img
  xfskit mdrestore -i fs.md
  xfskit mdrestore --logdev log.img fs.md fs.img";

/// Arguments of `xfskit mdrestore`.
#[derive(clap::Args)]
pub struct Args {
    /// The metadump file (`-` for standard input).
    pub metadump: PathBuf,
    /// The image to write (a file, truncated and made sparse, or a block
    /// device). May be left out with -i.
    pub out: Option<PathBuf>,
    /// Print what the dump's header says (obfuscated or not, clean or dirty
    /// log, full or zeroed blocks), as xfs_mdrestore -i prints it; without
    /// OUT only that.
    #[arg(short = 'i', long = "info")]
    pub info: bool,
    /// Show progress (megabytes read) on standard error.
    #[arg(short = 'g', long = "progress")]
    pub progress: bool,
    /// Where to restore the external log a v2 dump holds (a file, made
    /// sparse, or a block device); xfs_mdrestore's -l.
    #[arg(short = 'l', long = "logdev", value_name = "FILE")]
    pub logdev: Option<PathBuf>,
    /// Where to restore the realtime device contents a v2 dump holds;
    /// xfs_mdrestore's -r.
    #[arg(short = 'r', long = "rtdev", value_name = "FILE")]
    pub rtdev: Option<PathBuf>,
}

/// Opens a restore target as xfs_mdrestore does: a missing path becomes a
/// new file, a regular file is truncated, anything else (a block device) is
/// written in place. Returns the file and whether it is a regular file.
fn open_target(p: &Path) -> Result<(File, bool), xfskit::Error> {
    let is_file = match std::fs::metadata(p) {
        Err(_) => true,
        Ok(m) => m.is_file(),
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(is_file)
        .truncate(is_file)
        .open(p)
        .map_err(|e| {
            xfskit::Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", p.display()),
            ))
        })?;
    Ok((f, is_file))
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    if args.out.is_none() && !args.info {
        return Err(xfskit::Error::Invalid(
            "OUT is needed (only -i may go without it)".into(),
        ));
    }
    let name = args.metadump.to_string_lossy().into_owned();
    let mut input: Box<dyn Read> = if name == "-" {
        Box::new(BufReader::with_capacity(1 << 20, std::io::stdin().lock()))
    } else {
        let f = File::open(&args.metadump).map_err(|e| {
            xfskit::Error::Io(std::io::Error::new(e.kind(), format!("{name}: {e}")))
        })?;
        Box::new(BufReader::with_capacity(1 << 20, f))
    };
    let header = metadump::read_header(&mut input)?;
    if matches!(header, metadump::Header::V1 { .. })
        && (args.logdev.is_some() || args.rtdev.is_some())
    {
        return Err(xfskit::Error::Invalid(
            "a v1 metadump holds no external log or realtime device: --logdev and --rtdev \
             are for v2 dumps"
                .into(),
        ));
    }
    if args.info {
        outln!("{}", header.info_line(&name));
    }
    let Some(out) = args.out else {
        return Ok(ExitCode::SUCCESS);
    };
    let (data, data_is_file) = open_target(&out)?;
    let log = args.logdev.as_deref().map(open_target).transpose()?;
    let rt = args.rtdev.as_deref().map(open_target).transpose()?;
    let targets = metadump::Targets {
        data: &data,
        data_is_file,
        log: log.as_ref().map(|(f, b)| (f, *b)),
        rt: rt.as_ref().map(|(f, b)| (f, *b)),
    };
    let mut last_mb = u64::MAX;
    let show = args.progress;
    let mut progress = |bytes: u64| {
        if show && bytes >> 20 != last_mb {
            last_mb = bytes >> 20;
            eprint!("\r{:<59}", format!("{} MB read", bytes >> 20));
        }
    };
    let r = metadump::restore(&mut input, &header, &targets, &mut progress);
    if show && last_mb != u64::MAX {
        errln!("");
    }
    r?;
    data.sync_all()?;
    Ok(ExitCode::SUCCESS)
}

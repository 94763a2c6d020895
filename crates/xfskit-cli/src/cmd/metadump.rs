//! `xfskit metadump`: copy a filesystem's metadata into an xfs_metadump
//! file (v2 or v1), as xfs_metadump does.

use crate::cmd::out::errln;
use crate::cmd::DiskArgs;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::metadump::{self, DumpOptions};

/// The long help of `xfskit metadump`.
pub const LONG_ABOUT: &str = "Copy the metadata of an XFS filesystem into a metadata dump file, as
xfs_metadump does: the file xfs_mdrestore (or `xfskit mdrestore`) turns
back into an image holding the filesystem's metadata and no file data, for
debugging a filesystem without shipping its contents.

Copied, as xfs_metadump copies them: every AG's superblock, AGF, AGI and
AGFL; every block of the free space, inode, free inode, reverse mapping
and reference count btrees; the inode clusters of every inode chunk; for
each inode in use its bmbt blocks, its extended attribute blocks, and the
blocks of directories, symbolic links and metadata files (realtime bitmap
and summary, quota files, metadata directory files); the internal log (a
dirty log is copied as it is and the dump says so; it is never
replayed). File data and the realtime device are not copied. Damaged
structures are gone past: what can be read is copied and, with -w, each
problem is printed.

By default, as xfs_metadump does, the bytes no structure uses are zeroed
(btree blocks past their records, free inodes' literal areas, inode forks
past what they hold, directory and attribute blocks' free space and
padding, the AGFL outside its list, symlink blocks past the target; a
clean log is written cleared, a dirty one copied as it is), and names are
obfuscated: every directory entry name, symlink target component and
attribute name of 5 bytes or more becomes a random name of the same length
and the same hash (lost+found and its orphans named by inode number kept;
a parent pointer gets its entry's new name), attribute values become 'v's
and the label 'L's. -a keeps whole blocks, -o keeps the names. The random
names differ each run unless --seed N (or --reproducible, seeded by
SOURCE_DATE_EPOCH) is given. A dirty log is not obfuscated (a warning
says so).
Restored, a dump equals xfs_metadump 7.2's with the same -o or -o -a,
byte for byte.

The image is only read, opened as every xfskit command opens one (a bare
filesystem, a partitioned disk, qcow2, LVM, an object store URL).

Not dumped yet (exit 3): an external log; realtime groups (their realtime
superblocks and realtime rmap and refcount btrees). A classic realtime
section needs nothing from the realtime device: its bitmap and summary are
copied.

Exit codes: 0 written; 2 usage (a bad --seed or SOURCE_DATE_EPOCH); 3
unsupported (see above); 4 I/O error;
5 the primary superblock is corrupt or fails its CRC (xfs_metadump dumps
such a filesystem anyway; xfskit cannot open it yet).

Examples:
  xfskit metadump disk.img fs.md
  xfskit metadump --seed 42 disk.img fs.md
  xfskit metadump -o disk.img fs.md
  xfskit metadump -o -a -v 1 disk.qcow2 fs.md1
  xfskit metadump -o disk.img - | zstd > fs.md.zst";

/// Arguments of `xfskit metadump`.
#[derive(clap::Args)]
pub struct Args {
    /// The image holding the filesystem.
    pub image: PathBuf,
    /// The metadump file to write (`-` for standard output).
    pub out: PathBuf,
    /// Do not obfuscate names, symbolic link targets and attribute names
    /// and values (xfs_metadump -o).
    #[arg(short = 'o')]
    pub no_obfuscate: bool,
    /// Copy whole metadata blocks, stale bytes included (xfs_metadump -a);
    /// without it the bytes no structure uses are zeroed.
    #[arg(short = 'a')]
    pub all_blocks: bool,
    /// Seed of the obfuscation: the same image and seed give the same dump.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Seed the obfuscation with SOURCE_DATE_EPOCH (0 when unset), as
    /// `xfskit build --reproducible` takes its UUID from it.
    #[arg(long)]
    pub reproducible: bool,
    /// The file format: 2 (the default; extent records, external log
    /// contents possible) or 1 (xfs_metadump's older index-block format).
    #[arg(short = 'v', long = "format-version", value_name = "VERSION", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=2))]
    pub format_version: u32,
    /// Show progress (the AG being copied) on standard error.
    #[arg(short = 'g')]
    pub progress: bool,
    /// Print a warning on standard error for each damaged structure gone past.
    #[arg(short = 'w')]
    pub warnings: bool,
    #[command(flatten)]
    pub disk: DiskArgs,
}

/// The obfuscation seed: --seed, else SOURCE_DATE_EPOCH (or 0) with
/// --reproducible, else none (a fresh one each run).
fn seed(args: &Args) -> Result<Option<u64>, xfskit::Error> {
    if let Some(s) = args.seed {
        return Ok(Some(s));
    }
    if !args.reproducible {
        return Ok(None);
    }
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
            xfskit::Error::Invalid(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds (--reproducible seeds the \
                 obfuscation with it)"
            ))
        }),
        Err(_) => Ok(Some(0)),
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let seed = seed(&args)?;
    // Never replayed (the log is copied as it is), and a damaged root
    // inode does not stop the dump: it is copied like any other.
    let open = xfskit::OpenOptions {
        norecovery: true,
        any_root: true,
        ..Default::default()
    };
    let fs = crate::cmd::open_with(&args.image, &args.disk, &open)?;
    let opts = DumpOptions {
        version: args.format_version,
        full_blocks: args.all_blocks,
        obfuscate: !args.no_obfuscate,
        seed,
    };
    let show = args.progress;
    let mut progress = |s: &str| {
        if show {
            eprint!("\r{s:<59}");
        }
    };
    let to_stdout = args.out.as_os_str() == "-";
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(BufWriter::with_capacity(1 << 20, std::io::stdout().lock()))
    } else {
        let f = std::fs::File::create(&args.out).map_err(|e| {
            xfskit::Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", args.out.display()),
            ))
        })?;
        Box::new(BufWriter::with_capacity(1 << 20, f))
    };
    let r = metadump::dump(&fs, &mut out, &opts, &mut progress)?;
    if show {
        errln!("");
    }
    if let Some(w) = &r.log_warning {
        errln!("xfskit metadump: warning: {w}");
    }
    if args.warnings {
        for w in &r.warnings {
            errln!("xfskit metadump: warning: {w}");
        }
    }
    drop(out);
    Ok(ExitCode::SUCCESS)
}

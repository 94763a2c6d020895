//! `xfskit timeline`: The Sleuth Kit's body file (mactime's input) of an
//! image, one line per path of every allocated inode. `bulkstat
//! --bodyfile` runs the same code.

use crate::cmd::out::errln;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use xfskit::bodyfile::{self, Escape, Format};
use xfskit::scan::{BulkstatOptions, DEFAULT_BATCH};
use xfskit::{Error, Fs};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Print the body file of The Sleuth Kit's mactime (format 3.x) for every \
allocated inode of an XFS image, one line per path, for timeline tools (mactime, plaso's bodyfile \
parser) to take as it is:\n\n    MD5|name|inode|mode_as_string|UID|GID|size|atime|mtime|ctime|crtime\n\n\
The image is only read: a dirty log is replayed in memory, never onto the image, and every image \
kind xfskit opens works (bare, MBR/GPT partitions, LVM2, qcow2, URLs). Inodes are scanned one \
allocation group per thread, in inode number order; the cost follows the inodes, not the size of \
the filesystem.\n\n\
Fields, as TSK's fls -m writes them:\n\n\
MD5: 0, or with --md5 the MD5 of each regular file's content (every file is read whole).\n\n\
name: the full path, from the inode's parent pointers, or on a filesystem without them (made \
before mkfs.xfs 6.x turned them on) from an index of every directory entry made first, as \
bulkstat --paths does (--memory, --tmpdir). A file with several hard links has one line per \
path. The root is \"/\". A symlink's name is followed by \" -> TARGET\". An inode no directory \
names (unlinked while still open) is \"/$OrphanFiles/OrphanFile-INODE\", as fls names orphans. \
With --deleted, the deleted inodes `xfskit deleted` finds follow, each ending in \
\" (deleted)\" as fls marks them (see xfskit-deleted(1); --quick leaves out free space). mactime \
splits lines at every \"|\" and decodes %XX in each field, so \"|\", \"%\" and control bytes in \
names are written as %7C, %25, %0A... (--escape percent, the default); --escape backslash writes \
\\|, \\\\ and \\xNN instead, the form plaso and dfImageTools read. (fls itself writes \"|\" as \
it is, which mactime splits, and control bytes as \"^\".)\n\n\
mode_as_string: the type of the directory entry, \"/\", and the inode's ls -l string with TSK's \
type letters: r/rrw-r--r-- (regular file), d/drwxr-xr-x, l/lrwxrwxrwx, c/crw-rw-rw-, \
b/brw-rw----, p/prw-r--r--, and s/hrwxr-xr-x for a socket (TSK's letter for a socket inode).\n\n\
UID, GID, size: the inode's owner, group and size in bytes (a symlink's is its target's \
length, a device's 0), as stat(1) shows them on a kernel mount.\n\n\
atime, mtime, ctime, crtime: seconds since the epoch. XFS keeps nanoseconds (and, with bigtime, \
dates up to 2486): they follow as a decimal fraction when not zero, 1700000000.123456789. \
mactime reads the whole seconds of such a number (its output has one-second resolution), plaso \
keeps the fraction. --seconds writes whole seconds only, rounded down, as fls does. crtime is the \
creation time v5 inodes keep (di_crtime; stat's %W); 0 on v4 filesystems, which have none.\n\n\
Inodes whose names or target cannot be read (a damaged parent pointer or directory) still get a \
line (an orphan's name, or no target), the error goes to standard error and the exit status is \
that of the worst error (5 for corruption). Metadata inodes (quota, realtime) are not listed, as \
bulkstat does not list them. `xfskit bulkstat --bodyfile` prints the same.\n\n\
Examples:\n  \
xfskit timeline disk.img > body.txt\n  \
mactime -b body.txt -d -y -z UTC > timeline.csv\n  \
xfskit timeline --md5 --prefix /mnt/evidence vm.qcow2 > body.txt\n  \
xfskit bulkstat --bodyfile --ag 0 disk.img\n  \
xfskit timeline --escape backslash s3://bucket/disk.img > body.txt   # for plaso";

/// The options of the body file itself, shared with `bulkstat --bodyfile`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BodyArgs {
    /// Compute the MD5 of every regular file's content (reads each file
    /// whole); without it the MD5 field is 0.
    #[arg(long)]
    pub md5: bool,
    /// Write whole seconds only (rounded down), as fls does; by default
    /// the nanoseconds follow as a decimal fraction when they are not zero.
    #[arg(long)]
    pub seconds: bool,
    /// How "|", "%" and control bytes in names are written: percent
    /// (%7C, %25, %0A: what mactime decodes; the default) or backslash
    /// (\|, \\, \x0a: what plaso's bodyfile parser reads).
    #[arg(long, value_enum, value_name = "HOW")]
    pub escape: Option<EscapeArg>,
    /// Put PREFIX before every path, as `fls -m PREFIX` does (for example
    /// the mount point the image had, or a drive letter).
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
}

/// The choices of --escape.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum EscapeArg {
    /// %XX, which mactime decodes.
    Percent,
    /// \|, \\ and \xNN, which plaso reads.
    Backslash,
}

impl BodyArgs {
    /// A usage error when one of these options is given to `what`, which
    /// prints no body file.
    pub fn refuse_without(&self, what: &str) -> Result<(), Error> {
        let given = [
            (self.md5, "--md5"),
            (self.seconds, "--seconds"),
            (self.escape.is_some(), "--escape"),
            (self.prefix.is_some(), "--prefix"),
        ];
        match given.iter().find(|(g, _)| *g) {
            Some((_, name)) => Err(Error::Invalid(format!("{name} needs {what}"))),
            None => Ok(()),
        }
    }

    fn format(&self) -> Format {
        Format {
            prefix: self.prefix.clone().unwrap_or_default().into_bytes(),
            seconds: self.seconds,
            escape: match self.escape {
                None | Some(EscapeArg::Percent) => Escape::Percent,
                Some(EscapeArg::Backslash) => Escape::Backslash,
            },
        }
    }
}

/// Arguments of `xfskit timeline`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file, block device or URL.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    #[command(flatten)]
    pub body: BodyArgs,
    /// Worker threads (default: one per CPU, at most one per AG).
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// List only the inodes of this allocation group.
    #[arg(long)]
    pub ag: Option<u32>,
    /// Start at this inode number (inodes below it are not listed).
    #[arg(long)]
    pub start_ino: Option<u64>,
    /// Memory for the index of directory entries made on a filesystem
    /// without parent pointers (k m g suffixes; default 256m). Past it,
    /// sorted runs and names go to temporary files.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Directory for those temporary files (default: $TMPDIR or /tmp).
    #[arg(long, value_name = "DIR")]
    pub tmpdir: Option<PathBuf>,
    /// Print what was scanned and written to standard error at the end.
    #[arg(long)]
    pub stats: bool,
    /// Read even if the log needs replay (like the kernel's norecovery):
    /// the state on disk, without what only the log holds.
    #[arg(long)]
    pub norecovery: bool,
    /// Also list the deleted inodes `xfskit deleted` finds, after the
    /// allocated ones: marked ` (deleted)` as fls marks them, under their
    /// full path where it survives (else as orphans), with the times the
    /// freed inode keeps (its size is 0 unless the whole inode survived).
    #[arg(long)]
    pub deleted: bool,
    /// With --deleted: do not read free space (as `deleted --quick`).
    #[arg(long, requires = "deleted")]
    pub quick: bool,
}

/// What to scan and how, from `timeline` or `bulkstat --bodyfile`.
pub struct Run {
    /// The inodes and threads.
    pub scan: BulkstatOptions,
    /// --memory of the name index.
    pub memory: Option<String>,
    /// --tmpdir of the name index.
    pub tmpdir: Option<PathBuf>,
    /// --stats.
    pub stats: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let run = Run {
        scan: BulkstatOptions {
            threads: args.threads,
            batch: DEFAULT_BATCH,
            ag: args.ag,
            start_ino: args.start_ino,
        },
        memory: args.memory,
        tmpdir: args.tmpdir,
        stats: args.stats,
    };
    let code = run_body(&fs, &run, &args.body)?;
    if !args.deleted {
        return Ok(code);
    }
    let opts = xfskit::forensic::Options {
        skip_free_space: args.quick,
    };
    let (found, _) = xfskit::forensic::scan(&fs, &opts, &mut |_, _| {})?;
    let fmt = args.body.format();
    let mut text = Vec::new();
    let ns = |t: (i64, u32)| i128::from(t.0) * 1_000_000_000 + i128::from(t.1);
    for d in &found {
        let paths: Vec<Option<Vec<u8>>> = {
            let v: Vec<Option<Vec<u8>>> = d
                .names
                .iter()
                .filter_map(|n| n.path.clone())
                .map(Some)
                .collect();
            if v.is_empty() {
                vec![None]
            } else {
                v
            }
        };
        for path in paths {
            let r = bodyfile::Record {
                path,
                link_target: d.symlink.clone(),
                status: bodyfile::Status::Deleted,
                ino: d.ino,
                name_type: d.file_type,
                uid: d.uid,
                gid: d.gid,
                size: d.size.unwrap_or(0),
                atime: ns(d.atime),
                mtime: ns(d.mtime),
                ctime: ns(d.ctime),
                crtime: ns(d.crtime),
                ..Default::default()
            };
            bodyfile::write_line(&mut text, &r, &fmt);
        }
    }
    let mut out = io::stdout().lock();
    match out.write_all(&text).and_then(|_| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        r => {
            r?;
            Ok(code)
        }
    }
}

/// Problems printed one by one before only their count is.
const SHOWN_PROBLEMS: u64 = 20;

/// Writes the body file of every allocated inode of `fs` to standard output.
pub fn run_body(fs: &Fs, run: &Run, body: &BodyArgs) -> Result<ExitCode, Error> {
    let cache = super::bulkstat::path_cache(
        fs,
        run.scan.threads,
        run.memory.as_deref(),
        run.tmpdir.clone(),
        run.stats,
    )?;
    let opts = bodyfile::Options {
        scan: run.scan.clone(),
        md5: body.md5,
    };
    let fmt = body.format();
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    // Text buffers go back and forth between the scanning threads (which
    // format) and this one (which writes), as in bulkstat.
    let pool: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    let mut lines = 0u64;
    let mut problems = 0u64;
    let mut worst = 0u8;
    let map = |batch: bodyfile::Batch| {
        let mut text = pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        text.clear();
        for r in &batch.records {
            bodyfile::write_line(&mut text, r, &fmt);
        }
        (text, batch.records.len() as u64, batch.problems)
    };
    let r = bodyfile::allocated(fs, &opts, &cache, map, |(text, n, probs)| {
        out.write_all(&text)?;
        pool.lock().unwrap_or_else(|p| p.into_inner()).push(text);
        lines += n;
        for p in probs {
            problems += 1;
            worst = super::worse(worst, super::code_of(&p.error));
            if problems <= SHOWN_PROBLEMS {
                errln!(
                    "xfskit: inode {}: its {} could not be read: {}",
                    p.ino,
                    p.what,
                    super::message(&p.error)
                );
            }
        }
        Ok(())
    });
    let flushed = out.flush();
    let stats = match r {
        Ok(s) => s,
        // A closed pipe (`| head`) ends the output quietly.
        Err(Error::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e),
    };
    match flushed {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        r => r?,
    }
    if run.stats {
        errln!(
            "{} inodes in {} AGs: {lines} lines, {problems} problems",
            stats.inodes,
            stats.ags
        );
    }
    if problems > SHOWN_PROBLEMS {
        errln!(
            "xfskit: {} more inodes with problems not shown ({problems} in all)",
            problems - SHOWN_PROBLEMS
        );
    }
    Ok(ExitCode::from(worst))
}

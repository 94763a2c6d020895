//! `xfskit db`: xfs_db's read-only inspection commands (sb, agf, agi,
//! agfl print, freesp, frag, fsmap), with xfs_db's output.

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
  freesp [-bcds] [-a AGNO]... [-A N] [-e N] [-h N]... [-m N]
                the free space histogram (`-c 'freesp ...'`)
  frag [-adflqRrv]
                file fragmentation (`-c 'frag ...'`)
  fsmap [START [END]]
                the reverse mappings of a range of blocks (`-c 'fsmap ...'`)

AGNO is 0 when left out. The headers are printed field by field with
xfs_db's names and value formats (decimal, %#x hex, \"null\" for an all-ones
block or inode number, nothing for an unset rmap or refcount root, the
label quoted and escaped, arrays as INDEX:VALUE of the slots xfs_db shows);
the metadata directory fields (metadirino, rgcount, rgextents, rgblklog,
pad) on a metadir filesystem and rtstart, rtreserved on a zoned one, as
xfsprogs 7.2 prints them. The CRC is checked: \"(correct)\", \"(bad)\", or
\"(unchecked)\" on a v4 filesystem. The sector is read raw, as xfs_db reads
it, so a damaged header still prints. (xfs_db reads every AGF and AGI when
it starts, reports a bad CRC there on stderr, and then prints that
header's CRC as correct; xfskit says bad.) With --json the same fields by name.

freesp counts the free extents of each AG as xfs_db does: the blocks on
its free list (one-block extents), then the records of the by-block free
space btree (-c: the by-size one), in bins of sizes from 1 up to powers of
2 below the AG size (-m N: of N; -e N: bins N blocks wide; -h N: bins
starting at each N given), printed for the bins that hold any as
xfsprogs 7.2 prints them: \"from to extents blocks pct blkcdf extcdf\", the
last two the share of blocks and of extents in that bin and all larger
ones, each column as wide as its longest number (--classic: the five
fixed-width columns of xfsprogs 6.1, without the last two). -s adds the totals and the average extent size, -d
lists every extent first, -a AGNO only scans that AG, -A N counts only
extents whose first block is a multiple of N. Each btree is walked block by
block (one block per level held); a damaged AGF, free list or btree block
is an error naming the AG and the block. (xfs_db 7.2 loses the bins that
-h asks for and prints a single bin from 1 to the AG size; xfskit makes
them, as 6.1 does.)

fsmap [START [END]] lists the reverse mappings that overlap filesystem
blocks START to END (AG-encoded block numbers, as xfs_db takes them; the
whole filesystem by default), as xfs_db's fsmap prints them: \"N: AGNO/AGBNO
len LEN owner OWNER offset OFFSET bmbt 0|1 attrfork 0|1 extflag 0|1\", the
special owners negative (-3 fs, -4 log, -5 ag, -6 inobt, -7 inodes, -8
refcount, -9 cow; named in --json). Only the rmap btree blocks whose keys
overlap the range are read. An END past the filesystem is its last block;
a START must be one of its blocks (xfs_db refuses a START at or above the
block count, which on AGs of a size other than a power of two includes
blocks of the last AGs; xfskit lists them). It needs a filesystem with the rmap btree
(exit 3 otherwise); -r (the realtime device's) is not listed yet.

frag walks every AG's inode btree and reads the clusters of its allocated
inodes, as xfs_db does: for the data fork of directories, regular files and
symbolic links and the attribute fork of every inode that has one (-a -d -f
-l -q -R -r choose: attribute forks, directories, files, symbolic links,
quota files, the realtime bitmap and summary, realtime files; all when none
is given), \"actual\" counts extent records and \"ideal\" the runs of them
that follow one another in the file; the factor is (actual - ideal) /
actual. -v adds a line per inode. Extent maps are streamed (one bmbt block
per level held); a damaged inode or bmbt block is an error naming it.

The image is only read and its log is not replayed (xfs_db -r does not
replay it either): the structures are shown as they are on disk.

Examples:
  xfskit db disk.img sb
  xfskit db disk.img agf 1
  xfskit db --json disk.img agi 0 | jq .fields.freecount
  xfskit db disk.img freesp -s
  xfskit db disk.img freesp -a 0 -c
  xfskit db disk.img frag -f
  xfskit db disk.img fsmap 0 1000
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
    /// File fragmentation (xfs_db `frag`).
    Frag(FragArgs),
    /// The free space histogram (xfs_db `freesp`).
    #[command(disable_help_flag = true)]
    Freesp(FreespArgs),
    /// The reverse mappings of a range of blocks (xfs_db `fsmap`).
    Fsmap {
        /// The realtime device's mappings (not listed yet: refused).
        #[arg(short = 'r')]
        realtime: bool,
        /// The first filesystem block (AG-encoded, as xfs_db takes it; 0
        /// when left out).
        start: Option<u64>,
        /// The last filesystem block (the filesystem's last when left out).
        end: Option<u64>,
    },
}

fn fsmap(
    fs: &xfskit::Fs,
    start: Option<u64>,
    end: Option<u64>,
    json: bool,
) -> Result<ExitCode, xfskit::Error> {
    let mut n = 0u64;
    let mut all = Vec::new();
    xfskit::db::fsmap::scan(fs, start, end, &mut |m| {
        if json {
            all.push(m.to_json());
        } else {
            outln!("{}", m.line(n));
        }
        n += 1;
    })?;
    if json {
        json_out(&serde_json::Value::Array(all))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The options of xfs_db's frag, with its letters: which forks count
/// (every kind when none is given).
#[derive(clap::Args)]
pub struct FragArgs {
    /// Attribute forks.
    #[arg(short = 'a')]
    pub attr: bool,
    /// Directories.
    #[arg(short = 'd')]
    pub dirs: bool,
    /// Regular files.
    #[arg(short = 'f')]
    pub files: bool,
    /// Symbolic links.
    #[arg(short = 'l')]
    pub links: bool,
    /// Quota files.
    #[arg(short = 'q')]
    pub quota: bool,
    /// The realtime bitmap and summary files.
    #[arg(short = 'R')]
    pub rt_meta: bool,
    /// Realtime files.
    #[arg(short = 'r')]
    pub realtime: bool,
    /// A line per inode counted: its number, extents and runs.
    #[arg(short = 'v')]
    pub verbose: bool,
}

fn frag(fs: &xfskit::Fs, a: &FragArgs, json: bool) -> Result<ExitCode, xfskit::Error> {
    use xfskit::db::frag::{self, Options};
    let opts = Options {
        attr: a.attr,
        dirs: a.dirs,
        files: a.files,
        links: a.links,
        quota: a.quota,
        rt_meta: a.rt_meta,
        realtime: a.realtime,
    };
    let verbose = a.verbose && !json;
    let r = frag::scan(fs, opts, &mut |ino, r| {
        if verbose {
            outln!("inode {ino} actual {} ideal {}", r.actual, r.ideal);
        }
    })?;
    if json {
        json_out(&frag::to_json(&r))?;
    } else {
        out!("{}", frag::render(&r));
    }
    Ok(ExitCode::SUCCESS)
}

/// The options of xfs_db's freesp, with its letters.
#[derive(clap::Args)]
pub struct FreespArgs {
    /// Only this AG (repeat for more; every AG when not given).
    #[arg(short = 'a', value_name = "AGNO")]
    pub ags: Vec<u32>,
    /// Count only extents whose first filesystem block is a multiple of N.
    #[arg(short = 'A', value_name = "N")]
    pub alignment: Option<u64>,
    /// Bins at powers of 2 (the default).
    #[arg(short = 'b', conflicts_with_all = ["equal", "mult", "starts"])]
    pub binary: bool,
    /// Walk the by-size free space btree instead of the by-block one.
    #[arg(short = 'c')]
    pub count: bool,
    /// List every free extent counted (agno, agbno, len) first.
    #[arg(short = 'd')]
    pub dump: bool,
    /// Bins of N blocks each.
    #[arg(short = 'e', value_name = "N", conflicts_with_all = ["mult", "starts"])]
    pub equal: Option<u32>,
    /// A bin starting at N blocks (repeat for more; one at 1 is added).
    #[arg(short = 'h', value_name = "N", conflicts_with = "mult")]
    pub starts: Vec<u32>,
    /// Bins at powers of N.
    #[arg(short = 'm', value_name = "N")]
    pub mult: Option<u32>,
    /// Print the totals and the average free extent size after the histogram.
    #[arg(short = 's')]
    pub summary: bool,
    /// The five columns of xfsprogs 6.1 and older (from, to, extents,
    /// blocks, pct, fixed widths) instead of 7.2's layout.
    #[arg(long)]
    pub classic: bool,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

fn json_out(v: &serde_json::Value) -> Result<(), xfskit::Error> {
    let s = serde_json::to_string_pretty(v).map_err(|e| xfskit::Error::Invalid(e.to_string()))?;
    outln!("{s}");
    Ok(())
}

fn freesp(fs: &xfskit::Fs, a: &FreespArgs, json: bool) -> Result<ExitCode, xfskit::Error> {
    use xfskit::db::freesp::{self, Bins, Options};
    let bins = if let Some(e) = a.equal {
        Bins::Equal(e)
    } else if let Some(m) = a.mult {
        Bins::Mult(m)
    } else if !a.starts.is_empty() {
        Bins::Starts(a.starts.clone())
    } else {
        Bins::Mult(2)
    };
    let opts = Options {
        ags: a.ags.clone(),
        by_size: a.count,
        alignment: a.alignment.unwrap_or(0),
        bins,
    };
    let dump = a.dump && !json;
    if dump {
        outln!("{:>8} {:>8} {:>8}", "agno", "agbno", "len");
    }
    let r = freesp::scan(fs, &opts, &mut |agno, agbno, len| {
        if dump {
            outln!("{agno:>8} {agbno:>8} {len:>8}");
        }
    })?;
    if json {
        json_out(&freesp::to_json(&r))?;
    } else {
        out!("{}", freesp::render(&r, a.summary, a.classic));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, true)?;
    let (header, agno) = match args.what {
        What::Freesp(f) => return freesp(&fs, &f, args.json),
        What::Frag(f) => return frag(&fs, &f, args.json),
        What::Fsmap { realtime: true, .. } => {
            return Err(xfskit::Error::Unsupported(
                "fsmap -r: the realtime device's reverse mappings are not listed yet".into(),
            ))
        }
        What::Fsmap { start, end, .. } => return fsmap(&fs, start, end, args.json),
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

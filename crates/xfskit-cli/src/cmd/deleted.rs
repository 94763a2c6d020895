//! `xfskit deleted` and `xfskit undelete`: deleted files found and written out.

use super::ls::{format_time, show_name};
use crate::cmd::out::{errln, outln};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xfskit::forensic::{self, Deleted};
use xfskit::inode::{FileType, Timestamp};
use xfskit::{Error, Fs};

/// The evidence and confidence text both long helps end with.
pub const EVIDENCE: &str = "Evidence, each named in the output (SOURCES):
  inode            a freed inode in an allocated chunk: owner, times and the
                   old extent records (or mapping btree root) survive the free
  freed-chunk      the same for an inode chunk that was freed whole (found in
                   free space; v5 filesystems, whose inodes name themselves)
  parent-pointer   the parent pointer left in the freed inode (filesystems
                   with parent pointers, the default of mkfs.xfs 6.18 on)
  dir-entry        a removed entry still readable in a directory in use
  freed-dir-block  an entry of a directory block that was freed (found in
                   free space by its v5 header, which names its directory)
  log              the log's items, its old passes' too (v5): the inode as
                   its unlink logged it (with its size), the extents its
                   allocation logged, the names a short-form directory held
                   and the entries logged into directory blocks; counted
                   only when every life of that inode number the log shows
                   is the freed one (same generation and creation time)

Only inodes that are free now are reported: a name pointing at an inode in
use is what a rename or a relink left, not a deletion. Freeing resets a
file's size: unless the log or the whole inode keeps it, data is whole
blocks up to the last surviving extent.

CONFIDENCE is one of:
  confirmed   two sources give the same name and every data block is free
  named       one source gives the name, every data block is free
  data-only   no name survives (written under lost+found by inode number)
  reused      some data blocks are in use again: content may be another file's

The image is only read, as every read-only command reads it (a dirty log is
replayed in memory, never on the image, and the blocks as they were before
that replay are read too); the free-space sweep reads every
free block once (--quick leaves it out: freed chunks and freed directory
blocks are then not seen).";

/// The long help of `deleted` (`--help`, the man page).
pub const DELETED_ABOUT: &str =
    "List the files deleted from an XFS image that can still be recovered.

One line per deleted inode: its number, the deletion time (the inode's last
change), the bytes its surviving extents reach, the confidence, and its full
path where every directory up to the root is known (in use, or deleted and
named itself), else DIR-INODE/NAME, else '-'. With --json, an array of
records: inode, generation, type, uid, gid, projid, the four times (seconds
and nanoseconds), names (dir, name, path, sources), extents (offset, start,
len in blocks, unwritten, free), symlink, sources, confidence.

Evidence and confidence are as described below.

Exit status: 0 on success (also when nothing is found), 2 on bad arguments,
3 if the filesystem is unsupported, 4 on I/O errors, 5 if metadata the scan
depends on is corrupt.

Examples:
  xfskit deleted disk.img
  xfskit deleted --json disk.qcow2 | jq '.[] | select(.confidence == \"confirmed\")'
  xfskit deleted --since 2026-11-30 --path /home disk.img";

/// The long help of `undelete`.
pub const UNDELETE_ABOUT: &str = "Write the deleted files of an XFS image into a directory.

Every file `xfskit deleted` lists (or the ones --path, --inode, --since and
--until select) is written under OUTDIR: at OUTDIR/PATH where its full path
is known, else at OUTDIR/lost+found/INODE or OUTDIR/lost+found/INODE_NAME
when only a name is known. Data is read from the extents that survive (holes
and preallocated extents left sparse); the file is cut to its size where the
evidence keeps it (the log, a whole inode), else it ends at the end of its
last surviving block, since the size is reset when a file is freed. Further names
of the same inode (hard links) become hard links. Short symlinks are made
again from the target left in the inode; directories are made as paths need
them. Access and modification times are set from the inode; owners are not
(they are in the records). A path that two deleted files share gets the
second one's inode number appended (NAME.INODE).

OUTDIR/deleted.jsonl receives one record per file, as `deleted --json` gives
it, with \"recovered_to\" (the path written, relative to OUTDIR) and
\"bytes\". OUTDIR must be empty or not exist. The image is only read.

Exit status: 0 on success, 1 if OUTDIR is not empty, 2 on bad arguments, 3 if
the filesystem is unsupported, 4 on I/O errors (reading or writing), 5 if
metadata the scan depends on is corrupt.

Examples:
  xfskit undelete disk.img recovered/
  xfskit undelete --path /var/log --since 2026-11-30 disk.img out/
  xfskit undelete --inode 136 disk.img out/";

/// What both commands select.
#[derive(clap::Args, Debug, Clone)]
pub struct Select {
    /// Only files whose full path is PREFIX or lies under it.
    #[arg(long, value_name = "PREFIX")]
    pub path: Option<String>,
    /// Only files deleted at or after TIME (seconds since the epoch, or
    /// `YYYY-MM-DD[ HH:MM:SS]` in UTC).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only files deleted before TIME (as --since).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only this inode (repeatable).
    #[arg(long, value_name = "INO")]
    pub inode: Vec<u64>,
    /// Do not read free space (no freed inode chunks, no freed directory
    /// blocks): costs only the inode btrees and the directories.
    #[arg(long)]
    pub quick: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `xfskit deleted`.
#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub select: Select,
    /// The image file, block device, disk image or URL.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
}

/// Arguments of `xfskit undelete`.
#[derive(clap::Args)]
pub struct UndeleteArgs {
    #[command(flatten)]
    pub select: Select,
    /// The image file, block device, disk image or URL.
    pub image: PathBuf,
    /// Where to write the files (empty or new).
    pub outdir: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
}

fn parse_time(s: &str) -> Result<i64, Error> {
    let t = s.trim().trim_start_matches('@');
    if let Ok(n) = t.parse::<i64>() {
        return Ok(n);
    }
    let full = if t.len() == 10 {
        format!("{t} 00:00:00")
    } else {
        t.to_string()
    };
    humantime::parse_rfc3339_weak(&full)
        .map_err(|e| {
            Error::Invalid(format!(
                "time {s:?}: {e} (give seconds since the epoch or YYYY-MM-DD[ HH:MM:SS])"
            ))
        })
        .map(|st| match st.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        })
}

fn find(fs: &Fs, sel: &Select) -> Result<Vec<Deleted>, Error> {
    let since = sel.since.as_deref().map(parse_time).transpose()?;
    let until = sel.until.as_deref().map(parse_time).transpose()?;
    let bar = (!sel.quiet && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} {bar:40} {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_message("free space");
        b
    });
    let opts = forensic::Options {
        skip_free_space: sel.quick,
    };
    let (all, _) = forensic::scan(fs, &opts, &mut |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let prefix = sel
        .path
        .as_deref()
        .map(|p| p.trim_end_matches('/').as_bytes().to_vec());
    Ok(all
        .into_iter()
        .filter(|d| sel.inode.is_empty() || sel.inode.contains(&d.ino))
        .filter(|d| since.is_none_or(|s| d.ctime.0 >= s))
        .filter(|d| until.is_none_or(|u| d.ctime.0 < u))
        .filter(|d| match &prefix {
            None => true,
            Some(p) => d.names.iter().any(|n| {
                n.path.as_deref().is_some_and(|q| {
                    q.starts_with(p) && (q.len() == p.len() || q[p.len()] == b'/' || p.is_empty())
                })
            }),
        })
        .collect())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn shown_where(d: &Deleted) -> String {
    if let Some(p) = d.path() {
        return show_name(p);
    }
    match d.names.first() {
        Some(n) => format!("{}/{}", n.dir, show_name(&n.name)),
        None => "-".into(),
    }
}

/// `xfskit deleted`.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, false)?;
    let found = find(&fs, &args.select)?;
    let bs = fs.geometry().block_size;
    if args.json {
        let v: Vec<Value> = found.iter().map(|d| forensic::to_json(d, bs)).collect();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:>12}  {:<29}  {:>12}  {:<10}  {:<8}  PATH",
        "INODE",
        "DELETED",
        "BYTES",
        "CONFIDENCE",
        "TYPE"
    );
    for d in &found {
        outln!(
            "{:>12}  {:<29}  {:>12}  {:<10}  {:<8}  {}",
            d.ino,
            format_time(Timestamp {
                sec: d.ctime.0,
                nsec: d.ctime.1
            }),
            d.mapped_bytes(bs),
            d.confidence.name(),
            forensic::type_name(d.file_type),
            shown_where(d)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Where under OUTDIR a name of `d` goes: its full path, else
/// lost+found/INODE[_NAME].
fn target_of(d: &Deleted) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = d
        .names
        .iter()
        .filter_map(|n| n.path.clone())
        .map(|p| p.strip_prefix(b"/").map(<[u8]>::to_vec).unwrap_or(p))
        .collect();
    v.dedup();
    if v.is_empty() {
        let mut p = format!("lost+found/{}", d.ino).into_bytes();
        if let Some(n) = d.names.first() {
            p.push(b'_');
            p.extend_from_slice(&n.name);
        }
        v.push(p);
    }
    v
}

fn os(p: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(p))
}

/// A path under `out` that nothing was written to yet.
fn fresh(
    out: &Path,
    rel: &[u8],
    ino: u64,
    used: &mut std::collections::HashSet<Vec<u8>>,
) -> Vec<u8> {
    let mut r = rel.to_vec();
    if used.contains(&r) || out.join(os(&r)).symlink_metadata().is_ok() {
        r.extend_from_slice(format!(".{ino}").as_bytes());
    }
    used.insert(r.clone());
    r
}

/// `xfskit undelete`.
pub fn undelete(args: UndeleteArgs) -> Result<ExitCode, Error> {
    let out = &args.outdir;
    if out.exists() {
        if std::fs::read_dir(out)?.next().is_some() {
            return Err(Error::Exists(format!(
                "{}: not empty (undelete writes only into an empty or new directory)",
                out.display()
            )));
        }
    } else {
        std::fs::create_dir_all(out)?;
    }
    let fs = super::open_in(&args.image, &args.disk, false)?;
    let found = find(&fs, &args.select)?;
    let bs = fs.geometry().block_size;
    let mut jsonl = std::io::BufWriter::new(std::fs::File::create(out.join("deleted.jsonl"))?);
    let mut used = std::collections::HashSet::new();
    used.insert(b"deleted.jsonl".to_vec());
    let (mut files, mut bytes, mut failed) = (0u64, 0u64, false);
    let mut links: Vec<(PathBuf, Vec<u8>, Value)> = Vec::new();
    // Directories first (deepest last), then files; symlinks at the end,
    // so that no write follows a link made from the image.
    let mut order: Vec<&Deleted> = found.iter().collect();
    order.sort_by_key(|d| match d.file_type {
        Some(FileType::Dir) => 0,
        Some(FileType::Symlink) => 2,
        _ => 1,
    });
    for d in order {
        let mut rec = forensic::to_json(d, bs);
        let targets = target_of(d);
        match d.file_type {
            Some(FileType::Dir) => {
                let rel = targets[0].clone();
                match std::fs::create_dir_all(out.join(os(&rel))) {
                    Ok(()) => rec["recovered_to"] = json!(lossy(&rel)),
                    Err(e) => {
                        errln!("xfskit undelete: inode {}: {}: {e}", d.ino, lossy(&rel));
                        rec["recovered_to"] = Value::Null;
                        failed = true;
                    }
                }
                used.insert(rel.clone());
            }
            Some(FileType::Symlink) => match &d.symlink {
                Some(t) => {
                    let rel = fresh(out, &targets[0], d.ino, &mut used);
                    links.push((os(t), rel, rec));
                    continue;
                }
                None => rec["recovered_to"] = Value::Null,
            },
            _ if d.extents.is_empty() => rec["recovered_to"] = Value::Null,
            _ => {
                let rel = fresh(out, &targets[0], d.ino, &mut used);
                match write_file(&fs, d, out, &rel, &targets[1..], &mut used) {
                    Ok(n) => {
                        files += 1;
                        bytes += n;
                        rec["recovered_to"] = json!(lossy(&rel));
                        rec["bytes"] = json!(n);
                    }
                    Err(e) => {
                        errln!("xfskit undelete: inode {}: {}: {e}", d.ino, lossy(&rel));
                        rec["recovered_to"] = Value::Null;
                        rec["error"] = json!(e.to_string());
                        failed = true;
                    }
                }
            }
        }
        use std::io::Write;
        writeln!(jsonl, "{rec}")?;
    }
    for (target, rel, mut rec) in links {
        let dest = out.join(os(&rel));
        if let Some(p) = dest.parent() {
            let _ = std::fs::create_dir_all(p);
        }
        match std::os::unix::fs::symlink(&target, &dest) {
            Ok(()) => {
                files += 1;
                rec["recovered_to"] = json!(lossy(&rel));
            }
            Err(e) => {
                errln!("xfskit undelete: {}: {e}", dest.display());
                rec["recovered_to"] = Value::Null;
                failed = true;
            }
        }
        use std::io::Write;
        writeln!(jsonl, "{rec}")?;
    }
    use std::io::Write;
    jsonl.flush()?;
    errln!(
        "xfskit undelete: {} of {} deleted inodes written ({} bytes) under {}",
        files,
        found.len(),
        bytes,
        out.display()
    );
    Ok(if failed {
        ExitCode::from(6)
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes the data of `d` at OUTDIR/`rel` and its further names as hard
/// links; returns the bytes written up to.
fn write_file(
    fs: &Fs,
    d: &Deleted,
    out: &Path,
    rel: &[u8],
    more: &[Vec<u8>],
    used: &mut std::collections::HashSet<Vec<u8>>,
) -> Result<u64, Error> {
    let dest = out.join(os(rel));
    if let Some(p) = dest.parent() {
        std::fs::create_dir_all(p)?;
    }
    let n = forensic::write_new(fs, d, &dest)?;
    for m in more {
        let r2 = fresh(out, m, d.ino, used);
        let l = out.join(os(&r2));
        if let Some(p) = l.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::hard_link(&dest, &l)?;
    }
    Ok(n)
}

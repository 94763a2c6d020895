//! `xfskit bulkstat`: stat every allocated inode of an image.

use crate::cmd::out::errln;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use xfskit::scan::{self, Bstat, BulkstatOptions};
use xfskit::{paths, Error, Fs};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "Print stat information for every allocated inode of an unmounted XFS image, \
in inode number order, like the kernel's bulkstat ioctl (`xfs_io -c bulkstat`) on a mounted \
filesystem. Metadata inodes (realtime bitmap and summary, quota files) are not reported.\n\n\
Each allocation group is scanned by its own thread: its inode btree is walked and the inode \
clusters holding allocated inodes are read in large merged reads, with readahead.\n\n\
Fields: ino, mode (octal in the table), nlink, uid, gid, rdev (32-bit sysv form: major<<18 | minor), \
blksize, size (bytes), blocks (filesystem blocks, 0 for inline and device inodes), xflags \
(FS_XFLAG_* bits), extents, aextents, forkoff (bytes), gen, projectid, extsize_blks, \
cowextsize_blks, atime, mtime, ctime, btime (nanoseconds since the epoch).\n\n\
With --paths each inode's paths follow it, found from its parent pointers up to the root \
without walking the tree (directories' paths are cached, within a bounded budget): in the table \
one line per path, starting with a tab; in JSON the array \"paths\". An inode whose pointers are \
damaged gets \"paths_error\" (JSON) or a tab and \"error:\" (table), the scan goes on, and the \
exit status is 5. On a filesystem without parent pointers (made before mkfs.xfs 6.x turned them \
on, or with -n parent=0) every directory is read first, as xfs_ncheck does, and its entries are \
indexed by the inode they name in --memory (default 256m; past it sorted runs go to temporary \
files in --tmpdir); the paths are then found the same way.\n\n\
With --bodyfile the output is The Sleuth Kit's body file (mactime's input) instead, one line per \
path, with the options --md5, --seconds, --escape and --prefix: what `xfskit timeline` prints \
(see its manual page).";

/// Arguments of `xfskit bulkstat`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("names").args(["paths", "bodyfile"]).multiple(true)))]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Worker threads (default: one per CPU, at most one per AG).
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Inode clusters merged into one read.
    #[arg(long, default_value_t = scan::DEFAULT_BATCH)]
    pub batch: usize,
    /// Scan only this allocation group.
    #[arg(long)]
    pub ag: Option<u32>,
    /// Start at this inode number (inodes below it are not reported).
    #[arg(long)]
    pub start_ino: Option<u64>,
    /// Print one JSON object per inode and line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print scan statistics to standard error at the end.
    #[arg(long)]
    pub stats: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// Add each inode's paths: from its parent pointers, or, on a
    /// filesystem without them, from an index of every directory entry
    /// made first.
    #[arg(long)]
    pub paths: bool,
    /// Memory for the index of directory entries that --paths makes on a
    /// filesystem without parent pointers (k m g suffixes; default 256m).
    /// Past it, sorted runs and names go to temporary files.
    #[arg(long, value_name = "SIZE", requires = "names")]
    pub memory: Option<String>,
    /// Directory for those temporary files (default: $TMPDIR or /tmp):
    /// about 60 bytes per directory entry past the bound.
    #[arg(long, value_name = "DIR", requires = "names")]
    pub tmpdir: Option<PathBuf>,
    /// Print The Sleuth Kit's body file (mactime's input) instead: one
    /// line per path of every inode, as `xfskit timeline` prints it.
    #[arg(long, conflicts_with = "json")]
    pub bodyfile: bool,
    #[command(flatten)]
    pub body: super::timeline::BodyArgs,
}

impl Args {
    /// What --bodyfile prints, from the scan options.
    fn body_options(&self) -> super::timeline::Run {
        super::timeline::Run {
            scan: BulkstatOptions {
                threads: self.threads,
                batch: self.batch,
                ag: self.ag,
                start_ino: self.start_ino,
            },
            memory: self.memory.clone(),
            tmpdir: self.tmpdir.clone(),
            stats: self.stats,
        }
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    if args.bodyfile {
        return super::timeline::run_body(&fs, &args.body_options(), &args.body);
    }
    args.body.refuse_without("bulkstat --bodyfile")?;
    let cache = if args.paths {
        Some(path_cache(
            &fs,
            args.threads,
            args.memory.as_deref(),
            args.tmpdir.clone(),
            args.stats,
        )?)
    } else {
        None
    };
    let path_errors = AtomicU64::new(0);
    let opts = BulkstatOptions {
        threads: args.threads,
        batch: args.batch,
        ag: args.ag,
        start_ino: args.start_ino,
    };
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    if !args.json {
        writeln!(
            out,
            "{:>12} {:>7} {:>5} {:>6} {:>6} {:>12} {:>8} {:>10} {:>5}  MTIME",
            "INO", "MODE", "NLINK", "UID", "GID", "SIZE", "BLOCKS", "XFLAGS", "EXTS"
        )
        .map_err(xfskit::Error::Io)?;
    }
    let json = args.json;
    // Text buffers go back and forth between the workers (which format)
    // and this thread (which writes): no allocation per batch, and no
    // large blocks mapped and unmapped under the threads' feet.
    let pool: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    let format = |batch: &[Bstat]| {
        let mut text = pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        text.clear();
        text.reserve(batch.len() * if json { 360 } else { 110 });
        for b in batch {
            let found = cache.as_ref().map(|c| paths_of(&fs, c, b));
            if let Some(Err(_)) = &found {
                path_errors.fetch_add(1, Ordering::Relaxed);
            }
            if json {
                json_line(&mut text, b);
                if let Some(found) = &found {
                    text.truncate(text.len() - 2);
                    json_paths(&mut text, found);
                    text.extend_from_slice(b"}\n");
                }
            } else {
                table_line(&mut text, b);
                if let Some(found) = &found {
                    table_paths(&mut text, found);
                }
            }
        }
        text
    };
    let r = scan::for_each_mapped(&fs, &opts, format, |text| {
        out.write_all(&text)?;
        pool.lock().unwrap_or_else(|p| p.into_inner()).push(text);
        Ok(())
    });
    let flushed = out.flush();
    let stats = match r {
        Ok(s) => s,
        // A closed pipe (`| head`) ends the output quietly.
        Err(xfskit::Error::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            return Ok(ExitCode::SUCCESS)
        }
        Err(e) => return Err(e),
    };
    match flushed {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        r => r?,
    }
    if args.stats {
        errln!(
            "{} inodes ({} skipped) in {} AGs: {} inobt blocks, {} chunks, {} clusters in {} reads ({} bytes)",
            stats.inodes,
            stats.skipped,
            stats.ags,
            stats.inobt_blocks,
            stats.chunks,
            stats.clusters_read,
            stats.reads,
            stats.bytes_read
        );
    }
    let bad = path_errors.load(Ordering::Relaxed);
    if bad > 0 {
        errln!("xfskit: the paths of {bad} inodes could not be found (damaged parent pointers)");
        return Ok(ExitCode::from(5));
    }
    Ok(ExitCode::SUCCESS)
}

/// The source of paths for --paths and body files: parent pointers, or
/// on a filesystem without them an index of every directory entry made
/// first in `memory` (a size like 256m; the default when None).
pub fn path_cache(
    fs: &Fs,
    threads: usize,
    memory: Option<&str>,
    tmpdir: Option<PathBuf>,
    stats: bool,
) -> Result<paths::PathCache, Error> {
    let memory = match memory {
        None => DEFAULT_INDEX_MEMORY,
        Some(m) => match xfskit::build::size::parse_size(m) {
            Ok(xfskit::build::size::SizeSpec::Fixed(b)) => usize::try_from(b).unwrap_or(usize::MAX),
            _ => {
                return Err(Error::Invalid(format!(
                    "--memory takes a size like 256m or 2g, not {m:?}"
                )))
            }
        },
    };
    if paths::has_parent_pointers(fs) {
        return Ok(paths::PathCache::new(paths::DEFAULT_CACHE_BYTES));
    }
    // No parent pointers: every directory is read first and its entries
    // indexed by the inode they name.
    let index = paths::NameIndex::build(fs, threads, memory, tmpdir)?;
    if stats {
        errln!(
            "name index: {} directory entries ({})",
            index.entries(),
            if index.spilled() {
                "past --memory: in temporary files"
            } else {
                "in memory"
            }
        );
    }
    Ok(paths::PathCache::with_index(
        paths::DEFAULT_CACHE_BYTES,
        index,
    ))
}

/// Memory of the index --paths makes without parent pointers.
const DEFAULT_INDEX_MEMORY: usize = 256 << 20;

/// The paths of the inode of `b` (with parent pointers, none without an
/// attribute fork, unless a directory: the root has no pointers).
fn paths_of(fs: &Fs, cache: &paths::PathCache, b: &Bstat) -> Result<Vec<Vec<u8>>, Error> {
    let dir = u32::from(b.mode) & 0o170000 == 0o040000;
    if b.forkoff == 0 && !dir && paths::has_parent_pointers(fs) {
        return Ok(Vec::new());
    }
    cache.paths(fs, &fs.inode(xfskit::Ino(b.ino))?)
}

/// Appends `,"paths":[...]` or `,"paths_error":"..."`.
fn json_paths(s: &mut Vec<u8>, found: &Result<Vec<Vec<u8>>, Error>) {
    let quoted = |t: &str| serde_json::to_string(t).unwrap_or_else(|_| "\"\"".into());
    match found {
        Ok(ps) => {
            s.extend_from_slice(b",\"paths\":[");
            for (k, p) in ps.iter().enumerate() {
                if k > 0 {
                    s.push(b',');
                }
                s.extend_from_slice(quoted(&String::from_utf8_lossy(p)).as_bytes());
            }
            s.push(b']');
        }
        Err(e) => {
            s.extend_from_slice(b",\"paths_error\":");
            s.extend_from_slice(quoted(&e.to_string()).as_bytes());
        }
    }
}

/// Appends one line per path, each starting with a tab.
fn table_paths(s: &mut Vec<u8>, found: &Result<Vec<Vec<u8>>, Error>) {
    match found {
        Ok(ps) => {
            for p in ps {
                s.push(b'\t');
                s.extend_from_slice(p);
                s.push(b'\n');
            }
        }
        Err(e) => {
            s.extend_from_slice(format!("\terror: {e}\n").as_bytes());
        }
    }
}

/// Appends the decimal digits of `v`.
fn push_u64(s: &mut Vec<u8>, mut v: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.extend_from_slice(&d[i..]);
}

/// Appends `v` in decimal with a sign when negative.
fn push_i128(s: &mut Vec<u8>, v: i128) {
    match u64::try_from(v.unsigned_abs()) {
        Ok(m) => {
            if v < 0 {
                s.push(b'-');
            }
            push_u64(s, m);
        }
        Err(_) => s.extend_from_slice(v.to_string().as_bytes()),
    }
}

/// Appends `v` in decimal, right-aligned in `width` columns.
fn push_padded(s: &mut Vec<u8>, v: u64, width: usize) {
    let at = s.len();
    push_u64(s, v);
    pad_from(s, at, width);
}

/// Right-aligns the bytes from `at` to the end in `width` columns.
fn pad_from(s: &mut Vec<u8>, at: usize, width: usize) {
    let n = s.len() - at;
    if n < width {
        s.splice(at..at, std::iter::repeat_n(b' ', width - n));
    }
}

/// Appends `v` in octal, right-aligned in `width` columns.
fn push_octal(s: &mut Vec<u8>, v: u16, width: usize) {
    let at = s.len();
    let mut d = [0u8; 6];
    let mut i = d.len();
    let mut v = v;
    loop {
        i -= 1;
        d[i] = b'0' + (v & 7) as u8;
        v >>= 3;
        if v == 0 {
            break;
        }
    }
    s.extend_from_slice(&d[i..]);
    pad_from(s, at, width);
}

/// Appends `0x` and `v` in lower-case hex, right-aligned in `width` columns.
fn push_hex(s: &mut Vec<u8>, v: u32, width: usize) {
    let at = s.len();
    s.extend_from_slice(b"0x");
    let digits = (32 - v.leading_zeros()).div_ceil(4).max(1);
    for k in (0..digits).rev() {
        s.push(b"0123456789abcdef"[((v >> (k * 4)) & 0xf) as usize]);
    }
    pad_from(s, at, width);
}

/// Formats one record as a JSON object and a newline (all values are integers).
fn json_line(s: &mut Vec<u8>, b: &Bstat) {
    let fields: [(&str, u64); 17] = [
        ("{\"ino\":", b.ino),
        (",\"mode\":", b.mode.into()),
        (",\"nlink\":", b.nlink.into()),
        (",\"uid\":", b.uid.into()),
        (",\"gid\":", b.gid.into()),
        (",\"rdev\":", b.rdev.into()),
        (",\"blksize\":", b.blksize.into()),
        (",\"size\":", b.size),
        (",\"blocks\":", b.blocks),
        (",\"xflags\":", b.xflags.into()),
        (",\"extents\":", b.extents),
        (",\"aextents\":", b.aextents.into()),
        (",\"forkoff\":", b.forkoff.into()),
        (",\"gen\":", b.gen.into()),
        (",\"projectid\":", b.projectid.into()),
        (",\"extsize_blks\":", b.extsize_blks.into()),
        (",\"cowextsize_blks\":", b.cowextsize_blks.into()),
    ];
    for (key, v) in fields {
        s.extend_from_slice(key.as_bytes());
        push_u64(s, v);
    }
    let times = [
        (",\"atime\":", b.atime),
        (",\"mtime\":", b.mtime),
        (",\"ctime\":", b.ctime),
        (",\"btime\":", b.btime),
    ];
    for (key, v) in times {
        s.extend_from_slice(key.as_bytes());
        push_i128(s, v);
    }
    s.extend_from_slice(b"}\n");
}

/// Formats one record as a table row.
fn table_line(s: &mut Vec<u8>, b: &Bstat) {
    push_padded(s, b.ino, 12);
    s.push(b' ');
    push_octal(s, b.mode, 7);
    s.push(b' ');
    push_padded(s, b.nlink.into(), 5);
    s.push(b' ');
    push_padded(s, b.uid.into(), 6);
    s.push(b' ');
    push_padded(s, b.gid.into(), 6);
    s.push(b' ');
    push_padded(s, b.size, 12);
    s.push(b' ');
    push_padded(s, b.blocks, 8);
    s.push(b' ');
    push_hex(s, b.xflags, 10);
    s.push(b' ');
    push_padded(s, b.extents, 5);
    s.extend_from_slice(b"  ");
    push_i128(s, b.mtime.div_euclid(1_000_000_000));
    s.push(b'.');
    let at = s.len();
    push_u64(s, b.mtime.rem_euclid(1_000_000_000) as u64);
    let n = s.len() - at;
    if n < 9 {
        s.splice(at..at, std::iter::repeat_n(b'0', 9 - n));
    }
    s.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bstat {
        Bstat {
            ino: 131,
            mode: 0o100644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            size: 3,
            blocks: 1,
            xflags: 0x8000_0000,
            extents: 1,
            aextents: 0,
            forkoff: 192,
            gen: 7,
            projectid: 0,
            extsize_blks: 0,
            cowextsize_blks: 0,
            atime: -1_500_000_000,
            mtime: 1,
            ctime: 2,
            btime: 3,
        }
    }

    #[test]
    fn json_is_valid_and_complete() {
        let mut s = Vec::new();
        json_line(&mut s, &sample());
        let s = String::from_utf8(s).expect("utf8");
        assert!(s.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&s).expect("valid JSON");
        let o = v.as_object().expect("object");
        assert_eq!(o.len(), 21);
        assert_eq!(o["mode"], 0o100644);
        assert_eq!(o["atime"], -1_500_000_000i64);
        assert_eq!(o["xflags"], 0x8000_0000u32);
    }

    #[test]
    fn table_shows_negative_times_correctly() {
        let mut s = Vec::new();
        let mut b = sample();
        b.mtime = -1_500_000_000;
        table_line(&mut s, &b);
        let s = String::from_utf8(s).expect("utf8");
        assert!(s.contains(" -2.500000000"), "{s}");
        assert!(s.contains("100644"));
    }

    /// The hand-written formatter gives what `format!` would.
    #[test]
    fn fast_formatting_matches_std() {
        let mut b = sample();
        for (ino, mtime, xflags, mode) in [
            (0u64, 0i128, 0u32, 0u16),
            (u64::MAX, i128::from(i64::MAX) * 3, u32::MAX, 0o177777),
            (1 << 40, -1, 0x10, 0o40755),
            (99, -(1i128 << 100), 0x8000_0000, 0o20600),
        ] {
            (b.ino, b.mtime, b.xflags, b.mode) = (ino, mtime, xflags, mode);
            b.atime = mtime;
            let secs = b.mtime.div_euclid(1_000_000_000);
            let nsec = b.mtime.rem_euclid(1_000_000_000);
            let want = format!(
                "{:>12} {:>7o} {:>5} {:>6} {:>6} {:>12} {:>8} {:>#10x} {:>5}  {secs}.{nsec:09}\n",
                b.ino, b.mode, b.nlink, b.uid, b.gid, b.size, b.blocks, b.xflags, b.extents
            );
            let mut s = Vec::new();
            table_line(&mut s, &b);
            assert_eq!(String::from_utf8(s).expect("utf8"), want);
            let mut j = Vec::new();
            json_line(&mut j, &b);
            let v: serde_json::Value = serde_json::from_slice(&j).expect("valid JSON");
            assert_eq!(v["ino"], serde_json::json!(ino));
            if let Ok(m) = i64::try_from(mtime) {
                assert_eq!(v["atime"], serde_json::json!(m));
            }
            assert!(String::from_utf8(j)
                .expect("utf8")
                .contains(&format!("\"mtime\":{mtime},")));
        }
    }
}

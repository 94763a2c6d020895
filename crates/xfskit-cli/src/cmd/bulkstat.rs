//! `xfskit bulkstat`: stat every allocated inode of an image.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::scan::{self, Bstat, BulkstatOptions};

/// Arguments of `xfskit bulkstat`.
#[derive(clap::Args)]
#[command(
    long_about = "Print stat information for every allocated inode of an unmounted XFS image, \
in inode number order, like the kernel's bulkstat ioctl (`xfs_io -c bulkstat`) on a mounted \
filesystem. Metadata inodes (realtime bitmap and summary, quota files) are not reported.\n\n\
Each allocation group is scanned by its own thread: its inode btree is walked and the inode \
clusters holding allocated inodes are read in large merged reads, with readahead.\n\n\
Fields: ino, mode (octal in the table), nlink, uid, gid, rdev (32-bit sysv form: major<<18 | minor), \
blksize, size (bytes), blocks (filesystem blocks, 0 for inline and device inodes), xflags \
(FS_XFLAG_* bits), extents, aextents, forkoff (bytes), gen, projectid, extsize_blks, \
cowextsize_blks, atime, mtime, ctime, btime (nanoseconds since the epoch)."
)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
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
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    let fs = super::open(&args.image, args.norecovery)?;
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
    let mut line = String::with_capacity(512);
    let r = scan::for_each_batch(&fs, &opts, |batch| {
        for b in batch {
            line.clear();
            if args.json {
                json_line(&mut line, b);
            } else {
                table_line(&mut line, b);
            }
            out.write_all(line.as_bytes())?;
        }
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
        eprintln!(
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
    Ok(ExitCode::SUCCESS)
}

/// Formats one record as a JSON object and a newline (all values are integers).
fn json_line(s: &mut String, b: &Bstat) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "{{\"ino\":{},\"mode\":{},\"nlink\":{},\"uid\":{},\"gid\":{},\"rdev\":{},\"blksize\":{},\"size\":{},\
\"blocks\":{},\"xflags\":{},\"extents\":{},\"aextents\":{},\"forkoff\":{},\"gen\":{},\"projectid\":{},\
\"extsize_blks\":{},\"cowextsize_blks\":{},\"atime\":{},\"mtime\":{},\"ctime\":{},\"btime\":{}}}",
        b.ino,
        b.mode,
        b.nlink,
        b.uid,
        b.gid,
        b.rdev,
        b.blksize,
        b.size,
        b.blocks,
        b.xflags,
        b.extents,
        b.aextents,
        b.forkoff,
        b.gen,
        b.projectid,
        b.extsize_blks,
        b.cowextsize_blks,
        b.atime,
        b.mtime,
        b.ctime,
        b.btime
    );
}

/// Formats one record as a table row.
fn table_line(s: &mut String, b: &Bstat) {
    use std::fmt::Write as _;
    let secs = b.mtime.div_euclid(1_000_000_000);
    let nsec = b.mtime.rem_euclid(1_000_000_000);
    let _ = writeln!(
        s,
        "{:>12} {:>7o} {:>5} {:>6} {:>6} {:>12} {:>8} {:>#10x} {:>5}  {secs}.{nsec:09}",
        b.ino, b.mode, b.nlink, b.uid, b.gid, b.size, b.blocks, b.xflags, b.extents
    );
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
        let mut s = String::new();
        json_line(&mut s, &sample());
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
        let mut s = String::new();
        let mut b = sample();
        b.mtime = -1_500_000_000;
        table_line(&mut s, &b);
        assert!(s.contains(" -2.500000000"), "{s}");
        assert!(s.contains("100644"));
    }
}

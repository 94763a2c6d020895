//! `xfskit check`: a read-only consistency check, like `xfs_repair -n`.

use crate::cmd::out::errout;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use xfskit::check::{check, CheckOptions};

/// Metadata buffer cache of the check.
const CACHE_BYTES: usize = 16 << 20;

/// Arguments of `xfskit check`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device (unmounted).
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// Worker threads (default: up to the CPU count, and at least 8
    /// concurrent readers of inodes).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Check even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// Bound on what the check keeps per inode, per directory entry and per
    /// file extent (k m g suffixes; default 512m). Past it, sorted runs go to
    /// a temporary file, so a filesystem of any number of inodes is checked
    /// in about this memory plus the buffer cache and the map of claimed
    /// extents. Like xfs_repair's -m.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Directory for that temporary file (default: $TMPDIR or /tmp). It
    /// takes about 30 bytes per inode, entry and extent past the bound.
    #[arg(long, value_name = "DIR")]
    pub tmpdir: Option<PathBuf>,
}

/// Runs the command: exit 0 when clean, 1 when problems were found, 3 when
/// clean but a part could not be checked (a realtime section).
pub fn run(args: Args) -> Result<ExitCode, xfskit::Error> {
    // Blocks are read about once: a small buffer cache does, and keeps the
    // memory of the check to what it learns.
    let opened = super::open_with(
        &args.image,
        &args.disk,
        &xfskit::fs::OpenOptions {
            norecovery: args.norecovery,
            cache_bytes: CACHE_BYTES,
            // A root that is not a directory is a problem to report.
            any_root: true,
            ..Default::default()
        },
    );
    // Damage that stops the filesystem from being opened at all (the
    // primary superblock) is the check's finding, not a failure to run.
    let fs = match opened {
        Ok(fs) => fs,
        Err(xfskit::Error::Corrupt {
            what,
            location,
            detail,
        }) => {
            // The log is found through the superblock's log fields.
            if what == "log" {
                let detail = format!("the log it places cannot be read ({location}: {detail})");
                return Ok(unopenable(&args, "superblock", "AG 0 superblock", &detail));
            }
            return Ok(unopenable(&args, what, &location.to_string(), &detail));
        }
        Err(xfskit::Error::BadCrc { what, location }) => {
            return Ok(unopenable(&args, what, &location.to_string(), "bad CRC"));
        }
        Err(e) => return Err(e),
    };
    let tty = std::io::stderr().is_terminal() && !args.json;
    let progress = |pass: &str, done: u32, total: u32| {
        errout!("\r\x1b[K{pass}: AG {done}/{total}");
    };
    let memory = super::parse_memory(args.memory.as_deref())?;
    let opts = CheckOptions {
        threads: args.threads,
        progress: if tty { Some(&progress) } else { None },
        memory,
        tmpdir: args.tmpdir.clone(),
    };
    let t0 = Instant::now();
    let report = check(&fs, &opts)?;
    if tty {
        errout!("\r\x1b[K");
    }
    let s = &report.stats;
    let mut out = String::new();
    if args.json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| serde_json::json!({"what": p.what, "location": p.location.to_string(), "detail": p.detail}))
            .collect();
        let v = serde_json::json!({
            "clean": report.is_clean(),
            "problems": problems,
            "unchecked": report.unchecked,
            "warnings": report.warnings,
            "stats": {
                "ags": s.ags, "btree_blocks": s.btree_blocks, "inode_chunks": s.inode_chunks,
                "inodes": s.inodes, "directories": s.directories, "dir_entries": s.dir_entries,
                "free_blocks": s.free_blocks, "problems_total": s.problems_total,
                "seconds": t0.elapsed().as_secs_f64(),
            }
        });
        out.push_str(&format!("{v:#}\n"));
    } else {
        for p in &report.problems {
            out.push_str(&format!("{}: {}: {}\n", p.what, p.location, p.detail));
        }
        if s.problems_total > report.problems.len() as u64 {
            out.push_str(&format!(
                "... and {} more problems\n",
                s.problems_total - report.problems.len() as u64
            ));
        }
        out.push_str(&format!(
            "checked {} AGs, {} btree blocks, {} inode chunks, {} inodes, {} directories ({} entries) in {:.2}s: {}\n",
            s.ags,
            s.btree_blocks,
            s.inode_chunks,
            s.inodes,
            s.directories,
            s.dir_entries,
            t0.elapsed().as_secs_f64(),
            if report.is_clean() { "no problems".to_string() } else { format!("{} problem(s)", s.problems_total) }
        ));
    }
    if !args.json {
        for u in &report.unchecked {
            out.push_str(&format!("not checked: {u}\n"));
        }
        for w in &report.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
    }
    // A closed pipe (`| head`) is not an error of the check.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(ExitCode::from(if !report.is_clean() {
        1
    } else if !report.unchecked.is_empty() {
        3
    } else {
        0
    }))
}

/// Reports a filesystem that cannot be opened for checking (exit 1).
fn unopenable(args: &Args, what: &str, location: &str, detail: &str) -> ExitCode {
    let out = if args.json {
        let v = serde_json::json!({
            "clean": false,
            "problems": [{"what": what, "location": location, "detail": detail}],
            "stats": {"problems_total": 1},
        });
        format!("{v:#}\n")
    } else {
        format!("{what}: {location}: {detail}\nthe filesystem cannot be opened: nothing else was checked\n")
    };
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    ExitCode::from(1)
}

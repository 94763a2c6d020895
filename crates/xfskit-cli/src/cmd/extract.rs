//! `xfskit extract`: copy a tree out of an image.

use crate::cmd::out::errln;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;
use xfskit::extract::{extract, ExtractOptions, ExtractReport, Incomplete, Part, Progress};
use xfskit::Error;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Copy the whole tree of an XFS image (or the subtree at --path) to DEST.

DEST must not exist or be an empty directory. A directory's contents go into
DEST; a single file is written as DEST/NAME. Preserved: contents (holes and
unwritten extents stay holes), permission bits, owner and group (when run
as root; otherwise they are skipped with one warning), access and
modification times with nanoseconds (directories after their contents),
extended attributes of the user, trusted (root only) and security
namespaces, symlinks, hard links, device nodes, fifos and sockets.

Files are copied by a few worker threads with large reads and read-ahead
hints. A progress line is shown when standard error is a terminal.

What the destination refuses does not stop the extraction: an xattr it
cannot store (too big, too many, ENOSPC or E2BIG), a device node made
without privilege, a name too long or invalid for it, a file for which
there is no space (removed rather than left short). Each is reported as
`xfskit: extract: PATH: what failed: why` (past the first five refused
xattrs of one file, one line counts the rest), the rest of the tree is
extracted, directory times are still set, a summary line counts the
entries not fully extracted, and the exit status is 6. With --strict the
first such error stops the extraction (exit status 4). Other errors of
the destination (EIO, a read-only filesystem) always stop it.

Entries the image is damaged at are skipped and reported, the rest is
extracted, and the exit status is 5 (run xfskit check). Realtime files
(whose data is on a separate realtime device) are read from the device
given with --rtdev; without it they are skipped and reported the same
way, with exit status 3.

Exit status: 0 on success, 1 if --path does not exist, 2 if DEST is not
empty, 3 if the filesystem is unsupported, its log needs replay or
realtime files were skipped, 4 on I/O
errors (reading the image, or any error of the destination with --strict),
5 if the image is corrupt, 6 if extracted with some entries incomplete
(the destination refused them; see above).

Examples:
  xfskit extract disk.img /tmp/out
  xfskit extract disk.img /tmp/etc --path /etc
  xfskit extract --threads 4 disk.img /srv/restore";

/// Arguments of `xfskit extract`.
#[derive(clap::Args)]
pub struct Args {
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The subtree (or file) to extract; the root by default.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Worker threads copying files.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Do not print the summary line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Stop at the first entry the destination refuses (an xattr, a device
    /// node, a name, no space), as a plain error, instead of reporting it
    /// and going on (exit status 6).
    #[arg(long)]
    pub strict: bool,
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The destination directory.
    pub dest: PathBuf,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let opts = ExtractOptions {
        threads: usize::from(args.threads),
        strict: args.strict,
        ..Default::default()
    };
    let progress = Progress::default();
    let start = std::time::Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b
    });
    let done = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        if let Some(b) = &bar {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let e = progress.entries.load(Ordering::Relaxed);
                    let by = progress.bytes.load(Ordering::Relaxed);
                    b.set_message(format!("{e} entries, {:.1} MiB", by as f64 / 1048576.0));
                    b.tick();
                    std::thread::sleep(Duration::from_millis(100));
                }
                b.finish_and_clear();
            });
        }
        let r = extract(&fs, args.path.as_bytes(), &args.dest, &opts, &progress);
        done.store(true, Ordering::Relaxed);
        r
    })?;
    for w in &report.warnings {
        errln!("xfskit: warning: {w}");
    }
    if !args.quiet {
        let secs = start.elapsed().as_secs_f64();
        errln!(
            "extracted {} entries ({} hard links), {:.1} MiB in {secs:.2}s",
            report.entries,
            report.hard_links,
            report.bytes as f64 / 1048576.0
        );
    }
    Ok(ExitCode::from(report_skips(&report, "xfskit: extract: ")))
}

/// Prints the entries `report` says were damaged or refused, then a
/// summary of each, every line starting with `prefix`; returns the exit
/// status they call for: 5 for damage, 6 for refusals, else 0.
pub fn report_skips(report: &ExtractReport, prefix: &str) -> u8 {
    let mut err = std::io::stderr().lock();
    write_skips(report, prefix, &mut err)
}

/// How many refused xattrs of one entry are named one per line; the rest
/// of that entry's are counted in one line.
const XATTR_LINES: usize = 5;

/// [`report_skips`], writing to `out`. A file whose xattrs the destination
/// refuses by the thousand (an ext4 that is full of them) gets its first
/// [`XATTR_LINES`] named and one line that counts the rest, not a line each.
fn write_skips(report: &ExtractReport, prefix: &str, out: &mut impl std::io::Write) -> u8 {
    // Per entry: its refused xattrs so far, and (once past the limit) the
    // index in `more` of the line that counts the rest.
    let mut seen: std::collections::HashMap<&std::path::Path, (usize, usize)> = Default::default();
    // The entries past the limit, in the order they got there: the last
    // refused xattr and how many were not named.
    let mut more: Vec<(&Incomplete, usize)> = Vec::new();
    for i in &report.incomplete {
        if i.part == Part::Xattr {
            let (n, at) = seen.entry(i.path.as_path()).or_insert((0, usize::MAX));
            *n += 1;
            if *n > XATTR_LINES {
                if *at == usize::MAX {
                    *at = more.len();
                    more.push((i, 0));
                }
                more[*at] = (i, more[*at].1 + 1);
                continue;
            }
        }
        let _ = writeln!(out, "{prefix}{i}");
    }
    for (last, n) in &more {
        let _ = writeln!(
            out,
            "{prefix}{}: {n} more {} not set (the last: {}: {})",
            last.path.display(),
            Part::Xattr.noun(*n),
            last.what,
            last.why
        );
    }
    for (path, e) in &report.damaged {
        let _ = writeln!(out, "{prefix}skipped {path}: {e}");
    }
    if let Some(summary) = report.incomplete_summary() {
        let _ = writeln!(out, "{prefix}{summary}");
    }
    for (path, e) in &report.unreadable {
        let _ = writeln!(out, "{prefix}skipped {path}: {e}");
    }
    if !report.damaged.is_empty() {
        let _ = writeln!(
            out,
            "{prefix}{} entries were skipped: the image is damaged there (run xfskit check)",
            report.damaged.len()
        );
        return 5;
    }
    if !report.unreadable.is_empty() {
        let _ = writeln!(
            out,
            "{prefix}{} realtime files were skipped: their data is on the realtime device, which was not given (needs the realtime device: --rtdev)",
            report.unreadable.len()
        );
        return 3;
    }
    if !report.incomplete.is_empty() {
        return INCOMPLETE;
    }
    0
}

/// The exit status of an extraction that left some entries incomplete.
pub const INCOMPLETE: u8 = 6;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &str, part: Part, what: &str) -> Incomplete {
        Incomplete {
            path: path.into(),
            part,
            what: what.into(),
            why: "No space left on device".into(),
        }
    }

    /// Thousands of refused xattrs of one file read as its first few and a
    /// count; other entries' refusals, and the summary, are unchanged.
    #[test]
    fn many_refused_xattrs_of_one_file_fold_into_a_count() {
        let mut report = ExtractReport::default();
        for k in 0..4464 {
            let what = format!("setting xattr trusted.leaf{k:04} (70 bytes)");
            report
                .incomplete
                .push(refused("/d/many", Part::Xattr, &what));
            if k == 2 {
                // Another file's, between them (threads interleave).
                report.incomplete.push(refused(
                    "/d/big",
                    Part::Xattr,
                    "setting xattr user.big (65536 bytes)",
                ));
                report.incomplete.push(refused(
                    "/d/dev",
                    Part::DeviceNode,
                    "creating the device node",
                ));
            }
        }
        let mut out = Vec::new();
        assert_eq!(write_skips(&report, "x: ", &mut out), INCOMPLETE);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let expected = [
            "x: /d/many: setting xattr trusted.leaf0000 (70 bytes): No space left on device",
            "x: /d/many: setting xattr trusted.leaf0001 (70 bytes): No space left on device",
            "x: /d/many: setting xattr trusted.leaf0002 (70 bytes): No space left on device",
            "x: /d/big: setting xattr user.big (65536 bytes): No space left on device",
            "x: /d/dev: creating the device node: No space left on device",
            "x: /d/many: setting xattr trusted.leaf0003 (70 bytes): No space left on device",
            "x: /d/many: setting xattr trusted.leaf0004 (70 bytes): No space left on device",
            "x: /d/many: 4459 more xattrs not set (the last: setting xattr trusted.leaf4463 (70 bytes): No space left on device)",
            "x: 3 entries not fully extracted (1 device node, 4465 xattrs)",
        ];
        assert_eq!(lines, expected, "{text}");
    }

    /// Up to the limit, every refused xattr has its own line.
    #[test]
    fn a_few_refused_xattrs_are_each_named() {
        let mut report = ExtractReport::default();
        for k in 0..XATTR_LINES {
            let what = format!("setting xattr user.x{k}");
            report.incomplete.push(refused("/f", Part::Xattr, &what));
        }
        let mut out = Vec::new();
        assert_eq!(write_skips(&report, "", &mut out), INCOMPLETE);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), XATTR_LINES + 1, "{text}");
        assert!(!text.contains("more xattrs"), "{text}");
        assert!(
            text.ends_with("1 entry not fully extracted (5 xattrs)\n"),
            "{text}"
        );
    }
}

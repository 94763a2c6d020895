//! `xfskit cp`: copies into an image (`SRC... IMAGE:DEST`) and out of one
//! (`IMAGE:SRC... DEST`), the way e2cp and scp name the image side.

use super::cp_in::{copy_in, InOptions};
use super::{base_name, expand, lookup_opt, open_rw, parent_of, Outcome};
use crate::cmd::extract::report_skips;
use crate::cmd::DiskArgs;
use indicatif::{ProgressBar, ProgressStyle};
use std::ffi::OsStr;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xfskit::build::feed::FeedStats;
use xfskit::extract::ExtractReport;
use xfskit::inode::FileType;
use xfskit::Error;

/// Arguments of `xfskit cp`.
#[derive(clap::Args)]
#[command(long_about = super::help::CP, after_help = super::help::CP_EXAMPLES)]
pub struct Args {
    /// Copy directories and everything under them.
    #[arg(short = 'r', short_alias = 'R', long)]
    pub recursive: bool,
    /// Archive: implies -r; keep permissions with set-id bits, owners,
    /// nanosecond times and xattrs, and copy symlinks as symlinks.
    #[arg(short, long)]
    pub archive: bool,
    /// Owner of inodes copied in without -a, as UID:GID (names from the
    /// image's /etc/passwd and /etc/group work too; default 0:0).
    #[arg(long, value_name = "UID:GID")]
    pub owner: Option<String>,
    /// Do not show progress.
    #[arg(short, long)]
    pub quiet: bool,
    /// Out of an image: stop at the first entry the destination refuses
    /// (an xattr, a device node, a name, no space) instead of reporting it
    /// and going on (exit status 6), as `xfskit extract --strict`.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// SRC... DEST: either DEST is IMAGE:PATH (copy in) or every SRC is
    /// IMAGE:PATH of the same image (copy out).
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    pub paths: Vec<String>,
}

/// `IMAGE:PATH` split at the first ':' whose left side is an existing
/// file or block device; `None` for a host path.
fn image_side(arg: &str) -> Option<(PathBuf, String)> {
    for (i, _) in arg.match_indices(':') {
        let img = Path::new(&arg[..i]);
        if std::fs::metadata(img).is_ok_and(|m| !m.is_dir()) {
            let p = &arg[i + 1..];
            return Some((
                img.to_path_buf(),
                if p.is_empty() { "/".into() } else { p.into() },
            ));
        }
    }
    None
}

/// A spinner on standard error, when it is a terminal.
fn spinner(quiet: bool) -> Option<ProgressBar> {
    (!quiet && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    })
}

/// Runs the command.
pub fn run(a: Args) -> Result<ExitCode, Error> {
    let (dest, srcs) = a.paths.split_last().expect("clap requires two paths");
    let recursive = a.recursive || a.archive;
    if let Some((image, dpath)) = image_side(dest) {
        if let Some(s) = srcs
            .iter()
            .find(|s| image_side(s).is_some() && !Path::new(s).exists())
        {
            return Err(Error::Invalid(format!(
                "{s}: copies between two images are not supported; copy out, then in"
            )));
        }
        return copy_into(&a, &image, &dpath, srcs, recursive);
    }
    let mut image: Option<PathBuf> = None;
    let mut paths = Vec::new();
    for s in srcs {
        let Some((img, p)) = image_side(s) else {
            return Err(Error::Invalid(format!(
                "neither {s} nor {dest} is IMAGE:PATH (an existing image file, a colon, a path in it)"
            )));
        };
        if image.as_ref().is_some_and(|i| *i != img) {
            return Err(Error::Invalid("every SRC must be in the same image".into()));
        }
        image = Some(img);
        paths.push(p);
    }
    let image = image.expect("at least one source");
    copy_out(&a, &image, &paths, Path::new(dest), recursive)
}

fn copy_into(
    a: &Args,
    image: &Path,
    dest: &str,
    srcs: &[String],
    recursive: bool,
) -> Result<ExitCode, Error> {
    let fs = open_rw(image, &a.disk)?;
    let owner = super::names::owner_or_root(&fs, a.owner.as_deref())?;
    let o = InOptions {
        archive: a.archive,
        owner,
        now: super::now(),
    };
    let mut out = Outcome::new("cp");
    let into_dir = match lookup_opt(&fs, dest)? {
        Some(d) if d.file_type == FileType::Dir => Some(d),
        Some(_) | None if srcs.len() > 1 || dest.ends_with('/') => {
            return Err(Error::NotDir(dest.to_string()));
        }
        _ => None,
    };
    let bar = spinner(a.quiet);
    let done = std::cell::Cell::new(FeedStats::default());
    let show = |s: &FeedStats| {
        if let Some(b) = &bar {
            if s.entries().is_multiple_of(64) {
                let d = done.take();
                b.set_message(format!(
                    "{} entries, {} MiB",
                    d.entries() + s.entries(),
                    (d.bytes + s.bytes) >> 20
                ));
                done.set(d);
            }
        }
    };
    for src in srcs {
        let p = Path::new(src);
        // SRC/. names what the directory holds, merged into DEST, as cp(1)
        // takes it (Path drops the trailing "." from the name).
        if let Some(d) = into_dir
            .as_ref()
            .filter(|_| src == "." || src.ends_with("/."))
        {
            super::cp_in::copy_contents_in(&fs, p, d.ino, recursive, &o, Some(&show), &mut out);
            continue;
        }
        let target = match &into_dir {
            Some(d) => {
                let name = p
                    .file_name()
                    .map(|n| std::os::unix::ffi::OsStrExt::as_bytes(n).to_vec());
                match name {
                    Some(n) => Ok((d.clone(), n)),
                    None => Err(Error::Invalid("names no file to copy".into())),
                }
            }
            None => parent_of(&fs, dest),
        };
        match target {
            Ok((dir, name)) => {
                copy_in(&fs, p, dir.ino, &name, recursive, &o, Some(&show), &mut out)
            }
            Err(e) => out.fail(src, &e),
        }
    }
    if let Some(b) = &bar {
        b.set_message("writing back");
    }
    let r = out.finish(&fs);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    r
}

fn copy_out(
    a: &Args,
    image: &Path,
    srcs: &[String],
    dest: &Path,
    recursive: bool,
) -> Result<ExitCode, Error> {
    let fs = crate::cmd::open_in(image, &a.disk, false)?;
    let mut out = Outcome::new("cp");
    let mut all = Vec::new();
    for s in srcs {
        match expand(&fs, s) {
            Ok(v) => all.extend(v),
            Err(e) => out.fail(s, &e),
        }
    }
    let dest_is_dir = dest.is_dir();
    if all.len() > 1 && !dest_is_dir {
        return Err(Error::NotDir(dest.display().to_string()));
    }
    let opts = xfskit::extract::ExtractOptions {
        chown: Some(a.archive && is_root()),
        preserve: a.archive,
        strict: a.strict,
        ..Default::default()
    };
    let progress = xfskit::extract::Progress::default();
    let bar = spinner(a.quiet);
    for src in &all {
        let r = (|| -> Result<ExtractReport, Error> {
            let ip = fs.lookup_path(src.as_bytes())?;
            let name = base_name(src).unwrap_or(b"root");
            let target = if dest_is_dir {
                dest.join(OsStr::from_bytes(name))
            } else {
                dest.to_path_buf()
            };
            if ip.file_type == FileType::Dir {
                if !recursive {
                    return Err(Error::Invalid("is a directory (use -r)".into()));
                }
                if let Some(b) = &bar {
                    b.set_message(src.clone());
                }
                return xfskit::extract::extract(&fs, src.as_bytes(), &target, &opts, &progress);
            }
            // One file: extracted under its name in a new directory next
            // to the target, then renamed over it.
            let parent = target
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let tmp = parent.join(format!(".xfskit-cp-{}", std::process::id()));
            let r = xfskit::extract::extract(&fs, src.as_bytes(), &tmp, &opts, &progress).and_then(
                |mut report| {
                    let made = tmp.join(OsStr::from_bytes(name));
                    // What was refused is reported under the target's name.
                    for i in &mut report.incomplete {
                        if let Ok(rest) = i.path.strip_prefix(&made) {
                            i.path = target.join(rest);
                        }
                    }
                    if std::fs::symlink_metadata(&made).is_err() && !report.incomplete.is_empty() {
                        return Ok(report); // the file itself was refused
                    }
                    std::fs::rename(&made, &target).map_err(|e| {
                        Error::Io(std::io::Error::new(
                            e.kind(),
                            format!("{}: {e}", target.display()),
                        ))
                    })?;
                    Ok(report)
                },
            );
            let _ = std::fs::remove_dir_all(&tmp);
            r
        })();
        match r {
            Ok(report) => out.note(report_skips(&report, "xfskit cp: ")),
            Err(e) => out.fail(src, &e),
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    Ok(out.code())
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

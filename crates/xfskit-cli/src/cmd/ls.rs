//! `xfskit ls`: list a directory of an image, like ls(1).

use crate::cmd::out::errln;
use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use xfskit::dir;
use xfskit::inode::{FileType, Inode, Timestamp};
use xfskit::{Error, Fs, Ino};

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str = "List a directory of an XFS image without mounting it.

Names are sorted bytewise. Names starting with '.' are hidden unless -a is
given (which also shows '.' and '..'). With -l each line shows the mode
string, link count, numeric uid and gid, size (or 'major, minor' for
devices), the modification time in UTC with nanoseconds, and the name;
symlinks show '-> target'. With -R subdirectories are listed recursively,
each under a 'path:' header. If PATH names a non-directory, only that entry
is shown.

Exit status: 0 on success, 1 if PATH does not exist, 3 if the filesystem is
unsupported or its log needs replay, 5 if the image is corrupt.

Examples:
  xfskit ls disk.img
  xfskit ls -la disk.img /etc
  xfskit ls -lR disk.img /var/log";

/// Arguments of `xfskit ls`.
#[derive(clap::Args)]
pub struct Args {
    /// Long listing: mode, links, owner, group, size, mtime.
    #[arg(short = 'l')]
    pub long: bool,
    /// List subdirectories recursively.
    #[arg(short = 'R')]
    pub recursive: bool,
    /// Show entries whose names start with '.', and '.' and '..'.
    #[arg(short = 'a')]
    pub all: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The directory (or file) to list; the root by default.
    #[arg(default_value = "/")]
    pub path: String,
}

/// The ten-character mode string of ls -l ("drwxr-xr-x").
pub fn mode_string(mode: u16) -> String {
    let t = match FileType::from_mode(mode) {
        Some(FileType::Dir) => 'd',
        Some(FileType::Symlink) => 'l',
        Some(FileType::CharDev) => 'c',
        Some(FileType::BlockDev) => 'b',
        Some(FileType::Fifo) => 'p',
        Some(FileType::Socket) => 's',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    let m = u32::from(mode);
    for (shift, special, lower, upper) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => lower,
            (true, false) => upper,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A timestamp as "YYYY-MM-DD HH:MM:SS.NNNNNNNNN" in UTC.
pub fn format_time(t: Timestamp) -> String {
    let days = t.sec.div_euclid(86_400);
    let secs = t.sec.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t.nsec
    )
}

/// Shows a name with non-printable bytes escaped.
pub fn show_name(name: &[u8]) -> String {
    String::from_utf8_lossy(name)
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

struct Row {
    name: Vec<u8>,
    inode: Inode,
}

fn size_field(i: &Inode) -> String {
    match i.file_type {
        FileType::CharDev | FileType::BlockDev => {
            let (maj, min) = i.rdev_major_minor();
            format!("{maj}, {min}")
        }
        _ => i.size.to_string(),
    }
}

fn print_rows(fs: &Fs, rows: &[Row], long: bool, out: &mut dyn Write) -> Result<(), Error> {
    if !long {
        for r in rows {
            writeln!(out, "{}", show_name(&r.name))?;
        }
        return Ok(());
    }
    let w_nlink = rows
        .iter()
        .map(|r| r.inode.nlink.to_string().len())
        .max()
        .unwrap_or(1);
    let w_uid = rows
        .iter()
        .map(|r| r.inode.uid.to_string().len())
        .max()
        .unwrap_or(1);
    let w_gid = rows
        .iter()
        .map(|r| r.inode.gid.to_string().len())
        .max()
        .unwrap_or(1);
    let w_size = rows
        .iter()
        .map(|r| size_field(&r.inode).len())
        .max()
        .unwrap_or(1);
    for r in rows {
        let i = &r.inode;
        let mut line = format!(
            "{} {:>w_nlink$} {:>w_uid$} {:>w_gid$} {:>w_size$} {} {}",
            mode_string(i.mode),
            i.nlink,
            i.uid,
            i.gid,
            size_field(i),
            format_time(i.mtime),
            show_name(&r.name)
        );
        if i.file_type == FileType::Symlink {
            line += &format!(" -> {}", show_name(&xfskit::symlink::read_link(fs, i)?));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn list_dir(
    fs: &Fs,
    args: &Args,
    path: &str,
    dir_inode: &Inode,
    seen: &mut HashSet<Ino>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    if !seen.insert(dir_inode.ino) {
        return Err(Error::corrupt(
            "directory tree",
            xfskit::Location::Inode(dir_inode.ino.0),
            "directory loop",
        ));
    }
    let mut rows = Vec::new();
    if args.all {
        rows.push(Row {
            name: b".".to_vec(),
            inode: dir_inode.clone(),
        });
        let parent = dir::parent(fs, dir_inode)?;
        rows.push(Row {
            name: b"..".to_vec(),
            inode: fs.inode(parent)?,
        });
    }
    let mut entries = dir::read_dir(fs, dir_inode)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        if !args.all && e.name.first() == Some(&b'.') {
            continue;
        }
        let inode = match fs.inode(e.ino) {
            Ok(i) => i,
            Err(err) if args.recursive && xfskit::walk::is_damage(&err) => {
                let sep = if path.ends_with('/') { "" } else { "/" };
                skipped(&format!("{path}{sep}{}", show_name(&e.name)), &err);
                continue;
            }
            Err(err) => return Err(err),
        };
        rows.push(Row {
            name: e.name,
            inode,
        });
    }
    print_rows(fs, &rows, args.long, out)?;
    if args.recursive {
        for r in rows
            .iter()
            .filter(|r| r.inode.file_type == FileType::Dir && r.name != b"." && r.name != b"..")
        {
            let sub = if path.ends_with('/') {
                format!("{path}{}", show_name(&r.name))
            } else {
                format!("{path}/{}", show_name(&r.name))
            };
            writeln!(out, "\n{sub}:")?;
            match list_dir(fs, args, &sub, &r.inode, seen, out) {
                Err(e) if xfskit::walk::is_damage(&e) => skipped(&sub, &e),
                other => other?,
            }
        }
    }
    Ok(())
}

/// Entries `ls -R` skipped because the image is damaged there.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Reports an entry `ls -R` skips and goes on with the rest of the tree.
fn skipped(path: &str, e: &Error) {
    SKIPPED.fetch_add(1, Ordering::Relaxed);
    errln!("xfskit: skipped {path}: {e}");
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let inode = fs.lookup_path(args.path.as_bytes())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let r = if inode.file_type == FileType::Dir {
        if args.recursive {
            writeln!(out, "{}:", args.path)?;
        }
        list_dir(
            &fs,
            &args,
            &args.path,
            &inode,
            &mut HashSet::new(),
            &mut out,
        )
    } else {
        let rows = [Row {
            name: args.path.as_bytes().to_vec(),
            inode,
        }];
        print_rows(&fs, &rows, args.long, &mut out)
    };
    match r.and_then(|()| out.flush().map_err(Error::Io)) {
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        other => other.map(|()| {
            if SKIPPED.load(Ordering::Relaxed) > 0 {
                // Damage found: corrupt (5), after listing the rest.
                ExitCode::from(5)
            } else {
                ExitCode::SUCCESS
            }
        }),
    }
}

//! `xfskit chattr`, `lsattr`, `chproj` and `lsproj`: the XFS inode flags
//! and project ids of files in an image, as `xfs_io -c chattr`, `-c
//! lsattr`, `-c chproj` and `-c lsproj` show and change them on a mounted
//! filesystem.
//!
//! A change goes through the engine's `FS_IOC_FSSETXATTR` path
//! ([`Fs::set_file_attr`]), so it is checked as kernel XFS checks it (a
//! flag the inode's type cannot take is dropped or refused, as there) and
//! journaled like every other edit.

use super::{expand, help, Outcome};
use crate::cmd::out::errln;
use crate::cmd::DiskArgs;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::inode::{FileType, Inode};
use xfskit::namespace::{FileAttrSet, FsxAttr};
use xfskit::scan::xflag;
use xfskit::{Error, Fs};

/// Each flag's letter, `FS_XFLAG_*` bit and long name, in xfs_io's order.
const FLAGS: [(char, u32, &str); 17] = [
    ('r', xflag::REALTIME, "realtime"),
    ('p', xflag::PREALLOC, "prealloc"),
    ('i', xflag::IMMUTABLE, "immutable"),
    ('a', xflag::APPEND, "append-only"),
    ('s', xflag::SYNC, "sync"),
    ('A', xflag::NOATIME, "no-atime"),
    ('d', xflag::NODUMP, "no-dump"),
    ('t', xflag::RTINHERIT, "rt-inherit"),
    ('P', xflag::PROJINHERIT, "proj-inherit"),
    ('n', xflag::NOSYMLINKS, "nosymlinks"),
    ('e', xflag::EXTSIZE, "extsize"),
    ('E', xflag::EXTSZINHERIT, "extsz-inherit"),
    ('f', xflag::NODEFRAG, "no-defrag"),
    ('S', xflag::FILESTREAM, "filestream"),
    ('x', xflag::DAX, "dax"),
    ('C', xflag::COWEXTSIZE, "cowextsize"),
    ('X', xflag::HASATTR, "has-xattr"),
];

/// The flags a user may change (all but preallocated and has-xattr).
const SETTABLE: &str = "riasAdtPneEfSxC";

/// Which entries a recursive walk visits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// The named paths only.
    Named,
    /// Everything under them too (-R).
    All,
    /// The directories under them too (-D).
    Dirs,
}

fn walk_of(recursive: bool, dirs: bool) -> Walk {
    match (recursive, dirs) {
        (_, true) => Walk::Dirs,
        (true, false) => Walk::All,
        _ => Walk::Named,
    }
}

/// What a walk visits under `top`: its entries in directory order, each
/// directory after what it holds (as nftw's FTW_DEPTH, which xfs_io
/// walks with), `top` last. With [`Walk::Dirs`], directories only; the
/// named path itself always.
fn visit(
    fs: &Fs,
    path: &str,
    top: Inode,
    walk: Walk,
    out: &mut Outcome,
    f: &mut dyn FnMut(&str, &Inode),
) {
    if walk == Walk::Named || top.file_type != FileType::Dir {
        f(path, &top);
        return;
    }
    // Frames of (path, directory inode, its entries, next entry).
    type Frame = (String, Inode, Vec<(Vec<u8>, xfskit::geometry::Ino)>, usize);
    let entries = |out: &mut Outcome, p: &str, ip: &Inode| match xfskit::dir::read_dir(fs, ip) {
        Ok(v) => v
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| (e.name, e.ino))
            .collect(),
        Err(e) => {
            out.fail(p, &e);
            Vec::new()
        }
    };
    let first = entries(out, path, &top);
    let mut stack: Vec<Frame> = vec![(path.to_string(), top, first, 0)];
    while let Some(frame) = stack.last_mut() {
        let Some((name, ino)) = frame.2.get(frame.3).cloned() else {
            let (p, ip, _, _) = stack.pop().expect("a frame");
            f(&p, &ip);
            continue;
        };
        frame.3 += 1;
        let p = super::join(&frame.0, &name);
        match fs.inode(ino) {
            Ok(ip) if ip.file_type == FileType::Dir => {
                let v = entries(out, &p, &ip);
                stack.push((p, ip, v, 0));
            }
            Ok(ip) => {
                if walk == Walk::All {
                    f(&p, &ip);
                }
            }
            Err(e) => out.fail(&p, &e),
        }
    }
}

/// Runs `each` on every path `patterns` name (and what `walk` adds).
fn for_each(
    fs: &Fs,
    patterns: &[String],
    walk: Walk,
    out: &mut Outcome,
    each: &mut dyn FnMut(&mut Outcome, &str, &Inode),
) {
    for pat in patterns {
        let paths = match expand(fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            match fs.lookup_path(p.as_bytes()) {
                Ok(ip) => {
                    let mut seen = Vec::new();
                    visit(fs, &p, ip, walk, out, &mut |q, i| {
                        seen.push((q.to_string(), i.clone()));
                    });
                    for (q, i) in seen {
                        each(out, &q, &i);
                    }
                }
                Err(e) => out.fail(&p, &e),
            }
        }
    }
}

/// A change of flags: `+` letters set, `-` letters cleared.
#[derive(Debug, Default, PartialEq, Eq)]
struct Change {
    set: u32,
    clear: u32,
}

/// Parses `+ia`, `-d`, `+i-d` (xfs_io takes one sign per argument; this
/// takes several).
fn parse_change(s: &str) -> Result<Change, Error> {
    let mut c = Change::default();
    let mut sign = None;
    for ch in s.chars() {
        match ch {
            '+' | '-' => sign = Some(ch),
            _ => {
                let Some(sg) = sign else {
                    return Err(Error::Invalid(format!(
                        "{s}: flags start with + (set) or - (clear), as +i or -a"
                    )));
                };
                let Some(&(_, bit, name)) = FLAGS.iter().find(|(l, _, _)| *l == ch) else {
                    return Err(Error::Invalid(format!(
                        "{s}: unknown flag '{ch}' (the flags are {SETTABLE})"
                    )));
                };
                if !SETTABLE.contains(ch) {
                    return Err(Error::Invalid(format!(
                        "{s}: '{ch}' ({name}) is set by XFS itself and cannot be changed"
                    )));
                }
                if sg == '+' {
                    c.set |= bit;
                    c.clear &= !bit;
                } else {
                    c.clear |= bit;
                    c.set &= !bit;
                }
            }
        }
    }
    if c == Change::default() {
        return Err(Error::Invalid(format!("{s}: no flag to change")));
    }
    Ok(c)
}

/// The letters of `x` as xfs_io's lsattr prints them ('-' for each flag
/// not set).
fn letters(x: u32) -> String {
    FLAGS
        .iter()
        .map(|&(l, b, _)| if x & b != 0 { l } else { '-' })
        .collect()
}

/// The long names of `x`, as `lsattr -v` prints them.
fn names(x: u32) -> Vec<&'static str> {
    FLAGS
        .iter()
        .filter(|(_, b, _)| x & b != 0)
        .map(|(_, _, n)| *n)
        .collect()
}

/// Arguments of `xfskit chattr`.
#[derive(clap::Args)]
#[command(long_about = help::CHATTR)]
pub struct ChattrArgs {
    /// Change directories and everything under them.
    #[arg(short = 'R', long, conflicts_with = "dirs")]
    pub recursive: bool,
    /// Change directories and the directories under them only.
    #[arg(short = 'D', long = "dirs-only")]
    pub dirs: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Flags to set (+) or clear (-): +i, -a, +dA, +P-n.
    #[arg(allow_hyphen_values = true, value_name = "+-FLAGS")]
    pub flags: String,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit chattr`.
pub fn chattr(a: ChattrArgs) -> Result<ExitCode, Error> {
    let change = parse_change(&a.flags)?;
    let fs = super::open_rw(&a.image, &a.disk)?;
    let walk = walk_of(a.recursive, a.dirs);
    change_attrs(fs, "chattr", &a.paths, walk, |_, old| FsxAttr {
        xflags: (old.xflags | change.set) & !change.clear,
        ..old
    })
}

/// Arguments of `xfskit lsattr`.
#[derive(clap::Args)]
#[command(long_about = help::LSATTR)]
pub struct LsattrArgs {
    /// List directories and everything under them.
    #[arg(short = 'R', long, conflicts_with = "dirs")]
    pub recursive: bool,
    /// List directories and the directories under them only.
    #[arg(short = 'D', long = "dirs-only")]
    pub dirs: bool,
    /// Show every flag that can be set after those that are.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Long names of the flags instead of letters.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// One JSON object per line: path, inode, flags (letters and names),
    /// project id, extent size hints in bytes.
    #[arg(long)]
    pub json: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns (default: the root directory).
    pub paths: Vec<String>,
}

/// Runs `xfskit lsattr`.
pub fn lsattr(a: LsattrArgs) -> Result<ExitCode, Error> {
    let fs = crate::cmd::open_in(&a.image, &a.disk, a.norecovery)?;
    let paths = if a.paths.is_empty() {
        vec!["/".to_string()]
    } else {
        a.paths.clone()
    };
    let mut out = Outcome::new("lsattr");
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let mut werr = None;
    let walk = walk_of(a.recursive, a.dirs);
    for_each(&fs, &paths, walk, &mut out, &mut |out, p, ip| {
        let x = match fs.file_attr(ip.ino) {
            Ok(x) => x,
            Err(e) => return out.fail(p, &e),
        };
        let line = if a.json {
            json!({
                "path": p,
                "ino": ip.ino.0,
                "flags": letters(x.xflags),
                "names": names(x.xflags),
                "projid": x.projid,
                "extsize": x.extsize,
                "cowextsize": x.cowextsize,
            })
            .to_string()
        } else {
            let mut s = if a.verbose {
                format!("[{}]", names(x.xflags).join(", "))
            } else {
                letters(x.xflags)
            };
            if a.all {
                s.push('/');
                s.extend(FLAGS.iter().map(|f| f.0));
            }
            // xfs_io ends each line with a space after the path.
            format!("{s} {p} ")
        };
        if werr.is_none() {
            werr = writeln!(w, "{line}").err();
        }
    });
    if let Some(e) = werr {
        return Err(e.into());
    }
    w.flush()?;
    Ok(out.code())
}

/// Arguments of `xfskit chproj`.
#[derive(clap::Args)]
#[command(long_about = help::CHPROJ)]
pub struct ChprojArgs {
    /// Change directories and everything under them.
    #[arg(short = 'R', long, conflicts_with = "dirs")]
    pub recursive: bool,
    /// Change directories and the directories under them only.
    #[arg(short = 'D', long = "dirs-only")]
    pub dirs: bool,
    /// Also set the project-inheritance flag (P) on the directories changed,
    /// so that what is made in them later takes the project id, as a
    /// project quota's tree needs (`xfs_quota -x -c 'project -s'` does this).
    #[arg(long)]
    pub inherit: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// The project id (0 to 4294967295; 0 to 65535 without 32-bit project ids).
    pub projid: u32,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit chproj`.
pub fn chproj(a: ChprojArgs) -> Result<ExitCode, Error> {
    let fs = super::open_rw(&a.image, &a.disk)?;
    let walk = walk_of(a.recursive, a.dirs);
    change_attrs(fs, "chproj", &a.paths, walk, |ip, old| {
        let mut attr = FsxAttr {
            projid: a.projid,
            ..old
        };
        if a.inherit && ip.file_type == FileType::Dir {
            attr.xflags |= xflag::PROJINHERIT;
        }
        attr
    })
}

/// Gives every path `paths` and `walk` name the file attributes `edit`
/// makes of its own, through FS_IOC_FSSETXATTR's checks (an inode whose
/// attributes stay the same is left alone), then syncs.
fn change_attrs(
    fs: Fs,
    cmd: &'static str,
    paths: &[String],
    walk: Walk,
    edit: impl Fn(&Inode, FsxAttr) -> FsxAttr,
) -> Result<ExitCode, Error> {
    let mut out = Outcome::new(cmd);
    for_each(&fs, paths, walk, &mut out, &mut |out, p, ip| {
        out.run(p, || {
            let old = fs.file_attr(ip.ino)?;
            let attr = edit(ip, old);
            if attr != old {
                let set = FileAttrSet::Fsx {
                    attr,
                    clear_setid: false,
                };
                fs.set_file_attr(ip.ino, &set)?;
            }
            Ok(())
        });
    });
    out.finish(&fs)
}

/// Arguments of `xfskit lsproj`.
#[derive(clap::Args)]
#[command(long_about = help::LSPROJ)]
pub struct LsprojArgs {
    /// List directories and everything under them.
    #[arg(short = 'R', long, conflicts_with = "dirs")]
    pub recursive: bool,
    /// List directories and the directories under them only.
    #[arg(short = 'D', long = "dirs-only")]
    pub dirs: bool,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit lsproj`.
pub fn lsproj(a: LsprojArgs) -> Result<ExitCode, Error> {
    let fs = crate::cmd::open_in(&a.image, &a.disk, a.norecovery)?;
    let walk = walk_of(a.recursive, a.dirs);
    let mut out = Outcome::new("lsproj");
    let mut lines = Vec::new();
    for_each(
        &fs,
        &a.paths,
        walk,
        &mut out,
        &mut |out, p, ip| match fs.file_attr(ip.ino) {
            Ok(x) => lines.push((p.to_string(), x.projid)),
            Err(e) => out.fail(p, &e),
        },
    );
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    // One path listed alone is printed as xfs_io prints it; several are
    // named.
    let named = walk != Walk::Named || lines.len() > 1;
    for (p, id) in &lines {
        if named {
            writeln!(w, "[{id}] {p}")?;
        } else {
            writeln!(w, "projid = {id}")?;
        }
    }
    w.flush()?;
    if lines.is_empty() && out.code() == ExitCode::SUCCESS {
        errln!("xfskit lsproj: nothing listed");
    }
    Ok(out.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_parse_as_xfs_io_takes_them() {
        assert_eq!(
            parse_change("+iA").unwrap(),
            Change {
                set: xflag::IMMUTABLE | xflag::NOATIME,
                clear: 0
            }
        );
        assert_eq!(
            parse_change("+i-d").unwrap(),
            Change {
                set: xflag::IMMUTABLE,
                clear: xflag::NODUMP
            }
        );
        assert_eq!(
            parse_change("+i-i").unwrap(),
            Change {
                set: 0,
                clear: xflag::IMMUTABLE
            }
        );
        for bad in ["i", "+z", "+X", "-p", "+", ""] {
            assert!(matches!(parse_change(bad), Err(Error::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn letters_and_names_follow_xfs_io() {
        let x = xflag::IMMUTABLE | xflag::NOATIME | xflag::HASATTR;
        assert_eq!(letters(x), "--i--A----------X");
        assert_eq!(names(x), ["immutable", "no-atime", "has-xattr"]);
        assert_eq!(letters(0).len(), 17);
    }
}

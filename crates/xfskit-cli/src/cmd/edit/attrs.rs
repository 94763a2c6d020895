//! `xfskit chmod`, `chown`, `touch` and `truncate`: inode attributes and
//! sizes in an image.

use super::{expand, lookup_opt, new_meta, open_rw, parent_of, parse, Outcome};
use crate::cmd::DiskArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::build::NodeKind;
use xfskit::inode::{FileType, Inode};
use xfskit::namespace::{AttrChange, SetTime};
use xfskit::{Error, Fs};

/// Every path under `top` (itself first) with its inode, for -R.
fn tree(fs: &Fs, path: &str, top: Inode, out: &mut Vec<(String, Inode)>) -> Result<(), Error> {
    let mut stack = vec![(path.to_string(), top)];
    while let Some((p, ip)) = stack.pop() {
        if ip.file_type == FileType::Dir {
            for e in xfskit::dir::read_dir(fs, &ip)? {
                if e.name != b"." && e.name != b".." {
                    stack.push((super::join(&p, &e.name), fs.inode(e.ino)?));
                }
            }
        }
        out.push((p, ip));
    }
    Ok(())
}

/// The paths `patterns` name, with their inodes (and everything under
/// them with `recursive`); failures are reported to `out`.
fn targets(
    fs: &Fs,
    patterns: &[String],
    recursive: bool,
    out: &mut Outcome,
) -> Vec<(String, Inode)> {
    let mut all = Vec::new();
    for pat in patterns {
        let paths = match expand(fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            let r = fs.lookup_path(p.as_bytes()).and_then(|ip| {
                if recursive {
                    tree(fs, &p, ip, &mut all)
                } else {
                    all.push((p.clone(), ip));
                    Ok(())
                }
            });
            if let Err(e) = r {
                out.fail(&p, &e);
            }
        }
    }
    all
}

/// Arguments of `xfskit chmod`.
#[derive(clap::Args)]
#[command(long_about = super::help::CHMOD)]
pub struct ChmodArgs {
    /// Change directories and everything under them.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Octal (644, 4755) or symbolic (u+x,go-w, a=rX, +t) permissions.
    #[arg(allow_hyphen_values = true)]
    pub mode: String,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit chmod`.
pub fn chmod(a: ChmodArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    parse::apply_mode(&a.mode, 0, false)?;
    let mut out = Outcome::new("chmod");
    for (p, ip) in targets(&fs, &a.paths, a.recursive, &mut out) {
        if ip.file_type == FileType::Symlink {
            continue; // Links have no permissions of their own, as chmod -R skips them.
        }
        out.run(&p, || {
            let mode = parse::apply_mode(&a.mode, ip.mode, ip.file_type == FileType::Dir)?;
            fs.change_attrs(
                ip.ino,
                &AttrChange {
                    mode: Some(mode),
                    ..Default::default()
                },
            )?;
            Ok(())
        });
    }
    out.finish(&fs)
}

/// Arguments of `xfskit chown`.
#[derive(clap::Args)]
#[command(long_about = super::help::CHOWN)]
pub struct ChownArgs {
    /// Change directories and everything under them.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// OWNER[:GROUP], :GROUP or OWNER: (numbers, or names from the image's /etc/passwd and /etc/group).
    pub owner: String,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit chown`.
pub fn chown(a: ChownArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let (uid, gid) = parse::owner(&fs, &a.owner)?;
    let mut out = Outcome::new("chown");
    for (p, ip) in targets(&fs, &a.paths, a.recursive, &mut out) {
        out.run(&p, || {
            let mut mode = None;
            if ip.file_type != FileType::Dir && ip.mode & 0o111 != 0 {
                // As the kernel does for a change of owner: set-id bits go.
                mode = Some(ip.mode & 0o7777 & !0o6000).filter(|&m| m != ip.mode & 0o7777);
            }
            let c = AttrChange {
                uid,
                gid,
                mode,
                ..Default::default()
            };
            fs.change_attrs(ip.ino, &c)?;
            Ok(())
        });
    }
    out.finish(&fs)
}

/// Arguments of `xfskit touch`.
#[derive(clap::Args)]
#[command(long_about = super::help::TOUCH)]
pub struct TouchArgs {
    /// Change only the access time.
    #[arg(short = 'a')]
    pub atime: bool,
    /// Change only the modification time.
    #[arg(short = 'm')]
    pub mtime: bool,
    /// Do not create missing files.
    #[arg(short = 'c', long = "no-create")]
    pub no_create: bool,
    /// Use this time: @SECONDS[.FRAC], YYYY-MM-DD[ HH:MM[:SS[.FRAC]]] (UTC), or now.
    #[arg(short = 'd', long = "date", value_name = "TIME")]
    pub date: Option<String>,
    /// Use this time: [[CC]YY]MMDDhhmm[.ss] (UTC).
    #[arg(short = 't', value_name = "STAMP")]
    pub stamp: Option<String>,
    /// Use the times of this file of the image.
    #[arg(short = 'r', long = "reference", value_name = "FILE")]
    pub reference: Option<String>,
    /// Owner of created files as UID:GID (default 0:0).
    #[arg(long, value_name = "UID:GID")]
    pub owner: Option<String>,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit touch`.
pub fn touch(a: TouchArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let (uid, gid) = super::names::owner_or_root(&fs, a.owner.as_deref())?;
    let (at, mt) = match (&a.date, &a.stamp, &a.reference) {
        (Some(d), None, None) => {
            let t = SetTime::At(parse::date(d)?);
            (t, t)
        }
        (None, Some(s), None) => {
            let t = SetTime::At(parse::stamp(s)?);
            (t, t)
        }
        (None, None, Some(r)) => {
            let i = fs.lookup_path(r.as_bytes())?;
            (SetTime::At(i.atime), SetTime::At(i.mtime))
        }
        (None, None, None) => (SetTime::Now, SetTime::Now),
        _ => return Err(Error::Invalid("give one of -d, -t and -r".into())),
    };
    let both = a.atime == a.mtime;
    let change = AttrChange {
        atime: (both || a.atime).then_some(at),
        mtime: (both || a.mtime).then_some(mt),
        ..Default::default()
    };
    let mut out = Outcome::new("touch");
    for pat in &a.paths {
        // A plain missing path is created; a pattern must match.
        let paths = match expand(&fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            out.run(&p, || {
                let ino = match lookup_opt(&fs, &p)? {
                    Some(i) => i.ino,
                    None if a.no_create => return Ok(()),
                    None => {
                        let (dir, name) = parent_of(&fs, &p)?;
                        let kind = NodeKind::File { size: 0 };
                        fs.create(dir.ino, &name, &kind, &new_meta(0o644, uid, gid))?
                    }
                };
                fs.change_attrs(ino, &change)?;
                Ok(())
            });
        }
    }
    out.finish(&fs)
}

/// Arguments of `xfskit truncate`.
#[derive(clap::Args)]
#[command(long_about = super::help::TRUNCATE)]
pub struct TruncateArgs {
    /// The new size: N, or +N / -N relative to the current size; K, M, G,
    /// T suffixes are powers of 1024, KB, MB, GB of 1000.
    #[arg(short, long, allow_hyphen_values = true)]
    pub size: String,
    /// Do not create missing files.
    #[arg(short = 'c', long = "no-create")]
    pub no_create: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Runs `xfskit truncate`.
pub fn truncate(a: TruncateArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let (sign, n) = parse::size(&a.size)?;
    let mut out = Outcome::new("truncate");
    for pat in &a.paths {
        let paths = match expand(&fs, pat) {
            Ok(p) => p,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            out.run(&p, || {
                let ip = match lookup_opt(&fs, &p)? {
                    Some(i) => i,
                    None if a.no_create => return Ok(()),
                    None => {
                        let (dir, name) = parent_of(&fs, &p)?;
                        let kind = NodeKind::File { size: 0 };
                        fs.inode(fs.create(dir.ino, &name, &kind, &new_meta(0o644, 0, 0))?)?
                    }
                };
                if ip.file_type != FileType::File {
                    return Err(Error::Invalid("not a regular file".into()));
                }
                let size = match sign {
                    Some('+') => ip.size.saturating_add(n),
                    Some(_) => ip.size.saturating_sub(n),
                    None => n,
                };
                fs.truncate(ip.ino, size)
            });
        }
    }
    out.finish(&fs)
}

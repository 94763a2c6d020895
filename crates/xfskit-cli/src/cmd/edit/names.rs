//! `xfskit mkdir`, `rm`, `mv` and `ln`: changes to names in an image.

use super::{base_name, child, expand, join, lookup_opt, new_meta, open_rw, parent_of, Outcome};
use crate::cmd::DiskArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::build::NodeKind;
use xfskit::geometry::Ino;
use xfskit::inode::{FileType, Inode};
use xfskit::{Error, Fs};

/// Arguments of `xfskit mkdir`.
#[derive(clap::Args)]
#[command(long_about = super::help::MKDIR)]
pub struct MkdirArgs {
    /// Make missing parent directories too; an existing directory is no error.
    #[arg(short, long)]
    pub parents: bool,
    /// Permission bits of the new directories (octal or symbolic; default 755).
    #[arg(short, long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Owner of the new directories as UID:GID (names from the image's
    /// /etc/passwd and /etc/group work too; default 0:0).
    #[arg(long, value_name = "UID:GID")]
    pub owner: Option<String>,
    /// Mark the new directories RTINHERIT: files made in them (by cp,
    /// write, the mount) are realtime files, their data on the realtime
    /// device (needs a filesystem with a realtime section and --rtdev).
    #[arg(long)]
    pub realtime: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Directories to make.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Owner of new inodes: `--owner`, else root.
pub fn owner_or_root(fs: &Fs, owner: Option<&str>) -> Result<(u32, u32), Error> {
    match owner {
        None => Ok((0, 0)),
        Some(s) => {
            let (u, g) = super::parse::owner(fs, s)?;
            Ok((u.unwrap_or(0), g.unwrap_or(0)))
        }
    }
}

/// Runs `xfskit mkdir`.
pub fn mkdir(a: MkdirArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let mode = match &a.mode {
        Some(m) => super::parse::apply_mode(m, 0o755, true)?,
        None => 0o755,
    };
    let (uid, gid) = owner_or_root(&fs, a.owner.as_deref())?;
    let mut out = Outcome::new("mkdir");
    for p in &a.paths {
        out.run(p, || {
            if a.parents {
                let mut cur = fs.root()?;
                for c in super::components(p) {
                    cur = match child(&fs, &cur, c)? {
                        Some(i) => fs.inode(i)?,
                        None => {
                            let ino =
                                fs.create(cur.ino, c, &NodeKind::Dir, &new_meta(mode, uid, gid))?;
                            if a.realtime {
                                fs.set_realtime(ino, true)?;
                            }
                            fs.inode(ino)?
                        }
                    };
                    if cur.file_type != FileType::Dir {
                        return Err(Error::NotDir(String::from_utf8_lossy(c).into_owned()));
                    }
                }
                return Ok(());
            }
            let (dir, name) = parent_of(&fs, p)?;
            let ino = fs.create(dir.ino, &name, &NodeKind::Dir, &new_meta(mode, uid, gid))?;
            if a.realtime {
                fs.set_realtime(ino, true)?;
            }
            Ok(())
        });
    }
    out.finish(&fs)
}

/// Arguments of `xfskit rm`.
#[derive(clap::Args)]
#[command(long_about = super::help::RM)]
pub struct RmArgs {
    /// Remove directories and everything under them.
    #[arg(short = 'r', short_alias = 'R', long)]
    pub recursive: bool,
    /// Ignore paths that do not exist (and patterns that match nothing).
    #[arg(short, long)]
    pub force: bool,
    /// Remove empty directories.
    #[arg(short, long)]
    pub dir: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Paths or patterns to remove.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Removes everything under directory `top` (not `top` itself), deepest
/// first, with a stack instead of recursion.
fn empty_tree(fs: &Fs, top: &Inode) -> Result<(), Error> {
    let list = |d: &Inode| -> Result<Vec<(Vec<u8>, Ino)>, Error> {
        Ok(xfskit::dir::read_dir(fs, d)?
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| (e.name, e.ino))
            .collect())
    };
    // Each level: the directory, its name in the level above, and the
    // entries still to remove.
    type Level = (Ino, Vec<u8>, Vec<(Vec<u8>, Ino)>);
    let mut stack: Vec<Level> = vec![(top.ino, Vec::new(), list(top)?)];
    while let Some((dir, _, entries)) = stack.last_mut() {
        let dir = *dir;
        let Some((name, ino)) = entries.pop() else {
            let (_, name, _) = stack.pop().expect("not empty");
            if let Some((parent, _, _)) = stack.last() {
                // `dir` is empty now: remove it from its parent.
                fs.rmdir(*parent, &name)?;
            }
            continue;
        };
        let ip = fs.inode(ino)?;
        if ip.file_type == FileType::Dir {
            if stack.len() > 4096 {
                return Err(Error::Invalid("directories nested deeper than 4096".into()));
            }
            let l = list(&ip)?;
            stack.push((ino, name, l));
        } else {
            fs.unlink(dir, &name)?;
        }
    }
    Ok(())
}

/// Runs `xfskit rm`.
pub fn rm(a: RmArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let mut out = Outcome::new("rm");
    for pat in &a.paths {
        let paths = match expand(&fs, pat) {
            Ok(p) => p,
            Err(Error::NotFound(_)) if a.force => continue,
            Err(e) => {
                out.fail(pat, &e);
                continue;
            }
        };
        for p in paths {
            out.run(&p, || {
                let (dir, name) = parent_of(&fs, &p)?;
                let Some(ino) = child(&fs, &dir, &name)? else {
                    return if a.force {
                        Ok(())
                    } else {
                        Err(Error::NotFound(p.clone()))
                    };
                };
                let ip = fs.inode(ino)?;
                if ip.file_type != FileType::Dir {
                    return fs.unlink(dir.ino, &name);
                }
                if a.recursive {
                    empty_tree(&fs, &ip)?;
                } else if !a.dir {
                    return Err(Error::IsDir(p.clone()));
                }
                fs.rmdir(dir.ino, &name)
            });
        }
    }
    out.finish(&fs)
}

/// Arguments of `xfskit mv`.
#[derive(clap::Args)]
#[command(long_about = super::help::MV)]
pub struct MvArgs {
    /// Do not replace an existing destination.
    #[arg(short = 'n', long)]
    pub no_clobber: bool,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Sources (patterns allowed), then the destination.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<String>,
}

/// Where a source named `src` goes for destination `dest`: into `dest`
/// when it is a directory (`into` forces that), else `dest` itself.
fn target_of(fs: &Fs, src: &str, dest: &str, into: bool) -> Result<(Inode, Vec<u8>), Error> {
    if let Some(d) = lookup_opt(fs, dest)? {
        if d.file_type == FileType::Dir {
            let name =
                base_name(src).ok_or_else(|| Error::Invalid(format!("{src} names no entry")))?;
            return Ok((d, name.to_vec()));
        }
    }
    if into {
        return Err(Error::NotDir(dest.to_string()));
    }
    parent_of(fs, dest)
}

/// Runs `xfskit mv`.
pub fn mv(a: MvArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let mut out = Outcome::new("mv");
    let (dest, srcs) = a.paths.split_last().expect("clap requires two paths");
    let mut all = Vec::new();
    for pat in srcs {
        match expand(&fs, pat) {
            Ok(p) => all.extend(p),
            Err(e) => out.fail(pat, &e),
        }
    }
    let into = all.len() > 1 || dest.ends_with('/');
    for src in &all {
        out.run(src, || {
            let (sdir, sname) = parent_of(&fs, src)?;
            if child(&fs, &sdir, &sname)?.is_none() {
                return Err(Error::NotFound(src.clone()));
            }
            let (ddir, dname) = target_of(&fs, src, dest, into)?;
            if child(&fs, &ddir, &dname)?.is_some() && a.no_clobber {
                return Ok(());
            }
            fs.rename(sdir.ino, &sname, ddir.ino, &dname)
        });
    }
    out.finish(&fs)
}

/// Arguments of `xfskit ln`.
#[derive(clap::Args)]
#[command(long_about = super::help::LN)]
pub struct LnArgs {
    /// Make a symbolic link holding TARGET as it is given.
    #[arg(short, long)]
    pub symbolic: bool,
    /// Replace an existing LINK (not a directory).
    #[arg(short, long)]
    pub force: bool,
    /// Owner of a new symbolic link as UID:GID (default 0:0).
    #[arg(long, value_name = "UID:GID")]
    pub owner: Option<String>,
    /// The image.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
    /// What the link points to: a path in the image (hard links), or any text (-s).
    pub target: String,
    /// The new link (an existing directory: the link goes in it, under TARGET's name).
    pub link: String,
}

/// Runs `xfskit ln`.
pub fn ln(a: LnArgs) -> Result<ExitCode, Error> {
    let fs = open_rw(&a.image, &a.disk)?;
    let (uid, gid) = owner_or_root(&fs, a.owner.as_deref())?;
    let mut out = Outcome::new("ln");
    let link = a.link.clone();
    out.run(&link, || {
        let (dir, name) = target_of(&fs, &a.target, &a.link, false)?;
        if let Some(old) = child(&fs, &dir, &name)? {
            if !a.force || fs.inode(old)?.file_type == FileType::Dir {
                return Err(Error::Exists(join(&a.link, &name)));
            }
            fs.unlink(dir.ino, &name)?;
        }
        if a.symbolic {
            let kind = NodeKind::Symlink(a.target.as_bytes().to_vec());
            fs.create(dir.ino, &name, &kind, &new_meta(0o777, uid, gid))?;
            return Ok(());
        }
        let t = fs.lookup_path(a.target.as_bytes())?;
        if t.file_type == FileType::Dir {
            return Err(Error::IsDir(a.target.clone()));
        }
        fs.link(dir.ino, &name, t.ino)
    });
    out.finish(&fs)
}

//! A depth-first walk over a directory tree.
//!
//! The walk holds one directory's entries per level of depth, never the
//! whole tree. It remembers the inode numbers of directories it has entered
//! (a directory reached twice means a loop or a cross-linked directory: a
//! corruption error) and, for non-directories with more than one link, the
//! path where each inode was first seen, so callers can recreate hard links.
//!
//! Entries of each directory are visited in byte order of their names, so a
//! walk's order is stable across directory formats.

use crate::dir;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};
use std::collections::{HashMap, HashSet};

/// What the visitor wants the walk to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on (into the directory, when the entry is one).
    Continue,
    /// Do not descend into this directory (ignored for other entries).
    SkipDir,
    /// End the walk now, successfully.
    Stop,
}

/// One entry reached by the walk.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Path relative to the walk's start, components joined by '/'; the
    /// start itself is the empty path.
    pub path: &'a [u8],
    /// The last path component (empty for the start).
    pub name: &'a [u8],
    /// Depth below the start (0 for the start).
    pub depth: usize,
    /// The entry's inode.
    pub inode: &'a Inode,
    /// For a non-directory seen before under another name (a hard link):
    /// the relative path where it was first seen.
    pub first_link: Option<&'a [u8]>,
}

/// Receives the entries of a walk.
pub trait Visitor {
    /// Called for every entry, parents before their children.
    fn entry(&mut self, e: &Entry<'_>) -> Result<Control>;

    /// Called after every entry of directory `path` was visited (not for
    /// directories skipped with [`Control::SkipDir`]).
    fn leave_dir(&mut self, path: &[u8], inode: &Inode) -> Result<()> {
        let _ = (path, inode);
        Ok(())
    }

    /// Called when the entry at `path` cannot be read because the image is
    /// damaged there (`e` is a corruption error naming the structure).
    /// Returning `Ok` skips that entry (and what is under it) and goes on
    /// with the rest of the tree; the default ends the walk with `e`.
    fn damaged(&mut self, path: &[u8], e: Error) -> Result<()> {
        let _ = path;
        Err(e)
    }
}

/// True for errors that describe damage to one part of the image (the walk
/// may skip it), rather than a failure to read at all.
pub fn is_damage(e: &Error) -> bool {
    matches!(e, Error::Corrupt { .. } | Error::BadCrc { .. })
}

/// Summary of a finished walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Entries visited, the start included.
    pub entries: u64,
    /// Directories entered.
    pub dirs: u64,
}

/// A directory being walked: its path and the entries still to visit
/// (reversed, so the next one is popped from the end).
struct Level {
    path: Vec<u8>,
    inode: Inode,
    pending: Vec<dir::DirEntry>,
}

/// State shared by the whole walk.
struct Walker<'f, 'v> {
    fs: &'f Fs,
    visitor: &'v mut dyn Visitor,
    dirs_seen: HashSet<Ino>,
    links: HashMap<Ino, Vec<u8>>,
    stats: WalkStats,
}

impl Walker<'_, '_> {
    /// Visits one inode and tells the loop what to do next: descend into
    /// it (a directory), go on with its siblings, or stop.
    fn visit(
        &mut self,
        path: Vec<u8>,
        name_start: usize,
        depth: usize,
        inode: Inode,
    ) -> Result<Step> {
        self.stats.entries += 1;
        let mut first_link = None;
        if inode.file_type == FileType::Dir {
            if !self.dirs_seen.insert(inode.ino) {
                return Err(Error::corrupt(
                    "directory tree",
                    Location::Inode(inode.ino.0),
                    format!(
                        "directory reached a second time at {:?}",
                        String::from_utf8_lossy(&path)
                    ),
                ));
            }
        } else if inode.nlink > 1 {
            match self.links.get(&inode.ino) {
                Some(p) => first_link = Some(p.clone()),
                None => {
                    self.links.insert(inode.ino, path.clone());
                }
            }
        }
        let e = Entry {
            path: &path,
            name: &path[name_start..],
            depth,
            inode: &inode,
            first_link: first_link.as_deref(),
        };
        match self.visitor.entry(&e)? {
            Control::Stop => return Ok(Step::Stop),
            Control::SkipDir => return Ok(Step::Next),
            Control::Continue => {}
        }
        if inode.file_type != FileType::Dir {
            return Ok(Step::Next);
        }
        self.stats.dirs += 1;
        let mut pending = dir::read_dir(self.fs, &inode)?;
        // Visit in name order: sort descending and pop from the end.
        pending.sort_unstable_by(|a, b| b.name.cmp(&a.name));
        for w in pending.windows(2) {
            if w[0].name == w[1].name {
                return Err(Error::corrupt(
                    "directory",
                    Location::Inode(inode.ino.0),
                    format!(
                        "name {:?} appears twice",
                        String::from_utf8_lossy(&w[0].name)
                    ),
                ));
            }
        }
        Ok(Step::Descend(Box::new(Level {
            path,
            inode,
            pending,
        })))
    }
}

enum Step {
    Next,
    Descend(Box<Level>),
    Stop,
}

/// Walks the tree under `start` (named by `start_path`, which is only used
/// to build the paths handed to the visitor: pass an empty path to get
/// paths relative to the start).
pub fn walk_from(
    fs: &Fs,
    start: Inode,
    start_path: &[u8],
    visitor: &mut dyn Visitor,
) -> Result<WalkStats> {
    let mut w = Walker {
        fs,
        visitor,
        dirs_seen: HashSet::new(),
        links: HashMap::new(),
        stats: WalkStats::default(),
    };
    let name_start = start_path
        .iter()
        .rposition(|&b| b == b'/')
        .map(|i| i + 1)
        .unwrap_or(0);
    let mut stack = match w.visit(start_path.to_vec(), name_start, 0, start)? {
        Step::Descend(l) => vec![*l],
        Step::Next | Step::Stop => return Ok(w.stats),
    };
    while let Some(top) = stack.last_mut() {
        let Some(de) = top.pending.pop() else {
            let done = stack.pop().expect("stack is not empty");
            w.visitor.leave_dir(&done.path, &done.inode)?;
            continue;
        };
        let mut path = top.path.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        let name_start = path.len();
        path.extend_from_slice(&de.name);
        let dir_ino = top.inode.ino.0;
        let depth = stack.len();
        let step = entry_inode(fs, dir_ino, &de)
            .and_then(|inode| w.visit(path.clone(), name_start, depth, inode));
        match step {
            Ok(Step::Next) => {}
            Ok(Step::Descend(l)) => stack.push(*l),
            Ok(Step::Stop) => return Ok(w.stats),
            Err(e) if is_damage(&e) => w.visitor.damaged(&path, e)?,
            Err(e) => return Err(e),
        }
    }
    Ok(w.stats)
}

/// Reads the inode an entry of directory `dir` names, checking the name
/// and the file type the entry records.
fn entry_inode(fs: &Fs, dir: u64, de: &dir::DirEntry) -> Result<Inode> {
    if de.name.is_empty() || de.name.contains(&b'/') || de.name.contains(&0) {
        return Err(Error::corrupt(
            "directory entry",
            Location::Inode(dir),
            format!("invalid name {:?}", String::from_utf8_lossy(&de.name)),
        ));
    }
    let inode = fs.inode(de.ino)?;
    if let Some(ft) = de.file_type {
        if ft != inode.file_type {
            return Err(Error::corrupt(
                "directory entry",
                Location::Inode(dir),
                format!(
                    "entry {:?} says {ft:?} but inode {} is a {:?}",
                    String::from_utf8_lossy(&de.name),
                    de.ino.0,
                    inode.file_type
                ),
            ));
        }
    }
    Ok(inode)
}

/// Walks the whole filesystem from the root directory; paths are relative
/// to the root (the root itself is the empty path).
pub fn walk(fs: &Fs, visitor: &mut dyn Visitor) -> Result<WalkStats> {
    walk_from(fs, fs.root()?, b"", visitor)
}

/// A visitor built from a closure over entries (no `leave_dir`).
pub struct FnVisitor<F>(pub F);

impl<F: FnMut(&Entry<'_>) -> Result<Control>> Visitor for FnVisitor<F> {
    fn entry(&mut self, e: &Entry<'_>) -> Result<Control> {
        (self.0)(e)
    }
}

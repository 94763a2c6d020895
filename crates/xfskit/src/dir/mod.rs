//! Directories in all five formats: shortform (in the inode), block, leaf,
//! node and btree (the last four share data blocks below 32 GiB of the
//! directory's address space).

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};

/// One directory entry ("." and ".." are not reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Entry name (any bytes but '/' and NUL).
    pub name: Vec<u8>,
    /// Inode the entry points to.
    pub ino: Ino,
    /// File type from the entry, when the filesystem records it (ftype).
    pub file_type: Option<FileType>,
    /// A stable position cookie: passing it to [`for_each_entry`] resumes
    /// after this entry.
    pub cookie: u64,
}

/// Calls `f` for every entry after position `after` (0: from the start), in
/// on-disk order, until `f` returns false.
pub fn for_each_entry(fs: &Fs, dir: &Inode, after: u64, f: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
    let _ = (fs, dir, after, f);
    Err(Error::Unsupported("directory reading is not implemented yet".into()))
}

/// All entries of a directory.
pub fn read_dir(fs: &Fs, dir: &Inode) -> Result<Vec<DirEntry>> {
    let mut v = Vec::new();
    for_each_entry(fs, dir, 0, &mut |e| {
        v.push(e);
        true
    })?;
    Ok(v)
}

/// Looks `name` up in `dir`.
pub fn lookup(fs: &Fs, dir: &Inode, name: &[u8]) -> Result<Option<Ino>> {
    let _ = (fs, dir, name);
    Err(Error::Unsupported("directory lookup is not implemented yet".into()))
}

/// The parent directory ("..") of `dir`.
pub fn parent(fs: &Fs, dir: &Inode) -> Result<Ino> {
    let _ = (fs, dir);
    Err(Error::Unsupported("directory parent is not implemented yet".into()))
}

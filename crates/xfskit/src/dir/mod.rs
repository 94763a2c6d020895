//! Directories in all five formats: shortform (in the inode), block, leaf,
//! node and btree (the last four share data blocks below 32 GiB of the
//! directory's address space).
//!
//! Readdir positions ("cookies") follow XFS's data pointer scheme: the
//! byte offset of an entry in the directory's address space divided by 8.
//! Data entries never start in the first 64 bytes of a block, so a cookie
//! is never 0; shortform entries use their saved block-form offset, so
//! positions stay meaningful across format conversions.

pub mod data;
pub mod lookup;
pub mod shortform;
pub mod write;

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, ForkFormat, Inode};

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

/// Which directory structure an error is about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DirError {
    /// The inline (shortform) directory.
    Shortform,
    /// A directory block (data, leaf or node).
    Block,
}

impl DirError {
    /// A corruption error at directory block `db` of directory `ino`.
    pub(crate) fn at(self, ino: u64, db: u64, detail: impl Into<String>) -> Error {
        let what = match self {
            DirError::Shortform => "shortform directory",
            DirError::Block => "directory block",
        };
        Error::corrupt(
            what,
            Location::InodeBlock {
                ino,
                fork: "data",
                offset: db,
            },
            detail,
        )
    }
}

/// Checks an entry name: not empty, no '/' and no NUL.
pub(crate) fn check_name(name: &[u8]) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        Err("empty name")
    } else if name.contains(&b'/') {
        Err("name contains '/'")
    } else if name.contains(&0) {
        Err("name contains NUL")
    } else {
        Ok(())
    }
}

/// Decodes a directory entry file type byte (XFS_DIR3_FT_*; 0 is unknown).
pub(crate) fn decode_ftype(code: u8) -> std::result::Result<Option<FileType>, String> {
    Ok(Some(match code {
        0 => return Ok(None),
        1 => FileType::File,
        2 => FileType::Dir,
        3 => FileType::CharDev,
        4 => FileType::BlockDev,
        5 => FileType::Fifo,
        6 => FileType::Socket,
        7 => FileType::Symlink,
        _ => return Err(format!("unknown file type {code}")),
    }))
}

fn require_dir(dir: &Inode) -> Result<()> {
    if dir.file_type != FileType::Dir {
        return Err(Error::NotDir(format!("inode {}", dir.ino.0)));
    }
    Ok(())
}

/// The cookie of the entry at byte `off` of directory block `db`.
pub(crate) fn cookie(fs: &Fs, db: u64, off: usize) -> u64 {
    (db * u64::from(fs.geometry().dir_blk_size) + off as u64) >> data::DATA_ALIGN.trailing_zeros()
}

/// Calls `f` for every entry after position `after` (0: from the start), in
/// on-disk order, until `f` returns false.
pub fn for_each_entry(
    fs: &Fs,
    dir: &Inode,
    after: u64,
    f: &mut dyn FnMut(DirEntry) -> bool,
) -> Result<()> {
    require_dir(dir)?;
    match dir.format {
        ForkFormat::Local => {
            let sf = shortform::parse(fs, dir)?;
            for e in sf.entries {
                let c = u64::from(e.offset) >> data::DATA_ALIGN.trailing_zeros();
                if c <= after {
                    continue;
                }
                if !f(DirEntry {
                    name: e.name.to_vec(),
                    ino: e.ino,
                    file_type: e.file_type,
                    cookie: c,
                }) {
                    break;
                }
            }
            Ok(())
        }
        ForkFormat::Extents | ForkFormat::Btree => {
            let map = data::DirMap::new(fs, dir)?;
            for db in map.dbs_below(map.leaf_first_db()) {
                // Every entry of block `db` has a cookie below the block's end.
                if cookie(fs, db + 1, 0) <= after.saturating_add(1) {
                    continue;
                }
                let buf = map.read_data(db)?;
                let go = data::walk(fs, dir.ino.0, db, &buf, &mut |e| {
                    let c = cookie(fs, db, e.off);
                    if c <= after || e.name == b"." || e.name == b".." {
                        return true;
                    }
                    f(DirEntry {
                        name: e.name.to_vec(),
                        ino: e.ino,
                        file_type: e.file_type,
                        cookie: c,
                    })
                })?;
                if !go {
                    break;
                }
            }
            Ok(())
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => {
            Err(DirError::Shortform.at(dir.ino.0, 0, "directory with a device data fork"))
        }
    }
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
    require_dir(dir)?;
    if name == b"." {
        return Ok(Some(dir.ino));
    }
    if name == b".." {
        return parent(fs, dir).map(Some);
    }
    if check_name(name).is_err() || name.len() > 255 {
        return Ok(None);
    }
    match dir.format {
        ForkFormat::Local => {
            let sf = shortform::parse(fs, dir)?;
            Ok(sf.entries.iter().find(|e| e.name == name).map(|e| e.ino))
        }
        _ => lookup::hashed(fs, dir, name),
    }
}

/// Looks `name` up by reading every entry (no hash index); the reference
/// the hashed lookup is tested against.
pub fn lookup_linear(fs: &Fs, dir: &Inode, name: &[u8]) -> Result<Option<Ino>> {
    let mut found = None;
    for_each_entry(fs, dir, 0, &mut |e| {
        if e.name == name {
            found = Some(e.ino);
            false
        } else {
            true
        }
    })?;
    Ok(found)
}

/// The parent directory ("..") of `dir`.
pub fn parent(fs: &Fs, dir: &Inode) -> Result<Ino> {
    require_dir(dir)?;
    match dir.format {
        ForkFormat::Local => Ok(shortform::parse(fs, dir)?.parent),
        _ => {
            let map = data::DirMap::new(fs, dir)?;
            if !map.is_mapped(0) {
                return Err(map.corrupt(0, "first directory block is missing"));
            }
            let buf = map.read_data(0)?;
            let mut found = None;
            data::walk(fs, dir.ino.0, 0, &buf, &mut |e| {
                if e.name == b".." {
                    found = Some(e.ino);
                    false
                } else {
                    true
                }
            })?;
            found.ok_or_else(|| map.corrupt(0, "no \"..\" entry in the first block"))
        }
    }
}

//! Shortform directories: entries stored inline in the inode's data fork.
//!
//! Layout (xfs_da_format.h, `xfs_dir2_sf_hdr` / `xfs_dir2_sf_entry`): a
//! header of entry count (u8), count of 8-byte inode numbers (u8) and the
//! parent inode number (4 bytes, or 8 when any inode number needs 8), then
//! packed entries: name length (u8), saved data-block offset (be16), the
//! name, a file type byte when ftype is enabled, and the inode number
//! (4 or 8 bytes).

use super::{check_name, decode_ftype, DirError};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Geometry, Ino};
use crate::inode::{FileType, Inode};

/// Size of the fixed part of a shortform entry (namelen + offset).
const SF_ENTRY_FIXED: usize = 3;

/// A decoded shortform entry.
#[derive(Debug, Clone)]
pub struct SfEntry<'b> {
    /// The saved offset (the entry's place in block form), the readdir position.
    pub offset: u16,
    /// Entry name.
    pub name: &'b [u8],
    /// Inode number.
    pub ino: Ino,
    /// File type, when recorded.
    pub file_type: Option<FileType>,
}

/// A parsed, checked shortform directory.
pub struct Shortform<'b> {
    /// Parent directory.
    pub parent: Ino,
    /// Entries in on-disk order.
    pub entries: Vec<SfEntry<'b>>,
}

fn read_ino(b: &[u8], wide: bool) -> u64 {
    if wide {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        u64::from_be_bytes(a)
    } else {
        u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Parses and checks the shortform directory in `dir`'s data fork.
pub fn parse<'b>(fs: &Fs, dir: &'b Inode) -> Result<Shortform<'b>> {
    parse_geo(fs.geometry(), dir)
}

/// [`parse`] with only the geometry (the writers hold no `Fs`).
pub(crate) fn parse_geo<'b>(geo: &Geometry, dir: &'b Inode) -> Result<Shortform<'b>> {
    let ino = dir.ino.0;
    let bad = |d: String| -> Error { DirError::Shortform.at(ino, 0, d) };
    let size = usize::try_from(dir.size).unwrap_or(usize::MAX);
    if size > dir.data_fork.len() || size < 2 {
        return Err(bad(format!(
            "size {} does not fit the {}-byte data fork",
            dir.size,
            dir.data_fork.len()
        )));
    }
    let fork = &dir.data_fork[..size];
    let count = usize::from(fork[0]);
    let i8count = usize::from(fork[1]);
    let wide = i8count != 0;
    let inosz = if wide { 8 } else { 4 };
    let hdr = 2 + inosz;
    if size < hdr {
        return Err(bad("header does not fit".into()));
    }
    if i8count > count + 1 {
        return Err(bad(format!(
            "{i8count} wide inode numbers among {count} entries"
        )));
    }
    let parent = Ino(read_ino(&fork[2..], wide));
    if !geo.ino_valid(parent) {
        return Err(bad(format!(
            "parent inode {} is outside the filesystem",
            parent.0
        )));
    }
    let ftype = geo.features.ftype;
    // `count` is a u8 and each entry takes at least 5 bytes of the fork.
    let mut entries = Vec::with_capacity(count.min(size / (SF_ENTRY_FIXED + 1 + inosz)));
    let mut off = hdr;
    let mut last_offset = 0u16;
    let mut wide_seen = 0usize;
    for i in 0..count {
        if off + SF_ENTRY_FIXED > size {
            return Err(bad(format!(
                "entry {i} starts past the end of the directory"
            )));
        }
        let namelen = usize::from(fork[off]);
        let offset = u16::from_be_bytes([fork[off + 1], fork[off + 2]]);
        let name_at = off + SF_ENTRY_FIXED;
        let ino_at = name_at + namelen + usize::from(ftype);
        let next = ino_at + inosz;
        if next > size {
            return Err(bad(format!("entry {i} runs past the end of the directory")));
        }
        let name = &fork[name_at..name_at + namelen];
        check_name(name).map_err(|d| bad(format!("entry {i}: {d}")))?;
        if name == b"." || name == b".." {
            return Err(bad(format!(
                "entry {i} is named {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        let file_type = if ftype {
            decode_ftype(fork[name_at + namelen]).map_err(|d| bad(format!("entry {i}: {d}")))?
        } else {
            None
        };
        let e_ino = Ino(read_ino(&fork[ino_at..], wide));
        if !geo.ino_valid(e_ino) {
            return Err(bad(format!(
                "entry {i} points to inode {} outside the filesystem",
                e_ino.0
            )));
        }
        if e_ino.0 > u64::from(u32::MAX) {
            wide_seen += 1;
        }
        if i > 0 && offset <= last_offset {
            return Err(bad(format!(
                "entry {i} offset {offset} is not after the previous one"
            )));
        }
        last_offset = offset;
        entries.push(SfEntry {
            offset,
            name,
            ino: e_ino,
            file_type,
        });
        off = next;
    }
    if wide && wide_seen + usize::from(parent.0 > u64::from(u32::MAX)) != i8count {
        return Err(bad(format!(
            "header counts {i8count} wide inode numbers, found {wide_seen}"
        )));
    }
    Ok(Shortform { parent, entries })
}

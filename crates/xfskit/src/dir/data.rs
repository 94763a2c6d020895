//! Directory blocks in the extent-based forms: mapping a directory block
//! (which may span several filesystem blocks in different extents) to disk,
//! reading it verified, and walking the entries of a data block (shared by
//! the block, leaf, node and btree forms).

use super::{check_name, decode_ftype, DirError};
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32, be64};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Daddr, FsBlock, Geometry, Ino};
use crate::inode::{extents, lookup as map_lookup, Extent, FileType, Fork, Inode};
use std::sync::Arc;

// Layout facts from xfs_da_format.h (v5 directories); to move into the
// xfs-format crate once it has a dir module.

/// Magic of a single-block directory ("XDB3"): data and leaf in one block.
pub const XDB3_MAGIC: u32 = xfs_format::dir::XFS_DIR3_BLOCK_MAGIC;
/// Magic of a data block of a multi-block directory ("XDD3").
pub const XDD3_MAGIC: u32 = xfs_format::dir::XFS_DIR3_DATA_MAGIC;
/// Size of the v3 data block header: the 48-byte self-describing header,
/// three best-free slots (offset, length: 2 bytes each) and 4 bytes pad
/// (v4: 16 bytes, see `Geometry::layout`).
pub const DATA_HDR_SIZE: usize = 64;
/// Data entries and unused regions are aligned to 8 bytes.
pub const DATA_ALIGN: usize = 8;
/// `freetag` value that marks an unused region in a data block.
pub const FREE_TAG: u16 = 0xffff;
/// Block-form tail at the end of the block: entry count and stale count (be32 each).
pub const BLOCK_TAIL_SIZE: usize = 8;
/// A leaf entry: name hash (be32) and data address (be32, in 8-byte units).
pub const LEAF_ENTRY_SIZE: usize = 8;
/// Byte offset of the leaf space in a directory's address space (32 GiB);
/// data blocks live below it.
pub const LEAF_SPACE_OFFSET: u64 = 32 << 30;

/// A live entry found in a data block.
#[derive(Debug, Clone, Copy)]
pub struct RawEntry<'b> {
    /// Byte offset of the entry inside its directory block.
    pub off: usize,
    /// Inode number (checked against the geometry).
    pub ino: Ino,
    /// Name bytes (checked: not empty, no '/' or NUL).
    pub name: &'b [u8],
    /// File type from the entry, if recorded.
    pub file_type: Option<FileType>,
}

/// The extent map of a directory and how to read its blocks.
pub struct DirMap<'a> {
    fs: &'a Fs,
    ino: u64,
    map: Vec<Extent>,
}

impl<'a> DirMap<'a> {
    /// Loads the data fork mapping of directory `dir`.
    pub fn new(fs: &'a Fs, dir: &Inode) -> Result<DirMap<'a>> {
        Ok(DirMap {
            fs,
            ino: dir.ino.0,
            map: extents(fs, dir, Fork::Data)?,
        })
    }

    /// The file system.
    pub fn fs(&self) -> &'a Fs {
        self.fs
    }

    /// The directory's inode number.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// First directory block number of the leaf space.
    pub fn leaf_first_db(&self) -> u64 {
        LEAF_SPACE_OFFSET / u64::from(self.fs.geometry().dir_blk_size)
    }

    /// Converts a da-btree block pointer (in filesystem blocks) to a
    /// directory block number.
    pub fn dablk_to_db(&self, dablk: u32) -> u64 {
        u64::from(dablk) >> self.fs.geometry().dir_blk_log
    }

    /// Number of filesystem blocks the map covers (a bound for walks).
    pub fn mapped_blocks(&self) -> u64 {
        self.map.iter().map(|e| e.len).sum()
    }

    /// Directory block numbers that are mapped below `end_db`, in order,
    /// each once.
    pub fn dbs_below(&self, end_db: u64) -> impl Iterator<Item = u64> + '_ {
        let log = self.fs.geometry().dir_blk_log;
        let mut last: Option<u64> = None;
        self.map
            .iter()
            .flat_map(move |e| {
                let first = e.offset >> log;
                let lastdb = (e.end().saturating_sub(1)) >> log;
                first..=lastdb
            })
            .take_while(move |&db| db < end_db)
            .filter(move |&db| {
                let fresh = last != Some(db);
                last = Some(db);
                fresh
            })
    }

    /// True when directory block `db` has a mapping for its first block.
    pub fn is_mapped(&self, db: u64) -> bool {
        map_lookup(&self.map, db << self.fs.geometry().dir_blk_log).is_ok()
    }

    /// Builds a corruption error for directory block `db`.
    pub fn corrupt(&self, db: u64, detail: impl Into<String>) -> Error {
        DirError::Block.at(self.ino, db, detail)
    }

    /// Reads directory block `db`, verified with `verifier` as one buffer
    /// even when its filesystem blocks lie in different extents.
    pub fn read(&self, db: u64, verifier: &Verifier<'_>) -> Result<Arc<[u8]>> {
        let geo = self.fs.geometry();
        let fsbs = u64::from(geo.dir_blk_fsbs());
        let first = db
            .checked_shl(u32::from(geo.dir_blk_log))
            .ok_or_else(|| self.corrupt(db, "block number overflows"))?;
        let mut pieces: Vec<(FsBlock, u64)> = Vec::new();
        let mut i = 0u64;
        while i < fsbs {
            let fblock = first + i;
            let e = map_lookup(&self.map, fblock).map_err(|_| {
                self.corrupt(
                    db,
                    format!("file block {fblock} of the directory block is a hole"),
                )
            })?;
            if e.unwritten {
                return Err(self.corrupt(db, "directory block is unwritten"));
            }
            let run = (e.end() - fblock).min(fsbs - i);
            pieces.push((FsBlock(e.start.0 + (fblock - e.offset)), run));
            i += run;
        }
        let len = geo.dir_blk_size;
        let daddr0 = geo.fsb_to_daddr(pieces[0].0);
        if pieces.len() == 1 {
            return self.fs.read_meta(daddr0, len, verifier);
        }
        let mut buf = vec![0u8; len as usize];
        let mut at = 0usize;
        for (fsb, run) in &pieces {
            let n = (*run as usize) << geo.block_log;
            let daddr: Daddr = geo.fsb_to_daddr(*fsb);
            self.fs
                .read_bytes(daddr.bytes(), &mut buf[at..at + n])
                .map_err(|e| match e {
                    Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                        self.corrupt(db, "directory block lies past the end of the device")
                    }
                    other => other,
                })?;
            at += n;
        }
        verifier.check(geo, daddr0, &buf)?;
        Ok(buf.into())
    }

    /// Reads data block `db` (XDB3 only allowed at block 0).
    pub fn read_data(&self, db: u64) -> Result<Arc<[u8]>> {
        let magics: &[u32] = if db == 0 {
            &[XDB3_MAGIC, XDD3_MAGIC]
        } else {
            &[XDD3_MAGIC]
        };
        self.read(
            db,
            &Verifier::Dir3 {
                magics,
                owner: self.ino,
            },
        )
    }
}

/// Where the data entries of a verified data block end: the block end for
/// XDD3, the start of the leaf array for XDB3. Also returns the block-form
/// leaf array range.
pub fn data_end(
    geo: &Geometry,
    ino: u64,
    db: u64,
    buf: &[u8],
) -> Result<(usize, Option<(usize, usize)>)> {
    let l = geo.layout();
    if be32(buf, 0) != l.dir_block_magic {
        return Ok((buf.len(), None));
    }
    let tail = buf.len() - BLOCK_TAIL_SIZE;
    let count = be32(buf, tail) as usize;
    let max = (tail - l.dir_data_hdr) / LEAF_ENTRY_SIZE;
    if count > max {
        return Err(DirError::Block.at(ino, db, format!("block tail claims {count} leaf entries")));
    }
    let leaf = tail - count * LEAF_ENTRY_SIZE;
    Ok((leaf, Some((leaf, count))))
}

/// Size of a data entry with a name of `namelen` bytes.
pub fn entry_size(namelen: usize, ftype: bool) -> usize {
    let raw = 8 + 1 + namelen + usize::from(ftype) + 2;
    raw.div_ceil(DATA_ALIGN) * DATA_ALIGN
}

/// Decodes the live entry at `off` (which must not be an unused region)
/// of a data block whose entries end at `end`.
pub fn entry_at<'b>(
    fs: &Fs,
    dir: u64,
    db: u64,
    buf: &'b [u8],
    off: usize,
    end: usize,
) -> Result<RawEntry<'b>> {
    let geo = fs.geometry();
    let bad = |d: String| DirError::Block.at(dir, db, format!("entry at offset {off}: {d}"));
    if off < geo.layout().dir_data_hdr || !off.is_multiple_of(DATA_ALIGN) || off + 9 > end {
        return Err(bad("outside the data area".into()));
    }
    let ino = Ino(be64(buf, off));
    let namelen = usize::from(buf[off + 8]);
    let size = entry_size(namelen, geo.features.ftype);
    if off + size > end {
        return Err(bad(format!(
            "name of {namelen} bytes runs past the data area"
        )));
    }
    let name = &buf[off + 9..off + 9 + namelen];
    check_name(name).map_err(|d| bad(d.into()))?;
    let file_type = if geo.features.ftype {
        decode_ftype(buf[off + 9 + namelen]).map_err(bad)?
    } else {
        None
    };
    let tag = usize::from(be16(buf, off + size - 2));
    if tag != off {
        return Err(bad(format!("tag {tag} does not match")));
    }
    if !geo.ino_valid(ino) {
        return Err(bad(format!("inode {} is outside the filesystem", ino.0)));
    }
    Ok(RawEntry {
        off,
        ino,
        name,
        file_type,
    })
}

/// Walks every live entry of verified data block `db` in order, calling
/// `f` until it returns false. Returns false if `f` stopped the walk.
pub fn walk(
    fs: &Fs,
    dir: u64,
    db: u64,
    buf: &[u8],
    f: &mut dyn FnMut(RawEntry<'_>) -> bool,
) -> Result<bool> {
    let (end, _) = data_end(fs.geometry(), dir, db, buf)?;
    let mut off = fs.geometry().layout().dir_data_hdr;
    // Every step advances by at least DATA_ALIGN bytes, so this ends.
    while off < end {
        if off + 4 > end {
            return Err(DirError::Block.at(dir, db, format!("truncated entry at offset {off}")));
        }
        if be16(buf, off) == FREE_TAG {
            let len = usize::from(be16(buf, off + 2));
            if len < DATA_ALIGN || !len.is_multiple_of(DATA_ALIGN) || off + len > end {
                return Err(DirError::Block.at(
                    dir,
                    db,
                    format!("unused region at {off} has length {len}"),
                ));
            }
            if usize::from(be16(buf, off + len - 2)) != off {
                return Err(DirError::Block.at(
                    dir,
                    db,
                    format!("unused region at {off} has a wrong tag"),
                ));
            }
            off += len;
            continue;
        }
        let e = entry_at(fs, dir, db, buf, off, end)?;
        off += entry_size(e.name.len(), fs.geometry().features.ftype);
        if !f(e) {
            return Ok(false);
        }
    }
    Ok(true)
}

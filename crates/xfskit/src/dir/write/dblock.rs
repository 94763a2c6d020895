//! Changing one directory data block (XDB3 or XDD3): entries and unused
//! regions tile the space from the header to `end` (the block end, or the
//! leaf array of a single-block directory). Unused regions are always
//! merged with their neighbours and the best-free table always lists the
//! three longest, as xfs_repair expects.

use super::layout::BESTFREE_OFF;
use crate::bytes::{be16, be64, put_be16, put_be64};
use crate::dir::data::{entry_size, DATA_ALIGN, DATA_HDR_SIZE, FREE_TAG};
use crate::dir::DirError;
use crate::error::Result;
use crate::geometry::Geometry;

/// One piece of a data block: an entry or an unused region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Byte offset in the block.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
    /// True for an unused region.
    pub free: bool,
}

/// A live entry decoded from a data block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ent {
    /// Byte offset in the block.
    pub off: usize,
    /// Inode number.
    pub ino: u64,
    /// Name.
    pub name: Vec<u8>,
    /// File type code (0 without ftype).
    pub ftype: u8,
}

/// Lists the slots of the data area `DATA_HDR_SIZE..end`.
pub(crate) fn slots(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &[u8],
    end: usize,
) -> Result<Vec<Slot>> {
    let bad = |d: String| DirError::Block.at(owner, db, d);
    let mut v = Vec::new();
    let mut off = DATA_HDR_SIZE;
    while off < end {
        if off + 4 > end {
            return Err(bad(format!("truncated slot at {off}")));
        }
        let (len, free) = if be16(buf, off) == FREE_TAG {
            (usize::from(be16(buf, off + 2)), true)
        } else {
            (
                entry_size(usize::from(buf[off + 8]), geo.features.ftype),
                false,
            )
        };
        if len < DATA_ALIGN || !len.is_multiple_of(DATA_ALIGN) || off + len > end {
            return Err(bad(format!("slot at {off} has length {len}")));
        }
        if usize::from(be16(buf, off + len - 2)) != off {
            return Err(bad(format!("slot at {off} has a wrong tag")));
        }
        v.push(Slot { off, len, free });
        off += len;
    }
    Ok(v)
}

/// Decodes the entry at `off`.
pub(crate) fn entry(geo: &Geometry, buf: &[u8], off: usize) -> Ent {
    let n = usize::from(buf[off + 8]);
    Ent {
        off,
        ino: be64(buf, off),
        name: buf[off + 9..off + 9 + n].to_vec(),
        ftype: if geo.features.ftype {
            buf[off + 9 + n]
        } else {
            0
        },
    }
}

/// Every live entry of the block, in order.
pub(crate) fn entries(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &[u8],
    end: usize,
) -> Result<Vec<Ent>> {
    Ok(slots(geo, owner, db, buf, end)?
        .into_iter()
        .filter(|s| !s.free)
        .map(|s| entry(geo, buf, s.off))
        .collect())
}

/// Writes an unused region.
pub(crate) fn write_free(buf: &mut [u8], off: usize, len: usize) {
    put_be16(buf, off, FREE_TAG);
    put_be16(buf, off + 2, len as u16);
    buf[off + 4..off + len - 2].fill(0);
    put_be16(buf, off + len - 2, off as u16);
}

/// Writes an entry at `off`; returns its size.
pub(crate) fn write_entry(
    geo: &Geometry,
    buf: &mut [u8],
    off: usize,
    ino: u64,
    name: &[u8],
    ftype: u8,
) -> usize {
    let size = entry_size(name.len(), geo.features.ftype);
    buf[off..off + size].fill(0);
    put_be64(buf, off, ino);
    buf[off + 8] = name.len() as u8;
    buf[off + 9..off + 9 + name.len()].copy_from_slice(name);
    if geo.features.ftype {
        buf[off + 9 + name.len()] = ftype;
    }
    put_be16(buf, off + size - 2, off as u16);
    size
}

/// Merges adjacent unused regions in `DATA_HDR_SIZE..end` and rebuilds the
/// best-free table.
pub(crate) fn normalize(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &mut [u8],
    end: usize,
) -> Result<()> {
    let s = slots(geo, owner, db, buf, end)?;
    let mut merged: Vec<Slot> = Vec::with_capacity(s.len());
    for x in s {
        match merged.last_mut() {
            Some(last) if last.free && x.free => {
                last.len += x.len;
                write_free(buf, last.off, last.len);
            }
            _ => merged.push(x),
        }
    }
    set_bestfree(buf, &merged);
    Ok(())
}

fn set_bestfree(buf: &mut [u8], slots: &[Slot]) {
    let mut free: Vec<&Slot> = slots.iter().filter(|s| s.free).collect();
    // Longest first; the earlier region first among equals.
    free.sort_by(|a, b| b.len.cmp(&a.len).then(a.off.cmp(&b.off)));
    for i in 0..3 {
        let (o, l) = free.get(i).map_or((0, 0), |s| (s.off, s.len));
        put_be16(buf, BESTFREE_OFF + 4 * i, o as u16);
        put_be16(buf, BESTFREE_OFF + 4 * i + 2, l as u16);
    }
}

/// Length of the longest unused region (best-free slot 0).
pub(crate) fn best(buf: &[u8]) -> u16 {
    be16(buf, BESTFREE_OFF + 2)
}

/// Writes an empty data area: one unused region `DATA_HDR_SIZE..end`.
pub(crate) fn init_area(buf: &mut [u8], end: usize) {
    write_free(buf, DATA_HDR_SIZE, end - DATA_HDR_SIZE);
    set_bestfree(
        buf,
        &[Slot {
            off: DATA_HDR_SIZE,
            len: end - DATA_HDR_SIZE,
            free: true,
        }],
    );
}

/// Offset of the first unused region of at least `need` bytes, skipping
/// `reserve` bytes at the end of a region ending exactly at `end`.
pub(crate) fn find_fit(slots: &[Slot], need: usize, end: usize, reserve: usize) -> Option<usize> {
    slots.iter().find_map(|s| {
        let usable = if s.off + s.len == end {
            s.len.saturating_sub(reserve)
        } else {
            s.len
        };
        (s.free && usable >= need).then_some(s.off)
    })
}

/// Puts entry `name` into the unused region at `at` (which must hold it),
/// leaving the rest unused. Returns the entry's offset (`at`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &mut [u8],
    end: usize,
    at: usize,
    ino: u64,
    name: &[u8],
    ftype: u8,
) -> Result<usize> {
    let len = usize::from(be16(buf, at + 2));
    let size = entry_size(name.len(), geo.features.ftype);
    if be16(buf, at) != FREE_TAG || len < size {
        return Err(DirError::Block.at(owner, db, format!("no room for an entry at {at}")));
    }
    write_entry(geo, buf, at, ino, name, ftype);
    if len > size {
        write_free(buf, at + size, len - size);
    }
    normalize(geo, owner, db, buf, end)?;
    Ok(at)
}

/// Turns the entry at `off` into unused space (merged with neighbours).
pub(crate) fn remove(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &mut [u8],
    end: usize,
    off: usize,
) -> Result<()> {
    let size = entry_size(usize::from(buf[off + 8]), geo.features.ftype);
    write_free(buf, off, size);
    normalize(geo, owner, db, buf, end)
}

/// True when the data area holds no entries at all.
pub(crate) fn is_empty(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &[u8],
    end: usize,
) -> Result<bool> {
    Ok(slots(geo, owner, db, buf, end)?.iter().all(|s| s.free))
}

/// Finds `name` among the entries; returns the entry.
pub(crate) fn find(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &[u8],
    end: usize,
    name: &[u8],
) -> Result<Option<Ent>> {
    Ok(entries(geo, owner, db, buf, end)?
        .into_iter()
        .find(|e| e.name == name))
}

/// Decodes and checks the entry a leaf entry points to at `off`.
pub(crate) fn entry_checked(
    geo: &Geometry,
    owner: u64,
    db: u64,
    buf: &[u8],
    end: usize,
    off: usize,
) -> Result<Ent> {
    if off < DATA_HDR_SIZE || off + 12 > end || be16(buf, off) == FREE_TAG {
        return Err(DirError::Block.at(owner, db, format!("leaf points to no entry at {off}")));
    }
    let e = entry(geo, buf, off);
    let size = entry_size(e.name.len(), geo.features.ftype);
    if off + size > end || usize::from(be16(buf, off + size - 2)) != off {
        return Err(DirError::Block.at(owner, db, format!("bad entry at {off}")));
    }
    Ok(e)
}

//! The data-block half of the directory fast paths: choosing where a
//! new entry goes from the best-free table, writing it, and keeping the
//! table exact (updated in place when that is provably right, else
//! rebuilt by one walk of the block).

use super::dblock::write_free;
use super::fast::Dims;
use super::layout::BESTFREE_OFF;
use crate::bytes::{be16, put_be16, put_be64};
use crate::dir::data::{entry_size, DATA_ALIGN, DATA_HDR_SIZE, FREE_TAG};
use crate::dir::DirError;
use crate::error::Result;

/// Where a new entry of `need` bytes goes in a data block: the unused
/// region at `at` of `len` bytes, found from the best-free table.
pub(crate) struct Spot {
    pub(crate) at: usize,
    pub(crate) len: usize,
}

/// Chooses the lowest-addressed best-free region that holds `need` bytes
/// (checked against the block); None when no listed region fits.
pub(crate) fn spot(b: &[u8], end: usize, need: usize) -> Option<Spot> {
    let mut best: Option<Spot> = None;
    for k in 0..3 {
        let off = usize::from(be16(b, BESTFREE_OFF + 4 * k));
        let len = usize::from(be16(b, BESTFREE_OFF + 4 * k + 2));
        if len < need || len == 0 {
            continue;
        }
        let ok = off >= DATA_HDR_SIZE
            && off + len <= end
            && off % DATA_ALIGN == 0
            && be16(b, off) == FREE_TAG
            && usize::from(be16(b, off + 2)) == len
            && usize::from(be16(b, off + len - 2)) == off;
        if !ok {
            return None;
        }
        if best.as_ref().is_none_or(|s| off < s.at) {
            best = Some(Spot { at: off, len });
        }
    }
    best
}

/// Writes the entry into the region `s` and keeps the best-free table
/// exact: updated in place when the table still lists the longest three,
/// otherwise rebuilt by a walk of the block.
pub(crate) fn place(
    b: &mut [u8],
    end: usize,
    s: &Spot,
    d: Dims,
    ino: u64,
    name: &[u8],
    ftype: u8,
) -> Result<()> {
    let size = entry_size(name.len(), d.ftype);
    let rest = s.len - size;
    let mut table = read_table(b);
    let full = table.len() == 3;
    let third = table.last().map_or(0, |e| e.1);
    b[s.at..s.at + size].fill(0);
    put_be64(b, s.at, ino);
    b[s.at + 8] = name.len() as u8;
    b[s.at + 9..s.at + 9 + name.len()].copy_from_slice(name);
    if d.ftype {
        b[s.at + 9 + name.len()] = ftype;
    }
    put_be16(b, s.at + size - 2, s.at as u16);
    if rest > 0 {
        write_free(b, s.at + size, rest);
    }
    // A full table guarantees only that unlisted regions are no longer
    // than its third: the shrunk region must still beat that.
    let in_place = !full || rest > third;
    if in_place {
        table.retain(|e| e.0 != s.at);
        if rest > 0 {
            table.push((s.at + size, rest));
        }
    } else {
        table = free_regions(b, end, d)
            .ok_or_else(|| DirError::Block.at(0, 0, "data block does not tile after an insert"))?;
    }
    write_table(b, table);
    Ok(())
}

/// The best-free table's listed regions (offset, length).
pub(crate) fn read_table(b: &[u8]) -> Vec<(usize, usize)> {
    (0..3)
        .map(|k| {
            (
                usize::from(be16(b, BESTFREE_OFF + 4 * k)),
                usize::from(be16(b, BESTFREE_OFF + 4 * k + 2)),
            )
        })
        .filter(|e| e.1 != 0)
        .collect()
}

/// Writes the longest three of `table` as the best-free table (longest
/// first, the earlier region first among equals).
fn write_table(b: &mut [u8], mut table: Vec<(usize, usize)>) {
    table.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    for k in 0..3 {
        let (o, l) = table.get(k).copied().unwrap_or((0, 0));
        put_be16(b, BESTFREE_OFF + 4 * k, o as u16);
        put_be16(b, BESTFREE_OFF + 4 * k + 2, l as u16);
    }
}

/// Shortens the unused region at `at` (of `len` bytes, ending at `end`)
/// by its last `by` bytes, which leave the data area (a single block's
/// leaf array grows into them), and keeps the best-free table exact.
/// `len - by` is zero (the region goes) or at least [`DATA_ALIGN`].
pub(crate) fn shrink_tail(
    b: &mut [u8],
    end: usize,
    at: usize,
    len: usize,
    by: usize,
    d: Dims,
) -> Result<()> {
    let rest = len - by;
    if rest > 0 {
        write_free(b, at, rest);
    }
    let mut table = read_table(b);
    let listed = table.iter().position(|e| e.0 == at);
    match listed {
        // Unlisted: it was no longer than any listed region, and is shorter now.
        None => return Ok(()),
        // A full table may leave out a region longer than the shrunk one.
        Some(_) if table.len() == 3 => {
            table = free_regions(b, end - by, d).ok_or_else(|| {
                DirError::Block.at(0, 0, "data block does not tile after the leaf grew")
            })?;
        }
        Some(i) => {
            if rest > 0 {
                table[i].1 = rest;
            } else {
                table.remove(i);
            }
        }
    }
    write_table(b, table);
    Ok(())
}

/// Every unused region of the data area `DATA_HDR_SIZE..end`.
fn free_regions(b: &[u8], end: usize, d: Dims) -> Option<Vec<(usize, usize)>> {
    let mut v = Vec::new();
    let mut off = DATA_HDR_SIZE;
    while off < end {
        if off + 4 > end {
            return None;
        }
        let (len, free) = if be16(b, off) == FREE_TAG {
            (usize::from(be16(b, off + 2)), true)
        } else {
            (entry_size(usize::from(b[off + 8]), d.ftype), false)
        };
        if len < DATA_ALIGN || off + len > end {
            return None;
        }
        if free {
            v.push((off, len));
        }
        off += len;
    }
    Some(v)
}

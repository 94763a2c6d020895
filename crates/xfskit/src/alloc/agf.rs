//! The AG free space header (AGF) and the AG free list (AGFL) as a
//! transaction sees them: field access, the circular free list, and how
//! many blocks the free list must hold before an allocation.

use crate::buf::Verifier;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr, Geometry};
use crate::trans::{BufId, Trans};
use std::mem::offset_of;
use xfs_format::ag::{self as xag, Agf};

/// Byte offsets of the AGF fields the allocator changes.
pub(crate) mod off {
    use super::*;
    pub const BNO_ROOT: usize = offset_of!(Agf, agf_bno_root);
    pub const CNT_ROOT: usize = offset_of!(Agf, agf_cnt_root);
    pub const BNO_LEVEL: usize = offset_of!(Agf, agf_bno_level);
    pub const CNT_LEVEL: usize = offset_of!(Agf, agf_cnt_level);
    pub const FLFIRST: usize = offset_of!(Agf, agf_flfirst);
    pub const FLLAST: usize = offset_of!(Agf, agf_fllast);
    pub const FLCOUNT: usize = offset_of!(Agf, agf_flcount);
    pub const FREEBLKS: usize = offset_of!(Agf, agf_freeblks);
    pub const LONGEST: usize = offset_of!(Agf, agf_longest);
    pub const BTREEBLKS: usize = offset_of!(Agf, agf_btreeblks);
}

/// Disk address of sector `sector` of AG `agno`'s header area.
fn hdr_daddr(geo: &Geometry, agno: AgNumber, sector: u64) -> Daddr {
    let ag0 = geo.agb_to_daddr(agno, AgBlock(0));
    Daddr(ag0.0 + sector * u64::from(geo.sect_size >> 9))
}

/// Reads AG `agno`'s AGF into the transaction.
pub(crate) fn read_agf(tp: &mut Trans<'_>, agno: AgNumber) -> Result<BufId> {
    let geo = tp.geo();
    let d = hdr_daddr(geo, agno, xag::XFS_AGF_SECTOR);
    tp.read_buf(d, geo.sect_size, &Verifier::Agf { agno: agno.0 })
}

/// Reads AG `agno`'s AGFL into the transaction.
fn read_agfl(tp: &mut Trans<'_>, agno: AgNumber) -> Result<BufId> {
    let geo = tp.geo();
    let d = hdr_daddr(geo, agno, xag::XFS_AGFL_SECTOR);
    tp.read_buf(d, geo.sect_size, &Verifier::Agfl { agno: agno.0 })
}

/// A big-endian u32 field of a held buffer.
pub(crate) fn get(tp: &Trans<'_>, id: BufId, off: usize) -> u32 {
    crate::bytes::be32(tp.buf(id), off)
}

/// Sets a big-endian u32 field of a held buffer.
pub(crate) fn set(tp: &mut Trans<'_>, id: BufId, off: usize, v: u32) {
    tp.buf_mut(id)[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Adds `delta` to a u32 field; an error if it would leave the range.
pub(crate) fn add(
    tp: &mut Trans<'_>,
    id: BufId,
    off: usize,
    delta: i64,
    agno: AgNumber,
) -> Result<()> {
    let v = i64::from(get(tp, id, off)) + delta;
    let v = u32::try_from(v).map_err(|_| {
        Error::corrupt(
            "AGF",
            Location::Other(format!("AG {}", agno.0)),
            format!("counter at byte {off} would become {v}"),
        )
    })?;
    set(tp, id, off, v);
    Ok(())
}

fn agfl_bad(agno: AgNumber, detail: String) -> Error {
    Error::corrupt("AGFL", Location::Other(format!("AG {}", agno.0)), detail)
}

/// Slots in the AGFL.
pub(crate) fn agfl_slots(geo: &Geometry) -> u32 {
    xag::agfl_size(geo.sect_size as usize) as u32
}

/// Takes the first block off the free list (None when it is empty).
/// Counters other than the list's own are the caller's business.
pub(crate) fn freelist_pop(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Option<u32>> {
    let agf = read_agf(tp, agno)?;
    let count = get(tp, agf, off::FLCOUNT);
    if count == 0 {
        return Ok(None);
    }
    let size = agfl_slots(tp.geo());
    let first = get(tp, agf, off::FLFIRST);
    if first >= size || count > size {
        return Err(agfl_bad(agno, format!("first {first}, count {count}")));
    }
    let agfl = read_agfl(tp, agno)?;
    let bno = xag::agfl_entry(tp.buf(agfl), first as usize)
        .ok_or_else(|| agfl_bad(agno, format!("slot {first}")))?;
    if bno == 0 || bno >= tp.geo().ag_len(agno) {
        return Err(agfl_bad(agno, format!("block {bno} in slot {first}")));
    }
    set(
        tp,
        agf,
        off::FLFIRST,
        if first + 1 == size { 0 } else { first + 1 },
    );
    set(tp, agf, off::FLCOUNT, count - 1);
    Ok(Some(bno))
}

/// Puts block `bno` at the end of the free list.
pub(crate) fn freelist_push(tp: &mut Trans<'_>, agno: AgNumber, bno: u32) -> Result<()> {
    let agf = read_agf(tp, agno)?;
    let count = get(tp, agf, off::FLCOUNT);
    let size = agfl_slots(tp.geo());
    let last = get(tp, agf, off::FLLAST);
    if count >= size || last >= size {
        return Err(agfl_bad(
            agno,
            format!("full or bad: last {last}, count {count}"),
        ));
    }
    let slot = if last + 1 == size { 0 } else { last + 1 };
    let agfl = read_agfl(tp, agno)?;
    if !xag::set_agfl_entry(tp.buf_mut(agfl), slot as usize, bno) {
        return Err(agfl_bad(agno, format!("slot {slot}")));
    }
    set(tp, agf, off::FLLAST, slot);
    set(tp, agf, off::FLCOUNT, count + 1);
    Ok(())
}

/// Most levels a free space btree of this filesystem can have.
pub(crate) fn alloc_maxlevels(geo: &Geometry) -> u32 {
    let bs = geo.block_size as usize;
    let leaf_min = (xfs_format::btree::maxrecs(bs, 56, 8, true, 8, 4) / 2).max(1) as u64;
    let node_min = (xfs_format::btree::maxrecs(bs, 56, 8, false, 8, 4) / 2).max(2) as u64;
    let recs = u64::from(geo.ag_blocks).div_ceil(2);
    let mut blocks = recs.div_ceil(leaf_min);
    let mut levels = 1;
    while blocks > 1 {
        blocks = blocks.div_ceil(node_min);
        levels += 1;
    }
    levels
}

/// Blocks the free list must hold so that any one change of both free
/// space btrees (splits up to a new root, then a refill's splits) can
/// take its new blocks from it.
pub(crate) fn min_freelist(geo: &Geometry, bno_level: u32, cnt_level: u32) -> u32 {
    let max = alloc_maxlevels(geo);
    let per = |lv: u32| lv.saturating_add(1).min(max) * 2 - 2;
    per(bno_level.max(1)) + per(cnt_level.max(1))
}

//! Attr-fork blocks inside a transaction: mapping attr-fork block numbers
//! to disk, reading and creating da blocks, growing the fork at its
//! first hole and freeing blocks.

use super::blocks::{init_info, DA_CRC_OFF};
use crate::attr::leaf::ATTR3_LEAF_MAGIC;
use crate::attr::loc;
use crate::attr::node::DA3_NODE_MAGIC;
use crate::bmap;
use crate::buf::Verifier;
use crate::error::{Error, Result};
use crate::geometry::{Daddr, FsBlock};
use crate::inode::{Fork, Inode};
use crate::trans::{BufId, Trans};

/// Attr-fork block numbers are 32-bit on disk.
pub(crate) fn dablk_u32(dablk: u64) -> Result<u32> {
    u32::try_from(dablk)
        .map_err(|_| Error::NoSpace(format!("attr fork block {dablk} beyond 32 bits")))
}

/// Disk address of attr-fork block `dablk`.
pub(crate) fn daddr(tp: &mut Trans<'_>, ip: &Inode, dablk: u64) -> Result<Daddr> {
    match bmap::lookup(tp, ip, Fork::Attr, dablk)? {
        Some(e) if !e.unwritten && e.offset <= dablk && dablk < e.end() => Ok(tp
            .geo()
            .fsb_to_daddr(FsBlock(e.start.0 + (dablk - e.offset)))),
        _ => Err(Error::corrupt(
            "attribute fork",
            loc(ip.ino.0, dablk),
            format!("attr fork block {dablk} is not mapped"),
        )),
    }
}

/// Reads the leaf or node at attr-fork block `dablk`.
pub(crate) fn read_da(tp: &mut Trans<'_>, ip: &Inode, dablk: u64) -> Result<BufId> {
    let d = daddr(tp, ip, dablk)?;
    let v = Verifier::Da3 {
        magics: &[ATTR3_LEAF_MAGIC, DA3_NODE_MAGIC],
        owner: ip.ino.0,
    };
    let bsize = tp.geo().block_size;
    tp.read_buf(d, bsize, &v)
}

/// A new, initialised da block (leaf or node by `magic`) at mapped
/// attr-fork block `dablk`; the caller fills the rest.
pub(crate) fn new_da(tp: &mut Trans<'_>, ip: &Inode, dablk: u64, magic: u16) -> Result<BufId> {
    let d = daddr(tp, ip, dablk)?;
    let geo = tp.geo();
    let id = tp.get_buf(d, geo.block_size, Some(DA_CRC_OFF));
    init_info(tp.buf_mut(id), magic, d.0, &geo.meta_uuid, ip.ino.0);
    Ok(id)
}

/// The first attr-fork block of a hole of `n` blocks (the fork's mapping
/// read from this transaction).
fn first_hole(tp: &mut Trans<'_>, ip: &Inode, n: u64) -> Result<u64> {
    let mut exts = bmap::extents(tp, ip, Fork::Attr)?;
    exts.sort_by_key(|e| e.offset);
    let mut at = 0u64;
    for e in &exts {
        if e.offset >= at + n {
            return Ok(at);
        }
        at = at.max(e.end());
    }
    Ok(at)
}

/// Maps `n` new blocks at the fork's first hole big enough; returns the
/// first attr-fork block.
pub(crate) fn grow(tp: &mut Trans<'_>, ip: &mut Inode, n: u64) -> Result<u64> {
    let at = first_hole(tp, ip, n)?;
    dablk_u32(at + n)?;
    let got = bmap::alloc_range(tp, ip, Fork::Attr, at, n, false, None)?;
    let covered: u64 = got
        .iter()
        .map(|e| e.end().min(at + n).saturating_sub(e.offset.max(at)))
        .sum();
    if covered != n || got.iter().any(|e| e.unwritten) {
        return Err(Error::Invalid(format!(
            "inode {}: allocating attr fork blocks {at}+{n} mapped {covered}",
            ip.ino.0
        )));
    }
    Ok(at)
}

/// Frees attr-fork blocks `dablk..dablk+n`, dropping any copies of them
/// this transaction or earlier ones still hold.
pub(crate) fn shrink(tp: &mut Trans<'_>, ip: &mut Inode, dablk: u64, n: u64) -> Result<()> {
    let bsize = tp.geo().block_size;
    for b in dablk..dablk + n {
        let d = daddr(tp, ip, b)?;
        let id = tp.get_buf(d, bsize, None);
        tp.stale_buf(id);
    }
    bmap::unmap_range(tp, ip, Fork::Attr, dablk, n)
}

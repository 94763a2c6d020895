//! Record-level access to an AG's inode btree and free inode btree, keyed
//! by chunk start: lookups, update, insert, delete, through the generic
//! btree engine's cursor over [`InobtOps`] (roots in the AGI, blocks from
//! the AG's free space, inobtcount block counts).

use super::rec::{IRec, REC_LEN};
use crate::btree::{Cursor, Dir, InoTree, InobtOps};
use crate::error::{Error, Location, Result};
use crate::geometry::AgNumber;
use crate::trans::Trans;

/// Which of the two inode btrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tree {
    /// The inode btree: every chunk.
    Ino,
    /// The free inode btree: chunks with a free inode.
    Fino,
}

fn cursor(tp: &Trans<'_>, agno: AgNumber, tree: Tree) -> Result<Cursor<InobtOps>> {
    let which = match tree {
        Tree::Ino => InoTree::Inobt,
        Tree::Fino => {
            if !tp.geo().features.finobt {
                return Err(Error::Invalid("the filesystem has no finobt".into()));
            }
            InoTree::Finobt
        }
    };
    Ok(InobtOps::cursor(tp, agno, which))
}

fn lookup(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    tree: Tree,
    agino: u32,
    dir: Dir,
) -> Result<Option<IRec>> {
    let mut c = cursor(tp, agno, tree)?;
    if !c.lookup(tp, &agino.to_be_bytes(), dir)? {
        return Ok(None);
    }
    let raw = c.get_rec(tp)?;
    IRec::decode(&raw, tp.geo().features.sparse_inodes).map(Some)
}

/// The record with the greatest start at or below `agino`.
pub(crate) fn lookup_le(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    tree: Tree,
    agino: u32,
) -> Result<Option<IRec>> {
    lookup(tp, agno, tree, agino, Dir::Le)
}

/// The record whose chunk starts exactly at `startino`.
pub(crate) fn lookup_eq(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    tree: Tree,
    startino: u32,
) -> Result<Option<IRec>> {
    lookup(tp, agno, tree, startino, Dir::Eq)
}

/// The record with the smallest start at or above `agino`.
pub(crate) fn lookup_ge(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    tree: Tree,
    agino: u32,
) -> Result<Option<IRec>> {
    lookup(tp, agno, tree, agino, Dir::Ge)
}

fn missing(agno: AgNumber, startino: u32, what: &str) -> Error {
    Error::corrupt(
        "inode btree",
        Location::Other(format!("AG {} chunk {startino}", agno.0)),
        format!("no record to {what}"),
    )
}

fn raw(tp: &Trans<'_>, rec: &IRec) -> [u8; REC_LEN] {
    let mut b = [0u8; REC_LEN];
    rec.encode(&mut b, tp.geo().features.sparse_inodes);
    b
}

/// Overwrites the record with the same start as `rec`.
pub(crate) fn update(tp: &mut Trans<'_>, agno: AgNumber, tree: Tree, rec: &IRec) -> Result<()> {
    let mut c = cursor(tp, agno, tree)?;
    if !c.lookup(tp, &rec.startino.to_be_bytes(), Dir::Eq)? {
        return Err(missing(agno, rec.startino, "update"));
    }
    let b = raw(tp, rec);
    c.update(tp, &b)
}

/// Inserts `rec`; no record may start at the same inode.
pub(crate) fn insert(tp: &mut Trans<'_>, agno: AgNumber, tree: Tree, rec: &IRec) -> Result<()> {
    let mut c = cursor(tp, agno, tree)?;
    let b = raw(tp, rec);
    c.insert(tp, &b)
}

/// Deletes the record of the chunk starting at `startino`.
pub(crate) fn delete(tp: &mut Trans<'_>, agno: AgNumber, tree: Tree, startino: u32) -> Result<()> {
    let mut c = cursor(tp, agno, tree)?;
    if !c.lookup(tp, &startino.to_be_bytes(), Dir::Eq)? {
        return Err(missing(agno, startino, "delete"));
    }
    c.delete(tp)
}

/// Makes AG `agno`'s finobt anew in `tp` (repair's): an empty leaf for
/// its root (the old tree's blocks are left for repair's next round to free),
/// then every inobt record with a free inode inserted. Returns how many.
pub(crate) fn rebuild_finobt(tp: &mut Trans<'_>, agno: AgNumber) -> Result<usize> {
    use crate::btree::{BtreeOps, InoTree, InobtOps};
    use xfs_format::ag::Agi;
    let sparse = tp.geo().features.sparse_inodes;
    let mut recs = Vec::new();
    {
        let mut c = InobtOps::cursor(tp, agno, InoTree::Inobt);
        let mut more = c.lookup(tp, &0u32.to_be_bytes(), Dir::Ge)?;
        while more {
            let r = IRec::decode(&c.get_rec(tp)?, sparse)?;
            if r.freecount > 0 {
                recs.push(r);
            }
            more = c.increment(tp)?;
        }
    }
    let id = super::agi::read_agi(tp, agno)?;
    if tp.geo().features.inobtcnt {
        super::agi::set(tp, id, std::mem::offset_of!(Agi, agi_fblocks), 0);
    }
    let mut ops = InobtOps::new(tp, agno, InoTree::Finobt);
    let ptr = ops.alloc_block(tp, 0)?;
    let s = ops.shape();
    let daddr = ops.ptr_daddr(tp, ptr)?;
    let b = tp.get_buf(daddr, s.block_size as u32, Some(s.crc_off()));
    let uuid = tp.geo().meta_uuid;
    crate::btree::block::init_header(&s, tp.buf_mut(b), 0, daddr.0, &uuid);
    ops.set_root(tp, ptr, 1)?;
    for r in &recs {
        insert(tp, agno, Tree::Fino, r)?;
    }
    Ok(recs.len())
}

/// Makes AG `agno`'s inobt anew in `tp` (repair's) holding `recs` (in
/// order), its counters (`agi_count`, `agi_freecount`, `agi_iblocks`)
/// from them, then its finobt from it. The old trees' blocks are left for
/// repair's next round to free.
pub(crate) fn rebuild_inobt(tp: &mut Trans<'_>, agno: AgNumber, recs: &[IRec]) -> Result<()> {
    use crate::btree::{BtreeOps, InoTree, InobtOps};
    use xfs_format::ag::Agi;
    for r in recs {
        r.check()?;
    }
    let id = super::agi::read_agi(tp, agno)?;
    if tp.geo().features.inobtcnt {
        super::agi::set(tp, id, std::mem::offset_of!(Agi, agi_iblocks), 0);
    }
    let count: u32 = recs.iter().map(|r| u32::from(r.count)).sum();
    let free: u32 = recs.iter().map(|r| u32::from(r.freecount)).sum();
    super::agi::set(tp, id, std::mem::offset_of!(Agi, agi_count), count);
    super::agi::set(tp, id, std::mem::offset_of!(Agi, agi_freecount), free);
    let mut ops = InobtOps::new(tp, agno, InoTree::Inobt);
    let ptr = ops.alloc_block(tp, 0)?;
    let s = ops.shape();
    let daddr = ops.ptr_daddr(tp, ptr)?;
    let b = tp.get_buf(daddr, s.block_size as u32, Some(s.crc_off()));
    let uuid = tp.geo().meta_uuid;
    crate::btree::block::init_header(&s, tp.buf_mut(b), 0, daddr.0, &uuid);
    ops.set_root(tp, ptr, 1)?;
    for r in recs {
        insert(tp, agno, Tree::Ino, r)?;
    }
    if tp.geo().features.finobt {
        rebuild_finobt(tp, agno)?;
    }
    Ok(())
}

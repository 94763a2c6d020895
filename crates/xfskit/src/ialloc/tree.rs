//! Record-level access to an AG's inode btree and free inode btree, keyed
//! by chunk start: lookups, update, insert, delete.
//!
//! TEMPORARY: until the generic btree engine (crate::btree) lands, this
//! module walks the tree itself and changes leaves in place. It handles
//! any height for lookups and updates, but inserts into a full leaf and
//! deletes that empty a non-root leaf return `Unsupported` (they need
//! splits and joins). The functions' signatures are what the rest of
//! ialloc uses; only their bodies move to the engine's cursor.

use super::agi::{self, off};
use super::rec::{IRec, REC_LEN};
use crate::buf::Verifier;
use crate::bytes::{be16, be32};
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber};
use crate::trans::{BufId, Trans};
use xfs_format::btree::{XFS_BTREE_SBLOCK_CRC_LEN as HDR, XFS_FIBT_CRC_MAGIC, XFS_IBT_CRC_MAGIC};

/// Which of the two inode btrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tree {
    /// The inode btree: every chunk.
    Ino,
    /// The free inode btree: chunks with a free inode.
    Fino,
}

const KEY_LEN: usize = 4;
const PTR_LEN: usize = 4;
const MAX_LEVELS: u32 = 9;
const NULL_AGBLOCK: u32 = u32::MAX;
const NUMRECS_OFF: usize = 6;
const RIGHTSIB_OFF: usize = 12;

impl Tree {
    fn magic(self) -> u32 {
        match self {
            Tree::Ino => XFS_IBT_CRC_MAGIC,
            Tree::Fino => XFS_FIBT_CRC_MAGIC,
        }
    }
}

/// Root-to-leaf path: each step is a block and the index chosen in it
/// (at the leaf: how many records sort at or before the target).
struct Path {
    steps: Vec<(BufId, usize)>,
}

impl Path {
    fn leaf(&self) -> (BufId, usize) {
        self.steps[self.steps.len() - 1]
    }
}

fn corrupt(tp: &Trans<'_>, id: BufId, agno: AgNumber, detail: impl Into<String>) -> Error {
    let geo = tp.geo();
    let daddr = tp.buf_daddr(id).0;
    let agbno = (daddr >> (geo.block_log - 9)) - u64::from(agno.0) * u64::from(geo.ag_blocks);
    Error::corrupt(
        "inode btree block",
        Location::AgBlock {
            agno: agno.0,
            agbno: agbno as u32,
        },
        detail,
    )
}

fn read_block(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    tree: Tree,
    agbno: u32,
    level: u32,
) -> Result<BufId> {
    let geo = tp.geo();
    if agbno == 0 || agbno >= geo.ag_len(agno) {
        return Err(Error::corrupt(
            "inode btree block",
            Location::AgBlock {
                agno: agno.0,
                agbno,
            },
            "pointer outside the AG",
        ));
    }
    let daddr = geo.agb_to_daddr(agno, AgBlock(agbno));
    let v = Verifier::ShortBtree {
        magic: tree.magic(),
        agno: agno.0,
        level: Some(level as u16),
    };
    tp.read_buf(daddr, geo.block_size, &v)
}

fn numrecs(tp: &Trans<'_>, id: BufId) -> usize {
    usize::from(be16(tp.buf(id), NUMRECS_OFF))
}

fn set_numrecs(tp: &mut Trans<'_>, id: BufId, n: usize) {
    tp.buf_mut(id)[NUMRECS_OFF..NUMRECS_OFF + 2].copy_from_slice(&(n as u16).to_be_bytes());
}

fn node_max(bs: usize) -> usize {
    (bs - HDR) / (KEY_LEN + PTR_LEN)
}

fn leaf_max(bs: usize) -> usize {
    (bs - HDR) / REC_LEN
}

fn rec_at(tp: &Trans<'_>, id: BufId, i: usize) -> Result<IRec> {
    let o = HDR + i * REC_LEN;
    let sparse = tp.geo().features.sparse_inodes;
    IRec::decode(&tp.buf(id)[o..o + REC_LEN], sparse)
}

/// Descends from the root towards `target`.
fn descend(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    target: u32,
) -> Result<Path> {
    let (root, levels) = match tree {
        Tree::Ino => (
            agi::get(tp, agi_id, off::ROOT),
            agi::get(tp, agi_id, off::LEVEL),
        ),
        Tree::Fino => {
            if !tp.geo().features.finobt {
                return Err(Error::Invalid("the filesystem has no finobt".into()));
            }
            (
                agi::get(tp, agi_id, off::FREE_ROOT),
                agi::get(tp, agi_id, off::FREE_LEVEL),
            )
        }
    };
    if levels == 0 || levels > MAX_LEVELS {
        return Err(Error::corrupt(
            "AGI",
            Location::Other(format!("AG {}", agno.0)),
            format!("inode btree height {levels}"),
        ));
    }
    let bs = tp.geo().block_size as usize;
    let mut steps = Vec::with_capacity(levels as usize);
    let mut agbno = root;
    for level in (1..levels).rev() {
        let id = read_block(tp, agno, tree, agbno, level)?;
        let n = numrecs(tp, id);
        if n == 0 || n > node_max(bs) {
            return Err(corrupt(tp, id, agno, format!("{n} keys in a node")));
        }
        let b = tp.buf(id);
        let mut pick = 0;
        for i in 1..n {
            if be32(b, HDR + i * KEY_LEN) <= target {
                pick = i;
            } else {
                break;
            }
        }
        agbno = be32(b, HDR + node_max(bs) * KEY_LEN + pick * PTR_LEN);
        steps.push((id, pick));
    }
    let id = read_block(tp, agno, tree, agbno, 0)?;
    let n = numrecs(tp, id);
    if n > leaf_max(bs) {
        return Err(corrupt(tp, id, agno, format!("{n} records in a leaf")));
    }
    let b = tp.buf(id);
    let mut p = 0;
    while p < n && be32(b, HDR + p * REC_LEN) <= target {
        p += 1;
    }
    steps.push((id, p));
    Ok(Path { steps })
}

/// The record with the greatest start at or below `agino`.
pub(crate) fn lookup_le(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    agino: u32,
) -> Result<Option<IRec>> {
    let path = descend(tp, agi_id, agno, tree, agino)?;
    let (id, p) = path.leaf();
    if p == 0 {
        return Ok(None);
    }
    rec_at(tp, id, p - 1).map(Some)
}

/// The record whose chunk starts exactly at `startino`.
pub(crate) fn lookup_eq(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    startino: u32,
) -> Result<Option<IRec>> {
    Ok(lookup_le(tp, agi_id, agno, tree, startino)?.filter(|r| r.startino == startino))
}

/// The record with the smallest start at or above `agino`.
pub(crate) fn lookup_ge(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    agino: u32,
) -> Result<Option<IRec>> {
    let path = descend(tp, agi_id, agno, tree, agino)?;
    let (mut id, p) = path.leaf();
    if p > 0 {
        let r = rec_at(tp, id, p - 1)?;
        if r.startino == agino {
            return Ok(Some(r));
        }
    }
    if p < numrecs(tp, id) {
        return rec_at(tp, id, p).map(Some);
    }
    // Past this leaf: the first record of the next non-empty leaf.
    let limit = tp.geo().ag_len(agno);
    for _ in 0..limit {
        let right = be32(tp.buf(id), RIGHTSIB_OFF);
        if right == NULL_AGBLOCK {
            return Ok(None);
        }
        id = read_block(tp, agno, tree, right, 0)?;
        if numrecs(tp, id) > 0 {
            return rec_at(tp, id, 0).map(Some);
        }
    }
    Err(corrupt(tp, id, agno, "sibling chain loops"))
}

/// Overwrites the record with the same start as `rec`.
pub(crate) fn update(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    rec: &IRec,
) -> Result<()> {
    let path = descend(tp, agi_id, agno, tree, rec.startino)?;
    let (id, p) = path.leaf();
    if p == 0 || rec_at(tp, id, p - 1)?.startino != rec.startino {
        return Err(corrupt(
            tp,
            id,
            agno,
            format!("no record for chunk {} to update", rec.startino),
        ));
    }
    let sparse = tp.geo().features.sparse_inodes;
    let o = HDR + (p - 1) * REC_LEN;
    rec.encode(&mut tp.buf_mut(id)[o..o + REC_LEN], sparse);
    Ok(())
}

/// Sets the keys above a leaf whose first record now starts at `key`.
fn fix_keys(tp: &mut Trans<'_>, path: &Path, key: u32) {
    for &(id, idx) in path.steps[..path.steps.len() - 1].iter().rev() {
        let o = HDR + idx * KEY_LEN;
        tp.buf_mut(id)[o..o + KEY_LEN].copy_from_slice(&key.to_be_bytes());
        if idx != 0 {
            break;
        }
    }
}

/// Inserts `rec`; no record may start at the same inode.
pub(crate) fn insert(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    rec: &IRec,
) -> Result<()> {
    let path = descend(tp, agi_id, agno, tree, rec.startino)?;
    let (id, p) = path.leaf();
    let n = numrecs(tp, id);
    if p > 0 && rec_at(tp, id, p - 1)?.startino == rec.startino {
        return Err(corrupt(
            tp,
            id,
            agno,
            format!("chunk {} is already recorded", rec.startino),
        ));
    }
    let bs = tp.geo().block_size as usize;
    if n >= leaf_max(bs) {
        return Err(Error::Unsupported(
            "inode btree leaf split (needs the btree engine)".into(),
        ));
    }
    let sparse = tp.geo().features.sparse_inodes;
    let b = tp.buf_mut(id);
    let at = HDR + p * REC_LEN;
    b.copy_within(at..HDR + n * REC_LEN, at + REC_LEN);
    rec.encode(&mut b[at..at + REC_LEN], sparse);
    set_numrecs(tp, id, n + 1);
    if p == 0 {
        fix_keys(tp, &path, rec.startino);
    }
    Ok(())
}

/// Deletes the record of the chunk starting at `startino`.
pub(crate) fn delete(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    tree: Tree,
    startino: u32,
) -> Result<()> {
    let path = descend(tp, agi_id, agno, tree, startino)?;
    let (id, p) = path.leaf();
    if p == 0 || rec_at(tp, id, p - 1)?.startino != startino {
        return Err(corrupt(
            tp,
            id,
            agno,
            format!("no record for chunk {startino} to delete"),
        ));
    }
    let n = numrecs(tp, id);
    if n == 1 && path.steps.len() > 1 {
        return Err(Error::Unsupported(
            "emptying an inode btree leaf (needs the btree engine)".into(),
        ));
    }
    let b = tp.buf_mut(id);
    let at = HDR + (p - 1) * REC_LEN;
    b.copy_within(at + REC_LEN..HDR + n * REC_LEN, at);
    b[HDR + (n - 1) * REC_LEN..HDR + n * REC_LEN].fill(0);
    set_numrecs(tp, id, n - 1);
    if p == 1 && n > 1 {
        let first = be32(tp.buf(id), HDR);
        fix_keys(tp, &path, first);
    }
    Ok(())
}

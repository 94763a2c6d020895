//! Inode chunks: their size and alignment rules, allocating the blocks of
//! a new (possibly sparse) chunk and initialising its inodes as free
//! inodes, and giving a whole chunk's blocks back.

use super::agi::{self, off};
use super::rec::{IRec, ALL_FREE};
use super::tree::{self, Tree};
use crate::alloc::{self, AllocReq, Owner};
use crate::error::{Error, Result};
use crate::geometry::{AgBlock, AgNumber, Geometry, Ino};
use crate::trans::{BufId, Trans};
use xfs_format::btree::{XFS_INODES_PER_CHUNK, XFS_INODES_PER_HOLEMASK_BIT};
use xfs_format::inode::{Dinode, XFS_DINODE_CRC_OFF, XFS_DINODE_MAGIC, XFS_DINODE_VERSION_3};
use xfs_format::types::{Uuid, NULLAGINO};
use zerocopy::{FromZeros, IntoBytes};

/// Inode chunk geometry derived from the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkGeo {
    /// Blocks of a full allocation (one chunk, or one block holding
    /// several chunks).
    pub blocks: u32,
    /// Blocks of the smallest sparse allocation (== `blocks` without
    /// sparse inodes).
    pub min_blocks: u32,
    /// Alignment of a full chunk in blocks.
    pub cluster_align: u32,
    /// Stripe alignment tried first (0: none).
    pub stripe_align: u32,
    /// Chunk alignment the sparse rules round records to (sb_inoalignmt).
    pub inoalign: u32,
}

impl ChunkGeo {
    /// Derives the chunk rules.
    pub fn new(geo: &Geometry) -> Result<ChunkGeo> {
        if geo.inodes_per_block == 0 || geo.inodes_per_block > 4 * XFS_INODES_PER_CHUNK {
            return Err(Error::Unsupported(format!(
                "inode allocation with {} inodes per block",
                geo.inodes_per_block
            )));
        }
        // A block holding more than 64 inodes is allocated whole, as
        // several chunk records.
        let blocks = (XFS_INODES_PER_CHUNK / geo.inodes_per_block).max(1);
        let min_blocks = if geo.features.sparse_inodes && geo.spino_align != 0 {
            geo.spino_align
        } else {
            blocks
        };
        let cluster_align = if geo.inode_align >= geo.blocks_per_cluster() {
            geo.inode_align.max(1)
        } else {
            1
        };
        let mask = cluster_align - 1;
        let stripe_align = if geo.stripe_unit != 0 && mask != 0 && geo.stripe_unit & mask == 0 {
            geo.stripe_unit
        } else {
            0
        };
        Ok(ChunkGeo {
            blocks,
            min_blocks,
            cluster_align,
            stripe_align,
            inoalign: geo.inode_align.max(1),
        })
    }

    /// True when a block holds several chunks: chunks are then never
    /// freed (as the kernel does), their records stay in both btrees.
    pub fn multi_chunk_blocks(geo: &Geometry) -> bool {
        geo.inodes_per_block > XFS_INODES_PER_CHUNK
    }
}

/// The bytes of a free inode as a new chunk holds it: magic, version 3,
/// generation, no unlinked successor, its own number and the metadata
/// UUID; everything else zero. The CRC is stamped.
pub(crate) fn free_inode_bytes(geo: &Geometry, ino: Ino, gen: u32) -> Vec<u8> {
    let mut d = Dinode::new_zeroed();
    d.di_magic.set(XFS_DINODE_MAGIC);
    d.di_version = XFS_DINODE_VERSION_3;
    d.di_gen.set(gen);
    d.di_next_unlinked.set(NULLAGINO);
    d.di_ino.set(ino.0);
    d.di_uuid = Uuid(geo.meta_uuid);
    let mut raw = vec![0u8; geo.inode_size as usize];
    raw[..d.as_bytes().len()].copy_from_slice(d.as_bytes());
    xfs_format::crc::stamp(&mut raw, XFS_DINODE_CRC_OFF);
    raw
}

/// Logs every inode of `len` new chunk blocks from `agbno` as free.
fn init_inodes(tp: &mut Trans<'_>, agno: AgNumber, agbno: u32, len: u32, gen: u32) {
    let geo = tp.geo();
    let first = geo.ino_make(agno, agbno << geo.inopb_log);
    let n = u64::from(len) * u64::from(geo.inodes_per_block);
    for i in 0..n {
        let ino = Ino(first.0 + i);
        let raw = free_inode_bytes(geo, ino, gen);
        tp.log_inode_raw(ino, raw);
    }
    // A whole chunk is one icreate item in the log (recovery makes the
    // same free inodes); sparse pieces log their inodes one by one.
    if n == u64::from(XFS_INODES_PER_CHUNK) {
        let c = crate::log::item_inode::Icreate {
            agno: agno.0,
            agbno,
            count: n as u32,
            length: len,
            gen,
        };
        tp.log_icreate(c, first, n);
    }
}

/// Allocation mask (one bit per 4 inodes) of `ninodes` inodes starting
/// `shift` holemask bits into the chunk.
pub(crate) fn alloc_mask(ninodes: u32, shift: u32) -> u16 {
    let bits = ninodes / XFS_INODES_PER_HOLEMASK_BIT;
    let m: u32 = if bits >= 16 {
        0xffff
    } else {
        (1u32 << bits) - 1
    };
    ((m << shift) & 0xffff) as u16
}

/// The inobt record of a sparse allocation of `len` blocks at `agbno`:
/// the record starts at the chunk-aligned block at or below it.
pub(crate) fn sparse_rec(geo: &Geometry, cg: &ChunkGeo, agbno: u32, len: u32) -> IRec {
    let ninodes = len << geo.inopb_log;
    let rem = agbno % cg.inoalign;
    let startino = (agbno - rem) << geo.inopb_log;
    let shift = (rem << geo.inopb_log) / XFS_INODES_PER_HOLEMASK_BIT;
    IRec {
        startino,
        holemask: !alloc_mask(ninodes, shift),
        count: ninodes as u8,
        freecount: ninodes as u8,
        free: ALL_FREE,
    }
}

/// True when one more chunk would take inodes past the superblock's
/// maximum share of space (sb_imax_pct).
fn over_max_inodes(tp: &mut Trans<'_>, cg: &ChunkGeo) -> Result<bool> {
    let geo = tp.geo();
    if geo.imax_pct == 0 {
        return Ok(false);
    }
    let blocks = geo.data_blocks * u64::from(geo.imax_pct) / 100 / u64::from(cg.blocks)
        * u64::from(cg.blocks);
    let max = blocks << geo.inopb_log;
    let committed = tp.fs().write_state()?.counters().icount;
    let now = geo.icount as i64 + committed + tp.delta_mut().icount;
    Ok(now.max(0) as u64 + u64::from(XFS_INODES_PER_CHUNK) > max)
}

fn try_alloc(tp: &mut Trans<'_>, req: &AllocReq) -> Result<Option<(u32, u32)>> {
    match alloc::alloc_extent(tp, req) {
        Ok((fsb, len)) => {
            let (_, agbno) = tp.geo().fsb_split(fsb);
            Ok(Some((agbno.0, len)))
        }
        Err(Error::NoSpace(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Allocates a new chunk in AG `agno` (whose AGI is `agi_id`), logs its
/// inodes as free, records it in the inode btrees and counts it in the
/// AGI and superblock. Returns the chunk's (possibly merged) record, or
/// None when the AG has no room for even a sparse chunk.
pub(crate) fn alloc_chunk(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    cg: &ChunkGeo,
) -> Result<Option<IRec>> {
    let geo = tp.geo();
    if over_max_inodes(tp, cg)? {
        return Ok(None);
    }
    let agi_len = agi::get(tp, agi_id, off::LENGTH);
    let newino = agi::get(tp, agi_id, off::NEWINO);
    // Next to the previous chunk when there is one, else near the root.
    let mut target = agi::get(tp, agi_id, off::ROOT);
    if newino != NULLAGINO {
        let after = (newino >> geo.inopb_log) + cg.blocks;
        if after < agi_len {
            target = after;
        }
    }
    let mut req = AllocReq {
        target: geo.fsb_make(agno, AgBlock(target)),
        minlen: cg.blocks,
        maxlen: cg.blocks,
        alignment: if cg.stripe_align != 0 {
            cg.stripe_align
        } else {
            cg.cluster_align
        },
        ag_only: true,
        owner: Owner::Inodes,
    };
    let mut got = try_alloc(tp, &req)?;
    if got.is_none() && cg.stripe_align != 0 {
        req.alignment = cg.cluster_align;
        got = try_alloc(tp, &req)?;
    }
    // Seeded like every generation number of the filesystem (the
    // kernel seeds each chunk randomly; ours is reproducible).
    let gen = tp.fs().write_state()?.next_gen();
    if let Some((agbno, len)) = got {
        if len != cg.blocks {
            return Err(Error::Invalid(format!(
                "block allocator returned {len} blocks, {} asked",
                cg.blocks
            )));
        }
        init_inodes(tp, agno, agbno, len, gen);
        let first = agbno << geo.inopb_log;
        let ninodes = (len << geo.inopb_log).max(XFS_INODES_PER_CHUNK);
        for k in 0..ninodes / XFS_INODES_PER_CHUNK {
            let rec = IRec::full_free(first + k * XFS_INODES_PER_CHUNK);
            tree::insert(tp, agno, Tree::Ino, &rec)?;
            if geo.features.finobt {
                tree::insert(tp, agno, Tree::Fino, &rec)?;
            }
        }
        count_new(tp, agi_id, first, ninodes)?;
        return Ok(Some(IRec::full_free(first)));
    }
    if !(geo.features.sparse_inodes && cg.min_blocks < cg.blocks) {
        return Ok(None);
    }
    // A sparse piece: the record it lands in must start past block 0 and
    // end inside the AG.
    req.minlen = cg.min_blocks;
    req.maxlen = cg.min_blocks;
    req.alignment = cg.min_blocks;
    let Some((agbno, len)) = try_alloc(tp, &req)? else {
        return Ok(None);
    };
    let ag_len = geo.ag_len(agno);
    let max_agbno = (ag_len / cg.inoalign * cg.inoalign).saturating_sub(cg.blocks);
    let rec_start = agbno - agbno % cg.inoalign;
    if len != cg.min_blocks || rec_start < cg.inoalign || rec_start > max_agbno {
        // Our allocator cannot be told these bounds: give the blocks back.
        alloc::free_extent(tp, geo.fsb_make(agno, AgBlock(agbno)), len, &Owner::Inodes)?;
        return Ok(None);
    }
    init_inodes(tp, agno, agbno, len, gen);
    let mut rec = sparse_rec(geo, cg, agbno, len);
    match tree::lookup_eq(tp, agno, Tree::Ino, rec.startino)? {
        None => tree::insert(tp, agno, Tree::Ino, &rec)?,
        Some(old) => {
            if !rec.can_merge(&old) {
                return Err(Error::corrupt(
                    "inobt record",
                    crate::error::Location::Other(format!("AG {} agino {}", agno.0, old.startino)),
                    "a new sparse piece overlaps the chunk's inodes",
                ));
            }
            rec.merge(&old);
            rec.check()?;
            tree::update(tp, agno, Tree::Ino, &rec)?;
        }
    }
    if geo.features.finobt {
        if tree::lookup_eq(tp, agno, Tree::Fino, rec.startino)?.is_some() {
            tree::update(tp, agno, Tree::Fino, &rec)?;
        } else {
            tree::insert(tp, agno, Tree::Fino, &rec)?;
        }
    }
    count_new(tp, agi_id, rec.startino, len << geo.inopb_log)?;
    Ok(Some(rec))
}

fn count_new(tp: &mut Trans<'_>, agi_id: BufId, startino: u32, n: u32) -> Result<()> {
    agi::add(tp, agi_id, off::COUNT, i64::from(n))?;
    agi::add(tp, agi_id, off::FREECOUNT, i64::from(n))?;
    agi::set(tp, agi_id, off::NEWINO, startino);
    let d = tp.delta_mut();
    d.icount += i64::from(n);
    d.ifree += i64::from(n);
    Ok(())
}

/// Gives the blocks of a chunk whose inodes are all free back to free
/// space and drops any pending writes of its inodes.
pub(crate) fn free_chunk(tp: &mut Trans<'_>, agno: AgNumber, rec: &IRec) -> Result<()> {
    let geo = tp.geo();
    let inopb = geo.inodes_per_block;
    let first_agbno = rec.startino >> geo.inopb_log;
    for (idx, n) in rec.present_runs() {
        if idx % inopb != 0 || n % inopb != 0 {
            return Err(Error::corrupt(
                "inobt record",
                crate::error::Location::Other(format!("AG {} agino {}", agno.0, rec.startino)),
                "sparse chunk pieces are not whole blocks",
            ));
        }
        for i in idx..idx + n {
            let ino = geo.ino_make(agno, rec.startino + i);
            tp.unlog_inode(ino);
            let daddr = crate::geometry::Daddr(geo.ino_to_bytes(ino) >> 9);
            let id = tp.get_buf(daddr, geo.inode_size, None);
            tp.stale_buf(id);
        }
        let start = geo.fsb_make(agno, AgBlock(first_agbno + idx / inopb));
        alloc::free_extent(tp, start, n / inopb, &Owner::Inodes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_sparse_records() {
        assert_eq!(alloc_mask(64, 0), 0xffff);
        assert_eq!(alloc_mask(16, 0), 0x000f);
        assert_eq!(alloc_mask(16, 8), 0x0f00);
        assert_eq!(alloc_mask(32, 8), 0xff00);
    }
}

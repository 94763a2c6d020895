//! Walking the inode btree (inobt) of one allocation group.
//!
//! The AGI (sector 2 of the AG) names the root block and height of the
//! inobt. Leaves hold one record per inode chunk of 64 inodes, sorted by
//! the chunk's first AG inode number. A walk descends to the leaf that may
//! hold a starting inode, then follows right-sibling pointers along the
//! leaf level; every block is read through the verified buffer cache.

use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr};
use xfs_format::ag::{Agi, XFS_AGI_SECTOR};
use xfs_format::btree::{
    InobtRec, XFS_IBT_CRC_MAGIC, XFS_INODES_PER_CHUNK, XFS_INODES_PER_HOLEMASK_BIT,
};
use zerocopy::FromBytes;

/// Sibling pointer value meaning "no sibling".
const NULL_AGBLOCK: u32 = u32::MAX;
/// Deepest inode btree we accept (the kernel's limit is far lower).
const MAX_LEVELS: u32 = 9;
/// Bytes of one inobt record, key and pointer.
const REC_LEN: usize = 16;
const KEY_LEN: usize = 4;
const PTR_LEN: usize = 4;
/// Offset of the right sibling pointer in a short btree block header.
const RIGHTSIB_OFF: usize = 12;

/// One inode chunk as the inobt describes it, in a form independent of the
/// sparse-inode feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRec {
    /// AG inode number of the chunk's first inode (chunks are aligned to
    /// sb_inoalignmt blocks, which need not be 64 inodes: 2 KiB inodes
    /// without sparse inodes give chunks of 32 blocks aligned to 16).
    pub startino: u32,
    /// One bit per 4 inodes that have no disk space (always 0 without sparse inodes).
    pub holemask: u16,
    /// Inodes that have disk space.
    pub count: u8,
    /// Free inodes among them.
    pub freecount: u8,
    /// One bit per inode that is free or in a hole.
    pub free: u64,
}

impl ChunkRec {
    /// Bit mask of inodes that are in use (allocated and backed by disk space).
    pub fn allocated(&self) -> u64 {
        !self.free & !self.hole_inodes()
    }

    /// Bit mask of inodes that lie in holes of a sparse chunk.
    pub fn hole_inodes(&self) -> u64 {
        let mut m = 0u64;
        for bit in 0..16 {
            if self.holemask & (1 << bit) != 0 {
                m |= 0xf << (bit * XFS_INODES_PER_HOLEMASK_BIT);
            }
        }
        m
    }

    /// Decodes a raw record, checking it for internal consistency.
    fn decode(raw: &InobtRec, sparse: bool) -> std::result::Result<ChunkRec, String> {
        let startino = raw.ir_startino.get();
        let free = raw.ir_free.get();
        let rec = if sparse {
            ChunkRec {
                startino,
                holemask: raw.ir_holemask.get(),
                count: raw.ir_count,
                freecount: raw.ir_freecount,
                free,
            }
        } else {
            let fc = raw.freecount_full();
            if fc > XFS_INODES_PER_CHUNK {
                return Err(format!("chunk {startino} claims {fc} free inodes"));
            }
            ChunkRec {
                startino,
                holemask: 0,
                count: XFS_INODES_PER_CHUNK as u8,
                freecount: fc as u8,
                free,
            }
        };
        if startino > u32::MAX - XFS_INODES_PER_CHUNK {
            return Err(format!(
                "chunk start {startino} leaves no room for 64 inodes"
            ));
        }
        let holes = rec.hole_inodes();
        let present = XFS_INODES_PER_CHUNK - holes.count_ones();
        if u32::from(rec.count) != present {
            return Err(format!(
                "chunk {startino} counts {} inodes but its holemask leaves {present}",
                rec.count
            ));
        }
        if free & holes != holes {
            return Err(format!("chunk {startino} has holes not marked free"));
        }
        let nfree = (free & !holes).count_ones();
        if u32::from(rec.freecount) != nfree {
            return Err(format!(
                "chunk {startino} counts {} free inodes but its mask has {nfree}",
                rec.freecount
            ));
        }
        Ok(rec)
    }
}

/// Root and height of an AG's inode btree, from its AGI.
#[derive(Debug, Clone, Copy)]
pub struct InobtRoot {
    /// AG block of the root.
    pub root: u32,
    /// Number of levels (1: the root is a leaf).
    pub levels: u32,
    /// Allocated inodes counted by the AGI.
    pub count: u32,
    /// Free inodes counted by the AGI.
    pub freecount: u32,
}

/// Reads the AGI of `agno` and returns its inode btree root.
pub fn read_root(fs: &Fs, agno: u32) -> Result<InobtRoot> {
    let geo = fs.geometry();
    let ag0 = geo.agb_to_daddr(AgNumber(agno), AgBlock(0));
    let daddr = Daddr(ag0.0 + XFS_AGI_SECTOR * u64::from(geo.sect_size / 512));
    let buf = fs.read_meta(daddr, geo.sect_size, &Verifier::Agi { agno })?;
    let agi = Agi::ref_from_prefix(&buf)
        .map_err(|_| {
            Error::corrupt(
                "AGI",
                Location::Daddr(daddr.0),
                "sector shorter than the AGI",
            )
        })?
        .0;
    let root = agi.agi_root.get();
    let levels = agi.agi_level.get();
    let loc = || Location::Other(format!("AG {agno} AGI"));
    if levels == 0 || levels > MAX_LEVELS {
        return Err(Error::corrupt(
            "AGI",
            loc(),
            format!("inode btree height {levels}"),
        ));
    }
    if root == 0 || root >= geo.ag_len(AgNumber(agno)) {
        return Err(Error::corrupt(
            "AGI",
            loc(),
            format!("inode btree root {root} is outside the AG"),
        ));
    }
    Ok(InobtRoot {
        root,
        levels,
        count: agi.agi_count.get(),
        freecount: agi.agi_freecount.get(),
    })
}

/// Walks the inobt of AG `agno` in key order, calling `f` with every chunk
/// whose inodes reach `start_agino` or beyond. `f` returns `false` to stop.
/// Returns the number of btree blocks read.
pub fn walk(
    fs: &Fs,
    agno: u32,
    start_agino: u32,
    mut f: impl FnMut(&ChunkRec) -> Result<bool>,
) -> Result<u64> {
    let geo = fs.geometry();
    let root = read_root(fs, agno)?;
    let ag_len = geo.ag_len(AgNumber(agno));
    let bs = geo.block_size;
    let sparse = geo.features.sparse_inodes;
    let read = |agbno: u32, level: u32| -> Result<std::sync::Arc<[u8]>> {
        if agbno == 0 || agbno >= ag_len {
            return Err(Error::corrupt(
                "inobt block",
                Location::AgBlock { agno, agbno },
                "pointer outside the AG",
            ));
        }
        let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno));
        let v = Verifier::ShortBtree {
            magic: XFS_IBT_CRC_MAGIC,
            agno,
            level: Some(level as u16),
        };
        fs.read_meta(daddr, bs, &v)
    };
    let hdr = geo.layout().sblock_hdr;
    let mut blocks = 0u64;
    // Descend: at each node take the last key at or below the target chunk.
    let target = start_agino & !(XFS_INODES_PER_CHUNK - 1);
    let mut agbno = root.root;
    for level in (1..root.levels).rev() {
        let b = read(agbno, level)?;
        blocks += 1;
        let n = usize::from(be16(&b, 6));
        let maxrecs = (b.len() - hdr) / (KEY_LEN + PTR_LEN);
        let mut pick = 0;
        for i in 0..n {
            if be32(&b, hdr + i * KEY_LEN) <= target {
                pick = i;
            } else {
                break;
            }
        }
        agbno = be32(&b, hdr + maxrecs * KEY_LEN + pick * PTR_LEN);
    }
    // Along the leaves. Each leaf is visited once: the walk cannot take more
    // steps than the AG has blocks, and keys must strictly increase.
    let mut next_min: u64 = 0;
    let mut steps = 0u32;
    loop {
        steps += 1;
        if steps > ag_len {
            return Err(Error::corrupt(
                "inobt block",
                Location::AgBlock { agno, agbno },
                "sibling chain loops",
            ));
        }
        let b = read(agbno, 0)?;
        blocks += 1;
        let n = usize::from(be16(&b, 6));
        for i in 0..n {
            let off = hdr + i * REC_LEN;
            let raw = InobtRec::ref_from_bytes(&b[off..off + REC_LEN]).map_err(|_| {
                Error::corrupt(
                    "inobt block",
                    Location::AgBlock { agno, agbno },
                    "short record",
                )
            })?;
            let rec = ChunkRec::decode(raw, sparse).map_err(|d| {
                Error::corrupt("inobt record", Location::AgBlock { agno, agbno }, d)
            })?;
            if u64::from(rec.startino) < next_min {
                return Err(Error::corrupt(
                    "inobt record",
                    Location::AgBlock { agno, agbno },
                    format!("chunk {} is out of order", rec.startino),
                ));
            }
            next_min = u64::from(rec.startino) + u64::from(XFS_INODES_PER_CHUNK);
            if next_min <= u64::from(start_agino) {
                continue;
            }
            if !f(&rec)? {
                return Ok(blocks);
            }
        }
        let right = be32(&b, RIGHTSIB_OFF);
        if right == NULL_AGBLOCK {
            return Ok(blocks);
        }
        agbno = right;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfs_format::btree::InobtRec;
    use zerocopy::IntoBytes;

    fn raw(startino: u32, holemask: u16, count: u8, freecount: u8, free: u64) -> InobtRec {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&startino.to_be_bytes());
        b[4..6].copy_from_slice(&holemask.to_be_bytes());
        b[6] = count;
        b[7] = freecount;
        b[8..].copy_from_slice(&free.to_be_bytes());
        let r = InobtRec::read_from_bytes(&b).expect("16 bytes");
        assert_eq!(r.as_bytes(), &b);
        r
    }

    #[test]
    fn full_chunk_without_sparse_feature() {
        // Without sparse inodes bytes 4..8 are one be32 free count.
        let r = ChunkRec::decode(&raw(128, 0, 0, 61, !0b111), false).expect("valid");
        assert_eq!(r.count, 64);
        assert_eq!(r.freecount, 61);
        assert_eq!(r.allocated(), 0b111);
    }

    #[test]
    fn sparse_chunk_masks_holes() {
        // Upper half is a hole: 8 holemask bits of 4 inodes each.
        let free = 0xffff_ffff_0000_0000u64 | 0xfff0;
        let r = ChunkRec::decode(&raw(64, 0xff00, 32, 12, free), true).expect("valid");
        assert_eq!(r.hole_inodes(), 0xffff_ffff_0000_0000);
        assert_eq!(r.allocated(), 0xffff_000f);
    }

    #[test]
    fn inconsistent_records_are_rejected() {
        assert!(
            ChunkRec::decode(&raw(u32::MAX - 3, 0, 0, 0, !0), false).is_err(),
            "start too close to the end"
        );
        assert!(
            ChunkRec::decode(&raw(0, 0, 0, 65, !0), false).is_err(),
            "too many free"
        );
        assert!(
            ChunkRec::decode(&raw(0, 0xff00, 64, 0, 0), true).is_err(),
            "count vs holemask"
        );
        assert!(
            ChunkRec::decode(&raw(0, 0xff00, 32, 0, 0), true).is_err(),
            "hole not free"
        );
        assert!(
            ChunkRec::decode(&raw(0, 0, 64, 3, 0b11), true).is_err(),
            "freecount vs mask"
        );
    }
}

//! statfs(2) answered as the kernel's XFS answers for the same image.
//!
//! The kernel counts free blocks as the AG headers do (free-space btrees,
//! free lists and the free-space btrees' own blocks) and then hides what
//! it holds back from users: per AG 8 blocks set aside to refill the free
//! list, the free-space btree blocks themselves, the per-AG metadata
//! reservations (refcount and free-inode btrees may grow to their largest
//! size; the rmap btree's whole worst case) and the reserve pool (5% of the
//! blocks, at most 8,192). A read-only kernel mount takes none of the
//! reservations, so a read-only FUSE mount reports without them too.
//! Inodes: allocated ones plus what the free blocks could still hold,
//! capped by `imaxpct`.

use crate::ops::XfsFuse;
use xfskit::namespace::AgCounters;
use xfskit::{Fs, Geometry};

/// What statfs reports, in filesystem blocks and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Blocks usable for data (the internal log excluded).
    pub blocks: u64,
    /// Free blocks (also what unprivileged users may use).
    pub bfree: u64,
    /// Inodes the filesystem could hold (allocated plus what free space allows).
    pub files: u64,
    /// Free inodes by the same measure.
    pub ffree: u64,
    /// Block size in bytes.
    pub bsize: u32,
}

impl XfsFuse {
    /// What statfs answers now: read-write, as a read-write kernel mount
    /// (with its reservations), computed each time; read-only, once.
    pub(crate) fn statfs_counters(&self) -> Option<Counters> {
        if self.writable {
            return counters(self.fs, true);
        }
        if let Some(c) = self.statfs.get() {
            return Some(*c);
        }
        let c = counters(self.fs, false)?;
        Some(*self.statfs.get_or_init(|| c))
    }
}

/// Bytes of a short-form btree block header with CRCs.
const SBLOCK_CRC_LEN: u32 = 56;
/// Blocks per AG kept back to refill the free list (XFS_ALLOCBT_AGFL_RESERVE + 4).
const SET_ASIDE_PER_AG: u64 = 8;
/// Largest reserve pool, in blocks.
const RESBLKS_MAX: u64 = 8192;
/// Inodes per inode chunk.
const INODES_PER_CHUNK: u64 = 64;

/// Reads the counters of `fs`; `reserved` applies the reservations a
/// read-write kernel mount makes. None when an AG header cannot be read.
pub fn counters(fs: &Fs, reserved: bool) -> Option<Counters> {
    let geo = fs.geometry();
    let ags = fs.space_counters().ok()?;
    Some(compute(geo, &ags, reserved))
}

/// The kernel's statfs arithmetic over the AG counters `ags`.
pub fn compute(geo: &Geometry, ags: &[AgCounters], reserved: bool) -> Counters {
    let log = if geo.log_start.0 != 0 {
        u64::from(geo.log_blocks)
    } else {
        0
    };
    let blocks = geo.data_blocks.saturating_sub(log);
    let mut fdblocks = 0u64;
    let (mut icount, mut ifree) = (0u64, 0u64);
    let mut hidden = 0u64;
    let mut allocbt = 0u64;
    for (agno, ag) in ags.iter().enumerate() {
        fdblocks += ag.free_blocks + ag.freelist_blocks + ag.btree_blocks;
        icount += ag.inodes;
        ifree += ag.free_inodes;
        let mut bt = ag.btree_blocks;
        if geo.features.rmapbt {
            bt = bt.saturating_sub(ag.rmap_blocks.saturating_sub(1));
        }
        allocbt += bt;
        if reserved {
            hidden += ag_reservation(geo, agno as u32, ag);
        }
    }
    let mut unavailable = u64::from(geo.ag_count) * SET_ASIDE_PER_AG + allocbt;
    if reserved {
        unavailable += hidden + (geo.data_blocks / 20).min(RESBLKS_MAX);
    }
    let bfree = fdblocks.saturating_sub(unavailable).min(blocks);
    let fake = bfree << geo.inopb_log;
    let mut files = icount.saturating_add(fake);
    if geo.imax_pct != 0 {
        let chunk_blocks = (INODES_PER_CHUNK / u64::from(geo.inodes_per_block)).max(1);
        let max_blocks = geo.data_blocks * u64::from(geo.imax_pct) / 100 / chunk_blocks;
        let maxicount = (max_blocks * chunk_blocks) << geo.inopb_log;
        files = files.min(maxicount);
    }
    let files = files.max(icount);
    let ffree = files.saturating_sub(icount.saturating_sub(ifree));
    Counters {
        blocks,
        bfree,
        files,
        ffree,
        bsize: geo.block_size,
    }
}

/// Blocks a read-write kernel mount hides for AG `agno`'s metadata
/// btrees: the refcount and free-inode btrees' room to grow (largest size
/// less what they use), and the whole largest rmap btree.
fn ag_reservation(geo: &Geometry, agno: u32, ag: &AgCounters) -> u64 {
    let mut agblocks = u64::from(ag.length);
    let log_ag = geo.log_start.0 != 0 && (geo.log_start.0 >> geo.ag_blk_log) == u64::from(agno);
    if log_ag {
        agblocks = agblocks.saturating_sub(u64::from(geo.log_blocks));
    }
    let bs = geo.block_size;
    let mut ask = 0u64;
    let mut used = 0u64;
    if geo.features.reflink {
        ask += btree_size(bs, 12, 8, agblocks);
        used += ag.refcount_blocks;
    }
    if geo.features.finobt {
        let records = agblocks * u64::from(geo.inodes_per_block) / INODES_PER_CHUNK;
        ask += btree_size(bs, 16, 8, records);
        used += ag.finobt_blocks;
    }
    let mut hidden = ask.saturating_sub(used);
    if geo.features.rmapbt {
        // Keys are (low, high) pairs of 20 bytes each in the nodes.
        hidden += (agblocks / 100).max(btree_size(bs, 24, 44, agblocks));
    }
    hidden
}

/// Blocks of the largest short-form btree holding `records` records of
/// `rec` bytes with node entries of `node` bytes (key and pointer), every
/// block only half full (xfs_btree_calc_size with the minimum records).
fn btree_size(block_size: u32, rec: u32, node: u32, records: u64) -> u64 {
    if records == 0 {
        return 0;
    }
    let room = block_size.saturating_sub(SBLOCK_CRC_LEN);
    let leaf_min = u64::from((room / rec / 2).max(1));
    let node_min = u64::from((room / node / 2).max(1));
    let mut level = records.div_ceil(leaf_min);
    let mut total = level;
    while level > 1 {
        level = level.div_ceil(node_min);
        total += level;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btree_sizes_match_the_kernels() {
        // A 38,400-block AG with 4 KiB blocks and 8 inodes per block: the
        // refcount btree may take 230 blocks, the free-inode btree 40
        // (worked out from a kernel mount's statfs of such an image).
        assert_eq!(btree_size(4096, 12, 8, 38_400), 230);
        assert_eq!(btree_size(4096, 16, 8, 4_800), 40);
        assert_eq!(btree_size(4096, 16, 8, 0), 0);
        assert_eq!(btree_size(4096, 16, 8, 1), 1);
    }
}

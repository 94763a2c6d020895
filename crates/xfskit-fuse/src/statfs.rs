//! Filesystem-wide counters for statfs(2).
//!
//! The superblock counters are lazy on most v5 filesystems, so the free
//! block and inode counts are summed from the AG headers; the superblock
//! values are used when an AG header cannot be read.

use xfs_format::ag::{Agf, Agi, XFS_AGF_MAGIC, XFS_AGI_MAGIC};
use xfskit::Fs;
use zerocopy::FromBytes;

/// What statfs reports, in filesystem blocks and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Blocks usable for data (the internal log excluded).
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Inodes the filesystem could hold (allocated plus what free space allows).
    pub files: u64,
    /// Free inodes by the same measure.
    pub ffree: u64,
    /// Block size in bytes.
    pub bsize: u32,
}

/// Reads the counters of `fs`.
pub fn counters(fs: &Fs) -> Counters {
    let geo = fs.geometry();
    let (mut free, mut icount, mut ifree) = (0u64, 0u64, 0u64);
    let mut ok = true;
    for agno in 0..geo.ag_count {
        match ag_counts(fs, agno) {
            Some((f, c, i)) => {
                free += f;
                icount += c;
                ifree += i;
            }
            None => {
                ok = false;
                break;
            }
        }
    }
    if !ok {
        free = geo.fdblocks;
        icount = geo.icount;
        ifree = geo.ifree;
    }
    let log = if geo.log_start.0 != 0 {
        u64::from(geo.log_blocks)
    } else {
        0
    };
    let blocks = geo.data_blocks.saturating_sub(log);
    let free = free.min(blocks);
    // Like the kernel: free space could still become inodes.
    let files = icount.saturating_add(free.saturating_mul(u64::from(geo.inodes_per_block)));
    let ffree = files.saturating_sub(icount.saturating_sub(ifree));
    Counters {
        blocks,
        bfree: free,
        files,
        ffree,
        bsize: geo.block_size,
    }
}

/// (free blocks incl. the free list, allocated inodes, free inodes) of one AG.
fn ag_counts(fs: &Fs, agno: u32) -> Option<(u64, u64, u64)> {
    let geo = fs.geometry();
    let ag_start = u64::from(agno) * u64::from(geo.ag_blocks) * u64::from(geo.block_size);
    let sect = u64::from(geo.sect_size);
    let mut buf = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(ag_start + sect, &mut buf).ok()?;
    let (agf, _) = Agf::ref_from_prefix(&buf).ok()?;
    if agf.agf_magicnum.get() != XFS_AGF_MAGIC {
        return None;
    }
    let free = u64::from(agf.agf_freeblks.get()) + u64::from(agf.agf_flcount.get());
    fs.read_bytes(ag_start + 2 * sect, &mut buf).ok()?;
    let (agi, _) = Agi::ref_from_prefix(&buf).ok()?;
    if agi.agi_magicnum.get() != XFS_AGI_MAGIC {
        return None;
    }
    Some((
        free,
        u64::from(agi.agi_count.get()),
        u64::from(agi.agi_freecount.get()),
    ))
}

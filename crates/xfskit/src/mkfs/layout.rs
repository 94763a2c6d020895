//! Size rules shared by the mkfs geometry steps: unit conversions, the
//! allocation-group size limits and the default AG split by device size.

/// Smallest AG mkfs formats: 16 MiB.
pub(crate) const AG_MIN_BYTES: u64 = 1 << 24;
/// AGs stay strictly below 1 TiB.
pub(crate) const AG_MAX_BYTES: u64 = 1 << 40;
/// Largest AG number plus one: the AG count limit.
pub(crate) const MAX_AGCOUNT: u64 = u32::MAX as u64;
/// Absolute minimum log length in blocks.
pub(crate) const MIN_LOG_BLOCKS: u64 = 512;
/// Absolute maximum log length in blocks.
pub(crate) const MAX_LOG_BLOCKS: u64 = 1024 * 1024;
/// Floor for the log of filesystems of 1 GiB and more: 10 MiB.
pub(crate) const MIN_LOG_BYTES: u64 = 10 << 20;
/// The log must stay below 2 GiB; mkfs keeps it 10 MiB under.
pub(crate) const MAX_LOG_BYTES: u64 = (2 << 30) - MIN_LOG_BYTES;
/// Log record header size: larger log sectors imply a log stripe unit.
pub(crate) const LOG_HEADER_SIZE: u32 = 512;
/// Inodes per inode chunk.
pub(crate) const INODES_PER_CHUNK: u64 = 64;
/// Unscaled inode cluster buffer size in bytes.
pub(crate) const INODE_CLUSTER_SIZE: u64 = 8192;
/// Default percentage of space that inodes may take on small filesystems.
pub(crate) const DEFAULT_IMAXPCT: u32 = 25;

/// Blocks of `count` MiB at block size `1 << blog`.
pub(crate) fn mib_blocks(count: u64, blog: u32) -> u64 {
    count << (20 - blog)
}

/// Blocks of `count` GiB at block size `1 << blog`.
pub(crate) fn gib_blocks(count: u64, blog: u32) -> u64 {
    count << (30 - blog)
}

/// Blocks of `count` TiB at block size `1 << blog`.
pub(crate) fn tib_blocks(count: u64, blog: u32) -> u64 {
    count << (40 - blog)
}

/// Minimum AG length in blocks.
pub(crate) fn ag_min_blocks(blog: u32) -> u64 {
    AG_MIN_BYTES >> blog
}

/// Maximum AG length in blocks.
pub(crate) fn ag_max_blocks(blog: u32) -> u64 {
    (AG_MAX_BYTES - 1) >> blog
}

/// Index of the highest set bit (floor of log2); 0 for 0.
pub(crate) fn highbit(v: u64) -> u32 {
    63u32.saturating_sub(v.leading_zeros())
}

/// Smallest `l` with `1 << l >= v`.
pub(crate) fn log2_roundup(v: u64) -> u32 {
    if v <= 1 {
        0
    } else {
        64 - (v - 1).leading_zeros()
    }
}

/// Round `v` up to a multiple of `unit` (`unit > 0`).
pub(crate) fn round_up(v: u64, unit: u64) -> u64 {
    v.div_ceil(unit) * unit
}

/// The AG size and count mkfs picks when the user gives neither.
///
/// Devices of 32 TiB and more, and single devices (no stripe unit) of 4 TiB
/// and more, get maximum-size AGs.  Single devices from 128 MiB get 4 AGs.
/// Striped (or tiny) devices get 2..32 AGs depending on size.  The AG size is
/// rounded up when the split is uneven so no tail is lost.
pub(crate) fn default_ag_geometry(blog: u32, dblocks: u64, multidisk: bool) -> (u64, u64) {
    let agsize =
        if dblocks >= tib_blocks(32, blog) || (!multidisk && dblocks >= tib_blocks(4, blog)) {
            ag_max_blocks(blog)
        } else {
            let shift = if !multidisk && dblocks >= mib_blocks(128, blog) {
                2
            } else {
                let mut shift = 5u32;
                for (limit, strict) in [
                    (gib_blocks(512, blog), false),
                    (gib_blocks(8, blog), false),
                    (mib_blocks(128, blog), true),
                    (mib_blocks(64, blog), true),
                    (mib_blocks(32, blog), true),
                ] {
                    if (strict && dblocks < limit) || (!strict && dblocks <= limit) {
                        shift -= 1;
                    }
                }
                shift
            };
            let mut blocks = dblocks >> shift;
            if dblocks & ((1u64 << shift) - 1) != 0 && blocks < ag_max_blocks(blog) {
                blocks += 1;
            }
            blocks
        };
    (agsize, dblocks.div_ceil(agsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_split() {
        // 1 GiB of 4 KiB blocks on a single disk: four 64k-block AGs.
        assert_eq!(default_ag_geometry(12, 262_144, false), (65_536, 4));
        // Uneven split rounds the AG size up.
        assert_eq!(default_ag_geometry(12, 262_147, false), (65_537, 4));
        // 16 TiB: 1 TiB - 1 block AGs, 17 of them.
        let d = tib_blocks(16, 12);
        assert_eq!(default_ag_geometry(12, d, false), (ag_max_blocks(12), 17));
    }

    #[test]
    fn logs() {
        assert_eq!(log2_roundup(65_536), 16);
        assert_eq!(log2_roundup(65_537), 17);
        assert_eq!(highbit(4096), 12);
    }
}

//! Transaction log reservations and the smallest log a filesystem may have.
//!
//! Every kind of transaction reserves, before it starts, the log space its
//! worst case could need: the buffers it may dirty (each with a 128-byte
//! format overhead), its inodes as logged in memory format, and for
//! permanent reservations a count of rolls. The log must hold two of the
//! largest such transactions with their record headers and padding, three
//! times over (the kernel's rule, mirrored by mkfs.xfs), or the kernel
//! refuses to mount a v5 filesystem. Everything here follows from the
//! superblock ([`ResvGeometry`]), so mkfs and an open filesystem compute the
//! same numbers.
//!
//! Two sets of rules differ in small ways ([`Rules`]): mkfs.xfs up to 6.15
//! (worst-case 256 KiB log records; a directory removal frees into four
//! sectors' worth of AG headers) and the kernel from 6.16 (the mount's own
//! 32 KiB records or the log stripe unit, five sectors, and the atomic
//! write completion reservation in the table).
//!
//! Filesystems without parent pointers keep the historical over-estimates
//! of the first reflink and rmap code (rmap btrees of 9 levels on reflink
//! filesystems, eight rolls for writes and truncates, refcount splits inside
//! the allocation transactions, an xattr size counted in bytes where blocks
//! were meant), so that a new mkfs never makes a log an old kernel refuses.

/// The superblock fields the reservations depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResvGeometry {
    /// sb_blocklog.
    pub block_log: u32,
    /// sb_sectsize in bytes.
    pub sect_size: u32,
    /// sb_inodesize in bytes.
    pub inode_size: u32,
    /// sb_inopblog.
    pub inopb_log: u32,
    /// sb_agblocks.
    pub ag_blocks: u32,
    /// sb_agblklog.
    pub ag_blk_log: u32,
    /// sb_dblocks.
    pub data_blocks: u64,
    /// sb_dirblklog (directory block = block << this).
    pub dir_blk_log: u32,
    /// sb_inoalignmt in blocks.
    pub inode_align: u32,
    /// sb_logsunit in bytes (0 or 1: none).
    pub log_sunit: u32,
    /// Version 2 log (the LOGV2 bit; always on v5).
    pub logv2: bool,
    /// v5 (crc) metadata: long btree headers, v3 inodes.
    pub v5: bool,
    /// Free inode btree.
    pub finobt: bool,
    /// Reverse-mapping btree.
    pub rmapbt: bool,
    /// Reference-count btree.
    pub reflink: bool,
    /// 64-bit extent counters.
    pub nrext64: bool,
    /// Parent pointers (turns on the corrected minimum log size rules).
    pub parent: bool,
    /// Metadata directory tree (realtime groups when there is a realtime section).
    pub metadir: bool,
    /// sb_rblocks (0: no realtime section).
    pub rt_blocks: u64,
    /// sb_rextsize in blocks.
    pub rt_extsize: u32,
    /// sb_rgextents (realtime groups only).
    pub rg_extents: u32,
    /// Blocks of the realtime summary file as the mount sizes it (0 at mkfs
    /// time: mkfs.xfs computes the minimum before the section is laid out).
    pub rsum_blocks: u64,
}

/// Which tool's rules to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// mkfs.xfs 6.1 to 6.15 (and xfs_db's `logres` of those releases).
    Mkfs,
    /// The kernel from 6.16 (6.18 here) at mount time, default mount options.
    Kernel,
}

/// One reservation: bytes per transaction and the number of rolls it
/// pre-reserves (0 or 1: a one-shot transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransRes {
    /// Log space of one transaction, in bytes.
    pub logres: u64,
    /// Rolls reserved up front.
    pub logcount: u64,
}

impl TransRes {
    fn new(logres: u64, logcount: u64) -> TransRes {
        TransRes { logres, logcount }
    }

    /// Bytes the reservation holds in the log at once.
    pub fn total(&self) -> u64 {
        if self.logcount > 1 {
            self.logres * self.logcount
        } else {
            self.logres
        }
    }
}

mod calc;

use calc::{Mount, BBSIZE, OP_HEADER, RTBUF_BLKINFO, TRANS_HEADER};

/// rmap btree height the first reflink code always assumed.
const OLD_REFLINK_RMAP_MAXLEVELS: u64 = 9;
/// Rolls the first reflink code reserved for writes and truncates.
const OLD_REFLINK_LOG_COUNT: u64 = 8;
/// The log holds this many maximal transactions' worth (mkfs and kernel).
const MIN_LOG_FACTOR: u64 = 3;
/// Worst-case (largest) log record, as userspace assumes.
const MAX_RECORD_BSIZE: u64 = 256 * 1024;
/// Default in-core log record of a mount, and the v1 record size.
const BIG_RECORD_BSIZE: u64 = 32 * 1024;
/// Data bytes whose cycle words one header sector holds.
const HEADER_CYCLE_SIZE: u64 = 32 * 1024;

/// The reservation table the minimum log size is computed from (with the
/// historical over-estimates on filesystems without parent pointers).
fn minlog_table(g: &ResvGeometry, rules: Rules) -> Vec<TransRes> {
    let m = Mount::new(g, rules);
    let atomic_ioend = m.table()[1];
    if g.parent {
        let mut t = m.table();
        if rules == Rules::Kernel {
            t.push(atomic_ioend);
        }
        return t;
    }
    let mut old = Mount::new(g, rules);
    if g.rmapbt && g.reflink {
        old.rmap_maxlevels = OLD_REFLINK_RMAP_MAXLEVELS;
    }
    let mut t = old.table();
    if rules == Rules::Kernel {
        // The atomic write completion reservation is the running mount's
        // truncate reservation, not the historical one.
        t.push(atomic_ioend);
    }
    let counts = if g.reflink {
        Some(OLD_REFLINK_LOG_COUNT)
    } else if g.rmapbt {
        Some(2)
    } else {
        None
    };
    if let Some(c) = counts {
        t[0].logcount = c;
        t[1].logcount = c;
        t[23].logcount = c;
    }
    t[0].logres = old.write_res(true);
    t[1].logres = old.itruncate_res(true);
    t[23].logres = old.write_res(true) + old.buf_res(1, old.bs - 1);
    t
}

/// The largest reservation of the table, as the minimum log size sees it
/// (xfs_db's `logres` prints it as "minlogsize").
pub fn max_trans_res(g: &ResvGeometry, rules: Rules) -> TransRes {
    let table = minlog_table(g, rules);
    let mut best = TransRes::default();
    let mut space = 0;
    for r in &table {
        if r.total() > space {
            space = r.total();
            best = *r;
        }
    }
    let attr_space = Mount::new(g, rules).max_attrsetm_res();
    if attr_space > space {
        best = TransRes::new(attr_space, 3);
    }
    best
}

/// Bytes a transaction of `logres` bytes takes in the log with its record
/// headers, op headers and padding.
fn unit_res(g: &ResvGeometry, rules: Rules, logres: u64) -> u64 {
    let sunit = u64::from(g.log_sunit);
    let (iclog_size, hdr_size) = if !g.logv2 {
        (BIG_RECORD_BSIZE, BBSIZE)
    } else {
        let size = match rules {
            Rules::Mkfs => MAX_RECORD_BSIZE,
            Rules::Kernel => BIG_RECORD_BSIZE.max(sunit),
        };
        (size, size.div_ceil(HEADER_CYCLE_SIZE) * BBSIZE)
    };
    let mut unit = logres + OP_HEADER + TRANS_HEADER + OP_HEADER;
    let space = iclog_size - hdr_size;
    let mut headers = unit.div_ceil(space);
    unit += OP_HEADER * headers;
    while headers == 0 || unit.div_ceil(space) > headers {
        unit += OP_HEADER;
        headers += 1;
    }
    unit += hdr_size * headers;
    unit += hdr_size;
    unit += if g.logv2 && sunit > 1 {
        2 * sunit
    } else {
        2 * BBSIZE
    };
    unit
}

/// The smallest log, in filesystem blocks, the reservations allow: what
/// mkfs.xfs computes before its fixed floors, and what the kernel demands
/// of a v5 filesystem at mount.
pub fn min_log_blocks(g: &ResvGeometry, rules: Rules) -> u64 {
    let max = max_trans_res(g, rules);
    let mut bytes = unit_res(g, rules, max.logres);
    if max.logcount > 1 {
        bytes *= max.logcount;
    }
    let bbs = bytes.div_ceil(BBSIZE);
    let lsunit_bb = if g.logv2 && g.log_sunit > 1 {
        u64::from(g.log_sunit).div_ceil(BBSIZE)
    } else {
        0
    };
    // Two maximal transactions with their padding, and a factor of three.
    let two = if lsunit_bb > 0 {
        bbs.div_ceil(lsunit_bb) * lsunit_bb + 2 * lsunit_bb
    } else {
        // The historical slack: 1024 basic blocks.
        bbs + 2 * BBSIZE
    };
    let min_bb = two * MIN_LOG_FACTOR;
    min_bb.div_ceil(1 << (g.block_log - 9))
}

/// Refuses to write to a v5 filesystem whose log is smaller than the
/// kernel's minimum for its geometry: Linux refuses to mount such a
/// filesystem at all ("Log size N blocks too small"), since transactions
/// could then wait forever for log space. A v4 filesystem only gets a
/// warning from the kernel; xfskit writes no v4 filesystem anyway.
pub fn require_log_size(geo: &crate::geometry::Geometry) -> crate::error::Result<()> {
    if !geo.v5 {
        return Ok(());
    }
    let min = min_log_blocks(&ResvGeometry::from_geometry(geo), Rules::Kernel);
    if u64::from(geo.log_blocks) < min {
        return Err(crate::error::Error::Unsupported(format!(
            "writing to a filesystem whose log is too small: {} blocks, the minimum for its \
             geometry is {min} blocks (Linux refuses to mount it: \"Log size {} blocks too small, \
             minimum size is {min} blocks\")",
            geo.log_blocks, geo.log_blocks
        )));
    }
    Ok(())
}

impl ResvGeometry {
    /// The geometry of an existing filesystem, as the kernel sees it at
    /// mount (the realtime summary sized from the superblock).
    pub fn from_geometry(geo: &crate::geometry::Geometry) -> ResvGeometry {
        use xfs_format::sb as fsb;
        let f = &geo.features;
        let bs = u64::from(geo.block_size);
        let metadir = f.metadir;
        let realtime = geo.rt_blocks > 0;
        let rsum_blocks = if realtime && !geo.zoned {
            let extents = if geo.rt_extents == 0 {
                0
            } else if metadir {
                u64::from(geo.rg_extents)
            } else {
                geo.rt_extents
            };
            let hdr = if metadir { RTBUF_BLKINFO } else { 0 };
            let levels = u64::from(compute_rextslog(extents)) + 1;
            let bmblocks = extents.div_ceil((bs - hdr) * 8);
            // A hostile superblock cannot overflow the sums below.
            bmblocks
                .saturating_mul(levels)
                .div_ceil((bs - hdr) / 4)
                .min(u64::from(u32::MAX))
        } else {
            0
        };
        ResvGeometry {
            block_log: u32::from(geo.block_log),
            sect_size: geo.sect_size,
            inode_size: geo.inode_size,
            inopb_log: u32::from(geo.inopb_log),
            ag_blocks: geo.ag_blocks,
            ag_blk_log: u32::from(geo.ag_blk_log),
            data_blocks: geo.data_blocks,
            dir_blk_log: u32::from(geo.dir_blk_log),
            inode_align: geo.inode_align,
            log_sunit: geo.log_sunit,
            logv2: geo.v5 || geo.versionnum & fsb::XFS_SB_VERSION_LOGV2BIT != 0,
            v5: geo.v5,
            finobt: f.finobt,
            rmapbt: f.rmapbt,
            reflink: f.reflink,
            nrext64: f.nrext64,
            parent: geo.v5 && geo.features_incompat & fsb::XFS_SB_FEAT_INCOMPAT_PARENT != 0,
            metadir,
            rt_blocks: geo.rt_blocks,
            rt_extsize: geo.rt_extsize,
            rg_extents: geo.rg_extents,
            rsum_blocks,
        }
    }
}

/// log2 of the realtime extent count, rounded down (0 for none).
fn compute_rextslog(extents: u64) -> u32 {
    if extents == 0 {
        0
    } else {
        63 - extents.leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v5(block_log: u32) -> ResvGeometry {
        ResvGeometry {
            block_log,
            sect_size: 512,
            inode_size: 512,
            inopb_log: block_log - 9,
            ag_blocks: 65536,
            ag_blk_log: 16,
            data_blocks: 4 * 65536,
            dir_blk_log: 12u32.saturating_sub(block_log),
            inode_align: (32768 >> block_log).max(1),
            log_sunit: 1,
            logv2: true,
            v5: true,
            finobt: true,
            rmapbt: false,
            reflink: false,
            nrext64: false,
            parent: false,
            metadir: false,
            rt_blocks: 0,
            rt_extsize: 1,
            rg_extents: 0,
            rsum_blocks: 0,
        }
    }

    #[test]
    fn minimum_grows_with_features_and_stripe_unit() {
        let base = v5(12);
        let plain = min_log_blocks(&base, Rules::Mkfs);
        let mut big = base;
        big.inode_size = 2048;
        big.inopb_log = 1;
        assert!(min_log_blocks(&big, Rules::Mkfs) > plain);
        let mut su = base;
        su.log_sunit = 256 * 1024;
        let with_su = min_log_blocks(&su, Rules::Mkfs);
        assert!(with_su > plain);
        // A stripe unit rounds the minimum to whole units (64 blocks).
        assert_eq!(with_su % 64, 0, "{with_su}");
    }
}

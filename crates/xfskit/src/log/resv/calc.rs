//! The reservation formulas: btree heights and sizes derived from the
//! superblock as a mount derives them, then one reservation per kind of
//! transaction, in the kernel's table order.

use super::{ResvGeometry, Rules, TransRes};
// Sizes of the log structures the reservations count (bytes).
pub(super) const OP_HEADER: u64 = 12;
const BUF_LOG_FORMAT: u64 = 88;
const INODE_LOG_FORMAT: u64 = 56;
pub(super) const TRANS_HEADER: u64 = 16;
const ATTRI_LOG_FORMAT: u64 = 40;
const PARENT_REC: u64 = 12;
const DQ_LOGFORMAT: u64 = 24;
const DISK_DQUOT: u64 = 104;
const MAXNAMELEN: u64 = 256;
const SYMLINK_MAXLEN: u64 = 1024;
const DA_NODE_MAXDEPTH: u64 = 5;
pub(super) const BBSIZE: u64 = 512;
pub(super) const RTBUF_BLKINFO: u64 = 48;
/// Longest extent a bmbt record holds (21 bits).
const MAX_BMBT_EXTLEN: u64 = (1 << 21) - 1;
/// Quota changes every namespace transaction may carry: six dquots.
const DQUOT_LOGRES: u64 = (DQ_LOGFORMAT + DISK_DQUOT) * 6;

fn round_up4(v: u64) -> u64 {
    v.div_ceil(4) * 4
}

/// Tallest tree of `records` records at the minimum fan-outs.
fn compute_maxlevels(minrecs: [u64; 2], records: u64) -> u64 {
    let mut blocks = records.div_ceil(minrecs[0].max(1));
    let mut height = 1;
    while blocks > 1 {
        blocks = blocks.div_ceil(minrecs[1].max(2));
        height += 1;
    }
    height
}

/// Tallest tree that `leaf_blocks` blocks can make (a root of two pointers).
fn space_to_height(minrecs: [u64; 2], leaf_blocks: u64) -> u64 {
    if leaf_blocks < 1 {
        return 0;
    }
    let mut node_blocks: u64 = 2;
    let mut left = leaf_blocks - 1;
    let mut height = 1;
    while node_blocks < left {
        left -= node_blocks;
        node_blocks = node_blocks.saturating_mul(minrecs[1].max(2));
        height += 1;
    }
    height
}

/// Derived geometry: btree heights and sizes, as a mount computes them.
pub(super) struct Mount {
    g: ResvGeometry,
    rules: Rules,
    pub(super) bs: u64,
    sect: u64,
    alloc_maxlevels: u64,
    alloc_mxr0: u64,
    alloc_mnr0: u64,
    inobt_maxlevels: u64,
    pub(super) rmap_maxlevels: u64,
    refc_maxlevels: u64,
    rtrmap_maxlevels: u64,
    rtrefc_maxlevels: u64,
    bm_maxlevels: [u64; 2],
    ialloc_blks: u64,
    inode_cluster_size: u64,
    dir_fsbcount: u64,
    realtime: bool,
}

const DATA: usize = 0;
const ATTR: usize = 1;

impl Mount {
    pub(super) fn new(g: &ResvGeometry, rules: Rules) -> Mount {
        let bs = 1u64 << g.block_log;
        let short_hdr = if g.v5 { 56 } else { 16 };
        let long_hdr = if g.v5 { 72 } else { 24 };
        let half = |leaf: u64, node: u64| [leaf / 2, node / 2];
        let alloc = half((bs - short_hdr) / 8, (bs - short_hdr) / 12);
        let inobt = half((bs - short_hdr) / 16, (bs - short_hdr) / 8);
        let rmap = half((bs - 56) / 24, (bs - 56) / 44);
        let refc = half((bs - 56) / 12, (bs - 56) / 8);
        let rtrmap = half((bs - 72) / 24, (bs - 72) / 48);
        let rtrefc = half((bs - 72) / 12, (bs - 72) / 12);
        let bmbt = half((bs - long_hdr) / 16, (bs - long_hdr) / 16);
        let agblocks = u64::from(g.ag_blocks);

        let alloc_maxlevels = compute_maxlevels(alloc, agblocks.div_ceil(2));
        let agino_log = (g.inopb_log + g.ag_blk_log).min(63);
        let inobt_maxlevels = compute_maxlevels(inobt, (1u64 << agino_log) >> 6);
        let rmap_maxlevels = match (g.rmapbt, g.reflink) {
            (false, _) => 0,
            (true, true) => space_to_height(rmap, agblocks),
            (true, false) => compute_maxlevels(rmap, agblocks),
        };
        let refc_maxlevels = if g.reflink {
            compute_maxlevels(refc, agblocks)
        } else {
            0
        };
        let realtime = g.rt_blocks > 0;
        let rtgroups = g.metadir && realtime;
        let rg_blocks = u64::from(g.rg_extents) * u64::from(g.rt_extsize);
        let rtreflink = rtgroups && g.reflink;
        let rtrmap_maxlevels = if rtgroups && g.rmapbt {
            let d = space_to_height(rtrmap, g.data_blocks);
            if rtreflink {
                d + 1
            } else {
                d.min(compute_maxlevels(rtrmap, rg_blocks)) + 1
            }
        } else {
            0
        };
        let rtrefc_maxlevels = if rtreflink {
            let d = space_to_height(rtrefc, g.data_blocks);
            d.min(compute_maxlevels(rtrefc, u64::from(g.rg_extents))) + 1
        } else {
            0
        };

        // Data fork: up to 2^31-1 extents (2^48-1 with nrext64), attr fork
        // 2^15-1 (2^32-1); the inode root holds 3 (data) or 2 (attr)
        // key/pointer pairs at least.
        let max_extents = if g.nrext64 {
            [(1u64 << 48) - 1, (1u64 << 32) - 1]
        } else {
            [(1u64 << 31) - 1, (1u64 << 15) - 1]
        };
        let mut bm_maxlevels = [0; 2];
        for (fork, root_recs) in [(DATA, 3u64), (ATTR, 2u64)] {
            let mut blocks = max_extents[fork].div_ceil(bmbt[0]);
            let mut level = 1;
            while blocks > 1 {
                blocks = if blocks <= root_recs {
                    1
                } else {
                    blocks.div_ceil(bmbt[1])
                };
                level += 1;
            }
            bm_maxlevels[fork] = level;
        }

        let inopblock = 1u64 << g.inopb_log;
        let ialloc_blks = 64u64.max(inopblock) >> g.inopb_log;
        let mut cluster_raw: u64 = 8192;
        if g.v5 {
            let scaled = cluster_raw * (u64::from(g.inode_size) / 256);
            if u64::from(g.inode_align) >= scaled >> g.block_log {
                cluster_raw = scaled;
            }
        }
        let blocks_per_cluster = if cluster_raw > bs {
            cluster_raw >> g.block_log
        } else {
            1
        };

        Mount {
            g: *g,
            rules,
            bs,
            sect: u64::from(g.sect_size),
            alloc_maxlevels,
            alloc_mxr0: (bs - short_hdr) / 8,
            alloc_mnr0: alloc[0],
            inobt_maxlevels,
            rmap_maxlevels,
            refc_maxlevels,
            rtrmap_maxlevels,
            rtrefc_maxlevels,
            bm_maxlevels,
            ialloc_blks,
            inode_cluster_size: blocks_per_cluster * bs,
            dir_fsbcount: 1 << g.dir_blk_log,
            realtime,
        }
    }

    fn rtgroups(&self) -> bool {
        self.g.metadir && self.realtime
    }

    pub(super) fn buf_res(&self, nbufs: u64, size: u64) -> u64 {
        // Op header and buffer format item, rounded up to 128 bytes.
        let overhead = (OP_HEADER + BUF_LOG_FORMAT).div_ceil(128) * 128;
        nbufs * (size + overhead)
    }

    fn inode_res(&self, n: u64) -> u64 {
        let long_hdr = if self.g.v5 { 72 } else { 24 };
        n * (4 * OP_HEADER + INODE_LOG_FORMAT + u64::from(self.g.inode_size) + 2 * long_hdr)
    }

    fn allocfree_blocks(&self, ops: u64) -> u64 {
        let mut blocks = ops * 2 * (2 * self.alloc_maxlevels - 1);
        if self.g.rmapbt {
            blocks += ops * (2 * self.rmap_maxlevels).saturating_sub(1);
        }
        blocks
    }

    fn refcountbt_blocks(&self, ops: u64) -> u64 {
        ops * (2 * self.refc_maxlevels).saturating_sub(1)
    }

    fn inobt_res(&self) -> u64 {
        self.buf_res(self.inobt_maxlevels, self.bs)
            + self.buf_res(self.allocfree_blocks(1), self.bs)
    }

    fn finobt_res(&self) -> u64 {
        if self.g.finobt {
            self.inobt_res()
        } else {
            0
        }
    }

    fn inode_chunk_res(&self, alloc: bool) -> u64 {
        let res = self.buf_res(self.allocfree_blocks(1), self.bs);
        if alloc && self.g.v5 {
            // v5 initialises new chunks with ordered buffers.
            return res;
        }
        let size = if alloc { self.bs } else { 0 };
        res + self.buf_res(self.ialloc_blks, size)
    }

    fn rtalloc_blocks(&self, ops: u64) -> u64 {
        let rtxlen = MAX_BMBT_EXTLEN / u64::from(self.g.rt_extsize.max(1));
        let hdr = if self.rtgroups() { RTBUF_BLKINFO } else { 0 };
        let rtbmp_blocks = rtxlen.div_ceil((self.bs - hdr) * 8);
        let t1 = (rtbmp_blocks + 1) * ops;
        let t2 = if self.g.rmapbt && self.rtrmap_maxlevels > 0 {
            ops * (2 * self.rtrmap_maxlevels - 1)
        } else {
            0
        };
        t1.max(t2)
    }

    fn finish_efi(&self, nr: u64) -> u64 {
        self.buf_res(2 * nr + 1, self.sect) + self.buf_res(self.allocfree_blocks(nr), self.bs)
    }

    fn finish_rt_efi(&self, nr: u64) -> u64 {
        if !self.realtime {
            return 0;
        }
        self.buf_res(2 * nr + 1, self.sect)
            + self.buf_res(self.rtalloc_blocks(nr), self.bs)
            + self.buf_res(self.allocfree_blocks(nr), self.bs)
    }

    fn finish_cui(&self, nr: u64) -> u64 {
        if !self.g.reflink {
            return 0;
        }
        self.buf_res(nr, self.sect) + self.buf_res(self.refcountbt_blocks(nr), self.bs)
    }

    fn finish_rt_cui(&self, nr: u64) -> u64 {
        if !(self.rtgroups() && self.g.reflink) {
            return 0;
        }
        self.inode_res(1) + self.buf_res(nr * (2 * self.rtrefc_maxlevels - 1), self.bs)
    }

    fn refcountbt_res(&self, nr: u64) -> u64 {
        self.finish_cui(nr).max(self.finish_rt_cui(nr))
    }

    pub(super) fn write_res(&self, for_minlog: bool) -> u64 {
        let bs = self.bs;
        let bmmax = self.bm_maxlevels[DATA];
        let t1 = self.inode_res(1)
            + self.buf_res(bmmax, bs)
            + self.buf_res(3, self.sect)
            + self.buf_res(self.allocfree_blocks(2), bs);
        let t2 = if self.realtime {
            self.inode_res(1)
                + self.buf_res(bmmax, bs)
                + self.buf_res(3, self.sect)
                + self.buf_res(self.rtalloc_blocks(1), bs)
                + self.buf_res(self.allocfree_blocks(1), bs)
        } else {
            0
        };
        let t3 = self.buf_res(5, self.sect) + self.buf_res(self.allocfree_blocks(2), bs);
        if for_minlog {
            let adj = if self.g.reflink {
                self.buf_res(self.refcountbt_blocks(2), bs)
            } else {
                0
            };
            return DQUOT_LOGRES + (t1 + adj).max(t2).max(t3 + adj);
        }
        DQUOT_LOGRES + self.refcountbt_res(1).max(t1).max(t2).max(t3)
    }

    pub(super) fn itruncate_res(&self, for_minlog: bool) -> u64 {
        let t1 = self.inode_res(1) + self.buf_res(self.bm_maxlevels[DATA] + 1, self.bs);
        let mut t2 = self.finish_efi(4);
        let t3 = self.finish_rt_efi(2);
        if for_minlog {
            if self.g.reflink {
                t2 += self.buf_res(self.refcountbt_blocks(4), self.bs);
            }
            return DQUOT_LOGRES + t1.max(t2).max(t3);
        }
        DQUOT_LOGRES + self.refcountbt_res(2).max(t1).max(t2).max(t3)
    }

    fn dirop_log_count(&self) -> u64 {
        let (blocks, bmaps) = self.daenter(DATA);
        blocks + bmaps + 1
    }

    /// Blocks one directory or attr btree insertion may touch: the da
    /// blocks and the bmbt blocks that map them.
    fn daenter(&self, fork: usize) -> (u64, u64) {
        let one = if fork == DATA { self.dir_fsbcount } else { 1 };
        let dbs = DA_NODE_MAXDEPTH + if fork == DATA { 2 } else { 0 };
        (one * dbs, dbs * self.nextentadd(one, fork))
    }

    fn nextentadd(&self, blocks: u64, fork: usize) -> u64 {
        let per_block = (self.alloc_mxr0 - self.alloc_mnr0).max(1);
        blocks.div_ceil(per_block) * (self.bm_maxlevels[fork] - 1)
    }

    fn iunlink_remove_res(&self) -> u64 {
        self.buf_res(1, self.sect) + 2 * self.inode_cluster_size
    }

    fn iunlink_add_res(&self) -> u64 {
        self.buf_res(1, self.sect) + self.inode_cluster_size
    }

    fn icreate_alloc_res(&self) -> u64 {
        self.buf_res(2, self.sect)
            + self.sect
            + self.inode_chunk_res(true)
            + self.inobt_res()
            + self.finobt_res()
    }

    fn create_modify_res(&self) -> u64 {
        self.inode_res(2)
            + self.buf_res(1, self.sect)
            + self.bs
            + self.buf_res(self.dirop_log_count(), self.bs)
            + self.finobt_res()
    }

    fn attrsetm_res(&self) -> u64 {
        DQUOT_LOGRES
            + self.inode_res(1)
            + self.buf_res(1, self.sect)
            + self.buf_res(DA_NODE_MAXDEPTH, self.bs)
    }

    fn attrsetrt_res(&self) -> u64 {
        self.buf_res(1, self.sect) + self.buf_res(self.bm_maxlevels[ATTR], self.bs)
    }

    fn attrrm_res(&self) -> u64 {
        let a = self.inode_res(1)
            + self.buf_res(DA_NODE_MAXDEPTH, self.bs)
            + self.bs * self.bm_maxlevels[ATTR]
            + self.buf_res(self.bm_maxlevels[DATA], 0);
        let b = self.buf_res(5, self.sect) + self.buf_res(self.allocfree_blocks(2), self.bs);
        DQUOT_LOGRES + a.max(b)
    }

    fn icreate_res(&self, attrsetm: u64) -> u64 {
        let t1 = self.icreate_alloc_res();
        let t2 = self.create_modify_res();
        let (t3, extra) = if self.g.parent {
            (attrsetm, pptr_link_overhead())
        } else {
            (0, 0)
        };
        DQUOT_LOGRES + extra + t1.max(t2).max(t3)
    }

    /// The whole reservation table, in the kernel's order (the first of
    /// equal maxima wins when the largest is chosen).
    pub(super) fn table(&self) -> Vec<TransRes> {
        let bs = self.bs;
        let sect = self.sect;
        let parent = self.g.parent;
        let attrsetm = TransRes::new(self.attrsetm_res(), 3);
        let attrrm = TransRes::new(self.attrrm_res(), 3);
        let plus = |base: u64, extra: u64| if parent { base + extra } else { base };

        let mut adj = 0;
        if self.g.reflink || self.g.rmapbt {
            adj += 1;
        }
        if self.g.reflink {
            adj += 1;
        }
        if self.g.rmapbt {
            adj += 1;
        }

        let write = TransRes::new(self.write_res(false), 2 + adj);
        let itruncate = TransRes::new(self.itruncate_res(false), 2 + adj);

        let rename = {
            let t1 = self.inode_res(5) + self.buf_res(2 * self.dirop_log_count(), bs);
            let t2 = self.finish_efi(3);
            let (t3, extra) = if parent {
                let replace = pptr_replace_overhead();
                let rename = replace + 2 * pptr_link_overhead();
                (attrsetm.logres.max(attrrm.logres), rename.max(2 * replace))
            } else {
                (0, 0)
            };
            TransRes::new(DQUOT_LOGRES + extra + t1.max(t2).max(t3), plus(2, 3))
        };
        let link = {
            let t1 = self.inode_res(2) + self.buf_res(self.dirop_log_count(), bs);
            let t2 = self.finish_efi(1);
            let (t3, extra) = if parent {
                (attrsetm.logres, pptr_link_overhead())
            } else {
                (0, 0)
            };
            let res = DQUOT_LOGRES + self.iunlink_remove_res() + extra + t1.max(t2).max(t3);
            TransRes::new(res, plus(2, 3))
        };
        let remove = {
            let t1 = self.inode_res(2) + self.buf_res(self.dirop_log_count(), bs);
            // The kernel since 6.16 counts the AGF, AGFL pairs and the
            // superblock (5 sectors); mkfs.xfs 6.15 counted 4.
            let t2 = match self.rules {
                Rules::Kernel => self.finish_efi(2),
                Rules::Mkfs => self.buf_res(4, sect) + self.buf_res(self.allocfree_blocks(2), bs),
            };
            let (t3, extra) = if parent {
                (attrrm.logres, pptr_link_overhead())
            } else {
                (0, 0)
            };
            let res = DQUOT_LOGRES + self.iunlink_add_res() + extra + t1.max(t2).max(t3);
            TransRes::new(res, plus(2, 3))
        };
        let create = self.icreate_res(attrsetm.logres);
        let symlink = TransRes::new(create + self.buf_res(1, SYMLINK_MAXLEN), plus(3, 3));
        let create_tmpfile = TransRes::new(
            DQUOT_LOGRES + self.icreate_alloc_res() + self.iunlink_add_res(),
            2,
        );
        let mkdir = TransRes::new(create, plus(3, 3));
        let create = TransRes::new(create, plus(2, 3));
        let ifree = TransRes::new(
            DQUOT_LOGRES
                + self.inode_res(1)
                + self.buf_res(3, sect)
                + self.iunlink_remove_res()
                + self.inode_chunk_res(false)
                + self.inobt_res()
                + self.finobt_res(),
            2,
        );
        let ichange = TransRes::new(DQUOT_LOGRES + self.inode_res(1) + self.buf_res(1, sect), 0);
        let growdata = TransRes::new(
            self.buf_res(3, sect) + self.buf_res(self.allocfree_blocks(1), bs),
            2,
        );
        let addafork = TransRes::new(
            DQUOT_LOGRES
                + self.inode_res(1)
                + self.buf_res(2, sect)
                + self.buf_res(1, bs << self.g.dir_blk_log)
                + self.buf_res(self.nextentadd(self.dir_fsbcount, DATA) + 1, bs)
                + self.buf_res(self.allocfree_blocks(1), bs),
            2,
        );
        let writeid = TransRes::new(self.inode_res(1), 0);
        let attrinval = TransRes::new(
            (self.inode_res(1) + self.buf_res(self.bm_maxlevels[ATTR], bs))
                .max(self.buf_res(9, sect) + self.buf_res(self.allocfree_blocks(4), bs)),
            1,
        );
        let attrsetrt = TransRes::new(self.attrsetrt_res(), 0);
        let clearagi = TransRes::new(self.buf_res(1, sect), 0);
        let growrtalloc = TransRes::new(
            self.buf_res(2, sect)
                + self.buf_res(self.bm_maxlevels[DATA], bs)
                + self.inode_res(1)
                + self.buf_res(self.allocfree_blocks(1), bs),
            2,
        );
        let growrtzero = TransRes::new(self.buf_res(1, bs), 0);
        let growrtfree = TransRes::new(
            self.buf_res(1, sect)
                + self.inode_res(2)
                + self.buf_res(1, bs)
                + self.buf_res(1, self.g.rsum_blocks.saturating_mul(bs)),
            0,
        );
        let qm_setqlim = TransRes::new(self.buf_res(1, DISK_DQUOT), 1);
        let qm_dqalloc = TransRes::new(self.write_res(false) + self.buf_res(1, bs - 1), 2 + adj);
        let sb = TransRes::new(self.buf_res(1, sect), 1);
        let fsyncts = TransRes::new(self.inode_res(1), 0);
        vec![
            write,
            itruncate,
            rename,
            link,
            remove,
            symlink,
            create,
            create_tmpfile,
            mkdir,
            ifree,
            ichange,
            growdata,
            addafork,
            writeid,
            attrinval,
            attrsetm,
            attrsetrt,
            attrrm,
            clearagi,
            growrtalloc,
            growrtzero,
            growrtfree,
            qm_setqlim,
            qm_dqalloc,
            sb,
            fsyncts,
        ]
    }

    /// The xattr set of the largest local value, in one transaction.
    pub(super) fn max_attrsetm_res(&self) -> u64 {
        let bs = self.bs;
        let mut size = (bs >> 1) + (bs >> 2) - MAXNAMELEN - 1;
        let (blocks, bmaps) = self.daenter(ATTR);
        let mut nblks = blocks + bmaps + size.div_ceil(bs);
        if self.g.parent {
            // The corrected rule counts the value in blocks, not bytes.
            size = size.div_ceil(bs);
        }
        nblks += self.nextentadd(size, ATTR);
        self.attrsetm_res() + self.attrsetrt_res() * nblks
    }
}

fn pptr_link_overhead() -> u64 {
    ATTRI_LOG_FORMAT + round_up4(PARENT_REC) + round_up4(MAXNAMELEN - 1)
}

fn pptr_replace_overhead() -> u64 {
    pptr_link_overhead() + round_up4(PARENT_REC) + round_up4(MAXNAMELEN - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights() {
        // 4 KiB blocks: 4032/8/2 = 252 leaf records, 168 node pointers.
        assert_eq!(compute_maxlevels([252, 168], 32768), 2);
        assert_eq!(compute_maxlevels([252, 168], 252 * 168 + 1), 3);
        assert_eq!(space_to_height([84, 45], 1), 1);
        assert_eq!(space_to_height([84, 45], 0), 0);
    }
}

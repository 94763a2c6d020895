//! The realtime rmap btree of a realtime group (`/rtgroups/N.rmap`, on
//! filesystems with realtime groups and reverse mapping): the reverse
//! mappings of the group's realtime blocks, kept in a btree rooted in the
//! data fork of a metadata inode (fork format `META_BTREE`). Its records
//! and keys are the rmapbt's (start inside the group, length, owner, file
//! offset and flags; overlapping intervals), so the record logic of
//! [`super::rmap`] serves it through [`RmapSite`].
//!
//! The root in the inode is a leaf until the fork is full (as many
//! 24-byte records as fit after its 4-byte header), then a node of
//! low/high key pairs and 64-bit pointers placed for the fork's own
//! room, as `xfs_rtrmap_root` lays it out. Blocks below it have the
//! long btree header (magic `MAPR`, owner the inode), are allocated on
//! the data device near the inode as the kernel allocates metadata file
//! blocks (one block, the inode's AG first, reverse-mapped to the inode
//! as bmbt blocks of its data fork) and counted in the inode's
//! `di_nblocks`. Every change is made in the transaction that changes the
//! file's mapping, with the inode and the blocks logged there, so a crash
//! leaves both or neither.

use super::rmap::{self, Rmap, RmapSite};
use super::{AllocReq, Owner};
use crate::btree::{BtreeOps, Cursor, Shape};
use crate::buf::Verifier;
use crate::error::{Error, Location, Result};
use crate::geometry::{Daddr, FsBlock, Ino};
use crate::inode::{ForkFormat, Inode};
use crate::trans::Trans;
use std::cmp::Ordering;
use xfs_format::btree as xbt;
use xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC;

/// The btree type of one group's realtime rmap btree.
pub(crate) struct RtRmapBt {
    rgno: u32,
    ino: Ino,
    block_size: usize,
    /// Where new blocks go first (the inode's block).
    near: FsBlock,
    /// Blocks allocated (+) and freed (-) through this cursor.
    delta: i64,
}

impl RtRmapBt {
    fn owner(&self) -> Owner {
        Owner::Inode {
            ino: self.ino,
            attr_fork: false,
            offset: 0,
            bmbt: true,
        }
    }
}

impl BtreeOps for RtRmapBt {
    fn shape(&self) -> Shape {
        Shape {
            magic: XFS_RTRMAP_CRC_MAGIC,
            long_ptrs: true,
            rec_len: 24,
            key_len: 20,
            overlapping: true,
            block_size: self.block_size,
            owner: self.ino.0,
            root_in_inode: true,
        }
    }

    fn root(&self, _tp: &mut Trans<'_>) -> Result<(u64, usize)> {
        Err(Error::Invalid(
            "the realtime rmap btree's root is in its inode".into(),
        ))
    }

    fn set_root(&mut self, _tp: &mut Trans<'_>, _ptr: u64, _levels: usize) -> Result<()> {
        // The level is in the in-inode root; the block count is kept by
        // alloc_block and free_block.
        Ok(())
    }

    fn alloc_block(&mut self, tp: &mut Trans<'_>, _near: u64) -> Result<u64> {
        let req = AllocReq {
            target: self.near,
            minlen: 1,
            maxlen: 1,
            alignment: 1,
            ag_only: false,
            owner: self.owner(),
        };
        let (fsb, _) = super::alloc_extent(tp, &req)?;
        self.delta += 1;
        Ok(fsb.0)
    }

    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()> {
        super::free_extent(tp, FsBlock(ptr), 1, &self.owner())?;
        self.delta -= 1;
        Ok(())
    }

    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr> {
        let geo = tp.geo();
        if !geo.fsb_valid(FsBlock(ptr)) {
            return Err(bad(self.rgno, format!("pointer to block {ptr}")));
        }
        Ok(geo.fsb_to_daddr(FsBlock(ptr)))
    }

    fn verifier(&self, level: u16) -> Verifier<'static> {
        Verifier::MetaBtree {
            magic: XFS_RTRMAP_CRC_MAGIC,
            owner: self.ino.0,
            level: Some(level),
        }
    }

    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        rmap::rec_key(rec, key);
    }

    fn high_key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        rmap::rec_high_key(rec, key);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        rmap::cmp_rmap_keys(a, b)
    }

    fn iroot_records(&self) -> bool {
        true
    }
}

fn bad(rgno: u32, detail: String) -> Error {
    Error::corrupt(
        "realtime rmap btree",
        Location::Other(format!("realtime group {rgno}")),
        detail,
    )
}

/// One group's tree as a [`RmapSite`]: its inode as this transaction
/// sees it, with the root and block count the cursors leave.
struct RtSite {
    rgno: u32,
    ip: Inode,
    root: Vec<u8>,
    delta: i64,
    changed: bool,
}

impl RtSite {
    fn open(tp: &mut Trans<'_>, rgno: u32) -> Result<RtSite> {
        // The group's bitmap lock first, as allocation takes it, so the
        // two are always taken in one order.
        let rbm = super::rtalloc::rtgroup_file(tp, rgno, "bitmap")?;
        tp.lock_inode(rbm);
        let ino = super::rtalloc::rtgroup_file(tp, rgno, "rmap")?;
        tp.lock_inode(ino);
        let ip = tp.read_inode(ino)?;
        if ip.format != ForkFormat::MetaBtree
            || ip.metatype != xfs_format::inode::XFS_METAFILE_RTRMAP
        {
            return Err(bad(
                rgno,
                format!(
                    "inode {} is not a realtime rmap btree (fork {:?}, metadata type {})",
                    ino.0, ip.format, ip.metatype
                ),
            ));
        }
        let root = ip.data_fork.clone();
        Ok(RtSite {
            rgno,
            ip,
            root,
            delta: 0,
            changed: false,
        })
    }

    /// Puts the root and the block count back into the inode and logs it.
    fn close(mut self, tp: &mut Trans<'_>) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        self.ip.data_fork = self.root;
        self.ip.nblocks = self
            .ip
            .nblocks
            .checked_add_signed(self.delta)
            .ok_or_else(|| bad(self.rgno, "block count below zero".into()))?;
        tp.log_inode(&self.ip)
    }
}

impl RmapSite for RtSite {
    type Ops = RtRmapBt;

    fn cursor(&mut self, tp: &mut Trans<'_>) -> Result<Cursor<RtRmapBt>> {
        let geo = tp.geo();
        let ops = RtRmapBt {
            rgno: self.rgno,
            ino: self.ip.ino,
            block_size: geo.block_size as usize,
            near: geo.fsb_make(geo.ino_agno(self.ip.ino), geo.ino_agbno(self.ip.ino)),
            delta: 0,
        };
        Ok(Cursor::with_inode_root(ops, self.root.clone()))
    }

    fn done(&mut self, _tp: &mut Trans<'_>, c: Cursor<RtRmapBt>) -> Result<()> {
        self.root = c.inode_root().to_vec();
        self.delta += c.ops.delta;
        self.changed = true;
        Ok(())
    }

    fn blocks(&self, tp: &Trans<'_>) -> u64 {
        tp.geo().rg_len(self.rgno)
    }

    fn shared(&self, tp: &Trans<'_>) -> bool {
        tp.geo().features.reflink
    }

    fn bad(&self, detail: String) -> Error {
        bad(self.rgno, detail)
    }
}

/// True when realtime mappings are reverse-mapped (realtime groups with
/// the rmap btree).
pub(crate) fn enabled(tp: &Trans<'_>) -> bool {
    let geo = tp.geo();
    geo.has_rtgroups() && geo.features.rmapbt
}

/// One realtime mapping of inode `ino`: realtime blocks `rtb..rtb+len`
/// (one group) at file block `offset`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RtMapping {
    pub rtb: u64,
    pub len: u64,
    pub ino: Ino,
    pub offset: u64,
    pub unwritten: bool,
}

impl RtMapping {
    fn split(&self, tp: &Trans<'_>) -> Result<(u32, Rmap)> {
        let geo = tp.geo();
        let (rgno, rgbno) = geo.rtb_split(self.rtb);
        if self.len == 0 || !geo.rtb_range_valid(self.rtb, self.len) {
            return Err(bad(
                rgno,
                format!(
                    "mapping realtime blocks {}+{} of inode {}: not inside one group",
                    self.rtb, self.len, self.ino.0
                ),
            ));
        }
        Ok((
            rgno,
            Rmap {
                start: rgbno as u32,
                len: self.len as u32,
                owner: self.ino.0,
                offset: self.offset & xbt::XFS_RMAP_OFF_MASK,
                flags: if self.unwritten {
                    xbt::XFS_RMAP_OFF_UNWRITTEN
                } else {
                    0
                },
            },
        ))
    }
}

/// Records that `m` is now mapped (merged with the owner's neighbours as
/// the kernel merges them). A no-op without the realtime rmap btree.
pub(crate) fn map(tp: &mut Trans<'_>, m: RtMapping) -> Result<()> {
    if !enabled(tp) {
        return Ok(());
    }
    let (rgno, r) = m.split(tp)?;
    let mut s = RtSite::open(tp, rgno)?;
    rmap::map_in(tp, &mut s, r)?;
    s.close(tp)
}

/// Records that `m` is no longer mapped (its unwritten flag is ignored).
pub(crate) fn unmap(tp: &mut Trans<'_>, m: RtMapping) -> Result<()> {
    if !enabled(tp) {
        return Ok(());
    }
    let (rgno, r) = m.split(tp)?;
    let mut s = RtSite::open(tp, rgno)?;
    rmap::unmap_in(tp, &mut s, r)?;
    s.close(tp)
}

/// Sets the unwritten flag of mapping `m` to `m.unwritten`.
pub(crate) fn convert(tp: &mut Trans<'_>, m: RtMapping) -> Result<()> {
    if !enabled(tp) {
        return Ok(());
    }
    let (rgno, r) = m.split(tp)?;
    let mut s = RtSite::open(tp, rgno)?;
    rmap::unmap_in(tp, &mut s, r)?;
    rmap::map_in(tp, &mut s, r)?;
    s.close(tp)
}

/// Every record of group `rgno`'s realtime rmap btree as (start in the
/// group, length, owner, offset with flag bits), by start (for tests).
pub(crate) fn records(tp: &mut Trans<'_>, rgno: u32) -> Result<Vec<(u32, u32, u64, u64)>> {
    let mut s = RtSite::open(tp, rgno)?;
    let mut c = s.cursor(tp)?;
    let mut out = Vec::new();
    let mut more = c.lookup(tp, &[0u8; 20], crate::btree::Dir::Ge)?;
    while more {
        let r = c.get_rec(tp)?;
        out.push((
            crate::bytes::be32(&r, 0),
            crate::bytes::be32(&r, 4),
            crate::bytes::be64(&r, 8),
            crate::bytes::be64(&r, 16),
        ));
        more = c.increment(tp)?;
    }
    Ok(out)
}

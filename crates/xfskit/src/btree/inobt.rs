//! The inode btree and free inode btree as [`BtreeOps`]: 16-byte chunk
//! records keyed by their first AG inode number, roots and levels in the
//! AGI, blocks from the allocator (owner: inobt), block counts in
//! `agi_iblocks` / `agi_fblocks` when the inobtcount feature is on.

use super::{BtreeOps, Cursor, Shape};
use crate::alloc::{alloc_extent, free_extent, AllocReq, Owner};
use crate::buf::Verifier;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr};
use crate::trans::{BufId, Trans};
use std::cmp::Ordering;
use std::mem::offset_of;
use xfs_format::ag::{self as xag, Agi};
use xfs_format::btree as xbt;

/// Which inode btree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InoTree {
    /// Every inode chunk.
    Inobt,
    /// Chunks with at least one free inode.
    Finobt,
}

/// An inode btree of one AG.
#[derive(Debug, Clone)]
pub struct InobtOps {
    /// The AG.
    pub agno: AgNumber,
    /// Which tree.
    pub tree: InoTree,
    block_size: usize,
    inobtcount: bool,
}

const ROOT: usize = offset_of!(Agi, agi_root);
const LEVEL: usize = offset_of!(Agi, agi_level);
const FREE_ROOT: usize = offset_of!(Agi, agi_free_root);
const FREE_LEVEL: usize = offset_of!(Agi, agi_free_level);
const IBLOCKS: usize = offset_of!(Agi, agi_iblocks);
const FBLOCKS: usize = offset_of!(Agi, agi_fblocks);

impl InobtOps {
    /// AG `agno`'s inobt or finobt, to call its [`BtreeOps`] directly.
    pub(crate) fn new(tp: &Trans<'_>, agno: AgNumber, tree: InoTree) -> InobtOps {
        let geo = tp.geo();
        InobtOps {
            agno,
            tree,
            block_size: geo.block_size as usize,
            inobtcount: geo.features.inobtcnt,
        }
    }

    /// A cursor over AG `agno`'s inobt or finobt.
    pub fn cursor(tp: &Trans<'_>, agno: AgNumber, tree: InoTree) -> Cursor<InobtOps> {
        let geo = tp.geo();
        Cursor::new(InobtOps {
            agno,
            tree,
            block_size: geo.block_size as usize,
            inobtcount: geo.features.inobtcnt,
        })
    }

    fn read_agi(&self, tp: &mut Trans<'_>) -> Result<BufId> {
        let geo = tp.geo();
        let ag0 = geo.agb_to_daddr(self.agno, AgBlock(0));
        let d = Daddr(ag0.0 + xag::XFS_AGI_SECTOR * u64::from(geo.sect_size >> 9));
        tp.read_buf(d, geo.sect_size, &Verifier::Agi { agno: self.agno.0 })
    }

    fn offs(&self) -> (usize, usize, usize) {
        match self.tree {
            InoTree::Inobt => (ROOT, LEVEL, IBLOCKS),
            InoTree::Finobt => (FREE_ROOT, FREE_LEVEL, FBLOCKS),
        }
    }

    fn count_block(&self, tp: &mut Trans<'_>, delta: i64) -> Result<()> {
        if !self.inobtcount {
            return Ok(());
        }
        let id = self.read_agi(tp)?;
        let off = self.offs().2;
        let v = i64::from(crate::bytes::be32(tp.buf(id), off)) + delta;
        let v = u32::try_from(v).map_err(|_| {
            Error::corrupt(
                "AGI",
                Location::Other(format!("AG {}", self.agno.0)),
                "inode btree block count out of range",
            )
        })?;
        tp.buf_mut(id)[off..off + 4].copy_from_slice(&v.to_be_bytes());
        Ok(())
    }
}

impl BtreeOps for InobtOps {
    fn shape(&self) -> Shape {
        Shape {
            magic: match self.tree {
                InoTree::Inobt => xbt::XFS_IBT_CRC_MAGIC,
                InoTree::Finobt => xbt::XFS_FIBT_CRC_MAGIC,
            },
            long_ptrs: false,
            rec_len: 16,
            key_len: 4,
            block_size: self.block_size,
            owner: u64::from(self.agno.0),
            root_in_inode: false,
            overlapping: false,
        }
    }

    fn root(&self, tp: &mut Trans<'_>) -> Result<(u64, usize)> {
        let id = self.read_agi(tp)?;
        let (r, l, _) = self.offs();
        let d = tp.buf(id);
        Ok((
            u64::from(crate::bytes::be32(d, r)),
            crate::bytes::be32(d, l) as usize,
        ))
    }

    fn set_root(&mut self, tp: &mut Trans<'_>, ptr: u64, levels: usize) -> Result<()> {
        let id = self.read_agi(tp)?;
        let (r, l, _) = self.offs();
        let d = tp.buf_mut(id);
        d[r..r + 4].copy_from_slice(&(ptr as u32).to_be_bytes());
        d[l..l + 4].copy_from_slice(&(levels as u32).to_be_bytes());
        Ok(())
    }

    fn alloc_block(&mut self, tp: &mut Trans<'_>, near: u64) -> Result<u64> {
        let geo = tp.geo();
        let near = if near == 0 || near >= u64::from(geo.ag_len(self.agno)) {
            0
        } else {
            near as u32
        };
        let req = AllocReq {
            target: geo.fsb_make(self.agno, AgBlock(near)),
            minlen: 1,
            maxlen: 1,
            alignment: 1,
            ag_only: true,
            owner: Owner::Inobt,
        };
        let (fsb, _) = alloc_extent(tp, &req)?;
        self.count_block(tp, 1)?;
        Ok(u64::from(geo.fsb_split(fsb).1 .0))
    }

    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()> {
        let fsb = tp.geo().fsb_make(self.agno, AgBlock(ptr as u32));
        free_extent(tp, fsb, 1, &Owner::Inobt)?;
        self.count_block(tp, -1)
    }

    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr> {
        let geo = tp.geo();
        if ptr == 0 || ptr >= u64::from(geo.ag_len(self.agno)) {
            return Err(Error::corrupt(
                "inode btree",
                Location::Other(format!("AG {}", self.agno.0)),
                format!("pointer to block {ptr}"),
            ));
        }
        Ok(geo.agb_to_daddr(self.agno, AgBlock(ptr as u32)))
    }

    fn verifier(&self, level: u16) -> Verifier<'static> {
        Verifier::ShortBtree {
            magic: self.shape().magic,
            agno: self.agno.0,
            level: Some(level),
        }
    }

    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        key[..4].copy_from_slice(&rec[..4]);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        crate::bytes::be32(a, 0).cmp(&crate::bytes::be32(b, 0))
    }
}

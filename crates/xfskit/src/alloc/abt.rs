//! The two free space btrees as [`BtreeOps`]: by block number (bnobt,
//! key = start) and by size (cntbt, key = length then start). Their
//! blocks come from and go back to the AG free list; blocks beyond the
//! roots are counted in `agf_btreeblks`.

use super::agf::{self, off};
use crate::btree::{BtreeOps, Cursor, Dir, Shape};
use crate::buf::Verifier;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr};
use crate::trans::Trans;
use std::cmp::Ordering;
use xfs_format::btree as xbt;

/// Which free space btree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// By block number.
    Bno,
    /// By size.
    Cnt,
}

/// Free space btree of one AG.
pub(crate) struct AllocBt {
    pub agno: AgNumber,
    pub which: Which,
    block_size: usize,
}

/// A free extent: first AG block and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Free {
    pub bno: u32,
    pub len: u32,
}

impl Free {
    pub fn end(&self) -> u32 {
        self.bno + self.len
    }

    pub fn to_rec(self) -> [u8; 8] {
        let mut r = [0u8; 8];
        r[..4].copy_from_slice(&self.bno.to_be_bytes());
        r[4..].copy_from_slice(&self.len.to_be_bytes());
        r
    }

    pub fn from_rec(r: &[u8]) -> Free {
        Free {
            bno: crate::bytes::be32(r, 0),
            len: crate::bytes::be32(r, 4),
        }
    }
}

impl AllocBt {
    /// AG `agno`'s bnobt or cntbt, for a filesystem of `block_size`
    /// blocks (outside a transaction: the bulk loader's).
    pub fn new(agno: AgNumber, which: Which, block_size: usize) -> AllocBt {
        AllocBt {
            agno,
            which,
            block_size,
        }
    }

    /// A cursor over AG `agno`'s bnobt or cntbt.
    pub fn cursor(tp: &Trans<'_>, agno: AgNumber, which: Which) -> Cursor<AllocBt> {
        Cursor::new(AllocBt {
            agno,
            which,
            block_size: tp.geo().block_size as usize,
        })
    }

    fn offs(&self) -> (usize, usize) {
        match self.which {
            Which::Bno => (off::BNO_ROOT, off::BNO_LEVEL),
            Which::Cnt => (off::CNT_ROOT, off::CNT_LEVEL),
        }
    }
}

impl BtreeOps for AllocBt {
    fn shape(&self) -> Shape {
        Shape {
            magic: match self.which {
                Which::Bno => xbt::XFS_ABTB_CRC_MAGIC,
                Which::Cnt => xbt::XFS_ABTC_CRC_MAGIC,
            },
            long_ptrs: false,
            rec_len: 8,
            key_len: 8,
            block_size: self.block_size,
            owner: u64::from(self.agno.0),
            root_in_inode: false,
            overlapping: false,
        }
    }

    fn root(&self, tp: &mut Trans<'_>) -> Result<(u64, usize)> {
        let id = agf::read_agf(tp, self.agno)?;
        let (r, l) = self.offs();
        Ok((u64::from(agf::get(tp, id, r)), agf::get(tp, id, l) as usize))
    }

    fn set_root(&mut self, tp: &mut Trans<'_>, ptr: u64, levels: usize) -> Result<()> {
        let id = agf::read_agf(tp, self.agno)?;
        let (r, l) = self.offs();
        agf::set(tp, id, r, ptr as u32);
        agf::set(tp, id, l, levels as u32);
        Ok(())
    }

    fn alloc_block(&mut self, tp: &mut Trans<'_>, _near: u64) -> Result<u64> {
        let bno = agf::freelist_pop(tp, self.agno)?
            .ok_or_else(|| Error::NoSpace(format!("AG {} free list is empty", self.agno.0)))?;
        let id = agf::read_agf(tp, self.agno)?;
        agf::add(tp, id, off::BTREEBLKS, 1, self.agno)?;
        Ok(u64::from(bno))
    }

    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()> {
        agf::freelist_push(tp, self.agno, ptr as u32)?;
        let id = agf::read_agf(tp, self.agno)?;
        agf::add(tp, id, off::BTREEBLKS, -1, self.agno)
    }

    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr> {
        let geo = tp.geo();
        if ptr == 0 || ptr >= u64::from(geo.ag_len(self.agno)) {
            return Err(Error::corrupt(
                "free space btree",
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
        key[..8].copy_from_slice(&rec[..8]);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        let (fa, fb) = (Free::from_rec(a), Free::from_rec(b));
        match self.which {
            Which::Bno => fa.bno.cmp(&fb.bno),
            Which::Cnt => (fa.len, fa.bno).cmp(&(fb.len, fb.bno)),
        }
    }
}

/// The current record of a free space cursor, checked to lie inside
/// the AG.
pub(crate) fn cur_free(c: &Cursor<AllocBt>, tp: &Trans<'_>) -> Result<Free> {
    let f = Free::from_rec(&c.get_rec(tp)?);
    let ag_len = u64::from(tp.geo().ag_len(c.ops.agno));
    if f.len == 0 || f.bno == 0 || u64::from(f.bno) + u64::from(f.len) > ag_len {
        return Err(Error::corrupt(
            match c.ops.which {
                Which::Bno => "bnobt record",
                Which::Cnt => "cntbt record",
            },
            Location::Other(format!("AG {}", c.ops.agno.0)),
            format!("free extent {}+{}", f.bno, f.len),
        ));
    }
    Ok(f)
}

/// Looks up `f`'s key in `c`; the free extent found, if any.
pub(crate) fn lookup(
    c: &mut Cursor<AllocBt>,
    tp: &mut Trans<'_>,
    f: Free,
    dir: Dir,
) -> Result<Option<Free>> {
    if c.lookup(tp, &f.to_rec(), dir)? {
        Ok(Some(cur_free(c, tp)?))
    } else {
        Ok(None)
    }
}

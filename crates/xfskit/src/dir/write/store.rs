//! Where directory blocks come from: a [`Store`] hands out copies of
//! directory blocks by directory block number, takes changed copies back,
//! allocates and frees blocks. [`TransStore`] works inside a transaction
//! through the fork mapping (crate::bmap); [`MemStore`] keeps blocks in
//! memory for unit tests of the in-block logic.

use super::layout::{region_of, Region, DA3_CRC_OFF, DIR3_CRC_OFF, XDF3_MAGIC};
use crate::buf::fasthash::FastMap;
use crate::buf::verify::Verifier;
use crate::dir::data::{XDB3_MAGIC, XDD3_MAGIC};
use crate::dir::lookup::{DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC};
use crate::error::{Error, Result};
use crate::geometry::{Daddr, Geometry};
use crate::inode::{Fork, Inode};
use crate::trans::{BufId, Trans};
use std::collections::BTreeMap;

/// Access to the blocks of one directory.
pub(crate) trait Store {
    /// Filesystem geometry.
    fn geo(&self) -> &Geometry;
    /// A copy of directory block `db`, or None when it is a hole.
    fn get(&mut self, dp: &Inode, db: u64) -> Result<Option<Vec<u8>>>;
    /// Block `db` without copying it, or None when it is a hole.
    fn view(&mut self, dp: &Inode, db: u64) -> Result<Option<&[u8]>>;
    /// Block `db` (which must be mapped) for changing in place.
    fn edit(&mut self, dp: &Inode, db: u64) -> Result<&mut [u8]>;
    /// Replaces the contents of block `db` (got or allocated before).
    fn put(&mut self, dp: &Inode, db: u64, data: &[u8]) -> Result<()>;
    /// Allocates directory block `db`; returns its disk address (for the
    /// header's blkno). Its contents are zero until `put`.
    fn alloc(&mut self, dp: &mut Inode, db: u64) -> Result<Daddr>;
    /// Frees directory block `db`.
    fn free(&mut self, dp: &mut Inode, db: u64) -> Result<()>;
    /// Mapped directory blocks in `from..to`, ascending.
    fn mapped_in(&mut self, dp: &Inode, from: u64, to: u64) -> Result<Vec<u64>>;
    /// Disk address of mapped block `db`.
    fn daddr(&mut self, dp: &Inode, db: u64) -> Result<Daddr>;
}

/// Reads a block that must exist.
pub(crate) fn must_get(st: &mut dyn Store, dp: &Inode, db: u64) -> Result<Vec<u8>> {
    st.get(dp, db)?
        .ok_or_else(|| crate::dir::DirError::Block.at(dp.ino.0, db, "directory block is missing"))
}

/// The first directory block number in `from..to` that is not mapped.
pub(crate) fn first_hole(st: &mut dyn Store, dp: &Inode, from: u64, to: u64) -> Result<u64> {
    let mut want = from;
    for db in st.mapped_in(dp, from, to)? {
        if db != want {
            break;
        }
        want += 1;
    }
    if want >= to {
        return Err(Error::NoSpace(format!(
            "directory {} has no free block numbers",
            dp.ino.0
        )));
    }
    Ok(want)
}

/// Directory blocks inside a transaction, mapped through the data fork.
pub(crate) struct TransStore<'t, 'a> {
    tp: &'t mut Trans<'a>,
    /// Blocks looked up so far: their buffers, `None` for holes. Every
    /// change to the directory's mapping goes through this store.
    bufs: FastMap<u64, Option<BufId>>,
}

impl<'t, 'a> TransStore<'t, 'a> {
    /// A store over `tp`.
    pub(crate) fn new(tp: &'t mut Trans<'a>) -> Self {
        TransStore {
            tp,
            bufs: FastMap::default(),
        }
    }

    fn map(&mut self, dp: &Inode, db: u64) -> Result<Option<Daddr>> {
        let geo = self.tp.geo();
        let fsbs = u64::from(geo.dir_blk_fsbs());
        let lblk = db << geo.dir_blk_log;
        let Some(e) = crate::bmap::lookup(self.tp, dp, Fork::Data, lblk)? else {
            return Ok(None);
        };
        if e.offset > lblk || e.end() < lblk + fsbs {
            return Err(Error::Unsupported(format!(
                "directory {} block {db} is not contiguous on disk",
                dp.ino.0
            )));
        }
        if e.unwritten {
            return Err(crate::dir::DirError::Block.at(dp.ino.0, db, "unwritten block"));
        }
        Ok(Some(geo.fsb_to_daddr(crate::geometry::FsBlock(
            e.start.0 + (lblk - e.offset),
        ))))
    }

    fn buf_id(&mut self, dp: &Inode, db: u64) -> Result<Option<BufId>> {
        if let Some(&id) = self.bufs.get(&db) {
            return Ok(id);
        }
        let Some(daddr) = self.map(dp, db)? else {
            self.bufs.insert(db, None);
            return Ok(None);
        };
        let geo = self.tp.geo();
        let len = geo.dir_blk_size;
        let owner = dp.ino.0;
        let id = match region_of(geo, db) {
            Region::Data => self.tp.read_buf(
                daddr,
                len,
                &Verifier::Dir3 {
                    magics: &[XDB3_MAGIC, XDD3_MAGIC],
                    owner,
                },
            )?,
            Region::Leaf => self.tp.read_buf(
                daddr,
                len,
                &Verifier::Da3 {
                    magics: &[DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC, DA3_NODE_MAGIC],
                    owner,
                },
            )?,
            Region::Free => self.tp.read_buf(
                daddr,
                len,
                &Verifier::Dir3 {
                    magics: &[XDF3_MAGIC],
                    owner,
                },
            )?,
        };
        self.bufs.insert(db, Some(id));
        Ok(Some(id))
    }
}

impl Store for TransStore<'_, '_> {
    fn geo(&self) -> &Geometry {
        self.tp.geo()
    }

    fn get(&mut self, dp: &Inode, db: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.buf_id(dp, db)?.map(|id| self.tp.buf(id).to_vec()))
    }

    fn view(&mut self, dp: &Inode, db: u64) -> Result<Option<&[u8]>> {
        Ok(self.buf_id(dp, db)?.map(|id| self.tp.buf(id)))
    }

    fn edit(&mut self, dp: &Inode, db: u64) -> Result<&mut [u8]> {
        let id = self.buf_id(dp, db)?.ok_or_else(|| {
            Error::Invalid(format!(
                "directory {} block {db} changed unmapped",
                dp.ino.0
            ))
        })?;
        Ok(self.tp.buf_mut(id))
    }

    fn put(&mut self, dp: &Inode, db: u64, data: &[u8]) -> Result<()> {
        let id = self.buf_id(dp, db)?.ok_or_else(|| {
            Error::Invalid(format!(
                "directory {} block {db} written unmapped",
                dp.ino.0
            ))
        })?;
        let b = self.tp.buf_mut(id);
        if b.len() != data.len() {
            return Err(Error::Invalid("directory block size changed".into()));
        }
        b.copy_from_slice(data);
        Ok(())
    }

    fn alloc(&mut self, dp: &mut Inode, db: u64) -> Result<Daddr> {
        let geo = self.tp.geo();
        let fsbs = u64::from(geo.dir_blk_fsbs());
        let lblk = db << geo.dir_blk_log;
        // One extent of `fsbs` blocks: the allocator must skip shorter
        // free pieces (for example the end of the previous block's run).
        let map = crate::bmap::alloc_range_min(
            self.tp,
            dp,
            Fork::Data,
            lblk,
            fsbs,
            false,
            None,
            fsbs as u32,
        )?;
        let e = map
            .iter()
            .find(|e| e.offset <= lblk && lblk < e.end())
            .ok_or_else(|| Error::Invalid("allocated range is not mapped".into()))?;
        if e.end() < lblk + fsbs {
            let _ = crate::bmap::unmap_range(self.tp, dp, Fork::Data, lblk, fsbs);
            return Err(Error::NoSpace(format!(
                "no {fsbs} contiguous blocks for a directory block"
            )));
        }
        let daddr = geo.fsb_to_daddr(crate::geometry::FsBlock(e.start.0 + (lblk - e.offset)));
        let crc = match region_of(geo, db) {
            Region::Leaf => DA3_CRC_OFF,
            _ => DIR3_CRC_OFF,
        };
        let id = self.tp.get_buf(daddr, geo.dir_blk_size, Some(crc));
        self.bufs.insert(db, Some(id));
        Ok(daddr)
    }

    fn free(&mut self, dp: &mut Inode, db: u64) -> Result<()> {
        if let Some(id) = self.buf_id(dp, db)? {
            self.tp.stale_buf(id);
        }
        self.bufs.remove(&db);
        let geo = self.tp.geo();
        let fsbs = u64::from(geo.dir_blk_fsbs());
        crate::bmap::unmap_range(self.tp, dp, Fork::Data, db << geo.dir_blk_log, fsbs)
    }

    fn mapped_in(&mut self, dp: &Inode, from: u64, to: u64) -> Result<Vec<u64>> {
        let log = self.tp.geo().dir_blk_log;
        let map = crate::bmap::extents(self.tp, dp, Fork::Data)?;
        let mut v: Vec<u64> = Vec::new();
        for e in &map {
            let a = (e.offset >> log).max(from);
            let b = ((e.end() + (1 << log) - 1) >> log).min(to);
            for db in a..b {
                if v.last() != Some(&db) {
                    v.push(db);
                }
            }
        }
        Ok(v)
    }

    fn daddr(&mut self, dp: &Inode, db: u64) -> Result<Daddr> {
        if let Some(&Some(id)) = self.bufs.get(&db) {
            return Ok(self.tp.buf_daddr(id));
        }
        self.map(dp, db)?
            .ok_or_else(|| crate::dir::DirError::Block.at(dp.ino.0, db, "block is missing"))
    }
}

/// Directory blocks in memory (tests of the block logic).
pub(crate) struct MemStore {
    geo: Geometry,
    /// Blocks by directory block number.
    pub(crate) blocks: BTreeMap<u64, Vec<u8>>,
}

impl MemStore {
    /// An empty store for a filesystem of geometry `geo`.
    #[allow(dead_code)]
    pub(crate) fn new(geo: Geometry) -> MemStore {
        MemStore {
            geo,
            blocks: BTreeMap::new(),
        }
    }
}

impl Store for MemStore {
    fn geo(&self) -> &Geometry {
        &self.geo
    }
    fn get(&mut self, _dp: &Inode, db: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.blocks.get(&db).cloned())
    }
    fn view(&mut self, _dp: &Inode, db: u64) -> Result<Option<&[u8]>> {
        Ok(self.blocks.get(&db).map(|b| &b[..]))
    }
    fn edit(&mut self, _dp: &Inode, db: u64) -> Result<&mut [u8]> {
        self.blocks
            .get_mut(&db)
            .map(|b| &mut b[..])
            .ok_or_else(|| Error::Invalid(format!("block {db} changed unmapped")))
    }
    fn put(&mut self, _dp: &Inode, db: u64, data: &[u8]) -> Result<()> {
        let b = self
            .blocks
            .get_mut(&db)
            .ok_or_else(|| Error::Invalid(format!("block {db} written unmapped")))?;
        b.copy_from_slice(data);
        Ok(())
    }
    fn alloc(&mut self, dp: &mut Inode, db: u64) -> Result<Daddr> {
        if self.blocks.contains_key(&db) {
            return Err(Error::Invalid(format!("block {db} allocated twice")));
        }
        self.blocks
            .insert(db, vec![0u8; self.geo.dir_blk_size as usize]);
        dp.nblocks += u64::from(self.geo.dir_blk_fsbs());
        Ok(Daddr(db * 64 + 4096))
    }
    fn free(&mut self, dp: &mut Inode, db: u64) -> Result<()> {
        self.blocks
            .remove(&db)
            .ok_or_else(|| Error::Invalid(format!("block {db} freed twice")))?;
        dp.nblocks -= u64::from(self.geo.dir_blk_fsbs());
        Ok(())
    }
    fn mapped_in(&mut self, _dp: &Inode, from: u64, to: u64) -> Result<Vec<u64>> {
        Ok(self.blocks.range(from..to).map(|(k, _)| *k).collect())
    }
    fn daddr(&mut self, _dp: &Inode, db: u64) -> Result<Daddr> {
        Ok(Daddr(db * 64 + 4096))
    }
}

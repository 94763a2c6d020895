//! Short-form directories: decoded into a list, changed, encoded back
//! into the inode's data fork; conversions to and from the single block.
//!
//! Each entry keeps the offset it has (or would have) in the single
//! block, so readdir positions survive conversions. A new entry goes
//! after the last one when the block form would still hold everything,
//! otherwise into a gap between offsets.

use super::dblock;
use super::layout::{dataptr, init_dir3_hdr};
use super::store::Store;
use crate::dir::data::{entry_size, BLOCK_TAIL_SIZE, DATA_HDR_SIZE, LEAF_ENTRY_SIZE, XDB3_MAGIC};
use crate::dir::lookup::name_hash;
use crate::dir::DirError;
use crate::error::Result;
use crate::geometry::{Geometry, Ino};
use crate::inode::{ForkFormat, Inode};

/// File type code of a directory (for "." and "..").
pub(crate) const FT_DIR: u8 = 2;
/// Offset of ".." in a data block; "." sits at `DATA_HDR_SIZE`.
pub(crate) const DOTDOT_OFF: usize = DATA_HDR_SIZE + 16;
/// First entry offset after "." and "..".
pub(crate) const FIRST_OFF: usize = DATA_HDR_SIZE + 32;

/// A short-form entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SfEnt {
    /// Offset in the would-be block.
    pub offset: u16,
    /// Name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// File type code.
    pub ftype: u8,
}

/// A decoded short-form directory.
#[derive(Debug, Clone)]
pub(crate) struct Sf {
    /// Parent directory.
    pub parent: u64,
    /// Entries in offset order.
    pub ents: Vec<SfEnt>,
}

/// Bytes available to the data fork.
pub(crate) fn fork_space(geo: &Geometry, dp: &Inode) -> usize {
    if dp.forkoff != 0 {
        usize::from(dp.forkoff) * 8
    } else {
        Inode::literal_size(geo)
    }
}

impl Sf {
    /// Decodes `dp`'s short-form directory (checked by the read code).
    pub(crate) fn decode(geo: &Geometry, dp: &Inode) -> Result<Sf> {
        let p = crate::dir::shortform::parse_geo(geo, dp)?;
        Ok(Sf {
            parent: p.parent.0,
            ents: p
                .entries
                .iter()
                .map(|e| SfEnt {
                    offset: e.offset,
                    name: e.name.to_vec(),
                    ino: e.ino.0,
                    ftype: e.file_type.map_or(0, |t| t.dirent_code()),
                })
                .collect(),
        })
    }

    fn wide(&self) -> bool {
        self.parent > u64::from(u32::MAX) || self.ents.iter().any(|e| e.ino > u64::from(u32::MAX))
    }

    /// Encoded size in bytes.
    pub(crate) fn size(&self, geo: &Geometry) -> usize {
        let inosz = if self.wide() { 8 } else { 4 };
        let ft = usize::from(geo.features.ftype);
        2 + inosz
            + self
                .ents
                .iter()
                .map(|e| 3 + e.name.len() + ft + inosz)
                .sum::<usize>()
    }

    /// Stores the directory in `dp`'s data fork (which must hold it).
    pub(crate) fn store(&self, geo: &Geometry, dp: &mut Inode) -> Result<()> {
        let wide = self.wide();
        let put_ino = |v: &mut Vec<u8>, ino: u64| {
            if wide {
                v.extend_from_slice(&ino.to_be_bytes());
            } else {
                v.extend_from_slice(&(ino as u32).to_be_bytes());
            }
        };
        let mut v = Vec::with_capacity(self.size(geo));
        v.push(self.ents.len() as u8);
        let i8 = if wide {
            self.ents
                .iter()
                .filter(|e| e.ino > u64::from(u32::MAX))
                .count()
                + usize::from(self.parent > u64::from(u32::MAX))
        } else {
            0
        };
        v.push(i8 as u8);
        put_ino(&mut v, self.parent);
        for e in &self.ents {
            v.push(e.name.len() as u8);
            v.extend_from_slice(&e.offset.to_be_bytes());
            v.extend_from_slice(&e.name);
            if geo.features.ftype {
                v.push(e.ftype);
            }
            put_ino(&mut v, e.ino);
        }
        let space = fork_space(geo, dp);
        if v.len() > space || self.ents.len() > 255 {
            return Err(crate::error::Error::Invalid(format!(
                "short-form directory of {} bytes does not fit {space}",
                v.len()
            )));
        }
        v.resize(space, 0);
        dp.format = ForkFormat::Local;
        dp.size = self.size(geo) as u64;
        dp.nextents = 0;
        dp.data_fork = v;
        Ok(())
    }

    /// True when the encoded form fits `dp`'s data fork.
    pub(crate) fn fits(&self, geo: &Geometry, dp: &Inode) -> bool {
        self.size(geo) <= fork_space(geo, dp) && self.ents.len() <= 255
    }

    /// End of the data entries in block form.
    fn data_end(&self, geo: &Geometry) -> usize {
        self.ents.last().map_or(FIRST_OFF, |e| {
            usize::from(e.offset) + entry_size(e.name.len(), geo.features.ftype)
        })
    }

    /// Where a new entry of `namelen` bytes would go in block form: its
    /// index and offset, or None when the block form would be full.
    pub(crate) fn pick(&self, geo: &Geometry, namelen: usize) -> Option<(usize, u16)> {
        let bs = geo.dir_blk_size as usize;
        let size = entry_size(namelen, geo.features.ftype);
        // Leaf entries for every entry, "." and "..", and the new one.
        let leaf = (self.ents.len() + 3) * LEAF_ENTRY_SIZE + BLOCK_TAIL_SIZE;
        let end = self.data_end(geo);
        if end + size + leaf <= bs {
            return Some((self.ents.len(), end as u16));
        }
        if end + leaf > bs {
            return None;
        }
        let mut prev_end = FIRST_OFF;
        for (i, e) in self.ents.iter().enumerate() {
            if usize::from(e.offset) >= prev_end + size {
                return Some((i, prev_end as u16));
            }
            prev_end = usize::from(e.offset) + entry_size(e.name.len(), geo.features.ftype);
        }
        None
    }

    /// Builds the single-block form in directory block 0 of `dp` (whose
    /// fork this turns into an empty extent list first).
    pub(crate) fn to_block(&self, st: &mut dyn Store, dp: &mut Inode) -> Result<()> {
        let geo = st.geo().clone();
        let bs = geo.dir_blk_size as usize;
        let owner = dp.ino.0;
        let n = self.ents.len() + 2;
        let leaf_start = bs - BLOCK_TAIL_SIZE - n * LEAF_ENTRY_SIZE;
        if self.data_end(&geo) > leaf_start {
            return Err(DirError::Shortform.at(owner, 0, "entries do not fit one block"));
        }
        dp.format = ForkFormat::Extents;
        dp.data_fork.fill(0);
        dp.nextents = 0;
        dp.size = 0;
        let daddr = st.alloc(dp, 0)?;
        let mut b = vec![0u8; bs];
        init_dir3_hdr(&mut b, XDB3_MAGIC, daddr, owner, &geo);
        let mut leaf: Vec<(u32, u32)> = Vec::with_capacity(n);
        let mut at = DATA_HDR_SIZE;
        let mut put = |b: &mut [u8], off: usize, ino: u64, name: &[u8], ft: u8, at: &mut usize| {
            if off > *at {
                dblock::write_free(b, *at, off - *at);
            }
            *at = off + dblock::write_entry(&geo, b, off, ino, name, ft);
            leaf.push((name_hash(name), dataptr(&geo, 0, off)));
        };
        put(&mut b, DATA_HDR_SIZE, owner, b".", FT_DIR, &mut at);
        put(&mut b, DOTDOT_OFF, self.parent, b"..", FT_DIR, &mut at);
        for e in &self.ents {
            let off = usize::from(e.offset);
            if off < at {
                return Err(DirError::Shortform.at(owner, 0, "entry offsets overlap"));
            }
            put(&mut b, off, e.ino, &e.name, e.ftype, &mut at);
        }
        if leaf_start > at {
            dblock::write_free(&mut b, at, leaf_start - at);
        }
        leaf.sort_by_key(|l| l.0);
        super::block::write_leaf(&mut b, &leaf);
        dblock::normalize(&geo, owner, 0, &mut b, leaf_start)?;
        st.put(dp, 0, &b)?;
        dp.size = bs as u64;
        Ok(())
    }

    /// Adds an entry (the caller checked the name is absent and fits).
    pub(crate) fn insert(&mut self, idx: usize, offset: u16, name: &[u8], ino: Ino, ftype: u8) {
        self.ents.insert(
            idx,
            SfEnt {
                offset,
                name: name.to_vec(),
                ino: ino.0,
                ftype,
            },
        );
    }
}

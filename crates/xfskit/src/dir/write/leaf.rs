//! Leaf-form directories: data blocks below 32 GiB and one LEAF1 block at
//! 32 GiB holding every hash entry, then (from the tail up) the best-free
//! length of each data block and their count. Up to node form when the
//! leaf is full; down to a single block when only block 0 is left and
//! its trailing unused region can take the leaf array.

use super::dblock::{self, Ent};
use super::layout::{
    da_magic, dataptr, free_db, init_dir3_hdr, leaf_db, leaf_ent, put_leaf_ent, split_ptr,
    DA_COUNT, DA_STALE_LEVEL, FREE_FIRSTDB, FREE_HDR_SIZE, FREE_NUSED, FREE_NVALID, NULL_DATAOFF,
    XDF3_MAGIC,
};
use super::store::{must_get, Store};
use crate::bytes::{be16, be32, put_be16, put_be32};
use crate::dir::data::{entry_size, BLOCK_TAIL_SIZE, LEAF_ENTRY_SIZE, XDB3_MAGIC, XDD3_MAGIC};
use crate::dir::lookup::{name_hash, DA3_HDR_SIZE, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC};
use crate::dir::DirError;
use crate::error::Result;
use crate::inode::Inode;

/// A decoded leaf-form leaf block.
pub(crate) struct Leaf1 {
    /// Live hash entries, sorted.
    pub ents: Vec<(u32, u32)>,
    /// Best-free length per data block (NULL_DATAOFF for holes).
    pub bests: Vec<u16>,
}

impl Leaf1 {
    /// Decodes (and drops stale entries from) leaf block `b`.
    pub(crate) fn decode(owner: u64, db: u64, b: &[u8]) -> Result<Leaf1> {
        let bs = b.len();
        let bad = |d: String| DirError::Block.at(owner, db, d);
        if da_magic(b) != DIR3_LEAF1_MAGIC {
            return Err(bad("leaf-form leaf block without LEAF1 magic".into()));
        }
        let count = usize::from(be16(b, DA_COUNT));
        let nbests = be32(b, bs - 4) as usize;
        let room = bs - DA3_HDR_SIZE - 4;
        if count * LEAF_ENTRY_SIZE + nbests * 2 > room {
            return Err(bad(format!("leaf with {count} entries and {nbests} bests")));
        }
        let ents = (0..count)
            .map(|i| leaf_ent(b, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE))
            .filter(|e| e.1 != 0)
            .collect();
        let at = bs - 4 - nbests * 2;
        let bests = (0..nbests).map(|i| be16(b, at + 2 * i)).collect();
        Ok(Leaf1 { ents, bests })
    }

    /// True when the block can hold this leaf.
    pub(crate) fn fits(&self, bs: usize) -> bool {
        DA3_HDR_SIZE + self.ents.len() * LEAF_ENTRY_SIZE + self.bests.len() * 2 + 4 <= bs
    }

    /// Encodes into `b` (header kept).
    pub(crate) fn encode(&self, b: &mut [u8]) {
        let bs = b.len();
        b[DA3_HDR_SIZE..].fill(0);
        put_be16(b, DA_COUNT, self.ents.len() as u16);
        put_be16(b, DA_STALE_LEVEL, 0);
        for (i, &(h, a)) in self.ents.iter().enumerate() {
            put_leaf_ent(b, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE, h, a);
        }
        put_be32(b, bs - 4, self.bests.len() as u32);
        let at = bs - 4 - self.bests.len() * 2;
        for (i, &v) in self.bests.iter().enumerate() {
            put_be16(b, at + 2 * i, v);
        }
    }
}

/// Finds `name` through sorted hash entries `ents`: the index of its leaf
/// entry and the entry itself.
pub(crate) fn probe(
    st: &mut dyn Store,
    dp: &Inode,
    ents: &[(u32, u32)],
    name: &[u8],
) -> Result<Option<(usize, u64, Ent)>> {
    let geo = st.geo().clone();
    let h = name_hash(name);
    let mut i = ents.partition_point(|e| e.0 < h);
    while i < ents.len() && ents[i].0 == h {
        if ents[i].1 != 0 {
            let (db, off) = split_ptr(&geo, ents[i].1);
            if db >= leaf_db(&geo) {
                return Err(DirError::Block.at(dp.ino.0, db, "leaf entry points outside the data"));
            }
            let b = must_get(st, dp, db)?;
            let end = data_end(&b);
            let e = dblock::entry_checked(&geo, dp.ino.0, db, &b, end, off)?;
            if e.name == name {
                return Ok(Some((i, db, e)));
            }
        }
        i += 1;
    }
    Ok(None)
}

/// Where the entries of a data block end (the leaf array of an XDB3).
pub(crate) fn data_end(b: &[u8]) -> usize {
    if be32(b, 0) == XDB3_MAGIC {
        b.len() - BLOCK_TAIL_SIZE - be32(b, b.len() - 8) as usize * LEAF_ENTRY_SIZE
    } else {
        b.len()
    }
}

fn load(st: &mut dyn Store, dp: &Inode) -> Result<(Vec<u8>, Leaf1)> {
    let ldb = leaf_db(st.geo());
    let b = must_get(st, dp, ldb)?;
    let l = Leaf1::decode(dp.ino.0, ldb, &b)?;
    Ok((b, l))
}

/// Finds `name`: (data block, entry).
pub(crate) fn find(st: &mut dyn Store, dp: &Inode, name: &[u8]) -> Result<Option<(u64, Ent)>> {
    let (_, l) = load(st, dp)?;
    Ok(probe(st, dp, &l.ents, name)?.map(|(_, db, e)| (db, e)))
}

/// Initialises a fresh data block `db` (XDD3, all unused).
pub(crate) fn new_data_block(st: &mut dyn Store, dp: &mut Inode, db: u64) -> Result<Vec<u8>> {
    let geo = st.geo().clone();
    let daddr = st.alloc(dp, db)?;
    let mut b = vec![0u8; geo.dir_blk_size as usize];
    init_dir3_hdr(&mut b, XDD3_MAGIC, daddr, dp.ino.0, &geo);
    dblock::init_area(&mut b, geo.dir_blk_size as usize);
    dp.size = dp.size.max((db + 1) * u64::from(geo.dir_blk_size));
    Ok(b)
}

/// Adds an entry; false when the leaf is full (convert to node).
pub(crate) fn add(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<bool> {
    let geo = st.geo().clone();
    let bs = geo.dir_blk_size as usize;
    let ldb = leaf_db(&geo);
    let (mut lb, mut l) = load(st, dp)?;
    let need = entry_size(name.len(), geo.features.ftype);
    let found = l
        .bests
        .iter()
        .position(|&v| v != NULL_DATAOFF && usize::from(v) >= need);
    let db = match found {
        Some(db) => db,
        None => l
            .bests
            .iter()
            .position(|&v| v == NULL_DATAOFF)
            .unwrap_or(l.bests.len()),
    };
    l.ents.push((0, 0));
    if db == l.bests.len() {
        l.bests.push(NULL_DATAOFF);
    }
    if !l.fits(bs) {
        return Ok(false);
    }
    l.ents.pop();
    let mut b = match found {
        Some(_) => must_get(st, dp, db as u64)?,
        None => new_data_block(st, dp, db as u64)?,
    };
    let end = data_end(&b);
    let slots = dblock::slots(&geo, dp.ino.0, db as u64, &b, end)?;
    let at = dblock::find_fit(&slots, need, end, 0).ok_or_else(|| {
        DirError::Block.at(
            dp.ino.0,
            db as u64,
            "best-free table promises space that is not there",
        )
    })?;
    let off = dblock::insert(&geo, dp.ino.0, db as u64, &mut b, end, at, ino, name, ftype)?;
    l.bests[db] = dblock::best(&b);
    let h = name_hash(name);
    let pos = l.ents.partition_point(|e| e.0 <= h);
    l.ents.insert(pos, (h, dataptr(&geo, db as u64, off)));
    l.encode(&mut lb);
    st.put(dp, db as u64, &b)?;
    st.put(dp, ldb, &lb)?;
    Ok(true)
}

/// Frees data block `db` when it is empty (never block 0); true if freed.
pub(crate) fn drop_if_empty(st: &mut dyn Store, dp: &mut Inode, db: u64, b: &[u8]) -> Result<bool> {
    let geo = st.geo().clone();
    if db == 0 || !dblock::is_empty(&geo, dp.ino.0, db, b, data_end(b))? {
        return Ok(false);
    }
    st.free(dp, db)?;
    let last = st.mapped_in(dp, 0, leaf_db(&geo))?.last().copied();
    dp.size = last.map_or(0, |d| (d + 1) * u64::from(geo.dir_blk_size));
    Ok(true)
}

/// Removes `name`; None when absent. Converts down when possible.
pub(crate) fn remove(st: &mut dyn Store, dp: &mut Inode, name: &[u8]) -> Result<Option<u64>> {
    let geo = st.geo().clone();
    let ldb = leaf_db(&geo);
    let (mut lb, mut l) = load(st, dp)?;
    let Some((i, db, e)) = probe(st, dp, &l.ents, name)? else {
        return Ok(None);
    };
    let mut b = must_get(st, dp, db)?;
    let end = data_end(&b);
    dblock::remove(&geo, dp.ino.0, db, &mut b, end, e.off)?;
    l.ents.remove(i);
    if drop_if_empty(st, dp, db, &b)? {
        l.bests[db as usize] = NULL_DATAOFF;
        while l.bests.last() == Some(&NULL_DATAOFF) {
            l.bests.pop();
        }
    } else {
        l.bests[db as usize] = dblock::best(&b);
        st.put(dp, db, &b)?;
    }
    l.encode(&mut lb);
    st.put(dp, ldb, &lb)?;
    if try_to_block(st, dp)? {
        super::block::try_to_sf(st, dp)?;
    }
    Ok(Some(e.ino))
}

/// Converts to a single block when only block 0 is left and its last
/// unused region can take the leaf array and tail.
pub(crate) fn try_to_block(st: &mut dyn Store, dp: &mut Inode) -> Result<bool> {
    let geo = st.geo().clone();
    let bs = geo.dir_blk_size as usize;
    let ldb = leaf_db(&geo);
    let (_, l) = load(st, dp)?;
    if l.bests.len() != 1 {
        return Ok(false);
    }
    let mut b = must_get(st, dp, 0)?;
    let slots = dblock::slots(&geo, dp.ino.0, 0, &b, bs)?;
    let need = l.ents.len() * LEAF_ENTRY_SIZE + BLOCK_TAIL_SIZE;
    let Some(last) = slots.last().filter(|s| s.free && s.len >= need) else {
        return Ok(false);
    };
    let start = bs - need;
    if last.len > need {
        dblock::write_free(&mut b, last.off, last.len - need);
    }
    put_be32(&mut b, 0, XDB3_MAGIC);
    super::block::write_leaf(&mut b, &l.ents);
    dblock::normalize(&geo, dp.ino.0, 0, &mut b, start)?;
    st.put(dp, 0, &b)?;
    st.free(dp, ldb)?;
    dp.size = bs as u64;
    Ok(true)
}

/// Turns the leaf-form directory into node form: the bests move to a
/// free-index block and the leaf becomes the (only) LEAFN, the da root.
pub(crate) fn to_node(st: &mut dyn Store, dp: &mut Inode) -> Result<()> {
    let geo = st.geo().clone();
    let bs = geo.dir_blk_size as usize;
    let ldb = leaf_db(&geo);
    let (mut lb, l) = load(st, dp)?;
    let fdb = free_db(&geo);
    let daddr = st.alloc(dp, fdb)?;
    let mut f = vec![0u8; bs];
    init_dir3_hdr(&mut f, XDF3_MAGIC, daddr, dp.ino.0, &geo);
    put_be32(&mut f, FREE_FIRSTDB, 0);
    put_be32(&mut f, FREE_NVALID, l.bests.len() as u32);
    let used = l.bests.iter().filter(|&&v| v != NULL_DATAOFF).count();
    put_be32(&mut f, FREE_NUSED, used as u32);
    for (i, &v) in l.bests.iter().enumerate() {
        put_be16(&mut f, FREE_HDR_SIZE + 2 * i, v);
    }
    lb[DA3_HDR_SIZE..].fill(0);
    put_be16(&mut lb, super::layout::DA_MAGIC, DIR3_LEAFN_MAGIC);
    put_be16(&mut lb, DA_COUNT, l.ents.len() as u16);
    put_be16(&mut lb, DA_STALE_LEVEL, 0);
    for (i, &(h, a)) in l.ents.iter().enumerate() {
        put_leaf_ent(&mut lb, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE, h, a);
    }
    st.put(dp, fdb, &f)?;
    st.put(dp, ldb, &lb)?;
    Ok(())
}

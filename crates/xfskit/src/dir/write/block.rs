//! Single-block directories (XDB3): data entries from the header, the
//! hash-sorted leaf array growing down from the tail. Stale leaf entries
//! (the kernel leaves them) are squeezed out before any change; we never
//! make new ones. Conversions: up to leaf form when the block is full,
//! down to short form when the entries fit the inode.

use super::dblock;
use super::layout::{dataptr, init_da3_hdr, leaf_db, leaf_ent, put_leaf_ent, DA_COUNT};
use super::sf::{Sf, SfEnt};
use super::store::{must_get, Store};
use crate::bytes::{be32, put_be16, put_be32};
use crate::dir::data::{
    entry_size, BLOCK_TAIL_SIZE, DATA_HDR_SIZE, LEAF_ENTRY_SIZE, XDB3_MAGIC, XDD3_MAGIC,
};
use crate::dir::lookup::{name_hash, DA3_HDR_SIZE, DIR3_LEAF1_MAGIC};
use crate::dir::DirError;
use crate::error::Result;
use crate::geometry::Geometry;
use crate::inode::Inode;

/// Writes `ents` as the leaf array and tail of a single block.
pub(crate) fn write_leaf(b: &mut [u8], ents: &[(u32, u32)]) {
    let bs = b.len();
    let start = bs - BLOCK_TAIL_SIZE - ents.len() * LEAF_ENTRY_SIZE;
    for (i, &(h, a)) in ents.iter().enumerate() {
        put_leaf_ent(b, start + i * LEAF_ENTRY_SIZE, h, a);
    }
    put_be32(b, bs - 8, ents.len() as u32);
    put_be32(b, bs - 4, 0);
}

/// The live leaf entries of a single block, stale ones squeezed out (the
/// freed bytes become unused data space). Returns the leaf start too.
pub(crate) fn compact(
    geo: &Geometry,
    owner: u64,
    b: &mut [u8],
) -> Result<(usize, Vec<(u32, u32)>)> {
    let bs = b.len();
    let count = be32(b, bs - 8) as usize;
    let stale = be32(b, bs - 4) as usize;
    if count > (bs - BLOCK_TAIL_SIZE - DATA_HDR_SIZE) / LEAF_ENTRY_SIZE || stale > count {
        return Err(DirError::Block.at(owner, 0, format!("block tail counts {count}/{stale}")));
    }
    let start = bs - BLOCK_TAIL_SIZE - count * LEAF_ENTRY_SIZE;
    let ents: Vec<(u32, u32)> = (0..count)
        .map(|i| leaf_ent(b, start + i * LEAF_ENTRY_SIZE))
        .filter(|e| e.1 != 0)
        .collect();
    if ents.len() != count {
        let new_start = bs - BLOCK_TAIL_SIZE - ents.len() * LEAF_ENTRY_SIZE;
        dblock::write_free(b, start, new_start - start);
        write_leaf(b, &ents);
        dblock::normalize(geo, owner, 0, b, new_start)?;
        return Ok((new_start, ents));
    }
    Ok((start, ents))
}

/// Reads block 0 with its leaf compacted.
/// A single block, its leaf start and live leaf entries.
type Loaded = (Vec<u8>, usize, Vec<(u32, u32)>);

fn load(st: &mut dyn Store, dp: &Inode) -> Result<Loaded> {
    let geo = st.geo().clone();
    let mut b = must_get(st, dp, 0)?;
    if be32(&b, 0) != XDB3_MAGIC {
        return Err(DirError::Block.at(dp.ino.0, 0, "single-block directory without XDB3"));
    }
    let (start, ents) = compact(&geo, dp.ino.0, &mut b)?;
    Ok((b, start, ents))
}

/// Adds an entry; false when the block has no room (convert to leaf).
pub(crate) fn add(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<bool> {
    let geo = st.geo().clone();
    let owner = dp.ino.0;
    let (mut b, start, mut ents) = load(st, dp)?;
    let slots = dblock::slots(&geo, owner, 0, &b, start)?;
    let need = entry_size(name.len(), geo.features.ftype);
    // The leaf array grows by one entry into the unused region before it.
    let Some(last) = slots.last().filter(|s| s.free && s.len >= LEAF_ENTRY_SIZE) else {
        return Ok(false);
    };
    let Some(at) = dblock::find_fit(&slots, need, start, LEAF_ENTRY_SIZE) else {
        return Ok(false);
    };
    let new_start = start - LEAF_ENTRY_SIZE;
    if last.len > LEAF_ENTRY_SIZE {
        dblock::write_free(&mut b, last.off, last.len - LEAF_ENTRY_SIZE);
    }
    let off = dblock::insert(&geo, owner, 0, &mut b, new_start, at, ino, name, ftype)?;
    let h = name_hash(name);
    let pos = ents.partition_point(|e| e.0 <= h);
    ents.insert(pos, (h, dataptr(&geo, 0, off)));
    write_leaf(&mut b, &ents);
    st.put(dp, 0, &b)?;
    Ok(true)
}

/// Removes `name`; returns its inode, None when absent. Converts to short
/// form when the rest fits the inode.
pub(crate) fn remove(st: &mut dyn Store, dp: &mut Inode, name: &[u8]) -> Result<Option<u64>> {
    let geo = st.geo().clone();
    let owner = dp.ino.0;
    let (mut b, start, mut ents) = load(st, dp)?;
    let Some(e) = dblock::find(&geo, owner, 0, &b, start, name)? else {
        return Ok(None);
    };
    dblock::remove(&geo, owner, 0, &mut b, start, e.off)?;
    let ptr = dataptr(&geo, 0, e.off);
    let i = ents
        .iter()
        .position(|l| l.1 == ptr)
        .ok_or_else(|| DirError::Block.at(owner, 0, "entry has no leaf entry"))?;
    ents.remove(i);
    write_leaf(&mut b, &ents);
    dblock::write_free(&mut b, start, LEAF_ENTRY_SIZE);
    dblock::normalize(&geo, owner, 0, &mut b, start + LEAF_ENTRY_SIZE)?;
    st.put(dp, 0, &b)?;
    try_to_sf(st, dp)?;
    Ok(Some(e.ino))
}

/// Converts to short form when the entries fit the inode.
pub(crate) fn try_to_sf(st: &mut dyn Store, dp: &mut Inode) -> Result<bool> {
    let geo = st.geo().clone();
    let (b, start, _) = load(st, dp)?;
    let mut sf = Sf {
        parent: 0,
        ents: Vec::new(),
    };
    let mut parent = None;
    for e in dblock::entries(&geo, dp.ino.0, 0, &b, start)? {
        match e.name.as_slice() {
            b"." => {}
            b".." => parent = Some(e.ino),
            _ => sf.ents.push(SfEnt {
                offset: e.off as u16,
                name: e.name,
                ino: e.ino,
                ftype: e.ftype,
            }),
        }
    }
    sf.parent = parent.ok_or_else(|| DirError::Block.at(dp.ino.0, 0, "no \"..\" entry"))?;
    if !sf.fits(&geo, dp) {
        return Ok(false);
    }
    st.free(dp, 0)?;
    sf.store(&geo, dp)?;
    Ok(true)
}

/// Turns the single block into data block 0 plus a leaf-form leaf block.
pub(crate) fn to_leaf(st: &mut dyn Store, dp: &mut Inode) -> Result<()> {
    let geo = st.geo().clone();
    let owner = dp.ino.0;
    let bs = geo.dir_blk_size as usize;
    let (mut b, start, ents) = load(st, dp)?;
    put_be32(&mut b, 0, XDD3_MAGIC);
    dblock::write_free(&mut b, start, bs - start);
    dblock::normalize(&geo, owner, 0, &mut b, bs)?;
    let ldb = leaf_db(&geo);
    let daddr = st.alloc(dp, ldb)?;
    let mut l = vec![0u8; bs];
    init_da3_hdr(&mut l, DIR3_LEAF1_MAGIC, daddr, owner, &geo);
    put_be16(&mut l, DA_COUNT, ents.len() as u16);
    for (i, &(h, a)) in ents.iter().enumerate() {
        put_leaf_ent(&mut l, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE, h, a);
    }
    put_be32(&mut l, bs - 4, 1);
    put_be16(&mut l, bs - 6, dblock::best(&b));
    st.put(dp, 0, &b)?;
    st.put(dp, ldb, &l)?;
    Ok(())
}

//! Free-index blocks of node directories (XDF3, from 64 GiB): for each
//! data block, the length of its longest unused region (NULL_DATAOFF for
//! a hole). Block `free_db + k` covers data blocks `k*per..(k+1)*per`.
//! `nvalid` runs up to the last non-hole slot; `nused` counts non-holes; a
//! block with no used slot is freed.

use super::layout::{
    free_db, init_dir3_hdr, leaf_db, FREE_FIRSTDB, FREE_HDR_SIZE, FREE_NUSED, FREE_NVALID,
    NULL_DATAOFF, XDF3_MAGIC,
};
use super::store::{must_get, Store};
use crate::bytes::{be16, be32, put_be16, put_be32};
use crate::dir::DirError;
use crate::error::Result;
use crate::geometry::Geometry;
use crate::inode::Inode;

/// Slots per free-index block.
pub(crate) fn per_block(geo: &Geometry) -> u64 {
    (u64::from(geo.dir_blk_size) - FREE_HDR_SIZE as u64) / 2
}

/// End (exclusive) of the free-index space in directory blocks.
pub(crate) fn free_end(geo: &Geometry) -> u64 {
    free_db(geo) + (free_db(geo) - leaf_db(geo))
}

/// Decoded slots of a free-index block (`nvalid` of them).
pub(crate) fn bests(owner: u64, fdb: u64, b: &[u8]) -> Result<Vec<u16>> {
    let nvalid = be32(b, FREE_NVALID) as usize;
    if FREE_HDR_SIZE + nvalid * 2 > b.len() {
        return Err(DirError::Block.at(owner, fdb, format!("free index with {nvalid} slots")));
    }
    Ok((0..nvalid)
        .map(|i| be16(b, FREE_HDR_SIZE + 2 * i))
        .collect())
}

fn encode(b: &mut [u8], v: &[u16]) {
    b[FREE_HDR_SIZE..].fill(0);
    put_be32(b, FREE_NVALID, v.len() as u32);
    put_be32(
        b,
        FREE_NUSED,
        v.iter().filter(|&&x| x != NULL_DATAOFF).count() as u32,
    );
    for (i, &x) in v.iter().enumerate() {
        put_be16(b, FREE_HDR_SIZE + 2 * i, x);
    }
}

/// Records data block `db`'s longest unused region (None: the block is gone).
pub(crate) fn set(st: &mut dyn Store, dp: &mut Inode, db: u64, val: Option<u16>) -> Result<()> {
    let geo = st.geo().clone();
    let per = per_block(&geo);
    let fdb = free_db(&geo) + db / per;
    let idx = (db % per) as usize;
    let mut b = match st.get(dp, fdb)? {
        Some(b) => b,
        None => {
            if val.is_none() {
                return Ok(());
            }
            let daddr = st.alloc(dp, fdb)?;
            let mut b = vec![0u8; geo.dir_blk_size as usize];
            init_dir3_hdr(&mut b, XDF3_MAGIC, daddr, dp.ino.0, &geo);
            put_be32(&mut b, FREE_FIRSTDB, ((fdb - free_db(&geo)) * per) as u32);
            b
        }
    };
    let mut v = bests(dp.ino.0, fdb, &b)?;
    if v.len() <= idx {
        v.resize(idx + 1, NULL_DATAOFF);
    }
    v[idx] = val.unwrap_or(NULL_DATAOFF);
    while v.last() == Some(&NULL_DATAOFF) {
        v.pop();
    }
    if v.is_empty() {
        return st.free(dp, fdb);
    }
    encode(&mut b, &v);
    st.put(dp, fdb, &b)
}

/// A data block whose longest unused region holds `need` bytes.
pub(crate) fn find(st: &mut dyn Store, dp: &Inode, need: usize) -> Result<Option<u64>> {
    let geo = st.geo().clone();
    let per = per_block(&geo);
    for fdb in st.mapped_in(dp, free_db(&geo), free_end(&geo))? {
        let b = must_get(st, dp, fdb)?;
        let v = bests(dp.ino.0, fdb, &b)?;
        if let Some(i) = v
            .iter()
            .position(|&x| x != NULL_DATAOFF && usize::from(x) >= need)
        {
            return Ok(Some((fdb - free_db(&geo)) * per + i as u64));
        }
    }
    Ok(None)
}

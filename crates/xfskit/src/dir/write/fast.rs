//! Fast paths for the common cases of finding and adding a name in
//! block, leaf and node directories: binary search of the hash-sorted
//! leaf entries in place, free space found from the best-free table and
//! the bests / free-index slots, entries inserted by moving bytes inside
//! the transaction's buffers. Nothing is decoded into vectors and no
//! block is scanned entry by entry.
//!
//! Each function answers `None` / `false` when its case is not the simple
//! one (stale leaf entries, a full leaf, no block with room, a malformed
//! table) before changing anything, and the general code in the sibling
//! modules does the work instead.

use super::dblock::Ent;
use super::fastblock::{place, read_table, shrink_tail, spot};
use super::layout::{
    da_magic, BESTFREE_OFF, DA_COUNT, DA_STALE_LEVEL, FREE_HDR_SIZE, FREE_NVALID, NULL_DATAOFF,
    XDF3_MAGIC,
};
use super::node;
use super::store::Store;
use crate::bytes::{be16, be32, be64, put_be16, put_be32};
use crate::dir::data::{
    entry_size, BLOCK_TAIL_SIZE, DATA_ALIGN, DATA_HDR_SIZE, FREE_TAG, LEAF_ENTRY_SIZE,
    LEAF_SPACE_OFFSET, XDB3_MAGIC, XDD3_MAGIC,
};
use crate::dir::lookup::{
    name_hash, DA3_HDR_SIZE, DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC,
};
use crate::dir::DirError;
use crate::error::Result;
use crate::inode::Inode;

/// Deepest da tree walked (as the general code).
const MAX_DEPTH: usize = 8;

/// The few geometry facts the fast paths need (copied: the geometry
/// cannot be borrowed while a block is).
#[derive(Clone, Copy)]
pub(crate) struct Dims {
    pub(crate) bs: usize,
    pub(crate) log: u8,
    pub(crate) ftype: bool,
}

fn dims(st: &dyn Store) -> Dims {
    let g = st.geo();
    Dims {
        bs: g.dir_blk_size as usize,
        log: g.dir_blk_log,
        ftype: g.features.ftype,
    }
}

impl Dims {
    fn leaf_db(self) -> u64 {
        LEAF_SPACE_OFFSET / self.bs as u64
    }
    fn free_db(self) -> u64 {
        super::layout::FREE_SPACE_OFFSET / self.bs as u64
    }
    fn split_ptr(self, ptr: u32) -> (u64, usize) {
        let byte = u64::from(ptr) * DATA_ALIGN as u64;
        (byte / self.bs as u64, (byte % self.bs as u64) as usize)
    }
    fn ptr(self, db: u64, off: usize) -> u32 {
        ((db * self.bs as u64 + off as u64) / DATA_ALIGN as u64) as u32
    }
}

/// Index of the first of `n` hash entries at `base` whose hash is >= `h`
/// (`upper`: > `h`).
fn bound(b: &[u8], base: usize, n: usize, h: u32, upper: bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let x = be32(b, base + mid * LEAF_ENTRY_SIZE);
        if x < h || (upper && x == h) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Live data pointers of hash `h` among `n` entries at `base`, and whether
/// the run of `h` reaches the last entry (it may go on in the next leaf).
/// A hash above every entry has no run: the walk down chose this leaf
/// because no leaf holds larger hashes.
fn ptrs_of(b: &[u8], base: usize, n: usize, h: u32) -> (Vec<u32>, bool) {
    let first = bound(b, base, n, h, false);
    let mut i = first;
    let mut v = Vec::new();
    while i < n && be32(b, base + i * LEAF_ENTRY_SIZE) == h {
        let a = be32(b, base + i * LEAF_ENTRY_SIZE + 4);
        if a != 0 {
            v.push(a);
        }
        i += 1;
    }
    (v, i == n && i > first)
}

/// Where the entries of data block `b` end, checked.
fn data_end(b: &[u8]) -> Option<usize> {
    if be32(b, 0) == XDB3_MAGIC {
        let n = be32(b, b.len() - 8) as usize;
        b.len()
            .checked_sub(BLOCK_TAIL_SIZE)?
            .checked_sub(n.checked_mul(LEAF_ENTRY_SIZE)?)
            .filter(|&e| e >= DATA_HDR_SIZE)
    } else {
        Some(b.len())
    }
}

/// The entry that data pointer `ptr` names, if it is called `name`.
fn check(
    st: &mut dyn Store,
    dp: &Inode,
    d: Dims,
    ptr: u32,
    name: &[u8],
) -> Result<Option<(u64, Ent)>> {
    let (db, off) = d.split_ptr(ptr);
    let owner = dp.ino.0;
    if db >= d.leaf_db() {
        return Err(DirError::Block.at(owner, db, "leaf entry points outside the data"));
    }
    let b = st
        .view(dp, db)?
        .ok_or_else(|| DirError::Block.at(owner, db, "directory block is missing"))?;
    let bad = || DirError::Block.at(owner, db, format!("leaf points to no entry at {off}"));
    let end = data_end(b).ok_or_else(bad)?;
    if off < DATA_HDR_SIZE || off + 12 > end || be16(b, off) == FREE_TAG {
        return Err(bad());
    }
    let n = usize::from(b[off + 8]);
    let size = entry_size(n, d.ftype);
    if off + size > end || usize::from(be16(b, off + size - 2)) != off {
        return Err(bad());
    }
    if &b[off + 9..off + 9 + n] != name {
        return Ok(None);
    }
    let e = Ent {
        off,
        ino: be64(b, off),
        name: name.to_vec(),
        ftype: if d.ftype { b[off + 9 + n] } else { 0 },
    };
    Ok(Some((db, e)))
}

fn first_match(
    st: &mut dyn Store,
    dp: &Inode,
    d: Dims,
    ptrs: &[u32],
    name: &[u8],
) -> Result<Option<(u64, Ent)>> {
    for &p in ptrs {
        if let Some(x) = check(st, dp, d, p, name)? {
            return Ok(Some(x));
        }
    }
    Ok(None)
}

/// Finds `name` in a single-block directory through its leaf array.
pub(crate) fn find_block(
    st: &mut dyn Store,
    dp: &Inode,
    name: &[u8],
) -> Result<Option<(u64, Ent)>> {
    let d = dims(st);
    let owner = dp.ino.0;
    let b = st
        .view(dp, 0)?
        .ok_or_else(|| DirError::Block.at(owner, 0, "directory block is missing"))?;
    let bs = b.len();
    let n = be32(b, bs - 8) as usize;
    if be32(b, 0) != XDB3_MAGIC || n > (bs - BLOCK_TAIL_SIZE - DATA_HDR_SIZE) / LEAF_ENTRY_SIZE {
        return Err(DirError::Block.at(owner, 0, "bad single-block directory"));
    }
    let base = bs - BLOCK_TAIL_SIZE - n * LEAF_ENTRY_SIZE;
    let (ptrs, _) = ptrs_of(b, base, n, name_hash(name));
    first_match(st, dp, d, &ptrs, name)
}

/// Finds `name` in a leaf-form directory.
pub(crate) fn find_leaf(st: &mut dyn Store, dp: &Inode, name: &[u8]) -> Result<Option<(u64, Ent)>> {
    let d = dims(st);
    let ldb = d.leaf_db();
    let owner = dp.ino.0;
    let b = st
        .view(dp, ldb)?
        .ok_or_else(|| DirError::Block.at(owner, ldb, "directory block is missing"))?;
    let n = usize::from(be16(b, DA_COUNT));
    let nbests = be32(b, d.bs - 4) as usize;
    if da_magic(b) != DIR3_LEAF1_MAGIC
        || n * LEAF_ENTRY_SIZE + nbests.saturating_mul(2) > d.bs - DA3_HDR_SIZE - 4
    {
        return Err(DirError::Block.at(
            owner,
            ldb,
            format!("leaf with {n} entries and {nbests} bests"),
        ));
    }
    let (ptrs, _) = ptrs_of(b, DA3_HDR_SIZE, n, name_hash(name));
    first_match(st, dp, d, &ptrs, name)
}

/// The nodes (block, index) from the root down, and the leaf block.
type DaPath = (Vec<(u64, usize)>, u64);

/// Walks the da tree to the leaf that should hold hash `h`: the nodes
/// (block, index) from the root, and the leaf. None when the tree is not
/// what the simple walk expects.
fn descend(st: &mut dyn Store, dp: &Inode, d: Dims, h: u32) -> Result<Option<DaPath>> {
    let mut db = d.leaf_db();
    let mut nodes = Vec::new();
    loop {
        let Some(b) = st.view(dp, db)? else {
            return Ok(None);
        };
        match da_magic(b) {
            DA3_NODE_MAGIC => {
                let n = usize::from(be16(b, DA_COUNT)).min((d.bs - DA3_HDR_SIZE) / LEAF_ENTRY_SIZE);
                if n == 0 || nodes.len() >= MAX_DEPTH {
                    return Ok(None);
                }
                let idx = bound(b, DA3_HDR_SIZE, n, h, false).min(n - 1);
                nodes.push((db, idx));
                db = u64::from(be32(b, DA3_HDR_SIZE + idx * LEAF_ENTRY_SIZE + 4)) >> d.log;
            }
            DIR3_LEAFN_MAGIC => return Ok(Some((nodes, db))),
            _ => return Ok(None),
        }
    }
}

/// Finds `name` in a node-form directory. None: not sure (the hash run
/// may continue in the next leaf); ask the general code.
pub(crate) fn find_node(
    st: &mut dyn Store,
    dp: &Inode,
    name: &[u8],
) -> Result<Option<Option<(u64, Ent)>>> {
    let d = dims(st);
    let h = name_hash(name);
    let Some((_, leaf)) = descend(st, dp, d, h)? else {
        return Ok(None);
    };
    let Some(b) = st.view(dp, leaf)? else {
        return Ok(None);
    };
    let n = usize::from(be16(b, DA_COUNT)).min((d.bs - DA3_HDR_SIZE) / LEAF_ENTRY_SIZE);
    let (ptrs, to_end) = ptrs_of(b, DA3_HDR_SIZE, n, h);
    if let Some(x) = first_match(st, dp, d, &ptrs, name)? {
        return Ok(Some(Some(x)));
    }
    if to_end {
        return Ok(None);
    }
    Ok(Some(None))
}

/// Inserts hash entry (h, ptr) into the `n` sorted entries at `base`
/// (room for one more checked by the caller); returns its index.
fn insert_hash(b: &mut [u8], base: usize, n: usize, h: u32, ptr: u32) -> usize {
    let pos = bound(b, base, n, h, true);
    let at = base + pos * LEAF_ENTRY_SIZE;
    b.copy_within(at..base + n * LEAF_ENTRY_SIZE, at + LEAF_ENTRY_SIZE);
    put_be32(b, at, h);
    put_be32(b, at + 4, ptr);
    pos
}

/// Adds an entry to a single-block directory in place: the leaf array
/// grows down by one entry into the unused region before it, the entry
/// goes into the lowest-addressed best-free region that holds it. False
/// (nothing changed) when the general code must do it: stale leaf
/// entries, no unused region before the leaf, no room (convert to leaf
/// form), or a table that does not match the block.
pub(crate) fn add_block(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<bool> {
    let d = dims(st);
    let bs = d.bs;
    let need = entry_size(name.len(), d.ftype);
    let Some(b) = st.view(dp, 0)? else {
        return Ok(false);
    };
    if b.len() != bs || be32(b, 0) != XDB3_MAGIC || be32(b, bs - 4) != 0 {
        return Ok(false);
    }
    let n = be32(b, bs - 8) as usize;
    let Some(start) = (bs - BLOCK_TAIL_SIZE)
        .checked_sub(n.saturating_mul(LEAF_ENTRY_SIZE))
        .filter(|&s| s >= DATA_HDR_SIZE + LEAF_ENTRY_SIZE)
    else {
        return Ok(false);
    };
    // The unused region that ends at the leaf.
    let tail = usize::from(be16(b, start - 2));
    if tail < DATA_HDR_SIZE
        || tail % DATA_ALIGN != 0
        || tail + LEAF_ENTRY_SIZE > start
        || be16(b, tail) != FREE_TAG
        || usize::from(be16(b, tail + 2)) != start - tail
    {
        return Ok(false);
    }
    let tlen = start - tail;
    // Some listed region must hold the entry once the leaf has taken its
    // bytes of the tail (the table lists the longest three, so an
    // unlisted region is no longer than any listed one).
    let fits = read_table(b).iter().any(|&(off, len)| {
        let usable = if off == tail {
            len - len.min(LEAF_ENTRY_SIZE)
        } else {
            len
        };
        usable >= need
    });
    if !fits || spot(b, start, 1).is_none() {
        return Ok(false);
    }
    let h = name_hash(name);
    let pos = bound(b, start, n, h, true);
    let b = st.edit(dp, 0)?;
    let new_start = start - LEAF_ENTRY_SIZE;
    shrink_tail(b, start, tail, tlen, LEAF_ENTRY_SIZE, d)?;
    let s = spot(b, new_start, need)
        .ok_or_else(|| DirError::Block.at(dp.ino.0, 0, "no room after the leaf grew"))?;
    place(b, new_start, &s, d, ino, name, ftype)?;
    // The leaf entries before the new one move down by one entry.
    b.copy_within(start..start + pos * LEAF_ENTRY_SIZE, new_start);
    let at = new_start + pos * LEAF_ENTRY_SIZE;
    put_be32(b, at, h);
    put_be32(b, at + 4, d.ptr(0, s.at));
    put_be32(b, bs - 8, (n + 1) as u32);
    Ok(true)
}

/// Adds an entry to a leaf-form directory in place; false (nothing
/// changed) when the general code must do it.
pub(crate) fn add_leaf(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<bool> {
    let d = dims(st);
    let ldb = d.leaf_db();
    let need = entry_size(name.len(), d.ftype);
    let Some(lb) = st.view(dp, ldb)? else {
        return Ok(false);
    };
    let bs = d.bs;
    let n = usize::from(be16(lb, DA_COUNT));
    let nbests = be32(lb, bs - 4) as usize;
    if da_magic(lb) != DIR3_LEAF1_MAGIC
        || be16(lb, DA_STALE_LEVEL) != 0
        || DA3_HDR_SIZE + (n + 1) * LEAF_ENTRY_SIZE + nbests.saturating_mul(2) + 4 > bs
    {
        return Ok(false);
    }
    let bests_at = bs - 4 - nbests * 2;
    let Some(db) = (0..nbests).find(|&i| {
        let v = be16(lb, bests_at + 2 * i);
        v != NULL_DATAOFF && usize::from(v) >= need
    }) else {
        return Ok(false);
    };
    let db = db as u64;
    let Some((best, ptr)) = place_in(st, dp, d, db, need, ino, name, ftype)? else {
        return Ok(false);
    };
    let lb = st.edit(dp, ldb)?;
    put_be16(lb, bests_at + 2 * db as usize, best);
    insert_hash(lb, DA3_HDR_SIZE, n, name_hash(name), ptr);
    put_be16(lb, DA_COUNT, (n + 1) as u16);
    Ok(true)
}

/// Writes the entry into data block `db` of a leaf- or node-form
/// directory when it has a free region of `need` bytes: returns the
/// block's new largest free region and the entry's address for the hash
/// entry; None (nothing changed) when the block is not a data block or
/// has no room.
#[allow(clippy::too_many_arguments)]
fn place_in(
    st: &mut dyn Store,
    dp: &mut Inode,
    d: Dims,
    db: u64,
    need: usize,
    ino: u64,
    name: &[u8],
    ftype: u8,
) -> Result<Option<(u16, u32)>> {
    let Some(b) = st.view(dp, db)? else {
        return Ok(None);
    };
    if be32(b, 0) != XDD3_MAGIC {
        return Ok(None);
    }
    let Some(s) = spot(b, d.bs, need) else {
        return Ok(None);
    };
    let b = st.edit(dp, db)?;
    place(b, d.bs, &s, d, ino, name, ftype)?;
    Ok(Some((be16(b, BESTFREE_OFF + 2), d.ptr(db, s.at))))
}

/// Adds an entry to a node-form directory in place when a data block
/// has room; false (nothing changed) when the general code must do it.
pub(crate) fn add_node(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<bool> {
    let d = dims(st);
    let bs = d.bs;
    let need = entry_size(name.len(), d.ftype);
    let per = ((bs - FREE_HDR_SIZE) / 2) as u64;
    let ndata = dp.size.div_ceil(bs as u64).min(d.leaf_db());
    let mut found = None;
    for k in 0..ndata.div_ceil(per) {
        let fdb = d.free_db() + k;
        let Some(fb) = st.view(dp, fdb)? else {
            continue;
        };
        let nvalid = be32(fb, FREE_NVALID) as usize;
        if be32(fb, 0) != XDF3_MAGIC || FREE_HDR_SIZE + nvalid.saturating_mul(2) > bs {
            return Ok(false);
        }
        if let Some(i) = (0..nvalid).find(|&i| {
            let v = be16(fb, FREE_HDR_SIZE + 2 * i);
            v != NULL_DATAOFF && usize::from(v) >= need
        }) {
            found = Some((fdb, i, k * per + i as u64));
            break;
        }
    }
    let Some((fdb, slot, db)) = found else {
        return Ok(false);
    };
    let Some((best, ptr)) = place_in(st, dp, d, db, need, ino, name, ftype)? else {
        return Ok(false);
    };
    put_be16(st.edit(dp, fdb)?, FREE_HDR_SIZE + 2 * slot, best);
    let h = name_hash(name);
    // The hash entry: in place when its leaf has room and no stale entries.
    if let Some((nodes, leaf)) = descend(st, dp, d, h)? {
        if let Some(lb) = st.view(dp, leaf)? {
            let n = usize::from(be16(lb, DA_COUNT));
            if be16(lb, DA_STALE_LEVEL) == 0 && n < (bs - DA3_HDR_SIZE) / LEAF_ENTRY_SIZE {
                let lb = st.edit(dp, leaf)?;
                let pos = insert_hash(lb, DA3_HDR_SIZE, n, h, ptr);
                put_be16(lb, DA_COUNT, (n + 1) as u16);
                if pos == n {
                    node::fix_parents(st, dp, &nodes, h)?;
                }
                return Ok(true);
            }
        }
    }
    node::leaf_insert(st, dp, h, ptr)?;
    Ok(true)
}

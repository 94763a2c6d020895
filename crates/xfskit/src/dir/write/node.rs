//! Node-form directories (and btree form, the same with a bmbt fork): a
//! da-btree rooted at 32 GiB whose leaves (LEAFN, linked by sibling
//! pointers) hold the hash entries; free-index blocks at 64 GiB. Every
//! parent entry carries its child's largest hash. Full blocks split in
//! two (the root moves down a level first); empty blocks are unlinked
//! and freed; a root with one child absorbs it; a lone leaf that fits
//! becomes leaf form again.

use super::dblock::{self, Ent};
use super::freeidx;
use super::layout::{
    da_magic, da_to_db, dataptr, db_to_da, free_db, init_da3_hdr, leaf_db, leaf_ent, put_leaf_ent,
    set_da3_blkno, DA_BACK, DA_COUNT, DA_FORW, DA_STALE_LEVEL,
};
use super::leaf::{self, Leaf1};
use super::store::{first_hole, must_get, Store};
use crate::bytes::{be16, be32, put_be16, put_be32};
use crate::dir::data::{entry_size, LEAF_ENTRY_SIZE};
use crate::dir::lookup::{
    name_hash, DA3_HDR_SIZE, DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC,
};
use crate::dir::DirError;
use crate::error::Result;
use crate::inode::Inode;

/// Deepest tree we walk.
const MAX_DEPTH: usize = 8;

/// The nodes (block, chosen index) from the root down, and the leaf.
struct Path {
    nodes: Vec<(u64, usize)>,
    leaf: u64,
}

/// What a change below means for the parent entry.
enum Up {
    /// The child's largest hash is now this.
    Fixed(u32),
    /// The child split: its new largest hash, the right half's, and where it is.
    Split(u32, u32, u64),
    /// The child was freed.
    Removed,
}

fn ents_of(b: &[u8]) -> Vec<(u32, u32)> {
    let n = usize::from(be16(b, DA_COUNT)).min((b.len() - DA3_HDR_SIZE) / LEAF_ENTRY_SIZE);
    (0..n)
        .map(|i| leaf_ent(b, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE))
        .collect()
}

fn live_ents(b: &[u8]) -> Vec<(u32, u32)> {
    let mut v = ents_of(b);
    v.retain(|e| e.1 != 0);
    v
}

fn write_ents(b: &mut [u8], ents: &[(u32, u32)]) {
    b[DA3_HDR_SIZE..].fill(0);
    put_be16(b, DA_COUNT, ents.len() as u16);
    if da_magic(b) != DA3_NODE_MAGIC {
        put_be16(b, DA_STALE_LEVEL, 0);
    }
    for (i, &(h, a)) in ents.iter().enumerate() {
        put_leaf_ent(b, DA3_HDR_SIZE + i * LEAF_ENTRY_SIZE, h, a);
    }
}

fn max_ents(bs: usize) -> usize {
    (bs - DA3_HDR_SIZE) / LEAF_ENTRY_SIZE
}

fn descend(st: &mut dyn Store, dp: &Inode, hash: u32) -> Result<Path> {
    let mut db = leaf_db(st.geo());
    let mut nodes = Vec::new();
    loop {
        let b = must_get(st, dp, db)?;
        match da_magic(&b) {
            DA3_NODE_MAGIC => {
                let ents = ents_of(&b);
                if ents.is_empty() || nodes.len() >= MAX_DEPTH {
                    return Err(DirError::Block.at(dp.ino.0, db, "bad da node"));
                }
                let idx = ents
                    .iter()
                    .position(|e| e.0 >= hash)
                    .unwrap_or(ents.len() - 1);
                nodes.push((db, idx));
                db = da_to_db(st.geo(), ents[idx].1);
            }
            DIR3_LEAFN_MAGIC => return Ok(Path { nodes, leaf: db }),
            m => {
                return Err(DirError::Block.at(
                    dp.ino.0,
                    db,
                    format!("magic {m:#x} in the da tree"),
                ))
            }
        }
    }
}

/// Moves `path` to the next leaf to the right; false at the last leaf.
fn next_leaf(st: &mut dyn Store, dp: &Inode, path: &mut Path) -> Result<bool> {
    let mut k = path.nodes.len();
    while k > 0 {
        k -= 1;
        let (ndb, idx) = path.nodes[k];
        let b = must_get(st, dp, ndb)?;
        let ents = ents_of(&b);
        if idx + 1 < ents.len() {
            path.nodes[k].1 = idx + 1;
            path.nodes.truncate(k + 1);
            let mut child = da_to_db(st.geo(), ents[idx + 1].1);
            loop {
                let cb = must_get(st, dp, child)?;
                if da_magic(&cb) != DA3_NODE_MAGIC || path.nodes.len() >= MAX_DEPTH {
                    path.leaf = child;
                    return Ok(true);
                }
                path.nodes.push((child, 0));
                let first = ents_of(&cb).first().map(|e| e.1);
                child = da_to_db(
                    st.geo(),
                    first.ok_or_else(|| DirError::Block.at(dp.ino.0, child, "empty da node"))?,
                );
            }
        }
    }
    Ok(false)
}

/// Finds `name`: its path, index among the leaf's live entries, data block and entry.
fn find_full(
    st: &mut dyn Store,
    dp: &Inode,
    name: &[u8],
) -> Result<Option<(Path, usize, u64, Ent)>> {
    let h = name_hash(name);
    let mut path = descend(st, dp, h)?;
    for _ in 0..1_000_000 {
        let b = must_get(st, dp, path.leaf)?;
        let ents = live_ents(&b);
        if let Some((i, db, e)) = leaf::probe(st, dp, &ents, name)? {
            return Ok(Some((path, i, db, e)));
        }
        if ents.last().is_some_and(|e| e.0 > h) || !next_leaf(st, dp, &mut path)? {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Finds `name`: (data block, entry).
pub(crate) fn find(st: &mut dyn Store, dp: &Inode, name: &[u8]) -> Result<Option<(u64, Ent)>> {
    Ok(find_full(st, dp, name)?.map(|(_, _, db, e)| (db, e)))
}

fn alloc_da(st: &mut dyn Store, dp: &mut Inode) -> Result<(u64, crate::geometry::Daddr)> {
    let geo = st.geo().clone();
    let db = first_hole(st, dp, leaf_db(&geo), free_db(&geo))?;
    Ok((db, st.alloc(dp, db)?))
}

/// Splits block `db` (contents `b`, too many `ents`) into itself and a new
/// right sibling.
fn split(
    st: &mut dyn Store,
    dp: &mut Inode,
    db: u64,
    mut b: Vec<u8>,
    ents: &[(u32, u32)],
) -> Result<Up> {
    let geo = st.geo().clone();
    let (l, r) = ents.split_at(ents.len() / 2);
    let (ndb, daddr) = alloc_da(st, dp)?;
    let mut nb = vec![0u8; b.len()];
    init_da3_hdr(&mut nb, da_magic(&b), daddr, dp.ino.0, &geo);
    put_be16(&mut nb, DA_STALE_LEVEL, be16(&b, DA_STALE_LEVEL));
    let forw = be32(&b, DA_FORW);
    put_be32(&mut nb, DA_FORW, forw);
    put_be32(&mut nb, DA_BACK, db_to_da(&geo, db));
    put_be32(&mut b, DA_FORW, db_to_da(&geo, ndb));
    if forw != 0 {
        let fdb = da_to_db(&geo, forw);
        let mut fb = must_get(st, dp, fdb)?;
        put_be32(&mut fb, DA_BACK, db_to_da(&geo, ndb));
        st.put(dp, fdb, &fb)?;
    }
    write_ents(&mut b, l);
    write_ents(&mut nb, r);
    st.put(dp, db, &b)?;
    st.put(dp, ndb, &nb)?;
    Ok(Up::Split(l[l.len() - 1].0, r[r.len() - 1].0, ndb))
}

/// Splits the root (contents `b`, too many `ents`): both halves move to
/// new blocks and the root becomes a node one level up.
fn split_root(st: &mut dyn Store, dp: &mut Inode, b: &[u8], ents: &[(u32, u32)]) -> Result<()> {
    let geo = st.geo().clone();
    let root = leaf_db(&geo);
    let magic = da_magic(b);
    let level = if magic == DA3_NODE_MAGIC {
        be16(b, DA_STALE_LEVEL)
    } else {
        0
    };
    let (l, r) = ents.split_at(ents.len() / 2);
    let (adb, aaddr) = alloc_da(st, dp)?;
    let (bdb, baddr) = alloc_da(st, dp)?;
    let mut half = |db: u64, daddr, part: &[(u32, u32)], forw: u32, back: u32| -> Result<()> {
        let mut nb = vec![0u8; b.len()];
        init_da3_hdr(&mut nb, magic, daddr, dp.ino.0, &geo);
        put_be16(&mut nb, DA_STALE_LEVEL, level);
        put_be32(&mut nb, DA_FORW, forw);
        put_be32(&mut nb, DA_BACK, back);
        write_ents(&mut nb, part);
        st.put(dp, db, &nb)
    };
    half(adb, aaddr, l, db_to_da(&geo, bdb), 0)?;
    half(bdb, baddr, r, 0, db_to_da(&geo, adb))?;
    let raddr = st.daddr(dp, root)?;
    let mut rb = vec![0u8; b.len()];
    init_da3_hdr(&mut rb, DA3_NODE_MAGIC, raddr, dp.ino.0, &geo);
    put_be16(&mut rb, DA_STALE_LEVEL, level + 1);
    write_ents(
        &mut rb,
        &[
            (l[l.len() - 1].0, db_to_da(&geo, adb)),
            (r[r.len() - 1].0, db_to_da(&geo, bdb)),
        ],
    );
    st.put(dp, root, &rb)
}

/// Unlinks block `db` from its siblings and frees it.
fn unlink(st: &mut dyn Store, dp: &mut Inode, db: u64, b: &[u8]) -> Result<()> {
    let geo = st.geo().clone();
    let (forw, back) = (be32(b, DA_FORW), be32(b, DA_BACK));
    if back != 0 {
        let pdb = da_to_db(&geo, back);
        let mut pb = must_get(st, dp, pdb)?;
        put_be32(&mut pb, DA_FORW, forw);
        st.put(dp, pdb, &pb)?;
    }
    if forw != 0 {
        let ndb = da_to_db(&geo, forw);
        let mut nb = must_get(st, dp, ndb)?;
        put_be32(&mut nb, DA_BACK, back);
        st.put(dp, ndb, &nb)?;
    }
    st.free(dp, db)
}

/// Applies a change below to the parents on `nodes`, bottom up.
fn propagate(st: &mut dyn Store, dp: &mut Inode, nodes: &[(u64, usize)], mut up: Up) -> Result<()> {
    let geo = st.geo().clone();
    let max = max_ents(geo.dir_blk_size as usize);
    for k in (0..nodes.len()).rev() {
        let (ndb, idx) = nodes[k];
        let mut b = must_get(st, dp, ndb)?;
        let mut ents = ents_of(&b);
        if idx >= ents.len() {
            return Err(DirError::Block.at(dp.ino.0, ndb, "da path index out of range"));
        }
        match up {
            Up::Fixed(h) => {
                if ents[idx].0 == h {
                    return Ok(());
                }
                ents[idx].0 = h;
                if idx + 1 != ents.len() {
                    write_ents(&mut b, &ents);
                    return st.put(dp, ndb, &b);
                }
            }
            Up::Removed => {
                ents.remove(idx);
                if ents.is_empty() && k > 0 {
                    unlink(st, dp, ndb, &b)?;
                    continue;
                }
                if idx != ents.len() || ents.is_empty() {
                    write_ents(&mut b, &ents);
                    return st.put(dp, ndb, &b);
                }
            }
            Up::Split(lh, rh, rdb) => {
                ents[idx].0 = lh;
                ents.insert(idx + 1, (rh, db_to_da(&geo, rdb)));
                if ents.len() > max {
                    if k == 0 {
                        return split_root(st, dp, &b, &ents);
                    }
                    up = split(st, dp, ndb, b, &ents)?;
                    continue;
                }
            }
        }
        write_ents(&mut b, &ents);
        st.put(dp, ndb, &b)?;
        up = Up::Fixed(ents[ents.len() - 1].0);
    }
    Ok(())
}

/// Tells the parents on `nodes` that their child's largest hash is now `h`.
pub(crate) fn fix_parents(
    st: &mut dyn Store,
    dp: &mut Inode,
    nodes: &[(u64, usize)],
    h: u32,
) -> Result<()> {
    propagate(st, dp, nodes, Up::Fixed(h))
}

/// Inserts hash entry (hash, ptr) into the tree.
pub(crate) fn leaf_insert(st: &mut dyn Store, dp: &mut Inode, hash: u32, ptr: u32) -> Result<()> {
    let bs = st.geo().dir_blk_size as usize;
    let path = descend(st, dp, hash)?;
    let mut b = must_get(st, dp, path.leaf)?;
    let mut ents = live_ents(&b);
    let pos = ents.partition_point(|e| e.0 <= hash);
    ents.insert(pos, (hash, ptr));
    if ents.len() <= max_ents(bs) {
        write_ents(&mut b, &ents);
        st.put(dp, path.leaf, &b)?;
        return propagate(st, dp, &path.nodes, Up::Fixed(ents[ents.len() - 1].0));
    }
    if path.nodes.is_empty() {
        return split_root(st, dp, &b, &ents);
    }
    let up = split(st, dp, path.leaf, b, &ents)?;
    propagate(st, dp, &path.nodes, up)
}

/// Adds an entry.
pub(crate) fn add(
    st: &mut dyn Store,
    dp: &mut Inode,
    name: &[u8],
    ino: u64,
    ftype: u8,
) -> Result<()> {
    let geo = st.geo().clone();
    let need = entry_size(name.len(), geo.features.ftype);
    let (db, mut b) = match freeidx::find(st, dp, need)? {
        Some(db) => (db, must_get(st, dp, db)?),
        None => {
            let db = first_hole(st, dp, 0, leaf_db(&geo))?;
            (db, leaf::new_data_block(st, dp, db)?)
        }
    };
    let end = leaf::data_end(&b);
    let slots = dblock::slots(&geo, dp.ino.0, db, &b, end)?;
    let at = dblock::find_fit(&slots, need, end, 0).ok_or_else(|| {
        DirError::Block.at(dp.ino.0, db, "free index promises space that is not there")
    })?;
    let off = dblock::insert(&geo, dp.ino.0, db, &mut b, end, at, ino, name, ftype)?;
    st.put(dp, db, &b)?;
    freeidx::set(st, dp, db, Some(dblock::best(&b)))?;
    leaf_insert(st, dp, name_hash(name), dataptr(&geo, db, off))
}

/// Removes `name`; None when absent. Shrinks the tree and converts down
/// when possible.
pub(crate) fn remove(st: &mut dyn Store, dp: &mut Inode, name: &[u8]) -> Result<Option<u64>> {
    let geo = st.geo().clone();
    let Some((path, i, db, e)) = find_full(st, dp, name)? else {
        return Ok(None);
    };
    let mut b = must_get(st, dp, db)?;
    let end = leaf::data_end(&b);
    dblock::remove(&geo, dp.ino.0, db, &mut b, end, e.off)?;
    if leaf::drop_if_empty(st, dp, db, &b)? {
        freeidx::set(st, dp, db, None)?;
    } else {
        st.put(dp, db, &b)?;
        freeidx::set(st, dp, db, Some(dblock::best(&b)))?;
    }
    let mut lb = must_get(st, dp, path.leaf)?;
    let mut ents = live_ents(&lb);
    ents.remove(i);
    if ents.is_empty() && !path.nodes.is_empty() {
        unlink(st, dp, path.leaf, &lb)?;
        propagate(st, dp, &path.nodes, Up::Removed)?;
    } else {
        write_ents(&mut lb, &ents);
        st.put(dp, path.leaf, &lb)?;
        if let Some(last) = ents.last() {
            propagate(st, dp, &path.nodes, Up::Fixed(last.0))?;
        }
        // Join thin blocks with a sibling, level by level up the path.
        let (mut depth, mut child) = (path.nodes.len(), path.leaf);
        while depth > 0 && join(st, dp, &path.nodes[..depth], child)? {
            depth -= 1;
            child = path.nodes[depth].0;
        }
    }
    collapse_root(st, dp)?;
    if try_to_leaf(st, dp)? && leaf::try_to_block(st, dp)? {
        super::block::try_to_sf(st, dp)?;
    }
    Ok(Some(e.ino))
}

/// Merges `child` (under the last node of `nodes`) with a sibling of the
/// same parent when both together fill at most half a block. True when
/// they were merged (the parent lost an entry).
fn join(st: &mut dyn Store, dp: &mut Inode, nodes: &[(u64, usize)], child: u64) -> Result<bool> {
    let geo = st.geo().clone();
    let (pdb, idx) = nodes[nodes.len() - 1];
    let mut pb = must_get(st, dp, pdb)?;
    let mut pents = ents_of(&pb);
    if pents.len() < 2 || pents.get(idx).map(|e| da_to_db(&geo, e.1)) != Some(child) {
        return Ok(false);
    }
    // Merge the right one of the pair (left, left + 1) into the left.
    let left = if idx > 0 { idx - 1 } else { 0 };
    let (ldb, rdb) = (
        da_to_db(&geo, pents[left].1),
        da_to_db(&geo, pents[left + 1].1),
    );
    let mut lb = must_get(st, dp, ldb)?;
    let rb = must_get(st, dp, rdb)?;
    let (mut le, re) = (live_ents(&lb), live_ents(&rb));
    if le.len() + re.len() > max_ents(geo.dir_blk_size as usize) / 2 || re.is_empty() {
        return Ok(false);
    }
    le.extend_from_slice(&re);
    write_ents(&mut lb, &le);
    st.put(dp, ldb, &lb)?;
    unlink(st, dp, rdb, &rb)?;
    pents[left].0 = pents[left + 1].0;
    pents.remove(left + 1);
    write_ents(&mut pb, &pents);
    st.put(dp, pdb, &pb)?;
    Ok(true)
}

/// While the root is a node with one child, pulls the child into the root.
fn collapse_root(st: &mut dyn Store, dp: &mut Inode) -> Result<()> {
    let geo = st.geo().clone();
    let root = leaf_db(&geo);
    for _ in 0..MAX_DEPTH {
        let rb = must_get(st, dp, root)?;
        let ents = ents_of(&rb);
        if da_magic(&rb) != DA3_NODE_MAGIC || ents.len() != 1 {
            return Ok(());
        }
        let cdb = da_to_db(&geo, ents[0].1);
        let mut cb = must_get(st, dp, cdb)?;
        let raddr = st.daddr(dp, root)?;
        set_da3_blkno(&mut cb, raddr);
        put_be32(&mut cb, DA_FORW, 0);
        put_be32(&mut cb, DA_BACK, 0);
        st.put(dp, root, &cb)?;
        st.free(dp, cdb)?;
    }
    Ok(())
}

/// Converts back to leaf form when the root is the only leaf and it and
/// the one free-index block fit a LEAF1 block.
fn try_to_leaf(st: &mut dyn Store, dp: &mut Inode) -> Result<bool> {
    let geo = st.geo().clone();
    let root = leaf_db(&geo);
    let fdb = free_db(&geo);
    let mut rb = must_get(st, dp, root)?;
    if da_magic(&rb) != DIR3_LEAFN_MAGIC {
        return Ok(false);
    }
    let frees = st.mapped_in(dp, fdb, freeidx::free_end(&geo))?;
    if frees != [fdb] {
        return Ok(false);
    }
    let fb = must_get(st, dp, fdb)?;
    let l = Leaf1 {
        ents: live_ents(&rb),
        bests: freeidx::bests(dp.ino.0, fdb, &fb)?,
    };
    if !l.fits(rb.len()) {
        return Ok(false);
    }
    put_be16(&mut rb, super::layout::DA_MAGIC, DIR3_LEAF1_MAGIC);
    l.encode(&mut rb);
    st.put(dp, root, &rb)?;
    st.free(dp, fdb)?;
    Ok(true)
}

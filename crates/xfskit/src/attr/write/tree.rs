//! Leaf- and node-format attr forks: finding a name's leaf through the
//! da btree, and storing a changed leaf back: in place when it fits,
//! split into new leaves when it does not (turning a single leaf into a
//! tree under a node at block 0), dropped when it empties. Node changes
//! travel up the path: parent hashes follow the highest hash below them,
//! full nodes split, empty nodes go, and a root left with one child takes
//! that child's place.

use super::blocks::{
    cut, decode_leaf, decode_node, encode_leaf, encode_node, is_node, leaf_fits, links, node_max,
    set_back, set_blkno, set_forw, split_points, LEnt, NEnt,
};
use super::fork;
use crate::attr::leaf::{ATTR3_LEAF_MAGIC, ENTRY_SIZE, LEAF_HDR};
use crate::attr::node::{DA3_NODE_MAGIC, DA_MAXDEPTH, NODE_ENTRY, NODE_HDR};
use crate::attr::{loc, Namespace};
use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::trans::{BufId, Trans};

/// One node on the path from the root to a leaf.
#[derive(Clone)]
pub(crate) struct Level {
    dablk: u64,
    id: BufId,
    level: u16,
    ents: Vec<NEnt>,
    /// The entry the path follows.
    idx: usize,
}

/// A leaf and the path of nodes above it (empty when block 0 is the leaf).
#[derive(Clone)]
pub(crate) struct Cursor {
    pub path: Vec<Level>,
    pub dablk: u64,
    pub id: BufId,
    pub ents: Vec<LEnt>,
}

fn corrupt(ip: &Inode, dablk: u64, d: impl Into<String>) -> Error {
    Error::corrupt("attr btree node", loc(ip.ino.0, dablk), d)
}

/// Descends from node or leaf `dablk` (with `path` above it), choosing
/// at each node the entry `choose` picks.
fn descend(
    tp: &mut Trans<'_>,
    ip: &Inode,
    mut path: Vec<Level>,
    mut dablk: u64,
    choose: &dyn Fn(&[NEnt]) -> usize,
) -> Result<Cursor> {
    loop {
        let id = fork::read_da(tp, ip, dablk)?;
        if !is_node(tp.buf(id)) {
            if path.last().is_some_and(|l| l.level != 1) {
                return Err(corrupt(ip, dablk, "leaf found above level 0"));
            }
            let (ents, _, _) = decode_leaf(ip.ino.0, dablk, tp.buf(id))?;
            return Ok(Cursor {
                path,
                dablk,
                id,
                ents,
            });
        }
        let (level, ents) = decode_node(ip.ino.0, dablk, tp.buf(id))?;
        if path.last().is_some_and(|l| l.level != level + 1) || path.len() >= DA_MAXDEPTH as usize {
            return Err(corrupt(
                ip,
                dablk,
                format!("node at unexpected level {level}"),
            ));
        }
        let idx = choose(&ents).min(ents.len() - 1);
        let child = u64::from(ents[idx].before);
        if child == 0 {
            return Err(corrupt(ip, dablk, "entry points at the root block"));
        }
        path.push(Level {
            dablk,
            id,
            level,
            ents,
            idx,
        });
        dablk = child;
    }
}

/// The cursor of the leaf after `c`'s, if any.
fn next_leaf(tp: &mut Trans<'_>, ip: &Inode, c: &Cursor) -> Result<Option<Cursor>> {
    let mut path = c.path.clone();
    while let Some(l) = path.last_mut() {
        if l.idx + 1 < l.ents.len() {
            l.idx += 1;
            let child = u64::from(l.ents[l.idx].before);
            return descend(tp, ip, path, child, &|_| 0).map(Some);
        }
        path.pop();
    }
    Ok(None)
}

/// Finds the leaf for (`ns`, `name`) with hash `hash`: the cursor and the
/// entry's index when it exists, else the leaf a new entry goes in.
pub(crate) fn find(
    tp: &mut Trans<'_>,
    ip: &Inode,
    ns: Namespace,
    name: &[u8],
    hash: u32,
    value: &[u8],
) -> Result<(Cursor, Option<usize>)> {
    let first = descend(tp, ip, Vec::new(), 0, &|ents| {
        ents.iter()
            .position(|e| e.hash >= hash)
            .unwrap_or(ents.len() - 1)
    })?;
    let mut c = first.clone();
    // Names with the same hash may continue in the following leaves.
    for _ in 0..=ip.nblocks {
        let hit = c
            .ents
            .iter()
            .position(|e| e.hash == hash && super::same_key(e, ns, name, value));
        if hit.is_some() {
            return Ok((c, hit));
        }
        if c.ents.last().is_none_or(|e| e.hash != hash) {
            break;
        }
        match next_leaf(tp, ip, &c)? {
            Some(n) => c = n,
            None => break,
        }
    }
    Ok((first, None))
}

/// Links new block `new` into a sibling chain right after `at`.
fn link_after(tp: &mut Trans<'_>, ip: &Inode, at: (u64, BufId), new: (u64, BufId)) -> Result<()> {
    let (forw, _) = links(tp.buf(at.1));
    set_forw(tp.buf_mut(at.1), new.0 as u32);
    set_back(tp.buf_mut(new.1), at.0 as u32);
    set_forw(tp.buf_mut(new.1), forw);
    if forw != 0 {
        let id = fork::read_da(tp, ip, u64::from(forw))?;
        set_back(tp.buf_mut(id), new.0 as u32);
    }
    Ok(())
}

/// Takes block `b` out of its sibling chain and frees it.
fn unlink_free(tp: &mut Trans<'_>, ip: &mut Inode, dablk: u64, id: BufId) -> Result<()> {
    let (forw, back) = links(tp.buf(id));
    if back != 0 {
        let b = fork::read_da(tp, ip, u64::from(back))?;
        set_forw(tp.buf_mut(b), forw);
    }
    if forw != 0 {
        let f = fork::read_da(tp, ip, u64::from(forw))?;
        set_back(tp.buf_mut(f), back);
    }
    fork::shrink(tp, ip, dablk, 1)
}

/// Writes `pieces` (the first into block `first` = (dablk, buf), the rest
/// into new blocks chained after it) with `write`; returns each piece's
/// block.
fn spread<T>(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    first: (u64, BufId),
    magic: u16,
    pieces: &[Vec<T>],
    write: &dyn Fn(&mut [u8], &[T]),
) -> Result<Vec<u64>> {
    let mut out = vec![first.0];
    write(tp.buf_mut(first.1), &pieces[0]);
    let mut prev = first;
    for p in &pieces[1..] {
        let dablk = fork::grow(tp, ip, 1)?;
        fork::dablk_u32(dablk)?;
        let id = fork::new_da(tp, ip, dablk, magic)?;
        write(tp.buf_mut(id), p);
        link_after(tp, ip, prev, (dablk, id))?;
        prev = (dablk, id);
        out.push(dablk);
    }
    Ok(out)
}

/// Stores the cursor's leaf with entries `ents` (sorted by hash).
pub(crate) fn store_leaf(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    mut c: Cursor,
    ents: Vec<LEnt>,
) -> Result<()> {
    let bsize = tp.geo().block_size as usize;
    let old_last = c.ents.last().map(|e| e.hash);
    if ents.is_empty() && !c.path.is_empty() {
        unlink_free(tp, ip, c.dablk, c.id)?;
        let i = c.path.len() - 1;
        return update_node(tp, ip, &mut c.path, i, Vec::new());
    }
    if leaf_fits(bsize, &ents) {
        encode_leaf(tp.buf_mut(c.id), &ents);
        let new_last = ents.last().map(|e| e.hash);
        if let (false, Some(h)) = (c.path.is_empty(), new_last) {
            if new_last != old_last {
                let i = c.path.len() - 1;
                let me = NEnt {
                    hash: h,
                    before: c.dablk as u32,
                };
                return update_node(tp, ip, &mut c.path, i, vec![me]);
            }
        }
        return Ok(());
    }
    let cuts = split_points(ents.len(), bsize, LEAF_HDR, |i| ents[i].size() + ENTRY_SIZE);
    let pieces = cut(&ents, &cuts);
    let write = |b: &mut [u8], p: &[LEnt]| encode_leaf(b, p);
    if c.path.is_empty() {
        // Block 0 becomes the root node; its leaf moves to new blocks.
        let dablk = fork::grow(tp, ip, 1)?;
        let id = fork::new_da(tp, ip, dablk, ATTR3_LEAF_MAGIC)?;
        let blks = spread(tp, ip, (dablk, id), ATTR3_LEAF_MAGIC, &pieces, &write)?;
        let root: Vec<NEnt> = node_ents(&pieces, &blks, |p: &Vec<LEnt>| p.last().map(|e| e.hash));
        let d = tp.buf_daddr(c.id);
        let geo = tp.geo();
        let buf = tp.buf_mut(c.id);
        super::blocks::init_info(buf, DA3_NODE_MAGIC, d.0, &geo.meta_uuid, ip.ino.0);
        encode_node(buf, 1, &root);
        return Ok(());
    }
    let blks = spread(tp, ip, (c.dablk, c.id), ATTR3_LEAF_MAGIC, &pieces, &write)?;
    let repl = node_ents(&pieces, &blks, |p: &Vec<LEnt>| p.last().map(|e| e.hash));
    let i = c.path.len() - 1;
    update_node(tp, ip, &mut c.path, i, repl)
}

fn node_ents<T>(pieces: &[T], blks: &[u64], last: impl Fn(&T) -> Option<u32>) -> Vec<NEnt> {
    pieces
        .iter()
        .zip(blks)
        .map(|(p, &b)| NEnt {
            hash: last(p).unwrap_or(0),
            before: b as u32,
        })
        .collect()
}

/// Replaces the entry node `path[i]` follows with `repl` (nothing: the
/// child is gone), then stores the node, splitting or dropping it and
/// carrying the change to its parent as needed.
fn update_node(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    path: &mut [Level],
    i: usize,
    repl: Vec<NEnt>,
) -> Result<()> {
    let bsize = tp.geo().block_size as usize;
    let lv = &mut path[i];
    let old_last = lv.ents.last().map(|e| e.hash);
    let idx = lv.idx;
    lv.ents.splice(idx..=idx, repl);
    let (dablk, id, level) = (lv.dablk, lv.id, lv.level);
    let ents = lv.ents.clone();
    if ents.is_empty() {
        if i == 0 {
            return Err(corrupt(ip, dablk, "the root node lost its last entry"));
        }
        unlink_free(tp, ip, dablk, id)?;
        return update_node(tp, ip, path, i - 1, Vec::new());
    }
    if ents.len() <= node_max(bsize) {
        encode_node(tp.buf_mut(id), level, &ents);
        let new_last = ents.last().map(|e| e.hash);
        if i > 0 && new_last != old_last {
            let me = NEnt {
                hash: new_last.unwrap_or(0),
                before: dablk as u32,
            };
            return update_node(tp, ip, path, i - 1, vec![me]);
        }
        return Ok(());
    }
    let cuts = split_points(ents.len(), bsize, NODE_HDR, |_| NODE_ENTRY);
    let pieces = cut(&ents, &cuts);
    let write = move |b: &mut [u8], p: &[NEnt]| encode_node(b, level, p);
    if i == 0 {
        if level >= DA_MAXDEPTH {
            return Err(Error::NoSpace(format!(
                "inode {}: attr btree at its deepest",
                ip.ino.0
            )));
        }
        let nd = fork::grow(tp, ip, 1)?;
        let nid = fork::new_da(tp, ip, nd, DA3_NODE_MAGIC)?;
        let blks = spread(tp, ip, (nd, nid), DA3_NODE_MAGIC, &pieces, &write)?;
        let root = node_ents(&pieces, &blks, |p: &Vec<NEnt>| p.last().map(|e| e.hash));
        encode_node(tp.buf_mut(id), level + 1, &root);
        return Ok(());
    }
    let blks = spread(tp, ip, (dablk, id), DA3_NODE_MAGIC, &pieces, &write)?;
    let repl = node_ents(&pieces, &blks, |p: &Vec<NEnt>| p.last().map(|e| e.hash));
    update_node(tp, ip, path, i - 1, repl)
}

/// While block 0 is a node with a single child, the child's contents
/// move into block 0 and the child's block is freed.
pub(crate) fn collapse_root(tp: &mut Trans<'_>, ip: &mut Inode) -> Result<()> {
    for _ in 0..=DA_MAXDEPTH {
        let root = fork::read_da(tp, ip, 0)?;
        if !is_node(tp.buf(root)) {
            return Ok(());
        }
        let (_, ents) = decode_node(ip.ino.0, 0, tp.buf(root))?;
        if ents.len() != 1 {
            return Ok(());
        }
        let child = u64::from(ents[0].before);
        let cid = fork::read_da(tp, ip, child)?;
        if links(tp.buf(cid)) != (0, 0) {
            return Err(corrupt(ip, child, "only child of the root has siblings"));
        }
        let bytes = tp.buf(cid).to_vec();
        let d = tp.buf_daddr(root);
        let buf = tp.buf_mut(root);
        buf.copy_from_slice(&bytes);
        set_blkno(buf, d.0);
        fork::shrink(tp, ip, child, 1)?;
    }
    Err(corrupt(ip, 0, "root collapse did not end"))
}

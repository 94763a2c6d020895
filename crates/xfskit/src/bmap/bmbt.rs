//! The bmbt: a fork's extent records in a long-pointer btree whose root
//! lives in the inode fork. Nodes are loaded into memory, changed, and
//! written back: insert (splitting blocks, growing the root), delete
//! (merging with or borrowing from a sibling under the same parent),
//! in-place update, and shrinking the root when it has one child.
//!
//! Rules kept (those xfs_repair checks): no block holds more than its
//! maximum; blocks below the root's children hold at least half of it;
//! parent keys equal the first key of their child; sibling pointers link
//! each level left to right.

use super::fork::{self, corrupt};
use super::node::*;
use crate::error::{Error, Result};
use crate::geometry::FsBlock;
use crate::inode::{Extent, Fork, ForkFormat, Inode};
use crate::trans::{BufId, Trans};
use xfs_format::types::NULLFSBLOCK;

/// The path from the root to the leaf where `key` belongs, with the
/// child index taken at each interior level.
fn descend(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, key: u64) -> Result<Vec<(Node, usize)>> {
    let root = load_root(tp.geo(), ip, fork)?;
    let mut path = Vec::with_capacity(usize::from(root.level) + 1);
    let mut node = root;
    while node.level > 0 {
        let i = node.keys.partition_point(|k| *k <= key).saturating_sub(1);
        let child = node.ptrs[i];
        let level = node.level - 1;
        path.push((node, i));
        node = load_block(tp, ip, fork, child, level)?;
    }
    path.push((node, 0));
    Ok(path)
}

/// Sets the key of child `idx` of path level `d` and carries it up while
/// the child is the first one.
fn set_key(path: &mut [(Node, usize)], d: usize, idx: usize, key: u64) {
    let mut d = d;
    let mut idx = idx;
    loop {
        let n = &mut path[d].0;
        if n.keys[idx] != key {
            n.keys[idx] = key;
            n.dirty = true;
        }
        if idx != 0 || d == 0 {
            break;
        }
        idx = path[d - 1].1;
        d -= 1;
    }
}

fn store_path(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    path: &[(Node, usize)],
) -> Result<()> {
    for (n, _) in path {
        if n.dirty {
            store(tp, ip, fork, n)?;
        }
    }
    Ok(())
}

/// Calls `f` on records in order from the last one starting at or before
/// `from`, until it returns false.
pub(crate) fn scan(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    from: u64,
    mut f: impl FnMut(&Extent) -> bool,
) -> Result<()> {
    let mut path = descend(tp, ip, fork, from)?;
    let Some((mut leaf, _)) = path.pop() else {
        return Ok(());
    };
    let mut p = leaf
        .recs
        .partition_point(|e| e.offset <= from)
        .saturating_sub(1);
    let mut budget = ip.nblocks.saturating_add(1);
    loop {
        for e in &leaf.recs[p.min(leaf.recs.len())..] {
            if !f(e) {
                return Ok(());
            }
        }
        if leaf.right == NULLFSBLOCK {
            return Ok(());
        }
        budget = budget.saturating_sub(1);
        if budget == 0 {
            return Err(corrupt(
                ip,
                fork,
                "bmbt leaf chain longer than the inode's blocks",
            ));
        }
        leaf = load_block(tp, ip, fork, leaf.right, 0)?;
        p = 0;
    }
}

/// All records, and all bmbt blocks (fs block, buffer), walking every
/// pointer from the root.
pub(crate) fn collect(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
) -> Result<(Vec<Extent>, Vec<(u64, BufId)>)> {
    let root = load_root(tp.geo(), ip, fork)?;
    let mut recs = Vec::new();
    let mut blocks = Vec::new();
    let mut stack: Vec<(u64, u16)> = root
        .ptrs
        .iter()
        .rev()
        .map(|p| (*p, root.level - 1))
        .collect();
    let limit = ip.nblocks.saturating_add(1);
    while let Some((fsb, level)) = stack.pop() {
        if blocks.len() as u64 >= limit {
            return Err(corrupt(
                ip,
                fork,
                "bmbt has more blocks than the inode counts",
            ));
        }
        let n = load_block(tp, ip, fork, fsb, level)?;
        if let Loc::Block { buf, .. } = n.loc {
            blocks.push((fsb, buf));
        }
        if level == 0 {
            if let (Some(last), Some(first)) = (recs.last(), n.recs.first()) {
                let (last, first): (&Extent, &Extent) = (last, first);
                if first.offset < last.end() {
                    return Err(corrupt(
                        ip,
                        fork,
                        "bmbt records overlap or are out of order",
                    ));
                }
            }
            recs.extend(n.recs);
        } else {
            stack.extend(n.ptrs.iter().rev().map(|p| (*p, level - 1)));
        }
    }
    Ok((recs, blocks))
}

/// Turns an extents-format fork holding `recs` (more than fit) into a
/// btree: one leaf under a root in the inode.
pub(crate) fn create(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    recs: &[Extent],
) -> Result<()> {
    let geo = tp.geo();
    if recs.len() > block_max(geo) {
        return Err(Error::Invalid(
            "too many records for one new bmbt leaf".into(),
        ));
    }
    let near = recs.first().map_or(inode_target(geo, ip), |e| e.start);
    let mut leaf = new_block(tp, ip, fork, near, 0)?;
    leaf.recs = recs.to_vec();
    store(tp, ip, fork, &leaf)?;
    let root = Node {
        loc: Loc::Root,
        level: 1,
        keys: vec![recs.first().map_or(0, |e| e.offset)],
        ptrs: vec![leaf.fsb()],
        recs: Vec::new(),
        left: NULLFSBLOCK,
        right: NULLFSBLOCK,
        dirty: true,
        freed: false,
    };
    match fork {
        Fork::Data => ip.format = ForkFormat::Btree,
        Fork::Attr => ip.aformat = ForkFormat::Btree,
    }
    store(tp, ip, fork, &root)?;
    match fork {
        Fork::Data => ip.nextents = recs.len() as u64,
        Fork::Attr => ip.anextents = recs.len() as u32,
    }
    Ok(())
}

/// Rewrites the record with `e`'s offset in place.
pub(crate) fn update(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, e: &Extent) -> Result<()> {
    let mut path = descend(tp, ip, fork, e.offset)?;
    let leaf = &mut path
        .last_mut()
        .ok_or_else(|| corrupt(ip, fork, "empty path"))?
        .0;
    let Some(r) = leaf.recs.iter_mut().find(|r| r.offset == e.offset) else {
        return Err(corrupt(
            ip,
            fork,
            format!("no record at file block {}", e.offset),
        ));
    };
    *r = *e;
    leaf.dirty = true;
    store_path(tp, ip, fork, &path)
}

/// Inserts record `e` (its offset must be new).
pub(crate) fn insert(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, e: &Extent) -> Result<()> {
    let geo = tp.geo();
    let mut path = descend(tp, ip, fork, e.offset)?;
    let mut d = path.len() - 1;
    let leaf = &mut path[d].0;
    let pos = leaf.recs.partition_point(|r| r.offset < e.offset);
    if leaf.recs.get(pos).is_some_and(|r| r.offset == e.offset) {
        return Err(corrupt(
            ip,
            fork,
            format!("two records at file block {}", e.offset),
        ));
    }
    leaf.recs.insert(pos, *e);
    leaf.dirty = true;
    if pos == 0 && d > 0 {
        let idx = path[d - 1].1;
        set_key(&mut path, d - 1, idx, e.offset);
    }
    let rmax = root_max(fork::size(geo, ip, fork)?);
    loop {
        if d == 0 {
            if path[0].0.len() > rmax {
                grow_root(tp, ip, fork, &mut path[0].0)?;
            }
            break;
        }
        if path[d].0.len() <= block_max(geo) {
            break;
        }
        let right = split(tp, ip, fork, &mut path[d].0)?;
        let idx = path[d - 1].1;
        let parent = &mut path[d - 1].0;
        parent.keys.insert(idx + 1, right.first_key().unwrap_or(0));
        parent.ptrs.insert(idx + 1, right.fsb());
        parent.dirty = true;
        store(tp, ip, fork, &right)?;
        d -= 1;
    }
    store_path(tp, ip, fork, &path)
}

/// Moves the upper half of a full block into a new right sibling.
fn split(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, node: &mut Node) -> Result<Node> {
    let mut right = new_block(tp, ip, fork, FsBlock(node.fsb()), node.level)?;
    let at = node.len().div_ceil(2);
    let (k, p, r) = node.split_off(at);
    right.keys = k;
    right.ptrs = p;
    right.recs = r;
    right.left = node.fsb();
    right.right = node.right;
    if node.right != NULLFSBLOCK {
        set_leftsib(tp, ip, fork, node.right, node.level, right.fsb())?;
    }
    node.right = right.fsb();
    node.dirty = true;
    Ok(right)
}

/// Moves an overfull inode root into a new block and points the root at it.
fn grow_root(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, root: &mut Node) -> Result<()> {
    let near = root
        .ptrs
        .first()
        .map_or(inode_target(tp.geo(), ip), |p| FsBlock(*p));
    let mut child = new_block(tp, ip, fork, near, root.level)?;
    child.keys = std::mem::take(&mut root.keys);
    child.ptrs = std::mem::take(&mut root.ptrs);
    store(tp, ip, fork, &child)?;
    root.keys = vec![child.first_key().unwrap_or(0)];
    root.ptrs = vec![child.fsb()];
    root.level += 1;
    if root.level > MAX_LEVELS {
        return Err(Error::Invalid("bmbt too deep".into()));
    }
    root.dirty = true;
    Ok(())
}

/// Deletes the record starting at file block `key`.
pub(crate) fn delete(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, key: u64) -> Result<()> {
    let geo = tp.geo();
    let max = block_max(geo);
    let mut path = descend(tp, ip, fork, key)?;
    let mut d = path.len() - 1;
    let leaf = &mut path[d].0;
    let Some(pos) = leaf.recs.iter().position(|r| r.offset == key) else {
        return Err(corrupt(ip, fork, format!("no record at file block {key}")));
    };
    leaf.recs.remove(pos);
    leaf.dirty = true;
    if pos == 0 && d > 0 {
        if let Some(k) = path[d].0.first_key() {
            let idx = path[d - 1].1;
            set_key(&mut path, d - 1, idx, k);
        }
    }
    let mut extra: Vec<Node> = Vec::new();
    while d >= 1 && path[d].0.len() < max / 2 {
        let idx = path[d - 1].1;
        let plen = path[d - 1].0.len();
        if plen < 2 {
            break;
        }
        let sidx = if idx + 1 < plen { idx + 1 } else { idx - 1 };
        let level = path[d].0.level;
        let mut sib = load_block(tp, ip, fork, path[d - 1].0.ptrs[sidx], level)?;
        let (upper, lower) = path.split_at_mut(d);
        let parent = &mut upper[d - 1].0;
        let node = &mut lower[0].0;
        if node.len() + sib.len() <= max {
            let (lidx, k) = {
                let (left, right, lidx, ridx) = if sidx > idx {
                    (node, &mut sib, idx, sidx)
                } else {
                    (&mut sib, node, sidx, idx)
                };
                left.append(right);
                left.right = right.right;
                left.dirty = true;
                if right.right != NULLFSBLOCK {
                    set_leftsib(tp, ip, fork, right.right, level, left.fsb())?;
                }
                free_node(tp, ip, fork, right)?;
                parent.keys.remove(ridx);
                parent.ptrs.remove(ridx);
                parent.dirty = true;
                (lidx, left.first_key())
            };
            extra.push(sib);
            if let Some(k) = k {
                set_key(&mut path, d - 1, lidx, k);
            }
            d -= 1;
            continue;
        }
        if sidx > idx {
            if level == 0 {
                let r = sib.recs.remove(0);
                node.recs.push(r);
            } else {
                node.keys.push(sib.keys.remove(0));
                node.ptrs.push(sib.ptrs.remove(0));
            }
            let k = sib.first_key().unwrap_or(0);
            sib.dirty = true;
            node.dirty = true;
            extra.push(sib);
            set_key(&mut path, d - 1, sidx, k);
        } else {
            if level == 0 {
                let r = sib
                    .recs
                    .pop()
                    .ok_or_else(|| corrupt(ip, fork, "empty sibling"))?;
                node.recs.insert(0, r);
            } else {
                let k = sib.keys.pop().unwrap_or(0);
                let p = sib.ptrs.pop().unwrap_or(NULLFSBLOCK);
                node.keys.insert(0, k);
                node.ptrs.insert(0, p);
            }
            let k = node.first_key().unwrap_or(0);
            sib.dirty = true;
            node.dirty = true;
            extra.push(sib);
            set_key(&mut path, d - 1, idx, k);
        }
        break;
    }
    for n in &extra {
        if n.dirty {
            store(tp, ip, fork, n)?;
        }
    }
    store_path(tp, ip, fork, &path)
}

/// While the inode root has one child whose entries fit the root, pulls
/// them up and frees the child.
pub(crate) fn shrink(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork) -> Result<()> {
    loop {
        let geo = tp.geo();
        let mut root = load_root(geo, ip, fork)?;
        if root.level < 2 || root.len() != 1 {
            return Ok(());
        }
        let rmax = root_max(fork::size(geo, ip, fork)?);
        let mut child = load_block(tp, ip, fork, root.ptrs[0], root.level - 1)?;
        if child.len() > rmax {
            return Ok(());
        }
        root.keys = std::mem::take(&mut child.keys);
        root.ptrs = std::mem::take(&mut child.ptrs);
        root.level -= 1;
        free_node(tp, ip, fork, &mut child)?;
        store(tp, ip, fork, &root)?;
    }
}

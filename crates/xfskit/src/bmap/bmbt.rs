//! The bmbt: a fork's extent records in a long-pointer btree whose root
//! lives in the inode fork. Nodes are loaded into memory, changed, and
//! written back: insert (shifting an entry to a sibling, else splitting
//! blocks, growing the root), delete (borrowing from, else joining with a
//! sibling under the same parent), in-place update, and shrinking the
//! root when it has one child. Shifts, split points and the order of the
//! rebalancing choices are the kernel's, so that the same changes give
//! the kernel's tree shape and block count (its siblings under another
//! parent are not used here: those trees hold tens of thousands of
//! extents).
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

/// A fork's records and its bmbt blocks (fs block, buffer).
type Collected = (Vec<Extent>, Vec<(u64, BufId)>);

/// All records, and all bmbt blocks (fs block, buffer), walking every
/// pointer from the root.
pub(crate) fn collect(tp: &mut Trans<'_>, ip: &Inode, fork: Fork) -> Result<Collected> {
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

/// Rewrites the record starting at file block `old` with `e`, whose
/// start must keep its place among the others (an extent trimmed or
/// grown at either end); the parent keys follow a changed first record.
pub(crate) fn update_at(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    old: u64,
    e: &Extent,
) -> Result<()> {
    let mut path = descend(tp, ip, fork, old)?;
    let d = path.len() - 1;
    let leaf = &mut path[d].0;
    let Some(pos) = leaf.recs.iter().position(|r| r.offset == old) else {
        return Err(corrupt(ip, fork, format!("no record at file block {old}")));
    };
    // The keys stay in order; the caller's edit as a whole keeps the
    // records apart (a neighbour it removes may still overlap here).
    let before = pos.checked_sub(1).map(|i| leaf.recs[i].offset);
    let after = leaf.recs.get(pos + 1).map(|r| r.offset);
    if before.is_some_and(|b| b >= e.offset) || after.is_some_and(|a| a <= e.offset) {
        return Err(Error::Invalid(format!(
            "record at file block {old} cannot become {}+{}",
            e.offset, e.len
        )));
    }
    leaf.recs[pos] = *e;
    leaf.dirty = true;
    if pos == 0 && d > 0 {
        let idx = path[d - 1].1;
        set_key(&mut path, d - 1, idx, e.offset);
    }
    store_path(tp, ip, fork, &path)
}

/// One entry of a block: a record (leaves) or a key and a child pointer.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Rec(Extent),
    Ptr(u64, u64),
}

fn put(n: &mut Node, i: usize, e: Entry) {
    match e {
        Entry::Rec(r) => n.recs.insert(i, r),
        Entry::Ptr(k, p) => {
            n.keys.insert(i, k);
            n.ptrs.insert(i, p);
        }
    }
    n.dirty = true;
}

fn take(n: &mut Node, i: usize) -> Entry {
    n.dirty = true;
    if n.level == 0 {
        Entry::Rec(n.recs.remove(i))
    } else {
        Entry::Ptr(n.keys.remove(i), n.ptrs.remove(i))
    }
}

/// Inserts record `e` (its offset must be new). As the kernel's btree
/// code does, a full block first gives its last entry to its right
/// sibling, else its first to its left one (siblings under the same
/// parent, with room, when the new entry is not the one that would
/// move), and only then is split: the upper half (the larger one when
/// the count is odd and the new entry goes to the lower half) moves to a
/// new right sibling.
pub(crate) fn insert(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, e: &Extent) -> Result<()> {
    let geo = tp.geo();
    let max = block_max(geo);
    let mut path = descend(tp, ip, fork, e.offset)?;
    let mut d = path.len() - 1;
    let mut pos = path[d].0.recs.partition_point(|r| r.offset < e.offset);
    if path[d]
        .0
        .recs
        .get(pos)
        .is_some_and(|r| r.offset == e.offset)
    {
        return Err(corrupt(
            ip,
            fork,
            format!("two records at file block {}", e.offset),
        ));
    }
    let rmax = root_max(fork::size(geo, ip, fork)?);
    let mut entry = Entry::Rec(*e);
    let mut extra: Vec<Node> = Vec::new();
    // Puts `entry` at `pos` of the node at depth `d`, carrying a new
    // first key up.
    let place = |path: &mut Vec<(Node, usize)>, d: usize, pos: usize, entry: Entry| {
        put(&mut path[d].0, pos, entry);
        if pos == 0 && d > 0 {
            let idx = path[d - 1].1;
            let k = path[d].0.first_key().unwrap_or(0);
            set_key(path, d - 1, idx, k);
        }
    };
    loop {
        if d == 0 {
            place(&mut path, 0, pos, entry);
            if path[0].0.len() > rmax {
                grow_root(tp, ip, fork, &mut path[0].0)?;
            }
            break;
        }
        let len = path[d].0.len();
        if len < max {
            place(&mut path, d, pos, entry);
            break;
        }
        let level = path[d].0.level;
        let idx = path[d - 1].1;
        let plen = path[d - 1].0.len();
        if pos + 1 < len && idx + 1 < plen {
            let mut sib = load_block(tp, ip, fork, path[d - 1].0.ptrs[idx + 1], level)?;
            if sib.len() < max {
                let last = take(&mut path[d].0, len - 1);
                put(&mut sib, 0, last);
                let k = sib.first_key().unwrap_or(0);
                set_key(&mut path, d - 1, idx + 1, k);
                extra.push(sib);
                place(&mut path, d, pos, entry);
                break;
            }
        }
        if pos >= 1 && idx >= 1 {
            let mut sib = load_block(tp, ip, fork, path[d - 1].0.ptrs[idx - 1], level)?;
            if sib.len() < max {
                let first = take(&mut path[d].0, 0);
                let n = sib.len();
                put(&mut sib, n, first);
                extra.push(sib);
                place(&mut path, d, pos - 1, entry);
                let k = path[d].0.first_key().unwrap_or(0);
                set_key(&mut path, d - 1, idx, k);
                break;
            }
        }
        let mut upper = len / 2;
        if len % 2 == 1 && pos < upper + 1 {
            upper += 1;
        }
        let keep = len - upper;
        let mut right = split(tp, ip, fork, &mut path[d].0, keep)?;
        if pos > keep {
            put(&mut right, pos - keep, entry);
        } else {
            place(&mut path, d, pos, entry);
        }
        entry = Entry::Ptr(right.first_key().unwrap_or(0), right.fsb());
        store(tp, ip, fork, &right)?;
        pos = idx + 1;
        d -= 1;
    }
    for n in &extra {
        store(tp, ip, fork, n)?;
    }
    store_path(tp, ip, fork, &path)
}

/// Moves the entries of a full block from `at` on into a new right
/// sibling.
fn split(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    node: &mut Node,
    at: usize,
) -> Result<Node> {
    let mut right = new_block(tp, ip, fork, FsBlock(node.fsb()), node.level)?;
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

/// Deletes the record starting at file block `key`. A block left with
/// fewer than half its maximum entries is rebalanced as the kernel's
/// btree code does, with its siblings under the same parent: it takes
/// the first entry of its right sibling, else the last of its left one,
/// when that sibling keeps at least half; else it is joined into its
/// left sibling, else its right sibling is joined into it, and the
/// parent loses an entry (and may be rebalanced in turn).
pub(crate) fn delete(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, key: u64) -> Result<()> {
    let geo = tp.geo();
    let max = block_max(geo);
    let min = max / 2;
    let mut path = descend(tp, ip, fork, key)?;
    let mut d = path.len() - 1;
    let Some(mut pos) = path[d].0.recs.iter().position(|r| r.offset == key) else {
        return Err(corrupt(ip, fork, format!("no record at file block {key}")));
    };
    let mut extra: Vec<Node> = Vec::new();
    loop {
        take(&mut path[d].0, pos);
        if d == 0 {
            break;
        }
        if pos == 0 {
            if let Some(k) = path[d].0.first_key() {
                let idx = path[d - 1].1;
                set_key(&mut path, d - 1, idx, k);
            }
        }
        if path[d].0.len() >= min {
            break;
        }
        let idx = path[d - 1].1;
        let plen = path[d - 1].0.len();
        let level = path[d].0.level;
        let mut right = if idx + 1 < plen {
            Some(load_block(
                tp,
                ip,
                fork,
                path[d - 1].0.ptrs[idx + 1],
                level,
            )?)
        } else {
            None
        };
        if let Some(mut r) = right.take() {
            if r.len() > min {
                let first = take(&mut r, 0);
                let n = path[d].0.len();
                put(&mut path[d].0, n, first);
                let k = r.first_key().unwrap_or(0);
                extra.push(r);
                set_key(&mut path, d - 1, idx + 1, k);
                break;
            }
            right = Some(r);
        }
        let mut left = if idx >= 1 {
            Some(load_block(
                tp,
                ip,
                fork,
                path[d - 1].0.ptrs[idx - 1],
                level,
            )?)
        } else {
            None
        };
        if let Some(mut l) = left.take() {
            if l.len() > min {
                let n = l.len();
                let last = take(&mut l, n - 1);
                put(&mut path[d].0, 0, last);
                extra.push(l);
                let k = path[d].0.first_key().unwrap_or(0);
                set_key(&mut path, d - 1, idx, k);
                break;
            }
            left = Some(l);
        }
        let node_len = path[d].0.len();
        if let Some(mut l) = left.take().filter(|l| l.len() + node_len <= max) {
            // This block goes into its left sibling.
            let node = &mut path[d].0;
            l.append(node);
            l.right = node.right;
            l.dirty = true;
            if node.right != NULLFSBLOCK {
                set_leftsib(tp, ip, fork, node.right, level, l.fsb())?;
            }
            free_node(tp, ip, fork, node)?;
            extra.push(l);
            pos = idx;
        } else if let Some(mut r) = right.take().filter(|r| r.len() + node_len <= max) {
            // The right sibling goes into this block.
            let node = &mut path[d].0;
            node.append(&mut r);
            node.right = r.right;
            node.dirty = true;
            if r.right != NULLFSBLOCK {
                set_leftsib(tp, ip, fork, r.right, level, node.fsb())?;
            }
            free_node(tp, ip, fork, &mut r)?;
            pos = idx + 1;
        } else {
            break;
        }
        d -= 1;
    }
    for n in &extra {
        if n.dirty && !n.freed {
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

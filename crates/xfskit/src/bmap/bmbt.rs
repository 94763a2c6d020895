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

use super::fork::{self, corrupt, pack, unpack};
use super::space as alloc;
use crate::alloc::{AllocReq, Owner};
use crate::buf::verify::Verifier;
use crate::error::{Error, Result};
use crate::geometry::{FsBlock, Geometry};
use crate::inode::bmap::{BMBT_HDR, BMDR_HDR, REC_SIZE};
use crate::inode::{Extent, Fork, ForkFormat, Inode};
use crate::trans::{BufId, Trans};
use xfs_format::btree::{XFS_BMAP_CRC_MAGIC, XFS_BTREE_LBLOCK_CRC_OFF};
use xfs_format::types::NULLFSBLOCK;

/// Deepest tree we accept (far beyond what any fork can need).
const MAX_LEVELS: u16 = 9;

#[derive(Debug, Clone, Copy)]
enum Loc {
    Root,
    Block { fsb: u64, buf: BufId },
}

/// A btree node in memory: the inode root or a block.
#[derive(Debug)]
struct Node {
    loc: Loc,
    level: u16,
    /// Interior levels: first file block under each child.
    keys: Vec<u64>,
    /// Interior levels: child blocks.
    ptrs: Vec<u64>,
    /// Leaves: the records.
    recs: Vec<Extent>,
    left: u64,
    right: u64,
    dirty: bool,
    freed: bool,
}

impl Node {
    fn len(&self) -> usize {
        if self.level == 0 {
            self.recs.len()
        } else {
            self.keys.len()
        }
    }

    fn first_key(&self) -> Option<u64> {
        if self.level == 0 {
            self.recs.first().map(|r| r.offset)
        } else {
            self.keys.first().copied()
        }
    }

    fn fsb(&self) -> u64 {
        match self.loc {
            Loc::Root => NULLFSBLOCK,
            Loc::Block { fsb, .. } => fsb,
        }
    }

    /// Moves entries `at..` into a new vector-set (for splits).
    fn split_off(&mut self, at: usize) -> (Vec<u64>, Vec<u64>, Vec<Extent>) {
        if self.level == 0 {
            (Vec::new(), Vec::new(), self.recs.split_off(at))
        } else {
            (self.keys.split_off(at), self.ptrs.split_off(at), Vec::new())
        }
    }

    /// Appends all of `other`'s entries.
    fn append(&mut self, other: &mut Node) {
        self.recs.append(&mut other.recs);
        self.keys.append(&mut other.keys);
        self.ptrs.append(&mut other.ptrs);
    }
}

/// Entries (records, or key+pointer pairs) of one bmbt block.
pub(crate) fn block_max(geo: &Geometry) -> usize {
    (geo.block_size as usize - BMBT_HDR) / REC_SIZE
}

/// Key+pointer pairs of a root of `fork_size` bytes.
fn root_max(fork_size: usize) -> usize {
    fork_size.saturating_sub(BMDR_HDR) / 16
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn be64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

fn owner(ip: &Inode, fork: Fork) -> Owner {
    Owner::Inode {
        ino: ip.ino,
        attr_fork: fork == Fork::Attr,
        offset: 0,
        bmbt: true,
    }
}

fn load_root(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<Node> {
    let b = fork::bytes(ip, fork);
    let size = fork::size(geo, ip, fork)?;
    if b.len() < size || size < BMDR_HDR {
        return Err(corrupt(ip, fork, "btree root does not fit the fork"));
    }
    let level = be16(b, 0);
    let n = usize::from(be16(b, 2));
    let max = root_max(size);
    if level == 0 || level > MAX_LEVELS || n == 0 || n > max {
        return Err(corrupt(
            ip,
            fork,
            format!("btree root with level {level} and {n} entries"),
        ));
    }
    let pbase = BMDR_HDR + max * 8;
    Ok(Node {
        loc: Loc::Root,
        level,
        keys: (0..n).map(|i| be64(b, BMDR_HDR + i * 8)).collect(),
        ptrs: (0..n).map(|i| be64(b, pbase + i * 8)).collect(),
        recs: Vec::new(),
        left: NULLFSBLOCK,
        right: NULLFSBLOCK,
        dirty: false,
        freed: false,
    })
}

fn load_block(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, fsb: u64, level: u16) -> Result<Node> {
    let geo = tp.geo();
    if !geo.fsb_valid(FsBlock(fsb)) {
        return Err(corrupt(
            ip,
            fork,
            format!("btree pointer to fs block {fsb} outside the data section"),
        ));
    }
    let v = Verifier::Bmbt {
        owner: ip.ino.0,
        level: Some(level),
    };
    let buf = tp.read_buf(geo.fsb_to_daddr(FsBlock(fsb)), geo.block_size, &v)?;
    let b = tp.buf(buf);
    let n = usize::from(be16(b, 6));
    let max = block_max(geo);
    if n > max {
        return Err(corrupt(
            ip,
            fork,
            format!("bmbt block {fsb} holds {n} entries"),
        ));
    }
    let mut node = Node {
        loc: Loc::Block { fsb, buf },
        level,
        keys: Vec::new(),
        ptrs: Vec::new(),
        recs: Vec::new(),
        left: be64(b, 8),
        right: be64(b, 16),
        dirty: false,
        freed: false,
    };
    if level == 0 {
        node.recs = (0..n)
            .map(|i| unpack(&b[BMBT_HDR + i * REC_SIZE..]))
            .collect();
    } else {
        let pbase = BMBT_HDR + max * 8;
        node.keys = (0..n).map(|i| be64(b, BMBT_HDR + i * 8)).collect();
        node.ptrs = (0..n).map(|i| be64(b, pbase + i * 8)).collect();
    }
    Ok(node)
}

fn store(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, node: &Node) -> Result<()> {
    if node.freed {
        return Ok(());
    }
    let geo = tp.geo();
    match node.loc {
        Loc::Root => {
            let size = fork::size(geo, ip, fork)?;
            let max = root_max(size);
            if node.len() > max || node.level == 0 {
                return Err(Error::Invalid("btree root overflows the fork".into()));
            }
            let b = fork::bytes_reset(geo, ip, fork)?;
            b[0..2].copy_from_slice(&node.level.to_be_bytes());
            b[2..4].copy_from_slice(&(node.len() as u16).to_be_bytes());
            let pbase = BMDR_HDR + max * 8;
            for (i, (k, p)) in node.keys.iter().zip(&node.ptrs).enumerate() {
                b[BMDR_HDR + i * 8..BMDR_HDR + i * 8 + 8].copy_from_slice(&k.to_be_bytes());
                b[pbase + i * 8..pbase + i * 8 + 8].copy_from_slice(&p.to_be_bytes());
            }
        }
        Loc::Block { buf, .. } => {
            let max = block_max(geo);
            if node.len() > max {
                return Err(Error::Invalid("bmbt block overflows".into()));
            }
            let b = tp.buf_mut(buf);
            b[4..6].copy_from_slice(&node.level.to_be_bytes());
            b[6..8].copy_from_slice(&(node.len() as u16).to_be_bytes());
            b[8..16].copy_from_slice(&node.left.to_be_bytes());
            b[16..24].copy_from_slice(&node.right.to_be_bytes());
            b[BMBT_HDR..].fill(0);
            if node.level == 0 {
                for (i, r) in node.recs.iter().enumerate() {
                    pack(r, &mut b[BMBT_HDR + i * REC_SIZE..]);
                }
            } else {
                let pbase = BMBT_HDR + max * 8;
                for (i, (k, p)) in node.keys.iter().zip(&node.ptrs).enumerate() {
                    b[BMBT_HDR + i * 8..BMBT_HDR + i * 8 + 8].copy_from_slice(&k.to_be_bytes());
                    b[pbase + i * 8..pbase + i * 8 + 8].copy_from_slice(&p.to_be_bytes());
                }
            }
        }
    }
    Ok(())
}

/// Where new bmbt blocks of this inode go when nothing nearer is known.
fn inode_target(geo: &Geometry, ip: &Inode) -> FsBlock {
    geo.fsb_make(geo.ino_agno(ip.ino), geo.ino_agbno(ip.ino))
}

/// Allocates and initialises an empty block at `level`, near `near`.
fn new_block(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    near: FsBlock,
    level: u16,
) -> Result<Node> {
    let req = AllocReq {
        target: near,
        minlen: 1,
        maxlen: 1,
        alignment: 1,
        ag_only: false,
        owner: owner(ip, fork),
    };
    let (fsb, _) = alloc::alloc_extent(tp, &req)?;
    ip.nblocks += 1;
    let geo = tp.geo();
    let daddr = geo.fsb_to_daddr(fsb);
    let buf = tp.get_buf(daddr, geo.block_size, Some(XFS_BTREE_LBLOCK_CRC_OFF));
    let b = tp.buf_mut(buf);
    b[0..4].copy_from_slice(&XFS_BMAP_CRC_MAGIC.to_be_bytes());
    b[24..32].copy_from_slice(&daddr.0.to_be_bytes());
    b[40..56].copy_from_slice(&geo.meta_uuid);
    b[56..64].copy_from_slice(&ip.ino.0.to_be_bytes());
    Ok(Node {
        loc: Loc::Block { fsb: fsb.0, buf },
        level,
        keys: Vec::new(),
        ptrs: Vec::new(),
        recs: Vec::new(),
        left: NULLFSBLOCK,
        right: NULLFSBLOCK,
        dirty: true,
        freed: false,
    })
}

fn free_node(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, node: &mut Node) -> Result<()> {
    if let Loc::Block { fsb, buf } = node.loc {
        tp.stale_buf(buf);
        alloc::free_extent(tp, FsBlock(fsb), 1, &owner(ip, fork))?;
        ip.nblocks = ip.nblocks.saturating_sub(1);
        node.freed = true;
        node.dirty = false;
    }
    Ok(())
}

/// Frees bmbt blocks collected by [`collect`].
pub(crate) fn free_blocks(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    blocks: &[(u64, BufId)],
) -> Result<()> {
    for &(fsb, buf) in blocks {
        tp.stale_buf(buf);
        alloc::free_extent(tp, FsBlock(fsb), 1, &owner(ip, fork))?;
        ip.nblocks = ip.nblocks.saturating_sub(1);
    }
    Ok(())
}

fn set_leftsib(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    fsb: u64,
    level: u16,
    to: u64,
) -> Result<()> {
    let n = load_block(tp, ip, fork, fsb, level)?;
    if let Loc::Block { buf, .. } = n.loc {
        tp.buf_mut(buf)[8..16].copy_from_slice(&to.to_be_bytes());
    }
    Ok(())
}

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

/// Checks the tree's shape (the rules in the module comment); returns
/// the number of bmbt blocks.
#[cfg(test)]
pub(crate) fn check(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
) -> std::result::Result<u64, String> {
    let geo = tp.geo();
    let max = block_max(geo);
    let root = load_root(geo, ip, fork).map_err(|e| e.to_string())?;
    // (node, is child of root, key the parent holds for it)
    let mut level_nodes: Vec<(u64, u64, u64, usize)> = Vec::new(); // fsb, left, right, level
    let mut frontier: Vec<(u64, Option<u64>)> = root
        .ptrs
        .iter()
        .zip(&root.keys)
        .map(|(p, k)| (*p, Some(*k)))
        .collect();
    let mut level = root.level;
    let mut blocks = 0u64;
    let mut first_child = true;
    while level > 0 {
        level -= 1;
        let mut next = Vec::new();
        level_nodes.clear();
        for (fsb, key) in &frontier {
            let n = load_block(tp, ip, fork, *fsb, level).map_err(|e| e.to_string())?;
            blocks += 1;
            if n.len() > max || (!first_child && n.len() < max / 2) {
                return Err(format!(
                    "block {fsb} level {level} holds {} entries",
                    n.len()
                ));
            }
            if n.first_key() != *key {
                return Err(format!(
                    "block {fsb}: parent key {key:?}, first key {:?}",
                    n.first_key()
                ));
            }
            level_nodes.push((*fsb, n.left, n.right, 0));
            for (p, k) in n.ptrs.iter().zip(&n.keys) {
                next.push((*p, Some(*k)));
            }
        }
        for (i, (fsb, left, right, _)) in level_nodes.iter().enumerate() {
            let want_left = if i == 0 {
                NULLFSBLOCK
            } else {
                level_nodes[i - 1].0
            };
            let want_right = level_nodes.get(i + 1).map_or(NULLFSBLOCK, |x| x.0);
            if *left != want_left || *right != want_right {
                return Err(format!("block {fsb} level {level}: siblings {left}/{right}, want {want_left}/{want_right}"));
            }
        }
        frontier = next;
        first_child = false;
    }
    Ok(blocks)
}

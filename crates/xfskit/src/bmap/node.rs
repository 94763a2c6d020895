//! bmbt nodes in memory: loading a block or the inode root into a
//! [`Node`], writing it back, allocating, initialising and freeing
//! blocks, and laying a root out again for a new fork size.

use super::fork::{self, corrupt, pack, unpack};
use super::space as alloc;
use crate::alloc::{AllocReq, Owner};
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be64};
use crate::error::{Error, Result};
use crate::geometry::{FsBlock, Geometry};
use crate::inode::bmap::{BMBT_HDR, BMDR_HDR, REC_SIZE};
use crate::inode::{Extent, Fork, Inode};
use crate::trans::{BufId, Trans};
use xfs_format::btree::{XFS_BMAP_CRC_MAGIC, XFS_BTREE_LBLOCK_CRC_OFF};
use xfs_format::types::NULLFSBLOCK;

/// Deepest tree we accept (far beyond what any fork can need).
pub(crate) const MAX_LEVELS: u16 = 9;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Loc {
    Root,
    Block { fsb: u64, buf: BufId },
}

/// A btree node in memory: the inode root or a block.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) loc: Loc,
    pub(crate) level: u16,
    /// Interior levels: first file block under each child.
    pub(crate) keys: Vec<u64>,
    /// Interior levels: child blocks.
    pub(crate) ptrs: Vec<u64>,
    /// Leaves: the records.
    pub(crate) recs: Vec<Extent>,
    pub(crate) left: u64,
    pub(crate) right: u64,
    pub(crate) dirty: bool,
    pub(crate) freed: bool,
}

impl Node {
    pub(crate) fn len(&self) -> usize {
        if self.level == 0 {
            self.recs.len()
        } else {
            self.keys.len()
        }
    }

    pub(crate) fn first_key(&self) -> Option<u64> {
        if self.level == 0 {
            self.recs.first().map(|r| r.offset)
        } else {
            self.keys.first().copied()
        }
    }

    pub(crate) fn fsb(&self) -> u64 {
        match self.loc {
            Loc::Root => NULLFSBLOCK,
            Loc::Block { fsb, .. } => fsb,
        }
    }

    /// Moves entries `at..` into a new vector-set (for splits).
    pub(crate) fn split_off(&mut self, at: usize) -> (Vec<u64>, Vec<u64>, Vec<Extent>) {
        if self.level == 0 {
            (Vec::new(), Vec::new(), self.recs.split_off(at))
        } else {
            (self.keys.split_off(at), self.ptrs.split_off(at), Vec::new())
        }
    }

    /// Appends all of `other`'s entries.
    pub(crate) fn append(&mut self, other: &mut Node) {
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
pub(crate) fn root_max(fork_size: usize) -> usize {
    fork_size.saturating_sub(BMDR_HDR) / 16
}

pub(crate) fn owner(ip: &Inode, fork: Fork) -> Owner {
    Owner::Inode {
        ino: ip.ino,
        attr_fork: fork == Fork::Attr,
        offset: 0,
        bmbt: true,
    }
}

pub(crate) fn load_root(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<Node> {
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

pub(crate) fn load_block(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    fsb: u64,
    level: u16,
) -> Result<Node> {
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

pub(crate) fn store(tp: &mut Trans<'_>, ip: &mut Inode, fork: Fork, node: &Node) -> Result<()> {
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
pub(crate) fn inode_target(geo: &Geometry, ip: &Inode) -> FsBlock {
    geo.fsb_make(geo.ino_agno(ip.ino), geo.ino_agbno(ip.ino))
}

/// Allocates and initialises an empty block at `level`, near `near`.
pub(crate) fn new_block(
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

pub(crate) fn free_node(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    node: &mut Node,
) -> Result<()> {
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

pub(crate) fn set_leftsib(
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

/// The btree root `bytes` (a fork of `bytes.len()` bytes) laid out for
/// a fork of `new_size` bytes: pointers sit after the fork's maximum
/// number of keys, so they move when the fork size changes.
pub(crate) fn relayout_root(bytes: &[u8], new_size: usize) -> Result<Vec<u8>> {
    if bytes.len() < BMDR_HDR {
        return Err(Error::Invalid("btree root does not fit its fork".into()));
    }
    let n = usize::from(be16(bytes, 2));
    let (old_max, new_max) = (root_max(bytes.len()), root_max(new_size));
    if n > old_max {
        return Err(Error::Invalid(format!("btree root with {n} entries")));
    }
    if n > new_max {
        return Err(Error::Invalid(format!(
            "btree root of {n} entries does not fit a {new_size}-byte fork"
        )));
    }
    let mut out = vec![0u8; new_size];
    out[..BMDR_HDR + n * 8].copy_from_slice(&bytes[..BMDR_HDR + n * 8]);
    let (op, np) = (BMDR_HDR + old_max * 8, BMDR_HDR + new_max * 8);
    out[np..np + n * 8].copy_from_slice(&bytes[op..op + n * 8]);
    Ok(out)
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

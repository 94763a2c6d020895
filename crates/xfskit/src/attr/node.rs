//! Attr forks kept in blocks: a single leaf (block 0 is a leaf) or a da
//! btree (block 0 is a node; leaves are chained by sibling links).
//!
//! A v5 node block has a 64-byte header (56-byte da3 block info, entry
//! count be16, level be16, 4 pad bytes) followed by (hash be32, child
//! block be32) pairs. We descend along the first child of each node to the
//! leftmost leaf, then follow forward links, counting visited blocks so a
//! cycle cannot make us loop.

use super::leaf::{self, be16, be32, ATTR3_LEAF_MAGIC, INFO_MAGIC};
use super::{loc, RawEntry};
use crate::buf::verify::Verifier;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Daddr, FsBlock};
use crate::inode::{extents, lookup, Extent, Fork, Inode};
use std::sync::Arc;

/// Magic of a v5 da btree node block.
pub(crate) const DA3_NODE_MAGIC: u16 = xfs_format::da::XFS_DA3_NODE_MAGIC;
/// Offset of the entry count in a node.
pub(crate) const NODE_COUNT: usize = 56;
/// Offset of the level in a node (leaves are level 0).
pub(crate) const NODE_LEVEL: usize = 58;
/// Size of the v5 node header.
pub(crate) const NODE_HDR: usize = 64;
/// Size of one node entry (hash, child).
pub(crate) const NODE_ENTRY: usize = 8;
/// Offset of the child block in a node entry.
pub(crate) const NODE_ENT_BEFORE: usize = 4;
/// Deepest da btree the format allows.
pub(crate) const DA_MAXDEPTH: u16 = 5;

/// The attr fork's block map.
pub(crate) struct AttrMap {
    extents: Vec<Extent>,
    /// Blocks mapped in all.
    pub mapped: u64,
}

impl AttrMap {
    /// A map with nothing in it (shortform or no fork).
    pub fn empty() -> AttrMap {
        AttrMap {
            extents: Vec::new(),
            mapped: 0,
        }
    }

    /// Reads the inode's attr fork map.
    pub fn load(fs: &Fs, inode: &Inode) -> Result<AttrMap> {
        let extents = extents(fs, inode, Fork::Attr)?;
        let mapped = extents.iter().map(|e| e.len).sum();
        Ok(AttrMap { extents, mapped })
    }

    /// The disk address of attr-fork block `dablk`; `Err(detail)` for holes
    /// and preallocated blocks.
    pub fn daddr(&self, fs: &Fs, dablk: u64) -> std::result::Result<Daddr, String> {
        match lookup(&self.extents, dablk) {
            Ok(e) if e.unwritten => Err(format!("attr fork block {dablk} is unwritten")),
            Ok(e) => Ok(fs
                .geometry()
                .fsb_to_daddr(FsBlock(e.start.0 + (dablk - e.offset)))),
            Err(_) => Err(format!("attr fork block {dablk} is not mapped")),
        }
    }
}

/// Reads the leaf or node at attr-fork block `dablk`.
fn read_da(fs: &Fs, ino: u64, map: &AttrMap, dablk: u64, what: &'static str) -> Result<Arc<[u8]>> {
    let daddr = map
        .daddr(fs, dablk)
        .map_err(|d| Error::corrupt(what, loc(ino, dablk), d))?;
    let v = Verifier::Da3 {
        magics: &[ATTR3_LEAF_MAGIC, DA3_NODE_MAGIC],
        owner: ino,
    };
    fs.read_meta(daddr, fs.geometry().block_size, &v)
}

/// The leaf reached by descending from block 0, choosing at each node
/// the entry index `choose` returns.
struct Descent {
    dablk: u64,
    blk: Arc<[u8]>,
    visited: u64,
    /// False when block 0 itself is the (only) leaf.
    tree: bool,
}

fn descend(
    fs: &Fs,
    ino: u64,
    map: &AttrMap,
    choose: impl Fn(&[u8], usize) -> usize,
) -> Result<Descent> {
    let node_err = |dablk: u64, d: String| Error::corrupt("attr btree node", loc(ino, dablk), d);
    let mut dablk = 0u64;
    let mut blk = read_da(fs, ino, map, 0, "attr fork")?;
    let mut visited = 1u64;
    let mut expect_level: Option<u16> = None;
    let l = fs.geometry().layout();
    let node_hdr = l.da_hdr;
    while be16(&blk, INFO_MAGIC) == l.da_node_magic {
        let count = usize::from(be16(&blk, l.da_count()));
        let level = be16(&blk, l.da_count() + 2);
        if level == 0 || level > DA_MAXDEPTH || expect_level.is_some_and(|l| l != level) {
            return Err(node_err(
                dablk,
                format!(
                    "node at level {level} (expected {})",
                    expect_level.unwrap_or(level)
                ),
            ));
        }
        if count == 0 || node_hdr + count * NODE_ENTRY > blk.len() {
            return Err(node_err(
                dablk,
                format!("{count} entries do not fit in a {}-byte block", blk.len()),
            ));
        }
        let i = choose(&blk[node_hdr..node_hdr + count * NODE_ENTRY], count).min(count - 1);
        let child = u64::from(be32(&blk, node_hdr + i * NODE_ENTRY + NODE_ENT_BEFORE));
        if child == 0 {
            return Err(node_err(
                dablk,
                format!("entry {i} points at attr fork block 0 (the root)"),
            ));
        }
        visited += 1;
        if visited > map.mapped {
            return Err(node_err(
                dablk,
                "the tree has more blocks than the attr fork maps".into(),
            ));
        }
        expect_level = Some(level - 1);
        dablk = child;
        blk = read_da(fs, ino, map, dablk, "attr btree node")?;
    }
    if expect_level.is_some_and(|l| l != 0) {
        return Err(node_err(
            dablk,
            format!(
                "leaf found where a level {} node belongs",
                expect_level.unwrap_or(0)
            ),
        ));
    }
    Ok(Descent {
        dablk,
        blk,
        visited,
        tree: expect_level.is_some(),
    })
}

/// Reads leaves from the one `d` reached along the sibling chain while
/// `more(leaf)` says the next one is needed; returns their visible entries.
fn follow(
    fs: &Fs,
    ino: u64,
    map: &AttrMap,
    d: Descent,
    more: impl Fn(&leaf::Leaf) -> bool,
) -> Result<Vec<RawEntry>> {
    let Descent {
        mut dablk,
        mut blk,
        mut visited,
        tree,
    } = d;
    let mut out = Vec::new();
    let mut prev: Option<u64> = None;
    loop {
        let lf = leaf::parse(fs.geometry().layout(), ino, dablk, &blk)?;
        if let Some(p) = prev {
            if u64::from(lf.back) != p {
                return Err(Error::corrupt(
                    "attr leaf block",
                    loc(ino, dablk),
                    format!("back link {} does not name the previous leaf {p}", lf.back),
                ));
            }
        }
        let go_on = lf.forw != 0 && tree && more(&lf);
        let forw = lf.forw;
        out.extend(lf.entries);
        // A single-leaf fork (root is the leaf) has no siblings.
        if !go_on {
            break;
        }
        visited += 1;
        if visited > map.mapped {
            return Err(Error::corrupt(
                "attr leaf block",
                loc(ino, dablk),
                "the leaf chain is longer than the attr fork (a sibling loop?)",
            ));
        }
        prev = Some(dablk);
        dablk = u64::from(forw);
        blk = read_da(fs, ino, map, dablk, "attr leaf block")?;
        if be16(&blk, INFO_MAGIC) != fs.geometry().layout().attr_leaf_magic {
            return Err(Error::corrupt(
                "attr leaf block",
                loc(ino, dablk),
                "sibling link points at a node block",
            ));
        }
    }
    Ok(out)
}

/// Every visible entry of a leaf- or node-format attr fork, leaf by leaf
/// from the leftmost one.
pub(crate) fn walk(fs: &Fs, ino: u64, map: &AttrMap) -> Result<Vec<RawEntry>> {
    let d = descend(fs, ino, map, |_, _| 0)?;
    follow(fs, ino, map, d, |_| true)
}

/// The visible entries of the leaves that can hold names hashing to
/// `hash`: node entries record the highest hash below them, so we descend
/// into the first child whose hash is not below `hash`, then keep reading
/// siblings while a leaf ends with that same hash.
pub(crate) fn lookup_hash(fs: &Fs, ino: u64, map: &AttrMap, hash: u32) -> Result<Vec<RawEntry>> {
    let d = descend(fs, ino, map, |ents, count| {
        (0..count)
            .find(|&i| be32(ents, i * NODE_ENTRY) >= hash)
            .unwrap_or(count - 1)
    })?;
    follow(fs, ino, map, d, |lf| lf.last_hash == Some(hash))
}

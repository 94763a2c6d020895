//! Hashed name lookup through the leaf entries of block, leaf, node and
//! btree directories.
//!
//! Leaf entries pair a name hash with the data address (byte offset in the
//! directory's address space / 8) of the entry; they are sorted by hash.
//! Block directories keep them at the end of their one block; leaf
//! directories in a single leaf block at 32 GiB; node and btree directories
//! in leaf blocks under a da-btree whose root is at 32 GiB.

use super::data::{self, DirMap, XDB3_MAGIC};
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32};
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::Inode;

// Layout facts from xfs_da_format.h; to move into xfs-format later.

/// Magic (be16 at byte 8) of a leaf block of a leaf-form directory.
pub const DIR3_LEAF1_MAGIC: u16 = xfs_format::dir::XFS_DIR3_LEAF1_MAGIC;
/// Magic of a leaf block of a node-form directory.
pub const DIR3_LEAFN_MAGIC: u16 = xfs_format::dir::XFS_DIR3_LEAFN_MAGIC;
/// Magic of a da-btree interior node block.
pub const DA3_NODE_MAGIC: u16 = xfs_format::da::XFS_DA3_NODE_MAGIC;
/// Size of the v3 leaf and node headers: the 56-byte block info (forw,
/// back, magic, pad, crc, blkno, lsn, uuid, owner) plus count and
/// stale/level (be16 each) and 4 bytes pad (v4: see `Geometry::layout`).
pub const DA3_HDR_SIZE: usize = 64;
/// Offset of the forward sibling pointer in the block info.
const HDR_FORW: usize = 0;
/// Size of a node entry: hash (be32) and child block (be32, fs blocks).
const NODE_ENTRY_SIZE: usize = 8;
/// Deepest da-btree the kernel builds.
const MAX_DEPTH: u16 = 5;
/// Leaf-form tail at the end of the leaf block: count of best-free slots.
const LEAF1_TAIL_SIZE: usize = 4;

/// The XFS directory name hash (that of attribute names too).
pub use xfs_format::da::da_hashname as name_hash;

enum Probe {
    Found(Ino),
    /// Not in this leaf; the hash run may continue in the next leaf.
    Continue,
    Absent,
}

/// Looks `name` up in an extent- or btree-format directory via its hash index.
pub fn hashed(fs: &Fs, dir: &Inode, name: &[u8]) -> Result<Option<Ino>> {
    let map = DirMap::new(fs, dir)?;
    let hash = name_hash(name);
    let leaf_db = map.leaf_first_db();
    if !map.is_mapped(leaf_db) {
        // Block form: the leaf array sits in the only data block.
        if !map.is_mapped(0) {
            return Err(map.corrupt(0, "directory has neither a first block nor a leaf"));
        }
        let buf = map.read(
            0,
            &Verifier::Dir3 {
                magics: &[XDB3_MAGIC],
                owner: map.ino(),
            },
        )?;
        let (_, leaf) = data::data_end(fs.geometry(), map.ino(), 0, &buf)?;
        let (start, count) = leaf.unwrap_or((0, 0));
        return Ok(match probe(&map, 0, &buf, start, count, hash, name)? {
            Probe::Found(i) => Some(i),
            _ => None,
        });
    }
    let l = fs.geometry().layout();
    let (hdr, count_at, node_magic) = (l.da_hdr, l.da_count(), l.da_node_magic);
    let magics = [DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC, DA3_NODE_MAGIC];
    let owner = map.ino();
    let mut db = leaf_db;
    let mut buf = map.read(
        db,
        &Verifier::Da3 {
            magics: &magics,
            owner,
        },
    )?;
    let mut level_above: Option<u16> = None;
    // Descend the da-btree to the leaf that may hold `hash`.
    while be16(&buf, 8) == node_magic {
        let count = usize::from(be16(&buf, count_at));
        let level = be16(&buf, count_at + 2);
        if count == 0 || hdr + count * NODE_ENTRY_SIZE > buf.len() {
            return Err(map.corrupt(db, format!("da node with {count} entries")));
        }
        if level == 0 || level > MAX_DEPTH || level_above.is_some_and(|a| level + 1 != a) {
            return Err(map.corrupt(db, format!("da node at level {level}")));
        }
        level_above = Some(level);
        let ents = &buf[hdr..hdr + count * NODE_ENTRY_SIZE];
        let idx = (0..count).find(|&i| be32(ents, i * NODE_ENTRY_SIZE) >= hash);
        let Some(idx) = idx else { return Ok(None) };
        let child = map.dablk_to_db(be32(ents, idx * NODE_ENTRY_SIZE + 4));
        if child < leaf_db || child == db {
            return Err(map.corrupt(db, format!("da node points to directory block {child}")));
        }
        let want: &[u16] = if level == 1 {
            &[DIR3_LEAFN_MAGIC]
        } else {
            &[DA3_NODE_MAGIC]
        };
        db = child;
        buf = map.read(
            db,
            &Verifier::Da3 {
                magics: want,
                owner,
            },
        )?;
    }
    let leaf1 = be16(&buf, 8) == l.dir_leaf1_magic;
    if leaf1 && level_above.is_some() {
        return Err(map.corrupt(db, "leaf-form leaf under a da node"));
    }
    // Walk this leaf and, while the hash run continues, its right siblings.
    let mut hops = map.mapped_blocks();
    loop {
        let count = usize::from(be16(&buf, count_at));
        let limit = buf.len() - if leaf1 { LEAF1_TAIL_SIZE } else { 0 };
        if hdr + count * data::LEAF_ENTRY_SIZE > limit {
            return Err(map.corrupt(db, format!("leaf with {count} entries")));
        }
        match probe(&map, db, &buf, hdr, count, hash, name)? {
            Probe::Found(i) => return Ok(Some(i)),
            Probe::Absent => return Ok(None),
            Probe::Continue => {}
        }
        let forw = be32(&buf, HDR_FORW);
        if leaf1 || forw == 0 || hops == 0 {
            return Ok(None);
        }
        hops -= 1;
        // Siblings lie in any order in the directory's address space (a
        // split takes whatever block is free, as the kernel's does, and
        // xfs_repair accepts it); `hops` bounds the walk against loops.
        let next = map.dablk_to_db(forw);
        if next == db || next < leaf_db {
            return Err(map.corrupt(
                db,
                format!("leaf sibling pointer {forw} points at itself or outside the leaves"),
            ));
        }
        db = next;
        buf = map.read(
            db,
            &Verifier::Da3 {
                magics: &[DIR3_LEAFN_MAGIC],
                owner,
            },
        )?;
    }
}

/// Searches `count` sorted leaf entries at `start` of `buf` for `hash`,
/// checking each candidate's name in its data block.
fn probe(
    map: &DirMap<'_>,
    db: u64,
    buf: &[u8],
    start: usize,
    count: usize,
    hash: u32,
    name: &[u8],
) -> Result<Probe> {
    let ents = &buf[start..start + count * data::LEAF_ENTRY_SIZE];
    let hash_at = |i: usize| be32(ents, i * data::LEAF_ENTRY_SIZE);
    let first = partition(count, |i| hash_at(i) < hash);
    let fs = map.fs();
    let bs = u64::from(fs.geometry().dir_blk_size);
    let mut i = first;
    while i < count && hash_at(i) == hash {
        let addr = be32(ents, i * data::LEAF_ENTRY_SIZE + 4);
        i += 1;
        if addr == 0 {
            continue; // stale entry
        }
        let byte = u64::from(addr) << data::DATA_ALIGN.trailing_zeros();
        let (ddb, off) = (byte / bs, (byte % bs) as usize);
        if ddb >= map.leaf_first_db() {
            return Err(map.corrupt(db, format!("leaf address {addr} is outside the data space")));
        }
        let dbuf = map.read_data(ddb)?;
        let (end, _) = data::data_end(fs.geometry(), map.ino(), ddb, &dbuf)?;
        let e = data::entry_at(fs, map.ino(), ddb, &dbuf, off, end)?;
        if e.name == name {
            return Ok(Probe::Found(e.ino));
        }
    }
    Ok(if i == count {
        Probe::Continue
    } else {
        Probe::Absent
    })
}

/// First index in `0..n` where `below` is false (`below` is monotone).
fn partition(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_of_short_names() {
        assert_eq!(name_hash(b""), 0);
        assert_eq!(name_hash(b"a"), 0x61);
        assert_eq!(name_hash(b"ab"), (0x61 << 7) ^ 0x62);
        // Four bytes at a time equals byte at a time.
        let n = b"abcdefgh";
        let mut h = 0u32;
        for c in n.chunks(4) {
            h = (u32::from(c[0]) << 21)
                ^ (u32::from(c[1]) << 14)
                ^ (u32::from(c[2]) << 7)
                ^ u32::from(c[3])
                ^ h.rotate_left(28);
        }
        assert_eq!(name_hash(n), h);
    }
}

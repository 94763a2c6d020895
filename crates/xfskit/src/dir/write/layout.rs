//! Layout facts the writers need beyond the read code's (xfs_da_format.h):
//! the v5 block headers, the free-index block, the three regions of a
//! directory's address space, and data pointers.

use crate::bytes::{be16, be32, put_be32};
use crate::dir::data::{DATA_ALIGN, LEAF_SPACE_OFFSET};
use crate::geometry::{Daddr, Geometry};

/// Magic of a free-index block of a node directory ("XDF3").
pub(crate) const XDF3_MAGIC: u32 = xfs_format::dir::XFS_DIR3_FREE_MAGIC;
/// Byte offset of the free-index space (64 GiB).
pub(crate) const FREE_SPACE_OFFSET: u64 = 64 << 30;
/// CRC offset of data and free-index blocks (32-bit magic first).
pub(crate) const DIR3_CRC_OFF: usize = 4;
/// CRC offset of leaf and da-node blocks (sibling pointers first).
pub(crate) const DA3_CRC_OFF: usize = 12;
/// Offset of the best-free table in a data block header.
pub(crate) const BESTFREE_OFF: usize = 48;
/// Free-index header: first data block covered, valid and used counts.
pub(crate) const FREE_FIRSTDB: usize = 48;
/// See [`FREE_FIRSTDB`].
pub(crate) const FREE_NVALID: usize = 52;
/// See [`FREE_FIRSTDB`].
pub(crate) const FREE_NUSED: usize = 56;
/// Where the be16 best-free lengths of a free-index block start.
pub(crate) const FREE_HDR_SIZE: usize = 64;
/// A best-free slot for a data block that does not exist.
pub(crate) const NULL_DATAOFF: u16 = 0xffff;
/// da3 header: sibling pointers, magic, count and stale/level.
pub(crate) const DA_FORW: usize = 0;
/// See [`DA_FORW`].
pub(crate) const DA_BACK: usize = 4;
/// See [`DA_FORW`].
pub(crate) const DA_MAGIC: usize = 8;
/// See [`DA_FORW`].
pub(crate) const DA_COUNT: usize = 56;
/// See [`DA_FORW`] (stale count in leaves, level in nodes).
pub(crate) const DA_STALE_LEVEL: usize = 58;

/// The three parts of a directory's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Region {
    /// Data blocks below 32 GiB.
    Data,
    /// Leaf and da-node blocks from 32 GiB.
    Leaf,
    /// Free-index blocks from 64 GiB.
    Free,
}

/// Which region directory block `db` lies in.
pub(crate) fn region_of(geo: &Geometry, db: u64) -> Region {
    if db < leaf_db(geo) {
        Region::Data
    } else if db < free_db(geo) {
        Region::Leaf
    } else {
        Region::Free
    }
}

/// First directory block of the leaf space.
pub(crate) fn leaf_db(geo: &Geometry) -> u64 {
    LEAF_SPACE_OFFSET / u64::from(geo.dir_blk_size)
}

/// First directory block of the free-index space.
pub(crate) fn free_db(geo: &Geometry) -> u64 {
    FREE_SPACE_OFFSET / u64::from(geo.dir_blk_size)
}

/// The da-btree pointer (file block number) of directory block `db`.
pub(crate) fn db_to_da(geo: &Geometry, db: u64) -> u32 {
    (db << geo.dir_blk_log) as u32
}

/// The directory block a da-btree pointer names.
pub(crate) fn da_to_db(geo: &Geometry, da: u32) -> u64 {
    u64::from(da) >> geo.dir_blk_log
}

/// The data pointer (leaf entry address) of byte `off` in data block `db`.
pub(crate) fn dataptr(geo: &Geometry, db: u64, off: usize) -> u32 {
    ((db * u64::from(geo.dir_blk_size) + off as u64) / DATA_ALIGN as u64) as u32
}

/// Splits a data pointer into data block and byte offset.
pub(crate) fn split_ptr(geo: &Geometry, ptr: u32) -> (u64, usize) {
    let byte = u64::from(ptr) * DATA_ALIGN as u64;
    let bs = u64::from(geo.dir_blk_size);
    (byte / bs, (byte % bs) as usize)
}

/// Writes a v5 data or free-index header (32-bit magic first).
pub(crate) fn init_dir3_hdr(buf: &mut [u8], magic: u32, daddr: Daddr, owner: u64, geo: &Geometry) {
    buf.fill(0);
    buf[0..4].copy_from_slice(&magic.to_be_bytes());
    buf[8..16].copy_from_slice(&daddr.0.to_be_bytes());
    buf[24..40].copy_from_slice(&geo.meta_uuid);
    buf[40..48].copy_from_slice(&owner.to_be_bytes());
}

/// Writes a v5 da3 header (leaf or node) with no siblings.
pub(crate) fn init_da3_hdr(buf: &mut [u8], magic: u16, daddr: Daddr, owner: u64, geo: &Geometry) {
    buf.fill(0);
    buf[DA_MAGIC..DA_MAGIC + 2].copy_from_slice(&magic.to_be_bytes());
    buf[16..24].copy_from_slice(&daddr.0.to_be_bytes());
    buf[32..48].copy_from_slice(&geo.meta_uuid);
    buf[48..56].copy_from_slice(&owner.to_be_bytes());
}

/// Sets the blkno of a da3 header (after moving a block's contents).
pub(crate) fn set_da3_blkno(buf: &mut [u8], daddr: Daddr) {
    buf[16..24].copy_from_slice(&daddr.0.to_be_bytes());
}

/// Reads a leaf entry (hash, address) at `off`.
pub(crate) fn leaf_ent(b: &[u8], off: usize) -> (u32, u32) {
    (be32(b, off), be32(b, off + 4))
}

/// Writes a leaf entry at `off`.
pub(crate) fn put_leaf_ent(b: &mut [u8], off: usize, hash: u32, addr: u32) {
    put_be32(b, off, hash);
    put_be32(b, off + 4, addr);
}

/// The da3 magic of a leaf or node block.
pub(crate) fn da_magic(b: &[u8]) -> u16 {
    be16(b, DA_MAGIC)
}

//! One btree engine for every XFS btree: the short-pointer AG btrees
//! (bnobt, cntbt, inobt, finobt, rmapbt, refcountbt) and the long-pointer
//! bmbt rooted in an inode fork. A [`Cursor`] walks root to leaf through
//! transaction buffers; lookups, updates, inserts (splitting blocks and
//! growing a new root) and deletes (borrowing from or joining with a
//! sibling, shrinking the root) keep the keys in parent blocks right.
//!
//! A btree type is described by a [`BtreeOps`] value: its [`Shape`]
//! (magic, record/key sizes, pointer width, owner), how records compare,
//! where its root lives and how its blocks are allocated and freed. The
//! cursor owns the ops value but never the transaction: every operation
//! takes `&mut Trans`, so two cursors (bnobt and cntbt) can be used
//! in turn inside one transaction.
//!
//! Overlapping-interval trees (the rmapbt, [`Shape::overlapping`]) keep
//! a low and a high key per node entry; the engine keeps both right
//! (the high key of a subtree is the largest
//! [`BtreeOps::high_key_of_rec`] below it). Lookups use the low keys.
//!
//! Cursor positions: after [`Cursor::insert`] the cursor is on the new
//! record; after [`Cursor::delete`] on the record that followed the
//! deleted one. Every operation starts from a fresh lookup, so a cursor
//! stays usable after another cursor changed another tree.
//!
//! Ready-made types: [`InobtOps`] (inobt/finobt); the free space and
//! reverse mapping btrees live in [`crate::alloc`].
//!
//! # Roots in an inode (bmbt)
//!
//! With [`Shape::root_in_inode`], the top level is not a block but the
//! fork's on-disk `bmdr` area (4-byte header: level, numrecs; then keys
//! and pointers placed for the area's own maxrecs). The caller gives the
//! fork bytes to [`Cursor::with_inode_root`] and copies
//! [`Cursor::inode_root`] back into the inode after changes. When the
//! in-inode root is full, the engine moves its entries into a new block
//! and leaves one entry in the inode (the tree grows a level); when a
//! 1-entry in-inode root's child node fits in the inode, the child is
//! pulled up (the tree shrinks). [`BtreeOps::set_root`] is called with
//! the new level count in both cases (the pointer argument is 0), so the
//! bmap code can adjust the inode's block count. Converting between the
//! extents format and a btree (a leaf directly below the inode) is the
//! bmap code's job, as is resizing the fork area.
//!
//! A tree whose in-inode root may hold records ([`BtreeOps::iroot_records`],
//! the realtime rmap btree) starts as a level-0 root in the inode; it
//! grows into a block when the fork is full and comes back into the inode,
//! as the kernel's does, when a 1-entry root's underfull only child has no
//! more entries than the fork holds key/pointer pairs.

pub(crate) mod block;
pub(crate) mod bulk;
mod cursor;
pub mod inobt;
mod modify;
mod query;

pub use block::{NULL_LONG, NULL_SHORT};
pub use cursor::{Cursor, Dir};
pub use inobt::{InoTree, InobtOps};

use crate::buf::Verifier;
use crate::error::Result;
use crate::geometry::Daddr;
use crate::trans::Trans;
use std::cmp::Ordering;

/// Most levels any XFS btree may have; deeper trees are corrupt.
pub const MAX_LEVELS: usize = 12;

/// The fixed layout facts of one btree type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Block magic (v5).
    pub magic: u32,
    /// 64-bit (filesystem block) pointers and the 72-byte header, rather
    /// than 32-bit AG block pointers and the 56-byte header.
    pub long_ptrs: bool,
    /// Bytes per leaf record.
    pub rec_len: usize,
    /// Bytes per key (a node entry holds one, or two with `overlapping`).
    pub key_len: usize,
    /// Records are intervals that may overlap (rmapbt): each node entry
    /// holds the low and the high key of its subtree.
    pub overlapping: bool,
    /// Block size in bytes.
    pub block_size: usize,
    /// Owner stamped in each block: the AG number (short) or the inode
    /// number (long).
    pub owner: u64,
    /// The root is the inode fork's `bmdr` area, not a block.
    pub root_in_inode: bool,
}

impl Shape {
    /// Header bytes of a block.
    pub fn hdr_len(&self) -> usize {
        if self.long_ptrs {
            xfs_format::btree::XFS_BTREE_LBLOCK_CRC_LEN
        } else {
            xfs_format::btree::XFS_BTREE_SBLOCK_CRC_LEN
        }
    }

    /// Bytes per pointer.
    pub fn ptr_len(&self) -> usize {
        if self.long_ptrs {
            8
        } else {
            4
        }
    }

    /// Byte offset of the CRC in a block.
    pub fn crc_off(&self) -> usize {
        if self.long_ptrs {
            xfs_format::btree::XFS_BTREE_LBLOCK_CRC_OFF
        } else {
            xfs_format::btree::XFS_BTREE_SBLOCK_CRC_OFF
        }
    }

    /// Bytes of the key part of a node entry.
    pub fn node_key_len(&self) -> usize {
        if self.overlapping {
            2 * self.key_len
        } else {
            self.key_len
        }
    }

    /// Most entries in a block at `level` (records in a leaf, key/pointer
    /// pairs in a node).
    pub fn maxrecs(&self, level: usize) -> usize {
        xfs_format::btree::maxrecs(
            self.block_size,
            self.hdr_len(),
            self.rec_len,
            level == 0,
            self.node_key_len(),
            self.ptr_len(),
        )
    }

    /// Fewest entries a non-root block at `level` may hold.
    pub fn minrecs(&self, level: usize) -> usize {
        self.maxrecs(level) / 2
    }
}

/// One btree type: layout, ordering, root location and block allocation.
///
/// Pointers are passed as `u64` for both widths (an AG block number for
/// short-pointer trees, an AG-encoded filesystem block for the bmbt).
pub trait BtreeOps {
    /// The layout.
    fn shape(&self) -> Shape;

    /// The root block pointer and the number of levels, as the AGF/AGI
    /// says in this transaction. Not called for roots in an inode.
    fn root(&self, tp: &mut Trans<'_>) -> Result<(u64, usize)>;

    /// Records a new root (`ptr`, 0 for a root in an inode) and level
    /// count.
    fn set_root(&mut self, tp: &mut Trans<'_>, ptr: u64, levels: usize) -> Result<()>;

    /// Allocates one block for the tree, preferably near `near`.
    fn alloc_block(&mut self, tp: &mut Trans<'_>, near: u64) -> Result<u64>;

    /// Frees one block of the tree (the engine has already marked its
    /// buffer stale).
    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()>;

    /// Disk address of the block `ptr` names; an error when `ptr` cannot
    /// name a block of this tree.
    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr>;

    /// How to verify a block of this tree at `level`.
    fn verifier(&self, level: u16) -> Verifier<'static>;

    /// Writes the key of record `rec` into `key` (`key_len` bytes).
    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]);

    /// Writes the high key of record `rec` (its last block, for
    /// overlapping trees); the low key for the others.
    fn high_key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        self.key_of_rec(rec, key);
    }

    /// Orders two keys.
    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering;

    /// The in-inode root may be a leaf (records in the inode, as the
    /// realtime rmap btree's): a 1-entry root whose child is a leaf takes
    /// the leaf's records back when they fit. The bmbt's may not.
    fn iroot_records(&self) -> bool {
        false
    }
}

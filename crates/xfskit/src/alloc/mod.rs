//! Free-space allocation: both free-space btrees (by block and by size),
//! the AG free list (AGFL) and its refills, AGF counters, and the
//! superblock's free-block counter.
//!
//! STUB: the interface is fixed; the bodies are being written.

use crate::error::{Error, Result};
use crate::geometry::{AgNumber, FsBlock, Ino};
use crate::trans::Trans;

/// Who owns allocated blocks (recorded in the rmapbt when the filesystem
/// has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Blocks of an inode's fork: file data, directory or attr blocks at
    /// file block `offset`, or bmbt blocks (`bmbt`).
    Inode {
        /// Owning inode.
        ino: Ino,
        /// The attr fork rather than the data fork.
        attr_fork: bool,
        /// File block of the first allocated block.
        offset: u64,
        /// A bmbt block rather than fork contents.
        bmbt: bool,
    },
    /// Inode btree blocks (inobt, finobt).
    Inobt,
    /// Inode chunks.
    Inodes,
    /// Free-space btree and AGFL blocks.
    Ag,
    /// Reference count btree blocks.
    Refc,
}

/// What to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocReq {
    /// Where the blocks should preferably be (AG and block).
    pub target: FsBlock,
    /// Fewest blocks acceptable.
    pub minlen: u32,
    /// Most blocks wanted.
    pub maxlen: u32,
    /// The start must be a multiple of this (1: any).
    pub alignment: u32,
    /// Only the target's AG (do not fall back to other AGs).
    pub ag_only: bool,
    /// Owner of the blocks.
    pub owner: Owner,
}

/// Allocates one extent of `minlen..=maxlen` blocks, as near `target` as
/// possible, trying other AGs when the target's AG cannot satisfy it
/// (unless `ag_only`). Locks the AGs it touches. Returns the first block
/// and the length. `Error::NoSpace` when nothing fits anywhere.
pub fn alloc_extent(tp: &mut Trans<'_>, req: &AllocReq) -> Result<(FsBlock, u32)> {
    let _ = (tp, req);
    Err(Error::Unsupported(
        "block allocation is not written yet".into(),
    ))
}

/// Returns `len` blocks from `start` to free space (merging with free
/// neighbours).
pub fn free_extent(tp: &mut Trans<'_>, start: FsBlock, len: u32, owner: &Owner) -> Result<()> {
    let _ = (tp, start, len, owner);
    Err(Error::Unsupported(
        "block freeing is not written yet".into(),
    ))
}

/// Free blocks of AG `agno` (from its AGF, as this transaction sees it).
pub fn ag_free_blocks(tp: &mut Trans<'_>, agno: AgNumber) -> Result<u64> {
    let _ = (tp, agno);
    Err(Error::Unsupported(
        "free space query is not written yet".into(),
    ))
}

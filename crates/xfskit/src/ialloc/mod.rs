//! Inode allocation: inode chunks (sparse ones included), the inode btree
//! and free inode btree, AGI counters, superblock inode counters.
//!
//! STUB: the interface is fixed; the bodies are being written.

use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::trans::Trans;

/// Allocates a free inode for a new file of type `mode` created in
/// directory `parent`. Placement follows the inode64 policy: new
/// directories rotate across AGs, everything else goes near its parent.
/// A new chunk is allocated (and its inodes initialised as free inodes)
/// when no free inode is left. The caller initialises the inode with
/// `Inode::new` and logs it.
pub fn alloc_inode(tp: &mut Trans<'_>, parent: Ino, mode: u16) -> Result<Ino> {
    let _ = (tp, parent, mode);
    Err(Error::Unsupported(
        "inode allocation is not written yet".into(),
    ))
}

/// Frees inode `ino` (its forks must already be empty): the on-disk inode
/// becomes a free inode, the btrees and counters are updated, and the
/// chunk is freed when none of its inodes is in use.
pub fn free_inode(tp: &mut Trans<'_>, ino: Ino) -> Result<()> {
    let _ = (tp, ino);
    Err(Error::Unsupported(
        "inode freeing is not written yet".into(),
    ))
}

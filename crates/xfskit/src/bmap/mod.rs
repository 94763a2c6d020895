//! Writing fork mappings: allocating blocks for file ranges, punching,
//! truncating, unwritten extents, and the conversions between the
//! extents and btree (bmbt) formats.
//!
//! None of these functions logs the inode: they change `ip` (extent
//! counts, block counts, fork bytes, format) and the caller logs it.
//!
//! STUB: the interface is fixed; the bodies are being written.

use crate::error::{Error, Result};
use crate::geometry::FsBlock;
use crate::inode::{Extent, Fork, Inode};
use crate::trans::Trans;

/// The whole mapping of a fork, as this transaction sees it.
pub fn extents(tp: &mut Trans<'_>, ip: &Inode, fork: Fork) -> Result<Vec<Extent>> {
    let _ = (tp, ip, fork);
    Err(Error::Unsupported(
        "fork mapping reads in a transaction are not written yet".into(),
    ))
}

/// The extent covering file block `lblk`, if any.
pub fn lookup(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, lblk: u64) -> Result<Option<Extent>> {
    let _ = (tp, ip, fork, lblk);
    Err(Error::Unsupported(
        "fork mapping reads in a transaction are not written yet".into(),
    ))
}

/// Allocates blocks for every hole in file blocks `lblk..lblk+len` and
/// maps them (as unwritten extents when `unwritten`). `hint` is where the
/// data should go when nothing else decides (None: near the inode, after
/// the fork's last extent). Returns the mapping of the whole range.
pub fn alloc_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
    unwritten: bool,
    hint: Option<FsBlock>,
) -> Result<Vec<Extent>> {
    let _ = (tp, ip, fork, lblk, len, unwritten, hint);
    Err(Error::Unsupported(
        "block mapping is not written yet".into(),
    ))
}

/// Unmaps file blocks `lblk..lblk+len` and frees their blocks (punch a
/// hole; with `len == u64::MAX`, truncate the fork at `lblk`).
pub fn unmap_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
) -> Result<()> {
    let _ = (tp, ip, fork, lblk, len);
    Err(Error::Unsupported(
        "block unmapping is not written yet".into(),
    ))
}

/// Marks file blocks `lblk..lblk+len` as written (clears the unwritten
/// flag, splitting extents as needed).
pub fn convert_unwritten(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
) -> Result<()> {
    let _ = (tp, ip, fork, lblk, len);
    Err(Error::Unsupported(
        "unwritten conversion is not written yet".into(),
    ))
}

//! Parent pointers (incompat feature PARENT): every name of a file is
//! mirrored by an attribute of the file in the parent namespace whose name
//! is the entry's name and whose value is the directory's inode number
//! and generation (`xfs_parent_rec`, 12 bytes, big-endian). The kernel
//! changes them in the transaction that changes the name; so do we: each
//! helper here is called by the namespace operation beside its directory
//! change, on the child's in-memory inode, which the caller logs.
//!
//! On such a filesystem a new inode that will be linked gets an empty
//! attribute fork at the default fork offset when it is made, as the
//! kernel's inode creation gives it, so the parent pointer lands there
//! and the data fork keeps the kernel's size (an inline symlink or a
//! short-form directory is limited by that offset).

use crate::attr::write as aw;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::inode::{ForkFormat, Inode};
use crate::trans::Trans;

/// True when the filesystem keeps parent pointers.
pub(crate) fn enabled(geo: &Geometry) -> bool {
    geo.has_parent()
}

/// The parent record naming directory `dp`.
pub(crate) fn rec(dp: &Inode) -> [u8; 12] {
    rec_of(dp.ino.0, dp.gen)
}

/// The parent record of a directory given by number and generation.
pub(crate) fn rec_of(ino: u64, gen: u32) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..8].copy_from_slice(&ino.to_be_bytes());
    r[8..].copy_from_slice(&gen.to_be_bytes());
    r
}

/// Gives a new inode the empty attribute fork the kernel gives it on a
/// parent-pointer filesystem (before its data fork is filled).
pub(crate) fn init_fork(geo: &Geometry, ip: &mut Inode) {
    if !enabled(geo) || ip.has_attr_fork() {
        return;
    }
    let off = aw::default_fork_offset(geo, ip);
    ip.forkoff = off;
    ip.data_fork.resize(usize::from(off) * 8, 0);
    ip.aformat = ForkFormat::Extents;
    ip.anextents = 0;
    ip.attr_fork.clear();
}

/// Records that `ip` is named `name` in `dp`.
pub(crate) fn add(tp: &mut Trans<'_>, ip: &mut Inode, dp: &Inode, name: &[u8]) -> Result<()> {
    if !enabled(tp.geo()) {
        return Ok(());
    }
    aw::set_parent(tp, ip, name, &rec(dp))
}

/// Forgets that `ip` is named `name` in `dp`. A pointer that is not
/// there (an image written by a tool that did not keep them) is no error:
/// the name goes either way, and `check` reports the missing pointer.
pub(crate) fn remove(tp: &mut Trans<'_>, ip: &mut Inode, dp: &Inode, name: &[u8]) -> Result<()> {
    remove_rec(tp, ip, &rec(dp), name)
}

/// [`remove`] of a pointer given by its record.
pub(crate) fn remove_rec(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    r: &[u8; 12],
    name: &[u8],
) -> Result<()> {
    if !enabled(tp.geo()) {
        return Ok(());
    }
    match aw::remove_parent(tp, ip, name, r) {
        Err(Error::NoAttr(_)) => Ok(()),
        other => other,
    }
}

/// Moves `ip`'s pointer from (`old_dp`, `old_name`) to (`new_dp`,
/// `new_name`). The old directory is given by its record, as a rename
/// within one directory changes that inode in place.
pub(crate) fn replace(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    old: &[u8; 12],
    old_name: &[u8],
    new_dp: &Inode,
    new_name: &[u8],
) -> Result<()> {
    if !enabled(tp.geo()) {
        return Ok(());
    }
    remove_rec(tp, ip, old, old_name)?;
    aw::set_parent(tp, ip, new_name, &rec(new_dp))
}

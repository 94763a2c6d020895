//! What the immutable and append-only inode flags forbid, as the kernel's
//! VFS refuses it (EPERM) before a filesystem sees the call. A FUSE mount
//! cannot leave this to the kernel: a FUSE inode carries no such flags, so
//! the server (the engine) must refuse.
//!
//! - An immutable inode changes in no way: no write, truncate, fallocate,
//!   attribute or xattr change, no new link to it, no removal or rename of
//!   it; an immutable directory takes no new entry and loses none.
//! - An append-only inode may grow (the caller checks O_APPEND, which the
//!   engine does not see) and be preallocated without changing its size,
//!   but not be truncated, punched, have its mode, owners or explicit times
//!   or xattrs changed, be linked, removed or renamed; an append-only
//!   directory takes new entries but loses none.

use crate::error::{Error, Result};
use crate::inode::Inode;
use xfs_format::inode::{XFS_DIFLAG_APPEND, XFS_DIFLAG_IMMUTABLE};

fn refuse(ip: &Inode, what: &str) -> Error {
    let flag = if ip.flags & XFS_DIFLAG_IMMUTABLE != 0 {
        "immutable"
    } else {
        "append-only"
    };
    Error::NotPermitted(format!("{what}: inode {} is {flag}", ip.ino.0))
}

/// True when the inode is immutable.
pub(crate) fn immutable(ip: &Inode) -> bool {
    ip.flags & XFS_DIFLAG_IMMUTABLE != 0
}

/// True when the inode is immutable or append-only.
pub(crate) fn fixed(ip: &Inode) -> bool {
    ip.flags & (XFS_DIFLAG_IMMUTABLE | XFS_DIFLAG_APPEND) != 0
}

/// Writing data, adding a name to a directory, preallocating, a touch of
/// the times: refused only on an immutable inode.
pub(crate) fn may_write(ip: &Inode, what: &str) -> Result<()> {
    if immutable(ip) {
        return Err(refuse(ip, what));
    }
    Ok(())
}

/// Changing existing data or metadata (truncate, punch, mode, owners,
/// explicit times, xattrs, a new link to it): refused on an immutable or
/// append-only inode.
pub(crate) fn may_change(ip: &Inode, what: &str) -> Result<()> {
    if fixed(ip) {
        return Err(refuse(ip, what));
    }
    Ok(())
}

/// Removing the name of `victim` from directory `dp` (unlink, rmdir,
/// rename's source, a replaced rename target).
pub(crate) fn may_remove(dp: &Inode, victim: &Inode) -> Result<()> {
    may_change(dp, "removing a name")?;
    may_change(victim, "removing a name")
}

//! Changing directories in all five formats: short form in the inode,
//! single block, leaf, node, and btree (a node directory whose fork is a
//! bmbt). Adding converts up a format when the current one is full;
//! removing converts back down.
//!
//! None of these functions logs `dp`: they change it and the caller logs it.
//!
//! STUB: the interface is fixed; the bodies are being written.

use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::Inode;
use crate::trans::Trans;

/// Makes `dp` an empty short-form directory whose '..' is `parent`.
pub fn init(tp: &mut Trans<'_>, dp: &mut Inode, parent: Ino) -> Result<()> {
    let _ = (tp, dp, parent);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

/// The inode and file type code named `name` in `dp`, as this transaction sees it.
pub fn lookup(tp: &mut Trans<'_>, dp: &Inode, name: &[u8]) -> Result<Option<(Ino, u8)>> {
    let _ = (tp, dp, name);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

/// Adds entry `name` -> `ino` with file type code `ftype` (XFS_DIR3_FT_*).
/// `Error::Exists` if the name is there.
pub fn add(tp: &mut Trans<'_>, dp: &mut Inode, name: &[u8], ino: Ino, ftype: u8) -> Result<()> {
    let _ = (tp, dp, name, ino, ftype);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

/// Removes entry `name`, returning the inode it named. `Error::NotFound` if absent.
pub fn remove(tp: &mut Trans<'_>, dp: &mut Inode, name: &[u8]) -> Result<Ino> {
    let _ = (tp, dp, name);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

/// Points existing entry `name` (or "..") at `ino`, returning the old target.
pub fn replace(
    tp: &mut Trans<'_>,
    dp: &mut Inode,
    name: &[u8],
    ino: Ino,
    ftype: u8,
) -> Result<Ino> {
    let _ = (tp, dp, name, ino, ftype);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

/// True when `dp` holds nothing but '.' and '..'.
pub fn is_empty(tp: &mut Trans<'_>, dp: &Inode) -> Result<bool> {
    let _ = (tp, dp);
    Err(Error::Unsupported(
        "directory writes are not written yet".into(),
    ))
}

//! Symbolic link targets, inline (local) or in remote blocks.

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::Inode;

/// The target of symlink `inode`.
pub fn read_link(fs: &Fs, inode: &Inode) -> Result<Vec<u8>> {
    let _ = (fs, inode);
    Err(Error::Unsupported("symlinks are not implemented yet".into()))
}

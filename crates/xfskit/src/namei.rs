//! Path lookup from the root directory.

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::Inode;

impl Fs {
    /// Resolves an absolute or root-relative path ('/'-separated; "." and
    /// ".." handled; symlinks are not followed) to its inode.
    pub fn lookup_path(&self, path: &[u8]) -> Result<Inode> {
        let _ = path;
        Err(Error::Unsupported("path lookup is not implemented yet".into()))
    }
}

//! Path lookup from the root directory.

use crate::dir;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::{FileType, Inode};

impl Fs {
    /// Resolves an absolute or root-relative path ('/'-separated; "." and
    /// ".." handled; symlinks are not followed) to its inode.
    pub fn lookup_path(&self, path: &[u8]) -> Result<Inode> {
        let mut cur = self.root()?;
        let mut done: Vec<u8> = Vec::new();
        // One step per component: bounded by the path length.
        for comp in path.split(|&b| b == b'/') {
            if comp.is_empty() || comp == b"." {
                continue;
            }
            done.push(b'/');
            done.extend_from_slice(comp);
            let shown = || String::from_utf8_lossy(&done).into_owned();
            if cur.file_type != FileType::Dir {
                return Err(Error::NotDir(shown()));
            }
            let next = if comp == b".." {
                // The root is its own parent.
                if cur.ino == self.geometry().root_ino {
                    cur.ino
                } else {
                    dir::parent(self, &cur)?
                }
            } else {
                match dir::lookup(self, &cur, comp)? {
                    Some(i) => i,
                    None => return Err(Error::NotFound(shown())),
                }
            };
            if next != cur.ino {
                cur = self.inode(next)?;
            }
        }
        Ok(cur)
    }
}

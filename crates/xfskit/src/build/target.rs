//! The interface between a build source (a directory walk, a tar stream)
//! and the filesystem being built.
//!
//! Sources call these methods parent-first: a directory is created before
//! anything inside it. Times of a directory are applied with
//! [`BuildTarget::set_meta`] after its last child, so adding children does
//! not disturb them.

use crate::dev::AlignedBuf;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;

/// The creation types belong to the write API ([`crate::namespace`]), which
/// the build feeds; they are named here too.
pub use crate::namespace::{Meta, NodeKind};

/// A filesystem that a source populates.
pub trait BuildTarget {
    /// The root directory.
    fn root(&self) -> Ino;

    /// Creates `name` in directory `parent`. Names are 1 to 255 bytes,
    /// without '/' or NUL, and not "." or "..".
    fn create(&mut self, parent: Ino, name: &[u8], kind: &NodeKind, meta: &Meta) -> Result<Ino>;

    /// Writes file data at byte `offset`. Calls for one file come in
    /// increasing offset order; ranges never written are holes.
    fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<()>;

    /// [`BuildTarget::write_data`] for data in an aligned buffer, which a
    /// target may keep and write as it is (the write engine does). The
    /// default writes its bytes and returns it to the pool.
    fn write_owned(&mut self, ino: Ino, offset: u64, data: AlignedBuf) -> Result<()> {
        let r = self.write_data(ino, offset, data.as_slice());
        crate::dev::aligned::give(data);
        r
    }

    /// Adds a hard link `name` in `parent` to the existing non-directory `target`.
    fn link(&mut self, parent: Ino, name: &[u8], target: Ino) -> Result<()>;

    /// Sets an extended attribute; `name` carries its namespace prefix
    /// (`user.`, `trusted.`, `security.`, or `system.posix_acl_access` /
    /// `system.posix_acl_default` in the Linux VFS format).
    fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()>;

    /// Sets ownership, permissions and times again (used for directories
    /// after their last child, and for the root directory).
    fn set_meta(&mut self, ino: Ino, meta: &Meta) -> Result<()>;

    /// The writable filesystem behind the target, when a source may write
    /// into it directly from several threads at once (the write engine);
    /// `None` (the default): call the target from one thread only.
    /// The inode `name` names in directory `dir`, if any (hard links in a
    /// tar name an earlier entry by its path; the build keeps no table of
    /// paths and reads the name back from the directory instead). Targets
    /// that cannot look names up refuse hard links.
    fn lookup(&mut self, dir: Ino, name: &[u8]) -> Result<Option<Ino>> {
        let _ = (dir, name);
        Err(crate::error::Error::Unsupported(
            "hard links in this build target".into(),
        ))
    }

    fn fs(&self) -> Option<&Fs> {
        None
    }

    /// Creates regular file `name` in `parent` holding all of `data`, with
    /// the extended attributes `xattrs` (names as for `set_xattr`): what
    /// `create` + `write_data` + `set_xattr` do, which targets may do in
    /// one step (the write engine: one transaction for a small file).
    fn create_file(
        &mut self,
        parent: Ino,
        name: &[u8],
        meta: &Meta,
        data: &[u8],
        xattrs: &[(&[u8], &[u8])],
    ) -> Result<Ino> {
        let kind = NodeKind::File {
            size: data.len() as u64,
        };
        let ino = self.create(parent, name, &kind, meta)?;
        if !data.is_empty() {
            self.write_data(ino, 0, data)?;
        }
        for (n, v) in xattrs {
            self.set_xattr(ino, n, v)?;
        }
        Ok(ino)
    }
}

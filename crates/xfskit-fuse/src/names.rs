//! The namespace operations of a read-write mount: create, mknod, mkdir,
//! symlink, link, unlink, rmdir, rename (with RENAME_NOREPLACE and
//! RENAME_EXCHANGE).
//!
//! Permissions are the kernel's: the mount uses `default_permissions`, so
//! the kernel checks search, write and sticky-bit rules on the attributes
//! we report before a request reaches us, and strips a
//! set-group-id bit the caller may not set. What the filesystem itself
//! decides is done here, as XFS does it (`inode_init_owner`): a new inode
//! belongs to the caller's fsuid, and to the caller's fsgid unless the
//! parent directory is set-group-id, in which case it takes the parent's
//! group and a new directory inherits the set-group-id bit. Names longer
//! than 255 bytes get ENAMETOOLONG, symlink targets of 1,024 bytes or more
//! too (XFS keeps at most 1,023), a link count at XFS's limit EMLINK.
//! The mount asks FUSE_DONT_MASK: the umask is applied here, unless the
//! parent's default ACL applies instead ([`crate::acl_ops`]).

use crate::errno::to_errno;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo, RenameFlags};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::SystemTime;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::{FileType, Inode, Timestamp};

/// Longest name in a directory.
const NAME_MAX: usize = 255;
/// Symlink targets must be shorter than this (XFS_SYMLINK_MAXLEN).
const SYMLINK_MAXLEN: usize = 1024;
/// Most links an XFS inode may have (XFS_MAXLINK).
const MAXLINK: u32 = (1 << 31) - 1;

/// The bytes of a name for a new or removed entry, or ENAMETOOLONG.
pub(crate) fn entry_name(name: &OsStr) -> Result<&[u8], Errno> {
    let n = name.as_bytes();
    if n.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(n)
}

/// The current time as an XFS timestamp.
pub(crate) fn now() -> Timestamp {
    match SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(_) => Timestamp::default(),
    }
}

/// Linux `dev_t` (FUSE's 32-bit encoding) as (major, minor).
pub(crate) fn split_rdev(rdev: u32) -> (u32, u32) {
    (
        (rdev >> 8) & 0xfff,
        (rdev & 0xff) | ((rdev >> 12) & 0xf_ff00),
    )
}

/// Who asks: the fs user and group ids of the calling thread, and its id
/// (in the server's pid namespace; 0 when not visible there). What else a
/// rule needs of it, [`crate::creds`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl From<&fuser::Request> for Caller {
    fn from(r: &fuser::Request) -> Caller {
        Caller {
            uid: r.uid(),
            gid: r.gid(),
            pid: r.pid(),
        }
    }
}

impl XfsFuse {
    pub(crate) fn check_writable(&self) -> Result<(), Errno> {
        if self.fs.is_shut_down() {
            Err(Errno::EIO)
        } else if self.writable {
            Ok(())
        } else {
            Err(Errno::EROFS)
        }
    }

    /// Owner, group, mode and times of a new inode made by `who` in `dir`.
    fn new_meta(&self, who: Caller, dir: &Inode, mode: u32, is_dir: bool) -> Meta {
        let mut mode = (mode & 0o7777) as u16;
        let gid = if dir.mode & (libc::S_ISGID as u16) != 0 {
            if is_dir {
                mode |= libc::S_ISGID as u16;
            }
            dir.gid
        } else {
            who.gid
        };
        let t = now();
        Meta {
            mode,
            uid: who.uid,
            gid,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        }
    }

    /// Creates `name` of `kind` in `parent` with permission bits `mode`
    /// (the umask `umask` applies unless the parent has a default ACL,
    /// which applies instead); returns the new inode.
    pub(crate) fn make_node(
        &self,
        who: Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        kind: NodeKind,
    ) -> Result<Arc<Inode>, Errno> {
        self.check_writable()?;
        let name = entry_name(name)?;
        if let NodeKind::Symlink(t) = &kind {
            if t.len() >= SYMLINK_MAXLEN {
                return Err(Errno::ENAMETOOLONG);
            }
        }
        let dir = self.dir_inode(parent)?;
        let is_dir = kind == NodeKind::Dir;
        if is_dir && dir.nlink >= MAXLINK {
            // The new directory's ".." would be one link too many.
            return Err(Errno::EMLINK);
        }
        let mut meta = self.new_meta(who, &dir, mode, is_dir);
        let symlink = matches!(kind, NodeKind::Symlink(_));
        let inherited = if symlink {
            None
        } else {
            self.default_acl(&dir)?
        };
        let asked = meta.mode & 0o777;
        match &inherited {
            Some(def) => {
                let (perm, _) = crate::acl::inherit(def, asked);
                meta.mode = (meta.mode & 0o7000) | perm;
            }
            None if !symlink => meta.mode &= !((umask & 0o777) as u16),
            None => {}
        }
        let ino = self
            .fs
            .create(dir.ino, name, &kind, &meta)
            .map_err(|e| to_errno(&e))?;
        if let Some(def) = inherited {
            self.store_inherited(ino, &def, asked, is_dir)?;
        }
        self.inode_by_ino(ino)
    }

    /// The kind of inode mknod(2) asks for with `mode` and `rdev`.
    pub(crate) fn mknod_kind(mode: u32, rdev: u32) -> Result<NodeKind, Errno> {
        let (major, minor) = split_rdev(rdev);
        Ok(match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => NodeKind::File { size: 0 },
            libc::S_IFCHR => NodeKind::CharDev { major, minor },
            libc::S_IFBLK => NodeKind::BlockDev { major, minor },
            libc::S_IFIFO => NodeKind::Fifo,
            libc::S_IFSOCK => NodeKind::Socket,
            libc::S_IFDIR => NodeKind::Dir,
            _ => return Err(Errno::EINVAL),
        })
    }

    /// Adds `newname` in `newparent` as a hard link to `node`.
    pub(crate) fn do_link(
        &self,
        node: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<Arc<Inode>, Errno> {
        self.check_writable()?;
        let name = entry_name(newname)?;
        let dir = self.dir_inode(newparent)?;
        let ip = self.inode(node)?;
        if ip.file_type == FileType::Dir {
            return Err(Errno::EPERM);
        }
        if ip.nlink >= MAXLINK {
            return Err(Errno::EMLINK);
        }
        self.fs
            .link(dir.ino, name, ip.ino)
            .map_err(|e| to_errno(&e))?;
        self.inode_by_ino(ip.ino)
    }

    /// Removes `name` from `parent` (a directory when `dir`).
    pub(crate) fn do_remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        self.check_writable()?;
        let name = entry_name(name)?;
        let p = self.ino(parent);
        let in_use = |i| self.in_use(i);
        let orphan = if dir {
            self.fs.rmdir_keeping(p, name, &in_use)
        } else {
            self.fs.unlink_keeping(p, name, &in_use)
        }
        .map_err(|e| to_errno(&e))?;
        if let Some(o) = orphan {
            self.keep_orphan(o);
        }
        Ok(())
    }

    /// Renames `name` in `parent` to `newname` in `newparent`.
    pub(crate) fn do_rename(
        &self,
        who: Caller,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let (sname, dname) = (entry_name(name)?, entry_name(newname)?);
        let (sdir, ddir) = (self.ino(parent), self.ino(newparent));
        let whiteout = flags.contains(RenameFlags::RENAME_WHITEOUT);
        if flags.contains(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_NOREPLACE)
            || (whiteout && flags.contains(RenameFlags::RENAME_EXCHANGE))
        {
            return Err(Errno::EINVAL);
        }
        if sdir != ddir {
            self.check_rename_links(parent, sname, newparent, dname, flags)?;
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return self
                .fs
                .exchange(sdir, sname, ddir, dname)
                .map_err(|e| to_errno(&e));
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            // The kernel holds both directories locked for the rename, so
            // nothing can add the name between this look and the rename.
            let d = self.dir_inode(newparent)?;
            let found = xfskit::dir::lookup(self.fs, &d, dname).map_err(|e| to_errno(&e))?;
            if found.is_some() {
                return Err(Errno::EEXIST);
            }
        }
        let orphan = if whiteout {
            let dir = self.dir_inode(parent)?;
            let meta = self.new_meta(who, &dir, 0, false);
            self.fs
                .rename_whiteout(sdir, sname, ddir, dname, &meta, &|i| self.in_use(i))
        } else {
            self.fs
                .rename_keeping(sdir, sname, ddir, dname, &|i| self.in_use(i))
        }
        .map_err(|e| to_errno(&e))?;
        if let Some(o) = orphan {
            self.keep_orphan(o);
        }
        Ok(())
    }
}

impl XfsFuse {
    /// EMLINK where a rename between two directories would give one of
    /// them a link too many (a directory arriving adds a ".." link to its
    /// new parent unless it replaces a directory there), as the kernel's
    /// VFS checks for filesystems with a link limit.
    fn check_rename_links(
        &self,
        parent: INodeNo,
        sname: &[u8],
        newparent: INodeNo,
        dname: &[u8],
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let is_dir = |dir: &Inode, name: &[u8]| -> Result<bool, Errno> {
            match xfskit::dir::lookup(self.fs, dir, name).map_err(|e| to_errno(&e))? {
                Some(i) => Ok(self.inode_by_ino(i)?.file_type == FileType::Dir),
                None => Ok(false),
            }
        };
        let (sd, dd) = (self.dir_inode(parent)?, self.dir_inode(newparent)?);
        let (src_dir, dst_dir) = (is_dir(&sd, sname)?, is_dir(&dd, dname)?);
        if src_dir && !dst_dir && dd.nlink >= MAXLINK {
            return Err(Errno::EMLINK);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            && !src_dir
            && dst_dir
            && sd.nlink >= MAXLINK
        {
            return Err(Errno::EMLINK);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_split_as_linux_encodes_them() {
        // makedev(1, 3) and makedev(259, 70000) in the kernel's 32-bit form.
        assert_eq!(split_rdev(0x0103), (1, 3));
        let enc = (70000 & 0xff) | (259 << 8) | ((70000 & !0xff) << 12);
        assert_eq!(split_rdev(enc), (259, 70000));
    }

    #[test]
    fn long_names_are_refused() {
        let ok = "a".repeat(255);
        assert!(entry_name(OsStr::new(&ok)).is_ok());
        let long = "a".repeat(256);
        assert_eq!(entry_name(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
    }
}

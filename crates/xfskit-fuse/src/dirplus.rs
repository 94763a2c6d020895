//! What the mount asks of the kernel at INIT, and READDIRPLUS: directory
//! entries with their attributes in one reply, so that `ls -l`, `find -ls`
//! or `du` over a tree cost one request per directory block instead of a
//! LOOKUP per name.
//!
//! Every entry but "." and ".." sent this way counts as a lookup (the
//! kernel makes a dentry of it and will FORGET it later), exactly as a
//! LOOKUP reply does; an entry that did not fit in the reply is not
//! counted.

use crate::attrs::file_attr;
use crate::ops::{negative_attr, XfsFuse, MAX_IO};
use fuser::{Errno, FileAttr, Generation, INodeNo, InitFlags, KernelConfig, ReplyDirectoryPlus};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use xfskit::inode::Inode;
use xfskit::Ino;

/// readdir offset after "." (as in [`crate::ops`]).
const OFF_DOT: u64 = 1;
/// readdir offset after "..".
const OFF_DOTDOT: u64 = 2;

/// Where READDIRPLUS entries go: a reply of either transport.
pub(crate) trait DirPlusSink {
    /// Adds an entry with its attributes; true when it did not fit.
    fn add(
        &mut self,
        node: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool;
}

impl DirPlusSink for ReplyDirectoryPlus {
    fn add(
        &mut self,
        node: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        ReplyDirectoryPlus::add(self, node, offset, name, ttl, attr, generation)
    }
}

impl XfsFuse {
    /// Sets request sizes and the capabilities this mount wants from those
    /// the kernel offers.
    pub(crate) fn negotiate(&self, config: &mut KernelConfig) {
        let _ = config
            .set_max_readahead(MAX_IO)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config
            .set_max_write(MAX_IO)
            .or_else(|max| config.set_max_write(max));
        // POSIX_ACL: the kernel checks permissions with the ACLs it reads
        // through getxattr, as it does on its own XFS mounts. DONT_MASK:
        // on a read-write mount the umask is ours to apply, since a
        // parent's default ACL replaces it (crate::acl_ops).
        // EXPORT_SUPPORT: node ids are inode numbers, so a file handle
        // (node id and generation) opens again after the kernel forgot the
        // inode or the image was mounted anew, through a LOOKUP of "."
        // (crate::ops::XfsFuse::inode_by_handle) and, to reconnect a
        // directory, of "..".
        // HAS_IOCTL_DIR: ioctls on directories reach the server too
        // (crate::ioctl), as on kernel XFS.
        let mut wanted = InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_HAS_IOCTL_DIR
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_POSIX_ACL
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.writable {
            // READDIRPLUS where the kernel sees lookups follow a listing
            // (AUTO); the read-only mount keeps plain READDIR, whose
            // listings the kernel caches, and answers lookups from memory.
            wanted |= InitFlags::FUSE_DONT_MASK
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO;
        }
        if self.writeback_cache {
            // The kernel keeps written pages and sends them at writeback
            // (or close, fsync) in WRITEs of up to max_write bytes, page
            // aligned; it keeps mtime and ctime itself and sends them in a
            // SETATTR.
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let uring = self.want_uring
            && config
                .capabilities()
                .contains(InitFlags::FUSE_OVER_IO_URING);
        if uring {
            wanted |= InitFlags::FUSE_OVER_IO_URING;
        }
        let _ = config.add_capabilities(wanted & config.capabilities());
        // Answering OPEN with ENOSYS is only understood where the kernel says so.
        let caps = config.capabilities();
        self.skip_open
            .store(caps.contains(InitFlags::FUSE_NO_OPEN_SUPPORT), Relaxed);
        self.skip_opendir
            .store(caps.contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT), Relaxed);
        self.uring_granted.store(uring, Relaxed);
    }

    /// Fills `reply` with entries and attributes from directory position
    /// `offset` until the buffer is full.
    pub(crate) fn fill_dir_plus(
        &self,
        dir: &Inode,
        offset: u64,
        reply: &mut impl DirPlusSink,
    ) -> Result<(), Errno> {
        if offset == 0 {
            self.note_access(dir);
        }
        // The kernel makes no dentries of "." and "..": their attributes
        // only carry the number and type shown to readdir.
        let dot = |ino: Ino| {
            let mut a = negative_attr();
            a.ino = INodeNo(ino.0);
            a.kind = fuser::FileType::Directory;
            a
        };
        if offset < OFF_DOT
            && reply.add(
                INodeNo(dir.ino.0),
                OFF_DOT,
                OsStr::new("."),
                &self.ttl,
                &dot(dir.ino),
                Generation(0),
            )
        {
            return Ok(());
        }
        if offset < OFF_DOTDOT {
            let parent = if dir.ino == self.root {
                dir.ino
            } else {
                xfskit::dir::parent(self.fs, dir).map_err(|e| crate::errno::to_errno(&e))?
            };
            if reply.add(
                INodeNo(parent.0),
                OFF_DOTDOT,
                OsStr::new(".."),
                &self.ttl,
                &dot(parent),
                Generation(0),
            ) {
                return Ok(());
            }
        }
        let after = offset.saturating_sub(OFF_DOTDOT);
        let mut failed: Option<Errno> = None;
        let walk = xfskit::dir::for_each_entry(self.fs, dir, after, &mut |e| {
            let i = match self.inode_by_ino(e.ino) {
                Ok(i) => i,
                Err(err) => {
                    failed = Some(err);
                    return false;
                }
            };
            let node = self.node(i.ino);
            let attr = file_attr(&i, node, self.block_size);
            let off = e.cookie.saturating_add(OFF_DOTDOT);
            let full = reply.add(
                INodeNo(node),
                off,
                OsStr::from_bytes(&e.name),
                &self.ttl,
                &attr,
                self.generation(&i),
            );
            if !full {
                self.count_lookup(i.ino);
            }
            !full
        });
        walk.map_err(|e| crate::errno::to_errno(&e))?;
        failed.map_or(Ok(()), Err)
    }
}

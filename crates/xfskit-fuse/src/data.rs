//! The contents and attribute operations of a read-write mount: setattr,
//! write, fallocate, lseek SEEK_DATA/SEEK_HOLE, fsync (through the
//! journal), and setting or removing xattrs.
//!
//! The set-user-id and set-group-id bits are cleared here, as the VFS
//! clears them on a kernel XFS mount: the mount negotiates
//! `FUSE_HANDLE_KILLPRIV_V2` (so that the kernel can mark inodes as having
//! no security xattrs and stop asking for `security.capability` before
//! every write), and then the kernel leaves the clearing to the server. A
//! WRITE flagged `FUSE_WRITE_KILL_SUIDGID` (a writer without CAP_FSETID), a
//! chown of a non-directory, and a truncate by a caller other than root
//! clear set-user-id, and set-group-id where the group may execute (without
//! group execute it marks mandatory locking and stays). A file capability
//! (`security.capability`) the kernel still removes itself, with a
//! REMOVEXATTR, once per inode until it knows there is none. fuser does not pass the truncate's own `FATTR_KILL_SUIDGID` bit, so
//! CAP_FSETID is taken to be uid 0's, as it is for every process outside a
//! user namespace.
//! Every setattr stamps ctime (the kernel's own ctime when it sends one),
//! one without fields too (chown(-1, -1): the kernel sends no ctime);
//! a size change also stamps mtime, a truncate to the same size nothing.

use crate::errno::to_errno;
use crate::names::Caller;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo, TimeOrNow};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use xfskit::inode::{FileType, Fork, Inode, Timestamp};
use xfskit::namespace::{AttrChange, SetTime};

/// setxattr(2) flags.
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

/// What a setattr request asks for.
pub(crate) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<SystemTime>,
    /// The caller's uid (a truncate by anyone but root clears set-user-id).
    pub caller_uid: u32,
}

/// `mode` less the bits a write, truncate or chown clears: set-user-id,
/// and set-group-id when the group may execute. None: nothing to clear.
pub(crate) fn killed_privileges(mode: u16) -> Option<u16> {
    let mut m = mode & 0o7777;
    m &= !0o4000;
    if m & 0o2010 == 0o2010 {
        m &= !0o2000;
    }
    (m != mode & 0o7777).then_some(m)
}

/// A time from a setattr request as an XFS timestamp. fuser 0.18 turns
/// the kernel's (seconds, nanoseconds) before 1970 into the epoch minus
/// (-seconds, nanoseconds), which is off by the nanoseconds; this undoes
/// exactly that mapping, so the kernel's own numbers come back.
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            Timestamp {
                sec: -(d.as_secs() as i64),
                nsec: d.subsec_nanos(),
            }
        }
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(timestamp(t)),
    }
}

/// Where SEEK_DATA (`data`) or SEEK_HOLE from `off` lands in a file of
/// `size` bytes whose written extents, in file blocks of `bs` bytes, are
/// `written` (sorted, as (first block, blocks)). None: ENXIO.
pub(crate) fn seek(
    written: &[(u64, u64)],
    bs: u64,
    size: u64,
    off: u64,
    data: bool,
) -> Option<u64> {
    if off >= size {
        return None;
    }
    if data {
        let start = written
            .iter()
            .find(|&&(b, n)| (b + n) * bs > off)
            .map(|&(b, _)| (b * bs).max(off))?;
        return (start < size).then_some(start);
    }
    let mut pos = off;
    for &(b, n) in written {
        if b * bs > pos {
            break;
        }
        pos = pos.max((b + n) * bs);
    }
    Some(pos.min(size))
}

impl XfsFuse {
    /// Applies a setattr request and returns the inode as it is after it.
    pub(crate) fn do_setattr(&self, node: INodeNo, a: SetAttr) -> Result<Arc<Inode>, Errno> {
        let ino = self.ino(node);
        let mut change = AttrChange {
            mode: a.mode.map(|m| (m & 0o7777) as u16),
            uid: a.uid,
            gid: a.gid,
            atime: a.atime.map(set_time),
            mtime: a.mtime.map(set_time),
            ctime: a.ctime.map(timestamp),
        };
        let chown = a.uid.is_some() || a.gid.is_some();
        if chown || a.size.is_some() {
            // chown clears set-user-id even for root; a truncate only for
            // a caller without CAP_FSETID. A mode given with it wins.
            let setid = chown || a.caller_uid != 0;
            if let Some(mode) = self.kill_privileges(node, setid && change.mode.is_none())? {
                change.mode = Some(mode);
            }
        }
        if a.size.is_none() && change.is_empty() {
            if !self.writable {
                return self.inode(node);
            }
            // The kernel sends a setattr without fields for a change that
            // only stamps ctime (chown(-1, -1)); kernel XFS stamps it.
            let touch = AttrChange {
                ctime: Some(crate::names::now()),
                ..Default::default()
            };
            return self
                .fs
                .change_attrs(ino, &touch)
                .map(Arc::new)
                .map_err(|e| to_errno(&e));
        }
        self.check_writable()?;
        if let Some(size) = a.size {
            let ip = self.inode(node)?;
            match ip.file_type {
                FileType::File => {}
                FileType::Dir => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            if size != ip.size {
                self.fs.truncate(ino, size).map_err(|e| to_errno(&e))?;
            }
        }
        let ip = self
            .fs
            .change_attrs(ino, &change)
            .map_err(|e| to_errno(&e))?;
        if let Some(m) = change.mode {
            // chmod keeps an access ACL in step (posix_acl_chmod).
            self.chmod_acl(ino, m)?;
        }
        Ok(Arc::new(ip))
    }

    /// The mode a write, truncate or chown leaves when it drops the set-id
    /// bits (`setid`); None when the mode stays. A file capability is not
    /// ours to drop: the VFS removes `security.capability` itself, with a
    /// REMOVEXATTR, before it sends the change.
    pub(crate) fn kill_privileges(&self, node: INodeNo, setid: bool) -> Result<Option<u16>, Errno> {
        if !setid {
            return Ok(None);
        }
        let ip = self.inode(node)?;
        if ip.file_type == FileType::Dir {
            return Ok(None);
        }
        Ok(killed_privileges(ip.mode))
    }

    /// What a write of `len` bytes at `offset` is refused for before any
    /// inode is looked at (a read-only mount, a range past the largest
    /// file); else `len` as the answer's count.
    pub(crate) fn write_allowed(&self, offset: u64, len: usize) -> Result<u32, Errno> {
        self.check_writable()?;
        let n = u32::try_from(len).map_err(|_| Errno::EINVAL)?;
        if offset
            .checked_add(len as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Errno::EFBIG);
        }
        Ok(n)
    }

    /// Writes `data` at `offset`; returns the bytes written.
    /// With `kill_setid` (FUSE_WRITE_KILL_SUIDGID, a writer without
    /// CAP_FSETID) the set-id bits go first, as the VFS drops them before
    /// it writes. The new mtime and ctime are `at` (when a write done later
    /// was asked for) or now.
    pub(crate) fn do_write(
        &self,
        node: INodeNo,
        offset: u64,
        data: &[u8],
        kill_setid: bool,
        appending: bool,
        at: Option<xfskit::inode::Timestamp>,
    ) -> Result<u32, Errno> {
        let n = self.write_allowed(offset, data.len())?;
        if let Some(mode) = self.kill_privileges(node, kill_setid)? {
            let change = AttrChange {
                mode: Some(mode),
                ..Default::default()
            };
            self.fs
                .drop_privileges(self.ino(node), &change)
                .map_err(|e| to_errno(&e))?;
            // The kernel keeps the mode it had (the WRITE's answer has no
            // attributes): a stat must see the bits gone.
            self.attrs_changed(node);
        }
        // With the writeback cache the kernel keeps mtime and ctime (stamped
        // at write(2), sent later in a SETATTR); the WRITE, which may come
        // long after, must not stamp its own.
        let stamp = match (self.writeback_cache, at) {
            (true, _) => None,
            (false, Some(t)) => Some(t),
            (false, None) => Some(self.fs.clock().map_err(|e| to_errno(&e))?),
        };
        self.fs
            .write_at_stamped(self.ino(node), offset, data, stamp, appending)
            .map_err(|e| to_errno(&e))?;
        Ok(n)
    }

    /// fallocate(2): preallocation (growing the size unless KEEP_SIZE),
    /// PUNCH_HOLE (with KEEP_SIZE, as Linux requires) and ZERO_RANGE.
    /// A caller without CAP_FSETID drops the set-id bits first, as the
    /// VFS's file_modified does on kernel XFS (the kernel's FUSE leaves it
    /// to the server): set-user-id always, set-group-id where the group
    /// may execute or the caller is not in the file's group.
    pub(crate) fn do_fallocate(
        &self,
        who: Caller,
        node: INodeNo,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let ino = self.ino(node);
        let ip = self.inode(node)?;
        if ip.mode & 0o6000 != 0
            && ip.file_type != FileType::Dir
            && !who.capable(crate::creds::CAP_FSETID)
        {
            let mut m = ip.mode & 0o7777 & !0o4000;
            if m & 0o2010 == 0o2010 || !who.in_group_or_fsetid(ip.gid) {
                m &= !0o2000;
            }
            if m != ip.mode & 0o7777 {
                let change = AttrChange {
                    mode: Some(m),
                    ..Default::default()
                };
                self.fs
                    .drop_privileges(ino, &change)
                    .map_err(|e| to_errno(&e))?;
                self.attrs_changed(node);
            }
        }
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
            return Err(Errno::EFBIG);
        }
        let ip = self.inode(node)?;
        match ip.file_type {
            FileType::File => {}
            FileType::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        }
        let r = if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            if !keep || mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            let end = offset.saturating_add(len).min(ip.size);
            if offset >= end {
                return Ok(());
            }
            self.fs.punch_hole(ino, offset, end - offset)
        } else if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
            // Free what is there, then preallocate: the range reads as
            // zeros and its blocks are reserved, as on XFS.
            let end = offset.saturating_add(len).min(ip.size);
            if offset < end {
                self.fs
                    .punch_hole(ino, offset, end - offset)
                    .map_err(|e| to_errno(&e))?;
            }
            self.fs.fallocate(ino, offset, len, keep)
        } else {
            self.fs.fallocate(ino, offset, len, keep)
        };
        r.map_err(|e| to_errno(&e))
    }

    /// lseek(2) with SEEK_DATA or SEEK_HOLE (the kernel answers the others).
    pub(crate) fn do_lseek(&self, node: INodeNo, offset: i64, whence: i32) -> Result<i64, Errno> {
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        let off = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let ip = self.inode(node)?;
        if ip.file_type != FileType::File {
            return Err(Errno::EINVAL);
        }
        let map = xfskit::inode::extents(self.fs, &ip, Fork::Data).map_err(|e| to_errno(&e))?;
        let written: Vec<(u64, u64)> = map
            .iter()
            .filter(|e| !e.unwritten)
            .map(|e| (e.offset, e.len))
            .collect();
        let bs = u64::from(self.block_size);
        let pos = seek(&written, bs, ip.size, off, data).ok_or(Errno::ENXIO)?;
        i64::try_from(pos).map_err(|_| Errno::EOVERFLOW)
    }

    /// The end of the mount: everything written back, the device flushed,
    /// the log left clean.
    pub(crate) fn do_sync(&self) -> Result<(), Errno> {
        if !self.writable {
            return Ok(());
        }
        self.fs.sync().map_err(|e| to_errno(&e))
    }

    /// fsync (`node` given: its data written in place, the log forced) and
    /// fsyncdir (the log forced): durable without writing metadata back.
    pub(crate) fn do_fsync(&self, node: Option<INodeNo>) -> Result<(), Errno> {
        if !self.writable {
            return Ok(());
        }
        if let Some(n) = node {
            // A write answered early that failed after all (crate::behind).
            self.behind.settle(self.ino(n));
            if let Some(e) = self.behind.take_error(self.ino(n)) {
                return Err(e);
            }
        }
        let r = match node {
            Some(n) => self.fs.fsync(self.ino(n)),
            None => self.fs.force_log(),
        };
        r.map_err(|e| to_errno(&e))
    }

    /// setxattr(2) by `who` with its XATTR_CREATE / XATTR_REPLACE rules.
    pub(crate) fn do_setxattr(
        &self,
        who: Caller,
        node: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let name = name.as_bytes();
        if flags & (XATTR_CREATE | XATTR_REPLACE) != 0 {
            let exists = self.xattr_exists(node, name)?;
            if flags & XATTR_CREATE != 0 && exists {
                return Err(Errno::EEXIST);
            }
            if flags & XATTR_REPLACE != 0 && !exists {
                return Err(Errno::ENODATA);
            }
        }
        if name == xfskit::attr::acl::POSIX_ACL_ACCESS {
            return self.set_access_acl(who, self.ino(node), value);
        }
        self.fs
            .set_xattr(self.ino(node), name, value)
            .map_err(|e| to_errno(&e))
    }

    /// removexattr(2).
    pub(crate) fn do_removexattr(&self, node: INodeNo, name: &OsStr) -> Result<(), Errno> {
        self.check_writable()?;
        self.fs
            .remove_xattr(self.ino(node), name.as_bytes())
            .map_err(|e| to_errno(&e))
    }

    fn xattr_exists(&self, node: INodeNo, full: &[u8]) -> Result<bool, Errno> {
        let (ns, short) = match xfskit::attr::acl::disk_name(full) {
            Some(d) => (xfskit::attr::Namespace::Trusted, d),
            None => xfskit::attr::parse_full_name(full).ok_or(Errno::EOPNOTSUPP)?,
        };
        self.with_inode(node, |ip| {
            xfskit::attr::get(self.fs, ip, ns, short)
                .map(|v| v.is_some())
                .map_err(|e| to_errno(&e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_data_and_holes() {
        // 4 KiB blocks; data in blocks 0-1 and 5; size 7 blocks.
        let w = [(0, 2), (5, 1)];
        let (bs, size) = (4096, 7 * 4096);
        assert_eq!(seek(&w, bs, size, 0, true), Some(0));
        assert_eq!(seek(&w, bs, size, 100, false), Some(8192));
        assert_eq!(seek(&w, bs, size, 8192, true), Some(5 * 4096));
        assert_eq!(seek(&w, bs, size, 9000, false), Some(9000));
        assert_eq!(seek(&w, bs, size, 6 * 4096, true), None);
        assert_eq!(seek(&w, bs, size, 5 * 4096, false), Some(6 * 4096));
        assert_eq!(seek(&w, bs, size, size, false), None);
        // Data to the end: the hole is at the size.
        assert_eq!(seek(&[(0, 2)], bs, 5000, 0, false), Some(5000));
        assert_eq!(seek(&[], bs, 5000, 0, true), None);
    }

    #[test]
    fn times_before_the_epoch_as_fuser_delivers_them() {
        // The kernel's (-2 s, 750,000,000 ns) arrives as the epoch minus 2.75 s.
        let t = UNIX_EPOCH - std::time::Duration::new(2, 750_000_000);
        assert_eq!(
            timestamp(t),
            Timestamp {
                sec: -2,
                nsec: 750_000_000
            }
        );
    }
}

//! The `fuser::Filesystem` implementation: each request goes to the
//! read side ([`crate::ops`]), the namespace side ([`crate::names`]) or the
//! contents side ([`crate::data`]) and its answer or errno goes back. On a
//! read-only mount every changing request gets EROFS.

use crate::attrs::file_attr;
use crate::data::SetAttr;
use crate::errno::to_errno;
use crate::handles::Handle;
use crate::names::{entry_name, Caller};
use crate::ops::{check_access, negative_attr, open_allowed, serve_read, wants_write, XfsFuse};
use crate::pool::Finished;
use crate::xattr::{name_list, reply_sized};
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;
use xfskit::build::NodeKind;
use xfskit::inode::{FileType, Inode};

/// Sends `$ok` built from the success value, or the errno through `$reply`.
macro_rules! answer {
    ($r:expr, $reply:ident, |$v:pat_param| $ok:expr) => {
        match $r {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for &'static XfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.negotiate(config);
        Ok(())
    }

    fn destroy(&mut self) {
        if self.fs.is_shut_down() {
            // Nothing more is written after XFS_IOC_GOINGDOWN (see serve).
            return;
        }
        self.behind.settle_all();
        self.free_all_orphans();
        if let Err(e) = self.do_sync() {
            eprintln!("xfskit-fuse: writing the image back at unmount failed: {e:?}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        answer!(self.lookup_answer(parent, name), reply, |e| reply
            .entry_with_ttls(
                &attr_ttl(self.ttl, &e),
                &self.ttl,
                &e.attr,
                e.generation
            ));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_lookups(self.ino(ino), nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        answer!(self.inode(ino), reply, |i| reply
            .attr(&self.ttl, &file_attr(&i, i.ino.0, self.block_size)));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        answer!(self.readlink_answer(ino), reply, |t| reply.data(&t));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_answer(ino, flags) {
            Ok(Some((fh, fl))) => reply.opened(FileHandle(fh), fl),
            Ok(None) => reply.error(Errno::ENOSYS),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let rd = match self.reader(fh, ino) {
            Ok(rd) => rd,
            Err(e) => return reply.error(e),
        };
        if self.pool.should_hand_off() {
            self.pool
                .hand_off(move |done| serve_read(&rd, offset, size, reply, done));
        } else {
            serve_read(&rd, offset, size, reply, Finished::default());
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.remove(fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.opendir_answer(ino, flags) {
            Ok(Some((fh, fl))) => reply.opened(FileHandle(fh), fl),
            Ok(None) => reply.error(Errno::ENOSYS),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self
            .listed_dir(ino, fh.0)
            .and_then(|d| self.fill_dir(&d, offset, &mut reply))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // Asked for on read-write mounts only (crate::dirplus).
        let r = self.dir_inode(ino);
        answer!(
            r.and_then(|d| self.fill_dir_plus(&d, offset, &mut reply)),
            reply,
            |()| reply.ok()
        );
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.handles.remove(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        answer!(self.statfs_answer(_ino), reply, |c| reply.statfs(
            c.blocks, c.bfree, c.bfree, c.files, c.ffree, c.bsize, 255, c.bsize,
        ));
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.xattr_value(req.uid(), ino, name.as_bytes());
        answer!(r, reply, |v| reply_sized(reply, size, &v));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.listxattr_answer(req.uid(), ino);
        answer!(r, reply, |l| reply_sized(reply, size, &l));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let r = self.access_answer(ino, req.into(), mask);
        answer!(r, reply, |()| reply.ok());
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime,
            caller_uid: req.uid(),
        };
        answer!(self.do_setattr(ino, a), reply, |i| reply
            .attr(&self.ttl, &file_attr(&i, i.ino.0, self.block_size)));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = XfsFuse::mknod_kind(mode, rdev)
            .and_then(|k| self.make_node(req.into(), parent, name, mode, umask, k));
        self.reply_entry(r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.make_node(req.into(), parent, name, mode, umask, NodeKind::Dir);
        self.reply_entry(r, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let kind = NodeKind::Symlink(target.as_os_str().as_bytes().to_vec());
        let r = self.make_node(req.into(), parent, link_name, 0o777, 0, kind);
        self.reply_entry(r, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.make_node(
            req.into(),
            parent,
            name,
            mode,
            umask,
            NodeKind::File { size: 0 },
        );
        answer!(self.entry_of(r), reply, |e| reply.created(
            &self.ttl,
            &e.attr,
            e.generation,
            FileHandle(0),
            FopenFlags::FOPEN_KEEP_CACHE,
        ));
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.do_link(ino, newparent, newname);
        self.reply_entry(r, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(self.do_remove(parent, name, false), reply, |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(self.do_remove(parent, name, true), reply, |()| reply.ok());
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.do_rename(req.into(), parent, name, newparent, newname, flags);
        answer!(r, reply, |()| reply.ok());
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let appending = flags.0 & libc::O_APPEND != 0;
        answer!(
            self.do_write(ino, offset, data, kill, appending, None),
            reply,
            |n| reply.written(n)
        );
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at close: ENOSYS makes the kernel stop sending FLUSH.
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        answer!(self.do_fsync(Some(ino)), reply, |()| reply.ok());
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        answer!(self.do_fsync(None), reply, |()| reply.ok());
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = self.do_setxattr(req.into(), ino, name, value, flags);
        answer!(r, reply, |()| reply.ok());
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(self.do_removexattr(ino, name), reply, |()| reply.ok());
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        answer!(
            self.do_fallocate(req.into(), ino, offset, length, mode),
            reply,
            |()| { reply.ok() }
        );
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let r = self.do_copy_file_range(ino_in, offset_in, ino_out, offset_out, len);
        answer!(r, reply, |n| reply.written(n));
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let r = self.ioctl_answer(req.into(), ino, cmd, in_data, out_size);
        answer!(r, reply, |out| reply.ioctl(0, &out));
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        answer!(self.do_lseek(ino, offset, whence), reply, |o| reply
            .offset(o));
    }
}

impl XfsFuse {
    /// Answers a request that made or linked an inode.
    fn reply_entry(&self, r: Result<Arc<Inode>, Errno>, reply: ReplyEntry) {
        answer!(self.entry_of(r), reply, |e| reply.entry(
            &self.ttl,
            &e.attr,
            e.generation
        ));
    }
}

/// How long the kernel may keep the attributes of entry `e`: the mount's
/// TTL, except for the root. An entry reply's node id doubles as the
/// attributes' inode number (fuser sends one number for both), so a root
/// entry (the answer to the LOOKUP of ".." that reconnects a directory
/// opened by handle) shows `st_ino` 1 where GETATTR shows the XFS root's
/// number; with no time to live, the next stat asks again.
pub(crate) fn attr_ttl(ttl: std::time::Duration, e: &Entry) -> std::time::Duration {
    if e.attr.ino.0 == 1 {
        std::time::Duration::ZERO
    } else {
        ttl
    }
}

/// What a request that names an inode answers (the TTL is the mount's).
pub(crate) struct Entry {
    pub attr: fuser::FileAttr,
    pub generation: Generation,
}

// The answers both transports (crate::dispatch for /dev/fuse, crate::wire
// for io_uring) send; each only encodes them.
impl XfsFuse {
    /// The entry of an inode just made or linked; it counts as a lookup.
    pub(crate) fn entry_of(&self, r: Result<Arc<Inode>, Errno>) -> Result<Entry, Errno> {
        let mut i = r?;
        if self.behind.has_pending(i.ino) {
            // Its size and blocks once the writes answered are done.
            self.behind.settle(i.ino);
            i = self.inode_by_ino(i.ino)?;
        }
        self.count_lookup(i.ino);
        Ok(Entry {
            attr: file_attr(&i, self.node(i.ino), self.block_size),
            generation: self.generation(&i),
        })
    }

    /// LOOKUP: the entry, or a negative entry (node id 0) for a missing
    /// name, which the kernel caches for the TTL (only the kernel's own
    /// requests change the image) while the caller still sees ENOENT.
    pub(crate) fn lookup_answer(&self, parent: INodeNo, name: &OsStr) -> Result<Entry, Errno> {
        entry_name(name)?;
        match self.do_lookup(parent, name) {
            Ok(i) => {
                if name != "." && name != ".." {
                    self.note_stream_parent(&i, parent);
                }
                self.entry_of(Ok(i))
            }
            Err(Errno::ENOENT) => Ok(Entry {
                attr: negative_attr(),
                generation: Generation(0),
            }),
            Err(e) => Err(e),
        }
    }

    /// OPEN: the handle and open flags, or None for "not implemented"
    /// (the kernel then stops sending OPEN and RELEASE).
    pub(crate) fn open_answer(
        &self,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<Option<(u64, FopenFlags)>, Errno> {
        if wants_write(flags) && !self.writable {
            return Err(Errno::EROFS);
        }
        if self.writable {
            // Nothing to keep per open file: every read maps the file
            // anew. OPEN is answered (not ENOSYS) so that the open itself
            // is refused where the inode's flags forbid it, as the
            // kernel's VFS refuses it on kernel XFS.
            let i = self.inode(ino)?;
            open_allowed(&i, flags)?;
            // strictatime: every read stamps the atime, and only reads
            // that reach us can; the page cache is dropped at each open
            // so that a file read again is read here again.
            let keep = if self.atime == xfskit::namespace::AtimePolicy::Strict {
                FopenFlags::empty()
            } else {
                FopenFlags::FOPEN_KEEP_CACHE
            };
            return Ok(Some((0, keep)));
        }
        let rd = self.reader_by_node(ino)?;
        if self.skip_open.load(Relaxed) {
            // "Not implemented" here means: open succeeds, and the kernel
            // stops sending OPEN and RELEASE for this mount; it keeps the
            // page cache across opens, and reads come without a handle.
            return Ok(None);
        }
        let fh = self.handles.insert(Handle::File(rd));
        Ok(Some((fh, FopenFlags::FOPEN_KEEP_CACHE)))
    }

    /// OPENDIR, as [`XfsFuse::open_answer`].
    pub(crate) fn opendir_answer(
        &self,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<Option<(u64, FopenFlags)>, Errno> {
        if wants_write(flags) && !self.writable {
            return Err(Errno::EROFS);
        }
        let d = self.dir_inode(ino)?;
        if self.skip_opendir.load(Relaxed) {
            // As for OPEN: the kernel then caches directory listings itself.
            return Ok(None);
        }
        let fh = self.handles.insert(Handle::Dir(d));
        Ok(Some((
            fh,
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        )))
    }

    /// READLINK: the target.
    pub(crate) fn readlink_answer(&self, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let i = self.inode(ino)?;
        if i.file_type != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        xfskit::symlink::read_link(self.fs, &i).map_err(|e| to_errno(&e))
    }

    /// The directory a READDIR lists: the one opened under handle `fh` on a
    /// read-only mount (it cannot change), else the inode as it is now.
    pub(crate) fn listed_dir(&self, ino: INodeNo, fh: u64) -> Result<Arc<Inode>, Errno> {
        match self.handles.get(fh) {
            Some(Handle::Dir(d)) if !self.writable => Ok(d),
            _ => self.dir_inode(ino),
        }
    }

    /// LISTXATTR: the names `uid` may see, in the list format.
    pub(crate) fn listxattr_answer(&self, uid: u32, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let all = self.with_inode(ino, |i| {
            xfskit::attr::list_names(self.fs, i).map_err(|e| to_errno(&e))
        })?;
        Ok(name_list(&all, uid))
    }

    /// ACCESS.
    pub(crate) fn access_answer(
        &self,
        ino: INodeNo,
        who: Caller,
        mask: AccessFlags,
    ) -> Result<(), Errno> {
        if mask.contains(AccessFlags::W_OK) && !self.writable {
            return Err(Errno::EROFS);
        }
        check_access(&*self.inode(ino)?, who.uid, who.gid, mask)
    }

    /// STATFS counters.
    /// statfs of the filesystem as seen from `node`: inside a project
    /// whose quota is enforced, the project's limits bound it, as kernel
    /// XFS bounds it (the soft limit, else the hard one; what is left of
    /// it is what is free).
    pub(crate) fn statfs_answer(&self, node: INodeNo) -> Result<crate::statfs::Counters, Errno> {
        let mut c = self.statfs_counters().ok_or_else(|| {
            eprintln!("xfskit-fuse: statfs: an AG header could not be read (reported as EIO)");
            Errno::EIO
        })?;
        // A project record that cannot be read bounds nothing, as in the
        // kernel.
        if let Ok(Some(l)) = xfskit::quota::project_statfs(self.fs, self.ino(node)) {
            if l.blocks != 0 {
                c.blocks = c.blocks.min(l.blocks);
                c.bfree = c.bfree.min(l.blocks.saturating_sub(l.blocks_used));
            }
            if l.inodes != 0 {
                c.files = c.files.min(l.inodes);
                c.ffree = c.ffree.min(l.inodes.saturating_sub(l.inodes_used));
            }
        }
        Ok(c)
    }
}

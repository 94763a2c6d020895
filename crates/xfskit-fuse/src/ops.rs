//! The FUSE operations over an open, read-only XFS filesystem.
//!
//! Node ids are XFS inode numbers, except that FUSE's root node 1 stands
//! for the XFS root directory (no XFS inode can be number 1: that spot holds
//! the superblock). `st_ino` always shows the real XFS number.
//!
//! Speed comes from asking the kernel as little as possible and answering
//! from memory: long attribute and entry TTLs (the image cannot change),
//! negative entries, OPEN/OPENDIR declined where the kernel allows it (then
//! an open costs no request at all and the page cache and directory
//! listings persist), and bounded caches of decoded inodes and extent maps
//! by inode number, so a lookup, getattr or read of a known file does no
//! metadata I/O. A READ that overlaps others goes to a worker thread
//! ([`crate::pool`]), so concurrent readers keep several disk reads in
//! flight while a lone reader is still answered without a hand-off.

use crate::attrs::{file_attr, fuse_type};
use crate::cache::InoCache;
use crate::errno::to_errno;
use crate::handles::{Handle, Handles};
use crate::pool::{Finished, ReadPool};
use crate::statfs::{counters, Counters};
use crate::xattr::{name_list, reply_sized, visible_to};
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use xfskit::attr::Namespace;
use xfskit::inode::{FileReader, FileType, Inode};
use xfskit::{Fs, Ino};

/// FUSE's node id of the root directory.
const ROOT_NODE: u64 = 1;
/// readdir offset after "." ; entry offsets are the engine cookie plus 2.
const OFF_DOT: u64 = 1;
/// readdir offset after "..".
const OFF_DOTDOT: u64 = 2;
/// Largest read or readahead we ask the kernel for.
const MAX_IO: u32 = 1 << 20;
/// Bytes of decoded inodes to keep (about 50,000 small inodes).
const INODE_CACHE_BYTES: usize = 48 << 20;
/// Bytes of file extent maps to keep for files read without an open handle.
const MAP_CACHE_BYTES: usize = 64 << 20;
/// Shards of the extent-map cache: few, so that one map may hold up to
/// 16 MiB (half a million extents) and a fragmented file's map is still
/// decoded once, not on every read.
const MAP_CACHE_SHARDS: usize = 4;

thread_local! {
    /// The read buffer of the current serving or worker thread.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A read-only XFS filesystem served through FUSE.
pub struct XfsFuse {
    fs: &'static Fs,
    root: Ino,
    block_size: u32,
    ttl: Duration,
    handles: Handles,
    statfs: OnceLock<Counters>,
    /// Decoded inodes by number: lookups, getattr and opens of a cached
    /// inode do no I/O and no CRC work.
    inodes: InoCache<Inode>,
    /// Extent maps of regular files by inode number, for reads that come
    /// without a handle (when the kernel skips OPEN) or reopened files.
    readers: InoCache<FileReader<'static>>,
    /// The kernel lets us skip OPEN/RELEASE (and OPENDIR/RELEASEDIR): it
    /// then keeps the page cache and directory cache across opens itself.
    skip_open: bool,
    skip_opendir: bool,
    /// Workers for READs that overlap others.
    pool: &'static ReadPool,
}

impl XfsFuse {
    /// Serves `fs`, letting the kernel cache attributes and names for `ttl`;
    /// up to `read_threads` threads serve READs that overlap (see
    /// [`crate::pool`]; 0 keeps every READ on the thread that received it).
    pub fn new(fs: &'static Fs, ttl: Duration, read_threads: usize) -> XfsFuse {
        let geo = fs.geometry();
        XfsFuse {
            fs,
            root: geo.root_ino,
            block_size: geo.block_size,
            ttl,
            handles: Handles::default(),
            statfs: OnceLock::new(),
            inodes: InoCache::new(INODE_CACHE_BYTES),
            readers: InoCache::with_shards(MAP_CACHE_BYTES, MAP_CACHE_SHARDS),
            skip_open: false,
            skip_opendir: false,
            pool: Box::leak(Box::new(ReadPool::new(read_threads))),
        }
    }

    /// The READ worker pool (it needs the FUSE device once mounted).
    pub(crate) fn read_pool(&self) -> &'static ReadPool {
        self.pool
    }

    fn ino(&self, node: INodeNo) -> Ino {
        if node.0 == ROOT_NODE {
            self.root
        } else {
            Ino(node.0)
        }
    }

    fn node(&self, ino: Ino) -> u64 {
        if ino == self.root {
            ROOT_NODE
        } else {
            ino.0
        }
    }

    fn inode(&self, node: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.inode_by_ino(self.ino(node))
    }

    /// Inode `ino`, from the cache or read, checked and decoded.
    fn inode_by_ino(&self, ino: Ino) -> Result<Arc<Inode>, Errno> {
        self.inodes.get_or_load(
            ino.0,
            || self.fs.inode(ino).map_err(|e| to_errno(&e)),
            inode_cost,
        )
    }

    fn dir_inode(&self, node: INodeNo) -> Result<Arc<Inode>, Errno> {
        let inode = self.inode(node)?;
        if inode.file_type != FileType::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(inode)
    }

    fn do_lookup(&self, parent: INodeNo, name: &OsStr) -> Result<Arc<Inode>, Errno> {
        let dir = self.dir_inode(parent)?;
        let name = name.as_bytes();
        let ino = match name {
            b"." => dir.ino,
            b".." => xfskit::dir::parent(self.fs, &dir).map_err(|e| to_errno(&e))?,
            _ => xfskit::dir::lookup(self.fs, &dir, name)
                .map_err(|e| to_errno(&e))?
                .ok_or(Errno::ENOENT)?,
        };
        self.inode_by_ino(ino)
    }

    /// Fills `reply` from directory position `offset` until the buffer is full.
    fn fill_dir(&self, dir: &Inode, offset: u64, reply: &mut ReplyDirectory) -> Result<(), Errno> {
        if offset < OFF_DOT
            && reply.add(INodeNo(dir.ino.0), OFF_DOT, fuser::FileType::Directory, ".")
        {
            return Ok(());
        }
        if offset < OFF_DOTDOT {
            let parent = if dir.ino == self.root {
                dir.ino
            } else {
                xfskit::dir::parent(self.fs, dir).map_err(|e| to_errno(&e))?
            };
            if reply.add(
                INodeNo(parent.0),
                OFF_DOTDOT,
                fuser::FileType::Directory,
                "..",
            ) {
                return Ok(());
            }
        }
        let after = offset.saturating_sub(OFF_DOTDOT);
        let mut failed: Option<Errno> = None;
        let walk = xfskit::dir::for_each_entry(self.fs, dir, after, &mut |e| {
            let kind = match e.file_type {
                Some(t) => t,
                None => match self.inode_by_ino(e.ino) {
                    Ok(i) => i.file_type,
                    Err(err) => {
                        failed = Some(err);
                        return false;
                    }
                },
            };
            let off = e.cookie.saturating_add(OFF_DOTDOT);
            !reply.add(
                INodeNo(e.ino.0),
                off,
                fuse_type(kind),
                OsStr::from_bytes(&e.name),
            )
        });
        walk.map_err(|e| to_errno(&e))?;
        failed.map_or(Ok(()), Err)
    }

    fn reader(&self, fh: FileHandle, node: INodeNo) -> Result<Arc<FileReader<'static>>, Errno> {
        if fh.0 != 0 {
            if let Some(Handle::File(r)) = self.handles.get(fh.0) {
                return Ok(r);
            }
        }
        self.reader_by_node(node)
    }

    /// The cached extent map of a regular file, loaded on first use.
    fn reader_by_node(&self, node: INodeNo) -> Result<Arc<FileReader<'static>>, Errno> {
        let ino = self.ino(node);
        self.readers.get_or_load(
            ino.0,
            || {
                let i = self.inode_by_ino(ino)?;
                if i.file_type == FileType::Dir {
                    return Err(Errno::EISDIR);
                }
                FileReader::new(self.fs, &i).map_err(|e| to_errno(&e))
            },
            |r| std::mem::size_of::<FileReader<'static>>() + std::mem::size_of_val(r.extents()),
        )
    }
}

fn wants_write(flags: OpenFlags) -> bool {
    flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & (libc::O_TRUNC | libc::O_CREAT) != 0
}

/// Sends `$ok` built from the success value, or the errno through `$reply`.
macro_rules! answer {
    ($r:expr, $reply:ident, |$v:pat_param| $ok:expr) => {
        match $r {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for XfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config
            .set_max_readahead(MAX_IO)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config
            .set_max_write(MAX_IO)
            .or_else(|max| config.set_max_write(max));
        // POSIX_ACL: the kernel checks permissions with the ACLs it reads
        // through getxattr, as it does on its own XFS mounts.
        let wanted = InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_POSIX_ACL;
        let _ = config.add_capabilities(wanted & config.capabilities());
        // Answering OPEN with ENOSYS is only understood where the kernel says so.
        self.skip_open = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPEN_SUPPORT);
        self.skip_opendir = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent, name) {
            Ok(i) => {
                let attr = file_attr(&i, self.node(i.ino), self.block_size);
                reply.entry(&self.ttl, &attr, Generation(u64::from(i.gen)))
            }
            // Node id 0 is a negative entry: the kernel caches the miss for the TTL
            // (the image cannot change under us) and the caller still sees ENOENT.
            Err(Errno::ENOENT) => reply.entry(&self.ttl, &negative_attr(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        answer!(self.inode(ino), reply, |i| reply
            .attr(&self.ttl, &file_attr(&i, i.ino.0, self.block_size)));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.inode(ino).and_then(|i| {
            if i.file_type != FileType::Symlink {
                return Err(Errno::EINVAL);
            }
            xfskit::symlink::read_link(self.fs, &i).map_err(|e| to_errno(&e))
        });
        answer!(r, reply, |t| reply.data(&t));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if wants_write(flags) {
            return reply.error(Errno::EROFS);
        }
        let r = self.reader_by_node(ino);
        if self.skip_open && r.is_ok() {
            // "Not implemented" here means: open succeeds, and the kernel
            // stops sending OPEN and RELEASE for this mount; it keeps the
            // page cache across opens, and reads come without a handle.
            return reply.error(Errno::ENOSYS);
        }
        answer!(r, reply, |rd| reply.opened(
            FileHandle(self.handles.insert(Handle::File(rd))),
            FopenFlags::FOPEN_KEEP_CACHE
        ));
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
        if wants_write(flags) {
            return reply.error(Errno::EROFS);
        }
        let dir = self.dir_inode(ino);
        if self.skip_opendir && dir.is_ok() {
            // As for OPEN: the kernel then caches directory listings itself.
            return reply.error(Errno::ENOSYS);
        }
        answer!(dir, reply, |d| {
            let fh = self.handles.insert(Handle::Dir(d));
            reply.opened(
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            )
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dir = match self.handles.get(fh.0) {
            Some(Handle::Dir(d)) => Ok(d),
            _ => self.dir_inode(ino),
        };
        match dir.and_then(|d| self.fill_dir(&d, offset, &mut reply)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let c = self.statfs.get_or_init(|| counters(self.fs));
        reply.statfs(
            c.blocks, c.bfree, c.bfree, c.files, c.ffree, c.bsize, 255, c.bsize,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if let Some(disk) = xfskit::attr::acl::disk_name(name.as_bytes()) {
            let r = self.inode(ino).and_then(|i| {
                let raw = xfskit::attr::get(self.fs, &i, Namespace::Trusted, disk)
                    .map_err(|e| to_errno(&e))?
                    .ok_or(Errno::ENODATA)?;
                xfskit::attr::acl::to_linux(i.ino.0, &raw).map_err(|e| to_errno(&e))
            });
            return answer!(r, reply, |v| reply_sized(reply, size, &v));
        }
        let Some((ns, short)) = xfskit::attr::parse_full_name(name.as_bytes()) else {
            return reply.error(Errno::ENODATA);
        };
        if !visible_to(ns, req.uid()) {
            return reply.error(Errno::ENODATA);
        }
        let r = self.inode(ino).and_then(|i| {
            xfskit::attr::get(self.fs, &i, ns, short)
                .map_err(|e| to_errno(&e))?
                .ok_or(Errno::ENODATA)
        });
        answer!(r, reply, |v| reply_sized(reply, size, &v));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self
            .inode(ino)
            .and_then(|i| xfskit::attr::list_names(self.fs, &i).map_err(|e| to_errno(&e)))
            .map(|all| name_list(&all, req.uid()));
        answer!(r, reply, |l| reply_sized(reply, size, &l));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        answer!(
            self.inode(ino)
                .and_then(|i| check_access(&i, req.uid(), req.gid(), mask)),
            reply,
            |()| reply.ok()
        );
    }
}

/// Reads `size` bytes at `offset` through `rd` and replies (marking the
/// job `done` in between).
fn serve_read(
    rd: &FileReader<'static>,
    offset: u64,
    size: u32,
    reply: ReplyData,
    mut done: Finished<'_>,
) {
    let want = rd.size().saturating_sub(offset).min(u64::from(size)) as usize;
    // Each thread reads into its own buffer, allocated and zeroed once (not
    // per request: a 1 MiB memset per read is measurable); the kernel asks
    // for at most max_read bytes, so it stays small.
    READ_BUF.with_borrow_mut(|buf| {
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let r = rd.read_at(offset, &mut buf[..want]);
        done.now();
        match r {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(to_errno(&e)),
        }
    });
}

/// Attributes of a negative lookup reply (only the node id 0 matters).
fn negative_attr() -> fuser::FileAttr {
    let t = std::time::UNIX_EPOCH;
    fuser::FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The classic owner/group/other permission check for read and execute.
fn check_access(i: &Inode, uid: u32, gid: u32, mask: AccessFlags) -> Result<(), Errno> {
    let mode = u32::from(i.perm());
    let want = (mask & (AccessFlags::R_OK | AccessFlags::X_OK)).bits() as u32;
    if uid == 0 {
        // Root may read anything, and execute what has any execute bit (or is a directory).
        let exec_ok = mode & 0o111 != 0 || i.file_type == FileType::Dir;
        return if want & 1 != 0 && !exec_ok {
            Err(Errno::EACCES)
        } else {
            Ok(())
        };
    }
    let bits = if uid == i.uid {
        mode >> 6
    } else if gid == i.gid {
        mode >> 3
    } else {
        mode
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Memory held by a cached inode.
fn inode_cost(i: &Inode) -> usize {
    std::mem::size_of::<Inode>() + i.data_fork.len() + i.attr_fork.len()
}

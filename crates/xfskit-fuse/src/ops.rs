//! The state of a FUSE mount and the read side of its operations.
//!
//! Node ids are XFS inode numbers, except that FUSE's root node 1 stands
//! for the XFS root directory (no XFS inode can be number 1: that spot holds
//! the superblock). `st_ino` always shows the real XFS number. The root's
//! own number is never a node id, so each node id names one inode and can
//! be decoded without a prior lookup: that is what makes the mount's file
//! handles exportable (see [`XfsFuse::inode_by_handle`]).
//!
//! On a read-only mount, speed comes from asking the kernel as little as
//! possible and answering from memory: long attribute and entry TTLs (the image cannot change),
//! negative entries, OPEN/OPENDIR declined where the kernel allows it (then
//! an open costs no request at all and the page cache and directory
//! listings persist), and bounded caches of decoded inodes and extent maps
//! by inode number, so a lookup, getattr or read of a known file does no
//! metadata I/O. A READ that overlaps others goes to a worker thread
//! ([`crate::pool`]), so concurrent readers keep several disk reads in
//! flight while a lone reader is still answered without a hand-off.
//!
//! On a read-write mount nothing decoded is kept here: every request reads
//! the inode and its mapping anew from the engine, whose pending set and
//! buffer cache hold what recent transactions changed.

use crate::attrs::fuse_type;
use crate::cache::InoCache;
use crate::errno::to_errno;
use crate::handles::{Handle, Handles};
use crate::pool::{Finished, ReadPool};
use crate::statfs::Counters;
use fuser::{
    AccessFlags, Errno, FileHandle, INodeNo, OpenAccMode, OpenFlags, ReplyData, ReplyDirectory,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use xfskit::inode::{FileReader, FileType, Inode};
use xfskit::namespace::AtimePolicy;
use xfskit::{Fs, Ino};

/// FUSE's node id of the root directory.
const ROOT_NODE: u64 = 1;
/// readdir offset after "." ; entry offsets are the engine cookie plus 2.
const OFF_DOT: u64 = 1;
/// readdir offset after "..".
const OFF_DOTDOT: u64 = 2;
/// Largest read or readahead we ask the kernel for.
pub(crate) const MAX_IO: u32 = 1 << 20;
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

/// Where directory entries go: a READDIR reply of either transport.
pub(crate) trait DirSink {
    /// Adds an entry; true when it did not fit (the reply is full).
    fn add(&mut self, node: INodeNo, offset: u64, kind: fuser::FileType, name: &OsStr) -> bool;
}

impl DirSink for ReplyDirectory {
    fn add(&mut self, node: INodeNo, offset: u64, kind: fuser::FileType, name: &OsStr) -> bool {
        ReplyDirectory::add(self, node, offset, kind, name)
    }
}

/// A read-only XFS filesystem served through FUSE.
pub struct XfsFuse {
    pub(crate) fs: &'static Fs,
    pub(crate) root: Ino,
    pub(crate) block_size: u32,
    pub(crate) ttl: Duration,
    pub(crate) handles: Handles,
    pub(crate) statfs: OnceLock<Counters>,
    /// Served read-write: nothing decoded is cached (the image changes),
    /// and the write operations are answered.
    pub(crate) writable: bool,
    /// Kernel lookup counts and files open after their last unlink.
    pub(crate) orphans: crate::orphans::Orphans,
    /// Decoded inodes by number: lookups, getattr and opens of a cached
    /// inode do no I/O and no CRC work.
    pub(crate) inodes: InoCache<Inode>,
    /// Extent maps of regular files by inode number, for reads that come
    /// without a handle (when the kernel skips OPEN) or reopened files.
    pub(crate) readers: InoCache<FileReader<'static>>,
    /// The kernel lets us skip OPEN/RELEASE (and OPENDIR/RELEASEDIR): it
    /// then keeps the page cache and directory cache across opens itself.
    pub(crate) skip_open: AtomicBool,
    pub(crate) skip_opendir: AtomicBool,
    /// Workers for READs that overlap others.
    pub(crate) pool: &'static ReadPool,
    /// Ask for FUSE's writeback cache (read-write only).
    pub(crate) writeback_cache: bool,
    /// Ask for FUSE over io_uring (crate::uring), and whether INIT got it.
    pub(crate) want_uring: bool,
    pub(crate) uring_granted: AtomicBool,
    /// WRITEs answered before they are done (crate::behind), io_uring only.
    pub(crate) behind: crate::behind::Behind,
    pub(crate) write_behind: bool,
    /// When reads stamp access times (the mount's `noatime`, `relatime`,
    /// `strictatime`), for files and for directories (`nodiratime`).
    pub(crate) atime: AtimePolicy,
    pub(crate) dir_atime: AtimePolicy,
    /// The kernel's side of the session, told when an inode's attributes
    /// change behind a request that does not answer with them.
    pub(crate) notifier: OnceLock<fuser::Notifier>,
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
            writable: fs.is_writable(),
            orphans: Default::default(),
            inodes: InoCache::new(INODE_CACHE_BYTES),
            readers: InoCache::with_shards(MAP_CACHE_BYTES, MAP_CACHE_SHARDS),
            skip_open: AtomicBool::new(false),
            skip_opendir: AtomicBool::new(false),
            pool: Box::leak(Box::new(ReadPool::new(read_threads))),
            writeback_cache: false,
            want_uring: false,
            uring_granted: AtomicBool::new(false),
            behind: crate::behind::Behind::new(crate::uring::possible_cpus()),
            write_behind: false,
            atime: AtimePolicy::Relative,
            dir_atime: AtimePolicy::Relative,
            notifier: OnceLock::new(),
        }
    }

    /// Records a read of `i` (data read, or a directory listed from its
    /// start) as the kernel's touch_atime does: on a read-write mount its
    /// atime is stamped where the mount's policy asks. A failure is not
    /// the read's: like the kernel, the read goes on.
    pub(crate) fn note_access(&self, i: &Inode) {
        let policy = if i.file_type == FileType::Dir {
            self.dir_atime
        } else {
            self.atime
        };
        if !self.writable || policy == AtimePolicy::Never {
            return;
        }
        let Ok(now) = self.fs.clock() else { return };
        if policy.needs_update(i, now) {
            if let Err(e) = self.fs.mark_access(i.ino, policy) {
                eprintln!(
                    "xfskit mount: inode {}: access time not stamped: {e}",
                    i.ino.0
                );
            }
        }
    }

    /// Tells the kernel that `node`'s attributes changed where the
    /// request that changed them does not answer with attributes (a
    /// write that dropped set-id bits, a file attribute ioctl), so that
    /// the next stat asks again instead of showing the cached ones.
    pub(crate) fn attrs_changed(&self, node: INodeNo) {
        if let Some(n) = self.notifier.get() {
            // A negative offset: the attributes only, not the page cache.
            // ENOENT (the kernel holds no such inode) needs nothing.
            let _ = n.inval_inode(node, -1, 0);
        }
    }

    /// The READ worker pool (it needs the FUSE device once mounted).
    pub(crate) fn read_pool(&self) -> &'static ReadPool {
        self.pool
    }

    pub(crate) fn ino(&self, node: INodeNo) -> Ino {
        if node.0 == ROOT_NODE {
            self.root
        } else {
            Ino(node.0)
        }
    }

    pub(crate) fn node(&self, ino: Ino) -> u64 {
        if ino == self.root {
            ROOT_NODE
        } else {
            ino.0
        }
    }

    pub(crate) fn inode(&self, node: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.inode_by_ino(self.ino(node))
    }

    /// Inode `ino`, from the cache or read, checked and decoded.
    pub(crate) fn inode_by_ino(&self, ino: Ino) -> Result<Arc<Inode>, Errno> {
        if self.writable {
            if self.fs.is_shut_down() {
                // After XFS_IOC_GOINGDOWN every request fails, as on XFS.
                return Err(Errno::EIO);
            }
            // A number the kernel still holds is kept until its last
            // FORGET (crate::orphans); one freed anyway reads as ENOENT.
            return match self.fs.live_inode(ino) {
                Ok(Some(i)) => Ok(Arc::new(i)),
                Ok(None) => Err(Errno::ENOENT),
                Err(e) => Err(to_errno(&e)),
            };
        }
        self.inodes.get_or_load(
            ino.0,
            || self.fs.inode(ino).map_err(|e| to_errno(&e)),
            inode_cost,
        )
    }

    pub(crate) fn dir_inode(&self, node: INodeNo) -> Result<Arc<Inode>, Errno> {
        let inode = self.inode(node)?;
        if inode.file_type != FileType::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(inode)
    }

    /// The inode behind node id `node` as a file handle carries it, for
    /// the kernel's LOOKUP of "." on a node it no longer holds (or never
    /// held in this mount): open_by_handle_at, NFS export. A number that
    /// names no inode in use (free, never allocated, outside the
    /// filesystem, unlinked, or not an inode at all) is ENOENT, which the
    /// kernel turns into ESTALE; the kernel itself then compares the
    /// generation of the reply with the handle's, so an inode freed and
    /// reused since the handle was made is ESTALE too, never the new file.
    pub(crate) fn inode_by_handle(&self, node: INodeNo) -> Result<Arc<Inode>, Errno> {
        if node.0 != ROOT_NODE && node.0 == self.root.0 {
            // The root is only ever node 1.
            return Err(Errno::ENOENT);
        }
        let ino = self.ino(node);
        if !self.fs.geometry().ino_valid(ino) {
            return Err(Errno::ENOENT);
        }
        match self.fs.live_inode(ino) {
            Ok(Some(i)) if i.nlink > 0 => Ok(Arc::new(i)),
            Ok(_) => Err(Errno::ENOENT),
            // A handle may name any number: one whose block holds no
            // inode (or a damaged one) is stale, not a damaged filesystem.
            Err(e) if e.is_corruption() => Err(Errno::ENOENT),
            Err(e) => Err(to_errno(&e)),
        }
    }

    /// The generation an entry reply carries: the inode's, except for the
    /// root, whose FUSE inode the kernel makes with generation 0.
    pub(crate) fn generation(&self, i: &Inode) -> fuser::Generation {
        if i.ino == self.root {
            fuser::Generation(0)
        } else {
            fuser::Generation(u64::from(i.gen))
        }
    }

    pub(crate) fn do_lookup(&self, parent: INodeNo, name: &OsStr) -> Result<Arc<Inode>, Errno> {
        let name = name.as_bytes();
        if name == b"." {
            // Only the kernel's export code asks for "." (the VFS resolves
            // "." in paths itself), with a node id from a file handle that
            // may name a file as well as a directory.
            return self.inode_by_handle(parent);
        }
        let dir = self.dir_inode(parent)?;
        let ino = match name {
            b".." => xfskit::dir::parent(self.fs, &dir).map_err(|e| to_errno(&e))?,
            _ => xfskit::dir::lookup(self.fs, &dir, name)
                .map_err(|e| to_errno(&e))?
                .ok_or(Errno::ENOENT)?,
        };
        self.inode_by_ino(ino)
    }

    /// Tells the engine the directory of a regular file that streams, so
    /// that its data can follow the directory's filestream when written
    /// (a lookup; files the engine creates it notes itself).
    pub(crate) fn note_stream_parent(&self, i: &Inode, parent: INodeNo) {
        if !self.writable || i.file_type != FileType::File {
            return;
        }
        if let Some(fsm) = self.fs.filestreams() {
            if fsm.applies(i.flags) {
                fsm.note_parent(i.ino, self.ino(parent));
            }
        }
    }

    /// Fills `reply` from directory position `offset` until the buffer is full.
    pub(crate) fn fill_dir(
        &self,
        dir: &Inode,
        offset: u64,
        reply: &mut impl DirSink,
    ) -> Result<(), Errno> {
        if offset == 0 {
            self.note_access(dir);
        }
        if offset < OFF_DOT
            && reply.add(
                INodeNo(dir.ino.0),
                OFF_DOT,
                fuser::FileType::Directory,
                OsStr::new("."),
            )
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
                OsStr::new(".."),
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

    pub(crate) fn reader(
        &self,
        fh: FileHandle,
        node: INodeNo,
    ) -> Result<Arc<FileReader<'static>>, Errno> {
        if fh.0 != 0 && !self.writable {
            if let Some(Handle::File(r)) = self.handles.get(fh.0) {
                return Ok(r);
            }
        }
        self.reader_by_node(node)
    }

    /// The cached extent map of a regular file, loaded on first use.
    pub(crate) fn reader_by_node(&self, node: INodeNo) -> Result<Arc<FileReader<'static>>, Errno> {
        let ino = self.ino(node);
        if self.writable {
            // The map changes with every write: read it fresh.
            let i = self.inode_by_ino(ino)?;
            if i.file_type == FileType::Dir {
                return Err(Errno::EISDIR);
            }
            self.note_access(&i);
            return FileReader::new(self.fs, &i)
                .map(Arc::new)
                .map_err(|e| to_errno(&e));
        }
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

/// What an open with `flags` may do to `ip`, as the kernel's VFS decides
/// before the filesystem sees it: an immutable inode opens for reading
/// only; an append-only one for writing only with O_APPEND, and never
/// with O_TRUNC.
pub(crate) fn open_allowed(ip: &xfskit::inode::Inode, flags: OpenFlags) -> Result<(), Errno> {
    use xfs_format::inode::{XFS_DIFLAG_APPEND, XFS_DIFLAG_IMMUTABLE};
    let writes = flags.acc_mode() != OpenAccMode::O_RDONLY;
    let trunc = flags.0 & libc::O_TRUNC != 0;
    if ip.flags & XFS_DIFLAG_IMMUTABLE != 0 && (writes || trunc) {
        return Err(Errno::EPERM);
    }
    if ip.flags & XFS_DIFLAG_APPEND != 0 && ((writes && flags.0 & libc::O_APPEND == 0) || trunc) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

pub(crate) fn wants_write(flags: OpenFlags) -> bool {
    flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & (libc::O_TRUNC | libc::O_CREAT) != 0
}

/// The bytes a READ of `size` at `offset` gets: none past the end.
pub(crate) fn read_len(rd: &FileReader<'static>, offset: u64, size: u32) -> usize {
    rd.size().saturating_sub(offset).min(u64::from(size)) as usize
}

/// Reads `size` bytes at `offset` through `rd` and replies (marking the
/// job `done` in between).
pub(crate) fn serve_read(
    rd: &FileReader<'static>,
    offset: u64,
    size: u32,
    reply: ReplyData,
    mut done: Finished<'_>,
) {
    let want = read_len(rd, offset, size);
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
pub(crate) fn negative_attr() -> fuser::FileAttr {
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

/// The classic owner/group/other permission check (write is refused
/// before this on a read-only mount).
pub(crate) fn check_access(i: &Inode, uid: u32, gid: u32, mask: AccessFlags) -> Result<(), Errno> {
    let mode = u32::from(i.perm());
    let want = (mask & (AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK)).bits() as u32;
    if uid == 0 {
        // Root may read and write anything, and execute what has any
        // execute bit (or is a directory).
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

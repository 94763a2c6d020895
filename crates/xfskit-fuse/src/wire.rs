//! Requests and answers in the FUSE wire format, for the io_uring transport
//! ([`crate::uring`]): the request's header and fixed argument come from
//! the entry's header buffer, its names and data from the payload buffer,
//! and the answer is encoded in place. What each request does is decided
//! by the same `XfsFuse` methods [`crate::dispatch`] calls for /dev/fuse;
//! this module only parses and encodes (include/uapi/linux/fuse.h).

use crate::attrs::file_attr;
use crate::data::SetAttr;
use crate::dirplus::DirPlusSink;
use crate::dispatch::Entry;
use crate::errno::to_errno;
use crate::names::Caller;
use crate::ops::{read_len, DirSink, XfsFuse};
use crate::uring::{HEADER_LEN, OP_IN};
use crate::xattr::{sized_answer, Answer};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, TimeOrNow,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use xfskit::build::NodeKind;
use xfskit::inode::Inode;

mod op {
    pub const LOOKUP: u32 = 1;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
}

/// `fuse_setattr_in.valid` bits.
mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
const ENTRY_OUT: usize = 128;

/// Little-endian fields of a request argument; reads past the end give 0.
struct Args<'a>(&'a [u8]);

impl Args<'_> {
    fn u32(&self, at: usize) -> u32 {
        self.0
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
    }
    fn u64(&self, at: usize) -> u64 {
        self.0
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
    }
}

/// The NUL-terminated strings at the start of a payload.
fn strings(payload: &[u8]) -> impl Iterator<Item = &OsStr> {
    payload
        .split(|&b| b == 0)
        .map(OsStr::from_bytes)
        .chain(std::iter::repeat(OsStr::new("")))
}

/// An answer being encoded into the payload buffer.
struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Out<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    fn pad8(&mut self) {
        let n = self.len.next_multiple_of(8) - self.len;
        self.put(&[0u8; 8][..n]);
    }

    /// `fuse_attr`.
    fn attr(&mut self, a: &FileAttr) {
        let (at, an) = wire_time(a.atime);
        let (mt, mn) = wire_time(a.mtime);
        let (ct, cn) = wire_time(a.ctime);
        self.u64(a.ino.0);
        self.u64(a.size);
        self.u64(a.blocks);
        self.u64(at as u64);
        self.u64(mt as u64);
        self.u64(ct as u64);
        self.u32(an);
        self.u32(mn);
        self.u32(cn);
        self.u32(mode_of(a.kind) | u32::from(a.perm));
        self.u32(a.nlink);
        self.u32(a.uid);
        self.u32(a.gid);
        self.u32(a.rdev);
        self.u32(a.blksize);
        self.u32(0);
    }

    /// `fuse_entry_out`.
    fn entry(&mut self, ttl: Duration, e: &Entry) {
        let attr_ttl = crate::dispatch::attr_ttl(ttl, e);
        self.u64(e.attr.ino.0);
        self.u64(e.generation.0);
        self.u64(ttl.as_secs());
        self.u64(attr_ttl.as_secs());
        self.u32(ttl.subsec_nanos());
        self.u32(attr_ttl.subsec_nanos());
        self.attr(&e.attr);
    }

    /// `fuse_attr_out`.
    fn attr_out(&mut self, ttl: Duration, a: &FileAttr) {
        self.u64(ttl.as_secs());
        self.u32(ttl.subsec_nanos());
        self.u32(0);
        self.attr(a);
    }

    /// `fuse_open_out`.
    fn open(&mut self, fh: u64, flags: FopenFlags) {
        self.u64(fh);
        self.u32(flags.bits());
        self.u32(0);
    }

    /// `fuse_dirent` without its padding; false if it does not fit in `max`.
    fn dirent(&mut self, max: usize, node: u64, off: u64, kind: FileType, name: &[u8]) -> bool {
        let size = (24 + name.len()).next_multiple_of(8);
        if self.len + size > max {
            return false;
        }
        self.u64(node);
        self.u64(off);
        self.u32(name.len() as u32);
        self.u32(mode_of(kind) >> 12);
        self.put(name);
        self.pad8();
        true
    }
}

fn mode_of(kind: FileType) -> u32 {
    match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// Seconds and nanoseconds as FUSE carries a time, before 1970 too.
fn wire_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                (-secs, 0)
            } else {
                (-secs - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

/// A time from SETATTR, converted as fuser converts it, so that both
/// transports hand `do_setattr` the same value.
fn setattr_time(secs: u64, nsecs: u32) -> SystemTime {
    let secs = secs as i64;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs)
    } else {
        UNIX_EPOCH - Duration::new(secs.unsigned_abs(), nsecs)
    }
}

/// READDIR into the payload.
struct DirOut<'a, 'b> {
    out: &'a mut Out<'b>,
    max: usize,
}

impl DirSink for DirOut<'_, '_> {
    fn add(&mut self, node: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool {
        !self
            .out
            .dirent(self.max, node.0, offset, kind, name.as_bytes())
    }
}

impl DirPlusSink for DirOut<'_, '_> {
    fn add(
        &mut self,
        _node: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        let size = ENTRY_OUT + (24 + name.len()).next_multiple_of(8);
        if self.out.len + size > self.max {
            return true;
        }
        let e = Entry {
            attr: *attr,
            generation,
        };
        // The kernel takes the node id from the attributes, as fuser sends it.
        self.out.entry(*ttl, &e);
        !self
            .out
            .dirent(self.max, attr.ino.0, offset, attr.kind, name.as_bytes())
    }
}

/// Serves one request: `header` holds its `fuse_in_header` and fixed
/// argument, `payload[..in_len]` the rest. Writes the `fuse_out_header`
/// and the answer in place; returns the answer's length in the payload.
pub(crate) fn serve(
    fs: &'static XfsFuse,
    cpu: usize,
    header: &mut [u8; HEADER_LEN],
    payload: &mut [u8],
    in_len: usize,
) -> usize {
    let h = Args(&header[..40]);
    let opcode = h.u32(4);
    let unique = h.u64(8);
    let node = INodeNo(h.u64(16));
    let who = Caller {
        uid: h.u32(24),
        gid: h.u32(28),
        pid: h.u32(32),
    };
    let arg: [u8; HEADER_LEN - OP_IN] = header[OP_IN..].try_into().unwrap();
    // A bug met while answering fails this request, not the queue (whose
    // thread alone serves every request made on its CPU).
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        answer(fs, cpu, opcode, node, who, Args(&arg), payload, in_len)
    }))
    .unwrap_or_else(|_| {
        eprintln!("xfskit-fuse: answering request {opcode} panicked (reported as EIO)");
        Err(Errno::EIO)
    });
    let (error, len) = match r {
        Ok(n) => (0, n),
        Err(e) => (-e.code(), 0),
    };
    header[0..4].copy_from_slice(&((16 + len) as u32).to_le_bytes());
    header[4..8].copy_from_slice(&error.to_le_bytes());
    header[8..16].copy_from_slice(&unique.to_le_bytes());
    len
}

/// Waits for the write-behinds a request could see (crate::behind): all
/// of them before what may free or count inodes and blocks, else those
/// of the request's inode. WRITE orders itself; RELEASE and FLUSH (not
/// implemented) see nothing.
fn settle_for(fs: &XfsFuse, opcode: u32, node: INodeNo) {
    match opcode {
        op::WRITE | op::RELEASE | op::RELEASEDIR | op::FLUSH => {}
        op::UNLINK
        | op::RMDIR
        | op::RENAME
        | op::RENAME2
        | op::LINK
        | op::STATFS
        | op::DESTROY
        | op::FSYNCDIR
        | op::READDIRPLUS
        | op::COPY_FILE_RANGE => fs.behind.settle_all(),
        _ => fs.behind.settle(fs.ino(node)),
    }
}

/// What a request answers, before it is encoded.
enum Reply {
    Empty,
    Entry(Entry),
    Attr(FileAttr),
    Bytes(Vec<u8>),
    Open(u64, FopenFlags),
    Created(Entry),
    /// `fuse_write_out`, also copy_file_range's answer.
    Written(u32),
    Statfs(crate::statfs::Counters),
    /// getxattr/listxattr size probe: `fuse_getxattr_out`.
    Size(u32),
    Offset(i64),
    /// `fuse_ioctl_out` (result 0, no retry) and the argument's bytes.
    Ioctl(Vec<u8>),
}

#[allow(clippy::too_many_arguments)]
fn answer(
    fs: &'static XfsFuse,
    cpu: usize,
    opcode: u32,
    node: INodeNo,
    who: Caller,
    a: Args<'_>,
    payload: &mut [u8],
    in_len: usize,
) -> Result<usize, Errno> {
    let ttl = fs.ttl;
    settle_for(fs, opcode, node);
    // READ and READDIR write their answers straight into the payload.
    match opcode {
        op::READ => {
            let (fh, offset, size) = (a.u64(0), a.u64(8), a.u32(16));
            let rd = fs.reader(FileHandle(fh), node)?;
            let want = read_len(&rd, offset, size).min(payload.len());
            return rd
                .read_at(offset, &mut payload[..want])
                .map_err(|e| to_errno(&e));
        }
        op::READDIR | op::READDIRPLUS => {
            let (fh, offset, size) = (a.u64(0), a.u64(8), a.u32(16) as usize);
            // READDIRPLUS is asked for on read-write mounts only (crate::dirplus).
            let dir = if opcode == op::READDIR {
                fs.listed_dir(node, fh)?
            } else {
                fs.dir_inode(node)?
            };
            let max = size.min(payload.len());
            let mut out = Out {
                buf: payload,
                len: 0,
            };
            let mut sink = DirOut { out: &mut out, max };
            if opcode == op::READDIR {
                fs.fill_dir(&dir, offset, &mut sink)?;
            } else {
                fs.fill_dir_plus(&dir, offset, &mut sink)?;
            }
            return Ok(out.len);
        }
        _ => {}
    }
    let reply = decide(fs, cpu, opcode, node, who, &a, &payload[..in_len])?;
    let mut out = Out {
        buf: payload,
        len: 0,
    };
    match reply {
        Reply::Empty => {}
        Reply::Entry(e) => out.entry(ttl, &e),
        Reply::Attr(at) => out.attr_out(ttl, &at),
        Reply::Bytes(b) => out.put(&b),
        Reply::Open(fh, fl) => out.open(fh, fl),
        Reply::Created(e) => {
            out.entry(ttl, &e);
            out.open(0, FopenFlags::FOPEN_KEEP_CACHE);
        }
        Reply::Written(n) | Reply::Size(n) => {
            out.u32(n);
            out.u32(0);
        }
        Reply::Statfs(c) => {
            for v in [c.blocks, c.bfree, c.bfree, c.files, c.ffree] {
                out.u64(v);
            }
            for v in [c.bsize, 255, c.bsize, 0, 0, 0, 0, 0, 0, 0] {
                out.u32(v);
            }
        }
        Reply::Offset(o) => out.u64(o as u64),
        Reply::Ioctl(b) => {
            for _ in 0..4 {
                out.u32(0);
            }
            out.put(&b);
        }
    }
    Ok(out.len)
}

/// Does what the request asks; `input` is its payload (names, values, data).
fn decide(
    fs: &'static XfsFuse,
    cpu: usize,
    opcode: u32,
    node: INodeNo,
    who: Caller,
    a: &Args<'_>,
    input: &[u8],
) -> Result<Reply, Errno> {
    let mut names = strings(input);
    let attr_of = |i: &Inode| Reply::Attr(file_attr(i, i.ino.0, fs.block_size));
    let entry = |r: Result<Arc<Inode>, Errno>| fs.entry_of(r).map(Reply::Entry);
    Ok(match opcode {
        op::LOOKUP => Reply::Entry(fs.lookup_answer(node, names.next().unwrap())?),
        op::GETATTR => attr_of(&*fs.inode(node)?),
        op::SETATTR => {
            let valid = a.u32(0);
            let has = |bit: u32| valid & bit != 0;
            let time = |bit: u32, now: u32, secs: u64, nsecs: u32| {
                if has(now) {
                    Some(TimeOrNow::Now)
                } else if has(bit) {
                    Some(TimeOrNow::SpecificTime(setattr_time(secs, nsecs)))
                } else {
                    None
                }
            };
            let s = SetAttr {
                mode: has(fattr::MODE).then(|| a.u32(68)),
                uid: has(fattr::UID).then(|| a.u32(76)),
                gid: has(fattr::GID).then(|| a.u32(80)),
                size: has(fattr::SIZE).then(|| a.u64(16)),
                atime: time(fattr::ATIME, fattr::ATIME_NOW, a.u64(32), a.u32(56)),
                mtime: time(fattr::MTIME, fattr::MTIME_NOW, a.u64(40), a.u32(60)),
                ctime: has(fattr::CTIME).then(|| setattr_time(a.u64(48), a.u32(64))),
                caller_uid: who.uid,
            };
            attr_of(&*fs.do_setattr(node, s)?)
        }
        op::READLINK => Reply::Bytes(fs.readlink_answer(node)?),
        op::SYMLINK => {
            let name = names.next().unwrap();
            let target = names.next().unwrap().as_bytes().to_vec();
            entry(fs.make_node(who, node, name, 0o777, 0, NodeKind::Symlink(target)))?
        }
        op::MKNOD => {
            let (mode, rdev, umask) = (a.u32(0), a.u32(4), a.u32(8));
            let name = names.next().unwrap();
            entry(
                XfsFuse::mknod_kind(mode, rdev)
                    .and_then(|k| fs.make_node(who, node, name, mode, umask, k)),
            )?
        }
        op::MKDIR => {
            let name = names.next().unwrap();
            entry(fs.make_node(who, node, name, a.u32(0), a.u32(4), NodeKind::Dir))?
        }
        op::UNLINK | op::RMDIR => {
            fs.do_remove(node, names.next().unwrap(), opcode == op::RMDIR)?;
            Reply::Empty
        }
        op::RENAME | op::RENAME2 => {
            let newdir = INodeNo(a.u64(0));
            let flags = if opcode == op::RENAME2 { a.u32(8) } else { 0 };
            let name = names.next().unwrap();
            let newname = names.next().unwrap();
            let flags = RenameFlags::from_bits_retain(flags);
            fs.do_rename(who, node, name, newdir, newname, flags)?;
            Reply::Empty
        }
        op::LINK => entry(fs.do_link(INodeNo(a.u64(0)), node, names.next().unwrap()))?,
        op::OPEN | op::OPENDIR => {
            let flags = OpenFlags(a.u32(0) as i32);
            let r = if opcode == op::OPEN {
                fs.open_answer(node, flags)
            } else {
                fs.opendir_answer(node, flags)
            };
            let (fh, fl) = r?.ok_or(Errno::ENOSYS)?;
            Reply::Open(fh, fl)
        }
        op::WRITE => {
            let (offset, size) = (a.u64(8), a.u32(16) as usize);
            let kill = a.u32(20) & FUSE_WRITE_KILL_SUIDGID != 0;
            let appending = a.u32(32) as i32 & libc::O_APPEND != 0;
            let data = input.get(..size).ok_or(Errno::EINVAL)?;
            Reply::Written(fs.write_behind(cpu, node, offset, data, kill, appending)?)
        }
        op::STATFS => Reply::Statfs(fs.statfs_answer(node)?),
        op::RELEASE | op::RELEASEDIR => {
            fs.handles.remove(a.u64(0));
            Reply::Empty
        }
        op::FSYNC => fs.do_fsync(Some(node)).map(|()| Reply::Empty)?,
        op::FSYNCDIR => fs.do_fsync(None).map(|()| Reply::Empty)?,
        op::SETXATTR => {
            let size = a.u32(0) as usize;
            let flags = a.u32(4) as i32;
            let name_len = input.iter().position(|&b| b == 0).ok_or(Errno::EINVAL)?;
            let name = OsStr::from_bytes(&input[..name_len]);
            let value = input
                .get(name_len + 1..name_len + 1 + size)
                .ok_or(Errno::EINVAL)?;
            fs.do_setxattr(who, node, name, value, flags)?;
            Reply::Empty
        }
        op::GETXATTR | op::LISTXATTR => {
            let size = a.u32(0);
            let data = if opcode == op::GETXATTR {
                fs.xattr_value(who.uid, node, names.next().unwrap().as_bytes())?
            } else {
                fs.listxattr_answer(who.uid, node)?
            };
            match sized_answer(size, data.len()) {
                Answer::Size(n) => Reply::Size(n),
                Answer::Data => Reply::Bytes(data),
                Answer::Err(e) => return Err(e),
            }
        }
        op::REMOVEXATTR => {
            fs.do_removexattr(node, names.next().unwrap())?;
            Reply::Empty
        }
        // Nothing to do at close: ENOSYS makes the kernel stop sending FLUSH.
        op::FLUSH => return Err(Errno::ENOSYS),
        op::ACCESS => {
            let mask = AccessFlags::from_bits_retain(a.u32(0) as i32);
            fs.access_answer(node, who, mask)?;
            Reply::Empty
        }
        op::CREATE => {
            let (mode, umask) = (a.u32(4), a.u32(8));
            let name = names.next().unwrap();
            let r = fs.make_node(who, node, name, mode, umask, NodeKind::File { size: 0 });
            Reply::Created(fs.entry_of(r)?)
        }
        op::DESTROY => {
            fs.free_all_orphans();
            fs.do_sync()?;
            Reply::Empty
        }
        op::FALLOCATE => {
            let (offset, length, mode) = (a.u64(8), a.u64(16), a.u32(24) as i32);
            fs.do_fallocate(who, node, offset, length, mode)?;
            Reply::Empty
        }
        op::LSEEK => Reply::Offset(fs.do_lseek(node, a.u64(8) as i64, a.u32(16) as i32)?),
        op::COPY_FILE_RANGE => {
            let (off_in, node_out, off_out, len) = (a.u64(8), a.u64(16), a.u64(32), a.u64(40));
            Reply::Written(fs.do_copy_file_range(node, off_in, INodeNo(node_out), off_out, len)?)
        }
        op::IOCTL => {
            // fuse_ioctl_in: fh, flags, cmd, arg, in_size, out_size.
            let (cmd, in_size, out_size) = (a.u32(12), a.u32(24) as usize, a.u32(28));
            let data = input.get(..in_size).ok_or(Errno::EINVAL)?;
            Reply::Ioctl(fs.ioctl_answer(who, node, cmd, data, out_size)?)
        }
        _ => return Err(Errno::ENOSYS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr() -> FileAttr {
        FileAttr {
            ino: INodeNo(131),
            size: 4096,
            blocks: 8,
            atime: UNIX_EPOCH + Duration::new(5, 7),
            mtime: UNIX_EPOCH - Duration::new(1, 500_000_000),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn answers_have_the_abi_sizes_and_fields() {
        let mut buf = vec![0u8; 4096];
        let mut out = Out {
            buf: &mut buf,
            len: 0,
        };
        let e = Entry {
            attr: attr(),
            generation: Generation(9),
        };
        out.entry(Duration::new(60, 0), &e);
        assert_eq!(out.len, 128, "fuse_entry_out");
        out.attr_out(Duration::new(60, 0), &attr());
        assert_eq!(out.len, 128 + 104, "fuse_attr_out");
        let a = Args(&buf[..128]);
        assert_eq!(a.u64(0), 131, "nodeid");
        assert_eq!(a.u64(8), 9, "generation");
        assert_eq!(a.u64(16), 60, "entry_valid");
        assert_eq!(a.u64(40), 131, "attr.ino");
        // attr.mtime: 1.5 s before 1970 is -2 s + 0.5 s.
        assert_eq!(a.u64(40 + 32) as i64, -2);
        assert_eq!(a.u32(40 + 52), 500_000_000);
        assert_eq!(a.u32(40 + 60), libc::S_IFREG | 0o644, "mode");
    }

    #[test]
    fn directory_entries_are_padded_and_stop_when_full() {
        let mut buf = vec![0u8; 64];
        let mut out = Out {
            buf: &mut buf,
            len: 0,
        };
        assert!(out.dirent(64, 5, 1, FileType::Directory, b"."));
        assert_eq!(out.len, 32, "24-byte header + name, to 8 bytes");
        assert!(!out.dirent(64, 6, 2, FileType::RegularFile, b"a-longer-name"));
        assert_eq!(out.len, 32, "an entry that does not fit is not written");
        let a = Args(&buf[..32]);
        assert_eq!(a.u32(20), libc::S_IFDIR >> 12, "type");
    }

    #[test]
    fn payload_strings_and_times() {
        let mut it = strings(b"old\0new\0");
        assert_eq!(it.next().unwrap(), "old");
        assert_eq!(it.next().unwrap(), "new");
        assert_eq!(strings(b"").next().unwrap(), "");
        assert_eq!(wire_time(UNIX_EPOCH - Duration::new(3, 0)), (-3, 0));
        let t = setattr_time(7, 9);
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap(), Duration::new(7, 9));
    }
}

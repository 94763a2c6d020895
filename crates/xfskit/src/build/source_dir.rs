//! A host directory as a build source.
//!
//! The walk is depth-first and holds one sorted list of names per open
//! directory level, so memory follows the depth and width of the tree, not
//! its size. Names are sorted by their bytes, so the same tree always feeds
//! the target in the same order. Symlinks are never followed (only the
//! source root itself may be one). File data is read from the segments
//! `SEEK_DATA`/`SEEK_HOLE` report, in chunks of [`CHUNK_BYTES`], so holes
//! stay holes and no file is ever held whole in memory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, SeekFrom, Statx, StatxFlags, CWD};

use super::feed::{
    check_name, check_symlink, io_at, set_xattr, storable_xattr, FeedOptions, FeedStats,
    CHUNK_BYTES,
};
use super::size::{Census, Layout};
use super::target::{BuildTarget, Meta, NodeKind};
use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::Timestamp;

const S_IFMT: u16 = 0o170000;
const S_IFDIR: u16 = 0o040000;
const S_IFREG: u16 = 0o100000;
const S_IFLNK: u16 = 0o120000;
const S_IFCHR: u16 = 0o020000;
const S_IFBLK: u16 = 0o060000;
const S_IFIFO: u16 = 0o010000;
const S_IFSOCK: u16 = 0o140000;

/// One step of the walk.
enum Event {
    /// A directory (the root first, with an empty name); its children follow.
    Enter(PathBuf, OsString, Statx),
    /// Anything but a directory.
    Leaf(PathBuf, OsString, Statx),
    /// The end of the most recently entered directory.
    Leave,
}

struct Level {
    path: PathBuf,
    /// Remaining names, largest first (popped from the end).
    names: Vec<OsString>,
}

struct Walk {
    root: PathBuf,
    stack: Vec<Level>,
    started: bool,
    root_dev: (u32, u32),
    one_file_system: bool,
}

fn stat(path: &Path, follow: bool) -> Result<Statx> {
    let flags = if follow {
        AtFlags::empty()
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    rustix::fs::statx(
        CWD,
        path,
        flags,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
    .map_err(|e| io_at(path, e.into()))
}

fn sorted_names(path: &Path) -> Result<Vec<OsString>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(path).map_err(|e| io_at(path, e))? {
        names.push(e.map_err(|e| io_at(path, e))?.file_name());
    }
    // Largest first: popping from the end yields byte order.
    names.sort_unstable_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
    Ok(names)
}

impl Walk {
    fn new(root: &Path, one_file_system: bool) -> Walk {
        Walk {
            root: root.to_path_buf(),
            stack: Vec::new(),
            started: false,
            root_dev: (0, 0),
            one_file_system,
        }
    }

    fn next(&mut self) -> Result<Option<Event>> {
        if !self.started {
            self.started = true;
            let st = stat(&self.root, true)?;
            if st.stx_mode & S_IFMT != S_IFDIR {
                return Err(Error::NotDir(self.root.display().to_string()));
            }
            self.root_dev = (st.stx_dev_major, st.stx_dev_minor);
            self.stack.push(Level {
                path: self.root.clone(),
                names: sorted_names(&self.root)?,
            });
            return Ok(Some(Event::Enter(self.root.clone(), OsString::new(), st)));
        }
        let Some(top) = self.stack.last_mut() else {
            return Ok(None);
        };
        let Some(name) = top.names.pop() else {
            self.stack.pop();
            return Ok(Some(Event::Leave));
        };
        let path = top.path.join(&name);
        let st = stat(&path, false)?;
        if st.stx_mode & S_IFMT != S_IFDIR {
            return Ok(Some(Event::Leaf(path, name, st)));
        }
        let same_fs = (st.stx_dev_major, st.stx_dev_minor) == self.root_dev;
        let names = if same_fs || !self.one_file_system {
            sorted_names(&path)?
        } else {
            Vec::new()
        };
        self.stack.push(Level {
            path: path.clone(),
            names,
        });
        Ok(Some(Event::Enter(path, name, st)))
    }
}

fn ts(t: &rustix::fs::StatxTimestamp) -> Timestamp {
    Timestamp {
        sec: t.tv_sec,
        nsec: t.tv_nsec.min(999_999_999),
    }
}

fn meta_of(st: &Statx, opts: &FeedOptions<'_>) -> Meta {
    let ctime = ts(&st.stx_ctime);
    let has_btime = st.stx_mask & StatxFlags::BTIME.bits() != 0;
    Meta {
        mode: st.stx_mode & 0o7777,
        uid: opts.ids.uid(st.stx_uid),
        gid: opts.ids.gid(st.stx_gid),
        atime: ts(&st.stx_atime),
        mtime: ts(&st.stx_mtime),
        ctime,
        crtime: if has_btime { ts(&st.stx_btime) } else { ctime },
    }
}

fn not_supported(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::NOTSUP || e == rustix::io::Errno::NOSYS
}

/// The storable xattrs of `path` (not following symlinks), sorted by name.
fn xattr_names(path: &Path) -> Result<Vec<Vec<u8>>> {
    let mut buf = Vec::new();
    loop {
        let need = match rustix::fs::llistxattr_query(path) {
            Ok(n) => n,
            Err(e) if not_supported(e) => return Ok(Vec::new()),
            Err(e) => return Err(io_at(path, e.into())),
        };
        if need == 0 {
            return Ok(Vec::new());
        }
        buf.resize(need, 0);
        match rustix::fs::llistxattr(path, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                break;
            }
            Err(rustix::io::Errno::RANGE) => continue,
            Err(e) => return Err(io_at(path, e.into())),
        }
    }
    let mut names: Vec<Vec<u8>> = buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty() && storable_xattr(n))
        .map(<[u8]>::to_vec)
        .collect();
    names.sort_unstable();
    Ok(names)
}

fn xattr_value(path: &Path, name: &[u8]) -> Result<Option<Vec<u8>>> {
    let cname = std::ffi::OsStr::from_bytes(name);
    let mut buf = Vec::new();
    loop {
        let need = match rustix::fs::lgetxattr_query(path, cname) {
            Ok(n) => n,
            Err(rustix::io::Errno::NODATA) => return Ok(None),
            Err(e) => return Err(io_at(path, e.into())),
        };
        buf.resize(need, 0);
        match rustix::fs::lgetxattr(path, cname, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Err(rustix::io::Errno::RANGE) => continue,
            Err(rustix::io::Errno::NODATA) => return Ok(None),
            Err(e) => return Err(io_at(path, e.into())),
        }
    }
}

fn feed_xattrs(
    t: &mut dyn BuildTarget,
    opts: &FeedOptions<'_>,
    path: &Path,
    ino: Ino,
    stats: &mut FeedStats,
) -> Result<()> {
    for name in xattr_names(path)? {
        if let Some(v) = xattr_value(path, &name)? {
            set_xattr(t, opts.ids, ino, &name, &v, stats)?;
        }
    }
    Ok(())
}

/// Calls `each(offset, length)` for every data segment of the first `size`
/// bytes of `file`, in order. Filesystems without `SEEK_DATA` give one
/// segment for the whole file.
fn for_each_segment(
    file: &File,
    path: &Path,
    size: u64,
    mut each: impl FnMut(u64, u64) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    while pos < size {
        let start = match rustix::fs::seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => return Ok(()),
            Err(rustix::io::Errno::INVAL) if pos == 0 => return each(0, size),
            Err(e) => return Err(io_at(path, e.into())),
        };
        if start >= size {
            return Ok(());
        }
        let end = rustix::fs::seek(file, SeekFrom::Hole(start))
            .map_err(|e| io_at(path, e.into()))?
            .min(size);
        each(start, end - start)?;
        pos = end;
    }
    Ok(())
}

fn open_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io_at(path, e))
}

fn copy_data(
    t: &mut dyn BuildTarget,
    path: &Path,
    ino: Ino,
    size: u64,
    dense: bool,
    buf: &mut [u8],
    stats: &mut FeedStats,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    let file = open_file(path)?;
    let segments = |each: &mut dyn FnMut(u64, u64) -> Result<()>| {
        if dense {
            each(0, size)
        } else {
            for_each_segment(&file, path, size, each)
        }
    };
    segments(&mut |start, len| {
        let mut off = start;
        let end = start + len;
        while off < end {
            let want = (end - off).min(buf.len() as u64) as usize;
            let n = file
                .read_at(&mut buf[..want], off)
                .map_err(|e| io_at(path, e))?;
            if n == 0 {
                return Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{}: file shrank while being read", path.display()),
                )));
            }
            t.write_data(ino, off, &buf[..n])?;
            stats.bytes += n as u64;
            off += n as u64;
        }
        Ok(())
    })
}

fn kind_of(st: &Statx, path: &Path) -> Result<NodeKind> {
    let (major, minor) = (st.stx_rdev_major, st.stx_rdev_minor);
    Ok(match st.stx_mode & S_IFMT {
        S_IFREG => NodeKind::File { size: st.stx_size },
        S_IFLNK => {
            let target = std::fs::read_link(path).map_err(|e| io_at(path, e))?;
            let target = target.as_os_str().as_bytes().to_vec();
            check_symlink(&target, &path.display())?;
            NodeKind::Symlink(target)
        }
        S_IFCHR => NodeKind::CharDev { major, minor },
        S_IFBLK => NodeKind::BlockDev { major, minor },
        S_IFIFO => NodeKind::Fifo,
        S_IFSOCK => NodeKind::Socket,
        other => {
            return Err(Error::Unsupported(format!(
                "{}: unknown file type {other:o}",
                path.display()
            )))
        }
    })
}

/// Feeds the tree under `root` into `t`, parent first; a directory's times
/// are set after its last child. The root's own metadata and xattrs go to
/// the target's root directory.
pub fn feed(root: &Path, t: &mut dyn BuildTarget, opts: &FeedOptions<'_>) -> Result<FeedStats> {
    let mut stats = FeedStats::default();
    let mut walk = Walk::new(root, opts.one_file_system);
    let mut dirs: Vec<(Ino, Meta)> = Vec::new();
    let mut links: HashMap<(u32, u32, u64), Ino> = HashMap::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    while let Some(ev) = walk.next()? {
        match ev {
            Event::Enter(path, name, st) => {
                let meta = meta_of(&st, opts);
                let ino = match dirs.last() {
                    None => t.root(),
                    Some(&(parent, _)) => {
                        check_name(name.as_bytes(), &path.display())?;
                        t.create(parent, name.as_bytes(), &NodeKind::Dir, &meta)?
                    }
                };
                feed_xattrs(t, opts, &path, ino, &mut stats)?;
                stats.dirs += 1;
                dirs.push((ino, meta));
            }
            Event::Leave => {
                if let Some((ino, meta)) = dirs.pop() {
                    t.set_meta(ino, &meta)?;
                }
            }
            Event::Leaf(path, name, st) => {
                let parent = dirs.last().map_or_else(|| t.root(), |d| d.0);
                check_name(name.as_bytes(), &path.display())?;
                let key = (st.stx_dev_major, st.stx_dev_minor, st.stx_ino);
                if st.stx_nlink > 1 {
                    if let Some(&target) = links.get(&key) {
                        t.link(parent, name.as_bytes(), target)?;
                        stats.hardlinks += 1;
                        stats.tick(opts);
                        continue;
                    }
                }
                let kind = kind_of(&st, &path)?;
                let ino = t.create(parent, name.as_bytes(), &kind, &meta_of(&st, opts))?;
                feed_xattrs(t, opts, &path, ino, &mut stats)?;
                match kind {
                    NodeKind::File { size } => {
                        stats.files += 1;
                        // Files with as many allocated bytes as their size have
                        // no holes: no need to ask for the data segments.
                        let dense = st.stx_blocks.saturating_mul(512) >= size;
                        copy_data(t, &path, ino, size, dense, &mut buf, &mut stats)?;
                    }
                    NodeKind::Symlink(_) => stats.symlinks += 1,
                    _ => stats.specials += 1,
                }
                if st.stx_nlink > 1 {
                    links.insert(key, ino);
                }
            }
        }
        stats.tick(opts);
    }
    Ok(stats)
}

/// Counts what [`feed`] would write, for sizing the image. Reads no file
/// data: fully allocated files count as one segment, others are asked for
/// their data segments.
pub fn scan(root: &Path, l: &Layout, one_file_system: bool) -> Result<Census> {
    let mut c = Census::default();
    let mut walk = Walk::new(root, one_file_system);
    // Per open directory: entries and name bytes.
    let mut dirs: Vec<(u64, u64)> = Vec::new();
    let mut seen: HashMap<(u32, u32, u64), ()> = HashMap::new();
    let mut sizes = Vec::new();
    while let Some(ev) = walk.next()? {
        let (path, name, st) = match ev {
            Event::Leave => {
                if let Some((n, bytes)) = dirs.pop() {
                    c.add_dir(l, n, bytes);
                }
                continue;
            }
            Event::Enter(path, name, st) | Event::Leaf(path, name, st) => (path, name, st),
        };
        if let Some(d) = dirs.last_mut() {
            d.0 += 1;
            d.1 += name.len() as u64;
        }
        sizes.clear();
        for n in xattr_names(&path)? {
            if let Ok(len) = rustix::fs::lgetxattr_query(&path, std::ffi::OsStr::from_bytes(&n)) {
                sizes.push((n.len(), len));
            }
        }
        let fmt = st.stx_mode & S_IFMT;
        if fmt == S_IFDIR {
            c.add_xattrs(l, &sizes);
            dirs.push((0, 0));
            continue;
        }
        if st.stx_nlink > 1 {
            let key = (st.stx_dev_major, st.stx_dev_minor, st.stx_ino);
            if seen.insert(key, ()).is_some() {
                c.add_hardlink();
                continue;
            }
        }
        c.add_xattrs(l, &sizes);
        match fmt {
            S_IFREG => {
                let size = st.stx_size;
                if st.stx_blocks.saturating_mul(512) >= size {
                    c.add_file(l, [(0, size)]);
                } else {
                    let mut segs = Vec::new();
                    let f = open_file(&path)?;
                    for_each_segment(&f, &path, size, |o, n| {
                        segs.push((o, n));
                        Ok(())
                    })?;
                    c.add_file(l, segs);
                }
            }
            S_IFLNK => {
                let target = std::fs::read_link(&path).map_err(|e| io_at(&path, e))?;
                c.add_symlink(l, target.as_os_str().len() as u64);
            }
            _ => c.add_special(),
        }
    }
    Ok(c)
}

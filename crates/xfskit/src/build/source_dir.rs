//! A host directory as a build source.
//!
//! The walk ([`super::dir_walk`]) is depth-first and holds one sorted list
//! of names per open directory level, so memory follows the depth and width
//! of the tree, not its size. Names are sorted by their bytes, so the same
//! tree always feeds the target in the same order. A pool of reader threads
//! ([`super::prefetch`]) opens, stats and reads the next entries ahead of
//! the target, within a bounded window; the target still sees every call
//! in walk order (with `jobs` above 1, [`super::dir_parallel`] spreads the
//! calls over worker threads by AG instead). Files with holes are copied from the segments
//! `SEEK_DATA`/`SEEK_HOLE` report and large files are streamed in chunks of
//! [`CHUNK_BYTES`], so holes stay holes and no large file is held whole.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use rustix::fs::{Statx, StatxFlags};

use super::dir_walk::{
    for_each_segment, produce, work, Data, Entry, Mode2, Step, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use super::feed::{
    check_name, check_symlink, create_small_file, set_xattr, FeedOptions, FeedStats, CHUNK_BYTES,
};
use super::prefetch::{self, Window};
use super::read_data::{read_chunks, Ahead};
use super::size::{Census, Layout};
use super::target::{BuildTarget, Meta, NodeKind};
use super::workers::with_pool;
use crate::dev::AlignedBuf;
use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::Timestamp;
use xfs_format::types::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFSOCK};

fn ts(t: &rustix::fs::StatxTimestamp) -> Timestamp {
    Timestamp {
        sec: t.tv_sec,
        nsec: t.tv_nsec.min(999_999_999),
    }
}

pub(super) fn meta_of(st: &Statx, opts: &FeedOptions<'_>) -> Meta {
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

pub(super) fn kind_of(e: &mut Entry) -> Result<NodeKind> {
    let st = &e.st;
    let (major, minor) = (st.stx_rdev_major, st.stx_rdev_minor);
    Ok(match st.stx_mode & S_IFMT {
        S_IFREG => NodeKind::File { size: st.stx_size },
        S_IFLNK => {
            let target = e.target.take().unwrap_or_default();
            check_symlink(&target, &e.path.display())?;
            NodeKind::Symlink(target)
        }
        S_IFCHR => NodeKind::CharDev { major, minor },
        S_IFBLK => NodeKind::BlockDev { major, minor },
        S_IFIFO => NodeKind::Fifo,
        S_IFSOCK => NodeKind::Socket,
        other => {
            return Err(Error::Unsupported(format!(
                "{}: unknown file type {other:o}",
                e.path.display()
            )))
        }
    })
}

/// Where file data goes: `(file offset, bytes)`, in aligned buffers the
/// target may keep.
pub(super) type Sink<'s> = &'s mut dyn FnMut(u64, AlignedBuf) -> Result<()>;

/// Ranges at least this long are read by a thread of their own
/// ([`Ahead`]) while the target writes; shorter ones right away.
const AHEAD_MIN: u64 = 4 << 20;

/// Reads `[start, end)` of `file` and writes it, chunk by chunk.
fn stream(
    out: Sink<'_>,
    file: &File,
    path: &Path,
    start: u64,
    end: u64,
    stats: &mut FeedStats,
) -> Result<()> {
    let mut off = start;
    let mut put = |b: AlignedBuf, off: &mut u64| {
        let n = b.len() as u64;
        out(*off, b)?;
        stats.bytes += n;
        *off += n;
        Ok::<_, crate::error::Error>(())
    };
    if end - start >= AHEAD_MIN {
        let mut ahead = Ahead::start(file, path, start, end - start)?;
        while off < end {
            match ahead.next() {
                Some(b) => put(b?, &mut off)?,
                None => return Err(super::dir_walk::shrank(path)),
            }
        }
        return Ok(());
    }
    let mut got = Vec::new();
    read_chunks(file, path, start, end - start, &mut got)?;
    for b in got {
        put(b, &mut off)?;
    }
    Ok(())
}

/// Copies a file's data (what the readers prepared, then the rest from the
/// file) to `out`.
pub(super) fn copy_data(out: Sink<'_>, e: &Entry, data: Data, stats: &mut FeedStats) -> Result<()> {
    let size = e.st.stx_size;
    match data {
        Data::None => Ok(()),
        Data::Whole(d) => {
            let mut off = 0u64;
            for c in d.chunks(CHUNK_BYTES) {
                out(off, AlignedBuf::copy_of(c))?;
                stats.bytes += c.len() as u64;
                off += c.len() as u64;
            }
            Ok(())
        }
        Data::Head(chunks, file) => {
            let mut off = 0u64;
            for c in chunks {
                let n = c.len() as u64;
                out(off, c)?;
                stats.bytes += n;
                off += n;
            }
            match file {
                Some(file) if off < size => stream(out, &file, &e.path, off, size, stats),
                _ => Ok(()),
            }
        }
        Data::Sparse(file) => for_each_segment(&file, &e.path, size, |start, len| {
            stream(out, &file, &e.path, start, start + len, stats)
        }),
    }
}

/// Raises the soft limit on open files towards the hard one (directories
/// and large files stay open while they are in the read-ahead window) and
/// keeps the window within it.
fn fit_window(mut w: Window) -> Window {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let lim = getrlimit(Resource::Nofile);
    let mut soft = lim.current.unwrap_or(1 << 20);
    let want = lim.maximum.unwrap_or(1 << 20).min(1 << 16);
    if soft < want {
        let new = rustix::process::Rlimit {
            current: Some(want),
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, new).is_ok() {
            soft = want;
        }
    }
    let room = (soft.saturating_sub(64) / 2).max(16) as usize;
    w.max_entries = w.max_entries.min(room);
    w.max_bytes = w.max_bytes.min(room * CHUNK_BYTES);
    w
}

/// Feeds the tree under `root` into `t`, parent first; a directory's times
/// are set after its last child. The root's own metadata and xattrs go to
/// the target's root directory. Reader threads run ahead as
/// [`Window::from_env`] allows.
pub fn feed(root: &Path, t: &mut dyn BuildTarget, opts: &FeedOptions<'_>) -> Result<FeedStats> {
    feed_with(root, t, opts, Window::from_env())
}

/// [`feed`] with an explicit read-ahead window. The target sees the same
/// calls in the same order whatever the window.
pub fn feed_with(
    root: &Path,
    t: &mut dyn BuildTarget,
    opts: &FeedOptions<'_>,
    win: Window,
) -> Result<FeedStats> {
    let win = fit_window(win);
    let mode = Mode2::Feed {
        read_ahead: (win.max_bytes / 8).max(CHUNK_BYTES),
    };
    let ofs = opts.one_file_system;
    prefetch::run(
        win,
        |p| produce(root, ofs, mode, p),
        |job, b| work(job, mode, b),
        |c| {
            if opts.jobs >= 1 {
                if let Some(fs) = t.fs() {
                    let mut next = || c.next();
                    return with_pool(fs, opts.jobs, |pool| {
                        super::dir_parallel::consume(&mut next, fs, pool, opts)
                    });
                }
            }
            let mut stats = FeedStats::default();
            let mut dirs: Vec<(Ino, Meta)> = Vec::new();
            let mut links: HashMap<(u32, u32, u64), Ino> = HashMap::new();
            while let Some(step) = c.next()? {
                match step {
                    Step::Enter(e) => {
                        let meta = meta_of(&e.st, opts);
                        let ino = match dirs.last() {
                            None => t.root(),
                            Some(&(parent, _)) => {
                                check_name(&e.name, &e.path.display())?;
                                t.create(parent, &e.name, &NodeKind::Dir, &meta)?
                            }
                        };
                        for (name, value) in &e.xattrs {
                            set_xattr(t, opts.ids, ino, name, value, &mut stats)?;
                        }
                        stats.dirs += 1;
                        dirs.push((ino, meta));
                    }
                    Step::Leave => {
                        if let Some((ino, meta)) = dirs.pop() {
                            t.set_meta(ino, &meta)?;
                        }
                    }
                    Step::Leaf(mut e) => {
                        let parent = dirs.last().map_or_else(|| t.root(), |d| d.0);
                        let st = e.st;
                        let key = (st.stx_dev_major, st.stx_dev_minor, st.stx_ino);
                        if st.stx_nlink > 1 {
                            if let Some(&target) = links.get(&key) {
                                t.link(parent, &e.name, target)?;
                                stats.hardlinks += 1;
                                stats.tick(opts);
                                continue;
                            }
                        }
                        let kind = kind_of(&mut e)?;
                        let small = match &e.data {
                            Data::Whole(d) if d.len() <= CHUNK_BYTES => Some(d.as_slice()),
                            Data::None if matches!(kind, NodeKind::File { size: 0 }) => {
                                Some(&[][..])
                            }
                            _ => None,
                        };
                        if let Some(data) = small {
                            let meta = meta_of(&st, opts);
                            let ino = create_small_file(
                                t, opts.ids, parent, &e.name, &meta, data, &e.xattrs, &mut stats,
                            )?;
                            if st.stx_nlink > 1 {
                                links.insert(key, ino);
                            }
                            stats.tick(opts);
                            continue;
                        }
                        let ino = t.create(parent, &e.name, &kind, &meta_of(&st, opts))?;
                        for (name, value) in &e.xattrs {
                            set_xattr(t, opts.ids, ino, name, value, &mut stats)?;
                        }
                        match kind {
                            NodeKind::File { .. } => {
                                stats.files += 1;
                                let data = std::mem::replace(&mut e.data, Data::None);
                                let mut out = |off: u64, d: AlignedBuf| t.write_owned(ino, off, d);
                                copy_data(&mut out, &e, data, &mut stats)?;
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
        },
    )
}

/// Counts what [`feed`] would write, for sizing the image. Reads no file
/// data: fully allocated files count as one segment, others are asked for
/// their data segments. Reader threads stat ahead as [`Window::from_env`]
/// allows.
pub fn scan(root: &Path, l: &Layout, one_file_system: bool) -> Result<Census> {
    scan_with(root, l, one_file_system, Window::from_env())
}

/// [`scan`] with an explicit read-ahead window.
pub fn scan_with(root: &Path, l: &Layout, one_file_system: bool, win: Window) -> Result<Census> {
    let win = fit_window(win);
    prefetch::run(
        win,
        |p| produce(root, one_file_system, Mode2::Scan, p),
        |job, b| work(job, Mode2::Scan, b),
        |c| {
            let mut census = Census::default();
            // Per open directory: entries and name bytes.
            let mut dirs: Vec<(u64, u64)> = Vec::new();
            let mut seen: HashMap<(u32, u32, u64), ()> = HashMap::new();
            while let Some(step) = c.next()? {
                let e = match step {
                    Step::Leave => {
                        if let Some((n, bytes)) = dirs.pop() {
                            census.add_dir(l, n, bytes);
                        }
                        continue;
                    }
                    Step::Enter(e) | Step::Leaf(e) => e,
                };
                if let Some(d) = dirs.last_mut() {
                    d.0 += 1;
                    d.1 += e.name.len() as u64;
                }
                let st = &e.st;
                let fmt = st.stx_mode & S_IFMT;
                if fmt == S_IFDIR {
                    census.add_xattrs(l, &e.xattr_sizes);
                    dirs.push((0, 0));
                    continue;
                }
                if st.stx_nlink > 1 {
                    let key = (st.stx_dev_major, st.stx_dev_minor, st.stx_ino);
                    if seen.insert(key, ()).is_some() {
                        census.add_hardlink();
                        continue;
                    }
                }
                census.add_xattrs(l, &e.xattr_sizes);
                match fmt {
                    S_IFREG => match &e.segments {
                        Some(segs) => census.add_file(l, segs.iter().copied()),
                        None => census.add_file(l, [(0, st.stx_size)]),
                    },
                    S_IFLNK => {
                        let len = e.target.as_ref().map_or(st.stx_size, |t| t.len() as u64);
                        census.add_symlink(l, len);
                    }
                    _ => census.add_special(),
                }
            }
            Ok(census)
        },
    )
}

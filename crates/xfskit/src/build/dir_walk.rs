//! The directory walk behind [`super::source_dir`], split for the
//! [`super::prefetch`] pipeline: [`produce`] lays the tree out in feed
//! order (depth first, names sorted by their bytes) and handles the
//! directories itself; [`work`] does one non-directory entry on a worker
//! thread: open, stat, xattrs and, when feeding, the file data.
//!
//! Every lookup is relative to an open directory descriptor, regular files
//! are stat'ed and their xattrs listed through the open file, and
//! `O_NOATIME` is used while the kernel allows it. Symlinks are never
//! followed (only the source root itself may be one); device nodes and
//! fifos are never opened.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom, Statx, StatxFlags, CWD};
use rustix::io::Errno;

use super::dir_xattr::On;
use super::feed::{check_name, io_at, CHUNK_BYTES};
use super::prefetch::{Budget, Producer};
use super::read_data::{read_chunks, ALIGNED_MIN};
use crate::dev::AlignedBuf;
use crate::error::{Error, Result};
pub(crate) use xfs_format::types::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// Bytes of the window a worker charges for a file it leaves open.
const OPEN_FILE_COST: usize = CHUNK_BYTES;

/// What the walk is for.
#[derive(Clone, Copy)]
pub(crate) enum Mode2 {
    /// Sizing: stats and xattr sizes, data segments of sparse files.
    Scan,
    /// Feeding: xattr values and file data, up to `read_ahead` bytes of
    /// each file read by the worker.
    Feed { read_ahead: usize },
}

/// One non-directory entry for a worker.
pub(crate) struct Job {
    dir: Arc<OwnedFd>,
    path: PathBuf,
    name: Vec<u8>,
    ftype: FileType,
}

/// File data a worker prepared.
pub(crate) enum Data {
    /// Nothing to copy (not a regular file, empty, or scanning).
    None,
    /// The whole contents of a small file without holes (at most
    /// [`ALIGNED_MIN`] bytes).
    Whole(Vec<u8>),
    /// The first bytes of a larger file without holes, in aligned buffers
    /// the engine writes as they are; the file when the rest is still to
    /// be read from it by the consumer.
    Head(Vec<AlignedBuf>, Option<File>),
    /// A file with holes, copied segment by segment by the consumer.
    Sparse(File),
}

/// One step of the walk, in feed order.
pub(crate) enum Step {
    /// A directory (the root first, with an empty name); its children follow.
    Enter(Entry),
    /// Anything but a directory.
    Leaf(Entry),
    /// The end of the most recently entered directory.
    Leave,
}

/// An entry with what the workers read of it.
pub(crate) struct Entry {
    /// Source path (for errors).
    pub path: PathBuf,
    /// Name in its directory (empty for the root).
    pub name: Vec<u8>,
    /// Its status.
    pub st: Statx,
    /// Symlink target.
    pub target: Option<Vec<u8>>,
    /// Feeding: storable xattrs and their values, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Scanning: (name length, value length) of the storable xattrs.
    pub xattr_sizes: Vec<(usize, usize)>,
    /// Scanning: data segments of a sparse regular file.
    pub segments: Option<Vec<(u64, u64)>>,
    /// Feeding: file data.
    pub data: Data,
}

fn entry(path: PathBuf, name: Vec<u8>, st: Statx) -> Entry {
    Entry {
        path,
        name,
        st,
        target: None,
        xattrs: Vec::new(),
        xattr_sizes: Vec::new(),
        segments: None,
        data: Data::None,
    }
}

const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

fn fstatx(fd: impl AsFd, path: &Path) -> Result<Statx> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, STATX_MASK).map_err(|e| io_at(path, e.into()))
}

fn statx_at(dir: &OwnedFd, name: &[u8], path: &Path) -> Result<Statx> {
    rustix::fs::statx(
        dir,
        OsStr::from_bytes(name),
        AtFlags::SYMLINK_NOFOLLOW,
        STATX_MASK,
    )
    .map_err(|e| io_at(path, e.into()))
}

fn read_xattrs(e: &mut Entry, on: On<'_>, mode: Mode2) -> Result<()> {
    match mode {
        Mode2::Scan => e.xattr_sizes = on.sizes(&e.path)?,
        Mode2::Feed { .. } => e.xattrs = on.values(&e.path)?,
    }
    Ok(())
}

/// Calls `each(offset, length)` for every data segment of the first `size`
/// bytes of `file`, in order. Filesystems without `SEEK_DATA` give one
/// segment for the whole file.
pub(crate) fn for_each_segment(
    file: &File,
    path: &Path,
    size: u64,
    mut each: impl FnMut(u64, u64) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    while pos < size {
        let start = match rustix::fs::seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(Errno::NXIO) => return Ok(()),
            Err(Errno::INVAL) if pos == 0 => return each(0, size),
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

/// The error for a file that ended before its size.
pub(crate) fn shrank(path: &Path) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("{}: file shrank while being read", path.display()),
    ))
}

/// Fills `buf` from `file` at `off`.
pub(crate) fn read_full(file: &File, path: &Path, buf: &mut [u8], mut off: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file
            .read_at(&mut buf[done..], off)
            .map_err(|e| io_at(path, e))?;
        if n == 0 {
            return Err(shrank(path));
        }
        done += n;
        off += n as u64;
    }
    Ok(())
}

/// False once the kernel refused `O_NOATIME` (files of other owners when
/// not privileged): from then on files are opened without it.
static NOATIME: AtomicBool = AtomicBool::new(true);

fn open_file(dir: &OwnedFd, name: &[u8], path: &Path) -> Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let name = OsStr::from_bytes(name);
    if NOATIME.load(Ordering::Relaxed) {
        match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(Errno::PERM) => NOATIME.store(false, Ordering::Relaxed),
            Err(e) => return Err(io_at(path, e.into())),
        }
    }
    rustix::fs::openat(dir, name, flags, Mode::empty())
        .map(File::from)
        .map_err(|e| io_at(path, e.into()))
}

/// Opens a directory for listing, without touching its access time when
/// the kernel allows that.
fn open_dir(at: impl AsFd, name: &OsStr, extra: OFlags, path: &Path) -> Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra;
    if NOATIME.load(Ordering::Relaxed) {
        match rustix::fs::openat(&at, name, flags | OFlags::NOATIME, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(Errno::PERM) => NOATIME.store(false, Ordering::Relaxed),
            Err(e) => return Err(io_at(path, e.into())),
        }
    }
    rustix::fs::openat(&at, name, flags, Mode::empty()).map_err(|e| io_at(path, e.into()))
}

fn is_dense(st: &Statx) -> bool {
    st.stx_blocks.saturating_mul(512) >= st.stx_size
}

fn changed(path: &Path) -> Error {
    Error::Invalid(format!(
        "{}: became a directory while the source was read",
        path.display()
    ))
}

/// A regular file through its open descriptor.
fn regular(
    job: Job,
    file: File,
    st: Statx,
    mode: Mode2,
    b: &mut Budget<'_, '_, Job, Step>,
) -> Result<Step> {
    let mut e = entry(job.path, job.name, st);
    let fd = OwnedFd::from(file);
    read_xattrs(&mut e, On::Fd(&fd), mode)?;
    let file = File::from(fd);
    let size = e.st.stx_size;
    let dense = is_dense(&e.st);
    match mode {
        Mode2::Scan => {
            if !dense {
                let mut segs = Vec::new();
                for_each_segment(&file, &e.path, size, |o, n| {
                    segs.push((o, n));
                    Ok(())
                })?;
                e.segments = Some(segs);
            }
        }
        Mode2::Feed { read_ahead } => {
            if size == 0 {
            } else if !dense {
                b.reserve(OPEN_FILE_COST)?;
                e.data = Data::Sparse(file);
            } else {
                // Whole chunks only, so writes keep chunk boundaries.
                let ahead = (read_ahead / CHUNK_BYTES).max(1) * CHUNK_BYTES;
                let n = size.min(ahead as u64) as usize;
                let whole = n as u64 == size;
                b.reserve(n + if whole { 0 } else { OPEN_FILE_COST })?;
                e.data = if size <= ALIGNED_MIN {
                    // Room for the zeros to the block's end: the engine
                    // queues the vector itself.
                    let mut buf = Vec::with_capacity(n.next_multiple_of(4096));
                    buf.resize(n, 0);
                    read_full(&file, &e.path, &mut buf, 0)?;
                    Data::Whole(buf)
                } else {
                    let mut chunks = Vec::new();
                    read_chunks(&file, &e.path, 0, n as u64, &mut chunks)?;
                    Data::Head(chunks, (!whole).then_some(file))
                };
            }
        }
    }
    Ok(Step::Leaf(e))
}

/// Does one non-directory entry (on a worker thread).
pub(crate) fn work(job: Job, mode: Mode2, b: &mut Budget<'_, '_, Job, Step>) -> Result<Step> {
    check_name(&job.name, &job.path.display())?;
    let feeding = matches!(mode, Mode2::Feed { .. });
    if feeding && job.ftype == FileType::RegularFile {
        let file = open_file(&job.dir, &job.name, &job.path)?;
        let st = fstatx(&file, &job.path)?;
        if st.stx_mode & S_IFMT == S_IFREG {
            return regular(job, file, st, mode, b);
        }
    }
    let st = statx_at(&job.dir, &job.name, &job.path)?;
    match st.stx_mode & S_IFMT {
        S_IFDIR => return Err(changed(&job.path)),
        S_IFREG if feeding || !is_dense(&st) => {
            let file = open_file(&job.dir, &job.name, &job.path)?;
            let st = fstatx(&file, &job.path)?;
            if st.stx_mode & S_IFMT == S_IFDIR {
                return Err(changed(&job.path));
            }
            return regular(job, file, st, mode, b);
        }
        _ => {}
    }
    let mut e = entry(job.path, job.name, st);
    // Scanning reads the target too: besides its length, the read sets the
    // link's access time (relatime) before the feed records it, so two
    // builds of the same tree agree.
    if e.st.stx_mode & S_IFMT == S_IFLNK {
        let t = rustix::fs::readlinkat(&*job.dir, OsStr::from_bytes(&e.name), Vec::new())
            .map_err(|err| io_at(&e.path, err.into()))?;
        e.target = Some(t.into_bytes());
    }
    let path = e.path.clone();
    read_xattrs(&mut e, On::Path(&path), mode)?;
    Ok(Step::Leaf(e))
}

/// Sorted names (with their `d_type`) of the directory open as `fd`.
fn list(fd: &OwnedFd, path: &Path) -> Result<Vec<(Vec<u8>, FileType)>> {
    let mut dir = rustix::fs::Dir::read_from(fd).map_err(|e| io_at(path, e.into()))?;
    let mut names = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = ent.map_err(|e| io_at(path, e.into()))?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push((n.to_vec(), ent.file_type()));
        }
    }
    // Largest first: popping from the end yields byte order.
    names.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    Ok(names)
}

struct Level {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    names: Vec<(Vec<u8>, FileType)>,
}

/// Opens, stats and lists one directory and sends its `Enter` step.
fn enter(
    fd: OwnedFd,
    path: PathBuf,
    name: Vec<u8>,
    list_it: impl FnOnce(&Statx) -> bool,
    mode: Mode2,
    p: &mut Producer<'_, Job, Step>,
) -> Result<(Level, Statx)> {
    let st = fstatx(&fd, &path)?;
    let names = if list_it(&st) {
        list(&fd, &path)?
    } else {
        Vec::new()
    };
    let mut e = entry(path.clone(), name, st);
    read_xattrs(&mut e, On::Fd(&fd), mode)?;
    p.ready(Step::Enter(e))?;
    let level = Level {
        fd: Arc::new(fd),
        path,
        names,
    };
    Ok((level, st))
}

/// Lays out the tree under `root` in feed order: directories are done here,
/// everything else is a [`Job`] for the workers.
pub(crate) fn produce(
    root: &Path,
    one_file_system: bool,
    mode: Mode2,
    p: &mut Producer<'_, Job, Step>,
) -> Result<()> {
    let st = rustix::fs::statx(CWD, root, AtFlags::empty(), STATX_MASK)
        .map_err(|e| io_at(root, e.into()))?;
    if st.stx_mode & S_IFMT != S_IFDIR {
        return Err(Error::NotDir(root.display().to_string()));
    }
    let fd = open_dir(CWD, root.as_os_str(), OFlags::empty(), root)?;
    let (level, st) = enter(fd, root.to_path_buf(), Vec::new(), |_| true, mode, p)?;
    let root_dev = (st.stx_dev_major, st.stx_dev_minor);
    let mut stack = vec![level];
    while let Some(top) = stack.last_mut() {
        let Some((name, ftype)) = top.names.pop() else {
            stack.pop();
            p.ready(Step::Leave)?;
            continue;
        };
        let path = top.path.join(OsStr::from_bytes(&name));
        let is_dir = match ftype {
            FileType::Directory => true,
            FileType::Unknown => statx_at(&top.fd, &name, &path)?.stx_mode & S_IFMT == S_IFDIR,
            _ => false,
        };
        if !is_dir {
            let dir = Arc::clone(&top.fd);
            p.job(Job {
                dir,
                path,
                name,
                ftype,
            })?;
            continue;
        }
        check_name(&name, &path.display())?;
        // Directory syscalls are slow: let the steps so far go first.
        p.flush()?;
        let fd = open_dir(&*top.fd, OsStr::from_bytes(&name), OFlags::NOFOLLOW, &path)?;
        let list_it =
            |st: &Statx| !one_file_system || (st.stx_dev_major, st.stx_dev_minor) == root_dev;
        let (level, _) = enter(fd, path, name, list_it, mode, p)?;
        stack.push(level);
    }
    Ok(())
}

//! What every source shares: the options of a feed, its running counts,
//! name checks and the error helpers that name the source path.

use std::path::Path;

use super::idmap::IdMap;
use super::target::{BuildTarget, Meta};
use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::Timestamp;

/// Bytes of file data read and written per call.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Longest symlink target XFS stores.
pub const MAX_SYMLINK_BYTES: usize = 1024;

/// Called with the running counts as entries are fed.
pub type ProgressFn<'a> = &'a dyn Fn(&FeedStats);

/// Choices that apply to every source.
#[derive(Clone, Copy)]
pub struct FeedOptions<'a> {
    /// Owner mapping.
    pub ids: &'a IdMap,
    /// Time given to directories a tar implies but never lists
    /// (`SOURCE_DATE_EPOCH`, else 0).
    pub default_time: Timestamp,
    /// Directory source: do not descend into other filesystems (mount points
    /// are created as empty directories, like `cp -ax`).
    pub one_file_system: bool,
    /// Running counts after each entry.
    pub progress: Option<ProgressFn<'a>>,
    /// Threads writing into the image (0 or 1: the feeding thread alone);
    /// used when the target allows it ([`BuildTarget::fs`]).
    pub jobs: usize,
}

/// What a source fed into the target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedStats {
    /// Directories, the root included.
    pub dirs: u64,
    /// Regular files (inodes).
    pub files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Device nodes, fifos and sockets.
    pub specials: u64,
    /// Extra names of hard-linked files.
    pub hardlinks: u64,
    /// Extended attributes set.
    pub xattrs: u64,
    /// Bytes of file data written.
    pub bytes: u64,
}

impl FeedStats {
    /// Entries of any kind.
    pub fn entries(&self) -> u64 {
        self.dirs + self.files + self.symlinks + self.specials + self.hardlinks
    }

    pub(crate) fn tick(&self, opts: &FeedOptions<'_>) {
        if let Some(p) = opts.progress {
            p(self);
        }
    }
}

/// An I/O error that names the source path it happened on.
pub fn io_at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

/// Checks one directory entry name: 1 to 255 bytes, no '/' or NUL, not "."
/// or "..". `path` names the entry in the error.
pub fn check_name(name: &[u8], path: &dyn std::fmt::Display) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err(Error::Invalid(format!("{path}: invalid file name")));
    }
    if name.len() > 255 {
        return Err(Error::Invalid(format!(
            "{path}: name is {} bytes, XFS allows at most 255",
            name.len()
        )));
    }
    if name.iter().any(|&b| b == 0 || b == b'/') {
        return Err(Error::Invalid(format!("{path}: name contains '/' or NUL")));
    }
    Ok(())
}

/// Checks a symlink target length.
pub fn check_symlink(target: &[u8], path: &dyn std::fmt::Display) -> Result<()> {
    if target.is_empty() || target.len() > MAX_SYMLINK_BYTES {
        return Err(Error::Invalid(format!(
            "{path}: symlink target is {} bytes, XFS allows 1 to {MAX_SYMLINK_BYTES}",
            target.len()
        )));
    }
    Ok(())
}

/// True for xattr names XFS can store for us: the `user.`, `trusted.` and
/// `security.` namespaces and the two POSIX ACLs. Other `system.` names
/// (NFSv4 ACLs, `system.data`, ...) belong to other filesystems.
pub fn storable_xattr(name: &[u8]) -> bool {
    name.starts_with(b"user.")
        || name.starts_with(b"trusted.")
        || name.starts_with(b"security.")
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
}

/// Sets one xattr, mapping the ids inside ACLs.
pub fn set_xattr(
    t: &mut dyn BuildTarget,
    ids: &IdMap,
    ino: Ino,
    name: &[u8],
    value: &[u8],
    stats: &mut FeedStats,
) -> Result<()> {
    match ids.map_xattr(name, value) {
        Some(v) => t.set_xattr(ino, name, &v)?,
        None => t.set_xattr(ino, name, value)?,
    }
    stats.xattrs += 1;
    Ok(())
}

/// Creates a regular file holding all of `data` with its xattrs (ids inside
/// ACLs mapped) in one target call, [`BuildTarget::create_file`], and
/// counts it. For files a source has read whole.
#[allow(clippy::too_many_arguments)]
pub fn create_small_file(
    t: &mut dyn BuildTarget,
    ids: &IdMap,
    parent: Ino,
    name: &[u8],
    meta: &Meta,
    data: &[u8],
    xattrs: &[(Vec<u8>, Vec<u8>)],
    stats: &mut FeedStats,
) -> Result<Ino> {
    let mapped: Vec<Option<Vec<u8>>> = xattrs.iter().map(|(n, v)| ids.map_xattr(n, v)).collect();
    let refs: Vec<(&[u8], &[u8])> = xattrs
        .iter()
        .zip(&mapped)
        .map(|((n, v), m)| (n.as_slice(), m.as_deref().unwrap_or(v)))
        .collect();
    let ino = t.create_file(parent, name, meta, data, &refs)?;
    stats.files += 1;
    stats.bytes += data.len() as u64;
    stats.xattrs += xattrs.len() as u64;
    Ok(ino)
}

/// Meta with every time set to `t`.
pub fn meta_at(mode: u16, uid: u32, gid: u32, t: Timestamp) -> Meta {
    Meta {
        mode,
        uid,
        gid,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

/// The xattrs of `path` that XFS can store (a final symlink is not
/// followed), sorted by name, as a directory source reads them.
pub fn read_xattrs(path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    super::dir_xattr::On::Path(path).values(path)
}

/// The data segments `(offset, length)` of the first `size` bytes of
/// `file` (`SEEK_DATA`/`SEEK_HOLE`; the whole file where the filesystem
/// cannot tell), as a directory source copies them.
pub fn data_segments(file: &std::fs::File, path: &Path, size: u64) -> Result<Vec<(u64, u64)>> {
    let mut v = Vec::new();
    super::dir_walk::for_each_segment(file, path, size, |o, n| {
        v.push((o, n));
        Ok(())
    })?;
    Ok(v)
}

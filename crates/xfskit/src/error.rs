//! The one error type of the engine.
//!
//! Corruption always names the structure (`what`) and where it was found
//! (`location`: AG, block, inode, byte offset), so a user can find it with
//! xfs_db. Errors become errnos only at the FUSE boundary.

use std::fmt;

/// Where a problem was found on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A disk address in 512-byte units.
    Daddr(u64),
    /// A block in an allocation group.
    AgBlock { agno: u32, agbno: u32 },
    /// An inode, optionally with a byte offset inside it or its fork.
    Inode(u64),
    /// A logical block of an inode's fork (data or attr).
    InodeBlock {
        ino: u64,
        fork: &'static str,
        offset: u64,
    },
    /// The superblock of an AG.
    Sb(u32),
    /// A byte range of the log.
    Log { block: u64 },
    /// Anything else, described in words.
    Other(String),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Daddr(d) => write!(f, "daddr {d}"),
            Location::AgBlock { agno, agbno } => write!(f, "AG {agno} block {agbno}"),
            Location::Inode(ino) => write!(f, "inode {ino}"),
            Location::InodeBlock { ino, fork, offset } => {
                write!(f, "inode {ino} {fork} fork block {offset}")
            }
            Location::Sb(agno) => write!(f, "AG {agno} superblock"),
            Location::Log { block } => write!(f, "log block {block}"),
            Location::Other(s) => f.write_str(s),
        }
    }
}

/// Every error the engine returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A metadata block or inode failed its CRC check.
    #[error("bad CRC in {what} at {location}")]
    BadCrc {
        what: &'static str,
        location: Location,
    },
    /// A structure's contents are inconsistent.
    #[error("corrupt {what} at {location}: {detail}")]
    Corrupt {
        what: &'static str,
        location: Location,
        detail: String,
    },
    /// A valid filesystem using something xfskit does not support.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The log holds changes that were never written back.
    #[error(
        "the log needs replay: {0} (mount it with the kernel once, or read with --norecovery)"
    )]
    DirtyLog(String),
    /// No such file or directory.
    #[error("not found: {0}")]
    NotFound(String),
    /// A path component is not a directory.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// The operation needs a directory but got something else, or vice versa.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// The attribute does not exist.
    #[error("no such attribute: {0}")]
    NoAttr(String),
    /// Not enough free space.
    #[error("no space left: {0}")]
    NoSpace(String),
    /// A caller passed something invalid.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The name already exists.
    #[error("already exists: {0}")]
    Exists(String),
    /// The directory is not empty.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// An inode flag forbids the change (no symlinks in the directory;
    /// an immutable or append-only inode), as the kernel's EPERM.
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// A quota's limit refuses the change (the kernel's EDQUOT).
    #[error("disk quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The device refuses writes after an earlier failure.
    #[error("device is read-only or poisoned after an earlier write failure")]
    ReadOnly,
}

/// Result with the engine's error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Builds a `Corrupt` error.
    pub fn corrupt(what: &'static str, location: Location, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            what,
            location,
            detail: detail.into(),
        }
    }
}

impl Error {
    /// The errno a kernel mount gives for this error: what the FUSE mount
    /// and the Python package report. Damage (a bad CRC, an inconsistent
    /// structure, a damaged disk image) is `EUCLEAN`, the kernel's
    /// EFSCORRUPTED; a failing device keeps its own errno (else `EIO`).
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::NoAttr(_) => libc::ENODATA,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::Invalid(_) => libc::EINVAL,
            Error::ReadOnly => libc::EROFS,
            Error::Exists(_) => libc::EEXIST,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::NotPermitted(_) => libc::EPERM,
            Error::QuotaExceeded(_) => libc::EDQUOT,
            Error::Corrupt { .. } | Error::BadCrc { .. } => libc::EUCLEAN,
            Error::Io(e) if is_corruption(e) => libc::EUCLEAN,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::DirtyLog(_) => libc::EIO,
        }
    }

    /// True for damage found in the filesystem or its disk image (errno
    /// `EUCLEAN`), as opposed to a refused operation or a failing device.
    pub fn is_corruption(&self) -> bool {
        self.errno() == libc::EUCLEAN
    }
}

/// A damaged image found while reading through a `Device` (which speaks
/// `io::Error`): carried inside the `io::Error` so that callers can tell it
/// from a failing disk with [`is_corruption`].
#[derive(Debug)]
pub struct ImageCorrupt(pub String);

impl fmt::Display for ImageCorrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt image: {}", self.0)
    }
}

impl std::error::Error for ImageCorrupt {}

/// An `io::Error` carrying an [`ImageCorrupt`].
pub(crate) fn corrupt_io(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, ImageCorrupt(msg))
}

/// True when `e` reports a damaged image rather than a failing disk.
pub fn is_corruption(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<ImageCorrupt>())
}

//! What a new inode is made of: its kind ([`NodeKind`]) and its ownership,
//! permissions and times ([`Meta`]), as [`crate::Fs::create`] takes them
//! (and the build's sources give them, through `build::BuildTarget`).

use crate::inode::Timestamp;

/// Ownership, permissions and times of a new inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits and set-id/sticky bits (no file type bits).
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last access.
    pub atime: Timestamp,
    /// Last modification of the contents.
    pub mtime: Timestamp,
    /// Last change of the inode.
    pub ctime: Timestamp,
    /// Creation (XFS `di_crtime`).
    pub crtime: Timestamp,
}

/// What kind of inode to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    /// A directory.
    Dir,
    /// A regular file of `size` bytes; its data comes through `write_data`.
    File {
        /// Final size in bytes (holes included).
        size: u64,
    },
    /// A symbolic link to `target` (1 to 1023 bytes).
    Symlink(Vec<u8>),
    /// A character device.
    CharDev {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// A block device.
    BlockDev {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
}

//! The per-inode record of a bulk scan, with the meaning the kernel's
//! bulkstat ioctl (`struct xfs_bulkstat`, version 5) gives each field.

use crate::geometry::Geometry;
use crate::inode::{ForkFormat, Inode};
use xfs_format::inode as di;

/// I/O size the kernel reports for device inodes (`BLKDEV_IOSIZE`).
pub const DEV_BLKSIZE: u32 = 4096;

/// The `FS_XFLAG_*` bits of the Linux `fsxattr` interface.
pub mod xflag {
    /// Data lives on the realtime device.
    pub const REALTIME: u32 = 0x0000_0001;
    /// Preallocated space past EOF.
    pub const PREALLOC: u32 = 0x0000_0002;
    /// Cannot be changed.
    pub const IMMUTABLE: u32 = 0x0000_0008;
    /// Append only.
    pub const APPEND: u32 = 0x0000_0010;
    /// Synchronous writes.
    pub const SYNC: u32 = 0x0000_0020;
    /// Access time is not updated.
    pub const NOATIME: u32 = 0x0000_0040;
    /// Skipped by dump programs.
    pub const NODUMP: u32 = 0x0000_0080;
    /// New files in the directory are realtime.
    pub const RTINHERIT: u32 = 0x0000_0100;
    /// New files in the directory inherit the project id.
    pub const PROJINHERIT: u32 = 0x0000_0200;
    /// No symlinks may be created in the directory.
    pub const NOSYMLINKS: u32 = 0x0000_0400;
    /// Extent size hint is set.
    pub const EXTSIZE: u32 = 0x0000_0800;
    /// New files in the directory inherit the extent size hint.
    pub const EXTSZINHERIT: u32 = 0x0000_1000;
    /// Skipped by the defragmenter.
    pub const NODEFRAG: u32 = 0x0000_2000;
    /// Filestream allocator.
    pub const FILESTREAM: u32 = 0x0000_4000;
    /// Direct access (DAX).
    pub const DAX: u32 = 0x0000_8000;
    /// Copy-on-write extent size hint is set.
    pub const COWEXTSIZE: u32 = 0x0001_0000;
    /// The inode has an attribute fork.
    pub const HASATTR: u32 = 0x8000_0000;
}

/// Stat information of one inode, as the kernel's bulkstat reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bstat {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u16,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of device inodes, in the 32-bit "sysv" form
    /// (major in bits 18 and up, minor in the low 18 bits); 0 otherwise.
    pub rdev: u32,
    /// Preferred I/O size: the block size, or 4096 for device inodes.
    pub blksize: u32,
    /// Size in bytes.
    pub size: u64,
    /// Filesystem blocks used by both forks, btree blocks included
    /// (0 for inline and device inodes, as the kernel reports).
    pub blocks: u64,
    /// `FS_XFLAG_*` bits, see [`xflag`].
    pub xflags: u32,
    /// Data fork extents.
    pub extents: u64,
    /// Attribute fork extents.
    pub aextents: u32,
    /// Offset of the attribute fork in bytes from the end of the core (0: none).
    pub forkoff: u32,
    /// Generation number.
    pub gen: u32,
    /// Project id.
    pub projectid: u32,
    /// Extent size hint in blocks.
    pub extsize_blks: u32,
    /// Copy-on-write extent size hint in blocks (0 unless its flag is set).
    pub cowextsize_blks: u32,
    /// Last access, nanoseconds since the epoch.
    pub atime: i128,
    /// Last data change, nanoseconds since the epoch.
    pub mtime: i128,
    /// Last inode change, nanoseconds since the epoch.
    pub ctime: i128,
    /// Creation, nanoseconds since the epoch.
    pub btime: i128,
}

/// Maps on-disk inode flags to `FS_XFLAG_*` bits as the kernel does.
pub fn xflags(flags: u16, flags2: u64, has_attr_fork: bool) -> u32 {
    const MAP: [(u16, u32); 14] = [
        (di::XFS_DIFLAG_REALTIME, xflag::REALTIME),
        (di::XFS_DIFLAG_PREALLOC, xflag::PREALLOC),
        (di::XFS_DIFLAG_IMMUTABLE, xflag::IMMUTABLE),
        (di::XFS_DIFLAG_APPEND, xflag::APPEND),
        (di::XFS_DIFLAG_SYNC, xflag::SYNC),
        (di::XFS_DIFLAG_NOATIME, xflag::NOATIME),
        (di::XFS_DIFLAG_NODUMP, xflag::NODUMP),
        (di::XFS_DIFLAG_RTINHERIT, xflag::RTINHERIT),
        (di::XFS_DIFLAG_PROJINHERIT, xflag::PROJINHERIT),
        (di::XFS_DIFLAG_NOSYMLINKS, xflag::NOSYMLINKS),
        (di::XFS_DIFLAG_EXTSIZE, xflag::EXTSIZE),
        (di::XFS_DIFLAG_EXTSZINHERIT, xflag::EXTSZINHERIT),
        (di::XFS_DIFLAG_NODEFRAG, xflag::NODEFRAG),
        (di::XFS_DIFLAG_FILESTREAM, xflag::FILESTREAM),
    ];
    let mut x = 0;
    for (d, f) in MAP {
        if flags & d != 0 {
            x |= f;
        }
    }
    if flags2 & di::XFS_DIFLAG2_DAX != 0 {
        x |= xflag::DAX;
    }
    if flags2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 {
        x |= xflag::COWEXTSIZE;
    }
    if has_attr_fork {
        x |= xflag::HASATTR;
    }
    x
}

/// The device number as the kernel reports it: it keeps at most 9 bits of
/// the on-disk major (its internal device numbers hold no more) and the
/// 18-bit minor.
pub fn reported_rdev(disk: u32) -> u32 {
    let major = (disk >> di::XFS_DEV_BITSMINOR) & 0x1ff;
    let minor = disk & di::XFS_DEV_MAXMIN;
    (major << di::XFS_DEV_BITSMINOR) | minor
}

impl Bstat {
    /// Builds the record of a decoded inode.
    pub fn from_inode(geo: &Geometry, ip: &Inode) -> Bstat {
        let (rdev, blksize, blocks) = match ip.format {
            ForkFormat::Dev => (reported_rdev(ip.rdev), DEV_BLKSIZE, 0),
            ForkFormat::Local => (0, geo.block_size, 0),
            ForkFormat::Extents | ForkFormat::Btree | ForkFormat::MetaBtree => {
                (0, geo.block_size, ip.nblocks)
            }
        };
        let cowextsize_blks = if ip.flags2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 {
            ip.cowextsize
        } else {
            0
        };
        Bstat {
            ino: ip.ino.0,
            mode: ip.mode,
            nlink: ip.nlink,
            uid: ip.uid,
            gid: ip.gid,
            rdev,
            blksize,
            size: ip.size,
            blocks,
            xflags: xflags(ip.flags, ip.flags2, ip.has_attr_fork()),
            extents: ip.nextents,
            aextents: ip.anextents,
            forkoff: u32::from(ip.forkoff) << 3,
            gen: ip.gen,
            projectid: ip.projid,
            extsize_blks: ip.extsize,
            cowextsize_blks,
            atime: ip.atime.as_nanos(),
            mtime: ip.mtime.as_nanos(),
            ctime: ip.ctime.as_nanos(),
            btime: ip.crtime.as_nanos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_bit_for_bit_except_newrtbm() {
        assert_eq!(xflags(di::XFS_DIFLAG_NEWRTBM, 0, false), 0);
        assert_eq!(
            xflags(di::XFS_DIFLAG_IMMUTABLE | di::XFS_DIFLAG_APPEND, 0, false),
            0x18
        );
        assert_eq!(
            xflags(
                0,
                di::XFS_DIFLAG2_COWEXTSIZE | di::XFS_DIFLAG2_REFLINK,
                true
            ),
            0x8001_0000
        );
        assert_eq!(
            xflags(0, di::XFS_DIFLAG2_BIGTIME | di::XFS_DIFLAG2_NREXT64, false),
            0
        );
    }

    #[test]
    fn rdev_keeps_nine_major_bits() {
        assert_eq!(reported_rdev((8 << 18) | 17), (8 << 18) | 17);
        assert_eq!(reported_rdev((0x3fff << 18) | 5), (0x1ff << 18) | 5);
    }
}

//! Inode fields as FUSE attributes.

use fuser::{FileAttr, FileType as FuseType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use xfskit::inode::{FileType, Inode, Timestamp};

/// The FUSE file type of an XFS file type.
pub fn fuse_type(t: FileType) -> FuseType {
    match t {
        FileType::File => FuseType::RegularFile,
        FileType::Dir => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::CharDev => FuseType::CharDevice,
        FileType::BlockDev => FuseType::BlockDevice,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
    }
}

/// A timestamp as `SystemTime`, including times before 1970.
pub fn system_time(t: Timestamp) -> SystemTime {
    let nsec = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec as u64) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
    }
}

/// Linux `dev_t` (as FUSE carries it, 32 bits) of a device inode.
pub fn linux_rdev(inode: &Inode) -> u32 {
    match inode.file_type {
        FileType::CharDev | FileType::BlockDev => {
            let (major, minor) = inode.rdev_major_minor();
            // The kernel's new_encode_dev layout: minor low byte, major, then
            // the rest of the minor above bit 20.
            (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
        }
        _ => 0,
    }
}

/// FUSE attributes of `inode`, reported under node id `node` (the XFS inode
/// number, except that the root may be reported as FUSE's node 1).
/// `block_size` is the filesystem block size.
pub fn file_attr(inode: &Inode, node: u64, block_size: u32) -> FileAttr {
    let blocks = inode.nblocks.saturating_mul(u64::from(block_size)) / 512;
    FileAttr {
        ino: INodeNo(node),
        size: inode.size,
        blocks,
        atime: system_time(inode.atime),
        mtime: system_time(inode.mtime),
        ctime: system_time(inode.ctime),
        crtime: system_time(inode.crtime),
        kind: fuse_type(inode.file_type),
        perm: inode.perm(),
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: linux_rdev(inode),
        blksize: block_size,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_and_after_epoch() {
        let t = system_time(Timestamp { sec: 5, nsec: 7 });
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap(), Duration::new(5, 7));
        let t = system_time(Timestamp {
            sec: -2,
            nsec: 500_000_000,
        });
        assert_eq!(
            UNIX_EPOCH.duration_since(t).unwrap(),
            Duration::new(1, 500_000_000)
        );
    }
}

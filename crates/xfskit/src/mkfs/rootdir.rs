//! The first inode chunk of a fresh filesystem: the root directory (empty,
//! short form), the realtime bitmap and summary inodes (empty regular files),
//! and every other slot of the chunk as a valid free inode.

use xfs_format::crc::stamp;
use xfs_format::inode::{Dinode, XFS_DINODE_CRC_OFF, XFS_DINODE_MAGIC, XFS_DINODE_VERSION_3};
use xfs_format::inode::{XFS_DIFLAG2_BIGTIME, XFS_DIFLAG2_NREXT64, XFS_DIFLAG_NEWRTBM};
use xfs_format::types::{
    encode_timestamp, Uuid, NULLAGINO, XFS_DINODE_FMT_EXTENTS, XFS_DINODE_FMT_LOCAL,
};
use zerocopy::{FromZeros, IntoBytes};

use super::geometry::MkfsGeometry;

const S_IFDIR: u16 = 0o040000;
const S_IFREG: u16 = 0o100000;
const IN_BIGTIME: u32 = 8;
const IN_NREXT64: u32 = 0x20;

/// A point in time: seconds since the Unix epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 UTC.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

fn free_inode(ino: u64, uuid: &Uuid) -> Dinode {
    let mut d = Dinode::new_zeroed();
    d.di_magic.set(XFS_DINODE_MAGIC);
    d.di_version = XFS_DINODE_VERSION_3;
    d.di_next_unlinked.set(NULLAGINO);
    d.di_ino.set(ino);
    d.di_uuid = *uuid;
    d
}

/// An in-use inode as mkfs creates it: owned by root, changed twice
/// (creation and the first log), atime at the epoch, other times `now`.
fn new_inode(
    g: &MkfsGeometry,
    ino: u64,
    mode: u16,
    nlink: u32,
    now: Timestamp,
    uuid: &Uuid,
) -> Dinode {
    let bigtime = g.features.incompat & IN_BIGTIME != 0;
    let mut d = free_inode(ino, uuid);
    d.di_mode.set(mode);
    d.di_nlink.set(nlink);
    d.di_atime.set(encode_timestamp(0, 0, bigtime));
    let t = encode_timestamp(now.secs, now.nsec, bigtime);
    d.di_mtime.set(t);
    d.di_ctime.set(t);
    d.di_crtime.set(t);
    d.di_aformat = XFS_DINODE_FMT_EXTENTS;
    d.di_changecount.set(2);
    let mut flags2 = 0;
    if bigtime {
        flags2 |= XFS_DIFLAG2_BIGTIME;
    }
    if g.features.incompat & IN_NREXT64 != 0 {
        flags2 |= XFS_DIFLAG2_NREXT64;
    }
    d.di_flags2.set(flags2);
    d
}

/// Build the whole first inode chunk (`ialloc_blocks` blocks) of AG 0.
pub(crate) fn root_chunk(g: &MkfsGeometry, uuid: &Uuid, now: Timestamp) -> Vec<u8> {
    let isize = usize::from(g.inodesize);
    let count = g.icount as usize;
    let mut buf = vec![0u8; g.ialloc_blocks as usize * g.blocksize as usize];
    for i in 0..count {
        let ino = g.rootino + i as u64;
        let slot = &mut buf[i * isize..(i + 1) * isize];
        let core = if ino == g.rootino {
            let mut d = new_inode(g, ino, S_IFDIR | 0o755, 2, now, uuid);
            d.di_format = XFS_DINODE_FMT_LOCAL;
            // Short-form directory header: no entries, 4-byte parent.
            let parent_small = ino <= u64::from(u32::MAX);
            let hdr_len = if parent_small { 6 } else { 10 };
            d.di_size.set(hdr_len as u64);
            let fork = &mut slot[xfs_format::inode::LITERAL_OFFSET..];
            fork[0] = 0;
            fork[1] = u8::from(!parent_small);
            if parent_small {
                fork[2..6].copy_from_slice(&(ino as u32).to_be_bytes());
            } else {
                fork[2..10].copy_from_slice(&ino.to_be_bytes());
            }
            d
        } else if ino == g.rbmino {
            let mut d = new_inode(g, ino, S_IFREG, 1, now, uuid);
            d.di_format = XFS_DINODE_FMT_EXTENTS;
            d.di_flags.set(XFS_DIFLAG_NEWRTBM);
            d
        } else if ino == g.rsumino {
            let mut d = new_inode(g, ino, S_IFREG, 1, now, uuid);
            d.di_format = XFS_DINODE_FMT_EXTENTS;
            d
        } else {
            free_inode(ino, uuid)
        };
        slot[..xfs_format::inode::XFS_DINODE_SIZE].copy_from_slice(core.as_bytes());
        stamp(slot, XFS_DINODE_CRC_OFF);
    }
    buf
}

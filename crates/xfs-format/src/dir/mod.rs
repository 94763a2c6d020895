//! Directory (v3) on-disk format: shortform directories inside the inode
//! ([`sf`]) and block/leaf/node/free blocks ([`block`]).
//!
//! A directory's file offsets form three 32 GiB "spaces": data blocks from
//! offset 0, leaf/dabtree blocks from [`XFS_DIR2_LEAF_OFFSET`], and free-index
//! blocks from [`XFS_DIR2_FREE_OFFSET`].

pub mod block;
pub mod sf;

pub use block::*;
pub use sf::*;

pub use crate::da::{
    da_hashname, Da3Blkinfo, Da3NodeHdr, DaBlkinfo, DaNodeEntry, XFS_DA3_NODE_MAGIC,
};

/// Magic of a single-block (data + leaf in one block) v3 directory, "XDB3".
pub const XFS_DIR3_BLOCK_MAGIC: u32 = 0x5844_4233;
/// Magic of a v3 directory data block, "XDD3".
pub const XFS_DIR3_DATA_MAGIC: u32 = 0x5844_4433;
/// Magic of a v3 directory free-index block, "XDF3".
pub const XFS_DIR3_FREE_MAGIC: u32 = 0x5844_4633;
/// 16-bit magic of a v3 single leaf block (with bests table).
pub const XFS_DIR3_LEAF1_MAGIC: u16 = 0x3df1;
/// 16-bit magic of a v3 leaf block of a node-format directory.
pub const XFS_DIR3_LEAFN_MAGIC: u16 = 0x3dff;

/// log2 of the alignment of data block entries.
pub const XFS_DIR2_DATA_ALIGN_LOG: u32 = 3;
/// Alignment of data block entries (8 bytes).
pub const XFS_DIR2_DATA_ALIGN: usize = 1 << XFS_DIR2_DATA_ALIGN_LOG;
/// Size of each of the three directory address spaces (32 GiB).
pub const XFS_DIR2_SPACE_SIZE: u64 = 1 << (32 + XFS_DIR2_DATA_ALIGN_LOG);
/// Byte offset of the data space.
pub const XFS_DIR2_DATA_OFFSET: u64 = 0;
/// Byte offset of the leaf/dabtree space (32 GiB).
pub const XFS_DIR2_LEAF_OFFSET: u64 = XFS_DIR2_SPACE_SIZE;
/// Byte offset of the free-index space (64 GiB).
pub const XFS_DIR2_FREE_OFFSET: u64 = 2 * XFS_DIR2_SPACE_SIZE;
/// Largest name length of a directory entry.
pub const XFS_NAME_MAXLEN: usize = 255;
/// Largest inode number that fits the 4-byte shortform encoding.
pub const XFS_DIR2_MAX_SHORT_INUM: u64 = 0xffff_ffff;
/// Null data pointer value in leaf entries (unused entry).
pub const XFS_DIR2_NULL_DATAPTR: u32 = 0;

/// Converts a leaf entry "address" (byte offset / 8) to a byte offset in the
/// directory.
pub const fn dataptr_to_byte(dp: u32) -> u64 {
    (dp as u64) << XFS_DIR2_DATA_ALIGN_LOG
}

/// Converts a byte offset in the data space to a leaf entry "address";
/// `None` if it is unaligned or beyond the data space.
pub const fn byte_to_dataptr(off: u64) -> Option<u32> {
    if !off.is_multiple_of(XFS_DIR2_DATA_ALIGN as u64) || off >= XFS_DIR2_SPACE_SIZE {
        None
    } else {
        Some((off >> XFS_DIR2_DATA_ALIGN_LOG) as u32)
    }
}

/// The directory name hash (same function as for attribute names).
pub fn dir_hashname(name: &[u8]) -> u32 {
    da_hashname(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces() {
        assert_eq!(XFS_DIR2_LEAF_OFFSET, 32 << 30);
        assert_eq!(XFS_DIR2_FREE_OFFSET, 64 << 30);
        assert_eq!(&XFS_DIR3_BLOCK_MAGIC.to_be_bytes(), b"XDB3");
        assert_eq!(&XFS_DIR3_DATA_MAGIC.to_be_bytes(), b"XDD3");
        assert_eq!(&XFS_DIR3_FREE_MAGIC.to_be_bytes(), b"XDF3");
        assert_eq!(byte_to_dataptr(96), Some(12));
        assert_eq!(dataptr_to_byte(12), 96);
        assert_eq!(byte_to_dataptr(97), None);
        assert_eq!(byte_to_dataptr(XFS_DIR2_LEAF_OFFSET), None);
        assert_eq!(dir_hashname(b"foo"), 0x19b7ef);
    }
}

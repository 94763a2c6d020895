//! Dabtree ("directory/attribute btree") block headers shared by directory
//! leaf/node blocks and attribute leaf/node blocks.
//!
//! Every v3 dabtree block starts with [`Da3Blkinfo`]: sibling pointers (as
//! logical block numbers within the fork), a 16-bit magic at byte 8, and the
//! self-describing fields.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Magic (16-bit, at byte 8) of a v3 dabtree interior node block.
pub const XFS_DA3_NODE_MAGIC: u16 = 0x3ebe;
/// Maximum depth of a dabtree.
pub const XFS_DA_NODE_MAXDEPTH: usize = 5;
/// Byte offset of the 16-bit magic in every dabtree block.
pub const XFS_DA_MAGIC_OFF: usize = 8;
/// Byte offset of the CRC in every v3 dabtree block.
pub const XFS_DA3_CRC_OFF: usize = 12;
/// Byte offset of the LSN in every v3 dabtree block.
pub const XFS_DA3_LSN_OFF: usize = 24;
/// CRC offset of a v3 node block.
pub const XFS_DA3_NODE_CRC_OFF: usize = XFS_DA3_CRC_OFF;

/// The original (v2) dabtree block prologue.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct DaBlkinfo {
    /// Logical block of the next block at this level, or 0.
    pub forw: U32,
    /// Logical block of the previous block at this level, or 0.
    pub back: U32,
    /// 16-bit magic identifying the block type.
    pub magic: U16,
    /// Padding, zero.
    pub pad: U16,
}
const _: () = assert!(size_of::<DaBlkinfo>() == 12);

/// The v3 dabtree block prologue with self-describing fields.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Da3Blkinfo {
    /// Sibling links and magic.
    pub hdr: DaBlkinfo,
    /// CRC-32C of the block, little-endian.
    pub crc: LeU32,
    /// Disk address (512-byte units) of the block.
    pub blkno: U64,
    /// LSN of the last logged change to the block.
    pub lsn: U64,
    /// Filesystem metadata UUID.
    pub uuid: Uuid,
    /// Inode that owns the block.
    pub owner: U64,
}
const _: () = assert!(size_of::<Da3Blkinfo>() == 56);
const _: () = assert!(offset_of!(Da3Blkinfo, crc) == XFS_DA3_CRC_OFF);
const _: () = assert!(offset_of!(Da3Blkinfo, lsn) == XFS_DA3_LSN_OFF);
const _: () =
    assert!(offset_of!(Da3Blkinfo, hdr) + offset_of!(DaBlkinfo, magic) == XFS_DA_MAGIC_OFF);

/// Header of a v3 dabtree interior node; [`DaNodeEntry`] array follows.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Da3NodeHdr {
    /// Common v3 prologue (magic [`XFS_DA3_NODE_MAGIC`]).
    pub info: Da3Blkinfo,
    /// Entries in use (the C header calls it `__count`).
    pub count: U16,
    /// Height above the leaves; leaves are 0 (C name `__level`).
    pub level: U16,
    /// Padding, zero.
    pub pad32: U32,
}
/// Size of [`Da3NodeHdr`].
pub const XFS_DA3_NODE_HDR_SIZE: usize = 64;
const _: () = assert!(size_of::<Da3NodeHdr>() == XFS_DA3_NODE_HDR_SIZE);

/// One entry of a dabtree interior node.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct DaNodeEntry {
    /// Largest hash value found in the child subtree.
    pub hashval: U32,
    /// Logical block of the child.
    pub before: U32,
}
const _: () = assert!(size_of::<DaNodeEntry>() == 8);

/// Entries that fit in a dabtree node block of `blksize` bytes.
pub const fn da3_node_maxentries(blksize: usize) -> usize {
    blksize.saturating_sub(XFS_DA3_NODE_HDR_SIZE) / size_of::<DaNodeEntry>()
}

/// Reads the 16-bit magic of any dabtree block, if the buffer is long enough.
pub fn da_magic(buf: &[u8]) -> Option<u16> {
    let b = buf.get(XFS_DA_MAGIC_OFF..XFS_DA_MAGIC_OFF + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// The directory/attribute name hash: starting from zero, for every byte the
/// hash is rotated left by 7 bits and the byte is xored in.
pub fn da_hashname(name: &[u8]) -> u32 {
    name.iter().fold(0u32, |h, &b| h.rotate_left(7) ^ b as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_of::<Da3NodeHdr>(), 64);
        assert_eq!(da3_node_maxentries(4096), 504);
        assert_eq!(
            da_magic(&[0, 0, 0, 0, 0, 0, 0, 0, 0x3e, 0xbe]),
            Some(XFS_DA3_NODE_MAGIC)
        );
        assert_eq!(da_magic(&[0; 9]), None);
    }

    /// Values printed by `xfs_db -c 'hash NAME'` (xfsprogs 6.1).
    #[test]
    fn hash_matches_xfs_db() {
        let known: &[(&[u8], u32)] = &[
            (b"foo", 0x19b7ef),
            (b".", 0x2e),
            (b"..", 0x172e),
            (b"lost+found", 0x21aa60c),
            (b"a", 0x61),
            (b"ab", 0x30e2),
            (b"abc", 0x187163),
            (b"abcd", 0xc38b1e4),
            (b"abcde", 0x1c58f263),
            (b"abcdefghijklmnopqrstuvwxyz0123456789", 0x27bba957),
            (b"user.test", 0x9b7eee66),
            (b"trusted.overlay.opaque", 0xeb609b2b),
            ("\u{e9}t\u{e9}".as_bytes(), 0x253d6125),
            (&[0xff, 0xfe, 0xfd, 0xfc, 0xfb], 0xefff3ef4),
        ];
        for (name, want) in known {
            assert_eq!(
                da_hashname(name),
                *want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(da_hashname(b""), 0);
    }
}

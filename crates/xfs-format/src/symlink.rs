//! Remote symlink blocks: targets too long for the inode's literal area are
//! stored in blocks, each starting with a self-describing header.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Magic of a remote symlink block, "XSLM".
pub const XFS_SYMLINK_MAGIC: u32 = 0x5853_4c4d;
/// Longest symlink target XFS stores.
pub const XFS_SYMLINK_MAXLEN: usize = 1024;
/// Most blocks a remote symlink target can span.
pub const XFS_SYMLINK_MAPS: usize = 3;

/// Header at the start of each remote symlink block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dsymlink3Hdr {
    /// Magic, [`XFS_SYMLINK_MAGIC`].
    pub sl_magic: U32,
    /// Byte offset within the target of the data in this block.
    pub sl_offset: U32,
    /// Bytes of target data in this block.
    pub sl_bytes: U32,
    /// CRC-32C of the block, little-endian.
    pub sl_crc: LeU32,
    /// Filesystem metadata UUID.
    pub sl_uuid: Uuid,
    /// Inode number of the symlink.
    pub sl_owner: U64,
    /// Disk address (512-byte units) of this block.
    pub sl_blkno: U64,
    /// LSN of the last write of this block.
    pub sl_lsn: U64,
}

/// Size of [`Dsymlink3Hdr`].
pub const XFS_SYMLINK_HDR_SIZE: usize = 56;
/// Byte offset of `sl_crc`.
pub const XFS_SYMLINK_CRC_OFF: usize = 12;
/// Byte offset of `sl_lsn`.
pub const XFS_SYMLINK_LSN_OFF: usize = 48;
const _: () = assert!(size_of::<Dsymlink3Hdr>() == XFS_SYMLINK_HDR_SIZE);
const _: () = assert!(offset_of!(Dsymlink3Hdr, sl_crc) == XFS_SYMLINK_CRC_OFF);
const _: () = assert!(offset_of!(Dsymlink3Hdr, sl_lsn) == XFS_SYMLINK_LSN_OFF);
const _: () = assert!(offset_of!(Dsymlink3Hdr, sl_uuid) == 16);

/// Target bytes one remote symlink block of `blksize` bytes carries.
pub const fn symlink_buf_space(blksize: usize) -> usize {
    blksize.saturating_sub(XFS_SYMLINK_HDR_SIZE)
}

/// Blocks needed for a target of `len` bytes.
pub const fn symlink_blocks(len: usize, blksize: usize) -> usize {
    let per = symlink_buf_space(blksize);
    if per == 0 {
        0
    } else {
        len.div_ceil(per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(size_of::<Dsymlink3Hdr>(), 56);
        assert_eq!(&XFS_SYMLINK_MAGIC.to_be_bytes(), b"XSLM");
        assert_eq!(symlink_blocks(1024, 512), 3);
        assert_eq!(symlink_blocks(1024, 4096), 1);
        assert_eq!(symlink_blocks(0, 4096), 0);
    }
}

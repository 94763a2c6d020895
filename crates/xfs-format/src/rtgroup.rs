//! Realtime groups (metadir filesystems with a realtime section): the
//! realtime superblock at the start of the realtime device, and the
//! self-describing header every block of a group's bitmap and summary
//! files starts with.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Magic of the realtime superblock, "Frog".
pub const XFS_RTSB_MAGIC: u32 = 0x4672_6f67;
/// Magic of a realtime bitmap block, "BMPZ".
pub const XFS_RTBITMAP_MAGIC: u32 = 0x424d_505a;
/// Magic of a realtime summary block, "SUMY".
pub const XFS_RTSUMMARY_MAGIC: u32 = 0x5355_4d59;
/// Magic of a realtime reverse-mapping btree block, "MAPR".
pub const XFS_RTRMAP_CRC_MAGIC: u32 = 0x4d41_5052;
/// Magic of a realtime reference count btree block, "RCNT".
pub const XFS_RTREFC_CRC_MAGIC: u32 = 0x5243_4e54;

/// The realtime superblock: the first block of realtime group 0 (the
/// first block of the realtime device), tying the device to its
/// filesystem. Its CRC covers the whole filesystem block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Rtsb {
    /// Magic, [`XFS_RTSB_MAGIC`].
    pub rsb_magicnum: U32,
    /// CRC-32C of the block, little-endian.
    pub rsb_crc: LeU32,
    /// Zero.
    pub rsb_pad: U32,
    /// The filesystem's label, as `sb_fname`.
    pub rsb_fname: [u8; 12],
    /// The filesystem's UUID, as `sb_uuid`.
    pub rsb_uuid: Uuid,
    /// The metadata UUID, as `sb_meta_uuid`.
    pub rsb_meta_uuid: Uuid,
}

/// Size of [`Rtsb`].
pub const XFS_RTSB_SIZE: usize = 56;
/// Byte offset of `rsb_crc`.
pub const XFS_RTSB_CRC_OFF: usize = 4;
const _: () = assert!(size_of::<Rtsb>() == XFS_RTSB_SIZE);
const _: () = assert!(offset_of!(Rtsb, rsb_crc) == XFS_RTSB_CRC_OFF);
const _: () = assert!(offset_of!(Rtsb, rsb_uuid) == 24);

/// Header of every realtime bitmap and summary block of a realtime group
/// filesystem; the bitmap words or summary counters (big-endian 32-bit)
/// follow it.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RtbufBlkinfo {
    /// Magic, [`XFS_RTBITMAP_MAGIC`] or [`XFS_RTSUMMARY_MAGIC`].
    pub rt_magic: U32,
    /// CRC-32C of the block, little-endian.
    pub rt_crc: LeU32,
    /// The inode of the file that owns the block.
    pub rt_owner: U64,
    /// Disk address (512-byte units, data device) of this block.
    pub rt_blkno: U64,
    /// LSN of the last write of this block.
    pub rt_lsn: U64,
    /// Filesystem metadata UUID.
    pub rt_uuid: Uuid,
}

/// Size of [`RtbufBlkinfo`].
pub const XFS_RTBUF_HDR_SIZE: usize = 48;
/// Byte offset of `rt_crc`.
pub const XFS_RTBUF_CRC_OFF: usize = 4;
/// Byte offset of `rt_lsn`.
pub const XFS_RTBUF_LSN_OFF: usize = 24;
const _: () = assert!(size_of::<RtbufBlkinfo>() == XFS_RTBUF_HDR_SIZE);
const _: () = assert!(offset_of!(RtbufBlkinfo, rt_crc) == XFS_RTBUF_CRC_OFF);
const _: () = assert!(offset_of!(RtbufBlkinfo, rt_lsn) == XFS_RTBUF_LSN_OFF);

//! Quota files: arrays of dquot records, one per id, in the data of the
//! user, group and project quota inodes. Record `id` lies at byte
//! `id * 136` of its file, never across a block boundary: a block of
//! `B` bytes holds `B / 136` records.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Magic of a dquot record, "DQ".
pub const XFS_DQUOT_MAGIC: u16 = 0x4451;
/// The only dquot version.
pub const XFS_DQUOT_VERSION: u8 = 1;
/// `d_type`: a user quota record.
pub const XFS_DQTYPE_USER: u8 = 0x01;
/// `d_type`: a project quota record.
pub const XFS_DQTYPE_PROJ: u8 = 0x02;
/// `d_type`: a group quota record.
pub const XFS_DQTYPE_GROUP: u8 = 0x04;
/// `d_type`: the timers are bigtime counts (not seconds since the epoch).
pub const XFS_DQTYPE_BIGTIME: u8 = 0x80;
/// `d_type`'s record kind bits.
pub const XFS_DQTYPE_REC_MASK: u8 = XFS_DQTYPE_USER | XFS_DQTYPE_PROJ | XFS_DQTYPE_GROUP;
/// Every valid `d_type` bit.
pub const XFS_DQTYPE_ANY: u8 = XFS_DQTYPE_REC_MASK | XFS_DQTYPE_BIGTIME;

/// The quota record of one id (`struct xfs_disk_dquot`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct DiskDquot {
    /// Magic, [`XFS_DQUOT_MAGIC`].
    pub d_magic: U16,
    /// Version, [`XFS_DQUOT_VERSION`].
    pub d_version: u8,
    /// Record kind and the bigtime flag (`XFS_DQTYPE_*`).
    pub d_type: u8,
    /// The user, group or project id.
    pub d_id: U32,
    /// Block hard limit.
    pub d_blk_hardlimit: U64,
    /// Block soft limit.
    pub d_blk_softlimit: U64,
    /// Inode hard limit.
    pub d_ino_hardlimit: U64,
    /// Inode soft limit.
    pub d_ino_softlimit: U64,
    /// Data-section blocks the id owns.
    pub d_bcount: U64,
    /// Inodes the id owns.
    pub d_icount: U64,
    /// When the inode grace period ends (0: not running).
    pub d_itimer: U32,
    /// When the block grace period ends (0: not running).
    pub d_btimer: U32,
    /// Inode limit warnings issued.
    pub d_iwarns: U16,
    /// Block limit warnings issued.
    pub d_bwarns: U16,
    /// Padding.
    pub d_pad0: U32,
    /// Realtime block hard limit.
    pub d_rtb_hardlimit: U64,
    /// Realtime block soft limit.
    pub d_rtb_softlimit: U64,
    /// Realtime blocks the id owns.
    pub d_rtbcount: U64,
    /// When the realtime block grace period ends (0: not running).
    pub d_rtbtimer: U32,
    /// Realtime block limit warnings issued.
    pub d_rtbwarns: U16,
    /// Padding.
    pub d_pad: U16,
}

/// A dquot record as it lies in the file (`struct xfs_dqblk`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dqblk {
    /// The record.
    pub dd_diskdq: DiskDquot,
    /// Padding.
    pub dd_fill: [u8; 4],
    /// CRC-32C of the whole 136 bytes (v5).
    pub dd_crc: [u8; 4],
    /// LSN of the last write (v5).
    pub dd_lsn: U64,
    /// Filesystem metadata UUID (v5).
    pub dd_uuid: Uuid,
}

/// Size of [`DiskDquot`].
pub const XFS_DISK_DQUOT_SIZE: usize = 104;
/// Size of [`Dqblk`].
pub const XFS_DQBLK_SIZE: usize = 136;
/// Offset of the CRC in [`Dqblk`].
pub const XFS_DQUOT_CRC_OFF: usize = 108;

const _: () = assert!(size_of::<DiskDquot>() == XFS_DISK_DQUOT_SIZE);
const _: () = assert!(size_of::<Dqblk>() == XFS_DQBLK_SIZE);
const _: () = assert!(offset_of!(Dqblk, dd_crc) == XFS_DQUOT_CRC_OFF);
const _: () = assert!(offset_of!(DiskDquot, d_bcount) == 40);
const _: () = assert!(offset_of!(DiskDquot, d_rtbcount) == 88);

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

/// Why `d` is not a valid dquot record (the kernel's dquot verifier:
/// magic, version, kind, bigtime only where the filesystem has it and
/// never for id 0, the id `id` when given, and a soft limit passed only
/// with its timer running), None when it is. The CRC and UUID of the
/// [`Dqblk`] around it are the caller's.
pub fn dquot_problem(d: &DiskDquot, id: Option<u32>, bigtime: bool) -> Option<String> {
    if d.d_magic.get() != XFS_DQUOT_MAGIC {
        return Some(format!("bad magic {:#06x}", d.d_magic.get()));
    }
    if d.d_version != XFS_DQUOT_VERSION {
        return Some(format!("version {}", d.d_version));
    }
    let t = d.d_type;
    if t & !XFS_DQTYPE_ANY != 0
        || !matches!(
            t & XFS_DQTYPE_REC_MASK,
            XFS_DQTYPE_USER | XFS_DQTYPE_PROJ | XFS_DQTYPE_GROUP
        )
    {
        return Some(format!("type {t:#04x}"));
    }
    let did = d.d_id.get();
    if t & XFS_DQTYPE_BIGTIME != 0 && (!bigtime || did == 0) {
        return Some("bigtime timers where they cannot be".into());
    }
    if let Some(id) = id {
        if did != id {
            return Some(format!("id {did} in the slot of id {id}"));
        }
    }
    if did != 0 {
        for (what, count, soft, timer) in [
            (
                "block",
                d.d_bcount.get(),
                d.d_blk_softlimit.get(),
                d.d_btimer.get(),
            ),
            (
                "inode",
                d.d_icount.get(),
                d.d_ino_softlimit.get(),
                d.d_itimer.get(),
            ),
            (
                "realtime block",
                d.d_rtbcount.get(),
                d.d_rtb_softlimit.get(),
                d.d_rtbtimer.get(),
            ),
        ] {
            if soft != 0 && count > soft && timer == 0 {
                return Some(format!("{what} soft limit passed without its timer"));
            }
        }
    }
    None
}

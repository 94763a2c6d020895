//! Allocation group headers: AGF (free space), AGI (inodes) and AGFL (the
//! free list). Each lives in its own sector right after the superblock copy:
//! sector 1 holds the AGF, sector 2 the AGI, sector 3 the AGFL.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// AGF magic number, "XAGF".
pub const XFS_AGF_MAGIC: u32 = 0x5841_4746;
/// AGI magic number, "XAGI".
pub const XFS_AGI_MAGIC: u32 = 0x5841_4749;
/// AGFL magic number, "XAFL".
pub const XFS_AGFL_MAGIC: u32 = 0x5841_464c;
/// The only AGF version.
pub const XFS_AGF_VERSION: u32 = 1;
/// The only AGI version.
pub const XFS_AGI_VERSION: u32 = 1;

/// Sector index (within the AG) of the superblock copy.
pub const XFS_SB_SECTOR: u64 = 0;
/// Sector index (within the AG) of the AGF.
pub const XFS_AGF_SECTOR: u64 = 1;
/// Sector index (within the AG) of the AGI.
pub const XFS_AGI_SECTOR: u64 = 2;
/// Sector index (within the AG) of the AGFL.
pub const XFS_AGFL_SECTOR: u64 = 3;

/// Number of hash buckets for unlinked-but-open inodes in the AGI.
pub const XFS_AGI_UNLINKED_BUCKETS: usize = 64;

/// Free-space header of an allocation group.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Agf {
    /// Magic number, must equal [`XFS_AGF_MAGIC`].
    pub agf_magicnum: U32,
    /// Header version, [`XFS_AGF_VERSION`].
    pub agf_versionnum: U32,
    /// Index of this AG.
    pub agf_seqno: U32,
    /// Size of this AG in blocks.
    pub agf_length: U32,
    /// Root block of the by-block-number free space btree.
    pub agf_bno_root: U32,
    /// Root block of the by-size free space btree.
    pub agf_cnt_root: U32,
    /// Root block of the reverse mapping btree.
    pub agf_rmap_root: U32,
    /// Height of the by-block-number btree.
    pub agf_bno_level: U32,
    /// Height of the by-size btree.
    pub agf_cnt_level: U32,
    /// Height of the reverse mapping btree.
    pub agf_rmap_level: U32,
    /// Slot in the AGFL array of the first free-list block.
    pub agf_flfirst: U32,
    /// Slot in the AGFL array of the last free-list block.
    pub agf_fllast: U32,
    /// Number of blocks on the free list.
    pub agf_flcount: U32,
    /// Free blocks in this AG (not counting the free list).
    pub agf_freeblks: U32,
    /// Length of the longest free extent.
    pub agf_longest: U32,
    /// Blocks used by the free-space and rmap btrees beyond their roots.
    pub agf_btreeblks: U32,
    /// Filesystem metadata UUID.
    pub agf_uuid: Uuid,
    /// Blocks used by the reverse mapping btree.
    pub agf_rmap_blocks: U32,
    /// Blocks used by the reference count btree.
    pub agf_refcount_blocks: U32,
    /// Root block of the reference count btree.
    pub agf_refcount_root: U32,
    /// Height of the reference count btree.
    pub agf_refcount_level: U32,
    /// Reserved space, zero.
    pub agf_spare64: [U64; 14],
    /// LSN of the last logged change to this sector.
    pub agf_lsn: U64,
    /// CRC-32C of the sector, little-endian.
    pub agf_crc: LeU32,
    /// Padding, zero.
    pub agf_spare2: U32,
}

/// Size of [`Agf`] in bytes.
pub const XFS_AGF_SIZE: usize = 224;
/// Byte offset of `agf_crc`.
pub const XFS_AGF_CRC_OFF: usize = 216;
/// Byte offset of `agf_lsn`.
pub const XFS_AGF_LSN_OFF: usize = 208;

const _: () = assert!(size_of::<Agf>() == XFS_AGF_SIZE);
const _: () = assert!(offset_of!(Agf, agf_crc) == XFS_AGF_CRC_OFF);
const _: () = assert!(offset_of!(Agf, agf_lsn) == XFS_AGF_LSN_OFF);
const _: () = assert!(offset_of!(Agf, agf_uuid) == 64);
const _: () = assert!(offset_of!(Agf, agf_refcount_level) == 92);

/// Inode header of an allocation group.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Agi {
    /// Magic number, must equal [`XFS_AGI_MAGIC`].
    pub agi_magicnum: U32,
    /// Header version, [`XFS_AGI_VERSION`].
    pub agi_versionnum: U32,
    /// Index of this AG.
    pub agi_seqno: U32,
    /// Size of this AG in blocks.
    pub agi_length: U32,
    /// Inodes allocated (in chunks) in this AG.
    pub agi_count: U32,
    /// Root block of the inode btree.
    pub agi_root: U32,
    /// Height of the inode btree.
    pub agi_level: U32,
    /// Free inodes among the allocated chunks.
    pub agi_freecount: U32,
    /// AG inode number of the most recently allocated chunk.
    pub agi_newino: U32,
    /// Obsolete directory hint, kept as null.
    pub agi_dirino: U32,
    /// Heads of the unlinked inode lists, hashed by AG inode number mod 64.
    pub agi_unlinked: [U32; XFS_AGI_UNLINKED_BUCKETS],
    /// Filesystem metadata UUID.
    pub agi_uuid: Uuid,
    /// CRC-32C of the sector, little-endian.
    pub agi_crc: LeU32,
    /// Padding, zero.
    pub agi_pad32: U32,
    /// LSN of the last logged change to this sector.
    pub agi_lsn: U64,
    /// Root block of the free inode btree.
    pub agi_free_root: U32,
    /// Height of the free inode btree.
    pub agi_free_level: U32,
    /// Blocks used by the inode btree (INOBTCNT feature).
    pub agi_iblocks: U32,
    /// Blocks used by the free inode btree (INOBTCNT feature).
    pub agi_fblocks: U32,
}

/// Size of [`Agi`] in bytes.
pub const XFS_AGI_SIZE: usize = 344;
/// Byte offset of `agi_crc`.
pub const XFS_AGI_CRC_OFF: usize = 312;
/// Byte offset of `agi_lsn`.
pub const XFS_AGI_LSN_OFF: usize = 320;

const _: () = assert!(size_of::<Agi>() == XFS_AGI_SIZE);
const _: () = assert!(offset_of!(Agi, agi_crc) == XFS_AGI_CRC_OFF);
const _: () = assert!(offset_of!(Agi, agi_lsn) == XFS_AGI_LSN_OFF);
const _: () = assert!(offset_of!(Agi, agi_unlinked) == 40);
const _: () = assert!(offset_of!(Agi, agi_uuid) == 296);
const _: () = assert!(offset_of!(Agi, agi_free_root) == 328);

/// Header of the AG free list sector; an array of big-endian AG block
/// numbers fills the rest of the sector.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AgflHdr {
    /// Magic number, must equal [`XFS_AGFL_MAGIC`].
    pub agfl_magicnum: U32,
    /// Index of this AG.
    pub agfl_seqno: U32,
    /// Filesystem metadata UUID.
    pub agfl_uuid: Uuid,
    /// LSN of the last logged change to this sector.
    pub agfl_lsn: U64,
    /// CRC-32C of the sector, little-endian.
    pub agfl_crc: LeU32,
}

/// Size of [`AgflHdr`] in bytes; the block number array starts here.
pub const XFS_AGFL_HDR_SIZE: usize = 36;
/// Byte offset of `agfl_crc`.
pub const XFS_AGFL_CRC_OFF: usize = 32;
/// Byte offset of `agfl_lsn`.
pub const XFS_AGFL_LSN_OFF: usize = 24;

const _: () = assert!(size_of::<AgflHdr>() == XFS_AGFL_HDR_SIZE);
const _: () = assert!(offset_of!(AgflHdr, agfl_crc) == XFS_AGFL_CRC_OFF);
const _: () = assert!(offset_of!(AgflHdr, agfl_lsn) == XFS_AGFL_LSN_OFF);

/// Number of free-list slots in an AGFL sector of `sectsize` bytes.
pub const fn agfl_size(sectsize: usize) -> usize {
    sectsize.saturating_sub(XFS_AGFL_HDR_SIZE) / 4
}

/// Reads free-list slot `idx` from an AGFL sector, if it lies inside it.
pub fn agfl_entry(sector: &[u8], idx: usize) -> Option<u32> {
    let off = XFS_AGFL_HDR_SIZE.checked_add(idx.checked_mul(4)?)?;
    let b = sector.get(off..off + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes free-list slot `idx` in an AGFL sector; returns false if out of range.
pub fn set_agfl_entry(sector: &mut [u8], idx: usize, agbno: u32) -> bool {
    let Some(off) = idx
        .checked_mul(4)
        .and_then(|o| o.checked_add(XFS_AGFL_HDR_SIZE))
    else {
        return false;
    };
    match sector.get_mut(off..off + 4) {
        Some(b) => {
            b.copy_from_slice(&agbno.to_be_bytes());
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn sizes() {
        assert_eq!(size_of::<Agf>(), 224);
        assert_eq!(size_of::<Agi>(), 344);
        assert_eq!(size_of::<AgflHdr>(), 36);
        assert_eq!(agfl_size(512), 119);
        assert_eq!(agfl_size(4096), 1015);
    }

    #[test]
    fn agfl_slots() {
        let mut s = [0u8; 512];
        assert!(set_agfl_entry(&mut s, 118, 77));
        assert_eq!(agfl_entry(&s, 118), Some(77));
        assert!(!set_agfl_entry(&mut s, 119, 1));
        assert_eq!(agfl_entry(&s, 119), None);
        assert_eq!(agfl_entry(&s, usize::MAX), None);
    }

    #[test]
    fn agf_crc_round_trip() {
        let mut a = Agf::new_zeroed();
        a.agf_magicnum.set(XFS_AGF_MAGIC);
        a.agf_length.set(1000);
        let mut sector = [0u8; 512];
        sector[..224].copy_from_slice(a.as_bytes());
        crate::crc::stamp(&mut sector, XFS_AGF_CRC_OFF);
        assert!(crate::crc::verify(&sector, XFS_AGF_CRC_OFF));
        let (back, _) = Agf::read_from_prefix(&sector)
            .map_err(|_| ())
            .unwrap_or((a, &[]));
        assert_ne!(back.agf_crc.get(), 0);
        assert_eq!(&sector[..4], b"XAGF");
    }
}

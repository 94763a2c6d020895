//! Generic v5 btree block headers and the record/key layouts of every btree:
//! free space (bno/cnt), inodes (inobt/finobt), reverse mapping, reference
//! counts and the per-file block map (bmbt, plus its in-inode root).
//!
//! Block layout: header, then records (leaf, level 0) or, in a node, an array
//! of keys sized for *maxrecs* entries followed by the pointer array. The
//! pointer array therefore starts at a fixed place that does not depend on how
//! many entries are in use.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::{BmbtIrec, Uuid};

/// Magic of a v5 by-block-number free space btree block, "AB3B".
pub const XFS_ABTB_CRC_MAGIC: u32 = 0x4142_3342;
/// Magic of a v5 by-size free space btree block, "AB3C".
pub const XFS_ABTC_CRC_MAGIC: u32 = 0x4142_3343;
/// Magic of a v5 inode btree block, "IAB3".
pub const XFS_IBT_CRC_MAGIC: u32 = 0x4941_4233;
/// Magic of a v5 free inode btree block, "FIB3".
pub const XFS_FIBT_CRC_MAGIC: u32 = 0x4649_4233;
/// Magic of a reverse mapping btree block, "RMB3".
pub const XFS_RMAP_CRC_MAGIC: u32 = 0x524d_4233;
/// Magic of a reference count btree block, "R3FC".
pub const XFS_REFC_CRC_MAGIC: u32 = 0x5233_4643;
/// Magic of a v5 block map btree block, "BMA3".
pub const XFS_BMAP_CRC_MAGIC: u32 = 0x424d_4133;

/// Header of a btree block addressed by 32-bit AG block numbers.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct BtreeBlockShort {
    /// Magic number identifying which btree this block belongs to.
    pub bb_magic: U32,
    /// Height above the leaves; 0 for a leaf.
    pub bb_level: U16,
    /// Entries in use in this block.
    pub bb_numrecs: U16,
    /// AG block of the left sibling at this level, or null.
    pub bb_leftsib: U32,
    /// AG block of the right sibling at this level, or null.
    pub bb_rightsib: U32,
    /// Disk address (512-byte units) of this block, for self-identification.
    pub bb_blkno: U64,
    /// LSN of the last logged change to this block.
    pub bb_lsn: U64,
    /// Filesystem metadata UUID.
    pub bb_uuid: Uuid,
    /// Number of the AG that owns this block.
    pub bb_owner: U32,
    /// CRC-32C of the block, little-endian.
    pub bb_crc: LeU32,
}

/// Size of the v5 short-pointer block header.
pub const XFS_BTREE_SBLOCK_CRC_LEN: usize = 56;
/// Byte offset of the CRC in a short-pointer block.
pub const XFS_BTREE_SBLOCK_CRC_OFF: usize = 52;
/// Byte offset of the LSN in a short-pointer block.
pub const XFS_BTREE_SBLOCK_LSN_OFF: usize = 24;

const _: () = assert!(size_of::<BtreeBlockShort>() == XFS_BTREE_SBLOCK_CRC_LEN);
const _: () = assert!(offset_of!(BtreeBlockShort, bb_crc) == XFS_BTREE_SBLOCK_CRC_OFF);
const _: () = assert!(offset_of!(BtreeBlockShort, bb_lsn) == XFS_BTREE_SBLOCK_LSN_OFF);
const _: () = assert!(offset_of!(BtreeBlockShort, bb_blkno) == 16);
const _: () = assert!(offset_of!(BtreeBlockShort, bb_uuid) == 32);
const _: () = assert!(offset_of!(BtreeBlockShort, bb_owner) == 48);

/// Header of a btree block addressed by 64-bit filesystem block numbers.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct BtreeBlockLong {
    /// Magic number identifying which btree this block belongs to.
    pub bb_magic: U32,
    /// Height above the leaves; 0 for a leaf.
    pub bb_level: U16,
    /// Entries in use in this block.
    pub bb_numrecs: U16,
    /// Filesystem block of the left sibling, or null.
    pub bb_leftsib: U64,
    /// Filesystem block of the right sibling, or null.
    pub bb_rightsib: U64,
    /// Disk address (512-byte units) of this block, for self-identification.
    pub bb_blkno: U64,
    /// LSN of the last logged change to this block.
    pub bb_lsn: U64,
    /// Filesystem metadata UUID.
    pub bb_uuid: Uuid,
    /// Inode number that owns this block.
    pub bb_owner: U64,
    /// CRC-32C of the block, little-endian.
    pub bb_crc: LeU32,
    /// Padding, zero.
    pub bb_pad: U32,
}

/// Size of the v5 long-pointer block header.
pub const XFS_BTREE_LBLOCK_CRC_LEN: usize = 72;
/// Byte offset of the CRC in a long-pointer block.
pub const XFS_BTREE_LBLOCK_CRC_OFF: usize = 64;
/// Byte offset of the LSN in a long-pointer block.
pub const XFS_BTREE_LBLOCK_LSN_OFF: usize = 32;

const _: () = assert!(size_of::<BtreeBlockLong>() == XFS_BTREE_LBLOCK_CRC_LEN);
const _: () = assert!(offset_of!(BtreeBlockLong, bb_crc) == XFS_BTREE_LBLOCK_CRC_OFF);
const _: () = assert!(offset_of!(BtreeBlockLong, bb_lsn) == XFS_BTREE_LBLOCK_LSN_OFF);
const _: () = assert!(offset_of!(BtreeBlockLong, bb_blkno) == 24);
const _: () = assert!(offset_of!(BtreeBlockLong, bb_uuid) == 40);
const _: () = assert!(offset_of!(BtreeBlockLong, bb_owner) == 56);

/// Free space record (and key) of the bno and cnt btrees.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct AllocRec {
    /// First free AG block of the extent.
    pub ar_startblock: U32,
    /// Length of the free extent in blocks.
    pub ar_blockcount: U32,
}
const _: () = assert!(size_of::<AllocRec>() == 8);

/// Key of the free space btrees: same layout as the record.
pub type AllocKey = AllocRec;

/// Inodes per inode chunk (one bit each in `ir_free`).
pub const XFS_INODES_PER_CHUNK: u32 = 64;
/// Inodes covered by one bit of `ir_holemask`.
pub const XFS_INODES_PER_HOLEMASK_BIT: u32 = 4;
/// `ir_holemask` value for a chunk without holes.
pub const XFS_INOBT_HOLEMASK_FULL: u16 = 0;
/// `ir_free` value with every inode free.
pub const XFS_INOBT_ALL_FREE: u64 = u64::MAX;

/// Inode btree record, sparse-capable layout.
///
/// Without the SPINODES feature, bytes 4..8 are instead one big-endian
/// 32-bit free count; see [`InobtRec::freecount_full`]. The two readings
/// differ, so callers must choose by the superblock feature bit.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct InobtRec {
    /// AG inode number of the first inode in the chunk.
    pub ir_startino: U32,
    /// One bit per 4 inodes that are not backed by disk space.
    pub ir_holemask: U16,
    /// Number of inodes actually present in the chunk.
    pub ir_count: u8,
    /// Number of free inodes in the chunk.
    pub ir_freecount: u8,
    /// One bit per inode, set when that inode is free (holes count as free).
    pub ir_free: U64,
}
const _: () = assert!(size_of::<InobtRec>() == 16);

impl InobtRec {
    /// Free count as read by a filesystem without sparse inode support,
    /// where bytes 4..8 form a single big-endian 32-bit counter.
    pub fn freecount_full(&self) -> u32 {
        let h = self.ir_holemask.get() as u32;
        (h << 16) | ((self.ir_count as u32) << 8) | self.ir_freecount as u32
    }

    /// Stores a free count in the non-sparse layout (bytes 4..8 as one be32).
    pub fn set_freecount_full(&mut self, n: u32) {
        self.ir_holemask.set((n >> 16) as u16);
        self.ir_count = (n >> 8) as u8;
        self.ir_freecount = n as u8;
    }
}

/// Inode btree key.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct InobtKey {
    /// AG inode number of the first inode in the chunk.
    pub ir_startino: U32,
}
const _: () = assert!(size_of::<InobtKey>() == 4);

/// Reverse mapping record: who owns an extent of AG space.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct RmapRec {
    /// First AG block of the extent.
    pub rm_startblock: U32,
    /// Length of the extent in blocks.
    pub rm_blockcount: U32,
    /// Inode number, or one of the special `XFS_RMAP_OWN_*` owners.
    pub rm_owner: U64,
    /// File offset in blocks plus flag bits (`XFS_RMAP_OFF_*`).
    pub rm_offset: U64,
}
const _: () = assert!(size_of::<RmapRec>() == 24);

/// Reverse mapping key. The rmap btree allows overlapping intervals, so each
/// node entry holds a low key and a high key (two of these) per pointer.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct RmapKey {
    /// First AG block of the extent.
    pub rm_startblock: U32,
    /// Owner, as in the record.
    pub rm_owner: U64,
    /// Offset and flags, as in the record.
    pub rm_offset: U64,
}
const _: () = assert!(size_of::<RmapKey>() == 20);

/// rmap owner: nobody (used transiently).
pub const XFS_RMAP_OWN_NULL: u64 = -1i64 as u64;
/// rmap owner: unknown (log recovery).
pub const XFS_RMAP_OWN_UNKNOWN: u64 = -2i64 as u64;
/// rmap owner: static metadata (AG headers).
pub const XFS_RMAP_OWN_FS: u64 = -3i64 as u64;
/// rmap owner: the internal log.
pub const XFS_RMAP_OWN_LOG: u64 = -4i64 as u64;
/// rmap owner: free space btrees, rmapbt and AGFL blocks.
pub const XFS_RMAP_OWN_AG: u64 = -5i64 as u64;
/// rmap owner: inode and free inode btree blocks.
pub const XFS_RMAP_OWN_INOBT: u64 = -6i64 as u64;
/// rmap owner: inode chunks.
pub const XFS_RMAP_OWN_INODES: u64 = -7i64 as u64;
/// rmap owner: reference count btree blocks.
pub const XFS_RMAP_OWN_REFC: u64 = -8i64 as u64;
/// rmap owner: staging extents for copy-on-write.
pub const XFS_RMAP_OWN_COW: u64 = -9i64 as u64;
/// rm_offset flag: mapping belongs to the attribute fork.
pub const XFS_RMAP_OFF_ATTR_FORK: u64 = 1 << 63;
/// rm_offset flag: mapping is a bmbt block, not file data.
pub const XFS_RMAP_OFF_BMBT_BLOCK: u64 = 1 << 62;
/// rm_offset flag: mapping is an unwritten extent.
pub const XFS_RMAP_OFF_UNWRITTEN: u64 = 1 << 61;
/// Mask of the file offset bits of rm_offset.
pub const XFS_RMAP_OFF_MASK: u64 = (1 << 54) - 1;

/// Reference count record: how many owners share an extent.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct RefcountRec {
    /// First AG block (top bit set for CoW staging extents).
    pub rc_startblock: U32,
    /// Length in blocks.
    pub rc_blockcount: U32,
    /// Number of owners (1 for CoW staging extents).
    pub rc_refcount: U32,
}
const _: () = assert!(size_of::<RefcountRec>() == 12);

/// Reference count key.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct RefcountKey {
    /// First AG block, as in the record.
    pub rc_startblock: U32,
}
const _: () = assert!(size_of::<RefcountKey>() == 4);

/// Bit marking a CoW staging extent in `rc_startblock`.
pub const XFS_REFC_COWFLAG: u32 = 1 << 31;

/// Packed extent record of the bmap btree and of extent-format forks.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct BmbtRec {
    /// High word: unwritten flag, file offset, top of the block number.
    pub l0: U64,
    /// Low word: rest of the block number and the length.
    pub l1: U64,
}
const _: () = assert!(size_of::<BmbtRec>() == 16);

impl BmbtRec {
    /// Unpacks into an extent mapping.
    pub fn unpack(&self) -> BmbtIrec {
        BmbtIrec::unpack(self.l0.get(), self.l1.get())
    }

    /// Packs an extent mapping (fields truncated to their widths).
    pub fn pack(irec: &BmbtIrec) -> BmbtRec {
        let (l0, l1) = irec.pack();
        BmbtRec {
            l0: U64::new(l0),
            l1: U64::new(l1),
        }
    }
}

/// Key of the bmap btree (and of its in-inode root).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct BmbtKey {
    /// First file block covered by the subtree.
    pub br_startoff: U64,
}
const _: () = assert!(size_of::<BmbtKey>() == 8);

/// Header of a bmap btree root stored inside an inode fork.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct BmdrBlock {
    /// Height of the tree below the root; at least 1.
    pub bb_level: U16,
    /// Entries in use in the root.
    pub bb_numrecs: U16,
}
const _: () = assert!(size_of::<BmdrBlock>() == 4);

/// Size of a short btree pointer (AG block number).
pub const SHORT_PTR_LEN: usize = 4;
/// Size of a long btree pointer (filesystem block number).
pub const LONG_PTR_LEN: usize = 8;

/// Maximum entries in a btree block of `blocklen` bytes whose header is
/// `hdrlen` bytes: records for a leaf, key+pointer pairs for a node.
///
/// For the overlapping rmap btree pass twice the key size for nodes.
/// Returns 0 if the block is too small or a size is zero.
pub const fn maxrecs(
    blocklen: usize,
    hdrlen: usize,
    reclen: usize,
    is_leaf: bool,
    keylen: usize,
    ptrlen: usize,
) -> usize {
    let space = blocklen.saturating_sub(hdrlen);
    let per = if is_leaf { reclen } else { keylen + ptrlen };
    match space.checked_div(per) {
        Some(n) => n,
        None => 0,
    }
}

/// Byte offset of record (leaf) or key (node) number `idx` (0-based).
pub const fn entry_offset(hdrlen: usize, entlen: usize, idx: usize) -> usize {
    hdrlen + idx * entlen
}

/// Byte offset of pointer number `idx` (0-based) in a node: the pointers come
/// after room for `maxrecs` keys, whatever the number in use.
pub const fn ptr_offset(
    hdrlen: usize,
    keylen: usize,
    maxrecs: usize,
    ptrlen: usize,
    idx: usize,
) -> usize {
    hdrlen + maxrecs * keylen + idx * ptrlen
}

/// Entries that fit in an in-inode bmap root of `forklen` bytes
/// (4-byte [`BmdrBlock`] header, then records or 8+8 byte key/pointer pairs).
pub const fn bmdr_maxrecs(forklen: usize, is_leaf: bool) -> usize {
    maxrecs(
        forklen,
        size_of::<BmdrBlock>(),
        size_of::<BmbtRec>(),
        is_leaf,
        8,
        8,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sizes() {
        assert_eq!(size_of::<BtreeBlockShort>(), 56);
        assert_eq!(size_of::<BtreeBlockLong>(), 72);
        assert_eq!(size_of::<RmapKey>(), 20);
        assert_eq!(&XFS_ABTB_CRC_MAGIC.to_be_bytes(), b"AB3B");
        assert_eq!(&XFS_REFC_CRC_MAGIC.to_be_bytes(), b"R3FC");
        assert_eq!(&XFS_BMAP_CRC_MAGIC.to_be_bytes(), b"BMA3");
        assert_eq!(&XFS_FIBT_CRC_MAGIC.to_be_bytes(), b"FIB3");
    }

    #[test]
    fn maxrecs_4k() {
        // bnobt leaf: (4096-56)/8 = 505; node: (4096-56)/(8+4) = 336.
        assert_eq!(maxrecs(4096, 56, 8, true, 8, 4), 505);
        assert_eq!(maxrecs(4096, 56, 8, false, 8, 4), 336);
        // bmbt leaf: (4096-72)/16 = 251; node (4096-72)/16 = 251.
        assert_eq!(maxrecs(4096, 72, 16, true, 8, 8), 251);
        // rmapbt node holds low+high keys: (4096-56)/(40+4) = 91.
        assert_eq!(maxrecs(4096, 56, 24, false, 40, 4), 91);
        assert_eq!(maxrecs(10, 56, 8, true, 8, 4), 0);
        assert_eq!(maxrecs(4096, 56, 0, true, 8, 4), 0);
    }

    #[test]
    fn pointer_offsets() {
        let mr = maxrecs(4096, 56, 16, false, 4, 4);
        assert_eq!(mr, 505);
        assert_eq!(ptr_offset(56, 4, mr, 4, 0), 56 + 505 * 4);
        assert_eq!(entry_offset(56, 4, 3), 68);
        // A 2-entry bmdr root in a 40-byte fork: header 4, keys, then ptrs.
        assert_eq!(bmdr_maxrecs(40, false), 2);
        assert_eq!(ptr_offset(4, 8, 2, 8, 1), 4 + 16 + 8);
    }

    #[test]
    fn inobt_freecount_layouts() {
        let mut r = InobtRec {
            ir_startino: U32::new(128),
            ir_holemask: U16::new(0),
            ir_count: 0,
            ir_freecount: 0,
            ir_free: U64::new(XFS_INOBT_ALL_FREE),
        };
        r.set_freecount_full(64);
        assert_eq!(r.freecount_full(), 64);
        assert_eq!(&r.as_bytes()[4..8], &64u32.to_be_bytes());
    }

    #[test]
    fn bmbt_rec_round_trip() {
        let irec = BmbtIrec {
            startoff: 12,
            startblock: 0x1_0000_0042,
            blockcount: 9,
            unwritten: true,
        };
        assert_eq!(BmbtRec::pack(&irec).unpack(), irec);
    }
}

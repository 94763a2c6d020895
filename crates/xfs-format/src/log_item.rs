//! Log items: what a transaction writes into the log's operation regions.
//!
//! A checkpoint transaction opens with a region holding [`XfsTransHeader`],
//! then each item logs one region with its format structure (its first two
//! 16-bit fields are always the item type and the number of regions the
//! item spans), followed by the item's payload regions. Unlike the rest of
//! the format these structures are written in the host's byte order, which
//! is little-endian on every host we read logs from (`h_fmt` says so). The
//! one exception is [`IcreateLog`], whose fields after the type and size
//! are big-endian. Payloads copied from buffers (buffer items, inode forks)
//! stay in their on-disk byte order.
//!
//! Sizes are checked against the kernel's `xfs_ondisk.h`.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::U32 as BeU32;
use zerocopy::byteorder::little_endian::{I32, I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// `th_magic` of a transaction header, "TRAN".
pub const XFS_TRANS_HEADER_MAGIC: u32 = 0x5452_414e;
/// `th_type` of the one transaction a delayed-logging checkpoint writes.
pub const XFS_TRANS_CHECKPOINT: u32 = 40;

/// Item type: extent free intent.
pub const XFS_LI_EFI: u16 = 0x1236;
/// Item type: extent free done.
pub const XFS_LI_EFD: u16 = 0x1237;
/// Item type: unlinked-list update (in-memory only, never in the log).
pub const XFS_LI_IUNLINK: u16 = 0x1238;
/// Item type: inode.
pub const XFS_LI_INODE: u16 = 0x123b;
/// Item type: buffer.
pub const XFS_LI_BUF: u16 = 0x123c;
/// Item type: quota record.
pub const XFS_LI_DQUOT: u16 = 0x123d;
/// Item type: quota off (obsolete).
pub const XFS_LI_QUOTAOFF: u16 = 0x123e;
/// Item type: inode chunk creation.
pub const XFS_LI_ICREATE: u16 = 0x123f;
/// Item type: reverse-mapping update intent.
pub const XFS_LI_RUI: u16 = 0x1240;
/// Item type: reverse-mapping update done.
pub const XFS_LI_RUD: u16 = 0x1241;
/// Item type: reference count update intent.
pub const XFS_LI_CUI: u16 = 0x1242;
/// Item type: reference count update done.
pub const XFS_LI_CUD: u16 = 0x1243;
/// Item type: block mapping update intent.
pub const XFS_LI_BUI: u16 = 0x1244;
/// Item type: block mapping update done.
pub const XFS_LI_BUD: u16 = 0x1245;
/// Item type: extended attribute update intent.
pub const XFS_LI_ATTRI: u16 = 0x1246;
/// Item type: extended attribute update done.
pub const XFS_LI_ATTRD: u16 = 0x1247;
/// Item type: file mapping exchange intent.
pub const XFS_LI_XMI: u16 = 0x1248;
/// Item type: file mapping exchange done.
pub const XFS_LI_XMD: u16 = 0x1249;
/// Item type: realtime extent free intent (realtime groups).
pub const XFS_LI_EFI_RT: u16 = 0x124a;
/// Item type: realtime extent free done.
pub const XFS_LI_EFD_RT: u16 = 0x124b;
/// Item type: realtime reverse-mapping update intent (realtime groups).
pub const XFS_LI_RUI_RT: u16 = 0x124c;
/// Item type: realtime reverse-mapping update done.
pub const XFS_LI_RUD_RT: u16 = 0x124d;

/// Short name of an item type, as the kernel's trace tables spell it.
pub fn item_type_name(t: u16) -> &'static str {
    match t {
        XFS_LI_EFI => "EFI",
        XFS_LI_EFD => "EFD",
        XFS_LI_IUNLINK => "IUNLINK",
        XFS_LI_INODE => "INODE",
        XFS_LI_BUF => "BUF",
        XFS_LI_DQUOT => "DQUOT",
        XFS_LI_QUOTAOFF => "QUOTAOFF",
        XFS_LI_ICREATE => "ICREATE",
        XFS_LI_RUI => "RUI",
        XFS_LI_RUD => "RUD",
        XFS_LI_CUI => "CUI",
        XFS_LI_CUD => "CUD",
        XFS_LI_BUI => "BUI",
        XFS_LI_BUD => "BUD",
        XFS_LI_ATTRI => "ATTRI",
        XFS_LI_ATTRD => "ATTRD",
        XFS_LI_XMI => "XMI",
        XFS_LI_XMD => "XMD",
        XFS_LI_EFI_RT => "EFI_RT",
        XFS_LI_EFD_RT => "EFD_RT",
        XFS_LI_RUI_RT => "RUI_RT",
        XFS_LI_RUD_RT => "RUD_RT",
        _ => "UNKNOWN",
    }
}

/// First region of a transaction in the log.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct XfsTransHeader {
    /// Magic, [`XFS_TRANS_HEADER_MAGIC`].
    pub th_magic: U32,
    /// Transaction type; [`XFS_TRANS_CHECKPOINT`] for checkpoints.
    pub th_type: U32,
    /// Transaction id (unused by recovery).
    pub th_tid: I32,
    /// Number of items the transaction logs.
    pub th_num_items: U32,
}
/// Size of [`XfsTransHeader`].
pub const XFS_TRANS_HEADER_SIZE: usize = 16;
const _: () = assert!(size_of::<XfsTransHeader>() == XFS_TRANS_HEADER_SIZE);

// ---------------------------------------------------------------- buffers

/// Bytes of buffer covered by one bit of the dirty bitmap.
pub const XFS_BLF_CHUNK: usize = 128;
/// log2 of [`XFS_BLF_CHUNK`].
pub const XFS_BLF_SHIFT: u32 = 7;
/// Bits per bitmap word.
pub const XFS_BLF_NBWORD: usize = 32;
/// Words of dirty bitmap for the largest (64 KiB) block, plus one.
pub const XFS_BLF_DATAMAP_SIZE: usize = 65536 / XFS_BLF_CHUNK / XFS_BLF_NBWORD + 1;

/// `blf_flags`: an inode cluster buffer; only `di_next_unlinked` fields
/// are logged in it.
pub const XFS_BLF_INODE_BUF: u16 = 1 << 0;
/// `blf_flags`: the buffer was freed; earlier changes must not be replayed.
pub const XFS_BLF_CANCEL: u16 = 1 << 1;
/// `blf_flags`: a user quota buffer.
pub const XFS_BLF_UDQUOT_BUF: u16 = 1 << 2;
/// `blf_flags`: a project quota buffer.
pub const XFS_BLF_PDQUOT_BUF: u16 = 1 << 3;
/// `blf_flags`: a group quota buffer.
pub const XFS_BLF_GDQUOT_BUF: u16 = 1 << 4;

/// Bits of `blf_flags` holding the buffer type.
pub const XFS_BLFT_BITS: u32 = 5;
/// First bit of the buffer type in `blf_flags`.
pub const XFS_BLFT_SHIFT: u32 = 11;
/// Mask of the buffer type in `blf_flags`.
pub const XFS_BLFT_MASK: u16 = ((1 << XFS_BLFT_BITS) - 1) << XFS_BLFT_SHIFT;

/// Buffer type: unknown (no verifier on replay).
pub const XFS_BLFT_UNKNOWN_BUF: u16 = 0;
/// Buffer type: user quota block.
pub const XFS_BLFT_UDQUOT_BUF: u16 = 1;
/// Buffer type: project quota block.
pub const XFS_BLFT_PDQUOT_BUF: u16 = 2;
/// Buffer type: group quota block.
pub const XFS_BLFT_GDQUOT_BUF: u16 = 3;
/// Buffer type: any btree block (the magic tells which).
pub const XFS_BLFT_BTREE_BUF: u16 = 4;
/// Buffer type: AGF.
pub const XFS_BLFT_AGF_BUF: u16 = 5;
/// Buffer type: AGFL.
pub const XFS_BLFT_AGFL_BUF: u16 = 6;
/// Buffer type: AGI.
pub const XFS_BLFT_AGI_BUF: u16 = 7;
/// Buffer type: inode cluster.
pub const XFS_BLFT_DINO_BUF: u16 = 8;
/// Buffer type: remote symlink block.
pub const XFS_BLFT_SYMLINK_BUF: u16 = 9;
/// Buffer type: single-block directory.
pub const XFS_BLFT_DIR_BLOCK_BUF: u16 = 10;
/// Buffer type: directory data block.
pub const XFS_BLFT_DIR_DATA_BUF: u16 = 11;
/// Buffer type: directory free-index block.
pub const XFS_BLFT_DIR_FREE_BUF: u16 = 12;
/// Buffer type: directory leaf1 block.
pub const XFS_BLFT_DIR_LEAF1_BUF: u16 = 13;
/// Buffer type: directory leafn block.
pub const XFS_BLFT_DIR_LEAFN_BUF: u16 = 14;
/// Buffer type: dabtree node block.
pub const XFS_BLFT_DA_NODE_BUF: u16 = 15;
/// Buffer type: attribute leaf block.
pub const XFS_BLFT_ATTR_LEAF_BUF: u16 = 16;
/// Buffer type: remote attribute value block.
pub const XFS_BLFT_ATTR_RMT_BUF: u16 = 17;
/// Buffer type: superblock.
pub const XFS_BLFT_SB_BUF: u16 = 18;
/// Buffer type: realtime bitmap block.
pub const XFS_BLFT_RTBITMAP_BUF: u16 = 19;
/// Buffer type: realtime summary block.
pub const XFS_BLFT_RTSUMMARY_BUF: u16 = 20;

/// The buffer type held in `blf_flags`.
pub const fn blft_from_flags(flags: u16) -> u16 {
    (flags & XFS_BLFT_MASK) >> XFS_BLFT_SHIFT
}

/// `flags` with its buffer type replaced by `blft`.
pub const fn blft_to_flags(flags: u16, blft: u16) -> u16 {
    (flags & !XFS_BLFT_MASK) | ((blft << XFS_BLFT_SHIFT) & XFS_BLFT_MASK)
}

/// Format region of a buffer item. The region in the log may stop after
/// `blf_map_size` words of the bitmap; the dirty 128-byte chunks follow as
/// further regions, one per run of set bits.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct BufLogFormat {
    /// Item type, [`XFS_LI_BUF`].
    pub blf_type: U16,
    /// Regions the item spans (this one plus one per dirty run).
    pub blf_size: U16,
    /// `XFS_BLF_*` flags and the buffer type in bits 11-15.
    pub blf_flags: U16,
    /// Length of the buffer in 512-byte blocks.
    pub blf_len: U16,
    /// Disk address of the buffer (512-byte units).
    pub blf_blkno: I64,
    /// Words of `blf_data_map` in use.
    pub blf_map_size: U32,
    /// Dirty bitmap, one bit per [`XFS_BLF_CHUNK`] bytes, least significant
    /// bit of word 0 first.
    pub blf_data_map: [U32; XFS_BLF_DATAMAP_SIZE],
}
/// Size of [`BufLogFormat`] with the whole bitmap.
pub const XFS_BUF_LOG_FORMAT_SIZE: usize = 88;
/// Offset of the bitmap: the smallest valid buffer format region.
pub const XFS_BUF_LOG_FORMAT_MAP_OFF: usize = 20;
const _: () = assert!(size_of::<BufLogFormat>() == XFS_BUF_LOG_FORMAT_SIZE);
const _: () = assert!(offset_of!(BufLogFormat, blf_blkno) == 8);
const _: () = assert!(offset_of!(BufLogFormat, blf_data_map) == XFS_BUF_LOG_FORMAT_MAP_OFF);

// ----------------------------------------------------------------- inodes

/// `ilf_fields`: the inode core is logged.
pub const XFS_ILOG_CORE: u32 = 0x001;
/// `ilf_fields`: local data fork contents are logged.
pub const XFS_ILOG_DDATA: u32 = 0x002;
/// `ilf_fields`: data fork extent list is logged.
pub const XFS_ILOG_DEXT: u32 = 0x004;
/// `ilf_fields`: data fork btree root is logged (in-core long block form).
pub const XFS_ILOG_DBROOT: u32 = 0x008;
/// `ilf_fields`: the device number (`ilfu_rdev`) is logged.
pub const XFS_ILOG_DEV: u32 = 0x010;
/// `ilf_fields`: obsolete UUID field.
pub const XFS_ILOG_UUID: u32 = 0x020;
/// `ilf_fields`: local attribute fork contents are logged.
pub const XFS_ILOG_ADATA: u32 = 0x040;
/// `ilf_fields`: attribute fork extent list is logged.
pub const XFS_ILOG_AEXT: u32 = 0x080;
/// `ilf_fields`: attribute fork btree root is logged.
pub const XFS_ILOG_ABROOT: u32 = 0x100;
/// `ilf_fields`: change the owner of the data fork's btree blocks on replay.
pub const XFS_ILOG_DOWNER: u32 = 0x200;
/// `ilf_fields`: change the owner of the attr fork's btree blocks on replay.
pub const XFS_ILOG_AOWNER: u32 = 0x400;
/// `ilf_fields`: timestamps only (in-core; the core is logged).
pub const XFS_ILOG_TIMESTAMP: u32 = 0x4000;
/// `ilf_fields`: change counter only (in-core; the core is logged).
pub const XFS_ILOG_IVERSION: u32 = 0x8000;
/// Data fork flags.
pub const XFS_ILOG_DFORK: u32 = XFS_ILOG_DDATA | XFS_ILOG_DEXT | XFS_ILOG_DBROOT;
/// Attribute fork flags.
pub const XFS_ILOG_AFORK: u32 = XFS_ILOG_ADATA | XFS_ILOG_AEXT | XFS_ILOG_ABROOT;

/// Format region of an inode item (the 64-bit layout). The next region is
/// the [`LogDinode`], then the data fork (if a `XFS_ILOG_D*` flag is set),
/// then the attribute fork (if a `XFS_ILOG_A*` flag is set).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct InodeLogFormat {
    /// Item type, [`XFS_LI_INODE`].
    pub ilf_type: U16,
    /// Regions the item spans (2 to 4).
    pub ilf_size: U16,
    /// `XFS_ILOG_*` flags of what is logged.
    pub ilf_fields: U32,
    /// Bytes of logged attribute fork.
    pub ilf_asize: U16,
    /// Bytes of logged data fork.
    pub ilf_dsize: U16,
    /// Padding to 8 bytes.
    pub ilf_pad: U32,
    /// Inode number.
    pub ilf_ino: U64,
    /// Device number for device inodes (`ilfu_rdev`, in the first 4 bytes),
    /// else unused.
    pub ilf_u: [u8; 16],
    /// Disk address of the inode cluster buffer.
    pub ilf_blkno: I64,
    /// Length of the inode cluster buffer in 512-byte blocks.
    pub ilf_len: I32,
    /// Byte offset of the inode in its cluster buffer.
    pub ilf_boffset: I32,
}
/// Size of [`InodeLogFormat`].
pub const XFS_INODE_LOG_FORMAT_SIZE: usize = 56;
const _: () = assert!(size_of::<InodeLogFormat>() == XFS_INODE_LOG_FORMAT_SIZE);
const _: () = assert!(offset_of!(InodeLogFormat, ilf_ino) == 16);
const _: () = assert!(offset_of!(InodeLogFormat, ilf_blkno) == 40);

/// The inode format region as 32-bit hosts write it (no pad before
/// `ilf_ino`). Recovery tells the two apart by region length.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct InodeLogFormat32 {
    /// Item type, [`XFS_LI_INODE`].
    pub ilf_type: U16,
    /// Regions the item spans.
    pub ilf_size: U16,
    /// `XFS_ILOG_*` flags.
    pub ilf_fields: U32,
    /// Bytes of logged attribute fork.
    pub ilf_asize: U16,
    /// Bytes of logged data fork.
    pub ilf_dsize: U16,
    /// Inode number.
    pub ilf_ino: U64,
    /// Device number (first 4 bytes) or unused.
    pub ilf_u: [u8; 16],
    /// Disk address of the inode cluster buffer.
    pub ilf_blkno: I64,
    /// Length of the cluster buffer in 512-byte blocks.
    pub ilf_len: I32,
    /// Byte offset of the inode in its cluster buffer.
    pub ilf_boffset: I32,
}
/// Size of [`InodeLogFormat32`].
pub const XFS_INODE_LOG_FORMAT_32_SIZE: usize = 52;
const _: () = assert!(size_of::<InodeLogFormat32>() == XFS_INODE_LOG_FORMAT_32_SIZE);

/// The inode core as logged: the on-disk v3 core's layout in host byte
/// order. Timestamps are the on-disk 64-bit value when the inode has
/// bigtime, else two host-order 32-bit halves (seconds first in memory).
/// `di_lsn` and `di_crc` are not meaningful in the log; recovery stamps
/// both, and keeps the on-disk `di_next_unlinked`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct LogDinode {
    /// Magic, `XFS_DINODE_MAGIC` ("IN").
    pub di_magic: U16,
    /// File type and permissions.
    pub di_mode: U16,
    /// Core version (3).
    pub di_version: u8,
    /// Data fork format (`XFS_DINODE_FMT_*`).
    pub di_format: u8,
    /// Old link count / metadata file type; copied as is.
    pub di_metatype: U16,
    /// Owner user id.
    pub di_uid: U32,
    /// Owner group id.
    pub di_gid: U32,
    /// Link count.
    pub di_nlink: U32,
    /// Low 16 bits of the project id.
    pub di_projid_lo: U16,
    /// High 16 bits of the project id.
    pub di_projid_hi: U16,
    /// Data fork extent count with NREXT64 (`di_big_nextents`), else zero
    /// padding (`di_v3_pad`).
    pub di_big_nextents: U64,
    /// Access time (see the type's doc for the encoding).
    pub di_atime: U64,
    /// Modification time.
    pub di_mtime: U64,
    /// Status change time.
    pub di_ctime: U64,
    /// File size in bytes.
    pub di_size: U64,
    /// Blocks of both forks, btree blocks included.
    pub di_nblocks: U64,
    /// Extent size hint.
    pub di_extsize: U32,
    /// Data fork extent count, or attr fork extent count with NREXT64
    /// (`di_big_anextents`).
    pub di_nextents: U32,
    /// Attr fork extent count, or zero padding with NREXT64
    /// (`di_nrext64_pad`).
    pub di_anextents: U16,
    /// Attribute fork offset in 8-byte units.
    pub di_forkoff: u8,
    /// Attribute fork format.
    pub di_aformat: u8,
    /// Obsolete DMAPI event mask.
    pub di_dmevmask: U32,
    /// Obsolete DMAPI state.
    pub di_dmstate: U16,
    /// `XFS_DIFLAG_*` flags.
    pub di_flags: U16,
    /// Generation number.
    pub di_gen: U32,
    /// Unlinked list pointer; not replayed from here.
    pub di_next_unlinked: U32,
    /// CRC placeholder; not meaningful in the log.
    pub di_crc: U32,
    /// Change counter.
    pub di_changecount: U64,
    /// LSN placeholder; not meaningful in the log.
    pub di_lsn: U64,
    /// `XFS_DIFLAG2_*` flags.
    pub di_flags2: U64,
    /// Copy-on-write extent size hint.
    pub di_cowextsize: U32,
    /// Padding, zero.
    pub di_pad2: [u8; 12],
    /// Creation time.
    pub di_crtime: U64,
    /// Inode number.
    pub di_ino: U64,
    /// Filesystem metadata UUID.
    pub di_uuid: Uuid,
}
/// Size of [`LogDinode`] on v3 inode filesystems.
pub const XFS_LOG_DINODE_SIZE: usize = 176;
/// Size of the v1/v2 log inode core (up to `di_next_unlinked`).
pub const XFS_LOG_DINODE_V2_SIZE: usize = 96;
const _: () = assert!(size_of::<LogDinode>() == XFS_LOG_DINODE_SIZE);
const _: () = assert!(offset_of!(LogDinode, di_next_unlinked) == XFS_LOG_DINODE_V2_SIZE);
const _: () = assert!(offset_of!(LogDinode, di_nextents) == 76);
const _: () = assert!(offset_of!(LogDinode, di_forkoff) == 82);
const _: () = assert!(offset_of!(LogDinode, di_lsn) == 112);
const _: () = assert!(offset_of!(LogDinode, di_crtime) == 144);
const _: () = assert!(offset_of!(LogDinode, di_uuid) == 160);

/// Inode chunk creation item: the whole region. Fields after the type and
/// size are big-endian.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct IcreateLog {
    /// Item type, [`XFS_LI_ICREATE`] (host order).
    pub icl_type: U16,
    /// Regions the item spans, 1 (host order).
    pub icl_size: U16,
    /// AG of the new chunk.
    pub icl_ag: BeU32,
    /// First AG block of the chunk.
    pub icl_agbno: BeU32,
    /// Number of inodes to initialise.
    pub icl_count: BeU32,
    /// Inode size in bytes.
    pub icl_isize: BeU32,
    /// Length of the chunk in filesystem blocks.
    pub icl_length: BeU32,
    /// Generation number for the new inodes.
    pub icl_gen: BeU32,
}
/// Size of [`IcreateLog`].
pub const XFS_ICREATE_LOG_SIZE: usize = 28;
const _: () = assert!(size_of::<IcreateLog>() == XFS_ICREATE_LOG_SIZE);

pub use crate::log_intent::*;

//! Intent and done log items: deferred work a transaction promised to
//! finish (free an extent, update a reverse mapping, a reference count, a
//! block mapping, an attribute, exchange mappings), and the matching
//! records that say it was finished. Recovery finishes every intent whose
//! done item is not in the log. Host byte order (little-endian), like the
//! other item formats; see [`crate::log_item`].
//!
//! Each intent starts with the same 16 bytes (type, size, count, id) and
//! each done item with (type, size, pad or count, id of its intent).

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A freed extent as 64-bit hosts log it (`xfs_extent_64`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Extent64 {
    /// First filesystem block (AG-encoded).
    pub ext_start: U64,
    /// Length in blocks.
    pub ext_len: U32,
    /// Alignment padding.
    pub ext_pad: U32,
}
const _: () = assert!(size_of::<Extent64>() == 16);

/// A freed extent as 32-bit hosts log it (`xfs_extent_32`, packed).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Extent32 {
    /// First filesystem block (AG-encoded).
    pub ext_start: U64,
    /// Length in blocks.
    pub ext_len: U32,
}
const _: () = assert!(size_of::<Extent32>() == 12);

/// Extent free intent (EFI) header; `efi_nextents` extents follow, of
/// [`Extent64`] or [`Extent32`] (the region length tells which).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct EfiLogFormat {
    /// Item type, `XFS_LI_EFI`.
    pub efi_type: U16,
    /// Regions the item spans (1).
    pub efi_size: U16,
    /// Number of extents to free.
    pub efi_nextents: U32,
    /// Identifier the EFD names.
    pub efi_id: U64,
}
/// Size of the EFI header; extents start here.
pub const XFS_EFI_LOG_FORMAT_SIZE: usize = 16;
const _: () = assert!(size_of::<EfiLogFormat>() == XFS_EFI_LOG_FORMAT_SIZE);

/// Extent free done (EFD) header; `efd_nextents` extents follow.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct EfdLogFormat {
    /// Item type, `XFS_LI_EFD`.
    pub efd_type: U16,
    /// Regions the item spans (1).
    pub efd_size: U16,
    /// Number of extents freed.
    pub efd_nextents: U32,
    /// `efi_id` of the intent this finishes.
    pub efd_efi_id: U64,
}
/// Size of the EFD header.
pub const XFS_EFD_LOG_FORMAT_SIZE: usize = 16;
const _: () = assert!(size_of::<EfdLogFormat>() == XFS_EFD_LOG_FORMAT_SIZE);

/// A mapping change of a reverse-mapping or block-mapping intent.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct MapExtent {
    /// Owner (inode number or `XFS_RMAP_OWN_*`).
    pub me_owner: U64,
    /// First filesystem block.
    pub me_startblock: U64,
    /// File offset in blocks.
    pub me_startoff: U64,
    /// Length in blocks.
    pub me_len: U32,
    /// Operation in the low 8 bits (`XFS_RMAP_EXTENT_*` or
    /// `XFS_BMAP_EXTENT_*` type) and fork/state flags in the high bits.
    pub me_flags: U32,
}
const _: () = assert!(size_of::<MapExtent>() == 32);

/// rmap operation: map.
pub const XFS_RMAP_EXTENT_MAP: u32 = 1;
/// rmap operation: map a shared extent.
pub const XFS_RMAP_EXTENT_MAP_SHARED: u32 = 2;
/// rmap operation: unmap.
pub const XFS_RMAP_EXTENT_UNMAP: u32 = 3;
/// rmap operation: unmap a shared extent.
pub const XFS_RMAP_EXTENT_UNMAP_SHARED: u32 = 4;
/// rmap operation: convert between written and unwritten.
pub const XFS_RMAP_EXTENT_CONVERT: u32 = 5;
/// rmap operation: convert a shared extent.
pub const XFS_RMAP_EXTENT_CONVERT_SHARED: u32 = 6;
/// rmap operation: allocate (owner is not an inode).
pub const XFS_RMAP_EXTENT_ALLOC: u32 = 7;
/// rmap operation: free (owner is not an inode).
pub const XFS_RMAP_EXTENT_FREE: u32 = 8;
/// Mask of the operation in `me_flags`.
pub const XFS_RMAP_EXTENT_TYPE_MASK: u32 = 0xff;
/// rmap flag: the attribute fork.
pub const XFS_RMAP_EXTENT_ATTR_FORK: u32 = 1 << 31;
/// rmap flag: a bmbt block.
pub const XFS_RMAP_EXTENT_BMBT_BLOCK: u32 = 1 << 30;
/// rmap flag: an unwritten extent.
pub const XFS_RMAP_EXTENT_UNWRITTEN: u32 = 1 << 29;

/// bmap operation: map (`XFS_BMAP_MAP`).
pub const XFS_BMAP_MAP: u32 = 1;
/// bmap operation: unmap (`XFS_BMAP_UNMAP`).
pub const XFS_BMAP_UNMAP: u32 = 2;
/// Mask of the operation in `me_flags`.
pub const XFS_BMAP_EXTENT_TYPE_MASK: u32 = 0xff;
/// bmap flag: the attribute fork.
pub const XFS_BMAP_EXTENT_ATTR_FORK: u32 = 1 << 31;
/// bmap flag: an unwritten extent.
pub const XFS_BMAP_EXTENT_UNWRITTEN: u32 = 1 << 30;
/// bmap flag: a realtime extent.
pub const XFS_BMAP_EXTENT_REALTIME: u32 = 1 << 29;

/// Header of a reverse-mapping (RUI) or block-mapping (BUI) update intent;
/// `nextents` [`MapExtent`]s follow.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct MapIntentLogFormat {
    /// Item type, `XFS_LI_RUI` or `XFS_LI_BUI` (`rui_type`, `bui_type`).
    pub type_: U16,
    /// Regions the item spans (1).
    pub size: U16,
    /// Number of extents.
    pub nextents: U32,
    /// Identifier the done item names.
    pub id: U64,
}
/// Reverse-mapping update intent header (`xfs_rui_log_format`).
pub type RuiLogFormat = MapIntentLogFormat;
/// Block-mapping update intent header (`xfs_bui_log_format`).
pub type BuiLogFormat = MapIntentLogFormat;
/// Size of an intent header; its extents start here.
pub const XFS_INTENT_HEADER_SIZE: usize = 16;
const _: () = assert!(size_of::<MapIntentLogFormat>() == XFS_INTENT_HEADER_SIZE);

/// A reference count change of a CUI.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct PhysExtent {
    /// First filesystem block.
    pub pe_startblock: U64,
    /// Length in blocks.
    pub pe_len: U32,
    /// Operation in the low 8 bits (`XFS_REFCOUNT_*`).
    pub pe_flags: U32,
}
const _: () = assert!(size_of::<PhysExtent>() == 16);

/// refcount operation: increase.
pub const XFS_REFCOUNT_INCREASE: u32 = 1;
/// refcount operation: decrease.
pub const XFS_REFCOUNT_DECREASE: u32 = 2;
/// refcount operation: allocate a CoW staging extent.
pub const XFS_REFCOUNT_ALLOC_COW: u32 = 3;
/// refcount operation: free a CoW staging extent.
pub const XFS_REFCOUNT_FREE_COW: u32 = 4;
/// Mask of the operation in `pe_flags`.
pub const XFS_REFCOUNT_EXTENT_TYPE_MASK: u32 = 0xff;

/// Reference count update intent header (`xfs_cui_log_format`);
/// `cui_nextents` [`PhysExtent`]s follow.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct CuiLogFormat {
    /// Item type, `XFS_LI_CUI`.
    pub cui_type: U16,
    /// Regions the item spans (1).
    pub cui_size: U16,
    /// Number of extents.
    pub cui_nextents: U32,
    /// Identifier the CUD names.
    pub cui_id: U64,
}
const _: () = assert!(size_of::<CuiLogFormat>() == 16);

/// A done item for RUI, CUI, BUI, ATTRI or XMI (`xfs_rud_log_format` and
/// its siblings share this layout).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct DoneLogFormat {
    /// Item type (`XFS_LI_RUD`, `CUD`, `BUD`, `ATTRD`, `XMD`).
    pub type_: U16,
    /// Regions the item spans (1).
    pub size: U16,
    /// Padding.
    pub pad: U32,
    /// Identifier of the intent this finishes.
    pub intent_id: U64,
}
/// `xfs_rud_log_format`.
pub type RudLogFormat = DoneLogFormat;
/// `xfs_cud_log_format`.
pub type CudLogFormat = DoneLogFormat;
/// `xfs_bud_log_format`.
pub type BudLogFormat = DoneLogFormat;
/// `xfs_attrd_log_format`.
pub type AttrdLogFormat = DoneLogFormat;
/// `xfs_xmd_log_format`.
pub type XmdLogFormat = DoneLogFormat;
/// Size of a done item.
pub const XFS_DONE_LOG_FORMAT_SIZE: usize = 16;
const _: () = assert!(size_of::<DoneLogFormat>() == XFS_DONE_LOG_FORMAT_SIZE);

/// ATTRI operation: set.
pub const XFS_ATTRI_OP_FLAGS_SET: u32 = 1;
/// ATTRI operation: remove.
pub const XFS_ATTRI_OP_FLAGS_REMOVE: u32 = 2;
/// ATTRI operation: replace.
pub const XFS_ATTRI_OP_FLAGS_REPLACE: u32 = 3;
/// ATTRI operation: set a parent pointer.
pub const XFS_ATTRI_OP_FLAGS_PPTR_SET: u32 = 4;
/// ATTRI operation: remove a parent pointer.
pub const XFS_ATTRI_OP_FLAGS_PPTR_REMOVE: u32 = 5;
/// ATTRI operation: replace a parent pointer.
pub const XFS_ATTRI_OP_FLAGS_PPTR_REPLACE: u32 = 6;
/// Mask of the operation in `alfi_op_flags`.
pub const XFS_ATTRI_OP_FLAGS_TYPE_MASK: u32 = 0xff;

/// Attribute update intent (`xfs_attri_log_format`). Further regions
/// carry the name, the value, and for replaces the new name and value.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AttriLogFormat {
    /// Item type, `XFS_LI_ATTRI`.
    pub alfi_type: U16,
    /// Regions the item spans (2 to 5).
    pub alfi_size: U16,
    /// Generation of `alfi_ino`, for parent pointer operations.
    pub alfi_igen: U32,
    /// Identifier the ATTRD names.
    pub alfi_id: U64,
    /// Inode whose attributes change.
    pub alfi_ino: U64,
    /// Operation (`XFS_ATTRI_OP_FLAGS_*`).
    pub alfi_op_flags: U32,
    /// Name length; for parent pointer replaces, old (low 16 bits) and new
    /// (high 16 bits) name lengths.
    pub alfi_name_len: U32,
    /// Value length.
    pub alfi_value_len: U32,
    /// Attribute namespace filter (`XFS_ATTR_ROOT`, `SECURE`, `PARENT`,
    /// `INCOMPLETE`).
    pub alfi_attr_filter: U32,
}
/// Size of [`AttriLogFormat`].
pub const XFS_ATTRI_LOG_FORMAT_SIZE: usize = 40;
const _: () = assert!(size_of::<AttriLogFormat>() == XFS_ATTRI_LOG_FORMAT_SIZE);
const _: () = assert!(offset_of!(AttriLogFormat, alfi_op_flags) == 24);

/// Mapping exchange intent (`xfs_xmi_log_format`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct XmiLogFormat {
    /// Item type, `XFS_LI_XMI`.
    pub xmi_type: U16,
    /// Regions the item spans (1).
    pub xmi_size: U16,
    /// Padding, zero.
    pub pad: U32,
    /// Identifier the XMD names.
    pub xmi_id: U64,
    /// First file's inode number.
    pub xmi_inode1: U64,
    /// Second file's inode number.
    pub xmi_inode2: U64,
    /// First file's generation.
    pub xmi_igen1: U32,
    /// Second file's generation.
    pub xmi_igen2: U32,
    /// Block offset in the first file.
    pub xmi_startoff1: U64,
    /// Block offset in the second file.
    pub xmi_startoff2: U64,
    /// Number of blocks to exchange.
    pub xmi_blockcount: U64,
    /// `XFS_EXCHMAPS_*` flags.
    pub xmi_flags: U64,
    /// Size the first file should have afterwards.
    pub xmi_isize1: U64,
    /// Size the second file should have afterwards.
    pub xmi_isize2: U64,
}
/// Size of [`XmiLogFormat`].
pub const XFS_XMI_LOG_FORMAT_SIZE: usize = 88;
const _: () = assert!(size_of::<XmiLogFormat>() == XFS_XMI_LOG_FORMAT_SIZE);

/// XMI flag: exchange the attribute forks instead of the data forks.
pub const XFS_EXCHMAPS_ATTR_FORK: u64 = 1 << 0;
/// XMI flag: give each file the other's size once the range is done.
pub const XFS_EXCHMAPS_SET_SIZES: u64 = 1 << 1;
/// XMI flag: skip the ranges where the first file has a hole or an
/// unwritten extent.
pub const XFS_EXCHMAPS_INO1_WRITTEN: u64 = 1 << 2;
/// XMI flag: clear the first file's reflink flag at the end.
pub const XFS_EXCHMAPS_CLEAR_INO1_REFLINK: u64 = 1 << 3;
/// XMI flag: clear the second file's reflink flag at the end.
pub const XFS_EXCHMAPS_CLEAR_INO2_REFLINK: u64 = 1 << 4;
/// Every flag an XMI may carry.
pub const XFS_EXCHMAPS_LOGGED_FLAGS: u64 = 0x1f;
/// The flags recovery takes from a logged XMI (the reflink-clearing ones
/// are decided again from the inodes).
pub const XFS_EXCHMAPS_PARAMS: u64 =
    XFS_EXCHMAPS_ATTR_FORK | XFS_EXCHMAPS_SET_SIZES | XFS_EXCHMAPS_INO1_WRITTEN;

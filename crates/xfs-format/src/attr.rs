//! Extended attribute formats: shortform (inside the inode's attr fork), v3
//! leaf blocks, local/remote name entries, and remote value blocks.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::da::Da3Blkinfo;
use crate::types::Uuid;

/// 16-bit magic (at byte 8) of a v3 attribute leaf block.
pub const XFS_ATTR3_LEAF_MAGIC: u16 = 0x3bee;
/// Magic of a remote attribute value block, "XARM".
pub const XFS_ATTR3_RMT_MAGIC: u32 = 0x5841_524d;

/// Entry flag: value is stored in the leaf block (not remote).
pub const XFS_ATTR_LOCAL: u8 = 1 << 0;
/// Entry flag / namespace: "trusted." attributes.
pub const XFS_ATTR_ROOT: u8 = 1 << 1;
/// Entry flag / namespace: "security." attributes.
pub const XFS_ATTR_SECURE: u8 = 1 << 2;
/// Entry flag / namespace: parent pointers (internal, PARENT feature).
pub const XFS_ATTR_PARENT: u8 = 1 << 3;
/// Entry flag: attribute is half-written and must be ignored.
pub const XFS_ATTR_INCOMPLETE: u8 = 1 << 7;
/// Mask of the namespace bits; none set means the "user." namespace.
pub const XFS_ATTR_NSP_ONDISK_MASK: u8 = XFS_ATTR_ROOT | XFS_ATTR_SECURE | XFS_ATTR_PARENT;

/// Largest attribute name length.
pub const XFS_ATTR_NAME_MAXLEN: usize = 255;
/// Largest attribute value length (64 KiB).
pub const XFS_XATTR_SIZE_MAX: usize = 1 << 16;
/// Alignment of name/value entries in a leaf block.
pub const XFS_ATTR_LEAF_NAME_ALIGN: usize = 4;
/// Number of free-map slots in a leaf header.
pub const XFS_ATTR_LEAF_MAPSIZE: usize = 3;

// --- shortform --------------------------------------------------------------

/// Header of a shortform attribute fork.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AttrSfHdr {
    /// Total bytes used by the header and all entries.
    pub totsize: U16,
    /// Number of entries.
    pub count: u8,
    /// Padding, zero.
    pub padding: u8,
}
const _: () = assert!(size_of::<AttrSfHdr>() == 4);

/// Fixed part of a shortform attribute entry; name then value bytes follow.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AttrSfEntryHdr {
    /// Name length in bytes.
    pub namelen: u8,
    /// Value length in bytes.
    pub valuelen: u8,
    /// Namespace flags (`XFS_ATTR_ROOT` / `XFS_ATTR_SECURE` / ...).
    pub flags: u8,
}
const _: () = assert!(size_of::<AttrSfEntryHdr>() == 3);

/// Size of a shortform entry.
pub const fn attr_sf_entsize(namelen: usize, valuelen: usize) -> usize {
    3 + namelen + valuelen
}

/// A shortform attribute, borrowed from the fork bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrSfEntry<'a> {
    /// Namespace flags.
    pub flags: u8,
    /// Name bytes.
    pub name: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
    /// Encoded size of the entry.
    pub size: usize,
}

/// Parses the shortform entry at byte `pos` of the attr fork; `None` if it
/// runs past the slice or has an empty name.
pub fn parse_attr_sf_entry(fork: &[u8], pos: usize) -> Option<AttrSfEntry<'_>> {
    let h = fork.get(pos..pos.checked_add(3)?)?;
    let (nl, vl, flags) = (h[0] as usize, h[1] as usize, h[2]);
    if nl == 0 {
        return None;
    }
    let size = attr_sf_entsize(nl, vl);
    let e = fork.get(pos..pos.checked_add(size)?)?;
    Some(AttrSfEntry {
        flags,
        name: &e[3..3 + nl],
        value: &e[3 + nl..],
        size,
    })
}

/// Encodes a shortform entry at `pos`; returns its size, or `None` if it does
/// not fit, the name is empty, or a length exceeds 255.
pub fn write_attr_sf_entry(
    fork: &mut [u8],
    pos: usize,
    flags: u8,
    name: &[u8],
    value: &[u8],
) -> Option<usize> {
    if name.is_empty() || name.len() > 255 || value.len() > 255 {
        return None;
    }
    let size = attr_sf_entsize(name.len(), value.len());
    let e = fork.get_mut(pos..pos.checked_add(size)?)?;
    e[0] = name.len() as u8;
    e[1] = value.len() as u8;
    e[2] = flags;
    e[3..3 + name.len()].copy_from_slice(name);
    e[3 + name.len()..].copy_from_slice(value);
    Some(size)
}

// --- leaf blocks -----------------------------------------------------------

/// One free region of a leaf block.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct AttrLeafMap {
    /// Byte offset of the free region.
    pub base: U16,
    /// Length of the free region.
    pub size: U16,
}
const _: () = assert!(size_of::<AttrLeafMap>() == 4);

/// Header of a v3 attribute leaf block; [`AttrLeafEntry`] array follows, and
/// name/value entries grow down from the end of the block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Attr3LeafHdr {
    /// Common dabtree v3 prologue (magic [`XFS_ATTR3_LEAF_MAGIC`]).
    pub info: Da3Blkinfo,
    /// Number of entries.
    pub count: U16,
    /// Bytes used by name/value entries.
    pub usedbytes: U16,
    /// Offset of the lowest name/value entry (0 means 65536).
    pub firstused: U16,
    /// Nonzero if the block has gaps worth compacting.
    pub holes: u8,
    /// Padding, zero.
    pub pad1: u8,
    /// The largest free regions between the entry array and the names.
    pub freemap: [AttrLeafMap; XFS_ATTR_LEAF_MAPSIZE],
    /// Padding, zero.
    pub pad2: U32,
}
/// Size of [`Attr3LeafHdr`].
pub const XFS_ATTR3_LEAF_HDR_SIZE: usize = 80;
/// Byte offset of the CRC in a v3 attribute leaf block.
pub const XFS_ATTR3_LEAF_CRC_OFF: usize = crate::da::XFS_DA3_CRC_OFF;
/// Byte offset of the LSN in a v3 attribute leaf block.
pub const XFS_ATTR3_LEAF_LSN_OFF: usize = crate::da::XFS_DA3_LSN_OFF;
/// `firstused` value standing for a 64 KiB block.
pub const XFS_ATTR3_LEAF_NULLOFF: u16 = 0;
const _: () = assert!(size_of::<Attr3LeafHdr>() == XFS_ATTR3_LEAF_HDR_SIZE);
const _: () = assert!(offset_of!(Attr3LeafHdr, count) == 56);
const _: () = assert!(offset_of!(Attr3LeafHdr, freemap) == 64);

/// Index entry of a leaf block, sorted by hash.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct AttrLeafEntry {
    /// Hash of the name.
    pub hashval: U32,
    /// Byte offset of the name/value entry in the block.
    pub nameidx: U16,
    /// `XFS_ATTR_*` flags (LOCAL, namespace, INCOMPLETE).
    pub flags: u8,
    /// Padding, zero.
    pub pad2: u8,
}
const _: () = assert!(size_of::<AttrLeafEntry>() == 8);

/// Fixed part of a local name/value entry; name then value follow at byte 3.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AttrLeafNameLocal {
    /// Value length.
    pub valuelen: U16,
    /// Name length.
    pub namelen: u8,
}
const _: () = assert!(size_of::<AttrLeafNameLocal>() == 3);

/// Fixed part of a remote name entry; the name follows at byte 9.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AttrLeafNameRemote {
    /// First logical block (in the attr fork) holding the value.
    pub valueblk: U32,
    /// Value length in bytes.
    pub valuelen: U32,
    /// Name length.
    pub namelen: u8,
}
const _: () = assert!(size_of::<AttrLeafNameRemote>() == 9);

/// Bytes a local name/value entry occupies: 3 + name + value, rounded to 4.
pub const fn attr_leaf_entsize_local(namelen: usize, valuelen: usize) -> usize {
    (3 + namelen + valuelen + 3) & !3
}

/// Bytes a remote name entry occupies: the on-disk rule is 11 + name rounded
/// up to 4 (the historical struct size of 12 minus one, plus the name).
pub const fn attr_leaf_entsize_remote(namelen: usize) -> usize {
    (11 + namelen + 3) & !3
}

/// Largest local entry allowed in a leaf block of `blksize` bytes (3/4 of it).
pub const fn attr_leaf_entsize_local_max(blksize: usize) -> usize {
    (blksize >> 1) + (blksize >> 2)
}

// --- remote values -----------------------------------------------------------

/// Header at the start of every block of a remote attribute value.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Attr3RmtHdr {
    /// Magic, [`XFS_ATTR3_RMT_MAGIC`].
    pub rm_magic: U32,
    /// Byte offset within the value of the data in this block.
    pub rm_offset: U32,
    /// Bytes of value data in this block.
    pub rm_bytes: U32,
    /// CRC-32C of the block, little-endian.
    pub rm_crc: LeU32,
    /// Filesystem metadata UUID.
    pub rm_uuid: Uuid,
    /// Inode that owns the attribute.
    pub rm_owner: U64,
    /// Disk address (512-byte units) of this block.
    pub rm_blkno: U64,
    /// LSN of the last write of this block.
    pub rm_lsn: U64,
}
/// Size of [`Attr3RmtHdr`].
pub const XFS_ATTR3_RMT_HDR_SIZE: usize = 56;
/// Byte offset of `rm_crc`.
pub const XFS_ATTR3_RMT_CRC_OFF: usize = 12;
/// Byte offset of `rm_lsn`.
pub const XFS_ATTR3_RMT_LSN_OFF: usize = 48;
const _: () = assert!(size_of::<Attr3RmtHdr>() == XFS_ATTR3_RMT_HDR_SIZE);
const _: () = assert!(offset_of!(Attr3RmtHdr, rm_crc) == XFS_ATTR3_RMT_CRC_OFF);
const _: () = assert!(offset_of!(Attr3RmtHdr, rm_lsn) == XFS_ATTR3_RMT_LSN_OFF);

/// Value bytes carried by one remote block of `blksize` bytes.
pub const fn attr3_rmt_buf_space(blksize: usize) -> usize {
    blksize.saturating_sub(XFS_ATTR3_RMT_HDR_SIZE)
}

/// Blocks needed for a remote value of `valuelen` bytes.
pub const fn attr3_rmt_blocks(valuelen: usize, blksize: usize) -> usize {
    let per = attr3_rmt_buf_space(blksize);
    if per == 0 {
        0
    } else {
        valuelen.div_ceil(per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_of::<Attr3LeafHdr>(), 80);
        assert_eq!(size_of::<Attr3RmtHdr>(), 56);
        assert_eq!(attr_leaf_entsize_local(4, 5), 12);
        assert_eq!(attr_leaf_entsize_local(1, 0), 4);
        assert_eq!(attr_leaf_entsize_remote(1), 12);
        assert_eq!(attr_leaf_entsize_remote(2), 16);
        assert_eq!(attr3_rmt_blocks(65536, 4096), 17);
        assert_eq!(attr3_rmt_blocks(4040, 4096), 1);
        assert_eq!(&XFS_ATTR3_RMT_MAGIC.to_be_bytes(), b"XARM");
    }

    #[test]
    fn sf_round_trip() {
        let mut fork = [0u8; 32];
        let n = write_attr_sf_entry(&mut fork, 4, XFS_ATTR_SECURE, b"selinux", b"ctx");
        assert_eq!(n, Some(13));
        let e = parse_attr_sf_entry(&fork, 4);
        assert_eq!(
            e,
            Some(AttrSfEntry {
                flags: XFS_ATTR_SECURE,
                name: b"selinux",
                value: b"ctx",
                size: 13
            })
        );
        assert_eq!(parse_attr_sf_entry(&fork, 30), None);
        fork[20] = 200;
        assert_eq!(parse_attr_sf_entry(&fork, 20), None);
        assert_eq!(
            write_attr_sf_entry(&mut fork, 20, 0, b"abcdefghij", b""),
            None
        );
    }
}

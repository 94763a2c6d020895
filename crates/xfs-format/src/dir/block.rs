//! Directory block layouts: data/block headers, variable-size data entries
//! and free regions, the block tail, leaf blocks and free-index blocks.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::XFS_DIR2_DATA_ALIGN;
use crate::da::Da3Blkinfo;
use crate::types::Uuid;

/// Self-describing header that starts v3 data, block and free blocks.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir3BlkHdr {
    /// 32-bit magic (XDB3, XDD3 or XDF3).
    pub magic: U32,
    /// CRC-32C of the directory block, little-endian.
    pub crc: LeU32,
    /// Disk address (512-byte units) of the block.
    pub blkno: U64,
    /// LSN of the last logged change to the block.
    pub lsn: U64,
    /// Filesystem metadata UUID.
    pub uuid: Uuid,
    /// Directory inode that owns the block.
    pub owner: U64,
}
/// Size of [`Dir3BlkHdr`].
pub const XFS_DIR3_BLK_HDR_SIZE: usize = 48;
/// Byte offset of the CRC in XDB3/XDD3/XDF3 blocks.
pub const XFS_DIR3_DATA_CRC_OFF: usize = 4;
/// Byte offset of the CRC in free-index blocks.
pub const XFS_DIR3_FREE_CRC_OFF: usize = 4;
/// Byte offset of the LSN in XDB3/XDD3/XDF3 blocks.
pub const XFS_DIR3_DATA_LSN_OFF: usize = 16;
/// Byte offset of the CRC in LEAF1/LEAFN blocks.
pub const XFS_DIR3_LEAF_CRC_OFF: usize = crate::da::XFS_DA3_CRC_OFF;
/// Byte offset of the LSN in LEAF1/LEAFN blocks.
pub const XFS_DIR3_LEAF_LSN_OFF: usize = crate::da::XFS_DA3_LSN_OFF;
const _: () = assert!(size_of::<Dir3BlkHdr>() == XFS_DIR3_BLK_HDR_SIZE);
const _: () = assert!(offset_of!(Dir3BlkHdr, crc) == XFS_DIR3_DATA_CRC_OFF);
const _: () = assert!(offset_of!(Dir3BlkHdr, lsn) == XFS_DIR3_DATA_LSN_OFF);

/// Number of best-free slots in a data block header.
pub const XFS_DIR2_DATA_FD_COUNT: usize = 3;

/// One best-free slot: a free region of a data block.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Dir2DataFree {
    /// Byte offset of the free region in the block (0 if slot unused).
    pub offset: U16,
    /// Length of the free region (0 if slot unused).
    pub length: U16,
}
const _: () = assert!(size_of::<Dir2DataFree>() == 4);

/// Header of a v3 data block (XDD3) or single-block directory (XDB3).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir3DataHdr {
    /// Self-describing header.
    pub hdr: Dir3BlkHdr,
    /// The three largest free regions, biggest first.
    pub best_free: [Dir2DataFree; XFS_DIR2_DATA_FD_COUNT],
    /// Padding, zero.
    pub pad: U32,
}
/// Size of [`Dir3DataHdr`]; the first entry starts here.
pub const XFS_DIR3_DATA_HDR_SIZE: usize = 64;
const _: () = assert!(size_of::<Dir3DataHdr>() == XFS_DIR3_DATA_HDR_SIZE);

/// Value of the first 16 bits of an unused (free) region in a data block.
pub const XFS_DIR2_DATA_FREE_TAG: u16 = 0xffff;
/// Smallest unused-region size (freetag, length, tag, rounded to 8).
pub const XFS_DIR2_DATA_UNUSED_MIN: usize = 8;

/// Size of a data entry with a name of `namelen` bytes: inode (8), name
/// length (1), name, file type (1, if the FTYPE feature is on), tag (2),
/// rounded up to 8.
pub const fn data_entsize(namelen: usize, has_ftype: bool) -> usize {
    let raw = 8 + 1 + namelen + has_ftype as usize + 2;
    (raw + XFS_DIR2_DATA_ALIGN - 1) & !(XFS_DIR2_DATA_ALIGN - 1)
}

/// Offset, within the data space, of the first entry after "." and "..";
/// shortform entries start their offsets here.
pub const fn data_first_offset(has_ftype: bool) -> usize {
    XFS_DIR3_DATA_HDR_SIZE + data_entsize(1, has_ftype) + data_entsize(2, has_ftype)
}

/// A live entry in a data block, borrowed from the block bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataEntry<'a> {
    /// Inode number the entry points to.
    pub inumber: u64,
    /// Entry name (never empty).
    pub name: &'a [u8],
    /// File type byte, when the FTYPE feature is on.
    pub ftype: Option<u8>,
    /// Stored starting offset of the entry (should equal its position).
    pub tag: u16,
    /// Bytes the entry occupies (multiple of 8).
    pub size: usize,
}

/// A free region in a data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataUnused {
    /// Length of the free region (multiple of 8).
    pub length: u16,
    /// Stored starting offset in the region's last two bytes.
    pub tag: u16,
}

/// What lies at a given offset of a data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataItem<'a> {
    /// A live entry.
    Entry(DataEntry<'a>),
    /// A free region.
    Unused(DataUnused),
}

fn be16_at(buf: &[u8], off: usize) -> Option<u16> {
    let b = buf.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Parses the entry or free region at byte `off` of `block` (whose end is
/// `block.len()`; callers pass only the area before leaf entries/tail).
///
/// Returns `None` if anything would run past the slice, the region is
/// misaligned, a free region is shorter than 8 bytes, or a name is empty.
pub fn parse_data_item(block: &[u8], off: usize, has_ftype: bool) -> Option<DataItem<'_>> {
    if !off.is_multiple_of(XFS_DIR2_DATA_ALIGN) {
        return None;
    }
    if be16_at(block, off)? == XFS_DIR2_DATA_FREE_TAG {
        let length = be16_at(block, off + 2)?;
        let len = length as usize;
        if len < XFS_DIR2_DATA_UNUSED_MIN || !len.is_multiple_of(XFS_DIR2_DATA_ALIGN) {
            return None;
        }
        let tag = be16_at(block, off.checked_add(len)? - 2)?;
        return Some(DataItem::Unused(DataUnused { length, tag }));
    }
    let ino = block.get(off..off + 8)?;
    let inumber = u64::from_be_bytes(ino.try_into().ok()?);
    let namelen = *block.get(off + 8)? as usize;
    if namelen == 0 {
        return None;
    }
    let size = data_entsize(namelen, has_ftype);
    let ent = block.get(off..off.checked_add(size)?)?;
    let name = &ent[9..9 + namelen];
    let ftype = if has_ftype {
        Some(ent[9 + namelen])
    } else {
        None
    };
    let tag = u16::from_be_bytes([ent[size - 2], ent[size - 1]]);
    Some(DataItem::Entry(DataEntry {
        inumber,
        name,
        ftype,
        tag,
        size,
    }))
}

/// Writes a live entry at `off` (tag = `off`); returns its size, or `None`
/// if it does not fit, the name is empty/too long, or `off` is misaligned.
pub fn write_data_entry(
    block: &mut [u8],
    off: usize,
    inumber: u64,
    name: &[u8],
    ftype: Option<u8>,
) -> Option<usize> {
    if name.is_empty()
        || name.len() > super::XFS_NAME_MAXLEN
        || !off.is_multiple_of(XFS_DIR2_DATA_ALIGN)
    {
        return None;
    }
    let tag = u16::try_from(off).ok()?;
    let size = data_entsize(name.len(), ftype.is_some());
    let ent = block.get_mut(off..off.checked_add(size)?)?;
    ent.fill(0);
    ent[..8].copy_from_slice(&inumber.to_be_bytes());
    ent[8] = name.len() as u8;
    ent[9..9 + name.len()].copy_from_slice(name);
    if let Some(ft) = ftype {
        ent[9 + name.len()] = ft;
    }
    ent[size - 2..].copy_from_slice(&tag.to_be_bytes());
    Some(size)
}

/// Marks `len` bytes at `off` as a free region (freetag, length, tag).
/// Returns false if the region is misaligned, too small or out of bounds.
pub fn write_data_unused(block: &mut [u8], off: usize, len: usize) -> bool {
    let Ok(tag) = u16::try_from(off) else {
        return false;
    };
    let Ok(len16) = u16::try_from(len) else {
        return false;
    };
    if len < XFS_DIR2_DATA_UNUSED_MIN
        || !len.is_multiple_of(XFS_DIR2_DATA_ALIGN)
        || !off.is_multiple_of(XFS_DIR2_DATA_ALIGN)
    {
        return false;
    }
    let Some(r) = off.checked_add(len).and_then(|end| block.get_mut(off..end)) else {
        return false;
    };
    r[..2].copy_from_slice(&XFS_DIR2_DATA_FREE_TAG.to_be_bytes());
    r[2..4].copy_from_slice(&len16.to_be_bytes());
    r[len - 2..].copy_from_slice(&tag.to_be_bytes());
    true
}

/// Tail of a single-block directory: the last 8 bytes of the block. The
/// leaf entries sit immediately before it.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir2BlockTail {
    /// Number of leaf entries (including stale ones).
    pub count: U32,
    /// Number of stale (deleted) leaf entries.
    pub stale: U32,
}
const _: () = assert!(size_of::<Dir2BlockTail>() == 8);

/// Header of a v3 leaf block (LEAF1 or LEAFN); leaf entries follow.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir3LeafHdr {
    /// Common dabtree v3 prologue.
    pub info: Da3Blkinfo,
    /// Number of leaf entries (including stale ones).
    pub count: U16,
    /// Number of stale leaf entries.
    pub stale: U16,
    /// Padding, zero.
    pub pad: U32,
}
/// Size of [`Dir3LeafHdr`].
pub const XFS_DIR3_LEAF_HDR_SIZE: usize = 64;
const _: () = assert!(size_of::<Dir3LeafHdr>() == XFS_DIR3_LEAF_HDR_SIZE);

/// A leaf entry: hash of a name and where its data entry lives.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct Dir2LeafEntry {
    /// Hash of the entry's name.
    pub hashval: U32,
    /// Byte offset / 8 of the data entry in the data space; 0 when stale.
    pub address: U32,
}
const _: () = assert!(size_of::<Dir2LeafEntry>() == 8);

/// Tail of a LEAF1 block (last 4 bytes); the bests array of `bestcount`
/// big-endian u16 values sits immediately before it.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir2LeafTail {
    /// Number of data blocks tracked in the bests array.
    pub bestcount: U32,
}
const _: () = assert!(size_of::<Dir2LeafTail>() == 4);

/// Leaf entries that fit in a LEAFN block of `dirblksize` bytes.
pub const fn leaf_max_ents(dirblksize: usize) -> usize {
    dirblksize.saturating_sub(XFS_DIR3_LEAF_HDR_SIZE) / size_of::<Dir2LeafEntry>()
}

/// Header of a v3 free-index block; an array of big-endian u16 "best free"
/// lengths follows (0xffff for data blocks that do not exist).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dir3FreeHdr {
    /// Self-describing header (magic XDF3).
    pub hdr: Dir3BlkHdr,
    /// Data block number described by the first bests slot.
    pub firstdb: U32,
    /// Number of valid bests slots.
    pub nvalid: U32,
    /// Number of slots naming an existing data block.
    pub nused: U32,
    /// Padding, zero.
    pub pad: U32,
}
/// Size of [`Dir3FreeHdr`].
pub const XFS_DIR3_FREE_HDR_SIZE: usize = 64;
const _: () = assert!(size_of::<Dir3FreeHdr>() == XFS_DIR3_FREE_HDR_SIZE);

/// Bests slot value meaning "no such data block".
pub const NULLDATAOFF: u16 = 0xffff;

/// Bests slots per free-index block of `dirblksize` bytes.
pub const fn free_max_bests(dirblksize: usize) -> usize {
    dirblksize.saturating_sub(XFS_DIR3_FREE_HDR_SIZE) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_of::<Dir3DataHdr>(), 64);
        assert_eq!(size_of::<Dir3LeafHdr>(), 64);
        assert_eq!(size_of::<Dir3FreeHdr>(), 64);
        assert_eq!(data_entsize(1, true), 16);
        assert_eq!(data_entsize(2, true), 16);
        assert_eq!(data_entsize(3, true), 16);
        assert_eq!(data_entsize(4, true), 16);
        assert_eq!(data_entsize(5, true), 24);
        assert_eq!(data_entsize(5, false), 16);
        assert_eq!(data_first_offset(true), 96);
        assert_eq!(leaf_max_ents(4096), 504);
        assert_eq!(free_max_bests(4096), 2016);
    }

    #[test]
    fn entry_round_trip() {
        let mut blk = vec![0u8; 4096];
        let n = write_data_entry(&mut blk, 64, 133, b"hello", Some(1));
        assert_eq!(n, Some(24));
        assert!(write_data_unused(&mut blk, 88, 4096 - 88 - 8));
        match parse_data_item(&blk, 64, true) {
            Some(DataItem::Entry(e)) => {
                assert_eq!(
                    (e.inumber, e.name, e.ftype, e.tag, e.size),
                    (133, &b"hello"[..], Some(1), 64, 24)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            parse_data_item(&blk, 88, true),
            Some(DataItem::Unused(DataUnused {
                length: 4000,
                tag: 88
            }))
        );
    }

    #[test]
    fn parse_rejects_bad_input() {
        let mut blk = vec![0u8; 64];
        assert_eq!(parse_data_item(&blk, 3, true), None);
        // Empty name.
        assert_eq!(parse_data_item(&blk, 0, true), None);
        // Name runs off the end.
        blk[8] = 200;
        assert_eq!(parse_data_item(&blk, 0, true), None);
        // Free region longer than the block.
        blk[0..4].copy_from_slice(&[0xff, 0xff, 0x01, 0x00]);
        assert_eq!(parse_data_item(&blk, 0, true), None);
        // Free region shorter than the minimum.
        blk[0..4].copy_from_slice(&[0xff, 0xff, 0x00, 0x04]);
        assert_eq!(parse_data_item(&blk, 0, true), None);
        assert!(!write_data_unused(&mut blk, 0, 4));
        assert_eq!(
            write_data_entry(&mut blk, 48, 1, b"toolongforthis", None),
            None
        );
        assert_eq!(write_data_entry(&mut blk, 0, 1, b"", None), None);
    }
}

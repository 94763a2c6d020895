//! The v3 on-disk inode core (`struct xfs_dinode`) and its flag bits.
//!
//! An inode slot of `sb_inodesize` bytes holds this 176-byte core followed by
//! the "literal area": the data fork, and (when `di_forkoff` is nonzero) the
//! attribute fork starting `di_forkoff * 8` bytes into the literal area.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::{decode_timestamp, encode_timestamp, Uuid};

/// Inode magic number, "IN".
pub const XFS_DINODE_MAGIC: u16 = 0x494e;
/// Inode core version used by v5 filesystems.
pub const XFS_DINODE_VERSION_3: u8 = 3;

/// Smallest inode size, log2.
pub const XFS_DINODE_MIN_LOG: u8 = 8;
/// Largest inode size, log2.
pub const XFS_DINODE_MAX_LOG: u8 = 11;

/// Largest link count the kernel will record (2^31 - 1).
pub const XFS_MAXLINK: u32 = (1 << 31) - 1;

/// Data fork extent limit without NREXT64.
pub const XFS_MAX_EXTCNT_DATA_FORK_SMALL: u64 = (1 << 31) - 1;
/// Attr fork extent limit without NREXT64.
pub const XFS_MAX_EXTCNT_ATTR_FORK_SMALL: u64 = (1 << 15) - 1;
/// Data fork extent limit with NREXT64.
pub const XFS_MAX_EXTCNT_DATA_FORK_LARGE: u64 = (1 << 48) - 1;
/// Attr fork extent limit with NREXT64.
pub const XFS_MAX_EXTCNT_ATTR_FORK_LARGE: u64 = (1 << 32) - 1;

/// The v3 inode core.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dinode {
    /// Magic number, must equal [`XFS_DINODE_MAGIC`].
    pub di_magic: U16,
    /// File type and permission bits (as in `st_mode`).
    pub di_mode: U16,
    /// Core version; 3 on v5 filesystems.
    pub di_version: u8,
    /// Layout of the data fork (`XFS_DINODE_FMT_*`).
    pub di_format: u8,
    /// Old 16-bit link count, zero on v3 inodes; on metadata directory
    /// filesystems an inode with [`XFS_DIFLAG2_METADATA`] keeps its
    /// metadata file type here (`di_metatype`, [`XFS_METAFILE_DIR`]...).
    pub di_onlink: U16,
    /// Owner user id.
    pub di_uid: U32,
    /// Owner group id.
    pub di_gid: U32,
    /// Number of hard links.
    pub di_nlink: U32,
    /// Low 16 bits of the project id.
    pub di_projid_lo: U16,
    /// High 16 bits of the project id.
    pub di_projid_hi: U16,
    /// Data fork extent count when NREXT64 is set on the inode; else zero padding.
    pub di_big_nextents: U64,
    /// Last access time (raw, see [`crate::types::decode_timestamp`]).
    pub di_atime: U64,
    /// Last data modification time (raw).
    pub di_mtime: U64,
    /// Last status change time (raw).
    pub di_ctime: U64,
    /// File size in bytes.
    pub di_size: U64,
    /// Blocks used by both forks, including bmbt blocks.
    pub di_nblocks: U64,
    /// Extent size allocation hint in blocks.
    pub di_extsize: U32,
    /// Data fork extent count (small counters), or attr fork extent count
    /// (`di_big_anextents`) when NREXT64 is set.
    pub di_nextents: U32,
    /// Attr fork extent count (small counters); padding with NREXT64.
    pub di_anextents: U16,
    /// Attr fork start within the literal area, in 8-byte units; 0 = no attr fork.
    pub di_forkoff: u8,
    /// Layout of the attribute fork (`XFS_DINODE_FMT_*`).
    pub di_aformat: u8,
    /// Obsolete DMAPI event mask, zero.
    pub di_dmevmask: U32,
    /// Obsolete DMAPI state, zero.
    pub di_dmstate: U16,
    /// Inode flags (`XFS_DIFLAG_*`).
    pub di_flags: U16,
    /// Generation number, changed each time the slot is reused.
    pub di_gen: U32,
    /// Next AG inode in this AGI unlinked bucket chain, or null.
    pub di_next_unlinked: U32,
    /// CRC-32C of the whole inode slot, little-endian.
    pub di_crc: LeU32,
    /// Count of attribute changes (i_version).
    pub di_changecount: U64,
    /// LSN of the last logged change to this inode.
    pub di_lsn: U64,
    /// Extended inode flags (`XFS_DIFLAG2_*`).
    pub di_flags2: U64,
    /// Copy-on-write extent size hint in blocks.
    pub di_cowextsize: U32,
    /// Reserved, zero.
    pub di_pad2: [u8; 12],
    /// Creation time (raw).
    pub di_crtime: U64,
    /// This inode's own number, for self-identification.
    pub di_ino: U64,
    /// Filesystem metadata UUID.
    pub di_uuid: Uuid,
}

/// Size of the v3 inode core; the literal area begins here.
pub const XFS_DINODE_SIZE: usize = 176;
/// Byte offset where the data fork begins in an inode slot.
pub const LITERAL_OFFSET: usize = XFS_DINODE_SIZE;
/// Byte offset of `di_crc`.
pub const XFS_DINODE_CRC_OFF: usize = 100;
/// Byte offset of `di_lsn`.
pub const XFS_DINODE_LSN_OFF: usize = 112;
/// Byte offset of `di_next_unlinked` (logged separately from the core).
pub const XFS_DINODE_NEXT_UNLINKED_OFF: usize = 96;

const _: () = assert!(size_of::<Dinode>() == XFS_DINODE_SIZE);
const _: () = assert!(offset_of!(Dinode, di_crc) == XFS_DINODE_CRC_OFF);
const _: () = assert!(offset_of!(Dinode, di_lsn) == XFS_DINODE_LSN_OFF);
const _: () = assert!(offset_of!(Dinode, di_next_unlinked) == XFS_DINODE_NEXT_UNLINKED_OFF);
const _: () = assert!(offset_of!(Dinode, di_big_nextents) == 24);
const _: () = assert!(offset_of!(Dinode, di_atime) == 32);
const _: () = assert!(offset_of!(Dinode, di_size) == 56);
const _: () = assert!(offset_of!(Dinode, di_nextents) == 76);
const _: () = assert!(offset_of!(Dinode, di_anextents) == 80);
const _: () = assert!(offset_of!(Dinode, di_forkoff) == 82);
const _: () = assert!(offset_of!(Dinode, di_flags) == 90);
const _: () = assert!(offset_of!(Dinode, di_flags2) == 120);
const _: () = assert!(offset_of!(Dinode, di_crtime) == 144);
const _: () = assert!(offset_of!(Dinode, di_ino) == 152);
const _: () = assert!(offset_of!(Dinode, di_uuid) == 160);

/// The four timestamps of an inode, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InodeTime {
    /// `di_atime`.
    Atime,
    /// `di_mtime`.
    Mtime,
    /// `di_ctime`.
    Ctime,
    /// `di_crtime`.
    Crtime,
}

impl Dinode {
    /// True when the inode uses 64-bit nanosecond timestamps.
    pub fn has_bigtime(&self) -> bool {
        self.di_version >= 3 && self.di_flags2.get() & XFS_DIFLAG2_BIGTIME != 0
    }

    /// True when the inode uses the large extent counters.
    pub fn has_nrext64(&self) -> bool {
        self.di_version >= 3 && self.di_flags2.get() & XFS_DIFLAG2_NREXT64 != 0
    }

    /// Data fork extent count, read from the field the inode's layout uses.
    pub fn nextents(&self) -> u64 {
        if self.has_nrext64() {
            self.di_big_nextents.get()
        } else {
            self.di_nextents.get() as u64
        }
    }

    /// Attribute fork extent count, read from the field the inode's layout uses.
    pub fn anextents(&self) -> u32 {
        if self.has_nrext64() {
            self.di_nextents.get()
        } else {
            self.di_anextents.get() as u32
        }
    }

    /// Stores the data fork extent count in the field the layout uses.
    /// With small counters the value is truncated to 32 bits; callers check
    /// against [`XFS_MAX_EXTCNT_DATA_FORK_SMALL`] first.
    pub fn set_nextents(&mut self, n: u64) {
        if self.has_nrext64() {
            self.di_big_nextents.set(n);
        } else {
            self.di_nextents.set(n as u32);
        }
    }

    /// Stores the attribute fork extent count in the field the layout uses
    /// (truncated to 16 bits with small counters).
    pub fn set_anextents(&mut self, n: u32) {
        if self.has_nrext64() {
            self.di_nextents.set(n);
        } else {
            self.di_anextents.set(n as u16);
        }
    }

    /// The 32-bit project id assembled from its two halves.
    pub fn projid(&self) -> u32 {
        ((self.di_projid_hi.get() as u32) << 16) | self.di_projid_lo.get() as u32
    }

    /// Splits a 32-bit project id into its two halves.
    pub fn set_projid(&mut self, id: u32) {
        self.di_projid_lo.set(id as u16);
        self.di_projid_hi.set((id >> 16) as u16);
    }

    fn time_field(&mut self, which: InodeTime) -> &mut U64 {
        match which {
            InodeTime::Atime => &mut self.di_atime,
            InodeTime::Mtime => &mut self.di_mtime,
            InodeTime::Ctime => &mut self.di_ctime,
            InodeTime::Crtime => &mut self.di_crtime,
        }
    }

    /// Decodes one timestamp into Unix (seconds, nanoseconds).
    pub fn time(&self, which: InodeTime) -> (i64, u32) {
        let raw = match which {
            InodeTime::Atime => self.di_atime.get(),
            InodeTime::Mtime => self.di_mtime.get(),
            InodeTime::Ctime => self.di_ctime.get(),
            InodeTime::Crtime => self.di_crtime.get(),
        };
        decode_timestamp(raw, self.has_bigtime())
    }

    /// Encodes one timestamp in the inode's format (clamped to its range).
    pub fn set_time(&mut self, which: InodeTime, secs: i64, nsec: u32) {
        let raw = encode_timestamp(secs, nsec, self.has_bigtime());
        self.time_field(which).set(raw);
    }

    /// Byte offset of the attribute fork in the inode slot, if there is one.
    pub fn attr_fork_offset(&self) -> Option<usize> {
        match self.di_forkoff {
            0 => None,
            f => Some(LITERAL_OFFSET + f as usize * 8),
        }
    }

    /// Size in bytes of the data fork for an inode slot of `inodesize` bytes.
    pub fn data_fork_size(&self, inodesize: usize) -> usize {
        match self.di_forkoff {
            0 => inodesize.saturating_sub(LITERAL_OFFSET),
            f => f as usize * 8,
        }
    }

    /// Size in bytes of the attribute fork for an inode slot of `inodesize` bytes.
    pub fn attr_fork_size(&self, inodesize: usize) -> usize {
        match self.di_forkoff {
            0 => 0,
            f => inodesize.saturating_sub(LITERAL_OFFSET + f as usize * 8),
        }
    }
}

/// Size in bytes of the literal area (both forks) for an inode size.
pub const fn litino(inodesize: usize) -> usize {
    inodesize.saturating_sub(XFS_DINODE_SIZE)
}

// --- device numbers ------------------------------------------------------

/// Bytes used by a device number at the start of a DEV-format data fork.
pub const XFS_DEV_SIZE: usize = 4;
/// Bits of the minor number in an on-disk device number.
pub const XFS_DEV_BITSMINOR: u32 = 18;
/// Largest minor number an on-disk device number can hold.
pub const XFS_DEV_MAXMIN: u32 = (1 << XFS_DEV_BITSMINOR) - 1;
/// Largest major number an on-disk device number can hold.
pub const XFS_DEV_MAXMAJ: u32 = (1 << 14) - 1;

/// Packs major/minor into the 32-bit on-disk device number (stored big-endian
/// as the first 4 bytes of the data fork). Out-of-range parts are masked.
pub const fn encode_dev(major: u32, minor: u32) -> u32 {
    ((major & XFS_DEV_MAXMAJ) << XFS_DEV_BITSMINOR) | (minor & XFS_DEV_MAXMIN)
}

/// Splits an on-disk device number into (major, minor).
pub const fn decode_dev(dev: u32) -> (u32, u32) {
    (dev >> XFS_DEV_BITSMINOR, dev & XFS_DEV_MAXMIN)
}

/// Reads the big-endian device number at the start of a data fork slice.
pub fn read_rdev(data_fork: &[u8]) -> Option<u32> {
    let b = data_fork.get(..XFS_DEV_SIZE)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

// --- di_flags --------------------------------------------------------------

/// di_flags: data lives on the realtime device.
pub const XFS_DIFLAG_REALTIME: u16 = 1 << 0;
/// di_flags: space was preallocated.
pub const XFS_DIFLAG_PREALLOC: u16 = 1 << 1;
/// di_flags: realtime bitmap uses the newer format.
pub const XFS_DIFLAG_NEWRTBM: u16 = 1 << 2;
/// di_flags: file cannot be changed.
pub const XFS_DIFLAG_IMMUTABLE: u16 = 1 << 3;
/// di_flags: file may only be appended to.
pub const XFS_DIFLAG_APPEND: u16 = 1 << 4;
/// di_flags: writes are synchronous.
pub const XFS_DIFLAG_SYNC: u16 = 1 << 5;
/// di_flags: access time is not updated.
pub const XFS_DIFLAG_NOATIME: u16 = 1 << 6;
/// di_flags: skip in dumps.
pub const XFS_DIFLAG_NODUMP: u16 = 1 << 7;
/// di_flags: new files in this directory get the realtime flag.
pub const XFS_DIFLAG_RTINHERIT: u16 = 1 << 8;
/// di_flags: new files in this directory inherit its project id.
pub const XFS_DIFLAG_PROJINHERIT: u16 = 1 << 9;
/// di_flags: symlinks may not be created in this directory.
pub const XFS_DIFLAG_NOSYMLINKS: u16 = 1 << 10;
/// di_flags: `di_extsize` is an allocation hint.
pub const XFS_DIFLAG_EXTSIZE: u16 = 1 << 11;
/// di_flags: new files inherit this directory's extent size hint.
pub const XFS_DIFLAG_EXTSZINHERIT: u16 = 1 << 12;
/// di_flags: do not defragment.
pub const XFS_DIFLAG_NODEFRAG: u16 = 1 << 13;
/// di_flags: use the filestream allocator.
pub const XFS_DIFLAG_FILESTREAM: u16 = 1 << 14;
/// All defined di_flags bits.
pub const XFS_DIFLAG_ANY: u16 = 0x7fff;

/// di_flags2: use direct access (DAX).
pub const XFS_DIFLAG2_DAX: u64 = 1 << 0;
/// di_flags2: blocks may be shared with other files.
pub const XFS_DIFLAG2_REFLINK: u64 = 1 << 1;
/// di_flags2: `di_cowextsize` is a copy-on-write allocation hint.
pub const XFS_DIFLAG2_COWEXTSIZE: u64 = 1 << 2;
/// di_flags2: timestamps use the bigtime encoding.
pub const XFS_DIFLAG2_BIGTIME: u64 = 1 << 3;
/// di_flags2: extent counters use the large layout.
pub const XFS_DIFLAG2_NREXT64: u64 = 1 << 4;
/// di_flags2: the inode is filesystem metadata in the metadata directory
/// tree (metadir filesystems only; hidden from users).
pub const XFS_DIFLAG2_METADATA: u64 = 1 << 5;
/// All di_flags2 bits defined by the 6.13 format.
pub const XFS_DIFLAG2_ANY: u64 = 0x3f;

// --- di_metatype (the di_onlink slot of a metadata inode) -------------------

/// Metadata file type: not known.
pub const XFS_METAFILE_UNKNOWN: u16 = 0;
/// Metadata file type: a directory of the metadata tree.
pub const XFS_METAFILE_DIR: u16 = 1;
/// Metadata file type: user quota file.
pub const XFS_METAFILE_USRQUOTA: u16 = 2;
/// Metadata file type: group quota file.
pub const XFS_METAFILE_GRPQUOTA: u16 = 3;
/// Metadata file type: project quota file.
pub const XFS_METAFILE_PRJQUOTA: u16 = 4;
/// Metadata file type: realtime bitmap of a group.
pub const XFS_METAFILE_RTBITMAP: u16 = 5;
/// Metadata file type: realtime summary of a group.
pub const XFS_METAFILE_RTSUMMARY: u16 = 6;
/// Metadata file type: realtime reverse mapping btree of a group.
pub const XFS_METAFILE_RTRMAP: u16 = 7;
/// Metadata file type: realtime reference count btree of a group.
pub const XFS_METAFILE_RTREFCOUNT: u16 = 8;
/// Metadata file types at or past this value are invalid.
pub const XFS_METAFILE_MAX: u16 = 9;

/// di_flags every metadata file carries.
pub const XFS_METAFILE_DIFLAGS: u16 = XFS_DIFLAG_IMMUTABLE
    | XFS_DIFLAG_SYNC
    | XFS_DIFLAG_NOATIME
    | XFS_DIFLAG_NODUMP
    | XFS_DIFLAG_NODEFRAG;
/// di_flags every metadata directory carries.
pub const XFS_METADIR_DIFLAGS: u16 = XFS_METAFILE_DIFLAGS | XFS_DIFLAG_NOSYMLINKS;

/// Number of unlinked-list hash buckets in the AGI (re-exported for inode code).
pub const XFS_AGI_UNLINKED_BUCKETS: usize = crate::ag::XFS_AGI_UNLINKED_BUCKETS;

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    fn v3() -> Dinode {
        let mut d = Dinode::new_zeroed();
        d.di_magic.set(XFS_DINODE_MAGIC);
        d.di_version = 3;
        d
    }

    #[test]
    fn layout() {
        assert_eq!(size_of::<Dinode>(), 176);
        assert_eq!(offset_of!(Dinode, di_crc), 100);
        assert_eq!(offset_of!(Dinode, di_cowextsize), 128);
    }

    #[test]
    fn extent_counters_follow_nrext64() {
        let mut d = v3();
        d.set_nextents(7);
        d.set_anextents(3);
        assert_eq!((d.nextents(), d.anextents()), (7, 3));
        assert_eq!(d.di_nextents.get(), 7);
        assert_eq!(d.di_big_nextents.get(), 0);

        let mut d = v3();
        d.di_flags2.set(XFS_DIFLAG2_NREXT64);
        d.set_nextents(1 << 40);
        d.set_anextents(70_000);
        assert_eq!((d.nextents(), d.anextents()), (1 << 40, 70_000));
        assert_eq!(d.di_nextents.get(), 70_000);
        assert_eq!(d.di_anextents.get(), 0);
    }

    #[test]
    fn projid_and_times() {
        let mut d = v3();
        d.set_projid(0x0012_3456);
        assert_eq!((d.di_projid_hi.get(), d.di_projid_lo.get()), (0x12, 0x3456));
        assert_eq!(d.projid(), 0x0012_3456);
        d.set_time(InodeTime::Mtime, -100, 5);
        assert_eq!(d.time(InodeTime::Mtime), (-100, 5));
        d.di_flags2.set(XFS_DIFLAG2_BIGTIME);
        d.set_time(InodeTime::Crtime, 5_000_000_000, 9);
        assert_eq!(d.time(InodeTime::Crtime), (5_000_000_000, 9));
    }

    #[test]
    fn forks_and_dev() {
        let mut d = v3();
        assert_eq!(d.data_fork_size(512), 336);
        assert_eq!(d.attr_fork_offset(), None);
        d.di_forkoff = 24;
        assert_eq!(d.attr_fork_offset(), Some(176 + 192));
        assert_eq!((d.data_fork_size(512), d.attr_fork_size(512)), (192, 144));
        assert_eq!(decode_dev(encode_dev(8, 17)), (8, 17));
        assert_eq!(encode_dev(1, 3), (1 << 18) | 3);
        assert_eq!(read_rdev(&[0, 4, 0, 3]), Some((1 << 18) | 3));
        assert_eq!(read_rdev(&[0, 4]), None);
    }

    #[test]
    fn crc_round_trip() {
        let mut slot = [0u8; 512];
        slot[..176].copy_from_slice(v3().as_bytes());
        crate::crc::stamp(&mut slot, XFS_DINODE_CRC_OFF);
        assert!(crate::crc::verify(&slot, XFS_DINODE_CRC_OFF));
        slot[300] = 1;
        assert!(!crate::crc::verify(&slot, XFS_DINODE_CRC_OFF));
    }
}

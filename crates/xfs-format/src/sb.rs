//! The superblock (`struct xfs_dsb`): sector 0 of every allocation group.
//!
//! Only the copy in AG 0 is authoritative; the others are backups refreshed
//! by growfs and repair.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Superblock magic number, "XFSB".
pub const XFS_SB_MAGIC: u32 = 0x5846_5342;

/// Maximum length of the filesystem label (no terminating NUL on disk).
pub const XFSLABEL_MAX: usize = 12;

/// On-disk superblock, version 5 layout.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Dsb {
    /// Magic number, must equal [`XFS_SB_MAGIC`].
    pub sb_magicnum: U32,
    /// Filesystem block size in bytes.
    pub sb_blocksize: U32,
    /// Total blocks on the data device.
    pub sb_dblocks: U64,
    /// Total blocks on the realtime device.
    pub sb_rblocks: U64,
    /// Number of realtime extents.
    pub sb_rextents: U64,
    /// UUID shown to users (may differ from the metadata UUID).
    pub sb_uuid: Uuid,
    /// First block of the internal log (AG-encoded fs block), 0 if external.
    pub sb_logstart: U64,
    /// Inode number of the root directory.
    pub sb_rootino: U64,
    /// Inode number of the realtime bitmap file.
    pub sb_rbmino: U64,
    /// Inode number of the realtime summary file.
    pub sb_rsumino: U64,
    /// Realtime extent size in blocks.
    pub sb_rextsize: U32,
    /// Blocks per allocation group (the last AG may be shorter).
    pub sb_agblocks: U32,
    /// Number of allocation groups.
    pub sb_agcount: U32,
    /// Blocks used by the realtime bitmap.
    pub sb_rbmblocks: U32,
    /// Blocks in the log.
    pub sb_logblocks: U32,
    /// Version number in the low nibble plus feature bits above it.
    pub sb_versionnum: U16,
    /// Sector size of the data device in bytes.
    pub sb_sectsize: U16,
    /// Inode size in bytes.
    pub sb_inodesize: U16,
    /// Inodes per filesystem block.
    pub sb_inopblock: U16,
    /// Filesystem label, NUL-padded.
    pub sb_fname: [u8; XFSLABEL_MAX],
    /// log2 of the block size.
    pub sb_blocklog: u8,
    /// log2 of the sector size.
    pub sb_sectlog: u8,
    /// log2 of the inode size.
    pub sb_inodelog: u8,
    /// log2 of inodes per block.
    pub sb_inopblog: u8,
    /// log2 of blocks per AG, rounded up; AG-encoded numbers use this width.
    pub sb_agblklog: u8,
    /// log2 of the realtime extent count.
    pub sb_rextslog: u8,
    /// Nonzero while mkfs is still writing the filesystem.
    pub sb_inprogress: u8,
    /// Maximum percentage of space that may hold inodes.
    pub sb_imax_pct: u8,
    /// Count of allocated inodes (summary counter).
    pub sb_icount: U64,
    /// Count of free inodes among the allocated ones (summary counter).
    pub sb_ifree: U64,
    /// Count of free data blocks (summary counter).
    pub sb_fdblocks: U64,
    /// Count of free realtime extents (summary counter).
    pub sb_frextents: U64,
    /// Inode of the user quota file, or null.
    pub sb_uquotino: U64,
    /// Inode of the group quota file, or null.
    pub sb_gquotino: U64,
    /// Quota accounting/enforcement flags.
    pub sb_qflags: U16,
    /// Miscellaneous flags (read-only bit).
    pub sb_flags: u8,
    /// Shared-version number, unused (zero).
    pub sb_shared_vn: u8,
    /// Inode chunk alignment in blocks.
    pub sb_inoalignmt: U32,
    /// Stripe unit in blocks.
    pub sb_unit: U32,
    /// Stripe width in blocks.
    pub sb_width: U32,
    /// log2 of directory block size in filesystem blocks.
    pub sb_dirblklog: u8,
    /// log2 of the log device sector size.
    pub sb_logsectlog: u8,
    /// Log device sector size in bytes.
    pub sb_logsectsize: U16,
    /// Log stripe unit in bytes.
    pub sb_logsunit: U32,
    /// Second word of feature bits ([`XFS_SB_VERSION2_LAZYSBCOUNTBIT`] etc.).
    pub sb_features2: U32,
    /// Mirror of `sb_features2` kept for an old layout bug; must match it.
    pub sb_bad_features2: U32,
    /// Compatible v5 feature bits.
    pub sb_features_compat: U32,
    /// Read-only-compatible v5 feature bits.
    pub sb_features_ro_compat: U32,
    /// Incompatible v5 feature bits.
    pub sb_features_incompat: U32,
    /// Log-incompatible feature bits (set while the log may hold them).
    pub sb_features_log_incompat: U32,
    /// CRC-32C of the superblock sector, little-endian.
    pub sb_crc: LeU32,
    /// Alignment of sparse inode chunks in blocks.
    pub sb_spino_align: U32,
    /// Inode of the project quota file, or null.
    pub sb_pquotino: U64,
    /// LSN of the last logged change to this sector.
    pub sb_lsn: U64,
    /// UUID stamped in metadata when META_UUID is set; else equals `sb_uuid`.
    pub sb_meta_uuid: Uuid,
}

/// Size of the v5 superblock structure in bytes.
pub const XFS_DSB_SIZE: usize = 264;
/// Byte offset of `sb_crc`.
pub const XFS_SB_CRC_OFF: usize = 224;
/// Byte offset of `sb_lsn`.
pub const XFS_SB_LSN_OFF: usize = 240;

/// The fields a metadata directory filesystem (incompat METADIR) adds after
/// [`Dsb`], at byte [`XFS_DSB_SIZE`] of the superblock sector.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct DsbMetadir {
    /// Inode of the metadata directory tree's root.
    pub sb_metadirino: U64,
    /// Number of realtime groups.
    pub sb_rgcount: U32,
    /// Realtime extents in each realtime group.
    pub sb_rgextents: U32,
    /// log2 of the realtime group size in blocks, rounded up.
    pub sb_rgblklog: u8,
    /// Zero padding to a 64-bit boundary.
    pub sb_pad: [u8; 7],
}

/// The fields a zoned filesystem (incompat ZONED) adds after
/// [`DsbMetadir`], at byte [`XFS_DSB_METADIR_SIZE`] of the superblock sector.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct DsbZoned {
    /// First block of a realtime section inside the data device (0 for a
    /// separate realtime device).
    pub sb_rtstart: U64,
    /// Realtime blocks held back for zone garbage collection.
    pub sb_rtreserved: U64,
}

const _: () = assert!(size_of::<DsbZoned>() == 16);
const _: () = assert!(XFS_DSB_METADIR_SIZE == 288);

/// Byte offset of [`DsbMetadir`] (`sb_metadirino`) in the superblock.
pub const XFS_SB_METADIR_OFF: usize = XFS_DSB_SIZE;
/// Bytes of a metadir superblock that hold fields (without zoned).
pub const XFS_DSB_METADIR_SIZE: usize = XFS_DSB_SIZE + size_of::<DsbMetadir>();

const _: () = assert!(size_of::<DsbMetadir>() == 24);
const _: () = assert!(offset_of!(DsbMetadir, sb_rgcount) == 272 - XFS_DSB_SIZE);
const _: () = assert!(offset_of!(DsbMetadir, sb_rgextents) == 276 - XFS_DSB_SIZE);
const _: () = assert!(offset_of!(DsbMetadir, sb_rgblklog) == 280 - XFS_DSB_SIZE);
const _: () = assert!(size_of::<Dsb>() == XFS_DSB_SIZE);
const _: () = assert!(offset_of!(Dsb, sb_crc) == XFS_SB_CRC_OFF);
const _: () = assert!(offset_of!(Dsb, sb_lsn) == XFS_SB_LSN_OFF);
const _: () = assert!(offset_of!(Dsb, sb_uuid) == 32);
const _: () = assert!(offset_of!(Dsb, sb_versionnum) == 100);
const _: () = assert!(offset_of!(Dsb, sb_fname) == 108);
const _: () = assert!(offset_of!(Dsb, sb_icount) == 128);
const _: () = assert!(offset_of!(Dsb, sb_qflags) == XFS_SB_QFLAGS_OFF);
const _: () = assert!(offset_of!(Dsb, sb_features2) == 200);
const _: () = assert!(offset_of!(Dsb, sb_features_compat) == 208);
const _: () = assert!(offset_of!(Dsb, sb_pquotino) == 232);
const _: () = assert!(offset_of!(Dsb, sb_meta_uuid) == 248);

impl Dsb {
    /// Version number held in the low nibble of `sb_versionnum`.
    pub fn version(&self) -> u16 {
        self.sb_versionnum.get() & XFS_SB_VERSION_NUMBITS
    }

    /// True if an incompatible feature bit is set.
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.sb_features_incompat.get() & bit != 0
    }

    /// True if a read-only-compatible feature bit is set.
    pub fn has_ro_compat(&self, bit: u32) -> bool {
        self.sb_features_ro_compat.get() & bit != 0
    }

    /// The metadata directory fields of a superblock sector `raw` (its
    /// first [`XFS_DSB_METADIR_SIZE`] bytes), when the METADIR feature is on.
    pub fn metadir(&self, raw: &[u8]) -> Option<DsbMetadir> {
        if !self.has_incompat(XFS_SB_FEAT_INCOMPAT_METADIR) {
            return None;
        }
        let tail = raw.get(XFS_SB_METADIR_OFF..XFS_DSB_METADIR_SIZE)?;
        DsbMetadir::read_from_bytes(tail).ok()
    }

    /// The zoned fields of a zoned superblock (None otherwise, or when
    /// `raw` is too short for them).
    pub fn zoned(&self, raw: &[u8]) -> Option<DsbZoned> {
        if !self.has_incompat(XFS_SB_FEAT_INCOMPAT_ZONED) {
            return None;
        }
        let tail = raw.get(XFS_DSB_METADIR_SIZE..XFS_DSB_METADIR_SIZE + size_of::<DsbZoned>())?;
        DsbZoned::read_from_bytes(tail).ok()
    }

    /// The UUID that metadata blocks carry (meta UUID if that feature is on).
    pub fn metadata_uuid(&self) -> Uuid {
        if self.has_incompat(XFS_SB_FEAT_INCOMPAT_META_UUID) {
            self.sb_meta_uuid
        } else {
            self.sb_uuid
        }
    }
}

// --- sb_versionnum -------------------------------------------------------

/// Version: original format.
pub const XFS_SB_VERSION_1: u16 = 1;
/// Version: attributes.
pub const XFS_SB_VERSION_2: u16 = 2;
/// Version: new inode version.
pub const XFS_SB_VERSION_3: u16 = 3;
/// Version: feature-bitmask era (v4).
pub const XFS_SB_VERSION_4: u16 = 4;
/// Version: checksummed metadata (v5).
pub const XFS_SB_VERSION_5: u16 = 5;
/// Mask selecting the version number in `sb_versionnum`.
pub const XFS_SB_VERSION_NUMBITS: u16 = 0x000f;
/// Mask selecting all feature bits in `sb_versionnum`.
pub const XFS_SB_VERSION_ALLFBITS: u16 = 0xfff0;
/// Feature: extended attributes used.
pub const XFS_SB_VERSION_ATTRBIT: u16 = 0x0010;
/// Feature: 32-bit link counts.
pub const XFS_SB_VERSION_NLINKBIT: u16 = 0x0020;
/// Feature: quotas used.
pub const XFS_SB_VERSION_QUOTABIT: u16 = 0x0040;

/// `sb_qflags`: user quota counts are checked (valid). A quota mount with
/// the bit clear runs quotacheck; xfs_repair compares the counts only
/// when it is set.
pub const XFS_UQUOTA_CHKD: u16 = 0x0004;
/// `sb_qflags`: group or project counts are checked (v4's shared file).
pub const XFS_OQUOTA_CHKD: u16 = 0x0020;
/// `sb_qflags`: group quota counts are checked.
pub const XFS_GQUOTA_CHKD: u16 = 0x0100;
/// `sb_qflags`: project quota counts are checked.
pub const XFS_PQUOTA_CHKD: u16 = 0x0400;
/// Every `sb_qflags` bit that says some counts are checked.
pub const XFS_ALL_QUOTA_CHKD: u16 =
    XFS_UQUOTA_CHKD | XFS_OQUOTA_CHKD | XFS_GQUOTA_CHKD | XFS_PQUOTA_CHKD;
/// `sb_qflags`: every accounting bit (user, project, group).
pub const XFS_ALL_QUOTA_ACCT: u16 = 0x0001 | 0x0008 | 0x0040;
/// Byte offset of `sb_qflags`.
pub const XFS_SB_QFLAGS_OFF: usize = 176;
/// Feature: inode chunks aligned.
pub const XFS_SB_VERSION_ALIGNBIT: u16 = 0x0080;
/// Feature: data stripe alignment recorded.
pub const XFS_SB_VERSION_DALIGNBIT: u16 = 0x0100;
/// Feature: shared superblock (never supported).
pub const XFS_SB_VERSION_SHAREDBIT: u16 = 0x0200;
/// Feature: version 2 log.
pub const XFS_SB_VERSION_LOGV2BIT: u16 = 0x0400;
/// Feature: sector size other than 512.
pub const XFS_SB_VERSION_SECTORBIT: u16 = 0x0800;
/// Feature: unwritten extent flag in bmbt records.
pub const XFS_SB_VERSION_EXTFLGBIT: u16 = 0x1000;
/// Feature: version 2 directories.
pub const XFS_SB_VERSION_DIRV2BIT: u16 = 0x2000;
/// Feature: ASCII case-insensitive names.
pub const XFS_SB_VERSION_BORGBIT: u16 = 0x4000;
/// Feature: `sb_features2` is meaningful.
pub const XFS_SB_VERSION_MOREBITSBIT: u16 = 0x8000;

// --- sb_features2 --------------------------------------------------------

/// features2: summary counters kept lazily (only exact in AG headers).
pub const XFS_SB_VERSION2_LAZYSBCOUNTBIT: u32 = 0x0000_0002;
/// features2: attr fork offset may vary per inode.
pub const XFS_SB_VERSION2_ATTR2BIT: u32 = 0x0000_0008;
/// features2: old parent pointer bit (unused).
pub const XFS_SB_VERSION2_PARENTBIT: u32 = 0x0000_0010;
/// features2: 32-bit project ids.
pub const XFS_SB_VERSION2_PROJID32BIT: u32 = 0x0000_0080;
/// features2: metadata checksums (set on every v5 filesystem).
pub const XFS_SB_VERSION2_CRCBIT: u32 = 0x0000_0100;
/// features2: file type in directory entries (v4 spelling).
pub const XFS_SB_VERSION2_FTYPE: u32 = 0x0000_0200;

// --- v5 feature words ----------------------------------------------------

/// ro_compat: free inode btree present.
pub const XFS_SB_FEAT_RO_COMPAT_FINOBT: u32 = 1 << 0;
/// ro_compat: reverse mapping btree present.
pub const XFS_SB_FEAT_RO_COMPAT_RMAPBT: u32 = 1 << 1;
/// ro_compat: shared extents, refcount btree present.
pub const XFS_SB_FEAT_RO_COMPAT_REFLINK: u32 = 1 << 2;
/// ro_compat: inode btree block counts kept in the AGI.
pub const XFS_SB_FEAT_RO_COMPAT_INOBTCNT: u32 = 1 << 3;
/// All ro_compat bits defined by the 6.10 format.
pub const XFS_SB_FEAT_RO_COMPAT_ALL: u32 = 0xf;

/// incompat: directory entries record the file type.
pub const XFS_SB_FEAT_INCOMPAT_FTYPE: u32 = 1 << 0;
/// incompat: inode chunks may be sparse.
pub const XFS_SB_FEAT_INCOMPAT_SPINODES: u32 = 1 << 1;
/// incompat: metadata carries `sb_meta_uuid` rather than `sb_uuid`.
pub const XFS_SB_FEAT_INCOMPAT_META_UUID: u32 = 1 << 2;
/// incompat: 64-bit nanosecond timestamps.
pub const XFS_SB_FEAT_INCOMPAT_BIGTIME: u32 = 1 << 3;
/// incompat: filesystem must be repaired before mounting.
pub const XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR: u32 = 1 << 4;
/// incompat: 64-bit data / 32-bit attr extent counters.
pub const XFS_SB_FEAT_INCOMPAT_NREXT64: u32 = 1 << 5;
/// incompat: file range exchange log items.
pub const XFS_SB_FEAT_INCOMPAT_EXCHRANGE: u32 = 1 << 6;
/// incompat: directory parent pointers.
pub const XFS_SB_FEAT_INCOMPAT_PARENT: u32 = 1 << 7;
/// incompat: metadata directory tree (6.13; realtime groups come with it).
pub const XFS_SB_FEAT_INCOMPAT_METADIR: u32 = 1 << 8;
/// All incompat bits xfskit knows (the 6.13 format without zoned).
pub const XFS_SB_FEAT_INCOMPAT_ALL: u32 = 0x1ff;
/// incompat: zoned realtime device (6.15): realtime groups are zones,
/// written sequentially; no bitmap or summary files.
pub const XFS_SB_FEAT_INCOMPAT_ZONED: u32 = 1 << 9;
/// incompat: the zones of a zoned realtime device have unusable space at
/// their ends, so realtime block numbers are device blocks as they are.
pub const XFS_SB_FEAT_INCOMPAT_ZONE_GAPS: u32 = 1 << 10;
/// The incompat bits xfskit reads: [`XFS_SB_FEAT_INCOMPAT_ALL`] and the
/// zoned ones (zoned filesystems are read-only in xfskit).
pub const XFS_SB_FEAT_INCOMPAT_READ: u32 =
    XFS_SB_FEAT_INCOMPAT_ALL | XFS_SB_FEAT_INCOMPAT_ZONED | XFS_SB_FEAT_INCOMPAT_ZONE_GAPS;

/// log_incompat: log may hold logged extended attribute intents.
pub const XFS_SB_FEAT_INCOMPAT_LOG_XATTRS: u32 = 1 << 0;
/// All log_incompat bits defined by the 6.10 format.
pub const XFS_SB_FEAT_INCOMPAT_LOG_ALL: u32 = XFS_SB_FEAT_INCOMPAT_LOG_XATTRS;

/// sb_flags: only read-only mounts allowed.
pub const XFS_SBF_READONLY: u8 = 0x01;

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn layout() {
        assert_eq!(size_of::<Dsb>(), 264);
        assert_eq!(offset_of!(Dsb, sb_crc), 224);
        assert_eq!(offset_of!(Dsb, sb_spino_align), 228);
        assert_eq!(offset_of!(Dsb, sb_agblklog), 124);
        assert_eq!(offset_of!(Dsb, sb_inoalignmt), 180);
        assert_eq!(offset_of!(Dsb, sb_dirblklog), 192);
    }

    #[test]
    fn parse_and_crc() {
        let mut sector = [0u8; 512];
        let mut sb = Dsb::new_zeroed();
        sb.sb_magicnum.set(XFS_SB_MAGIC);
        sb.sb_versionnum
            .set(XFS_SB_VERSION_5 | XFS_SB_VERSION_MOREBITSBIT);
        sb.sb_features_incompat
            .set(XFS_SB_FEAT_INCOMPAT_FTYPE | XFS_SB_FEAT_INCOMPAT_META_UUID);
        sb.sb_uuid = Uuid([1; 16]);
        sb.sb_meta_uuid = Uuid([2; 16]);
        sector[..264].copy_from_slice(sb.as_bytes());
        assert_eq!(&sector[..4], b"XFSB");
        crate::crc::stamp(&mut sector, XFS_SB_CRC_OFF);
        assert!(crate::crc::verify(&sector, XFS_SB_CRC_OFF));
        let back = Dsb::read_from_prefix(&sector).map(|(s, _)| s).ok();
        let back = back.as_ref().map(|b| (b.version(), b.metadata_uuid()));
        assert_eq!(back, Some((5, Uuid([2; 16]))));
    }
}

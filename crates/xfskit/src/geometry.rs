//! The validated superblock: sizes, features and unit conversions.
//!
//! The raw superblock (`xfs_format::sb::Dsb`) is converted here, once, into
//! [`Geometry`]; everything else in the engine works from `Geometry` and the
//! unit newtypes below.

use crate::error::{Error, Location, Result};
use xfs_format::sb::{self as fsb, Dsb};
use zerocopy::FromBytes;

/// An allocation group number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgNumber(pub u32);
/// A block number relative to the start of its AG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgBlock(pub u32);
/// A filesystem block number in the AG-encoded form used by bmbt records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsBlock(pub u64);
/// A linear disk address in 512-byte units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Daddr(pub u64);
/// An inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ino(pub u64);

impl Daddr {
    /// Byte offset on the device.
    pub fn bytes(self) -> u64 {
        self.0 << 9
    }
}

/// Optional features that change the on-disk format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// Directory entries carry a file type byte.
    pub ftype: bool,
    /// Inode chunks may be sparse.
    pub sparse_inodes: bool,
    /// Metadata is stamped with `sb_meta_uuid`, not `sb_uuid`.
    pub meta_uuid: bool,
    /// Timestamps are 64-bit nanosecond counters (when the inode says so).
    pub bigtime: bool,
    /// Large extent counters may be used by inodes.
    pub nrext64: bool,
    /// Free inode btree.
    pub finobt: bool,
    /// Reverse mapping btree.
    pub rmapbt: bool,
    /// Reference count btree (reflink).
    pub reflink: bool,
    /// AGI holds inobt/finobt block counts.
    pub inobtcnt: bool,
    /// Attr2 fork offsets (always on for v5).
    pub attr2: bool,
    /// Superblock counters are lazy (always on for v5).
    pub lazy_sb_counters: bool,
    /// Project ids are 32 bits.
    pub projid32: bool,
    /// Metadata directory tree (quota and realtime inodes live under
    /// `Geometry::metadir_ino`, not in the superblock).
    pub metadir: bool,
}

/// Everything the engine needs from the superblock, validated.
#[derive(Debug, Clone)]
pub struct Geometry {
    /// A v5 (crc=1) filesystem; false for v4 (crc=0), which xfskit reads only.
    pub v5: bool,
    /// Filesystem block size in bytes.
    pub block_size: u32,
    /// log2 of `block_size`.
    pub block_log: u8,
    /// Sector size in bytes.
    pub sect_size: u32,
    /// Inode size in bytes.
    pub inode_size: u32,
    /// log2 of `inode_size`.
    pub inode_log: u8,
    /// Inodes per block.
    pub inodes_per_block: u32,
    /// log2 of `inodes_per_block`.
    pub inopb_log: u8,
    /// Blocks in each AG but possibly the last.
    pub ag_blocks: u32,
    /// Bits an AG block number takes in inode and fs block numbers.
    pub ag_blk_log: u8,
    /// Number of AGs.
    pub ag_count: u32,
    /// Blocks in the data section.
    pub data_blocks: u64,
    /// Directory block size in bytes.
    pub dir_blk_size: u32,
    /// log2 of directory blocks per filesystem block.
    pub dir_blk_log: u8,
    /// First block of the internal log (AG-encoded), 0 if external.
    pub log_start: FsBlock,
    /// Log length in blocks.
    pub log_blocks: u32,
    /// Log stripe unit in bytes.
    pub log_sunit: u32,
    /// Root directory inode.
    pub root_ino: Ino,
    /// Realtime bitmap inode.
    pub rbm_ino: Ino,
    /// Realtime summary inode.
    pub rsum_ino: Ino,
    /// Root of the metadata directory tree (`Ino(0)` without metadir).
    pub metadir_ino: Ino,
    /// Realtime groups and extents per group (metadir superblocks; 0 else).
    pub rg_count: u32,
    /// See `rg_count`.
    pub rg_extents: u32,
    /// Bits a realtime group block number takes in a realtime block number
    /// (`sb_rgblklog`; 0 without realtime groups).
    pub rg_blklog: u8,
    /// A zoned realtime section (incompat ZONED): groups are zones, with no
    /// bitmap or summary files and no realtime superblock.
    pub zoned: bool,
    /// Zoned realtime groups keep their block numbers on the device
    /// (incompat ZONE_GAPS): no packing of the groups end to end.
    pub zone_gaps: bool,
    /// First block of a realtime section inside the data device (zoned
    /// filesystems; 0 for a separate realtime device).
    pub rt_start: u64,
    /// Realtime blocks a zoned filesystem reserves (`sb_rtreserved`).
    pub rt_reserved: u64,
    /// User-visible filesystem UUID.
    pub uuid: [u8; 16],
    /// UUID stamped into metadata blocks.
    pub meta_uuid: [u8; 16],
    /// Volume label (without trailing NULs).
    pub label: Vec<u8>,
    /// Features in use.
    pub features: Features,
    /// Raw feature words, for reporting.
    pub versionnum: u16,
    /// Raw features2 word.
    pub features2: u32,
    /// Raw compat/ro_compat/incompat/log_incompat words.
    pub features_compat: u32,
    /// See `features_compat`.
    pub features_ro_compat: u32,
    /// See `features_compat`.
    pub features_incompat: u32,
    /// See `features_compat`.
    pub features_log_incompat: u32,
    /// `sb_qflags`: quota accounting, enforcement and "checked" flags.
    pub qflags: u16,
    /// `sb_uquotino`, `sb_gquotino`, `sb_pquotino` as the superblock has
    /// them (0 or all ones: none; metadir filesystems keep their quota
    /// files in the metadata directory instead).
    pub quota_inos: [u64; 3],
    /// Inode chunk alignment in blocks.
    pub inode_align: u32,
    /// Sparse inode chunk alignment in blocks.
    pub spino_align: u32,
    /// Stripe unit in blocks.
    pub stripe_unit: u32,
    /// Stripe width in blocks.
    pub stripe_width: u32,
    /// Maximum percentage of space for inodes.
    pub imax_pct: u8,
    /// Realtime extents (0 without a realtime section).
    pub rt_extents: u64,
    /// Realtime blocks.
    pub rt_blocks: u64,
    /// Realtime extent size in blocks.
    pub rt_extsize: u32,
    /// Blocks of the realtime bitmap file (`sb_rbmblocks`).
    pub rt_bmblocks: u32,
    /// log2 of the realtime extent count, rounded down (`sb_rextslog`):
    /// the summary file has this many plus one levels.
    pub rt_extslog: u8,
    /// Free realtime extents as the superblock counts them (`sb_frextents`).
    pub rt_frextents: u64,
    /// Log sector size in bytes.
    pub log_sect_size: u32,
    /// Superblock counters (lazy; the AG headers are authoritative).
    pub icount: u64,
    /// See `icount`.
    pub ifree: u64,
    /// See `icount`.
    pub fdblocks: u64,
    /// Bytes in one inode cluster (the unit inodes are read and written in).
    pub inode_cluster_size: u32,
}

/// Why every write path refuses a v4 filesystem.
pub const V4_READ_ONLY: &str =
    "v4 filesystems (crc=0) are read-only in xfskit: the format is deprecated and Linux removes it in 2030";

impl Geometry {
    /// Refuses writing to a v4 filesystem ([`V4_READ_ONLY`]).
    pub fn require_writable_format(&self) -> Result<()> {
        if self.v5 {
            Ok(())
        } else {
            Err(Error::Unsupported(V4_READ_ONLY.into()))
        }
    }
}

/// Inodes in an inode chunk (one inobt record).
pub const INODES_PER_CHUNK: u32 = 64;

fn bad(detail: impl Into<String>) -> Error {
    Error::corrupt("superblock", Location::Sb(0), detail)
}

fn is_pow2_in(v: u64, lo: u64, hi: u64) -> bool {
    v.is_power_of_two() && v >= lo && v <= hi
}

/// The v4 feature bits a readable v4 superblock must have: version 2
/// directories (every Linux since 2.6 makes them; the older format is
/// refused by the kernel too) and unwritten-extent flags in bmbt records
/// (required by Linux since 5.x), no unknown bits.
fn check_v4_bits(versionnum: u16) -> Result<()> {
    if versionnum & fsb::XFS_SB_VERSION_DIRV2BIT == 0 {
        return Err(Error::Unsupported(
            "the superblock is v4 with version 1 directories (no dirv2 bit): not supported".into(),
        ));
    }
    if versionnum & fsb::XFS_SB_VERSION_EXTFLGBIT == 0 {
        return Err(Error::Unsupported(
            "the superblock is v4 without the unwritten-extent flag (extflg): not supported".into(),
        ));
    }
    Ok(())
}

/// The realtime group fields every realtime address depends on: groups
/// that cover the realtime extents exactly (the last one may be short),
/// of at most 2^31 blocks, whose block numbers fit in `rg_blklog` bits.
/// A hostile count is refused here, before anything is sized by it.
fn check_rtgroups(
    rextents: u64,
    rextsize: u32,
    count: u32,
    extents: u32,
    blklog: u8,
) -> Result<()> {
    let blocks = u64::from(extents) * u64::from(rextsize);
    let want_log = 64 - blocks.saturating_sub(1).leading_zeros();
    let groups = rextents.div_ceil(u64::from(extents.max(1)));
    if extents == 0 || rextsize == 0 || blocks > 1 << 31 {
        return Err(bad(format!(
            "realtime groups of {extents} extents of {rextsize} blocks"
        )));
    }
    if u64::from(count) != groups || u32::from(blklog) != want_log {
        return Err(bad(format!(
            "{count} realtime groups of {extents} extents (rgblklog {blklog}), but {rextents} realtime extents make {groups} (rgblklog {want_log})"
        )));
    }
    Ok(())
}

/// The format version of an xfs_metadump file whose first four bytes are
/// `magic` (v1: "XFSM", v2: "XMD2"), if it is one.
fn metadump_version(magic: u32) -> Option<u32> {
    match &magic.to_be_bytes() {
        b"XFSM" => Some(1),
        b"XMD2" => Some(2),
        _ => None,
    }
}

impl Geometry {
    /// Magic numbers and header sizes of this filesystem's metadata.
    pub fn layout(&self) -> &'static xfs_format::layout::Layout {
        xfs_format::layout::Layout::of(self.v5)
    }

    /// Validates a raw primary superblock sector and converts it.
    pub fn from_superblock(sector: &[u8]) -> Result<Geometry> {
        let sb = Dsb::ref_from_prefix(sector)
            .map_err(|_| bad("superblock sector is shorter than the superblock"))?
            .0;
        if let Some(v) = metadump_version(sb.sb_magicnum.get()) {
            return Err(Error::Unsupported(format!(
                "this is an xfs_metadump file (format v{v}), not a filesystem image: \
                 restore it into an image first with `xfskit mdrestore METADUMP OUT` \
                 (or xfs_mdrestore)"
            )));
        }
        if sb.sb_magicnum.get() != fsb::XFS_SB_MAGIC {
            return Err(Error::corrupt(
                "superblock",
                Location::Sb(0),
                format!(
                    "bad magic {:#010x}: not an XFS filesystem",
                    sb.sb_magicnum.get()
                ),
            ));
        }
        let versionnum = sb.sb_versionnum.get();
        let version = versionnum & fsb::XFS_SB_VERSION_NUMBITS;
        let v5 = match version {
            5 => true,
            4 => {
                check_v4_bits(versionnum)?;
                false
            }
            _ => {
                return Err(Error::Unsupported(format!(
                    "XFS version {version} superblock: only v4 and v5 filesystems are supported"
                )))
            }
        };
        let sectsize = u64::from(sb.sb_sectsize.get());
        if !is_pow2_in(sectsize, 512, 32768) || sector.len() < 512 {
            return Err(bad(format!("sector size {sectsize}")));
        }
        let sb_len = (sectsize as usize).min(sector.len());
        if v5 && !xfs_format::crc::verify(&sector[..sb_len], fsb::XFS_SB_CRC_OFF) {
            return Err(Error::BadCrc {
                what: "superblock",
                location: Location::Sb(0),
            });
        }
        // The feature words past features2 exist on v5 only; v4 ignores them.
        let field = |v: u32| if v5 { v } else { 0 };
        let incompat = field(sb.sb_features_incompat.get());
        if incompat & fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR != 0 {
            return Err(Error::Unsupported(
                "the superblock marks the filesystem as needing repair (needsrepair): run xfs_repair first"
                    .into(),
            ));
        }
        let unknown = incompat & !fsb::XFS_SB_FEAT_INCOMPAT_READ;
        if unknown != 0 {
            return Err(Error::Unsupported(format!(
                "the superblock has unknown incompatible features {unknown:#x}"
            )));
        }
        let blocksize = u64::from(sb.sb_blocksize.get());
        if !is_pow2_in(blocksize, 512, 65536)
            || u64::from(sb.sb_blocklog) != u64::from(blocksize.trailing_zeros())
        {
            return Err(bad(format!(
                "block size {blocksize} / blocklog {}",
                sb.sb_blocklog
            )));
        }
        let inodesize = u64::from(sb.sb_inodesize.get());
        let min_inode = if v5 { 512 } else { 256 };
        if !is_pow2_in(inodesize, min_inode, 2048)
            || u64::from(sb.sb_inodelog) != u64::from(inodesize.trailing_zeros())
        {
            return Err(bad(format!(
                "inode size {inodesize} / inodelog {}",
                sb.sb_inodelog
            )));
        }
        if inodesize > blocksize {
            return Err(bad(format!(
                "inode size {inodesize} is larger than block size {blocksize}"
            )));
        }
        let inopb = blocksize / inodesize;
        if u64::from(sb.sb_inopblock.get()) != inopb
            || u32::from(sb.sb_inopblog) != inopb.trailing_zeros()
        {
            return Err(bad(format!(
                "inodes per block {} / inopblog {}",
                sb.sb_inopblock.get(),
                sb.sb_inopblog
            )));
        }
        let agblocks = sb.sb_agblocks.get();
        let agcount = sb.sb_agcount.get();
        let dblocks = sb.sb_dblocks.get();
        if agblocks < 64 || agcount == 0 {
            return Err(bad(format!(
                "AG size {agblocks} blocks, AG count {agcount}"
            )));
        }
        let want_agblklog = 32 - (agblocks - 1).leading_zeros();
        if u32::from(sb.sb_agblklog) != want_agblklog {
            return Err(bad(format!(
                "agblklog {} for AG size {agblocks}",
                sb.sb_agblklog
            )));
        }
        let full = u64::from(agblocks) * u64::from(agcount);
        if dblocks > full || dblocks <= full - u64::from(agblocks) {
            return Err(bad(format!(
                "{dblocks} data blocks do not fit {agcount} AGs of {agblocks} blocks"
            )));
        }
        if u32::from(sb.sb_blocklog) + u32::from(sb.sb_dirblklog) > 16 {
            return Err(bad(format!("directory block log {}", sb.sb_dirblklog)));
        }
        let ro_compat = field(sb.sb_features_ro_compat.get());
        let features2 = if versionnum & fsb::XFS_SB_VERSION_MOREBITSBIT != 0 {
            sb.sb_features2.get()
        } else {
            0
        };
        let features = Features {
            ftype: if v5 {
                incompat & fsb::XFS_SB_FEAT_INCOMPAT_FTYPE != 0
            } else {
                features2 & fsb::XFS_SB_VERSION2_FTYPE != 0
            },
            sparse_inodes: incompat & fsb::XFS_SB_FEAT_INCOMPAT_SPINODES != 0,
            meta_uuid: incompat & fsb::XFS_SB_FEAT_INCOMPAT_META_UUID != 0,
            bigtime: incompat & fsb::XFS_SB_FEAT_INCOMPAT_BIGTIME != 0,
            nrext64: incompat & fsb::XFS_SB_FEAT_INCOMPAT_NREXT64 != 0,
            finobt: ro_compat & fsb::XFS_SB_FEAT_RO_COMPAT_FINOBT != 0,
            rmapbt: ro_compat & fsb::XFS_SB_FEAT_RO_COMPAT_RMAPBT != 0,
            reflink: ro_compat & fsb::XFS_SB_FEAT_RO_COMPAT_REFLINK != 0,
            inobtcnt: ro_compat & fsb::XFS_SB_FEAT_RO_COMPAT_INOBTCNT != 0,
            attr2: features2 & fsb::XFS_SB_VERSION2_ATTR2BIT != 0,
            lazy_sb_counters: features2 & fsb::XFS_SB_VERSION2_LAZYSBCOUNTBIT != 0,
            projid32: features2 & fsb::XFS_SB_VERSION2_PROJID32BIT != 0,
            metadir: incompat & fsb::XFS_SB_FEAT_INCOMPAT_METADIR != 0,
        };
        let (metadir_ino, rg_count, rg_extents, rg_blklog) = match sb.metadir(sector) {
            Some(m) => (
                Ino(m.sb_metadirino.get()),
                m.sb_rgcount.get(),
                m.sb_rgextents.get(),
                m.sb_rgblklog,
            ),
            None if features.metadir => {
                return Err(bad("sector too short for the metadata directory fields"))
            }
            None => (Ino(0), 0, 0, 0),
        };
        let zoned = incompat & fsb::XFS_SB_FEAT_INCOMPAT_ZONED != 0;
        let (rt_start, rt_reserved) = match sb.zoned(sector) {
            Some(z) => (z.sb_rtstart.get(), z.sb_rtreserved.get()),
            None if zoned => return Err(bad("sector too short for the zoned fields")),
            None => (0, 0),
        };
        if zoned && (!features.metadir || sb.sb_rblocks.get() == 0) {
            return Err(bad(
                "zoned without a metadata directory tree and realtime groups",
            ));
        }
        if zoned && rt_start != 0 && rt_start < dblocks {
            return Err(bad(format!(
                "the internal realtime section starts at block {rt_start}, inside the {dblocks} data blocks"
            )));
        }
        let (rblocks, rextents, rextsize) = (
            sb.sb_rblocks.get(),
            sb.sb_rextents.get(),
            sb.sb_rextsize.get(),
        );
        if rblocks > 0 && (rextsize == 0 || rextents != rblocks / u64::from(rextsize)) {
            return Err(bad(format!(
                "{rextents} realtime extents of {rextsize} blocks in {rblocks} realtime blocks"
            )));
        }
        if features.metadir && sb.sb_rblocks.get() > 0 {
            check_rtgroups(
                sb.sb_rextents.get(),
                sb.sb_rextsize.get(),
                rg_count,
                rg_extents,
                rg_blklog,
            )?;
        }
        let uuid: [u8; 16] = sb.sb_uuid.0;
        let meta_uuid: [u8; 16] = if features.meta_uuid {
            sb.sb_meta_uuid.0
        } else {
            uuid
        };
        let inoalignmt = sb.sb_inoalignmt.get();
        // Inode clusters: 8 KiB, on v5 scaled by inode size over 256 bytes
        // when the chunk alignment allows it (v5 always sets that alignment).
        let mut cluster = 8192u64;
        let scaled = cluster * (inodesize / 256);
        if v5 && u64::from(inoalignmt) * blocksize >= scaled {
            cluster = scaled;
        }
        let label_raw: [u8; 12] = sb.sb_fname;
        let label_len = label_raw.iter().position(|&b| b == 0).unwrap_or(12);
        Ok(Geometry {
            v5,
            block_size: blocksize as u32,
            block_log: sb.sb_blocklog,
            sect_size: sectsize as u32,
            inode_size: inodesize as u32,
            inode_log: sb.sb_inodelog,
            inodes_per_block: inopb as u32,
            inopb_log: sb.sb_inopblog,
            ag_blocks: agblocks,
            ag_blk_log: sb.sb_agblklog,
            ag_count: agcount,
            data_blocks: dblocks,
            dir_blk_size: (blocksize as u32) << sb.sb_dirblklog,
            dir_blk_log: sb.sb_dirblklog,
            log_start: FsBlock(sb.sb_logstart.get()),
            log_blocks: sb.sb_logblocks.get(),
            log_sunit: sb.sb_logsunit.get(),
            root_ino: Ino(sb.sb_rootino.get()),
            rbm_ino: Ino(sb.sb_rbmino.get()),
            rsum_ino: Ino(sb.sb_rsumino.get()),
            metadir_ino,
            rg_count,
            rg_extents,
            rg_blklog,
            zoned,
            zone_gaps: incompat & fsb::XFS_SB_FEAT_INCOMPAT_ZONE_GAPS != 0,
            rt_start,
            rt_reserved,
            uuid,
            meta_uuid,
            label: label_raw[..label_len].to_vec(),
            features,
            versionnum,
            features2,
            features_compat: field(sb.sb_features_compat.get()),
            features_ro_compat: ro_compat,
            features_incompat: incompat,
            features_log_incompat: field(sb.sb_features_log_incompat.get()),
            qflags: sb.sb_qflags.get(),
            quota_inos: [
                sb.sb_uquotino.get(),
                sb.sb_gquotino.get(),
                if v5 { sb.sb_pquotino.get() } else { 0 },
            ],
            inode_align: inoalignmt,
            spino_align: field(sb.sb_spino_align.get()),
            stripe_unit: sb.sb_unit.get(),
            stripe_width: sb.sb_width.get(),
            imax_pct: sb.sb_imax_pct,
            rt_extents: sb.sb_rextents.get(),
            rt_blocks: sb.sb_rblocks.get(),
            rt_extsize: sb.sb_rextsize.get(),
            rt_bmblocks: sb.sb_rbmblocks.get(),
            rt_extslog: sb.sb_rextslog,
            rt_frextents: sb.sb_frextents.get(),
            log_sect_size: u32::from(sb.sb_logsectsize.get()).max(512),
            icount: sb.sb_icount.get(),
            ifree: sb.sb_ifree.get(),
            fdblocks: sb.sb_fdblocks.get(),
            inode_cluster_size: cluster.min(u64::from(u32::MAX)) as u32,
        })
    }

    /// Blocks in AG `agno` (the last AG may be shorter).
    pub fn ag_len(&self, agno: AgNumber) -> u32 {
        if agno.0 + 1 == self.ag_count {
            let before = u64::from(self.ag_blocks) * u64::from(agno.0);
            (self.data_blocks - before) as u32
        } else {
            self.ag_blocks
        }
    }

    /// Disk address of a block in an AG.
    pub fn agb_to_daddr(&self, agno: AgNumber, agbno: AgBlock) -> Daddr {
        let lin = u64::from(agno.0) * u64::from(self.ag_blocks) + u64::from(agbno.0);
        Daddr(lin << (self.block_log - 9))
    }

    /// Splits an AG-encoded filesystem block number.
    pub fn fsb_split(&self, fsb: FsBlock) -> (AgNumber, AgBlock) {
        let agno = fsb.0 >> self.ag_blk_log;
        let agbno = fsb.0 & ((1u64 << self.ag_blk_log) - 1);
        (
            AgNumber(agno.min(u64::from(u32::MAX)) as u32),
            AgBlock(agbno as u32),
        )
    }

    /// Builds an AG-encoded filesystem block number.
    pub fn fsb_make(&self, agno: AgNumber, agbno: AgBlock) -> FsBlock {
        FsBlock((u64::from(agno.0) << self.ag_blk_log) | u64::from(agbno.0))
    }

    /// True when `fsb` names a block inside the data section.
    pub fn fsb_valid(&self, fsb: FsBlock) -> bool {
        let (agno, agbno) = self.fsb_split(fsb);
        agno.0 < self.ag_count && agbno.0 < self.ag_len(agno)
    }

    /// Checks that `len` blocks from `fsb` stay inside one AG of the data section.
    pub fn fsb_range_valid(&self, fsb: FsBlock, len: u64) -> bool {
        let (agno, agbno) = self.fsb_split(fsb);
        agno.0 < self.ag_count && u64::from(agbno.0) + len <= u64::from(self.ag_len(agno))
    }

    /// Disk address of an AG-encoded filesystem block.
    pub fn fsb_to_daddr(&self, fsb: FsBlock) -> Daddr {
        let (agno, agbno) = self.fsb_split(fsb);
        self.agb_to_daddr(agno, agbno)
    }

    /// True when the filesystem keeps parent pointers (the PARENT
    /// incompatible feature).
    pub fn has_parent(&self) -> bool {
        self.features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0
    }

    /// True when the realtime section is divided into realtime groups
    /// (metadir filesystems with a realtime section).
    pub fn has_rtgroups(&self) -> bool {
        self.features.metadir && self.rt_blocks > 0 && self.rg_count > 0
    }

    /// Blocks in each realtime group but possibly the last.
    pub fn rg_blocks(&self) -> u64 {
        u64::from(self.rg_extents) * u64::from(self.rt_extsize)
    }

    /// Blocks in realtime group `rgno` (the last one may be short).
    pub fn rg_len(&self, rgno: u32) -> u64 {
        if rgno + 1 >= self.rg_count {
            let before = u64::from(rgno) * u64::from(self.rg_extents);
            self.rt_extents.saturating_sub(before) * u64::from(self.rt_extsize)
        } else {
            self.rg_blocks()
        }
    }

    /// Splits a realtime block number into its group and the block in the
    /// group; without realtime groups, everything is group 0.
    pub fn rtb_split(&self, rtb: u64) -> (u32, u64) {
        if !self.has_rtgroups() {
            return (0, rtb);
        }
        let rgno = rtb >> self.rg_blklog;
        (
            rgno.min(u64::from(u32::MAX)) as u32,
            rtb & ((1u64 << self.rg_blklog) - 1),
        )
    }

    /// Builds a realtime block number from a group and a block in it.
    pub fn rtb_make(&self, rgno: u32, rgbno: u64) -> u64 {
        if self.has_rtgroups() {
            (u64::from(rgno) << self.rg_blklog) | rgbno
        } else {
            rgbno
        }
    }

    /// True when `len` realtime blocks from `rtb` stay inside the realtime
    /// section (and inside one realtime group).
    pub fn rtb_range_valid(&self, rtb: u64, len: u64) -> bool {
        if !self.has_rtgroups() {
            return rtb.saturating_add(len) <= self.rt_blocks;
        }
        let (rgno, rgbno) = self.rtb_split(rtb);
        rgno < self.rg_count && rgbno.saturating_add(len) <= self.rg_len(rgno)
    }

    /// The block of the realtime device that realtime block `rtb` names:
    /// realtime groups lie end to end, each `rg_blocks` long, while their
    /// numbers leave a gap up to the next power of two (unless the zones
    /// have gaps of their own on the device: ZONE_GAPS).
    pub fn rtb_to_linear(&self, rtb: u64) -> u64 {
        if self.zone_gaps {
            return rtb;
        }
        let (rgno, rgbno) = self.rtb_split(rtb);
        u64::from(rgno)
            .saturating_mul(self.rg_blocks())
            .saturating_add(rgbno)
    }

    /// Byte offset on the realtime device of realtime block `rtb` (for an
    /// internal zoned section, on the data device, past `rt_start`).
    pub fn rtb_to_bytes(&self, rtb: u64) -> u64 {
        self.rtb_to_linear(rtb)
            .saturating_add(self.rt_start)
            .saturating_mul(u64::from(self.block_size))
    }

    /// True when the realtime section lies inside the data device (zoned,
    /// `sb_rtstart` set): no realtime device is needed.
    pub fn rt_internal(&self) -> bool {
        self.rt_start > 0
    }

    /// The AG holding an inode.
    pub fn ino_agno(&self, ino: Ino) -> AgNumber {
        AgNumber((ino.0 >> (self.ag_blk_log + self.inopb_log)) as u32)
    }

    /// The AG block holding an inode.
    pub fn ino_agbno(&self, ino: Ino) -> AgBlock {
        AgBlock(((ino.0 >> self.inopb_log) & ((1u64 << self.ag_blk_log) - 1)) as u32)
    }

    /// The inode's index inside its block.
    pub fn ino_offset(&self, ino: Ino) -> u32 {
        (ino.0 & ((1u64 << self.inopb_log) - 1)) as u32
    }

    /// The AG-relative inode number (agino).
    pub fn ino_agino(&self, ino: Ino) -> u32 {
        (ino.0 & ((1u64 << (self.ag_blk_log + self.inopb_log)) - 1)) as u32
    }

    /// Builds an inode number from an AG and an AG-relative inode number.
    pub fn ino_make(&self, agno: AgNumber, agino: u32) -> Ino {
        Ino((u64::from(agno.0) << (self.ag_blk_log + self.inopb_log)) | u64::from(agino))
    }

    /// True when `ino` could name an inode inside the data section.
    pub fn ino_valid(&self, ino: Ino) -> bool {
        let agno = self.ino_agno(ino);
        if ino.0 >> (self.ag_blk_log + self.inopb_log) >= u64::from(self.ag_count) {
            return false;
        }
        self.ino_agbno(ino).0 < self.ag_len(agno) && ino.0 != 0
    }

    /// Byte offset of an inode on the device.
    pub fn ino_to_bytes(&self, ino: Ino) -> u64 {
        let d = self.agb_to_daddr(self.ino_agno(ino), self.ino_agbno(ino));
        d.bytes() + u64::from(self.ino_offset(ino)) * u64::from(self.inode_size)
    }

    /// Blocks in one inode cluster (at least one).
    pub fn blocks_per_cluster(&self) -> u32 {
        (self.inode_cluster_size >> self.block_log).max(1)
    }

    /// Inodes in one inode cluster.
    pub fn inodes_per_cluster(&self) -> u32 {
        self.blocks_per_cluster() * self.inodes_per_block
    }

    /// Filesystem blocks per directory block.
    pub fn dir_blk_fsbs(&self) -> u32 {
        1 << self.dir_blk_log
    }
}

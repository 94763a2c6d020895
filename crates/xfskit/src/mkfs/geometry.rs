//! The filesystem geometry mkfs chooses: block/sector/inode sizes, stripe
//! alignment and the allocation-group split.  The log placement lives in
//! `log.rs` and the superblock feature words in `features.rs`.

use super::features::{self, Features};
use super::layout::*;
use super::log;
use super::options::{MkfsError, MkfsOptions, D_AGSIZE, D_SIZE, L_SIZE, N_SIZE};
use super::stripe::stripe_factors;

/// What the filesystem is being written onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A regular file (image); 512-byte sectors, no stripe hints.
    File,
    /// A block device with the topology the kernel reports for it.
    BlockDevice(DeviceTopology),
}

/// Block-device topology as reported by the kernel (sysfs / ioctls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTopology {
    /// Logical sector size in bytes (smallest addressable unit).
    pub logical_sector_size: u32,
    /// Physical sector size in bytes.
    pub physical_sector_size: u32,
    /// Optimal I/O stripe unit in bytes (minimum_io_size), 0 if none.
    pub stripe_unit: u32,
    /// Optimal I/O stripe width in bytes (optimal_io_size), 0 if none.
    pub stripe_width: u32,
    /// The device says it is not rotational (an SSD, NVMe, virtio disk
    /// flagged so): mkfs.xfs 6.10 and later then size the AGs and log for
    /// one writer per processor unless told otherwise.
    pub solid_state: bool,
}

impl TargetKind {
    fn topology(&self) -> DeviceTopology {
        match *self {
            TargetKind::File => DeviceTopology {
                logical_sector_size: 512,
                physical_sector_size: 512,
                stripe_unit: 0,
                stripe_width: 0,
                solid_state: false,
            },
            TargetKind::BlockDevice(t) => t,
        }
    }
}

/// Every value of the fresh filesystem's superblock that depends on the
/// geometry, plus the per-AG layout facts the formatter needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsGeometry {
    /// sb_blocksize.
    pub blocksize: u32,
    /// sb_blocklog.
    pub blocklog: u8,
    /// sb_sectsize.
    pub sectsize: u16,
    /// sb_sectlog.
    pub sectlog: u8,
    /// sb_logsectsize (0 when every sector is 512 bytes).
    pub logsectsize: u16,
    /// sb_logsectlog (0 when every sector is 512 bytes).
    pub logsectlog: u8,
    /// sb_agblocks.
    pub agblocks: u32,
    /// sb_agblklog.
    pub agblklog: u8,
    /// sb_agcount.
    pub agcount: u32,
    /// sb_dblocks.
    pub dblocks: u64,
    /// sb_rblocks (no realtime device: 0).
    pub rblocks: u64,
    /// sb_rextents (0).
    pub rextents: u64,
    /// sb_rextsize in blocks.
    pub rextsize: u32,
    /// sb_logstart: AG-encoded block number of the internal log (0 for
    /// an external log).
    pub logstart: u64,
    /// The external log device (`-l logdev=`) as named, if the log is on one.
    pub logdev: Option<String>,
    /// AG holding the log.
    pub log_agno: u32,
    /// sb_logblocks.
    pub logblocks: u32,
    /// sb_logsunit in bytes (1 when there is no log stripe unit).
    pub logsunit: u32,
    /// sb_inodesize.
    pub inodesize: u16,
    /// sb_inodelog.
    pub inodelog: u8,
    /// sb_inopblock.
    pub inopblock: u16,
    /// sb_inopblog.
    pub inopblog: u8,
    /// sb_imax_pct.
    pub imax_pct: u8,
    /// sb_inoalignmt in blocks.
    pub inoalignmt: u32,
    /// sb_spino_align in blocks (0 without sparse inodes).
    pub spino_align: u32,
    /// sb_unit: data stripe unit in blocks.
    pub unit: u32,
    /// sb_width: data stripe width in blocks.
    pub width: u32,
    /// sb_dirblklog: log2 of directory block size in fs blocks.
    pub dirblklog: u8,
    /// Feature words (versionnum, features2, compat/ro_compat/incompat/log_incompat).
    pub features: Features,
    /// sb_rootino.
    pub rootino: u64,
    /// sb_rbmino.
    pub rbmino: u64,
    /// sb_rsumino.
    pub rsumino: u64,
    /// The metadata directory tree (`-m metadir=1`), if any.
    pub metadir: Option<MetadirLayout>,
    /// The realtime section (`-r rtdev=`), if any.
    pub rt: Option<super::realtime::RtLayout>,
    /// sb_icount of the fresh filesystem.
    pub icount: u64,
    /// sb_ifree of the fresh filesystem.
    pub ifree: u64,
    /// sb_fdblocks of the fresh filesystem.
    pub fdblocks: u64,
    /// First AG block after the headers and btree roots (libxfs "prealloc blocks").
    pub prealloc_blocks: u32,
    /// Blocks mkfs puts on each AGFL (minimum free list length of a fresh AG).
    pub agfl_min: u32,
    /// Blocks in the first inode chunk (holding the root directory).
    pub ialloc_blocks: u32,
    /// sb_fname: label, NUL padded.
    pub label: [u8; 12],
    /// sb_uuid (from `-m uuid=`, else all zero: the caller generates one).
    pub uuid: [u8; 16],
    /// Target name shown in the summary (`-d name=` or the device argument).
    pub data_name: Option<String>,
    /// Warnings mkfs.xfs would print on stderr/stdout.
    pub warnings: Vec<String>,
    /// The root directory's `xfs:autofsck` attribute, if it gets one.
    pub autofsck: Option<super::features::Autofsck>,
    /// The root directory's access time is the creation time (mkfs.xfs
    /// 6.15 and later), not the epoch (6.1).
    pub root_atime: bool,
}

/// What `-m metadir=1` adds: the metadata directory root (the inode after
/// the root directory) and the empty `rtgroups` directory under it, whose
/// inode chunk mkfs.xfs allocates in the log's AG; the realtime group fields
/// of a filesystem without a realtime section (one 1 TiB group of none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadirLayout {
    /// sb_metadirino.
    pub metadirino: u64,
    /// Inode of the `rtgroups` directory (first of its chunk).
    pub rtdir_ino: u64,
    /// AG of the `rtgroups` directory's inode chunk.
    pub rtdir_agno: u32,
    /// First AG block of that chunk.
    pub rtdir_agbno: u32,
    /// sb_rgcount (0 without a realtime section).
    pub rgcount: u32,
    /// sb_rgextents.
    pub rgextents: u32,
    /// sb_rgblklog.
    pub rgblklog: u8,
}

impl MkfsGeometry {
    /// Directory block size in bytes.
    pub fn dir_block_size(&self) -> u32 {
        self.blocksize << self.dirblklog
    }

    /// Inodes in one inode chunk.
    pub fn chunk_inodes(&self) -> u64 {
        u64::from(self.ialloc_blocks) << self.inopblog
    }

    /// The inode chunk mkfs allocated in AG `agno` (first AG block, blocks,
    /// inodes in use), if any: the root's in AG 0, the metadata directory's
    /// second directory in the log's AG.
    pub(crate) fn chunk_in(&self, agno: u32) -> Option<(u32, u32, u32)> {
        if agno == 0 {
            let used = if self.metadir.is_some() { 2 } else { 3 };
            return Some((
                (self.rootino >> self.inopblog) as u32,
                self.ialloc_blocks,
                used,
            ));
        }
        let m = self.metadir?;
        let files = self
            .rt
            .as_ref()
            .and_then(|rt| rt.groups.as_ref())
            .map_or(0, |gr| gr.files.len() as u32);
        (m.rtdir_agno == agno).then_some((m.rtdir_agbno, self.ialloc_blocks, 1 + files))
    }

    /// Blocks in AG `agno` (the last AG may be short).
    pub fn ag_size(&self, agno: u32) -> u64 {
        if agno + 1 < self.agcount {
            u64::from(self.agblocks)
        } else {
            self.dblocks - u64::from(self.agcount - 1) * u64::from(self.agblocks)
        }
    }
}

pub(crate) fn geom(msg: String) -> MkfsError {
    MkfsError::Geometry(msg)
}

/// Working state shared by the geometry steps (all block counts in fs blocks).
pub(crate) struct Cfg {
    pub blocksize: u32,
    pub blocklog: u32,
    pub sectorsize: u32,
    pub sectorlog: u32,
    pub lsectorsize: u32,
    pub dirblocklog: u32,
    pub inodelog: u32,
    pub dblocks: u64,
    pub logblocks: u64,
    pub agsize: u64,
    pub agcount: u64,
    pub dsunit: u64,
    pub dswidth: u64,
    pub lsunit: u64,
    pub imaxpct: u32,
    pub feat: features::FeatureSet,
    /// The free list a fresh AG keeps is sized by the rule of xfsprogs
    /// 6.8 and later (`--defaults` 6.12 or newer), else by the older one.
    pub agfl_v2: bool,
    /// Writer threads the AGs are sized for (`-d concurrency=`, or the
    /// processors on a solid-state device); 0 for the classic geometry.
    pub data_threads: u64,
    /// Writer threads the log is sized for (`-l concurrency=`, or as
    /// above); 0 for the classic size.
    pub log_threads: u64,
    pub warnings: Vec<String>,
    /// The external log device (`-l logdev=`), if any.
    pub logdev: Option<log::LogDevice>,
}

fn sizes(
    opts: &MkfsOptions,
    topo: &DeviceTopology,
    warnings: &mut Vec<String>,
) -> Result<(u32, u32), MkfsError> {
    let blocksize = opts.block_size.unwrap_or(4096);
    if !(512..=65536).contains(&blocksize) || !blocksize.is_power_of_two() {
        return Err(geom(format!("illegal block size {blocksize}")));
    }
    if blocksize < 1024 {
        return Err(geom(
            "Minimum block size for CRC enabled filesystems is 1024 bytes.".into(),
        ));
    }
    let sectorsize = match opts.sector_size {
        Some(s) => s,
        None => {
            let mut phys = topo.physical_sector_size;
            if phys > 32768 {
                phys = topo.logical_sector_size;
            }
            if blocksize < phys && blocksize >= topo.logical_sector_size {
                warnings.push(format!(
                    "specified blocksize {blocksize} is less than device physical sector size {phys}\n\
                     switching to logical sector size {}",
                    topo.logical_sector_size
                ));
                topo.logical_sector_size
            } else {
                phys
            }
        }
    };
    if !(512..=32768).contains(&sectorsize) || !sectorsize.is_power_of_two() {
        return Err(geom(format!("illegal sector size {sectorsize}")));
    }
    if blocksize < sectorsize {
        return Err(geom(format!(
            "block size {blocksize} cannot be smaller than sector size {sectorsize}"
        )));
    }
    if sectorsize < topo.logical_sector_size {
        return Err(geom(format!(
            "illegal sector size {sectorsize}; hw sector is {}",
            topo.logical_sector_size
        )));
    }
    Ok((blocksize, sectorsize))
}

fn inode_log(opts: &MkfsOptions, blocklog: u32, blocksize: u32) -> Result<u32, MkfsError> {
    let inodelog = if let Some(per) = opts.inode_perblock {
        blocklog.saturating_sub(highbit(u64::from(per)))
    } else if let Some(size) = opts.inode_size {
        highbit(u64::from(size))
    } else {
        9
    };
    let inodesize = 1u32 << inodelog;
    if inodelog < 9 {
        return Err(geom("Minimum inode size for CRCs is 512 bytes".into()));
    }
    if inodesize > blocksize / 2 || inodesize > 2048 {
        let maxsz = (blocksize / 2).min(2048);
        return Err(geom(format!(
            "illegal inode size {inodesize}\nallowable inode size with {blocksize} byte blocks is between 256 and {maxsz}"
        )));
    }
    Ok(inodelog)
}

/// Convert a `-d size`/`-l size` text into blocks, with mkfs's checks.
fn dev_blocks(
    text: &str,
    rule: &super::options::Rule<'_>,
    kind: &str,
    cfg: &mut Cfg,
) -> Result<u64, MkfsError> {
    let bytes = rule.number(text, u64::from(cfg.blocksize), u64::from(cfg.sectorsize))? as u64;
    if !bytes.is_multiple_of(512) {
        return Err(geom(format!(
            "illegal {kind} length {bytes}, not a multiple of 512"
        )));
    }
    let blocks = bytes >> cfg.blocklog;
    if !bytes.is_multiple_of(u64::from(cfg.blocksize)) {
        cfg.warnings.push(format!(
            "warning: {kind} length {bytes} not a multiple of {}, truncated to {}",
            cfg.blocksize,
            blocks << cfg.blocklog
        ));
    }
    Ok(blocks)
}

/// Initial AG size/count from options or defaults.
fn initial_ag_geometry(opts: &MkfsOptions, cfg: &mut Cfg) -> Result<(), MkfsError> {
    if let Some(t) = &opts.agsize {
        let bytes = D_AGSIZE.number(t, u64::from(cfg.blocksize), u64::from(cfg.sectorsize))? as u64;
        if !bytes.is_multiple_of(u64::from(cfg.blocksize)) {
            return Err(geom(format!(
                "agsize ({t}) not a multiple of fs blk size ({})",
                cfg.blocksize
            )));
        }
        cfg.agsize = bytes / u64::from(cfg.blocksize);
        cfg.agcount = cfg.dblocks.div_ceil(cfg.agsize);
    } else if let Some(n) = opts.agcount {
        cfg.agcount = n;
        cfg.agsize = cfg.dblocks.div_ceil(n);
    } else {
        (cfg.agsize, cfg.agcount) = default_ag_geometry(cfg.blocklog, cfg.dblocks, cfg.dsunit != 0);
        if cfg.data_threads > 0 {
            cfg.agsize = concurrency_agsize(cfg, cfg.data_threads, cfg.agsize, cfg.agcount);
            cfg.agcount = cfg.dblocks.div_ceil(cfg.agsize);
        }
    }
    Ok(())
}

/// The AG size `-d concurrency=threads` gives, as mkfs.xfs 6.10 and later
/// compute it from the default geometry (`def_agsize`, `def_agcount`):
/// never fewer AGs than the default, one AG per thread where that leaves
/// AGs of 4 GiB or more (fewer threads until it does), and on large
/// filesystems a multiple of the threads that brings the AGs under both
/// the maximum and the default size.
fn concurrency_agsize(cfg: &Cfg, threads: u64, def_agsize: u64, def_agcount: u64) -> u64 {
    if threads < def_agcount {
        return def_agsize;
    }
    let four_gib = (4u64 << 30) >> cfg.blocklog;
    let mut tries = threads;
    let mut agsize = cfg.dblocks / tries;
    if agsize < four_gib {
        while agsize < four_gib {
            tries -= 1;
            if tries <= def_agcount {
                return def_agsize;
            }
            agsize = cfg.dblocks / tries;
        }
        return agsize;
    }
    while agsize > ag_max_blocks(cfg.blocklog) && agsize > def_agsize {
        tries += threads;
        agsize = cfg.dblocks / tries;
    }
    agsize
}

/// Align the AG size to the stripe unit, avoid AGs that all start on the same
/// disk, drop a too-small last AG and validate the result.
fn align_ag_geometry(opts: &MkfsOptions, cfg: &mut Cfg) -> Result<(), MkfsError> {
    let blog = cfg.blocklog;
    let dsunit = cfg.dsunit;
    if dsunit != 0 {
        if !cfg.agsize.is_multiple_of(dsunit) {
            let mut tmp = round_up(cfg.agsize, dsunit);
            if tmp > ag_max_blocks(blog) {
                tmp = (cfg.agsize / dsunit) * dsunit;
            }
            cfg.agsize = tmp;
            if opts.agcount.is_none() {
                cfg.agcount = cfg.dblocks.div_ceil(cfg.agsize);
            }
            if opts.agsize.is_some() {
                cfg.warnings.push(format!(
                    "agsize rounded to {}, sunit = {dsunit}",
                    cfg.agsize
                ));
            }
        }
        if cfg.agsize.is_multiple_of(cfg.dswidth) && cfg.dswidth != cfg.dsunit && cfg.agcount > 1 {
            if opts.agcount.is_some() || opts.agsize.is_some() {
                cfg.warnings.push(format!(
                    "Warning: AG size is a multiple of stripe width.  This can cause performance\n\
                     problems by aligning all AGs on the same disk.  To avoid this, run mkfs with\n\
                     an AG size that is one stripe unit smaller or larger, for example {}.",
                    cfg.agsize - dsunit
                ));
            } else {
                let mut tmp = cfg.agsize - dsunit;
                if tmp < ag_min_blocks(blog) {
                    tmp = cfg.agsize + dsunit;
                    if cfg.dblocks < cfg.agsize {
                        tmp = cfg.agsize;
                    }
                }
                cfg.agsize = tmp;
                cfg.agcount = cfg.dblocks.div_ceil(cfg.agsize);
            }
        }
    }
    let min = ag_min_blocks(blog);
    let max = ag_max_blocks(blog);
    if cfg.agsize == 0 {
        return Err(geom(format!(
            "agsize (0 blocks) too small, need at least {min} blocks"
        )));
    }
    if !cfg.dblocks.is_multiple_of(cfg.agsize) && cfg.dblocks % cfg.agsize < min {
        if opts.agcount.is_some() {
            // mkfs.xfs asserts here; report it as a geometry error instead.
            return Err(geom(format!(
                "last AG size {} blocks too small, minimum size is {min} blocks",
                cfg.dblocks % cfg.agsize
            )));
        }
        cfg.dblocks = (cfg.agcount - 1) * cfg.agsize;
        cfg.agcount -= 1;
    }
    if cfg.agsize < min {
        return Err(geom(format!(
            "agsize ({} blocks) too small, need at least {min} blocks",
            cfg.agsize
        )));
    }
    if cfg.agsize > max {
        return Err(geom(format!(
            "agsize ({} blocks) too big, maximum is {max} blocks",
            cfg.agsize
        )));
    }
    if cfg.agsize > cfg.dblocks {
        return Err(geom(format!(
            "agsize ({} blocks) too big, data area is {} blocks",
            cfg.agsize, cfg.dblocks
        )));
    }
    if cfg.agcount > MAX_AGCOUNT {
        return Err(geom(format!(
            "{} allocation groups is too many, maximum is {MAX_AGCOUNT}",
            cfg.agcount
        )));
    }
    Ok(())
}

/// Compute the geometry `mkfs.xfs` (xfsprogs 6.1) would choose for a target of
/// `target_size_bytes` bytes of the given kind, with the given options.
pub fn compute_geometry(
    opts: &MkfsOptions,
    target_size_bytes: u64,
    target_kind: TargetKind,
) -> Result<MkfsGeometry, MkfsError> {
    let topo = target_kind.topology();
    let mut warnings = Vec::new();
    let (blocksize, sectorsize) = sizes(opts, &topo, &mut warnings)?;
    let blocklog = highbit(u64::from(blocksize));
    let feat = features::choose(opts)?;
    warnings.extend(features::autofsck_warnings(&feat));
    let dirblocklog = match &opts.dir_block_size {
        Some(t) => {
            let v = N_SIZE.number(t, u64::from(blocksize), u64::from(sectorsize))? as u64;
            if v < u64::from(blocksize) || v > 65536 {
                return Err(geom(format!("illegal directory block size {v}")));
            }
            highbit(v)
        }
        None => blocklog.max(12),
    };
    let inodelog = inode_log(opts, blocklog, blocksize)?;
    let mut cfg = Cfg {
        blocksize,
        blocklog,
        sectorsize,
        sectorlog: highbit(u64::from(sectorsize)),
        lsectorsize: sectorsize,
        dirblocklog,
        inodelog,
        dblocks: 0,
        logblocks: 0,
        agsize: 0,
        agcount: 0,
        dsunit: 0,
        dswidth: 0,
        lsunit: 0,
        imaxpct: 0,
        feat,
        agfl_v2: opts.defaults.unwrap_or_default() >= super::profiles::Defaults::V6_12,
        data_threads: 0,
        log_threads: 0,
        warnings,
        logdev: None,
    };
    log_sector_size(opts, &mut cfg)?;
    // Asked for, or (as mkfs.xfs 6.10 and later) one per processor on a
    // solid-state device.
    let auto = || {
        (topo.solid_state && cfg.agfl_v2)
            .then(super::options::online_cpus)
            .unwrap_or(0)
    };
    cfg.data_threads = opts.data_concurrency.unwrap_or_else(auto);
    cfg.log_threads = opts.log_concurrency.unwrap_or_else(auto);
    if let Some(t) = &opts.data_size {
        cfg.dblocks = dev_blocks(t, &D_SIZE, "data", &mut cfg)?;
    }
    if let Some(t) = &opts.log_size {
        cfg.logblocks = dev_blocks(t, &L_SIZE, "log", &mut cfg)?;
    }
    let dev_blocks = (target_size_bytes / 512) >> (blocklog - 9);
    if cfg.dblocks == 0 {
        if target_size_bytes == 0 {
            return Err(geom("can't get size of data subvolume".into()));
        }
        cfg.dblocks = dev_blocks;
    } else if matches!(target_kind, TargetKind::BlockDevice(_)) && cfg.dblocks > dev_blocks {
        return Err(geom(format!(
            "size {} specified for data subvolume is too large, maximum is {dev_blocks} blocks",
            opts.data_size.as_deref().unwrap_or("")
        )));
    }
    if cfg.dblocks < ag_min_blocks(blocklog) {
        return Err(geom(format!(
            "size {} of data subvolume is too small, minimum {} blocks",
            cfg.dblocks,
            ag_min_blocks(blocklog)
        )));
    }
    stripe_factors(opts, &topo, &mut cfg)?;
    initial_ag_geometry(opts, &mut cfg)?;
    align_ag_geometry(opts, &mut cfg)?;
    cfg.imaxpct = match opts.imaxpct {
        Some(p) if p != 0 => p,
        _ if cfg.dblocks < tib_blocks(1, blocklog) => DEFAULT_IMAXPCT,
        _ if cfg.dblocks < tib_blocks(50, blocklog) => 5,
        _ => 1,
    };
    let log = match cfg.logdev.clone() {
        Some(dev) => log::place_external_log(opts, &mut cfg, &dev)?,
        None => log::place_log(opts, &mut cfg)?,
    };
    features::finish(opts, cfg, log)
}

/// The log's sector size: the data sector size for an internal log (which
/// `-l sectsize=` may not change), else `-l sectsize=` (or `-s size=`) or
/// the log device's logical sector size, as mkfs.xfs chooses it.
fn log_sector_size(opts: &MkfsOptions, cfg: &mut Cfg) -> Result<(), MkfsError> {
    let Some(name) = &opts.log_dev else {
        if opts.log_sector_size.is_some_and(|s| s != cfg.sectorsize) {
            return Err(MkfsError::BadOption(
                "Can't change sector size on internal log!".into(),
            ));
        }
        return Ok(());
    };
    let dev = log::log_device(name)?;
    let size = opts.log_sector_size.unwrap_or(dev.sector);
    if !(512..=32768).contains(&size) || !size.is_power_of_two() || size > cfg.blocksize {
        return Err(geom(format!("illegal log sector size {size}")));
    }
    if dev.sector > size {
        cfg.warnings.push(format!(
            "Warning: the log subvolume sector size {size} is less than the sector size\n\
             reported by the device ({}).",
            dev.sector
        ));
    }
    if size > cfg.sectorsize {
        // mkfs.xfs makes it, but Linux refuses to mount a log whose sector
        // is larger than the data device's ("Log sector size too large").
        cfg.warnings.push(format!(
            "warning: log sector size {size} is larger than the data sector size {}: \
             Linux will not mount this filesystem (give -s size={size} too)",
            cfg.sectorsize
        ));
    }
    cfg.lsectorsize = size;
    cfg.logdev = Some(dev);
    Ok(())
}

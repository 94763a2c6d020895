//! Size and place the log: an internal one by filesystem size, in the
//! middle AG, its start and length aligned to the stripe unit; an external
//! one (`-l logdev=`) the whole log device or `-l size=`, from its block 0.

use super::geometry::Cfg;
use super::layout::*;
use super::options::{MkfsError, MkfsOptions};
use crate::log::resv;

/// Where the internal log goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogPlacement {
    /// AG-encoded start block (sb_logstart).
    pub logstart: u64,
    /// Length in blocks.
    pub logblocks: u64,
    /// AG holding the log (0 for an external log).
    pub agno: u64,
    /// The log is on its own device (`-l logdev=`): sb_logstart is 0 and
    /// no AG holds it.
    pub external: bool,
}

/// The external log device (`-l logdev=`) as mkfs.xfs sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogDevice {
    /// Its name on the command line.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its logical sector size (512 for a regular file).
    pub sector: u32,
}

/// Look at the log device `name`: it must exist (mkfs.xfs does not create
/// one) and be a regular file or a block device.
pub(crate) fn log_device(name: &str) -> Result<LogDevice, MkfsError> {
    use std::os::unix::fs::FileTypeExt;
    let io =
        |e: std::io::Error| MkfsError::Io(format!("Error accessing specified device {name}: {e}"));
    let meta = std::fs::metadata(name).map_err(io)?;
    let (bytes, sector) = if meta.file_type().is_block_device() {
        let len = crate::dev::FileDevice::open_read_only(std::path::Path::new(name))
            .map(|d| crate::dev::Device::len(&d))
            .map_err(io)?;
        (
            len,
            super::format::block_topology(&meta).logical_sector_size,
        )
    } else if meta.is_file() {
        (meta.len(), 512)
    } else {
        return Err(MkfsError::Io(format!(
            "log device {name}: not a regular file or block device"
        )));
    };
    Ok(LogDevice {
        name: name.to_string(),
        bytes,
        sector,
    })
}

/// The blocks of the log device as mkfs.xfs counts them: its size in
/// 512-byte units rounded down to whole log sectors (at least 1 KiB).
pub(crate) fn device_blocks(dev: &LogDevice, lsectorsize: u32, blog: u32) -> u64 {
    let lsectlog = lsectorsize.trailing_zeros().max(10);
    let bb = (dev.bytes >> 9) & (u64::MAX << (lsectlog - 9));
    bb >> (blog - 9)
}

/// The external log's length: the whole device unless `-l size=` asked
/// for less, checked against the minimum the reservations need and
/// rounded to the log stripe unit, as mkfs.xfs does.
pub(crate) fn place_external_log(
    opts: &MkfsOptions,
    cfg: &mut Cfg,
    dev: &LogDevice,
) -> Result<LogPlacement, MkfsError> {
    let blog = cfg.blocklog;
    let dev_blocks = device_blocks(dev, cfg.lsectorsize, blog);
    let user_size = opts.log_size.is_some();
    let mut logblocks = cfg.logblocks;
    if logblocks == 0 {
        if dev_blocks == 0 {
            return Err(MkfsError::BadOption(
                "unable to get size of the log subvolume.".into(),
            ));
        }
        logblocks = dev_blocks;
    } else if logblocks > dev_blocks {
        return Err(MkfsError::BadOption(format!(
            "size {} specified for log subvolume is too large, maximum is {dev_blocks} blocks",
            opts.log_size.as_deref().unwrap_or("")
        )));
    }
    let min = min_log_blocks(opts, cfg, user_size);
    if min > logblocks {
        return Err(geom(format!(
            "external log device size {logblocks} blocks too small, must be at least {min} blocks"
        )));
    }
    if cfg.lsunit != 0 {
        let max = dev_blocks.min(MAX_LOG_BLOCKS);
        align_size(&mut logblocks, cfg.lsunit, max, user_size, blog)?;
    }
    validate_size(logblocks, blog, min)?;
    cfg.logblocks = logblocks;
    Ok(LogPlacement {
        logstart: 0,
        logblocks,
        agno: 0,
        external: true,
    })
}

fn geom(msg: String) -> MkfsError {
    MkfsError::Geometry(msg)
}

/// Lower bound for the log length in blocks, as mkfs.xfs computes it: the
/// smallest log the transaction reservations allow (`log::resv`), at least
/// 512 blocks, and at least 10 MiB on filesystems of 1 GiB and more when
/// no log size was given.
pub(crate) fn min_log_blocks(opts: &MkfsOptions, cfg: &Cfg, user_size: bool) -> u64 {
    let resv = resv::min_log_blocks(&resv_geometry(opts, cfg), resv::Rules::Mkfs);
    let mut min = resv.max(MIN_LOG_BLOCKS);
    if !user_size && cfg.dblocks >= (1u64 << 30) >> cfg.blocklog {
        min = min.max(MIN_LOG_BYTES >> cfg.blocklog);
    }
    min
}

/// The superblock fields the reservations depend on, as mkfs.xfs has them
/// when it sizes the log (the realtime section's size known, its bitmap
/// and summary not yet laid out).
fn resv_geometry(opts: &MkfsOptions, cfg: &Cfg) -> resv::ResvGeometry {
    let f = cfg.feat;
    let inode_align = if f.sparse {
        (INODES_PER_CHUNK << cfg.inodelog) >> cfg.blocklog
    } else {
        ((INODE_CLUSTER_SIZE << cfg.inodelog) / 256) >> cfg.blocklog
    };
    let rt_extsize =
        super::realtime::extent_blocks(opts, cfg.blocksize, cfg.blocklog, f.reflink && f.metadir)
            .unwrap_or(1);
    // An unreadable device fails later, in the realtime planning, with
    // mkfs.xfs's message; the minimum is then of no use.
    let rt_blocks =
        super::realtime::section_blocks(opts, cfg.blocksize, cfg.blocklog, cfg.sectorsize)
            .unwrap_or(0);
    resv::ResvGeometry {
        block_log: cfg.blocklog,
        sect_size: cfg.sectorsize,
        inode_size: 1 << cfg.inodelog,
        inopb_log: cfg.blocklog - cfg.inodelog,
        ag_blocks: cfg.agsize as u32,
        ag_blk_log: log2_roundup(cfg.agsize),
        data_blocks: cfg.dblocks,
        dir_blk_log: cfg.dirblocklog - cfg.blocklog,
        inode_align: inode_align as u32,
        log_sunit: if cfg.lsunit != 0 {
            (cfg.lsunit << cfg.blocklog) as u32
        } else {
            1
        },
        logv2: true,
        v5: true,
        finobt: f.finobt,
        rmapbt: f.rmapbt,
        reflink: f.reflink,
        nrext64: f.nrext64,
        parent: f.parent,
        metadir: f.metadir,
        rt_blocks,
        rt_extsize,
        rg_extents: if f.metadir && rt_blocks > 0 {
            super::rtgroups::group_geometry(
                opts,
                cfg.blocksize,
                cfg.blocklog,
                cfg.sectorsize,
                rt_blocks,
                u64::from(rt_extsize.max(1)),
            )
            .map_or(0, |(size, _)| (size / u64::from(rt_extsize.max(1))) as u32)
        } else {
            0
        },
        rsum_blocks: 0,
    }
}

/// The log `-l concurrency=threads` asks for, as mkfs.xfs 6.10 and later
/// size it: room for that many of the largest transactions at once, and
/// half as much again for background work, never smaller than `logblocks`
/// nor larger than a log can be; unchanged on filesystems under 1 GiB.
fn concurrency_log_blocks(opts: &MkfsOptions, cfg: &Cfg, logblocks: u64, threads: u64) -> u64 {
    if cfg.dblocks < (1u64 << 30) >> cfg.blocklog {
        return logblocks;
    }
    let max = resv::max_trans_res(&resv_geometry(opts, cfg), resv::Rules::Mkfs);
    // mkfs.xfs keeps the product in 32 bits, the rest in 64.
    let tx_bytes = u64::from((max.logres * max.logcount) as u32);
    let bytes = tx_bytes * 3 * threads / 2;
    let wanted = (MAX_LOG_BYTES >> cfg.blocklog).min(u64::from((bytes >> cfg.blocklog) as u32));
    logblocks.max(wanted)
}

fn validate_size(logblocks: u64, blog: u32, min: u64) -> Result<(), MkfsError> {
    if logblocks < min {
        return Err(geom(format!(
            "log size {logblocks} blocks too small, minimum size is {min} blocks"
        )));
    }
    if logblocks > MAX_LOG_BLOCKS {
        return Err(geom(format!(
            "log size {logblocks} blocks too large, maximum size is {MAX_LOG_BLOCKS} blocks"
        )));
    }
    if logblocks << blog > MAX_LOG_BYTES {
        return Err(geom(format!(
            "log size {} bytes too large, maximum size is {MAX_LOG_BYTES} bytes",
            logblocks << blog
        )));
    }
    Ok(())
}

/// Geometry view needed to check AG-encoded block numbers.
struct AgView {
    agblklog: u32,
    agblocks: u64,
    agcount: u64,
    dblocks: u64,
    agfl_block: u64,
}

impl AgView {
    fn ag_len(&self, agno: u64) -> u64 {
        if agno + 1 < self.agcount {
            self.agblocks
        } else {
            self.dblocks - (self.agcount - 1) * self.agblocks
        }
    }

    /// Is `fsb` a valid block outside the AG headers?
    fn valid(&self, fsb: u64) -> bool {
        let agno = fsb >> self.agblklog;
        let agbno = fsb & ((1u64 << self.agblklog) - 1);
        agno < self.agcount && agbno < self.ag_len(agno) && agbno > self.agfl_block
    }

    /// Does the extent lie inside one AG?
    fn valid_extent(&self, fsb: u64, len: u64) -> bool {
        len != 0
            && self.valid(fsb)
            && self.valid(fsb + len - 1)
            && fsb >> self.agblklog == (fsb + len - 1) >> self.agblklog
    }
}

fn align_size(
    logblocks: &mut u64,
    sunit: u64,
    max_logblocks: u64,
    user_size: bool,
    blog: u32,
) -> Result<(), MkfsError> {
    if (*logblocks).is_multiple_of(sunit) {
        return Ok(());
    }
    if user_size {
        return Err(geom(format!(
            "log size {} is not a multiple of the log stripe unit {sunit}",
            *logblocks
        )));
    }
    let mut tmp = round_up(*logblocks, sunit);
    if tmp > MAX_LOG_BLOCKS || tmp << blog > MAX_LOG_BYTES || tmp > max_logblocks {
        tmp = (*logblocks / sunit) * sunit;
    }
    *logblocks = tmp;
    Ok(())
}

/// Choose the internal log's size and position, as mkfs.xfs does.
pub(crate) fn place_log(opts: &MkfsOptions, cfg: &mut Cfg) -> Result<LogPlacement, MkfsError> {
    let blog = cfg.blocklog;
    let user_size = opts.log_size.is_some();
    let min = min_log_blocks(opts, cfg, user_size);
    let prealloc = super::features::prealloc_blocks(cfg);
    let mut max_logblocks = super::features::ag_max_usable(cfg).saturating_sub(1);
    if max_logblocks < min {
        return Err(geom(format!(
            "max log size {max_logblocks} smaller than min log size {min}, filesystem is too small"
        )));
    }
    let mut logblocks = cfg.logblocks;
    if logblocks == 0 {
        logblocks = ((cfg.dblocks << blog) / 2048) >> blog;
        if cfg.log_threads > 0 {
            logblocks = concurrency_log_blocks(opts, cfg, logblocks, cfg.log_threads);
        }
        logblocks = logblocks.max(mib_blocks(64, blog));
        if cfg.dblocks < mib_blocks(300, blog) {
            logblocks = min;
        }
        logblocks = logblocks.max(min).min(max_logblocks).min(MAX_LOG_BLOCKS);
        if logblocks << blog > MAX_LOG_BYTES {
            logblocks = MAX_LOG_BYTES >> blog;
        }
        validate_size(logblocks, blog, min)?;
    } else if logblocks > max_logblocks {
        return Err(geom(format!(
            "internal log size {logblocks} too large, must be less than {max_logblocks}"
        )));
    }
    if logblocks > cfg.agsize - prealloc {
        return Err(geom(format!(
            "internal log size {logblocks} too large, must fit in allocation group"
        )));
    }
    let agno = match opts.log_agnum {
        Some(n) if n >= cfg.agcount => {
            return Err(MkfsError::BadOption(format!(
                "log ag number {n} too large, must be less than {}",
                cfg.agcount
            )))
        }
        Some(n) => n,
        None => cfg.agcount / 2,
    };
    if agno == 0 && cfg.feat.metadir {
        // mkfs.xfs then takes the metadata directory's children from the
        // root directory's chunk; xfskit lays out a chunk of their own.
        return Err(MkfsError::Unsupported(
            "a metadata directory with the log in AG 0 (-m metadir=1 with -l agnum=0 or one AG)"
                .into(),
        ));
    }
    if agno == 0 {
        let ichunk = (INODES_PER_CHUNK << cfg.inodelog) >> blog;
        let backoff = (ichunk * 4).max(cfg.dsunit * 2);
        max_logblocks = max_logblocks.saturating_sub(backoff);
        if user_size && logblocks > max_logblocks {
            return Err(geom(format!(
                "internal log size {logblocks} too large, must be less than {max_logblocks}"
            )));
        }
        logblocks = logblocks.min(max_logblocks);
    }
    let agblklog = log2_roundup(cfg.agsize);
    let mut logstart = (agno << agblklog) | prealloc;
    let sunit = if cfg.lsunit != 0 {
        cfg.lsunit
    } else {
        cfg.dsunit
    };
    if sunit != 0 {
        let view = AgView {
            agblklog,
            agblocks: cfg.agsize,
            agcount: cfg.agcount,
            dblocks: cfg.dblocks,
            agfl_block: (3 * u64::from(cfg.sectorsize)) >> blog,
        };
        logstart = round_up(logstart, sunit);
        if !view.valid(logstart) {
            return Err(geom(format!(
                "Due to stripe alignment, the internal log start ({logstart}) cannot be aligned\n\
                 within an allocation group."
            )));
        }
        align_size(&mut logblocks, sunit, max_logblocks, user_size, blog)?;
        if !view.valid_extent(logstart, logblocks) && logblocks > sunit {
            logblocks -= sunit;
        }
        if !view.valid_extent(logstart, logblocks) {
            return Err(geom(format!(
                "Due to stripe alignment, the internal log size ({logblocks}) is too large.\n\
                 Must fit within an allocation group."
            )));
        }
    }
    validate_size(logblocks, blog, min)?;
    Ok(LogPlacement {
        logstart,
        logblocks,
        agno,
        external: false,
    })
}

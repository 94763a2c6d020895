//! Feature selection (mkfs.xfs 6.1 defaults), the superblock feature words,
//! fixed per-AG metadata blocks, root inode placement and fresh free counts.

use super::geometry::{Cfg, MetadirLayout, MkfsGeometry};
use super::layout::*;
use super::log::LogPlacement;
use super::options::{MkfsError, MkfsOptions};

/// On/off features of a V5 filesystem that mkfs lets the user choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSet {
    /// Free inode btree.
    pub finobt: bool,
    /// Sparse inode chunks.
    pub sparse: bool,
    /// Reverse-mapping btree.
    pub rmapbt: bool,
    /// Reference-count btree (reflink).
    pub reflink: bool,
    /// 64-bit nanosecond timestamps.
    pub bigtime: bool,
    /// Inode btree block counters in the AGI.
    pub inobtcount: bool,
    /// 64-bit extent counters.
    pub nrext64: bool,
    /// Parent pointers (incompat PARENT).
    pub parent: bool,
    /// File range exchange (incompat EXCHRANGE).
    pub exchange: bool,
    /// Metadata directory tree (incompat METADIR).
    pub metadir: bool,
    /// The `xfs:autofsck` attribute the root directory gets, if any.
    pub autofsck: Option<Autofsck>,
    /// Persistent quota flags (`sb_qflags`; metadir filesystems).
    pub qflags: u16,
}

/// The online fsck policy mkfs.xfs 7.2 records on the root directory as
/// the trusted attribute `xfs:autofsck` (`-m autofsck=`), for xfs_scrub's
/// background service to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autofsck {
    /// `none` (or `0`): no background checking.
    None,
    /// `check`: check only.
    Check,
    /// `optimize`: check and optimise.
    Optimize,
    /// `repair` (or `1`, or the option alone): check and repair.
    Repair,
}

impl Autofsck {
    /// The value of `-m autofsck=VALUE` as mkfs.xfs 7.2 takes it.
    pub fn parse(value: &str) -> Option<Autofsck> {
        Some(match value {
            "none" | "0" => Autofsck::None,
            "check" => Autofsck::Check,
            "optimize" => Autofsck::Optimize,
            "repair" | "1" | "" => Autofsck::Repair,
            _ => return None,
        })
    }

    /// The attribute's value.
    pub fn value(self) -> &'static [u8] {
        match self {
            Autofsck::None => b"none",
            Autofsck::Check => b"check",
            Autofsck::Optimize => b"optimize",
            Autofsck::Repair => b"repair",
        }
    }
}

/// The name of the root directory's online fsck attribute (trusted
/// namespace).
pub const AUTOFSCK_NAME: &[u8] = b"xfs:autofsck";

/// The superblock words that hold feature bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// sb_versionnum.
    pub versionnum: u16,
    /// sb_features2 (and sb_bad_features2, always equal).
    pub features2: u32,
    /// sb_features_compat.
    pub compat: u32,
    /// sb_features_ro_compat.
    pub ro_compat: u32,
    /// sb_features_incompat.
    pub incompat: u32,
    /// sb_features_log_incompat.
    pub log_incompat: u32,
    /// sb_qflags: persistent quota flags.
    pub qflags: u16,
}

// sb_versionnum bits.
const VERSION_5: u16 = 5;
const VERSION_ATTRBIT: u16 = 0x0010;
const VERSION_QUOTABIT: u16 = 0x0040;
const VERSION_NLINKBIT: u16 = 0x0020;
const VERSION_ALIGNBIT: u16 = 0x0080;
const VERSION_DALIGNBIT: u16 = 0x0100;
const VERSION_LOGV2BIT: u16 = 0x0400;
const VERSION_SECTORBIT: u16 = 0x0800;
const VERSION_EXTFLGBIT: u16 = 0x1000;
const VERSION_DIRV2BIT: u16 = 0x2000;
const VERSION_MOREBITSBIT: u16 = 0x8000;
// sb_features2 bits.
const F2_LAZYSBCOUNT: u32 = 0x0002;
const F2_ATTR2: u32 = 0x0008;
const F2_PROJID32: u32 = 0x0080;
const F2_CRC: u32 = 0x0100;
// V5 feature bits.
const RO_FINOBT: u32 = 1;
const RO_RMAPBT: u32 = 2;
const RO_REFLINK: u32 = 4;
const RO_INOBTCNT: u32 = 8;
const IN_FTYPE: u32 = 1;
const IN_SPINODES: u32 = 2;
const IN_BIGTIME: u32 = 8;
const IN_NREXT64: u32 = 0x20;
const IN_EXCHRANGE: u32 = 0x40;
const IN_PARENT: u32 = 0x80;
const IN_METADIR: u32 = 0x100;

/// Apply the user's `-m`/`-i`/`-n` choices to the defaults of the
/// xfsprogs release chosen with `--defaults` (6.18 when none is given).
pub(crate) fn choose(opts: &MkfsOptions) -> Result<FeatureSet, MkfsError> {
    let d = opts.defaults.unwrap_or_default().features();
    let finobt = opts.finobt.unwrap_or(d.finobt);
    let mut inobtcount = opts.inobtcount.unwrap_or(d.inobtcount);
    if !finobt {
        if opts.inobtcount == Some(true) {
            return Err(MkfsError::Geometry(
                "inode btree counters not supported without finobt support".into(),
            ));
        }
        inobtcount = false;
    }
    let mut metadir = opts.metadir.unwrap_or(d.metadir);
    // As mkfs.xfs 7.2: persistent quota flags need a metadata directory
    // (older kernels, and old filesystems, drop the flags at a mount
    // without quota options), which they turn on unless it was turned off.
    if opts.qflags != 0 && !metadir {
        if opts.metadir == Some(false) {
            return Err(MkfsError::BadOption(
                "persistent quota flags not supported without metadir support".into(),
            ));
        }
        metadir = true;
    }
    // As mkfs.xfs 6.15: a metadata directory brings exchange-range along,
    // and refuses it turned off.
    if metadir && opts.exchange == Some(false) {
        return Err(MkfsError::BadOption(
            "metadir not supported without exchange-range support".into(),
        ));
    }
    // As mkfs.xfs 6.15: a classic realtime section has no reverse mapping
    // or reflink (they come only with realtime groups, which need metadir).
    let classic_rt = opts.rt_dev.is_some() && !metadir;
    if classic_rt && (opts.reflink == Some(true) || opts.rmapbt == Some(true)) {
        return Err(MkfsError::BadOption(
            "reverse mapping and reflink on a realtime section need realtime groups (-m metadir=1)"
                .into(),
        ));
    }
    if !metadir && (opts.rt_rgcount.is_some() || opts.rt_rgsize.is_some()) {
        return Err(MkfsError::BadOption(
            "realtime groups (-r rgcount=, rgsize=) need -m metadir=1".into(),
        ));
    }
    let rt = classic_rt;
    let mut f = FeatureSet {
        finobt,
        sparse: opts.sparse.unwrap_or(d.sparse),
        rmapbt: !rt && opts.rmapbt.unwrap_or(d.rmapbt),
        reflink: !rt && opts.reflink.unwrap_or(d.reflink),
        bigtime: opts.bigtime.unwrap_or(d.bigtime),
        inobtcount,
        nrext64: opts.nrext64.unwrap_or(d.nrext64),
        parent: opts.parent.unwrap_or(d.parent),
        // As mkfs.xfs 6.15: parent pointers bring exchange-range along
        // unless it is turned off explicitly.
        exchange: metadir
            || opts
                .exchange
                .unwrap_or(d.exchange || opts.parent == Some(true)),
        metadir,
        autofsck: None,
        qflags: opts.qflags,
    };
    // As mkfs.xfs 7.2: the policy asked for; else, with 7.2's defaults,
    // `repair` when every back-reference online repair uses is there
    // (reverse mapping and parent pointers); else none.
    f.autofsck = opts
        .autofsck
        .or_else(|| (d.autofsck.is_some() && f.rmapbt && f.parent).then_some(Autofsck::Repair));
    Ok(f)
}

/// mkfs.xfs 7.2's warnings about a background fsck policy on a filesystem
/// without what online repair relies on.
pub(crate) fn autofsck_warnings(f: &FeatureSet) -> Vec<String> {
    let Some(a) = f.autofsck.filter(|a| *a != Autofsck::None) else {
        return Vec::new();
    };
    let name = String::from_utf8_lossy(a.value()).into_owned();
    let mut w = Vec::new();
    if !f.rmapbt {
        w.push(format!(
            "-m autofsck={name} is less effective without reverse mapping"
        ));
    }
    if !f.parent {
        w.push(format!(
            "-m autofsck={name} is less effective without parent pointers"
        ));
    }
    w
}

/// AG block of the AGFL (the fourth header sector).
fn agfl_block(cfg: &Cfg) -> u64 {
    (3 * u64::from(cfg.sectorsize)) >> cfg.blocklog
}

/// First AG block after the headers and every btree root block.
pub(crate) fn prealloc_blocks(cfg: &Cfg) -> u64 {
    let inobt_root = agfl_block(cfg) + 3; // bnobt, cntbt, then inobt
    let f = cfg.feat;
    inobt_root + 1 + u64::from(f.finobt) + u64::from(f.rmapbt) + u64::from(f.reflink)
}

/// Blocks of an AG that can ever hold data (libxfs "ag max usable").
pub(crate) fn ag_max_usable(cfg: &Cfg) -> u64 {
    let header_bb = 4 * u64::from(cfg.sectorsize) / 512;
    let blkbb_log = cfg.blocklog - 9;
    let mut used = (header_bb + (1 << blkbb_log) - 1) >> blkbb_log;
    used += 4 + 3; // AGFL refill reserve, bnobt/cntbt/inobt roots
    let f = cfg.feat;
    used += u64::from(f.finobt) + u64::from(f.rmapbt) + u64::from(f.reflink);
    cfg.agsize.saturating_sub(used)
}

/// Height of the tallest btree that can index `len` records with the given
/// (minimum) leaf and node fan-outs.
fn compute_maxlevels(leaf: u64, node: u64, len: u64) -> u64 {
    let mut level = 1;
    let mut blocks = len.div_ceil(leaf);
    while blocks > 1 {
        blocks = blocks.div_ceil(node);
        level += 1;
    }
    level
}

/// Height a btree reaches when it may fill `leaf_blocks` blocks.
fn space_to_height(node: u64, leaf_blocks: u64) -> u64 {
    if leaf_blocks < 1 {
        return 0;
    }
    let mut node_blocks = node;
    let mut left = leaf_blocks - 1;
    let mut height = 1;
    while node_blocks < left {
        left -= node_blocks;
        node_blocks = node_blocks.saturating_mul(node);
        height += 1;
    }
    height
}

/// Blocks a fresh AG keeps on its free list, for each free-space btree
/// (and the rmap btree) from its height of 1 and the tallest that tree can
/// ever be in an AG of this size (`max`). xfsprogs before 6.8 (as mkfs.xfs
/// 6.1) keeps min(2, max) blocks; 6.8 and later (as mkfs.xfs and
/// xfs_repair 6.15 and the kernel) 2 * min(2, max) - 2, which differs only
/// for a tree that can never grow past one level (big blocks, small AGs):
/// xfs_repair 6.15 expects the root inode where its rule puts it.
pub(crate) fn min_freelist(cfg: &Cfg) -> u64 {
    let per = |max: u64| {
        if cfg.agfl_v2 {
            (2u64.min(max) * 2).saturating_sub(2)
        } else {
            2u64.min(max)
        }
    };
    let bs = u64::from(cfg.blocksize);
    let hdr = 56;
    // Minimum records per block are half the maximum.
    let alloc_leaf = (bs - hdr) / 8 / 2;
    let alloc_node = (bs - hdr) / 12 / 2;
    let alloc_max = compute_maxlevels(alloc_leaf, alloc_node, cfg.agsize.div_ceil(2));
    let mut free = per(alloc_max) * 2;
    if cfg.feat.rmapbt {
        let rmap_leaf = (bs - hdr) / 24 / 2;
        let rmap_node = (bs - hdr) / 44 / 2;
        let rmap_max = if cfg.feat.reflink {
            space_to_height(rmap_node, cfg.agsize)
        } else {
            compute_maxlevels(rmap_leaf, rmap_node, cfg.agsize)
        };
        free += per(rmap_max);
    }
    free
}

fn feature_words(cfg: &Cfg) -> (Features, u32, u32) {
    let f = cfg.feat;
    let mut v = VERSION_5 | VERSION_NLINKBIT | VERSION_EXTFLGBIT | VERSION_DIRV2BIT;
    v |= VERSION_ALIGNBIT | VERSION_LOGV2BIT;
    let cluster = (INODE_CLUSTER_SIZE << cfg.inodelog) / 256;
    let mut inoalignmt = (cluster >> cfg.blocklog) as u32;
    if cfg.dsunit != 0 {
        v |= VERSION_DALIGNBIT;
    }
    if cfg.sectorsize > 512 || cfg.lsectorsize > 512 {
        v |= VERSION_SECTORBIT;
    }
    let features2 = F2_LAZYSBCOUNT | F2_PROJID32 | F2_CRC | F2_ATTR2;
    v |= VERSION_MOREBITSBIT;
    if f.parent || f.autofsck.is_some() {
        // As mkfs.xfs: the attribute bit goes on with parent pointers, even
        // before the first one is written, and with the root's autofsck
        // attribute.
        v |= VERSION_ATTRBIT;
    }
    let mut ro = 0;
    let mut inc = IN_FTYPE;
    if f.finobt {
        ro |= RO_FINOBT;
    }
    if f.rmapbt {
        ro |= RO_RMAPBT;
    }
    if f.reflink {
        ro |= RO_REFLINK;
    }
    if f.inobtcount {
        ro |= RO_INOBTCNT;
    }
    if f.bigtime {
        inc |= IN_BIGTIME;
    }
    let mut spino = 0;
    if f.sparse {
        spino = inoalignmt;
        inoalignmt = ((INODES_PER_CHUNK << cfg.inodelog) >> cfg.blocklog) as u32;
        inc |= IN_SPINODES;
    }
    if f.nrext64 {
        inc |= IN_NREXT64;
    }
    if f.exchange {
        inc |= IN_EXCHRANGE;
    }
    if f.parent {
        inc |= IN_PARENT;
    }
    if f.metadir {
        inc |= IN_METADIR;
    }
    if f.qflags != 0 {
        v |= VERSION_QUOTABIT;
    }
    let words = Features {
        versionnum: v,
        features2,
        compat: 0,
        ro_compat: ro,
        incompat: inc,
        log_incompat: 0,
        qflags: f.qflags,
    };
    (words, inoalignmt, spino)
}

/// The alignment of a new inode chunk: the stripe unit when it aligns
/// inodes, else the inode alignment (0 or 1: none).
fn chunk_align(cfg: &Cfg, inoalignmt: u64) -> u64 {
    let bs = u64::from(cfg.blocksize);
    // Inode cluster geometry decides whether the stripe unit aligns inodes.
    let mut cluster_raw = INODE_CLUSTER_SIZE;
    let scaled = cluster_raw << cfg.inodelog >> 8;
    if inoalignmt >= scaled >> cfg.blocklog {
        cluster_raw = scaled;
    }
    let blocks_per_cluster = if cluster_raw > bs {
        cluster_raw >> cfg.blocklog
    } else {
        1
    };
    let cluster_align = if inoalignmt >= blocks_per_cluster {
        inoalignmt
    } else {
        1
    };
    let mask = cluster_align - 1;
    let ialloc_align = cfg.dsunit != 0 && mask != 0 && cfg.dsunit & mask == 0;
    if cfg.dsunit != 0 && ialloc_align {
        cfg.dsunit
    } else {
        inoalignmt
    }
}

/// AG block where mkfs allocates the root directory's inode chunk.
fn root_chunk_block(cfg: &Cfg, log: &LogPlacement, inoalignmt: u64, agblklog: u32) -> u64 {
    let f = cfg.feat;
    let bs = u64::from(cfg.blocksize);
    let mut first = (4 * u64::from(cfg.sectorsize)).div_ceil(bs) + 3 + min_freelist(cfg);
    first += u64::from(f.finobt) + u64::from(f.rmapbt) + u64::from(f.reflink);
    if !log.external && log.logstart >> agblklog == 0 {
        first += log.logblocks;
    }
    let align = chunk_align(cfg, inoalignmt);
    if align > 1 {
        first = round_up(first, align);
    }
    first
}

/// The metadata directory's layout: its root takes the inode after the root
/// directory; the `rtgroups` directory under it gets a new chunk in the
/// log's AG (mkfs.xfs puts metadata directories' children there), at the
/// lowest aligned place of that AG's free space once its free list is full.
fn metadir_layout(g: &MkfsGeometry, align: u64) -> Result<MetadirLayout, MkfsError> {
    let agno = g.log_agno;
    let (free, _) = super::writer::free_after_agfl(g, agno);
    let len = u64::from(g.ialloc_blocks);
    let agbno = free
        .iter()
        .find_map(|&(s, l)| {
            let start = round_up(u64::from(s), align.max(1));
            (start + len <= u64::from(s) + u64::from(l)).then_some(start)
        })
        .ok_or_else(|| {
            MkfsError::Geometry(format!(
                "no room for the metadata directory's inode chunk in AG {agno}"
            ))
        })?;
    let rtdir_ino = (u64::from(agno) << (u32::from(g.agblklog) + u32::from(g.inopblog)))
        | (agbno << g.inopblog);
    // No realtime section: one group of 1 TiB (in whole realtime extents).
    let rextsize = u64::from(g.rextsize);
    let mut rgblocks = (1u64 << 40) >> g.blocklog;
    rgblocks -= rgblocks % rextsize;
    let rgextents = rgblocks / rextsize;
    let rgblklog = highbit(rgextents * rextsize - 1) + 1;
    Ok(MetadirLayout {
        metadirino: g.rootino + 1,
        rtdir_ino,
        rtdir_agno: agno,
        rtdir_agbno: agbno as u32,
        rgcount: 0,
        rgextents: rgextents as u32,
        rgblklog: rgblklog as u8,
    })
}

/// The sizes mkfs.xfs supports (it makes smaller ones only for fstests).
fn supported_sizes(cfg: &Cfg, log: &LogPlacement) -> Result<(), MkfsError> {
    if cfg.dblocks < mib_blocks(300, cfg.blocklog) {
        return Err(MkfsError::Geometry(
            "Filesystem must be larger than 300MB.".into(),
        ));
    }
    if log.logblocks < mib_blocks(64, cfg.blocklog) {
        return Err(MkfsError::Geometry(
            "Log size must be at least 64MiB.".into(),
        ));
    }
    if cfg.agcount < 2 {
        return Err(MkfsError::Geometry(
            "Filesystem must have at least 2 superblocks for redundancy!".into(),
        ));
    }
    Ok(())
}

/// Fill in the superblock values from the finished configuration.
pub(crate) fn finish(
    opts: &MkfsOptions,
    cfg: Cfg,
    log: LogPlacement,
) -> Result<MkfsGeometry, MkfsError> {
    let (features, inoalignmt, spino_align) = feature_words(&cfg);
    let agblklog = log2_roundup(cfg.agsize);
    let inopblog = cfg.blocklog - cfg.inodelog;
    let inopblock = 1u64 << inopblog;
    let prealloc = prealloc_blocks(&cfg);
    let root_bno = root_chunk_block(&cfg, &log, u64::from(inoalignmt), agblklog);
    let rootino = root_bno << inopblog;
    let ialloc_inos = INODES_PER_CHUNK.max(inopblock);
    let ialloc_blocks = ialloc_inos >> inopblog;
    if !opts.unsupported {
        supported_sizes(&cfg, &log)?;
    }
    let internal_log = if log.external { 0 } else { log.logblocks };
    let fdblocks = cfg.dblocks - cfg.agcount * prealloc - internal_log - ialloc_blocks;
    let mut label = [0u8; 12];
    if let Some(l) = &opts.label {
        let n = l.len().min(12);
        label[..n].copy_from_slice(&l.as_bytes()[..n]);
    }
    let small_sectors = cfg.sectorsize <= 512 && cfg.lsectorsize <= 512;
    let metadir = cfg.feat.metadir;
    let align = chunk_align(&cfg, u64::from(inoalignmt));
    let mut g = MkfsGeometry {
        blocksize: cfg.blocksize,
        blocklog: cfg.blocklog as u8,
        sectsize: cfg.sectorsize as u16,
        sectlog: cfg.sectorlog as u8,
        logsectsize: if small_sectors {
            0
        } else {
            cfg.lsectorsize as u16
        },
        logsectlog: if small_sectors {
            0
        } else {
            highbit(u64::from(cfg.lsectorsize)) as u8
        },
        agblocks: cfg.agsize as u32,
        agblklog: agblklog as u8,
        agcount: cfg.agcount as u32,
        dblocks: cfg.dblocks,
        rblocks: 0,
        rextents: 0,
        rextsize: super::realtime::extent_blocks(
            opts,
            cfg.blocksize,
            cfg.blocklog,
            cfg.feat.reflink && metadir,
        )?,
        logstart: log.logstart,
        logdev: cfg.logdev.as_ref().map(|d| d.name.clone()),
        log_agno: log.agno as u32,
        logblocks: log.logblocks as u32,
        logsunit: if cfg.lsunit != 0 {
            (cfg.lsunit << cfg.blocklog) as u32
        } else {
            1
        },
        inodesize: 1 << cfg.inodelog,
        inodelog: cfg.inodelog as u8,
        inopblock: inopblock as u16,
        inopblog: inopblog as u8,
        imax_pct: cfg.imaxpct as u8,
        inoalignmt,
        spino_align,
        unit: cfg.dsunit as u32,
        width: cfg.dswidth as u32,
        dirblklog: (cfg.dirblocklog - cfg.blocklog) as u8,
        features,
        rootino,
        rbmino: rootino + 1,
        rsumino: rootino + 2,
        metadir: None,
        rt: None,
        icount: ialloc_inos,
        ifree: ialloc_inos - 3,
        fdblocks,
        prealloc_blocks: prealloc as u32,
        agfl_min: min_freelist(&cfg) as u32,
        ialloc_blocks: ialloc_blocks as u32,
        label,
        uuid: opts.uuid.unwrap_or([0; 16]),
        data_name: opts.data_name.clone(),
        warnings: cfg.warnings,
        autofsck: cfg.feat.autofsck,
        root_atime: opts.defaults.unwrap_or_default() >= super::profiles::Defaults::V6_12,
    };
    if metadir && log.external {
        // mkfs.xfs then puts the metadata directory's children in AG 0,
        // from the root directory's chunk; xfskit lays out a chunk of
        // their own in the log's AG.
        return Err(MkfsError::Unsupported(
            "a metadata directory with an external log (-m metadir=1 with -l logdev=)".into(),
        ));
    }
    if metadir {
        // The realtime inodes live under the metadata directory (none
        // without a realtime section): the superblock's fields are zero.
        g.rbmino = 0;
        g.rsumino = 0;
        g.metadir = Some(metadir_layout(&g, align)?);
        g.icount += ialloc_inos;
        g.ifree = g.icount - 3;
        g.fdblocks -= ialloc_blocks;
    }
    if opts.rt_dev.is_some() || opts.rt_size.is_some() {
        // The realtime files' blocks go near their inodes: AG 0's chunk,
        // or with realtime groups the `rtgroups` directory's.
        let agno = g.metadir.map_or(0, |m| m.rtdir_agno);
        let (mut free, _) = super::writer::free_after_agfl(&g, agno);
        if let Some((start, len, _)) = g.chunk_in(agno) {
            super::writer::carve(&mut free, start, len);
        }
        if let (0, Some(m)) = (agno, g.metadir) {
            super::writer::carve(&mut free, m.rtdir_agbno, g.ialloc_blocks);
        }
        super::realtime::plan(opts, &mut g, &mut free)?;
    }
    Ok(g)
}

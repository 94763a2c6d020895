//! The geometry as `xfs_info` of xfsprogs 6.15 shows it ([`render`]) and as
//! named JSON fields ([`to_json`]): shared by `xfskit info` and the Python
//! package's `Filesystem.info`.

use crate::bytes::uuid_string;
use crate::geometry::Geometry;
use xfs_format::sb;

/// The flags xfs_info derives from the superblock.
struct Flags {
    internal_log: bool,
    ascii_ci: bool,
    lazy_count: u32,
    exchange: bool,
    parent: bool,
    metadir: bool,
    zoned: bool,
}

use xfs_format::sb::XFS_SB_VERSION_BORGBIT as VERSION_BORGBIT;

/// The attr= value xfs_info prints: 2 with attr2 (every v5), else 1 when
/// the v4 attribute bit is set, else 0.
fn attr_version(g: &Geometry) -> u32 {
    if g.v5 || g.features.attr2 {
        2
    } else if g.versionnum & sb::XFS_SB_VERSION_ATTRBIT != 0 {
        1
    } else {
        0
    }
}

/// The log version xfs_info prints: 2 with the v2 log bit (every v5).
fn log_version(g: &Geometry) -> u32 {
    if g.v5 || g.versionnum & sb::XFS_SB_VERSION_LOGV2BIT != 0 {
        2
    } else {
        1
    }
}

fn flags(g: &Geometry) -> Flags {
    Flags {
        internal_log: g.log_start.0 > 0,
        ascii_ci: g.versionnum & VERSION_BORGBIT != 0,
        lazy_count: u32::from(g.features.lazy_sb_counters),
        exchange: g.features_incompat & sb::XFS_SB_FEAT_INCOMPAT_EXCHRANGE != 0,
        parent: g.features_incompat & sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0,
        metadir: g.features_incompat & sb::XFS_SB_FEAT_INCOMPAT_METADIR != 0,
        zoned: g.features_incompat & sb::XFS_SB_FEAT_INCOMPAT_ZONED != 0,
    }
}

fn b(v: bool) -> u32 {
    u32::from(v)
}

/// Formats the geometry in the xfs_info layout of xfsprogs 6.15; `name`
/// fills the first field. The realtime group fields (rgcount, rgsize) come
/// from a metadir superblock and are 0 on the others, as 6.15 prints them;
/// start and reserved come from a zoned superblock (0 on the others).
pub fn render(g: &Geometry, name: &str) -> String {
    render_rt(g, name, None)
}

/// [`render`] of a filesystem opened with its realtime device: `rtdev`,
/// as it was given, names the realtime section (as `xfs_db -R` prints it).
pub fn render_rt(g: &Geometry, name: &str, rtdev: Option<&str>) -> String {
    let f = flags(g);
    let ft = &g.features;
    let log_name = if f.internal_log {
        "internal log"
    } else {
        "external"
    };
    // 6.15 says "internal" for a realtime section inside the data device
    // (sb_rtstart, zoned filesystems only).
    let rt_name = match rtdev {
        _ if g.rt_blocks == 0 => "none",
        _ if g.rt_internal() => "internal",
        Some(dev) => dev,
        None => "external",
    };
    let mut s = String::new();
    s += &format!(
        "meta-data={:<22} isize={:<6} agcount={}, agsize={} blks\n",
        name, g.inode_size, g.ag_count, g.ag_blocks
    );
    s += &format!(
        "         ={:<22} sectsz={:<5} attr={}, projid32bit={}\n",
        "",
        g.sect_size,
        attr_version(g),
        b(ft.projid32)
    );
    s += &format!(
        "         ={:<22} crc={:<8} finobt={}, sparse={}, rmapbt={}\n",
        "",
        b(g.v5),
        b(ft.finobt),
        b(ft.sparse_inodes),
        b(ft.rmapbt)
    );
    s += &format!(
        "         ={:<22} reflink={:<4} bigtime={} inobtcount={} nrext64={}\n",
        "",
        b(ft.reflink),
        b(ft.bigtime),
        b(ft.inobtcnt),
        b(ft.nrext64)
    );
    s += &format!(
        "         ={:<22} exchange={:<3} metadir={}\n",
        "",
        b(f.exchange),
        b(f.metadir)
    );
    s += &format!(
        "data     ={:<22} bsize={:<6} blocks={}, imaxpct={}\n",
        "", g.block_size, g.data_blocks, g.imax_pct
    );
    s += &format!(
        "         ={:<22} sunit={:<6} swidth={} blks\n",
        "", g.stripe_unit, g.stripe_width
    );
    s += &format!(
        "naming   =version {:<14} bsize={:<6} ascii-ci={}, ftype={}, parent={}\n",
        2,
        g.dir_blk_size,
        b(f.ascii_ci),
        b(ft.ftype),
        b(f.parent)
    );
    s += &format!(
        "log      ={:<22} bsize={:<6} blocks={}, version={}\n",
        log_name,
        g.block_size,
        g.log_blocks,
        log_version(g)
    );
    s += &format!(
        "         ={:<22} sectsz={:<5} sunit={} blks, lazy-count={}\n",
        "",
        g.log_sect_size,
        g.log_sunit / g.block_size,
        f.lazy_count
    );
    s += &format!(
        "realtime ={:<22} extsz={:<6} blocks={}, rtextents={}\n",
        rt_name,
        u64::from(g.rt_extsize) * u64::from(g.block_size),
        g.rt_blocks,
        g.rt_extents
    );
    s += &format!(
        "         ={:<22} rgcount={:<4} rgsize={} extents\n",
        "", g.rg_count, g.rg_extents
    );
    s += &format!(
        "         ={:<22} zoned={:<6} start={} reserved={}\n",
        "",
        b(f.zoned),
        g.rt_start,
        g.rt_reserved
    );
    s
}

/// Every feature the superblock names, as booleans from its feature
/// words (v5: the version and features2 bits every v5 filesystem has, then
/// the compat, ro_compat, incompat and log_incompat bits by name).
fn features_json(g: &Geometry) -> serde_json::Value {
    let ro = |bit: u32| g.features_ro_compat & bit != 0;
    let inc = |bit: u32| g.features_incompat & bit != 0;
    let log = |bit: u32| g.features_log_incompat & bit != 0;
    let metadir = inc(sb::XFS_SB_FEAT_INCOMPAT_METADIR);
    serde_json::json!({
        "crc": g.features2 & sb::XFS_SB_VERSION2_CRCBIT != 0,
        "attr2": g.features.attr2,
        "lazy_count": g.features.lazy_sb_counters,
        "projid32bit": g.features.projid32,
        "ascii_ci": g.versionnum & VERSION_BORGBIT != 0,
        "finobt": ro(sb::XFS_SB_FEAT_RO_COMPAT_FINOBT),
        "rmapbt": ro(sb::XFS_SB_FEAT_RO_COMPAT_RMAPBT),
        "reflink": ro(sb::XFS_SB_FEAT_RO_COMPAT_REFLINK),
        "inobtcount": ro(sb::XFS_SB_FEAT_RO_COMPAT_INOBTCNT),
        "ftype": inc(sb::XFS_SB_FEAT_INCOMPAT_FTYPE),
        "sparse": inc(sb::XFS_SB_FEAT_INCOMPAT_SPINODES),
        "meta_uuid": inc(sb::XFS_SB_FEAT_INCOMPAT_META_UUID),
        "bigtime": inc(sb::XFS_SB_FEAT_INCOMPAT_BIGTIME),
        "needsrepair": inc(sb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR),
        "nrext64": inc(sb::XFS_SB_FEAT_INCOMPAT_NREXT64),
        "exchange": inc(sb::XFS_SB_FEAT_INCOMPAT_EXCHRANGE),
        "parent": inc(sb::XFS_SB_FEAT_INCOMPAT_PARENT),
        "metadir": metadir,
        // Realtime groups come with the metadata directory tree.
        "rtgroups": metadir,
        "zoned": inc(sb::XFS_SB_FEAT_INCOMPAT_ZONED),
        "zone_gaps": inc(sb::XFS_SB_FEAT_INCOMPAT_ZONE_GAPS),
        "log_xattrs": log(sb::XFS_SB_FEAT_INCOMPAT_LOG_XATTRS),
    })
}

/// What the superblock says of quotas: for each kind, whether usage is
/// accounted, limits enforced and the counts marked checked, and its
/// quota inode (none on metadir filesystems, which keep them in the
/// metadata directory, or before the first quota mount made it).
fn quota_json(g: &Geometry) -> serde_json::Value {
    let q = g.qflags;
    let ino = |i: u64| (i != 0 && i != u64::MAX).then_some(i);
    // v4 keeps groups or projects in the one other file, with shared
    // enforcement and checked bits.
    let (g_enf, g_chk, p_enf, p_chk) = if g.v5 {
        (0x0080, 0x0100, 0x0200, 0x0400)
    } else {
        (0x0010, 0x0020, 0x0010, 0x0020)
    };
    let kind = |acct: u16, enfd: u16, chkd: u16, inode: Option<u64>| {
        serde_json::json!({
            "accounting": q & acct != 0,
            "enforced": q & enfd != 0,
            "checked": q & chkd != 0,
            "inode": inode,
        })
    };
    let [u, gr, p] = g.quota_inos;
    serde_json::json!({
        "qflags": q,
        "user": kind(0x0001, 0x0002, 0x0004, ino(u)),
        "group": kind(0x0040, g_enf, g_chk, ino(gr).filter(|_| g.v5 || q & 0x0040 != 0)),
        "project": kind(0x0008, p_enf, p_chk, if g.v5 { ino(p) } else { ino(gr).filter(|_| q & 0x0008 != 0) }),
    })
}

/// The geometry as a JSON value.
pub fn to_json(g: &Geometry, log_state: &str) -> serde_json::Value {
    let f = flags(g);
    let ft = &g.features;
    serde_json::json!({
        "uuid": uuid_string(&g.uuid),
        "meta_uuid": uuid_string(&g.meta_uuid),
        "label": String::from_utf8_lossy(&g.label),
        "log_state": log_state,
        "meta_data": {
            "isize": g.inode_size, "agcount": g.ag_count, "agsize": g.ag_blocks, "sectsz": g.sect_size,
            "attr": attr_version(g), "projid32bit": ft.projid32, "crc": g.v5, "finobt": ft.finobt,
            "sparse": ft.sparse_inodes, "rmapbt": ft.rmapbt, "reflink": ft.reflink, "bigtime": ft.bigtime,
            "inobtcount": ft.inobtcnt, "nrext64": ft.nrext64, "meta_uuid_feature": ft.meta_uuid,
            "exchange": f.exchange, "metadir": f.metadir,
            "inode_align": g.inode_align, "spino_align": g.spino_align,
            "inode_cluster_size": g.inode_cluster_size,
        },
        "data": {
            "bsize": g.block_size, "blocks": g.data_blocks, "imaxpct": g.imax_pct,
            "sunit": g.stripe_unit, "swidth": g.stripe_width,
        },
        "naming": {
            "version": 2, "bsize": g.dir_blk_size, "ascii_ci": f.ascii_ci, "ftype": ft.ftype,
            "parent": f.parent,
        },
        "log": {
            "internal": f.internal_log, "start": g.log_start.0, "bsize": g.block_size, "blocks": g.log_blocks,
            "version": log_version(g), "sectsz": g.log_sect_size, "sunit_bytes": g.log_sunit, "lazy_count": f.lazy_count == 1,
        },
        "realtime": {
            "extsz": u64::from(g.rt_extsize) * u64::from(g.block_size), "blocks": g.rt_blocks,
            "rtextents": g.rt_extents, "rgcount": g.rg_count, "rgsize": g.rg_extents, "zoned": f.zoned,
            "start": g.rt_start, "reserved": g.rt_reserved,
        },
        "features": features_json(g),
        "inodes": {
            "root": g.root_ino.0, "rbm": g.rbm_ino.0, "rsum": g.rsum_ino.0,
            "metadir": g.features.metadir.then_some(g.metadir_ino.0),
        },
        "quota": quota_json(g),
        "counters": { "icount": g.icount, "ifree": g.ifree, "fdblocks": g.fdblocks },
        "raw": {
            "versionnum": g.versionnum, "features2": g.features2, "features_compat": g.features_compat,
            "features_ro_compat": g.features_ro_compat, "features_incompat": g.features_incompat,
            "features_log_incompat": g.features_log_incompat,
        },
    })
}

//! Superblocks: every field of the primary against what its geometry
//! implies, and every secondary (one per AG) against itself and the
//! primary.
//!
//! The rules are those xfs_repair applies when it verifies a superblock
//! and compares a secondary with the primary (sizes and their logs, AG
//! geometry, log and realtime fields, inode and stripe alignment, bytes past
//! the last field), plus a few the kernel's mount-time verifier applies
//! (unknown feature bits, features2 copies).

use super::Ctx;
use crate::error::Location;
use xfs_format::sb::{self as fsb, Dsb};
use zerocopy::FromBytes;

/// Largest log in blocks and in bytes the kernel accepts.
const MAX_LOG_BLOCKS: u64 = 1024 * 1024;
const MAX_LOG_BYTES: u64 = (1 << 31) - 512 * 1024;
/// Largest log stripe unit (the largest log record).
const MAX_LOG_SUNIT: u32 = 256 * 1024;
/// Realtime extent size limits in bytes.
const MIN_RTEXT_BYTES: u64 = 4096;
const MAX_RTEXT_BYTES: u64 = 1 << 30;
/// The inode chunk alignment mkfs uses (bytes, for 256-byte inodes).
const BIG_CLUSTER_BYTES: u64 = 8192;
const NULL_INO: u64 = u64::MAX;

fn pow2_log(v: u64, lo: u32, hi: u32) -> Option<u32> {
    (v.is_power_of_two() && (lo..=hi).contains(&v.trailing_zeros())).then(|| v.trailing_zeros())
}

/// Bytes of the superblock that hold fields; the rest of the sector must be
/// zero.
fn used_len(sb: &Dsb) -> usize {
    if sb.version() == fsb::XFS_SB_VERSION_4 {
        // v4 fields end at sb_bad_features2 (features2 needs MOREBITS),
        // else at sb_logsunit.
        return if sb.sb_versionnum.get() & fsb::XFS_SB_VERSION_MOREBITSBIT != 0 {
            208
        } else {
            200
        };
    }
    if sb.has_incompat(fsb::XFS_SB_FEAT_INCOMPAT_ZONED) {
        fsb::XFS_DSB_METADIR_SIZE + size_of::<fsb::DsbZoned>()
    } else if sb.has_incompat(fsb::XFS_SB_FEAT_INCOMPAT_METADIR) {
        fsb::XFS_DSB_METADIR_SIZE
    } else if sb.has_incompat(fsb::XFS_SB_FEAT_INCOMPAT_META_UUID) {
        fsb::XFS_DSB_SIZE
    } else {
        fsb::XFS_SB_LSN_OFF + 8
    }
}

/// Problems of one superblock on its own (no comparison with another).
/// `primary`: the rules only the primary copy follows.
pub(crate) fn fields(sb: &Dsb, raw: &[u8], sect_size: usize, primary: bool) -> Vec<String> {
    let mut p = Vec::new();
    let vn = sb.sb_versionnum.get();
    let has = |bit: u16| vn & bit != 0;
    if sb.sb_magicnum.get() != fsb::XFS_SB_MAGIC {
        p.push(format!("bad magic {:#x}", sb.sb_magicnum.get()));
        return p;
    }
    let v4 = sb.version() == fsb::XFS_SB_VERSION_4;
    if sb.version() != fsb::XFS_SB_VERSION_5 && !v4 {
        p.push(format!("version {} (version number {vn:#x})", sb.version()));
        return p;
    }
    if primary && sb.sb_inprogress != 0 {
        p.push(format!(
            "inprogress {}: mkfs did not finish",
            sb.sb_inprogress
        ));
    }
    let ss = u64::from(sb.sb_sectsize.get());
    if pow2_log(ss, 9, 15) != Some(u32::from(sb.sb_sectlog)) {
        p.push(format!("sector size {ss}, sectlog {}", sb.sb_sectlog));
    }
    let bs = u64::from(sb.sb_blocksize.get());
    let blog = u32::from(sb.sb_blocklog);
    let bs_ok = pow2_log(bs, 9, 16) == Some(blog);
    if !bs_ok {
        p.push(format!("block size {bs}, blocklog {blog}"));
    }
    let (agb, agc, db) = (
        sb.sb_agblocks.get(),
        sb.sb_agcount.get(),
        sb.sb_dblocks.get(),
    );
    let full = u64::from(agb) * u64::from(agc);
    if agb < 64 || (bs_ok && u64::from(agb) << blog > 1 << 40) || agc == 0 {
        p.push(format!("AG size {agb} blocks, AG count {agc}"));
    } else if db == 0 || db > full || db <= full - u64::from(agb) {
        p.push(format!(
            "{db} data blocks do not make {agc} AGs of {agb} blocks"
        ));
    }
    if agb > 0 && u32::from(sb.sb_agblklog) != 32 - (agb - 1).leading_zeros() {
        p.push(format!(
            "agblklog {} for AGs of {agb} blocks",
            sb.sb_agblklog
        ));
    }
    let is = u64::from(sb.sb_inodesize.get());
    let ilog = u32::from(sb.sb_inodelog);
    if pow2_log(is, 8, 11) != Some(ilog)
        || (bs_ok && u64::from(sb.sb_inopblock.get()) != bs.div_ceil(is.max(1)))
        || blog.checked_sub(ilog) != Some(u32::from(sb.sb_inopblog))
    {
        p.push(format!(
            "inode size {is} (inodelog {ilog}), {} inodes per block (inopblog {})",
            sb.sb_inopblock.get(),
            sb.sb_inopblog
        ));
    }
    // The log.
    let lb = u64::from(sb.sb_logblocks.get());
    if lb == 0 || lb > MAX_LOG_BLOCKS || (bs_ok && lb << blog > MAX_LOG_BYTES) {
        p.push(format!("log of {lb} blocks"));
    }
    let lsu = sb.sb_logsunit.get();
    if lsu > MAX_LOG_SUNIT || (lsu > 1 && bs_ok && u64::from(lsu) % bs != 0) {
        p.push(format!("log stripe unit {lsu} bytes"));
    }
    let ls = sb.sb_logstart.get();
    if ls != 0 && bs_ok && agb >= 64 {
        let lag = ls >> sb.sb_agblklog.min(63);
        let lbno = ls & ((1u64 << sb.sb_agblklog.min(63)) - 1);
        if lag >= u64::from(agc) || lbno + lb > u64::from(agb) || lbno == 0 {
            p.push(format!(
                "internal log at block {ls} ({lb} blocks) is not inside one AG"
            ));
        }
    }
    let (lss, lsl) = (u64::from(sb.sb_logsectsize.get()), sb.sb_logsectlog);
    if has(fsb::XFS_SB_VERSION_SECTORBIT) {
        if pow2_log(lss, 9, 15) != Some(u32::from(lsl)) {
            p.push(format!("log sector size {lss}, logsectlog {lsl}"));
        }
    } else if ss != 512 || sb.sb_sectlog != 9 || lss != 0 || lsl != 0 {
        p.push(format!(
            "sector sizes {ss} and log {lss} without the sector size feature bit"
        ));
    }
    // Realtime.
    let rx = u64::from(sb.sb_rextsize.get());
    if bs_ok && !(MIN_RTEXT_BYTES..=MAX_RTEXT_BYTES).contains(&(rx * bs)) {
        p.push(format!("realtime extent size {rx} blocks"));
    }
    if sb.sb_rblocks.get() == 0
        && (sb.sb_rextents.get() != 0
            || sb.sb_rbmblocks.get() != 0
            || sb.sb_rextslog != 0
            || sb.sb_frextents.get() != 0)
    {
        p.push(format!(
            "no realtime section but rextents {}, rbmblocks {}, rextslog {}, frextents {}",
            sb.sb_rextents.get(),
            sb.sb_rbmblocks.get(),
            sb.sb_rextslog,
            sb.sb_frextents.get()
        ));
    }
    // Alignment.
    if let Some(d) = ino_align_problem(sb) {
        p.push(d);
    }
    if sb.sb_imax_pct > 100 {
        p.push(format!("imax_pct {} is over 100", sb.sb_imax_pct));
    }
    let (su, sw) = (sb.sb_unit.get(), sb.sb_width.get());
    if has(fsb::XFS_SB_VERSION_DALIGNBIT) {
        if (su == 0) != (sw == 0) || (su != 0 && (agb % su != 0 || sw % su != 0)) {
            p.push(format!(
                "stripe unit {su}, width {sw} for AGs of {agb} blocks"
            ));
        }
    } else if su != 0 || sw != 0 {
        p.push(format!(
            "stripe unit {su}, width {sw} without the stripe alignment feature bit"
        ));
    }
    if blog + u32::from(sb.sb_dirblklog) > 16 {
        p.push(format!("directory block log {}", sb.sb_dirblklog));
    }
    if v4 {
        v4_feature_bits(sb, &mut p);
    } else {
        v5_feature_bits(sb, &mut p);
    }
    if sb.sb_features2.get() != sb.sb_bad_features2.get() {
        p.push(format!(
            "features2 {:#x} and its copy bad_features2 {:#x} differ",
            sb.sb_features2.get(),
            sb.sb_bad_features2.get()
        ));
    }
    if sb.sb_flags != 0 {
        p.push(format!(
            "flags {:#x} (no flag is defined on disk)",
            sb.sb_flags
        ));
    }
    if sb.sb_shared_vn != 0 {
        p.push(format!("shared_vn {} (must be 0)", sb.sb_shared_vn));
    }
    // Quota fields without quotas (secondaries made by mkfs carry none).
    if !has(fsb::XFS_SB_VERSION_QUOTABIT) || (!primary && sb.sb_inprogress != 0) {
        let q = [
            ("uquotino", sb.sb_uquotino.get()),
            ("gquotino", sb.sb_gquotino.get()),
            ("pquotino", sb.sb_pquotino.get()),
        ];
        for (name, v) in q {
            // v4 has no separate project quota inode: its slot is past the v4 fields.
            if v4 && name == "pquotino" {
                continue;
            }
            let metadir = sb.has_incompat(fsb::XFS_SB_FEAT_INCOMPAT_METADIR);
            if v != 0 && v != NULL_INO && !metadir {
                p.push(format!("{name} {v} without quotas"));
            }
        }
        if sb.sb_qflags.get() != 0 {
            p.push(format!(
                "quota flags {:#x} without quotas",
                sb.sb_qflags.get()
            ));
        }
    }
    if let Some(m) = sb.metadir(raw) {
        p.extend(metadir_fields(sb, &m));
    }
    let used = used_len(sb);
    let end = sect_size.min(raw.len());
    if end > used && raw[used..end].iter().any(|&b| b != 0) {
        p.push(format!(
            "bytes past the last field (from offset {used}) are not zero"
        ));
    }
    p
}

/// The v4 feature rules xfskit reads by: version 2 directories and
/// unwritten-extent flags, features2 only with the MOREBITS bit, and no
/// features2 bit a v4 superblock cannot have (CRC, unknown ones).
fn v4_feature_bits(sb: &Dsb, p: &mut Vec<String>) {
    let vn = sb.sb_versionnum.get();
    let need = fsb::XFS_SB_VERSION_DIRV2BIT | fsb::XFS_SB_VERSION_EXTFLGBIT;
    if vn & need != need {
        p.push(format!(
            "version number {vn:#x}: a v4 superblock xfskit reads has the bits {need:#x}"
        ));
    }
    let f2 = sb.sb_features2.get();
    let known = fsb::XFS_SB_VERSION2_LAZYSBCOUNTBIT
        | fsb::XFS_SB_VERSION2_ATTR2BIT
        | fsb::XFS_SB_VERSION2_PARENTBIT
        | fsb::XFS_SB_VERSION2_PROJID32BIT
        | fsb::XFS_SB_VERSION2_FTYPE;
    if f2 & !known != 0 {
        p.push(format!(
            "features2 {f2:#x}: bits {:#x} are unknown on a v4 superblock",
            f2 & !known
        ));
    }
    if f2 != 0 && vn & fsb::XFS_SB_VERSION_MOREBITSBIT == 0 {
        p.push(format!(
            "features2 {f2:#x} without the MOREBITS version bit"
        ));
    }
}

fn v5_feature_bits(sb: &Dsb, p: &mut Vec<String>) {
    let vn = sb.sb_versionnum.get();
    let has = |bit: u16| vn & bit != 0;
    // Feature words.
    let unknown = [
        (
            "ro_compat",
            sb.sb_features_ro_compat.get() & !fsb::XFS_SB_FEAT_RO_COMPAT_ALL,
        ),
        (
            "incompat",
            sb.sb_features_incompat.get() & !fsb::XFS_SB_FEAT_INCOMPAT_READ,
        ),
        (
            "log_incompat",
            sb.sb_features_log_incompat.get() & !fsb::XFS_SB_FEAT_INCOMPAT_LOG_ALL,
        ),
    ];
    for (word, bits) in unknown {
        if bits != 0 {
            p.push(format!("unknown {word} feature bits {bits:#x}"));
        }
    }
    // A v5 superblock keeps the v4 feature bits its format implies, and
    // no others (libxfs's version check, which xfs_repair applies to
    // every copy).
    let v5_bits = fsb::XFS_SB_VERSION_NLINKBIT
        | fsb::XFS_SB_VERSION_ALIGNBIT
        | fsb::XFS_SB_VERSION_LOGV2BIT
        | fsb::XFS_SB_VERSION_EXTFLGBIT
        | fsb::XFS_SB_VERSION_DIRV2BIT
        | fsb::XFS_SB_VERSION_MOREBITSBIT;
    if vn & v5_bits != v5_bits || has(fsb::XFS_SB_VERSION_SHAREDBIT) {
        p.push(format!(
            "version number {vn:#x}: a v5 superblock has the bits {v5_bits:#x} and not {:#x}",
            fsb::XFS_SB_VERSION_SHAREDBIT
        ));
    }
    let f2 = sb.sb_features2.get();
    let f2_need = fsb::XFS_SB_VERSION2_LAZYSBCOUNTBIT
        | fsb::XFS_SB_VERSION2_ATTR2BIT
        | fsb::XFS_SB_VERSION2_PROJID32BIT
        | fsb::XFS_SB_VERSION2_CRCBIT;
    if f2 & f2_need != f2_need || f2 & !(f2_need | fsb::XFS_SB_VERSION2_FTYPE) != 0 {
        p.push(format!(
            "features2 {f2:#x}: a v5 superblock has the bits {f2_need:#x} and no others but {:#x}",
            fsb::XFS_SB_VERSION2_FTYPE
        ));
    }
}

/// Largest realtime group in blocks, fewest extents in one, most groups.
const MAX_RG_BLOCKS: u64 = (1 << 31) - 1;
const MIN_RG_EXTENTS: u32 = 2;

/// The fields of a metadata directory superblock: the padding is zero, the
/// realtime groups cover the realtime extents exactly with a group size
/// in the limits and its log right (the kernel's realtime group rules,
/// which xfs_repair applies), and the inodes the metadata directory tree
/// now holds are not named in the superblock (zero, not null).
fn metadir_fields(sb: &Dsb, m: &fsb::DsbMetadir) -> Vec<String> {
    let mut p = Vec::new();
    if m.sb_pad.iter().any(|&b| b != 0) {
        p.push("metadir padding is not zero".into());
    }
    let rx = u64::from(sb.sb_rextsize.get());
    let (rgc, rge) = (m.sb_rgcount.get(), m.sb_rgextents.get());
    if let Some(max) = MAX_RG_BLOCKS.checked_div(rx) {
        if u64::from(rge) > max || rge < MIN_RG_EXTENTS {
            p.push(format!("realtime group of {rge} extents of {rx} blocks"));
        } else {
            let groups = sb.sb_rextents.get().div_ceil(u64::from(rge));
            if groups != u64::from(rgc) {
                p.push(format!(
                    "{rgc} realtime groups, but {} realtime extents make {groups}",
                    sb.sb_rextents.get()
                ));
            }
            let blocks = u64::from(rge) * rx;
            let want = 64 - (blocks - 1).leading_zeros();
            if u32::from(m.sb_rgblklog) != want {
                p.push(format!(
                    "realtime group block log {} for groups of {blocks} blocks (want {want})",
                    m.sb_rgblklog
                ));
            }
        }
    }
    let named = [
        ("rbmino", sb.sb_rbmino.get()),
        ("rsumino", sb.sb_rsumino.get()),
        ("uquotino", sb.sb_uquotino.get()),
        ("gquotino", sb.sb_gquotino.get()),
        ("pquotino", sb.sb_pquotino.get()),
    ];
    for (name, v) in named {
        if v != 0 {
            p.push(format!(
                "{name} {v}: the metadata directory tree holds that inode, the superblock field must be 0"
            ));
        }
    }
    p
}

/// The inode chunk alignment rules: the big cluster size, or that scaled
/// by the inode size; with sparse inodes the chunk size, with the scaled
/// value in spino_align.
fn ino_align_problem(sb: &Dsb) -> Option<String> {
    let vn = sb.sb_versionnum.get();
    let al = u64::from(sb.sb_inoalignmt.get());
    if vn & fsb::XFS_SB_VERSION_ALIGNBIT == 0 {
        return (al != 0)
            .then(|| format!("inode alignment {al} without the alignment feature bit"));
    }
    let blog = u32::from(sb.sb_blocklog).min(63);
    let is = u64::from(sb.sb_inodesize.get());
    let big = BIG_CLUSTER_BYTES >> blog;
    let scaled = (BIG_CLUSTER_BYTES * is / 256) >> blog;
    let sparse = sb.has_incompat(fsb::XFS_SB_FEAT_INCOMPAT_SPINODES);
    let spino = u64::from(sb.sb_spino_align.get());
    if sparse {
        let chunk = (is * 64) >> blog;
        if spino != scaled || (al != chunk && al != scaled && al != big) {
            return Some(format!(
                "inode alignment {al}, sparse inode alignment {spino} (want {chunk} and {scaled})"
            ));
        }
    } else {
        if al != big && al != scaled {
            return Some(format!("inode alignment {al} (want {scaled})"));
        }
        if spino != 0 {
            return Some(format!(
                "sparse inode alignment {spino} without sparse inodes"
            ));
        }
    }
    None
}

/// Fields every secondary must share with the primary: xfs_repair compares
/// the geometry (sizes, counts, log and realtime placement, alignment
/// bits); the identity and features are compared too (mkfs, growfs and
/// xfs_admin write them to every copy).
fn differences(p: &Dsb, s: &Dsb) -> Vec<String> {
    let mut d = Vec::new();
    macro_rules! same {
        ($($f:ident),*) => {$(
            if p.$f != s.$f {
                d.push(format!(concat!(stringify!($f), " {:?}, primary {:?}"), s.$f, p.$f));
            }
        )*};
    }
    same!(
        sb_blocksize,
        sb_dblocks,
        sb_rblocks,
        sb_rextents,
        sb_logstart,
        sb_rextsize,
        sb_agblocks,
        sb_agcount,
        sb_rbmblocks,
        sb_logblocks,
        sb_sectsize,
        sb_inodesize,
        sb_uuid,
        sb_features_compat,
        sb_features_ro_compat,
        sb_features_incompat
    );
    let bits = fsb::XFS_SB_VERSION_ALIGNBIT | fsb::XFS_SB_VERSION_DALIGNBIT;
    let (pv, sv) = (p.sb_versionnum.get(), s.sb_versionnum.get());
    if pv & bits != sv & bits {
        d.push(format!(
            "version number {sv:#x}, primary {pv:#x} (alignment bits)"
        ));
    }
    d
}

/// Checks the superblock of AG `agno` (the primary when 0). `primary` is
/// the primary's sector.
pub(crate) fn check_sb(ctx: &Ctx<'_>, agno: u32, primary: &[u8]) {
    let geo = ctx.fs.geometry();
    let ss = geo.sect_size as usize;
    let loc = || Location::Sb(agno);
    let mut sector = vec![0u8; ss];
    let daddr = geo.agb_to_daddr(crate::geometry::AgNumber(agno), crate::geometry::AgBlock(0));
    if let Err(e) = ctx.fs.read_bytes(daddr.0 << 9, &mut sector) {
        ctx.sink.error(e);
        return;
    }
    let Ok((sb, _)) = Dsb::read_from_prefix(&sector) else {
        return;
    };
    if sb.sb_magicnum.get() == fsb::XFS_SB_MAGIC
        && sb.version() == fsb::XFS_SB_VERSION_5
        && !xfs_format::crc::verify(&sector, fsb::XFS_SB_CRC_OFF)
    {
        ctx.sink.add("superblock", loc(), "bad CRC");
        return;
    }
    for d in fields(&sb, &sector, ss, agno == 0) {
        ctx.sink.add("superblock", loc(), d);
    }
    if agno != 0 {
        if let Ok((p, _)) = Dsb::read_from_prefix(primary) {
            for d in differences(&p, &sb) {
                ctx.sink.add(
                    "superblock",
                    loc(),
                    format!("differs from the primary: {d}"),
                );
            }
        }
    }
}

/// Where mkfs puts the root inode: the first inode of the first chunk it
/// allocates in AG 0, after the AG headers, one root block per btree, the
/// smallest free list and an internal log that lies in AG 0, rounded up to
/// the stripe unit or else to the inode chunk alignment (xfs_repair's
/// rule, libxfs's `xfs_ialloc_calc_rootino`).
pub(crate) fn calc_root_ino(geo: &crate::geometry::Geometry) -> u64 {
    let f = &geo.features;
    let bs = u64::from(geo.block_size);
    let ag = u64::from(geo.ag_blocks);
    let mut b = u64::from(3 * geo.sect_size / geo.block_size) + 1;
    b += 3 + u64::from(f.finobt) + u64::from(f.rmapbt) + u64::from(f.reflink);
    // The smallest free list: for each of the free space btrees (and the
    // rmap btree) one block more than an empty tree's height, but no more
    // than the tallest tree the AG can hold.
    let hdr = geo.layout().sblock_hdr as u64;
    let alloc = max_levels(bs, hdr, 8, 12, ag.div_ceil(2)).min(2);
    b += 2 * alloc;
    if f.rmapbt {
        b += if f.reflink {
            2
        } else {
            max_levels(bs, hdr, 24, 44, ag).min(2)
        };
    }
    // An internal log in AG 0 (filesystems of one AG, or old mkfs on very
    // small ones) comes before the first inode chunk.
    if geo.log_start.0 > 0 && geo.fsb_split(geo.log_start).0 .0 == 0 {
        b += u64::from(geo.log_blocks);
    }
    // The stripe unit aligns inode chunks only when it is a multiple of the
    // inode chunk alignment (and that alignment covers an inode cluster);
    // otherwise the chunk alignment does (libxfs's ialloc_align).
    let su = geo.stripe_unit;
    let ia = geo.inode_align;
    let dalign = geo.versionnum & fsb::XFS_SB_VERSION_DALIGNBIT != 0;
    let ino_mask = if ia >= geo.blocks_per_cluster() {
        ia.saturating_sub(1)
    } else {
        0
    };
    let align = if dalign && su > 0 && ino_mask != 0 && su & ino_mask == 0 {
        su
    } else {
        ia
    };
    if align > 1 {
        b = b.div_ceil(u64::from(align)) * u64::from(align);
    }
    b << geo.inopb_log
}

/// Height of the tallest short-pointer btree with `records` records of
/// `rec` bytes and node entries of `node` bytes, blocks half full.
fn max_levels(block: u64, hdr: u64, rec: u64, node: u64, records: u64) -> u64 {
    let leaf_min = ((block - hdr) / rec / 2).max(1);
    let node_min = ((block - hdr) / node / 2).max(1);
    let mut n = records.div_ceil(leaf_min);
    let mut levels = 1;
    while n > 1 {
        n = n.div_ceil(node_min);
        levels += 1;
    }
    levels
}

/// The root, realtime bitmap and summary inodes are where mkfs puts them:
/// the first inodes of AG 0's first inode chunk, in that order; the
/// realtime ones may be null. On a metadata directory filesystem the
/// metadata directory root follows the root, and the realtime inodes live
/// in that tree instead.
pub(crate) fn check_root_inos(ctx: &Ctx<'_>) {
    let geo = ctx.fs.geometry();
    let mut root = calc_root_ino(geo);
    let loc = || Location::Sb(0);
    if geo.root_ino.0 != root && plausible_root(ctx) {
        // xfs_repair keeps a root directory found elsewhere (the stripe
        // unit may have changed since mkfs) and says so, then expects the
        // other inodes after it.
        ctx.sink.add(
            "superblock",
            loc(),
            format!(
                "root inode {} is a valid root directory but not where the stripe unit {} puts it ({root}): was the stripe unit changed?",
                geo.root_ino.0, geo.stripe_unit
            ),
        );
        root = geo.root_ino.0;
    } else if geo.root_ino.0 != root {
        ctx.sink.add(
            "superblock",
            loc(),
            format!(
                "root inode {}, where mkfs puts it is {root}",
                geo.root_ino.0
            ),
        );
    }
    let expected: &[(&str, u64, u64)] = if geo.features.metadir {
        &[("metadata directory root inode", geo.metadir_ino.0, root + 1)]
    } else {
        &[
            ("realtime bitmap inode", geo.rbm_ino.0, root + 1),
            ("realtime summary inode", geo.rsum_ino.0, root + 2),
        ]
    };
    for &(name, v, want) in expected {
        if v != want {
            ctx.sink.add(
                "superblock",
                loc(),
                format!("{name} {v}, mkfs puts it at {want}"),
            );
        }
    }
}

/// True when the superblock's root inode is a directory whose '..' is
/// itself (xfs_repair's test before it trusts a root found elsewhere).
fn plausible_root(ctx: &Ctx<'_>) -> bool {
    let geo = ctx.fs.geometry();
    if !geo.ino_valid(geo.root_ino) {
        return false;
    }
    let Ok(ino) = ctx.fs.inode(geo.root_ino) else {
        return false;
    };
    if ino.file_type != crate::inode::FileType::Dir {
        return false;
    }
    matches!(crate::dir::lookup(ctx.fs, &ino, b".."), Ok(Some(p)) if p == geo.root_ino)
}

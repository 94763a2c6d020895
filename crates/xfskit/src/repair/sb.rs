//! The primary superblock before anything else reads it, as xfs_repair's
//! phase 1 treats it: found again from the secondaries when it cannot be
//! read as one or most of them outvote its geometry
//! ([`primary_from_secondaries`]), then the fields xfs_repair resets on
//! their own ([`reset_fields`], [`reset_root_inodes`]).

use super::{is_v5, set_needsrepair, INCOMPAT};
use crate::bytes::{be16, be32, be64, put_be16, put_be32, put_be64};
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::fs::{Fs, OpenOptions};
use std::io;
use std::sync::Arc;
use xfs_format::sb as fsb;

/// A device whose first sector reads as `sector` (a primary superblock
/// found again, in a dry run, which writes nothing).
pub(super) struct Primary {
    pub(super) inner: Arc<dyn Device>,
    pub(super) sector: Vec<u8>,
}

impl Device for Primary {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)?;
        let sect = self.sector.len() as u64;
        if off < sect {
            let end = (off + buf.len() as u64).min(sect);
            buf[..(end - off) as usize].copy_from_slice(&self.sector[off as usize..end as usize]);
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

/// A primary superblock made again from a secondary.
pub(super) struct FoundPrimary {
    /// What was wrong with the old one.
    pub(super) why: String,
    /// The new primary sector.
    pub(super) sector: Vec<u8>,
    /// The AG whose secondary it comes from.
    pub(super) agno: u32,
    /// Secondaries read to confirm it, and how many of them agree.
    pub(super) read: u32,
    pub(super) agree: u32,
}

/// The byte ranges of a superblock that every copy holds alike: its
/// geometry, UUID, versions and features (not the root inodes, which
/// mkfs.xfs leaves null in some secondaries, nor the counters).
fn sb_geometry_bytes(sb: &[u8]) -> Vec<u8> {
    let mut sb = sb.to_vec();
    if sb.len() < GEOMETRY_END {
        sb.resize(GEOMETRY_END, 0);
    }
    clear_runtime_bits(&mut sb);
    GEOMETRY
        .iter()
        .flat_map(|r| sb[r.clone()].iter().copied())
        .collect()
}

/// The version and feature bits the kernel sets in the primary alone, as
/// the filesystem comes to use them (the first attribute, quotas,
/// 32-bit project ids): no disagreement with the secondaries.
const RUNTIME_VERSION: u16 =
    fsb::XFS_SB_VERSION_ATTRBIT | fsb::XFS_SB_VERSION_NLINKBIT | fsb::XFS_SB_VERSION_QUOTABIT;
const RUNTIME_FEATURES2: u32 = fsb::XFS_SB_VERSION2_ATTR2BIT | fsb::XFS_SB_VERSION2_PROJID32BIT;

fn clear_runtime_bits(sb: &mut [u8]) {
    use std::mem::offset_of;
    let v = offset_of!(fsb::Dsb, sb_versionnum);
    let nv = be16(sb, v) & !RUNTIME_VERSION;
    put_be16(sb, v, nv);
    for f in [
        offset_of!(fsb::Dsb, sb_features2),
        offset_of!(fsb::Dsb, sb_bad_features2),
    ] {
        let nf = be32(sb, f) & !RUNTIME_FEATURES2;
        put_be32(sb, f, nf);
    }
}

/// The byte ranges of [`sb_geometry_bytes`].
const GEOMETRY: [std::ops::Range<usize>; 7] = {
    use std::mem::offset_of;
    [
        0..offset_of!(fsb::Dsb, sb_rootino),
        offset_of!(fsb::Dsb, sb_rextsize)..offset_of!(fsb::Dsb, sb_inprogress),
        offset_of!(fsb::Dsb, sb_imax_pct)..offset_of!(fsb::Dsb, sb_icount),
        offset_of!(fsb::Dsb, sb_inoalignmt)..offset_of!(fsb::Dsb, sb_unit),
        offset_of!(fsb::Dsb, sb_dirblklog)..offset_of!(fsb::Dsb, sb_features_log_incompat),
        offset_of!(fsb::Dsb, sb_spino_align)..offset_of!(fsb::Dsb, sb_pquotino),
        offset_of!(fsb::Dsb, sb_meta_uuid)..offset_of!(fsb::Dsb, sb_meta_uuid) + 16,
    ]
};
const GEOMETRY_END: usize = std::mem::offset_of!(fsb::Dsb, sb_meta_uuid) + 16;

/// Writes the geometry ranges of [`sb_geometry_bytes`] from `from` into
/// `to`, keeping `to`'s runtime version and feature bits (the quota bit
/// only where `to` names a quota inode: a damaged version number may
/// carry it without quotas, which xfs_repair would then disable).
fn set_geometry_bytes(to: &mut [u8], from: &[u8]) {
    use std::mem::offset_of;
    let v = offset_of!(fsb::Dsb, sb_versionnum);
    let mut keep_v = be16(to, v) & RUNTIME_VERSION;
    let quota_inode = [
        offset_of!(fsb::Dsb, sb_uquotino),
        offset_of!(fsb::Dsb, sb_gquotino),
        offset_of!(fsb::Dsb, sb_pquotino),
    ]
    .iter()
    .any(|&o| !matches!(be64(to, o), 0 | xfs_format::types::NULLFSINO));
    if !quota_inode {
        keep_v &= !fsb::XFS_SB_VERSION_QUOTABIT;
    }
    let f2 = [
        offset_of!(fsb::Dsb, sb_features2),
        offset_of!(fsb::Dsb, sb_bad_features2),
    ];
    let keep_f2 = f2.map(|f| be32(to, f) & RUNTIME_FEATURES2);
    for r in GEOMETRY {
        to[r.clone()].copy_from_slice(&from[r]);
    }
    let nv = be16(to, v) | keep_v;
    put_be16(to, v, nv);
    for (f, k) in f2.into_iter().zip(keep_f2) {
        let nf = be32(to, f) | k;
        put_be32(to, f, nf);
    }
}

/// Secondaries read to confirm a candidate.
const SB_CONFIRM: u32 = 8;

/// When the primary superblock cannot be read as one (bad magic, CRC or
/// geometry), finds the filesystem again from its secondaries as
/// xfs_repair does: the device is searched from the start, sector by
/// sector, for a superblock that is valid by itself and lies where its
/// own geometry puts AG 1 (or a later AG); it is taken when most of the
/// secondaries it locates (up to [`SB_CONFIRM`]) agree with it. The new
/// primary is that copy with `sb_inprogress` cleared and, on a
/// filesystem without a metadata directory, the realtime bitmap and
/// summary inodes that mkfs leaves out of the secondaries set to the two
/// after the root (where mkfs puts them, as xfs_repair sets them). The
/// superblock counters are summed again later. None when the primary is
/// sound. The search reads up to the first secondary (one AG), as
/// xfs_repair's does.
pub(super) fn primary_from_secondaries(dev: &dyn Device) -> Result<Option<FoundPrimary>> {
    if dev.len() < 512 {
        return Err(Error::corrupt(
            "superblock",
            Location::Sb(0),
            "the device is shorter than a sector",
        ));
    }
    let mut primary = read_sb_sector(dev, 0)?;
    let mut verdict = crate::geometry::Geometry::from_superblock(&primary);
    let marked =
        is_v5(&primary) && be32(&primary, INCOMPAT) & fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR != 0;
    if marked && matches!(verdict, Err(Error::Unsupported(_))) {
        // A repair that stopped part way left needsrepair (its CRC is
        // sound, checked first): the rest is judged without it.
        set_needsrepair(&mut primary, false);
        xfs_format::crc::stamp(&mut primary, fsb::XFS_SB_CRC_OFF);
        verdict = crate::geometry::Geometry::from_superblock(&primary);
    }
    // A primary that reads as one is kept unless most of the secondaries
    // its geometry locates disagree with it on the geometry. So is one
    // that xfskit does not support (a version or feature it does not
    // know), unless its secondaries say it is not what mkfs made: then
    // the copies' geometry is taken, as for a sound primary.
    let mut sound = None;
    let mut unsupported = None;
    let why = match verdict {
        Ok(_) | Err(Error::Unsupported(_)) => {
            let (read, agree) = own_copies(dev, &primary);
            if read == 0 || agree * 2 > read {
                return verdict.map(|_| None);
            }
            sound = Some(primary.clone());
            let differs = format!(
                "its geometry differs from that of {} of the {read} secondaries it locates",
                read - agree
            );
            match verdict {
                Err(e) => {
                    let words = format!("{e} and {differs}");
                    unsupported = Some(e);
                    words
                }
                Ok(_) => differs,
            }
        }
        Err(Error::Corrupt { detail, .. }) => detail,
        Err(Error::BadCrc { .. }) => "bad CRC".to_string(),
        Err(e) => return Err(e),
    };
    // Without a copy to take its place, a primary that reads as one
    // stays (an unsupported one is refused as it was).
    let keep = move || match unsupported {
        Some(e) => Err(e),
        None => Ok(None),
    };
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < dev.len() {
        let n = (dev.len() - at).min(CHUNK as u64) as usize;
        dev.read_at(&mut buf[..n], at).map_err(Error::Io)?;
        for i in (0..n.saturating_sub(3)).step_by(512) {
            let off = at + i as u64;
            if off == 0 || be32(&buf, i) != fsb::XFS_SB_MAGIC {
                continue;
            }

            let Some(mut p) = confirm_secondary(dev, off)? else {
                continue;
            };
            if let Some(old) = &sound {
                // The primary's own fields kept (root and quota inodes,
                // counters, flags), its geometry taken from the copies.
                if sb_geometry_bytes(&p.sector) == sb_geometry_bytes(old) {
                    return keep();
                }
                let mut merged = old.clone();
                set_geometry_bytes(&mut merged, &p.sector);
                merged[std::mem::offset_of!(fsb::Dsb, sb_inprogress)] = 0;
                if is_v5(&merged) {
                    xfs_format::crc::stamp(&mut merged, fsb::XFS_SB_CRC_OFF);
                }
                if crate::geometry::Geometry::from_superblock(&merged).is_err() {
                    continue;
                }
                p.sector = merged;
            }
            return Ok(Some(FoundPrimary { why, ..p }));
        }
        at += n as u64;
    }
    if sound.is_some() {
        return keep();
    }
    Err(Error::corrupt(
        "superblock",
        Location::Sb(0),
        format!("{why}; no secondary superblock was found on the device to take its place"),
    ))
}

/// The superblock sector at byte `off` of `dev`: 512 bytes, or the sector
/// size it names when that is one (a power of two up to 32 KiB that fits).
pub(super) fn read_sb_sector(dev: &dyn Device, off: u64) -> Result<Vec<u8>> {
    let mut s = vec![0u8; 512];
    dev.read_at(&mut s, off).map_err(Error::Io)?;
    let sect = usize::from(be16(&s, std::mem::offset_of!(fsb::Dsb, sb_sectsize)));
    if sect > 512 && sect.is_power_of_two() && sect <= 32768 && off + sect as u64 <= dev.len() {
        s = vec![0u8; sect];
        dev.read_at(&mut s, off).map_err(Error::Io)?;
    }
    Ok(s)
}

/// Byte offsets of the secondaries the primary's own AG size and count
/// locate (AG 1 on, up to [`SB_CONFIRM`]); none when its AG size is no
/// whole number of sectors.
fn own_secondaries(primary: &[u8]) -> Vec<u64> {
    use std::mem::offset_of;
    let bs = u64::from(be32(primary, offset_of!(fsb::Dsb, sb_blocksize)));
    let agb = u64::from(be32(primary, offset_of!(fsb::Dsb, sb_agblocks)));
    let agc = be32(primary, offset_of!(fsb::Dsb, sb_agcount));
    let ag_bytes = bs.saturating_mul(agb);
    if ag_bytes < 512 || !ag_bytes.is_multiple_of(512) {
        return Vec::new();
    }
    (1..agc.min(1 + SB_CONFIRM))
        .map(|a| u64::from(a).saturating_mul(ag_bytes))
        .collect()
}

/// Of the secondaries [`own_secondaries`] locates, how many are read and
/// how many hold the primary's geometry bytes.
fn own_copies(dev: &dyn Device, primary: &[u8]) -> (u32, u32) {
    let mine = sb_geometry_bytes(primary);
    let at = own_secondaries(primary);
    let agree = at
        .iter()
        .filter(|&&at| {
            at < dev.len()
                && matches!(read_sb_sector(dev, at), Ok(o) if sb_geometry_bytes(&o) == mine)
        })
        .count();
    (at.len() as u32, agree as u32)
}

/// The primary that the superblock at byte `off` gives, when it is a
/// sound secondary where its geometry puts an AG and most of the other
/// secondaries it locates agree with it.
fn confirm_secondary(dev: &dyn Device, off: u64) -> Result<Option<FoundPrimary>> {
    let cand = read_sb_sector(dev, off)?;
    let Ok(geo) = crate::geometry::Geometry::from_superblock(&cand) else {
        return Ok(None);
    };
    let ag_bytes = u64::from(geo.ag_blocks) * u64::from(geo.block_size);
    if ag_bytes == 0 || !off.is_multiple_of(ag_bytes) {
        return Ok(None);
    }
    let agno = off / ag_bytes;
    if agno == 0
        || agno >= u64::from(geo.ag_count)
        || geo.data_blocks.saturating_mul(u64::from(geo.block_size)) > dev.len()
    {
        return Ok(None);
    }
    use std::mem::offset_of;
    let root_at = offset_of!(fsb::Dsb, sb_rootino);
    let null = u64::MAX.to_be_bytes();
    let shared = sb_geometry_bytes(&cand);
    let (mut read, mut agree) = (0u32, 0u32);
    let mut root: Option<[u8; 8]> = None;
    for a in (1..geo.ag_count)
        .filter(|&a| u64::from(a) != agno)
        .take(SB_CONFIRM as usize)
    {
        read += 1;
        let at = u64::from(a) * ag_bytes;
        let Ok(other) = read_sb_sector(dev, at)
            .map_err(|_| ())
            .and_then(|o| (at < dev.len()).then_some(o).ok_or(()))
        else {
            continue;
        };
        if sb_geometry_bytes(&other) == shared {
            agree += 1;
            if other[root_at..root_at + 8] != null {
                root.get_or_insert(other[root_at..root_at + 8].try_into().expect("8 bytes"));
            }
        }
    }
    if read > 0 && agree * 2 <= read {
        return Ok(None);
    }
    let mut sector = cand;
    {
        sector[offset_of!(fsb::Dsb, sb_inprogress)] = 0;
        // The root from a copy that has it.
        if sector[root_at..root_at + 8] == null {
            if let Some(r) = root {
                sector[root_at..root_at + 8].copy_from_slice(&r);
            }
        }
        let (rbm, rsum) = (
            offset_of!(fsb::Dsb, sb_rbmino),
            offset_of!(fsb::Dsb, sb_rsumino),
        );
        if !geo.features.metadir
            && sector[rbm..rbm + 8] == null
            && sector[rsum..rsum + 8] == null
            && sector[root_at..root_at + 8] != null
        {
            let root = be64(&sector, root_at);
            put_be64(&mut sector, rbm, root + 1);
            put_be64(&mut sector, rsum, root + 2);
        }
        if geo.v5 {
            xfs_format::crc::stamp(&mut sector, fsb::XFS_SB_CRC_OFF);
        }
    }
    Ok(Some(FoundPrimary {
        why: String::new(),
        sector,
        agno: agno as u32,
        read: read + 1,
        agree: agree + 1,
    }))
}

/// A field of the primary reset: what was wrong (the check's words) and
/// what was done.
pub(super) struct FieldReset {
    pub(super) problem: String,
    pub(super) fix: String,
}

/// True when a stripe unit and width are what xfs_repair accepts: both
/// zero or both set, the unit dividing the AG size and the width, and
/// none without the stripe alignment feature bit.
fn stripe_ok(dalign: bool, su: u32, sw: u32, agb: u32) -> bool {
    if !dalign {
        return su == 0 && sw == 0;
    }
    (su == 0) == (sw == 0) && (su == 0 || (agb.is_multiple_of(su) && sw.is_multiple_of(su)))
}

/// Resets, in the primary `sector`, the fields xfs_repair resets on their
/// own (its phase 1 and the checks it makes of every superblock), each
/// to what xfs_repair leaves there: flags, `shared_vn` and `inprogress`
/// to 0; quota inodes and flags without the quota feature bit to null
/// and 0; free realtime extents without a realtime section to 0; a
/// stripe unit and width that do not fit to the values most of the
/// secondaries hold (0 when none does); log-incompatible feature bits no
/// kernel knows cleared. The CRC is stamped again when anything changed.
/// Nothing is done to a sector that is not a superblock.
pub(super) fn reset_fields(dev: &dyn Device, sector: &mut [u8]) -> Vec<FieldReset> {
    use std::mem::offset_of;
    let mut out = Vec::new();
    if sector.len() < fsb::XFS_DSB_SIZE || be32(sector, 0) != fsb::XFS_SB_MAGIC {
        return out;
    }
    let v5 = is_v5(sector);
    let vn = be16(sector, offset_of!(fsb::Dsb, sb_versionnum));
    let mut push = |problem: String, fix: &str| {
        out.push(FieldReset {
            problem,
            fix: format!("primary superblock: {fix}"),
        })
    };
    // One-byte fields that must be 0, with the check's words for them.
    type Words = fn(u8) -> String;
    let zero: [(usize, &str, Words); 3] = [
        (offset_of!(fsb::Dsb, sb_flags), "flags", |v| {
            format!("flags {v:#x} (no flag is defined on disk)")
        }),
        (offset_of!(fsb::Dsb, sb_shared_vn), "shared_vn", |v| {
            format!("shared_vn {v} (must be 0)")
        }),
        (offset_of!(fsb::Dsb, sb_inprogress), "inprogress", |v| {
            format!("inprogress {v}: mkfs did not finish")
        }),
    ];
    for (off, name, words) in zero {
        if sector[off] != 0 {
            push(words(sector[off]), &format!("{name} set to 0"));
            sector[off] = 0;
        }
    }
    let metadir = v5 && be32(sector, INCOMPAT) & fsb::XFS_SB_FEAT_INCOMPAT_METADIR != 0;
    if vn & fsb::XFS_SB_VERSION_QUOTABIT == 0 && !metadir {
        let mut q = vec![
            ("uquotino", offset_of!(fsb::Dsb, sb_uquotino)),
            ("gquotino", offset_of!(fsb::Dsb, sb_gquotino)),
        ];
        if v5 {
            q.push(("pquotino", offset_of!(fsb::Dsb, sb_pquotino)));
        }
        for (name, off) in q {
            let v = be64(sector, off);
            if v != 0 && v != xfs_format::types::NULLFSINO {
                push(
                    format!("{name} {v} without quotas"),
                    &format!("{name} set to null"),
                );
                put_be64(sector, off, xfs_format::types::NULLFSINO);
            }
        }
        let qf = offset_of!(fsb::Dsb, sb_qflags);
        if be16(sector, qf) != 0 {
            push(
                format!("quota flags {:#x} without quotas", be16(sector, qf)),
                "quota flags set to 0",
            );
            put_be16(sector, qf, 0);
        }
    }
    let fr = offset_of!(fsb::Dsb, sb_frextents);
    if be64(sector, offset_of!(fsb::Dsb, sb_rblocks)) == 0 && be64(sector, fr) != 0 {
        push(
            format!("no realtime section but frextents {}", be64(sector, fr)),
            "frextents set to 0",
        );
        put_be64(sector, fr, 0);
    }
    let (uo, wo) = (
        offset_of!(fsb::Dsb, sb_unit),
        offset_of!(fsb::Dsb, sb_width),
    );
    let agb = be32(sector, offset_of!(fsb::Dsb, sb_agblocks));
    let dalign = vn & fsb::XFS_SB_VERSION_DALIGNBIT != 0;
    let (su, sw) = (be32(sector, uo), be32(sector, wo));
    if !stripe_ok(dalign, su, sw, agb) {
        let (nu, nw) = secondaries_stripe(dev, sector, dalign).unwrap_or((0, 0));
        push(
            format!("stripe unit {su}, width {sw} for AGs of {agb} blocks"),
            &format!("stripe unit and width set to {nu} and {nw}, as the secondaries hold them"),
        );
        put_be32(sector, uo, nu);
        put_be32(sector, wo, nw);
    }
    if v5 {
        let li = offset_of!(fsb::Dsb, sb_features_log_incompat);
        let bits = be32(sector, li);
        let unknown = bits & !fsb::XFS_SB_FEAT_INCOMPAT_LOG_ALL;
        if unknown != 0 {
            push(
                format!("unknown log_incompat feature bits {unknown:#x}"),
                &format!("log_incompat feature bits {unknown:#x} cleared"),
            );
            put_be32(sector, li, bits & !unknown);
        }
    }
    if !out.is_empty() && v5 {
        xfs_format::crc::stamp(sector, fsb::XFS_SB_CRC_OFF);
    }
    out
}

/// The stripe unit and width most of the secondaries (up to
/// [`SB_CONFIRM`]) hold, among those that fit the filesystem.
fn secondaries_stripe(dev: &dyn Device, primary: &[u8], dalign: bool) -> Option<(u32, u32)> {
    use std::mem::offset_of;
    let agb = be32(primary, offset_of!(fsb::Dsb, sb_agblocks));
    let mut seen: Vec<((u32, u32), u32)> = Vec::new();
    let mut read = 0;
    for at in own_secondaries(primary) {
        let Some(s) = (at < dev.len())
            .then(|| read_sb_sector(dev, at).ok())
            .flatten()
            .filter(|s| be32(s, 0) == fsb::XFS_SB_MAGIC)
        else {
            continue;
        };
        read += 1;
        let pair = (
            be32(&s, offset_of!(fsb::Dsb, sb_unit)),
            be32(&s, offset_of!(fsb::Dsb, sb_width)),
        );
        if !stripe_ok(dalign, pair.0, pair.1, agb) {
            continue;
        }
        match seen.iter_mut().find(|(p, _)| *p == pair) {
            Some((_, n)) => *n += 1,
            None => seen.push((pair, 1)),
        }
    }
    seen.into_iter()
        .max_by_key(|&(_, n)| n)
        .filter(|&(_, n)| n * 2 > read)
        .map(|(p, _)| p)
}

/// True when `ino` is a directory whose '..' is itself: a root.
fn is_root_dir(fs: &Fs, ino: u64) -> bool {
    let geo = fs.geometry();
    let ino = crate::geometry::Ino(ino);
    if !geo.ino_valid(ino) {
        return false;
    }
    match fs.inode(ino) {
        Ok(i) if i.file_type == crate::inode::FileType::Dir => {
            matches!(crate::dir::lookup(fs, &i, b".."), Ok(Some(p)) if p == ino)
        }
        _ => false,
    }
}

/// The root, realtime bitmap and realtime summary inode numbers of the
/// primary `sector`, set where mkfs puts them as xfs_repair sets them: a
/// root that is not a root directory is replaced by the inode where mkfs
/// puts the root, when that one is a root directory; without a metadata
/// directory, the realtime inodes are the two after the root. The
/// filesystem is read through `dev` with `sector` as its primary (its log
/// not replayed: these inodes are where mkfs wrote them). Nothing is done
/// when the filesystem cannot be opened (what is wrong is reported by
/// whatever reads it next).
pub(super) fn reset_root_inodes(
    dev: Arc<dyn Device>,
    sector: &mut [u8],
    open: &OpenOptions,
) -> Vec<FieldReset> {
    use std::mem::offset_of;
    let mut out = Vec::new();
    let mut view = sector.to_vec();
    if is_v5(&view) {
        set_needsrepair(&mut view, false);
    }
    let overlay = Primary {
        inner: dev,
        sector: view,
    };
    let Ok(fs) = Fs::from_device(
        Box::new(overlay),
        &OpenOptions {
            norecovery: true,
            any_root: true,
            ..open.clone()
        },
    ) else {
        return out;
    };
    let geo = fs.geometry().clone();
    let ro = offset_of!(fsb::Dsb, sb_rootino);
    let mut root = geo.root_ino.0;
    if !is_root_dir(&fs, root) {
        let want = crate::check::sb::calc_root_ino(&geo);
        if want != root && is_root_dir(&fs, want) {
            out.push(FieldReset {
                problem: format!("root inode {root} is not a root directory"),
                fix: format!("primary superblock: root inode set to {want}, where mkfs puts it"),
            });
            put_be64(sector, ro, want);
            root = want;
        }
    }
    if !geo.features.metadir {
        let rt = [
            (
                "realtime bitmap inode",
                offset_of!(fsb::Dsb, sb_rbmino),
                root + 1,
                geo.rbm_ino.0,
            ),
            (
                "realtime summary inode",
                offset_of!(fsb::Dsb, sb_rsumino),
                root + 2,
                geo.rsum_ino.0,
            ),
        ];
        for (name, off, want, have) in rt {
            if have != want {
                out.push(FieldReset {
                    problem: format!("{name} {have}, mkfs puts it at {want}"),
                    fix: format!("primary superblock: {name} set to {want}"),
                });
                put_be64(sector, off, want);
            }
        }
    }
    if !out.is_empty() && geo.v5 {
        xfs_format::crc::stamp(sector, fsb::XFS_SB_CRC_OFF);
    }
    out
}

//! The filesystem's identity, as `xfs_admin -l -u -L -U` shows and sets it:
//! the label (`sb_fname`) and the UUID (`sb_uuid`, with `sb_meta_uuid` and
//! the META_UUID incompat feature on v5).
//!
//! Every superblock copy is changed, one sector per AG. The primary goes
//! through the journal (a logged superblock buffer, written back and the
//! log left clean by [`Fs::sync`]), then the secondary copies are written
//! in place with their CRCs, as the kernel's online label change updates
//! them after its logged primary.
//!
//! A UUID change also rewrites the log, as `xfs_admin -U` clears it: every
//! log record header carries the filesystem UUID and the kernel refuses to
//! mount a filesystem whose last log record names another ("log has
//! mismatched uuid"). A dirty log is refused ([`require_clean_log`]).
//! After the journaled superblock change, a new unmount record carrying
//! the new UUID goes at the log head, in the head's cycle (so its LSN is
//! past every LSN in the metadata, as a v5 log must move forward); every
//! other written log block is then stamped as an empty record header of
//! the cycle it already carried, with the new UUID, so the head and tail
//! search finds the same head and no record names the old UUID. Zeroed
//! log blocks stay zero. A crash between the superblock's write-back and
//! the new unmount record leaves the new UUID in the superblock and the
//! old one in the log's last record: the kernel refuses that mount until
//! the same `xfskit admin -U` is run again (it reads such a log as clean).
//!
//! Features are added as `xfs_admin -O` (`xfs_repair -c`) of xfsprogs 7.2
//! adds them ([`add_features`]): bigtime, inobtcount, nrext64 and exchange
//! (exchange-range), the only ones 7.2 can add offline. Each is a feature
//! bit; inobtcount also needs `agi_iblocks` / `agi_fblocks` counted from
//! each AG's inode btrees. The counters are set first, through the log, in
//! batches of AGs (no reader looks at them while the bit is off); then one
//! transaction sets the bits in the primary superblock and, when there are
//! at most [`LOGGED_SB_AGS`] AGs, in every secondary copy too, so a crash
//! leaves either the old or the new features everywhere. With more AGs the
//! secondary copies are written in place after the logged primary, and
//! running the same command again finishes an interrupted change.

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr, Geometry};
use crate::log::buftype::{blft, BufKind};
use crate::log::record::{cycle_of, LogDev, BB};
use std::mem::offset_of;
use xfs_format::sb::{self as fsb, Dsb};

/// Bytes of a label (`sb_fname`).
pub const LABEL_MAX: usize = 12;

const UUID_OFF: usize = offset_of!(Dsb, sb_uuid);
const FNAME_OFF: usize = offset_of!(Dsb, sb_fname);
const INCOMPAT_OFF: usize = offset_of!(Dsb, sb_features_incompat);
const RO_COMPAT_OFF: usize = offset_of!(Dsb, sb_features_ro_compat);
const META_UUID_OFF: usize = offset_of!(Dsb, sb_meta_uuid);
const QUOTINO_OFFS: [usize; 3] = [
    offset_of!(Dsb, sb_uquotino),
    offset_of!(Dsb, sb_gquotino),
    offset_of!(Dsb, sb_pquotino),
];

const SB_KIND: BufKind = BufKind {
    blft: blft::SB,
    lsn_off: Some(fsb::XFS_SB_LSN_OFF),
};

/// The label and UUID of a filesystem, from its primary superblock, and
/// the first secondary copy that disagrees with it, if any.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The label, without its NUL padding.
    pub label: Vec<u8>,
    /// `sb_uuid`.
    pub uuid: [u8; 16],
    /// `sb_meta_uuid` when the META_UUID feature is set.
    pub meta_uuid: Option<[u8; 16]>,
    /// The first AG whose superblock carries another label.
    pub label_differs: Option<u32>,
    /// The first AG whose superblock carries another UUID.
    pub uuid_differs: Option<u32>,
}

/// The UUID `xfs_admin -U` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewUuid {
    /// A new random (version 4) UUID.
    Generate,
    /// All zeros.
    Nil,
    /// Back to the UUID the metadata is stamped with (`sb_meta_uuid`);
    /// nothing to do without the META_UUID feature.
    Restore,
    /// This one.
    Value([u8; 16]),
}

impl NewUuid {
    /// Parses what `xfs_admin -U` accepts: `generate`, `nil`, `restore`
    /// (any case) or a UUID in its 36-character form.
    pub fn parse(s: &str) -> Option<NewUuid> {
        match s.to_ascii_lowercase().as_str() {
            "generate" => Some(NewUuid::Generate),
            "nil" => Some(NewUuid::Nil),
            "restore" => Some(NewUuid::Restore),
            _ => parse_uuid(s).map(NewUuid::Value),
        }
    }
}

/// Parses a UUID written as 8-4-4-4-12 hexadecimal digits.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    let mut hex = Vec::with_capacity(32);
    for (i, &c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
        } else {
            hex.push((c as char).to_digit(16)? as u8);
        }
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = hex[2 * i] << 4 | hex[2 * i + 1];
    }
    Some(out)
}

pub use crate::bytes::uuid_string;

/// The label `xfs_admin -L` would write for `arg`: at most
/// [`LABEL_MAX`] bytes (a longer one is refused: xfs_admin cuts it to 12
/// bytes with a warning, which can split a character, while the kernel's
/// online label change refuses it); `--`, `""` and `''` (as xfs_db takes
/// them) and the empty string clear it. A NUL byte is refused.
pub fn label_from_arg(arg: &[u8]) -> Result<Vec<u8>> {
    if matches!(arg, b"--" | b"\"\"" | b"''") {
        return Ok(Vec::new());
    }
    if arg.contains(&0) {
        return Err(Error::Invalid("a label cannot hold a NUL byte".into()));
    }
    if arg.len() > LABEL_MAX {
        return Err(Error::Invalid(format!(
            "label is {} bytes long: at most {LABEL_MAX} bytes fit in the superblock",
            arg.len()
        )));
    }
    Ok(arg.to_vec())
}

fn sb_daddr(geo: &Geometry, agno: u32) -> Daddr {
    geo.agb_to_daddr(AgNumber(agno), AgBlock(0))
}

/// Reads the superblock sector of AG `agno`, which must carry the magic.
fn read_sb(fs: &Fs, agno: u32) -> Result<Vec<u8>> {
    let geo = fs.geometry();
    let mut s = vec![0u8; geo.sect_size as usize];
    fs.device()
        .read_at(&mut s, sb_daddr(geo, agno).bytes())
        .map_err(Error::Io)?;
    if crate::bytes::be32(&s, 0) != fsb::XFS_SB_MAGIC {
        return Err(Error::corrupt(
            "superblock",
            Location::Sb(agno),
            "bad magic number",
        ));
    }
    Ok(s)
}

/// The label and UUID, with every superblock copy compared to the
/// primary's (one sector read per AG).
pub fn identity(fs: &Fs) -> Result<Identity> {
    let geo = fs.geometry();
    let primary = read_sb(fs, 0)?;
    let mut id = Identity {
        label: geo.label.clone(),
        uuid: geo.uuid,
        meta_uuid: geo.features.meta_uuid.then_some(geo.meta_uuid),
        label_differs: None,
        uuid_differs: None,
    };
    for agno in 1..geo.ag_count {
        if id.label_differs.is_some() && id.uuid_differs.is_some() {
            break;
        }
        let s = read_sb(fs, agno)?;
        if id.label_differs.is_none()
            && s[FNAME_OFF..FNAME_OFF + 12] != primary[FNAME_OFF..FNAME_OFF + 12]
        {
            id.label_differs = Some(agno);
        }
        if id.uuid_differs.is_none()
            && s[UUID_OFF..UUID_OFF + 16] != primary[UUID_OFF..UUID_OFF + 16]
        {
            id.uuid_differs = Some(agno);
        }
    }
    Ok(id)
}

/// Refuses a log that needs replay, as `xfs_admin -U` does: a UUID
/// change rewrites the log, and what a dirty log holds would be lost.
/// An external log is rewritten on its device, which the open must carry
/// (`--logdev`); without it the change is refused.
pub fn require_clean_log(fs: &Fs) -> Result<()> {
    let geo = fs.geometry();
    if crate::log::log_missing(fs.device(), geo) {
        return Err(Error::Unsupported(format!(
            "changing the UUID of a filesystem with an external log rewrites the log: {}",
            crate::log::NEEDS_LOGDEV.trim_start_matches("the filesystem has an external log: ")
        )));
    }
    let log = crate::log::log_dev(fs.device(), geo)?;
    let ends = crate::log::find::find_ends(&log)?;
    if ends.clean || ends.empty {
        return Ok(());
    }
    Err(Error::DirtyLog(
        "the log holds metadata changes that were not written back, and a UUID change rewrites the log".into(),
    ))
}

fn refuse_rtgroups(geo: &Geometry) -> Result<()> {
    if geo.has_rtgroups() && geo.rt_blocks > 0 {
        return Err(Error::Unsupported(
            "changing the label or UUID of a filesystem with realtime groups: its realtime superblock is not updated by xfskit".into(),
        ));
    }
    Ok(())
}

/// Writes a quota inode field of 0 (none, as mkfs.xfs leaves it) as
/// NULLFSINO, as the kernel and libxfs write every superblock they change
/// (xfs_admin's copies show `null` there); a metadata directory
/// filesystem keeps zeros, its quota inodes live in the metadata tree.
fn quota_inos_to_disk(geo: &Geometry, s: &mut [u8]) {
    if geo.features.metadir {
        return;
    }
    let n = if geo.v5 { 3 } else { 2 };
    for &off in &QUOTINO_OFFS[..n] {
        if crate::bytes::be64(s, off) == 0 {
            s[off..off + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        }
    }
}

/// Changes the primary superblock through the journal (`f` edits its
/// sector) and writes it back, leaving the log clean.
fn change_primary(fs: &Fs, f: impl FnOnce(&mut [u8])) -> Result<()> {
    let geo = fs.geometry();
    let sect = geo.sect_size;
    let mut tp = fs.trans()?;
    let id = tp.read_raw_buf(Daddr(0), sect, SB_KIND, Some(fsb::XFS_SB_CRC_OFF))?;
    let b = tp.buf_mut(id);
    f(b);
    quota_inos_to_disk(geo, b);
    tp.commit()?;
    fs.sync()
}

/// Rewrites every secondary superblock with `f`, CRC stamped; then
/// flushes the device.
fn change_secondaries(fs: &Fs, mut f: impl FnMut(&mut [u8])) -> Result<()> {
    let geo = fs.geometry();
    for agno in 1..geo.ag_count {
        let mut s = read_sb(fs, agno)?;
        f(&mut s);
        quota_inos_to_disk(geo, &mut s);
        if geo.v5 {
            xfs_format::crc::stamp(&mut s, fsb::XFS_SB_CRC_OFF);
        }
        fs.device()
            .write_at(&s, sb_daddr(geo, agno).bytes())
            .map_err(Error::Io)?;
    }
    fs.device().flush().map_err(Error::Io)
}

/// Sets the label of a filesystem opened for writing (journaled) in
/// every superblock; `label` as [`label_from_arg`] returns it. The
/// filesystem must not be used for writing afterwards.
pub fn set_label(fs: &Fs, label: &[u8]) -> Result<()> {
    let label = label_from_arg(label)?;
    refuse_rtgroups(fs.geometry())?;
    let mut fname = [0u8; LABEL_MAX];
    fname[..label.len()].copy_from_slice(&label);
    let put = |s: &mut [u8]| s[FNAME_OFF..FNAME_OFF + LABEL_MAX].copy_from_slice(&fname);
    change_primary(fs, put)?;
    change_secondaries(fs, put)
}

/// Sets the UUID of a filesystem opened for writing (journaled) in every
/// superblock, as `xfs_admin -U` does; returns the new UUID, or None for
/// [`NewUuid::Restore`] without the META_UUID feature (nothing to do).
/// The caller checks the log with [`require_clean_log`] before the
/// read-write open (which would replay it). The filesystem must not be
/// used for writing afterwards.
///
/// On v5, metadata keeps the UUID it is stamped with: when the new UUID
/// differs from it and META_UUID is not set, the feature is set and
/// `sb_meta_uuid` keeps the old UUID; when the new UUID equals it again,
/// the feature is cleared and `sb_meta_uuid` zeroed. Each copy is judged
/// by its own feature bit against the primary's metadata UUID, as xfs_db
/// does.
pub fn set_uuid(fs: &Fs, new: NewUuid) -> Result<Option<[u8; 16]>> {
    let geo = fs.geometry();
    refuse_rtgroups(geo)?;
    require_clean_log(fs)?;
    let meta = geo.meta_uuid;
    let uuid = match new {
        NewUuid::Generate => crate::mkfs::random_uuid(),
        NewUuid::Nil => [0; 16],
        NewUuid::Restore if !geo.features.meta_uuid => return Ok(None),
        NewUuid::Restore => meta,
        NewUuid::Value(u) => u,
    };
    let v5 = geo.v5;
    let put = move |s: &mut [u8]| {
        if v5 {
            let incompat = crate::bytes::be32(s, INCOMPAT_OFF);
            let has = incompat & fsb::XFS_SB_FEAT_INCOMPAT_META_UUID != 0;
            if !has && uuid != meta {
                let old: [u8; 16] = s[UUID_OFF..UUID_OFF + 16].try_into().unwrap_or([0; 16]);
                s[META_UUID_OFF..META_UUID_OFF + 16].copy_from_slice(&old);
                let v = incompat | fsb::XFS_SB_FEAT_INCOMPAT_META_UUID;
                s[INCOMPAT_OFF..INCOMPAT_OFF + 4].copy_from_slice(&v.to_be_bytes());
            } else if has && uuid == meta {
                s[META_UUID_OFF..META_UUID_OFF + 16].fill(0);
                let v = incompat & !fsb::XFS_SB_FEAT_INCOMPAT_META_UUID;
                s[INCOMPAT_OFF..INCOMPAT_OFF + 4].copy_from_slice(&v.to_be_bytes());
            }
        }
        s[UUID_OFF..UUID_OFF + 16].copy_from_slice(&uuid);
    };
    change_primary(fs, put)?;
    let log = crate::log::log_dev(fs.device(), geo)?;
    restamp_log(&log, &uuid)?;
    change_secondaries(fs, put)?;
    Ok(Some(uuid))
}

/// Blocks read and written at a time when the log is restamped.
const CHUNK_BBS: u64 = 2048;

/// Puts an unmount record carrying `uuid` at the head of a clean log, then
/// stamps every other written block as an empty record header of the
/// cycle it carries, with `uuid`.
fn restamp_log(log: &LogDev<'_>, uuid: &[u8; 16]) -> Result<()> {
    let ends = crate::log::find::find_ends(log)?;
    if !(ends.clean || ends.empty) {
        return Err(Error::DirtyLog(
            "the log is not clean after the superblock was written back".into(),
        ));
    }
    let (head, cycle) = if ends.empty {
        (0, 1)
    } else {
        (ends.head_blk, ends.head_cycle)
    };
    let prev = ends.last.as_ref().map_or(0, |h| h.blk);
    crate::log::recover::write_unmount(log, head, cycle, prev, uuid)?;
    log.dev.flush().map_err(Error::Io)?;
    let mine = [head % log.nbb, (head + 1) % log.nbb];
    let mut blk = 0;
    while blk < log.nbb {
        let n = CHUNK_BBS.min(log.nbb - blk);
        let mut buf = log.read(blk, n)?;
        if buf.iter().all(|&b| b == 0) {
            blk += n;
            continue;
        }
        for i in 0..n {
            let b = blk + i;
            let h = &mut buf[(i * BB) as usize..((i + 1) * BB) as usize];
            if mine.contains(&b) || h.iter().all(|&x| x == 0) {
                continue;
            }
            let c = cycle_of(h);
            crate::log::recover::empty_header(h, c, b, uuid);
        }
        // The record just written is inside this chunk: write around it.
        let mut i = 0;
        while i < n {
            if mine.contains(&(blk + i)) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < n && !mine.contains(&(blk + j)) {
                j += 1;
            }
            let bytes = &buf[(i * BB) as usize..(j * BB) as usize];
            log.dev
                .write_at(bytes, log.start + (blk + i) * BB)
                .map_err(Error::Io)?;
            i = j;
        }
        blk += n;
    }
    log.dev.flush().map_err(Error::Io)
}

/// A feature `xfskit admin -O` can add (xfsprogs 7.2's `xfs_repair -c`
/// names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// Lazy superblock counters: always on for v5, accepted as a no-op.
    Lazycount,
    /// Inode btree block counters in the AGI (a ro_compat bit).
    Inobtcount,
    /// Timestamps to 2486 (an incompat bit; inodes convert as they change).
    Bigtime,
    /// 64-bit extent counters (an incompat bit; inodes convert as they change).
    Nrext64,
    /// File exchange-range (an incompat bit).
    Exchange,
}

/// Features xfsprogs 7.2 knows but cannot add to an existing filesystem,
/// with the mkfs.xfs option that makes them.
const NOT_ADDABLE: &[(&str, &str)] = &[
    ("crc", "-m crc=1"),
    ("finobt", "-m finobt=1"),
    ("rmapbt", "-m rmapbt=1"),
    ("reflink", "-m reflink=1"),
    ("parent", "-n parent=1"),
    ("metadir", "-m metadir=1"),
    ("sparse", "-i sparse=1"),
    ("ftype", "-n ftype=1"),
    ("exchange-range", "-i exchange=1"),
    ("rtgroups", "-r rtgroups=1"),
    ("zoned", "-r zoned=1"),
    ("autofsck", "-m autofsck=1"),
];

impl Feature {
    /// Every feature that can be added, in the order they are applied.
    pub const ALL: [Feature; 5] = [
        Feature::Lazycount,
        Feature::Inobtcount,
        Feature::Bigtime,
        Feature::Nrext64,
        Feature::Exchange,
    ];

    /// The name `-O` takes.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Lazycount => "lazycount",
            Feature::Inobtcount => "inobtcount",
            Feature::Bigtime => "bigtime",
            Feature::Nrext64 => "nrext64",
            Feature::Exchange => "exchange",
        }
    }

    /// (ro_compat, incompat) bits of the feature.
    fn bits(self) -> (u32, u32) {
        match self {
            Feature::Lazycount => (0, 0),
            Feature::Inobtcount => (fsb::XFS_SB_FEAT_RO_COMPAT_INOBTCNT, 0),
            Feature::Bigtime => (0, fsb::XFS_SB_FEAT_INCOMPAT_BIGTIME),
            Feature::Nrext64 => (0, fsb::XFS_SB_FEAT_INCOMPAT_NREXT64),
            Feature::Exchange => (0, fsb::XFS_SB_FEAT_INCOMPAT_EXCHRANGE),
        }
    }

    /// xfs_repair's words for the feature in its messages.
    fn words(self) -> &'static str {
        match self {
            Feature::Lazycount => "Lazy-counters",
            Feature::Inobtcount => "Inode btree count feature",
            Feature::Bigtime => "Large timestamp feature",
            Feature::Nrext64 => "Nrext64",
            Feature::Exchange => "File exchange-range feature",
        }
    }

    /// What is printed when the feature is added (xfs_repair 7.2's line).
    pub fn adding_message(self) -> &'static str {
        match self {
            Feature::Lazycount => "Lazy-counters are already enabled",
            Feature::Inobtcount => "Adding inode btree counts to filesystem.",
            Feature::Bigtime => "Adding large timestamp support to filesystem.",
            Feature::Nrext64 => "Adding nrext64 to filesystem.",
            Feature::Exchange => "Adding file exchange-range support to filesystem.",
        }
    }

    /// What is printed when the filesystem already has it.
    pub fn already_message(self) -> &'static str {
        match self {
            Feature::Lazycount => "Lazy-counters are already enabled",
            Feature::Inobtcount => "Filesystem already has inode btree counts.",
            Feature::Bigtime => "Filesystem already supports large timestamps.",
            Feature::Nrext64 => "Filesystem already supports nrext64.",
            Feature::Exchange => "Filesystem already supports exchange-range.",
        }
    }

    /// True when the primary superblock (`geo`) has the feature.
    pub fn present(self, geo: &Geometry) -> bool {
        let (ro, inc) = self.bits();
        geo.v5 && geo.features_ro_compat & ro == ro && geo.features_incompat & inc == inc
    }
}

/// Parses what `-O` takes: `NAME=1[,NAME=1...]`, the names of
/// [`Feature::ALL`]. A name xfsprogs knows but cannot add, a value other
/// than 1 and an unknown name are refused: [`Error::Unsupported`] for the
/// first, [`Error::Invalid`] for the others.
pub fn parse_features(arg: &str) -> Result<Vec<Feature>> {
    let names = || {
        Feature::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    for item in arg.split(',') {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (item, None),
        };
        let Some(f) = Feature::ALL.iter().copied().find(|f| f.name() == name) else {
            if let Some((n, mkfs)) = NOT_ADDABLE.iter().find(|(n, _)| *n == name) {
                return Err(Error::Unsupported(format!(
                    "the {n} feature cannot be added to an existing filesystem (xfsprogs 7.2's \
                     xfs_admin -O and xfs_repair -c cannot add it either): make a new filesystem \
                     with it (mkfs.xfs {mkfs}, or xfskit mkfs) and copy the files into it"
                )));
            }
            return Err(Error::Invalid(format!(
                "unknown feature '{name}' in -O {arg}: features that can be added are {}",
                names()
            )));
        };
        match value {
            Some("1") => {}
            Some("0") if f == Feature::Lazycount => {
                return Err(Error::Unsupported(
                    "Cannot disable lazy-counters on V5 fs (lazycount=0)".into(),
                ))
            }
            Some("0") => {
                return Err(Error::Invalid(format!(
                    "-O {name}=0: {name} only supports upgrades, a feature cannot be removed"
                )))
            }
            Some(v) => {
                return Err(Error::Invalid(format!(
                    "-O {name}={v}: the value must be 1 ({name}=1 adds the feature)"
                )))
            }
            None => {
                return Err(Error::Invalid(format!(
                    "-O {name} requires a value: {name}=1"
                )))
            }
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out.sort();
    Ok(out)
}

/// Refuses what xfs_repair 7.2 refuses: any feature on a v4 filesystem,
/// inobtcount without the free inode btree, exchange without reflink, and
/// a log too small for the new features' transactions (smaller than the
/// kernel's minimum, which it would refuse to mount, or than libxfs's,
/// which xfs_repair 7.2 checks). Reads nothing but the geometry.
pub fn check_features(geo: &Geometry, want: &[Feature]) -> Result<()> {
    for &f in want {
        if !geo.v5 {
            return Err(Error::Unsupported(format!(
                "{} only supported on V5 filesystems.",
                f.words()
            )));
        }
        if f.present(geo) {
            continue;
        }
        match f {
            Feature::Inobtcount if !geo.features.finobt => {
                return Err(Error::Unsupported(
                    "Inode btree count feature requires free inode btree (finobt), which cannot be added to an existing filesystem.".into(),
                ))
            }
            Feature::Exchange if !geo.features.reflink => {
                return Err(Error::Unsupported(
                    "File exchange-range feature cannot be added without reflink, which cannot be added to an existing filesystem.".into(),
                ))
            }
            _ => {}
        }
    }
    let mut rg = crate::log::resv::ResvGeometry::from_geometry(geo);
    rg.nrext64 |= want.contains(&Feature::Nrext64);
    // The kernel's minimum, and libxfs's (its worst-case record size),
    // which xfs_repair 7.2 demands for an upgrade and is the larger.
    use crate::log::resv::{min_log_blocks, Rules};
    let need = min_log_blocks(&rg, Rules::Kernel).max(min_log_blocks(&rg, Rules::Mkfs));
    if u64::from(geo.log_blocks) < need {
        return Err(Error::Unsupported(format!(
            "Filesystem log too small to upgrade filesystem; need {need} blocks, have {}.",
            geo.log_blocks
        )));
    }
    Ok(())
}

/// AGIs changed per transaction when the inode btree counters are set.
const AGI_BATCH: u32 = 32;

/// With at most this many AGs every superblock copy is changed in the
/// one logged transaction; with more, the secondaries are written in
/// place after it.
pub const LOGGED_SB_AGS: u32 = 128;

/// Blocks of the short-pointer btree with `magic` rooted at `root` of
/// `levels` levels in AG `agno`: its node blocks are read (CRC and
/// structure checked), the leaves are counted from the pointers of the
/// level-1 nodes.
fn btree_blocks(fs: &Fs, agno: u32, magic: u32, root: u32, levels: u32) -> Result<u32> {
    let geo = fs.geometry();
    let aglen = geo.ag_len(AgNumber(agno));
    let loc = || Location::Other(format!("AG {agno} AGI"));
    if levels == 0 || levels as usize > crate::btree::MAX_LEVELS {
        return Err(Error::corrupt(
            "AGI",
            loc(),
            format!("inode btree of {levels} levels"),
        ));
    }
    let shape = crate::btree::Shape {
        magic,
        long_ptrs: false,
        rec_len: 16,
        key_len: 4,
        block_size: geo.block_size as usize,
        owner: u64::from(agno),
        root_in_inode: false,
        overlapping: false,
    };
    let mut total: u32 = 0;
    let mut stack = vec![(root, levels - 1)];
    while let Some((bno, level)) = stack.pop() {
        if bno == 0 || bno >= aglen {
            return Err(Error::corrupt(
                "inode btree",
                loc(),
                format!("block pointer {bno} outside the AG"),
            ));
        }
        total += 1;
        if total > aglen {
            return Err(Error::corrupt(
                "inode btree",
                loc(),
                "more blocks than the AG holds (a loop)",
            ));
        }
        if level == 0 {
            continue;
        }
        let d = fs.read_meta(
            geo.agb_to_daddr(AgNumber(agno), AgBlock(bno)),
            geo.block_size,
            &crate::buf::Verifier::ShortBtree {
                magic,
                agno,
                level: Some(level as u16),
            },
        )?;
        let lay = crate::btree::block::Lay::block(&shape, level as usize);
        let n = lay.numrecs(&d);
        for i in 0..n {
            let p = lay.ptr(&d, i) as u32;
            stack.push((p, level - 1));
        }
    }
    Ok(total)
}

/// Sets `agi_iblocks` and `agi_fblocks` of every AG from its inode
/// btrees, through the log, [`AGI_BATCH`] AGs a transaction.
fn count_inode_btrees(fs: &Fs) -> Result<()> {
    use xfs_format::ag::{self as xag, Agi};
    let geo = fs.geometry();
    let iblocks = offset_of!(Agi, agi_iblocks);
    let fblocks = offset_of!(Agi, agi_fblocks);
    let mut agno = 0;
    while agno < geo.ag_count {
        let end = (agno + AGI_BATCH).min(geo.ag_count);
        let mut tp = fs.trans()?;
        for a in agno..end {
            tp.lock_ag(AgNumber(a));
            let ag0 = geo.agb_to_daddr(AgNumber(a), AgBlock(0));
            let d = Daddr(ag0.0 + xag::XFS_AGI_SECTOR * u64::from(geo.sect_size >> 9));
            let id = tp.read_buf(d, geo.sect_size, &crate::buf::Verifier::Agi { agno: a })?;
            let b = tp.buf(id);
            let be = |o| crate::bytes::be32(b, o);
            let (root, level) = (
                be(offset_of!(Agi, agi_root)),
                be(offset_of!(Agi, agi_level)),
            );
            let (froot, flevel) = (
                be(offset_of!(Agi, agi_free_root)),
                be(offset_of!(Agi, agi_free_level)),
            );
            let i = btree_blocks(fs, a, xfs_format::btree::XFS_IBT_CRC_MAGIC, root, level)?;
            let f = btree_blocks(fs, a, xfs_format::btree::XFS_FIBT_CRC_MAGIC, froot, flevel)?;
            let b = tp.buf_mut(id);
            b[iblocks..iblocks + 4].copy_from_slice(&i.to_be_bytes());
            b[fblocks..fblocks + 4].copy_from_slice(&f.to_be_bytes());
        }
        tp.commit()?;
        agno = end;
    }
    Ok(())
}

/// ORs `ro` and `inc` into a superblock sector's feature fields; true when
/// that changed it.
fn or_features(s: &mut [u8], ro: u32, inc: u32) -> bool {
    let (r0, i0) = (
        crate::bytes::be32(s, RO_COMPAT_OFF),
        crate::bytes::be32(s, INCOMPAT_OFF),
    );
    s[RO_COMPAT_OFF..RO_COMPAT_OFF + 4].copy_from_slice(&(r0 | ro).to_be_bytes());
    s[INCOMPAT_OFF..INCOMPAT_OFF + 4].copy_from_slice(&(i0 | inc).to_be_bytes());
    r0 | ro != r0 || i0 | inc != i0
}

/// Adds features to a filesystem opened for writing, as `xfs_admin -O`
/// (`xfs_repair -c`) of xfsprogs 7.2 does, every superblock copy included;
/// returns each asked-for feature with true when it was added (false: the
/// filesystem already had it). Checked first with [`check_features`]. A
/// secondary superblock that lacks a feature the primary has (a change
/// interrupted after the primary) is brought in line. The filesystem must
/// not be used for writing afterwards.
pub fn add_features(fs: &Fs, want: &[Feature]) -> Result<Vec<(Feature, bool)>> {
    let geo = fs.geometry();
    check_features(geo, want)?;
    let report: Vec<(Feature, bool)> = want
        .iter()
        .map(|&f| (f, f != Feature::Lazycount && !f.present(geo)))
        .collect();
    let (mut ro, mut inc) = (0, 0);
    for &f in want {
        let (r, i) = f.bits();
        ro |= r;
        inc |= i;
    }
    if ro == 0 && inc == 0 {
        return Ok(report);
    }
    if report.contains(&(Feature::Inobtcount, true)) {
        count_inode_btrees(fs)?;
    }
    let sect = geo.sect_size;
    let logged_secondaries = geo.ag_count <= LOGGED_SB_AGS;
    let primary_changes = report.iter().any(|r| r.1);
    let mut tp = fs.trans()?;
    let mut dirty = false;
    if primary_changes {
        let id = tp.read_raw_buf(Daddr(0), sect, SB_KIND, Some(fsb::XFS_SB_CRC_OFF))?;
        let b = tp.buf_mut(id);
        or_features(b, ro, inc);
        quota_inos_to_disk(geo, b);
        dirty = true;
    }
    if logged_secondaries {
        for agno in 1..geo.ag_count {
            let d = sb_daddr(geo, agno);
            let s = read_sb(fs, agno)?;
            let mut probe = s.clone();
            if !or_features(&mut probe, ro, inc) {
                continue;
            }
            let id = tp.read_raw_buf(d, sect, SB_KIND, Some(fsb::XFS_SB_CRC_OFF))?;
            let b = tp.buf_mut(id);
            or_features(b, ro, inc);
            quota_inos_to_disk(geo, b);
            dirty = true;
        }
    }
    if dirty {
        tp.commit()?;
        fs.sync()?;
    } else {
        drop(tp);
    }
    if !logged_secondaries {
        for agno in 1..geo.ag_count {
            let mut s = read_sb(fs, agno)?;
            if !or_features(&mut s, ro, inc) {
                continue;
            }
            quota_inos_to_disk(geo, &mut s);
            xfs_format::crc::stamp(&mut s, fsb::XFS_SB_CRC_OFF);
            fs.device()
                .write_at(&s, sb_daddr(geo, agno).bytes())
                .map_err(Error::Io)?;
        }
        fs.device().flush().map_err(Error::Io)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_features_names_values_and_refusals() {
        assert_eq!(
            parse_features("nrext64=1,bigtime=1,nrext64=1").unwrap(),
            vec![Feature::Bigtime, Feature::Nrext64]
        );
        assert_eq!(
            parse_features("exchange=1,inobtcount=1,lazycount=1").unwrap(),
            vec![Feature::Lazycount, Feature::Inobtcount, Feature::Exchange]
        );
        for bad in [
            "bogus=1",
            "bigtime=0",
            "bigtime",
            "bigtime=2",
            "",
            "bigtime=1,",
        ] {
            assert!(
                matches!(parse_features(bad), Err(Error::Invalid(_))),
                "{bad:?}"
            );
        }
        for known in [
            "rmapbt=1",
            "parent=1",
            "finobt=1",
            "reflink=1",
            "metadir=1",
            "lazycount=0",
        ] {
            assert!(
                matches!(parse_features(known), Err(Error::Unsupported(_))),
                "{known:?}"
            );
        }
    }
}

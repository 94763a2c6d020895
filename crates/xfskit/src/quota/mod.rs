//! Quota files read back: the dquot record of each user, group and
//! project id that has one (`xfs_quota -x -c report`, offline).
//!
//! The superblock names the quota inodes (v5: one per kind; v4: the
//! user's, and one shared by groups or projects, as its flags say).
//! Filesystems with a metadata directory keep them there (`/quota/user`,
//! `/quota/group`, `/quota/project`). [`acct`] keeps the counts exact in
//! every transaction.

pub(crate) mod acct;
mod enable;
pub use enable::{enable, recount, EnableOptions, EnabledKind};

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{FsBlock, Geometry, Ino};
use crate::inode::Fork;
use xfs_format::quota::{
    dquot_problem, Dqblk, XFS_DQBLK_SIZE, XFS_DQTYPE_BIGTIME, XFS_DQTYPE_GROUP, XFS_DQTYPE_PROJ,
    XFS_DQTYPE_REC_MASK, XFS_DQTYPE_USER, XFS_DQUOT_CRC_OFF,
};
use zerocopy::FromBytes;

/// A kind of quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    User,
    Group,
    Project,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 3] = [Kind::User, Kind::Group, Kind::Project];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Group => "group",
            Kind::Project => "project",
        }
    }

    fn dqtype(self) -> u8 {
        match self {
            Kind::User => XFS_DQTYPE_USER,
            Kind::Group => XFS_DQTYPE_GROUP,
            Kind::Project => XFS_DQTYPE_PROJ,
        }
    }

    /// Its accounting bit in `sb_qflags`.
    fn acct(self) -> u16 {
        match self {
            Kind::User => 0x0001,
            Kind::Group => 0x0040,
            Kind::Project => 0x0008,
        }
    }

    /// Its "checked" bit in `sb_qflags` (v4: groups and projects share one).
    fn chkd(self, v5: bool) -> u16 {
        use xfs_format::sb::{XFS_GQUOTA_CHKD, XFS_OQUOTA_CHKD, XFS_PQUOTA_CHKD, XFS_UQUOTA_CHKD};
        match (self, v5) {
            (Kind::User, _) => XFS_UQUOTA_CHKD,
            (Kind::Group, true) => XFS_GQUOTA_CHKD,
            (Kind::Project, true) => XFS_PQUOTA_CHKD,
            (_, false) => XFS_OQUOTA_CHKD,
        }
    }

    /// Its enforcement bit in `sb_qflags` (v4: groups and projects share one).
    fn enfd(self, v5: bool) -> u16 {
        match (self, v5) {
            (Kind::User, _) => 0x0002,
            (Kind::Group, true) => 0x0080,
            (Kind::Project, true) => 0x0200,
            (_, false) => 0x0010,
        }
    }
}

/// The grace period when id 0's record sets none (the kernel's).
const DEFAULT_GRACE: i64 = 7 * 24 * 60 * 60;

/// The grace periods (blocks, inodes, realtime blocks) id 0's record `d`
/// keeps in its timers, in the legacy encoding.
fn grace_periods(d: &xfs_format::quota::DiskDquot) -> [i64; 3] {
    let or_default = |t: u32| if t == 0 { DEFAULT_GRACE } else { i64::from(t) };
    [
        or_default(d.d_btimer.get()),
        or_default(d.d_itimer.get()),
        or_default(d.d_rtbtimer.get()),
    ]
}

/// A grace timer (seconds since the epoch) as a record keeps it: bigtime
/// records count units of four seconds (rounded up).
fn timer_to_disk(t: i64, bigtime: bool) -> u32 {
    if bigtime {
        ((t + 3) >> 2).clamp(0, i64::from(u32::MAX)) as u32
    } else {
        t.clamp(0, i64::from(u32::MAX)) as u32
    }
}

/// One id's quota record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dquot {
    pub kind: Kind,
    pub id: u32,
    /// Data-section blocks used (filesystem blocks).
    pub blocks: u64,
    /// Inodes used.
    pub inodes: u64,
    /// Realtime blocks used (filesystem blocks).
    pub rtblocks: u64,
    /// Soft and hard limits (0: none), in the same units.
    pub blocks_soft: u64,
    pub blocks_hard: u64,
    pub inodes_soft: u64,
    pub inodes_hard: u64,
    pub rtblocks_soft: u64,
    pub rtblocks_hard: u64,
    /// When each grace period ends, seconds since the epoch (0: not
    /// running; for id 0, the kind's default grace period instead).
    pub blocks_timer: i64,
    pub inodes_timer: i64,
    pub rtblocks_timer: i64,
    /// Warnings issued.
    pub blocks_warns: u16,
    pub inodes_warns: u16,
    pub rtblocks_warns: u16,
}

impl Dquot {
    /// True when it records no usage and no limit.
    pub fn is_empty(&self) -> bool {
        self.blocks == 0
            && self.inodes == 0
            && self.rtblocks == 0
            && self.blocks_soft == 0
            && self.blocks_hard == 0
            && self.inodes_soft == 0
            && self.inodes_hard == 0
            && self.rtblocks_soft == 0
            && self.rtblocks_hard == 0
    }
}

/// The quota inode of `kind` the superblock names, when the filesystem
/// accounts that kind and has made its file (not for metadata-directory
/// filesystems: see [`quota_file`]).
fn quota_inode(geo: &Geometry, kind: Kind) -> Result<Option<u64>> {
    if geo.qflags & kind.acct() == 0 {
        return Ok(None);
    }
    let [u, g, p] = geo.quota_inos;
    let ino = match kind {
        Kind::User => u,
        Kind::Group => g,
        Kind::Project if geo.v5 => p,
        // v4: the one other file serves projects when it accounts them.
        Kind::Project => g,
    };
    Ok((ino != 0 && ino != u64::MAX).then_some(ino))
}

/// The quota file of `kind`, found in the superblock or, on a
/// metadata-directory filesystem, in `/quota` of that tree (None: the
/// kind is not accounted or has no file yet).
pub fn quota_file(fs: &Fs, kind: Kind) -> Result<Option<u64>> {
    let geo = fs.geometry();
    if !geo.features.metadir {
        return quota_inode(geo, kind);
    }
    if geo.qflags & kind.acct() == 0 {
        return Ok(None);
    }
    let mdir = fs.inode(geo.metadir_ino)?;
    let Some(qdir) = crate::dir::lookup(fs, &mdir, b"quota")? else {
        return Ok(None);
    };
    let qdir = fs.inode(qdir)?;
    crate::dir::lookup(fs, &qdir, kind.name().as_bytes()).map(|o| o.map(|i| i.0))
}

/// Why the 136-byte record `rec`, in the slot of `id` in a quota file of
/// kind `dqtype` (`XFS_DQTYPE_*`), is not a valid dquot there, None when it
/// is: the v5 CRC, the kernel's dquot verifier, the v5 UUID, and the kind
/// (v4's root record of the shared group/project file may be either).
pub(crate) fn record_problem(geo: &Geometry, rec: &[u8], id: u32, dqtype: u8) -> Option<String> {
    let q = Dqblk::ref_from_prefix(rec).ok()?.0;
    let d = &q.dd_diskdq;
    if geo.v5 && !xfs_format::crc::verify(rec, XFS_DQUOT_CRC_OFF) {
        return Some("bad CRC".into());
    }
    if let Some(why) = dquot_problem(d, Some(id), geo.features.bigtime) {
        return Some(why);
    }
    let uuid = if geo.features.meta_uuid {
        geo.meta_uuid
    } else {
        geo.uuid
    };
    if geo.v5 && q.dd_uuid.0 != uuid {
        return Some("the UUID of another filesystem".into());
    }
    let t = d.d_type;
    if t & XFS_DQTYPE_REC_MASK != dqtype && (geo.v5 || dqtype == XFS_DQTYPE_USER || id != 0) {
        return Some(format!("type {t:#04x} in a file of type {dqtype:#04x}"));
    }
    None
}

/// A record's grace timer in seconds since the epoch.
fn timer(raw: u32, bigtime: bool) -> i64 {
    // Bigtime dquot timers count units of four seconds.
    if bigtime {
        i64::from(raw) << 2
    } else {
        i64::from(raw)
    }
}

/// Reads the block of records at byte `off`, as the writes of this open
/// left it (changed records wait in the pending set until written back).
fn read_block(fs: &Fs, off: u64, buf: &mut [u8]) -> Result<()> {
    if let Some(b) = fs.write_state().ok().and_then(|w| w.get(off, buf.len())) {
        buf.copy_from_slice(&b);
        return Ok(());
    }
    fs.read_bytes(off, buf)
}

fn decode(kind: Kind, id: u32, d: &xfs_format::quota::DiskDquot) -> Dquot {
    let big = d.d_type & XFS_DQTYPE_BIGTIME != 0;
    Dquot {
        kind,
        id,
        blocks: d.d_bcount.get(),
        inodes: d.d_icount.get(),
        rtblocks: d.d_rtbcount.get(),
        blocks_soft: d.d_blk_softlimit.get(),
        blocks_hard: d.d_blk_hardlimit.get(),
        inodes_soft: d.d_ino_softlimit.get(),
        inodes_hard: d.d_ino_hardlimit.get(),
        rtblocks_soft: d.d_rtb_softlimit.get(),
        rtblocks_hard: d.d_rtb_hardlimit.get(),
        blocks_timer: timer(d.d_btimer.get(), big),
        inodes_timer: timer(d.d_itimer.get(), big),
        rtblocks_timer: timer(d.d_rtbtimer.get(), big),
        blocks_warns: d.d_bwarns.get(),
        inodes_warns: d.d_iwarns.get(),
        rtblocks_warns: d.d_rtbwarns.get(),
    }
}

/// The record of `id` in `kind`'s quota file (None: no file, or no
/// record block for it). A record that is not a valid dquot of its slot
/// is an error naming the file and block.
pub fn read_one(fs: &Fs, kind: Kind, id: u32) -> Result<Option<Dquot>> {
    let geo = fs.geometry();
    let Some(qino) = quota_file(fs, kind)? else {
        return Ok(None);
    };
    let inode = fs.inode(Ino(qino))?;
    let per_block = (geo.block_size as usize / XFS_DQBLK_SIZE) as u64;
    let fb = u64::from(id) / per_block;
    let ext = crate::inode::extents(fs, &inode, Fork::Data)?;
    let Some(e) = ext
        .iter()
        .find(|e| !e.unwritten && e.offset <= fb && e.offset + e.len > fb)
    else {
        return Ok(None);
    };
    let mut buf = vec![0u8; geo.block_size as usize];
    read_block(
        fs,
        geo.fsb_to_daddr(FsBlock(e.start.0 + (fb - e.offset)))
            .bytes(),
        &mut buf,
    )?;
    let at = (u64::from(id) % per_block) as usize * XFS_DQBLK_SIZE;
    let rec = &buf[at..at + XFS_DQBLK_SIZE];
    if let Some(why) = record_problem(geo, rec, id, kind.dqtype()) {
        return Err(Error::corrupt(
            "dquot",
            Location::InodeBlock {
                ino: qino,
                fork: "data",
                offset: fb,
            },
            format!("{} quota id {id}: {why}", kind.name()),
        ));
    }
    let q = Dqblk::ref_from_prefix(rec).expect("136 bytes").0;
    Ok(Some(decode(kind, id, &q.dd_diskdq)))
}

/// What statfs of inode `ino` is limited to by its project's quota, as
/// kernel XFS limits it: for a directory (or file) that passes its project
/// on (`PROJINHERIT`), with project quotas accounted and enforced, the
/// project's block and inode limits (the soft one, else the hard one) and
/// its usage. None: no such limit.
pub fn project_statfs(fs: &Fs, ino: Ino) -> Result<Option<ProjectLimits>> {
    let geo = fs.geometry();
    if geo.qflags & Kind::Project.acct() == 0 || geo.qflags & Kind::Project.enfd(geo.v5) == 0 {
        return Ok(None);
    }
    let ip = fs.inode(ino)?;
    if ip.flags & xfs_format::inode::XFS_DIFLAG_PROJINHERIT == 0 {
        return Ok(None);
    }
    let Some(q) = read_one(fs, Kind::Project, ip.projid)? else {
        return Ok(None);
    };
    let or = |soft: u64, hard: u64| if soft != 0 { soft } else { hard };
    let rt = ip.flags
        & (xfs_format::inode::XFS_DIFLAG_REALTIME | xfs_format::inode::XFS_DIFLAG_RTINHERIT)
        != 0
        && geo.rt_extents != 0;
    Ok(Some(if rt {
        ProjectLimits {
            blocks: or(q.rtblocks_soft, q.rtblocks_hard),
            blocks_used: q.rtblocks,
            inodes: or(q.inodes_soft, q.inodes_hard),
            inodes_used: q.inodes,
        }
    } else {
        ProjectLimits {
            blocks: or(q.blocks_soft, q.blocks_hard),
            blocks_used: q.blocks,
            inodes: or(q.inodes_soft, q.inodes_hard),
            inodes_used: q.inodes,
        }
    }))
}

/// A project's limits as statfs applies them (0: no limit) and its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectLimits {
    pub blocks: u64,
    pub blocks_used: u64,
    pub inodes: u64,
    pub inodes_used: u64,
}

/// Every record of `kind`'s quota file, in id order (none when the kind
/// is not accounted or has no file yet). A record that is not a valid
/// dquot of its slot fails the read, naming the file and block.
pub fn read(fs: &Fs, kind: Kind) -> Result<Vec<Dquot>> {
    let geo = fs.geometry();
    let Some(qino) = quota_file(fs, kind)? else {
        return Ok(Vec::new());
    };
    let inode = fs.inode(Ino(qino))?;
    let ext = crate::inode::extents(fs, &inode, Fork::Data)?;
    let bs = geo.block_size as usize;
    let per_block = (bs / XFS_DQBLK_SIZE) as u64;
    let mut out = Vec::new();
    let mut buf = vec![0u8; bs];
    for e in &ext {
        if e.unwritten {
            continue;
        }
        for b in 0..e.len {
            let off = e.offset + b;
            read_block(
                fs,
                geo.fsb_to_daddr(FsBlock(e.start.0 + b)).bytes(),
                &mut buf,
            )?;
            for j in 0..per_block {
                let id = off * per_block + j;
                if id > u64::from(u32::MAX) {
                    break;
                }
                let rec = &buf[j as usize * XFS_DQBLK_SIZE..(j as usize + 1) * XFS_DQBLK_SIZE];
                let q = Dqblk::ref_from_prefix(rec).expect("136 bytes").0;
                let d = &q.dd_diskdq;
                let bad = |why: String| {
                    Error::corrupt(
                        "dquot",
                        Location::InodeBlock {
                            ino: qino,
                            fork: "data",
                            offset: off,
                        },
                        format!("{} quota id {id}: {why}", kind.name()),
                    )
                };
                if let Some(why) = record_problem(geo, rec, id as u32, kind.dqtype()) {
                    return Err(bad(why));
                }
                out.push(decode(kind, id as u32, d));
            }
        }
    }
    Ok(out)
}

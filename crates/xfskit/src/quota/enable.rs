//! Quotas turned on offline, as the kernel's first quota mount turns them
//! on: the quota files made (or their records reset), every inode's usage
//! counted into the records of its user, group and project, and the
//! superblock's accounting, enforcement and "checked" flags set, so that
//! the next mount with `-o uquota,gquota,pquota` runs no quotacheck and
//! `xfs_repair -n` compares the counts.
//!
//! A new quota file is an inode of no directory (a regular file owned by
//! root, its number in the superblock), its records one block per 30 ids
//! (4 KiB blocks), made only for the ids that use something and for id
//! 0; with a metadata directory, `/quota/user`, `group` and `project` of
//! that tree. Each step is a journaled transaction: a crash leaves the
//! flags without "checked", and the kernel then recounts.

use super::Kind;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Daddr, FsBlock, Ino};
use crate::inode::Fork;
use std::collections::BTreeMap;
use std::sync::Mutex;
use xfs_format::quota::{Dqblk, XFS_DQBLK_SIZE, XFS_DQTYPE_BIGTIME, XFS_DQUOT_CRC_OFF};
use xfs_format::sb::Dsb;
use xfs_format::types::S_IFREG;
use zerocopy::FromBytes;

/// Which quotas to turn on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnableOptions {
    pub user: bool,
    pub group: bool,
    pub project: bool,
    /// Limits enforced (else accounting only: `uqnoenforce`...).
    pub enforce: bool,
}

/// What [`enable`] did, per kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnabledKind {
    pub kind: Kind,
    /// The quota file's inode.
    pub ino: u64,
    /// True when the file was made now (else its records were recounted).
    pub made: bool,
    /// Ids with a record that counts something.
    pub ids: usize,
    /// Records that were not valid dquots of their slot, made anew
    /// ([`recount`] only; their limits are lost).
    pub reset: usize,
}

/// Per (kind index, id): blocks, inodes, realtime blocks.
type Usage = BTreeMap<(usize, u32), [u64; 3]>;

/// Counts every inode's usage (the quota files themselves excepted) into
/// the kinds `want`.
fn count(fs: &Fs, want: [bool; 3], quota_inos: &[u64]) -> Result<Usage> {
    let usage = Mutex::new(Usage::new());
    let rt_files = Mutex::new(Vec::new());
    let add = |u: &mut Usage, ids: [u32; 3], v: [u64; 3]| {
        for i in 0..3 {
            if want[i] {
                let e = u.entry((i, ids[i])).or_insert([0; 3]);
                for r in 0..3 {
                    e[r] += v[r];
                }
            }
        }
    };
    crate::scan::bulkstat(fs, &crate::scan::BulkstatOptions::default(), |batch| {
        let mut u = usage.lock().unwrap_or_else(|p| p.into_inner());
        for b in batch {
            if quota_inos.contains(&b.ino) {
                continue;
            }
            let ids = [b.uid, b.gid, b.projectid];
            if b.xflags & crate::scan::xflag::REALTIME != 0 && b.blocks != 0 {
                rt_files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(b.ino);
                add(&mut u, ids, [0, 1, 0]);
            } else {
                add(&mut u, ids, [b.blocks, 1, 0]);
            }
        }
    })?;
    let mut u = usage.into_inner().unwrap_or_else(|p| p.into_inner());
    let geo = fs.geometry();
    // A realtime file's data blocks are realtime blocks; its other blocks
    // (bmbt, attributes) are not.
    let rt_files: Vec<u64> = rt_files.into_inner().unwrap_or_else(|p| p.into_inner());
    for ino in rt_files {
        let ip = fs.inode(Ino(ino))?;
        let rt: u64 = crate::inode::extents(fs, &ip, Fork::Data)?
            .iter()
            .map(|e| e.len)
            .sum();
        add(
            &mut u,
            [ip.uid, ip.gid, ip.projid],
            [ip.nblocks.saturating_sub(rt), 0, rt],
        );
    }
    // The realtime bitmap and summary inodes are no one's files to
    // bulkstat, but quotacheck counts them (root's).
    if !geo.features.metadir {
        for ino in [geo.rbm_ino, geo.rsum_ino] {
            if ino.0 != 0 && ino.0 != u64::MAX && !quota_inos.contains(&ino.0) {
                let ip = fs.inode(ino)?;
                add(&mut u, [ip.uid, ip.gid, ip.projid], [ip.nblocks, 1, 0]);
            }
        }
    }
    Ok(u)
}

/// A new inode of type `mode` (no permissions) owned by root, placed
/// near `parent`, its times now, locked in `tp`.
fn new_root_inode(
    tp: &mut crate::trans::Trans<'_>,
    parent: Ino,
    mode: u16,
) -> Result<crate::inode::Inode> {
    let fs = tp.fs();
    let ws = fs.write_state()?;
    let ino = crate::ialloc::alloc_inode(tp, parent, mode)?;
    tp.lock_inode(ino);
    let mut ip = crate::inode::Inode::new(fs.geometry(), ino, mode, ws.next_gen())?;
    let (sec, nsec) = ws.now();
    let t = crate::inode::Timestamp { sec, nsec };
    ip.atime = t;
    ip.mtime = t;
    ip.ctime = t;
    ip.crtime = t;
    Ok(ip)
}

/// The primary superblock joined to `tp` as a logged SB buffer.
fn join_sb(tp: &mut crate::trans::Trans<'_>) -> Result<crate::trans::BufId> {
    let kind = crate::log::buftype::BufKind {
        blft: crate::log::buftype::blft::SB,
        lsn_off: Some(xfs_format::sb::XFS_SB_LSN_OFF),
    };
    let sect = tp.geo().sect_size;
    tp.read_raw_buf(Daddr(0), sect, kind, Some(xfs_format::sb::XFS_SB_CRC_OFF))
}

/// The superblock fields of a joined superblock sector.
fn sb_mut(buf: &mut [u8]) -> Result<&mut Dsb> {
    Dsb::mut_from_prefix(buf)
        .map(|(sb, _)| sb)
        .map_err(|_| Error::Invalid("superblock sector too short".into()))
}

/// The quota file of `kind` in the metadata directory, if made.
fn metadir_file(fs: &Fs, kind: Kind) -> Result<Option<u64>> {
    let geo = fs.geometry();
    let mdir = fs.inode(geo.metadir_ino)?;
    let Some(q) = crate::dir::lookup(fs, &mdir, b"quota")? else {
        return Ok(None);
    };
    let q = fs.inode(q)?;
    Ok(crate::dir::lookup(fs, &q, kind.name().as_bytes())?.map(|i| i.0))
}

/// A new inode of the metadata tree named `name` in `dp`: a directory or
/// a regular file of `metatype`, owned by root with no permissions, the
/// flags the kernel gives metadata inodes, and its parent pointer.
fn new_metadir_inode(
    tp: &mut crate::trans::Trans<'_>,
    dp: &mut crate::inode::Inode,
    name: &[u8],
    metatype: u16,
) -> Result<crate::inode::Inode> {
    use xfs_format::inode as di;
    let fs = tp.fs();
    let geo = fs.geometry();
    let dir = metatype == di::XFS_METAFILE_DIR;
    let mode = if dir { 0o040000 } else { S_IFREG };
    let mut ip = new_root_inode(tp, dp.ino, mode)?;
    ip.flags = if dir {
        di::XFS_METADIR_DIFLAGS
    } else {
        di::XFS_METAFILE_DIFLAGS
    };
    ip.flags2 |= di::XFS_DIFLAG2_METADATA;
    ip.metatype = metatype;
    crate::namespace::pptr::init_fork(geo, &mut ip);
    if dir {
        ip.nlink = 2;
        crate::dir::write::init(tp, &mut ip, dp.ino)?;
        dp.nlink += 1;
    } else {
        ip.nlink = 1;
    }
    let ftype = if dir { 2 } else { 1 };
    crate::dir::write::add(tp, dp, name, ip.ino, ftype)?;
    crate::namespace::pptr::add(tp, &mut ip, dp, name)?;
    Ok(ip)
}

/// Makes `/quota/<kind>` in the metadata directory (and `/quota` when
/// missing), as the kernel's first quota mount makes it.
fn make_metadir_file(fs: &Fs, kind: Kind) -> Result<u64> {
    use xfs_format::inode as di;
    let geo = fs.geometry();
    let mut tp = fs.trans()?;
    tp.lock_inode(geo.metadir_ino);
    let mut mdir = tp.read_inode(geo.metadir_ino)?;
    let mut qdir = match crate::dir::write::lookup(&mut tp, &mdir, b"quota")? {
        Some((q, _)) => {
            tp.lock_inode(q);
            tp.read_inode(q)?
        }
        None => {
            let q = new_metadir_inode(&mut tp, &mut mdir, b"quota", di::XFS_METAFILE_DIR)?;
            tp.log_inode(&mdir)?;
            q
        }
    };
    let metatype = match kind {
        Kind::User => di::XFS_METAFILE_USRQUOTA,
        Kind::Group => di::XFS_METAFILE_GRPQUOTA,
        Kind::Project => di::XFS_METAFILE_PRJQUOTA,
    };
    let f = new_metadir_inode(&mut tp, &mut qdir, kind.name().as_bytes(), metatype)?;
    tp.log_inode(&qdir)?;
    tp.log_inode(&f)?;
    let ino = f.ino.0;
    tp.commit()?;
    Ok(ino)
}

/// Turns on the quotas `opts` names on `fs` (opened read-write): see the
/// module documentation. With a metadata directory the files are
/// `/quota/user`, `group` and `project` of that tree. Refused on v4 for
/// groups and projects together (one file serves either).
///
/// `fs` is consumed: it is synced, and an open that goes on writing must
/// be a new one (this one's writes would not keep the new counts).
pub fn enable(fs: Fs, opts: &EnableOptions) -> Result<Vec<EnabledKind>> {
    turn_on(&fs, opts, false)
}

/// [`enable`]'s work; `recounting`: the kinds were on, their "checked"
/// bits cleared on disk since `fs` was opened (its geometry still has
/// them).
fn turn_on(fs: &Fs, opts: &EnableOptions, recounting: bool) -> Result<Vec<EnabledKind>> {
    let geo = fs.geometry();
    let ws = fs.write_state()?;
    let want = [opts.user, opts.group, opts.project];
    if !want.iter().any(|&w| w) {
        return Err(Error::Invalid("no quota kind to turn on".into()));
    }
    if !geo.v5 && opts.group && opts.project {
        return Err(Error::Invalid(
            "a v4 filesystem keeps group or project quotas, not both".into(),
        ));
    }
    // Accounting flags without "checked" (mkfs's quota options, or a
    // kernel that never mounted with them) are what this completes.
    if !recounting && (0..3).any(|i| want[i] && geo.qflags & Kind::ALL[i].chkd(geo.v5) != 0) {
        return Err(Error::Invalid(
            "quotas are on already (the superblock marks their counts checked)".into(),
        ));
    }
    // The files: those the superblock names, else new ones.
    let valid = |i: u64| i != 0 && i != u64::MAX;
    let mut files = [None; 3];
    let mut made = [false; 3];
    for (i, k) in Kind::ALL.into_iter().enumerate() {
        if !want[i] {
            continue;
        }
        if geo.features.metadir {
            // /quota/user, group, project of the metadata directory.
            let ino = match metadir_file(fs, k)? {
                Some(ino) => ino,
                None => {
                    made[i] = true;
                    make_metadir_file(fs, k)?
                }
            };
            files[i] = Some(ino);
            continue;
        }
        let [u, g, p] = geo.quota_inos;
        let have = match k {
            Kind::User => u,
            Kind::Group => g,
            Kind::Project if geo.v5 => p,
            Kind::Project => g,
        };
        if valid(have) && fs.inode(Ino(have)).is_ok_and(|ip| ip.mode != 0) {
            files[i] = Some(have);
            continue;
        }
        let mut tp = fs.trans()?;
        let mut ip = new_root_inode(&mut tp, geo.root_ino, S_IFREG)?;
        let ino = ip.ino;
        ip.nlink = 1;
        tp.log_inode(&ip)?;
        let b = join_sb(&mut tp)?;
        let sb = sb_mut(tp.buf_mut(b))?;
        match (k, geo.v5) {
            (Kind::User, _) => sb.sb_uquotino.set(ino.0),
            (Kind::Project, true) => sb.sb_pquotino.set(ino.0),
            _ => sb.sb_gquotino.set(ino.0),
        }
        sb.sb_versionnum
            .set(sb.sb_versionnum.get() | xfs_format::sb::XFS_SB_VERSION_QUOTABIT);
        tp.commit()?;
        files[i] = Some(ino.0);
        made[i] = true;
    }
    let quota_inos: Vec<u64> = files.iter().flatten().copied().collect();
    // The scan reads the inodes as the device has them.
    fs.writeback()?;
    let usage = count(fs, want, &quota_inos)?;
    let per_block = (geo.block_size as usize / XFS_DQBLK_SIZE) as u64;
    let now = ws.now().0;
    let mut out = Vec::new();
    for (i, k) in Kind::ALL.into_iter().enumerate() {
        let Some(qino) = files[i] else {
            continue;
        };
        // Every block the file has, and every block an id in use needs.
        let mut blocks: BTreeMap<u64, ()> = BTreeMap::new();
        blocks.insert(0, ());
        for &(ki, id) in usage.keys() {
            if ki == i {
                blocks.insert(u64::from(id) / per_block, ());
            }
        }
        let qip = fs.inode(Ino(qino))?;
        for e in crate::inode::extents(fs, &qip, Fork::Data)? {
            for b in e.offset..e.offset + e.len {
                blocks.insert(b, ());
            }
        }
        let mut grace = [super::DEFAULT_GRACE; 3];
        let mut ids = 0;
        let mut reset = 0;
        for &fb in blocks.keys() {
            if fb * per_block > u64::from(u32::MAX) {
                break;
            }
            let mut tp = fs.trans()?;
            tp.lock_inode(Ino(qino));
            let mut qip = tp.read_inode(Ino(qino))?;
            let b = match crate::bmap::lookup(&mut tp, &qip, Fork::Data, fb)? {
                Some(e) if !e.unwritten => {
                    let d = geo.fsb_to_daddr(FsBlock(e.start.0 + (fb - e.offset)));
                    tp.read_dquot_buf(d, geo.block_size)?
                }
                _ => {
                    let b = super::acct::add_block(&mut tp, &mut qip, k, fb)?;
                    tp.log_inode(&qip)?;
                    b
                }
            };
            let buf = tp.buf_mut(b);
            for j in 0..per_block {
                let id = fb * per_block + j;
                let slot = &mut buf[j as usize * XFS_DQBLK_SIZE..(j as usize + 1) * XFS_DQBLK_SIZE];
                if super::record_problem(geo, slot, id as u32, k.dqtype()).is_some() && recounting {
                    // Not a record of its slot: made anew, as xfs_repair
                    // makes it (its limits are lost).
                    super::acct::init_record(geo, slot, id as u32, k);
                    reset += 1;
                }
                if let Some(why) = super::record_problem(geo, slot, id as u32, k.dqtype()) {
                    return Err(Error::corrupt(
                        "dquot",
                        crate::error::Location::InodeBlock {
                            ino: qino,
                            fork: "data",
                            offset: fb,
                        },
                        format!("{} quota id {id}: {why}", k.name()),
                    ));
                }
                let used = usage.get(&(i, id as u32)).copied().unwrap_or([0; 3]);
                if used != [0; 3] {
                    ids += 1;
                }
                let q = Dqblk::mut_from_prefix(&mut slot[..]).expect("136 bytes").0;
                let d = &mut q.dd_diskdq;
                d.d_bcount.set(used[0]);
                d.d_icount.set(used[1]);
                d.d_rtbcount.set(used[2]);
                if id == 0 {
                    // Id 0's timers are the kind's grace periods.
                    grace = super::grace_periods(d);
                } else {
                    let big = d.d_type & XFS_DQTYPE_BIGTIME != 0;
                    let soft = [
                        d.d_blk_softlimit.get(),
                        d.d_ino_softlimit.get(),
                        d.d_rtb_softlimit.get(),
                    ];
                    let mut t = [0u32; 3];
                    for r in 0..3 {
                        if soft[r] != 0 && used[r] > soft[r] {
                            t[r] = super::timer_to_disk(now + grace[r], big);
                        }
                    }
                    d.d_btimer.set(t[0]);
                    d.d_itimer.set(t[1]);
                    d.d_rtbtimer.set(t[2]);
                    d.d_bwarns.set(0);
                    d.d_iwarns.set(0);
                    d.d_rtbwarns.set(0);
                }
                if geo.v5 {
                    xfs_format::crc::stamp(slot, XFS_DQUOT_CRC_OFF);
                }
            }
            tp.commit()?;
        }
        out.push(EnabledKind {
            kind: k,
            ino: qino,
            made: made[i],
            ids,
            reset,
        });
    }
    // Last, the flags: accounting, enforcement and "checked" together.
    let mut tp = fs.trans()?;
    let b = join_sb(&mut tp)?;
    let sb = sb_mut(tp.buf_mut(b))?;
    let mut q = sb.sb_qflags.get();
    for (k, _) in Kind::ALL.into_iter().zip(want).filter(|&(_, w)| w) {
        q |= k.acct() | k.chkd(geo.v5);
        if opts.enforce {
            q |= k.enfd(geo.v5);
        }
    }
    sb.sb_qflags.set(q);
    sb.sb_versionnum
        .set(sb.sb_versionnum.get() | xfs_format::sb::XFS_SB_VERSION_QUOTABIT);
    tp.commit()?;
    fs.sync()?;
    Ok(out)
}

/// Counts `kind` again into its quota file (a repair of counts that do
/// not match the files): its "checked" bit cleared in one transaction,
/// then every record recounted as [`enable`] counts them, a record that
/// is not a valid dquot of its slot made anew (as xfs_repair makes it),
/// and the bit set again with the kind's accounting and enforcement flags
/// as they were. `fs` is consumed and synced, as by [`enable`].
pub fn recount(fs: Fs, kind: Kind) -> Result<EnabledKind> {
    let geo = fs.geometry().clone();
    {
        let mut tp = fs.trans()?;
        let b = join_sb(&mut tp)?;
        let sb = sb_mut(tp.buf_mut(b))?;
        sb.sb_qflags.set(sb.sb_qflags.get() & !kind.chkd(geo.v5));
        tp.commit()?;
    }
    fs.sync()?;
    let opts = EnableOptions {
        user: kind == Kind::User,
        group: kind == Kind::Group,
        project: kind == Kind::Project,
        // The enforcement bit is left as it is.
        enforce: false,
    };
    let mut done = turn_on(&fs, &opts, true)?;
    Ok(done.remove(0))
}

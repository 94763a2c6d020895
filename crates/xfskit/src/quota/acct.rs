//! Quota accounting kept exact by every transaction.
//!
//! A transaction notes the usage of each inode it logs as it was before
//! the transaction (the first time it logs it) and as it commits it; the
//! difference moves blocks and inodes between the user, group and project
//! dquots of the owners. Commit changes those records in the quota files
//! and logs each as a dquot item, as the kernel does, so the counts stay
//! right through a crash and the superblock's "checked" bits stay set: the
//! kernel's next quota mount runs no quotacheck, and `xfs_repair -n`
//! compares the counts.
//!
//! A realtime file's realtime share is read from its mapping the first
//! time a transaction logs it, and moved by what the realtime allocator
//! notes ([`Trans::note_rt_blocks`]). Where a count cannot be kept exact
//! (an id with no record block in its quota file, which [`prepare`] adds
//! before creates and owner changes; a damaged record; a mapping that
//! cannot be read) that kind's "checked" bit is cleared in the same
//! transaction instead, as xfs_repair leaves it, so that the kernel
//! recounts: never stale counts marked good.
//!
//! Limits are enforced when the read-write mount asks for it
//! ([`Acct::enforce`]): an increase past a hard limit, or past a soft
//! limit whose grace period has run out, fails with `QuotaExceeded`
//! (EDQUOT), never for id 0, as the kernel enforces them. Grace timers
//! start when a count passes its soft limit and stop when it falls back.

use super::Kind;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Daddr, Geometry, Ino};
use crate::inode::{Fork, Inode};
use crate::trans::Trans;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use xfs_format::quota::{Dqblk, XFS_DQBLK_SIZE, XFS_DQTYPE_BIGTIME, XFS_DQUOT_CRC_OFF};
use zerocopy::FromBytes;

/// What an inode counts for in the quotas: whether it is in use, its
/// user, group and project ids, and its blocks (`di_nblocks`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct Use {
    pub alive: bool,
    pub ids: [u32; 3],
    pub blocks: u64,
    /// A realtime file: its data blocks are realtime blocks.
    pub rt: bool,
    /// Of `blocks`, the realtime ones (known for the state before a
    /// transaction: see [`Use::of_inode`]).
    pub rtblocks: u64,
}

impl Use {
    /// A free inode, or one the quotas never count.
    pub const NONE: Use = Use {
        alive: false,
        ids: [0; 3],
        blocks: 0,
        rt: false,
        rtblocks: 0,
    };

    /// The use of decoded inode `ip`, its realtime share left unknown (0).
    pub(crate) fn of_inode_core(acct: &Acct, ip: &Inode) -> Use {
        if ip.mode == 0 || acct.uncounted(ip.ino.0, ip.flags2) {
            return Use::NONE;
        }
        Use {
            alive: true,
            ids: [ip.uid, ip.gid, ip.projid],
            blocks: ip.nblocks,
            rt: ip.flags & xfs_format::inode::XFS_DIFLAG_REALTIME != 0,
            rtblocks: 0,
        }
    }

    /// The use of decoded inode `ip` of `fs`; a realtime file's realtime
    /// blocks are those its data fork maps.
    pub(crate) fn of_inode(fs: &Fs, acct: &Acct, ip: &Inode) -> Result<Use> {
        if ip.mode == 0 || acct.uncounted(ip.ino.0, ip.flags2) {
            return Ok(Use::NONE);
        }
        let rt = ip.flags & xfs_format::inode::XFS_DIFLAG_REALTIME != 0;
        let rtblocks = if rt && ip.nblocks != 0 {
            crate::inode::extents(fs, ip, Fork::Data)?
                .iter()
                .map(|e| e.len)
                .sum()
        } else {
            0
        };
        Ok(Use {
            rtblocks,
            ..Use::of_inode_core(acct, ip)
        })
    }

    /// The use of the inode core at the start of `raw`.
    pub(crate) fn of_raw(acct: &Acct, ino: u64, raw: &[u8]) -> Use {
        let Ok((d, _)) = xfs_format::inode::Dinode::ref_from_prefix(raw) else {
            return Use::NONE;
        };
        let flags2 = if d.di_version >= 3 {
            d.di_flags2.get()
        } else {
            0
        };
        if d.di_mode.get() == 0 || acct.uncounted(ino, flags2) {
            return Use::NONE;
        }
        let projid = if d.di_version >= 2 {
            u32::from(d.di_projid_lo.get()) | u32::from(d.di_projid_hi.get()) << 16
        } else {
            0
        };
        Use {
            alive: true,
            ids: [d.di_uid.get(), d.di_gid.get(), projid],
            blocks: d.di_nblocks.get(),
            rt: d.di_flags.get() & xfs_format::inode::XFS_DIFLAG_REALTIME != 0,
            rtblocks: 0,
        }
    }
}

/// The quota state of a read-write open.
pub(crate) struct Acct {
    /// The quota file of each kind whose counts are kept exact.
    files: [Option<u64>; 3],
    /// Each kind's "checked" bit in `sb_qflags` (0: not accounted).
    chkd: [u16; 3],
    /// Each kind's limits enforced (`sb_qflags`).
    enforced: [bool; 3],
    /// Quota files (never counted themselves).
    quota_inos: [u64; 3],
    /// Set by the read-write mount: limits refuse changes past them.
    pub enforce: AtomicBool,
    /// Held from reading dquot records to publishing them.
    pub lock: Mutex<()>,
    /// Record blocks known to be in the quota files: (kind, file block).
    present: Mutex<std::collections::HashSet<(usize, u64)>>,
    /// Held while record blocks are added.
    adding: Mutex<()>,
    /// Where record blocks are: (kind, file block) -> disk address (a
    /// quota file's blocks never move while it is open; new ones are
    /// added, none freed).
    located: Mutex<std::collections::HashMap<(usize, u64), Daddr>>,
}

fn index(k: Kind) -> usize {
    match k {
        Kind::User => 0,
        Kind::Group => 1,
        Kind::Project => 2,
    }
}

impl Acct {
    /// The quota state of `fs` as its superblock gives it: a kind whose
    /// counts are marked checked, and whose quota file is found, is kept
    /// exact.
    pub(crate) fn open(fs: &Fs) -> Acct {
        let geo = fs.geometry();
        let q = geo.qflags;
        let mut a = Acct {
            files: [None; 3],
            chkd: [0; 3],
            enforced: [false; 3],
            quota_inos: [u64::MAX; 3],
            enforce: AtomicBool::new(false),
            lock: Mutex::new(()),
            present: Mutex::new(Default::default()),
            adding: Mutex::new(()),
            located: Mutex::new(Default::default()),
        };
        for k in Kind::ALL {
            let i = index(k);
            if q & k.acct() == 0 {
                continue;
            }
            let (chkd, enfd) = (k.chkd(geo.v5), k.enfd(geo.v5));
            a.chkd[i] = chkd;
            a.enforced[i] = q & enfd != 0;
            if let Ok(Some(ino)) = super::quota_file(fs, k) {
                a.quota_inos[i] = ino;
                if q & chkd != 0 {
                    a.files[i] = Some(ino);
                }
            }
        }
        a
    }

    /// True when some kind's counts are kept exact.
    pub(crate) fn exact(&self) -> bool {
        self.files.iter().any(Option::is_some)
    }

    /// The "checked" bits no transaction keeps right: the kinds accounted
    /// without a quota file found (their first change clears them).
    pub(crate) fn never_exact(&self) -> u16 {
        (0..3)
            .filter(|&i| self.files[i].is_none())
            .fold(0, |b, i| b | self.chkd[i])
    }

    /// True for inodes the quotas never count: the quota files and the
    /// metadata directory's inodes.
    fn uncounted(&self, ino: u64, flags2: u64) -> bool {
        self.quota_inos.contains(&ino) || flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0
    }

    /// The "checked" bits of every kind kept exact.
    fn all_exact(&self) -> u16 {
        (0..3)
            .filter(|&i| self.files[i].is_some())
            .fold(0, |b, i| b | self.chkd[i])
    }
}

/// Changes of (blocks, inodes, realtime blocks) by (kind index, id).
pub(crate) type Deltas = BTreeMap<(usize, u32), [i64; 3]>;

/// The changes the inodes of a transaction make to the quotas, from
/// their use before (`before`) and at commit (`after`). `rt_moved` gives
/// the realtime blocks each realtime inode gained (or lost) in the
/// transaction. Also returns the "checked" bits of kinds whose change
/// cannot be told exactly.
pub(crate) fn deltas(
    acct: &Acct,
    before: &BTreeMap<u64, Use>,
    mut after: impl FnMut(u64) -> Use,
    rt_moved: &BTreeMap<u64, i64>,
) -> (Deltas, u16) {
    let mut d = Deltas::new();
    let mut inexact = 0u16;
    // Adds (blocks, inodes, realtime blocks) to the dquots of `ids`.
    let mut add = |ids: &[u32; 3], v: [i64; 3]| {
        for (i, &id) in ids.iter().enumerate() {
            if acct.files[i].is_some() {
                let e = d.entry((i, id)).or_insert([0; 3]);
                for r in 0..3 {
                    e[r] += v[r];
                }
            }
        }
    };
    for (&ino, b) in before {
        let a = after(ino);
        if *b == a {
            continue;
        }
        let moved = rt_moved.get(&ino).copied().unwrap_or(0);
        let bb = b.blocks as i64;
        let ab = if a.alive { a.blocks as i64 } else { 0 };
        // The realtime share of each side: known before the transaction,
        // and moved by what the realtime allocator noted since.
        let b_rt = if b.rt { b.rtblocks as i64 } else { 0 };
        let a_rt = if a.rt { b_rt + moved } else { 0 };
        if !(0..=bb).contains(&b_rt) || !(0..=ab).contains(&a_rt) || (!a.rt && !b.rt && moved != 0)
        {
            inexact |= acct.all_exact();
            continue;
        }
        if b.alive {
            add(&b.ids, [-(bb - b_rt), -1, -b_rt]);
        }
        if a.alive {
            add(&a.ids, [ab - a_rt, 1, a_rt]);
        }
    }
    d.retain(|_, v| *v != [0; 3]);
    (d, inexact)
}

/// Makes sure the quota files have a record for each of the (user,
/// group, project) ids of `owners`, which a transaction is about to give
/// inodes or blocks to: a record block missing is allocated in a
/// transaction of its own, its records initialised and logged as a dquot
/// buffer, as the kernel adds one before the change that needs it.
pub(crate) fn prepare(fs: &Fs, owners: &[[u32; 3]]) -> Result<()> {
    let Ok(ws) = fs.write_state() else {
        return Ok(());
    };
    let Some(acct) = ws.quota.acct.as_ref().filter(|a| a.exact()) else {
        return Ok(());
    };
    let geo = fs.geometry();
    let per_block = (geo.block_size as usize / XFS_DQBLK_SIZE) as u64;
    let mut missing = Vec::new();
    {
        let present = acct.present.lock().unwrap_or_else(|p| p.into_inner());
        for ids in owners {
            for (i, &id) in ids.iter().enumerate() {
                let fb = u64::from(id) / per_block;
                if acct.files[i].is_some() && !present.contains(&(i, fb)) {
                    missing.push((i, fb));
                }
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort_unstable();
    missing.dedup();
    let _adding = acct.adding.lock().unwrap_or_else(|p| p.into_inner());
    for (i, fb) in missing {
        let qino = Ino(acct.files[i].expect("an exact kind"));
        let mut tp = fs.trans()?;
        tp.lock_inode(qino);
        let mut qip = tp.read_inode(qino)?;
        if crate::bmap::lookup(&mut tp, &qip, Fork::Data, fb)?.is_none() {
            add_block(&mut tp, &mut qip, Kind::ALL[i], fb)?;
            tp.log_inode(&qip)?;
            tp.commit()?;
        }
        acct.present
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((i, fb));
    }
    Ok(())
}

impl Fs {
    /// True when this read-write open keeps some quota counts exact.
    pub(crate) fn quota_exact(&self) -> bool {
        self.write_state()
            .ok()
            .and_then(|ws| ws.quota.acct.as_ref())
            .is_some_and(Acct::exact)
    }

    /// Readies the quota records a new inode of `uid:gid` in directory
    /// `parent` will count in (its group and project may come from the
    /// directory).
    pub(crate) fn quota_prepare_create(&self, parent: Ino, uid: u32, gid: u32) -> Result<()> {
        if !self.quota_exact() {
            return Ok(());
        }
        let p = self.inode(parent)?;
        prepare(self, &[[uid, gid, p.projid], [uid, p.gid, p.projid]])
    }

    /// Readies the quota records inode `ino` will count in with the new
    /// ids given (None: unchanged).
    pub(crate) fn quota_prepare_owner(
        &self,
        ino: Ino,
        uid: Option<u32>,
        gid: Option<u32>,
        projid: Option<u32>,
    ) -> Result<()> {
        if !self.quota_exact() || (uid.is_none() && gid.is_none() && projid.is_none()) {
            return Ok(());
        }
        let ip = self.inode(ino)?;
        prepare(
            self,
            &[[
                uid.unwrap_or(ip.uid),
                gid.unwrap_or(ip.gid),
                projid.unwrap_or(ip.projid),
            ]],
        )
    }

    /// True when quota limits may refuse changes on this open.
    pub fn quotas_enforced(&self) -> bool {
        self.write_state()
            .ok()
            .and_then(|ws| ws.quota.acct.as_ref())
            .is_some_and(|a| {
                a.enforce.load(std::sync::atomic::Ordering::Relaxed)
                    && a.enforced.iter().any(|&e| e)
            })
    }

    /// Turns enforcement of the quota limits on or off for this open
    /// (the read-write mount turns it on): a change past a hard limit, or
    /// past a soft limit whose grace period is over, fails with
    /// `QuotaExceeded`; id 0 is never refused.
    pub fn enforce_quotas(&self, on: bool) {
        if let Some(a) = self
            .write_state()
            .ok()
            .and_then(|ws| ws.quota.acct.as_ref())
        {
            a.enforce.store(on, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Allocates file block `fb` of quota file `qip` (of `kind`) and fills it
/// with the initialised records of its ids, as the kernel makes them: the
/// magic, version, id and kind (bigtime for ids past 0 on a bigtime
/// filesystem), on v5 the filesystem's UUID and each record's CRC.
pub(super) fn add_block(
    tp: &mut Trans<'_>,
    qip: &mut Inode,
    kind: Kind,
    fb: u64,
) -> Result<crate::trans::BufId> {
    let geo = tp.geo();
    let bs = geo.block_size;
    let per_block = (bs as usize / XFS_DQBLK_SIZE) as u64;
    let ext = crate::bmap::alloc_range(tp, qip, Fork::Data, fb, 1, false, None)?;
    let e = ext
        .iter()
        .find(|e| e.offset <= fb && e.end() > fb)
        .ok_or_else(|| Error::Invalid(format!("quota file block {fb} was not mapped")))?;
    let daddr = geo.fsb_to_daddr(crate::geometry::FsBlock(e.start.0 + (fb - e.offset)));
    let b = tp.get_buf(daddr, bs, None);
    let blft = match kind {
        Kind::User => crate::log::buftype::blft::UDQUOT,
        Kind::Project => crate::log::buftype::blft::PDQUOT,
        Kind::Group => crate::log::buftype::blft::GDQUOT,
    };
    tp.set_buf_kind(
        b,
        crate::log::buftype::BufKind {
            blft,
            lsn_off: None,
        },
    );
    let geo = geo.clone();
    let buf = tp.buf_mut(b);
    for j in 0..per_block {
        let id = fb * per_block + j;
        let slot = &mut buf[j as usize * XFS_DQBLK_SIZE..(j as usize + 1) * XFS_DQBLK_SIZE];
        init_record(&geo, slot, id as u32, kind);
    }
    Ok(b)
}

/// Writes into `slot` the empty record of `id` (no counts, no limits), as
/// the kernel makes a new one.
pub(crate) fn init_record(geo: &Geometry, slot: &mut [u8], id: u32, kind: Kind) {
    slot[..XFS_DQBLK_SIZE].fill(0);
    let q = Dqblk::mut_from_prefix(slot).expect("136 bytes").0;
    q.dd_diskdq.d_magic.set(xfs_format::quota::XFS_DQUOT_MAGIC);
    q.dd_diskdq.d_version = xfs_format::quota::XFS_DQUOT_VERSION;
    q.dd_diskdq.d_id.set(id);
    q.dd_diskdq.d_type = kind.dqtype();
    if id > 0 && geo.features.bigtime {
        q.dd_diskdq.d_type |= XFS_DQTYPE_BIGTIME;
    }
    if geo.v5 {
        q.dd_uuid.0 = if geo.features.meta_uuid {
            geo.meta_uuid
        } else {
            geo.uuid
        };
        xfs_format::crc::stamp(slot, XFS_DQUOT_CRC_OFF);
    }
}

/// Where the record of `id` lives: its block's disk address and the
/// record's byte offset in it (None: the quota file has no block there).
fn locate(
    tp: &mut Trans<'_>,
    acct: &Acct,
    k: usize,
    qino: u64,
    id: u32,
) -> Result<Option<(Daddr, usize)>> {
    let geo = tp.geo();
    let per_block = (geo.block_size as usize / XFS_DQBLK_SIZE) as u64;
    let fblock = u64::from(id) / per_block;
    let off = (u64::from(id) % per_block) as usize * XFS_DQBLK_SIZE;
    let cached = acct
        .located
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(k, fblock))
        .copied();
    if let Some(d) = cached {
        return Ok(Some((d, off)));
    }
    let ip = tp.read_inode(Ino(qino))?;
    let Some(e) = crate::bmap::lookup(tp, &ip, Fork::Data, fblock)? else {
        return Ok(None);
    };
    if e.unwritten {
        return Ok(None);
    }
    let fsb = crate::geometry::FsBlock(e.start.0 + (fblock - e.offset));
    let d = geo.fsb_to_daddr(fsb);
    acct.located
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((k, fblock), d);
    Ok(Some((d, off)))
}

/// Id 0's record of quota file `qino`: its timers are the kind's grace
/// periods (blocks, inodes, realtime blocks).
fn grace(tp: &mut Trans<'_>, acct: &Acct, k: usize, qino: u64) -> Result<[i64; 3]> {
    let bs = tp.geo().block_size;
    let Some((daddr, off)) = locate(tp, acct, k, qino, 0)? else {
        return Ok([super::DEFAULT_GRACE; 3]);
    };
    let id = tp.read_dquot_buf(daddr, bs)?;
    let rec = &tp.buf(id)[off..off + XFS_DQBLK_SIZE];
    let d = &Dqblk::ref_from_prefix(rec).expect("136 bytes").0.dd_diskdq;
    Ok(super::grace_periods(d))
}

/// Applies `d` to the quota files' records within transaction `tp`, at
/// time `now`, refusing increases past the limits when `enforce`. Returns
/// the "checked" bits of kinds whose records could not be changed.
pub(crate) fn apply(
    tp: &mut Trans<'_>,
    acct: &Acct,
    d: &Deltas,
    now: i64,
    enforce: bool,
) -> Result<u16> {
    let geo: &Geometry = tp.geo();
    let bs = geo.block_size;
    let big_fs = geo.features.bigtime;
    let mut inexact = 0u16;
    let mut graces: [Option<[i64; 3]>; 3] = [None; 3];
    for (&(k, id), delta) in d {
        let Some(qino) = acct.files[k] else {
            continue;
        };
        let dqtype = Kind::ALL[k].dqtype();
        let Some((daddr, off)) = locate(tp, acct, k, qino, id)? else {
            inexact |= acct.chkd[k];
            continue;
        };
        let b = tp.read_dquot_buf(daddr, bs)?;
        let rec = &tp.buf(b)[off..off + XFS_DQBLK_SIZE];
        if super::record_problem(geo, rec, id, dqtype).is_some() {
            inexact |= acct.chkd[k];
            continue;
        }
        let q = Dqblk::ref_from_prefix(rec).expect("136 bytes").0;
        let dq = &q.dd_diskdq;
        let counts = [dq.d_bcount.get(), dq.d_icount.get(), dq.d_rtbcount.get()];
        let soft = [
            dq.d_blk_softlimit.get(),
            dq.d_ino_softlimit.get(),
            dq.d_rtb_softlimit.get(),
        ];
        let hard = [
            dq.d_blk_hardlimit.get(),
            dq.d_ino_hardlimit.get(),
            dq.d_rtb_hardlimit.get(),
        ];
        let big = dq.d_type & XFS_DQTYPE_BIGTIME != 0;
        let timers = [
            super::timer(dq.d_btimer.get(), big),
            super::timer(dq.d_itimer.get(), big),
            super::timer(dq.d_rtbtimer.get(), big),
        ];
        let mut new = [0u64; 3];
        for r in 0..3 {
            new[r] = counts[r].saturating_add_signed(delta[r]);
            if counts[r].checked_add_signed(delta[r]).is_none() {
                // The record counted less than the files hold.
                inexact |= acct.chkd[k];
            }
        }
        if enforce && acct.enforced[k] && id != 0 {
            const WHAT: [&str; 3] = ["blocks", "inodes", "realtime blocks"];
            for r in 0..3 {
                if delta[r] <= 0 {
                    continue;
                }
                let over_hard = hard[r] != 0 && new[r] > hard[r];
                let grace_over =
                    soft[r] != 0 && new[r] > soft[r] && timers[r] != 0 && now > timers[r];
                if over_hard || grace_over {
                    return Err(Error::QuotaExceeded(format!(
                        "{} quota of id {id}: {} {} past its {} limit {}",
                        Kind::ALL[k].name(),
                        new[r],
                        WHAT[r],
                        if over_hard { "hard" } else { "soft" },
                        if over_hard { hard[r] } else { soft[r] },
                    )));
                }
            }
        }
        // Grace timers of ids other than 0 (whose timers hold the grace
        // periods): started past the soft limit, stopped under it.
        let mut t = timers;
        let upgrade = id != 0 && big_fs && !big;
        if id != 0 {
            for r in 0..3 {
                if soft[r] != 0 && new[r] > soft[r] {
                    if t[r] == 0 {
                        let g = match graces[k] {
                            Some(g) => g,
                            None => {
                                let g = grace(tp, acct, k, qino)?;
                                graces[k] = Some(g);
                                g
                            }
                        };
                        // Whole units of the encoding the record gets.
                        let at = now + g[r];
                        t[r] = if big || upgrade { (at + 3) & !3 } else { at };
                    }
                } else {
                    t[r] = 0;
                }
            }
        }
        let big_now = big || upgrade;
        let buf = tp.buf_mut(b);
        let slot = &mut buf[off..off + XFS_DQBLK_SIZE];
        let q = Dqblk::mut_from_prefix(slot).expect("136 bytes").0;
        let dq = &mut q.dd_diskdq;
        dq.d_bcount.set(new[0]);
        dq.d_icount.set(new[1]);
        dq.d_rtbcount.set(new[2]);
        if big_now {
            dq.d_type |= XFS_DQTYPE_BIGTIME;
        }
        dq.d_btimer.set(super::timer_to_disk(t[0], big_now));
        dq.d_itimer.set(super::timer_to_disk(t[1], big_now));
        dq.d_rtbtimer.set(super::timer_to_disk(t[2], big_now));
        if geo.v5 {
            xfs_format::crc::stamp(slot, XFS_DQUOT_CRC_OFF);
        }
    }
    Ok(inexact)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfs_format::sb::{XFS_GQUOTA_CHKD, XFS_PQUOTA_CHKD, XFS_UQUOTA_CHKD};

    fn acct() -> Acct {
        Acct {
            files: [Some(100), Some(101), Some(102)],
            chkd: [XFS_UQUOTA_CHKD, XFS_GQUOTA_CHKD, XFS_PQUOTA_CHKD],
            enforced: [true; 3],
            quota_inos: [100, 101, 102],
            enforce: AtomicBool::new(false),
            lock: Mutex::new(()),
            present: Mutex::new(Default::default()),
            adding: Mutex::new(()),
            located: Mutex::new(Default::default()),
        }
    }

    fn file(ids: [u32; 3], blocks: u64, rt: bool) -> Use {
        Use {
            alive: true,
            ids,
            blocks,
            rt,
            rtblocks: 0,
        }
    }

    fn rt_file(ids: [u32; 3], blocks: u64, rtblocks: u64) -> Use {
        Use {
            rtblocks,
            ..file(ids, blocks, true)
        }
    }

    #[test]
    fn changes_move_usage_between_owners() {
        let a = acct();
        let mut before = BTreeMap::new();
        before.insert(1, Use::NONE); // created
        before.insert(2, file([5, 6, 7], 10, false)); // given to 8:9
        before.insert(3, file([5, 6, 7], 4, false)); // freed
        before.insert(4, file([5, 6, 7], 3, false)); // grown
        let after = |ino| match ino {
            1 => file([5, 6, 0], 2, false),
            2 => file([8, 9, 7], 10, false),
            4 => file([5, 6, 7], 8, false),
            _ => Use::NONE,
        };
        let (d, inexact) = deltas(&a, &before, after, &BTreeMap::new());
        assert_eq!(inexact, 0);
        // user 5: +2 +1 inode, -10 -1, -4 -1, +5.
        assert_eq!(d[&(0, 5)], [2 - 10 - 4 + 5, 1 - 1 - 1, 0]);
        assert_eq!(d[&(0, 8)], [10, 1, 0]);
        assert_eq!(d[&(1, 9)], [10, 1, 0]);
        assert_eq!(d[&(2, 0)], [2, 1, 0]);
        // Project 7 keeps inode 2 (its owner changed, not its project).
        assert_eq!(d[&(2, 7)], [-4 + 5, -1, 0]);
        assert!(!d.contains_key(&(1, 8)));
    }

    #[test]
    fn realtime_blocks_are_counted_apart() {
        let a = acct();
        let mut before = BTreeMap::new();
        // 2 realtime blocks and a bmbt block; grows by 16 realtime blocks
        // and another bmbt block.
        before.insert(1, rt_file([5, 6, 7], 3, 2));
        before.insert(2, Use::NONE); // new, 8 realtime blocks
        let after = |ino| match ino {
            1 => file([5, 6, 7], 20, true),
            _ => file([5, 6, 7], 8, true),
        };
        let rt: BTreeMap<u64, i64> = [(1, 16), (2, 8)].into_iter().collect();
        let (d, inexact) = deltas(&a, &before, after, &rt);
        assert_eq!(inexact, 0);
        assert_eq!(d[&(0, 5)], [1, 1, 24]);
        // Given to another owner: its share moves with it.
        let mut before = BTreeMap::new();
        before.insert(1, rt_file([5, 6, 7], 3, 2));
        let (d, inexact) = deltas(&a, &before, |_| file([9, 6, 7], 3, true), &BTreeMap::new());
        assert_eq!(inexact, 0);
        assert_eq!(d[&(0, 5)], [-1, -1, -2]);
        assert_eq!(d[&(0, 9)], [1, 1, 2]);
        // A share that cannot be (the mapping was not read): marked.
        let mut before = BTreeMap::new();
        before.insert(1, rt_file([5, 6, 7], 3, u64::MAX));
        let (_, inexact) = deltas(&a, &before, |_| file([9, 6, 7], 3, true), &BTreeMap::new());
        assert_eq!(inexact, XFS_UQUOTA_CHKD | XFS_GQUOTA_CHKD | XFS_PQUOTA_CHKD);
    }
}

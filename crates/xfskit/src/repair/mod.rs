//! Offline repair (`xfskit repair`): the first steps of xfs_repair's work,
//! in its order, on any image xfskit opens.
//!
//! 1. **The log.** A dirty log is replayed in place, exactly as the
//!    kernel's mount (and `xfskit recover`) replays it, so no committed
//!    change is lost, where xfs_repair refuses the filesystem until `-L`
//!    destroys the log. A log that cannot be replayed (a corrupt record,
//!    an intent xfskit cannot finish) is refused, naming the log problem,
//!    unless [`RepairOptions::zero_log`] asks for it to be cleared, as
//!    `xfs_repair -L` clears it ([`crate::log::clear`]): the report then
//!    says what the log held that is lost ([`LogLoss`]).
//! 2. **The check**: [`crate::check::check`], which finds what
//!    `xfs_repair -n` finds.
//! 0. **The primary superblock**, when it cannot be read as one, is found
//!    again from the secondaries; then the fields xfs_repair resets on
//!    their own are reset in it; it is written first (`sb.rs`).
//! 3. **The fixes** xfskit makes so far: secondary superblocks that differ
//!    from a sound primary are rewritten from it (as xfs_repair rewrites
//!    them); when nothing else is wrong, the AG headers' counters (free
//!    blocks, longest free extent, btree blocks, inodes, free inodes) are
//!    set to what the check counted in their btrees, and the primary's
//!    inode and free block counters to the sums over the AGs. While fixes
//!    are written, a v5 filesystem carries the `needsrepair` feature, so
//!    that no kernel mounts it half repaired; the last write clears it.
//!    Writes are in place, sector by sector, as xfs_repair's (the log is
//!    clean by then), each superblock whole: a crash leaves a filesystem
//!    that a second repair finishes.
//!    Metadata stamped with an LSN at or past the log head (which the
//!    kernel refuses) gets the log formatted past it, as xfs_repair
//!    formats it.
//! 4. **The check again**: what is still wrong is reported as not
//!    repaired (xfskit does not fix it yet; xfs_repair may).
//!
//! A filesystem whose primary superblock carries `needsrepair` (a repair
//! that stopped part way) is read with the bit cleared in memory.

use crate::buf::verify::lsn_at_or_past;
use crate::bytes::{be16, be32, be64, put_be32, put_be64};
use crate::check::{check, AgHeader, CheckOptions, FieldFix, Fix, Problem, LSN_AHEAD};

mod ns;
mod sb;
mod space;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::fs::{Fs, OpenOptions};
use crate::log::clear::{cycle_past, highest_cycle, Cleared, ClearedView};
use crate::log::recover::Shared;
use crate::log::LogState;
use sb::{primary_from_secondaries, Primary};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;
use xfs_format::sb as fsb;

/// How to repair.
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    /// Say what would be done, write nothing (the log is replayed in
    /// memory only).
    pub dry_run: bool,
    /// Clear a dirty log instead of replaying it, as `xfs_repair -L`
    /// does: what it holds is lost (the report's [`RepairReport::log_lost`]
    /// says what). The only way past a log that cannot be replayed. A
    /// clean log is left as it is (a repair of a clean image writes
    /// nothing), unless the filesystem is marked `needsrepair`: an
    /// interrupted repair may have been clearing it, and it is cleared
    /// again.
    ///
    /// The cleared log's head is at block 0 of a cycle
    /// [`crate::log::clear::CYCLE_MARGIN`] (3) past the highest cycle the
    /// old log shows (its head's, or any of its record headers'), and,
    /// when the check reads metadata stamped at or past that head, 3
    /// past the newest such LSN. xfs_repair goes by the newest metadata
    /// LSN alone (plus 3); the log's own cycle is taken too because the
    /// kernel never writes metadata stamped past its log head, so that
    /// cycle also covers the LSNs the check does not read (inodes,
    /// dquots). Where the two rules differ, ours is the higher cycle;
    /// where the newest metadata LSN is in the log's own cycle (a log
    /// that has not wrapped since the metadata was written) they agree,
    /// and the log is the one xfs_repair -L writes, block for block.
    pub zero_log: bool,
    /// The check's memory bound (0: its default).
    pub memory: usize,
    /// How to open the filesystem (realtime and external log devices).
    pub open: OpenOptions,
}

/// What a repair did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    /// What was done with the log, when it was dirty (or `zero_log` was
    /// asked).
    pub log: Option<String>,
    /// What a cleared log held (with `dry_run`: would lose).
    pub log_lost: Option<LogLoss>,
    /// What the first check found.
    pub found: Vec<Problem>,
    /// How many problems it found in all (more than `found` holds when
    /// the report was cut).
    pub found_total: u64,
    /// The fixes made (with `dry_run`: that would be made), in words.
    pub fixes: Vec<String>,
    /// What is still wrong afterwards (with `dry_run`: what no fix
    /// covers).
    pub remaining: Vec<Problem>,
    /// Parts of the filesystem that could not be checked.
    pub unchecked: Vec<String>,
}

/// What a dirty log held that clearing it loses, as the log reader
/// (`xfskit log`) reads it.
#[derive(Debug, Clone, Default)]
pub struct LogLoss {
    /// Committed transactions (what replay would have written).
    pub transactions: usize,
    /// Records between tail and head.
    pub records: usize,
    /// Transactions left open at the head (never replayed anyway).
    pub uncommitted: usize,
    /// Intents without their done item (work recovery would finish).
    pub unfinished_intents: usize,
    /// The committed transactions' items by type (BUF, INODE, ...).
    pub items: BTreeMap<&'static str, usize>,
    /// Tail and head (log blocks), when found.
    pub tail_head: Option<(u64, u64)>,
    /// Why the log could not be read, when it could not: what it held is
    /// then unknown (the counts are 0).
    pub unreadable: Option<String>,
}

impl std::fmt::Display for LogLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let span = |f: &mut std::fmt::Formatter<'_>| match self.tail_head {
            Some((t, h)) => write!(f, ", log blocks {t} to {h}"),
            None => Ok(()),
        };
        if let Some(why) = &self.unreadable {
            write!(f, "what the log held")?;
            if let Some((t, h)) = self.tail_head {
                write!(f, " between log blocks {t} and {h}")?;
            }
            return write!(f, ", unknown: it cannot be read ({why})");
        }
        if self.records == 0 {
            return write!(f, "nothing (the log held no record)");
        }
        let items: Vec<String> = self.items.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(
            f,
            "{} committed transactions (items: {}) in {} records",
            self.transactions,
            if items.is_empty() {
                "none".to_string()
            } else {
                items.join(", ")
            },
            self.records
        )?;
        span(f)?;
        write!(
            f,
            "; {} uncommitted, {} unfinished intents",
            self.uncommitted, self.unfinished_intents
        )
    }
}

/// What the log on `dev` holds, read as `xfskit log` reads it.
fn log_loss(dev: &dyn Device, geo: &crate::geometry::Geometry) -> LogLoss {
    let ends = crate::log::log_dev(dev, geo).and_then(|l| crate::log::find::find_ends(&l));
    let tail_head = ends
        .as_ref()
        .ok()
        .filter(|e| !e.empty && !e.clean)
        .map(|e| (e.tail_blk, e.head_blk));
    match crate::log::read_log(dev, geo) {
        Ok(c) => {
            let mut items = BTreeMap::new();
            for t in &c.transactions {
                for it in &t.items {
                    *items
                        .entry(crate::log::item_type_name(it.item_type()))
                        .or_insert(0) += 1;
                }
            }
            LogLoss {
                transactions: c.transactions.len(),
                records: c.records.len(),
                uncommitted: c.uncommitted,
                unfinished_intents: crate::log::intents::unfinished(&c.transactions)
                    .map_or(0, |v| v.len()),
                items,
                tail_head,
                unreadable: None,
            }
        }
        Err(e) => LogLoss {
            tail_head,
            unreadable: Some(e.to_string()),
            ..Default::default()
        },
    }
}

/// What a dirty log that cannot be replayed is refused with: the log
/// problem, and `--zero-log`.
fn not_replayable(e: Error) -> Error {
    const HINT: &str =
        "repair --zero-log (-L) clears the log instead, and the changes it holds are lost";
    match &e {
        Error::Corrupt { location, .. } | Error::BadCrc { location, .. } => Error::Corrupt {
            what: "log",
            location: location.clone(),
            detail: format!("the dirty log cannot be replayed ({e}): {HINT}"),
        },
        Error::Unsupported(m) => Error::Unsupported(format!(
            "the dirty log cannot be replayed by xfskit ({m}): mount the filesystem with the kernel to replay it, or {HINT}"
        )),
        _ => e,
    }
}

/// The log head the kernel would find on `dev` (`cycle << 32 | block`),
/// as the check finds it.
fn log_head(dev: &dyn Device, geo: &crate::geometry::Geometry) -> Option<u64> {
    crate::log::log_dev(dev, geo)
        .and_then(|l| crate::log::find::find_ends(&l))
        .ok()
        .filter(|e| !e.empty && e.head_cycle > 0)
        .map(|e| (u64::from(e.head_cycle) << 32) | e.head_blk)
}

fn lsn_str(lsn: u64) -> String {
    format!("{}:{}", lsn >> 32, lsn as u32)
}

impl RepairReport {
    /// True when the filesystem is (or, dry, would be) clean.
    pub fn is_clean(&self) -> bool {
        self.remaining.is_empty()
    }
}

const INCOMPAT: usize = std::mem::offset_of!(fsb::Dsb, sb_features_incompat);
const ICOUNT: usize = std::mem::offset_of!(fsb::Dsb, sb_icount);
const IFREE: usize = std::mem::offset_of!(fsb::Dsb, sb_ifree);
const FDBLOCKS: usize = std::mem::offset_of!(fsb::Dsb, sb_fdblocks);
const VERSIONNUM: usize = std::mem::offset_of!(fsb::Dsb, sb_versionnum);

fn is_v5(sb: &[u8]) -> bool {
    be16(sb, VERSIONNUM) & fsb::XFS_SB_VERSION_NUMBITS == fsb::XFS_SB_VERSION_5
}

fn set_needsrepair(sb: &mut [u8], on: bool) {
    let mut inc = be32(sb, INCOMPAT);
    if on {
        inc |= fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR;
    } else {
        inc &= !fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR;
    }
    put_be32(sb, INCOMPAT, inc);
    xfs_format::crc::stamp(sb, fsb::XFS_SB_CRC_OFF);
}

/// The device with the primary superblock's `needsrepair` bit read as
/// clear (writes pass through).
struct Unmarked {
    inner: Arc<dyn Device>,
    sect: usize,
}

impl Device for Unmarked {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)?;
        let sect = self.sect as u64;
        if off < sect {
            let mut sb = vec![0u8; self.sect];
            self.inner.read_at(&mut sb, 0)?;
            set_needsrepair(&mut sb, false);
            let end = (off + buf.len() as u64).min(sect);
            buf[..(end - off) as usize].copy_from_slice(&sb[off as usize..end as usize]);
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

/// The header's name and its sector in the AG (AGF 1, AGI 2).
fn field_name(f: &FieldFix) -> (&'static str, u64) {
    match f.header {
        AgHeader::Agf => ("AGF", 1),
        AgHeader::Agi => ("AGI", 2),
    }
}

/// Offset of the AGI's unlinked buckets.
const UNLINKED: usize = std::mem::offset_of!(xfs_format::ag::Agi, agi_unlinked);

/// An AGI unlinked bucket emptied (a reset, right whatever else is wrong).
fn is_unlinked_bucket(f: &FieldFix) -> bool {
    f.header == AgHeader::Agi && (UNLINKED..UNLINKED + 64 * 4).contains(&f.offset)
}

/// The superblock counters a problem's words name (the check's wording).
fn is_counter_problem(p: &Problem) -> bool {
    p.what == "superblock"
        && p.location == Location::Sb(0)
        && ["sb_icount ", "sb_ifree ", "sb_fdblocks "]
            .iter()
            .any(|f| p.detail.starts_with(f))
}

/// Repairs the filesystem on `dev`.
pub fn repair(dev: Arc<dyn Device>, opts: &RepairOptions) -> Result<RepairReport> {
    // The primary as it is: a repair that stopped part way left
    // needsrepair set, which is read as clear until the repair ends.
    let found_primary = primary_from_secondaries(dev.as_ref())?;
    let mut sector = match &found_primary {
        Some(p) => p.sector.clone(),
        None => sb::read_sb_sector(dev.as_ref(), 0)?,
    };
    let mut resets = sb::reset_fields(dev.as_ref(), &mut sector);
    resets.extend(sb::reset_root_inodes(dev.clone(), &mut sector, &opts.open));
    // What the primary is from here on (the device reads it so).
    let sb0 = sector.clone();
    let sect = sb0.len();
    let dev = if found_primary.is_none() && resets.is_empty() {
        dev
    } else if opts.dry_run {
        Arc::new(Primary { inner: dev, sector }) as Arc<dyn Device>
    } else {
        // Written first, in place, as xfs_repair writes it: what
        // follows reads it.
        dev.write_at(&sector, 0).map_err(Error::Io)?;
        dev.flush().map_err(Error::Io)?;
        dev
    };
    let v5 = is_v5(&sb0);
    let marked = v5 && be32(&sb0, INCOMPAT) & fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR != 0;
    // Read unmarked throughout: the repair marks it while it writes.
    let view: Arc<dyn Device> = if v5 {
        Arc::new(Unmarked {
            inner: dev.clone(),
            sect,
        })
    } else {
        dev.clone()
    };
    let mut report = RepairReport::default();
    if let Some(p) = &found_primary {
        report.found.push(Problem {
            what: "superblock",
            location: Location::Sb(0),
            detail: p.why.clone(),
            fix: None,
        });
        report.found_total += 1;
        report.fixes.push(format!(
            "primary superblock written from the secondary of AG {} ({} of {} secondaries read agree)",
            p.agno, p.agree, p.read
        ));
    }
    for r in resets {
        report.found.push(Problem {
            what: "superblock",
            location: Location::Sb(0),
            detail: r.problem,
            fix: None,
        });
        report.found_total += 1;
        report.fixes.push(r.fix);
    }

    // 1. The log.
    let probe = Fs::from_device(
        Box::new(Shared(view.clone())),
        &OpenOptions {
            norecovery: true,
            ..opts.open.clone()
        },
    )?;
    let state = probe.log_state().clone();
    let geo0 = probe.geometry().clone();
    drop(probe);
    let dirty = matches!(state, LogState::Dirty(_));
    // The log to write instead of the old one, and where it is.
    let mut clear: Option<(Cleared, u64)> = None;
    if opts.zero_log && state == LogState::External {
        return Err(Error::Unsupported(crate::log::NEEDS_LOGDEV.into()));
    }
    if opts.zero_log && (dirty || marked) {
        let log = crate::log::log_dev(view.as_ref(), &geo0)?;
        let ends = crate::log::find::find_ends(&log).ok();
        report.log_lost = Some(if dirty {
            log_loss(view.as_ref(), &geo0)
        } else {
            LogLoss::default()
        });
        let high = highest_cycle(&log, ends.as_ref(), &geo0.uuid)?;
        clear = Some((Cleared::new(&geo0, log.nbb, cycle_past(high)?), log.start));
    } else if opts.zero_log {
        report.log = Some("the log is clean: --zero-log leaves it as it is".into());
    } else if dirty {
        // Under needsrepair the log holds the journaled fixes of a repair
        // that stopped: replayed like any other.
        if opts.dry_run {
            report.log = Some(
                "the log is dirty: it would be replayed in place as the kernel replays it (read here replayed in memory)".into(),
            );
        } else {
            let r = crate::log::recover::recover_device(
                view.clone(),
                &crate::log::recover::RecoverOptions {
                    damaged_refcount_ok: true,
                    ..Default::default()
                },
            )
            .map_err(not_replayable)?;
            report.log = Some(format!(
                "replayed the log as the kernel does: {} transactions in {} records, {} buffers and {} inodes written back",
                r.stats.transactions, r.records, r.stats.bufs_replayed, r.stats.inodes_replayed
            ));
        }
    }

    // 2. The check: of the filesystem as it is with the log cleared, when
    // it is to be cleared (nothing is written yet).
    let check_dev: Arc<dyn Device> = match &clear {
        Some((c, start)) => Arc::new(ClearedView::new(view.clone(), *start, c.clone())),
        None => view.clone(),
    };
    let check_opts = CheckOptions {
        memory: opts.memory,
        ..Default::default()
    };
    let (first, geo, ahead) = {
        let fs = Fs::from_device(Box::new(Shared(check_dev.clone())), &opts.open).map_err(|e| {
            if dirty && clear.is_none() {
                not_replayable(e)
            } else {
                e
            }
        })?;
        let first = check(&fs, &check_opts)?;
        let geo = fs.geometry().clone();
        // The newest metadata LSN at or past the log head: what the check
        // read, and the primary superblock's (the kernel checks it as
        // it writes the superblock).
        let mut ahead = fs.lsn_ahead().map(|a| a.lsn);
        if let (true, Some(head)) = (geo.v5, log_head(fs.device(), &geo)) {
            let mut sb = vec![0u8; sect];
            fs.device().read_at(&mut sb, 0).map_err(Error::Io)?;
            let lsn = be64(&sb, xfs_format::sb::XFS_SB_LSN_OFF);
            if lsn_at_or_past(lsn, head) && ahead.is_none_or(|a| lsn_at_or_past(lsn, a)) {
                ahead = Some(lsn);
            }
        }
        (first, geo, ahead)
    };
    let sb_problem = std::mem::take(&mut report.found);
    report.found = sb_problem
        .into_iter()
        .chain(first.problems.clone())
        .collect();
    report.found_total += first.stats.problems_total;
    report.unchecked = first.unchecked.clone();

    // The log formatted anew: the cleared one, or (as xfs_repair formats
    // it) one past metadata stamped ahead of the log.
    let writable_log = !crate::log::log_missing(dev.as_ref(), &geo);
    let format = match (&clear, ahead) {
        (Some((c, _)), None) => Some(c.clone()),
        (Some((c, _)), Some(a)) => Some(Cleared::new(
            &geo,
            c.nbb,
            c.cycle.max(cycle_past((a >> 32) as u32)?),
        )),
        (None, Some(a)) if writable_log => {
            let (_, nbb) = crate::log::log_region(dev.as_ref(), &geo)?;
            Some(Cleared::new(&geo, nbb, cycle_past((a >> 32) as u32)?))
        }
        _ => None,
    };
    let past = |a: Option<u64>| match a {
        Some(a) => format!(", past the newest metadata LSN {}", lsn_str(a)),
        None => String::new(),
    };
    if let (Some(_), Some(f)) = (&clear, &format) {
        let lost = report
            .log_lost
            .as_ref()
            .map_or(String::new(), |l| l.to_string());
        let head = lsn_str(f.head());
        let was = if dirty { "dirty" } else { "clean" };
        report.log = Some(if opts.dry_run {
            format!(
                "the log is {was}: --zero-log would clear it, as xfs_repair -L does (its head at {head}{}), losing {lost}; the check below reads the filesystem without it",
                past(ahead)
            )
        } else {
            format!(
                "cleared the log, which was {was}, as xfs_repair -L does: lost {lost}; the log is clean, its head at {head}{}",
                past(ahead)
            )
        });
    }

    let log_words = match (&clear, &format) {
        (None, Some(f)) => Some(format!(
            "the log formatted anew, its head at {}{}, as xfs_repair formats it",
            lsn_str(f.head()),
            past(ahead)
        )),
        _ => None,
    };
    let skip_ahead = format.is_some();
    if opts.dry_run {
        let plan = Plan::of(&first, skip_ahead);
        report.fixes.extend(log_words);
        report.fixes.extend(plan.header_words(&first));
        report.fixes.extend(plan.rebuild.iter().map(|&agno| {
            let words = ns::describe(&Fix::RebuildFreeSpace { agno });
            if first.rmap_rebuild.iter().any(|(a, _)| *a == agno) {
                format!("{words}, and its rmapbt, which cannot be read whole, with them")
            } else {
                words
            }
        }));
        report.fixes.extend(plan.ns.iter().map(ns::describe));
        if plan.counters_later {
            report.fixes.push(
                "superblock counters set to the AG headers' sums, after the fixes above".into(),
            );
        }
        report.fixes.extend(
            plan.quotas
                .iter()
                .chain(&plan.quotas_later)
                .map(|&kind| ns::describe(&Fix::RecountQuota { kind })),
        );
        report.remaining = plan.other;
        return Ok(report);
    }

    // 3. Rounds of fixes, each followed by the check: a fix may uncover
    // what the next round fixes (a file put back in a directory has its
    // link count counted again; the superblock counters are summed only
    // when everything else is right).
    let mut current = first;
    let mut on_disk_mark = marked;
    let mut wrote = false;
    let mut failed: Vec<String> = Vec::new();
    // needsrepair on a v5 primary before the first write.
    let mark = |done: &mut bool| -> Result<()> {
        if v5 && !*done {
            let mut m = vec![0u8; sect];
            view.read_at(&mut m, 0).map_err(Error::Io)?;
            set_needsrepair(&mut m, true);
            dev.write_at(&m, 0).map_err(Error::Io)?;
            dev.flush().map_err(Error::Io)?;
            *done = true;
        }
        Ok(())
    };
    if let Some(f) = &format {
        // needsrepair, then the log from block 0 on: a crash part way
        // leaves the new records at the log's start (an unmount record
        // first, so a log that is clean), the old ones after, under
        // needsrepair, which the next repair finishes.
        mark(&mut on_disk_mark)?;
        f.write(&crate::log::log_dev(dev.as_ref(), &geo)?)?;
        dev.flush().map_err(Error::Io)?;
        wrote = true;
        report.fixes.extend(log_words.clone());
        let fs = Fs::from_device(Box::new(Shared(view.clone())), &opts.open)?;
        current = check(&fs, &check_opts)?;
    }
    for _round in 0..MAX_ROUNDS {
        let plan = Plan::of(&current, skip_ahead);
        if plan.is_empty() {
            break;
        }
        // needsrepair before the first write.
        mark(&mut on_disk_mark)?;
        wrote = true;
        let mut progress = false;
        if !plan.fields.is_empty()
            || !plan.secondaries.is_empty()
            || plan.counters
            || !plan.crcs.is_empty()
            || !plan.bits.is_empty()
        {
            write_headers(&dev, &view, &geo, sect, v5, &plan, &current)?;
            report.fixes.extend(plan.header_words(&current));
            progress = true;
        }
        for &agno in &plan.rebuild {
            let free = current
                .free_space
                .iter()
                .find(|(a, _)| *a == agno)
                .map(|(_, f)| f.as_slice())
                .unwrap_or_default();
            let rmaps = current
                .rmap_rebuild
                .iter()
                .find(|(a, _)| *a == agno)
                .map(|(_, r)| r.as_slice());
            match space::rebuild(&dev, &geo, sect, agno, free, rmaps) {
                Ok(words) => {
                    report.fixes.push(words);
                    progress = true;
                }
                Err(e @ Error::Io(_)) => return Err(e),
                Err(e) => failed.push(format!(
                    "{}: {e}",
                    ns::describe(&Fix::RebuildFreeSpace { agno })
                )),
            }
        }
        if !plan.ns.is_empty() && plan.rebuild.is_empty() {
            let fs = Fs::from_device_rw(Box::new(Shared(view.clone())), &opts.open)?;
            let (done, bad) = ns::apply(&fs, &plan.ns, &current)?;
            fs.sync()?;
            drop(fs);
            progress |= !done.is_empty();
            report.fixes.extend(done);
            failed.extend(bad);
        }
        for &kind in &plan.quotas {
            let fs = Fs::from_device_rw(Box::new(Shared(view.clone())), &opts.open)?;
            let name = kind.name();
            let words = match crate::quota::recount(fs, kind) {
                Ok(k) if k.reset > 0 => format!(
                    "{name} quota: counted again into the records of quota file {} ({} ids using something; {} records that were not valid dquots made anew without limits, as xfs_repair makes them)",
                    k.ino, k.ids, k.reset
                ),
                Ok(k) => format!(
                    "{name} quota: counted again into the records of quota file {} ({} ids using something)",
                    k.ino, k.ids
                ),
                Err(e @ Error::Io(_)) => return Err(e),
                Err(e) => {
                    failed.push(format!("{name} quota counted again: {e}"));
                    continue;
                }
            };
            report.fixes.push(words);
            progress = true;
        }
        let fs = Fs::from_device(Box::new(Shared(view.clone())), &opts.open)?;
        current = check(&fs, &check_opts)?;
        if !progress {
            break;
        }
    }

    // 4. The end: the primary without needsrepair, last.
    if wrote || marked {
        let mut p = vec![0u8; sect];
        view.read_at(&mut p, 0).map_err(Error::Io)?;
        if format.is_some() && v5 {
            // The log holds nothing now: nothing its incompatible
            // features protect (the kernel clears them as its log idles).
            let at = std::mem::offset_of!(fsb::Dsb, sb_features_log_incompat);
            put_be32(&mut p, at, 0u32);
        }
        if v5 {
            set_needsrepair(&mut p, false);
        }
        dev.flush().map_err(Error::Io)?;
        dev.write_at(&p, 0).map_err(Error::Io)?;
        dev.flush().map_err(Error::Io)?;
        if marked {
            report.fixes.push("needsrepair cleared".into());
        }
    }
    for f in failed {
        report.fixes.push(format!("could not fix: {f}"));
    }

    // 5. What is left, as the check sees it now (the last check stands
    // when nothing was written since).
    report.remaining = if wrote || marked {
        let fs = Fs::from_device(Box::new(Shared(dev.clone())), &opts.open)?;
        check(&fs, &check_opts)?.problems
    } else {
        current.problems
    };
    Ok(report)
}

/// Rounds of fixes and checks at most (each round after the first fixes
/// only what the fixes before it uncovered).
const MAX_ROUNDS: usize = 6;

/// An AG header field a round sets.
struct HeaderField {
    fix: FieldFix,
    /// The field, in words.
    words: String,
    /// Its value was counted in the btrees (right only when they are
    /// sound), not a reset.
    counted: bool,
}

/// What one round fixes, from one check's report.
#[derive(Default)]
struct Plan {
    /// Secondary superblocks rewritten from the primary.
    secondaries: BTreeSet<u32>,
    /// AG header fields set to what was counted or reset.
    fields: Vec<HeaderField>,
    /// The superblock counters set to the AG headers' sums.
    counters: bool,
    /// Inodes whose CRC is stamped again (in place).
    crcs: Vec<u64>,
    /// Inode core fields changed in place ([`Fix::InodeBits`]).
    bits: Vec<Fix>,
    /// AGs whose free space btrees are rebuilt (this round does nothing
    /// through the journal then: its fixes were found on the old trees).
    rebuild: BTreeSet<u32>,
    /// Fixes made through the journal.
    ns: Vec<Fix>,
    /// What no fix of this round covers.
    other: Vec<Problem>,
    /// The superblock counters are wrong but are summed in a later round,
    /// after this one's namespace fixes.
    counters_later: bool,
    /// Kinds of quota counted again (when nothing else is wrong).
    quotas: Vec<crate::quota::Kind>,
    /// Kinds of quota counted again in a later round.
    quotas_later: Vec<crate::quota::Kind>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.secondaries.is_empty()
            && self.fields.is_empty()
            && !self.counters
            && self.crcs.is_empty()
            && self.bits.is_empty()
            && self.rebuild.is_empty()
            && self.ns.is_empty()
            && self.quotas.is_empty()
    }

    /// Chooses the fixes that are safe to make on what `r` found.
    /// `skip_ahead`: metadata LSNs ahead of the log are no problem (the
    /// log is formatted past them).
    fn of(r: &crate::check::CheckReport, skip_ahead: bool) -> Plan {
        let cut = r.stats.problems_total > r.problems.len() as u64;
        let mut plan = Plan::default();
        let mut counters = false;
        let mut ns = Vec::new();
        let mut rebuild: Vec<(u32, &Problem)> = Vec::new();
        let mut quotas: Vec<(crate::quota::Kind, &Problem)> = Vec::new();
        for p in &r.problems {
            match (p.what, &p.location, &p.fix) {
                (_, _, Some(Fix::RecountQuota { kind })) => quotas.push((*kind, p)),
                ("superblock", Location::Sb(n), _) if *n > 0 => {
                    plan.secondaries.insert(*n);
                }
                _ if is_counter_problem(p) => counters = true,
                _ if skip_ahead && p.detail.ends_with(LSN_AHEAD) => {}
                (_, _, Some(Fix::InodeCrc { ino, .. })) => plan.crcs.push(*ino),
                (
                    _,
                    _,
                    Some(
                        f @ (Fix::InodeBits { .. }
                        | Fix::ClearAttrFork { .. }
                        | Fix::RebuildFork { .. }
                        | Fix::AgHeaderIdent { .. }),
                    ),
                ) => {
                    if !plan.bits.contains(f) {
                        plan.bits.push(f.clone())
                    }
                }
                (_, _, Some(Fix::ResetAgfl { agno, size })) => {
                    use xfs_format::ag::Agf;
                    for (offset, value, name) in [
                        (std::mem::offset_of!(Agf, agf_flfirst), 0, "agf_flfirst"),
                        (
                            std::mem::offset_of!(Agf, agf_fllast),
                            size.saturating_sub(1),
                            "agf_fllast",
                        ),
                        (std::mem::offset_of!(Agf, agf_flcount), 0, "agf_flcount"),
                    ] {
                        plan.fields.push(HeaderField {
                            fix: FieldFix {
                                header: AgHeader::Agf,
                                agno: *agno,
                                offset,
                                value,
                            },
                            words: format!("{name} (the free list emptied)"),
                            counted: false,
                        });
                    }
                }
                (_, _, Some(Fix::RebuildFreeSpace { agno })) => rebuild.push((*agno, p)),
                (_, _, Some(Fix::AgField(f))) if is_unlinked_bucket(f) => {
                    plan.fields.push(HeaderField {
                        fix: *f,
                        words: format!("unlinked bucket {} (emptied)", (f.offset - UNLINKED) / 4),
                        counted: false,
                    })
                }
                (_, _, Some(Fix::AgField(f))) => plan.fields.push(HeaderField {
                    fix: *f,
                    words: p.detail.split(' ').next().unwrap_or("").to_string(),
                    counted: true,
                }),
                (_, _, Some(f)) => ns.push((f.clone(), p.clone())),
                _ => plan.other.push(p.clone()),
            }
        }
        let sound = plan.other.is_empty() && !cut;
        // Counted header values are right only when the btrees they were
        // counted in are sound; namespace problems do not touch them.
        if !sound {
            plan.other.extend(
                r.problems
                    .iter()
                    .filter(|p| matches!(p.fix, Some(Fix::AgField(_))))
                    .cloned(),
            );
            // An emptied free list counts nothing: it is made anyway.
            plan.fields.retain(|f| !f.counted);
        }
        // Fixes that allocate or free (an entry removed may shrink its
        // directory; a reconnection may make lost+found or grow it) wait
        // until the space btrees are sound; the others change an inode or
        // an entry in place.
        // Free space btrees are rebuilt from what everything else claims:
        // only when all of that is known to be right (every problem has
        // its fix) and nothing is changed in place this round (a damaged
        // header or inode may hide what it claims).
        let in_place = !plan.crcs.is_empty() || !plan.bits.is_empty() || !plan.fields.is_empty();
        for (agno, p) in rebuild {
            if sound && !in_place && r.free_space.iter().any(|(a, _)| *a == agno) {
                plan.rebuild.insert(agno);
            } else {
                plan.other.push(p.clone());
            }
        }
        // A reconnection rewrites the inode's parent pointers itself.
        let reconnected: BTreeSet<u64> = ns
            .iter()
            .filter_map(|(f, _)| match f {
                Fix::Disconnected { ino } => Some(*ino),
                _ => None,
            })
            .collect();
        // Entries of a directory that is emptied go with it.
        let reset: BTreeSet<u64> = ns
            .iter()
            .filter_map(|(f, _)| match f {
                Fix::ResetDir { ino } => Some(*ino),
                _ => None,
            })
            .collect();
        for (f, p) in ns {
            if let Fix::DropEntry { dir, .. } | Fix::EntryType { dir, .. } = &f {
                if reset.contains(dir) {
                    continue;
                }
            }
            // A link count is right only when every name was counted
            // (an inode btree that cannot be read hides directories).
            let allocates = matches!(
                f,
                Fix::Nlink { .. }
                    | Fix::AddRmap { .. }
                    | Fix::RebuildFinobt { .. }
                    | Fix::RebuildInobt { .. }
                    | Fix::RebuildRefcount { .. }
                    | Fix::RebuildForkBtree { .. }
                    | Fix::DropEntry { .. }
                    | Fix::Disconnected { .. }
                    | Fix::ClearInode { .. }
                    | Fix::DropRmap { .. }
                    | Fix::FreeBlocks { .. }
                    | Fix::ResetDir { .. }
                    | Fix::AddParent { .. }
                    | Fix::DropParent { .. }
            );
            if let Fix::AddParent { ino, .. } | Fix::DropParent { ino, .. } = &f {
                if reconnected.contains(ino) {
                    continue;
                }
            }
            // Space changes wait for a check after this round's in-place
            // fixes: what a damaged header or inode hid is then seen (an
            // AG whose AGF could not be read shows all its blocks as
            // unused until then).
            let in_place =
                !plan.crcs.is_empty() || !plan.bits.is_empty() || !plan.fields.is_empty();
            if allocates && (!sound || in_place) {
                plan.other.push(p);
            } else if !plan.ns.contains(&f) {
                plan.ns.push(f);
            }
        }
        // The primary is the model of the copies only when it is sound.
        let primary_sound = !cut && !plan.other.iter().any(|p| p.location == Location::Sb(0));
        if !primary_sound {
            plan.other.extend(
                r.problems
                    .iter()
                    .filter(|p| matches!(p.location, Location::Sb(n) if n > 0))
                    .cloned(),
            );
            plan.secondaries.clear();
        }
        // The AG headers' sums are the counters only when nothing else is
        // wrong (namespace fixes may allocate inodes).
        plan.counters = counters
            && sound
            && plan.ns.is_empty()
            && plan.fields.is_empty()
            && plan.rebuild.is_empty();
        plan.counters_later = counters && sound && !plan.counters;
        // Quota counts follow every file's blocks: counted again only when
        // nothing else changes them (the rest, and the counters, first).
        let quota_now = sound
            && plan.ns.is_empty()
            && plan.fields.is_empty()
            && plan.rebuild.is_empty()
            && plan.crcs.is_empty()
            && plan.bits.is_empty();
        for (kind, p) in quotas {
            let to = match (quota_now, sound) {
                (true, _) => &mut plan.quotas,
                (false, true) => &mut plan.quotas_later,
                (false, false) => {
                    plan.other.push(p.clone());
                    continue;
                }
            };
            if !to.contains(&kind) {
                to.push(kind);
            }
        }
        if counters && !sound {
            plan.other
                .extend(r.problems.iter().filter(|p| is_counter_problem(p)).cloned());
        }
        plan
    }

    /// The header fixes in words.
    fn header_words(&self, r: &crate::check::CheckReport) -> Vec<String> {
        let mut out = Vec::new();
        for ino in &self.crcs {
            out.push(format!(
                "inode {ino}: magic number and CRC written again (nothing else was wrong with it)"
            ));
        }
        out.extend(self.bits.iter().map(ns::describe));
        for h in &self.fields {
            let (name, _) = field_name(&h.fix);
            let why = if h.counted { ", as counted" } else { "" };
            out.push(format!(
                "AG {} {name}: {} set to {}{why}",
                h.fix.agno, h.words, h.fix.value
            ));
        }
        if self.counters {
            let t = r.ag_totals;
            out.push(format!(
                "superblock counters set to the AG headers' sums: icount {}, ifree {}, fdblocks {}",
                t.icount, t.ifree, t.fdblocks
            ));
        }
        if !self.secondaries.is_empty() {
            let list: Vec<String> = self.secondaries.iter().map(|n| n.to_string()).collect();
            out.push(format!(
                "secondary superblocks of AG {} rewritten from the primary",
                list.join(", ")
            ));
        }
        out
    }
}

/// Writes a round's header fixes: the AG header fields, the superblock
/// counters into the primary (which keeps needsrepair until the end), the
/// secondaries from the primary.
fn write_headers(
    dev: &Arc<dyn Device>,
    view: &Arc<dyn Device>,
    geo: &crate::geometry::Geometry,
    sect: usize,
    v5: bool,
    plan: &Plan,
    r: &crate::check::CheckReport,
) -> Result<()> {
    // The primary as the model, without the mark.
    let mut p = vec![0u8; sect];
    view.read_at(&mut p, 0).map_err(Error::Io)?;
    if plan.counters {
        let t = r.ag_totals;
        put_be64(&mut p, ICOUNT, t.icount);
        put_be64(&mut p, IFREE, t.ifree);
        put_be64(&mut p, FDBLOCKS, t.fdblocks);
    }
    if v5 {
        set_needsrepair(&mut p, false);
    }
    // One read and one write per header, with all its fields.
    let mut by_header: std::collections::BTreeMap<(u32, u64), Vec<&FieldFix>> = Default::default();
    for f in plan.fields.iter().map(|h| &h.fix) {
        by_header
            .entry((f.agno, field_name(f).1))
            .or_default()
            .push(f);
    }
    for ((agno, sector), fs) in by_header {
        let at = geo
            .agb_to_daddr(crate::geometry::AgNumber(agno), crate::geometry::AgBlock(0))
            .bytes()
            + sector * sect as u64;
        let mut h = vec![0u8; sect];
        dev.read_at(&mut h, at).map_err(Error::Io)?;
        for f in &fs {
            h[f.offset..f.offset + 4].copy_from_slice(&f.value.to_be_bytes());
        }
        if v5 {
            let crc = match fs[0].header {
                AgHeader::Agf => xfs_format::ag::XFS_AGF_CRC_OFF,
                AgHeader::Agi => xfs_format::ag::XFS_AGI_CRC_OFF,
            };
            xfs_format::crc::stamp(&mut h, crc);
        }
        dev.write_at(&h, at).map_err(Error::Io)?;
    }
    for &n in &plan.secondaries {
        let at = geo.agb_to_daddr(crate::geometry::AgNumber(n), crate::geometry::AgBlock(0));
        dev.write_at(&p, at.bytes()).map_err(Error::Io)?;
    }
    // An inode is no larger than a sector's multiple and is written whole.
    // Inodes and AG headers, each read, changed and written whole (an
    // inode is no larger than a sector's multiple).
    let rewrite = |at: u64, len: usize, change: &dyn Fn(&mut [u8])| -> Result<()> {
        let mut raw = vec![0u8; len];
        dev.read_at(&mut raw, at).map_err(Error::Io)?;
        change(&mut raw);
        dev.write_at(&raw, at).map_err(Error::Io)
    };
    let inode_at = |ino: u64| geo.ino_to_bytes(crate::geometry::Ino(ino));
    let isize = geo.inode_size as usize;
    for &ino in &plan.crcs {
        rewrite(inode_at(ino), isize, &|raw| {
            crate::check::inodes::set_header(geo, raw)
        })?;
    }
    for f in &plan.bits {
        match *f {
            Fix::InodeBits {
                ino,
                offset,
                width,
                clear,
                set,
            } => rewrite(inode_at(ino), isize, &|raw| {
                crate::check::inodes::set_bits(geo, raw, offset, width, clear, set)
            })?,
            Fix::ClearAttrFork { ino } => rewrite(inode_at(ino), isize, &|raw| {
                crate::check::inodes::clear_attr_fork(geo, raw)
            })?,
            Fix::RebuildFork {
                ino,
                ref extents,
                nblocks,
            } => rewrite(inode_at(ino), isize, &|raw| {
                crate::check::inodes::set_data_extents(geo, raw, extents, nblocks)
            })?,
            Fix::AgHeaderIdent { agno, sector } => {
                let at = geo
                    .agb_to_daddr(crate::geometry::AgNumber(agno), crate::geometry::AgBlock(0))
                    .bytes()
                    + sector * sect as u64;
                rewrite(at, sect, &|raw| {
                    crate::check::set_ag_ident(geo, agno, sector, raw)
                })?
            }
            _ => {}
        }
    }
    dev.flush().map_err(Error::Io)?;
    if plan.counters {
        // Still marked: the end clears the mark.
        let mut m = p.clone();
        if v5 {
            set_needsrepair(&mut m, true);
        }
        dev.write_at(&m, 0).map_err(Error::Io)?;
        dev.flush().map_err(Error::Io)?;
    }
    Ok(())
}

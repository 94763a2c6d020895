//! Offline repair (`xfskit repair`): the first steps of xfs_repair's work,
//! in its order, on any image xfskit opens.
//!
//! 1. **The log.** A dirty log is replayed in place, exactly as the
//!    kernel's mount (and `xfskit recover`) replays it, so no committed
//!    change is lost, where xfs_repair refuses the filesystem until `-L`
//!    destroys the log.
//! 2. **The check**: [`crate::check::check`], which finds what
//!    `xfs_repair -n` finds.
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
//! 4. **The check again**: what is still wrong is reported as not
//!    repaired (xfskit does not fix it yet; xfs_repair may).
//!
//! A filesystem whose primary superblock carries `needsrepair` (a repair
//! that stopped part way) is read with the bit cleared in memory.

use crate::bytes::{be16, be32};
use crate::check::{check, AgHeader, CheckOptions, FieldFix, Problem};
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::fs::{Fs, OpenOptions};
use crate::log::recover::Shared;
use crate::log::LogState;
use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use xfs_format::sb as fsb;

/// How to repair.
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    /// Say what would be done, write nothing (the log is replayed in
    /// memory only).
    pub dry_run: bool,
    /// The check's memory bound (0: its default).
    pub memory: usize,
    /// How to open the filesystem (realtime and external log devices).
    pub open: OpenOptions,
}

/// What a repair did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    /// What was done with the log, when it was dirty.
    pub log: Option<String>,
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
    sb[INCOMPAT..INCOMPAT + 4].copy_from_slice(&inc.to_be_bytes());
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
    let mut sb0 = vec![0u8; 512];
    dev.read_at(&mut sb0, 0).map_err(Error::Io)?;
    if be32(&sb0, 0) != fsb::XFS_SB_MAGIC {
        return Err(Error::corrupt(
            "superblock",
            Location::Sb(0),
            "bad magic: finding the primary from the secondaries is not done yet (xfs_repair does it)",
        ));
    }
    let sect =
        usize::from(be16(&sb0, std::mem::offset_of!(fsb::Dsb, sb_sectsize))).clamp(512, 32768);
    let mut sb0 = vec![0u8; sect];
    dev.read_at(&mut sb0, 0).map_err(Error::Io)?;
    let v5 = is_v5(&sb0);
    let marked = v5 && be32(&sb0, INCOMPAT) & fsb::XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR != 0;
    let view: Arc<dyn Device> = if marked {
        Arc::new(Unmarked {
            inner: dev.clone(),
            sect,
        })
    } else {
        dev.clone()
    };
    let mut report = RepairReport::default();

    // 1. The log.
    let probe = Fs::from_device(
        Box::new(Shared(view.clone())),
        &OpenOptions {
            norecovery: true,
            ..opts.open.clone()
        },
    )?;
    let dirty = matches!(probe.log_state(), LogState::Dirty(_));
    drop(probe);
    if dirty {
        if marked {
            return Err(Error::Unsupported(
                "the filesystem is marked needsrepair and its log is dirty: xfskit repair does not replay a log under that mark".into(),
            ));
        }
        if opts.dry_run {
            report.log = Some(
                "the log is dirty: it would be replayed in place as the kernel replays it (read here replayed in memory)".into(),
            );
        } else {
            let r = crate::log::recover::recover_device(view.clone(), &Default::default())?;
            report.log = Some(format!(
                "replayed the log as the kernel does: {} transactions in {} records, {} buffers and {} inodes written back",
                r.stats.transactions, r.records, r.stats.bufs_replayed, r.stats.inodes_replayed
            ));
        }
    }

    // 2. The check.
    let check_opts = CheckOptions {
        memory: opts.memory,
        ..Default::default()
    };
    let (first, geo) = {
        let fs = Fs::from_device(Box::new(Shared(view.clone())), &opts.open)?;
        (check(&fs, &check_opts)?, fs.geometry().clone())
    };
    report.found = first.problems.clone();
    report.found_total = first.stats.problems_total;
    report.unchecked = first.unchecked.clone();

    // 3. The fixes that apply.
    let cut = first.stats.problems_total > first.problems.len() as u64;
    let mut secondaries = BTreeSet::new();
    let mut counters = false;
    let mut fields: Vec<(FieldFix, String)> = Vec::new();
    let mut other = Vec::new();
    for p in &first.problems {
        match (p.what, &p.location) {
            ("superblock", Location::Sb(n)) if *n > 0 => {
                secondaries.insert(*n);
            }
            _ if is_counter_problem(p) => counters = true,
            _ if p.fix.is_some() => fields.extend(
                p.fix
                    .map(|f| (f, p.detail.split(' ').next().unwrap_or("").to_string())),
            ),
            _ => other.push(p.clone()),
        }
    }
    // Counted values are the right ones only when the btrees they were
    // counted in are sound: nothing else may be wrong.
    if !other.is_empty() || cut {
        other.extend(first.problems.iter().filter(|p| p.fix.is_some()).cloned());
        fields.clear();
    }
    // The primary is the model of the copies only when it is sound, and
    // the AG headers' sums are the counters only when nothing else is
    // wrong.
    let primary_sound = !cut && !other.iter().any(|p| p.location == Location::Sb(0));
    if !primary_sound {
        other.extend(
            first
                .problems
                .iter()
                .filter(|p| matches!(p.location, Location::Sb(n) if n > 0))
                .cloned(),
        );
        secondaries.clear();
    }
    let fix_counters = counters && other.is_empty() && !cut;
    if counters && !fix_counters {
        other.extend(
            first
                .problems
                .iter()
                .filter(|p| is_counter_problem(p))
                .cloned(),
        );
    }
    let t = first.ag_totals;
    let mut fixes = Vec::new();
    for (f, field) in &fields {
        let (name, _) = field_name(f);
        fixes.push(format!(
            "AG {} {name}: {field} set to {}, as counted",
            f.agno, f.value
        ));
    }
    if fix_counters {
        fixes.push(format!(
            "superblock counters set to the AG headers' sums: icount {}, ifree {}, fdblocks {}",
            t.icount, t.ifree, t.fdblocks
        ));
    }
    if !secondaries.is_empty() {
        let list: Vec<String> = secondaries.iter().map(|n| n.to_string()).collect();
        fixes.push(format!(
            "secondary superblocks of AG {} rewritten from the primary",
            list.join(", ")
        ));
    }
    if opts.dry_run {
        report.fixes = fixes;
        report.remaining = other;
        return Ok(report);
    }

    // Writes: needsrepair first, then the AG headers and the copies, then
    // the primary.
    if fix_counters || !secondaries.is_empty() || !fields.is_empty() || marked {
        let mut p = vec![0u8; sect];
        view.read_at(&mut p, 0).map_err(Error::Io)?;
        if v5 && !marked {
            let mut m = p.clone();
            set_needsrepair(&mut m, true);
            dev.write_at(&m, 0).map_err(Error::Io)?;
            dev.flush().map_err(Error::Io)?;
        }
        if fix_counters {
            p[ICOUNT..ICOUNT + 8].copy_from_slice(&t.icount.to_be_bytes());
            p[IFREE..IFREE + 8].copy_from_slice(&t.ifree.to_be_bytes());
            p[FDBLOCKS..FDBLOCKS + 8].copy_from_slice(&t.fdblocks.to_be_bytes());
        }
        if v5 {
            set_needsrepair(&mut p, false);
        }
        for (f, _) in &fields {
            let (_, sector) = field_name(f);
            let at = geo
                .agb_to_daddr(
                    crate::geometry::AgNumber(f.agno),
                    crate::geometry::AgBlock(0),
                )
                .bytes()
                + sector * sect as u64;
            let mut h = vec![0u8; sect];
            dev.read_at(&mut h, at).map_err(Error::Io)?;
            h[f.offset..f.offset + 4].copy_from_slice(&f.value.to_be_bytes());
            if v5 {
                let crc = match f.header {
                    AgHeader::Agf => xfs_format::ag::XFS_AGF_CRC_OFF,
                    AgHeader::Agi => xfs_format::ag::XFS_AGI_CRC_OFF,
                };
                xfs_format::crc::stamp(&mut h, crc);
            }
            dev.write_at(&h, at).map_err(Error::Io)?;
        }
        for &n in &secondaries {
            let at = geo.agb_to_daddr(crate::geometry::AgNumber(n), crate::geometry::AgBlock(0));
            dev.write_at(&p, at.bytes()).map_err(Error::Io)?;
        }
        dev.flush().map_err(Error::Io)?;
        dev.write_at(&p, 0).map_err(Error::Io)?;
        dev.flush().map_err(Error::Io)?;
        if marked {
            fixes.push("needsrepair cleared".into());
        }
    }
    report.fixes = fixes;

    // 4. The check again.
    let fs = Fs::from_device(Box::new(Shared(dev.clone())), &opts.open)?;
    let after = check(&fs, &check_opts)?;
    report.remaining = after.problems;
    Ok(report)
}

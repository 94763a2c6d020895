//! Recovery in place: replay the log into an overlay, and only when the
//! whole log was read and replayed without error, write the replayed
//! blocks, make them durable, bring the superblock counters up to date
//! from the AG headers, and leave the log clean: an unmount record at the
//! head, in the head's cycle, after clearing the blocks a torn write may
//! have left ahead of it.

use super::record::{LogDev, BB};
use super::{Recovery, ReplayStats};
use crate::dev::Device;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use std::sync::Arc;
use xfs_format::log::{
    xlog_assign_lsn, xlog_rec_crc, XFS_LOG, XLOG_HEADER_MAGIC_NUM, XLOG_UNMOUNT_TRANS,
    XLOG_UNMOUNT_TYPE, XLOG_VERSION_2,
};

/// What `recover` did.
#[derive(Debug, Clone, Default)]
pub struct RecoverReport {
    /// The log was clean (or never written): nothing was written.
    pub was_clean: bool,
    /// Head and tail found (log blocks).
    pub head_blk: u64,
    /// Tail block.
    pub tail_blk: u64,
    /// Records read between tail and head.
    pub records: usize,
    /// Torn records dropped at the head (log blocks).
    pub torn: Vec<u64>,
    /// Replay counters.
    pub stats: ReplayStats,
    /// Sectors written back.
    pub sectors_written: usize,
    /// Inodes freed or taken off the AGI unlinked lists afterwards.
    pub unlinked: super::unlinked::UnlinkedReport,
    /// Copy-on-write staging extents freed afterwards.
    pub cow: super::cow::CowReport,
    /// Extents of unfinished extent-free intents freed afterwards.
    pub efi_extents_freed: usize,
    /// Updates of unfinished reverse-mapping, reference count,
    /// block-mapping and attribute intents done afterwards.
    pub rui_updates: usize,
    /// Pairs of mappings exchanged for unfinished mapping-exchange intents.
    pub xmi_exchanged: usize,
}

/// Options of [`recover_device`].
#[derive(Debug, Clone, Default)]
pub struct RecoverOptions {
    /// Write the replayed changes even when intents recovery cannot
    /// finish (parent pointer updates, unknown operations) were left
    /// unfinished; no intent is finished then.
    pub allow_unfinished_intents: bool,
    /// The external log device (`mount -o logdev=`) of a filesystem
    /// whose log is not inside the data section; used by
    /// [`crate::Fs::recover`] (a device handed to [`recover_device`]
    /// carries its log itself: [`crate::dev::WithLog`]).
    pub logdev: Option<std::path::PathBuf>,
    /// Leave the copy-on-write staging extents of an AG whose refcount
    /// btree cannot be read (the kernel's mount fails there): repair's
    /// replay, whose check then finds the tree and rebuilds it.
    pub damaged_refcount_ok: bool,
}

/// Recovers the filesystem on `dev` in place.
pub fn recover_device(shared: Arc<dyn Device>, opts: &RecoverOptions) -> Result<RecoverReport> {
    let dev = shared.as_ref();
    let geo = read_geometry(dev)?;
    geo.require_writable_format()?;
    super::resv::require_log_size(&geo)?;
    let rec: Recovery = super::replay(dev, &geo)?;
    let ends = rec.contents.ends.clone();
    let mut report = RecoverReport {
        was_clean: ends.clean || ends.empty,
        head_blk: ends.head_blk,
        tail_blk: ends.tail_blk,
        records: rec.contents.records.len(),
        torn: ends.torn.clone(),
        stats: rec.stats.clone(),
        sectors_written: 0,
        unlinked: Default::default(),
        cow: Default::default(),
        efi_extents_freed: 0,
        rui_updates: 0,
        xmi_exchanged: 0,
    };
    // A clean log with a torn record past its unmount record still gets
    // its stale blocks cleared and a new unmount record, as the kernel
    // clears them at mount, so the next writer starts from a clean head.
    let stale = !ends.empty && {
        let log = super::log_dev(dev, &geo)?;
        log.cycle(ends.head_blk)? == ends.head_cycle
    };
    if report.was_clean && !stale {
        return Ok(report);
    }
    // Extent-free and reverse-mapping intents are finished below; other
    // kinds are not yet.
    let others: Vec<_> = rec
        .stats
        .unfinished_intents
        .iter()
        .filter(|(t, _, _)| !super::intents::can_finish(t))
        .collect();
    let intents = super::intents::unfinished(&rec.contents.transactions)?;
    super::intents::check_attris(&rec.contents.transactions, &geo)?;
    if !opts.allow_unfinished_intents {
        super::intents::check_ruis(&intents)?;
    }
    if !others.is_empty() && !opts.allow_unfinished_intents {
        let list: Vec<String> = others
            .iter()
            .map(|(t, id, lsn)| format!("{t} {id:#x} (lsn {lsn:#x})"))
            .collect();
        return Err(Error::Unsupported(format!(
            "the log holds {} unfinished intent(s) of a kind recovery cannot finish yet: {}; nothing was written",
            list.len(),
            list.join(", ")
        )));
    }
    let intents = if others.is_empty() && super::intents::check_ruis(&intents).is_ok() {
        intents
    } else {
        Vec::new()
    };
    // Intents are checked against the filesystem only as they are
    // finished (an extent to free that its reverse mapping does not cover
    // as one, a mapping exchange or attribute update that does not fit its
    // inodes): do all of the after-replay work once in memory first, so
    // that a bad intent fails before anything is written.
    if !intents.is_empty() {
        let trial: Arc<dyn Device> = Arc::new(crate::dev::OverlayDevice::new(
            shared.clone(),
            rec.overlay.clone(),
        ));
        finish(trial, &ends, &intents, opts.damaged_refcount_ok)?;
    }
    for (daddr, bytes) in rec.overlay.runs() {
        dev.write_at(&bytes, daddr * BB).map_err(Error::Io)?;
        report.sectors_written += bytes.len() / BB as usize;
    }
    dev.flush().map_err(Error::Io)?;
    let after = finish(shared, &ends, &intents, opts.damaged_refcount_ok)?;
    report.efi_extents_freed = after.efi_extents_freed;
    report.rui_updates = after.rui_updates;
    report.xmi_exchanged = after.xmi_exchanged;
    report.unlinked = after.unlinked;
    report.cow = after.cow;
    Ok(report)
}

/// After the replayed blocks are on `shared`: finishes the intents the
/// log left unfinished, frees the inodes left on the unlinked lists and
/// the copy-on-write staging extents, all through the journaled write
/// engine, and leaves the log clean.
///
/// The work is crash-safe as the kernel's is: the engine continues the
/// dirty log at its head (stale blocks past it cleared first) with the
/// tail pinned at the replayed log's tail, and each intent's done item is
/// logged in the transaction that finishes it. A crash part way leaves a
/// dirty log holding the old intents and what was finished since, which
/// the next recovery (the kernel's or ours) replays, finishing only what
/// is left. Only when everything is done and written back does an unmount
/// record make the log clean.
/// `damaged_refcount_ok`: see [`RecoverOptions::damaged_refcount_ok`].
pub fn finish(
    shared: Arc<dyn Device>,
    ends: &super::LogEnds,
    intents: &[super::intents::Intent],
    damaged_refcount_ok: bool,
) -> Result<AfterReplay> {
    let dev = shared.as_ref();
    // Geometry may have changed with a replayed superblock.
    let geo = read_geometry(dev)?;
    let log = super::log_dev(dev, &geo)?;
    clear_stale(
        &log,
        ends.head_blk,
        ends.head_cycle,
        ends.tail_lsn,
        &geo.uuid,
    )?;
    dev.flush().map_err(Error::Io)?;
    let pos = super::journal::HeadPos {
        cycle: ends.head_cycle,
        head: ends.head_blk,
        last_record: ends.last.as_ref().map(|h| h.blk),
    };
    let fs = crate::fs::Fs::open_after_replay(shared.clone(), pos, ends.tail_lsn)?;
    // The kernel's order: intents, then the unlinked lists; staging
    // extents are freed at mount.
    let done = if intents.is_empty() {
        Default::default()
    } else {
        super::intents::finish_intents(&fs, intents)?
    };
    let unlinked = super::unlinked::process_unlinked(&fs)?;
    let cow = super::cow::clear_cow_staging(&fs, damaged_refcount_ok)?;
    // Everything is logged with its done items: the tail may move, and
    // the sync writes back, moves it and leaves an unmount record.
    fs.write_state()?.unpin_log();
    fs.sync()?;
    drop(fs);
    clear_log_incompat(dev)?;
    Ok(AfterReplay {
        efi_extents_freed: done.efi_extents,
        rui_updates: done.updates,
        xmi_exchanged: done.exchanged,
        unlinked,
        cow,
    })
}

/// What [`finish`] did through the write engine.
#[derive(Debug, Clone, Default)]
pub struct AfterReplay {
    /// Extents of unfinished extent-free intents freed.
    pub efi_extents_freed: usize,
    /// Updates of unfinished reverse-mapping intents done.
    pub rui_updates: usize,
    /// Pairs of mappings exchanged for mapping-exchange intents.
    pub xmi_exchanged: usize,
    /// Inodes freed or taken off the unlinked lists.
    pub unlinked: super::unlinked::UnlinkedReport,
    /// Copy-on-write staging extents freed.
    pub cow: super::cow::CowReport,
}

/// A shared device handed to an `Fs` that wants to own one.
pub(crate) struct Shared(pub(crate) Arc<dyn Device>);

impl Device for Shared {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.0.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.0.write_at(buf, off)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> std::io::Result<()> {
        self.0.write_vectored_at(bufs, off)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_uninit_at(
        &self,
        buf: &mut [std::mem::MaybeUninit<u8>],
        off: u64,
    ) -> std::io::Result<()> {
        self.0.read_uninit_at(buf, off)
    }
    fn will_need(&self, off: u64, len: u64) {
        self.0.will_need(off, len)
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        self.0.log_base()
    }
}

pub(crate) fn read_geometry(dev: &dyn Device) -> Result<Geometry> {
    let mut s = vec![0u8; 512];
    dev.read_at(&mut s, 0).map_err(Error::Io)?;
    let ss = u16::from_be_bytes([s[102], s[103]]);
    if ss.is_power_of_two() && ss > 512 {
        s = vec![0u8; usize::from(ss)];
        dev.read_at(&mut s, 0).map_err(Error::Io)?;
    }
    Geometry::from_superblock(&s)
}

/// Clears the primary superblock's log-incompat bits once the log is
/// clean, as the kernel does when it quiesces the log: they only say what
/// the log may hold (e.g. logged extended attribute intents).
fn clear_log_incompat(dev: &dyn Device) -> Result<()> {
    let geo = read_geometry(dev)?;
    if geo.features_log_incompat == 0 {
        return Ok(());
    }
    let mut sb = vec![0u8; geo.sect_size as usize];
    dev.read_at(&mut sb, 0).map_err(Error::Io)?;
    let at = std::mem::offset_of!(xfs_format::sb::Dsb, sb_features_log_incompat);
    sb[at..at + 4].copy_from_slice(&0u32.to_be_bytes());
    xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
    dev.write_at(&sb, 0).map_err(Error::Io)?;
    dev.flush().map_err(Error::Io)
}

/// Blocks that in-flight log writes could have reached past the head.
const STALE_BBS: u64 = 8 * 256 * 1024 / 512;

/// Overwrites the blocks after the head that a torn write may have stamped
/// with the head's cycle: empty record headers of the previous cycle (of
/// the head's cycle once they wrap), as far as the old tail allows.
/// `tail_lsn` is the tail of the last record before the head, as found
/// (for a clean log, before the tail is moved to the head).
pub(crate) fn clear_stale(
    log: &LogDev<'_>,
    head: u64,
    cycle: u32,
    tail_lsn: u64,
    uuid: &[u8; 16],
) -> Result<()> {
    let n = stale_window(log, head, cycle, tail_lsn);
    let mut buf = vec![0u8; (n * BB) as usize];
    for i in 0..n {
        let blk = head + i;
        let (c, b) = stale_stamp(log, blk, cycle);
        let h = &mut buf[(i * BB) as usize..((i + 1) * BB) as usize];
        stamp_header(h, c, b, tail_lsn, uuid);
    }
    write_log(log, head, &buf)
}

/// Fills the 512-byte `h` with an empty record header (no operations, no
/// data) of cycle `cycle` at log block `blk`, as the kernel stamps blocks
/// past its head.
fn stamp_header(h: &mut [u8], cycle: u32, blk: u64, tail_lsn: u64, uuid: &[u8; 16]) {
    h.fill(0);
    h[0..4].copy_from_slice(&XLOG_HEADER_MAGIC_NUM.to_be_bytes());
    h[4..8].copy_from_slice(&cycle.to_be_bytes());
    h[8..12].copy_from_slice(&XLOG_VERSION_2.to_be_bytes());
    h[16..24].copy_from_slice(&xlog_assign_lsn(cycle, blk as u32).to_be_bytes());
    h[24..32].copy_from_slice(&tail_lsn.to_be_bytes());
    h[300..304].copy_from_slice(&1u32.to_be_bytes());
    h[304..320].copy_from_slice(uuid);
}

/// [`stamp_header`] with its own LSN as the tail: a block that is no part
/// of any record still needed (a log rewritten for a new UUID).
pub(crate) fn empty_header(h: &mut [u8], cycle: u32, blk: u64, uuid: &[u8; 16]) {
    stamp_header(h, cycle, blk, xlog_assign_lsn(cycle, blk as u32), uuid);
}

/// How many blocks past `head` [`clear_stale`] stamps: as many as
/// in-flight log writes could reach, never up to the tail.
fn stale_window(log: &LogDev<'_>, head: u64, cycle: u32, tail_lsn: u64) -> u64 {
    let (tc, tb) = ((tail_lsn >> 32) as u32, u64::from(tail_lsn as u32));
    let dist = if tc == cycle {
        tb + log.nbb - head
    } else {
        tb.saturating_sub(head)
    };
    dist.min(STALE_BBS)
}

/// The cycle and block number [`clear_stale`] stamps on block `blk` (past
/// the log's end once it wraps): the previous pass's cycle before the
/// wrap, the head's after it.
fn stale_stamp(log: &LogDev<'_>, blk: u64, cycle: u32) -> (u32, u64) {
    if blk >= log.nbb {
        (cycle, blk - log.nbb)
    } else {
        (cycle.wrapping_sub(1), blk)
    }
}

/// Whether some block [`clear_stale`] would stamp carries another cycle
/// than the one it would stamp: a block of the head's cycle that a torn
/// write left, or the zeroed blocks after the first record of a log that
/// libxfs cleared. The logs mkfs.xfs, the kernel and xfskit leave carry
/// the right cycles already and need no write.
pub(crate) fn stale_ahead(log: &LogDev<'_>, head: u64, cycle: u32, tail_lsn: u64) -> Result<bool> {
    let n = stale_window(log, head, cycle, tail_lsn);
    const CHUNK: u64 = 256;
    let mut i = 0;
    while i < n {
        let c = CHUNK.min(n - i);
        let b = log.read(head + i, c)?;
        for j in 0..c {
            let want = stale_stamp(log, head + i + j, cycle).0;
            if super::record::cycle_of(&b[(j * BB) as usize..]) != want {
                return Ok(true);
            }
        }
        i += c;
    }
    Ok(false)
}

fn write_log(log: &LogDev<'_>, blk: u64, buf: &[u8]) -> Result<()> {
    let n = buf.len() as u64 / BB;
    let blk = blk % log.nbb;
    let first = (log.nbb - blk).min(n);
    let (a, b) = buf.split_at((first * BB) as usize);
    log.dev
        .write_at(a, log.start + blk * BB)
        .map_err(Error::Io)?;
    if !b.is_empty() {
        log.dev.write_at(b, log.start).map_err(Error::Io)?;
    }
    Ok(())
}

/// Writes an unmount record at `head`: a header and one data block with
/// the single unmount operation. Its tail is itself.
pub fn write_unmount(
    log: &LogDev<'_>,
    head: u64,
    cycle: u32,
    prev: u64,
    uuid: &[u8; 16],
) -> Result<()> {
    let lsn = xlog_assign_lsn(cycle, head as u32);
    let mut rec = vec![0u8; 2 * BB as usize];
    let (h, d) = rec.split_at_mut(BB as usize);
    // The operation: tid, length 8, client "log", flag "unmount"; then the
    // payload, its magic in host order.
    d[0..4].copy_from_slice(&0x5853_4b52u32.to_be_bytes());
    d[4..8].copy_from_slice(&8u32.to_be_bytes());
    d[8] = XFS_LOG;
    d[9] = XLOG_UNMOUNT_TRANS;
    d[12..14].copy_from_slice(&XLOG_UNMOUNT_TYPE.to_le_bytes());
    h[0..4].copy_from_slice(&XLOG_HEADER_MAGIC_NUM.to_be_bytes());
    h[4..8].copy_from_slice(&cycle.to_be_bytes());
    h[8..12].copy_from_slice(&XLOG_VERSION_2.to_be_bytes());
    h[12..16].copy_from_slice(&(BB as u32).to_be_bytes());
    h[16..24].copy_from_slice(&lsn.to_be_bytes());
    h[24..32].copy_from_slice(&lsn.to_be_bytes());
    h[36..40].copy_from_slice(&(prev as u32).to_be_bytes());
    h[40..44].copy_from_slice(&1u32.to_be_bytes());
    // The data block's first word moves to the cycle data; the block
    // carries the cycle (one more if it wraps to the log's start).
    h[44..48].copy_from_slice(&d[0..4]);
    let dcycle = if head + 1 >= log.nbb {
        cycle.wrapping_add(1)
    } else {
        cycle
    };
    d[0..4].copy_from_slice(&dcycle.to_be_bytes());
    h[300..304].copy_from_slice(&1u32.to_be_bytes());
    h[304..320].copy_from_slice(uuid);
    h[320..324].copy_from_slice(&(32768u32).to_be_bytes());
    let crc = xlog_rec_crc(h, &[], d);
    h[32..36].copy_from_slice(&crc.to_le_bytes());
    write_log(log, head, &rec)
}

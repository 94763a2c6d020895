//! The log writer: checkpoints of the committed item list written to the
//! internal log ahead of any in-place write, the head and tail, log space,
//! and the unmount record that leaves the log clean.
//!
//! Write-ahead order: a checkpoint is written at the head and flushed
//! before the writeback may write anything it covers in place; buffers are
//! stamped at writeback with the LSN of the last checkpoint that logged
//! them. When a writeback's writes have returned, the tail may move to the
//! head as it was when that writeback took its buffers, once a flush has
//! made those writes durable (the next checkpoint flushes first). A sync
//! ends with an unmount record, so a synced image has a clean log.

use super::buftype::BufKind;
use super::cil::{self, Cil, ClusterGeo, DirtyMap};
use super::item_inode::Icreate;
use super::pack::{self as record, Cursor, LogGeo, Op};
use crate::dev::Device;
use crate::error::{Error, Result};
use crate::geometry::{Geometry, Ino};
use std::collections::BTreeMap;
use std::sync::Arc;
use xfs_format::log::{
    XFS_LOG, XFS_TRANSACTION, XLOG_COMMIT_TRANS, XLOG_START_TRANS, XLOG_UNMOUNT_TRANS,
    XLOG_UNMOUNT_TYPE,
};

const BB: u64 = 512;
/// Largest buffer a transaction logs (a 64 KiB directory block).
const MAX_BUF: u64 = 64 * 1024;

/// Counts of what the log writer wrote, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Log records written.
    pub records: u64,
    /// Bytes written to the log (records with their headers and padding).
    pub bytes: u64,
    /// Unmount records written.
    pub unmounts: u64,
}

/// The log writer's state.
pub(crate) struct Journal {
    geo: LogGeo,
    cg: ClusterGeo,
    cur: Cursor,
    /// The tail the next record names.
    tail: u64,
    /// A later tail, usable once the writes behind it are flushed.
    pending_tail: Option<u64>,
    /// What the next checkpoint holds.
    pub cil: Cil,
    /// Buffers the live log holds: byte offset -> (bytes, LSN last logged).
    logged: BTreeMap<u64, (u32, u64)>,
    tid: u32,
    stats: LogStats,
    /// Nothing changed since the last unmount record.
    clean: bool,
    geometry: Geometry,
    /// Recovery's work after replay continues a dirty log: the tail stays
    /// at the replayed log's tail, whose intents are not all done yet,
    /// until [`Journal::unpin`].
    pinned: bool,
    /// No checkpoint is wanted until [`Journal::release`]: the changes
    /// committed meanwhile must reach the log together (a mapping
    /// exchange that recovery finishes in several transactions).
    held: bool,
    /// Intents the written log holds without their done item: (item
    /// type, id) -> LSN of the checkpoint that logged it. The tail never
    /// moves past the oldest, and no unmount record is written while
    /// any is left (the kernel's AIL keeps an unfinished intent, and so
    /// the log tail, until its done item is committed).
    live: BTreeMap<(u16, u64), u64>,
    /// The next intent id [`Journal::intent_id`] gives.
    next_id: u64,
}

/// The (intent type, id) an intent or done item's format region names,
/// and whether it is the intent (else its done item). Every intent and
/// done format of the log keeps its id at byte 8; a done item's type is
/// its intent's plus one.
fn intent_key(region: &[u8]) -> Option<((u16, u64), bool)> {
    use xfs_format::log_item::*;
    let ty = u16::from_le_bytes(region.get(..2)?.try_into().ok()?);
    let id = u64::from_le_bytes(region.get(8..16)?.try_into().ok()?);
    match ty {
        XFS_LI_EFI | XFS_LI_RUI | XFS_LI_CUI | XFS_LI_BUI | XFS_LI_ATTRI | XFS_LI_XMI
        | XFS_LI_EFI_RT | XFS_LI_RUI_RT => Some(((ty, id), true)),
        XFS_LI_EFD | XFS_LI_RUD | XFS_LI_CUD | XFS_LI_BUD | XFS_LI_ATTRD | XFS_LI_XMD
        | XFS_LI_EFD_RT | XFS_LI_RUD_RT => Some(((ty - 1, id), false)),
        _ => None,
    }
}

/// Where the log head was found when the filesystem was opened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadPos {
    pub cycle: u32,
    pub head: u64,
    pub last_record: Option<u64>,
}

impl Journal {
    /// A writer continuing a clean log whose head is at `pos`; the log's
    /// first byte is at `start_bytes` of the device written to (see
    /// [`crate::log::log_region`]).
    pub(crate) fn new(geo: &Geometry, start_bytes: u64, pos: HeadPos) -> Result<Journal> {
        let nbb = u64::from(geo.log_blocks) * u64::from(geo.block_size) / BB;
        let sunit = if geo.log_sunit > 1 { geo.log_sunit } else { 0 };
        let roundoff = (sunit as usize).max(geo.log_sect_size as usize).max(512);
        let h_size = (roundoff as u32).max(32 * 1024);
        if nbb < 64 || pos.head >= nbb {
            return Err(Error::Unsupported(format!(
                "a log of {nbb} blocks with its head at {}",
                pos.head
            )));
        }
        let bpc = geo.blocks_per_cluster();
        if bpc > 1 && geo.inode_align < bpc {
            return Err(Error::Unsupported(format!(
                "journaling inodes whose clusters ({bpc} blocks) are not chunk-aligned"
            )));
        }
        let lg = LogGeo {
            start_bytes,
            nbb,
            roundoff,
            h_size,
            uuid: geo.uuid,
        };
        let cur = Cursor {
            cycle: pos.cycle,
            head: pos.head,
            prev: pos.last_record.map_or(u32::MAX, |b| b as u32),
        };
        Ok(Journal {
            geo: lg,
            cg: ClusterGeo::new(geo),
            tail: cur.lsn(),
            pending_tail: None,
            cur,
            cil: Cil::default(),
            logged: BTreeMap::new(),
            tid: 0x7866_0000,
            stats: LogStats::default(),
            clean: true,
            geometry: geo.clone(),
            pinned: false,
            held: false,
            live: BTreeMap::new(),
            // Unique among the intents of the live log: this writer's
            // start time in nanoseconds, then counting up.
            next_id: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1,
        })
    }

    /// A writer continuing a dirty log after its replay: records go at
    /// `pos`, and the tail stays at `tail_lsn` (the replayed log's) until
    /// [`Journal::unpin`], so that a crash before then replays the old
    /// log again with what was written since. No unmount record is
    /// written while pinned.
    pub(crate) fn resume(
        geo: &Geometry,
        start_bytes: u64,
        pos: HeadPos,
        tail_lsn: u64,
    ) -> Result<Journal> {
        let mut j = Journal::new(geo, start_bytes, pos)?;
        j.tail = tail_lsn;
        j.pinned = true;
        j.clean = false;
        Ok(j)
    }

    /// Lets the tail move again (recovery's work is done and logged).
    pub(crate) fn unpin(&mut self) {
        self.pinned = false;
    }

    /// Holds checkpoints back (see the `held` field); the caller forces
    /// the log itself when done ([`Journal::release`]).
    pub(crate) fn hold(&mut self) {
        self.held = true;
    }

    /// Ends [`Journal::hold`].
    pub(crate) fn release(&mut self) {
        self.held = false;
    }

    /// A new intent id, unique among the intents the live log holds.
    pub(crate) fn intent_id(&mut self) -> u64 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if !self.live.keys().any(|&(_, i)| i == id) {
                return id;
            }
        }
    }

    /// True while checkpoints are held back.
    pub(crate) fn is_held(&self) -> bool {
        self.held
    }

    /// Log size in bytes.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.geo.nbb * BB
    }

    /// Blocks between the tail and the head.
    pub(crate) fn used_blocks(&self) -> u64 {
        let tc = (self.tail >> 32) as u32;
        let tb = u64::from(self.tail as u32);
        if tc == self.cur.cycle {
            self.cur.head.saturating_sub(tb)
        } else {
            self.geo.nbb - tb + self.cur.head
        }
    }

    /// Where the next record goes (the tail once everything before it is
    /// in place).
    pub(crate) fn head_lsn(&self) -> u64 {
        self.cur.lsn()
    }

    /// Counts so far.
    pub(crate) fn stats(&self) -> LogStats {
        self.stats
    }

    /// Adds an inode to the next checkpoint.
    pub(crate) fn add_inode(&mut self, off: u64, ino: Ino, data: Arc<[u8]>) -> Result<()> {
        self.clean = false;
        let cluster = self.cg.cluster_of(&self.geometry, ino)?;
        self.cil.add_inode(off, ino, data, cluster);
        Ok(())
    }

    /// Notes that the inode at byte `off` (added to the next checkpoint)
    /// changed its `di_next_unlinked`: the checkpoint logs the field in
    /// its cluster as an inode buffer item.
    pub(crate) fn add_unlinked(&mut self, off: u64) {
        self.clean = false;
        self.cil.add_unlinked(off);
    }

    /// Adds a new inode chunk to the next checkpoint.
    pub(crate) fn add_icreate(&mut self, c: Icreate) -> Result<()> {
        self.clean = false;
        let clusters = cil::chunk_clusters(&self.geometry, &self.cg, &c)?;
        self.cil.add_icreate(c, &clusters);
        Ok(())
    }

    /// Adds a done item (its regions, the format region first) to the
    /// next checkpoint.
    pub(crate) fn add_done(&mut self, regions: Vec<Vec<u8>>) {
        self.clean = false;
        self.cil.bytes += regions.iter().map(|r| r.len() + 16).sum::<usize>();
        self.cil.done.push(regions);
    }

    /// Adds a changed dquot record to the next checkpoint.
    pub(crate) fn add_dquot(&mut self, q: cil::CilDquot) {
        self.clean = false;
        self.cil.add_dquot(q);
    }

    /// Adds a changed buffer to the next checkpoint.
    pub(crate) fn add_buf(&mut self, off: u64, data: Arc<[u8]>, map: DirtyMap, kind: BufKind) {
        self.clean = false;
        self.cil.add_buf(off, data, map, kind)
    }

    /// Bytes `lo..hi` were freed: nothing waiting for the next checkpoint
    /// there is logged, and buffers the live log holds there get cancel
    /// items.
    pub(crate) fn freed(&mut self, lo: u64, hi: u64) {
        self.clean = false;
        let from = lo.saturating_sub(MAX_BUF);
        let bufs: Vec<u64> = self
            .cil
            .bufs
            .range(from..hi)
            .filter(|(&o, b)| o + b.data.len() as u64 > lo)
            .map(|(&o, _)| o)
            .collect();
        for o in bufs {
            self.cil.bufs.remove(&o);
        }
        let inodes: Vec<u64> = self
            .cil
            .inodes
            .range(from..hi)
            .filter(|(&o, (_, d))| o + d.len() as u64 > lo)
            .map(|(&o, _)| o)
            .collect();
        for o in inodes {
            self.cil.inodes.remove(&o);
        }
        let geo = &self.geometry;
        self.cil.icreates.retain(|c| {
            let a = geo
                .agb_to_daddr(
                    crate::geometry::AgNumber(c.agno),
                    crate::geometry::AgBlock(c.agbno),
                )
                .bytes();
            let b = a + (u64::from(c.length) << geo.block_log);
            !(a < hi && lo < b)
        });
        let live: Vec<(u64, u32)> = self
            .logged
            .range(from..hi)
            .filter(|(&o, (len, _))| o + u64::from(*len) > lo)
            .map(|(&o, &(len, _))| (o, len))
            .collect();
        self.cil.freed.insert(lo, hi);
        for (o, len) in live {
            self.cil.cancels.insert(o, len);
        }
    }

    /// Bytes `lo..hi` were allocated to file data.
    pub(crate) fn allocated(&mut self, lo: u64, hi: u64) {
        self.cil.allocated.insert(lo, hi);
    }

    /// Bytes `lo..hi` lost an owner (a reference count dropped).
    pub(crate) fn unshared(&mut self, lo: u64, hi: u64) {
        self.cil.unshared.insert(lo, hi);
    }

    /// True when bytes `lo..hi` overlap blocks that lost an owner since
    /// the last checkpoint (still shared on disk until it is written).
    pub(crate) fn overlaps_unshared(&self, lo: u64, hi: u64) -> bool {
        self.cil.unshared.overlaps(lo, hi)
    }

    /// True when file data at bytes `lo..hi` goes to disk before the next
    /// checkpoint: it lies in blocks that checkpoint allocates (and that
    /// were not freed by it from another owner).
    pub(crate) fn data_first(&self, lo: u64, hi: u64) -> bool {
        if self.overlaps_freed(lo, hi) {
            return false;
        }
        // Runs of adjacent writes span several allocations (merged in
        // the set).
        self.cil.allocated.covers(lo, hi)
    }

    /// True when a run of file data at bytes `lo..hi` holds data that must
    /// reach the disk before the next checkpoint (some of it lies in
    /// blocks the checkpoint allocates).
    pub(crate) fn holds_data_first(&self, lo: u64, hi: u64) -> bool {
        self.cil.allocated.overlaps(lo, hi)
    }

    /// Where a run of file data at bytes `lo..hi` must be cut so that each
    /// piece either goes before the next checkpoint ([`Self::data_first`])
    /// or may not (in place over blocks that are not the checkpoint's).
    pub(crate) fn data_cuts(&self, lo: u64, hi: u64) -> Vec<u64> {
        let mut v = self.cil.allocated.bounds_within(lo, hi);
        v.extend(self.cil.freed.bounds_within(lo, hi));
        v.extend(self.cil.unshared.bounds_within(lo, hi));
        v.sort_unstable();
        v.dedup();
        v
    }

    /// True when bytes `lo..hi` overlap blocks freed since the last
    /// checkpoint (file data there must wait for that checkpoint).
    pub(crate) fn overlaps_freed(&self, lo: u64, hi: u64) -> bool {
        self.cil.freed.overlaps(lo, hi)
    }

    /// A writeback took every buffer logged so far; once its writes have
    /// returned, the tail may move to `lsn` (after a flush).
    pub(crate) fn written_back(&mut self, lsn: u64) {
        self.pending_tail = Some(lsn);
    }

    /// Adopts a pending tail: flushes the device so the in-place writes
    /// behind it are durable first.
    fn move_tail(&mut self, dev: &dyn Device) -> Result<()> {
        if self.pinned {
            return Ok(());
        }
        let Some(t) = self.pending_tail.take() else {
            return Ok(());
        };
        // Not past the oldest unfinished intent: recovery must see it.
        let t = match self.live.values().min() {
            Some(&oldest) if oldest < t => {
                self.pending_tail = Some(t);
                oldest
            }
            _ => t,
        };
        if t > self.tail {
            dev.flush()?;
            self.tail = t;
            self.logged.retain(|_, (_, lsn)| *lsn >= t);
        }
        Ok(())
    }

    /// Writes the committed item list as one checkpoint and flushes it.
    /// `stamp` is told the LSN of every buffer whose in-place copy must
    /// carry it. Returns the checkpoint's LSN (None: nothing to write).
    pub(crate) fn force(
        &mut self,
        dev: &dyn Device,
        mut stamp: impl FnMut(u64, usize, u64),
    ) -> Result<Option<u64>> {
        self.move_tail(dev)?;
        if self.cil.is_empty() {
            self.cil.freed.clear();
            self.cil.allocated.clear();
            self.cil.unshared.clear();
            return Ok(None);
        }
        self.tid = self.tid.wrapping_add(1);
        let tid = self.tid;
        let f = cil::format(&self.cil, &self.geometry, &self.cg, tid)?;
        let mut ops: Vec<Op<'_>> = Vec::with_capacity(f.regions.len() + 2);
        ops.push(Op {
            flags: XLOG_START_TRANS,
            client: XFS_TRANSACTION,
            data: &[],
        });
        for r in &f.regions {
            ops.push(Op {
                flags: 0,
                client: XFS_TRANSACTION,
                data: r,
            });
        }
        ops.push(Op {
            flags: XLOG_COMMIT_TRANS,
            client: XFS_TRANSACTION,
            data: &[],
        });
        let payload: usize = f.regions.iter().map(Vec::len).sum();
        let need = record::blocks_needed(&self.geo, payload, ops.len());
        // Keep a few records' worth free so the head never reaches the tail.
        let reserve = 4 * (self.geo.h_size as u64 / BB + 8);
        if self.used_blocks() + need + reserve > self.geo.nbb {
            return Err(Error::NoSpace(format!(
                "the log ({} blocks) has {} blocks in use and a checkpoint needs {need}",
                self.geo.nbb,
                self.used_blocks()
            )));
        }
        let mut cur = self.cur;
        let packed = record::pack(&self.geo, &mut cur, self.tail, tid, &ops);
        self.write(dev, &packed)?;
        dev.flush()?;
        self.cur = cur;
        let lsn = packed.first_lsn;
        self.stats.checkpoints += 1;
        for (off, len) in f.logged {
            self.logged.insert(off, (len, lsn));
        }
        for (off, lsn_off) in f.stamped {
            stamp(off, lsn_off, lsn);
        }
        for d in &self.cil.done {
            match d.first().and_then(|r| intent_key(r)) {
                Some((key, true)) => {
                    self.live.insert(key, lsn);
                }
                Some((key, false)) => {
                    self.live.remove(&key);
                }
                None => {}
            }
        }
        self.cil = Cil::default();
        Ok(Some(lsn))
    }

    /// True when the next checkpoint would not fit beside what the live
    /// log already holds, so the caller must move the tail first.
    pub(crate) fn needs_tail_move(&self) -> bool {
        if self.held {
            return false;
        }
        let est = (self.cil.bytes as u64 * 5 / 4) / BB + 64;
        self.used_blocks() + est > self.geo.nbb / 4 * 3
    }

    /// True when the next checkpoint has grown to an eighth of the log:
    /// time to write it (the kernel's background push).
    pub(crate) fn cil_full(&self) -> bool {
        !self.held && self.cil.bytes as u64 * 8 > self.size_bytes()
    }

    /// Writes the records of `p`, in at most two writes per record run
    /// (split where the log wraps).
    fn write(&mut self, dev: &dyn Device, p: &record::Packed) -> Result<()> {
        // Consecutive records are written together.
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = None;
        for (blk, rec) in &p.records {
            if run_start.is_some_and(|s: u64| s + (run.len() as u64) / BB != *blk) {
                self.write_wrapped(dev, run_start.unwrap_or(0), &run)?;
                run.clear();
                run_start = None;
            }
            if run_start.is_none() {
                run_start = Some(*blk);
            }
            run.extend_from_slice(rec);
            self.stats.records += 1;
            self.stats.bytes += rec.len() as u64;
        }
        if let Some(s) = run_start {
            self.write_wrapped(dev, s, &run)?;
        }
        Ok(())
    }

    fn write_wrapped(&self, dev: &dyn Device, blk: u64, bytes: &[u8]) -> Result<()> {
        let room = ((self.geo.nbb - blk) * BB) as usize;
        let (a, b) = bytes.split_at(bytes.len().min(room));
        dev.write_at(a, self.geo.start_bytes + blk * BB)?;
        if !b.is_empty() {
            dev.write_at(b, self.geo.start_bytes)?;
        }
        Ok(())
    }

    /// Writes an unmount record at the head and flushes: the log is clean
    /// and nothing before it is needed. Everything must be in place and
    /// flushed before (the caller's sync).
    pub(crate) fn unmount(&mut self, dev: &dyn Device) -> Result<()> {
        if self.clean || self.pinned || !self.live.is_empty() {
            return Ok(());
        }
        if !self.cil.is_empty() {
            return Err(Error::Invalid(
                "an unmount record with changes not yet checkpointed".into(),
            ));
        }
        self.pending_tail = None;
        let lsn = self.cur.lsn();
        let mut payload = Vec::with_capacity(8);
        payload.extend_from_slice(&XLOG_UNMOUNT_TYPE.to_le_bytes());
        payload.extend_from_slice(&[0u8; 6]);
        let ops = [Op {
            flags: XLOG_UNMOUNT_TRANS,
            client: XFS_LOG,
            data: &payload,
        }];
        let mut cur = self.cur;
        self.tid = self.tid.wrapping_add(1);
        let packed = record::pack(&self.geo, &mut cur, lsn, self.tid, &ops);
        self.write(dev, &packed)?;
        dev.flush()?;
        self.cur = cur;
        self.tail = lsn;
        self.logged.clear();
        self.clean = true;
        self.stats.unmounts += 1;
        Ok(())
    }
}

//! Clearing the log without replaying it, as `xfs_repair -L` clears it:
//! what `repair --zero-log` writes over a log it gives up.
//!
//! The layout is xfsprogs' (its log-clear routine, read for the facts;
//! compared with what xfs_repair 7.2 -L writes, block for block, in the
//! CLI's tests/repair.rs). Every block of the log is written. For a
//! cycle `C` above 1 (v5):
//!
//! - block 0: a record of cycle `C` holding only an unmount record, LSN
//!   `(C, 0)`, its tail `(C - 1, nbb - n)`, `n` its length: the log stripe
//!   unit in blocks, at least 2;
//! - blocks `n..512`: zero;
//! - from block 512, one record per 512 blocks (256 KiB; the last one
//!   what is left): cycle `C - 1`, LSN `(C - 1, b)` at block `b`, tail
//!   `(C - 1, b - len)`, eight header blocks (one per 32 KiB), then the
//!   unmount record, its other blocks zero but for the cycle stamp.
//!
//! The kernel's head search (and [`super::find`]) finds the head at block
//! 0 of cycle `C`: the record at block 0 is not whole behind that point,
//! so the last record is the one at the log's end, an unmount record, and
//! the log is clean. The next write goes to block 0 in cycle `C`, so every
//! metadata LSN below `(C, 0)` is behind the log, as the kernel demands
//! ("Metadata has LSN ahead of current LSN" otherwise).
//!
//! A v4 filesystem's metadata carries no LSN: its log is cleared to cycle
//! 1 as xfs_repair clears it first, the record at block 0 with LSN and
//! tail `(1, 0)` and every other block zero (the head at `(1, n)`).

use super::clean_record::unmount_record;
use super::find::LogEnds;
use super::record::{LogDev, BB};
use crate::bytes::be32;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::geometry::Geometry;
use std::io;
use std::sync::Arc;
use xfs_format::log::{xlog_assign_lsn, XLOG_HEADER_MAGIC_NUM};
use xfs_format::sb::XFS_SB_VERSION_LOGV2BIT;
use xfs_format::types::Uuid;

/// Blocks of each record after the first (xfsprogs' largest write).
const RECORD_BBS: u64 = 256 * 1024 / BB;
/// Blocks written (and read, to find the highest cycle) at a time.
const CHUNK_BBS: u64 = 8192;
/// How far the new cycle is put past the highest one found, as
/// xfs_repair puts it past the newest metadata LSN: a margin for LSNs
/// that were not seen.
pub const CYCLE_MARGIN: u32 = 3;

/// A cleared log: what each of its blocks holds.
#[derive(Debug, Clone)]
pub struct Cleared {
    /// Log size in basic blocks.
    pub nbb: u64,
    /// The cycle of the record at block 0 (1: only that record).
    pub cycle: u32,
    uuid: Uuid,
    version: u32,
    /// `sb_logsunit` in bytes.
    sunit: u32,
}

impl Cleared {
    /// The cleared log of the filesystem `geo` (its log `nbb` blocks long)
    /// with its head in `cycle`; a v4 filesystem's is always cycle 1.
    pub fn new(geo: &Geometry, nbb: u64, cycle: u32) -> Cleared {
        let v2 = geo.v5 || geo.versionnum & XFS_SB_VERSION_LOGV2BIT != 0;
        Cleared::with(geo.v5, v2, geo.uuid, geo.log_sunit, nbb, cycle)
    }

    /// [`Cleared::new`] from the superblock fields it needs: v5, a
    /// version 2 log, `sb_uuid`, `sb_logsunit` (bytes).
    fn with(v5: bool, v2: bool, uuid: [u8; 16], sunit: u32, nbb: u64, cycle: u32) -> Cleared {
        Cleared {
            nbb,
            cycle: if v5 { cycle.max(2) } else { 1 },
            uuid: Uuid(uuid),
            version: if v2 { 2 } else { 1 },
            sunit,
        }
    }

    /// The log stripe unit a record is written with (none: 0).
    fn first_sunit(&self) -> u32 {
        if self.version == 2 {
            self.sunit
        } else {
            0
        }
    }

    /// Length of the record at block 0.
    fn first_len(&self) -> u64 {
        let s = u64::from(self.first_sunit());
        s.div_ceil(BB).max(2)
    }

    /// The head the kernel finds: `cycle << 32 | block`.
    pub fn head(&self) -> u64 {
        if self.cycle == 1 {
            xlog_assign_lsn(1, self.first_len() as u32)
        } else {
            xlog_assign_lsn(self.cycle, 0)
        }
    }

    /// The record at `blk`, clipped to the log's end.
    fn record(&self, blk: u64) -> Vec<u8> {
        let c = self.cycle;
        let mut r = if blk == 0 {
            let lsn = xlog_assign_lsn(c, 0);
            let tail = if c == 1 {
                lsn
            } else {
                xlog_assign_lsn(c - 1, (self.nbb - self.first_len().min(self.nbb)) as u32)
            };
            unmount_record(&self.uuid, self.version, self.first_sunit(), lsn, tail)
        } else {
            let len = RECORD_BBS.min(self.nbb - blk);
            let lsn = xlog_assign_lsn(c - 1, blk as u32);
            let tail = xlog_assign_lsn(c - 1, (blk - len) as u32);
            let mut r = unmount_record(&self.uuid, self.version, (len * BB) as u32, lsn, tail);
            r.truncate((len * BB) as usize);
            r
        };
        r.truncate(((self.nbb - blk) * BB) as usize);
        r
    }

    /// Fills `out` with log blocks `blk..` (`out` a whole number of
    /// blocks inside the log).
    pub fn fill(&self, blk: u64, out: &mut [u8]) {
        out.fill(0);
        let end = blk + out.len() as u64 / BB;
        let mut put = |at: u64, rec: &[u8]| {
            let rend = at + rec.len() as u64 / BB;
            let (lo, hi) = (at.max(blk), rend.min(end));
            if lo < hi {
                out[((lo - blk) * BB) as usize..((hi - blk) * BB) as usize]
                    .copy_from_slice(&rec[((lo - at) * BB) as usize..((hi - at) * BB) as usize]);
            }
        };
        if blk < self.first_len() {
            put(0, &self.record(0));
        }
        if self.cycle == 1 {
            return;
        }
        let mut at = (blk / RECORD_BBS * RECORD_BBS).max(RECORD_BBS);
        while at < end.min(self.nbb) {
            put(at, &self.record(at));
            at += RECORD_BBS;
        }
    }

    /// Writes the whole log, from its first block on (flush after).
    pub fn write(&self, log: &LogDev<'_>) -> Result<()> {
        let mut buf = Vec::new();
        let mut blk = 0;
        while blk < self.nbb {
            let n = CHUNK_BBS.min(self.nbb - blk);
            buf.resize((n * BB) as usize, 0);
            self.fill(blk, &mut buf);
            log.dev
                .write_at(&buf, log.start + blk * BB)
                .map_err(Error::Io)?;
            blk += n;
        }
        Ok(())
    }
}

/// The highest cycle the log shows: its head's (as found by the kernel's
/// search, when it can be), or any record header's of this filesystem
/// whose LSN names its own cycle, whichever is higher. The whole log is
/// read: a corrupt log's head may not be found, and a record beyond it
/// may carry a higher cycle.
pub fn highest_cycle(log: &LogDev<'_>, ends: Option<&LogEnds>, uuid: &[u8; 16]) -> Result<u32> {
    let mut high = ends.filter(|e| !e.empty).map_or(0, |e| e.head_cycle);
    let mut blk = 0;
    while blk < log.nbb {
        let n = CHUNK_BBS.min(log.nbb - blk);
        let b = log.read(blk, n)?;
        for h in b.chunks_exact(BB as usize) {
            let cycle = be32(h, 4);
            let ours = &h[304..320] == uuid || h[304..320] == [0; 16];
            if be32(h, 0) == XLOG_HEADER_MAGIC_NUM
                && matches!(be32(h, 8), 1 | 2)
                && be32(h, 16) == cycle
                && ours
            {
                high = high.max(cycle);
            }
        }
        blk += n;
    }
    Ok(high)
}

/// The cycle a cleared log gets when `high` is the highest cycle seen
/// (the log's or a metadata LSN's): [`CYCLE_MARGIN`] past it. Cycles are
/// compared signed (as the kernel and libxfs compare LSNs), so one past
/// `i32::MAX` is refused.
pub fn cycle_past(high: u32) -> Result<u32> {
    high.checked_add(CYCLE_MARGIN)
        .filter(|c| *c <= i32::MAX as u32)
        .ok_or_else(|| {
            Error::corrupt(
                "log",
                Location::Log { block: 0 },
                format!("cycle {high} leaves no cycle past it to clear the log to"),
            )
        })
}

/// The device as it reads once its log (`start` bytes in, [`Cleared::nbb`]
/// blocks) is cleared: what `repair --dry-run --zero-log` checks. Only
/// reads are served; the device is never written.
pub struct ClearedView {
    inner: Arc<dyn Device>,
    start: u64,
    log: Cleared,
}

impl ClearedView {
    /// `inner` seen with the log at byte `start` cleared as `log`.
    pub fn new(inner: Arc<dyn Device>, start: u64, log: Cleared) -> ClearedView {
        ClearedView { inner, start, log }
    }
}

impl Device for ClearedView {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)?;
        let end = off + buf.len() as u64;
        let log_end = self.start + self.log.nbb * BB;
        let (lo, hi) = (off.max(self.start), end.min(log_end));
        if lo >= hi {
            return Ok(());
        }
        let first = (lo - self.start) / BB;
        let last = (hi - self.start).div_ceil(BB);
        let mut blocks = vec![0u8; ((last - first) * BB) as usize];
        self.log.fill(first, &mut blocks);
        let skip = (lo - self.start - first * BB) as usize;
        buf[(lo - off) as usize..(hi - off) as usize]
            .copy_from_slice(&blocks[skip..skip + (hi - lo) as usize]);
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the view of a cleared log is read-only",
        ))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn will_need(&self, off: u64, len: u64) {
        self.inner.will_need(off, len)
    }
    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn cleared(v5: bool, sunit: u32, nbb: u64, cycle: u32) -> Cleared {
        Cleared::with(v5, true, [9; 16], sunit, nbb, cycle)
    }

    #[test]
    fn v5_layout() {
        let nbb = 2048 + 8;
        let c = cleared(true, 1, nbb, 4);
        let mut b = vec![0u8; (nbb * BB) as usize];
        c.fill(0, &mut b);
        let blk = |i: u64| &b[(i * BB) as usize..((i + 1) * BB) as usize];
        // Block 0: cycle 4, tail at the last pass's end.
        assert_eq!(be32(blk(0), 0), XLOG_HEADER_MAGIC_NUM);
        assert_eq!(be32(blk(0), 4), 4);
        assert_eq!(
            &blk(0)[24..32],
            &xlog_assign_lsn(3, nbb as u32 - 2).to_be_bytes()
        );
        assert_eq!(be32(blk(1), 0), 4);
        assert!(blk(2).iter().all(|&x| x == 0) && blk(511).iter().all(|&x| x == 0));
        // The records of cycle 3 every 512 blocks, the last one 8 blocks.
        for at in [512, 1024, 1536, 2048] {
            assert_eq!(be32(blk(at), 0), XLOG_HEADER_MAGIC_NUM, "{at}");
            assert_eq!(be32(blk(at), 4), 3);
            assert_eq!(
                &blk(at)[16..24],
                &xlog_assign_lsn(3, at as u32).to_be_bytes()
            );
        }
        assert_eq!(&blk(2048)[24..32], &xlog_assign_lsn(3, 2040).to_be_bytes());
        assert_eq!(be32(blk(2048), 320), 32768);
        assert_eq!(be32(blk(1024), 12), 256 * 1024 - 8 * 512);
        for i in (512..nbb).filter(|i| i % 512 != 0) {
            assert_eq!(be32(blk(i), 0), 3, "block {i}");
        }
        // A read of any range gives the same bytes.
        let mut part = vec![0u8; 700 * BB as usize];
        c.fill(300, &mut part);
        assert_eq!(&part[..], &b[300 * BB as usize..1000 * BB as usize]);
        assert_eq!(c.head(), xlog_assign_lsn(4, 0));
    }

    #[test]
    fn v4_is_cleared_to_cycle_1() {
        let c = cleared(false, 0, 4096, 9);
        let mut b = vec![0u8; 4096 * BB as usize];
        c.fill(0, &mut b);
        assert_eq!(be32(&b, 4), 1);
        assert_eq!(&b[16..24], &b[24..32]);
        assert!(b[1024..].iter().all(|&x| x == 0));
        assert_eq!(c.head(), xlog_assign_lsn(1, 2));
    }

    #[test]
    fn the_kernel_search_finds_a_clean_head_at_block_0() {
        let nbb = 4096u64;
        let dev = MemDevice::new((nbb * BB) as usize);
        let c = cleared(true, 1, nbb, 7);
        let log = LogDev {
            dev: &dev,
            start: 0,
            nbb,
        };
        c.write(&log).unwrap();
        let e = crate::log::find::find_ends(&log).unwrap();
        assert!(e.clean);
        assert_eq!((e.head_cycle, e.head_blk), (7, 0));
        assert_eq!(highest_cycle(&log, Some(&e), &[9; 16]).unwrap(), 7);
        // Through the view, the same.
        let view = ClearedView::new(Arc::new(MemDevice::new((nbb * BB) as usize)), 0, c);
        let log = LogDev {
            dev: &view,
            start: 0,
            nbb,
        };
        let e = crate::log::find::find_ends(&log).unwrap();
        assert!(e.clean && e.head_blk == 0 && e.head_cycle == 7);
    }

    #[test]
    fn cycles_past_i32_max_are_refused() {
        assert_eq!(cycle_past(1).unwrap(), 4);
        assert!(cycle_past(i32::MAX as u32 - 1).is_err());
    }
}

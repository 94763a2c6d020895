//! The internal log, as far as reading needs it: is it clean?
//!
//! The log is a circular run of 512-byte basic blocks. Every block written
//! in pass N of the log carries N in its first word (record headers carry it
//! in `h_cycle`), so the head is where the cycle number drops. The
//! filesystem is clean when the last record before the head is an unmount
//! record. Cost: a binary search (O(log n) reads of 512 bytes) and one
//! bounded read before the head, never the whole log.

pub mod attr;
pub mod clear;
pub mod cow;
pub mod describe;
pub mod dinode;
pub mod exchange;
pub mod find;
pub mod intents;
pub mod record;
pub mod recover;
pub mod replay;
mod replay_dquot;
mod replay_inode;
pub mod resv;
mod sbcount;
pub mod stamp;
pub mod trans;
pub mod unlinked;

pub use find::LogEnds;
pub use replay::ReplayStats;
pub use trans::LogContents;
pub use xfs_format::log_item::item_type_name;

use crate::bytes::be32;
use crate::dev::overlay::Overlay;
use crate::dev::Device;
use crate::error::Result;
use crate::error::{Error, Location};
use crate::fs::Fs;
use crate::geometry::Daddr;
use crate::geometry::Geometry;

use xfs_format::log::{
    XlogOpHeader, XlogRecHeader, XLOG_HEADER_CYCLE_SIZE, XLOG_HEADER_MAGIC_NUM, XLOG_UNMOUNT_TRANS,
};
use zerocopy::FromBytes;

pub(crate) mod buftype;
pub(crate) mod cil;
pub(crate) mod clean_record;
pub(crate) mod item_inode;
pub(crate) mod journal;
mod pack;

pub use journal::LogStats;

/// What the log says about the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogState {
    /// The last record is an unmount record.
    Clean,
    /// The log was never written (all zeros).
    Empty,
    /// The log lives on another device; it cannot be checked.
    External,
    /// Changes in the log may not be in place; the reason says why we think so.
    Dirty(String),
}

const BB: u64 = 512;
/// How far back from the head we look for the last record header:
/// the largest record (256 KiB of data plus its headers) and then some.
const SEARCH_BACK_BBS: u64 = 1024;
/// Blocks read at a time while looking back.
const BACK_CHUNK_BBS: u64 = 16;

struct LogReader<'a> {
    fs: &'a Fs,
    start: Daddr,
    nbb: u64,
}

impl LogReader<'_> {
    fn read(&self, blk: u64, n: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; (n * BB) as usize];
        self.fs.read_bytes((self.start.0 + blk) * BB, &mut buf)?;
        Ok(buf)
    }

    /// The cycle number stamped on basic block `blk`.
    fn cycle(&self, blk: u64) -> Result<u32> {
        let b = self.read(blk, 1)?;
        Ok(cycle_of(&b))
    }
}

fn cycle_of(block: &[u8]) -> u32 {
    if be32(block, 0) == XLOG_HEADER_MAGIC_NUM {
        be32(block, 4)
    } else {
        be32(block, 0)
    }
}

/// What an external log without its device is refused with.
pub const NEEDS_LOGDEV: &str = "the filesystem has an external log: needs the log device: --logdev";

/// Where the log of the filesystem `geo` is on `dev`: its first byte and
/// its length in basic blocks. An internal log is inside the data
/// section; an external one (`sb_logstart` 0) is on the log device that
/// `dev` carries beside the data device ([`crate::dev::WithLog`]), at
/// its start.
pub fn log_region(dev: &dyn Device, geo: &Geometry) -> Result<(u64, u64)> {
    let nbb = u64::from(geo.log_blocks) * u64::from(geo.block_size) / BB;
    if geo.log_start.0 == 0 {
        let Some((base, len)) = dev.log_base() else {
            return Err(Error::Unsupported(NEEDS_LOGDEV.into()));
        };
        if geo.log_blocks == 0 || len < nbb * BB {
            return Err(Error::Invalid(format!(
                "the log device has {len} bytes, but the log needs {} ({} blocks of {} bytes)",
                nbb * BB,
                geo.log_blocks,
                geo.block_size
            )));
        }
        return Ok((base, nbb));
    }
    if geo.log_blocks == 0 || !geo.fsb_range_valid(geo.log_start, u64::from(geo.log_blocks)) {
        return Err(Error::corrupt(
            "superblock",
            Location::Sb(0),
            format!(
                "the log ({} blocks at fs block {}) lies outside the data section",
                geo.log_blocks, geo.log_start.0
            ),
        ));
    }
    Ok((geo.fsb_to_daddr(geo.log_start).bytes(), nbb))
}

/// The log of the filesystem `geo` on `dev` (see [`log_region`]).
pub fn log_dev<'a>(dev: &'a dyn Device, geo: &Geometry) -> Result<record::LogDev<'a>> {
    let (start, nbb) = log_region(dev, geo)?;
    Ok(record::LogDev { dev, start, nbb })
}

/// True when the filesystem's log is external and its device was not
/// given: the log can be neither read nor written.
pub fn log_missing(dev: &dyn Device, geo: &Geometry) -> bool {
    geo.log_start.0 == 0 && dev.log_base().is_none()
}

/// Finds the log's head and tail and reads every committed transaction
/// between them.
pub fn read_log(dev: &dyn Device, geo: &Geometry) -> Result<LogContents> {
    let log = log_dev(dev, geo)?;
    let ends = find::find_ends(&log)?;
    trans::read_log(&log, ends, &geo.uuid)
}

/// The inode number and field flags of an inode item of such a
/// transaction (`None`: not a whole inode item).
pub fn inode_item_fields(it: &trans::Item) -> Option<(u64, u32)> {
    replay_inode::inode_item_fields(it)
}

/// Applies an inode item of such a transaction over `slot` (one inode's
/// bytes) as recovery would, CRC stamped; false when it does not apply.
pub fn apply_inode_item(geo: &Geometry, it: &trans::Item, lsn: u64, slot: &mut [u8]) -> bool {
    replay_inode::apply_inode_item(geo, it, lsn, slot)
}

/// Every committed transaction the log still holds, its old passes'
/// included (see [`trans::read_whole`]): evidence of what was there before.
pub fn read_whole_log(dev: &dyn Device, geo: &Geometry) -> Result<Vec<trans::Trans>> {
    let log = log_dev(dev, geo)?;
    let ends = find::find_ends(&log)?;
    trans::read_whole(&log, &ends, &geo.uuid)
}

/// The result of replaying a log in memory.
pub struct Recovery {
    /// What was read.
    pub contents: LogContents,
    /// The replayed blocks.
    pub overlay: Overlay,
    /// What replay did.
    pub stats: ReplayStats,
}

/// Reads the log and replays it into an overlay; the device is only read.
pub fn replay(dev: &dyn Device, geo: &Geometry) -> Result<Recovery> {
    let contents = read_log(dev, geo)?;
    let mut rp = replay::Replayer::new(dev, geo);
    rp.run(&contents.transactions)?;
    if !contents.transactions.is_empty() {
        sbcount::update_sb_counters(&mut rp)?;
    }
    Ok(Recovery {
        contents,
        overlay: rp.overlay,
        stats: rp.stats,
    })
}

/// Inspects the log of an open filesystem.
pub fn inspect(fs: &Fs) -> Result<LogState> {
    locate(fs)
}

/// Where the next record of a clean or empty log goes: the cycle to
/// write, the head block and the last record's block.
/// Found by the same head and tail search recovery uses (the kernel's).
///
/// As the kernel's mount does before its first log write, the blocks
/// just past the head (as many as in-flight log buffers could reach,
/// never past the tail) are stamped with the previous cycle first, when
/// some of them carry another (the logs mkfs.xfs, the kernel and xfskit
/// leave need no write). A log
/// that xfsprogs cleared (`xfs_repair -L`, `xfs_copy`, `xfs_mdrestore`)
/// has its head at block 0 of a cycle above 1 and zeroed blocks after its
/// first record: without this, the records written there would be hidden
/// behind those zeros and the next search would not find them.
pub(crate) fn head_pos(fs: &Fs) -> Result<Option<journal::HeadPos>> {
    let geo = fs.geometry();
    if log_missing(fs.device(), geo) {
        return Ok(None);
    }
    let log = log_dev(fs.device(), geo)?;
    let ends = find::find_ends(&log)?;
    if ends.empty {
        return Ok(Some(journal::HeadPos {
            cycle: 1,
            head: 0,
            last_record: None,
        }));
    }
    if !ends.clean {
        return Ok(None);
    }
    if recover::stale_ahead(&log, ends.head_blk, ends.head_cycle, ends.tail_lsn)? {
        recover::clear_stale(
            &log,
            ends.head_blk,
            ends.head_cycle,
            ends.tail_lsn,
            &geo.uuid,
        )?;
        fs.device().flush().map_err(Error::Io)?;
    }
    Ok(Some(journal::HeadPos {
        cycle: ends.head_cycle,
        head: ends.head_blk,
        last_record: ends.last.as_ref().map(|h| h.blk),
    }))
}

fn locate(fs: &Fs) -> Result<LogState> {
    let geo = fs.geometry();
    if log_missing(fs.device(), geo) {
        return Ok(LogState::External);
    }
    let (start, nbb) = match log_region(fs.device(), geo) {
        Ok(r) => r,
        Err(Error::Corrupt { .. }) => {
            return Ok(LogState::Dirty(format!(
                "the log ({} blocks at fs block {}) lies outside the data section",
                geo.log_blocks, geo.log_start.0
            )))
        }
        Err(e) => return Err(e),
    };
    let r = LogReader {
        fs,
        start: Daddr(start / BB),
        nbb,
    };
    let first = r.cycle(0)?;
    let last = r.cycle(r.nbb - 1)?;
    if first == 0 && last == 0 {
        return Ok(LogState::Empty);
    }
    // Blocks [0, head) carry `first`; [head, end) carry the previous pass.
    let head = if first == last {
        0
    } else {
        let (mut lo, mut hi) = (0u64, r.nbb - 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if r.cycle(mid)? == first {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    };
    find_last_record(&r, head)
}

fn find_last_record(r: &LogReader<'_>, head: u64) -> Result<LogState> {
    let back = SEARCH_BACK_BBS.min(r.nbb);
    // Look back from head over `back` blocks (wrapping at the log's start),
    // read a few at a time: the last record is usually just before head.
    let first_blk = (head + r.nbb - back) % r.nbb;
    let mut chunk: (u64, Vec<u8>) = (u64::MAX, Vec::new());
    for i in (0..back).rev() {
        let lo = i - i % BACK_CHUNK_BBS;
        if chunk.0 != lo {
            let n = BACK_CHUNK_BBS.min(back - lo);
            let mut window = Vec::with_capacity((n * BB) as usize);
            // The chunk's blocks, in two reads if it wraps.
            let start = (first_blk + lo) % r.nbb;
            let tail_part = (r.nbb - start).min(n);
            window.extend(r.read(start, tail_part)?);
            if tail_part < n {
                window.extend(r.read(0, n - tail_part)?);
            }
            chunk = (lo, window);
        }
        let off = ((i - lo) * BB) as usize;
        let blk = &chunk.1[off..off + BB as usize];
        if be32(blk, 0) != XLOG_HEADER_MAGIC_NUM {
            continue;
        }
        let rec_blk = (first_blk + i) % r.nbb;
        let Ok((h, _)) = XlogRecHeader::ref_from_prefix(blk) else {
            continue;
        };
        let logops = h.h_num_logops.get();
        let hsize = h.h_size.get();
        let cycle_size = XLOG_HEADER_CYCLE_SIZE as u32;
        let hdr_blocks = if h.h_version.get() & 2 != 0 && hsize > cycle_size {
            u64::from(hsize.div_ceil(cycle_size))
        } else {
            1
        };
        let data_blk = (rec_blk + hdr_blocks) % r.nbb;
        let data = r.read(data_blk, 1)?;
        let Ok((op, _)) = XlogOpHeader::ref_from_prefix(&data[..]) else {
            continue;
        };
        let flags = op.oh_flags;
        if logops == 1 && flags & XLOG_UNMOUNT_TRANS != 0 {
            return Ok(LogState::Clean);
        }
        return Ok(LogState::Dirty(format!(
            "the last log record (log block {rec_blk}, {logops} operations) is not an unmount record"
        )));
    }
    Ok(LogState::Dirty(format!(
        "no log record header found before the log head at block {head}"
    )))
}

/// The filesystem UUID the first record header in the first 64 basic
/// blocks of a log device names (`None` when there is none: a log never
/// written, or a device that is no log).
pub fn first_record_uuid(log: &dyn Device) -> Result<Option<[u8; 16]>> {
    let n = 64u64.min(log.len() / BB);
    let mut buf = vec![0u8; (n * BB) as usize];
    log.read_at(&mut buf, 0).map_err(Error::Io)?;
    for blk in buf.chunks_exact(BB as usize) {
        if be32(blk, 0) == XLOG_HEADER_MAGIC_NUM {
            let mut u = [0u8; 16];
            u.copy_from_slice(&blk[304..320]);
            return Ok(Some(u));
        }
    }
    Ok(None)
}

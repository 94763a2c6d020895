//! Finding the head and the tail of the log, as the kernel does at mount.
//!
//! The head is where the cycle number drops: a binary search between the
//! first and the last block, then a scan of the few MiB before that point
//! for a block of the older cycle (log writes may complete out of order),
//! then a step back to the last record header whose record ends there
//! (an incomplete record is not part of the log). The records just behind
//! the head are then read whole: one whose CRC does not match was torn by
//! the crash, and the head moves back to it. The tail is the tail LSN of
//! the last record before the head; the log is clean when that record is
//! an unmount record ending at the head.

use super::record::{cycle_of, is_header, parse_header, read_record, LogDev, RecHeader};
use crate::error::{Error, Location, Result};
use xfs_format::log::{block_lsn, cycle_lsn, XlogOpHeader, XLOG_UNMOUNT_TRANS};
use zerocopy::FromBytes;

/// Blocks that up to 8 in-flight log buffers of 256 KiB can cover.
const SCAN_ALL_ICLOGS_BBS: u64 = 8 * 256 * 1024 / 512;
/// Blocks of the largest record.
const SCAN_ONE_RECORD_BBS: u64 = 256 * 1024 / 512;
/// Records behind the head whose CRC decides where a torn write ends.
const MAX_ICLOGS: usize = 8;

/// Where the live part of the log is.
#[derive(Debug, Clone)]
pub struct LogEnds {
    /// First block past the last complete record.
    pub head_blk: u64,
    /// Cycle of the pass the head is in (the next record would carry it).
    pub head_cycle: u32,
    /// First block of the oldest record still needed.
    pub tail_blk: u64,
    /// `h_tail_lsn` of the last record.
    pub tail_lsn: u64,
    /// Header of the last complete record before the head.
    pub last: Option<RecHeader>,
    /// True when the last record is an unmount record ending at the head.
    pub clean: bool,
    /// True when the log was never written.
    pub empty: bool,
    /// Log blocks of records dropped at the head because their CRC did not
    /// match (a write the crash tore).
    pub torn: Vec<u64>,
}

/// Finds the first block in `[start, start + n)` whose cycle is `cycle`.
fn find_cycle(log: &LogDev<'_>, start: u64, n: u64, cycle: u32) -> Result<Option<u64>> {
    const CHUNK: u64 = 256;
    let mut i = 0;
    while i < n {
        let c = CHUNK.min(n - i);
        let b = log.read(start + i, c)?;
        for j in 0..c {
            if cycle_of(&b[(j * 512) as usize..]) == cycle {
                return Ok(Some(start + i + j));
            }
        }
        i += c;
    }
    Ok(None)
}

/// Looks back from `end` (exclusive) to `start` for a record header and
/// checks that its record ends exactly `extra` blocks before `end`... as
/// the kernel's "verify log record" step: returns the block where the log
/// really ends (the header itself when its record is incomplete), or None
/// when no header lies in the range.
fn back_to_record(log: &LogDev<'_>, start: u64, end: u64, extra: u64) -> Result<Option<u64>> {
    if end <= start {
        return Ok(None);
    }
    let b = log.read(start, end - start)?;
    for i in (start..end).rev() {
        let off = ((i - start) * 512) as usize;
        let blk = &b[off..off + 512];
        if !is_header(blk) {
            continue;
        }
        let h = parse_header(blk, i, log.nbb)?;
        if end - i + extra != h.hblks + h.data_bbs() {
            return Ok(Some(i));
        }
        return Ok(Some(end));
    }
    Ok(None)
}

/// The head block, before torn records are dropped; None for a zeroed log.
fn find_head(log: &LogDev<'_>) -> Result<Option<u64>> {
    let nbb = log.nbb;
    let first = log.cycle(0)?;
    if first == 0 {
        return Ok(None);
    }
    let last = log.cycle(nbb - 1)?;
    let (mut head, stop) = if first == last {
        (nbb, last.wrapping_sub(1))
    } else {
        // Binary search for the first block of cycle `last`.
        let (mut lo, mut hi) = (0u64, nbb - 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if log.cycle(mid)? == last {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        (hi, last)
    };
    let scan = SCAN_ALL_ICLOGS_BBS.min(nbb);
    if head >= scan {
        if let Some(b) = find_cycle(log, head - scan, scan, stop)? {
            head = b;
        }
    } else {
        let start = nbb - (scan - head);
        if let Some(b) = find_cycle(log, start, scan - head, stop.wrapping_sub(1))? {
            head = b;
        } else if let Some(b) = find_cycle(log, 0, head, stop)? {
            head = b;
        }
    }
    let one = SCAN_ONE_RECORD_BBS.min(nbb);
    if head >= one {
        match back_to_record(log, head - one, head, 0)? {
            Some(b) => head = b,
            None => return Err(inconsistent(head)),
        }
    } else {
        match back_to_record(log, 0, head, 0)? {
            Some(b) => head = b,
            None => {
                let start = nbb - (one - head);
                match back_to_record(log, start, nbb, head)? {
                    Some(b) if b != nbb => head = b,
                    Some(_) => {}
                    None => return Err(inconsistent(head)),
                }
            }
        }
    }
    Ok(Some(head % nbb))
}

fn inconsistent(head: u64) -> Error {
    Error::corrupt(
        "log",
        Location::Log { block: head },
        "no record header before the head",
    )
}

/// The last record header before `head`, and whether the search wrapped
/// past the log's start to find it.
fn last_header(log: &LogDev<'_>, head: u64) -> Result<Option<(RecHeader, bool)>> {
    const CHUNK: u64 = 64;
    let nbb = log.nbb;
    let mut k = 0u64; // blocks already examined, going back from head
    while k < nbb {
        // Exclusive end of the next chunk; chunks never cross the log's start.
        let end = match (head + nbb - k % nbb) % nbb {
            0 => nbb,
            e => e,
        };
        let len = CHUNK.min(end).min(nbb - k);
        let start = end - len;
        let b = log.read(start, len)?;
        for i in (0..len).rev() {
            let off = (i * 512) as usize;
            if is_header(&b[off..off + 512]) {
                let blk = start + i;
                let h = parse_header(&b[off..off + 512], blk, nbb)?;
                return Ok(Some((h, blk >= head)));
            }
        }
        k += len;
    }
    Ok(None)
}

/// Finds head and tail. Records with a bad CRC among the last few before
/// the head are a torn write: the head moves back to the first of them.
pub fn find_ends(log: &LogDev<'_>) -> Result<LogEnds> {
    let Some(mut head) = find_head(log)? else {
        return Ok(LogEnds {
            head_blk: 0,
            head_cycle: 1,
            tail_blk: 0,
            tail_lsn: 0,
            last: None,
            clean: true,
            empty: true,
            torn: Vec::new(),
        });
    };
    let mut torn = Vec::new();
    let (mut rhead, mut wrapped) = last_header(log, head)?.ok_or_else(|| inconsistent(head))?;
    // Collect up to MAX_ICLOGS records back from the head, stopping at the
    // tail, then read them forward checking CRCs.
    let tail_blk = u64::from(block_lsn(rhead.tail_lsn));
    let mut chain = vec![rhead.blk];
    let mut at = rhead.blk;
    while chain.len() < MAX_ICLOGS && at != tail_blk {
        match last_header(log, at)? {
            Some((h, _)) if h.end_blk(log.nbb) == at => {
                at = h.blk;
                chain.push(at);
            }
            _ => break,
        }
    }
    for &blk in chain.iter().rev() {
        let rec = read_record(log, blk)?;
        // mkfs.xfs writes its record with a zero CRC: the kernel's torn
        // write check takes a zero CRC as valid, so do we.
        if !rec.crc_ok && rec.hdr.crc != 0 {
            torn.push(blk);
            head = blk;
            break;
        }
    }
    if !torn.is_empty() {
        let (h, w) = last_header(log, head)?.ok_or_else(|| inconsistent(head))?;
        rhead = h;
        wrapped = w;
    }
    let head_cycle = if wrapped {
        rhead.cycle.wrapping_add(1)
    } else {
        rhead.cycle
    };
    let mut ends = LogEnds {
        head_blk: head,
        head_cycle,
        tail_blk: u64::from(block_lsn(rhead.tail_lsn)),
        tail_lsn: rhead.tail_lsn,
        last: Some(rhead.clone()),
        clean: false,
        empty: false,
        torn,
    };
    check_tail(&ends, log.nbb)?;
    if rhead.end_blk(log.nbb) == head && rhead.num_logops == 1 {
        let d = log.read(rhead.blk + rhead.hblks, 1)?;
        if let Ok((op, _)) = XlogOpHeader::ref_from_prefix(&d[..]) {
            if op.oh_flags & XLOG_UNMOUNT_TRANS != 0 {
                ends.clean = true;
                ends.tail_blk = head;
            }
        }
    }
    Ok(ends)
}

/// The tail must lie behind the head: in the same cycle at or before it,
/// or in the previous cycle after it.
fn check_tail(e: &LogEnds, nbb: u64) -> Result<()> {
    let r = e.last.as_ref().map(|r| r.blk).unwrap_or(0);
    let bad = |d: String| Error::corrupt("log record header", Location::Log { block: r }, d);
    let (tc, tb) = (cycle_lsn(e.tail_lsn), u64::from(block_lsn(e.tail_lsn)));
    if tb >= nbb {
        return Err(bad(format!(
            "tail block {tb} lies outside the {nbb}-block log"
        )));
    }
    let ok = if tc == e.head_cycle {
        tb <= e.head_blk
    } else {
        tc.wrapping_add(1) == e.head_cycle && tb > e.head_blk
    };
    if !ok {
        return Err(bad(format!(
            "tail ({tc}, {tb}) is not behind the head ({}, {})",
            e.head_cycle, e.head_blk
        )));
    }
    Ok(())
}

//! Walking the live log from tail to head: records, their operations,
//! and the transactions those operations rebuild.
//!
//! Each record's data is a run of operations (a 12-byte header, then its
//! region). Operations carry the id of the transaction they belong to: a
//! START operation opens it (its LSN is that of the record holding the
//! START), each further operation adds a region, a region too long for one
//! record is split into CONTINUE / WAS_CONT pieces, and a COMMIT operation
//! closes it. Only committed transactions are replayed. The first region
//! of a transaction is its header ("TRAN"); each item then spans the
//! number of regions its format region announces.

use super::find::LogEnds;
use super::record::{read_record, LogDev};
use crate::error::{Error, Location, Result};
use std::collections::HashMap;
use xfs_format::log::{
    XFS_LOG, XFS_TRANSACTION, XLOG_COMMIT_TRANS, XLOG_CONTINUE_TRANS, XLOG_END_TRANS,
    XLOG_OP_HEADER_SIZE, XLOG_START_TRANS, XLOG_UNMOUNT_TRANS, XLOG_WAS_CONT_TRANS,
};
use xfs_format::log_item::{XFS_TRANS_HEADER_MAGIC, XFS_TRANS_HEADER_SIZE};

/// Most regions one item may span (a 64 KiB buffer fully dirty in
/// alternate chunks, plus its format region).
pub const MAX_REGIONS_IN_ITEM: usize = 65536 / 128 / 2 + 1;

/// One logged item: its regions, the first being its format structure.
#[derive(Debug, Clone, Default)]
pub struct Item {
    /// Regions in log order.
    pub regions: Vec<Vec<u8>>,
    /// Regions the format region announced.
    pub total: usize,
}

impl Item {
    /// The item type (first 16 bits of the format region, host order).
    pub fn item_type(&self) -> u16 {
        match self.regions.first() {
            Some(r) if r.len() >= 2 => u16::from_le_bytes([r[0], r[1]]),
            _ => 0,
        }
    }
}

/// A committed transaction.
#[derive(Debug, Clone)]
pub struct Trans {
    /// Transaction id from the operation headers.
    pub tid: u32,
    /// LSN of the record holding its START operation: the LSN its changes
    /// are replayed under.
    pub lsn: u64,
    /// Log block of that record.
    pub start_blk: u64,
    /// Log block of the record holding its COMMIT.
    pub commit_blk: u64,
    /// `th_type` of its header.
    pub trans_type: u32,
    /// Its items in log order.
    pub items: Vec<Item>,
}

/// Summary of one record, for display.
#[derive(Debug, Clone)]
pub struct RecInfo {
    /// Log block of the header.
    pub blk: u64,
    /// `h_lsn`.
    pub lsn: u64,
    /// `h_tail_lsn`.
    pub tail_lsn: u64,
    /// `h_len`.
    pub len: u32,
    /// `h_num_logops`.
    pub ops: u32,
}

/// Everything between tail and head.
#[derive(Debug, Clone)]
pub struct LogContents {
    /// Where the live log is.
    pub ends: LogEnds,
    /// Its records, tail first.
    pub records: Vec<RecInfo>,
    /// Committed transactions in commit order.
    pub transactions: Vec<Trans>,
    /// Transactions still open at the head (not replayed).
    pub uncommitted: usize,
}

struct Open {
    lsn: u64,
    start_blk: u64,
    theader: Vec<u8>,
    items: Vec<Item>,
}

fn corrupt(blk: u64, detail: String) -> Error {
    Error::corrupt("log record", Location::Log { block: blk }, detail)
}

/// Reads every record from tail to head and rebuilds the transactions.
pub fn read_log(log: &LogDev<'_>, ends: LogEnds, fs_uuid: &[u8; 16]) -> Result<LogContents> {
    let mut out = LogContents {
        ends: ends.clone(),
        records: Vec::new(),
        transactions: Vec::new(),
        uncommitted: 0,
    };
    if ends.empty || ends.clean {
        return Ok(out);
    }
    let mut open: HashMap<u32, Open> = HashMap::new();
    let mut blk = ends.tail_blk;
    let mut walked = 0u64;
    while blk != ends.head_blk {
        let rec = read_record(log, blk)?;
        if !rec.crc_ok {
            return Err(Error::BadCrc {
                what: "log record",
                location: Location::Log { block: blk },
            });
        }
        if u64::from(xfs_format::log::block_lsn(rec.hdr.lsn)) != blk {
            return Err(corrupt(
                blk,
                format!("the record's LSN {:#x} names another block", rec.hdr.lsn),
            ));
        }
        if rec.hdr.uuid != *fs_uuid && rec.hdr.uuid != [0; 16] {
            return Err(corrupt(
                blk,
                "the record belongs to another filesystem (UUID)".into(),
            ));
        }
        let size = rec.hdr.hblks + rec.hdr.data_bbs();
        walked += size;
        if walked > log.nbb {
            return Err(corrupt(
                blk,
                "records from the tail never reach the head".into(),
            ));
        }
        out.records.push(RecInfo {
            blk,
            lsn: rec.hdr.lsn,
            tail_lsn: rec.hdr.tail_lsn,
            len: rec.hdr.len,
            ops: rec.hdr.num_logops,
        });
        split_ops(&rec.data, &rec.hdr, &mut open, &mut out.transactions)?;
        blk = rec.hdr.end_blk(log.nbb);
    }
    out.uncommitted = open.len();
    Ok(out)
}

/// Every committed transaction the log still holds, the old passes' too:
/// records in LSN order, from the first whole record past the head around
/// to the head. A block that starts no readable record of this filesystem
/// (a record the newer pass partly overwrote, a torn write, zeros) is
/// stepped over, and what was open across it is dropped, so no
/// transaction is rebuilt with a region missing. For reading evidence
/// (what was there before); recovery reads [`read_log`]'s tail to head.
/// Reads the whole log once.
pub fn read_whole(log: &LogDev<'_>, ends: &LogEnds, fs_uuid: &[u8; 16]) -> Result<Vec<Trans>> {
    let mut out = Vec::new();
    if ends.empty || log.nbb == 0 {
        return Ok(out);
    }
    let mut open: HashMap<u32, Open> = HashMap::new();
    let start = ends.head_blk % log.nbb;
    // Blocks walked from the head; the walk stops where it began.
    let mut walked = 0u64;
    const CHUNK: u64 = 256;
    while walked < log.nbb {
        let blk = (start + walked) % log.nbb;
        let rec = read_record(log, blk).ok().filter(|r| {
            r.crc_ok
                && u64::from(xfs_format::log::block_lsn(r.hdr.lsn)) == blk
                && (r.hdr.uuid == *fs_uuid || r.hdr.uuid == [0; 16])
        });
        let Some(rec) = rec else {
            open.clear();
            // On to the next block that starts with a header's magic.
            let mut step = 1;
            'find: while walked + step < log.nbb {
                let n = CHUNK.min(log.nbb - walked - step);
                let b = log.read((blk + step) % log.nbb, n)?;
                for j in 0..n {
                    if super::record::is_header(&b[(j * 512) as usize..]) {
                        step += j;
                        break 'find;
                    }
                }
                step += n;
            }
            walked += step;
            continue;
        };
        let size = rec.hdr.hblks + rec.hdr.data_bbs();
        if walked + size > log.nbb {
            // It would run over the head: the newer pass cut it.
            break;
        }
        if split_ops(&rec.data, &rec.hdr, &mut open, &mut out).is_err() {
            open.clear();
        }
        walked += size;
    }
    Ok(out)
}

fn split_ops(
    data: &[u8],
    hdr: &super::record::RecHeader,
    open: &mut HashMap<u32, Open>,
    done: &mut Vec<Trans>,
) -> Result<()> {
    let blk = hdr.blk;
    let mut off = 0usize;
    for n in 0..hdr.num_logops {
        let Some(h) = data.get(off..off + XLOG_OP_HEADER_SIZE) else {
            return Err(corrupt(
                blk,
                format!("operation {n} of {} starts past the data", hdr.num_logops),
            ));
        };
        let tid = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let (client, flags) = (h[8], h[9]);
        off += XLOG_OP_HEADER_SIZE;
        let Some(region) = data.get(off..off.saturating_add(len)) else {
            return Err(corrupt(
                blk,
                format!("operation {n} ({len} bytes) runs past the record's data"),
            ));
        };
        off += len;
        if client != XFS_TRANSACTION && client != XFS_LOG {
            return Err(corrupt(
                blk,
                format!("operation {n} has client id {client:#x}"),
            ));
        }
        let Some(t) = open.get_mut(&tid) else {
            // Operations of transactions that started before the tail are
            // skipped; a START opens a new one.
            if flags & XLOG_START_TRANS != 0 {
                open.insert(
                    tid,
                    Open {
                        lsn: hdr.lsn,
                        start_blk: blk,
                        theader: Vec::new(),
                        items: Vec::new(),
                    },
                );
            }
            continue;
        };
        let mut f = flags & !XLOG_END_TRANS;
        if f & XLOG_WAS_CONT_TRANS != 0 {
            f &= !XLOG_CONTINUE_TRANS;
        }
        match f {
            0 | XLOG_CONTINUE_TRANS => add_region(t, region, blk, n)?,
            XLOG_WAS_CONT_TRANS => add_cont(t, region, blk, n)?,
            XLOG_COMMIT_TRANS => {
                let t = open.remove(&tid).expect("present");
                done.push(finish(tid, t, blk)?);
            }
            XLOG_UNMOUNT_TRANS => {
                open.remove(&tid);
            }
            _ => {
                return Err(corrupt(
                    blk,
                    format!("operation {n} has unexpected flags {flags:#x}"),
                ))
            }
        }
    }
    Ok(())
}

fn add_region(t: &mut Open, region: &[u8], blk: u64, n: u32) -> Result<()> {
    if region.is_empty() {
        return Ok(());
    }
    if t.theader.is_empty() && t.items.is_empty() {
        if region.len() < 4
            || u32::from_le_bytes([region[0], region[1], region[2], region[3]])
                != XFS_TRANS_HEADER_MAGIC
        {
            return Err(corrupt(
                blk,
                format!("operation {n}: bad transaction header magic"),
            ));
        }
        if region.len() > XFS_TRANS_HEADER_SIZE {
            return Err(corrupt(
                blk,
                format!(
                    "operation {n}: transaction header of {} bytes",
                    region.len()
                ),
            ));
        }
        t.theader = region.to_vec();
        return Ok(());
    }
    let need_new = match t.items.last() {
        None => true,
        Some(it) => it.total != 0 && it.total == it.regions.len(),
    };
    if need_new {
        if region.len() < 4 {
            return Err(corrupt(
                blk,
                format!(
                    "operation {n}: item format region of {} bytes",
                    region.len()
                ),
            ));
        }
        let size = usize::from(u16::from_le_bytes([region[2], region[3]]));
        if size == 0 || size > MAX_REGIONS_IN_ITEM {
            return Err(corrupt(
                blk,
                format!("operation {n}: item announces {size} regions"),
            ));
        }
        t.items.push(Item {
            regions: Vec::with_capacity(size),
            total: size,
        });
    }
    let it = t.items.last_mut().expect("pushed");
    if it.regions.len() >= it.total {
        return Err(corrupt(
            blk,
            format!("operation {n}: item has more than {} regions", it.total),
        ));
    }
    it.regions.push(region.to_vec());
    Ok(())
}

fn add_cont(t: &mut Open, region: &[u8], blk: u64, n: u32) -> Result<()> {
    if t.items.is_empty() {
        // The rest of a split transaction header.
        if t.theader.len() + region.len() > XFS_TRANS_HEADER_SIZE {
            return Err(corrupt(
                blk,
                format!("operation {n}: transaction header overflows"),
            ));
        }
        t.theader.extend_from_slice(region);
        return Ok(());
    }
    let last = t
        .items
        .last_mut()
        .and_then(|it| it.regions.last_mut())
        .ok_or_else(|| {
            corrupt(
                blk,
                format!("operation {n}: continuation with nothing to continue"),
            )
        })?;
    last.extend_from_slice(region);
    Ok(())
}

fn finish(tid: u32, t: Open, commit_blk: u64) -> Result<Trans> {
    if t.theader.len() < 8 && !t.items.is_empty() {
        return Err(corrupt(
            t.start_blk,
            format!("transaction {tid:#x} has a short header"),
        ));
    }
    let trans_type = if t.theader.len() >= 8 {
        u32::from_le_bytes([t.theader[4], t.theader[5], t.theader[6], t.theader[7]])
    } else {
        0
    };
    Ok(Trans {
        tid,
        lsn: t.lsn,
        start_blk: t.start_blk,
        commit_blk,
        trans_type,
        items: t.items,
    })
}

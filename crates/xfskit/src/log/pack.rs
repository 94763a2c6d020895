//! Packing operations into v2 log records, as the kernel's log recovery
//! reads them.
//!
//! A record is one header sector (plus one extended header sector per
//! further 32 KiB of `h_size`), then `h_len` bytes of data: operation
//! headers, each followed by its region. The data is padded to the record
//! alignment (the log stripe unit or sector size). The first word of every
//! 512-byte block of data is moved to the header's cycle data and replaced
//! by the cycle number, so a torn record shows up as a block of the
//! previous pass. Blocks of a record that wraps past the log's end carry
//! the next cycle. The CRC covers the header, the extended headers and the
//! data as stored.

use crate::bytes::put_be32;
use xfs_format::log::{
    xlog_assign_lsn, xlog_rec_crc, XlogOpHeader, XLOG_CONTINUE_TRANS, XLOG_CYCLE_DATA_WORDS,
    XLOG_END_TRANS, XLOG_FMT_LINUX_LE, XLOG_HEADER_CYCLE_SIZE, XLOG_HEADER_MAGIC_NUM,
    XLOG_HEADER_SIZE, XLOG_OP_HEADER_SIZE, XLOG_VERSION_2, XLOG_WAS_CONT_TRANS,
};
use zerocopy::IntoBytes;

const BB: usize = 512;

/// Where the log is and how records are shaped.
#[derive(Debug, Clone)]
pub(crate) struct LogGeo {
    /// Byte offset of the log's first block on the device.
    pub start_bytes: u64,
    /// Length of the log in 512-byte blocks.
    pub nbb: u64,
    /// Records start and end on multiples of this many bytes.
    pub roundoff: usize,
    /// The in-core buffer size recorded in `h_size` (bounds `h_len`).
    pub h_size: u32,
    /// The filesystem UUID (`sb_uuid`).
    pub uuid: [u8; 16],
}

impl LogGeo {
    /// Header sectors per record.
    pub(crate) fn hdr_sectors(&self) -> usize {
        (self.h_size as usize)
            .div_ceil(XLOG_HEADER_CYCLE_SIZE)
            .max(1)
    }
}

/// One operation: a region with its flags and client.
pub(crate) struct Op<'a> {
    pub flags: u8,
    pub client: u8,
    pub data: &'a [u8],
}

/// Where the next record goes and what came before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Cycle of the pass being written.
    pub cycle: u32,
    /// Next record's block.
    pub head: u64,
    /// Block of the last record written (u32::MAX: none known).
    pub prev: u32,
}

impl Cursor {
    /// LSN of the next record.
    pub(crate) fn lsn(&self) -> u64 {
        xlog_assign_lsn(self.cycle, self.head as u32)
    }

    /// Moves past `bbs` blocks, wrapping into the next cycle.
    fn advance(&mut self, bbs: u64, nbb: u64) {
        self.prev = self.head as u32;
        self.head += bbs;
        if self.head >= nbb {
            self.head -= nbb;
            self.cycle += 1;
        }
    }
}

/// Records packed in memory, each with its log block, ready to write.
pub(crate) struct Packed {
    /// (first block, bytes) of each record, in log order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// LSN of the first record.
    pub first_lsn: u64,
}

impl Packed {
    /// Total blocks.
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> u64 {
        self.records
            .iter()
            .map(|(_, b)| (b.len() / BB) as u64)
            .sum()
    }
}

/// Blocks the ops would take, an upper bound (for space checks).
pub(crate) fn blocks_needed(geo: &LogGeo, payload_bytes: usize, nops: usize) -> u64 {
    let data = payload_bytes + nops * XLOG_OP_HEADER_SIZE;
    let per = geo.h_size as usize - XLOG_OP_HEADER_SIZE;
    let nrec = data.div_ceil(per).max(1);
    let bytes = nrec * (geo.hdr_sectors() * BB + geo.roundoff) + data + nrec * XLOG_OP_HEADER_SIZE;
    bytes.div_ceil(BB) as u64
}

/// Packs `ops` of transaction `tid` into records from `cur`, each record
/// naming `tail` as the log's tail. Regions longer than the room left in
/// a record continue in the next one.
pub(crate) fn pack(geo: &LogGeo, cur: &mut Cursor, tail: u64, tid: u32, ops: &[Op<'_>]) -> Packed {
    let mut out = Packed {
        records: Vec::new(),
        first_lsn: cur.lsn(),
    };
    let cap = geo.h_size as usize;
    let mut data: Vec<u8> = Vec::with_capacity(cap);
    let mut nops = 0u32;
    for op in ops {
        let mut rest = op.data;
        let mut first = true;
        loop {
            let room = cap - data.len();
            let fits_whole = room >= XLOG_OP_HEADER_SIZE + rest.len();
            if !fits_whole && room < XLOG_OP_HEADER_SIZE + 1 {
                out.records
                    .push(seal(geo, cur, tail, std::mem::take(&mut data), nops));
                data.reserve(cap);
                nops = 0;
                continue;
            }
            let take = rest.len().min(room - XLOG_OP_HEADER_SIZE);
            let mut flags = if first { op.flags } else { XLOG_WAS_CONT_TRANS };
            if take < rest.len() {
                flags |= XLOG_CONTINUE_TRANS;
            } else if !first {
                flags |= XLOG_END_TRANS;
            }
            let h = XlogOpHeader {
                oh_tid: tid.into(),
                oh_len: (take as u32).into(),
                oh_clientid: op.client,
                oh_flags: flags,
                oh_res2: [0; 2],
            };
            data.extend_from_slice(h.as_bytes());
            data.extend_from_slice(&rest[..take]);
            nops += 1;
            rest = &rest[take..];
            first = false;
            if rest.is_empty() {
                break;
            }
        }
    }
    if nops > 0 {
        out.records.push(seal(geo, cur, tail, data, nops));
    }
    out
}

/// Turns record data into a whole record at `cur` and moves `cur` on.
fn seal(geo: &LogGeo, cur: &mut Cursor, tail: u64, mut data: Vec<u8>, nops: u32) -> (u64, Vec<u8>) {
    let padded = data.len().div_ceil(geo.roundoff).max(1) * geo.roundoff;
    data.resize(padded, 0);
    let hdrs = geo.hdr_sectors();
    let blk = cur.head;
    let lsn = cur.lsn();
    let nblocks = padded / BB;
    // Displaced first words, then the cycle stamp (the next cycle past the
    // log's end).
    let mut words = Vec::with_capacity(nblocks);
    let hdr_bbs = hdrs as u64;
    for i in 0..nblocks {
        let w = &mut data[i * BB..i * BB + 4];
        words.push(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        let abs = blk + hdr_bbs + i as u64;
        let c = if abs >= geo.nbb {
            cur.cycle + 1
        } else {
            cur.cycle
        };
        w.copy_from_slice(&c.to_be_bytes());
    }
    let mut rec = vec![0u8; hdrs * XLOG_HEADER_SIZE + padded];
    {
        let h = &mut rec[..XLOG_HEADER_SIZE];
        put_be32(h, 0, XLOG_HEADER_MAGIC_NUM);
        put_be32(h, 4, cur.cycle);
        put_be32(h, 8, XLOG_VERSION_2);
        put_be32(h, 12, padded as u32);
        h[16..24].copy_from_slice(&lsn.to_be_bytes());
        h[24..32].copy_from_slice(&tail.to_be_bytes());
        put_be32(h, 36, cur.prev);
        put_be32(h, 40, nops);
        for (i, w) in words.iter().take(XLOG_CYCLE_DATA_WORDS).enumerate() {
            put_be32(h, 44 + 4 * i, *w);
        }
        put_be32(h, 300, XLOG_FMT_LINUX_LE);
        h[304..320].copy_from_slice(&geo.uuid);
        put_be32(h, 320, geo.h_size);
    }
    for x in 1..hdrs {
        let h = &mut rec[x * XLOG_HEADER_SIZE..(x + 1) * XLOG_HEADER_SIZE];
        let abs = blk + x as u64;
        let c = if abs >= geo.nbb {
            cur.cycle + 1
        } else {
            cur.cycle
        };
        put_be32(h, 0, c);
        let from = x * XLOG_CYCLE_DATA_WORDS;
        for (i, w) in words
            .iter()
            .skip(from)
            .take(XLOG_CYCLE_DATA_WORDS)
            .enumerate()
        {
            put_be32(h, 4 + 4 * i, *w);
        }
    }
    rec[hdrs * XLOG_HEADER_SIZE..].copy_from_slice(&data);
    let crc = {
        let (hdr, body) = rec.split_at(hdrs * XLOG_HEADER_SIZE);
        let ext: Vec<&[u8]> = (1..hdrs)
            .map(|x| &hdr[x * XLOG_HEADER_SIZE..(x + 1) * XLOG_HEADER_SIZE])
            .collect();
        xlog_rec_crc(&hdr[..XLOG_HEADER_SIZE], &ext, body)
    };
    rec[32..36].copy_from_slice(&crc.to_le_bytes());
    cur.advance((rec.len() / BB) as u64, geo.nbb);
    (blk, rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfs_format::log::{XFS_TRANSACTION, XLOG_COMMIT_TRANS, XLOG_START_TRANS};

    fn geo(nbb: u64) -> LogGeo {
        LogGeo {
            start_bytes: 0,
            nbb,
            roundoff: 512,
            h_size: 32768,
            uuid: [7; 16],
        }
    }

    /// Reads back the data of a record: cycle words restored.
    fn unpack(rec: &[u8]) -> Vec<u8> {
        let len = u32::from_be_bytes(rec[12..16].try_into().unwrap()) as usize;
        let mut d = rec[512..512 + len].to_vec();
        for i in 0..len / 512 {
            d[i * 512..i * 512 + 4].copy_from_slice(&rec[44 + 4 * i..48 + 4 * i]);
        }
        d
    }

    #[test]
    fn regions_continue_across_records() {
        let g = geo(1000);
        let mut cur = Cursor {
            cycle: 3,
            head: 10,
            prev: 8,
        };
        let big = vec![0xabu8; 70_000];
        let ops = [
            Op {
                flags: XLOG_START_TRANS,
                client: XFS_TRANSACTION,
                data: &[],
            },
            Op {
                flags: 0,
                client: XFS_TRANSACTION,
                data: &big,
            },
            Op {
                flags: XLOG_COMMIT_TRANS,
                client: XFS_TRANSACTION,
                data: &[],
            },
        ];
        let p = pack(&g, &mut cur, 0x3_0000_000a, 42, &ops);
        assert_eq!(p.records.len(), 3);
        assert_eq!(p.first_lsn, 0x3_0000_000a);
        let mut seen = Vec::new();
        let mut flags = Vec::new();
        for (blk, rec) in &p.records {
            assert_eq!(
                u32::from_be_bytes(rec[0..4].try_into().unwrap()),
                XLOG_HEADER_MAGIC_NUM
            );
            let lsn = u64::from_be_bytes(rec[16..24].try_into().unwrap());
            assert_eq!(lsn, (3u64 << 32) | blk);
            let (hdr, body) = rec.split_at(512);
            let stored = u32::from_le_bytes(rec[32..36].try_into().unwrap());
            assert_eq!(xlog_rec_crc(hdr, &[], body), stored);
            let d = unpack(rec);
            let n = u32::from_be_bytes(rec[40..44].try_into().unwrap());
            let mut off = 0;
            for _ in 0..n {
                let len = u32::from_be_bytes(d[off + 4..off + 8].try_into().unwrap()) as usize;
                flags.push(d[off + 9]);
                seen.extend_from_slice(&d[off + 12..off + 12 + len]);
                off += 12 + len;
            }
        }
        assert_eq!(seen, big);
        assert_eq!(
            flags,
            vec![
                XLOG_START_TRANS,
                XLOG_CONTINUE_TRANS,
                XLOG_WAS_CONT_TRANS | XLOG_CONTINUE_TRANS,
                XLOG_WAS_CONT_TRANS | XLOG_END_TRANS,
                XLOG_COMMIT_TRANS
            ]
        );
        assert_eq!(cur.head, 10 + p.blocks());
    }

    #[test]
    fn wrapped_blocks_carry_the_next_cycle() {
        let g = geo(20);
        let mut cur = Cursor {
            cycle: 5,
            head: 16,
            prev: 0,
        };
        let body = vec![1u8; 3000];
        let ops = [Op {
            flags: 0,
            client: XFS_TRANSACTION,
            data: &body,
        }];
        let p = pack(&g, &mut cur, 0, 1, &ops);
        let rec = &p.records[0].1;
        // Header at 16, data at 17..23: blocks 17..19 cycle 5, then 6.
        assert_eq!(rec.len(), 512 * 7);
        for i in 1..7 {
            let c = u32::from_be_bytes(rec[i * 512..i * 512 + 4].try_into().unwrap());
            assert_eq!(c, if 16 + i as u64 >= 20 { 6 } else { 5 }, "block {i}");
        }
        assert_eq!((cur.cycle, cur.head), (6, 3));
    }
}

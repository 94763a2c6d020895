//! Reading one log record: its header sector(s), its data with the
//! cycle-stamped first word of every 512-byte block put back, and the
//! CRC-32C check.
//!
//! The log is addressed in 512-byte basic blocks (BB) from its start and
//! wraps at its end; a record may straddle the end.

use crate::bytes::be32;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use xfs_format::log::{
    xlog_rec_crc, XlogRecHeader, XLOG_CYCLE_DATA_WORDS, XLOG_HEADER_CYCLE_SIZE,
    XLOG_HEADER_MAGIC_NUM, XLOG_MAX_RECORD_BSIZE, XLOG_REC_EXT_HEADER_SIZE, XLOG_VERSION_1,
    XLOG_VERSION_2,
};
use zerocopy::FromBytes;

/// Bytes in a basic block.
pub const BB: u64 = 512;

/// The log's place on the device.
#[derive(Clone, Copy)]
pub struct LogDev<'a> {
    /// The device holding the log.
    pub dev: &'a dyn Device,
    /// Byte offset of log block 0.
    pub start: u64,
    /// Log size in basic blocks.
    pub nbb: u64,
}

impl<'a> LogDev<'a> {
    /// Reads `n` blocks from log block `blk`, wrapping at the log's end.
    pub fn read(&self, blk: u64, n: u64) -> Result<Vec<u8>> {
        let mut out = vec![0u8; (n * BB) as usize];
        let blk = blk % self.nbb;
        let first = (self.nbb - blk).min(n);
        self.read_into(blk, &mut out[..(first * BB) as usize])?;
        if first < n {
            self.read_into(0, &mut out[(first * BB) as usize..])?;
        }
        Ok(out)
    }

    fn read_into(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        self.dev
            .read_at(buf, self.start + blk * BB)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Error::corrupt(
                    "log",
                    Location::Log { block: blk },
                    "the log lies past the end of the device",
                ),
                _ => Error::Io(e),
            })
    }

    /// The cycle number of block `blk`: the second word of a record
    /// header, else the first word.
    pub fn cycle(&self, blk: u64) -> Result<u32> {
        Ok(cycle_of(&self.read(blk, 1)?))
    }
}

/// The cycle stamped on a 512-byte block.
pub fn cycle_of(b: &[u8]) -> u32 {
    let w0 = be32(b, 0);
    if w0 == XLOG_HEADER_MAGIC_NUM {
        be32(b, 4)
    } else {
        w0
    }
}

/// True when a block starts with the record header magic.
pub fn is_header(b: &[u8]) -> bool {
    b.len() >= 4 && be32(b, 0) == XLOG_HEADER_MAGIC_NUM
}

/// A record header, checked and decoded.
#[derive(Debug, Clone)]
pub struct RecHeader {
    /// Log block of the header sector.
    pub blk: u64,
    /// `h_cycle`.
    pub cycle: u32,
    /// `h_len`: bytes of data.
    pub len: u32,
    /// `h_lsn`.
    pub lsn: u64,
    /// `h_tail_lsn`.
    pub tail_lsn: u64,
    /// `h_crc` as stored.
    pub crc: u32,
    /// `h_num_logops`.
    pub num_logops: u32,
    /// `h_size`.
    pub size: u32,
    /// Header sectors (main + extended).
    pub hblks: u64,
    /// `h_prev_block`.
    pub prev_block: u32,
    /// `h_fs_uuid`.
    pub uuid: [u8; 16],
}

impl RecHeader {
    /// Basic blocks of data.
    pub fn data_bbs(&self) -> u64 {
        u64::from(self.len).div_ceil(BB)
    }

    /// Log block just past the record.
    pub fn end_blk(&self, nbb: u64) -> u64 {
        (self.blk + self.hblks + self.data_bbs()) % nbb
    }
}

/// Decodes and checks the header sector `b` found at log block `blk`.
pub fn parse_header(b: &[u8], blk: u64, nbb: u64) -> Result<RecHeader> {
    let bad = |d: String| Error::corrupt("log record header", Location::Log { block: blk }, d);
    let (h, _) = XlogRecHeader::ref_from_prefix(b).map_err(|_| bad("short header".into()))?;
    if h.h_magicno.get() != XLOG_HEADER_MAGIC_NUM {
        return Err(bad(format!("bad magic {:#x}", h.h_magicno.get())));
    }
    let version = h.h_version.get();
    if version == 0 || version & !(XLOG_VERSION_1 | XLOG_VERSION_2) != 0 {
        return Err(bad(format!("unknown version {version}")));
    }
    let len = h.h_len.get();
    if len == 0 || len > XLOG_MAX_RECORD_BSIZE {
        return Err(bad(format!("data length {len} out of range")));
    }
    let size = h.h_size.get();
    let hblks = if version & XLOG_VERSION_2 != 0 && size as usize > XLOG_HEADER_CYCLE_SIZE {
        u64::from(size).div_ceil(XLOG_HEADER_CYCLE_SIZE as u64)
    } else {
        1
    };
    if hblks > 8 {
        return Err(bad(format!("record buffer size {size} too large")));
    }
    // Each header sector holds the displaced words of 32 KiB of data.
    if u64::from(len) > hblks * XLOG_HEADER_CYCLE_SIZE as u64 {
        return Err(bad(format!(
            "data length {len} needs more than its {hblks} header sectors"
        )));
    }
    let total = hblks + u64::from(len).div_ceil(BB);
    if total >= nbb {
        return Err(bad(format!(
            "record of {total} blocks in a {nbb}-block log"
        )));
    }
    let lsn = h.h_lsn.get();
    Ok(RecHeader {
        blk,
        cycle: h.h_cycle.get(),
        len,
        lsn,
        tail_lsn: h.h_tail_lsn.get(),
        crc: h.h_crc.get(),
        num_logops: h.h_num_logops.get(),
        size,
        hblks,
        prev_block: h.h_prev_block.get(),
        uuid: h.h_fs_uuid.0,
    })
}

/// A whole record read back.
pub struct Record {
    /// Its header.
    pub hdr: RecHeader,
    /// `h_len` bytes of data with the cycle-displaced words restored.
    pub data: Vec<u8>,
    /// True when the stored CRC matches.
    pub crc_ok: bool,
}

/// Reads the record whose header is at log block `blk`.
pub fn read_record(log: &LogDev<'_>, blk: u64) -> Result<Record> {
    let first = log.read(blk, 1)?;
    let hdr = parse_header(&first, blk, log.nbb)?;
    let heads = if hdr.hblks > 1 {
        let mut v = first;
        v.extend(log.read(blk + 1, hdr.hblks - 1)?);
        v
    } else {
        first
    };
    let nbbs = hdr.data_bbs();
    let mut data = log.read(blk + hdr.hblks, nbbs)?;
    data.truncate(hdr.len as usize);
    // The CRC covers the extended headers the data needs (one per 32 KiB
    // of h_len after the first), not every one the buffer size reserves.
    let used = (hdr.len as usize).div_ceil(XLOG_HEADER_CYCLE_SIZE).max(1);
    let ext: Vec<&[u8]> = (1..used.min(hdr.hblks as usize))
        .map(|i| &heads[i * BB as usize..i * BB as usize + XLOG_REC_EXT_HEADER_SIZE])
        .collect();
    let crc_ok = xlog_rec_crc(&heads[..BB as usize], &ext, &data) == hdr.crc;
    // Put back the first word of every data block.
    for i in 0..nbbs as usize {
        let sector = i / XLOG_CYCLE_DATA_WORDS;
        let word = i % XLOG_CYCLE_DATA_WORDS;
        // h_cycle_data starts at byte 44 of the main header; xh_cycle_data
        // at byte 4 of each extended header.
        let src = if sector == 0 {
            44 + word * 4
        } else {
            sector * BB as usize + 4 + word * 4
        };
        let dst = i * BB as usize;
        if dst + 4 <= data.len() {
            data[dst..dst + 4].copy_from_slice(&heads[src..src + 4]);
        }
    }
    Ok(Record { hdr, data, crc_ok })
}

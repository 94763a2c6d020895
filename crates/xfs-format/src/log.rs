//! The physical log: record headers, operation headers and the unmount
//! record.
//!
//! A log record is a 512-byte header sector followed by `h_len` bytes of
//! data (rounded up to the log stripe unit / 512 bytes). The first 32-bit word
//! of every 512-byte data block is overwritten with the record's cycle number;
//! the displaced words are kept in `h_cycle_data` (and in extended header
//! sectors for records larger than 32 KiB). Payloads written by log items are
//! in host (little-endian on x86) byte order; headers are big-endian.

use core::mem::{offset_of, size_of};
use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::byteorder::little_endian::U32 as LeU32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::Uuid;

/// Magic in the first word of a record header (never a valid cycle number).
pub const XLOG_HEADER_MAGIC_NUM: u32 = 0xFEED_BABE;
/// Log record format version 1.
pub const XLOG_VERSION_1: u32 = 1;
/// Log record format version 2 (large records, log stripe unit); used on v5.
pub const XLOG_VERSION_2: u32 = 2;
/// Bytes of record data whose displaced cycle words fit in one header (32 KiB).
pub const XLOG_HEADER_CYCLE_SIZE: usize = 32 * 1024;
/// Size of a record header sector (and of each extended header sector).
pub const XLOG_HEADER_SIZE: usize = 512;
/// Number of cycle-data words in one header.
pub const XLOG_CYCLE_DATA_WORDS: usize = XLOG_HEADER_CYCLE_SIZE / 512;
/// Smallest in-core log buffer size.
pub const XLOG_MIN_RECORD_BSIZE: u32 = 16 * 1024;
/// Default in-core log buffer size (32 KiB).
pub const XLOG_BIG_RECORD_BSIZE: u32 = 32 * 1024;
/// Largest in-core log buffer size.
pub const XLOG_MAX_RECORD_BSIZE: u32 = 256 * 1024;

/// `h_fmt`: unknown origin.
pub const XLOG_FMT_UNKNOWN: u32 = 0;
/// `h_fmt`: written by a little-endian Linux host.
pub const XLOG_FMT_LINUX_LE: u32 = 1;
/// `h_fmt`: written by a big-endian Linux host.
pub const XLOG_FMT_LINUX_BE: u32 = 2;
/// `h_fmt`: written by IRIX.
pub const XLOG_FMT_IRIX_BE: u32 = 3;

/// Log record header, the start of the 512-byte header sector.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct XlogRecHeader {
    /// Magic, [`XLOG_HEADER_MAGIC_NUM`].
    pub h_magicno: U32,
    /// Cycle number of the pass over the log that wrote this record.
    pub h_cycle: U32,
    /// Record format version ([`XLOG_VERSION_2`] on v5).
    pub h_version: U32,
    /// Bytes of record data after the header sector(s).
    pub h_len: U32,
    /// LSN of this record: cycle in the high half, log block in the low half.
    pub h_lsn: U64,
    /// LSN of the oldest record still needed for recovery.
    pub h_tail_lsn: U64,
    /// CRC-32C over the header ([`XLOG_REC_HEADER_CRC_LEN`] bytes), any
    /// extended headers and the data, little-endian.
    pub h_crc: LeU32,
    /// Log block of the previous record.
    pub h_prev_block: U32,
    /// Number of operation headers in the record.
    pub h_num_logops: U32,
    /// First word of each 512-byte data block, displaced by the cycle stamp.
    pub h_cycle_data: [U32; XLOG_CYCLE_DATA_WORDS],
    /// Byte order of the writer (`XLOG_FMT_*`).
    pub h_fmt: U32,
    /// UUID of the filesystem (`sb_uuid`).
    pub h_fs_uuid: Uuid,
    /// Size of the writer's in-core log buffer.
    pub h_size: U32,
    /// Tail padding the C compiler adds for 8-byte alignment; part of the CRC.
    pub h_pad: [u8; 4],
}

/// Size of [`XlogRecHeader`], including the trailing alignment pad.
pub const XLOG_REC_HEADER_SIZE: usize = 328;
/// Header bytes covered by the record CRC (the C `sizeof`, 328; checked
/// against a record written by Linux 6.18).
pub const XLOG_REC_HEADER_CRC_LEN: usize = 328;
/// Byte offset of `h_crc`.
pub const XLOG_REC_CRC_OFF: usize = 32;
/// Byte offset of `h_lsn`.
pub const XLOG_REC_LSN_OFF: usize = 16;

const _: () = assert!(size_of::<XlogRecHeader>() == XLOG_REC_HEADER_SIZE);
const _: () = assert!(offset_of!(XlogRecHeader, h_crc) == XLOG_REC_CRC_OFF);
const _: () = assert!(offset_of!(XlogRecHeader, h_lsn) == XLOG_REC_LSN_OFF);
const _: () = assert!(offset_of!(XlogRecHeader, h_cycle_data) == 44);
const _: () = assert!(offset_of!(XlogRecHeader, h_fmt) == 300);
const _: () = assert!(offset_of!(XlogRecHeader, h_fs_uuid) == 304);
const _: () = assert!(offset_of!(XlogRecHeader, h_size) == 320);

/// Extended header sector for records larger than 32 KiB: carries the cycle
/// words of each further 32 KiB of data.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct XlogRecExtHeader {
    /// Cycle number, as in the main header.
    pub xh_cycle: U32,
    /// Displaced first words of the data blocks this sector covers.
    pub xh_cycle_data: [U32; XLOG_CYCLE_DATA_WORDS],
}
/// Size of [`XlogRecExtHeader`]; this many bytes of each extended sector
/// enter the record CRC.
pub const XLOG_REC_EXT_HEADER_SIZE: usize = 260;
const _: () = assert!(size_of::<XlogRecExtHeader>() == XLOG_REC_EXT_HEADER_SIZE);

/// Header preceding each region ("operation") in a record's data.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct XlogOpHeader {
    /// Transaction id the operation belongs to.
    pub oh_tid: U32,
    /// Bytes of region data following this header.
    pub oh_len: U32,
    /// Which subsystem wrote it ([`XFS_TRANSACTION`] or [`XFS_LOG`]).
    pub oh_clientid: u8,
    /// `XLOG_*_TRANS` flags.
    pub oh_flags: u8,
    /// Padding, zero.
    pub oh_res2: [u8; 2],
}
/// Size of [`XlogOpHeader`].
pub const XLOG_OP_HEADER_SIZE: usize = 12;
const _: () = assert!(size_of::<XlogOpHeader>() == XLOG_OP_HEADER_SIZE);

/// Op flag: first region of a transaction.
pub const XLOG_START_TRANS: u8 = 0x01;
/// Op flag: commit record of a transaction.
pub const XLOG_COMMIT_TRANS: u8 = 0x02;
/// Op flag: region continues in the next op header.
pub const XLOG_CONTINUE_TRANS: u8 = 0x04;
/// Op flag: region is the continuation of an earlier one.
pub const XLOG_WAS_CONT_TRANS: u8 = 0x08;
/// Op flag: last piece of a continued region.
pub const XLOG_END_TRANS: u8 = 0x10;
/// Op flag: unmount record.
pub const XLOG_UNMOUNT_TRANS: u8 = 0x20;

/// Client id for transaction regions.
pub const XFS_TRANSACTION: u8 = 0x69;
/// Client id for log-internal records (unmount).
pub const XFS_LOG: u8 = 0xaa;

/// Magic ("Un") at the start of an unmount record's payload, written in
/// host byte order (little-endian bytes `6e 55` on x86).
pub const XLOG_UNMOUNT_TYPE: u16 = 0x556e;
/// Size of the unmount record payload (magic, two pads).
pub const XLOG_UNMOUNT_PAYLOAD_SIZE: usize = 8;

/// Builds an LSN from a cycle and a log block number.
pub const fn xlog_assign_lsn(cycle: u32, block: u32) -> u64 {
    ((cycle as u64) << 32) | block as u64
}

/// Cycle half of an LSN.
pub const fn cycle_lsn(lsn: u64) -> u32 {
    (lsn >> 32) as u32
}

/// Block half of an LSN.
pub const fn block_lsn(lsn: u64) -> u32 {
    lsn as u32
}

/// Number of header sectors (main + extended) a v2 record with `h_size`-sized
/// buffers needs: one per 32 KiB of buffer, at least one.
pub const fn xlog_header_sectors(h_size: u32) -> u32 {
    let n = (h_size as usize).div_ceil(XLOG_HEADER_CYCLE_SIZE) as u32;
    if n == 0 {
        1
    } else {
        n
    }
}

/// Computes the record CRC: header (first [`XLOG_REC_HEADER_CRC_LEN`] bytes,
/// CRC field as zero), each extended header sector's first
/// [`XLOG_REC_EXT_HEADER_SIZE`] bytes, then the data as stored on disk.
pub fn xlog_rec_crc(header: &[u8], ext_headers: &[&[u8]], data: &[u8]) -> u32 {
    let h = &header[..header.len().min(XLOG_REC_HEADER_CRC_LEN)];
    let mut crc = crate::crc::crc32c_with_zeroed_field(h, XLOG_REC_CRC_OFF);
    for x in ext_headers {
        crc = crc32c::crc32c_append(crc, &x[..x.len().min(XLOG_REC_EXT_HEADER_SIZE)]);
    }
    crc32c::crc32c_append(crc, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn layout() {
        assert_eq!(size_of::<XlogRecHeader>(), 328);
        assert_eq!(size_of::<XlogOpHeader>(), 12);
        assert_eq!(XLOG_CYCLE_DATA_WORDS, 64);
        assert_eq!(xlog_assign_lsn(1, 2), 0x1_0000_0002);
        assert_eq!((cycle_lsn(0x5_0000_0007), block_lsn(0x5_0000_0007)), (5, 7));
        assert_eq!(xlog_header_sectors(32768), 1);
        assert_eq!(xlog_header_sectors(32769), 2);
        assert_eq!(xlog_header_sectors(262144), 8);
    }

    #[test]
    fn rec_crc_ignores_crc_field() {
        let mut h = XlogRecHeader::new_zeroed();
        h.h_magicno.set(XLOG_HEADER_MAGIC_NUM);
        h.h_cycle.set(1);
        h.h_len.set(512);
        let mut sector = [0u8; 512];
        sector[..328].copy_from_slice(h.as_bytes());
        let data = [7u8; 512];
        let c1 = xlog_rec_crc(&sector, &[], &data);
        sector[32..36].copy_from_slice(&c1.to_le_bytes());
        assert_eq!(xlog_rec_crc(&sector, &[], &data), c1);
        // Bytes past the CRC length (padding of the sector) do not count.
        sector[400] = 9;
        assert_eq!(xlog_rec_crc(&sector, &[], &data), c1);
        // The alignment pad at 324..328 does count.
        sector[325] = 1;
        assert_ne!(xlog_rec_crc(&sector, &[], &data), c1);
    }
}

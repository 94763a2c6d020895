//! The clean log of a fresh filesystem: the whole log is zero except its first
//! record, written in cycle 1 at block 0 with head and tail at (1, 0).  The
//! record holds one operation, an unmount record, so the kernel finds a
//! cleanly unmounted log and needs no recovery. The record builder is
//! also what `repair --zero-log` fills a cleared log with
//! ([`crate::log::clear`]); mkfs writes it through `first_record`.

use crate::bytes::put_be32;
use xfs_format::types::Uuid;

const BBSIZE: usize = 512;
const RECORD_MAGIC: u32 = xfs_format::log::XLOG_HEADER_MAGIC_NUM;
/// Size of the cycle data one record header can hold (32 KiB of payload).
const HEADER_CYCLE_SIZE: usize = 32 * 1024;
/// Buffer size recorded in `h_size` when the stripe unit is smaller.
const BIG_RECORD_BSIZE: u32 = 32 * 1024;
/// Format word for logs written by Linux ("little-endian Linux" format).
const FMT_LINUX: u32 = 1;
/// Log version 2.
const LOG_VERSION_2: u32 = 2;
/// Transaction id mkfs uses for the unmount record.
const UNMOUNT_TID: u32 = 0xb0c0_d0d0;
/// Operation header client id for log-internal operations.
const CLIENT_LOG: u8 = 0xaa;
/// Operation header flag: unmount record.
const OP_UNMOUNT: u8 = 0x20;
/// Unmount record payload magic (stored in host, i.e. little-endian, order).
const UNMOUNT_MAGIC: u16 = xfs_format::log::XLOG_UNMOUNT_TYPE;

// Offsets inside the record header block.
const H_CYCLE_DATA: usize = 44;
const H_FMT: usize = 300;
const H_FS_UUID: usize = 304;
const H_SIZE: usize = 320;

/// Build the first log record: `sunit` is the log stripe unit in bytes, or
/// the log sector size when there is none (0 for 512-byte sectors).  The
/// returned buffer is what goes at the start of the log; the rest is zero.
pub(crate) fn first_record(uuid: &Uuid, sunit: u32) -> Vec<u8> {
    let lsn = 1u64 << 32;
    unmount_record(uuid, LOG_VERSION_2, sunit, lsn, lsn)
}

/// A log record holding one unmount record, of the cycle `lsn` names, as
/// xfsprogs formats one (mkfs, and each record of a log that xfs_repair
/// -L clears): `sunit` bytes long (at least two blocks; a version 1 log's
/// record is two blocks whatever `sunit`), as many header blocks as its
/// size needs (one per 32 KiB), the unmount operation in the first data
/// block and every other block zero but for the cycle stamped in its
/// first word. The header's CRC is left zero, as xfsprogs leaves it.
pub(crate) fn unmount_record(
    uuid: &Uuid,
    version: u32,
    sunit: u32,
    lsn: u64,
    tail_lsn: u64,
) -> Vec<u8> {
    let v2 = version == LOG_VERSION_2;
    let sunit = sunit as usize;
    let hdrs = if v2 && sunit > HEADER_CYCLE_SIZE {
        sunit.div_ceil(HEADER_CYCLE_SIZE)
    } else {
        1
    };
    let blocks = if v2 && sunit > 0 {
        sunit.div_ceil(BBSIZE)
    } else {
        1
    };
    let mut buf = vec![0u8; blocks.max(hdrs + 1) * BBSIZE];
    let cycle = (lsn >> 32) as u32;
    {
        let h = &mut buf[..BBSIZE];
        put_be32(h, 0, RECORD_MAGIC);
        put_be32(h, 4, cycle);
        put_be32(h, 8, version);
        put_be32(h, 12, ((2 * BBSIZE).max(sunit) - hdrs * BBSIZE) as u32);
        h[16..24].copy_from_slice(&lsn.to_be_bytes());
        h[24..32].copy_from_slice(&tail_lsn.to_be_bytes());
        // h_crc stays zero, as mkfs leaves it.
        put_be32(h, 36, u32::MAX); // h_prev_block
        put_be32(h, 40, 1); // h_num_logops
        put_be32(h, H_FMT, FMT_LINUX);
        h[H_FS_UUID..H_FS_UUID + 16].copy_from_slice(&uuid.0);
        put_be32(h, H_SIZE, (sunit as u32).max(BIG_RECORD_BSIZE));
    }
    // Extended headers carry only the cycle.
    for i in 1..hdrs {
        put_be32(&mut buf[i * BBSIZE..], 0, cycle);
    }
    // The unmount record: operation header then payload; its first word
    // moves to the header's cycle data and is replaced by the cycle.
    let u = hdrs * BBSIZE;
    put_be32(&mut buf[u..], 4, 8); // oh_len
    buf[u + 8] = CLIENT_LOG;
    buf[u + 9] = OP_UNMOUNT;
    buf[u + 12..u + 14].copy_from_slice(&UNMOUNT_MAGIC.to_le_bytes());
    put_be32(&mut buf, H_CYCLE_DATA, UNMOUNT_TID);
    put_be32(&mut buf[u..], 0, cycle);
    // Remaining blocks of the record: zero, stamped with the cycle.
    let total = buf.len() / BBSIZE;
    for i in hdrs + 1..total {
        put_be32(&mut buf[i * BBSIZE..], 0, cycle);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_record() {
        let b = first_record(&Uuid([7; 16]), 0);
        assert_eq!(b.len(), 1024);
        assert_eq!(&b[..4], &[0xfe, 0xed, 0xba, 0xbe]);
        assert_eq!(&b[12..16], &512u32.to_be_bytes());
        assert_eq!(&b[512..520], &[0, 0, 0, 1, 0, 0, 0, 8]);
        assert_eq!(&b[44..48], &[0xb0, 0xc0, 0xd0, 0xd0]);
    }

    #[test]
    fn version_1_records_are_two_blocks() {
        let b = unmount_record(&Uuid([7; 16]), 1, 256 * 1024, 3 << 32, 3 << 32);
        assert_eq!(b.len(), 1024);
        assert_eq!(&b[8..12], &1u32.to_be_bytes());
        assert_eq!(&b[512..516], &3u32.to_be_bytes());
    }

    #[test]
    fn striped_record() {
        let b = first_record(&Uuid([7; 16]), 256 * 1024);
        assert_eq!(b.len(), 256 * 1024);
        // 8 headers, then the unmount record.
        assert_eq!(&b[8 * 512 + 4..8 * 512 + 8], &8u32.to_be_bytes());
        assert_eq!(&b[320..324], &(256u32 * 1024).to_be_bytes());
    }
}

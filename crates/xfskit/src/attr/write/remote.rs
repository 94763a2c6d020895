//! Remote attribute values: every filesystem block of the value gets its
//! own header (magic, byte offset, byte count, CRC, UUID, owner, disk
//! address) followed by its piece of the value, as `attr::remote` reads.

use super::fork;
use crate::attr::remote::{RMT_BYTES, RMT_HDR, RMT_OFFSET};
use crate::buf::verify::REMOTE_ATTR_MAGIC;
use crate::error::Result;
use crate::inode::Inode;
use crate::trans::Trans;

/// Offset of the CRC in a remote value block.
const RMT_CRC: usize = 12;
const RMT_UUID: usize = 16;
const RMT_OWNER: usize = 32;
const RMT_BLKNO: usize = 40;
const RMT_LSN: usize = 48;

/// Value bytes one block carries.
pub(crate) fn per_block(bsize: usize) -> usize {
    bsize - RMT_HDR
}

/// Blocks a remote value of `len` bytes takes.
pub(crate) fn blocks(bsize: usize, len: usize) -> u64 {
    len.div_ceil(per_block(bsize)) as u64
}

/// Fills one remote block: header for the piece `piece` found at byte
/// `off` of the value, then the piece; the rest of the block is zero.
/// The CRC is left for the transaction to stamp.
pub(crate) fn fill_block(
    buf: &mut [u8],
    off: usize,
    piece: &[u8],
    uuid: &[u8; 16],
    owner: u64,
    daddr: u64,
) {
    buf.fill(0);
    buf[0..4].copy_from_slice(&REMOTE_ATTR_MAGIC.to_be_bytes());
    buf[RMT_OFFSET..RMT_OFFSET + 4].copy_from_slice(&(off as u32).to_be_bytes());
    buf[RMT_BYTES..RMT_BYTES + 4].copy_from_slice(&(piece.len() as u32).to_be_bytes());
    buf[RMT_UUID..RMT_UUID + 16].copy_from_slice(uuid);
    buf[RMT_OWNER..RMT_OWNER + 8].copy_from_slice(&owner.to_be_bytes());
    buf[RMT_BLKNO..RMT_BLKNO + 8].copy_from_slice(&daddr.to_be_bytes());
    // The LSN of a remote value block is always NULLCOMMITLSN: the kernel
    // writes these blocks without logging them and refuses any other LSN
    // when it writes one back (log recovery included).
    buf[RMT_LSN..RMT_LSN + 8].fill(0xff);
    buf[RMT_HDR..RMT_HDR + piece.len()].copy_from_slice(piece);
}

/// Allocates blocks for `value` in the attr fork and writes it; returns
/// the first attr-fork block.
pub(crate) fn write_value(tp: &mut Trans<'_>, ip: &mut Inode, value: &[u8]) -> Result<u32> {
    let geo = tp.geo();
    let bsize = geo.block_size as usize;
    let n = blocks(bsize, value.len());
    let first = fork::grow(tp, ip, n)?;
    for (i, piece) in value.chunks(per_block(bsize)).enumerate() {
        let dablk = first + i as u64;
        let daddr = fork::daddr(tp, ip, dablk)?;
        let id = tp.get_buf(daddr, geo.block_size, Some(RMT_CRC));
        let off = i * per_block(bsize);
        fill_block(
            tp.buf_mut(id),
            off,
            piece,
            &geo.meta_uuid,
            ip.ino.0,
            daddr.0,
        );
    }
    fork::dablk_u32(first)
}

/// Frees the blocks of a `len`-byte remote value at attr-fork block `blk`.
pub(crate) fn free_value(tp: &mut Trans<'_>, ip: &mut Inode, blk: u32, len: u32) -> Result<()> {
    let n = blocks(tp.geo().block_size as usize, len as usize);
    fork::shrink(tp, ip, u64::from(blk), n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::leaf::be32;

    #[test]
    fn pieces_match_what_the_reader_expects() {
        let bsize = 1024usize;
        let value: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
        let n = blocks(bsize, value.len());
        assert_eq!(n, 65536u64.div_ceil(968));
        let mut got = Vec::new();
        for (i, piece) in value.chunks(per_block(bsize)).enumerate() {
            let mut b = vec![0xffu8; bsize];
            fill_block(
                &mut b,
                i * per_block(bsize),
                piece,
                &[3; 16],
                77,
                1000 + i as u64,
            );
            assert_eq!(be32(&b, 0), REMOTE_ATTR_MAGIC);
            assert_eq!(be32(&b, RMT_OFFSET) as usize, got.len());
            let bytes = be32(&b, RMT_BYTES) as usize;
            assert_eq!(bytes, (value.len() - got.len()).min(per_block(bsize)));
            got.extend_from_slice(&b[RMT_HDR..RMT_HDR + bytes]);
        }
        assert_eq!(got, value);
    }
}

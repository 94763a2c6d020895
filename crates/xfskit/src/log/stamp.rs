//! The LSN a metadata block carries, and re-stamping LSN and CRC after a
//! replay, both chosen by the block's magic number (and for stamping, the
//! buffer type the log item names), as the kernel's recovery does.

use crate::bytes::be32;
use xfs_format::ag::{XFS_AGFL_LSN_OFF, XFS_AGF_LSN_OFF, XFS_AGI_LSN_OFF};
use xfs_format::btree::{XFS_BTREE_LBLOCK_LSN_OFF, XFS_BTREE_SBLOCK_LSN_OFF};
use xfs_format::log_item::*;

const ABTB: u32 = xfs_format::btree::XFS_ABTB_CRC_MAGIC;
const ABTC: u32 = xfs_format::btree::XFS_ABTC_CRC_MAGIC;
const IBT: u32 = xfs_format::btree::XFS_IBT_CRC_MAGIC;
const FIBT: u32 = xfs_format::btree::XFS_FIBT_CRC_MAGIC;
const RMAP: u32 = xfs_format::btree::XFS_RMAP_CRC_MAGIC;
const REFC: u32 = xfs_format::btree::XFS_REFC_CRC_MAGIC;
const BMAP: u32 = xfs_format::btree::XFS_BMAP_CRC_MAGIC;
const AGF: u32 = xfs_format::ag::XFS_AGF_MAGIC;
const AGI: u32 = xfs_format::ag::XFS_AGI_MAGIC;
const AGFL: u32 = xfs_format::ag::XFS_AGFL_MAGIC;
const SB: u32 = xfs_format::sb::XFS_SB_MAGIC;
const SYMLINK: u32 = xfs_format::symlink::XFS_SYMLINK_MAGIC;
const ATTR_RMT: u32 = xfs_format::attr::XFS_ATTR3_RMT_MAGIC;
const DIR3_BLOCK: u32 = xfs_format::dir::XFS_DIR3_BLOCK_MAGIC;
const DIR3_DATA: u32 = xfs_format::dir::XFS_DIR3_DATA_MAGIC;
const DIR3_FREE: u32 = xfs_format::dir::XFS_DIR3_FREE_MAGIC;
const RTBITMAP: u32 = xfs_format::rtgroup::XFS_RTBITMAP_MAGIC;
const RTRMAP: u32 = xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC;
const RTREFC: u32 = xfs_format::rtgroup::XFS_RTREFC_CRC_MAGIC;
const RTSUMMARY: u32 = xfs_format::rtgroup::XFS_RTSUMMARY_MAGIC;
const DIR3_LEAF1: u16 = xfs_format::dir::XFS_DIR3_LEAF1_MAGIC;
const DIR3_LEAFN: u16 = xfs_format::dir::XFS_DIR3_LEAFN_MAGIC;
const ATTR3_LEAF: u16 = xfs_format::attr::XFS_ATTR3_LEAF_MAGIC;
const DA3_NODE: u16 = xfs_format::da::XFS_DA3_NODE_MAGIC;

/// Where a block type keeps its LSN, UUID and CRC.
#[derive(Debug, Clone, Copy)]
struct Layout {
    lsn: usize,
    uuid: usize,
    crc: usize,
}

fn layout_by_magic(b: &[u8]) -> Option<Layout> {
    if b.len() < 512 {
        return None;
    }
    let m32 = be32(b, 0);
    let l = |lsn, uuid, crc| Some(Layout { lsn, uuid, crc });
    match m32 {
        ABTB | ABTC | IBT | FIBT | RMAP | REFC => return l(XFS_BTREE_SBLOCK_LSN_OFF, 32, 52),
        BMAP | RTRMAP | RTREFC => return l(XFS_BTREE_LBLOCK_LSN_OFF, 40, 64),
        AGF => return l(XFS_AGF_LSN_OFF, 64, 216),
        AGFL => return l(XFS_AGFL_LSN_OFF, 8, 32),
        AGI => return l(XFS_AGI_LSN_OFF, 296, 312),
        SYMLINK => return l(48, 16, 12),
        DIR3_BLOCK | DIR3_DATA | DIR3_FREE => return l(16, 24, 4),
        SB => return l(240, 32, 224),
        // Realtime group bitmap and summary blocks' header.
        RTBITMAP | RTSUMMARY => return l(24, 32, 4),
        _ => {}
    }
    match u16::from_be_bytes([b[8], b[9]]) {
        DIR3_LEAF1 | DIR3_LEAFN | ATTR3_LEAF | DA3_NODE => l(24, 32, 12),
        _ => None,
    }
}

/// The LSN recovery compares against for the block `b`, or None when the
/// block must be replayed whatever it holds (no LSN field known, a remote
/// attribute block, an inode or quota block, or another filesystem's
/// UUID). `meta_uuid` is the filesystem's metadata UUID; for the
/// superblock the field compared is `sb_meta_uuid` when `has_meta_uuid`.
pub fn buf_lsn(b: &[u8], blft: u16, meta_uuid: &[u8; 16], has_meta_uuid: bool) -> Option<u64> {
    // Classic realtime bitmap and summary blocks have no header; those of
    // realtime groups do.
    if (blft == XFS_BLFT_RTBITMAP_BUF || blft == XFS_BLFT_RTSUMMARY_BUF)
        && !(b.len() >= 4 && matches!(be32(b, 0), RTBITMAP | RTSUMMARY))
    {
        return None;
    }
    let lay = layout_by_magic(b)?;
    let uuid_off = if be32(b, 0) == SB && has_meta_uuid {
        248
    } else {
        lay.uuid
    };
    if b[uuid_off..uuid_off + 16] != meta_uuid[..] {
        return None;
    }
    Some(u64::from_be_bytes(b[lay.lsn..lay.lsn + 8].try_into().ok()?))
}

/// Stamps `lsn` and a fresh CRC into a replayed buffer of type `blft`,
/// when its contents carry the magic that type expects (the kernel attaches
/// the type's verifier, whose write side stamps them). Remote attribute
/// buffers hold one header per filesystem block of `block_size` bytes.
/// Returns false when nothing was stamped.
pub fn stamp_buf(b: &mut [u8], blft: u16, lsn: u64, block_size: usize) -> bool {
    if blft == XFS_BLFT_ATTR_RMT_BUF {
        let mut any = false;
        for blk in b.chunks_mut(block_size.max(512)) {
            if blk.len() >= 56 && be32(blk, 0) == ATTR_RMT {
                blk[48..56].copy_from_slice(&lsn.to_be_bytes());
                xfs_format::crc::stamp(blk, 12);
                any = true;
            }
        }
        return any;
    }
    let expected = match blft {
        XFS_BLFT_BTREE_BUF => true,
        XFS_BLFT_AGF_BUF => b.len() >= 4 && be32(b, 0) == AGF,
        XFS_BLFT_AGFL_BUF => b.len() >= 4 && be32(b, 0) == AGFL,
        XFS_BLFT_AGI_BUF => b.len() >= 4 && be32(b, 0) == AGI,
        XFS_BLFT_SB_BUF => b.len() >= 4 && be32(b, 0) == SB,
        XFS_BLFT_RTBITMAP_BUF => b.len() >= 4 && be32(b, 0) == RTBITMAP,
        XFS_BLFT_RTSUMMARY_BUF => b.len() >= 4 && be32(b, 0) == RTSUMMARY,
        XFS_BLFT_SYMLINK_BUF => b.len() >= 4 && be32(b, 0) == SYMLINK,
        XFS_BLFT_DIR_BLOCK_BUF => b.len() >= 4 && be32(b, 0) == DIR3_BLOCK,
        XFS_BLFT_DIR_DATA_BUF => b.len() >= 4 && be32(b, 0) == DIR3_DATA,
        XFS_BLFT_DIR_FREE_BUF => b.len() >= 4 && be32(b, 0) == DIR3_FREE,
        XFS_BLFT_DIR_LEAF1_BUF
        | XFS_BLFT_DIR_LEAFN_BUF
        | XFS_BLFT_DA_NODE_BUF
        | XFS_BLFT_ATTR_LEAF_BUF => true,
        _ => false,
    };
    if !expected {
        return false;
    }
    let Some(lay) = layout_by_magic(b) else {
        return false;
    };
    // The CRC covers the whole buffer (for the superblock and the AG
    // headers, their sector).
    b[lay.lsn..lay.lsn + 8].copy_from_slice(&lsn.to_be_bytes());
    xfs_format::crc::stamp(b, lay.crc);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btree_block_round_trip() {
        let mut b = vec![0u8; 4096];
        b[0..4].copy_from_slice(&ABTB.to_be_bytes());
        b[32..48].copy_from_slice(&[7; 16]);
        assert_eq!(buf_lsn(&b, XFS_BLFT_BTREE_BUF, &[7; 16], false), Some(0));
        assert_eq!(buf_lsn(&b, XFS_BLFT_BTREE_BUF, &[8; 16], false), None);
        assert!(stamp_buf(&mut b, XFS_BLFT_BTREE_BUF, 0x2_0000_0040, 4096));
        assert_eq!(
            buf_lsn(&b, XFS_BLFT_BTREE_BUF, &[7; 16], false),
            Some(0x2_0000_0040)
        );
        assert!(xfs_format::crc::verify(&b, 52));
    }

    #[test]
    fn rtgroup_bitmap_blocks_are_stamped_classic_ones_are_not() {
        let mut b = vec![0u8; 4096];
        b[0..4].copy_from_slice(&RTBITMAP.to_be_bytes());
        b[32..48].copy_from_slice(&[7; 16]);
        assert!(stamp_buf(
            &mut b,
            XFS_BLFT_RTBITMAP_BUF,
            0x3_0000_0008,
            4096
        ));
        assert!(xfs_format::crc::verify(&b, 4));
        assert_eq!(
            buf_lsn(&b, XFS_BLFT_RTBITMAP_BUF, &[7; 16], false),
            Some(0x3_0000_0008)
        );
        let mut c = vec![0xffu8; 4096];
        assert!(!stamp_buf(&mut c, XFS_BLFT_RTBITMAP_BUF, 5, 4096));
        assert_eq!(buf_lsn(&c, XFS_BLFT_RTBITMAP_BUF, &[7; 16], false), None);
    }

    #[test]
    fn unknown_blocks_replay_always() {
        let b = vec![0u8; 512];
        assert_eq!(buf_lsn(&b, XFS_BLFT_UNKNOWN_BUF, &[0; 16], false), None);
        let mut c = b.clone();
        assert!(!stamp_buf(&mut c, XFS_BLFT_AGF_BUF, 5, 4096));
        assert_eq!(c, b);
    }
}

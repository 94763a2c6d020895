//! What kind of metadata a logged buffer holds, told by its magic number.
//!
//! Log recovery needs the buffer type (bits 11-15 of `blf_flags`) to pick
//! the verifier that re-stamps the block's LSN and CRC after replay, and
//! the writeback needs the offset of the block's LSN field to stamp the
//! LSN of the last checkpoint that logged it. Every v5 metadata block
//! names itself, so both follow from the first bytes.

use crate::bytes::{be16, be32};
use xfs_format::ag::{XFS_AGFL_MAGIC, XFS_AGF_MAGIC, XFS_AGI_MAGIC};
use xfs_format::attr::{XFS_ATTR3_LEAF_MAGIC, XFS_ATTR3_RMT_MAGIC};
use xfs_format::btree::{
    XFS_ABTB_CRC_MAGIC, XFS_ABTC_CRC_MAGIC, XFS_BMAP_CRC_MAGIC, XFS_FIBT_CRC_MAGIC,
    XFS_IBT_CRC_MAGIC, XFS_REFC_CRC_MAGIC, XFS_RMAP_CRC_MAGIC,
};
use xfs_format::da::XFS_DA3_NODE_MAGIC;
use xfs_format::dir::{
    XFS_DIR3_BLOCK_MAGIC, XFS_DIR3_DATA_MAGIC, XFS_DIR3_FREE_MAGIC, XFS_DIR3_LEAF1_MAGIC,
    XFS_DIR3_LEAFN_MAGIC,
};
use xfs_format::inode::XFS_DINODE_MAGIC;
use xfs_format::symlink::XFS_SYMLINK_MAGIC;

/// Buffer types of `blf_flags` (enum xfs_blft).
pub(crate) mod blft {
    pub const UDQUOT: u16 = 1;
    pub const PDQUOT: u16 = 2;
    pub const GDQUOT: u16 = 3;
    pub const BTREE: u16 = 4;
    pub const AGF: u16 = 5;
    pub const AGFL: u16 = 6;
    pub const AGI: u16 = 7;
    pub const DINO: u16 = 8;
    pub const SYMLINK: u16 = 9;
    pub const DIR_BLOCK: u16 = 10;
    pub const DIR_DATA: u16 = 11;
    pub const DIR_FREE: u16 = 12;
    pub const DIR_LEAF1: u16 = 13;
    pub const DIR_LEAFN: u16 = 14;
    pub const DA_NODE: u16 = 15;
    pub const ATTR_LEAF: u16 = 16;
    pub const ATTR_RMT: u16 = 17;
    pub const SB: u16 = 18;
    pub const RTBITMAP: u16 = 19;
    pub const RTSUMMARY: u16 = 20;
}

/// Where the type lives in `blf_flags`.
pub(crate) const BLFT_SHIFT: u16 = 11;

/// A logged buffer's type and the offset of its LSN field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufKind {
    /// `XFS_BLFT_*`.
    pub blft: u16,
    /// Byte offset of the block's LSN (None: not stamped, inode clusters).
    pub lsn_off: Option<usize>,
}

/// The kind of the metadata block `b`, or None when its magic number is
/// not one a transaction logs.
pub(crate) fn classify(b: &[u8]) -> Option<BufKind> {
    if b.len() < 64 {
        return None;
    }
    let k = |blft, lsn| {
        Some(BufKind {
            blft,
            lsn_off: Some(lsn),
        })
    };
    match be32(b, 0) {
        XFS_AGF_MAGIC => return k(blft::AGF, 208),
        XFS_AGI_MAGIC => return k(blft::AGI, 320),
        XFS_AGFL_MAGIC => return k(blft::AGFL, 24),
        XFS_ABTB_CRC_MAGIC | XFS_ABTC_CRC_MAGIC | XFS_IBT_CRC_MAGIC | XFS_FIBT_CRC_MAGIC
        | XFS_RMAP_CRC_MAGIC | XFS_REFC_CRC_MAGIC => return k(blft::BTREE, 24),
        XFS_BMAP_CRC_MAGIC
        | xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC
        | xfs_format::rtgroup::XFS_RTREFC_CRC_MAGIC => return k(blft::BTREE, 32),
        XFS_DIR3_BLOCK_MAGIC => return k(blft::DIR_BLOCK, 16),
        XFS_DIR3_DATA_MAGIC => return k(blft::DIR_DATA, 16),
        XFS_DIR3_FREE_MAGIC => return k(blft::DIR_FREE, 16),
        // Remote value blocks keep NULLCOMMITLSN (the kernel checks it).
        XFS_ATTR3_RMT_MAGIC => {
            return Some(BufKind {
                blft: blft::ATTR_RMT,
                lsn_off: None,
            })
        }
        XFS_SYMLINK_MAGIC => return k(blft::SYMLINK, 48),
        _ => {}
    }
    match be16(b, 8) {
        XFS_DIR3_LEAF1_MAGIC => return k(blft::DIR_LEAF1, 24),
        XFS_DIR3_LEAFN_MAGIC => return k(blft::DIR_LEAFN, 24),
        XFS_DA3_NODE_MAGIC => return k(blft::DA_NODE, 24),
        XFS_ATTR3_LEAF_MAGIC => return k(blft::ATTR_LEAF, 24),
        _ => {}
    }
    if be16(b, 0) == XFS_DINODE_MAGIC {
        return Some(BufKind {
            blft: blft::DINO,
            lsn_off: None,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_magic() {
        let mut b = vec![0u8; 512];
        b[0..4].copy_from_slice(&XFS_AGF_MAGIC.to_be_bytes());
        assert_eq!(classify(&b).unwrap().blft, blft::AGF);
        b[0..4].copy_from_slice(&XFS_BMAP_CRC_MAGIC.to_be_bytes());
        assert_eq!(classify(&b).unwrap().lsn_off, Some(32));
        b[0..4].copy_from_slice(&[0; 4]);
        b[8..10].copy_from_slice(&XFS_DA3_NODE_MAGIC.to_be_bytes());
        assert_eq!(classify(&b).unwrap().blft, blft::DA_NODE);
        b[8..10].copy_from_slice(&[0; 2]);
        assert_eq!(classify(&b), None);
    }
}

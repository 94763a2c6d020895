//! What differs between v4 (crc=0) and v5 (crc=1) metadata: magic numbers
//! and header sizes. v5 headers add the self-describing fields (CRC, block
//! number, LSN, UUID, owner) in front of the same payload; v4 headers are
//! the bare payload. Readers take one [`Layout`] from the filesystem's
//! version and index blocks through it.

/// bnobt block magic on v4 ("ABTB").
pub const XFS_ABTB_MAGIC: u32 = 0x4142_5442;
/// cntbt block magic on v4 ("ABTC").
pub const XFS_ABTC_MAGIC: u32 = 0x4142_5443;
/// inobt block magic on v4 ("IABT").
pub const XFS_IBT_MAGIC: u32 = 0x4941_4254;
/// finobt block magic on v4 ("FIBT").
pub const XFS_FIBT_MAGIC: u32 = 0x4649_4254;
/// bmbt block magic on v4 ("BMAP").
pub const XFS_BMAP_MAGIC: u32 = 0x424d_4150;
/// Single-block directory magic on v4 ("XD2B").
pub const XFS_DIR2_BLOCK_MAGIC: u32 = 0x5844_3242;
/// Directory data block magic on v4 ("XD2D").
pub const XFS_DIR2_DATA_MAGIC: u32 = 0x5844_3244;
/// Directory free-index block magic on v4 ("XD2F").
pub const XFS_DIR2_FREE_MAGIC: u32 = 0x5844_3246;
/// Leaf block of a leaf-form directory on v4 (be16 at byte 8).
pub const XFS_DIR2_LEAF1_MAGIC: u16 = 0xd2f1;
/// Leaf block of a node-form directory on v4.
pub const XFS_DIR2_LEAFN_MAGIC: u16 = 0xd2ff;
/// da-btree interior node on v4.
pub const XFS_DA_NODE_MAGIC: u16 = 0xfebe;
/// Attribute leaf block on v4.
pub const XFS_ATTR_LEAF_MAGIC: u16 = 0xfbee;

/// v4 directory data/block header: magic and three best-free slots.
pub const XFS_DIR2_DATA_HDR_SIZE: usize = 16;
/// v4 dir leaf and da node header: the 12-byte block info, count, stale/level.
pub const XFS_DA_HDR_SIZE: usize = 16;
/// v4 block info (forw, back, magic, pad).
pub const XFS_DA_BLKINFO_SIZE: usize = 12;
/// v4 free-index header: magic, firstdb, nvalid, nused.
pub const XFS_DIR2_FREE_HDR_SIZE: usize = 16;
/// v4 attribute leaf header: block info, count, usedbytes, firstused,
/// holes, pad, three free-map slots.
pub const XFS_ATTR_LEAF_HDR_SIZE: usize = 32;
/// v4 short-pointer btree block header: magic, level, numrecs, siblings.
pub const XFS_BTREE_SBLOCK_LEN: usize = 16;
/// v4 long-pointer btree block header.
pub const XFS_BTREE_LBLOCK_LEN: usize = 24;
/// Size of the v1/v2 inode core; the literal area follows it.
pub const XFS_DINODE_V2_SIZE: usize = 100;

/// Magic numbers and header sizes of one metadata version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Blocks carry CRCs and self-describing headers (v5).
    pub crc: bool,
    /// bnobt magic.
    pub bno_magic: u32,
    /// cntbt magic.
    pub cnt_magic: u32,
    /// inobt magic.
    pub ino_magic: u32,
    /// finobt magic.
    pub fino_magic: u32,
    /// bmbt magic.
    pub bmap_magic: u32,
    /// Short-pointer btree block header size.
    pub sblock_hdr: usize,
    /// Long-pointer btree block header size.
    pub lblock_hdr: usize,
    /// Single-block directory magic.
    pub dir_block_magic: u32,
    /// Directory data block magic.
    pub dir_data_magic: u32,
    /// Directory free-index magic.
    pub dir_free_magic: u32,
    /// Leaf-form directory leaf magic.
    pub dir_leaf1_magic: u16,
    /// Node-form directory leaf magic.
    pub dir_leafn_magic: u16,
    /// da-btree node magic.
    pub da_node_magic: u16,
    /// Attribute leaf magic.
    pub attr_leaf_magic: u16,
    /// Offset of the best-free table in a data block header (and of the
    /// free-index header fields firstdb, nvalid, nused).
    pub dir_bestfree: usize,
    /// Directory data/block header size (first entry offset).
    pub dir_data_hdr: usize,
    /// Directory leaf and da node header size.
    pub da_hdr: usize,
    /// da block info size (count follows it in leaf, node and attr leaf headers).
    pub da_blkinfo: usize,
    /// Directory free-index header size.
    pub dir_free_hdr: usize,
    /// Attribute leaf header size.
    pub attr_leaf_hdr: usize,
    /// Header of each remote attribute value / remote symlink block (0 on v4).
    pub remote_hdr: usize,
    /// Inode core size (start of the literal area).
    pub dinode_core: usize,
    /// AGFL header size (the block number array follows; 0 on v4).
    pub agfl_hdr: usize,
}

/// The v5 (crc=1) layout.
pub const V5: Layout = Layout {
    crc: true,
    bno_magic: crate::btree::XFS_ABTB_CRC_MAGIC,
    cnt_magic: crate::btree::XFS_ABTC_CRC_MAGIC,
    ino_magic: crate::btree::XFS_IBT_CRC_MAGIC,
    fino_magic: crate::btree::XFS_FIBT_CRC_MAGIC,
    bmap_magic: crate::btree::XFS_BMAP_CRC_MAGIC,
    sblock_hdr: crate::btree::XFS_BTREE_SBLOCK_CRC_LEN,
    lblock_hdr: crate::btree::XFS_BTREE_LBLOCK_CRC_LEN,
    dir_block_magic: crate::dir::XFS_DIR3_BLOCK_MAGIC,
    dir_data_magic: crate::dir::XFS_DIR3_DATA_MAGIC,
    dir_free_magic: crate::dir::XFS_DIR3_FREE_MAGIC,
    dir_leaf1_magic: crate::dir::XFS_DIR3_LEAF1_MAGIC,
    dir_leafn_magic: crate::dir::XFS_DIR3_LEAFN_MAGIC,
    da_node_magic: crate::da::XFS_DA3_NODE_MAGIC,
    attr_leaf_magic: crate::attr::XFS_ATTR3_LEAF_MAGIC,
    dir_bestfree: crate::dir::block::XFS_DIR3_BLK_HDR_SIZE,
    dir_data_hdr: crate::dir::block::XFS_DIR3_DATA_HDR_SIZE,
    da_hdr: crate::dir::block::XFS_DIR3_LEAF_HDR_SIZE,
    da_blkinfo: 56,
    dir_free_hdr: crate::dir::block::XFS_DIR3_FREE_HDR_SIZE,
    attr_leaf_hdr: crate::attr::XFS_ATTR3_LEAF_HDR_SIZE,
    remote_hdr: crate::attr::XFS_ATTR3_RMT_HDR_SIZE,
    dinode_core: crate::inode::XFS_DINODE_SIZE,
    agfl_hdr: crate::ag::XFS_AGFL_HDR_SIZE,
};

/// The v4 (crc=0) layout.
pub const V4: Layout = Layout {
    crc: false,
    bno_magic: XFS_ABTB_MAGIC,
    cnt_magic: XFS_ABTC_MAGIC,
    ino_magic: XFS_IBT_MAGIC,
    fino_magic: XFS_FIBT_MAGIC,
    bmap_magic: XFS_BMAP_MAGIC,
    sblock_hdr: XFS_BTREE_SBLOCK_LEN,
    lblock_hdr: XFS_BTREE_LBLOCK_LEN,
    dir_block_magic: XFS_DIR2_BLOCK_MAGIC,
    dir_data_magic: XFS_DIR2_DATA_MAGIC,
    dir_free_magic: XFS_DIR2_FREE_MAGIC,
    dir_leaf1_magic: XFS_DIR2_LEAF1_MAGIC,
    dir_leafn_magic: XFS_DIR2_LEAFN_MAGIC,
    da_node_magic: XFS_DA_NODE_MAGIC,
    attr_leaf_magic: XFS_ATTR_LEAF_MAGIC,
    dir_bestfree: 4,
    dir_data_hdr: XFS_DIR2_DATA_HDR_SIZE,
    da_hdr: XFS_DA_HDR_SIZE,
    da_blkinfo: XFS_DA_BLKINFO_SIZE,
    dir_free_hdr: XFS_DIR2_FREE_HDR_SIZE,
    attr_leaf_hdr: XFS_ATTR_LEAF_HDR_SIZE,
    remote_hdr: 0,
    dinode_core: XFS_DINODE_V2_SIZE,
    agfl_hdr: 0,
};

impl Layout {
    /// The layout of a filesystem with (`crc`) or without CRCs.
    pub const fn of(crc: bool) -> &'static Layout {
        if crc {
            &V5
        } else {
            &V4
        }
    }

    /// The v4 twin of a v5 btree magic (itself when already v4 or unknown).
    pub const fn btree_magic(&self, v5_magic: u32) -> u32 {
        if self.crc {
            return v5_magic;
        }
        match v5_magic {
            crate::btree::XFS_ABTB_CRC_MAGIC => XFS_ABTB_MAGIC,
            crate::btree::XFS_ABTC_CRC_MAGIC => XFS_ABTC_MAGIC,
            crate::btree::XFS_IBT_CRC_MAGIC => XFS_IBT_MAGIC,
            crate::btree::XFS_FIBT_CRC_MAGIC => XFS_FIBT_MAGIC,
            crate::btree::XFS_BMAP_CRC_MAGIC => XFS_BMAP_MAGIC,
            m => m,
        }
    }

    /// The magic of this layout for a v5 directory/remote block magic (be32 at 0).
    pub const fn magic32(&self, v5_magic: u32) -> u32 {
        if self.crc {
            return v5_magic;
        }
        match v5_magic {
            crate::dir::XFS_DIR3_BLOCK_MAGIC => XFS_DIR2_BLOCK_MAGIC,
            crate::dir::XFS_DIR3_DATA_MAGIC => XFS_DIR2_DATA_MAGIC,
            crate::dir::XFS_DIR3_FREE_MAGIC => XFS_DIR2_FREE_MAGIC,
            m => self.btree_magic(m),
        }
    }

    /// The magic of this layout for a v5 da-block magic (be16 at 8).
    pub const fn magic16(&self, v5_magic: u16) -> u16 {
        if self.crc {
            return v5_magic;
        }
        match v5_magic {
            crate::dir::XFS_DIR3_LEAF1_MAGIC => XFS_DIR2_LEAF1_MAGIC,
            crate::dir::XFS_DIR3_LEAFN_MAGIC => XFS_DIR2_LEAFN_MAGIC,
            crate::da::XFS_DA3_NODE_MAGIC => XFS_DA_NODE_MAGIC,
            crate::attr::XFS_ATTR3_LEAF_MAGIC => XFS_ATTR_LEAF_MAGIC,
            m => m,
        }
    }

    /// Offset of the count field of a dir leaf, da node or attr leaf header.
    pub const fn da_count(&self) -> usize {
        self.da_blkinfo
    }
}

const _: () = assert!(V5.da_hdr == 64 && V5.dir_bestfree == 48 && V5.attr_leaf_hdr == 80);
const _: () = assert!(V4.da_blkinfo + 4 == V4.da_hdr);

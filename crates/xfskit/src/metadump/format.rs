//! The two file formats of xfs_metadump (facts from xfsprogs' documentation
//! of them; the code is our own).
//!
//! v1 ("XFSM"): a sequence of 512-byte index blocks, each an 8-byte header
//! (magic, big-endian u16 count of data blocks, u8 log2 of the data block
//! size, u8 informational flags) then up to 63 big-endian 512-byte-sector
//! addresses, each index block followed by `count` data blocks of
//! `1 << blocklog` bytes. An index block with fewer than 63 entries, or a
//! count of zero, ends the file. The first address must be 0, the primary
//! superblock.
//!
//! v2 ("XMD2"): a 24-byte header (magic, version 2, compat flags, incompat
//! flags, 8 reserved zero bytes), then extent records: a big-endian u64
//! address (low 54 bits a 512-byte-sector address, the next 2 bits the
//! device: 0 data, 1 external log, 2 realtime) and a big-endian u32 length
//! in sectors, followed by that many sectors of data. The first record is
//! the primary superblock at data-device address 0.

/// v1 magic, "XFSM".
pub const MD1_MAGIC: u32 = 0x5846_534d;
/// v2 magic, "XMD2".
pub const MD2_MAGIC: u32 = 0x584d_4432;

/// v1 `mb_info`: the flags below are meaningful.
pub const MD1_INFO_FLAGS: u8 = 1 << 0;
/// v1: names and attribute values were obfuscated.
pub const MD1_OBFUSCATED: u8 = 1 << 1;
/// v1: whole metadata blocks were copied (stale bytes not zeroed).
pub const MD1_FULLBLOCKS: u8 = 1 << 2;
/// v1: the log was dirty.
pub const MD1_DIRTYLOG: u8 = 1 << 3;

/// v2 compat: obfuscated names and attribute values.
pub const MD2_COMPAT_OBFUSCATED: u32 = 1 << 0;
/// v2 compat: whole metadata blocks.
pub const MD2_COMPAT_FULLBLOCKS: u32 = 1 << 1;
/// v2 compat: the log was dirty.
pub const MD2_COMPAT_DIRTYLOG: u32 = 1 << 2;
/// v2 compat: the dump holds an external log's contents.
pub const MD2_COMPAT_EXTERNALLOG: u32 = 1 << 3;
/// v2 incompat: the dump holds realtime device contents.
pub const MD2_INCOMPAT_RTDEVICE: u32 = 1 << 0;

/// Bytes of the v1 index block header.
pub const MD1_HDR: usize = 8;
/// Size of a v1 index block (`1 << 9`, the block size every xfs_metadump writes).
pub const MD1_BLOCK: usize = 512;
/// Addresses per v1 index block.
pub const MD1_MAX_INDICES: usize = (MD1_BLOCK - MD1_HDR) / 8;
/// Bytes of the v2 header.
pub const MD2_HDR: usize = 24;
/// Bytes of a v2 extent record.
pub const MD2_EXTENT: usize = 12;
/// Where the device bits of a v2 address start.
pub const MD2_DEVICE_SHIFT: u32 = 54;
/// The 512-byte address part of a v2 address.
pub const MD2_DADDR_MASK: u64 = (1 << MD2_DEVICE_SHIFT) - 1;
/// v2 device bits: data device.
pub const MD2_DEV_DATA: u64 = 0;
/// v2 device bits: external log.
pub const MD2_DEV_LOG: u64 = 1;
/// v2 device bits: realtime device.
pub const MD2_DEV_RT: u64 = 2;

/// A metadump file's header, as `xfs_mdrestore -i` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// v1: the first index block's count, block log and info flags.
    V1 { count: u16, blocklog: u8, info: u8 },
    /// v2: the compat and incompat flags.
    V2 { compat: u32, incompat: u32 },
}

impl Header {
    /// The format version, 1 or 2.
    pub fn version(&self) -> u32 {
        match self {
            Header::V1 { .. } => 1,
            Header::V2 { .. } => 2,
        }
    }

    /// Whether names were obfuscated.
    pub fn obfuscated(&self) -> bool {
        match *self {
            Header::V1 { info, .. } => info & MD1_INFO_FLAGS != 0 && info & MD1_OBFUSCATED != 0,
            Header::V2 { compat, .. } => compat & MD2_COMPAT_OBFUSCATED != 0,
        }
    }

    /// The line `xfs_mdrestore -i` (7.2) prints for this header, `name`
    /// being the metadump file as given.
    pub fn info_line(&self, name: &str) -> String {
        let not = |b: bool| if b { "" } else { "not " };
        match *self {
            Header::V1 { info, .. } => {
                if info & MD1_INFO_FLAGS == 0 {
                    return format!("{name}: no informational flags present");
                }
                format!(
                    "{name}: {}obfuscated, {} log, {} metadata blocks",
                    not(info & MD1_OBFUSCATED != 0),
                    if info & MD1_DIRTYLOG != 0 {
                        "dirty"
                    } else {
                        "clean"
                    },
                    if info & MD1_FULLBLOCKS != 0 {
                        "full"
                    } else {
                        "zeroed"
                    },
                )
            }
            Header::V2 { compat, incompat } => format!(
                "{name}: {}obfuscated, {} log, external log contents are {}dumped, \
                 rt device contents are {}dumped, {} metadata blocks,",
                not(compat & MD2_COMPAT_OBFUSCATED != 0),
                if compat & MD2_COMPAT_DIRTYLOG != 0 {
                    "dirty"
                } else {
                    "clean"
                },
                not(compat & MD2_COMPAT_EXTERNALLOG != 0),
                not(incompat & MD2_INCOMPAT_RTDEVICE != 0),
                if compat & MD2_COMPAT_FULLBLOCKS != 0 {
                    "full"
                } else {
                    "zeroed"
                },
            ),
        }
    }
}

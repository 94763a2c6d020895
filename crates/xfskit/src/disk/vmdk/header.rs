//! The hosted sparse extent header ("KDMV", VMware Virtual Disk Format
//! 1.1, section "Hosted Sparse Extent Header"), little-endian, in the
//! first sector of a sparse extent and, for a streamOptimized file whose
//! header says `GD_AT_END`, again in the footer near the end.

use crate::bytes::{le32, le64};

/// The magic at byte 0 of a sparse extent (the u32 0x564d444b stored
/// little-endian).
pub(super) const MAGIC: &[u8; 4] = b"KDMV";
/// The magic of the older ESX 2 sparse format (VMDK3, "COWD").
pub(super) const COWD: &[u8; 4] = b"COWD";
pub(super) const SECTOR: u64 = 512;

/// Flag bit 0: the newline test bytes are valid.
pub(super) const FLAG_NL_TEST: u32 = 1;
/// Flag bit 1: a redundant grain directory (and its tables) is kept.
pub(super) const FLAG_RGD: u32 = 1 << 1;
/// Flag bit 2: a grain table entry of 1 means a grain of zeros.
pub(super) const FLAG_ZERO_GRAIN: u32 = 1 << 2;
/// Flag bit 16: grains are compressed.
pub(super) const FLAG_COMPRESSED: u32 = 1 << 16;
/// Flag bit 17: the file has markers (streamOptimized).
pub(super) const FLAG_MARKERS: u32 = 1 << 17;
/// The grain directory offset that sends the reader to the footer.
pub(super) const GD_AT_END: u64 = u64::MAX;
/// compressAlgorithm: deflate (in a zlib stream, as VMware and QEMU write it).
pub(super) const COMPRESS_DEFLATE: u16 = 1;

/// Metadata marker types (streamOptimized).
pub(super) const MARKER_EOS: u32 = 0;
pub(super) const MARKER_GT: u32 = 1;
pub(super) const MARKER_GD: u32 = 2;
pub(super) const MARKER_FOOTER: u32 = 3;

/// The header fields (sizes and offsets in sectors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub version: u32,
    pub flags: u32,
    pub capacity: u64,
    pub grain: u64,
    pub desc_offset: u64,
    pub desc_size: u64,
    pub gtes: u32,
    pub rgd_offset: u64,
    pub gd_offset: u64,
    pub overhead: u64,
    pub unclean: u8,
    pub compress: u16,
}

impl Header {
    /// The header in `b` (at least 79 bytes, starting with the magic).
    pub fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < 79 || &b[..4] != MAGIC {
            return None;
        }
        Some(Header {
            version: le32(b, 4),
            flags: le32(b, 8),
            capacity: le64(b, 12),
            grain: le64(b, 20),
            desc_offset: le64(b, 28),
            desc_size: le64(b, 36),
            gtes: le32(b, 44),
            rgd_offset: le64(b, 48),
            gd_offset: le64(b, 56),
            overhead: le64(b, 64),
            unclean: b[72],
            compress: u16::from_le_bytes([b[77], b[78]]),
        })
    }

    /// The header as one sector.
    pub fn to_sector(&self) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..20].copy_from_slice(&self.capacity.to_le_bytes());
        b[20..28].copy_from_slice(&self.grain.to_le_bytes());
        b[28..36].copy_from_slice(&self.desc_offset.to_le_bytes());
        b[36..44].copy_from_slice(&self.desc_size.to_le_bytes());
        b[44..48].copy_from_slice(&self.gtes.to_le_bytes());
        b[48..56].copy_from_slice(&self.rgd_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.gd_offset.to_le_bytes());
        b[64..72].copy_from_slice(&self.overhead.to_le_bytes());
        b[72] = self.unclean;
        // The newline test: "\n \r\n" as a text-mode transfer would break it.
        b[73..77].copy_from_slice(b"\n \r\n");
        b[77..79].copy_from_slice(&self.compress.to_le_bytes());
        b
    }

    pub fn compressed(&self) -> bool {
        self.compress == COMPRESS_DEFLATE || self.flags & FLAG_COMPRESSED != 0
    }

    pub fn markers(&self) -> bool {
        self.flags & FLAG_MARKERS != 0
    }
}

/// A metadata marker sector: `val` (a sector count), size 0, `kind`.
pub(super) fn marker(val: u64, kind: u32) -> [u8; 512] {
    let mut b = [0u8; 512];
    b[..8].copy_from_slice(&val.to_le_bytes());
    b[12..16].copy_from_slice(&kind.to_le_bytes());
    b
}

/// (val, size, type) of the marker sector `b`.
pub(super) fn parse_marker(b: &[u8; 512]) -> (u64, u32, u32) {
    (le64(b, 0), le32(b, 8), le32(b, 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Header {
            version: 1,
            flags: FLAG_NL_TEST | FLAG_RGD,
            capacity: 1 << 21,
            grain: 128,
            desc_offset: 1,
            desc_size: 20,
            gtes: 512,
            rgd_offset: 21,
            gd_offset: 54,
            overhead: 128,
            unclean: 0,
            compress: 0,
        };
        let s = h.to_sector();
        assert_eq!(Header::parse(&s), Some(h));
        assert_eq!(parse_marker(&marker(4, MARKER_GT)), (4, 0, MARKER_GT));
    }
}

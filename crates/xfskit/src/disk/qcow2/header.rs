//! The qcow2 header (QEMU's docs/interop/qcow2.txt), big-endian:
//!
//! | off | field | | off | field (v3) |
//! |---|---|---|---|---|
//! | 0 | magic `QFI\xfb` | | 72 | incompatible features |
//! | 4 | version (2, 3) | | 80 | compatible features |
//! | 8 | backing file name offset | | 88 | autoclear features |
//! | 16 | backing file name length | | 96 | refcount order |
//! | 20 | cluster bits | | 100 | header length |
//! | 24 | virtual size | | 104 | compression type (0 zlib, 1 zstd) |
//! | 32 | encryption method | | | |
//! | 36 | L1 entries | | | |
//! | 40 | L1 table offset | | | |
//! | 48..72 | refcount table, snapshots (not read) | | | |
//!
//! Header extensions follow the header (at 72 in v2, at the header length in
//! v3) up to the end of the first cluster: type (u32), length (u32), data
//! padded to 8 bytes; type 0 ends the list.

use crate::bytes::{be32, be64};
use crate::disk::corrupt;
use crate::error::{Error, Result};

/// The magic at byte 0.
pub const MAGIC: &[u8; 4] = b"QFI\xfb";
/// Extension: the backing file's format name.
const EXT_BACKING_FORMAT: u32 = 0xE279_2ACA;
/// Extension: an external data file's name.
const EXT_DATA_FILE: u32 = 0x4441_5441;
/// Largest L1 table QEMU writes (32 MiB).
const L1_MAX_BYTES: u64 = 32 << 20;

/// Incompatible feature bits.
const INCOMPAT_DIRTY: u64 = 1;
const INCOMPAT_CORRUPT: u64 = 1 << 1;
const INCOMPAT_DATA_FILE: u64 = 1 << 2;
const INCOMPAT_COMPRESSION: u64 = 1 << 3;
const INCOMPAT_EXTENDED_L2: u64 = 1 << 4;

/// How compressed clusters are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Raw deflate (no zlib header), as QEMU has always written.
    Zlib,
    /// A zstd stream (QEMU 5.1 on, `compression_type=zstd`).
    Zstd,
}

/// A checked header.
#[derive(Debug, Clone)]
pub struct Header {
    /// 2 or 3.
    pub version: u32,
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// The disk's size in bytes.
    pub size: u64,
    /// L1 entries and where they lie.
    pub l1_entries: u32,
    pub l1_offset: u64,
    /// The backing file named in the header, if any.
    pub backing_file: Option<String>,
    /// Its format from the header extension ("raw", "qcow2"), if given.
    pub backing_format: Option<String>,
    /// Compression of compressed clusters.
    pub compression: Compression,
    /// The image was not closed cleanly (refcounts may be stale; the
    /// mappings read here are still valid).
    pub dirty: bool,
    /// The refcount table: where, and how many clusters long.
    pub refcount_table_offset: u64,
    pub refcount_table_clusters: u32,
    /// Internal snapshots.
    pub snapshots: u32,
    /// log2 of the bits of one refcount (4 in v2).
    pub refcount_order: u32,
    /// Autoclear feature bits (v3), cleared by writers that do not know them.
    pub autoclear: u64,
}

/// Parses and checks the header in `first` (the first cluster of the file,
/// or as much of it as the file has), for a file of `file_len` bytes.
/// `read` reads bytes elsewhere in the file (the backing file name).
pub fn parse(
    first: &[u8],
    file_len: u64,
    read: impl Fn(u64, usize) -> std::io::Result<Vec<u8>>,
) -> Result<Header> {
    let bad = |detail: String| corrupt("qcow2 header", "byte 0".into(), detail);
    if first.len() < 72 || &first[0..4] != MAGIC {
        return Err(bad("no qcow2 magic, or shorter than a header".into()));
    }
    let version = be32(first, 4);
    if version != 2 && version != 3 {
        return Err(Error::Unsupported(format!("qcow2 version {version}")));
    }
    let cluster_bits = be32(first, 20);
    if !(9..=21).contains(&cluster_bits) {
        return Err(bad(format!(
            "cluster bits {cluster_bits} (9 to 21 are valid)"
        )));
    }
    let cluster = 1u64 << cluster_bits;
    let size = be64(first, 24);
    if be32(first, 32) != 0 {
        return Err(Error::Unsupported("encrypted qcow2 images".into()));
    }
    let l1_entries = be32(first, 36);
    let l1_offset = be64(first, 40);
    let (mut incompat, mut header_len, mut compression) = (0, 72usize, Compression::Zlib);
    let (mut refcount_order, mut autoclear) = (4, 0);
    if version == 3 {
        if first.len() < 104 {
            return Err(bad("a v3 header shorter than 104 bytes".into()));
        }
        incompat = be64(first, 72);
        autoclear = be64(first, 88);
        refcount_order = be32(first, 96);
        header_len = be32(first, 100) as usize;
        if header_len < 104 || header_len > first.len() || header_len % 8 != 0 {
            return Err(bad(format!("header length {header_len}")));
        }
        if incompat & INCOMPAT_COMPRESSION != 0 {
            if header_len < 105 {
                return Err(bad("compression type bit set without the field".into()));
            }
            compression = match first[104] {
                0 => Compression::Zlib,
                1 => Compression::Zstd,
                t => return Err(Error::Unsupported(format!("qcow2 compression type {t}"))),
            };
        }
    }
    if incompat & INCOMPAT_CORRUPT != 0 {
        return Err(bad(
            "QEMU marked the image corrupt (run qemu-img check -r all)".into(),
        ));
    }
    if incompat & INCOMPAT_DATA_FILE != 0 {
        return Err(Error::Unsupported(
            "qcow2 images with an external data file".into(),
        ));
    }
    if incompat & INCOMPAT_EXTENDED_L2 != 0 {
        return Err(Error::Unsupported(
            "qcow2 images with extended L2 entries (subclusters)".into(),
        ));
    }
    let known = INCOMPAT_DIRTY | INCOMPAT_COMPRESSION;
    if incompat & !known != 0 {
        return Err(Error::Unsupported(format!(
            "qcow2 incompatible features {:#x}",
            incompat & !known
        )));
    }
    // The L1 table must cover the whole disk and lie inside the file.
    let per_l1 = cluster * (cluster / 8);
    let needed = size.div_ceil(per_l1);
    let l1_bytes = u64::from(l1_entries) * 8;
    if u64::from(l1_entries) < needed || l1_bytes > L1_MAX_BYTES {
        return Err(bad(format!(
            "{l1_entries} L1 entries for a {size}-byte disk (it needs {needed})"
        )));
    }
    if !l1_offset.is_multiple_of(cluster)
        || l1_offset.checked_add(l1_bytes).is_none_or(|e| e > file_len)
    {
        return Err(corrupt(
            "qcow2 L1 table",
            format!("offset {l1_offset}"),
            format!("{l1_bytes} bytes do not lie cluster-aligned inside the {file_len}-byte file"),
        ));
    }
    let backing_file = backing_name(first, file_len, &read)?;
    let mut backing_format = None;
    let mut at = header_len;
    while at + 8 <= first.len() {
        let (kind, len) = (be32(first, at), be32(first, at + 4) as usize);
        let data = at + 8;
        let Some(end) = data.checked_add(len).filter(|&e| e <= first.len()) else {
            return Err(corrupt(
                "qcow2 header extension",
                format!("byte {at}"),
                format!("{len} bytes run past the first cluster"),
            ));
        };
        match kind {
            0 => break,
            EXT_BACKING_FORMAT => {
                backing_format = Some(String::from_utf8_lossy(&first[data..end]).into_owned())
            }
            EXT_DATA_FILE => {}
            _ => {}
        }
        at = data + len.div_ceil(8) * 8;
    }
    Ok(Header {
        version,
        cluster_bits,
        size,
        l1_entries,
        l1_offset,
        backing_file,
        backing_format,
        compression,
        dirty: incompat & INCOMPAT_DIRTY != 0,
        refcount_table_offset: be64(first, 48),
        refcount_table_clusters: be32(first, 56),
        snapshots: be32(first, 60),
        refcount_order,
        autoclear,
    })
}

fn backing_name(
    first: &[u8],
    file_len: u64,
    read: &impl Fn(u64, usize) -> std::io::Result<Vec<u8>>,
) -> Result<Option<String>> {
    let off = be64(first, 8);
    let len = be32(first, 16);
    if off == 0 || len == 0 {
        return Ok(None);
    }
    let whr = || format!("offset {off}");
    if len > 1023 || off.checked_add(u64::from(len)).is_none_or(|e| e > file_len) {
        return Err(corrupt(
            "qcow2 backing file name",
            whr(),
            format!("{len} bytes do not lie inside the {file_len}-byte file"),
        ));
    }
    let b = read(off, len as usize)?;
    String::from_utf8(b)
        .map(Some)
        .map_err(|_| corrupt("qcow2 backing file name", whr(), "not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3(size: u64, l1: u32) -> Vec<u8> {
        let mut h = vec![0u8; 65536];
        h[0..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&3u32.to_be_bytes());
        h[20..24].copy_from_slice(&16u32.to_be_bytes());
        h[24..32].copy_from_slice(&size.to_be_bytes());
        h[36..40].copy_from_slice(&l1.to_be_bytes());
        h[40..48].copy_from_slice(&65536u64.to_be_bytes());
        h[100..104].copy_from_slice(&112u32.to_be_bytes());
        h
    }

    fn no_read(_: u64, _: usize) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::other("no"))
    }

    #[test]
    fn a_small_v3_header() {
        let h = parse(&v3(1 << 30, 2), 1 << 20, no_read).unwrap();
        assert_eq!((h.version, h.cluster_bits, h.size), (3, 16, 1 << 30));
        assert_eq!(h.compression, Compression::Zlib);
    }

    #[test]
    fn refuses_a_short_l1_and_an_l1_past_the_end() {
        // 64 KiB clusters: one L1 entry covers 512 MiB.
        let e = parse(&v3(2 << 30, 3), 1 << 20, no_read)
            .unwrap_err()
            .to_string();
        assert!(e.contains("it needs 4"), "{e}");
        let e = parse(&v3(1 << 30, 2), 65536, no_read)
            .unwrap_err()
            .to_string();
        assert!(e.contains("L1 table at offset 65536"), "{e}");
    }

    #[test]
    fn an_extension_running_past_the_cluster_is_corrupt() {
        let mut h = v3(1 << 30, 2);
        h[112..116].copy_from_slice(&EXT_BACKING_FORMAT.to_be_bytes());
        h[116..120].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = parse(&h, 1 << 20, no_read).unwrap_err().to_string();
        assert!(e.contains("header extension at byte 112"), "{e}");
    }
}

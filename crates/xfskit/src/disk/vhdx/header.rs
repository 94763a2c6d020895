//! The fixed structures of a VHDX file: the file type identifier, the two
//! headers, the region table and the metadata region ([MS-VHDX] 2.2, 2.3,
//! 2.6). Every offset and length read here is checked against the file
//! before it is used.

use super::{guid, MIB};
use crate::bytes::{le16, le32, le64};
use crate::dev::Device;
use crate::error::{Error, Result};

/// Where the headers are.
pub(super) const HEADER_OFFSETS: [u64; 2] = [64 << 10, 128 << 10];
/// Where the two copies of the region table are.
pub(super) const REGION_OFFSETS: [u64; 2] = [192 << 10, 256 << 10];
/// Bytes a header's checksum covers.
pub(super) const HEADER_BYTES: usize = 4096;
/// Bytes a region table (and the metadata table) occupies.
pub(super) const TABLE_BYTES: usize = 64 << 10;

pub(super) const BAT_GUID: [u8; 16] = guid(
    0x2dc2_7766,
    0xf623,
    0x4200,
    [0x9d, 0x64, 0x11, 0x5e, 0x9b, 0xfd, 0x4a, 0x08],
);
pub(super) const METADATA_GUID: [u8; 16] = guid(
    0x8b7c_a206,
    0x4790,
    0x4b9a,
    [0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e],
);
pub(super) const FILE_PARAMS_GUID: [u8; 16] = guid(
    0xcaa1_6737,
    0xfa36,
    0x4d43,
    [0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b],
);
pub(super) const VIRTUAL_SIZE_GUID: [u8; 16] = guid(
    0x2fa5_4224,
    0xcd1b,
    0x4876,
    [0xb2, 0x11, 0x5d, 0xbe, 0xd8, 0x3b, 0xf4, 0xb8],
);
pub(super) const PAGE83_GUID: [u8; 16] = guid(
    0xbeca_12ab,
    0xb2e6,
    0x4523,
    [0x93, 0xef, 0xc3, 0x09, 0xe0, 0x00, 0xc7, 0x46],
);
pub(super) const LOGICAL_SECTOR_GUID: [u8; 16] = guid(
    0x8141_bf1d,
    0xa96f,
    0x4709,
    [0xba, 0x47, 0xf2, 0x33, 0xa8, 0xfa, 0xab, 0x5f],
);
pub(super) const PHYSICAL_SECTOR_GUID: [u8; 16] = guid(
    0xcda3_48c7,
    0x445d,
    0x4471,
    [0x9c, 0xc9, 0xe9, 0x88, 0x52, 0x51, 0xc5, 0x56],
);
pub(super) const PARENT_LOCATOR_GUID: [u8; 16] = guid(
    0xa8d3_5f2d,
    0xb30b,
    0x454d,
    [0xab, 0xf7, 0xd3, 0xd8, 0x48, 0x34, 0xab, 0x0c],
);
/// The locator type of a VHDX parent.
pub(super) const PARENT_VHDX_GUID: [u8; 16] = guid(
    0xb04a_efb7,
    0xd19e,
    0x4a81,
    [0xb7, 0x89, 0x25, 0xb8, 0xe9, 0x44, 0x59, 0x13],
);

/// Largest metadata item read (the specification's limit).
const ITEM_MAX: u64 = MIB;

/// One of the two headers, as read (the whole 4 KiB kept, so that an
/// update keeps the reserved bytes).
#[derive(Clone)]
pub(super) struct Header {
    pub raw: Vec<u8>,
    pub seq: u64,
    pub file_write: [u8; 16],
    pub data_write: [u8; 16],
    pub log_guid: [u8; 16],
    pub log_version: u16,
    pub log_length: u32,
    pub log_offset: u64,
}

impl Header {
    /// The header in `raw` (4 KiB), if its signature, checksum and version
    /// are right.
    pub fn parse(raw: &[u8]) -> Option<Header> {
        if raw.len() != HEADER_BYTES || &raw[..4] != b"head" || !crc_ok(raw, 4) {
            return None;
        }
        if le16(raw, 66) != 1 {
            return None;
        }
        Some(Header {
            raw: raw.to_vec(),
            seq: le64(raw, 8),
            file_write: raw[16..32].try_into().unwrap_or_default(),
            data_write: raw[32..48].try_into().unwrap_or_default(),
            log_guid: raw[48..64].try_into().unwrap_or_default(),
            log_version: le16(raw, 64),
            log_length: le32(raw, 68),
            log_offset: le64(raw, 72),
        })
    }

    /// The 4 KiB to write: the fields over the kept bytes, checksummed.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.raw.clone();
        b.resize(HEADER_BYTES, 0);
        b[..4].copy_from_slice(b"head");
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..32].copy_from_slice(&self.file_write);
        b[32..48].copy_from_slice(&self.data_write);
        b[48..64].copy_from_slice(&self.log_guid);
        b[64..66].copy_from_slice(&self.log_version.to_le_bytes());
        b[66..68].copy_from_slice(&1u16.to_le_bytes());
        b[68..72].copy_from_slice(&self.log_length.to_le_bytes());
        b[72..80].copy_from_slice(&self.log_offset.to_le_bytes());
        set_crc(&mut b, 4);
        b
    }
}

/// True when the CRC-32C of `b`, with its 4-byte checksum field at `at`
/// taken as zero, is the value stored there.
pub(super) fn crc_ok(b: &[u8], at: usize) -> bool {
    let stored = le32(b, at);
    let mut c = crc32c::crc32c(&b[..at]);
    c = crc32c::crc32c_append(c, &[0u8; 4]);
    c = crc32c::crc32c_append(c, &b[at + 4..]);
    c == stored
}

/// Stores the CRC-32C of `b` in its checksum field at `at`.
pub(super) fn set_crc(b: &mut [u8], at: usize) {
    b[at..at + 4].fill(0);
    let c = crc32c::crc32c(b);
    b[at..at + 4].copy_from_slice(&c.to_le_bytes());
}

/// The two headers (None for one that is not valid) and which is current.
pub(super) fn read_headers(file: &dyn Device, what: &str) -> Result<([Option<Header>; 2], usize)> {
    let flen = file.len();
    let mut hs: [Option<Header>; 2] = [None, None];
    for (i, &off) in HEADER_OFFSETS.iter().enumerate() {
        if off + HEADER_BYTES as u64 <= flen {
            let mut raw = vec![0u8; HEADER_BYTES];
            file.read_at(&mut raw, off)?;
            hs[i] = Header::parse(&raw);
        }
    }
    let cur = match (&hs[0], &hs[1]) {
        (Some(a), Some(b)) => usize::from(b.seq > a.seq),
        (Some(_), None) => 0,
        (None, Some(_)) => 1,
        (None, None) => {
            return Err(crate::disk::corrupt(
                "VHDX header",
                format!("{what} at bytes 0x10000 and 0x20000"),
                "neither header has a valid signature, checksum and version",
            ))
        }
    };
    Ok((hs, cur))
}

/// A region the region table names.
#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    pub offset: u64,
    pub length: u64,
}

/// The BAT and metadata regions, from the first region table that is valid.
pub(super) fn read_regions(file: &dyn Device, what: &str) -> Result<(Region, Region)> {
    let flen = file.len();
    let mut why = String::from("the file is too short to hold it");
    for &off in &REGION_OFFSETS {
        if off + TABLE_BYTES as u64 > flen {
            continue;
        }
        let mut t = vec![0u8; TABLE_BYTES];
        file.read_at(&mut t, off)?;
        if &t[..4] != b"regi" {
            why = format!("no \"regi\" signature at byte {off:#x}");
            continue;
        }
        if !crc_ok(&t, 4) {
            why = format!("bad checksum of the table at byte {off:#x}");
            continue;
        }
        let count = le32(&t, 8) as usize;
        if count > 2047 {
            return Err(crate::disk::corrupt(
                "VHDX region table",
                format!("{what} at byte {off:#x}"),
                format!("{count} entries (at most 2047)"),
            ));
        }
        let (mut bat, mut meta) = (None, None);
        for i in 0..count {
            let e = &t[16 + 32 * i..48 + 32 * i];
            let g: [u8; 16] = e[..16].try_into().unwrap_or_default();
            let r = Region {
                offset: le64(e, 16),
                length: u64::from(le32(e, 24)),
            };
            let required = le32(e, 28) & 1 != 0;
            let slot = if g == BAT_GUID {
                &mut bat
            } else if g == METADATA_GUID {
                &mut meta
            } else if required {
                return Err(Error::Unsupported(format!(
                    "{what}: the VHDX region table entry {i} at byte {:#x} is a required region this reader does not know",
                    off + 16 + 32 * i as u64
                )));
            } else {
                continue;
            };
            let bad = if slot.is_some() {
                Some("names a region a second time".to_string())
            } else if r.offset < MIB
                || !r.offset.is_multiple_of(MIB)
                || r.length == 0
                || !r.length.is_multiple_of(MIB)
            {
                Some(format!(
                    "region at byte {:#x}, {} bytes: not whole MiB past the header section",
                    r.offset, r.length
                ))
            } else if r.offset.checked_add(r.length).is_none_or(|e| e > flen) {
                Some(format!(
                    "region at byte {:#x}, {} bytes, past the end of the {flen}-byte file",
                    r.offset, r.length
                ))
            } else {
                None
            };
            if let Some(d) = bad {
                return Err(crate::disk::corrupt(
                    "VHDX region table entry",
                    format!("{what}: entry {i} at byte {:#x}", off + 16 + 32 * i as u64),
                    d,
                ));
            }
            *slot = Some(r);
        }
        let (Some(bat), Some(meta)) = (bat, meta) else {
            return Err(crate::disk::corrupt(
                "VHDX region table",
                format!("{what} at byte {off:#x}"),
                "it does not name both the BAT and the metadata region",
            ));
        };
        if overlap(bat, meta) {
            return Err(crate::disk::corrupt(
                "VHDX region table",
                format!("{what} at byte {off:#x}"),
                "the BAT and the metadata region overlap",
            ));
        }
        return Ok((bat, meta));
    }
    Err(crate::disk::corrupt(
        "VHDX region table",
        format!("{what} at bytes 0x30000 and 0x40000"),
        format!("neither copy is valid ({why})"),
    ))
}

pub(super) fn overlap(a: Region, b: Region) -> bool {
    a.offset < b.offset.saturating_add(b.length) && b.offset < a.offset.saturating_add(a.length)
}

/// What the metadata region says.
#[derive(Clone, Debug)]
pub(super) struct Meta {
    pub block_size: u64,
    pub leave_allocated: bool,
    pub has_parent: bool,
    pub size: u64,
    pub logical_sector: u32,
    pub physical_sector: u32,
    /// key, value pairs of the parent locator (differencing disks).
    pub locator: Vec<(String, String)>,
}

pub(super) fn read_metadata(file: &dyn Device, region: Region, what: &str) -> Result<Meta> {
    let bad = |at: u64, d: String| {
        crate::disk::corrupt("VHDX metadata", format!("{what}: byte {at:#x}"), d)
    };
    let mut t = vec![0u8; TABLE_BYTES];
    file.read_at(&mut t, region.offset)?;
    if &t[..8] != b"metadata" {
        return Err(bad(region.offset, "no \"metadata\" signature".into()));
    }
    let count = le16(&t, 10) as usize;
    if count > 2047 {
        return Err(bad(
            region.offset,
            format!("{count} entries (at most 2047)"),
        ));
    }
    let mut items: [Option<(u64, u64)>; 6] = [None; 6];
    let known = [
        FILE_PARAMS_GUID,
        VIRTUAL_SIZE_GUID,
        PAGE83_GUID,
        LOGICAL_SECTOR_GUID,
        PHYSICAL_SECTOR_GUID,
        PARENT_LOCATOR_GUID,
    ];
    for i in 0..count {
        let e = &t[32 + 32 * i..64 + 32 * i];
        let at = region.offset + 32 + 32 * i as u64;
        let g: [u8; 16] = e[..16].try_into().unwrap_or_default();
        let off = u64::from(le32(e, 16));
        let len = u64::from(le32(e, 20));
        let flags = le32(e, 24);
        let Some(k) = known.iter().position(|x| *x == g) else {
            if flags & 4 != 0 {
                return Err(Error::Unsupported(format!(
                    "{what}: the VHDX metadata entry {i} at byte {at:#x} is a required item this reader does not know"
                )));
            }
            continue;
        };
        if items[k].is_some() {
            return Err(bad(at, format!("entry {i} names an item a second time")));
        }
        if len > ITEM_MAX || (len != 0 && (off < TABLE_BYTES as u64 || off + len > region.length)) {
            return Err(bad(
                at,
                format!(
                    "entry {i}: item at offset {off:#x}, {len} bytes, does not lie inside the {}-byte region",
                    region.length
                ),
            ));
        }
        items[k] = Some((region.offset + off, len));
    }
    let read = |k: usize, min: u64, name: &str| -> Result<Vec<u8>> {
        let Some((off, len)) = items[k] else {
            return Err(bad(region.offset, format!("the {name} item is missing")));
        };
        if len < min {
            return Err(bad(
                off,
                format!("the {name} item is {len} bytes (less than {min})"),
            ));
        }
        let mut b = vec![0u8; len as usize];
        file.read_at(&mut b, off)?;
        Ok(b)
    };
    let fp = read(0, 8, "file parameters")?;
    let block_size = u64::from(le32(&fp, 0));
    let bits = le32(&fp, 4);
    let vs = read(1, 8, "virtual disk size")?;
    let size = le64(&vs, 0);
    let ls = read(3, 4, "logical sector size")?;
    let logical_sector = le32(&ls, 0);
    let ps = read(4, 4, "physical sector size")?;
    let physical_sector = le32(&ps, 0);
    let at_fp = items[0].map_or(0, |i| i.0);
    if !block_size.is_power_of_two() || !(MIB..=256 * MIB).contains(&block_size) {
        return Err(bad(
            at_fp,
            format!("block size {block_size} (a power of two from 1 MiB to 256 MiB)"),
        ));
    }
    let at_ls = items[3].map_or(0, |i| i.0);
    if logical_sector != 512 && logical_sector != 4096 {
        return Err(bad(
            at_ls,
            format!("logical sector size {logical_sector} (512 or 4096)"),
        ));
    }
    let at_vs = items[1].map_or(0, |i| i.0);
    if size == 0 || size > 64 << 40 || !size.is_multiple_of(u64::from(logical_sector)) {
        return Err(bad(
            at_vs,
            format!("virtual disk size {size} (whole logical sectors, at most 64 TiB)"),
        ));
    }
    let has_parent = bits & 2 != 0;
    let mut locator = Vec::new();
    if has_parent {
        let pl = read(5, 20, "parent locator")?;
        let at_pl = items[5].map_or(0, |i| i.0);
        locator = parse_locator(&pl).map_err(|d| bad(at_pl, d))?;
    }
    Ok(Meta {
        block_size,
        leave_allocated: bits & 1 != 0,
        has_parent,
        size,
        logical_sector,
        physical_sector,
        locator,
    })
}

/// The key/value pairs of a parent locator item.
pub(super) fn parse_locator(pl: &[u8]) -> std::result::Result<Vec<(String, String)>, String> {
    let g: [u8; 16] = pl[..16].try_into().unwrap_or_default();
    if g != PARENT_VHDX_GUID {
        return Err("the parent locator's type is not VHDX".into());
    }
    let n = le16(pl, 18) as usize;
    if 20 + 12 * n > pl.len() {
        return Err(format!("{n} parent locator entries do not fit the item"));
    }
    let s = |off: u32, len: u16| -> std::result::Result<String, String> {
        let (o, l) = (off as usize, len as usize);
        if !l.is_multiple_of(2) || o.checked_add(l).is_none_or(|e| e > pl.len()) {
            return Err(format!(
                "a parent locator string at {o}, {l} bytes, lies outside the item"
            ));
        }
        let u: Vec<u16> = pl[o..o + l]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Ok(String::from_utf16_lossy(&u))
    };
    let mut kv = Vec::with_capacity(n);
    for i in 0..n {
        let e = &pl[20 + 12 * i..32 + 12 * i];
        let k = s(le32(e, 0), le16(e, 8))?;
        let v = s(le32(e, 4), le16(e, 10))?;
        kv.push((k, v));
    }
    Ok(kv)
}

/// A parent locator item holding `kv`.
pub(super) fn encode_locator(kv: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + 12 * kv.len()];
    b[..16].copy_from_slice(&PARENT_VHDX_GUID);
    b[18..20].copy_from_slice(&(kv.len() as u16).to_le_bytes());
    for (i, (k, v)) in kv.iter().enumerate() {
        let mut put = |s: &str| -> (u32, u16) {
            let off = b.len() as u32;
            for u in s.encode_utf16() {
                b.extend_from_slice(&u.to_le_bytes());
            }
            (off, (b.len() as u32 - off) as u16)
        };
        let (ko, kl) = put(k);
        let (vo, vl) = put(v);
        let e = &mut b[20 + 12 * i..32 + 12 * i];
        e[0..4].copy_from_slice(&ko.to_le_bytes());
        e[4..8].copy_from_slice(&vo.to_le_bytes());
        e[8..10].copy_from_slice(&kl.to_le_bytes());
        e[10..12].copy_from_slice(&vl.to_le_bytes());
    }
    b
}

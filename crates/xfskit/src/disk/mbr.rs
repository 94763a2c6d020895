//! MBR (DOS) partition tables: four primary entries in sector 0, and the
//! logical partitions of an extended partition, one per EBR in a chain.
//!
//! Sector 0: boot code, four 16-byte entries at 446, 0x55 0xAA at 510.
//! Entry: 0 status (0x00 or 0x80), 1 CHS start, 4 type, 5 CHS end, 8 first
//! LBA (u32 LE), 12 sector count (u32 LE). An EBR has the same layout: its
//! first entry is a logical partition relative to the EBR, its second the
//! next EBR relative to the extended partition's start.

use super::{corrupt, Partition, Scheme, Table};
use crate::bytes::le32;
use crate::dev::Device;
use crate::error::Result;

const SECTOR: u64 = 512;
/// The type byte of the protective entry of a GPT disk.
pub(crate) const PROTECTIVE: u8 = 0xEE;
/// Logical partitions followed at most (Linux stops far earlier in practice).
const LOGICAL_MAX: u32 = 256;

/// One entry of sector 0 or an EBR.
#[derive(Debug, Clone, Copy)]
struct Entry {
    status: u8,
    kind: u8,
    first: u32,
    sectors: u32,
}

fn entries(sector: &[u8]) -> [Entry; 4] {
    std::array::from_fn(|i| {
        let e = &sector[446 + 16 * i..462 + 16 * i];
        Entry {
            status: e[0],
            kind: e[4],
            first: le32(e, 8),
            sectors: le32(e, 12),
        }
    })
}

fn is_extended(kind: u8) -> bool {
    matches!(kind, 0x05 | 0x0F | 0x85)
}

/// Reads sector 0: None when it holds no MBR (no 0x55AA, or status bytes
/// that no partition table has, as in a FAT boot sector).
pub(crate) fn sector0(dev: &dyn Device) -> Option<Vec<u8>> {
    let mut s = vec![0u8; SECTOR as usize];
    dev.read_at(&mut s, 0).ok()?;
    if s[510..512] != [0x55, 0xAA] {
        return None;
    }
    let es = entries(&s);
    if es.iter().any(|e| e.status != 0 && e.status != 0x80) {
        return None;
    }
    if es.iter().all(|e| e.kind == 0) {
        return None;
    }
    Some(s)
}

/// True when sector 0 is the protective MBR of a GPT disk.
pub(crate) fn is_protective(sector: &[u8]) -> bool {
    entries(sector).iter().any(|e| e.kind == PROTECTIVE)
}

/// The partitions of the MBR in `sector` (sector 0 of `dev`).
pub(crate) fn read(dev: &dyn Device, sector: &[u8]) -> Result<Table> {
    let mut partitions = Vec::new();
    let mut extended = None;
    for (i, e) in entries(sector).iter().enumerate() {
        if e.kind == 0 || e.sectors == 0 {
            continue;
        }
        let number = i as u32 + 1;
        if is_extended(e.kind) {
            if extended.is_some() {
                return Err(corrupt(
                    "MBR partition entry",
                    format!("entry {number}"),
                    "a second extended partition",
                ));
            }
            extended = Some(*e);
        }
        partitions.push(partition(number, u64::from(e.first), e));
    }
    if let Some(ext) = extended {
        logical(dev, &ext, &mut partitions)?;
    }
    Ok(Table {
        scheme: Scheme::Mbr,
        sector_size: SECTOR as u32,
        partitions,
        notes: Vec::new(),
    })
}

/// Follows the EBR chain of the extended partition `ext`; logical
/// partitions are numbered from 5, as Linux numbers them.
fn logical(dev: &dyn Device, ext: &Entry, out: &mut Vec<Partition>) -> Result<()> {
    let base = u64::from(ext.first);
    let mut rel = 0u64;
    let mut number = 5;
    loop {
        let lba = base + rel;
        let whr = || format!("EBR at LBA {lba}");
        if rel >= u64::from(ext.sectors) {
            return Err(corrupt("EBR", whr(), "lies outside the extended partition"));
        }
        let mut s = vec![0u8; SECTOR as usize];
        if dev.read_at(&mut s, lba * SECTOR).is_err() {
            return Err(corrupt("EBR", whr(), "lies past the end of the disk"));
        }
        if s[510..512] != [0x55, 0xAA] {
            if rel == 0 {
                // An empty extended partition need not hold an EBR.
                return Ok(());
            }
            return Err(corrupt("EBR", whr(), "no 0x55AA signature"));
        }
        let [this, next, ..] = entries(&s);
        if this.kind != 0 && this.sectors != 0 {
            out.push(partition(number, lba + u64::from(this.first), &this));
            number += 1;
        }
        if next.kind == 0 || next.first == 0 {
            return Ok(());
        }
        // Each EBR must lie after the one before: the chain cannot loop.
        if u64::from(next.first) <= rel {
            return Err(corrupt(
                "EBR",
                whr(),
                format!(
                    "the next EBR (LBA {}) does not lie after this one",
                    base + u64::from(next.first)
                ),
            ));
        }
        if number > 4 + LOGICAL_MAX {
            return Err(corrupt("EBR", whr(), "too many logical partitions"));
        }
        rel = u64::from(next.first);
    }
}

fn partition(number: u32, first_lba: u64, e: &Entry) -> Partition {
    Partition {
        number,
        start_bytes: first_lba * SECTOR,
        size_bytes: u64::from(e.sectors) * SECTOR,
        type_id: format!("0x{:02x}", e.kind),
        type_name: type_name(e.kind).to_string(),
        label: String::new(),
    }
}

fn type_name(kind: u8) -> &'static str {
    match kind {
        0x83 => "Linux",
        0x82 => "Linux swap",
        0x8E => "Linux LVM",
        0xFD => "Linux RAID",
        0x05 | 0x0F | 0x85 => "Extended",
        0x07 => "NTFS/exFAT",
        0x0B | 0x0C => "FAT32",
        0x04 | 0x06 | 0x0E => "FAT16",
        0x01 => "FAT12",
        0xEF => "EFI System",
        0xEE => "GPT protective",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn put(s: &mut [u8], at: usize, i: usize, kind: u8, first: u32, sectors: u32) {
        let e = &mut s[at + 446 + 16 * i..at + 462 + 16 * i];
        e[4] = kind;
        e[8..12].copy_from_slice(&first.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
        s[at + 510] = 0x55;
        s[at + 511] = 0xAA;
    }

    #[test]
    fn primary_and_logical_partitions() {
        let mut d = vec![0u8; 512 * 400];
        put(&mut d, 0, 0, 0x83, 2, 10);
        put(&mut d, 0, 1, 0x05, 100, 300);
        // EBR at 100: logical at 100+1, next EBR at 100+50.
        put(&mut d, 100 * 512, 0, 0x83, 1, 20);
        put(&mut d, 100 * 512, 1, 0x05, 50, 60);
        put(&mut d, 150 * 512, 0, 0x82, 2, 30);
        let dev = MemDevice::from_bytes(d);
        let s0 = sector0(&dev).unwrap();
        let t = read(&dev, &s0).unwrap();
        let got: Vec<_> = t
            .partitions
            .iter()
            .map(|p| (p.number, p.start_bytes / 512, p.size_bytes / 512))
            .collect();
        assert_eq!(got, [(1, 2, 10), (2, 100, 300), (5, 101, 20), (6, 152, 30)]);
    }

    #[test]
    fn an_ebr_chain_that_loops_is_an_error() {
        let mut d = vec![0u8; 512 * 400];
        put(&mut d, 0, 0, 0x05, 100, 300);
        put(&mut d, 100 * 512, 0, 0x83, 1, 20);
        put(&mut d, 100 * 512, 1, 0x05, 50, 60);
        put(&mut d, 150 * 512, 1, 0x05, 50, 60);
        let dev = MemDevice::from_bytes(d);
        let s0 = sector0(&dev).unwrap();
        let e = read(&dev, &s0).unwrap_err().to_string();
        assert!(e.contains("EBR at LBA 150"), "{e}");
    }

    #[test]
    fn a_fat_boot_sector_is_no_mbr() {
        let mut d = vec![0u8; 1024];
        d[446] = 0xE9;
        d[450] = 0x83;
        d[510] = 0x55;
        d[511] = 0xAA;
        assert!(sector0(&MemDevice::from_bytes(d)).is_none());
    }
}

//! Writing a new GUID partition table (UEFI spec, chapter 5.3) with one
//! partition: the protective MBR at LBA 0, the primary header at LBA 1 and
//! its 128-entry array from LBA 2, the backup array and header at the end
//! of the disk. Field layout as [`super::gpt`] reads it.

use super::gpt::crc32;
use crate::bytes::{put_le32, put_le64};
use crate::dev::Device;
use crate::error::{Error, Result};

/// Sector size of the tables written here.
pub const SECTOR: u64 = 512;
/// Entries in each array (the usual 16 KiB).
const ENTRIES: u64 = 128;
const ENTRY_SIZE: u64 = 128;
/// Sectors of one entry array.
const ARRAY_SECTORS: u64 = ENTRIES * ENTRY_SIZE / SECTOR;
/// Where partitions start and how they are aligned: 1 MiB.
pub const ALIGN: u64 = 1 << 20;
/// The "Linux filesystem data" type, 0FC63DAF-8483-4772-8E79-3D69D8477DE4,
/// as it is stored (first three fields little-endian).
pub const LINUX_FS: [u8; 16] = [
    0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4,
];

/// The one partition of a disk made by [`write_single`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of the whole disk.
    pub disk_bytes: u64,
    /// Where the partition starts, in bytes.
    pub start_bytes: u64,
    /// Its length in bytes.
    pub size_bytes: u64,
}

/// A disk holding one partition of at least `size_bytes`, starting at
/// 1 MiB, its length rounded up to 1 MiB, with 1 MiB at the end for the
/// backup table.
pub fn layout_for(size_bytes: u64) -> Layout {
    let size = size_bytes.div_ceil(ALIGN) * ALIGN;
    Layout {
        disk_bytes: ALIGN + size + ALIGN,
        start_bytes: ALIGN,
        size_bytes: size,
    }
}

/// Marks a 16-byte random value as a version 4 GUID (as stored: the
/// version lives in the high nibble of the little-endian third field).
fn as_guid_v4(mut g: [u8; 16]) -> [u8; 16] {
    g[7] = (g[7] & 0x0f) | 0x40;
    g[8] = (g[8] & 0x3f) | 0x80;
    g
}

/// One header: at `my_lba`, the other copy at `alt_lba`, its array at
/// `array_lba`.
fn header(
    l: &Layout,
    disk_guid: &[u8; 16],
    my_lba: u64,
    alt_lba: u64,
    array_lba: u64,
    array_crc: u32,
) -> Vec<u8> {
    let last = l.disk_bytes / SECTOR - 1;
    let mut h = vec![0u8; SECTOR as usize];
    h[0..8].copy_from_slice(b"EFI PART");
    put_le32(&mut h, 8, 0x0001_0000);
    put_le32(&mut h, 12, 92);
    put_le64(&mut h, 24, my_lba);
    put_le64(&mut h, 32, alt_lba);
    put_le64(&mut h, 40, 2 + ARRAY_SECTORS);
    put_le64(&mut h, 48, last - 1 - ARRAY_SECTORS);
    h[56..72].copy_from_slice(disk_guid);
    put_le64(&mut h, 72, array_lba);
    put_le32(&mut h, 80, ENTRIES as u32);
    put_le32(&mut h, 84, ENTRY_SIZE as u32);
    put_le32(&mut h, 88, array_crc);
    let crc = crc32(&h[..92]);
    put_le32(&mut h, 16, crc);
    h
}

/// Writes a protective MBR and a GPT holding one partition of type
/// `type_guid` named `name` as `l` places it. The GUIDs come from `seed`
/// (16 random bytes, or fixed ones for a reproducible disk).
pub fn write_single(
    dev: &dyn Device,
    l: &Layout,
    type_guid: &[u8; 16],
    name: &str,
    seed: [u8; 16],
) -> Result<()> {
    let sectors = l.disk_bytes / SECTOR;
    if !l.disk_bytes.is_multiple_of(SECTOR)
        || !l.start_bytes.is_multiple_of(SECTOR)
        || !l.size_bytes.is_multiple_of(SECTOR)
        || dev.len() < l.disk_bytes
        || l.start_bytes < (2 + ARRAY_SECTORS) * SECTOR
        || l.start_bytes + l.size_bytes > (sectors - 1 - ARRAY_SECTORS) * SECTOR
    {
        return Err(Error::Invalid(format!(
            "a GPT cannot hold a partition as {l:?}"
        )));
    }
    let disk_guid = as_guid_v4(seed);
    let mut part_guid = seed;
    part_guid.reverse();
    let part_guid = as_guid_v4(part_guid.map(|b| b ^ 0x5a));
    // The protective MBR: one partition of type 0xEE over the whole disk.
    let mut mbr = vec![0u8; SECTOR as usize];
    let e = 446;
    mbr[e + 1..e + 4].copy_from_slice(&[0x00, 0x02, 0x00]);
    mbr[e + 4] = 0xEE;
    mbr[e + 5..e + 8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    put_le32(&mut mbr, e + 8, 1);
    put_le32(
        &mut mbr,
        e + 12,
        (sectors - 1).min(u64::from(u32::MAX)) as u32,
    );
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    // The entry array: the partition in entry 0.
    let mut array = vec![0u8; (ENTRIES * ENTRY_SIZE) as usize];
    array[0..16].copy_from_slice(type_guid);
    array[16..32].copy_from_slice(&part_guid);
    put_le64(&mut array, 32, l.start_bytes / SECTOR);
    put_le64(&mut array, 40, (l.start_bytes + l.size_bytes) / SECTOR - 1);
    for (i, u) in name.encode_utf16().take(36).enumerate() {
        array[56 + 2 * i..58 + 2 * i].copy_from_slice(&u.to_le_bytes());
    }
    let acrc = crc32(&array);
    let last = sectors - 1;
    let backup_array = last - ARRAY_SECTORS;
    let primary = header(l, &disk_guid, 1, last, 2, acrc);
    let backup = header(l, &disk_guid, last, 1, backup_array, acrc);
    // The backup first: a disk cut short while this runs has no primary
    // pointing at a missing backup.
    dev.write_at(&array, backup_array * SECTOR)?;
    dev.write_at(&backup, last * SECTOR)?;
    dev.write_at(&array, 2 * SECTOR)?;
    let mut head = mbr;
    head.extend_from_slice(&primary);
    dev.write_at(&head, 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn a_written_table_reads_back() {
        let l = layout_for(300 << 20);
        assert_eq!(l.start_bytes, 1 << 20);
        let dev = MemDevice::new(l.disk_bytes as usize);
        write_single(&dev, &l, &LINUX_FS, "xfs", [7; 16]).unwrap();
        let t = crate::disk::read_table(&dev).unwrap().expect("a table");
        assert_eq!(t.partitions.len(), 1);
        let p = &t.partitions[0];
        assert_eq!(
            (p.number, p.start_bytes, p.size_bytes),
            (1, l.start_bytes, l.size_bytes)
        );
        assert_eq!(p.type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
        assert!(t.notes.is_empty(), "{:?}", t.notes);
    }
}

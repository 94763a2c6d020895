//! GUID partition tables (UEFI spec, chapter 5.3): the primary header at
//! LBA 1 and its entry array, or the backup at the last LBA when the
//! primary is damaged. Both CRCs (header and entry array) are checked.
//!
//! Header layout (little-endian): 0 signature "EFI PART", 8 revision,
//! 12 header size, 16 header CRC32 (computed with this field zeroed),
//! 24 my LBA, 32 alternate LBA, 40 first usable LBA, 48 last usable LBA,
//! 56 disk GUID, 72 entry array LBA, 80 number of entries, 84 entry size,
//! 88 entry array CRC32. Entry: 0 type GUID, 16 unique GUID, 32 first LBA,
//! 40 last LBA (inclusive), 48 attributes, 56 name (36 UTF-16LE units).

use super::{corrupt, Partition, Scheme, Table};
use crate::bytes::{le32, le64};
use crate::dev::Device;
use crate::error::Result;

const SIGNATURE: &[u8; 8] = b"EFI PART";
/// The bytes of the header the CRC covers in revision 1.0.
const HEADER_MIN: u32 = 92;
/// Entry arrays larger than this are refused (the usual one is 16 KiB):
/// memory stays in proportion to a real table, whatever the header says.
const ARRAY_MAX: u64 = 4 << 20;

/// One header, checked.
struct Header {
    my_lba: u64,
    alternate_lba: u64,
    entries_lba: u64,
    entries: u32,
    entry_size: u32,
    entries_crc: u32,
}

/// True when sector 1 (of 512 or 4096 bytes) or the last sector carries the
/// GPT signature.
pub(crate) fn present(dev: &dyn Device) -> Option<u32> {
    [512u32, 4096].into_iter().find(|&ss| {
        let mut sig = [0u8; 8];
        let at_1 = dev.read_at(&mut sig, u64::from(ss)).is_ok() && &sig == SIGNATURE;
        let last = (dev.len() / u64::from(ss)).checked_sub(1);
        let at_end = last.is_some_and(|l| {
            l > 1 && dev.read_at(&mut sig, l * u64::from(ss)).is_ok() && &sig == SIGNATURE
        });
        at_1 || at_end
    })
}

/// Reads the table with sector size `ss`: the primary, else the backup.
pub(crate) fn read(dev: &dyn Device, ss: u32) -> Result<Table> {
    let sectors = dev.len() / u64::from(ss);
    let mut notes = Vec::new();
    let primary = read_copy(dev, ss, 1);
    let (header, array) = match primary {
        Ok(p) => p,
        Err(primary_err) => {
            let last = sectors.saturating_sub(1);
            match read_copy(dev, ss, last) {
                Ok(b) => {
                    notes.push(format!(
                        "the primary GPT is damaged ({primary_err}); using the backup at LBA {last}"
                    ));
                    b
                }
                Err(backup_err) => {
                    return Err(corrupt(
                        "GPT header",
                        "LBA 1".into(),
                        format!(
                            "the primary is damaged ({primary_err}) and so is the backup at LBA {last} ({backup_err})"
                        ),
                    ))
                }
            }
        }
    };
    if header.my_lba == 1 && header.alternate_lba >= sectors {
        notes.push(format!(
            "the GPT says the disk has {} sectors but the image has {sectors}: truncated?",
            header.alternate_lba.saturating_add(1)
        ));
    }
    let mut partitions = Vec::new();
    for i in 0..header.entries {
        let at = i as usize * header.entry_size as usize;
        let e = &array[at..at + 128];
        let type_guid: [u8; 16] = e[0..16].try_into().unwrap_or_default();
        if type_guid == [0; 16] {
            continue;
        }
        let first = le64(e, 32);
        let last = le64(e, 40);
        let whr = || format!("GPT entry {} (LBA {})", i + 1, header.entries_lba);
        if first == 0 || last < first {
            return Err(corrupt(
                "GPT partition entry",
                whr(),
                format!("first LBA {first} and last LBA {last} make no partition"),
            ));
        }
        let bytes = |lba: u64| lba.checked_mul(u64::from(ss));
        let (Some(start), Some(end)) = (
            bytes(first),
            bytes(last).and_then(|b| b.checked_add(u64::from(ss))),
        ) else {
            return Err(corrupt(
                "GPT partition entry",
                whr(),
                format!("LBA {last} overflows"),
            ));
        };
        let units: Vec<u16> = e[56..128]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&u| u != 0)
            .collect();
        partitions.push(Partition {
            number: i + 1,
            start_bytes: start,
            size_bytes: end - start,
            type_id: guid_string(&type_guid),
            type_name: type_name(&type_guid).to_string(),
            label: String::from_utf16_lossy(&units),
        });
    }
    Ok(Table {
        scheme: Scheme::Gpt,
        sector_size: ss,
        partitions,
        notes,
    })
}

/// Reads and checks the header at `lba` and its entry array.
fn read_copy(
    dev: &dyn Device,
    ss: u32,
    lba: u64,
) -> std::result::Result<(Header, Vec<u8>), String> {
    let mut sector = vec![0u8; ss as usize];
    let off = lba.checked_mul(u64::from(ss)).ok_or("LBA overflows")?;
    dev.read_at(&mut sector, off)
        .map_err(|e| format!("cannot read LBA {lba}: {e}"))?;
    if &sector[0..8] != SIGNATURE {
        return Err("no signature".into());
    }
    let size = le32(&sector, 12);
    if size < HEADER_MIN || size > ss {
        return Err(format!("header size {size}"));
    }
    let stored = le32(&sector, 16);
    let mut copy = sector[..size as usize].to_vec();
    copy[16..20].fill(0);
    let computed = crc32(&copy);
    if stored != computed {
        return Err(format!(
            "bad header CRC: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    let h = Header {
        my_lba: le64(&sector, 24),
        alternate_lba: le64(&sector, 32),
        entries_lba: le64(&sector, 72),
        entries: le32(&sector, 80),
        entry_size: le32(&sector, 84),
        entries_crc: le32(&sector, 88),
    };
    if h.my_lba != lba {
        return Err(format!("the header says it lies at LBA {}", h.my_lba));
    }
    if h.entry_size < 128 || !h.entry_size.is_multiple_of(8) {
        return Err(format!("entry size {}", h.entry_size));
    }
    let array_bytes = u64::from(h.entries) * u64::from(h.entry_size);
    if array_bytes > ARRAY_MAX {
        return Err(format!(
            "{} entries of {} bytes: larger than any real table",
            h.entries, h.entry_size
        ));
    }
    let array_off = h
        .entries_lba
        .checked_mul(u64::from(ss))
        .filter(|o| {
            o.checked_add(array_bytes)
                .is_some_and(|end| end <= dev.len())
        })
        .ok_or_else(|| {
            format!(
                "the entry array at LBA {} lies past the end of the disk",
                h.entries_lba
            )
        })?;
    let mut array = vec![0u8; array_bytes as usize];
    dev.read_at(&mut array, array_off)
        .map_err(|e| format!("cannot read the entry array: {e}"))?;
    let computed = crc32(&array);
    if computed != h.entries_crc {
        return Err(format!(
            "bad entry array CRC: stored {:#010x}, computed {computed:#010x}",
            h.entries_crc
        ));
    }
    Ok((h, array))
}

pub(crate) fn crc32(b: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(b);
    c.sum()
}

/// A GUID as it is written: the first three fields are little-endian.
fn guid_string(g: &[u8; 16]) -> String {
    format!(
        "{:08X}-{:04X}-{:04X}-{:02X}{:02X}-{}",
        u32::from_le_bytes([g[0], g[1], g[2], g[3]]),
        u16::from_le_bytes([g[4], g[5]]),
        u16::from_le_bytes([g[6], g[7]]),
        g[8],
        g[9],
        g[10..]
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
    )
}

/// Names of the partition types found on Linux cloud images.
fn type_name(g: &[u8; 16]) -> &'static str {
    match guid_string(g).as_str() {
        "0FC63DAF-8483-4772-8E79-3D69D8477DE4" => "Linux filesystem",
        "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709" => "Linux root (x86-64)",
        "B921B045-1DF0-41C3-AF44-4C6F280D3FAE" => "Linux root (ARM64)",
        "BC13C2FF-59E6-4262-A352-B275FD6F7172" => "Linux extended boot",
        "E6D6D379-F507-44C2-A23C-238F2A3DF928" => "Linux LVM",
        "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F" => "Linux swap",
        "A19D880F-05FC-4D3B-A006-743F0F84911E" => "Linux RAID",
        "933AC7E1-2EB4-4F13-B844-0E14E2AEF915" => "Linux home",
        "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" => "EFI System",
        "21686148-6449-6E6F-744E-656564454649" => "BIOS boot",
        "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7" => "Microsoft basic data",
        "E3C9E316-0B5C-4DB8-817D-F92DF00215AE" => "Microsoft reserved",
        "9E1A2D38-C612-4316-AA26-8B49521E5A8B" => "PReP boot",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_text_swaps_the_first_three_fields() {
        let g = [
            0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47,
            0x7D, 0xE4,
        ];
        assert_eq!(guid_string(&g), "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
        assert_eq!(type_name(&g), "Linux filesystem");
    }
}

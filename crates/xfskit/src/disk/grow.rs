//! Growing the containers around a filesystem, for `xfskit grow`: the
//! virtual size of a qcow2 file (its header, when the L1 table's clusters
//! have room for the new entries), and a GPT disk's tables (the backup
//! array and header moved to the new end, the last usable LBA and the
//! chosen partition, which must be the last one, extended to it).

use super::gpt::crc32;
use super::qcow2::header;
use crate::bytes::{le32, le64, put_le32, put_le64};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Sets the virtual size of the qcow2 file at `path` to `size` bytes (a
/// multiple of 512, not smaller than now). Refused (Unsupported): internal
/// snapshots, a backing file, and an L1 table whose clusters cannot hold
/// the entries the new size needs. The header is one sector-sized write.
pub fn qcow2_resize(path: &Path, size: u64) -> Result<u64> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(Error::Io)?;
    let len = f.metadata().map_err(Error::Io)?.len();
    let mut first = vec![0u8; 65536.min(len as usize)];
    f.read_exact_at(&mut first, 0).map_err(Error::Io)?;
    let h = header::parse(&first, len, |off, n| {
        let mut b = vec![0u8; n];
        f.read_exact_at(&mut b, off).map(|_| b)
    })?;
    if size < h.size {
        return Err(Error::Unsupported(format!(
            "grow: the qcow2 disk is {} bytes; shrinking to {size} is not supported",
            h.size
        )));
    }
    if size == h.size {
        return Ok(size);
    }
    if !size.is_multiple_of(512) {
        return Err(Error::Invalid(format!(
            "grow: {size} is not a multiple of 512 bytes"
        )));
    }
    if h.snapshots != 0 || h.backing_file.is_some() {
        return Err(Error::Unsupported(
            "grow: qcow2 files with internal snapshots or a backing file are not supported (qemu-img resize them)".into(),
        ));
    }
    let cluster = 1u64 << h.cluster_bits;
    let per_l1 = cluster * (cluster / 8);
    let need = size.div_ceil(per_l1);
    let have = (u64::from(h.l1_entries) * 8).div_ceil(cluster) * cluster / 8;
    if need > have || need > u64::from(u32::MAX) {
        return Err(Error::Unsupported(format!(
            "grow: the qcow2 L1 table holds {have} entries, {size} bytes need {need}; moving it is not supported (qemu-img resize the file first)"
        )));
    }
    // Entries past the old count must be zero (unused slots of the table's clusters).
    let extra = (need - u64::from(h.l1_entries)) as usize * 8;
    let mut slots = vec![0u8; extra];
    f.read_exact_at(&mut slots, h.l1_offset + u64::from(h.l1_entries) * 8)
        .map_err(Error::Io)?;
    if slots.iter().any(|&b| b != 0) {
        return Err(Error::Unsupported(
            "grow: the qcow2 L1 table's unused slots are not zero".into(),
        ));
    }
    let mut hdr = first[..48].to_vec();
    hdr[24..32].copy_from_slice(&size.to_be_bytes());
    hdr[36..40].copy_from_slice(&(need as u32).to_be_bytes());
    f.write_all_at(&hdr, 0).map_err(Error::Io)?;
    f.sync_all().map_err(Error::Io)?;
    Ok(size)
}

/// Sector size of the GPTs grown here.
const SECTOR: u64 = 512;

/// Grows the GPT on `dev` (a disk already `dev.len()` bytes long, larger
/// than the table says): the backup entry array and header are written at
/// the new end, then the primary array and header with the new last
/// usable LBA, the partition `number` (1-based entry index) extended to it
/// when it is the last partition, and the protective MBR's size. Returns
/// (start, length) in bytes of the partition.
pub fn gpt_grow(dev: &dyn Device, number: u32) -> Result<(u64, u64)> {
    let bad = |d: String| Error::Unsupported(format!("grow: GPT: {d}"));
    let mut h = vec![0u8; SECTOR as usize];
    dev.read_at(&mut h, SECTOR).map_err(Error::Io)?;
    if &h[0..8] != b"EFI PART" {
        return Err(bad(
            "no primary header at LBA 1 (512-byte sectors only)".into()
        ));
    }
    let hsize = le32(&h, 12) as usize;
    if !(92..=512).contains(&hsize) {
        return Err(bad(format!("header size {hsize}")));
    }
    let array_lba = le64(&h, 72);
    let n = le32(&h, 80) as u64;
    let esize = le32(&h, 84) as u64;
    if !(128..=4096).contains(&esize) || n == 0 || n > 16384 {
        return Err(bad(format!("{n} entries of {esize} bytes")));
    }
    let array_bytes = n * esize;
    let array_sectors = array_bytes.div_ceil(SECTOR);
    let mut array = vec![0u8; (array_sectors * SECTOR) as usize];
    dev.read_at(&mut array, array_lba * SECTOR)
        .map_err(Error::Io)?;
    if crc32(&array[..array_bytes as usize]) != le32(&h, 88) {
        return Err(Error::corrupt(
            "GPT entry array",
            crate::error::Location::Daddr(array_lba),
            "bad CRC",
        ));
    }
    let sectors = dev.len() / SECTOR;
    let last = sectors - 1;
    let old_alt = le64(&h, 32);
    if last < old_alt {
        return Err(bad("the disk is smaller than its table says".into()));
    }
    let new_last_usable = last - 1 - array_sectors;
    let idx = number.checked_sub(1).map(u64::from).filter(|&i| i < n);
    let Some(idx) = idx else {
        return Err(bad(format!("no partition {number}")));
    };
    let e = (idx * esize) as usize;
    let (start, end) = (le64(&array, e + 32), le64(&array, e + 40));
    if array[e..e + 16].iter().all(|&b| b == 0) {
        return Err(bad(format!("partition {number} is unused")));
    }
    for i in 0..n {
        let o = (i * esize) as usize;
        if i != idx && array[o..o + 16].iter().any(|&b| b != 0) && le64(&array, o + 32) > start {
            return Err(bad(format!(
                "partition {number} is not the last one (partition {} follows it)",
                i + 1
            )));
        }
    }
    let new_end = end.max(new_last_usable);
    put_le64(&mut array, e + 40, new_end);
    let acrc = crc32(&array[..array_bytes as usize]);
    let mk = |my: u64, alt: u64, arr: u64| {
        let mut x = h.clone();
        put_le64(&mut x, 24, my);
        put_le64(&mut x, 32, alt);
        put_le64(&mut x, 48, new_last_usable);
        put_le64(&mut x, 72, arr);
        put_le32(&mut x, 88, acrc);
        put_le32(&mut x, 16, 0);
        let c = crc32(&x[..hsize]);
        put_le32(&mut x, 16, c);
        x
    };
    // The backup first, where nothing points yet; then the primary.
    let backup_array = last - array_sectors;
    dev.write_at(&array, backup_array * SECTOR)
        .map_err(Error::Io)?;
    dev.write_at(&mk(last, 1, backup_array), last * SECTOR)
        .map_err(Error::Io)?;
    dev.flush().map_err(Error::Io)?;
    dev.write_at(&array, array_lba * SECTOR)
        .map_err(Error::Io)?;
    dev.write_at(&mk(1, last, array_lba), SECTOR)
        .map_err(Error::Io)?;
    let mut mbr = vec![0u8; SECTOR as usize];
    dev.read_at(&mut mbr, 0).map_err(Error::Io)?;
    if mbr[450] == 0xEE && mbr[510] == 0x55 && mbr[511] == 0xAA {
        put_le32(
            &mut mbr,
            446 + 12,
            (sectors - 1).min(u64::from(u32::MAX)) as u32,
        );
        dev.write_at(&mbr, 0).map_err(Error::Io)?;
    }
    dev.flush().map_err(Error::Io)?;
    Ok((start * SECTOR, (new_end + 1 - start) * SECTOR))
}

/// The CHS triple of an MBR entry for `lba`, with the 255-head, 63-sector
/// geometry that partitioning tools use for disk images; past what CHS
/// can address, its maximum (1023, 254, 63), which readers take as "use
/// the LBA fields".
fn chs(lba: u64) -> [u8; 3] {
    const HEADS: u64 = 255;
    const SPT: u64 = 63;
    if lba >= 1024 * HEADS * SPT {
        return [0xFE, 0xFF, 0xFF];
    }
    let c = lba / (HEADS * SPT);
    let h = (lba / SPT) % HEADS;
    let s = lba % SPT + 1;
    [h as u8, (s as u8) | (((c >> 8) as u8 & 3) << 6), c as u8]
}

/// Grows the primary MBR partition `number` (1 to 4) on `dev` (a disk
/// already `dev.len()` bytes long) to the end of the disk, or to the
/// 2^32 sectors an entry can hold. It must be the last partition on the
/// disk: no primary entry, and so no extended partition, starts after it.
/// One sector is written. Returns (start, length) in bytes.
pub fn mbr_grow(dev: &dyn Device, number: u32) -> Result<(u64, u64)> {
    let bad = |d: String| Error::Unsupported(format!("grow: MBR: {d}"));
    let mut mbr = vec![0u8; SECTOR as usize];
    dev.read_at(&mut mbr, 0).map_err(Error::Io)?;
    if mbr[510..512] != [0x55, 0xAA] {
        return Err(bad("no boot signature in sector 0".into()));
    }
    if !(1..=4).contains(&number) {
        return Err(bad(format!(
            "partition {number} is a logical one; only primary partitions (1 to 4) are grown"
        )));
    }
    let at = |i: usize| 446 + 16 * i;
    let e = at(number as usize - 1);
    let kind = mbr[e + 4];
    let start = u64::from(le32(&mbr, e + 8));
    let len = u64::from(le32(&mbr, e + 12));
    if kind == 0 || len == 0 {
        return Err(bad(format!("partition {number} is unused")));
    }
    if matches!(kind, 0x05 | 0x0F | 0x85 | 0xEE) {
        return Err(bad(format!(
            "partition {number} is an extended or protective entry (type {kind:#04x})"
        )));
    }
    for i in 0..4 {
        let o = at(i);
        if i + 1 != number as usize && mbr[o + 4] != 0 && u64::from(le32(&mbr, o + 8)) > start {
            return Err(bad(format!(
                "partition {number} is not the last one (partition {} follows it)",
                i + 1
            )));
        }
    }
    let sectors = dev.len() / SECTOR;
    let new_len = sectors
        .saturating_sub(start)
        .min(u64::from(u32::MAX))
        .max(len);
    put_le32(&mut mbr, e + 12, new_len as u32);
    mbr[e + 5..e + 8].copy_from_slice(&chs(start + new_len - 1));
    dev.write_at(&mbr, 0).map_err(Error::Io)?;
    dev.flush().map_err(Error::Io)?;
    Ok((start * SECTOR, new_len * SECTOR))
}

/// Grows the LVM2 PV at `pv_start` (`pv_len` bytes, its new size) of
/// `disk` to fill that space, and its linear volume `vg`/`lv` by every
/// free extent (see [`super::lvm::grow::extend`]). Returns the volume's
/// size in bytes.
pub fn lvm_grow(
    disk: &std::sync::Arc<dyn Device>,
    pv_start: u64,
    pv_len: u64,
    vg: &str,
    lv: &str,
) -> Result<u64> {
    let pv = crate::dev::Window::new(disk.clone(), pv_start, pv_len)?;
    super::lvm::grow::extend(&pv, vg, lv, None)
}

//! An undo file: the old contents of every byte range a command overwrites,
//! saved before the write reaches the device, so that the device can be
//! put back as it was ([`restore`]), as e2fsck's `-z` and e2undo do.
//!
//! [`UndoDevice`] wraps the device a command writes. The first write to a
//! range reads the range's current bytes, appends them to the undo file as
//! a record and makes the record durable (`fdatasync`) before the write
//! goes on; later writes to a range already saved add nothing, so the file
//! holds each byte's contents from before the command, once. Ranges are
//! kept in memory as merged intervals: the cost follows what was written,
//! not the size of the device.
//!
//! The file: a 64-byte header (magic, version, the device's length, the
//! UUID in its superblock, a CRC-32C), then records of (offset u64, length
//! u32, CRC-32C u32 of offset, length and data), then the data; all little
//! endian. A crash while a record is appended leaves a torn last record,
//! whose write never reached the device: [`restore`] stops at it.

use super::Device;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

const MAGIC: &[u8; 16] = b"xfskit-undo-v1\n\0";
const HEADER: usize = 64;
const RECORD: usize = 16;
/// Largest record written (a longer write is saved in pieces) and read.
const RECORD_MAX: u32 = 16 << 20;

/// The header of an undo file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoHeader {
    /// Length of the device the undo file was made for.
    pub device_bytes: u64,
    /// The UUID in the device's primary superblock when the file was made.
    pub uuid: [u8; 16],
}

/// The UUID field of the XFS superblock at the start of `dev`.
fn sb_uuid(dev: &dyn Device) -> [u8; 16] {
    sb_uuids(dev).0
}

/// The UUID and the metadata UUID (`sb_meta_uuid`, which keeps the first
/// UUID after `xfs_admin -U` on a v5 filesystem) of the superblock at the
/// start of `dev`.
fn sb_uuids(dev: &dyn Device) -> ([u8; 16], [u8; 16]) {
    let mut sb = [0u8; 264];
    let (mut uuid, mut meta) = ([0u8; 16], [0u8; 16]);
    if dev.len() >= 264 && dev.read_at(&mut sb, 0).is_ok() {
        uuid.copy_from_slice(&sb[32..48]);
        meta.copy_from_slice(&sb[248..264]);
    }
    (uuid, meta)
}

fn header_bytes(h: &UndoHeader) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[..16].copy_from_slice(MAGIC);
    b[16..24].copy_from_slice(&h.device_bytes.to_le_bytes());
    b[24..40].copy_from_slice(&h.uuid);
    let crc = crc32c::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

fn record_crc(off: u64, data: &[u8]) -> u32 {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&off.to_le_bytes());
    head[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), data)
}

struct Saved {
    file: File,
    /// Where the next record goes.
    end: u64,
    /// Ranges saved: start -> end, disjoint, merged when they touch.
    ranges: BTreeMap<u64, u64>,
    records: u64,
    bytes: u64,
}

impl Saved {
    /// The parts of [start, end) not saved yet.
    fn missing(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        // The range that may cover `start` begins at or before it.
        if let Some((_, &e)) = self.ranges.range(..=start).next_back() {
            at = at.max(e.min(end));
        }
        for (&s, &e) in self.ranges.range(start..end) {
            if s > at {
                out.push((at, s));
            }
            at = at.max(e.min(end));
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    fn insert(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let joined: Vec<(u64, u64)> = self
            .ranges
            .range(start..=end)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in joined {
            self.ranges.remove(&s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }
}

/// A device whose overwritten bytes are saved to an undo file first.
pub struct UndoDevice {
    inner: Box<dyn Device>,
    saved: Mutex<Saved>,
}

/// What an undo file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UndoStats {
    /// Records (ranges) saved.
    pub records: u64,
    /// Bytes of old contents saved.
    pub bytes: u64,
}

impl UndoDevice {
    /// Wraps `inner`, saving to a new undo file at `path` (which must not
    /// exist, so that an earlier undo file is never lost).
    pub fn create(inner: Box<dyn Device>, path: &Path) -> Result<UndoDevice> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| {
                Error::Io(io::Error::new(
                    e.kind(),
                    format!("undo file {}: {e}", path.display()),
                ))
            })?;
        let h = UndoHeader {
            device_bytes: inner.len(),
            uuid: sb_uuid(inner.as_ref()),
        };
        file.write_all(&header_bytes(&h))?;
        file.sync_all()?;
        // The directory entry too: the file must outlive a crash.
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(UndoDevice {
            inner,
            saved: Mutex::new(Saved {
                file,
                end: HEADER as u64,
                ranges: BTreeMap::new(),
                records: 0,
                bytes: 0,
            }),
        })
    }

    /// What has been saved so far.
    pub fn stats(&self) -> UndoStats {
        let s = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        UndoStats {
            records: s.records,
            bytes: s.bytes,
        }
    }

    /// Saves the old contents of [off, off + len) not saved yet, durably.
    fn save(&self, off: u64, len: u64) -> io::Result<()> {
        let end = off
            .checked_add(len)
            .filter(|&e| e <= self.inner.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("write of {len} bytes at {off} is past the end of the device"),
                )
            })?;
        let mut s = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        let missing = s.missing(off, end);
        if missing.is_empty() {
            return Ok(());
        }
        for (a, b) in missing {
            let mut at = a;
            while at < b {
                let n = (b - at).min(u64::from(RECORD_MAX));
                let mut data = vec![0u8; n as usize];
                self.inner.read_at(&mut data, at)?;
                let mut rec = [0u8; RECORD];
                rec[..8].copy_from_slice(&at.to_le_bytes());
                rec[8..12].copy_from_slice(&(n as u32).to_le_bytes());
                rec[12..16].copy_from_slice(&record_crc(at, &data).to_le_bytes());
                let pos = s.end;
                s.file.write_all_at(&rec, pos)?;
                s.file.write_all_at(&data, pos + RECORD as u64)?;
                s.end = pos + RECORD as u64 + n;
                s.records += 1;
                s.bytes += n;
                at += n;
            }
            s.insert(a, b);
        }
        s.file.sync_data()
    }
}

impl Device for UndoDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.save(off, buf.len() as u64)?;
        self.inner.write_at(buf, off)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.save(off, len)?;
        self.inner.write_vectored_at(bufs, off)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn will_need(&self, off: u64, len: u64) {
        self.inner.will_need(off, len)
    }

    fn read_uninit_at(&self, buf: &mut [std::mem::MaybeUninit<u8>], off: u64) -> io::Result<()> {
        self.inner.read_uninit_at(buf, off)
    }

    fn log_base(&self) -> Option<(u64, u64)> {
        self.inner.log_base()
    }
}

fn bad(path: &Path, detail: String) -> Error {
    Error::corrupt(
        "undo file",
        crate::error::Location::Other(path.display().to_string()),
        detail,
    )
}

/// Reads the header of the undo file at `path`.
pub fn read_header(path: &Path) -> Result<UndoHeader> {
    let mut f = File::open(path)
        .map_err(|e| Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display()))))?;
    let mut b = [0u8; HEADER];
    f.read_exact(&mut b)
        .map_err(|_| bad(path, "shorter than its header".into()))?;
    if &b[..16] != MAGIC {
        return Err(bad(path, "not an xfskit undo file (bad magic)".into()));
    }
    if crc32c::crc32c(&b[..60]) != u32::from_le_bytes(b[60..64].try_into().unwrap_or_default()) {
        return Err(bad(path, "bad header CRC".into()));
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[24..40]);
    Ok(UndoHeader {
        device_bytes: u64::from_le_bytes(b[16..24].try_into().unwrap_or_default()),
        uuid,
    })
}

/// What [`restore`] did or would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Records put back.
    pub records: u64,
    /// Bytes put back.
    pub bytes: u64,
    /// True when the file ended in a torn record (a crash while it was
    /// written: that record's write never reached the device).
    pub torn_tail: bool,
}

/// How [`restore`] decides that the undo file belongs to the device.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreOptions {
    /// Only read the file and say what would be put back.
    pub dry_run: bool,
    /// Put it back even when the device's UUID is not the file's.
    pub force: bool,
}

/// Puts the contents saved in the undo file at `path` back on `dev`.
/// Refused when the device's length differs from the one the file was
/// made for, or when neither the UUID of its superblock nor its metadata
/// UUID is the one the file was made for, unless forced.
pub fn restore(path: &Path, dev: &dyn Device, opts: &RestoreOptions) -> Result<Restored> {
    let h = read_header(path)?;
    if h.device_bytes != dev.len() {
        return Err(Error::Invalid(format!(
            "{} was made for a device of {} bytes; this one has {}",
            path.display(),
            h.device_bytes,
            dev.len()
        )));
    }
    let f = File::open(path)?;
    let flen = f.metadata()?.len();
    // First pass: read and verify every record; nothing is written when
    // the file is damaged before its last record.
    let mut recs: Vec<(u64, u64, u32)> = Vec::new();
    let mut pos = HEADER as u64;
    let mut torn_tail = false;
    while pos < flen {
        let mut rec = [0u8; RECORD];
        if pos + RECORD as u64 > flen {
            torn_tail = true;
            break;
        }
        f.read_exact_at(&mut rec, pos)?;
        let off = u64::from_le_bytes(rec[..8].try_into().unwrap_or_default());
        let n = u32::from_le_bytes(rec[8..12].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(rec[12..16].try_into().unwrap_or_default());
        let data_at = pos + RECORD as u64;
        if n == 0 || n > RECORD_MAX || data_at + u64::from(n) > flen {
            if data_at + u64::from(n) > flen && n <= RECORD_MAX {
                torn_tail = true;
                break;
            }
            return Err(bad(
                path,
                format!("record at byte {pos}: length {n} out of range"),
            ));
        }
        if off.checked_add(u64::from(n)).is_none_or(|e| e > dev.len()) {
            return Err(bad(
                path,
                format!("record at byte {pos}: {n} bytes at {off} lie past the end of the device"),
            ));
        }
        let mut data = vec![0u8; n as usize];
        f.read_exact_at(&mut data, data_at)?;
        if record_crc(off, &data) != crc {
            if data_at + u64::from(n) == flen {
                // The last record, torn by a crash.
                torn_tail = true;
                break;
            }
            return Err(bad(path, format!("record at byte {pos}: bad CRC")));
        }
        recs.push((off, data_at, n));
        pos = data_at + u64::from(n);
    }
    let (uuid, meta) = sb_uuids(dev);
    if !opts.force && uuid != h.uuid && meta != h.uuid {
        return Err(Error::Invalid(format!(
            "{} was made for the filesystem with UUID {}, and this one is another (use --force to put it back anyway)",
            path.display(),
            crate::bytes::uuid_string(&h.uuid)
        )));
    }
    let mut done = Restored {
        torn_tail,
        ..Default::default()
    };
    for (off, data_at, n) in recs {
        if !opts.dry_run {
            let mut data = vec![0u8; n as usize];
            f.read_exact_at(&mut data, data_at)?;
            dev.write_at(&data, off)?;
        }
        done.records += 1;
        done.bytes += u64::from(n);
    }
    if !opts.dry_run {
        dev.flush()?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn dev_with(bytes: &[u8]) -> MemDevice {
        let d = MemDevice::new(bytes.len());
        d.write_at(bytes, 0).unwrap();
        d
    }

    #[test]
    fn writes_undone_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let undo = dir.path().join("u");
        let orig: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
        let base = std::sync::Arc::new(dev_with(&orig));
        struct Shared(std::sync::Arc<MemDevice>);
        impl Device for Shared {
            fn read_at(&self, b: &mut [u8], o: u64) -> io::Result<()> {
                self.0.read_at(b, o)
            }
            fn write_at(&self, b: &[u8], o: u64) -> io::Result<()> {
                self.0.write_at(b, o)
            }
            fn flush(&self) -> io::Result<()> {
                Ok(())
            }
            fn len(&self) -> u64 {
                self.0.len()
            }
        }
        let u = UndoDevice::create(Box::new(Shared(base.clone())), &undo).unwrap();
        u.write_at(&[1; 4096], 4096).unwrap();
        u.write_at(&[2; 8192], 2048).unwrap(); // overlaps the first
        u.write_at(&[3; 100], 60000).unwrap();
        u.write_vectored_at(&[&[4; 10], &[5; 10]], 30000).unwrap();
        u.write_at(&[6; 4096], 4096).unwrap(); // saved already
        let st = u.stats();
        assert_eq!(st.bytes, 8192 + 100 + 20);
        drop(u);
        let mut now = vec![0u8; orig.len()];
        base.read_at(&mut now, 0).unwrap();
        assert_ne!(now, orig);
        // A second file over the same path is refused.
        assert!(UndoDevice::create(Box::new(Shared(base.clone())), &undo).is_err());
        let r = restore(&undo, base.as_ref(), &RestoreOptions::default()).unwrap();
        assert_eq!(r.bytes, st.bytes);
        assert!(!r.torn_tail);
        base.read_at(&mut now, 0).unwrap();
        assert_eq!(now, orig);
    }

    #[test]
    fn a_torn_last_record_is_left_out_and_damage_refused() {
        let dir = tempfile::tempdir().unwrap();
        let undo = dir.path().join("u");
        let orig = vec![9u8; 16384];
        let dev = dev_with(&orig);
        {
            let u = UndoDevice::create(Box::new(dev_with(&orig)), &undo).unwrap();
            u.write_at(&[1; 512], 4096).unwrap();
            u.write_at(&[1; 512], 8192).unwrap();
        }
        let full = std::fs::read(&undo).unwrap();
        // Torn: the last record cut short.
        std::fs::write(&undo, &full[..full.len() - 100]).unwrap();
        dev.write_at(&[1; 512], 4096).unwrap();
        let r = restore(&undo, &dev, &RestoreOptions::default()).unwrap();
        assert_eq!((r.records, r.torn_tail), (1, true));
        // Damage inside an earlier record: refused, nothing written.
        let mut bad_file = full.clone();
        bad_file[HEADER + RECORD + 5] ^= 1;
        std::fs::write(&undo, &bad_file).unwrap();
        dev.write_at(&[7; 512], 4096).unwrap();
        assert!(restore(&undo, &dev, &RestoreOptions::default()).is_err());
        let mut b = [0u8; 512];
        dev.read_at(&mut b, 4096).unwrap();
        assert_eq!(b, [7; 512]);
        // Another device size: refused.
        std::fs::write(&undo, &full).unwrap();
        assert!(restore(&undo, &MemDevice::new(8192), &RestoreOptions::default()).is_err());
        // Not an undo file.
        std::fs::write(&undo, b"hello").unwrap();
        assert!(read_header(&undo).is_err());
    }

    #[test]
    fn missing_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let u =
            UndoDevice::create(Box::new(MemDevice::new(1 << 20)), &dir.path().join("u")).unwrap();
        let mut s = u.saved.lock().unwrap();
        s.insert(100, 200);
        s.insert(300, 400);
        assert_eq!(s.missing(0, 500), vec![(0, 100), (200, 300), (400, 500)]);
        assert_eq!(s.missing(150, 350), vec![(200, 300)]);
        assert_eq!(s.missing(120, 180), vec![]);
        s.insert(200, 300);
        assert_eq!(s.ranges.len(), 1);
        assert_eq!(s.missing(0, 500), vec![(0, 100), (400, 500)]);
    }
}

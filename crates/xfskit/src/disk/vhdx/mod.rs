//! VHDX (Hyper-V): dynamic, fixed and differencing disks.
//!
//! A VHDX file starts with a 1 MiB header section: the file type identifier
//! ("vhdxfile"), two headers (the valid one with the higher sequence number
//! is current) and two copies of the region table, which locates the block
//! allocation table (BAT) and the metadata region (block size, virtual
//! size, sector sizes, the parent locator of a differencing disk). The BAT
//! maps each payload block of the virtual disk to a 1 MiB-aligned place in
//! the file, with a sector bitmap entry after every `chunk ratio` payload
//! entries. Metadata changes go through a log ([`log`]) which a reader must
//! replay before trusting the BAT: here in memory for a read-only open,
//! onto the file for a writable one ([`write`]).

mod header;
mod log;
#[cfg(test)]
mod tests;
mod write;

use super::container::{NewDisk, Opener};
use super::corrupt_io;
use crate::bytes::{le16, le32, le64};
use crate::dev::Device;
use crate::error::{Error, Result};
use header::{Header, Meta, Region};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

pub(crate) const MIB: u64 = 1 << 20;

/// BAT entry states ([MS-VHDX] 2.5.1).
const NOT_PRESENT: u64 = 0;
const UNDEFINED: u64 = 1;
const ZERO: u64 = 2;
const UNMAPPED: u64 = 3;
/// The value QEMU (after the v0.95 draft) writes for UNMAPPED.
const UNMAPPED_V095: u64 = 5;
const FULLY_PRESENT: u64 = 6;
const PARTIALLY_PRESENT: u64 = 7;
/// The file offset bits of a BAT entry (in MiB, bits 20 and up).
const OFFSET_MASK: u64 = !(MIB - 1);
/// Differencing chains longer than this are refused.
const MAX_CHAIN: usize = 64;

/// A GUID in the mixed-endian byte order of the specification.
pub(crate) const fn guid(d1: u32, d2: u16, d3: u16, d4: [u8; 8]) -> [u8; 16] {
    let a = d1.to_le_bytes();
    let b = d2.to_le_bytes();
    let c = d3.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d4[0], d4[1], d4[2], d4[3], d4[4], d4[5],
        d4[6], d4[7],
    ]
}

/// A GUID in braces as Windows writes it in a parent locator.
fn guid_text(g: &[u8; 16]) -> String {
    format!(
        "{{{:08X}-{:04X}-{:04X}-{:02X}{:02X}-{:02X}{:02X}{:02X}{:02X}{:02X}{:02X}}}",
        le32(g, 0),
        le16(g, 4),
        le16(g, 6),
        g[8],
        g[9],
        g[10],
        g[11],
        g[12],
        g[13],
        g[14],
        g[15]
    )
}

/// True when a file whose first bytes are `head` is a VHDX image.
pub fn probe(head: &[u8]) -> bool {
    head.len() >= 8 && &head[..8] == b"vhdxfile"
}

/// The disk inside a VHDX file.
pub struct Vhdx {
    path: PathBuf,
    /// The file as read: the host file, or the host with the log's writes
    /// laid over it in memory (a read-only open of a file with a log).
    file: Arc<dyn Device>,
    size: u64,
    block: u64,
    sector: u64,
    chunk_ratio: u64,
    bat_offset: u64,
    bat: RwLock<Vec<u64>>,
    parent: Option<Arc<dyn Device>>,
    data_write: [u8; 16],
    fixed: bool,
    physical_sector: u32,
    /// Log entries replayed in memory when it was opened.
    replayed: usize,
    writer: Option<Mutex<write::Writer>>,
}

/// Everything parsed from a file before its BAT.
struct Parsed {
    headers: [Option<Header>; 2],
    cur: usize,
    bat: Region,
    meta: Meta,
}

impl Vhdx {
    /// The virtual disk size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The payload block size.
    pub fn block_size(&self) -> u64 {
        self.block
    }

    /// The logical sector size.
    pub fn logical_sector_size(&self) -> u64 {
        self.sector
    }

    /// The physical sector size the metadata states.
    pub fn physical_sector_size(&self) -> u32 {
        self.physical_sector
    }

    /// True for a fixed disk (every block allocated, kept allocated).
    pub fn is_fixed(&self) -> bool {
        self.fixed
    }

    /// True for a differencing disk.
    pub fn has_parent(&self) -> bool {
        self.parent.is_some()
    }

    /// How many log entries a read-only open replayed in memory.
    pub fn replayed_entries(&self) -> usize {
        self.replayed
    }

    fn what(&self) -> String {
        self.path.display().to_string()
    }

    /// Reads the headers; the log's replay (or None when it is empty).
    fn parse_headers(
        file: &dyn Device,
        what: &str,
    ) -> Result<([Option<Header>; 2], usize, Option<log::Replay>)> {
        let mut id = [0u8; 8];
        if file.len() < MIB {
            return Err(crate::disk::corrupt(
                "VHDX file",
                what.to_string(),
                format!(
                    "{} bytes: shorter than the 1 MiB header section",
                    file.len()
                ),
            ));
        }
        file.read_at(&mut id, 0)?;
        if !probe(&id) {
            return Err(crate::disk::corrupt(
                "VHDX file type identifier",
                format!("{what} at byte 0"),
                "no \"vhdxfile\" signature",
            ));
        }
        let (headers, cur) = header::read_headers(file, what)?;
        let h = headers[cur]
            .as_ref()
            .ok_or_else(|| Error::Unsupported("no header".into()))?;
        if h.log_guid == [0; 16] {
            return Ok((headers, cur, None));
        }
        if h.log_version != 0 {
            return Err(Error::Unsupported(format!(
                "{what}: VHDX log version {} (only 0 is known)",
                h.log_version
            )));
        }
        let lr = Region {
            offset: h.log_offset,
            length: u64::from(h.log_length),
        };
        let r = log::read(file, lr, h.log_guid, what)?;
        Ok((headers, cur, r))
    }

    /// Reads the region table and the metadata of `file` (already with the
    /// log replayed).
    fn parse_rest(
        file: &dyn Device,
        headers: [Option<Header>; 2],
        cur: usize,
        what: &str,
    ) -> Result<Parsed> {
        let (bat, meta_r) = header::read_regions(file, what)?;
        if let Some(h) = &headers[cur] {
            let lr = Region {
                offset: h.log_offset,
                length: u64::from(h.log_length),
            };
            if lr.length != 0 && (header::overlap(lr, bat) || header::overlap(lr, meta_r)) {
                return Err(crate::disk::corrupt(
                    "VHDX region table",
                    what.to_string(),
                    format!(
                        "the log at byte {:#x} overlaps the BAT or the metadata region",
                        lr.offset
                    ),
                ));
            }
        }
        let meta = header::read_metadata(file, meta_r, what)?;
        Ok(Parsed {
            headers,
            cur,
            bat,
            meta,
        })
    }

    /// The disk of the parsed file `file`: the BAT read and checked.
    fn build(
        path: &Path,
        file: Arc<dyn Device>,
        p: &Parsed,
        parent: Option<Arc<dyn Device>>,
    ) -> Result<Vhdx> {
        let what = path.display().to_string();
        let m = &p.meta;
        let sector = u64::from(m.logical_sector);
        let chunk_ratio = (1u64 << 23) * sector / m.block_size;
        let blocks = m.size.div_ceil(m.block_size);
        let entries = if m.has_parent {
            blocks.div_ceil(chunk_ratio) * (chunk_ratio + 1)
        } else {
            blocks + (blocks - 1) / chunk_ratio
        };
        if entries.checked_mul(8).is_none_or(|b| b > p.bat.length) {
            return Err(crate::disk::corrupt(
                "VHDX BAT",
                format!("{what} at byte {:#x}", p.bat.offset),
                format!(
                    "{entries} entries for a {}-byte disk of {}-byte blocks do not fit the {}-byte region",
                    m.size, m.block_size, p.bat.length
                ),
            ));
        }
        let mut raw = vec![0u8; entries as usize * 8];
        file.read_at(&mut raw, p.bat.offset)?;
        let bat: Vec<u64> = raw.chunks_exact(8).map(|c| le64(c, 0)).collect();
        drop(raw);
        let flen = file.len();
        for (i, &e) in bat.iter().enumerate() {
            let i = i as u64;
            let state = e & 7;
            let off = e & OFFSET_MASK;
            let is_bitmap = (i + 1).is_multiple_of(chunk_ratio + 1);
            let (need, present) = if is_bitmap {
                (MIB, state == FULLY_PRESENT)
            } else {
                let b = i - i / (chunk_ratio + 1);
                // Entries past the disk (a differencing BAT fills its last
                // chunk) need no room.
                let bytes = m.size.saturating_sub(b * m.block_size).min(m.block_size);
                (bytes, state == FULLY_PRESENT || state == PARTIALLY_PRESENT)
            };
            if !is_bitmap && state == PARTIALLY_PRESENT && !m.has_parent {
                return Err(crate::disk::corrupt(
                    "VHDX BAT entry",
                    format!("{what}: entry {i} at byte {:#x}", p.bat.offset + 8 * i),
                    "partially present in a disk without a parent",
                ));
            }
            if !is_bitmap && state == 4 {
                return Err(crate::disk::corrupt(
                    "VHDX BAT entry",
                    format!("{what}: entry {i} at byte {:#x}", p.bat.offset + 8 * i),
                    "state 4 is not a payload block state",
                ));
            }
            if present && (off < MIB || off.checked_add(need).is_none_or(|end| end > flen)) {
                return Err(crate::disk::corrupt(
                    "VHDX BAT entry",
                    format!("{what}: entry {i} at byte {:#x}", p.bat.offset + 8 * i),
                    format!(
                        "{} at byte {off:#x} lies outside the {flen}-byte file",
                        if is_bitmap {
                            "sector bitmap block"
                        } else {
                            "payload block"
                        }
                    ),
                ));
            }
        }
        let h = p.headers[p.cur]
            .as_ref()
            .ok_or_else(|| Error::Unsupported("no header".into()))?;
        Ok(Vhdx {
            path: path.to_path_buf(),
            file,
            size: m.size,
            block: m.block_size,
            sector,
            chunk_ratio,
            bat_offset: p.bat.offset,
            bat: RwLock::new(bat),
            parent,
            data_write: h.data_write,
            fixed: m.leave_allocated,
            physical_sector: m.physical_sector,
            replayed: 0,
            writer: None,
        })
    }

    /// Opens `file` read-only, its parents through `opener`.
    fn open_chain(
        path: &Path,
        file: Arc<dyn Device>,
        opener: &Opener,
        seen: &mut Vec<PathBuf>,
    ) -> Result<Vhdx> {
        let what = path.display().to_string();
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if seen.contains(&canon) {
            return Err(crate::disk::corrupt(
                "VHDX parent chain",
                what,
                "loops: the disk is its own ancestor",
            ));
        }
        if seen.len() >= MAX_CHAIN {
            return Err(Error::Unsupported(format!(
                "{what}: a chain of more than {MAX_CHAIN} differencing VHDX disks"
            )));
        }
        seen.push(canon);
        let (headers, cur, replay) = Vhdx::parse_headers(file.as_ref(), &what)?;
        let (file, replayed): (Arc<dyn Device>, usize) = match &replay {
            Some(r) => (Arc::new(log::Overlay::new(file, r)), r.entries),
            None => (file, 0),
        };
        let p = Vhdx::parse_rest(file.as_ref(), headers, cur, &what)?;
        let parent = if p.meta.has_parent {
            Some(Vhdx::open_parent(path, &p.meta, opener, seen)?)
        } else {
            None
        };
        let mut v = Vhdx::build(path, file, &p, parent)?;
        v.replayed = replayed;
        Ok(v)
    }

    /// The parent a differencing disk's locator names.
    fn open_parent(
        path: &Path,
        m: &Meta,
        opener: &Opener,
        seen: &mut Vec<PathBuf>,
    ) -> Result<Arc<dyn Device>> {
        let get = |k: &str| {
            m.locator
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let linkage = get("parent_linkage");
        let linkage2 = get("parent_linkage2");
        let mut names = Vec::new();
        if let Some(r) = get("relative_path") {
            let r = r.replace('\\', "/");
            names.push(r.trim_start_matches("./").to_string());
        }
        for k in ["absolute_win32_path", "volume_path"] {
            if let Some(a) = get(k) {
                // A Windows path: its last component, beside this file.
                if let Some(last) = a.rsplit(['\\', '/']).next() {
                    if !last.is_empty() {
                        names.push(last.to_string());
                    }
                }
            }
        }
        if names.is_empty() {
            return Err(crate::disk::corrupt(
                "VHDX parent locator",
                path.display().to_string(),
                "it names no parent path (relative_path, absolute_win32_path or volume_path)",
            ));
        }
        let mut last_err = None;
        for n in &names {
            match opener(path, n) {
                Ok((ppath, pfile)) => {
                    let pv = Vhdx::open_chain(&ppath, Arc::from(pfile), opener, seen)?;
                    let pg = guid_text(&pv.data_write);
                    let matches = |l: &Option<String>| {
                        l.as_ref().is_some_and(|l| l.eq_ignore_ascii_case(&pg))
                    };
                    if linkage.is_some() && !matches(&linkage) && !matches(&linkage2) {
                        return Err(crate::disk::corrupt(
                            "VHDX parent locator",
                            path.display().to_string(),
                            format!(
                                "the parent {} has data write GUID {pg}, the locator's parent_linkage is {}",
                                ppath.display(),
                                linkage.unwrap_or_default()
                            ),
                        ));
                    }
                    return Ok(Arc::new(pv));
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Unsupported("no parent".into())))
    }

    /// The BAT index of payload block `b`.
    fn payload_index(&self, b: u64) -> usize {
        (b + b / self.chunk_ratio) as usize
    }

    fn entry(&self, idx: usize) -> u64 {
        self.bat.read().unwrap_or_else(|p| p.into_inner())[idx]
    }

    /// Reads guest bytes.
    fn read_guest(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        crate::disk::inside("read", "VHDX", self.size, off, buf.len())?;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let b = pos / self.block;
            let within = pos % self.block;
            let n = ((self.block - within) as usize).min(buf.len() - done);
            let idx = self.payload_index(b);
            let e = self.entry(idx);
            let piece = &mut buf[done..done + n];
            match e & 7 {
                FULLY_PRESENT => self.file.read_at(piece, (e & OFFSET_MASK) + within)?,
                NOT_PRESENT => match &self.parent {
                    Some(p) => p.read_at(piece, pos)?,
                    None => piece.fill(0),
                },
                UNDEFINED | ZERO | UNMAPPED | UNMAPPED_V095 => piece.fill(0),
                PARTIALLY_PRESENT => self.read_partial(piece, pos, b, e & OFFSET_MASK)?,
                s => {
                    return Err(corrupt_io(format!(
                        "{}: VHDX BAT entry {idx} at byte {:#x}: state {s} is not a payload block state",
                        self.what(),
                        self.bat_offset + 8 * idx as u64
                    )))
                }
            }
            done += n;
        }
        Ok(())
    }

    /// A read inside a partially present block `b` (at `host`): each
    /// sector from the block or the parent, as the sector bitmap says.
    fn read_partial(&self, buf: &mut [u8], pos: u64, b: u64, host: u64) -> io::Result<()> {
        let Some(parent) = &self.parent else {
            return Err(corrupt_io(format!(
                "{}: VHDX payload block {b} is partially present in a disk without a parent",
                self.what()
            )));
        };
        let chunk = b / self.chunk_ratio;
        let sb_idx = ((chunk + 1) * (self.chunk_ratio + 1) - 1) as usize;
        let sb = self.entry(sb_idx);
        if sb & 7 != FULLY_PRESENT {
            return Err(corrupt_io(format!(
                "{}: VHDX BAT entry {sb_idx} at byte {:#x}: the sector bitmap of partially present block {b} is not present",
                self.what(),
                self.bat_offset + 8 * sb_idx as u64
            )));
        }
        let s = self.sector;
        let first = pos / s;
        let last = (pos + buf.len() as u64 - 1) / s;
        // Sector numbers within the chunk the bitmap covers.
        let chunk_first = chunk * self.chunk_ratio * (self.block / s);
        let (lo, hi) = (first - chunk_first, last - chunk_first);
        let mut bits = vec![0u8; (hi / 8 - lo / 8 + 1) as usize];
        self.file.read_at(&mut bits, (sb & OFFSET_MASK) + lo / 8)?;
        let mut done = 0usize;
        let mut sec = first;
        while done < buf.len() {
            let p = pos + done as u64;
            let n = ((s - p % s) as usize).min(buf.len() - done);
            let k = sec - chunk_first - (lo / 8) * 8;
            let present = bits[(k / 8) as usize] & (1 << (k % 8)) != 0;
            let piece = &mut buf[done..done + n];
            if present {
                self.file.read_at(piece, host + p % self.block)?;
            } else {
                parent.read_at(piece, p)?;
            }
            done += n;
            sec += 1;
        }
        Ok(())
    }
}

impl Device for Vhdx {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.read_guest(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_guest(buf, off)
    }

    fn flush(&self) -> io::Result<()> {
        self.flush_all()
    }

    fn len(&self) -> u64 {
        self.size
    }
}

/// The disk inside the VHDX `file`, read-only.
pub fn open(path: &Path, file: Box<dyn Device>, opener: &Opener) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(open_vhdx(path, file, opener)?))
}

/// As [`open`], the [`Vhdx`] itself.
pub fn open_vhdx(path: &Path, file: Box<dyn Device>, opener: &Opener) -> Result<Vhdx> {
    let mut seen = Vec::new();
    Vhdx::open_chain(path, Arc::from(file), opener, &mut seen)
}

/// The disk inside the VHDX at `path`, written in place.
pub fn open_rw(path: &Path) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(write::open_file_rw(path)?))
}

/// The disk inside the VHDX file `host` (at `path`, for messages), written
/// in place on that device: its log replayed onto it first. Growing the
/// file is writing past its end.
pub fn open_rw_on(path: &Path, host: Arc<dyn Device>) -> Result<Arc<Vhdx>> {
    Ok(Arc::new(write::open_device_rw(path, host, None)?))
}

/// The virtual size of a new VHDX of at least `bytes` (whole sectors).
pub fn disk_size(bytes: u64) -> u64 {
    bytes.div_ceil(512) * 512
}

/// A new VHDX at `path` of `bytes` virtual bytes.
pub fn create(path: &Path, bytes: u64) -> Result<NewDisk> {
    let v = write::create(path, bytes, write::CreateOptions::default())?;
    Ok(NewDisk::new(Arc::new(v)))
}

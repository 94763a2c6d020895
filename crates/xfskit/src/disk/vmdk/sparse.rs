//! One hosted sparse extent: a grain directory (GD) of grain tables (GT)
//! of grain offsets, all in sectors. Grains are plain (monolithicSparse,
//! the sparse extents of twoGbMaxExtentSparse) or compressed, each behind
//! a grain marker (streamOptimized). Every offset read from the file is
//! checked against the file's length before it is followed.
//!
//! Written in place (plain grains only): a new grain is appended at the
//! end of the file, written whole, and its GT entry changed in the cached
//! table, which is marked dirty. [`Sparse::commit`] (the device's flush)
//! syncs the grains first, then writes the dirty tables (the GD's and the
//! redundant GD's copy) and syncs again: a crash leaks grains, it never
//! leaves an entry pointing at a grain that was not written.

use super::header::{self, Header, FLAG_RGD, FLAG_ZERO_GRAIN, GD_AT_END, SECTOR};
use crate::dev::Device;
use crate::disk::corrupt_io;
use crate::error::{Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::sync::{Arc, Mutex, RwLock};

/// Largest grain accepted (VMware and QEMU make 64 KiB ones).
const GRAIN_MAX_SECTORS: u64 = 2048;
/// Largest disk a sparse extent may describe (QEMU's limit is 2 TiB for
/// writing; reading a larger capacity is bounded by the GD fitting the
/// file anyway).
const CAPACITY_MAX_SECTORS: u64 = 1 << 40;
/// Grain tables cached (2 KiB each).
const GT_CACHE: usize = 8192;
/// Dirty grain tables kept before they are written out (each maps 32 MiB).
const DIRTY_MAX: usize = 2048;
/// Inflated grains cached.
const INFLATED_CACHE: usize = 16;

/// Where one grain's bytes are.
#[derive(Debug, Clone, Copy)]
pub(super) enum Map {
    Unallocated,
    Zero,
    Plain(u64),
    Compressed(u64),
}

#[derive(Default)]
struct Tables {
    cache: HashMap<usize, Arc<[u32]>>,
    /// Tables changed since the last commit (never evicted).
    dirty: BTreeSet<usize>,
}

/// Allocation state when written in place.
pub(super) struct Writer {
    /// The next free byte, grain-aligned.
    end: u64,
}

/// A sparse extent.
pub(super) struct Sparse {
    file: Arc<dyn Device>,
    name: String,
    pub(super) header: Header,
    grain: u64,
    gtes: u64,
    gd: RwLock<Vec<u32>>,
    gd_at: u64,
    rgd: Option<(u64, RwLock<Vec<u32>>)>,
    tables: Mutex<Tables>,
    inflated: Mutex<Vec<(u64, Arc<[u8]>)>>,
    writer: Option<Mutex<Writer>>,
}

fn bad(msg: String) -> Error {
    Error::Io(corrupt_io(msg))
}

impl Sparse {
    /// Opens the sparse extent `file` (named `name` in errors), read-only.
    pub fn open(name: &str, file: Arc<dyn Device>) -> Result<Sparse> {
        let flen = file.len();
        let mut first = [0u8; 512];
        if flen < 512 {
            return Err(bad(format!(
                "VMDK {name}: the sparse extent header needs 512 bytes, the file has {flen}"
            )));
        }
        file.read_at(&mut first, 0)?;
        if &first[..4] == header::COWD {
            return Err(Error::Unsupported(format!(
                "{name}: VMDK3 (COWD, ESX 2) sparse extents"
            )));
        }
        let mut h = Header::parse(&first).ok_or_else(|| {
            bad(format!(
                "VMDK {name}: no sparse extent magic (KDMV) at byte 0"
            ))
        })?;
        if h.gd_offset == GD_AT_END {
            h = read_footer(name, file.as_ref())?;
        }
        if h.version == 0 || h.version > 3 {
            return Err(Error::Unsupported(format!(
                "{name}: VMDK sparse extent version {}",
                h.version
            )));
        }
        if h.compressed() && h.compress != header::COMPRESS_DEFLATE {
            return Err(Error::Unsupported(format!(
                "{name}: VMDK compression algorithm {}",
                h.compress
            )));
        }
        let hdr = |why: String| {
            bad(format!(
                "VMDK {name}: sparse extent header at byte 0x0: {why}"
            ))
        };
        if h.grain == 0 || h.grain > GRAIN_MAX_SECTORS {
            return Err(hdr(format!(
                "grain size {} sectors is not in 1..={GRAIN_MAX_SECTORS}",
                h.grain
            )));
        }
        if h.gtes == 0 || h.gtes > 512 {
            return Err(hdr(format!(
                "{} grain table entries per table is not in 1..=512",
                h.gtes
            )));
        }
        if h.capacity > CAPACITY_MAX_SECTORS {
            return Err(hdr(format!("capacity of {} sectors", h.capacity)));
        }
        let grain = h.grain * SECTOR;
        let gtes = u64::from(h.gtes);
        let gd_len = h.capacity.div_ceil(h.grain * gtes);
        let read_gd = |what: &str, at_sector: u64| -> Result<(u64, Vec<u32>)> {
            let at = at_sector
                .checked_mul(SECTOR)
                .filter(|&a| a.checked_add(gd_len * 4).is_some_and(|e| e <= flen))
                .ok_or_else(|| {
                    hdr(format!(
                        "the {what} at sector {at_sector} ({gd_len} entries) lies past the end of the {flen}-byte extent"
                    ))
                })?;
            let mut raw = vec![0u8; (gd_len * 4) as usize];
            file.read_at(&mut raw, at)?;
            Ok((
                at,
                raw.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ))
        };
        let (gd_at, gd) = read_gd("grain directory", h.gd_offset)?;
        let rgd = if h.flags & FLAG_RGD != 0 && h.rgd_offset != 0 && h.rgd_offset != GD_AT_END {
            let (at, t) = read_gd("redundant grain directory", h.rgd_offset)?;
            Some((at, RwLock::new(t)))
        } else {
            None
        };
        Ok(Sparse {
            file,
            name: name.to_string(),
            header: h,
            grain,
            gtes,
            gd: RwLock::new(gd),
            gd_at,
            rgd,
            tables: Mutex::new(Tables::default()),
            inflated: Mutex::new(Vec::new()),
            writer: None,
        })
    }

    /// Makes the extent writable in place (plain grains only).
    pub fn make_writable(&mut self) -> Result<()> {
        let h = &self.header;
        let refuse = |why: &str| {
            Err(Error::Unsupported(format!(
                "writing to {}: {why}",
                self.name
            )))
        };
        if h.compressed() || h.markers() {
            return refuse(
                "a streamOptimized VMDK is written once, by design (convert it to monolithicSparse with qemu-img convert -O vmdk to write in place)",
            );
        }
        if h.version == 3 {
            return refuse("VMDK version 3 (changed block tracking) is read-only");
        }
        if h.capacity.div_ceil(h.grain) * h.grain > CAPACITY_MAX_SECTORS {
            return refuse("too large");
        }
        let end = self.file.len().div_ceil(self.grain) * self.grain;
        self.writer = Some(Mutex::new(Writer { end }));
        Ok(())
    }

    /// Bytes of the disk this extent holds.
    pub fn capacity(&self) -> u64 {
        self.header.capacity * SECTOR
    }

    fn table(&self, gi: usize) -> io::Result<Option<Arc<[u32]>>> {
        {
            let t = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(x) = t.cache.get(&gi) {
                return Ok(Some(x.clone()));
            }
        }
        let s = self
            .gd
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(gi)
            .copied()
            .unwrap_or(0);
        if s == 0 {
            return Ok(None);
        }
        let bytes = self.gtes * 4;
        let at = u64::from(s) * SECTOR;
        if at + bytes > self.file.len() {
            return Err(corrupt_io(format!(
                "VMDK {}: grain directory entry {gi} at byte {:#x}: grain table at sector {s} lies past the end of the {}-byte extent",
                self.name,
                self.gd_at + 4 * gi as u64,
                self.file.len()
            )));
        }
        let mut raw = vec![0u8; bytes as usize];
        self.file.read_at(&mut raw, at)?;
        let t: Arc<[u32]> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let mut tb = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if tb.cache.len() >= GT_CACHE {
            let dirty = std::mem::take(&mut tb.dirty);
            tb.cache.retain(|k, _| dirty.contains(k));
            tb.dirty = dirty;
        }
        Ok(Some(tb.cache.entry(gi).or_insert(t).clone()))
    }

    /// Where grain `g` of the extent is.
    pub fn map(&self, g: u64) -> io::Result<Map> {
        let gi = (g / self.gtes) as usize;
        let ei = (g % self.gtes) as usize;
        let Some(t) = self.table(gi)? else {
            return Ok(Map::Unallocated);
        };
        let e = t[ei];
        if e == 0 {
            return Ok(Map::Unallocated);
        }
        if e == 1 && self.header.flags & FLAG_ZERO_GRAIN != 0 {
            return Ok(Map::Zero);
        }
        let host = u64::from(e) * SECTOR;
        let flen = self.file.len();
        let compressed = self.header.compressed();
        let past = if compressed {
            host + 12 > flen
        } else {
            host >= flen
        };
        if past {
            let gt_at = u64::from(self.gd.read().unwrap_or_else(|p| p.into_inner())[gi]) * SECTOR;
            return Err(corrupt_io(format!(
                "VMDK {}: grain table {gi} entry {ei} at byte {:#x}: grain at sector {e} points past the end of the {flen}-byte extent",
                self.name,
                gt_at + 4 * ei as u64
            )));
        }
        Ok(if compressed {
            Map::Compressed(host)
        } else {
            Map::Plain(host)
        })
    }

    /// The inflated grain `g` whose marker (or data) is at `host`.
    fn inflate(&self, g: u64, host: u64) -> io::Result<Arc<[u8]>> {
        {
            let c = self.inflated.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, b)) = c.iter().find(|(h, _)| *h == host) {
                return Ok(b.clone());
            }
        }
        let flen = self.file.len();
        let (data_at, len) = if self.header.markers() {
            let mut m = [0u8; 12];
            self.file.read_at(&mut m, host)?;
            let size = u64::from(u32::from_le_bytes([m[8], m[9], m[10], m[11]]));
            if size == 0 || size > 2 * self.grain || host + 12 + size > flen {
                return Err(corrupt_io(format!(
                    "VMDK {}: grain marker of grain {g} at byte {host:#x}: {size} compressed bytes do not fit a grain of {} bytes inside the {flen}-byte extent",
                    self.name, self.grain
                )));
            }
            (host + 12, size)
        } else {
            (host, (2 * self.grain).min(flen - host))
        };
        let mut packed = vec![0u8; len as usize];
        self.file.read_at(&mut packed, data_at)?;
        let mut out = vec![0u8; self.grain as usize];
        let n = inflate_into(&packed, &mut out).map_err(|e| {
            corrupt_io(format!(
                "VMDK {}: compressed grain {g} ({len} bytes at byte {data_at:#x}) does not inflate: {e}",
                self.name
            ))
        })?;
        let need = self
            .grain
            .min(self.capacity().saturating_sub(g * self.grain)) as usize;
        if n < need {
            return Err(corrupt_io(format!(
                "VMDK {}: compressed grain {g} at byte {data_at:#x} inflates to {n} bytes, not {need}",
                self.name
            )));
        }
        let b: Arc<[u8]> = out.into();
        let mut c = self.inflated.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= INFLATED_CACHE {
            c.remove(0);
        }
        c.push((host, b.clone()));
        Ok(b)
    }

    /// Fills `buf` from byte `off` of the extent (zeros past its capacity).
    pub fn read(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let g = pos / self.grain;
            let within = pos % self.grain;
            let n = ((self.grain - within) as usize).min(buf.len() - done);
            let piece = &mut buf[done..done + n];
            if pos >= self.capacity() {
                piece.fill(0);
            } else {
                match self.map(g)? {
                    Map::Unallocated | Map::Zero => piece.fill(0),
                    Map::Plain(host) => {
                        let at = host + within;
                        let have = self.file.len().saturating_sub(at).min(n as u64) as usize;
                        piece[have..].fill(0);
                        self.file.read_at(&mut piece[..have], at)?;
                    }
                    Map::Compressed(host) => {
                        let c = self.inflate(g, host)?;
                        piece.copy_from_slice(&c[within as usize..within as usize + n]);
                    }
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `buf` at byte `off` of the extent.
    pub fn write(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("VMDK {}: open read-only", self.name),
            ));
        };
        if off
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.capacity())
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("write past the end of the VMDK extent {}", self.name),
            ));
        }
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let within = pos % self.grain;
            let n = ((self.grain - within) as usize).min(buf.len() - done);
            self.write_grain(&mut w, pos / self.grain, within, &buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    fn write_grain(&self, w: &mut Writer, g: u64, within: u64, piece: &[u8]) -> io::Result<()> {
        match self.map(g)? {
            Map::Plain(host) => {
                if host < self.header.overhead * SECTOR || host < SECTOR {
                    return Err(corrupt_io(format!(
                        "VMDK {}: grain {g} at byte {host:#x} lies inside the metadata (before byte {:#x})",
                        self.name,
                        self.header.overhead * SECTOR
                    )));
                }
                self.file.write_at(piece, host + within)
            }
            Map::Compressed(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "VMDK {}: compressed grains are not written in place",
                    self.name
                ),
            )),
            Map::Unallocated | Map::Zero => {
                if piece.iter().all(|&b| b == 0) {
                    return Ok(());
                }
                let gi = (g / self.gtes) as usize;
                let ei = (g % self.gtes) as usize;
                if self.table(gi)?.is_none() {
                    self.new_table(w, gi)?;
                }
                let mut data = vec![0u8; self.grain as usize];
                data[within as usize..within as usize + piece.len()].copy_from_slice(piece);
                let host = self.alloc(w, self.grain)?;
                self.file.write_at(&data, host)?;
                let t = self.table(gi)?.ok_or_else(|| {
                    io::Error::other(format!("VMDK {}: grain table {gi} vanished", self.name))
                })?;
                let mut v = t.to_vec();
                v[ei] = (host / SECTOR) as u32;
                let full = {
                    let mut tb = self.tables.lock().unwrap_or_else(|p| p.into_inner());
                    tb.cache.insert(gi, Arc::from(v));
                    tb.dirty.insert(gi);
                    tb.dirty.len() >= DIRTY_MAX
                };
                if full {
                    self.commit_locked()?;
                }
                Ok(())
            }
        }
    }

    /// `bytes` (rounded up to whole grains) at the end of the file.
    fn alloc(&self, w: &mut Writer, bytes: u64) -> io::Result<u64> {
        let host = w.end;
        let end = host + bytes.div_ceil(self.grain) * self.grain;
        if end / SECTOR > u64::from(u32::MAX) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "VMDK {}: the extent file cannot grow past 2 TiB (grain offsets are 32-bit sectors)",
                    self.name
                ),
            ));
        }
        w.end = end;
        Ok(host)
    }

    /// A zeroed grain table (and its redundant copy) for GD entry `gi`,
    /// synced before the directories point at it.
    fn new_table(&self, w: &mut Writer, gi: usize) -> io::Result<()> {
        let bytes = self.gtes * 4;
        let copies = if self.rgd.is_some() { 2 } else { 1 };
        let at = self.alloc(w, bytes * copies)?;
        let zeros = vec![0u8; ((bytes * copies).div_ceil(self.grain) * self.grain) as usize];
        self.file.write_at(&zeros, at)?;
        self.file.flush()?;
        let s = (at / SECTOR) as u32;
        self.file
            .write_at(&s.to_le_bytes(), self.gd_at + 4 * gi as u64)?;
        self.gd.write().unwrap_or_else(|p| p.into_inner())[gi] = s;
        if let Some((rat, rgd)) = &self.rgd {
            let rs = ((at + bytes) / SECTOR) as u32;
            self.file.write_at(&rs.to_le_bytes(), rat + 4 * gi as u64)?;
            rgd.write().unwrap_or_else(|p| p.into_inner())[gi] = rs;
        }
        Ok(())
    }

    /// Makes every write so far durable: grains synced, then the changed
    /// grain tables written (both copies) and synced.
    pub fn commit(&self) -> io::Result<()> {
        match &self.writer {
            None => Ok(()),
            Some(w) => {
                let _w = w.lock().unwrap_or_else(|p| p.into_inner());
                self.commit_locked()
            }
        }
    }

    fn commit_locked(&self) -> io::Result<()> {
        let dirty: Vec<(usize, Arc<[u32]>)> = {
            let tb = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            tb.dirty
                .iter()
                .filter_map(|gi| tb.cache.get(gi).map(|t| (*gi, t.clone())))
                .collect()
        };
        self.file.flush()?;
        if dirty.is_empty() {
            return Ok(());
        }
        let gd = self.gd.read().unwrap_or_else(|p| p.into_inner()).clone();
        let rgd = self
            .rgd
            .as_ref()
            .map(|(_, r)| r.read().unwrap_or_else(|p| p.into_inner()).clone());
        for (gi, t) in &dirty {
            let raw: Vec<u8> = t.iter().flat_map(|e| e.to_le_bytes()).collect();
            self.file.write_at(&raw, u64::from(gd[*gi]) * SECTOR)?;
            if let Some(r) = &rgd {
                if r[*gi] != 0 {
                    self.file.write_at(&raw, u64::from(r[*gi]) * SECTOR)?;
                }
            }
        }
        self.file.flush()?;
        let mut tb = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        for (gi, _) in &dirty {
            tb.dirty.remove(gi);
        }
        Ok(())
    }
}

impl Drop for Sparse {
    fn drop(&mut self) {
        let _ = self.commit();
    }
}

/// The footer's copy of the header (streamOptimized with `GD_AT_END`):
/// the footer marker, the header, and the end-of-stream marker fill the
/// last three sectors of the file.
fn read_footer(name: &str, file: &dyn Device) -> Result<Header> {
    let flen = file.len();
    if flen < 1536 + 512 {
        return Err(bad(format!(
            "VMDK {name}: a streamOptimized file of {flen} bytes has no room for its footer"
        )));
    }
    let at = flen - 1536;
    let mut b = [0u8; 1536];
    file.read_at(&mut b, at)?;
    let sec = |i: usize| -> [u8; 512] {
        let mut s = [0u8; 512];
        s.copy_from_slice(&b[i * 512..(i + 1) * 512]);
        s
    };
    let (_, fsize, ftype) = header::parse_marker(&sec(0));
    let (eval, esize, etype) = header::parse_marker(&sec(2));
    let h = Header::parse(&b[512..1024]);
    match h {
        Some(h)
            if fsize == 0
                && ftype == header::MARKER_FOOTER
                && (eval, esize, etype) == (0, 0, header::MARKER_EOS)
                && h.gd_offset != GD_AT_END =>
        {
            Ok(h)
        }
        _ => Err(bad(format!(
            "VMDK {name}: the header says the grain directory is in the footer, but there is no footer marker, header and end-of-stream marker at byte {at:#x} (an incomplete stream?)"
        ))),
    }
}

/// Inflates `packed` (a zlib stream, or raw deflate) into `out`; returns
/// how many bytes it filled. Never writes more than `out` holds: a stream
/// that would is an error.
pub(super) fn inflate_into(packed: &[u8], out: &mut [u8]) -> io::Result<usize> {
    let zlib = packed.len() >= 2
        && packed[0] & 0x0f == 8
        && ((u16::from(packed[0]) << 8) | u16::from(packed[1])) % 31 == 0;
    let mut r: Box<dyn Read> = if zlib {
        Box::new(flate2::read::ZlibDecoder::new(packed))
    } else {
        Box::new(flate2::read::DeflateDecoder::new(packed))
    };
    let mut n = 0;
    while n < out.len() {
        match r.read(&mut out[n..])? {
            0 => return Ok(n),
            k => n += k,
        }
    }
    // The stream must end here, its checksum good (as zlib's uncompress
    // demands): one byte more is the end of it or an error.
    let mut more = [0u8; 1];
    match r.read(&mut more)? {
        0 => Ok(n),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("inflates to more than {} bytes", out.len()),
        )),
    }
}

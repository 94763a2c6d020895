//! qcow2 images (v2 and v3): the guest disk is found through the two-level
//! cluster map (L1 table, L2 tables); clusters may be unallocated (read
//! from the backing file, or as zeros), zero, plain, or compressed with
//! deflate or zstd. Writing (`write`) allocates clusters at the end of the
//! file and keeps the refcounts exact.
//!
//! No crate served: imago (the most complete) reads only deflate-compressed
//! clusters and brings an async runtime's dependencies; the `qcow2` crate is
//! read-only, unmaintained and knows neither v3 features nor zstd; qcow2-rs
//! is built on io_uring and async tasks. The reading side of the format is
//! small, so we keep our own, with a bounds check on every pointer.

mod create;
pub(crate) mod header;
mod write;

pub use create::create;
pub use header::{Compression, Header};

use crate::dev::{Device, FileDevice};
use crate::disk::corrupt_io;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// Longest backing chain followed (QEMU's own limit is far higher, but real
/// chains are short and a long one is more likely a mistake).
const CHAIN_MAX: usize = 16;
/// Bytes of L2 tables kept in memory.
const L2_CACHE_BYTES: usize = 32 << 20;
/// Decompressed clusters kept (reads of one compressed cluster come in
/// pieces of a filesystem block).
const INFLATED_CACHE: usize = 16;
/// Bits 9-55 of L1 and standard L2 entries: the host offset.
const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const L2_COMPRESSED: u64 = 1 << 62;
const L2_ZERO: u64 = 1;

/// True when `magic` (the first 4 bytes of a file) is qcow2's.
pub fn is_qcow2(magic: &[u8]) -> bool {
    magic.get(..4) == Some(&header::MAGIC[..])
}

/// Opens the backing file `name` of the qcow2 file at the location given
/// first: returns where the backing file is (its name in errors, and the
/// location its own backing file is taken relative to) and the file.
pub type BackingOpener<'a> = dyn Fn(&Path, &str) -> Result<(PathBuf, Box<dyn Device>)> + 'a;

/// The backing file `name` of the local qcow2 file `path`: relative to the
/// directory `path` is in (an absolute name is taken as it is).
pub fn local_backing(path: &Path, name: &str) -> Result<(PathBuf, Box<dyn Device>)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let bpath = dir.join(name);
    let bfile = FileDevice::open_read_only(&bpath).map_err(|e| {
        Error::Io(io::Error::new(
            e.kind(),
            format!(
                "backing file {} of {}: {e}",
                bpath.display(),
                path.display()
            ),
        ))
    })?;
    Ok((bpath, Box::new(bfile)))
}

/// A qcow2 file seen as the disk it holds.
pub struct Qcow2 {
    file: Box<dyn Device>,
    path: PathBuf,
    header: Header,
    l1: RwLock<Vec<u64>>,
    backing: Option<Box<dyn Device>>,
    /// Allocation state when opened for writing.
    writer: Option<Mutex<write::Writer>>,
    l2_cache: Mutex<HashMap<u64, Arc<[u64]>>>,
    inflated: Mutex<Vec<(u64, Arc<[u8]>)>>,
}

/// Where one guest cluster's bytes are.
enum Map {
    /// Read from the backing file (or zeros without one).
    Unallocated,
    /// Reads as zeros.
    Zero,
    /// At this host offset.
    Plain(u64),
    /// Compressed: this many bytes at this host offset.
    Compressed(u64, u64),
}

impl Qcow2 {
    /// Opens the qcow2 file at `path`, already opened as `file` (any
    /// device: tests use memory), and its backing chain; backing file names
    /// are taken relative to `path`'s directory.
    pub fn open(path: &Path, file: Box<dyn Device>) -> Result<Qcow2> {
        Qcow2::open_with(path, file, &local_backing)
    }

    /// [`Qcow2::open`] with the backing files opened by `backing` (for a
    /// qcow2 file that is not local: its backing file name is resolved
    /// where it is).
    pub fn open_with(path: &Path, file: Box<dyn Device>, backing: &BackingOpener) -> Result<Qcow2> {
        let mut seen = Vec::new();
        Qcow2::open_chain(path, file, &mut seen, backing)
    }

    /// The checked header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn open_chain(
        path: &Path,
        file: Box<dyn Device>,
        seen: &mut Vec<PathBuf>,
        opener: &BackingOpener,
    ) -> Result<Qcow2> {
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if seen.contains(&canon) {
            return Err(crate::disk::corrupt(
                "qcow2 backing chain",
                path.display().to_string(),
                format!(
                    "loops: {} is its own backing file, through {}",
                    canon.display(),
                    seen.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ),
            ));
        }
        if seen.len() >= CHAIN_MAX {
            return Err(Error::Unsupported(format!(
                "a qcow2 backing chain longer than {CHAIN_MAX} images"
            )));
        }
        seen.push(canon);
        // The header and its extensions fill at most the first cluster:
        // read that much (the cluster size is at byte 20; the parser checks
        // it again).
        let mut head = [0u8; 24];
        let n = file.len().min(24) as usize;
        file.read_at(&mut head[..n], 0)?;
        let bits = u32::from_be_bytes([head[20], head[21], head[22], head[23]]).clamp(9, 21);
        let first_len = file.len().min(1 << bits) as usize;
        let mut first = vec![0u8; first_len];
        file.read_at(&mut first, 0)?;
        let read = |off: u64, n: usize| {
            let mut b = vec![0u8; n];
            file.read_at(&mut b, off).map(|_| b)
        };
        let mut header = header::parse(&first, file.len(), read)?;
        let mut raw = vec![0u8; header.l1_entries as usize * 8];
        file.read_at(&mut raw, header.l1_offset)?;
        let l1: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let cluster = 1u64 << header.cluster_bits;
        for (i, e) in l1.iter().enumerate() {
            let off = e & OFFSET_MASK;
            if off != 0
                && (!off.is_multiple_of(cluster)
                    || off.checked_add(cluster).is_none_or(|end| end > file.len()))
            {
                return Err(crate::disk::corrupt(
                    "qcow2 L1 entry",
                    format!("entry {i} of the L1 table at offset {}", header.l1_offset),
                    format!(
                        "the L2 table at offset {off} does not lie cluster-aligned inside the {}-byte file",
                        file.len()
                    ),
                ));
            }
        }
        let backing = match header.backing_file.take() {
            None => None,
            Some(name) => {
                let (bpath, bfile) = opener(path, &name)?;
                header.backing_file = Some(name);
                let mut magic = [0u8; 4];
                let is_q = bfile.read_at(&mut magic, 0).is_ok() && is_qcow2(&magic);
                let dev: Box<dyn Device> = match header.backing_format.as_deref() {
                    Some("qcow2") | None if is_q => {
                        Box::new(Qcow2::open_chain(&bpath, bfile, seen, opener)?)
                    }
                    Some("raw") | None => bfile,
                    Some(f) => {
                        return Err(Error::Unsupported(format!(
                            "backing file {} in format {f}",
                            bpath.display()
                        )))
                    }
                };
                Some(dev)
            }
        };
        Ok(Qcow2 {
            file,
            path: path.to_path_buf(),
            header,
            l1: RwLock::new(l1),
            backing,
            writer: None,
            l2_cache: Mutex::new(HashMap::new()),
            inflated: Mutex::new(Vec::new()),
        })
    }

    fn cluster(&self) -> u64 {
        1 << self.header.cluster_bits
    }

    /// Where guest cluster `gc` lies.
    fn map(&self, gc: u64) -> io::Result<Map> {
        let l2_bits = self.header.cluster_bits - 3;
        let l1_index = (gc >> l2_bits) as usize;
        let l2_off = self
            .l1
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(l1_index)
            .copied()
            .unwrap_or(0)
            & OFFSET_MASK;
        if l2_off == 0 {
            return Ok(Map::Unallocated);
        }
        let l2 = self.l2_table(l2_off)?;
        let index = (gc & ((1 << l2_bits) - 1)) as usize;
        let entry = l2[index];
        let at = (l2_off, index);
        let cb = self.header.cluster_bits;
        if entry & L2_COMPRESSED != 0 {
            let x = 62 - (cb - 8);
            let host = entry & ((1 << x) - 1);
            let sectors = ((entry >> x) & ((1 << (cb - 8)) - 1)) + 1;
            let len = sectors * 512 - (host & 511);
            if host >= self.file.len() {
                return Err(self.bad_cluster(
                    gc,
                    at,
                    entry,
                    "a compressed cluster past the end of the file",
                ));
            }
            return Ok(Map::Compressed(host, len.min(self.file.len() - host)));
        }
        if self.header.version >= 3 && entry & L2_ZERO != 0 {
            return Ok(Map::Zero);
        }
        let host = entry & OFFSET_MASK;
        if host == 0 {
            return Ok(Map::Unallocated);
        }
        if !host.is_multiple_of(self.cluster()) || host >= self.file.len() {
            return Err(self.bad_cluster(
                gc,
                at,
                entry,
                &format!(
                    "host offset {host} is unaligned or past the end of the {}-byte file",
                    self.file.len()
                ),
            ));
        }
        Ok(Map::Plain(host))
    }

    fn bad_cluster(&self, gc: u64, at: (u64, usize), entry: u64, why: &str) -> io::Error {
        corrupt_io(format!(
            "qcow2 {}: entry {} ({entry:#018x}) of the L2 table at offset {}, for guest cluster {gc} (guest offset {}): {why}",
            self.path.display(),
            at.1,
            at.0,
            gc << self.header.cluster_bits
        ))
    }

    fn l2_table(&self, off: u64) -> io::Result<Arc<[u64]>> {
        let mut cache = self.l2_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = cache.get(&off) {
            return Ok(t.clone());
        }
        let mut raw = vec![0u8; self.cluster() as usize];
        self.file.read_at(&mut raw, off).map_err(|e| {
            corrupt_io(format!(
                "qcow2 {}: L2 table at offset {off}: {e}",
                self.path.display()
            ))
        })?;
        let t: Arc<[u64]> = raw
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if (cache.len() + 1) * raw.len() > L2_CACHE_BYTES {
            cache.clear();
        }
        cache.insert(off, t.clone());
        Ok(t)
    }

    /// The decompressed cluster at `host` (`len` compressed bytes).
    fn inflate(&self, gc: u64, host: u64, len: u64) -> io::Result<Arc<[u8]>> {
        {
            let c = self.inflated.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, b)) = c.iter().find(|(h, _)| *h == host) {
                return Ok(b.clone());
            }
        }
        let mut packed = vec![0u8; len as usize];
        self.file.read_at(&mut packed, host)?;
        let mut out = vec![0u8; self.cluster() as usize];
        let r = match self.header.compression {
            Compression::Zlib => {
                flate2::read::DeflateDecoder::new(&packed[..]).read_exact(&mut out)
            }
            Compression::Zstd => zstd::stream::read::Decoder::with_buffer(&packed[..])
                .and_then(|mut d| d.read_exact(&mut out)),
        };
        if let Err(e) = r {
            return Err(corrupt_io(format!(
                "qcow2 {}: compressed cluster {gc} ({len} bytes at host offset {host}) does not inflate: {e}",
                self.path.display()
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

    /// Fills `buf` from the backing file at `off` (zeros past its end).
    fn read_backing(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        buf.fill(0);
        let Some(b) = &self.backing else {
            return Ok(());
        };
        if off >= b.len() {
            return Ok(());
        }
        let n = (b.len() - off).min(buf.len() as u64) as usize;
        b.read_at(&mut buf[..n], off)
    }

    /// Fills `buf` from host offset `host`: a read that runs past the end
    /// of the file reads zeros there, as in QEMU.
    fn read_host(&self, buf: &mut [u8], host: u64) -> io::Result<()> {
        let n = self.file.len().saturating_sub(host).min(buf.len() as u64) as usize;
        buf[n..].fill(0);
        self.file.read_at(&mut buf[..n], host)
    }
}

impl Device for Qcow2 {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        crate::disk::inside("read", "qcow2", self.header.size, off, buf.len())?;
        let cluster = self.cluster();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let gc = pos >> self.header.cluster_bits;
            let within = pos & (cluster - 1);
            let n = ((cluster - within) as usize).min(buf.len() - done);
            let piece = &mut buf[done..done + n];
            match self.map(gc)? {
                Map::Unallocated => self.read_backing(piece, pos)?,
                Map::Zero => piece.fill(0),
                Map::Plain(host) => self.read_host(piece, host + within)?,
                Map::Compressed(host, len) => {
                    let c = self.inflate(gc, host, len)?;
                    piece.copy_from_slice(&c[within as usize..within as usize + n]);
                }
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_guest(buf, off)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.flush()
    }

    fn len(&self) -> u64 {
        self.header.size
    }
}

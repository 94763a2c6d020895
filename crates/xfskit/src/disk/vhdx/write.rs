//! Writing a VHDX in place, and making new ones.
//!
//! A write into a fully present block goes in place. A write of anything
//! but zeros into any other block of a dynamic (or fixed) disk allocates a
//! new payload block at the end of the file (1 MiB aligned, as the BAT
//! addresses in MiB): the data is written and flushed first; then the BAT
//! sector with the new entry goes into the VHDX log (the headers' log GUID
//! set first, through the two-header update), which is flushed; only then
//! is the entry written in place. So a crash leaves a BAT that either does
//! not point at the block or points at it with the data there, once the
//! log is replayed. A flush (and closing) flushes the file and clears the
//! log GUID: the log is empty again. The file write GUID and the data write
//! GUID are renewed before the first write, as the specification demands.
//! A differencing disk is not written.
//!
//! A new file made by [`create`] is written without the log until it is
//! finished: nobody can have seen it before, and it is removed on failure.

use super::header::{self, Header, Region, HEADER_OFFSETS, TABLE_BYTES};
use super::log::{self, Op, SECTOR};
use super::{
    corrupt_io, Vhdx, FULLY_PRESENT, MIB, NOT_PRESENT, OFFSET_MASK, UNDEFINED, UNMAPPED,
    UNMAPPED_V095, ZERO,
};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The image file, which grows as blocks are allocated.
pub(super) use crate::dev::GrowFile as HostFile;

/// Write state, under one lock.
pub(super) struct Writer {
    host: Arc<dyn Device>,
    file: Option<Arc<HostFile>>,
    /// The current header and which slot it is in.
    head: Header,
    cur: usize,
    /// A new file: BAT entries written directly, GUIDs already new.
    fresh: bool,
    /// The GUIDs were renewed for this session.
    renewed: bool,
    log: Region,
    /// The current header's log GUID is set: entries since `log_pos` 0.
    log_active: bool,
    log_guid: [u8; 16],
    log_pos: u64,
    seq: u64,
    /// Where the next payload block goes.
    end: u64,
}

/// A random (version 4) GUID from /dev/urandom (the clock, the pid and a
/// counter without it).
pub(super) fn random_guid() -> [u8; 16] {
    use std::io::Read;
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut g = [0u8; 16];
    let ok = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut g))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        g[..8].copy_from_slice(&(t.as_nanos() as u64).to_le_bytes());
        g[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        g[12..].copy_from_slice(&(COUNT.fetch_add(1, Ordering::Relaxed) as u32).to_le_bytes());
    }
    g[7] = (g[7] & 0x0f) | 0x40;
    g[8] = (g[8] & 0x3f) | 0x80;
    g
}

impl Writer {
    /// Writes the header changed by `f` twice, into the other slot each
    /// time and flushed each time, so that both headers end up current.
    fn update_headers(&mut self, f: impl Fn(&mut Header)) -> io::Result<()> {
        for _ in 0..2 {
            let mut h = self.head.clone();
            f(&mut h);
            h.seq = self.head.seq.wrapping_add(1);
            let slot = 1 - self.cur;
            self.host.write_at(&h.encode(), HEADER_OFFSETS[slot])?;
            self.host.flush()?;
            self.head = h;
            self.cur = slot;
        }
        Ok(())
    }

    /// Before the first change: new file and data write GUIDs.
    fn renew(&mut self) -> io::Result<()> {
        if self.renewed || self.fresh {
            return Ok(());
        }
        let (fw, dw) = (random_guid(), random_guid());
        self.update_headers(|h| {
            h.file_write = fw;
            h.data_write = dw;
        })?;
        self.renewed = true;
        Ok(())
    }

    /// Makes the file at least `len` bytes long (zeros).
    fn grow(&self, len: u64) -> io::Result<()> {
        if len <= self.host.len() {
            return Ok(());
        }
        match &self.file {
            Some(f) => f.grow(len),
            None => self.host.write_at(&[0u8; 512], len - 512),
        }
    }

    /// Writes the 4 KiB `sectors` into the log as one entry and flushes it.
    fn log_sectors(&mut self, sectors: &[(u64, &[u8])]) -> io::Result<()> {
        let n = sectors.len() as u64;
        let need = ((n + 2).div_ceil(128) + n) * SECTOR;
        if need > self.log.length {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "VHDX: the log is too small for one entry",
            ));
        }
        if self.log_active && self.log_pos + need > self.log.length {
            self.checkpoint()?;
        }
        if !self.log_active {
            let g = random_guid();
            self.update_headers(|h| h.log_guid = g)?;
            self.log_guid = g;
            self.log_active = true;
            self.log_pos = 0;
        }
        self.seq = self.seq.wrapping_add(1).max(1);
        let e = log::encode_entry(self.log_guid, self.seq, 0, self.host.len(), sectors);
        self.host.write_at(&e, self.log.offset + self.log_pos)?;
        self.host.flush()?;
        self.log_pos += e.len() as u64;
        Ok(())
    }

    /// Everything written so far made durable and the log emptied.
    fn checkpoint(&mut self) -> io::Result<()> {
        if !self.log_active {
            return Ok(());
        }
        self.host.flush()?;
        self.update_headers(|h| h.log_guid = [0; 16])?;
        self.log_active = false;
        self.log_pos = 0;
        Ok(())
    }
}

impl Vhdx {
    /// Writes guest bytes (the Device's write_at).
    pub(super) fn write_guest(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the VHDX image is open read-only",
            ));
        };
        crate::disk::inside("write", "VHDX", self.size, off, buf.len())?;
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let b = pos / self.block;
            let within = pos % self.block;
            let n = ((self.block - within) as usize).min(buf.len() - done);
            let piece = &buf[done..done + n];
            let idx = self.payload_index(b);
            let e = self.entry(idx);
            match e & 7 {
                FULLY_PRESENT => {
                    w.renew()?;
                    self.file.write_at(piece, (e & OFFSET_MASK) + within)?;
                }
                NOT_PRESENT | UNDEFINED | ZERO | UNMAPPED | UNMAPPED_V095 => {
                    // Zeros over a block that reads as zeros change nothing.
                    if !piece.iter().all(|&x| x == 0) {
                        w.renew()?;
                        let host = w.end;
                        self.file.write_at(piece, host + within)?;
                        w.grow(host + self.block)?;
                        w.end = host + self.block;
                        self.set_bat(&mut w, idx, host | FULLY_PRESENT)?;
                    }
                }
                s => {
                    return Err(corrupt_io(format!(
                        "{}: VHDX BAT entry {idx} at byte {:#x}: state {s} cannot be written",
                        self.what(),
                        self.bat_offset + 8 * idx as u64
                    )))
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Points BAT entry `idx` at `entry`: through the log, unless the file
    /// is new.
    fn set_bat(&self, w: &mut Writer, idx: usize, entry: u64) -> io::Result<()> {
        self.bat.write().unwrap_or_else(|p| p.into_inner())[idx] = entry;
        let at = self.bat_offset + 8 * idx as u64;
        if !w.fresh {
            // The block's data is durable before anything points at it.
            w.host.flush()?;
            let sec = at & !(SECTOR - 1);
            let mut s = vec![0u8; SECTOR as usize];
            w.host.read_at(&mut s, sec)?;
            let k = (at - sec) as usize;
            s[k..k + 8].copy_from_slice(&entry.to_le_bytes());
            w.log_sectors(&[(sec, &s)])?;
        }
        w.host.write_at(&entry.to_le_bytes(), at)
    }

    /// The Device's flush: the file synced, the log emptied.
    pub(super) fn flush_all(&self) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Ok(());
        };
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        w.host.flush()?;
        w.checkpoint()
    }
}

impl Drop for Vhdx {
    fn drop(&mut self) {
        if let Some(w) = &self.writer {
            let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
            if w.log_active {
                let _ = w.host.flush();
                let _ = w.checkpoint();
            }
        }
    }
}

/// Opens the VHDX file at `path` for writing.
pub(super) fn open_file_rw(path: &Path) -> Result<Vhdx> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    crate::dev::lock_for_writing(&file, path)?;
    let host = Arc::new(HostFile::from_file(file)?);
    open_device_rw(path, host.clone(), Some(host))
}

/// Opens the VHDX on `host` for writing: its log replayed onto it.
pub(super) fn open_device_rw(
    path: &Path,
    host: Arc<dyn Device>,
    file: Option<Arc<HostFile>>,
) -> Result<Vhdx> {
    let what = path.display().to_string();
    let (headers, mut cur, replay) = Vhdx::parse_headers(host.as_ref(), &what)?;
    let mut head = headers[cur]
        .clone()
        .ok_or_else(|| Error::Unsupported("no header".into()))?;
    let mut seq = 0;
    let mut renewed = false;
    if head.log_guid != [0; 16] {
        // Replay the log for real, then empty it. The replay is the first
        // change made to the file: new write GUIDs go first (the log GUID
        // kept, so that the log stays valid until it is applied).
        let mut w = Writer {
            host: host.clone(),
            file: file.clone(),
            head: head.clone(),
            cur,
            fresh: false,
            renewed: false,
            log: Region {
                offset: 0,
                length: 0,
            },
            log_active: true,
            log_guid: head.log_guid,
            log_pos: 0,
            seq,
            end: 0,
        };
        if let Some(r) = &replay {
            w.renew()?;
            renewed = true;
            apply(host.as_ref(), file.as_deref(), r, &what)?;
            seq = r.seq;
        }
        let fw = random_guid();
        w.update_headers(|h| {
            h.log_guid = [0; 16];
            if !renewed {
                h.file_write = fw;
            }
        })?;
        head = w.head.clone();
        cur = w.cur;
    }
    let mut hs = headers;
    hs[cur] = Some(head.clone());
    let p = Vhdx::parse_rest(host.as_ref(), hs, cur, &what)?;
    if p.meta.has_parent {
        return Err(Error::Unsupported(format!(
            "{what}: writing a differencing VHDX is not supported"
        )));
    }
    let log = Region {
        offset: head.log_offset,
        length: u64::from(head.log_length),
    };
    let flen = host.len();
    if log.length < MIB
        || !log.length.is_multiple_of(MIB)
        || log.offset < MIB
        || !log.offset.is_multiple_of(MIB)
        || log.offset.checked_add(log.length).is_none_or(|e| e > flen)
    {
        return Err(Error::Unsupported(format!(
            "{what}: the VHDX log ({} bytes at byte {:#x}) is not a whole-MiB region inside the file, so it cannot be written",
            log.length, log.offset
        )));
    }
    let mut v = Vhdx::build(path, host.clone(), &p, None)?;
    v.writer = Some(Mutex::new(Writer {
        host,
        file,
        head,
        cur,
        fresh: false,
        renewed,
        log,
        log_active: false,
        log_guid: [0; 16],
        log_pos: 0,
        seq,
        end: flen.div_ceil(MIB) * MIB,
    }));
    Ok(v)
}

/// Writes the log's replay onto the file and flushes it.
fn apply(host: &dyn Device, file: Option<&HostFile>, r: &log::Replay, what: &str) -> Result<()> {
    let flen = host.len();
    // A log that would grow the file without bound is damage.
    if r.last > flen.saturating_add(1 << 40) {
        return Err(crate::disk::corrupt(
            "VHDX log",
            what.to_string(),
            format!(
                "the last file offset {} is far past the {flen}-byte file",
                r.last
            ),
        ));
    }
    let mut want = r.last.max(flen);
    let zeros = vec![0u8; MIB as usize];
    for op in &r.ops {
        match op {
            Op::Data(o, d) => {
                host.write_at(d, *o)?;
                want = want.max(o + SECTOR);
            }
            Op::Zero(o, n) => {
                let end = o.saturating_add(*n);
                if end > flen.saturating_add(1 << 40) {
                    return Err(crate::disk::corrupt(
                        "VHDX log",
                        what.to_string(),
                        format!("a zero descriptor of {n} bytes at byte {o:#x} is far past the end of the file"),
                    ));
                }
                // Past the end the file reads as zeros once it is grown.
                let mut p = *o;
                while p < end.min(flen) {
                    let k = (end.min(flen) - p).min(MIB);
                    host.write_at(&zeros[..k as usize], p)?;
                    p += k;
                }
                want = want.max(end);
            }
        }
    }
    if want > host.len() {
        match file {
            Some(f) => f.grow(want.div_ceil(MIB) * MIB)?,
            None => host.write_at(&[0u8; 512], want.div_ceil(MIB) * MIB - 512)?,
        }
    }
    host.flush()?;
    Ok(())
}

/// How a new VHDX is laid out.
#[derive(Clone, Debug, Default)]
pub(super) struct CreateOptions {
    /// Payload block size (QEMU's choice by disk size when None).
    pub block: Option<u64>,
    /// Logical sector size (512 when 0).
    pub sector: u32,
    /// Log size (1 MiB when 0).
    pub log: u64,
    /// Every block allocated, in order, after the metadata.
    pub fixed: bool,
    /// A differencing disk: its parent locator's key/value pairs.
    pub parent: Option<Vec<(String, String)>>,
}

/// Makes a new VHDX file at `path` of `bytes` virtual bytes; the disk
/// written into without the log until it is flushed.
pub(super) fn create(path: &Path, bytes: u64, o: CreateOptions) -> Result<Vhdx> {
    let sector = if o.sector == 0 {
        512
    } else {
        u64::from(o.sector)
    };
    let size = bytes.div_ceil(sector) * sector;
    if size == 0 || size > 64 << 40 {
        return Err(Error::Unsupported(format!(
            "a VHDX of {bytes} bytes (from one sector to 64 TiB)"
        )));
    }
    let block = o.block.unwrap_or(if size > 32 << 40 {
        64 * MIB
    } else if size > 100 << 30 {
        32 * MIB
    } else if size > 1 << 30 {
        16 * MIB
    } else {
        8 * MIB
    });
    let log_len = if o.log == 0 {
        MIB
    } else {
        o.log.div_ceil(MIB) * MIB
    };
    let chunk_ratio = (1u64 << 23) * sector / block;
    let blocks = size.div_ceil(block);
    let entries = if o.parent.is_some() {
        blocks.div_ceil(chunk_ratio) * (chunk_ratio + 1)
    } else {
        blocks + (blocks - 1) / chunk_ratio
    };
    let bat_len = (entries * 8).div_ceil(MIB) * MIB;
    let log_off = MIB;
    let bat_off = log_off + log_len;
    let meta_off = bat_off + bat_len;
    let meta_len = MIB;
    let data_off = meta_off + meta_len;

    let f = File::create_new(path)
        .map_err(|e| Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display()))))?;
    let mut id = vec![0u8; 8];
    id.copy_from_slice(b"vhdxfile");
    for u in "xfskit".encode_utf16() {
        id.extend_from_slice(&u.to_le_bytes());
    }
    f.write_all_at(&id, 0)?;
    let mut h = Header {
        raw: vec![0u8; header::HEADER_BYTES],
        seq: 1,
        file_write: random_guid(),
        data_write: random_guid(),
        log_guid: [0; 16],
        log_version: 0,
        log_length: log_len as u32,
        log_offset: log_off,
    };
    f.write_all_at(&h.encode(), HEADER_OFFSETS[0])?;
    h.seq = 2;
    f.write_all_at(&h.encode(), HEADER_OFFSETS[1])?;
    let mut rt = vec![0u8; TABLE_BYTES];
    rt[..4].copy_from_slice(b"regi");
    rt[8..12].copy_from_slice(&2u32.to_le_bytes());
    for (i, (g, off, len)) in [
        (header::BAT_GUID, bat_off, bat_len),
        (header::METADATA_GUID, meta_off, meta_len),
    ]
    .iter()
    .enumerate()
    {
        let e = &mut rt[16 + 32 * i..48 + 32 * i];
        e[..16].copy_from_slice(g);
        e[16..24].copy_from_slice(&off.to_le_bytes());
        e[24..28].copy_from_slice(&(*len as u32).to_le_bytes());
        e[28..32].copy_from_slice(&1u32.to_le_bytes());
    }
    header::set_crc(&mut rt, 4);
    for off in header::REGION_OFFSETS {
        f.write_all_at(&rt, off)?;
    }
    // The metadata table and its items.
    let mut bits = 0u32;
    if o.fixed {
        bits |= 1;
    }
    if o.parent.is_some() {
        bits |= 2;
    }
    let mut fp = Vec::new();
    fp.extend_from_slice(&(block as u32).to_le_bytes());
    fp.extend_from_slice(&bits.to_le_bytes());
    let mut items: Vec<([u8; 16], Vec<u8>, u32)> = vec![
        (header::FILE_PARAMS_GUID, fp, 4),
        (header::VIRTUAL_SIZE_GUID, size.to_le_bytes().to_vec(), 6),
        (header::PAGE83_GUID, random_guid().to_vec(), 6),
        (
            header::LOGICAL_SECTOR_GUID,
            (sector as u32).to_le_bytes().to_vec(),
            6,
        ),
        (
            header::PHYSICAL_SECTOR_GUID,
            (sector as u32).to_le_bytes().to_vec(),
            6,
        ),
    ];
    if let Some(kv) = &o.parent {
        let kv: Vec<(&str, &str)> = kv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        items.push((header::PARENT_LOCATOR_GUID, header::encode_locator(&kv), 4));
    }
    let mut mt = vec![0u8; TABLE_BYTES];
    mt[..8].copy_from_slice(b"metadata");
    mt[10..12].copy_from_slice(&(items.len() as u16).to_le_bytes());
    let mut at = TABLE_BYTES as u64;
    let mut payload = Vec::new();
    for (i, (g, data, flags)) in items.iter().enumerate() {
        let e = &mut mt[32 + 32 * i..64 + 32 * i];
        e[..16].copy_from_slice(g);
        e[16..20].copy_from_slice(&(at as u32).to_le_bytes());
        e[20..24].copy_from_slice(&(data.len() as u32).to_le_bytes());
        e[24..28].copy_from_slice(&flags.to_le_bytes());
        payload.extend_from_slice(data);
        at += data.len() as u64;
    }
    f.write_all_at(&mt, meta_off)?;
    f.write_all_at(&payload, meta_off + TABLE_BYTES as u64)?;
    let mut end = data_off;
    if o.fixed {
        let mut bat = vec![0u8; (entries * 8) as usize];
        for b in 0..blocks {
            let idx = b + b / chunk_ratio;
            let e = (data_off + b * block) | FULLY_PRESENT;
            bat[(idx * 8) as usize..(idx * 8 + 8) as usize].copy_from_slice(&e.to_le_bytes());
        }
        f.write_all_at(&bat, bat_off)?;
        end = (data_off + size).div_ceil(MIB) * MIB;
    }
    f.set_len(end)?;
    f.sync_all()?;
    drop(f);
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let host = Arc::new(HostFile::from_file(file)?);
    let what = path.display().to_string();
    let (headers, cur, _) = Vhdx::parse_headers(host.as_ref(), &what)?;
    let p = Vhdx::parse_rest(host.as_ref(), headers, cur, &what)?;
    let mut v = Vhdx::build(path, host.clone(), &p, None)?;
    let head = p.headers[cur]
        .clone()
        .ok_or_else(|| Error::Unsupported("no header".into()))?;
    v.writer = Some(Mutex::new(Writer {
        host: host.clone(),
        file: Some(host),
        head,
        cur,
        fresh: true,
        renewed: true,
        log: Region {
            offset: log_off,
            length: log_len,
        },
        log_active: false,
        log_guid: [0; 16],
        log_pos: 0,
        seq: 0,
        end,
    }));
    Ok(v)
}

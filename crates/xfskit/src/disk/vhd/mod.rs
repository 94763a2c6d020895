//! VHD (Virtual PC, "vpc" in QEMU): fixed, dynamic and differencing disks.
//!
//! Every VHD ends with a 512-byte big-endian footer ("conectix", its
//! checksum the ones' complement of its byte sum); a dynamic or
//! differencing one has a copy of it at offset 0, and at the footer's data
//! offset a dynamic disk header ("cxsparse") giving the block allocation
//! table (BAT: one big-endian sector number per block, 0xFFFFFFFF for a
//! block not allocated) and the block size. Each allocated block is a
//! sector bitmap followed by the block's data. A dynamic disk's
//! unallocated blocks read as zeros, and, as in QEMU, its bitmaps are not
//! consulted; a differencing disk reads an unallocated block, and each
//! sector whose bitmap bit is clear, from its parent, found through the
//! parent locators of its header (W2ru, W2ku: UTF-16LE Windows paths,
//! relative first; MacX: a file:// URL; then the parent's Unicode name)
//! and checked by its UUID.
//!
//! The virtual size is QEMU's: the CHS geometry of the footer for images
//! made by Virtual PC ("vpc ") and older QEMU ("qemu"), the footer's
//! current size for every other creator and for the largest geometry.
//! We write "qem2" images, read by current size, whose size is also exact
//! in CHS (dynamic disks up to the CHS limit), so that every reader agrees.
//!
//! Writing in place (`write`): fixed disks directly; dynamic disks
//! allocate a block where the footer was, at the end of the file: its
//! bitmap and data are written first, then the footer after it, then
//! (after a flush, when editing an existing image) the BAT entry. A crash
//! between leaves at most an unreferenced block before a valid footer, and
//! the copy of the footer at offset 0 keeps the image readable at every
//! step. Differencing disks are read-only.

mod host;
mod write;

pub(crate) use host::{new_uuid, read_padded, stamp_time, HostFile};
pub(crate) use write::zero_fill;

use super::container::{NewDisk, Opener};
use crate::bytes::{be16, be32, be64};
use crate::dev::Device;
use crate::disk::corrupt;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

const COOKIE: &[u8; 8] = b"conectix";
const SPARSE_COOKIE: &[u8; 8] = b"cxsparse";
const FOOTER: usize = 512;
const DYN_HEADER: usize = 1024;
const TYPE_FIXED: u32 = 2;
const TYPE_DYNAMIC: u32 = 3;
const TYPE_DIFF: u32 = 4;
const UNALLOCATED: u32 = 0xFFFF_FFFF;
/// The largest CHS geometry, 65535 x 16 x 255 sectors: images of this
/// geometry are sized by the footer's current size.
const MAX_GEOMETRY: u64 = 65535 * 16 * 255;
/// QEMU's limit on a VHD (2040 GiB), which it refuses to open beyond.
const MAX_SECTORS: u64 = 65535 * 255 * 255;
/// The largest virtual size read (far past any tool's limit: a larger
/// one is damage).
const MAX_VIRTUAL: u64 = 64 << 40;
/// The block size QEMU, Virtual PC and Hyper-V write.
const BLOCK: u64 = 2 << 20;
/// Longest parent chain followed.
const CHAIN_MAX: usize = 16;
/// Bitmaps kept in memory (differencing disks).
const BITMAP_CACHE: usize = 4096;
/// Seconds from the Unix epoch to the VHD epoch, 2000-01-01 00:00 UTC.
const VHD_EPOCH: u64 = 946_684_800;

/// The ones' complement of the byte sum of `b`, the checksum field (at
/// `skip`, 4 bytes) counted as zeros.
fn checksum(b: &[u8], skip: usize) -> u32 {
    let mut s: u32 = 0;
    for (i, &x) in b.iter().enumerate() {
        if i < skip || i >= skip + 4 {
            s = s.wrapping_add(u32::from(x));
        }
    }
    !s
}

/// The fields of a footer we use.
#[derive(Debug, Clone)]
pub struct Footer {
    /// The footer's bytes, as written back when the file grows.
    pub raw: [u8; FOOTER],
    /// 2 fixed, 3 dynamic, 4 differencing.
    pub disk_type: u32,
    /// Where the dynamic disk header is.
    pub data_offset: u64,
    /// The footer's current size field.
    pub current_size: u64,
    /// Cylinders, heads, sectors per track.
    pub chs: (u16, u8, u8),
    /// The creator application (four bytes).
    pub creator: [u8; 4],
    /// The disk's UUID.
    pub uuid: [u8; 16],
}

impl Footer {
    /// The virtual size as QEMU computes it.
    pub fn virtual_size(&self) -> u64 {
        let chs = u64::from(self.chs.0) * u64::from(self.chs.1) * u64::from(self.chs.2);
        let use_chs = &self.creator == b"vpc " || &self.creator == b"qemu";
        if use_chs && chs != MAX_GEOMETRY {
            chs * 512
        } else {
            self.current_size / 512 * 512
        }
    }
}

/// Parses the footer in `b`, read at byte `at` of `path`.
fn parse_footer(b: &[u8], at: u64, path: &Path) -> Result<Footer> {
    let whr = || format!("{}, byte {at:#x}", path.display());
    if b.len() < FOOTER - 1 || &b[..8] != COOKIE {
        return Err(corrupt("VHD footer", whr(), "no \"conectix\" cookie"));
    }
    let mut raw = [0u8; FOOTER];
    raw[..b.len().min(FOOTER)].copy_from_slice(&b[..b.len().min(FOOTER)]);
    let want = be32(&raw, 64);
    let got = checksum(&raw, 64);
    if want != got {
        return Err(corrupt(
            "VHD footer",
            whr(),
            format!("checksum {want:#010x}, the bytes sum to {got:#010x}"),
        ));
    }
    let disk_type = be32(&raw, 60);
    if !matches!(disk_type, TYPE_FIXED | TYPE_DYNAMIC | TYPE_DIFF) {
        return Err(corrupt(
            "VHD footer",
            whr(),
            format!("disk type {disk_type} (2 fixed, 3 dynamic or 4 differencing expected)"),
        ));
    }
    let mut creator = [0u8; 4];
    creator.copy_from_slice(&raw[28..32]);
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&raw[68..84]);
    Ok(Footer {
        raw,
        disk_type,
        data_offset: be64(&raw, 16),
        current_size: be64(&raw, 48),
        chs: (be16(&raw, 56), raw[58], raw[59]),
        creator,
        uuid,
    })
}

/// The footer of `file`: the copy at offset 0 (dynamic and differencing
/// disks), else the one in the last 512 bytes (or the last 511: some old
/// tools wrote the footer one byte short). Also returns how many bytes the
/// trailing footer takes (0 when the copy at the start was used).
fn read_footer(file: &dyn Device, path: &Path) -> Result<(Footer, u64)> {
    let len = file.len();
    let mut first = None;
    if len >= FOOTER as u64 {
        let mut b = [0u8; FOOTER];
        file.read_at(&mut b, 0)?;
        if &b[..8] == COOKIE {
            match parse_footer(&b, 0, path) {
                Ok(f) if f.disk_type != TYPE_FIXED => return Ok((f, 0)),
                Ok(_) => {}
                Err(e) => first = Some(e),
            }
        }
    }
    for n in [FOOTER as u64, FOOTER as u64 - 1] {
        if len < n {
            continue;
        }
        let mut b = vec![0u8; n as usize];
        file.read_at(&mut b, len - n)?;
        if &b[..8] != COOKIE {
            continue;
        }
        let f = parse_footer(&b, len - n, path)?;
        return Ok((f, n));
    }
    Err(first.unwrap_or_else(|| {
        corrupt(
            "VHD footer",
            path.display().to_string(),
            format!("neither the first nor the last sector of the {len}-byte file is a footer"),
        )
    }))
}

/// True when `file` (whose first bytes are `head`) is a VHD: a footer
/// ("conectix") at its start (dynamic) or in its last sector (any).
pub fn probe(file: &dyn Device, head: &[u8]) -> Result<bool> {
    if head.len() >= 8 && &head[..8] == COOKIE {
        return Ok(true);
    }
    let len = file.len();
    for n in [FOOTER as u64, FOOTER as u64 - 1] {
        if len < n {
            continue;
        }
        let mut b = [0u8; 12];
        file.read_at(&mut b, len - n)?;
        if &b[..8] == COOKIE {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How the disk's bytes are laid out in the file.
enum Layout {
    /// The disk is the first `data_len` bytes of the file (zeros past).
    Fixed { data_len: u64 },
    /// Blocks through the BAT.
    Sparse {
        block: u64,
        bitmap: u64,
        bat_offset: u64,
        bat: RwLock<Vec<u32>>,
        /// Differencing: the parent, read where this file holds nothing.
        parent: Option<Arc<dyn Device>>,
    },
}

/// A VHD file seen as the disk it holds.
pub struct Vhd {
    file: Arc<dyn Device>,
    path: PathBuf,
    footer: Footer,
    size: u64,
    layout: Layout,
    bitmaps: Mutex<HashMap<u32, Arc<[u8]>>>,
    writer: Option<Mutex<write::Writer>>,
}

impl Vhd {
    /// Opens the VHD `file` at `path` (its parent, for a differencing
    /// disk, through `opener`).
    pub fn open_with(path: &Path, file: Arc<dyn Device>, opener: &Opener) -> Result<Vhd> {
        let mut seen = Vec::new();
        Vhd::open_chain(path, file, opener, &mut seen)
    }

    /// The footer as read.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    fn open_chain(
        path: &Path,
        file: Arc<dyn Device>,
        opener: &Opener,
        seen: &mut Vec<PathBuf>,
    ) -> Result<Vhd> {
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if seen.contains(&canon) {
            return Err(corrupt(
                "VHD parent chain",
                path.display().to_string(),
                "loops: the disk is its own ancestor",
            ));
        }
        if seen.len() >= CHAIN_MAX {
            return Err(Error::Unsupported(format!(
                "a VHD parent chain longer than {CHAIN_MAX} disks"
            )));
        }
        seen.push(canon);
        let (footer, trailer) = read_footer(&*file, path)?;
        let size = footer.virtual_size();
        let flen = file.len();
        if size > MAX_VIRTUAL {
            return Err(corrupt(
                "VHD footer",
                path.display().to_string(),
                format!("a virtual size of {size} bytes (more than 64 TiB)"),
            ));
        }
        let layout = if footer.disk_type == TYPE_FIXED {
            Layout::Fixed {
                data_len: flen - trailer,
            }
        } else {
            Vhd::sparse_layout(path, &*file, &footer, size, opener, seen)?
        };
        Ok(Vhd {
            file,
            path: path.to_path_buf(),
            footer,
            size,
            layout,
            bitmaps: Mutex::new(HashMap::new()),
            writer: None,
        })
    }

    fn sparse_layout(
        path: &Path,
        file: &dyn Device,
        footer: &Footer,
        size: u64,
        opener: &Opener,
        seen: &mut Vec<PathBuf>,
    ) -> Result<Layout> {
        let flen = file.len();
        let at = footer.data_offset;
        let whr = |what: &str| format!("{}, {what}", path.display());
        if at.checked_add(DYN_HEADER as u64).is_none_or(|e| e > flen) {
            return Err(corrupt(
                "VHD dynamic disk header",
                whr(&format!("byte {at:#x}")),
                format!("does not lie inside the {flen}-byte file"),
            ));
        }
        let mut h = vec![0u8; DYN_HEADER];
        file.read_at(&mut h, at)?;
        if &h[..8] != SPARSE_COOKIE {
            return Err(corrupt(
                "VHD dynamic disk header",
                whr(&format!("byte {at:#x}")),
                "no \"cxsparse\" cookie",
            ));
        }
        let bat_offset = be64(&h, 16);
        let entries = u64::from(be32(&h, 28));
        let block = u64::from(be32(&h, 32));
        if !block.is_power_of_two() || block < 512 {
            return Err(corrupt(
                "VHD dynamic disk header",
                whr(&format!("byte {at:#x}")),
                format!("block size {block} is not a power of two of at least 512"),
            ));
        }
        let bitmap = (block / (8 * 512)).div_ceil(512) * 512;
        if entries * block < size {
            return Err(corrupt(
                "VHD dynamic disk header",
                whr(&format!("byte {at:#x}")),
                format!(
                    "{entries} BAT entries of {block}-byte blocks cannot hold the {size}-byte disk"
                ),
            ));
        }
        if bat_offset.checked_add(entries * 4).is_none_or(|e| e > flen) {
            return Err(corrupt(
                "VHD BAT",
                whr(&format!("byte {bat_offset:#x}")),
                format!("{entries} entries do not lie inside the {flen}-byte file"),
            ));
        }
        let mut raw = vec![0u8; (entries * 4) as usize];
        file.read_at(&mut raw, bat_offset)?;
        let bat: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // The structures a block must not overlap (it is written in place).
        let fixed_parts = [
            (0, FOOTER as u64),
            (at, at + DYN_HEADER as u64),
            (bat_offset, bat_offset + entries * 4),
        ];
        for (i, &e) in bat.iter().enumerate() {
            if e == UNALLOCATED {
                continue;
            }
            let start = u64::from(e) * 512;
            let end = start + bitmap + block;
            if let Some((lo, hi)) = fixed_parts.iter().find(|(lo, hi)| start < *hi && *lo < end) {
                return Err(corrupt(
                    "VHD",
                    format!(
                        "BAT entry {i} at byte {:#x} of {}",
                        bat_offset + 4 * i as u64,
                        path.display()
                    ),
                    format!(
                        "the block at byte {start:#x} overlaps the footer copy, dynamic header or BAT (bytes {lo:#x}..{hi:#x})"
                    ),
                ));
            }
            if end > flen {
                return Err(corrupt(
                    "VHD",
                    format!(
                        "BAT entry {i} at byte {:#x} of {}",
                        bat_offset + 4 * i as u64,
                        path.display()
                    ),
                    format!(
                        "the block at byte {:#x} runs past the end of the {flen}-byte file",
                        u64::from(e) * 512
                    ),
                ));
            }
        }
        let parent = if footer.disk_type == TYPE_DIFF {
            Some(Vhd::open_parent(path, file, &h, at, opener, seen)?)
        } else {
            None
        };
        Ok(Layout::Sparse {
            block,
            bitmap,
            bat_offset,
            bat: RwLock::new(bat),
            parent,
        })
    }

    /// The parent of a differencing disk whose dynamic header is `h` (at
    /// byte `at`): the first of its locators (then its Unicode name) the
    /// opener finds, which must carry the UUID the header names.
    fn open_parent(
        path: &Path,
        file: &dyn Device,
        h: &[u8],
        at: u64,
        opener: &Opener,
        seen: &mut Vec<PathBuf>,
    ) -> Result<Arc<dyn Device>> {
        let flen = file.len();
        let mut want_uuid = [0u8; 16];
        want_uuid.copy_from_slice(&h[40..56]);
        let mut names: Vec<String> = Vec::new();
        // Relative Windows paths first, then absolute ones, then URLs.
        for code in [b"W2ru", b"W2ku", b"MacX"] {
            for i in 0..8 {
                let l = 576 + 24 * i;
                if &h[l..l + 4] != code {
                    continue;
                }
                let len = u64::from(be32(h, l + 8));
                let off = be64(h, l + 16);
                if len == 0 || len > 64 * 1024 || off.checked_add(len).is_none_or(|e| e > flen) {
                    return Err(corrupt(
                        "VHD parent locator",
                        format!(
                            "{}, locator {i} of the header at byte {at:#x}",
                            path.display()
                        ),
                        format!(
                            "{len} bytes at byte {off:#x} do not lie inside the {flen}-byte file"
                        ),
                    ));
                }
                let mut d = vec![0u8; len as usize];
                file.read_at(&mut d, off)?;
                let name = if code == b"MacX" {
                    let s = String::from_utf8_lossy(&d);
                    let s = s.trim_end_matches('\0');
                    let s = s.strip_prefix("file://").unwrap_or(s);
                    let s = s.strip_prefix("localhost").unwrap_or(s);
                    percent_decode(s)
                } else {
                    windows_path(&utf16(&d, false))
                };
                if !name.is_empty() {
                    names.push(name);
                }
            }
        }
        let uname = utf16(&h[64..576], true);
        if !uname.is_empty() {
            names.push(windows_path(&uname));
        }
        if names.is_empty() {
            return Err(corrupt(
                "VHD dynamic disk header",
                format!("{}, byte {at:#x}", path.display()),
                "a differencing disk that names no parent",
            ));
        }
        let mut tried = Vec::new();
        for name in &names {
            let (ppath, pfile) = match opener(path, name) {
                Ok(x) => x,
                Err(e) => {
                    tried.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let parent = Vhd::open_chain(&ppath, Arc::from(pfile), opener, seen)?;
            if want_uuid != [0u8; 16] && parent.footer.uuid != want_uuid {
                return Err(corrupt(
                    "VHD parent",
                    format!("{}, parent {}", path.display(), ppath.display()),
                    format!(
                        "its UUID {} is not the {} the differencing disk names",
                        hex(&parent.footer.uuid),
                        hex(&want_uuid)
                    ),
                ));
            }
            return Ok(Arc::new(parent));
        }
        Err(Error::Io(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the parent of the differencing VHD {} cannot be opened: {}",
                path.display(),
                tried.join("; ")
            ),
        )))
    }

    /// The bitmap of the block whose BAT entry is `e`.
    fn bitmap_of(&self, e: u32, bitmap: u64) -> io::Result<Arc<[u8]>> {
        {
            let c = self.bitmaps.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = c.get(&e) {
                return Ok(b.clone());
            }
        }
        let mut b = vec![0u8; bitmap as usize];
        self.file.read_at(&mut b, u64::from(e) * 512)?;
        let b: Arc<[u8]> = b.into();
        let mut c = self.bitmaps.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= BITMAP_CACHE {
            c.clear();
        }
        c.insert(e, b.clone());
        Ok(b)
    }

    /// Fills `buf` from the parent (zeros without one, or past its end).
    fn read_parent(parent: Option<&Arc<dyn Device>>, buf: &mut [u8], off: u64) -> io::Result<()> {
        buf.fill(0);
        let Some(p) = parent else {
            return Ok(());
        };
        if off >= p.len() {
            return Ok(());
        }
        let n = (p.len() - off).min(buf.len() as u64) as usize;
        p.read_at(&mut buf[..n], off)
    }

    fn bat_entry(&self, idx: u64) -> u32 {
        match &self.layout {
            Layout::Sparse { bat, .. } => bat
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(idx as usize)
                .copied()
                .unwrap_or(UNALLOCATED),
            Layout::Fixed { .. } => UNALLOCATED,
        }
    }
}

/// `d` as UTF-16 (big- or little-endian), up to its first NUL.
fn utf16(d: &[u8], big: bool) -> String {
    let units: Vec<u16> = d
        .chunks_exact(2)
        .map(|c| {
            if big {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        })
        .take_while(|&u| u != 0)
        .collect();
    String::from_utf16_lossy(&units)
}

/// A Windows path as a name the opener takes: `.\x.vhd` is `x.vhd`,
/// backslashes are slashes.
fn windows_path(s: &str) -> String {
    let s = s.replace('\\', "/");
    let s = s.strip_prefix("./").unwrap_or(&s);
    s.to_string()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (digit(b[i + 1]), digit(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(u: &[u8]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

impl Device for Vhd {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        crate::disk::inside("read", "VHD", self.size, off, buf.len())?;
        let (block, bitmap, parent) = match &self.layout {
            Layout::Fixed { data_len } => {
                let n = data_len.saturating_sub(off).min(buf.len() as u64) as usize;
                buf[n..].fill(0);
                if n > 0 {
                    self.file.read_at(&mut buf[..n], off)?;
                }
                return Ok(());
            }
            Layout::Sparse {
                block,
                bitmap,
                parent,
                ..
            } => (*block, *bitmap, parent.as_ref()),
        };
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let idx = pos / block;
            let within = pos % block;
            let n = ((block - within) as usize).min(buf.len() - done);
            let piece = &mut buf[done..done + n];
            let e = self.bat_entry(idx);
            if e == UNALLOCATED {
                Vhd::read_parent(parent, piece, pos)?;
            } else {
                let data = u64::from(e) * 512 + bitmap;
                if parent.is_none() {
                    read_padded(&*self.file, piece, data + within)?;
                } else {
                    // Per sector: this file when its bit is set, else the
                    // parent; runs of equal bits in one read each.
                    let bm = self.bitmap_of(e, bitmap)?;
                    let bit = |s: u64| bm[(s / 8) as usize] & (0x80 >> (s % 8)) != 0;
                    let mut k = 0usize;
                    while k < n {
                        let s = (within + k as u64) / 512;
                        let mine = bit(s);
                        let mut m = k;
                        while m < n && bit((within + m as u64) / 512) == mine {
                            m = (((within + m as u64) / 512 + 1) * 512 - within) as usize;
                        }
                        let m = m.min(n);
                        let sub = &mut piece[k..m];
                        if mine {
                            read_padded(&*self.file, sub, data + within + k as u64)?;
                        } else {
                            Vhd::read_parent(parent, sub, pos + k as u64)?;
                        }
                        k = m;
                    }
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
        self.size
    }
}

/// The disk inside the VHD `file`, read-only.
pub fn open(path: &Path, file: Box<dyn Device>, opener: &Opener) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(Vhd::open_with(path, Arc::from(file), opener)?))
}

/// The disk inside the VHD at `path`, written in place.
pub fn open_rw(path: &Path) -> Result<Arc<dyn Device>> {
    let host = HostFile::open(path)?;
    open_rw_on(path, Arc::new(host))
}

/// The disk inside the VHD held by `host` (the file at `path`, for names
/// in messages), written in place: every write the host gets is ordered
/// so that a crash between any two leaves a readable image holding the
/// old or the new data (the crash tests give a host that fails).
pub fn open_rw_on(path: &Path, host: Arc<dyn Device>) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(Vhd::open_rw_on(path, host, true)?))
}

/// The CHS geometry of a disk of `sectors` (the VHD specification's, as
/// QEMU computes it): cylinders, heads, sectors per track.
pub fn geometry(sectors: u64) -> (u16, u8, u8) {
    let total = sectors.min(MAX_GEOMETRY);
    let (spt, heads, cth) = if total >= 65535 * 16 * 63 {
        (255u64, 16u64, total / 255)
    } else {
        let mut spt = 17u64;
        let mut cth = total / spt;
        let mut heads = cth.div_ceil(1024).max(4);
        if cth >= heads * 1024 || heads > 16 {
            spt = 31;
            heads = 16;
            cth = total / spt;
        }
        if cth >= heads * 1024 {
            spt = 63;
            heads = 16;
            cth = total / spt;
        }
        (spt, heads, cth)
    };
    ((cth / heads) as u16, heads as u8, spt as u8)
}

fn chs_sectors(g: (u16, u8, u8)) -> u64 {
    u64::from(g.0) * u64::from(g.1) * u64::from(g.2)
}

/// The virtual size of a new VHD of at least `bytes` (whole sectors).
/// Fixed (Azure): whole MiB. Dynamic: the next size CHS geometry gives
/// exactly (as QEMU rounds), so that readers sizing by geometry and by
/// the footer agree; past the CHS limit (127 GiB), whole sectors.
pub fn disk_size(bytes: u64, fixed: bool) -> u64 {
    let bytes = bytes.max(512);
    if fixed {
        return bytes.div_ceil(1 << 20) * (1 << 20);
    }
    let sectors = bytes.div_ceil(512);
    if sectors > MAX_GEOMETRY {
        return sectors * 512;
    }
    // QEMU's rounding: the geometry of ever more sectors until it holds
    // them all (each step gains at most heads x sectors per track).
    for i in 0..100_000 {
        let g = geometry(sectors + i);
        if chs_sectors(g) >= sectors {
            return chs_sectors(g) * 512;
        }
    }
    sectors * 512
}

/// A new VHD footer: `size` bytes, of `disk_type`.
fn new_footer(size: u64, disk_type: u32) -> [u8; FOOTER] {
    let mut f = [0u8; FOOTER];
    f[..8].copy_from_slice(COOKIE);
    f[8..12].copy_from_slice(&2u32.to_be_bytes()); // features: reserved bit
    f[12..16].copy_from_slice(&0x0001_0000u32.to_be_bytes());
    let data_offset = if disk_type == TYPE_FIXED {
        u64::MAX
    } else {
        FOOTER as u64
    };
    f[16..24].copy_from_slice(&data_offset.to_be_bytes());
    let t = stamp_time()
        .saturating_sub(VHD_EPOCH)
        .min(u64::from(u32::MAX)) as u32;
    f[24..28].copy_from_slice(&t.to_be_bytes());
    // "qem2": QEMU (and every reader but Virtual PC) sizes it by the
    // current size field.
    f[28..32].copy_from_slice(b"qem2");
    f[32..34].copy_from_slice(&5u16.to_be_bytes());
    f[34..36].copy_from_slice(&3u16.to_be_bytes());
    f[36..40].copy_from_slice(b"Wi2k");
    f[40..48].copy_from_slice(&size.to_be_bytes());
    f[48..56].copy_from_slice(&size.to_be_bytes());
    let g = if size / 512 > MAX_GEOMETRY {
        (65535, 16, 255)
    } else {
        geometry(size / 512)
    };
    f[56..58].copy_from_slice(&g.0.to_be_bytes());
    f[58] = g.1;
    f[59] = g.2;
    f[60..64].copy_from_slice(&disk_type.to_be_bytes());
    f[68..84].copy_from_slice(&new_uuid(size, b"vhd"));
    let c = checksum(&f, 64);
    f[64..68].copy_from_slice(&c.to_be_bytes());
    f
}

/// A new VHD at `path` of `bytes` virtual bytes, dynamic or fixed.
pub fn create(path: &Path, bytes: u64, fixed: bool) -> Result<NewDisk> {
    if bytes == 0 || !bytes.is_multiple_of(512) || bytes / 512 > MAX_SECTORS {
        return Err(Error::Invalid(format!(
            "a VHD disk of {bytes} bytes (a positive multiple of 512 up to 2040 GiB is needed)"
        )));
    }
    let host = Arc::new(HostFile::create_new(path)?);
    let made = (|| -> Result<()> {
        if fixed {
            host.set_len(bytes)?;
            host.write_at(&new_footer(bytes, TYPE_FIXED), bytes)?;
        } else {
            let footer = new_footer(bytes, TYPE_DYNAMIC);
            let entries = bytes.div_ceil(BLOCK);
            let bat_bytes = (entries * 4).div_ceil(512) * 512;
            let bat_offset = (FOOTER + DYN_HEADER) as u64;
            let mut img = vec![0u8; (bat_offset + bat_bytes) as usize + FOOTER];
            img[..FOOTER].copy_from_slice(&footer);
            let h = &mut img[FOOTER..FOOTER + DYN_HEADER];
            h[..8].copy_from_slice(SPARSE_COOKIE);
            h[8..16].copy_from_slice(&u64::MAX.to_be_bytes());
            h[16..24].copy_from_slice(&bat_offset.to_be_bytes());
            h[24..28].copy_from_slice(&0x0001_0000u32.to_be_bytes());
            h[28..32].copy_from_slice(&(entries as u32).to_be_bytes());
            h[32..36].copy_from_slice(&(BLOCK as u32).to_be_bytes());
            let c = checksum(h, 36);
            h[36..40].copy_from_slice(&c.to_be_bytes());
            let bat = bat_offset as usize..(bat_offset + bat_bytes) as usize;
            img[bat].fill(0xFF);
            let end = img.len() - FOOTER;
            img[end..].copy_from_slice(&footer);
            host.write_at(&img, 0)?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    let dev = Vhd::open_rw_on(path, host, false)?;
    Ok(NewDisk::new(Arc::new(dev)))
}

#[cfg(test)]
mod tests;

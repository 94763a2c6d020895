//! VDI (VirtualBox): dynamic and fixed disks.
//!
//! A 512-byte little-endian header (a line of text, the signature
//! 0xbeda107f at 0x40, version 1.1) gives the disk size, the block size
//! (1 MiB), where the block map is (one u32 per block: the index of the
//! block in the data area, 0xFFFFFFFF never allocated, 0xFFFFFFFE
//! discarded, both reading as zeros) and where the data area starts.
//! Fixed ("static") images have every block allocated, in order.
//! Differencing images (snapshots, with a parent UUID) are refused, as
//! QEMU refuses them.
//!
//! Writing in place: a write into an allocated block goes where it is; a
//! write into an unallocated one takes the next block index (the header's
//! allocated count), its data written first (zeros around the new bytes),
//! then, after a flush when editing an existing image, the header's count,
//! then the block map entry. A crash between leaves an unreferenced block
//! the next open reuses (the count is set back to the blocks the map
//! references when they are dense); the map never points at unwritten
//! data, and no index is ever handed out twice.

use super::container::{NewDisk, Opener};
use super::vhd::{new_uuid, read_padded, zero_fill, HostFile};
use crate::bytes::{le32, le64};
use crate::dev::Device;
use crate::disk::{corrupt, corrupt_io};
use crate::error::{Error, Result};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

const SIGNATURE: u32 = 0xbeda_107f;
const VERSION_1_1: u32 = 0x0001_0001;
const TYPE_DYNAMIC: u32 = 1;
const TYPE_STATIC: u32 = 2;
const HEADER: usize = 512;
const UNALLOCATED: u32 = 0xFFFF_FFFF;
const DISCARDED: u32 = 0xFFFF_FFFE;
/// The block size VirtualBox and QEMU write.
const BLOCK: u64 = 1 << 20;
/// The header's allocated block count.
const AT_ALLOCATED: u64 = 0x184;
const TEXT: &[u8] = b"<<< Oracle VM VirtualBox Disk Image >>>\n";

/// True when a file whose first bytes are `head` is a VDI image.
pub fn probe(head: &[u8]) -> bool {
    head.len() >= 0x44 && le32(head, 0x40) == SIGNATURE
}

/// A VDI file seen as the disk it holds.
pub struct Vdi {
    file: Arc<dyn Device>,
    path: PathBuf,
    size: u64,
    block: u64,
    /// Bytes before each block's data (VirtualBox's block extra data).
    extra: u64,
    offset_bmap: u64,
    offset_data: u64,
    image_type: u32,
    bmap: RwLock<Vec<u32>>,
    writer: Option<Mutex<Writer>>,
}

struct Writer {
    /// The next block index to hand out.
    next: u32,
    /// The header's allocated count as on disk.
    allocated: u32,
    sync: bool,
}

impl Vdi {
    /// Opens the VDI `file` at `path`.
    pub fn open(path: &Path, file: Arc<dyn Device>) -> Result<Vdi> {
        let flen = file.len();
        let whr = |what: &str| format!("{}, {what}", path.display());
        if flen < HEADER as u64 {
            return Err(corrupt(
                "VDI header",
                whr("byte 0"),
                format!("the file is {flen} bytes, shorter than a header"),
            ));
        }
        let mut h = [0u8; HEADER];
        file.read_at(&mut h, 0)?;
        let bad = |detail: String| Err(corrupt("VDI header", whr("byte 0"), detail));
        if le32(&h, 0x40) != SIGNATURE {
            return bad(format!(
                "signature {:#010x}, not 0xbeda107f",
                le32(&h, 0x40)
            ));
        }
        let version = le32(&h, 0x44);
        if version != VERSION_1_1 {
            return Err(Error::Unsupported(format!(
                "VDI version {}.{} in {} (1.1 is read)",
                version >> 16,
                version & 0xffff,
                path.display()
            )));
        }
        let image_type = le32(&h, 0x4c);
        if image_type != TYPE_DYNAMIC && image_type != TYPE_STATIC {
            return Err(Error::Unsupported(format!(
                "VDI image type {image_type} in {} (1 dynamic and 2 fixed are read; 3 undo and 4 differencing are not)",
                path.display()
            )));
        }
        let offset_bmap = u64::from(le32(&h, 0x154));
        let offset_data = u64::from(le32(&h, 0x158));
        let sector_size = le32(&h, 0x168);
        // Odd sizes (VBoxManage convertfromraw) round up to a sector.
        let size = le64(&h, 0x170).min(u64::MAX - 511).div_ceil(512) * 512;
        let block = u64::from(le32(&h, 0x178));
        let extra = u64::from(le32(&h, 0x17c));
        let blocks = u64::from(le32(&h, 0x180));
        if !offset_bmap.is_multiple_of(512) || !offset_data.is_multiple_of(512) {
            return bad(format!(
                "the block map ({offset_bmap:#x}) or the data ({offset_data:#x}) does not start on a sector"
            ));
        }
        if sector_size != 512 {
            return Err(Error::Unsupported(format!(
                "VDI sectors of {sector_size} bytes in {}",
                path.display()
            )));
        }
        if !block.is_power_of_two() || !(512..=1 << 28).contains(&block) {
            return bad(format!("block size {block}"));
        }
        if extra > block || !extra.is_multiple_of(512) {
            return bad(format!("{extra} bytes of extra data per block"));
        }
        if size > blocks * block {
            return bad(format!(
                "a {size}-byte disk in {blocks} blocks of {block} bytes"
            ));
        }
        if h[0x1a8..0x1c8].iter().any(|&b| b != 0) {
            return Err(Error::Unsupported(format!(
                "{} is a differencing VDI (a snapshot; its parent is not read)",
                path.display()
            )));
        }
        let data_end = offset_data.saturating_add(blocks * (block + extra));
        if offset_bmap < HEADER as u64
            || (offset_data < offset_bmap + blocks * 4 && data_end > offset_bmap)
        {
            return bad(format!(
                "the block map ({offset_bmap:#x}, {blocks} entries) overlaps the header or the data ({offset_data:#x})"
            ));
        }
        if offset_bmap.checked_add(blocks * 4).is_none_or(|e| e > flen) {
            return Err(corrupt(
                "VDI block map",
                whr(&format!("byte {offset_bmap:#x}")),
                format!("{blocks} entries do not lie inside the {flen}-byte file"),
            ));
        }
        let mut raw = vec![0u8; (blocks * 4) as usize];
        file.read_at(&mut raw, offset_bmap)?;
        let bmap: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let stride = block + extra;
        for (i, &e) in bmap.iter().enumerate() {
            if e >= DISCARDED {
                continue;
            }
            let start = u64::from(e) * stride + offset_data;
            if u64::from(e) >= blocks || start >= flen {
                return Err(corrupt(
                    "VDI",
                    format!(
                        "block map entry {i} at byte {:#x} of {}",
                        offset_bmap + 4 * i as u64,
                        path.display()
                    ),
                    format!(
                        "block {e} (at byte {start:#x}) is past the {blocks} blocks of the image or the end of the {flen}-byte file"
                    ),
                ));
            }
        }
        Ok(Vdi {
            file,
            path: path.to_path_buf(),
            size,
            block,
            extra,
            offset_bmap,
            offset_data,
            image_type,
            bmap: RwLock::new(bmap),
            writer: None,
        })
    }

    /// True for a fixed (static) image.
    pub fn is_fixed(&self) -> bool {
        self.image_type == TYPE_STATIC
    }

    fn entry(&self, idx: u64) -> u32 {
        self.bmap
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(idx as usize)
            .copied()
            .unwrap_or(UNALLOCATED)
    }

    fn data_at(&self, e: u32) -> u64 {
        self.offset_data + u64::from(e) * (self.block + self.extra) + self.extra
    }

    fn open_rw_on(path: &Path, host: Arc<dyn Device>, sync: bool) -> Result<Vdi> {
        let mut v = Vdi::open(path, host)?;
        let mut h = [0u8; HEADER];
        v.file.read_at(&mut h, 0)?;
        let allocated = le32(&h, AT_ALLOCATED as usize);
        let (used, max) = {
            let bmap = v.bmap.read().unwrap_or_else(|p| p.into_inner());
            let live = bmap.iter().filter(|&&e| e < DISCARDED);
            let used = live.clone().count() as u32;
            let max = live.map(|&e| e + 1).max().unwrap_or(0);
            (used, max)
        };
        let mut w = Writer {
            next: allocated.max(max),
            allocated,
            sync,
        };
        // A crash between the count and the map entry leaves the count
        // one ahead: when the map's blocks are exactly 0..used, the count
        // goes back to what it references (the leaked block is reused).
        if used == max && allocated != used {
            v.file.write_at(&used.to_le_bytes(), AT_ALLOCATED)?;
            v.file.flush()?;
            w.next = used;
            w.allocated = used;
        }
        v.writer = Some(Mutex::new(w));
        Ok(v)
    }

    fn write_guest(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the VDI image is open read-only",
            ));
        };
        crate::disk::inside("write", "VDI", self.size, off, buf.len())?;
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let block = self.block;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let idx = pos / block;
            let within = pos % block;
            let n = ((block - within) as usize).min(buf.len() - done);
            let piece = &buf[done..done + n];
            let e = self.entry(idx);
            if e < DISCARDED {
                self.file.write_at(piece, self.data_at(e) + within)?;
            } else if piece.iter().any(|&b| b != 0) {
                self.allocate(&mut w, idx, within, piece)?;
            }
            done += n;
        }
        Ok(())
    }

    fn allocate(&self, w: &mut Writer, idx: u64, within: u64, piece: &[u8]) -> io::Result<()> {
        let e = w.next;
        let blocks = self.bmap.read().unwrap_or_else(|p| p.into_inner()).len() as u64;
        if u64::from(e) >= blocks || e >= DISCARDED {
            return Err(corrupt_io(format!(
                "VDI {}: block index {e} would pass the {blocks} blocks of the image (the allocated count is wrong)",
                self.path.display()
            )));
        }
        let start = self.offset_data + u64::from(e) * (self.block + self.extra);
        let data = start + self.extra;
        let end = data + self.block;
        // Bytes the file has there already become zeros; past its end the
        // block is a hole; its last sector is written so that the file
        // holds the whole block.
        let have = self.file.len().clamp(start, end);
        zero_fill(&*self.file, start, have)?;
        self.file.write_at(piece, data + within)?;
        let tail = data + within + piece.len() as u64;
        zero_fill(&*self.file, tail.max(have).max(end - 512), end)?;
        if w.sync {
            self.file.flush()?;
        }
        let count = w.allocated.max(e + 1);
        self.file.write_at(&count.to_le_bytes(), AT_ALLOCATED)?;
        w.allocated = count;
        self.file
            .write_at(&e.to_le_bytes(), self.offset_bmap + 4 * idx)?;
        self.bmap.write().unwrap_or_else(|p| p.into_inner())[idx as usize] = e;
        w.next = e + 1;
        Ok(())
    }
}

impl Device for Vdi {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        crate::disk::inside("read", "VDI", self.size, off, buf.len())?;
        let block = self.block;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let idx = pos / block;
            let within = pos % block;
            let n = ((block - within) as usize).min(buf.len() - done);
            let piece = &mut buf[done..done + n];
            let e = self.entry(idx);
            if e >= DISCARDED {
                piece.fill(0);
            } else {
                read_padded(&*self.file, piece, self.data_at(e) + within)?;
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

/// The disk inside the VDI `file`, read-only.
pub fn open(path: &Path, file: Box<dyn Device>, _opener: &Opener) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(Vdi::open(path, Arc::from(file))?))
}

/// The disk inside the VDI at `path`, written in place.
pub fn open_rw(path: &Path) -> Result<Arc<dyn Device>> {
    let host = HostFile::open(path)?;
    open_rw_on(path, Arc::new(host))
}

/// The disk inside the VDI held by `host` (the file at `path`, for names
/// in messages), written in place with every allocation ordered for a
/// crash (the crash tests give a host that fails).
pub fn open_rw_on(path: &Path, host: Arc<dyn Device>) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(Vdi::open_rw_on(path, host, true)?))
}

/// The virtual size of a new VDI of at least `bytes` (whole sectors):
/// whole blocks (MiB), as VirtualBox sizes its disks.
pub fn disk_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(BLOCK) * BLOCK
}

/// A new dynamic VDI at `path` of `bytes` virtual bytes: the header, the
/// block map after it, the data area from the first MiB on.
pub fn create(path: &Path, bytes: u64) -> Result<NewDisk> {
    let blocks = bytes.div_ceil(BLOCK);
    if bytes == 0 || !bytes.is_multiple_of(512) || blocks > u64::from(DISCARDED) / 4 {
        return Err(Error::Invalid(format!(
            "a VDI disk of {bytes} bytes (a positive multiple of 512 is needed)"
        )));
    }
    let offset_bmap = HEADER as u64;
    let bmap_bytes = (blocks * 4).div_ceil(512) * 512;
    let offset_data = (offset_bmap + bmap_bytes).div_ceil(BLOCK) * BLOCK;
    if offset_data > u64::from(u32::MAX) {
        return Err(Error::Invalid(format!(
            "a VDI disk of {bytes} bytes is too large"
        )));
    }
    let mut img = vec![0u8; offset_data as usize];
    let h = &mut img[..HEADER];
    h[..TEXT.len()].copy_from_slice(TEXT);
    let put32 = |h: &mut [u8], at: usize, v: u32| h[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put32(h, 0x40, SIGNATURE);
    put32(h, 0x44, VERSION_1_1);
    put32(h, 0x48, 0x180); // header size
    put32(h, 0x4c, TYPE_DYNAMIC);
    put32(h, 0x154, offset_bmap as u32);
    put32(h, 0x158, offset_data as u32);
    put32(h, 0x168, 512);
    h[0x170..0x178].copy_from_slice(&bytes.to_le_bytes());
    put32(h, 0x178, BLOCK as u32);
    put32(h, 0x180, blocks as u32);
    h[0x188..0x198].copy_from_slice(&new_uuid(bytes, b"vdi image"));
    h[0x198..0x1a8].copy_from_slice(&new_uuid(bytes, b"vdi modification"));
    let map = offset_bmap as usize..(offset_bmap + blocks * 4) as usize;
    img[map].fill(0xFF);
    let host = Arc::new(HostFile::create_new(path)?);
    if let Err(e) = host.write_at(&img, 0) {
        let _ = std::fs::remove_file(path);
        return Err(e.into());
    }
    let dev = Vdi::open_rw_on(path, host, false)?;
    Ok(NewDisk::new(Arc::new(dev)))
}

#[cfg(test)]
mod tests;

//! VMDK (VMware): monolithicSparse, streamOptimized, monolithicFlat and the
//! split (twoGbMaxExtent) forms with their descriptor.
//!
//! A VMDK file is either a hosted sparse extent ("KDMV" header, with the
//! descriptor embedded: monolithicSparse, streamOptimized) or a text
//! descriptor naming extent files (FLAT raw files, SPARSE extents, ZERO
//! ranges), opened through the [`Opener`]. The format facts follow
//! VMware's Virtual Disk Format 1.1 and QEMU's block/vmdk.c (what qemu-img
//! writes and reads); the code is ours, with a bounds check on every
//! offset a file gives (`sparse`).
//!
//! An OVA package (tar) is read through its first VMDK member (`ova`).
//!
//! Written in place: monolithicSparse and the extents of the descriptor
//! forms (sparse and flat). streamOptimized is written once, by
//! [`create`] and its finish step (`stream`); in place it is refused.

mod descriptor;
mod header;
mod ova;
mod sparse;
mod stream;
#[cfg(test)]
mod tests;

use super::container::{NewDisk, Opener};
use crate::dev::{Device, FileDevice};
use crate::error::{Error, Result};
use descriptor::{Descriptor, Kind, DESC_MAX, NO_PARENT};
use header::{Header, FLAG_NL_TEST, FLAG_RGD, SECTOR};
use sparse::Sparse;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Grain of the files we make: 64 KiB, as VMware and QEMU.
const GRAIN_SECTORS: u64 = 128;
/// Largest disk we create (grain offsets are 32-bit sectors).
const CREATE_MAX: u64 = 2 << 40;

/// True when a file whose first bytes are `head` is a VMDK: a sparse
/// extent's magic ("KDMV", or the older "COWD", refused when opened), a
/// descriptor file's text, or an OVA package (a tar archive starting with
/// its `.ovf` descriptor), read through its VMDK member.
pub fn probe(head: &[u8]) -> bool {
    head.starts_with(header::MAGIC)
        || head.starts_with(header::COWD)
        || descriptor::looks_like(head)
        || ova::probe(head)
}

/// One extent of the disk.
enum Extent {
    Sparse(Box<Sparse>),
    Flat { file: Arc<dyn Device>, start: u64 },
    Zero,
}

/// A VMDK disk: its extents end to end.
pub struct Vmdk {
    /// (first byte on the disk, length, extent).
    parts: Vec<(u64, u64, Extent)>,
    len: u64,
    path: PathBuf,
    writable: bool,
}

impl Vmdk {
    fn each(
        &self,
        off: u64,
        n: usize,
        mut f: impl FnMut(&Extent, u64, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        if off.checked_add(n as u64).is_none_or(|e| e > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "access at {off} past the end of the {}-byte VMDK disk {}",
                    self.len,
                    self.path.display()
                ),
            ));
        }
        let first = self.parts.partition_point(|(s, l, _)| s + l <= off);
        let mut done = 0usize;
        for (start, len, e) in &self.parts[first..] {
            if done == n {
                break;
            }
            let pos = off + done as u64;
            let within = pos - start;
            let take = ((len - within) as usize).min(n - done);
            f(e, within, done..done + take)?;
            done += take;
        }
        Ok(())
    }
}

impl Device for Vmdk {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.each(off, buf.len(), |e, within, r| match e {
            Extent::Sparse(s) => s.read(&mut buf[r], within),
            Extent::Flat { file, start } => file.read_at(&mut buf[r], start + within),
            Extent::Zero => {
                buf[r].fill(0);
                Ok(())
            }
        })
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("the VMDK {} is open read-only", self.path.display()),
            ));
        }
        self.each(off, buf.len(), |e, within, r| match e {
            Extent::Sparse(s) => s.write(&buf[r], within),
            Extent::Flat { file, start } => file.write_at(&buf[r], start + within),
            Extent::Zero => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a ZERO extent of a VMDK cannot be written",
            )),
        })
    }

    fn flush(&self) -> io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        for (_, _, e) in &self.parts {
            match e {
                Extent::Sparse(s) => s.commit()?,
                Extent::Flat { file, .. } => file.flush()?,
                Extent::Zero => {}
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// How the extents a descriptor names are opened.
enum Open<'a> {
    Read(&'a Opener<'a>),
    Write,
}

/// The disk a VMDK `file` (a sparse extent with its embedded descriptor,
/// or a descriptor naming extent files) describes, read-only.
pub fn open(path: &Path, file: Box<dyn Device>, opener: &Opener) -> Result<Arc<dyn Device>> {
    Ok(Arc::new(open_vmdk(
        path,
        Arc::from(file),
        Open::Read(opener),
    )?))
}

/// The disk of the VMDK at `path`, written in place (monolithicSparse and
/// flat extents; streamOptimized is refused: it is written once).
pub fn open_rw(path: &Path) -> Result<Arc<dyn Device>> {
    let host = HostFile::open(path)?;
    Ok(Arc::new(open_vmdk(path, Arc::new(host), Open::Write)?))
}

/// [`open_rw`] of a monolithicSparse VMDK whose bytes are `host` (`path`
/// names it in messages): tests crash it by cutting the host's writes.
pub fn open_rw_on(path: &Path, host: Arc<dyn Device>) -> Result<Arc<dyn Device>> {
    let mut head = [0u8; 4];
    if host.len() >= 4 {
        host.read_at(&mut head, 0)?;
    }
    if &head != header::MAGIC {
        return Err(Error::Unsupported(format!(
            "{}: open_rw_on takes a sparse extent (monolithicSparse)",
            path.display()
        )));
    }
    Ok(Arc::new(open_vmdk(path, host, Open::Write)?))
}

fn open_vmdk(path: &Path, file: Arc<dyn Device>, how: Open) -> Result<Vmdk> {
    let name = path.display().to_string();
    let mut head = [0u8; 512];
    let n = file.len().min(512) as usize;
    file.read_at(&mut head[..n], 0)?;
    let writable = matches!(how, Open::Write);
    if head[..n].starts_with(header::MAGIC) || head[..n].starts_with(header::COWD) {
        let h = Header::parse(&head[..n]);
        // A sparse header of capacity 0 with a descriptor: the descriptor
        // describes the disk (QEMU reads it so too).
        if let Some(h) = h.filter(|h| h.capacity == 0 && h.desc_offset != 0) {
            let text = read_text(
                &name,
                file.as_ref(),
                h.desc_offset * SECTOR,
                h.desc_size * SECTOR,
            )?;
            let d = descriptor::parse(&text, &name)?;
            return from_descriptor(path, d, how);
        }
        let mut s = Sparse::open(&name, file.clone())?;
        let h = &s.header;
        if h.desc_offset != 0 && h.desc_size != 0 {
            let text = read_text(
                &name,
                file.as_ref(),
                h.desc_offset * SECTOR,
                h.desc_size * SECTOR,
            )?;
            // A damaged embedded descriptor does not stop the disk being
            // read (the header has what reading needs), a parent does.
            if let Ok(d) = descriptor::parse(&text, &name) {
                refuse_parent(&name, &d)?;
            }
        }
        if writable {
            s.make_writable()?;
        }
        let len = s.capacity();
        return Ok(Vmdk {
            parts: vec![(0, len, Extent::Sparse(Box::new(s)))],
            len,
            path: path.to_path_buf(),
            writable,
        });
    }
    if ova::probe(&head[..n]) {
        if writable {
            return Err(Error::Unsupported(format!(
                "writing to {name}: an OVA package is read-only (its disk is streamOptimized)"
            )));
        }
        let (mname, w) = ova::vmdk_member(&name, file)?;
        let mut inner_head = [0u8; 512];
        let k = w.len().min(512) as usize;
        w.read_at(&mut inner_head[..k], 0)?;
        if ova::probe(&inner_head[..k]) {
            return Err(crate::disk::corrupt(
                "OVA package",
                mname,
                "its disk member is another OVA package",
            ));
        }
        let inner = open_vmdk(Path::new(&mname), Arc::new(w), how)?;
        if inner
            .parts
            .iter()
            .any(|(_, _, e)| !matches!(e, Extent::Sparse(_)))
        {
            return Err(Error::Unsupported(format!(
                "{mname}: a VMDK in an OVA that names other extent files"
            )));
        }
        return Ok(inner);
    }
    if !descriptor::looks_like(&head[..n]) {
        return Err(crate::disk::corrupt(
            "VMDK file",
            name,
            "neither a sparse extent header (KDMV) nor a descriptor",
        ));
    }
    if file.len() > DESC_MAX {
        return Err(crate::disk::corrupt(
            "VMDK descriptor",
            name,
            format!(
                "{} bytes: a descriptor file is at most {DESC_MAX}",
                file.len()
            ),
        ));
    }
    let text = read_text(&name, file.as_ref(), 0, file.len())?;
    let d = descriptor::parse(&text, &name)?;
    from_descriptor(path, d, how)
}

fn refuse_parent(name: &str, d: &Descriptor) -> Result<()> {
    match d.parent_cid {
        Some(p) if p != NO_PARENT => Err(Error::Unsupported(format!(
            "{name}: a differencing VMDK (parentCID {p:08x}): parent chains are not read yet"
        ))),
        _ => Ok(()),
    }
}

/// Up to `len` bytes of text at `at` (bounded by the file and [`DESC_MAX`]).
fn read_text(name: &str, file: &dyn Device, at: u64, len: u64) -> Result<Vec<u8>> {
    let flen = file.len();
    if at >= flen {
        return Err(crate::disk::corrupt(
            "VMDK descriptor",
            name.to_string(),
            format!("offset {at:#x} lies past the end of the {flen}-byte file"),
        ));
    }
    let n = len.min(DESC_MAX).min(flen - at) as usize;
    let mut b = vec![0u8; n];
    file.read_at(&mut b, at)?;
    Ok(b)
}

fn from_descriptor(path: &Path, d: Descriptor, how: Open) -> Result<Vmdk> {
    let name = path.display().to_string();
    refuse_parent(&name, &d)?;
    match d.create_type.as_str() {
        "monolithicFlat"
        | "monolithicSparse"
        | "twoGbMaxExtentSparse"
        | "twoGbMaxExtentFlat"
        | "streamOptimized"
        | "vmfs"
        | "custom"
        | "" => {}
        other => {
            return Err(Error::Unsupported(format!(
                "{name}: VMDK disks of type {other}"
            )))
        }
    }
    if d.extents.is_empty() {
        return Err(crate::disk::corrupt(
            "VMDK descriptor",
            name,
            "it names no extent",
        ));
    }
    let writable = matches!(how, Open::Write);
    let mut parts = Vec::new();
    let mut at = 0u64;
    for (i, x) in d.extents.iter().enumerate() {
        let len = x.sectors.checked_mul(SECTOR).ok_or_else(|| {
            crate::disk::corrupt(
                "VMDK descriptor",
                name.clone(),
                format!("extent {i}: {} sectors", x.sectors),
            )
        })?;
        if writable && x.read_only {
            return Err(Error::Unsupported(format!(
                "writing to {name}: extent {} is RDONLY",
                x.name
            )));
        }
        let e = match x.kind {
            Kind::Zero => {
                if writable {
                    return Err(Error::Unsupported(format!(
                        "writing to {name}: it has a ZERO extent"
                    )));
                }
                Extent::Zero
            }
            Kind::Flat | Kind::Sparse => {
                let (xpath, file): (PathBuf, Arc<dyn Device>) = match &how {
                    Open::Read(opener) => {
                        let (p, f) = opener(path, &x.name)?;
                        (p, Arc::from(f))
                    }
                    Open::Write => {
                        let p = path.parent().unwrap_or(Path::new(".")).join(&x.name);
                        let f: Arc<dyn Device> = if x.kind == Kind::Flat {
                            Arc::new(FileDevice::open_read_write(&p).map_err(|e| at_path(&p, e))?)
                        } else {
                            Arc::new(HostFile::open(&p)?)
                        };
                        (p, f)
                    }
                };
                let xname = xpath.display().to_string();
                if x.kind == Kind::Flat {
                    let start = x.offset.checked_mul(SECTOR);
                    if start
                        .and_then(|s| s.checked_add(len))
                        .is_none_or(|e| e > file.len())
                    {
                        return Err(crate::disk::corrupt(
                            "VMDK flat extent",
                            xname,
                            format!(
                                "{len} bytes at sector {} do not fit the {}-byte file",
                                x.offset,
                                file.len()
                            ),
                        ));
                    }
                    Extent::Flat {
                        file,
                        start: start.unwrap_or(0),
                    }
                } else {
                    let mut s = Sparse::open(&xname, file)?;
                    if writable {
                        s.make_writable()?;
                    }
                    Extent::Sparse(Box::new(s))
                }
            }
        };
        parts.push((at, len, e));
        at = at.checked_add(len).ok_or_else(|| {
            crate::disk::corrupt(
                "VMDK descriptor",
                name.clone(),
                "the extents add up past 2^64 bytes",
            )
        })?;
    }
    Ok(Vmdk {
        parts,
        len: at,
        path: path.to_path_buf(),
        writable,
    })
}

fn at_path(p: &Path, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// The virtual size of a new VMDK of at least `bytes` (whole grains).
pub fn disk_size(bytes: u64) -> u64 {
    let g = GRAIN_SECTORS * SECTOR;
    bytes.div_ceil(g).max(1) * g
}

/// A new VMDK at `path` of `bytes` virtual bytes: monolithicSparse, or
/// streamOptimized when `stream` (completed by [`NewDisk::finish`]).
pub fn create(path: &Path, bytes: u64, stream: bool) -> Result<NewDisk> {
    if bytes == 0 || !bytes.is_multiple_of(SECTOR) || bytes > CREATE_MAX {
        return Err(Error::Invalid(format!(
            "a VMDK disk of {bytes} bytes (a positive multiple of 512 up to 2 TiB is needed)"
        )));
    }
    if stream {
        let s = Arc::new(stream::Stream::create(path, bytes)?);
        let dev: Arc<dyn Device> = Arc::new(stream::StreamDisk(s.clone()));
        return Ok(NewDisk::with_finish(dev, Box::new(move || s.finish())));
    }
    create_sparse(path, bytes)?;
    Ok(NewDisk::new(open_rw(path)?))
}

/// A content identifier for a new disk: reproducible (a function of its
/// size and name), as a build's bytes are.
fn cid_for(sectors: u64, name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in sectors.to_le_bytes().iter().chain(name.as_bytes()) {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    if h == NO_PARENT {
        1
    } else {
        h
    }
}

fn create_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| at_path(path, e))
}

/// Lays out an empty monolithicSparse extent as QEMU does: header,
/// descriptor (20 sectors), the redundant GD and its tables, the GD and
/// its tables (every table preallocated), grains from the next grain
/// boundary.
fn create_sparse(path: &Path, bytes: u64) -> Result<()> {
    let sectors = bytes / SECTOR;
    let gtes = 512u64;
    let grains = sectors.div_ceil(GRAIN_SECTORS);
    let gt_sectors = gtes * 4 / SECTOR;
    let gt_count = grains.div_ceil(gtes);
    let gd_sectors = (gt_count * 4).div_ceil(SECTOR);
    let desc_offset = 1;
    let desc_size = 20;
    let rgd_offset = desc_offset + desc_size;
    let gd_offset = rgd_offset + gd_sectors + gt_sectors * gt_count;
    let overhead =
        (gd_offset + gd_sectors + gt_sectors * gt_count).div_ceil(GRAIN_SECTORS) * GRAIN_SECTORS;
    let h = Header {
        version: 1,
        flags: FLAG_NL_TEST | FLAG_RGD,
        capacity: sectors,
        grain: GRAIN_SECTORS,
        desc_offset,
        desc_size,
        gtes: gtes as u32,
        rgd_offset,
        gd_offset,
        overhead,
        unclean: 0,
        compress: 0,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let desc = descriptor::render("monolithicSparse", cid_for(sectors, &name), sectors, &name);
    if desc.len() as u64 > desc_size * SECTOR {
        return Err(Error::Invalid(format!(
            "{}: the file name is too long for the VMDK descriptor",
            path.display()
        )));
    }
    let dir = |first_gt: u64| -> Vec<u8> {
        (0..gt_count)
            .flat_map(|i| ((first_gt + i * gt_sectors) as u32).to_le_bytes())
            .collect()
    };
    let f = create_file(path)?;
    let r = (|| -> io::Result<()> {
        f.set_len(overhead * SECTOR)?;
        f.write_all_at(&h.to_sector(), 0)?;
        f.write_all_at(desc.as_bytes(), desc_offset * SECTOR)?;
        f.write_all_at(&dir(rgd_offset + gd_sectors), rgd_offset * SECTOR)?;
        f.write_all_at(&dir(gd_offset + gd_sectors), gd_offset * SECTOR)?;
        f.sync_all()
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(path);
        return Err(at_path(path, e));
    }
    Ok(())
}

/// An extent file written in place, which grows as grains are appended.
use crate::dev::GrowFile as HostFile;

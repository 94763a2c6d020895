//! Virtual machine disk containers: which format an image file is, how to
//! open the disk inside it, and how to make a new one.
//!
//! Each format has its own module beside this one (`qcow2`, `vmdk`, `vhd`,
//! `vhdx`, `vdi`) with the same three entry points: `open` (read-only, on
//! any [`Device`]: a local file, an object at a URL, a Python file object),
//! `open_rw` (a local file written in place, where the format allows it)
//! and `create` (a new file of a given virtual size, written directly).
//! Formats are told apart by their content, never by the file's name.
//!
//! The formats are our own code, as qcow2 is: the crates found for them
//! read only (vhdx 0.1 loads every table into memory; vhdx-core, a
//! read-only `Read + Seek` with its writer "planned"; vhd 0.1, a
//! read-only VHD reader; the VMDK and VDI readers likewise), while xfskit
//! must write every one in place with the format's crash rules, read
//! through any [`Device`] (a URL, a Python file object), and bound every
//! table by the file's size on hostile input.

use super::{qcow2, vdi, vhd, vhdx, vmdk, Format};
use crate::dev::{Device, FileDevice};
use crate::error::{Error, Result};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Opens a file that a container names (a backing file, a differencing
/// disk's parent, a VMDK extent): given where the naming file is and the
/// name it gives, returns where the named file is and the file.
pub type Opener<'a> = qcow2::BackingOpener<'a>;

/// The local opener: names taken relative to the naming file's directory.
pub fn local_opener(path: &Path, name: &str) -> Result<(std::path::PathBuf, Box<dyn Device>)> {
    qcow2::local_backing(path, name)
}

/// The container format of `file`, by its content: the magic of qcow2,
/// VHDX, VDI and sparse VMDK at the start, a VMDK descriptor's text, or a
/// VHD footer (at the start of a dynamic VHD, in the last sector of any).
pub fn detect(file: &dyn Device) -> Result<Format> {
    let mut head = [0u8; 512];
    let n = file.len().min(512) as usize;
    if n > 0 {
        file.read_at(&mut head[..n], 0)?;
    }
    let head = &head[..n];
    if qcow2::is_qcow2(head) {
        return Ok(Format::Qcow2);
    }
    if vhdx::probe(head) {
        return Ok(Format::Vhdx);
    }
    if vdi::probe(head) {
        return Ok(Format::Vdi);
    }
    if vmdk::probe(head) {
        return Ok(Format::Vmdk);
    }
    if vhd::probe(file, head)? {
        return Ok(Format::Vhd);
    }
    Ok(Format::Raw)
}

/// The disk inside `file` (at `path`, for names in messages and for the
/// files it names), read-only.
pub fn open(
    path: &Path,
    file: Box<dyn Device>,
    format: Format,
    opener: &Opener,
) -> Result<Arc<dyn Device>> {
    Ok(match format {
        Format::Raw => Arc::from(file),
        Format::Qcow2 => Arc::new(qcow2::Qcow2::open_with(path, file, opener)?),
        Format::Vmdk => vmdk::open(path, file, opener)?,
        Format::Vhd => vhd::open(path, file, opener)?,
        Format::Vhdx => vhdx::open(path, file, opener)?,
        Format::Vdi => vdi::open(path, file, opener)?,
    })
}

/// The disk inside the local file `path`, as [`super::open_disk`] gives it.
pub fn open_local(path: &Path, writable: bool) -> Result<(Arc<dyn Device>, Format)> {
    let file = if writable {
        FileDevice::open_read_write(path)?
    } else {
        FileDevice::open_read_only(path)?
    };
    let format = detect(&file)?;
    if !writable {
        return Ok((open(path, Box::new(file), format, &local_opener)?, format));
    }
    let dev: Arc<dyn Device> = match format {
        Format::Raw => Arc::new(file),
        Format::Qcow2 => {
            drop(file);
            Arc::new(qcow2::Qcow2::open_rw(path)?)
        }
        Format::Vmdk => {
            drop(file);
            vmdk::open_rw(path)?
        }
        Format::Vhd => {
            drop(file);
            vhd::open_rw(path)?
        }
        Format::Vhdx => {
            drop(file);
            vhdx::open_rw(path)?
        }
        Format::Vdi => {
            drop(file);
            vdi::open_rw(path)?
        }
    };
    Ok((dev, format))
}

/// The file formats a new disk image can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewFormat {
    /// The bytes of the disk.
    Raw,
    /// qcow2 v3, 64 KiB clusters.
    Qcow2,
    /// VMDK monolithicSparse (VMware Workstation; written in place after).
    Vmdk,
    /// VMDK streamOptimized (ESXi, OVA packages): compressed grains,
    /// written once.
    VmdkStream,
    /// Dynamic VHD (Virtual PC, Hyper-V gen 1).
    Vhd,
    /// Fixed VHD of a whole number of MiB (Azure).
    VhdFixed,
    /// Dynamic VHDX (Hyper-V).
    Vhdx,
    /// Dynamic VDI (VirtualBox).
    Vdi,
}

impl NewFormat {
    /// Every name `--format` takes, in the order help lists them.
    pub const NAMES: &'static str = "raw, qcow2, vmdk, vmdk-stream, vhd, vhd-fixed, vhdx or vdi";

    /// The format named `s` as `--format` takes it.
    pub fn parse(s: &str) -> Option<NewFormat> {
        Some(match s {
            "raw" => NewFormat::Raw,
            "qcow2" => NewFormat::Qcow2,
            "vmdk" => NewFormat::Vmdk,
            "vmdk-stream" | "vmdk-streamoptimized" => NewFormat::VmdkStream,
            "vhd" | "vpc" => NewFormat::Vhd,
            "vhd-fixed" => NewFormat::VhdFixed,
            "vhdx" => NewFormat::Vhdx,
            "vdi" => NewFormat::Vdi,
            _ => return None,
        })
    }

    /// The container format a reader sees.
    pub fn format(self) -> Format {
        match self {
            NewFormat::Raw => Format::Raw,
            NewFormat::Qcow2 => Format::Qcow2,
            NewFormat::Vmdk | NewFormat::VmdkStream => Format::Vmdk,
            NewFormat::Vhd | NewFormat::VhdFixed => Format::Vhd,
            NewFormat::Vhdx => Format::Vhdx,
            NewFormat::Vdi => Format::Vdi,
        }
    }

    /// The virtual size a new disk of at least `bytes` gets: `bytes`
    /// rounded up as the format (and the platform it is made for) demands.
    pub fn disk_size(self, bytes: u64) -> u64 {
        let sectors = bytes.div_ceil(512) * 512;
        match self {
            NewFormat::Raw | NewFormat::Qcow2 => sectors,
            NewFormat::Vmdk | NewFormat::VmdkStream => vmdk::disk_size(sectors),
            NewFormat::Vhd => vhd::disk_size(sectors, false),
            NewFormat::VhdFixed => vhd::disk_size(sectors, true),
            NewFormat::Vhdx => vhdx::disk_size(sectors),
            NewFormat::Vdi => vdi::disk_size(sectors),
        }
    }

    /// Makes a new image file at `path` (which must not exist) holding a
    /// zeroed disk of `bytes` (a [`NewFormat::disk_size`]), open for
    /// writing.
    pub fn create(self, path: &Path, bytes: u64) -> Result<NewDisk> {
        match self {
            NewFormat::Raw => {
                let f = std::fs::File::create_new(path).map_err(|e| {
                    Error::Io(std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", path.display()),
                    ))
                })?;
                f.set_len(bytes)?;
                drop(f);
                Ok(NewDisk::new(Arc::new(FileDevice::open_read_write(path)?)))
            }
            NewFormat::Qcow2 => {
                qcow2::create(path, bytes)?;
                Ok(NewDisk::new(Arc::new(qcow2::Qcow2::open_rw(path)?)))
            }
            NewFormat::Vmdk => vmdk::create(path, bytes, false),
            NewFormat::VmdkStream => vmdk::create(path, bytes, true),
            NewFormat::Vhd => vhd::create(path, bytes, false),
            NewFormat::VhdFixed => vhd::create(path, bytes, true),
            NewFormat::Vhdx => vhdx::create(path, bytes),
            NewFormat::Vdi => vdi::create(path, bytes),
        }
    }
}

impl fmt::Display for NewFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NewFormat::Raw => "raw",
            NewFormat::Qcow2 => "qcow2",
            NewFormat::Vmdk => "vmdk",
            NewFormat::VmdkStream => "vmdk-stream",
            NewFormat::Vhd => "vhd",
            NewFormat::VhdFixed => "vhd-fixed",
            NewFormat::Vhdx => "vhdx",
            NewFormat::Vdi => "vdi",
        })
    }
}

/// A new disk image being written: its disk, and the last step that
/// completes the file (a streamOptimized VMDK's grain tables and footer).
pub struct NewDisk {
    /// The disk, zeroed, writable.
    pub device: Arc<dyn Device>,
    finish: Option<Box<dyn FnOnce() -> Result<()> + Send>>,
}

impl NewDisk {
    /// A disk that needs nothing more than a flush to be complete.
    pub fn new(device: Arc<dyn Device>) -> NewDisk {
        NewDisk {
            device,
            finish: None,
        }
    }

    /// A disk completed by `finish` once every write is done.
    pub fn with_finish(
        device: Arc<dyn Device>,
        finish: Box<dyn FnOnce() -> Result<()> + Send>,
    ) -> NewDisk {
        NewDisk {
            device,
            finish: Some(finish),
        }
    }

    /// Flushes the disk and completes the file.
    pub fn finish(self) -> Result<()> {
        self.device.flush()?;
        if let Some(f) = self.finish {
            f()?;
        }
        Ok(())
    }
}

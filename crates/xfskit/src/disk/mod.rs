//! Disk images: the filesystem inside a partitioned disk or a qcow2 file.
//!
//! [`open`] takes any image a user has, a bare XFS filesystem, a raw disk
//! with an MBR or GPT partition table, or a qcow2 file holding either, and
//! returns the [`Device`] of the XFS filesystem in it: the file itself, a
//! [`Window`] over one partition, or a window over a [`qcow2::Qcow2`]
//! device. When no partition is named, the one partition whose superblock
//! says XFS is taken. [`list`] describes what a disk holds (`xfskit parts`).
//!
//! The partition tables are read by our own code (`mbr`, `gpt`): the crates
//! made for them (gptman, mbrman) can panic or allocate without bound on a
//! damaged table, and a table is a few hundred lines to read.

mod gpt;
mod mbr;
mod probe;
pub mod qcow2;

use crate::dev::{Device, FileDevice, Window};
use crate::error::{Error, Location, Result};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The kind of partition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// DOS partition table in sector 0, with logical partitions.
    Mbr,
    /// GUID partition table.
    Gpt,
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::Mbr => "MBR",
            Scheme::Gpt => "GPT",
        })
    }
}

/// One partition as the table describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The number Linux gives it (sdaN): GPT entry index + 1; MBR 1-4 for
    /// primary entries, 5 on for logical partitions.
    pub number: u32,
    /// First byte on the disk.
    pub start_bytes: u64,
    /// Length in bytes.
    pub size_bytes: u64,
    /// The type: a GUID (GPT) or a byte such as `0x83` (MBR).
    pub type_id: String,
    /// The type in words ("Linux filesystem"), or "unknown".
    pub type_name: String,
    /// The GPT partition name (empty for MBR).
    pub label: String,
}

impl Partition {
    fn end_bytes(&self) -> Option<u64> {
        self.start_bytes.checked_add(self.size_bytes)
    }

    fn is_extended_container(&self) -> bool {
        matches!(self.type_id.as_str(), "0x05" | "0x0f" | "0x85")
    }
}

/// A partition table.
#[derive(Debug, Clone)]
pub struct Table {
    /// MBR or GPT.
    pub scheme: Scheme,
    /// Bytes per sector the table was read with.
    pub sector_size: u32,
    /// Partitions in number order.
    pub partitions: Vec<Partition>,
    /// Things the user should know (a damaged primary GPT, a truncated disk).
    pub notes: Vec<String>,
}

/// The container format of an image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The bytes of the file are the bytes of the disk.
    Raw,
    /// A qcow2 file (v2 or v3).
    Qcow2,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
        })
    }
}

/// How to open an image.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions {
    /// The partition that holds the filesystem (None: the only XFS one).
    pub partition: Option<u32>,
    /// Open for writing (raw images only for now).
    pub writable: bool,
}

/// The filesystem found in an image.
pub struct Image {
    /// The filesystem's bytes.
    pub device: Box<dyn Device>,
    /// The container format of the file.
    pub format: Format,
    /// The partition it lies in (None: the whole disk is the filesystem).
    pub partition: Option<Partition>,
    /// Warnings about the image worth telling the user.
    pub notes: Vec<String>,
}

/// What a disk holds, for `xfskit parts`.
pub struct Listing {
    /// The container format of the file.
    pub format: Format,
    /// Size of the disk in bytes (the virtual size of a qcow2 file).
    pub disk_bytes: u64,
    /// The partition table, if any.
    pub table: Option<Table>,
    /// Per partition: what it holds, and whether it lies inside the disk.
    pub partitions: Vec<Found>,
    /// What the whole disk holds when there is no partition table.
    pub whole_disk: Option<&'static str>,
}

/// One partition and what it holds.
pub struct Found {
    /// The partition.
    pub partition: Partition,
    /// Its filesystem ("xfs", "ext4", "swap"...), None when unknown.
    pub content: Option<&'static str>,
    /// False when the partition runs past the end of the disk.
    pub fits: bool,
}

/// Opens the disk in `path`: the file, or the disk inside a qcow2 file.
pub fn open_disk(path: &Path, writable: bool) -> Result<(Arc<dyn Device>, Format)> {
    let file = if writable {
        FileDevice::open_read_write(path)?
    } else {
        FileDevice::open_read_only(path)?
    };
    let mut magic = [0u8; 4];
    if file.read_at(&mut magic, 0).is_ok() && qcow2::is_qcow2(&magic) {
        if writable {
            return Err(Error::Unsupported(format!(
                "{}: writing to qcow2 images (read-only for now)",
                path.display()
            )));
        }
        let q = qcow2::Qcow2::open(path, Box::new(file))?;
        return Ok((Arc::new(q), Format::Qcow2));
    }
    Ok((Arc::new(file), Format::Raw))
}

/// Reads the partition table of `disk`, if it has one.
pub fn read_table(disk: &dyn Device) -> Result<Option<Table>> {
    if let Some(ss) = gpt::present(disk) {
        return gpt::read(disk, ss).map(Some);
    }
    let Some(s0) = mbr::sector0(disk) else {
        return Ok(None);
    };
    if mbr::is_protective(&s0) {
        return Err(corrupt(
            "GPT header",
            "LBA 1".into(),
            "the MBR protects a GPT disk, but neither the primary nor the backup GPT header has a signature",
        ));
    }
    mbr::read(disk, &s0).map(Some)
}

/// What the `len` bytes at `start` of `disk` hold (reads stay inside them).
fn probe_at(disk: &dyn Device, start: u64, len: u64) -> Option<&'static str> {
    probe::probe(|off, n| {
        let end = off.checked_add(n as u64)?;
        if end > len {
            return None;
        }
        let mut b = vec![0u8; n];
        disk.read_at(&mut b, start.checked_add(off)?).ok()?;
        Some(b)
    })
}

/// Describes what the disk in `path` holds.
pub fn list(path: &Path) -> Result<Listing> {
    let (disk, format) = open_disk(path, false)?;
    list_device(disk.as_ref(), format)
}

/// Describes what `disk` holds.
pub fn list_device(disk: &dyn Device, format: Format) -> Result<Listing> {
    // A damaged qcow2 mapping of the first sector is reported as it is, not
    // as a disk without a partition table.
    let mut s0 = [0u8; 512];
    if let Err(e) = disk.read_at(&mut s0, 0) {
        if is_corruption(&e) {
            return Err(e.into());
        }
    }
    let bare = probe_at(disk, 0, disk.len());
    let table = if bare == Some("xfs") {
        None
    } else {
        read_table(disk)?
    };
    let partitions = table
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            let fits = p.end_bytes().is_some_and(|e| e <= disk.len());
            let content = if p.is_extended_container() {
                None
            } else {
                probe_at(disk, p.start_bytes, p.size_bytes)
            };
            Found {
                partition: p.clone(),
                content,
                fits,
            }
        })
        .collect();
    Ok(Listing {
        format,
        disk_bytes: disk.len(),
        whole_disk: if table.is_none() { bare } else { None },
        table,
        partitions,
    })
}

/// Opens the XFS filesystem in the image at `path`: see the module doc.
pub fn open(path: &Path, opts: &ImageOptions) -> Result<Image> {
    let (disk, format) = open_disk(path, opts.writable)?;
    open_device(disk, format, opts, &path.display().to_string())
}

/// Finds the XFS filesystem on `disk` (a whole disk, qcow2 already
/// decoded); `name` names it in errors.
pub fn open_device(
    disk: Arc<dyn Device>,
    format: Format,
    opts: &ImageOptions,
    name: &str,
) -> Result<Image> {
    let listing = list_device(disk.as_ref(), format)?;
    let Some(table) = &listing.table else {
        if let Some(n) = opts.partition {
            return Err(Error::Invalid(format!(
                "{name} has no partition table, so no partition {n}{}",
                match listing.whole_disk {
                    Some(c) => format!(" (the whole image is {c})"),
                    None => String::new(),
                }
            )));
        }
        // A bare filesystem, or something the superblock check will name.
        return Ok(Image {
            device: Box::new(Window::new(disk.clone(), 0, disk.len())?),
            format,
            partition: None,
            notes: Vec::new(),
        });
    };
    let found = match opts.partition {
        Some(n) => {
            let f = listing.partitions.iter().find(|f| f.partition.number == n);
            let Some(f) = f else {
                return Err(Error::Invalid(format!(
                    "{name} has no partition {n}; it has: {}",
                    describe(&listing.partitions)
                )));
            };
            if f.content != Some("xfs") && f.fits {
                return Err(Error::Unsupported(format!(
                    "partition {n} of {name} holds {}, not XFS",
                    f.content.unwrap_or("no filesystem xfskit recognises")
                )));
            }
            f
        }
        None => {
            let xfs: Vec<&Found> = listing
                .partitions
                .iter()
                .filter(|f| f.content == Some("xfs"))
                .collect();
            match xfs.as_slice() {
                [one] => *one,
                [] => {
                    return Err(Error::Unsupported(format!(
                        "no XFS filesystem on the {} disk {name}; partitions: {}",
                        table.scheme,
                        describe(&listing.partitions)
                    )))
                }
                many => {
                    return Err(Error::Invalid(format!(
                        "partitions {} of {name} all hold XFS: choose one with --partition N",
                        many.iter()
                            .map(|f| f.partition.number.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
    };
    let p = &found.partition;
    if !found.fits {
        return Err(corrupt(
            "partition table entry",
            format!(
                "partition {} ({} entry {})",
                p.number, table.scheme, p.number
            ),
            format!(
                "the partition runs from byte {} for {} bytes, past the end of the {}-byte disk",
                p.start_bytes,
                p.size_bytes,
                disk.len()
            ),
        ));
    }
    let device = Window::new(disk.clone(), p.start_bytes, p.size_bytes)?;
    Ok(Image {
        device: Box::new(device),
        format,
        partition: Some(p.clone()),
        notes: table.notes.clone(),
    })
}

/// "1 (EFI System, vfat), 2 (Linux filesystem, xfs)".
fn describe(found: &[Found]) -> String {
    if found.is_empty() {
        return "none".into();
    }
    found
        .iter()
        .map(|f| {
            format!(
                "{} ({}, {})",
                f.partition.number,
                f.partition.type_name,
                f.content.unwrap_or("no known filesystem")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A corruption error of a disk structure, located in words.
pub(crate) fn corrupt(what: &'static str, whr: String, detail: impl Into<String>) -> Error {
    Error::corrupt(what, Location::Other(whr), detail)
}

/// A damaged image found while reading through a [`Device`] (which speaks
/// `io::Error`): carried inside the `io::Error` so that callers can tell it
/// from a failing disk with [`is_corruption`].
#[derive(Debug)]
pub struct ImageCorrupt(pub String);

impl fmt::Display for ImageCorrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt image: {}", self.0)
    }
}

impl std::error::Error for ImageCorrupt {}

/// An `io::Error` carrying an [`ImageCorrupt`].
pub(crate) fn corrupt_io(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, ImageCorrupt(msg))
}

/// True when `e` reports a damaged image rather than a failing disk.
pub fn is_corruption(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<ImageCorrupt>())
}

pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

//! Disk images: the filesystem inside a partitioned disk or a VM disk file.
//!
//! [`open`] takes any image a user has, a bare XFS filesystem, a raw disk
//! with an MBR or GPT partition table, LVM2 physical volumes on it, or a
//! qcow2, VMDK, VHD, VHDX or VDI file holding any of these, and returns the
//! [`Device`] of the XFS filesystem in it: the file itself, a `Window` over
//! one partition, a window (or a `Concat` of windows) over a linear logical
//! volume, on the container's device ([`container`]) when the file is one. When none is named, the
//! one partition or logical volume whose superblock says XFS is taken.
//! [`list`] describes what a disk holds (`xfskit parts`).
//!
//! The partition tables are read by our own code (`mbr`, `gpt`): the crates
//! made for them (gptman, mbrman) can panic or allocate without bound on a
//! damaged table, and a table is a few hundred lines to read.

pub mod container;
mod gpt;
pub mod gpt_write;
pub mod grow;
pub mod lvm;
mod mbr;
mod probe;
pub mod qcow2;
mod select;
pub mod vdi;
pub mod vhd;
pub mod vhdx;
pub mod vmdk;

pub use select::{list, list_device, open, open_device, open_partition};

pub(crate) use crate::error::corrupt_io;
/// Damage carried inside an `io::Error` (kept in error.rs, the lowest layer,
/// so that [`Error::errno`] recognises it).
pub use crate::error::{is_corruption, ImageCorrupt};

use crate::dev::Device;
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
    /// A VMDK (sparse, streamOptimized, or a descriptor with its extents).
    Vmdk,
    /// A VHD (fixed, dynamic or differencing).
    Vhd,
    /// A VHDX (fixed, dynamic or differencing).
    Vhdx,
    /// A VirtualBox VDI (dynamic or fixed).
    Vdi,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
            Format::Vmdk => "vmdk",
            Format::Vhd => "vhd",
            Format::Vhdx => "vhdx",
            Format::Vdi => "vdi",
        })
    }
}

/// How to open an image.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions {
    /// The partition that holds the filesystem (None: the only XFS one).
    pub partition: Option<u32>,
    /// The LVM2 logical volume that holds it, as "VG/LV".
    pub lv: Option<String>,
    /// Open for writing.
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
    /// The logical volume it is, as "VG/LV".
    pub volume: Option<String>,
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
    /// The LVM2 logical volumes on the disk's PVs.
    pub volumes: Vec<FoundLv>,
    /// Problems worth a warning (a damaged LVM label on one partition).
    pub notes: Vec<String>,
}

/// A logical volume and what it holds.
pub struct FoundLv {
    /// The partition of its PV (None: the whole disk is the PV).
    pub partition: Option<u32>,
    /// The volume as LVM describes it, mapped onto the disk.
    pub lv: lvm::Lv,
    /// Where the PV starts on the disk.
    pub pv_start_bytes: u64,
    /// Its filesystem, None when unknown or unreadable.
    pub content: Option<&'static str>,
}

impl FoundLv {
    /// "VG/LV".
    pub fn path(&self) -> String {
        format!("{}/{}", self.lv.vg, self.lv.name)
    }
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

/// Opens the disk in `path`: the file, or the disk inside a qcow2, VMDK,
/// VHD, VHDX or VDI file ([`container`]).
pub fn open_disk(path: &Path, writable: bool) -> Result<(Arc<dyn Device>, Format)> {
    container::open_local(path, writable)
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

/// A corruption error of a disk structure, located in words.
pub(crate) fn corrupt(what: &'static str, whr: String, detail: impl Into<String>) -> Error {
    Error::corrupt(what, Location::Other(whr), detail)
}

/// Refuses a `what` ("read", "write") of `len` bytes at `off` that does not
/// lie inside a `size`-byte disk of the container format `format`.
pub(crate) fn inside(
    what: &str,
    format: &str,
    size: u64,
    off: u64,
    len: usize,
) -> std::io::Result<()> {
    if off.checked_add(len as u64).is_none_or(|e| e > size) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{what} past the end of the {size}-byte {format} disk"),
        ));
    }
    Ok(())
}

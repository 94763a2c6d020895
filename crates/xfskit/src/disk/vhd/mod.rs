//! VHD (Virtual PC, "vpc" in QEMU): fixed, dynamic and differencing disks.

use super::container::{not_yet, NewDisk, Opener};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// True when `file` (whose first bytes are `head`) is a VHD: a footer
/// ("conectix") at its start (dynamic) or in its last sector (any).
pub fn probe(_file: &dyn Device, _head: &[u8]) -> Result<bool> {
    Ok(false)
}

/// The disk inside the VHD `file`, read-only.
pub fn open(_path: &Path, _file: Box<dyn Device>, _opener: &Opener) -> Result<Arc<dyn Device>> {
    Err(Error::Unsupported("VHD images cannot be read yet".into()))
}

/// The disk inside the VHD at `path`, written in place.
pub fn open_rw(_path: &Path) -> Result<Arc<dyn Device>> {
    Err(not_yet("VHD"))
}

/// The virtual size of a new VHD of at least `bytes` (whole sectors).
pub fn disk_size(bytes: u64, _fixed: bool) -> u64 {
    bytes
}

/// A new VHD at `path` of `bytes` virtual bytes, dynamic or fixed.
pub fn create(_path: &Path, _bytes: u64, _fixed: bool) -> Result<NewDisk> {
    Err(not_yet("VHD"))
}

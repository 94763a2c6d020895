//! VDI (VirtualBox): dynamic and fixed disks.

use super::container::{not_yet, NewDisk, Opener};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// True when a file whose first bytes are `head` is a VDI image.
pub fn probe(_head: &[u8]) -> bool {
    false
}

/// The disk inside the VDI `file`, read-only.
pub fn open(_path: &Path, _file: Box<dyn Device>, _opener: &Opener) -> Result<Arc<dyn Device>> {
    Err(Error::Unsupported("VDI images cannot be read yet".into()))
}

/// The disk inside the VDI at `path`, written in place.
pub fn open_rw(_path: &Path) -> Result<Arc<dyn Device>> {
    Err(not_yet("VDI"))
}

/// The virtual size of a new VDI of at least `bytes` (whole sectors).
pub fn disk_size(bytes: u64) -> u64 {
    bytes
}

/// A new VDI at `path` of `bytes` virtual bytes.
pub fn create(_path: &Path, _bytes: u64) -> Result<NewDisk> {
    Err(not_yet("VDI"))
}

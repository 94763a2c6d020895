//! VHDX (Hyper-V): dynamic, fixed and differencing disks.

use super::container::{not_yet, NewDisk, Opener};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// True when a file whose first bytes are `head` is a VHDX image.
pub fn probe(_head: &[u8]) -> bool {
    false
}

/// The disk inside the VHDX `file`, read-only.
pub fn open(_path: &Path, _file: Box<dyn Device>, _opener: &Opener) -> Result<Arc<dyn Device>> {
    Err(Error::Unsupported("VHDX images cannot be read yet".into()))
}

/// The disk inside the VHDX at `path`, written in place.
pub fn open_rw(_path: &Path) -> Result<Arc<dyn Device>> {
    Err(not_yet("VHDX"))
}

/// The virtual size of a new VHDX of at least `bytes` (whole sectors).
pub fn disk_size(bytes: u64) -> u64 {
    bytes
}

/// A new VHDX at `path` of `bytes` virtual bytes.
pub fn create(_path: &Path, _bytes: u64) -> Result<NewDisk> {
    Err(not_yet("VHDX"))
}

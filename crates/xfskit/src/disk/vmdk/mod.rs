//! VMDK (VMware): monolithicSparse, streamOptimized, monolithicFlat and the
//! split (twoGbMaxExtent) forms with their descriptor.

use super::container::{not_yet, NewDisk, Opener};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// True when a file whose first bytes are `head` is a VMDK: a sparse
/// extent's magic ("KDMV") or a descriptor file's text.
pub fn probe(_head: &[u8]) -> bool {
    false
}

/// The disk a VMDK `file` (a sparse extent with its embedded descriptor,
/// or a descriptor naming extent files) describes, read-only.
pub fn open(_path: &Path, _file: Box<dyn Device>, _opener: &Opener) -> Result<Arc<dyn Device>> {
    Err(Error::Unsupported("VMDK images cannot be read yet".into()))
}

/// The disk of the VMDK at `path`, written in place (monolithicSparse and
/// flat extents; streamOptimized is refused: it is written once).
pub fn open_rw(_path: &Path) -> Result<Arc<dyn Device>> {
    Err(not_yet("VMDK"))
}

/// The virtual size of a new VMDK of at least `bytes` (whole sectors).
pub fn disk_size(bytes: u64) -> u64 {
    bytes
}

/// A new VMDK at `path` of `bytes` virtual bytes: monolithicSparse, or
/// streamOptimized when `stream` (completed by [`NewDisk::finish`]).
pub fn create(_path: &Path, _bytes: u64, _stream: bool) -> Result<NewDisk> {
    Err(not_yet("VMDK"))
}

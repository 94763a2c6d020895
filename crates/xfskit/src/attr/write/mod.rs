//! Changing extended attributes in every format: short form in the
//! inode, leaf, node (da-btree), with remote values; the attr fork is
//! created on first set and removed when the last attribute goes.
//!
//! None of these functions logs `ip`: they change it and the caller logs it.
//!
//! STUB: the interface is fixed; the bodies are being written.

use super::Namespace;
use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::trans::Trans;

/// Sets attribute `name` in namespace `ns` to `value` (replacing it if present).
pub fn set(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    let _ = (tp, ip, ns, name, value);
    Err(Error::Unsupported(
        "xattr writes are not written yet".into(),
    ))
}

/// Removes attribute `name` in namespace `ns`. `Error::NoAttr` if absent.
pub fn remove(tp: &mut Trans<'_>, ip: &mut Inode, ns: Namespace, name: &[u8]) -> Result<()> {
    let _ = (tp, ip, ns, name);
    Err(Error::Unsupported(
        "xattr writes are not written yet".into(),
    ))
}

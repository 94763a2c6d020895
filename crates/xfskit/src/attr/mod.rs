//! Extended attributes in every format: shortform (in the inode), leaf,
//! node, with local or remote values.

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::inode::Inode;

/// Attribute namespaces xfskit exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Namespace {
    /// "user." attributes.
    User,
    /// "trusted." attributes (XFS_ATTR_ROOT).
    Trusted,
    /// "security." attributes (XFS_ATTR_SECURE).
    Security,
}

impl Namespace {
    /// The Linux prefix, with its dot.
    pub fn prefix(self) -> &'static str {
        match self {
            Namespace::User => "user.",
            Namespace::Trusted => "trusted.",
            Namespace::Security => "security.",
        }
    }
}

/// One attribute with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    /// Namespace.
    pub ns: Namespace,
    /// Name without the namespace prefix.
    pub name: Vec<u8>,
    /// Value bytes.
    pub value: Vec<u8>,
}

impl Xattr {
    /// "namespace.name" as Linux shows it.
    pub fn full_name(&self) -> Vec<u8> {
        full_name(self.ns, &self.name)
    }
}

/// "namespace.name" as Linux shows it.
pub fn full_name(ns: Namespace, name: &[u8]) -> Vec<u8> {
    let mut v = ns.prefix().as_bytes().to_vec();
    v.extend_from_slice(name);
    v
}

/// Splits "user.foo" into (User, "foo"); `None` for unknown namespaces.
pub fn parse_full_name(full: &[u8]) -> Option<(Namespace, &[u8])> {
    for ns in [Namespace::User, Namespace::Trusted, Namespace::Security] {
        if let Some(rest) = full.strip_prefix(ns.prefix().as_bytes()) {
            return Some((ns, rest));
        }
    }
    None
}

/// Every attribute of `inode` with its value, in on-disk order.
pub fn list(fs: &Fs, inode: &Inode) -> Result<Vec<Xattr>> {
    let _ = (fs, inode);
    Err(Error::Unsupported("xattrs are not implemented yet".into()))
}

/// The value of one attribute, `None` if absent.
pub fn get(fs: &Fs, inode: &Inode, ns: Namespace, name: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(list(fs, inode)?.into_iter().find(|x| x.ns == ns && x.name == name).map(|x| x.value))
}

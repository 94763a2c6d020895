//! Extended attributes in every format: shortform (in the inode), leaf,
//! node, with local or remote values.
//!
//! Reading goes in two steps. First the attribute fork is walked and every
//! visible entry is collected as a [`RawEntry`]: namespace, name and either
//! the value bytes (local values) or where the value lives (remote values).
//! Then values are resolved only for what the caller asked for, so
//! [`list_names`] and [`get`] never read remote values they do not need.
//!
//! POSIX ACLs: the kernel keeps them as trusted-namespace attributes named
//! `SGI_ACL_FILE` and `SGI_ACL_DEFAULT`, in XFS's own ACL encoding, and
//! shows them to userspace as `system.posix_acl_access` / `_default`. This
//! module lists them as they are stored: `trusted.SGI_ACL_FILE` and
//! `trusted.SGI_ACL_DEFAULT` with the raw on-disk value; [`acl`] converts
//! them to the names and encoding Linux shows.
//!
//! Entries being created or removed (INCOMPLETE) and parent pointers (the
//! PARENT namespace, private to the filesystem) are skipped.

pub mod acl;
pub(crate) mod leaf;
pub(crate) mod node;
pub(crate) mod remote;
pub(crate) mod shortform;
pub mod write;

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::inode::{ForkFormat, Inode};

/// Attribute namespaces xfskit exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Namespace {
    /// "user." attributes.
    User,
    /// "trusted." attributes (XFS_ATTR_ROOT).
    Trusted,
    /// "security." attributes (XFS_ATTR_SECURE).
    Security,
    /// Parent pointers (XFS_ATTR_PARENT): private to the filesystem, never
    /// listed; the name is a directory entry name, the value the parent's
    /// inode number and generation. Only log recovery changes them.
    Parent,
}

impl Namespace {
    /// The Linux prefix, with its dot.
    pub fn prefix(self) -> &'static str {
        match self {
            Namespace::User => "user.",
            Namespace::Trusted => "trusted.",
            Namespace::Security => "security.",
            Namespace::Parent => "parent.",
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

/// One attribute's name and value length, without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrName {
    /// Namespace.
    pub ns: Namespace,
    /// Name without the namespace prefix.
    pub name: Vec<u8>,
    /// Length of the value in bytes, as the entry records it.
    pub value_len: u32,
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

/// On-disk entry flag: the value is stored next to the name.
pub(crate) const FLAG_LOCAL: u8 = 1 << 0;
/// On-disk entry flag: trusted namespace.
pub(crate) const FLAG_ROOT: u8 = 1 << 1;
/// On-disk entry flag: security namespace.
pub(crate) const FLAG_SECURE: u8 = 1 << 2;
/// On-disk entry flag: parent pointer (filesystem-private namespace).
pub(crate) const FLAG_PARENT: u8 = 1 << 3;
/// On-disk entry flag: the entry is half-created or half-removed.
pub(crate) const FLAG_INCOMPLETE: u8 = 1 << 7;

/// Largest value Linux lets an attribute have (and XFS accepts).
pub(crate) const XATTR_SIZE_MAX: u32 = 65536;

/// Where an entry's value is.
#[derive(Debug, Clone)]
pub(crate) enum ValueRef {
    /// Stored with the name.
    Local(Vec<u8>),
    /// In remote value blocks starting at attr-fork block `blk`.
    Remote { blk: u32, len: u32 },
}

/// An attribute entry as found in the fork, value not yet read.
#[derive(Debug, Clone)]
pub(crate) struct RawEntry {
    pub ns: Namespace,
    pub name: Vec<u8>,
    pub value: ValueRef,
    /// Attr-fork block holding the entry (0 for shortform), for errors.
    pub dablk: u64,
    /// Hash of the name as the leaf records it (0 for shortform).
    pub hash: u32,
}

impl RawEntry {
    fn value_len(&self) -> u32 {
        match &self.value {
            ValueRef::Local(v) => v.len() as u32,
            ValueRef::Remote { len, .. } => *len,
        }
    }
}

/// Decodes the namespace bits of an entry's flags. `Ok(None)` for
/// incomplete entries. Parent pointers come back as [`Namespace::Parent`]
/// (the write code keeps them); the read functions drop them.
pub(crate) fn namespace_of(flags: u8) -> std::result::Result<Option<Namespace>, String> {
    if flags & FLAG_INCOMPLETE != 0 {
        return Ok(None);
    }
    if flags & FLAG_PARENT != 0 {
        if flags & (FLAG_ROOT | FLAG_SECURE) != 0 {
            return Err(format!("entry flags {flags:#04x} name two namespaces"));
        }
        return Ok(Some(Namespace::Parent));
    }
    match (flags & FLAG_ROOT != 0, flags & FLAG_SECURE != 0) {
        (false, false) => Ok(Some(Namespace::User)),
        (true, false) => Ok(Some(Namespace::Trusted)),
        (false, true) => Ok(Some(Namespace::Security)),
        (true, true) => Err(format!("entry flags {flags:#04x} name two namespaces")),
    }
}

/// Location of attr-fork block `dablk` of inode `ino`.
pub(crate) fn loc(ino: u64, dablk: u64) -> Location {
    Location::InodeBlock {
        ino,
        fork: "attr",
        offset: dablk,
    }
}

/// Every visible entry of the inode's attr fork, in on-disk order
/// (parent pointers left out).
fn raw_entries(fs: &Fs, inode: &Inode) -> Result<(Vec<RawEntry>, node::AttrMap)> {
    let (mut v, map) = all_entries(fs, inode)?;
    v.retain(|e| e.ns != Namespace::Parent);
    Ok((v, map))
}

/// Every complete entry of the inode's attr fork, parent pointers included.
fn all_entries(fs: &Fs, inode: &Inode) -> Result<(Vec<RawEntry>, node::AttrMap)> {
    if !inode.has_attr_fork() {
        return Ok((Vec::new(), node::AttrMap::empty()));
    }
    match inode.aformat {
        ForkFormat::Local => Ok((
            shortform::parse(inode.ino.0, &inode.attr_fork)?,
            node::AttrMap::empty(),
        )),
        // An attr fork in extents format with no extents holds no attributes
        // (the kernel leaves new directories like this).
        ForkFormat::Extents if inode.anextents == 0 => Ok((Vec::new(), node::AttrMap::empty())),
        ForkFormat::Extents | ForkFormat::Btree => {
            let map = node::AttrMap::load(fs, inode)?;
            let entries = node::walk(fs, inode.ino.0, &map)?;
            Ok((entries, map))
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => Err(Error::corrupt(
            "attribute fork",
            loc(inode.ino.0, 0),
            format!(
                "{:?} format is not valid for an attribute fork",
                inode.aformat
            ),
        )),
    }
}

fn resolve(fs: &Fs, ino: u64, map: &node::AttrMap, e: RawEntry) -> Result<Xattr> {
    let value = match e.value {
        ValueRef::Local(v) => v,
        ValueRef::Remote { blk, len } => remote::read_value(fs, ino, map, e.dablk, blk, len)?,
    };
    Ok(Xattr {
        ns: e.ns,
        name: e.name,
        value,
    })
}

/// Every attribute of `inode` with its value, in on-disk order.
pub fn list(fs: &Fs, inode: &Inode) -> Result<Vec<Xattr>> {
    let (entries, map) = raw_entries(fs, inode)?;
    entries
        .into_iter()
        .map(|e| resolve(fs, inode.ino.0, &map, e))
        .collect()
}

/// Every attribute's name and value length, in on-disk order, without
/// reading remote values.
pub fn list_names(fs: &Fs, inode: &Inode) -> Result<Vec<XattrName>> {
    let (entries, _) = raw_entries(fs, inode)?;
    Ok(entries
        .into_iter()
        .map(|e| XattrName {
            ns: e.ns,
            value_len: e.value_len(),
            name: e.name,
        })
        .collect())
}

/// Hash of an attribute name (without namespace prefix), the one hash of
/// directory and attribute names.
pub use xfs_format::da::da_hashname as name_hash;

/// Parent pointers of `inode` as (directory entry name, parent inode,
/// parent generation), in on-disk order.
pub fn parent_pointers(fs: &Fs, inode: &Inode) -> Result<Vec<(Vec<u8>, u64, u32)>> {
    let (entries, _) = all_entries(fs, inode)?;
    let mut out = Vec::new();
    for e in entries.into_iter().filter(|e| e.ns == Namespace::Parent) {
        match e.value {
            ValueRef::Local(v) if v.len() == PARENT_REC_SIZE => {
                let ino = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
                let gen = u32::from_be_bytes(v[8..].try_into().expect("4 bytes"));
                out.push((e.name, ino, gen));
            }
            _ => {
                return Err(Error::corrupt(
                    "parent pointer",
                    loc(inode.ino.0, e.dablk),
                    "value is not a 12-byte local parent record",
                ))
            }
        }
    }
    Ok(out)
}

/// Size of a parent pointer's value (`xfs_parent_rec`: big-endian parent
/// inode number and generation).
pub const PARENT_REC_SIZE: usize = 12;

/// Hash of a parent pointer attribute as XFS orders it: the directory
/// entry name's hash mixed with both halves of the parent inode number
/// (from the value; 0 when the value is not a parent record).
pub fn parent_hash(name: &[u8], value: &[u8]) -> u32 {
    if value.len() != PARENT_REC_SIZE {
        return 0;
    }
    let p = u64::from_be_bytes(value[..8].try_into().expect("8 bytes"));
    name_hash(name) ^ (p >> 32) as u32 ^ p as u32
}

/// Hash under which an entry of namespace `ns` is filed.
pub(crate) fn entry_hash(ns: Namespace, name: &[u8], value: &[u8]) -> u32 {
    if ns == Namespace::Parent {
        parent_hash(name, value)
    } else {
        name_hash(name)
    }
}

/// The value of one attribute, `None` if absent. Only that attribute's
/// value is read; in block formats only the leaves that can hold the
/// name's hash are read.
pub fn get(fs: &Fs, inode: &Inode, ns: Namespace, name: &[u8]) -> Result<Option<Vec<u8>>> {
    // An extents-format fork without extents is empty: `raw_entries` says so.
    let (entries, map) = if inode.has_attr_fork()
        && matches!(inode.aformat, ForkFormat::Extents | ForkFormat::Btree)
        && !(inode.aformat == ForkFormat::Extents && inode.anextents == 0)
    {
        let map = node::AttrMap::load(fs, inode)?;
        let hash = name_hash(name);
        let entries = node::lookup_hash(fs, inode.ino.0, &map, hash)?;
        (
            entries.into_iter().filter(|e| e.hash == hash).collect(),
            map,
        )
    } else {
        raw_entries(fs, inode)?
    };
    if ns == Namespace::Parent {
        return Ok(None);
    }
    match entries.into_iter().find(|e| e.ns == ns && e.name == name) {
        Some(e) => Ok(Some(resolve(fs, inode.ino.0, &map, e)?.value)),
        None => Ok(None),
    }
}

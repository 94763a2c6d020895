//! Changing extended attributes in every format: short form in the
//! inode, leaf, node (da-btree), with remote values; the attr fork is
//! created on first set and removed when the last attribute goes.
//!
//! None of these functions logs `ip`: they change it and the caller logs it.
//!
//! The formats change the way the kernel changes them: a short-form list
//! grows (moving the fork offset as the kernel would) until an entry no
//! longer fits the inode, then becomes a leaf at attr-fork block 0; a
//! full leaf splits, block 0 becoming a da node above the leaves. On
//! removal empty leaves and nodes go, a root with one child takes its
//! place, a lone leaf whose entries fit the inode becomes short form
//! again, and the fork goes with the last attribute.

mod blocks;
mod fork;
mod remote;
mod sf;
mod tree;

use super::{entry_hash, Namespace, XATTR_SIZE_MAX};
use crate::error::{Error, Result};
use crate::inode::{Fork, ForkFormat, Inode};
use crate::trans::Trans;
use blocks::{is_local, LEnt, LVal};

/// Longest attribute name.
const MAX_NAME: usize = 255;

/// An attribute with a local value (short form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ent {
    pub ns: Namespace,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

fn check_args(name: &[u8], value: Option<&[u8]>) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(Error::Invalid(format!(
            "attribute name of {} bytes (1..={MAX_NAME})",
            name.len()
        )));
    }
    if value.is_some_and(|v| v.len() > XATTR_SIZE_MAX as usize) {
        return Err(Error::Invalid(format!(
            "attribute value larger than {XATTR_SIZE_MAX} bytes"
        )));
    }
    Ok(())
}

/// True when leaf entry `e` is the attribute (`ns`, `name`): parent
/// pointers must match the value (the parent) too, as several can share
/// a name.
fn same_key(e: &LEnt, ns: Namespace, name: &[u8], value: &[u8]) -> bool {
    e.ns == ns
        && e.name == name
        && (ns != Namespace::Parent || matches!(&e.val, LVal::Local(v) if v == value))
}

fn same_sf(e: &Ent, ns: Namespace, name: &[u8], value: &[u8]) -> bool {
    e.ns == ns && e.name == name && (ns != Namespace::Parent || e.value == value)
}

/// Adds parent pointer (`name`, `rec`) unless that very pointer (same
/// name and parent record) is there already.
pub fn set_parent(tp: &mut Trans<'_>, ip: &mut Inode, name: &[u8], rec: &[u8]) -> Result<()> {
    check_parent(ip, name, rec)?;
    set(tp, ip, Namespace::Parent, name, rec)
}

/// Removes parent pointer (`name`, `rec`). `Error::NoAttr` if absent.
pub fn remove_parent(tp: &mut Trans<'_>, ip: &mut Inode, name: &[u8], rec: &[u8]) -> Result<()> {
    check_parent(ip, name, rec)?;
    remove_in(tp, ip, Namespace::Parent, name, rec)
}

fn check_parent(ip: &Inode, name: &[u8], rec: &[u8]) -> Result<()> {
    if rec.len() != super::PARENT_REC_SIZE {
        return Err(Error::Invalid(format!(
            "inode {}: parent pointer value of {} bytes (12 expected)",
            ip.ino.0,
            rec.len()
        )));
    }
    check_args(name, Some(rec))
}

fn parent_fs(tp: &Trans<'_>) -> bool {
    tp.geo().features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0
}

/// The fork offset (8-byte units) the kernel gives a new inode's empty
/// attribute fork.
pub(crate) fn default_fork_offset(geo: &crate::geometry::Geometry, ip: &Inode) -> u8 {
    (sf::default_attroffset(geo, ip) >> 3) as u8
}

/// Sets attribute `name` in namespace `ns` to `value` (replacing it if present).
pub fn set(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    check_args(name, Some(value))?;
    if !ip.has_attr_fork() {
        add_fork(tp, ip, 4 + sf::entsize(name.len(), value.len()))?;
    }
    if ip.aformat == ForkFormat::Extents && ip.anextents == 0 {
        // An attr fork with no blocks (as the kernel leaves some new
        // inodes) starts over as an empty short-form list.
        ip.aformat = ForkFormat::Local;
        ip.attr_fork = sf::encode(&[]);
    }
    match ip.aformat {
        ForkFormat::Local => sf_set(tp, ip, ns, name, value),
        ForkFormat::Extents | ForkFormat::Btree => tree_set(tp, ip, ns, name, value),
        ForkFormat::Dev | ForkFormat::MetaBtree => Err(bad_format(ip)),
    }
}

/// Removes attribute `name` in namespace `ns`. `Error::NoAttr` if absent.
pub fn remove(tp: &mut Trans<'_>, ip: &mut Inode, ns: Namespace, name: &[u8]) -> Result<()> {
    if ns == Namespace::Parent {
        return Err(Error::Invalid(
            "a parent pointer is removed by name and value".into(),
        ));
    }
    remove_in(tp, ip, ns, name, &[])
}

/// Removes the entry `same_key` finds (`value` matters for parent pointers).
fn remove_in(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    check_args(name, None)?;
    let missing = || Error::NoAttr(String::from_utf8_lossy(&super::full_name(ns, name)).into());
    if !ip.has_attr_fork() || (ip.aformat == ForkFormat::Extents && ip.anextents == 0) {
        return Err(missing());
    }
    match ip.aformat {
        ForkFormat::Local => {
            let mut ents = sf::decode(ip)?;
            let Some(i) = ents.iter().position(|e| same_sf(e, ns, name, value)) else {
                return Err(missing());
            };
            ents.remove(i);
            // On a parent-pointer filesystem the kernel keeps the empty
            // short-form fork (a name is about to come back, or the inode
            // is on its way out).
            if ents.is_empty() && ip.format != ForkFormat::Btree && !parent_fs(tp) {
                remove_fork(tp, ip);
            } else {
                ip.attr_fork = sf::encode(&ents);
            }
            Ok(())
        }
        ForkFormat::Extents | ForkFormat::Btree => {
            let (c, hit) = tree::find(tp, ip, ns, name, entry_hash(ns, name, value), value)?;
            let Some(i) = hit else {
                return Err(missing());
            };
            let mut ents = c.ents.clone();
            let old = ents.remove(i);
            if let LVal::Remote { blk, len } = old.val {
                remote::free_value(tp, ip, blk, len)?;
            }
            tree::store_leaf(tp, ip, c, ents)?;
            tree::collapse_root(tp, ip)?;
            leaf_to_sf(tp, ip)
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => Err(bad_format(ip)),
    }
}

fn bad_format(ip: &Inode) -> Error {
    Error::corrupt(
        "attribute fork",
        super::loc(ip.ino.0, 0),
        format!("{:?} format is not valid for an attribute fork", ip.aformat),
    )
}

/// Gives the inode an attr fork (an empty short-form list) placed as the
/// kernel places it for a first attribute needing `size` bytes.
fn add_fork(tp: &mut Trans<'_>, ip: &mut Inode, size: usize) -> Result<()> {
    let geo = tp.geo();
    let mut forkoff = match ip.format {
        ForkFormat::Dev => (sf::default_attroffset(geo, ip) >> 3) as u8,
        _ => match sf::bytesfit(geo, ip, size)? {
            0 => (sf::default_attroffset(geo, ip) >> 3) as u8,
            f => f,
        },
    };
    if !sf::data_fits(ip, forkoff) {
        if let Some(f) = sf::past_local_data(geo, ip) {
            forkoff = f;
        }
    }
    if !sf::data_fits(ip, forkoff) {
        if ip.format != ForkFormat::Extents {
            return Err(Error::Unsupported(format!(
                "inode {}: the data fork would have to leave the inode to make room for attributes",
                ip.ino.0
            )));
        }
        // Like the kernel: extents that no longer fit move to a btree.
        let recs = crate::bmap::extents(tp, ip, Fork::Data)?;
        sf::set_forkoff(ip, forkoff);
        ip.aformat = ForkFormat::Local;
        ip.attr_fork = sf::encode(&[]);
        crate::bmap::bmbt::create(tp, ip, Fork::Data, &recs)?;
    }
    if ip.format == ForkFormat::Btree {
        // The root's pointers move with the fork size.
        crate::bmap::set_forkoff(geo, ip, forkoff)?;
    } else {
        sf::set_forkoff(ip, forkoff);
    }
    ip.aformat = ForkFormat::Local;
    ip.anextents = 0;
    ip.attr_fork = sf::encode(&[]);
    Ok(())
}

/// Drops the (empty, blockless) attr fork: the data fork gets the whole
/// literal area back.
fn remove_fork(tp: &Trans<'_>, ip: &mut Inode) {
    ip.forkoff = 0;
    ip.aformat = ForkFormat::Extents;
    ip.anextents = 0;
    ip.attr_fork.clear();
    ip.data_fork.resize(Inode::literal_size(tp.geo()), 0);
}

fn sf_set(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    let mut ents = sf::decode(ip)?;
    ents.retain(|e| !same_sf(e, ns, name, value));
    if sf::entry_fits_sf(name.len(), value.len()) && ents.len() < 255 {
        let need = sf::totsize(&ents) + sf::entsize(name.len(), value.len());
        let forkoff = sf::bytesfit(tp.geo(), ip, need)?;
        if forkoff != 0 && sf::data_fits(ip, forkoff) {
            sf::set_forkoff(ip, forkoff);
            ents.push(Ent {
                ns,
                name: name.to_vec(),
                value: value.to_vec(),
            });
            ip.attr_fork = sf::encode(&ents);
            return Ok(());
        }
    }
    sf_to_leaf(tp, ip, &ents)?;
    tree_set(tp, ip, ns, name, value)
}

/// Moves a short-form list into a new leaf at attr-fork block 0.
fn sf_to_leaf(tp: &mut Trans<'_>, ip: &mut Inode, ents: &[Ent]) -> Result<()> {
    let geo = tp.geo();
    ip.attr_fork.clear();
    ip.aformat = ForkFormat::Extents;
    ip.anextents = 0;
    if !matches!(ip.format, ForkFormat::Dev | ForkFormat::Btree) {
        // Like the kernel, give the data fork back at least its default room.
        let dfl = (sf::default_attroffset(geo, ip) >> 3) as u8;
        if dfl > ip.forkoff {
            sf::set_forkoff(ip, dfl);
        }
    }
    let blk = fork::grow(tp, ip, 1)?;
    if blk != 0 {
        return Err(Error::Invalid(format!(
            "inode {}: first attr leaf landed at block {blk}",
            ip.ino.0
        )));
    }
    let mut lents: Vec<LEnt> = ents
        .iter()
        .map(|e| LEnt {
            hash: entry_hash(e.ns, &e.name, &e.value),
            ns: e.ns,
            name: e.name.clone(),
            val: LVal::Local(e.value.clone()),
        })
        .collect();
    lents.sort_by_key(|e| e.hash);
    let id = fork::new_da(tp, ip, 0, crate::attr::leaf::ATTR3_LEAF_MAGIC)?;
    blocks::encode_leaf(tp.buf_mut(id), &lents);
    Ok(())
}

fn tree_set(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    let hash = entry_hash(ns, name, value);
    let (c, hit) = tree::find(tp, ip, ns, name, hash, value)?;
    let mut ents = c.ents.clone();
    if let Some(i) = hit {
        if let LVal::Remote { blk, len } = ents.remove(i).val {
            remote::free_value(tp, ip, blk, len)?;
        }
    }
    let bsize = tp.geo().block_size as usize;
    let val = if is_local(bsize, name.len(), value.len()) {
        LVal::Local(value.to_vec())
    } else {
        LVal::Remote {
            blk: remote::write_value(tp, ip, value)?,
            len: value.len() as u32,
        }
    };
    let at = ents.partition_point(|e| e.hash <= hash);
    ents.insert(
        at,
        LEnt {
            hash,
            ns,
            name: name.to_vec(),
            val,
        },
    );
    tree::store_leaf(tp, ip, c, ents)
}

/// When block 0 is a leaf whose entries all fit the inode in short form,
/// turns it back into short form (or drops the fork when it is empty).
fn leaf_to_sf(tp: &mut Trans<'_>, ip: &mut Inode) -> Result<()> {
    let id = fork::read_da(tp, ip, 0)?;
    if blocks::is_node(tp.buf(id)) {
        return Ok(());
    }
    let (lents, _, _) = blocks::decode_leaf(ip.ino.0, 0, tp.buf(id))?;
    let mut ents = Vec::with_capacity(lents.len());
    for e in lents {
        match e.val {
            LVal::Local(v) if sf::entry_fits_sf(e.name.len(), v.len()) => ents.push(Ent {
                ns: e.ns,
                name: e.name,
                value: v,
            }),
            _ => return Ok(()),
        }
    }
    if ents.len() >= 255 {
        return Ok(());
    }
    if ents.is_empty() && ip.format != ForkFormat::Btree {
        fork::shrink(tp, ip, 0, 1)?;
        remove_fork(tp, ip);
        return Ok(());
    }
    let forkoff = sf::bytesfit(tp.geo(), ip, sf::totsize(&ents))?;
    if forkoff == 0 || !sf::data_fits(ip, forkoff) {
        return Ok(());
    }
    fork::shrink(tp, ip, 0, 1)?;
    if ip.format == ForkFormat::Btree {
        // The root's pointers move with the fork size.
        crate::bmap::set_forkoff(tp.geo(), ip, forkoff)?;
    } else {
        sf::set_forkoff(ip, forkoff);
    }
    ip.aformat = ForkFormat::Local;
    ip.anextents = 0;
    ip.attr_fork = sf::encode(&ents);
    Ok(())
}

/// Sets the on-disk attribute `name` of namespace `ns` on `ip` inside
/// `tp`, moving inline directory or symlink data out of the inode when
/// the attribute fork needs the room (the caller logs `ip`).
pub(crate) fn set_disk_in(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    ns: Namespace,
    n: &[u8],
    v: &[u8],
) -> Result<()> {
    match set(tp, ip, ns, n, v) {
        Err(Error::Unsupported(_)) if ip.format == ForkFormat::Local && !ip.has_attr_fork() => {
            // The inline data leaves the inode to make room, as the
            // kernel does: directories become a block, symlinks remote.
            match ip.file_type {
                crate::inode::FileType::Dir => crate::dir::write::make_room(tp, ip)?,
                crate::inode::FileType::Symlink => crate::symlink::symlink_to_remote(tp, ip)?,
                _ => {}
            }
            set(tp, ip, ns, n, v)
        }
        r => r,
    }
}

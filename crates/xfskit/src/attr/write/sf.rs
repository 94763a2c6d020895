//! Short-form attribute lists (in the inode) and where the attr fork
//! starts in the literal area.
//!
//! The list is rebuilt whole on every change: it is at most a few hundred
//! bytes. Decoding goes through the read code (`attr::shortform::parse`).

use super::Ent;
use crate::attr::shortform::{self, SF_ENTRY_HDR, SF_HDR};
use crate::attr::{FLAG_ROOT, FLAG_SECURE};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::inode::{ForkFormat, Inode};

/// Largest name or value length a short-form entry may have: one less
/// than a byte can count (the kernel refuses 255 and above).
pub(crate) const SF_ENTSIZE_MAX: usize = 255;

/// Size of the in-inode btree root header (level, numrecs).
const BMDR_HDR: usize = 4;
/// Size of one key plus one pointer of a bmbt root.
const BMDR_PAIR: usize = 16;
/// Pointers a data-fork btree root must be able to hold.
const MIN_DATA_PTRS: usize = 3;
/// Pointers an attr-fork btree root must be able to hold.
const MIN_ATTR_PTRS: usize = 2;
/// Size of one extent record.
const EXTENT_REC: usize = 16;

fn bmdr_space(nrecs: usize) -> usize {
    BMDR_HDR + nrecs * BMDR_PAIR
}

/// Size of a short-form entry for these lengths. Like the kernel, the
/// lengths are taken modulo 256 (callers check the limits first).
pub(crate) fn entsize(namelen: usize, valuelen: usize) -> usize {
    SF_ENTRY_HDR + (namelen & 0xff) + (valuelen & 0xff)
}

/// Total size of a short-form list holding `ents`.
pub(crate) fn totsize(ents: &[Ent]) -> usize {
    SF_HDR
        + ents
            .iter()
            .map(|e| entsize(e.name.len(), e.value.len()))
            .sum::<usize>()
}

/// True when `e` can be kept in short form at all.
pub(crate) fn entry_fits_sf(namelen: usize, valuelen: usize) -> bool {
    namelen < SF_ENTSIZE_MAX && valuelen < SF_ENTSIZE_MAX
}

/// Decodes the inode's short-form list. Entries the read code hides
/// (incomplete, parent pointers) make the list unchangeable for us.
pub(crate) fn decode(ip: &Inode) -> Result<Vec<Ent>> {
    let raw = shortform::parse(ip.ino.0, &ip.attr_fork)?;
    let count = usize::from(ip.attr_fork.get(shortform::SF_COUNT).copied().unwrap_or(0));
    if raw.len() != count {
        return Err(Error::Unsupported(format!(
            "inode {}: short-form attributes include hidden (incomplete or parent) entries",
            ip.ino.0
        )));
    }
    raw.into_iter()
        .map(|r| match r.value {
            crate::attr::ValueRef::Local(v) => Ok(Ent {
                ns: r.ns,
                name: r.name,
                value: v,
            }),
            crate::attr::ValueRef::Remote { .. } => {
                Err(Error::Invalid("remote value in a short-form list".into()))
            }
        })
        .collect()
}

/// Encodes a short-form list (header and entries; the caller checked
/// every length is below [`SF_ENTSIZE_MAX`] and the count below 256).
pub(crate) fn encode(ents: &[Ent]) -> Vec<u8> {
    let total = totsize(ents);
    let mut v = Vec::with_capacity(total);
    v.extend_from_slice(&(total as u16).to_be_bytes());
    v.push(ents.len() as u8);
    v.push(0);
    for e in ents {
        v.push(e.name.len() as u8);
        v.push(e.value.len() as u8);
        v.push(ns_flags(e.ns));
        v.extend_from_slice(&e.name);
        v.extend_from_slice(&e.value);
    }
    v
}

/// On-disk namespace flags of `ns`.
pub(crate) fn ns_flags(ns: crate::attr::Namespace) -> u8 {
    match ns {
        crate::attr::Namespace::User => 0,
        crate::attr::Namespace::Trusted => FLAG_ROOT,
        crate::attr::Namespace::Security => FLAG_SECURE,
        crate::attr::Namespace::Parent => crate::attr::FLAG_PARENT,
    }
}

/// Bytes of the literal area.
fn litino(geo: &Geometry) -> usize {
    Inode::literal_size(geo)
}

/// Where the kernel puts the attr fork by default (bytes from the start
/// of the literal area): for device inodes just after the device number,
/// otherwise a fixed place that depends on the inode size.
pub(crate) fn default_attroffset(geo: &Geometry, ip: &Inode) -> usize {
    if ip.format == ForkFormat::Dev {
        return 8;
    }
    if geo.inode_size == 256 {
        litino(geo) - bmdr_space(MIN_ATTR_PTRS)
    } else {
        bmdr_space(6 * MIN_ATTR_PTRS)
    }
}

/// Bytes the data fork needs in the literal area now.
fn data_fork_bytes(ip: &Inode) -> usize {
    match ip.format {
        ForkFormat::Local => ip.size as usize,
        ForkFormat::Extents => ip.nextents as usize * EXTENT_REC,
        ForkFormat::Dev => 8,
        ForkFormat::Btree | ForkFormat::MetaBtree => 0,
    }
}

/// The fork offset (in 8-byte units) that lets an attr fork of `bytes`
/// bytes live in the inode, or 0 when it cannot: the same choice the
/// kernel makes (attr2: leave the data fork what it needs, but at least
/// room for a small btree root, and give the attr fork at least room for
/// its own small btree root).
pub(crate) fn bytesfit(geo: &Geometry, ip: &Inode, bytes: usize) -> Result<u8> {
    let lit = litino(geo);
    if bytes > lit {
        return Ok(0);
    }
    let offset = (lit - bytes) >> 3;
    if ip.format == ForkFormat::Dev {
        let min = 1;
        return Ok(if offset >= min { min as u8 } else { 0 });
    }
    let cur_attr = if ip.forkoff != 0 {
        lit - usize::from(ip.forkoff) * 8
    } else {
        0
    };
    if bytes <= cur_attr {
        return Ok(ip.forkoff);
    }
    if !geo.features.attr2 {
        return Ok(0);
    }
    let mut dsize = data_fork_bytes(ip);
    match ip.format {
        // No attr fork yet and more extents than the default data area
        // holds: the data fork will become a btree, a small root is enough.
        ForkFormat::Extents if ip.forkoff == 0 && dsize > default_attroffset(geo, ip) => {
            dsize = bmdr_space(MIN_DATA_PTRS);
        }
        ForkFormat::Btree => {
            if ip.forkoff != 0 {
                return Ok(if offset < usize::from(ip.forkoff) {
                    0
                } else {
                    ip.forkoff
                });
            }
            // As the kernel: the data fork keeps room for its root as it is.
            dsize = crate::bmap::data_fork_min_bytes(ip);
        }
        _ => {}
    }
    let minforkoff = dsize.max(bmdr_space(MIN_DATA_PTRS)).div_ceil(8);
    let maxforkoff = (lit - bmdr_space(MIN_ATTR_PTRS)) >> 3;
    Ok(if offset >= maxforkoff {
        maxforkoff as u8
    } else if offset >= minforkoff {
        offset as u8
    } else {
        0
    })
}

/// A fork offset for an inode whose in-inode (local) data is larger than
/// the default data area while the attribute will not fit in short form:
/// just past the data, if that leaves the attr fork room for a small
/// btree root. (The kernel moves such data out of the inode instead.)
pub(crate) fn past_local_data(geo: &Geometry, ip: &Inode) -> Option<u8> {
    if ip.format != ForkFormat::Local {
        return None;
    }
    let minforkoff = data_fork_bytes(ip)
        .max(bmdr_space(MIN_DATA_PTRS))
        .div_ceil(8);
    let maxforkoff = (litino(geo) - bmdr_space(MIN_ATTR_PTRS)) >> 3;
    (minforkoff <= maxforkoff).then_some(minforkoff as u8)
}

/// Moves the fork boundary to `forkoff` (8-byte units; nonzero), keeping
/// the data fork's bytes. The caller made sure the data fork still fits.
pub(crate) fn set_forkoff(ip: &mut Inode, forkoff: u8) {
    ip.forkoff = forkoff;
    ip.data_fork.resize(usize::from(forkoff) * 8, 0);
}

/// Checks the data fork's contents fit below fork offset `forkoff`.
pub(crate) fn data_fits(ip: &Inode, forkoff: u8) -> bool {
    match ip.format {
        ForkFormat::Btree => {
            forkoff == ip.forkoff
                || crate::bmap::data_fork_min_bytes(ip) <= usize::from(forkoff) * 8
        }
        _ => data_fork_bytes(ip) <= usize::from(forkoff) * 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::Namespace;

    fn ent(ns: Namespace, n: &[u8], v: &[u8]) -> Ent {
        Ent {
            ns,
            name: n.to_vec(),
            value: v.to_vec(),
        }
    }

    #[test]
    fn encode_parses_back() {
        let ents = vec![
            ent(Namespace::User, b"a", b"1"),
            ent(Namespace::Trusted, b"bb", b""),
            ent(Namespace::Security, b"selinux", &[7u8; 254]),
        ];
        let mut raw = encode(&ents);
        assert_eq!(raw.len(), totsize(&ents));
        raw.resize(raw.len() + 20, 0);
        let back = shortform::parse(1, &raw).unwrap();
        assert_eq!(back.len(), 3);
        for (b, e) in back.iter().zip(&ents) {
            assert_eq!((b.ns, &b.name), (e.ns, &e.name));
            assert!(matches!(&b.value, crate::attr::ValueRef::Local(v) if *v == e.value));
        }
    }

    #[test]
    fn sizes_wrap_like_the_kernel() {
        assert_eq!(entsize(3, 10), 16);
        assert_eq!(entsize(1, 256), 4);
        assert!(entry_fits_sf(254, 254));
        assert!(!entry_fits_sf(255, 1));
    }
}

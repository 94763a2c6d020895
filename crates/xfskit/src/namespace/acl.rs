//! POSIX ACLs: Linux presents them as `system.posix_acl_access` and
//! `system.posix_acl_default` in the VFS xattr format (little-endian);
//! XFS stores them as `trusted.SGI_ACL_FILE` / `trusted.SGI_ACL_DEFAULT`
//! in its own big-endian format (`xfs_acl`: a count, then 12-byte entries
//! of tag, id, permissions and padding).

use crate::error::{Error, Result};

/// VFS xattr format version.
const VFS_VERSION: u32 = 2;
/// Tags whose entry carries an id (named user, named group).
const ACL_USER: u16 = 0x02;
const ACL_GROUP: u16 = 0x08;
/// The id of entries that have none.
const UNDEFINED_ID: u32 = u32::MAX;
/// Most entries XFS accepts in one ACL (v5 limit derived from the xattr
/// value size); anything larger is refused.
const MAX_ENTRIES: usize = 5461;

/// The XFS on-disk name for a VFS ACL xattr name, if `name` is one.
pub fn xfs_acl_name(name: &[u8]) -> Option<&'static [u8]> {
    match name {
        b"system.posix_acl_access" => Some(b"SGI_ACL_FILE"),
        b"system.posix_acl_default" => Some(b"SGI_ACL_DEFAULT"),
        _ => None,
    }
}

/// Converts a VFS-format ACL value into XFS's on-disk format.
pub fn acl_from_vfs(v: &[u8]) -> Result<Vec<u8>> {
    let bad = |d: &str| Error::Invalid(format!("POSIX ACL value: {d}"));
    if v.len() < 4 || (v.len() - 4) % 8 != 0 {
        return Err(bad("length is not a header plus 8-byte entries"));
    }
    if u32::from_le_bytes([v[0], v[1], v[2], v[3]]) != VFS_VERSION {
        return Err(bad("unknown version"));
    }
    let n = (v.len() - 4) / 8;
    if n > MAX_ENTRIES {
        return Err(bad("too many entries"));
    }
    let mut out = Vec::with_capacity(4 + n * 12);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for e in v[4..].chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let id = if tag == ACL_USER || tag == ACL_GROUP {
            id
        } else {
            UNDEFINED_ID
        };
        out.extend_from_slice(&u32::from(tag).to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&perm.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
    }
    Ok(out)
}

/// Converts XFS's on-disk ACL format into the VFS format.
pub fn acl_to_vfs(d: &[u8]) -> Result<Vec<u8>> {
    let bad = |s: &str| Error::Invalid(format!("XFS ACL value: {s}"));
    if d.len() < 4 {
        return Err(bad("too short"));
    }
    let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    if n > MAX_ENTRIES || d.len() != 4 + n * 12 {
        return Err(bad("count does not match the length"));
    }
    let mut out = Vec::with_capacity(4 + n * 8);
    out.extend_from_slice(&VFS_VERSION.to_le_bytes());
    for e in d[4..].chunks_exact(12) {
        let tag = u32::from_be_bytes([e[0], e[1], e[2], e[3]]) as u16;
        let id = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
        let perm = u16::from_be_bytes([e[8], e[9]]);
        let id = if tag == ACL_USER || tag == ACL_GROUP {
            id
        } else {
            UNDEFINED_ID
        };
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        // user::rw- user:1000:r-- group::r-- mask::r-- other::---
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 6u16, u32::MAX),
            (2, 4, 1000),
            (4, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        let d = acl_from_vfs(&v).unwrap();
        assert_eq!(d.len(), 4 + 5 * 12);
        assert_eq!(&d[..4], &5u32.to_be_bytes());
        assert_eq!(&d[16..20], &2u32.to_be_bytes());
        assert_eq!(&d[20..24], &1000u32.to_be_bytes());
        assert_eq!(acl_to_vfs(&d).unwrap(), v);
        assert!(acl_from_vfs(&v[..7]).is_err());
    }
}

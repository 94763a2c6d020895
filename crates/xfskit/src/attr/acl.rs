//! POSIX ACLs: from XFS's on-disk encoding to the Linux xattr encoding.
//!
//! XFS keeps a file's access ACL in the trusted attribute `SGI_ACL_FILE`
//! and a directory's default ACL in `SGI_ACL_DEFAULT`. The value is a
//! big-endian `xfs_acl`: a 32-bit entry count, then per entry a 32-bit tag,
//! a 32-bit id, a 16-bit permission set and 16 bits of padding.
//!
//! Linux shows ACLs to userspace as `system.posix_acl_access` and
//! `system.posix_acl_default`, in the little-endian `posix_acl_xattr`
//! encoding: a 32-bit version (2), then per entry a 16-bit tag, a 16-bit
//! permission set and a 32-bit id. Tag values are the same in both. Only
//! named-user and named-group entries carry an id; the others show the
//! "undefined" id (all ones), whatever the disk holds.

use super::Namespace;
use crate::bytes::{be16, be32};
use crate::error::{Error, Location, Result};

/// Trusted attribute name of the access ACL.
pub const SGI_ACL_FILE: &[u8] = b"SGI_ACL_FILE";
/// Trusted attribute name of the default ACL (directories).
pub const SGI_ACL_DEFAULT: &[u8] = b"SGI_ACL_DEFAULT";
/// Linux name of the access ACL.
pub const POSIX_ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// Linux name of the default ACL.
pub const POSIX_ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Version word of the Linux encoding.
const XATTR_VERSION: u32 = 2;
/// Bytes of the on-disk header (entry count).
const DISK_HDR: usize = 4;
/// Bytes of one on-disk entry.
const DISK_ENTRY: usize = 12;
/// Largest attribute value, hence the entry limit on a v5 filesystem.
const VALUE_MAX: usize = 65536;
/// The id shown for entries that have none.
const UNDEFINED_ID: u32 = u32::MAX;

/// Entry tags (identical on disk and in the Linux encoding).
const TAG_USER_OBJ: u32 = 0x01;
const TAG_USER: u32 = 0x02;
const TAG_GROUP_OBJ: u32 = 0x04;
const TAG_GROUP: u32 = 0x08;
const TAG_MASK: u32 = 0x10;
const TAG_OTHER: u32 = 0x20;

/// The Linux name an attribute stands for, if it is one of the two ACLs.
pub fn linux_name(ns: Namespace, name: &[u8]) -> Option<&'static [u8]> {
    match (ns, name) {
        (Namespace::Trusted, SGI_ACL_FILE) => Some(POSIX_ACL_ACCESS),
        (Namespace::Trusted, SGI_ACL_DEFAULT) => Some(POSIX_ACL_DEFAULT),
        _ => None,
    }
}

/// The trusted attribute that holds the ACL called `linux` by Linux.
pub fn disk_name(linux: &[u8]) -> Option<&'static [u8]> {
    match linux {
        POSIX_ACL_ACCESS => Some(SGI_ACL_FILE),
        POSIX_ACL_DEFAULT => Some(SGI_ACL_DEFAULT),
        _ => None,
    }
}

/// Converts the on-disk ACL `raw` of inode `ino` to the Linux xattr value.
/// The value must hold exactly the entries its count announces, and every
/// tag must be known, as the kernel requires.
pub fn to_linux(ino: u64, raw: &[u8]) -> Result<Vec<u8>> {
    let bad = |d: String| Error::corrupt("ACL", Location::Inode(ino), d);
    if raw.len() < DISK_HDR {
        return Err(bad(format!("value of {} bytes", raw.len())));
    }
    let count = be32(raw, 0) as usize;
    let max = (VALUE_MAX - DISK_HDR) / DISK_ENTRY;
    if count > max || DISK_HDR + count * DISK_ENTRY != raw.len() {
        return Err(bad(format!(
            "{count} entries in a value of {} bytes",
            raw.len()
        )));
    }
    let mut out = Vec::with_capacity(4 + count * 8);
    out.extend_from_slice(&XATTR_VERSION.to_le_bytes());
    for e in raw[DISK_HDR..].chunks_exact(DISK_ENTRY) {
        let tag = be32(e, 0);
        let id = match tag {
            TAG_USER | TAG_GROUP => be32(e, 4),
            TAG_USER_OBJ | TAG_GROUP_OBJ | TAG_MASK | TAG_OTHER => UNDEFINED_ID,
            _ => return Err(bad(format!("unknown entry tag {tag:#x}"))),
        };
        out.extend_from_slice(&(tag as u16).to_le_bytes());
        out.extend_from_slice(&be16(e, 8).to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

/// Converts a Linux xattr ACL value into XFS's on-disk encoding (for
/// writing `system.posix_acl_*`). Ids of entries that have none are
/// stored as the undefined id, as the kernel stores them.
pub fn from_linux(v: &[u8]) -> Result<Vec<u8>> {
    let bad = |d: &str| Error::Invalid(format!("POSIX ACL value: {d}"));
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) {
        return Err(bad("length is not a header plus 8-byte entries"));
    }
    if u32::from_le_bytes([v[0], v[1], v[2], v[3]]) != XATTR_VERSION {
        return Err(bad("unknown version"));
    }
    let n = (v.len() - 4) / 8;
    if DISK_HDR + n * DISK_ENTRY > VALUE_MAX {
        return Err(bad("too many entries"));
    }
    let mut out = Vec::with_capacity(DISK_HDR + n * DISK_ENTRY);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for e in v[4..].chunks_exact(8) {
        let tag = u32::from(u16::from_le_bytes([e[0], e[1]]));
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = match tag {
            TAG_USER | TAG_GROUP => u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            TAG_USER_OBJ | TAG_GROUP_OBJ | TAG_MASK | TAG_OTHER => UNDEFINED_ID,
            _ => return Err(bad(&format!("unknown entry tag {tag:#x}"))),
        };
        out.extend_from_slice(&tag.to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&perm.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn linux_round_trip() {
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
        let d = super::from_linux(&v).unwrap();
        assert_eq!(d.len(), 4 + 5 * 12);
        assert_eq!(&d[20..24], &1000u32.to_be_bytes());
        assert_eq!(super::to_linux(1, &d).unwrap(), v);
        assert!(super::from_linux(&v[..7]).is_err());
    }

    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Values read from a kernel mount (getfattr -e hex) of a file after
    /// `setfacl -m u:1234:r-x,g:55:rw-`.
    #[test]
    fn matches_the_kernel() {
        let disk = hex(concat!(
            "00000006",
            "00000001ffffffff00060000",
            "00000002000004d200050000",
            "00000004ffffffff00040000",
            "000000080000003700060000",
            "00000010ffffffff00070000",
            "00000020ffffffff00040000"
        ));
        let linux = hex(concat!(
            "02000000",
            "01000600ffffffff",
            "02000500d2040000",
            "04000400ffffffff",
            "0800060037000000",
            "10000700ffffffff",
            "20000400ffffffff"
        ));
        assert_eq!(to_linux(5, &disk).unwrap(), linux);
    }

    #[test]
    fn ids_of_unnamed_entries_are_undefined() {
        let mut disk = vec![0, 0, 0, 1];
        disk.extend_from_slice(&[0, 0, 0, 0x20, 0, 0, 0, 9, 0, 5, 0, 0]);
        assert_eq!(
            to_linux(1, &disk).unwrap(),
            vec![2, 0, 0, 0, 0x20, 0, 5, 0, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn bad_values_are_corrupt() {
        assert!(to_linux(1, &[0, 0]).is_err());
        // Count larger than the value.
        assert!(to_linux(1, &[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 7, 0, 0]).is_err());
        // Trailing bytes.
        assert!(to_linux(1, &[0, 0, 0, 0, 1]).is_err());
        // Unknown tag.
        assert!(to_linux(1, &[0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 7, 0, 0]).is_err());
        // A huge count is refused before any allocation.
        assert!(to_linux(1, &[0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(to_linux(1, &[0, 0, 0, 0]).unwrap(), vec![2, 0, 0, 0]);
    }

    #[test]
    fn names() {
        assert_eq!(
            linux_name(Namespace::Trusted, b"SGI_ACL_FILE"),
            Some(POSIX_ACL_ACCESS)
        );
        assert_eq!(linux_name(Namespace::User, b"SGI_ACL_FILE"), None);
        assert_eq!(
            disk_name(b"system.posix_acl_default"),
            Some(SGI_ACL_DEFAULT)
        );
        assert_eq!(disk_name(b"system.other"), None);
    }
}

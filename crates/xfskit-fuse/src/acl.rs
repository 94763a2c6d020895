//! POSIX ACLs on a read-write mount: what the kernel's XFS does with them
//! that FUSE leaves to the filesystem.
//!
//! With FUSE_POSIX_ACL the kernel checks permissions with the ACLs it
//! reads through getxattr, but a filesystem must itself (as `posix_acl.c`
//! does for kernel XFS): give a new inode the permissions its parent's
//! default ACL allows, masked by the mode asked for (the umask only when
//! the parent has no default ACL: the mount asks FUSE_DONT_MASK), keep an
//! access ACL and the group bits of the mode in step on chmod (the group
//! bits are the mask entry's), and on setting an access ACL set the mode
//! from it, storing no ACL when the mode says everything it says.
//!
//! ACLs here are in the Linux xattr encoding (`posix_acl_xattr`): a
//! little-endian version 2, then per entry a 16-bit tag, a 16-bit
//! permission set and a 32-bit id.

/// Entry tags.
pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

/// Version word of the encoding.
const VERSION: u32 = 2;

/// One ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// Decodes a Linux ACL xattr value; None when it is malformed.
pub fn parse(v: &[u8]) -> Option<Vec<Entry>> {
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) {
        return None;
    }
    if u32::from_le_bytes(v[0..4].try_into().ok()?) != VERSION {
        return None;
    }
    Some(
        v[4..]
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// Encodes entries as a Linux ACL xattr value.
pub fn encode(acl: &[Entry]) -> Vec<u8> {
    let mut v = VERSION.to_le_bytes().to_vec();
    for e in acl {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&e.id.to_le_bytes());
    }
    v
}

/// The permission bits (0o777) an access ACL stands for, and whether the
/// mode says all of it (only owner, group and other entries).
pub fn mode_of(acl: &[Entry]) -> (u16, bool) {
    let mut mode = 0u16;
    let mut group = 0u16;
    let mut mask = None;
    let mut equiv = true;
    for e in acl {
        let p = e.perm & 7;
        match e.tag {
            USER_OBJ => mode |= p << 6,
            GROUP_OBJ => group = p,
            OTHER => mode |= p,
            MASK => {
                mask = Some(p);
                equiv = false;
            }
            _ => equiv = false,
        }
    }
    (mode | (mask.unwrap_or(group) << 3), equiv)
}

/// The access ACL after chmod to `mode` (posix_acl_chmod): owner, other,
/// and the mask (or the owning group without a mask) take the new bits.
pub fn chmod(acl: &mut [Entry], mode: u16) {
    let has_mask = acl.iter().any(|e| e.tag == MASK);
    for e in acl.iter_mut() {
        match e.tag {
            USER_OBJ => e.perm = (mode >> 6) & 7,
            MASK => e.perm = (mode >> 3) & 7,
            GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
            OTHER => e.perm = mode & 7,
            _ => {}
        }
    }
}

/// A new inode's access ACL from its parent's default ACL and the mode
/// asked for (posix_acl_create_masq): returns the new permission bits and
/// the access ACL to store, or None when the mode says all of it.
pub fn inherit(default: &[Entry], mode: u16) -> (u16, Option<Vec<Entry>>) {
    let mut acl = default.to_vec();
    let mut m = mode & 0o777;
    let mut equiv = true;
    let mut group_obj = None;
    let mut mask_obj = None;
    for (i, e) in acl.iter_mut().enumerate() {
        match e.tag {
            USER_OBJ => {
                e.perm &= (m >> 6) & 7;
                m &= (e.perm << 6) | 0o077;
            }
            USER | GROUP => equiv = false,
            GROUP_OBJ => group_obj = Some(i),
            OTHER => {
                e.perm &= m & 7;
                m &= e.perm | 0o770;
            }
            MASK => {
                mask_obj = Some(i);
                equiv = false;
            }
            _ => {}
        }
    }
    if let Some(i) = mask_obj.or(group_obj) {
        acl[i].perm &= (m >> 3) & 7;
        m &= (acl[i].perm << 3) | 0o707;
    }
    (m, (!equiv).then_some(acl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    #[test]
    fn round_trip() {
        let a = vec![
            e(USER_OBJ, 6, u32::MAX),
            e(USER, 4, 1000),
            e(OTHER, 0, u32::MAX),
        ];
        assert_eq!(parse(&encode(&a)).unwrap(), a);
        assert!(parse(b"\x02\x00\x00\x00\x01").is_none());
    }

    #[test]
    fn modes() {
        let plain = [e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 1, 0)];
        assert_eq!(mode_of(&plain), (0o751, true));
        let masked = [
            e(USER_OBJ, 6, 0),
            e(USER, 7, 1000),
            e(GROUP_OBJ, 4, 0),
            e(MASK, 6, 0),
            e(OTHER, 0, 0),
        ];
        assert_eq!(mode_of(&masked), (0o660, false));
        let mut m = masked.to_vec();
        chmod(&mut m, 0o640);
        assert_eq!(m[3].perm, 4);
        assert_eq!(m[2].perm, 4, "the owning group stays when a mask exists");
        assert_eq!(m[1].perm, 7, "named entries stay");
    }

    #[test]
    fn inheritance_masks_by_the_mode() {
        let def = [
            e(USER_OBJ, 7, 0),
            e(USER, 7, 1000),
            e(GROUP_OBJ, 5, 0),
            e(MASK, 7, 0),
            e(OTHER, 5, 0),
        ];
        // open(O_CREAT, 0666) under it: no execute anywhere, mask rw.
        let (mode, acl) = inherit(&def, 0o666);
        assert_eq!(mode, 0o664);
        let acl = acl.unwrap();
        assert_eq!(acl[3].perm, 6);
        assert_eq!(
            acl[1].perm, 7,
            "named entries are limited by the mask, not changed"
        );
        // Only the three base entries: no ACL is stored.
        let base = [e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)];
        assert_eq!(inherit(&base, 0o777), (0o750, None));
    }
}

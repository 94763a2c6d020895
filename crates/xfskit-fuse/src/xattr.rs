//! Extended-attribute replies: name translation, the size-probe protocol
//! and the list format.
//!
//! POSIX ACLs are shown as the kernel's XFS shows them: an on-disk
//! `trusted.SGI_ACL_FILE` / `trusted.SGI_ACL_DEFAULT` is listed as
//! `system.posix_acl_access` / `system.posix_acl_default` (to everyone, with
//! the value converted to the Linux encoding), followed by the trusted name
//! itself for privileged callers.

use crate::errno::to_errno;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo, ReplyXattr};
use xfskit::attr::{acl, full_name, Namespace, XattrName};
use xfskit::inode::Inode;

/// Answers a getxattr/listxattr request for `data` with a caller buffer of
/// `size` bytes: size 0 asks for the needed length; a buffer that is too
/// small gets ERANGE.
pub fn reply_sized(reply: ReplyXattr, size: u32, data: &[u8]) {
    match sized_answer(size, data.len()) {
        Answer::Size(n) => reply.size(n),
        Answer::Data => reply.data(data),
        Answer::Err(e) => reply.error(e),
    }
}

/// What to send for a request of `size` bytes when the answer is `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Only the needed length.
    Size(u32),
    /// The bytes themselves.
    Data,
    /// An error.
    Err(Errno),
}

/// The size-probe rules of getxattr(2) and listxattr(2).
pub fn sized_answer(size: u32, len: usize) -> Answer {
    let Ok(len32) = u32::try_from(len) else {
        return Answer::Err(Errno::E2BIG);
    };
    if size == 0 {
        Answer::Size(len32)
    } else if len32 > size {
        Answer::Err(Errno::ERANGE)
    } else {
        Answer::Data
    }
}

/// True when a caller with user id `uid` may see names in `ns` (the kernel
/// shows "trusted." only to privileged callers).
pub fn visible_to(ns: Namespace, uid: u32) -> bool {
    ns != Namespace::Trusted || uid == 0
}

/// The listxattr(2) buffer: every visible full name, each NUL-terminated.
pub fn name_list(attrs: &[XattrName], uid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for a in attrs {
        if let Some(linux) = acl::linux_name(a.ns, &a.name) {
            out.extend_from_slice(linux);
            out.push(0);
        }
        if visible_to(a.ns, uid) {
            out.extend_from_slice(&full_name(a.ns, &a.name));
            out.push(0);
        }
    }
    out
}

impl XfsFuse {
    /// Runs `f` on the inode of `node`. On a read-write mount the engine
    /// holds the inode's lock meanwhile, so that a reader of its attribute
    /// fork never sees a transaction's change halfway (a set or remove
    /// turning the fork from short form into a leaf block or back: the
    /// inode read before, the blocks after, gave "bad magic" on a block
    /// the change had just freed). Gone: ENOENT.
    pub(crate) fn with_inode<T>(
        &self,
        node: INodeNo,
        f: impl FnOnce(&Inode) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        if !self.writable {
            return f(&*self.inode(node)?);
        }
        match self.fs.with_inode(self.ino(node), f) {
            Ok(Some(r)) => r,
            Ok(None) => Err(Errno::ENOENT),
            Err(e) => Err(to_errno(&e)),
        }
    }

    /// The value of xattr `name` of `node` as a caller with user id `uid`
    /// may see it (ACLs in the Linux encoding; hidden names: ENODATA).
    pub(crate) fn xattr_value(
        &self,
        uid: u32,
        node: INodeNo,
        name: &[u8],
    ) -> Result<Vec<u8>, Errno> {
        if let Some(disk) = acl::disk_name(name) {
            return self.with_inode(node, |i| {
                let raw = xfskit::attr::get(self.fs, i, Namespace::Trusted, disk)
                    .map_err(|e| to_errno(&e))?
                    .ok_or(Errno::ENODATA)?;
                acl::to_linux(i.ino.0, &raw).map_err(|e| to_errno(&e))
            });
        }
        let (ns, short) = xfskit::attr::parse_full_name(name).ok_or(Errno::ENODATA)?;
        if !visible_to(ns, uid) {
            return Err(Errno::ENODATA);
        }
        self.with_inode(node, |i| {
            xfskit::attr::get(self.fs, i, ns, short)
                .map_err(|e| to_errno(&e))?
                .ok_or(Errno::ENODATA)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_probe() {
        assert_eq!(sized_answer(0, 5), Answer::Size(5));
        assert_eq!(sized_answer(4, 5), Answer::Err(Errno::ERANGE));
        assert_eq!(sized_answer(5, 5), Answer::Data);
        assert_eq!(sized_answer(100, 0), Answer::Data);
    }

    #[test]
    fn list_hides_trusted_from_users() {
        let a = vec![
            XattrName {
                ns: Namespace::User,
                name: b"a".to_vec(),
                value_len: 0,
            },
            XattrName {
                ns: Namespace::Trusted,
                name: b"t".to_vec(),
                value_len: 1,
            },
        ];
        assert_eq!(name_list(&a, 0), b"user.a\0trusted.t\0".to_vec());
        assert_eq!(name_list(&a, 1000), b"user.a\0".to_vec());
    }

    #[test]
    fn acls_are_listed_under_their_linux_names() {
        let a = vec![
            XattrName {
                ns: Namespace::Trusted,
                name: b"SGI_ACL_FILE".to_vec(),
                value_len: 28,
            },
            XattrName {
                ns: Namespace::Trusted,
                name: b"SGI_ACL_DEFAULT".to_vec(),
                value_len: 28,
            },
        ];
        assert_eq!(
            name_list(&a, 0),
            b"system.posix_acl_access\0trusted.SGI_ACL_FILE\0\
              system.posix_acl_default\0trusted.SGI_ACL_DEFAULT\0"
                .to_vec()
        );
        assert_eq!(
            name_list(&a, 1000),
            b"system.posix_acl_access\0system.posix_acl_default\0".to_vec()
        );
    }
}

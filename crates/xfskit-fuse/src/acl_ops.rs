//! The ACL duties of a read-write mount ([`crate::acl`] has the rules):
//! inheritance from a parent's default ACL at create, an access ACL kept
//! in step with chmod, and the mode set from an access ACL when one is
//! set.

use crate::acl::{self, Entry};
use crate::errno::to_errno;
use crate::names::Caller;
use crate::ops::XfsFuse;
use fuser::Errno;
use xfskit::attr::acl::{
    to_linux, POSIX_ACL_ACCESS, POSIX_ACL_DEFAULT, SGI_ACL_DEFAULT, SGI_ACL_FILE,
};
use xfskit::attr::Namespace;
use xfskit::inode::Inode;
use xfskit::namespace::AttrChange;
use xfskit::Ino;

impl XfsFuse {
    /// The ACL stored on `ip` under the trusted name `disk`, if any.
    fn stored_acl(&self, ip: &Inode, disk: &[u8]) -> Result<Option<Vec<Entry>>, Errno> {
        let Some(raw) =
            xfskit::attr::get(self.fs, ip, Namespace::Trusted, disk).map_err(|e| to_errno(&e))?
        else {
            return Ok(None);
        };
        let linux = to_linux(ip.ino.0, &raw).map_err(|e| to_errno(&e))?;
        acl::parse(&linux).map(Some).ok_or(Errno::EIO)
    }

    /// The default ACL of directory `dir`, if it has one.
    pub(crate) fn default_acl(&self, dir: &Inode) -> Result<Option<Vec<Entry>>, Errno> {
        self.stored_acl(dir, SGI_ACL_DEFAULT)
    }

    /// Gives new inode `ino`, made with permission bits `mode` asked for
    /// under a parent whose default ACL is `def`, the ACLs it inherits:
    /// the access ACL unless the mode says all of it, and the default ACL
    /// itself for a directory.
    pub(crate) fn store_inherited(
        &self,
        ino: Ino,
        def: &[Entry],
        mode: u16,
        is_dir: bool,
    ) -> Result<(), Errno> {
        let (_, access) = acl::inherit(def, mode);
        if let Some(a) = access {
            self.fs
                .set_xattr(ino, POSIX_ACL_ACCESS, &acl::encode(&a))
                .map_err(|e| to_errno(&e))?;
        }
        if is_dir {
            self.fs
                .set_xattr(ino, POSIX_ACL_DEFAULT, &acl::encode(def))
                .map_err(|e| to_errno(&e))?;
        }
        Ok(())
    }

    /// After a chmod of `ino` to `mode`: its access ACL, if any, takes the
    /// new owner, group (mask) and other bits.
    pub(crate) fn chmod_acl(&self, ino: Ino, mode: u16) -> Result<(), Errno> {
        let ip = self.fs.inode(ino).map_err(|e| to_errno(&e))?;
        let Some(mut a) = self.stored_acl(&ip, SGI_ACL_FILE)? else {
            return Ok(());
        };
        acl::chmod(&mut a, mode);
        self.fs
            .set_xattr(ino, POSIX_ACL_ACCESS, &acl::encode(&a))
            .map_err(|e| to_errno(&e))
    }

    /// setxattr of `system.posix_acl_access` by `who`: the mode follows
    /// the ACL, and an ACL the mode says all of is not stored (an old one
    /// goes). Set-group-id goes unless `who` is in the file's group or has
    /// CAP_FSETID (as the kernel's ACL update does; a chmod gets the same
    /// rule from the kernel itself). A stored ACL and the mode are one
    /// transaction: an ACL there is no room for leaves the mode as it was.
    pub(crate) fn set_access_acl(&self, who: Caller, ino: Ino, value: &[u8]) -> Result<(), Errno> {
        let a = acl::parse(value).ok_or(Errno::EINVAL)?;
        let ip = self.fs.inode(ino).map_err(|e| to_errno(&e))?;
        let (perm, equiv) = acl::mode_of(&a);
        let mut mode = (ip.mode & 0o7000) | perm;
        if mode & 0o2000 != 0 && !who.in_group_or_fsetid(ip.gid) {
            mode &= !0o2000;
        }
        if !equiv {
            return self
                .fs
                .set_xattr_mode(ino, POSIX_ACL_ACCESS, value, mode)
                .map_err(|e| to_errno(&e));
        }
        match self.fs.remove_xattr(ino, POSIX_ACL_ACCESS) {
            Ok(()) | Err(xfskit::Error::NoAttr(_)) => {}
            Err(e) => return Err(to_errno(&e)),
        }
        let change = AttrChange {
            mode: Some(mode),
            ..Default::default()
        };
        self.fs
            .change_attrs(ino, &change)
            .map(drop)
            .map_err(|e| to_errno(&e))
    }
}

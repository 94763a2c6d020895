//! Extended attributes and inode attributes (owner, mode, times).

use super::Meta;
use crate::attr::acl::{disk_name as xfs_acl_name, from_linux as acl_from_vfs};
use crate::attr::{parse_full_name, Namespace};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;

/// Longest attribute name XFS stores.
const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value XFS stores.
const XATTR_SIZE_MAX: usize = 65536;

/// Splits a Linux xattr name into the namespace and on-disk name, and
/// converts ACL values to the on-disk format.
fn disk_name(full: &[u8], value: Option<&[u8]>) -> Result<(Namespace, Vec<u8>, Option<Vec<u8>>)> {
    if let Some(n) = xfs_acl_name(full) {
        let v = value.map(acl_from_vfs).transpose()?;
        return Ok((Namespace::Trusted, n.to_vec(), v));
    }
    let (ns, name) = parse_full_name(full).ok_or_else(|| {
        Error::Unsupported(format!(
            "xattr namespace of {:?}",
            String::from_utf8_lossy(full)
        ))
    })?;
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Error::Invalid(format!(
            "xattr name of {} bytes: {:?}",
            name.len(),
            String::from_utf8_lossy(&full[..full.len().min(80)])
        )));
    }
    Ok((ns, name.to_vec(), value.map(|v| v.to_vec())))
}

impl Fs {
    /// Sets extended attribute `name` ("user.x", "trusted.x",
    /// "security.x", "system.posix_acl_access"/"_default") on `ino`.
    pub fn set_xattr(&self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()> {
        self.set_xattr_opt(ino, name, value, true)
    }

    /// [`Fs::set_xattr`] that leaves ctime alone when `touch` is false.
    pub fn set_xattr_opt(&self, ino: Ino, name: &[u8], value: &[u8], touch: bool) -> Result<()> {
        self.set_xattr_with(ino, name, value, None, touch)
    }

    /// [`Fs::set_xattr`] that also sets the permission, set-id and sticky
    /// bits of `ino` to `mode`, in the same transaction: an access ACL and
    /// the mode it implies, which a refused write (no room for the ACL)
    /// leaves both as they were.
    pub fn set_xattr_mode(&self, ino: Ino, name: &[u8], value: &[u8], mode: u16) -> Result<()> {
        self.set_xattr_with(ino, name, value, Some(mode), true)
    }

    fn set_xattr_with(
        &self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        mode: Option<u16>,
        touch: bool,
    ) -> Result<()> {
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_change(&ip, "setting an xattr")?;
        set_xattr_in(&mut tp, &mut ip, name, value)?;
        if let Some(m) = mode {
            ip.mode = (ip.mode & !0o7777) | (m & 0o7777);
        }
        if touch {
            self.touch_change(&mut ip, now)?;
        }
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Removes extended attribute `name` from `ino`.
    pub fn remove_xattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        let (ns, n, _) = disk_name(name, None)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_change(&ip, "removing an xattr")?;
        crate::attr::write::remove(&mut tp, &mut ip, ns, &n)?;
        crate::symlink::symlink_to_local(&mut tp, &mut ip)?;
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Sets permissions, owner and all four times of `ino` exactly (the
    /// change counter still follows the lazy rule).
    pub fn set_meta(&self, ino: Ino, meta: &Meta) -> Result<()> {
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        ip.mode = (ip.mode & !0o7777) | (meta.mode & 0o7777);
        ip.uid = meta.uid;
        ip.gid = meta.gid;
        ip.atime = meta.atime;
        ip.mtime = meta.mtime;
        ip.crtime = meta.crtime;
        self.touch_change(&mut ip, meta.ctime)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Changes the permission bits of `ino`.
    pub fn chmod(&self, ino: Ino, mode: u16) -> Result<()> {
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_change(&ip, "changing the mode")?;
        ip.mode = (ip.mode & !0o7777) | (mode & 0o7777);
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Changes the owner and group of `ino`.
    pub fn chown(&self, ino: Ino, uid: u32, gid: u32) -> Result<()> {
        self.quota_prepare_owner(ino, Some(uid), Some(gid), None)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_change(&ip, "changing the owner")?;
        ip.uid = uid;
        ip.gid = gid;
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }
}

/// Sets xattr `name` (full Linux name) on `ip` inside `tp` (the caller logs `ip`).
pub(crate) fn set_xattr_in(
    tp: &mut crate::trans::Trans<'_>,
    ip: &mut crate::inode::Inode,
    name: &[u8],
    value: &[u8],
) -> Result<()> {
    if value.len() > XATTR_SIZE_MAX {
        return Err(Error::Invalid(format!(
            "xattr value of {} bytes (at most {XATTR_SIZE_MAX})",
            value.len()
        )));
    }
    let (ns, n, v) = disk_name(name, Some(value))?;
    crate::attr::write::set_disk_in(tp, ip, ns, &n, &v.unwrap_or_default())
}

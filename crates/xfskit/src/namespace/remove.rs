//! Removing names: unlink, rmdir, rename; freeing inodes whose last link
//! went away, or keeping them as orphans while they are in use
//! ([`super::orphan`]).

use super::create::read_dir_inode;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode, Timestamp};
use crate::trans::Trans;

pub(crate) use crate::ialloc::destroy;

/// Tells whether an inode whose last name goes away is still in use (an
/// open file): it then becomes an orphan instead of being freed.
pub type InUse<'a> = &'a dyn Fn(Ino) -> bool;

/// Drops one link of `ip`; frees it at zero, unless `in_use` says it is
/// still used (an open file, or an open directory that was removed or
/// replaced): then it stays, with no links, on the unlinked list, and its
/// number is returned. A directory also drops its own '.' link.
fn drop_link(
    fs: &Fs,
    tp: &mut Trans<'_>,
    mut ip: Inode,
    now: Timestamp,
    in_use: InUse<'_>,
) -> Result<Option<Ino>> {
    let links = if ip.file_type == FileType::Dir { 2 } else { 1 };
    if ip.nlink <= links {
        if in_use(ip.ino) {
            ip.nlink = 0;
            fs.touch_change(&mut ip, now)?;
            super::orphan::add(tp, &mut ip)?;
            tp.log_inode(&ip)?;
            return Ok(Some(ip.ino));
        }
        destroy(tp, ip)?;
        return Ok(None);
    }
    ip.nlink -= 1;
    fs.touch_change(&mut ip, now)?;
    tp.log_inode(&ip)?;
    Ok(None)
}

impl Fs {
    /// Removes the non-directory `name` from `parent`.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, false, &|_| false)
            .map(|_| ())
    }

    /// [`Fs::unlink`] that keeps the inode as an orphan when it loses its
    /// last name while `in_use` says it is used; returns the orphan. Free
    /// it with [`Fs::free_orphan`].
    pub fn unlink_keeping(
        &self,
        parent: Ino,
        name: &[u8],
        in_use: InUse<'_>,
    ) -> Result<Option<Ino>> {
        self.remove_name(parent, name, false, in_use)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, true, &|_| false).map(|_| ())
    }

    /// [`Fs::rmdir`] that keeps the directory as an orphan (no links, its
    /// empty contents kept) while `in_use` says it is used; returns the
    /// orphan. Free it with [`Fs::free_orphan`].
    pub fn rmdir_keeping(
        &self,
        parent: Ino,
        name: &[u8],
        in_use: InUse<'_>,
    ) -> Result<Option<Ino>> {
        self.remove_name(parent, name, true, in_use)
    }

    fn remove_name(
        &self,
        parent: Ino,
        name: &[u8],
        want_dir: bool,
        in_use: InUse<'_>,
    ) -> Result<Option<Ino>> {
        super::check_name(name)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(parent);
        let mut dp = read_dir_inode(&mut tp, parent)?;
        let (ino, _) = crate::dir::write::lookup(&mut tp, &dp, name)?
            .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_remove(&dp, &ip)?;
        let is_dir = ip.file_type == FileType::Dir;
        if want_dir && !is_dir {
            return Err(Error::NotDir(String::from_utf8_lossy(name).into_owned()));
        }
        if !want_dir && is_dir {
            return Err(Error::IsDir(String::from_utf8_lossy(name).into_owned()));
        }
        if is_dir && !crate::dir::write::is_empty(&mut tp, &ip)? {
            return Err(Error::NotEmpty(String::from_utf8_lossy(name).into_owned()));
        }
        crate::dir::write::remove(&mut tp, &mut dp, name)?;
        super::pptr::remove(&mut tp, &mut ip, &dp, name)?;
        if is_dir {
            dp.nlink -= 1;
        }
        self.touch_modify(&mut dp, now)?;
        tp.log_inode(&dp)?;
        let orphan = drop_link(self, &mut tp, ip, now, in_use)?;
        tp.commit()?;
        Ok(orphan)
    }

    /// Renames `sname` in `sdir` to `dname` in `ddir`, replacing a
    /// target of the same kind (an empty directory for a directory).
    pub fn rename(&self, sdir: Ino, sname: &[u8], ddir: Ino, dname: &[u8]) -> Result<()> {
        self.rename_keeping(sdir, sname, ddir, dname, &|_| false)
            .map(|_| ())
    }

    /// [`Fs::rename`] that keeps a replaced target as an orphan when it
    /// loses its last name while `in_use` says it is used; returns it.
    pub fn rename_keeping(
        &self,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        in_use: InUse<'_>,
    ) -> Result<Option<Ino>> {
        self.rename_as(sdir, sname, ddir, dname, in_use, None)
    }

    /// [`Fs::rename_keeping`] that leaves a whiteout at the source name
    /// (renameat2's RENAME_WHITEOUT, for overlayfs): a character device
    /// 0:0 with no permission bits, owned as `meta` says, made in the
    /// rename's transaction as the kernel makes it.
    pub fn rename_whiteout(
        &self,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        meta: &crate::namespace::Meta,
        in_use: InUse<'_>,
    ) -> Result<Option<Ino>> {
        self.rename_as(sdir, sname, ddir, dname, in_use, Some(meta))
    }

    fn rename_as(
        &self,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        in_use: InUse<'_>,
        whiteout: Option<&crate::namespace::Meta>,
    ) -> Result<Option<Ino>> {
        super::check_name(sname)?;
        super::check_name(dname)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        let mut locks = vec![sdir, ddir];
        locks.sort();
        locks.dedup();
        for &l in &locks {
            tp.lock_inode(l);
        }
        let same = sdir == ddir;
        let mut sdp = read_dir_inode(&mut tp, sdir)?;
        let mut ddp = if same {
            None
        } else {
            Some(read_dir_inode(&mut tp, ddir)?)
        };
        let (sino, _) = crate::dir::write::lookup(&mut tp, &sdp, sname)?
            .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(sname).into_owned()))?;
        if same && sname == dname {
            return Ok(None);
        }
        let gen = match whiteout {
            Some(_) => self.write_state()?.next_gen(),
            None => 0,
        };
        tp.lock_inode(sino);
        let mut sip = tp.read_inode(sino)?;
        super::guard::may_remove(&sdp, &sip)?;
        let s_is_dir = sip.file_type == FileType::Dir;
        if s_is_dir && !same {
            // Moving a directory under itself would disconnect it.
            let mut cur = ddir;
            let root = self.geometry().root_ino;
            let mut hops = 0u32;
            while cur != root {
                if cur == sino {
                    return Err(Error::Invalid("cannot move a directory into itself".into()));
                }
                let cp = tp.read_inode(cur)?;
                cur = crate::dir::write::lookup(&mut tp, &cp, b"..")?
                    .map(|(i, _)| i)
                    .ok_or_else(|| Error::NotFound("'..'".into()))?;
                hops += 1;
                if hops > 1 << 20 {
                    return Err(Error::corrupt(
                        "directory",
                        crate::error::Location::Inode(ddir.0),
                        "'..' chain does not reach the root",
                    ));
                }
            }
        }
        let ftype = sip.file_type.dirent_code();
        let dpv = ddp.as_mut().unwrap_or(&mut sdp);
        super::guard::may_write(dpv, "adding a name")?;
        let existing = crate::dir::write::lookup(&mut tp, dpv, dname)?;
        if whiteout.is_some() && existing.is_some_and(|(t, _)| t == sino) {
            // Two names of one inode: nothing to do (the VFS stops there).
            return Ok(None);
        }
        let mut nlink_delta_d = 0i32;
        let mut orphan = None;
        match existing {
            Some((tino, _)) if tino == sino => {
                // Both names are links to the same inode: just drop the source.
                crate::dir::write::remove(&mut tp, &mut sdp, sname)?;
                self.touch_modify(&mut sdp, now)?;
                tp.log_inode(&sdp)?;
                if let Some(d) = &ddp {
                    tp.log_inode(d)?;
                }
                let mut sip = sip;
                super::pptr::remove(&mut tp, &mut sip, &sdp, sname)?;
                sip.nlink -= 1;
                self.touch_change(&mut sip, now)?;
                tp.log_inode(&sip)?;
                tp.commit()?;
                return Ok(None);
            }
            Some((tino, _)) => {
                tp.lock_inode(tino);
                let mut tip = tp.read_inode(tino)?;
                super::guard::may_remove(ddp.as_ref().unwrap_or(&sdp), &tip)?;
                let t_is_dir = tip.file_type == FileType::Dir;
                if s_is_dir != t_is_dir {
                    return Err(if t_is_dir {
                        Error::IsDir(String::from_utf8_lossy(dname).into_owned())
                    } else {
                        Error::NotDir(String::from_utf8_lossy(dname).into_owned())
                    });
                }
                if t_is_dir && !crate::dir::write::is_empty(&mut tp, &tip)? {
                    return Err(Error::NotEmpty(String::from_utf8_lossy(dname).into_owned()));
                }
                let dpv = ddp.as_mut().unwrap_or(&mut sdp);
                crate::dir::write::replace(&mut tp, dpv, dname, sino, ftype)?;
                super::pptr::remove(&mut tp, &mut tip, dpv, dname)?;
                if t_is_dir {
                    nlink_delta_d -= 1;
                }
                orphan = drop_link(self, &mut tp, tip, now, in_use)?;
            }
            None => {
                let dpv = ddp.as_mut().unwrap_or(&mut sdp);
                crate::dir::write::add(&mut tp, dpv, dname, sino, ftype)?;
            }
        }
        let old_rec = super::pptr::rec(&sdp);
        match whiteout {
            None => {
                crate::dir::write::remove(&mut tp, &mut sdp, sname)?;
            }
            Some(meta) => {
                let kind = crate::namespace::NodeKind::CharDev { major: 0, minor: 0 };
                let mut m = meta.clone();
                m.mode = 0;
                let wip = self.new_inode_in(&mut tp, &mut sdp, sname, &kind, &m, gen, None)?;
                crate::dir::write::replace(
                    &mut tp,
                    &mut sdp,
                    sname,
                    wip.ino,
                    wip.file_type.dirent_code(),
                )?;
                tp.log_inode(&wip)?;
            }
        }
        super::pptr::replace(
            &mut tp,
            &mut sip,
            &old_rec,
            sname,
            ddp.as_ref().unwrap_or(&sdp),
            dname,
        )?;
        if s_is_dir && !same {
            crate::dir::write::replace(&mut tp, &mut sip, b"..", ddir, 2)?;
            sdp.nlink -= 1;
            nlink_delta_d += 1;
        }
        {
            let dpv = ddp.as_mut().unwrap_or(&mut sdp);
            dpv.nlink = (dpv.nlink as i64 + i64::from(nlink_delta_d)) as u32;
        }
        self.touch_change(&mut sip, now)?;
        self.touch_modify(&mut sdp, now)?;
        tp.log_inode(&sip)?;
        tp.log_inode(&sdp)?;
        if let Some(mut d) = ddp {
            self.touch_modify(&mut d, now)?;
            tp.log_inode(&d)?;
        }
        tp.commit()?;
        Ok(orphan)
    }
}

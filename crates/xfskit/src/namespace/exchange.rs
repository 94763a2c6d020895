//! Swapping two names (renameat2's RENAME_EXCHANGE), as kernel XFS does
//! it (`xfs_cross_rename`): each entry points at the other inode, a
//! directory that changes parent gets its '..' pointed at the new one,
//! the parents' link counts follow the directories that moved, and both
//! inodes and both parents are stamped.

use super::create::read_dir_inode;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::FileType;
use crate::trans::Trans;

/// Longest '..' chain followed before calling the tree corrupt.
const MAX_DEPTH: u32 = 1 << 20;

/// True when directory `dir` is `anc` or lies below it.
pub(crate) fn is_within(tp: &mut Trans<'_>, root: Ino, anc: Ino, dir: Ino) -> Result<bool> {
    let mut cur = dir;
    for _ in 0..MAX_DEPTH {
        if cur == anc {
            return Ok(true);
        }
        if cur == root {
            return Ok(false);
        }
        let cp = tp.read_inode(cur)?;
        cur = crate::dir::write::lookup(tp, &cp, b"..")?
            .map(|(i, _)| i)
            .ok_or_else(|| Error::NotFound("'..'".into()))?;
    }
    Err(Error::corrupt(
        "directory",
        Location::Inode(dir.0),
        "'..' chain does not reach the root",
    ))
}

impl Fs {
    /// Swaps `sname` in `sdir` and `dname` in `ddir`: both must exist.
    pub fn exchange(&self, sdir: Ino, sname: &[u8], ddir: Ino, dname: &[u8]) -> Result<()> {
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
        let missing = |n: &[u8]| Error::NotFound(String::from_utf8_lossy(n).into_owned());
        let (sino, _) =
            crate::dir::write::lookup(&mut tp, &sdp, sname)?.ok_or_else(|| missing(sname))?;
        let (tino, _) = {
            let d = ddp.as_ref().unwrap_or(&sdp);
            crate::dir::write::lookup(&mut tp, d, dname)?.ok_or_else(|| missing(dname))?
        };
        if sino == tino {
            return Ok(());
        }
        let mut pair = vec![sino, tino];
        pair.sort();
        for &l in &pair {
            tp.lock_inode(l);
        }
        let mut sip = tp.read_inode(sino)?;
        let mut tip = tp.read_inode(tino)?;
        super::guard::may_remove(&sdp, &sip)?;
        super::guard::may_remove(ddp.as_ref().unwrap_or(&sdp), &tip)?;
        let (s_dir, t_dir) = (
            sip.file_type == FileType::Dir,
            tip.file_type == FileType::Dir,
        );
        let root = self.geometry().root_ino;
        if !same {
            if s_dir && is_within(&mut tp, root, sino, ddir)? {
                return Err(Error::Invalid("cannot move a directory into itself".into()));
            }
            if t_dir && is_within(&mut tp, root, tino, sdir)? {
                return Err(Error::Invalid("cannot move a directory into itself".into()));
            }
        }
        crate::dir::write::replace(&mut tp, &mut sdp, sname, tino, tip.file_type.dirent_code())?;
        {
            let d = ddp.as_mut().unwrap_or(&mut sdp);
            crate::dir::write::replace(&mut tp, d, dname, sino, sip.file_type.dirent_code())?;
        }
        {
            let srec = super::pptr::rec(&sdp);
            let d = ddp.as_ref().unwrap_or(&sdp);
            let drec = super::pptr::rec(d);
            super::pptr::replace(&mut tp, &mut sip, &srec, sname, d, dname)?;
            super::pptr::replace(&mut tp, &mut tip, &drec, dname, &sdp, sname)?;
        }
        if let Some(d) = ddp.as_mut() {
            if s_dir {
                crate::dir::write::replace(&mut tp, &mut sip, b"..", ddir, 2)?;
            }
            if t_dir {
                crate::dir::write::replace(&mut tp, &mut tip, b"..", sdir, 2)?;
            }
            if s_dir != t_dir {
                // One directory moved from one parent to the other.
                if s_dir {
                    sdp.nlink -= 1;
                    d.nlink += 1;
                } else {
                    d.nlink -= 1;
                    sdp.nlink += 1;
                }
            }
        }
        self.touch_change(&mut sip, now)?;
        self.touch_change(&mut tip, now)?;
        self.touch_modify(&mut sdp, now)?;
        tp.log_inode(&sip)?;
        tp.log_inode(&tip)?;
        tp.log_inode(&sdp)?;
        if let Some(mut d) = ddp {
            self.touch_modify(&mut d, now)?;
            tp.log_inode(&d)?;
        }
        tp.commit()
    }
}

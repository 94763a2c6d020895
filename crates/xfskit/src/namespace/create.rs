//! Creating inodes (files, directories, symlinks, device nodes, fifos,
//! sockets) and hard links.

use super::{Meta, NodeKind};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode, Timestamp};
use crate::trans::Trans;
use xfs_format::symlink as xsl;

/// Longest symlink target: XFS_SYMLINK_MAXLEN counts the kernel's
/// terminating NUL, so targets are shorter (xfs_repair rejects 1024).
const SYMLINK_MAX: usize = xsl::XFS_SYMLINK_MAXLEN - 1;

fn type_bits(kind: &NodeKind) -> u16 {
    (match kind {
        NodeKind::Dir => libc::S_IFDIR,
        NodeKind::File { .. } => libc::S_IFREG,
        NodeKind::Symlink(_) => libc::S_IFLNK,
        NodeKind::CharDev { .. } => libc::S_IFCHR,
        NodeKind::BlockDev { .. } => libc::S_IFBLK,
        NodeKind::Fifo => libc::S_IFIFO,
        NodeKind::Socket => libc::S_IFSOCK,
    }) as u16
}

/// Reads a directory inode for changing, checking its type.
pub(crate) fn read_dir_inode(tp: &mut Trans<'_>, dir: Ino) -> Result<Inode> {
    let dp = tp.read_inode(dir)?;
    if dp.file_type != FileType::Dir {
        return Err(Error::NotDir(format!("inode {}", dir.0)));
    }
    Ok(dp)
}

/// Checks a new entry's name and what the kind carries.
pub(crate) fn check_kind(name: &[u8], kind: &NodeKind) -> Result<()> {
    super::check_name(name)?;
    if let NodeKind::Symlink(t) = kind {
        if t.is_empty() || t.len() > SYMLINK_MAX || t.contains(&0) {
            return Err(Error::Invalid(format!(
                "symlink target of {} bytes (1 to {SYMLINK_MAX}, no NUL)",
                t.len()
            )));
        }
    }
    if let NodeKind::CharDev { major, minor } | NodeKind::BlockDev { major, minor } = kind {
        // XFS keeps device numbers in 32 bits: 14 for the major, 18 for the minor.
        if *major >= 1 << 14 || *minor >= 1 << 18 {
            return Err(Error::Invalid(format!(
                "device number {major}:{minor} does not fit XFS's 14-bit major / 18-bit minor"
            )));
        }
    }
    Ok(())
}

impl Fs {
    /// Creates `name` in directory `parent` and returns the new inode.
    pub fn create(&self, parent: Ino, name: &[u8], kind: &NodeKind, meta: &Meta) -> Result<Ino> {
        self.create_from(parent, name, kind, meta, None)
    }

    /// The AG where the next new directory's inode search starts; advances
    /// the directory rotor. For callers that decide where a directory goes
    /// before they make it ([`Fs::mkdir_from`]).
    pub fn next_dir_ag(&self) -> Result<u32> {
        Ok(self.write_state()?.next_dir_ag(self.geometry().ag_count))
    }

    /// Creates directory `name` in `parent` as [`Fs::create`] does, but its
    /// inode is searched for from AG `agno` (from [`Fs::next_dir_ag`])
    /// and the rotor is left alone.
    pub fn mkdir_from(&self, parent: Ino, name: &[u8], meta: &Meta, agno: u32) -> Result<Ino> {
        self.create_from(parent, name, &NodeKind::Dir, meta, Some(agno))
    }

    fn create_from(
        &self,
        parent: Ino,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
        dir_ag: Option<u32>,
    ) -> Result<Ino> {
        check_kind(name, kind)?;
        self.quota_prepare_create(parent, meta.uid, meta.gid)?;
        let now = self.now()?;
        let gen = self.write_state()?.next_gen();
        let mut tp = self.trans()?;
        if let Some(ag) = dir_ag {
            tp.start_dirs_at(ag);
        }
        let (ip, dp) = self.create_in(&mut tp, parent, name, kind, meta, now, gen)?;
        tp.log_inode(&ip)?;
        tp.log_inode(&dp)?;
        tp.commit()?;
        Ok(ip.ino)
    }

    /// The work of [`Fs::create`] inside `tp`: allocates and fills the new
    /// inode, adds its entry to `parent`. Returns the new inode and the
    /// changed parent, neither logged yet.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_in(
        &self,
        tp: &mut Trans<'_>,
        parent: Ino,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
        now: Timestamp,
        gen: u32,
    ) -> Result<(Inode, Inode)> {
        tp.lock_inode(parent);
        let mut dp = read_dir_inode(tp, parent)?;
        let ip = self.create_in_dir(tp, &mut dp, name, kind, meta, now, gen, None)?;
        Ok((ip, dp))
    }

    /// [`Fs::create_in`] with the parent directory's inode already read
    /// (and locked) by the caller, who logs it; `ino`, when given, is a
    /// free inode the caller allocated for it (locked).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_in_dir(
        &self,
        tp: &mut Trans<'_>,
        dp: &mut Inode,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
        now: Timestamp,
        gen: u32,
        ino: Option<Ino>,
    ) -> Result<Inode> {
        let ip = self.new_inode_in(tp, dp, name, kind, meta, gen, ino)?;
        crate::dir::write::add(tp, dp, name, ip.ino, ip.file_type.dirent_code())?;
        self.touch_dir(dp, now)?;
        Ok(ip)
    }

    /// [`Fs::create_in_dir`] but for the entry in `dp` and its times: the
    /// new inode (allocated unless `ino` is given), filled in and locked,
    /// not logged. A new directory's link to `dp` is counted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_inode_in(
        &self,
        tp: &mut Trans<'_>,
        dp: &mut Inode,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
        gen: u32,
        ino: Option<Ino>,
    ) -> Result<Inode> {
        let parent = dp.ino;
        // dir::write::add refuses an existing name, and dropping the
        // transaction undoes the allocation; only a directory looks first,
        // so that a refused mkdir does not advance the directory rotor.
        if matches!(kind, NodeKind::Dir) && crate::dir::write::lookup(tp, dp, name)?.is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        super::guard::may_write(dp, "adding a name")?;
        if matches!(kind, NodeKind::Symlink(_))
            && dp.flags & xfs_format::inode::XFS_DIFLAG_NOSYMLINKS != 0
        {
            return Err(Error::NotPermitted(format!(
                "directory inode {} does not take symlinks",
                parent.0
            )));
        }
        let mode = type_bits(kind) | (meta.mode & 0o7777);
        let ino = match ino {
            Some(i) => i,
            None => crate::ialloc::alloc_inode(tp, parent, mode)?,
        };
        tp.lock_inode(ino);
        let mut ip = Inode::new(self.geometry(), ino, mode, gen)?;
        ip.uid = meta.uid;
        ip.gid = meta.gid;
        ip.atime = meta.atime;
        ip.mtime = meta.mtime;
        ip.ctime = meta.ctime;
        ip.crtime = meta.crtime;
        inherit_flags(&mut ip, dp, tp.geo().rt_blocks > 0);
        super::pptr::init_fork(self.geometry(), &mut ip);
        match kind {
            NodeKind::Dir => {
                ip.nlink = 2;
                crate::dir::write::init(tp, &mut ip, parent)?;
                dp.nlink += 1;
            }
            NodeKind::File { size } => {
                ip.size = *size;
                if let Ok(ws) = self.write_state() {
                    if ws.alloc.filestreams.applies(ip.flags) {
                        ws.alloc.filestreams.note_parent(ino, parent);
                    }
                }
            }
            NodeKind::Symlink(t) => crate::symlink::write_symlink(tp, &mut ip, t)?,
            NodeKind::CharDev { major, minor } | NodeKind::BlockDev { major, minor } => {
                ip.set_rdev(*major, *minor)
            }
            NodeKind::Fifo | NodeKind::Socket => {}
        }
        super::pptr::add(tp, &mut ip, dp, name)?;
        Ok(ip)
    }

    /// Adds hard link `name` in `parent` to the non-directory `target`.
    pub fn link(&self, parent: Ino, name: &[u8], target: Ino) -> Result<()> {
        super::check_name(name)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        let (a, b) = (parent.min(target), parent.max(target));
        tp.lock_inode(a);
        tp.lock_inode(b);
        let mut dp = read_dir_inode(&mut tp, parent)?;
        let mut ip = tp.read_inode(target)?;
        super::guard::may_write(&dp, "adding a name")?;
        super::guard::may_change(&ip, "linking")?;
        if ip.file_type == FileType::Dir {
            return Err(Error::IsDir(format!(
                "cannot hard-link directory inode {}",
                target.0
            )));
        }
        if ip.nlink == u32::MAX {
            return Err(Error::Invalid(format!(
                "inode {} has too many links",
                target.0
            )));
        }
        if crate::dir::write::lookup(&mut tp, &dp, name)?.is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        crate::dir::write::add(&mut tp, &mut dp, name, target, ip.file_type.dirent_code())?;
        super::pptr::add(&mut tp, &mut ip, &dp, name)?;
        ip.nlink += 1;
        self.touch_change(&mut ip, now)?;
        self.touch_dir(&mut dp, now)?;
        tp.log_inode(&ip)?;
        tp.log_inode(&dp)?;
        tp.commit()
    }
}

/// What a new inode takes from its directory, as the kernel's inode
/// creation gives it: the project id under a project-inheriting directory;
/// for files and directories, the inode flags that pass on (realtime
/// inheritance only with a realtime device, which we do not write; no
/// symlinks is not inherited, as the kernel's `fs.xfs.inherit_nosymlinks`
/// default has it) and the extent size and copy-on-write extent size hints.
pub(crate) fn inherit_flags(ip: &mut Inode, dp: &Inode, has_rt: bool) {
    use xfs_format::inode as di;
    if dp.flags & di::XFS_DIFLAG_PROJINHERIT != 0 {
        ip.projid = dp.projid;
    }
    let (is_dir, is_file) = (
        ip.file_type == FileType::Dir,
        ip.file_type == FileType::File,
    );
    if !is_dir && !is_file {
        return;
    }
    let pf = dp.flags;
    let mut f = 0u16;
    if pf & di::XFS_DIFLAG_EXTSZINHERIT != 0 && dp.extsize != 0 {
        f |= if is_dir {
            di::XFS_DIFLAG_EXTSZINHERIT
        } else {
            di::XFS_DIFLAG_EXTSIZE
        };
        ip.extsize = dp.extsize;
    }
    if is_dir {
        f |= pf & (di::XFS_DIFLAG_PROJINHERIT | di::XFS_DIFLAG_RTINHERIT);
    }
    if is_file && pf & di::XFS_DIFLAG_RTINHERIT != 0 && has_rt {
        // As the kernel: only on a filesystem with a realtime section.
        f |= di::XFS_DIFLAG_REALTIME;
    }
    f |= pf
        & (di::XFS_DIFLAG_NOATIME
            | di::XFS_DIFLAG_NODUMP
            | di::XFS_DIFLAG_SYNC
            | di::XFS_DIFLAG_NODEFRAG
            | di::XFS_DIFLAG_FILESTREAM);
    ip.flags |= f;
    if dp.flags2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 && dp.cowextsize != 0 {
        ip.flags2 |= di::XFS_DIFLAG2_COWEXTSIZE;
        ip.cowextsize = dp.cowextsize;
    }
    ip.flags2 |= dp.flags2 & di::XFS_DIFLAG2_DAX;
}

//! The Linux file attributes of an inode (`FS_IOC_GETFLAGS`/`SETFLAGS`'
//! `FS_*_FL` bits and `FS_IOC_FSGETXATTR`/`FSSETXATTR`'s `struct fsxattr`)
//! read from and written into the XFS inode the way kernel XFS does it
//! (fs/xfs/xfs_ioctl.c): the flags map onto `di_flags`/`di_flags2`, the
//! extent size hints are kept in blocks and given in bytes, and each
//! change is one transaction that also stamps ctime.
//!
//! Who may ask (the owner or CAP_FOWNER, CAP_LINUX_IMMUTABLE for the
//! immutable and append-only flags) is the caller's to decide: the engine
//! does not know credentials.

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{Geometry, Ino};
use crate::inode::{FileType, ForkFormat, Inode};
use crate::scan::{xflag, xflags};
use xfs_format::inode as di;

/// The `FS_*_FL` bits of `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` that XFS knows.
pub mod fl {
    /// Synchronous updates.
    pub const SYNC: u32 = 0x0000_0008;
    /// Immutable.
    pub const IMMUTABLE: u32 = 0x0000_0010;
    /// Append only.
    pub const APPEND: u32 = 0x0000_0020;
    /// Skipped by dump.
    pub const NODUMP: u32 = 0x0000_0040;
    /// No access time updates.
    pub const NOATIME: u32 = 0x0000_0080;
    /// Direct access.
    pub const DAX: u32 = 0x0200_0000;
    /// New files take the directory's project id.
    pub const PROJINHERIT: u32 = 0x2000_0000;
}

/// The flag pairs both interfaces share (the VFS's "common" flags).
const COMMON: [(u32, u32); 7] = [
    (fl::SYNC, xflag::SYNC),
    (fl::IMMUTABLE, xflag::IMMUTABLE),
    (fl::APPEND, xflag::APPEND),
    (fl::NODUMP, xflag::NODUMP),
    (fl::NOATIME, xflag::NOATIME),
    (fl::DAX, xflag::DAX),
    (fl::PROJINHERIT, xflag::PROJINHERIT),
];

/// The `FS_XFLAG_*` bits that have an `FS_*_FL` twin.
pub const XFLAGS_COMMON: u32 = xflag::SYNC
    | xflag::IMMUTABLE
    | xflag::APPEND
    | xflag::NODUMP
    | xflag::NOATIME
    | xflag::DAX
    | xflag::PROJINHERIT;

/// `FS_*_FL` bits for `FS_XFLAG_*` bits (those with a twin).
pub fn flags_of_xflags(x: u32) -> u32 {
    COMMON
        .iter()
        .filter(|(_, xf)| x & xf != 0)
        .fold(0, |a, (f, _)| a | f)
}

/// `FS_XFLAG_*` bits for `FS_*_FL` bits; other bits are dropped.
pub fn xflags_of_flags(f: u32) -> u32 {
    COMMON
        .iter()
        .filter(|(fb, _)| f & fb != 0)
        .fold(0, |a, (_, x)| a | x)
}

/// `struct fsxattr` as XFS fills and takes it (sizes in bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsxAttr {
    /// `FS_XFLAG_*`.
    pub xflags: u32,
    /// Extent size hint, bytes.
    pub extsize: u32,
    /// Data fork extents (reported only).
    pub nextents: u32,
    /// Project id.
    pub projid: u32,
    /// Copy-on-write extent size hint, bytes.
    pub cowextsize: u32,
}

/// The most blocks an extent (and so a hint) may span.
const MAX_EXTLEN: u64 = (1 << 21) - 1;

/// What [`Fs::set_file_attr`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAttrSet {
    /// `FS_IOC_SETFLAGS`: the `FS_*_FL` bits; the flags without a twin,
    /// the hints and the project id stay.
    Flags(u32),
    /// `FS_IOC_FSSETXATTR`: everything but `nextents`; `clear_setid`
    /// also drops set-user-id and set-group-id (a caller without
    /// CAP_FSETID, as XFS does).
    Fsx { attr: FsxAttr, clear_setid: bool },
}

/// The file attributes of `ip` as `FS_IOC_FSGETXATTR` reports them.
pub fn fsxattr_of(geo: &Geometry, ip: &Inode) -> FsxAttr {
    let bs = geo.block_size;
    let mut x = xflags(ip.flags, ip.flags2, ip.has_attr_fork());
    let mut extsize = 0;
    if ip.flags & di::XFS_DIFLAG_EXTSIZE != 0 {
        extsize = ip.extsize.saturating_mul(bs);
    } else if ip.flags & di::XFS_DIFLAG_EXTSZINHERIT != 0 {
        // A directory hint that would not pass the set checks (realtime
        // inheritance with a hint off the realtime extent size) is hidden.
        let rtx = geo.rt_extsize.max(1);
        if ip.flags & di::XFS_DIFLAG_RTINHERIT != 0 && !ip.extsize.is_multiple_of(rtx) {
            x &= !(xflag::EXTSIZE | xflag::EXTSZINHERIT);
        } else {
            extsize = ip.extsize.saturating_mul(bs);
        }
    }
    let cowextsize = if ip.flags2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 {
        ip.cowextsize.saturating_mul(bs)
    } else {
        0
    };
    FsxAttr {
        xflags: x,
        extsize,
        // Kernel XFS counts the records of its in-memory extent list,
        // which for an inline fork (a short-form directory) is the inline
        // bytes over the 16-byte record size.
        nextents: match ip.format {
            ForkFormat::Local => (ip.size / 16) as u32,
            _ => u32::try_from(ip.nextents).unwrap_or(u32::MAX),
        },
        projid: ip.projid,
        cowextsize,
    }
}

/// `di_flags` for `FS_XFLAG_*` bits on `ip`, as XFS maps them: the
/// preallocation flag is kept, and each flag goes only where it applies.
fn diflags_for(ip: &Inode, x: u32) -> u16 {
    let mut f = ip.flags & di::XFS_DIFLAG_PREALLOC;
    let any: [(u32, u16); 7] = [
        (xflag::IMMUTABLE, di::XFS_DIFLAG_IMMUTABLE),
        (xflag::APPEND, di::XFS_DIFLAG_APPEND),
        (xflag::SYNC, di::XFS_DIFLAG_SYNC),
        (xflag::NOATIME, di::XFS_DIFLAG_NOATIME),
        (xflag::NODUMP, di::XFS_DIFLAG_NODUMP),
        (xflag::NODEFRAG, di::XFS_DIFLAG_NODEFRAG),
        (xflag::FILESTREAM, di::XFS_DIFLAG_FILESTREAM),
    ];
    let dir: [(u32, u16); 4] = [
        (xflag::RTINHERIT, di::XFS_DIFLAG_RTINHERIT),
        (xflag::NOSYMLINKS, di::XFS_DIFLAG_NOSYMLINKS),
        (xflag::EXTSZINHERIT, di::XFS_DIFLAG_EXTSZINHERIT),
        (xflag::PROJINHERIT, di::XFS_DIFLAG_PROJINHERIT),
    ];
    let file: [(u32, u16); 2] = [
        (xflag::REALTIME, di::XFS_DIFLAG_REALTIME),
        (xflag::EXTSIZE, di::XFS_DIFLAG_EXTSIZE),
    ];
    let mut take = |m: &[(u32, u16)]| {
        for (xb, d) in m {
            if x & xb != 0 {
                f |= d;
            }
        }
    };
    take(&any);
    match ip.file_type {
        FileType::Dir => take(&dir),
        FileType::File => take(&file),
        _ => {}
    }
    f
}

/// `di_flags2` for `FS_XFLAG_*` bits: the flags no caller sets are kept.
fn diflags2_for(ip: &Inode, x: u32) -> u64 {
    let mut f = ip.flags2
        & (di::XFS_DIFLAG2_REFLINK
            | di::XFS_DIFLAG2_BIGTIME
            | di::XFS_DIFLAG2_NREXT64
            | di::XFS_DIFLAG2_METADATA);
    if x & xflag::DAX != 0 {
        f |= di::XFS_DIFLAG2_DAX;
    }
    if x & xflag::COWEXTSIZE != 0 {
        f |= di::XFS_DIFLAG2_COWEXTSIZE;
    }
    f
}

fn invalid(ip: &Inode, why: &str) -> Error {
    Error::Invalid(format!("file attributes of inode {}: {why}", ip.ino.0))
}

/// XFS's checks of an extent size hint of `blocks` for an inode of type
/// `ft` with flags `f` (xfs_inode_validate_extsize).
fn check_extsize(geo: &Geometry, ft: FileType, f: u16, blocks: u64) -> bool {
    let hint = f & di::XFS_DIFLAG_EXTSIZE != 0;
    let inherit = f & di::XFS_DIFLAG_EXTSZINHERIT != 0;
    let rt = f & di::XFS_DIFLAG_REALTIME != 0;
    let unit = if rt {
        u64::from(geo.rt_extsize.max(1))
    } else {
        1
    };
    let (is_dir, is_file) = (ft == FileType::Dir, ft == FileType::File);
    // A hint only on a file, an inheriting hint only on a directory.
    let bad = hint && !is_file
        || inherit && !is_dir
        || (hint || inherit) && blocks == 0
        || !(hint || inherit) && blocks != 0
        || !blocks.is_multiple_of(unit)
        || blocks > MAX_EXTLEN
        || !rt && blocks > u64::from(geo.ag_blocks / 2);
    !bad
}

/// XFS's checks of a copy-on-write hint (xfs_inode_validate_cowextsize).
fn check_cowextsize(geo: &Geometry, ft: FileType, f2: u64, blocks: u64) -> bool {
    let hint = f2 & di::XFS_DIFLAG2_COWEXTSIZE != 0;
    let (is_dir, is_file) = (ft == FileType::Dir, ft == FileType::File);
    !(hint && !geo.features.reflink
        || hint && !(is_dir || is_file)
        || hint && blocks == 0
        || !hint && blocks != 0
        || blocks > MAX_EXTLEN
        || blocks > u64::from(geo.ag_blocks / 2))
}

impl Fs {
    /// The file attributes of `ino` (`FS_IOC_FSGETXATTR`).
    pub fn file_attr(&self, ino: Ino) -> Result<FsxAttr> {
        Ok(fsxattr_of(self.geometry(), &self.inode(ino)?))
    }

    /// Changes the file attributes of `ino` in one transaction, with the
    /// checks and errors of kernel XFS (EOPNOTSUPP for an `FS_*_FL` bit
    /// XFS does not keep, EINVAL for a hint or project id it refuses or a
    /// flag the inode cannot take); returns the inode afterwards.
    pub fn set_file_attr(&self, ino: Ino, set: &FileAttrSet) -> Result<Inode> {
        let geo = self.geometry();
        if let FileAttrSet::Flags(f) = *set {
            if f & !flags_of_xflags(XFLAGS_COMMON) != 0 {
                return Err(Error::Unsupported(format!(
                    "inode flags {f:#x}: XFS keeps only immutable, append, sync, noatime, nodump, dax and projinherit"
                )));
            }
        }
        if let FileAttrSet::Fsx { attr, .. } = set {
            if attr.projid > u32::from(u16::MAX) && !geo.features.projid32 {
                return Err(Error::Invalid(format!(
                    "project id {}: the filesystem keeps 16-bit project ids",
                    attr.projid
                )));
            }
        }
        if let FileAttrSet::Fsx { attr, .. } = set {
            self.quota_prepare_owner(ino, None, None, Some(attr.projid))?;
        }
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        let old = fsxattr_of(geo, &ip);
        let mut want = match *set {
            FileAttrSet::Flags(f) => FsxAttr {
                xflags: (old.xflags & !XFLAGS_COMMON) | xflags_of_flags(f),
                ..old
            },
            FileAttrSet::Fsx { attr, .. } => attr,
        };
        let fsx = matches!(set, FileAttrSet::Fsx { .. });
        if fsx {
            // What the VFS checks before any filesystem sees the change.
            let (is_dir, is_file) = (
                ip.file_type == FileType::Dir,
                ip.file_type == FileType::File,
            );
            let x = want.xflags;
            if (x & (xflag::EXTSIZE | xflag::COWEXTSIZE | xflag::DAX) != 0 && !is_dir && !is_file)
                || (x & xflag::EXTSZINHERIT != 0 && !is_dir)
            {
                return Err(invalid(&ip, "a flag this type of inode cannot take"));
            }
            if want.extsize == 0 {
                want.xflags &= !(xflag::EXTSIZE | xflag::EXTSZINHERIT);
            }
            if want.cowextsize == 0 {
                want.xflags &= !xflag::COWEXTSIZE;
            }
        }
        let bs = geo.block_size;
        let new_f = diflags_for(&ip, want.xflags);
        let new_f2 = diflags2_for(&ip, want.xflags);
        if fsx {
            let has_data = ip.nextents > 0;
            if ip.file_type == FileType::File
                && has_data
                && u64::from(ip.extsize) * u64::from(bs) != u64::from(want.extsize)
            {
                return Err(invalid(&ip, "the extent size hint of a file with data"));
            }
            if want.extsize % bs != 0 {
                return Err(invalid(&ip, "an extent size hint off the block size"));
            }
            if new_f & di::XFS_DIFLAG_RTINHERIT != 0
                && new_f & di::XFS_DIFLAG_EXTSZINHERIT != 0
                && !(want.extsize / bs).is_multiple_of(geo.rt_extsize.max(1))
            {
                return Err(invalid(&ip, "a hint off the realtime extent size"));
            }
            if !check_extsize(geo, ip.file_type, new_f, u64::from(want.extsize / bs)) {
                return Err(invalid(&ip, "the extent size hint"));
            }
            if want.xflags & xflag::COWEXTSIZE != 0 {
                if !geo.features.reflink || want.cowextsize % bs != 0 {
                    return Err(invalid(&ip, "the copy-on-write extent size hint"));
                }
                if !check_cowextsize(geo, ip.file_type, new_f2, u64::from(want.cowextsize / bs)) {
                    return Err(invalid(&ip, "the copy-on-write extent size hint"));
                }
            }
        }
        let rt_now = ip.flags & di::XFS_DIFLAG_REALTIME != 0;
        let rt = want.xflags & xflag::REALTIME != 0;
        if rt != rt_now && ip.nextents > 0 {
            return Err(invalid(&ip, "the realtime flag of a file with data"));
        }
        if rt && (geo.rt_blocks == 0 || ip.extsize % geo.rt_extsize.max(1) != 0) {
            return Err(invalid(&ip, "the realtime flag without a realtime section"));
        }
        if new_f2 & (di::XFS_DIFLAG2_DAX | di::XFS_DIFLAG2_COWEXTSIZE) != 0 && !geo.v5 {
            return Err(invalid(&ip, "a v3 inode flag on a v2 inode"));
        }
        ip.flags = new_f;
        ip.flags2 = new_f2;
        if let FileAttrSet::Fsx { clear_setid, .. } = *set {
            if clear_setid {
                ip.mode &= !0o6000;
            }
            ip.projid = want.projid;
            ip.extsize = if new_f & (di::XFS_DIFLAG_EXTSIZE | di::XFS_DIFLAG_EXTSZINHERIT) != 0 {
                want.extsize / bs
            } else {
                0
            };
            if geo.v5 {
                ip.cowextsize = if new_f2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 {
                    want.cowextsize / bs
                } else {
                    0
                };
            }
        }
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()?;
        Ok(ip)
    }
}

/// Offset of `sb_fname` in a superblock.
const FNAME_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_fname);
/// Superblocks changed per transaction when the label is set.
const LABEL_SBS_PER_TRANS: u32 = 16;

impl Fs {
    /// The filesystem label as the primary superblock holds it now
    /// (a label set since the open included), without its NUL padding.
    pub fn label(&self) -> Result<Vec<u8>> {
        let sect = self.geometry().sect_size as usize;
        let sb = match crate::fs::pending_inode(self, 0, sect) {
            Some(b) => b.to_vec(),
            None => {
                let mut v = vec![0u8; sect];
                self.read_bytes(0, &mut v)?;
                v
            }
        };
        let raw = &sb[FNAME_OFF..FNAME_OFF + 12];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(12);
        Ok(raw[..len].to_vec())
    }

    /// Sets the label (at most 12 bytes) in every superblock, the
    /// primary first, journaled (`FS_IOC_SETFSLABEL`; kernel XFS logs the
    /// primary and rewrites the secondary copies).
    pub fn set_label(&self, label: &[u8]) -> Result<()> {
        if label.len() > 12 {
            return Err(Error::Invalid(format!(
                "a label of {} bytes: XFS keeps at most 12",
                label.len()
            )));
        }
        let mut fname = [0u8; 12];
        fname[..label.len()].copy_from_slice(label);
        let geo = self.geometry();
        let kind = crate::log::buftype::BufKind {
            blft: crate::log::buftype::blft::SB,
            lsn_off: Some(xfs_format::sb::XFS_SB_LSN_OFF),
        };
        let ag_bytes = u64::from(geo.ag_blocks) * u64::from(geo.block_size);
        let mut agno = 0;
        while agno < geo.ag_count {
            let mut tp = self.trans()?;
            let end = (agno + LABEL_SBS_PER_TRANS).min(geo.ag_count);
            for a in agno..end {
                let daddr = crate::geometry::Daddr(u64::from(a) * ag_bytes / 512);
                let id = tp.read_raw_buf(
                    daddr,
                    geo.sect_size,
                    kind,
                    Some(xfs_format::sb::XFS_SB_CRC_OFF),
                )?;
                tp.buf_mut(id)[FNAME_OFF..FNAME_OFF + 12].copy_from_slice(&fname);
            }
            tp.commit()?;
            agno = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_flags_map_both_ways() {
        let all = flags_of_xflags(u32::MAX);
        assert_eq!(xflags_of_flags(all), XFLAGS_COMMON);
        assert_eq!(
            flags_of_xflags(xflag::IMMUTABLE | xflag::EXTSIZE),
            fl::IMMUTABLE
        );
        assert_eq!(xflags_of_flags(fl::APPEND | 0x1), xflag::APPEND);
    }
}

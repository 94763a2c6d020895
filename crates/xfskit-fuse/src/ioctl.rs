//! FUSE_IOCTL: the ioctls a FUSE server can be asked, answered as kernel
//! XFS answers them (fs/xfs/xfs_ioctl.c), for both transports.
//!
//! The kernel's FUSE turns `chattr`/`lsattr` and `FS_IOC_FSGETXATTR`/
//! `FSSETXATTR` into FUSE_IOCTL requests itself (fs/fuse/ioctl.c,
//! fuse_fileattr_get/set) with `FS_IOC_GETFLAGS`/`SETFLAGS` (a 4-byte
//! flags word) or `FS_IOC_FSGETXATTR`/`FSSETXATTR` (`struct fsxattr`),
//! after the VFS checked ownership and CAP_LINUX_IMMUTABLE in the caller's
//! context; the server checks the same again from the caller's
//! credentials ([`crate::creds`]). Other ioctls reach the server only as
//! "restricted" ones: the argument's size and direction come from the
//! command number, so the server sees the bytes of an `_IOW` argument and
//! answers those of an `_IOR` one. Of those, the filesystem label
//! (`FS_IOC_GETFSLABEL`/`SETFSLABEL`) is answered; everything else gets
//! ENOTTY, as an ioctl no filesystem knows.

use crate::creds::{CAP_FOWNER, CAP_FSETID, CAP_LINUX_IMMUTABLE, CAP_SYS_ADMIN};
use crate::errno::to_errno;
use crate::names::Caller;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo};
use xfskit::inode::FileType;
use xfskit::namespace::{fl, FileAttrSet, FsxAttr};

/// `FS_IOC_GETFLAGS` (the kernel's FUSE sends the 64-bit number with a
/// 4-byte argument) and its 32-bit twin.
const GETFLAGS: [u32; 2] = [0x8008_6601, 0x8004_6601];
/// `FS_IOC_SETFLAGS` and its 32-bit twin.
const SETFLAGS: [u32; 2] = [0x4008_6602, 0x4004_6602];
/// `FS_IOC_FSGETXATTR`.
const FSGETXATTR: u32 = 0x801c_581f;
/// `XFS_IOC_GOINGDOWN` (`_IOR('X', 125, __u32)`). Its flags word is an
/// input that FUSE does not carry for an `_IOR` command: every shutdown
/// is taken as LOGFLUSH (what was committed survives).
const GOINGDOWN: u32 = 0x8004_587d;
/// `FS_IOC_FSSETXATTR`.
const FSSETXATTR: u32 = 0x401c_5820;
/// `FS_IOC_GETFSLABEL` (`char[256]` out).
const GETFSLABEL: u32 = 0x8100_9431;
/// `FS_IOC_SETFSLABEL` (`char[256]` in).
const SETFSLABEL: u32 = 0x4100_9432;
/// `FSLABEL_MAX`.
const LABEL_MAX: usize = 256;
/// `sizeof(struct fsxattr)`.
const FSXATTR_LEN: usize = 28;

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |w| u32::from_le_bytes(w.try_into().unwrap()))
}

/// `struct fsxattr` in the caller's (little-endian) layout.
fn encode_fsx(a: &FsxAttr) -> Vec<u8> {
    let mut v = Vec::with_capacity(FSXATTR_LEN);
    for w in [a.xflags, a.extsize, a.nextents, a.projid, a.cowextsize] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v.resize(FSXATTR_LEN, 0);
    v
}

fn decode_fsx(b: &[u8]) -> FsxAttr {
    FsxAttr {
        xflags: le32(b, 0),
        extsize: le32(b, 4),
        nextents: le32(b, 8),
        projid: le32(b, 12),
        cowextsize: le32(b, 16),
    }
}

impl XfsFuse {
    /// Answers ioctl `cmd` on `node` with argument bytes `input`: the
    /// bytes to send back (exactly `out_size` of them, as the kernel
    /// copies that many to the caller).
    pub(crate) fn ioctl_answer(
        &self,
        who: Caller,
        node: INodeNo,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let mut out = match cmd {
            c if GETFLAGS.contains(&c) => {
                let a = self.fsx_of(node)?;
                xfskit::namespace::flags_of_xflags(a.xflags)
                    .to_le_bytes()
                    .to_vec()
            }
            FSGETXATTR => encode_fsx(&self.fsx_of(node)?),
            c if SETFLAGS.contains(&c) => {
                if input.len() < 4 {
                    return Err(Errno::EFAULT);
                }
                self.set_fileattr(who, node, FileAttrSet::Flags(le32(input, 0)))?;
                Vec::new()
            }
            FSSETXATTR => {
                if input.len() < FSXATTR_LEN {
                    return Err(Errno::EFAULT);
                }
                let attr = decode_fsx(input);
                let set = FileAttrSet::Fsx {
                    attr,
                    clear_setid: false,
                };
                self.set_fileattr(who, node, set)?;
                Vec::new()
            }
            GOINGDOWN => {
                if !who.capable(CAP_SYS_ADMIN) {
                    return Err(Errno::EPERM);
                }
                self.check_writable()?;
                self.behind.settle_all();
                if let Err(e) = self.fs.shut_down() {
                    eprintln!("xfskit mount: shutting down: the last flush failed: {e}");
                }
                eprintln!("xfskit mount: filesystem shut down (XFS_IOC_GOINGDOWN): every request now fails with EIO");
                Vec::new()
            }
            GETFSLABEL => {
                let mut v = self.fs.label().map_err(|e| to_errno(&e))?;
                v.resize(LABEL_MAX, 0);
                v
            }
            SETFSLABEL => {
                self.set_label(who, input)?;
                Vec::new()
            }
            _ => return Err(Errno::ENOTTY),
        };
        out.resize(out_size as usize, 0);
        Ok(out)
    }

    fn fsx_of(&self, node: INodeNo) -> Result<FsxAttr, Errno> {
        let ip = self.inode(node)?;
        Ok(xfskit::namespace::fsxattr_of(self.fs.geometry(), &ip))
    }

    /// FS_IOC_SETFLAGS and FS_IOC_FSSETXATTR: the VFS's rules (the owner
    /// or CAP_FOWNER; CAP_LINUX_IMMUTABLE to change the immutable or
    /// append-only flag), then XFS's, in the engine.
    fn set_fileattr(&self, who: Caller, node: INodeNo, mut set: FileAttrSet) -> Result<(), Errno> {
        self.check_writable()?;
        let ip = self.inode(node)?;
        if !matches!(ip.file_type, FileType::File | FileType::Dir) {
            // The kernel's FUSE sends file attribute requests for regular
            // files and directories only.
            return Err(Errno::ENOTTY);
        }
        if who.uid != ip.uid && !who.capable(CAP_FOWNER) {
            return Err(Errno::EPERM);
        }
        let old = xfskit::namespace::fsxattr_of(self.fs.geometry(), &ip);
        let old_fl = xfskit::namespace::flags_of_xflags(old.xflags);
        let new_fl = match &set {
            FileAttrSet::Flags(f) => *f,
            FileAttrSet::Fsx { attr, .. } => xfskit::namespace::flags_of_xflags(attr.xflags),
        };
        if (old_fl ^ new_fl) & (fl::IMMUTABLE | fl::APPEND) != 0
            && !who.capable(CAP_LINUX_IMMUTABLE)
        {
            return Err(Errno::EPERM);
        }
        if let FileAttrSet::Fsx { clear_setid, .. } = &mut set {
            // XFS drops set-id bits on this path for a caller without
            // CAP_FSETID (over the inode's owners).
            *clear_setid = ip.mode & 0o6000 != 0 && !who.capable(CAP_FSETID);
        }
        self.fs
            .set_file_attr(ip.ino, &set)
            .map_err(|e| to_errno(&e))?;
        // The ioctl's answer carries no attributes: the ctime (and the
        // mode, where set-id bits went) the kernel cached are stale.
        self.attrs_changed(node);
        Ok(())
    }

    /// FS_IOC_SETFSLABEL: CAP_SYS_ADMIN, at most the 12 bytes of
    /// `sb_fname`.
    fn set_label(&self, who: Caller, input: &[u8]) -> Result<(), Errno> {
        if !who.capable(CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        let len = input.iter().position(|&b| b == 0).unwrap_or(input.len());
        if len > 12 {
            return Err(Errno::EINVAL);
        }
        self.check_writable()?;
        self.fs.set_label(&input[..len]).map_err(|e| to_errno(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsxattr_layout() {
        let a = FsxAttr {
            xflags: 0x800,
            extsize: 65536,
            nextents: 3,
            projid: 42,
            cowextsize: 0,
        };
        let b = encode_fsx(&a);
        assert_eq!(b.len(), FSXATTR_LEN);
        assert_eq!(&b[4..8], &65536u32.to_le_bytes());
        assert_eq!(decode_fsx(&b), a);
    }
}

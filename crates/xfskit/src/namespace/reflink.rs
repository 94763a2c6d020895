//! Shared file blocks (reflink): cloning a range of one file into
//! another, and the copy-on-write that keeps writes to shared blocks
//! private to the file written.

use crate::bmap::CowPiece;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{FsBlock, Ino};
use crate::inode::{FileType, Fork, Inode};
use crate::trans::Trans;
use xfs_format::inode::XFS_DIFLAG2_REFLINK;

/// Most blocks one clone transaction maps (bounds its log space).
const CLONE_CHUNK: u64 = 1 << 20;

impl Fs {
    /// Gives file blocks `lblk..lblk+len` of `ip` blocks of their own where
    /// they share them, copying the old data of the file blocks listed in
    /// `keep` (the blocks a write covers only in part). True when the
    /// mapping changed.
    pub(crate) fn unshare(
        &self,
        tp: &mut Trans<'_>,
        ip: &mut Inode,
        lblk: u64,
        len: u64,
        keep: &[Option<u64>],
    ) -> Result<bool> {
        if !ip.may_share() {
            return Ok(false);
        }
        let bs = u64::from(self.geometry().block_size);
        let mut copy = |_: &mut Trans<'_>, p: &CowPiece| -> Result<()> {
            if p.unwritten {
                return Ok(());
            }
            for b in keep.iter().flatten() {
                if *b < p.lblk || *b >= p.lblk + p.len {
                    continue;
                }
                let geo = self.geometry();
                let from = geo.fsb_to_daddr(FsBlock(p.old.0 + (b - p.lblk)));
                let to = geo.fsb_to_daddr(FsBlock(p.new.0 + (b - p.lblk)));
                let mut block = vec![0u8; bs as usize];
                self.read_bytes(from.bytes(), &mut block)?;
                self.write_data(to.bytes(), &block)?;
            }
            Ok(())
        };
        let moved = crate::bmap::unshare_range(tp, ip, lblk, len, &mut copy)?;
        Ok(!moved.is_empty())
    }

    /// Makes bytes `dst_off..dst_off+len` of regular file `dst` share the
    /// blocks of `src_off..src_off+len` of `src` (FICLONERANGE; `len` 0:
    /// to the end of `src`). Offsets must be multiples of the block size,
    /// and so must `len` unless the range ends at the end of `src` (and
    /// at or past the end of `dst`). Holes and unwritten extents of the
    /// source become holes. Returns the bytes cloned.
    pub fn clone_range(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        let geo = self.geometry();
        if !geo.features.reflink {
            return Err(Error::Unsupported(
                "cloning on a filesystem without reflink".into(),
            ));
        }
        let bs = u64::from(geo.block_size);
        let src_size = {
            let mut tp = self.trans()?;
            let sp = regular(&mut tp, src)?;
            let dp = regular(&mut tp, dst)?;
            super::guard::may_change(&dp, "cloning into")?;
            if sp.is_realtime() || dp.is_realtime() {
                return Err(Error::Unsupported(
                    "cloning realtime files: xfskit does not share realtime extents".into(),
                ));
            }
            sp.size
        };
        if !src_off.is_multiple_of(bs) || !dst_off.is_multiple_of(bs) {
            return Err(Error::Invalid("clone offsets must be block aligned".into()));
        }
        let len = if len == 0 || src_off.saturating_add(len) > src_size {
            src_size.saturating_sub(src_off)
        } else {
            len
        };
        if len == 0 {
            return Ok(0);
        }
        let to_eof = src_off + len == src_size;
        if !len.is_multiple_of(bs) && !to_eof {
            return Err(Error::Invalid("clone length must be block aligned".into()));
        }
        let dst_end = dst_off
            .checked_add(len)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid("clone past the largest file size".into()))?;
        let blocks = len.div_ceil(bs);
        let (s0, d0) = (src_off / bs, dst_off / bs);
        if src == dst && s0 < d0 + blocks && d0 < s0 + blocks {
            return Err(Error::Invalid("clone ranges of one file overlap".into()));
        }
        // As the kernel writes both files' dirty pages before it remaps:
        // file data still pending goes to disk first, or a crash could
        // leave the clone (durable) sharing blocks that never held what it
        // was cloned with (the source's pending partial-block zeroing of a
        // punch, say).
        self.write_state()?.flush_data(self.device())?;
        self.device().flush().map_err(Error::Io)?;
        let mut done = 0u64;
        while done < blocks {
            let now = self.now()?;
            let mut tp = self.trans()?;
            tp.lock_inode(src.min(dst));
            tp.lock_inode(src.max(dst));
            let mut sp = regular(&mut tp, src)?;
            let mut dp = if src == dst {
                sp.clone()
            } else {
                regular(&mut tp, dst)?
            };
            if !len.is_multiple_of(bs) && dst_end < dp.size {
                return Err(Error::Invalid(
                    "a clone ending inside a block must reach the end of the destination".into(),
                ));
            }
            let pos = s0 + done;
            let want = (blocks - done).min(CLONE_CHUNK);
            let (n, from) = match crate::bmap::next_extent(&mut tp, &sp, Fork::Data, pos)? {
                Some(e) if e.offset <= pos => {
                    let n = (e.end() - pos).min(want);
                    let from = (!e.unwritten).then(|| FsBlock(e.start.0 + (pos - e.offset)));
                    (n, from)
                }
                Some(e) => ((e.offset - pos).min(want), None),
                None => (want, None),
            };
            let dpos = d0 + done;
            crate::bmap::unmap_range(&mut tp, &mut dp, Fork::Data, dpos, n)?;
            if let Some(start) = from {
                let owner = crate::alloc::Owner::Inode {
                    ino: dst,
                    attr_fork: false,
                    offset: dpos,
                    bmbt: false,
                };
                crate::alloc::share_extent(&mut tp, start, n as u32, &owner)?;
                dp.flags2 |= XFS_DIFLAG2_REFLINK;
                crate::bmap::map_given(&mut tp, &mut dp, Fork::Data, dpos, start, n)?;
                if !sp.may_share() && src != dst {
                    sp.flags2 |= XFS_DIFLAG2_REFLINK;
                    tp.log_inode(&sp)?;
                }
            }
            done += n;
            let end = (dst_off + done * bs).min(dst_end);
            if end > dp.size {
                dp.size = end;
            }
            self.touch_modify(&mut dp, now)?;
            tp.log_inode(&dp)?;
            tp.commit()?;
        }
        Ok(len)
    }
}

fn regular(tp: &mut Trans<'_>, ino: Ino) -> Result<Inode> {
    let ip = tp.read_inode(ino)?;
    match ip.file_type {
        FileType::File => Ok(ip),
        FileType::Dir => Err(Error::IsDir(format!("inode {}", ino.0))),
        _ => Err(Error::Invalid(format!(
            "inode {} is not a regular file",
            ino.0
        ))),
    }
}

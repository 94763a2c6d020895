//! File data of realtime files (XFS_DIFLAG_REALTIME): blocks on the
//! realtime device, mapped in whole realtime extents (see
//! [`crate::bmap::rt`]). Data goes straight to the realtime device and is
//! flushed before the transaction that maps it commits, so a crash never
//! maps blocks whose data did not land; partial blocks are read back from
//! the device and merged.

use crate::error::Result;
use crate::fs::Fs;
use crate::inode::{Fork, Inode};
use crate::trans::Trans;

/// Writes `data` at byte `offset` of realtime file `ip` within `tp`
/// (the caller sets the size and times, logs the inode and commits).
pub(crate) fn write(
    fs: &Fs,
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let bs = u64::from(fs.geometry().block_size);
    let end = offset + data.len() as u64;
    let first = offset / bs;
    let last = (end - 1) / bs;
    let written = |e: Option<crate::inode::Extent>| e.is_some_and(|x| !x.unwritten);
    let old_first = written(crate::bmap::lookup(tp, ip, Fork::Data, first)?);
    let old_last = written(crate::bmap::lookup(tp, ip, Fork::Data, last)?);
    let map = crate::bmap::alloc_range(tp, ip, Fork::Data, first, last - first + 1, false, None)?;
    if map.iter().any(|e| e.unwritten) {
        crate::bmap::convert_unwritten(tp, ip, Fork::Data, first, last - first + 1)?;
    }
    let rtb_of = |blk: u64| -> Option<u64> {
        map.iter()
            .find(|e| e.offset <= blk && blk < e.end())
            .map(|e| e.start.0 + (blk - e.offset))
    };
    let mut out = vec![0u8; ((last - first + 1) * bs) as usize];
    // Partial edge blocks that held data keep the bytes around the write.
    for (blk, had) in [(first, old_first), (last, old_last)] {
        let partial = (blk == first && !offset.is_multiple_of(bs))
            || (blk == last && !end.is_multiple_of(bs));
        if had && partial {
            if let Some(rtb) = rtb_of(blk) {
                let at = ((blk - first) * bs) as usize;
                fs.read_rt_bytes(
                    ip.ino.0,
                    fs.geometry().rtb_to_bytes(rtb),
                    &mut out[at..at + bs as usize],
                )?;
            }
        }
    }
    let at = (offset - first * bs) as usize;
    out[at..at + data.len()].copy_from_slice(data);
    for e in &map {
        let lo = e.offset.max(first);
        let hi = e.end().min(last + 1);
        if lo >= hi {
            continue;
        }
        let rtb = e.start.0 + (lo - e.offset);
        let s = ((lo - first) * bs) as usize;
        let t = ((hi - first) * bs) as usize;
        fs.write_rt_bytes(fs.geometry().rtb_to_bytes(rtb), &out[s..t])?;
    }
    fs.flush_rt()
}

/// Zeroes bytes `from..to` of realtime file `ip` where blocks hold data
/// (the tail past a new size, the parts of realtime extents a punch or a
/// truncate keeps mapped).
pub(crate) fn zero(fs: &Fs, tp: &mut Trans<'_>, ip: &Inode, from: u64, to: u64) -> Result<()> {
    let bs = u64::from(fs.geometry().block_size);
    let mut pos = from;
    while pos < to {
        let blk = pos / bs;
        let blk_end = ((blk + 1) * bs).min(to);
        if let Some(e) = crate::bmap::lookup(tp, ip, Fork::Data, blk)? {
            if !e.unwritten {
                let rtb = e.start.0 + (blk - e.offset);
                let mut block = vec![0u8; bs as usize];
                fs.read_rt_bytes(ip.ino.0, fs.geometry().rtb_to_bytes(rtb), &mut block)?;
                block[(pos - blk * bs) as usize..(blk_end - blk * bs) as usize].fill(0);
                fs.write_rt_bytes(fs.geometry().rtb_to_bytes(rtb), &block)?;
            }
        }
        pos = blk_end;
    }
    fs.flush_rt()
}

impl Fs {
    /// True when regular files made in directory `parent` are realtime
    /// files (it has RTINHERIT on a filesystem with a realtime section):
    /// their data takes the realtime write path, not a batch's.
    pub(crate) fn makes_realtime_files(&self, parent: crate::Ino) -> Result<bool> {
        if self.geometry().rt_blocks == 0 {
            return Ok(false);
        }
        let mut tp = self.trans()?;
        let dp = tp.read_inode(parent)?;
        Ok(dp.flags & xfs_format::inode::XFS_DIFLAG_RTINHERIT != 0)
    }

    /// Sets or clears the realtime flag as `XFS_IOC_FSSETXATTR` does: on a
    /// directory `XFS_DIFLAG_RTINHERIT` (files made in it afterwards are
    /// realtime files), on a regular file `XFS_DIFLAG_REALTIME`, which the
    /// kernel changes only while the file maps no blocks. The filesystem
    /// must have a realtime section.
    pub fn set_realtime(&self, ino: crate::Ino, on: bool) -> Result<()> {
        use crate::error::Error;
        use crate::inode::FileType;
        use xfs_format::inode::{XFS_DIFLAG_REALTIME, XFS_DIFLAG_RTINHERIT};
        if self.geometry().rt_blocks == 0 {
            return Err(Error::Invalid(
                "the filesystem has no realtime section".into(),
            ));
        }
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        super::guard::may_change(&ip, "changing the realtime flag of")?;
        let flag = match ip.file_type {
            FileType::Dir => XFS_DIFLAG_RTINHERIT,
            FileType::File => {
                if ip.nblocks != 0 || ip.nextents != 0 {
                    return Err(Error::Invalid(format!(
                        "inode {} maps blocks: the realtime flag changes only on empty files",
                        ino.0
                    )));
                }
                XFS_DIFLAG_REALTIME
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "inode {} is neither a regular file nor a directory",
                    ino.0
                )))
            }
        };
        if on {
            ip.flags |= flag;
        } else {
            ip.flags &= !flag;
        }
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }
}

//! The build workload's fast path: a small regular file created with its
//! contents and xattrs in one transaction, instead of one transaction to
//! create it, one to write it and one per xattr. The result is the same
//! as [`Fs::create`] + [`Fs::write_at_opt`] (times untouched) +
//! [`Fs::set_xattr_opt`] (times untouched) for each xattr, in that order.

use super::{Meta, NodeKind};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{FsBlock, Ino};
use crate::inode::{Fork, Inode};
use crate::trans::Trans;

/// Largest contents written in the creating transaction (keeps the
/// transaction's allocation work bounded); larger files are created
/// first and written in chunks.
pub const CREATE_DATA_MAX: usize = 1 << 20;

/// Most xattrs set in the creating transaction.
pub const CREATE_XATTRS_MAX: usize = 8;

impl Fs {
    /// Creates regular file `name` in `parent` holding `data`, with the
    /// extended attributes `xattrs` (full Linux names), and returns it.
    pub fn create_file(
        &self,
        parent: Ino,
        name: &[u8],
        meta: &Meta,
        data: &[u8],
        xattrs: &[(&[u8], &[u8])],
    ) -> Result<Ino> {
        let kind = NodeKind::File {
            size: data.len() as u64,
        };
        if data.len() > CREATE_DATA_MAX
            || xattrs.len() > CREATE_XATTRS_MAX
            || self.makes_realtime_files(parent)?
        {
            let ino = self.create(parent, name, &kind, meta)?;
            self.write_at_opt(ino, 0, data, false)?;
            for (n, v) in xattrs {
                self.set_xattr_opt(ino, n, v, false)?;
            }
            return Ok(ino);
        }
        super::create::check_kind(name, &kind)?;
        self.quota_prepare_create(parent, meta.uid, meta.gid)?;
        let now = self.now()?;
        let gen = self.write_state()?.next_gen();
        let mut tp = self.trans()?;
        let (mut ip, dp) = self.create_in(&mut tp, parent, name, &kind, meta, now, gen)?;
        let runs = if data.is_empty() {
            Vec::new()
        } else {
            map_data(&mut tp, &mut ip, data.len())?
        };
        for (n, v) in xattrs {
            super::xattr::set_xattr_in(&mut tp, &mut ip, n, v)?;
        }
        tp.log_inode(&ip)?;
        tp.log_inode(&dp)?;
        // Data goes to the allocated blocks only once nothing can fail
        // before the commit.
        self.queue_data(&runs, data)?;
        tp.commit()?;
        Ok(ip.ino)
    }

    /// Queues `data` (from file offset 0) for the runs (file byte offset,
    /// disk byte offset, bytes) it was mapped to; the tail of the last
    /// block is zero-filled.
    pub(super) fn queue_data(&self, runs: &[(u64, u64, u64)], data: &[u8]) -> Result<()> {
        let bs = u64::from(self.geometry().block_size);
        for &(foff, disk, len) in runs {
            let lo = foff as usize;
            let hi = ((foff + len) as usize).min(data.len());
            let whole = (hi - lo) / bs as usize * bs as usize;
            self.write_data(disk, &data[lo..lo + whole])?;
            if lo + whole < hi {
                let mut last = vec![0u8; bs as usize];
                last[..hi - lo - whole].copy_from_slice(&data[lo + whole..hi]);
                self.write_data(disk + whole as u64, &last)?;
            }
        }
        Ok(())
    }
}

/// Allocates the blocks for `len` bytes from offset 0 of a new file;
/// returns (file byte offset, disk byte offset, bytes) per extent.
pub(super) fn map_data(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    len: usize,
) -> Result<Vec<(u64, u64, u64)>> {
    let geo = tp.geo();
    let bs = u64::from(geo.block_size);
    let blocks = (len as u64).div_ceil(bs);
    let map = crate::bmap::alloc_range(tp, ip, Fork::Data, 0, blocks, false, None)?;
    let mut runs = Vec::with_capacity(map.len());
    let mut covered = 0u64;
    for e in &map {
        let lo = e.offset;
        let hi = e.end().min(blocks);
        if lo >= hi {
            continue;
        }
        if e.unwritten {
            return Err(Error::Invalid(format!(
                "inode {}: new file mapped to unwritten blocks",
                ip.ino.0
            )));
        }
        let disk = geo.fsb_to_daddr(FsBlock(e.start.0)).bytes();
        runs.push((lo * bs, disk, (hi - lo) * bs));
        covered += hi - lo;
    }
    if covered != blocks {
        return Err(Error::NoSpace(format!(
            "inode {}: {covered} of {blocks} blocks mapped",
            ip.ino.0
        )));
    }
    Ok(runs)
}

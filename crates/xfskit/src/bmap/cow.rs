//! Copy-on-write of shared data blocks (reflink).
//!
//! A file whose data fork may share blocks with other files (the reflink
//! inode flag) never writes a shared block in place. Before a write,
//! [`unshare_range`] gives the written range blocks of its own: new
//! blocks are allocated, the caller copies into them what the write
//! will not overwrite, and they replace the shared ones in the mapping,
//! whose owner count drops by one. All of it happens in the caller's
//! transaction, after which the new blocks are written like any newly
//! allocated blocks (their data reaches the disk before the checkpoint
//! that maps them), so a crash leaves either the old mapping with the
//! old data or the new mapping with the new data. The kernel stages the
//! new blocks in a copy-on-write fork instead, because its writes are
//! delayed; ours are not, and need no staging.

use super::{edit, fork, map_given_as, range_end, space, unmap_range};
use crate::alloc::{AllocReq, Owner};
use crate::error::{Error, Result};
use crate::geometry::FsBlock;
use crate::inode::{Fork, Inode};
use crate::trans::Trans;

/// One run of file blocks moved off shared blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CowPiece {
    /// First file block.
    pub lblk: u64,
    /// The shared blocks it mapped.
    pub old: FsBlock,
    /// The blocks of its own it maps now.
    pub new: FsBlock,
    /// Blocks.
    pub len: u64,
    /// The mapping is unwritten (reads as zeros, nothing to copy).
    pub unwritten: bool,
}

/// Gives file blocks `lblk..lblk+len` of `ip`'s data fork blocks of their
/// own wherever they map shared blocks. `copy` is called for each new
/// piece before the mapping changes (the old blocks still hold the old
/// data) and copies whatever the caller's write will not cover. Returns
/// the pieces moved. A no-op for inodes without the reflink flag.
pub fn unshare_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    lblk: u64,
    len: u64,
    copy: &mut dyn FnMut(&mut Trans<'_>, &CowPiece) -> Result<()>,
) -> Result<Vec<CowPiece>> {
    if !ip.may_share() || !tp.geo().features.reflink || len == 0 {
        return Ok(Vec::new());
    }
    fork::check_mapped(tp.geo(), ip, Fork::Data)?;
    let end = range_end(lblk, len)?;
    let win = fork::window(tp, ip, Fork::Data, lblk, end)?;
    let mut runs = Vec::new();
    for e in win.iter().filter(|e| e.end() > lblk && e.offset < end) {
        let c = edit::clip(e, lblk, end);
        let n = u32::try_from(c.len)
            .map_err(|_| Error::Invalid(format!("extent of {} blocks", c.len)))?;
        for (s, l, _) in crate::alloc::shared_runs(tp, c.start, n)? {
            runs.push((c.offset + (s.0 - c.start.0), s, u64::from(l), c.unwritten));
        }
    }
    let mut out = Vec::new();
    for (off, old, n, unwritten) in runs {
        let mut done = 0u64;
        while done < n {
            let owner = Owner::Inode {
                ino: ip.ino,
                attr_fork: false,
                offset: off + done,
                bmbt: false,
            };
            let want = (n - done).min(u64::from(u32::MAX)) as u32;
            let req = AllocReq {
                target: FsBlock(old.0 + n),
                minlen: 1,
                maxlen: want,
                alignment: 1,
                ag_only: false,
                owner,
            };
            let (new, got) = space::alloc_extent(tp, &req)?;
            if got == 0 || got > want {
                return Err(Error::Invalid(format!(
                    "allocator returned {got} blocks for a request of 1..={want}"
                )));
            }
            super::data_blocks_claimed(tp, new, got)?;
            if unwritten {
                crate::alloc::rmap_convert(tp, new, got, &owner, true)?;
            }
            let piece = CowPiece {
                lblk: off + done,
                old: FsBlock(old.0 + done),
                new,
                len: u64::from(got),
                unwritten,
            };
            copy(tp, &piece)?;
            unmap_range(tp, ip, Fork::Data, piece.lblk, piece.len)?;
            map_given_as(tp, ip, Fork::Data, piece.lblk, new, piece.len, unwritten)?;
            out.push(piece);
            done += u64::from(got);
        }
    }
    Ok(out)
}

//! After replay: the inodes left on the AGI unlinked lists.
//!
//! An inode whose last link went away stays on one of its AG's 64
//! unlinked lists until it is freed (the kernel frees it in the
//! background, or when its last open file is closed). A crash leaves such
//! inodes behind; the kernel frees them at the end of recovery. So do we,
//! through the write engine: each inode with no link left has its forks
//! emptied and is freed, any other inode on a list is just taken off it,
//! and the bucket heads are cleared.

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr, Ino};
use std::collections::HashSet;
use std::mem::offset_of;
use xfs_format::ag::{Agi, XFS_AGI_SECTOR, XFS_AGI_UNLINKED_BUCKETS};
use xfs_format::types::NULLAGINO;

/// What was done with the unlinked lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnlinkedReport {
    /// Inodes freed.
    pub freed: usize,
    /// Inodes with links left, only taken off their list.
    pub kept: usize,
}

fn agi_daddr(fs: &Fs, agno: u32) -> Daddr {
    let geo = fs.geometry();
    let ag0 = geo.agb_to_daddr(AgNumber(agno), AgBlock(0));
    Daddr(ag0.0 + XFS_AGI_SECTOR * u64::from(geo.sect_size / 512))
}

/// The inodes on AG `agno`'s unlinked lists, bucket by bucket.
fn collect(fs: &Fs, agno: u32) -> Result<Vec<Ino>> {
    let geo = fs.geometry();
    let mut agi = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(agi_daddr(fs, agno).bytes(), &mut agi)?;
    let base = offset_of!(Agi, agi_unlinked);
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for b in 0..XFS_AGI_UNLINKED_BUCKETS {
        let o = base + b * 4;
        let mut agino = u32::from_be_bytes([agi[o], agi[o + 1], agi[o + 2], agi[o + 3]]);
        while agino != NULLAGINO {
            let ino = geo.ino_make(AgNumber(agno), agino);
            if !geo.ino_valid(ino) || !seen.insert(ino) {
                return Err(Error::corrupt(
                    "AGI unlinked list",
                    Location::Other(format!("AG {agno} bucket {b}")),
                    format!("inode {} is invalid or listed twice", ino.0),
                ));
            }
            let ip = fs.inode(ino)?;
            out.push(ino);
            agino = ip.next_unlinked;
        }
    }
    Ok(out)
}

/// Frees or unlists every inode on the unlinked lists of a filesystem
/// opened for writing, then writes everything back.
///
/// Each inode is taken off the head of its bucket in the transaction
/// that frees it (or only unlists it), as the kernel's inactivation does,
/// so that after a crash part way the lists hold exactly the inodes not
/// yet done. The chains are walked whole first, so that a cycle or a bad
/// inode number fails before anything changes.
pub fn process_unlinked(fs: &Fs) -> Result<UnlinkedReport> {
    let mut report = UnlinkedReport::default();
    let base = offset_of!(Agi, agi_unlinked);
    for agno in 0..fs.geometry().ag_count {
        let inos = collect(fs, agno)?;
        for ino in inos {
            let agino = fs.geometry().ino_agino(ino);
            let at = base + (agino as usize % XFS_AGI_UNLINKED_BUCKETS) * 4;
            let mut tp = fs.trans()?;
            tp.lock_inode(ino);
            let mut ip = tp.read_inode(ino)?;
            let agi = crate::ialloc::agi::read_agi(&mut tp, AgNumber(agno))?;
            let head = crate::ialloc::agi::get(&tp, agi, at);
            if head != agino {
                return Err(Error::corrupt(
                    "AGI unlinked list",
                    Location::Other(format!("AG {agno} bucket {}", agino % 64)),
                    format!("inode {} is listed, but the bucket starts at {head}", ino.0),
                ));
            }
            crate::ialloc::agi::set(&mut tp, agi, at, ip.next_unlinked);
            ip.next_unlinked = NULLAGINO;
            tp.log_unlinked(ino);
            if ip.nlink == 0 {
                tp.log_inode(&ip)?;
                crate::ialloc::destroy(&mut tp, ip)?;
                report.freed += 1;
            } else {
                tp.log_inode(&ip)?;
                report.kept += 1;
            }
            tp.commit()?;
        }
    }
    fs.sync()?;
    Ok(report)
}

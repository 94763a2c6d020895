//! After replay: the inodes left on the AGI unlinked lists.
//!
//! An inode whose last link went away stays on one of its AG's 64
//! unlinked lists until it is freed (the kernel frees it in the
//! background, or when its last open file is closed). A crash leaves such
//! inodes behind; the kernel frees them at the end of recovery. So do we,
//! through the write engine: each inode with no link left has its forks
//! emptied and is freed, any other inode on a list is just taken off it,
//! and the bucket heads are cleared.

use crate::buf::Verifier;
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
pub fn process_unlinked(fs: &Fs) -> Result<UnlinkedReport> {
    let mut report = UnlinkedReport::default();
    for agno in 0..fs.geometry().ag_count {
        let inos = collect(fs, agno)?;
        if inos.is_empty() {
            continue;
        }
        for ino in inos {
            let mut tp = fs.trans()?;
            tp.lock_ag(AgNumber(agno));
            let mut ip = tp.read_inode(ino)?;
            ip.next_unlinked = NULLAGINO;
            if ip.nlink == 0 {
                tp.log_inode(&ip)?;
                crate::namespace::remove::destroy(&mut tp, ip)?;
                report.freed += 1;
            } else {
                tp.log_inode(&ip)?;
                report.kept += 1;
            }
            tp.commit()?;
        }
        let mut tp = fs.trans()?;
        tp.lock_ag(AgNumber(agno));
        let len = fs.geometry().sect_size;
        let id = tp.read_buf(agi_daddr(fs, agno), len, &Verifier::Agi { agno })?;
        let base = offset_of!(Agi, agi_unlinked);
        let buf = tp.buf_mut(id);
        for b in 0..XFS_AGI_UNLINKED_BUCKETS {
            buf[base + b * 4..base + b * 4 + 4].copy_from_slice(&NULLAGINO.to_be_bytes());
        }
        tp.commit()?;
    }
    fs.sync()?;
    Ok(report)
}

//! After replay on reflink filesystems: copy-on-write staging extents.
//!
//! Blocks allocated for a copy-on-write that had not been remapped into
//! the file when the system stopped are recorded in the reference count
//! btree with the CoW flag on their start block (and owned by the CoW
//! owner in the reverse mapping btree). Nothing else refers to them, so the
//! kernel frees them all at mount. We do the same when the reference count
//! btree is a single leaf (the case of any but large or heavily shared
//! filesystems); a deeper tree with staging extents is reported instead.

use crate::alloc::{free_extent, Owner};
use crate::buf::Verifier;
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr};
use std::mem::offset_of;
use xfs_format::ag::{Agf, XFS_AGF_SECTOR};
use xfs_format::btree::{XFS_REFC_COWFLAG, XFS_REFC_CRC_MAGIC};

/// Bytes of a short btree block header.
const HDR: usize = 56;
/// Bytes of a refcount record.
const REC: usize = 12;

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// What was done with the staging extents.
#[derive(Debug, Clone, Default)]
pub struct CowReport {
    /// Staging extents freed.
    pub freed: usize,
    /// AGs whose staging extents were left (a refcount btree of more than
    /// one level).
    pub left_in_ags: Vec<u32>,
}

/// Frees the CoW staging extents of a filesystem opened for writing.
pub fn clear_cow_staging(fs: &Fs) -> Result<CowReport> {
    let mut report = CowReport::default();
    let geo = fs.geometry().clone();
    if !geo.features.reflink {
        return Ok(report);
    }
    for agno in 0..geo.ag_count {
        let mut tp = fs.trans()?;
        tp.lock_ag(AgNumber(agno));
        let ag0 = geo.agb_to_daddr(AgNumber(agno), AgBlock(0));
        let agf_daddr = Daddr(ag0.0 + XFS_AGF_SECTOR * u64::from(geo.sect_size / 512));
        let agf = tp.read_buf(agf_daddr, geo.sect_size, &Verifier::Agf { agno })?;
        let root = be32(tp.buf(agf), offset_of!(Agf, agf_refcount_root));
        let level = be32(tp.buf(agf), offset_of!(Agf, agf_refcount_level));
        if level != 1 {
            if level > 1 {
                report.left_in_ags.push(agno);
            }
            continue;
        }
        let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(root));
        let v = Verifier::ShortBtree {
            magic: XFS_REFC_CRC_MAGIC,
            agno,
            level: Some(0),
        };
        let leaf = tp.read_buf(daddr, geo.block_size, &v)?;
        let b = tp.buf(leaf);
        let n = usize::from(u16::from_be_bytes([b[6], b[7]]));
        let mut keep = Vec::with_capacity(n * REC);
        let mut staging = Vec::new();
        for i in 0..n {
            let r = &b[HDR + i * REC..HDR + (i + 1) * REC];
            let start = be32(r, 0);
            if start & XFS_REFC_COWFLAG != 0 {
                staging.push((start & !XFS_REFC_COWFLAG, be32(r, 4)));
            } else {
                keep.extend_from_slice(r);
            }
        }
        if staging.is_empty() {
            continue;
        }
        let kept = keep.len() / REC;
        let bm = tp.buf_mut(leaf);
        bm[HDR..HDR + keep.len()].copy_from_slice(&keep);
        bm[HDR + keep.len()..HDR + n * REC].fill(0);
        bm[6..8].copy_from_slice(&(kept as u16).to_be_bytes());
        for (agbno, len) in staging {
            let fsb = geo.fsb_make(AgNumber(agno), AgBlock(agbno));
            free_extent(&mut tp, fsb, len, &Owner::Cow)?;
            report.freed += 1;
        }
        tp.commit()?;
    }
    fs.sync()?;
    Ok(report)
}

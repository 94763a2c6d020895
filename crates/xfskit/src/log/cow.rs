//! After replay on reflink filesystems: copy-on-write staging extents.
//!
//! Blocks allocated for a copy-on-write that had not been remapped into
//! the file when the system stopped are recorded in the reference count
//! btree with the CoW flag on their start block (and owned by the CoW
//! owner in the reverse mapping btree). Nothing else refers to them, so the
//! kernel frees them all at mount, and so do we.

use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::AgNumber;

/// What was done with the staging extents.
#[derive(Debug, Clone, Default)]
pub struct CowReport {
    /// Staging extents freed.
    pub freed: usize,
    /// AGs whose staging extents were left: their reference count btree
    /// could not be read (only when that was allowed).
    pub left_in_ags: Vec<u32>,
}

/// Frees the CoW staging extents of a filesystem opened for writing, one
/// transaction per AG. With `damaged_ok`, an AG whose refcount btree
/// cannot be read is left (and listed) instead of failing.
pub fn clear_cow_staging(fs: &Fs, damaged_ok: bool) -> Result<CowReport> {
    let mut report = CowReport::default();
    let geo = fs.geometry().clone();
    if !geo.features.reflink {
        return Ok(report);
    }
    for agno in 0..geo.ag_count {
        let mut tp = fs.trans()?;
        let n = match crate::alloc::free_cow_staging(&mut tp, AgNumber(agno)) {
            Ok(n) => n,
            Err(crate::error::Error::Corrupt { .. } | crate::error::Error::BadCrc { .. })
                if damaged_ok =>
            {
                report.left_in_ags.push(agno);
                continue;
            }
            Err(e) => return Err(e),
        };
        if n > 0 {
            report.freed += n;
            tp.commit()?;
        }
    }
    fs.sync()?;
    Ok(report)
}

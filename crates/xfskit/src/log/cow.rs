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
    /// AGs whose staging extents were left (none since the reference
    /// count btree is edited through the btree engine; kept for the
    /// report's shape).
    pub left_in_ags: Vec<u32>,
}

/// Frees the CoW staging extents of a filesystem opened for writing, one
/// transaction per AG.
pub fn clear_cow_staging(fs: &Fs) -> Result<CowReport> {
    let mut report = CowReport::default();
    let geo = fs.geometry().clone();
    if !geo.features.reflink {
        return Ok(report);
    }
    for agno in 0..geo.ag_count {
        let mut tp = fs.trans()?;
        let n = crate::alloc::free_cow_staging(&mut tp, AgNumber(agno))?;
        if n > 0 {
            report.freed += n;
            tp.commit()?;
        }
    }
    fs.sync()?;
    Ok(report)
}

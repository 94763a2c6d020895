//! The AGI as a transaction buffer: reading it and changing its inode
//! counters and btree roots.

use crate::buf::Verifier;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr};
use crate::trans::{BufId, Trans};
use std::mem::offset_of;
use xfs_format::ag::{Agi, XFS_AGI_SECTOR};

/// Byte offsets of the AGI fields inode allocation uses.
pub(crate) mod off {
    use super::*;
    /// Blocks in the AG.
    pub const LENGTH: usize = offset_of!(Agi, agi_length);
    /// Allocated inodes.
    pub const COUNT: usize = offset_of!(Agi, agi_count);
    /// inobt root.
    pub const ROOT: usize = offset_of!(Agi, agi_root);
    /// Free inodes.
    pub const FREECOUNT: usize = offset_of!(Agi, agi_freecount);
    /// Start of the most recently allocated chunk.
    pub const NEWINO: usize = offset_of!(Agi, agi_newino);
}

/// Disk address of AG `agno`'s AGI.
pub(crate) fn agi_daddr(tp: &Trans<'_>, agno: AgNumber) -> Daddr {
    let geo = tp.geo();
    let ag0 = geo.agb_to_daddr(agno, AgBlock(0));
    Daddr(ag0.0 + XFS_AGI_SECTOR * u64::from(geo.sect_size / 512))
}

/// Locks AG `agno` and joins its AGI to the transaction.
pub(crate) fn read_agi(tp: &mut Trans<'_>, agno: AgNumber) -> Result<BufId> {
    if agno.0 >= tp.geo().ag_count {
        return Err(Error::Invalid(format!("AG {} does not exist", agno.0)));
    }
    tp.lock_ag(agno);
    let daddr = agi_daddr(tp, agno);
    let len = tp.geo().sect_size;
    tp.read_buf(daddr, len, &Verifier::Agi { agno: agno.0 })
}

/// Reads a 32-bit AGI field.
pub(crate) fn get(tp: &Trans<'_>, id: BufId, at: usize) -> u32 {
    be32(tp.buf(id), at)
}

/// Writes a 32-bit AGI field.
pub(crate) fn set(tp: &mut Trans<'_>, id: BufId, at: usize, v: u32) {
    tp.buf_mut(id)[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Adds `delta` to a 32-bit AGI counter, refusing to wrap.
pub(crate) fn add(tp: &mut Trans<'_>, id: BufId, at: usize, delta: i64) -> Result<()> {
    let old = i64::from(get(tp, id, at));
    let new = old + delta;
    if !(0..=i64::from(u32::MAX)).contains(&new) {
        let daddr = tp.buf_daddr(id);
        return Err(Error::corrupt(
            "AGI",
            Location::Daddr(daddr.0),
            format!("inode counter {old} cannot change by {delta}"),
        ));
    }
    set(tp, id, at, new as u32);
    Ok(())
}

//! The data fork of a realtime file: its records map realtime blocks,
//! always whole realtime extents (`rextsize` blocks) at file offsets that
//! are multiples of `rextsize`, as the kernel maps them. New extents come
//! from the realtime bitmap ([`crate::alloc::rtalloc`]); their blocks
//! outside the range asked for are zeroed on the realtime device (or left
//! unwritten when the whole allocation is), so nothing stale is read.

use super::{edit, fork};
use crate::error::{Error, Location, Result};
use crate::geometry::FsBlock;
use crate::inode::{Extent, Fork, Inode};
use crate::trans::Trans;

/// Realtime block numbers have no AG boundaries: records merge whenever
/// they are contiguous, but never across realtime groups.
pub(crate) fn rt_merge_log(geo: &crate::geometry::Geometry) -> u8 {
    if geo.has_rtgroups() {
        geo.rg_blklog
    } else {
        63
    }
}

fn rext(tp: &Trans<'_>) -> u64 {
    u64::from(tp.geo().rt_extsize.max(1))
}

/// Maps realtime extents over every hole of file blocks `lblk..lblk+len`
/// (widened to whole realtime extents).
pub(crate) fn alloc_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    lblk: u64,
    len: u64,
    unwritten: bool,
) -> Result<()> {
    let r = rext(tp);
    let end = lblk
        .checked_add(len)
        .ok_or_else(|| Error::Invalid("allocation past the largest file offset".into()))?;
    let a = lblk / r * r;
    let b = end.div_ceil(r) * r;
    let mut pos = a;
    while pos < b {
        let win = fork::window(tp, ip, Fork::Data, pos, b)?;
        if let Some(e) = win.iter().find(|e| e.offset <= pos && e.end() > pos) {
            pos = e.end();
            continue;
        }
        let hole_end = win
            .iter()
            .find(|e| e.offset > pos)
            .map_or(b, |e| e.offset.min(b));
        if !pos.is_multiple_of(r) || !hole_end.is_multiple_of(r) {
            return Err(Error::corrupt(
                "realtime file",
                Location::Inode(ip.ino.0),
                format!(
                    "the hole at file blocks {pos}..{hole_end} is not whole realtime extents of {r} blocks"
                ),
            ));
        }
        let prev = win.iter().rev().find(|e| e.end() <= pos);
        let goal = prev.map(|e| e.start.0 + e.len);
        let max_rtx = ((hole_end - pos) / r).min(edit::MAX_EXTLEN / r).max(1);
        let (start, n) = crate::alloc::rtalloc::rt_alloc_blocks(tp, goal, 1, max_rtx)?;
        let got = n * r;
        crate::alloc::rtrmap::map(
            tp,
            crate::alloc::rtrmap::RtMapping {
                rtb: start,
                len: got,
                ino: ip.ino,
                offset: pos,
                unwritten,
            },
        )?;
        if !unwritten {
            // Blocks of the new extents that the caller does not write,
            // durable before the transaction that maps them.
            zero_outside(tp, start, pos, got, lblk, end)?;
            tp.fs().flush_rt()?;
        }
        let e = Extent {
            offset: pos,
            start: FsBlock(start),
            len: got,
            unwritten,
        };
        let new = edit::insert(&win, e, rt_merge_log(tp.geo()));
        fork::replace(tp, ip, Fork::Data, &win, &new)?;
        ip.nblocks += got;
        tp.note_rt_blocks(ip.ino, got as i64);
        pos += got;
    }
    Ok(())
}

/// Zeroes, on the realtime device, the blocks of a new extent (file blocks
/// `off..off+len` at realtime block `start`) outside `keep_lo..keep_hi`.
fn zero_outside(
    tp: &Trans<'_>,
    start: u64,
    off: u64,
    len: u64,
    keep_lo: u64,
    keep_hi: u64,
) -> Result<()> {
    let bs = u64::from(tp.geo().block_size);
    let zero = |from: u64, to: u64| -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let buf = vec![0u8; ((to - from) * bs) as usize];
        let geo = tp.geo();
        tp.fs()
            .write_rt_bytes(geo.rtb_to_bytes(start + from - off), &buf)
    };
    zero(off, keep_lo.clamp(off, off + len))?;
    zero(keep_hi.clamp(off, off + len), off + len)
}

/// Frees the realtime blocks unmapped from a realtime file, merged into
/// runs: each run must be whole realtime extents.
pub(crate) fn free_pieces(tp: &mut Trans<'_>, ino: u64, mut pieces: Vec<(u64, u64)>) -> Result<()> {
    let r = rext(tp);
    pieces.sort_unstable();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let geo = tp.geo();
    for (s, l) in pieces {
        match runs.last_mut() {
            Some((rs, rl)) if *rs + *rl == s && geo.rtb_split(*rs).0 == geo.rtb_split(s).0 => {
                *rl += l
            }
            _ => runs.push((s, l)),
        }
    }
    for (s, l) in runs {
        if s % r != 0 || l % r != 0 {
            return Err(Error::corrupt(
                "realtime file",
                Location::Inode(ino),
                format!("unmapping realtime blocks {s}+{l}: not whole realtime extents of {r}"),
            ));
        }
        crate::alloc::rtrefc::refuse_shared(tp, s, l)?;
        crate::alloc::rtalloc::rt_free_blocks(tp, s, l)?;
    }
    Ok(())
}

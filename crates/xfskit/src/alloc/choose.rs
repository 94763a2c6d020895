//! Choosing a free extent in one AG: near the target (free extents on
//! either side of it in block order), else by size (the smallest extent
//! that holds the whole request, else the largest one).

use super::abt::{cur_free, lookup, AllocBt, Free, Which};
use crate::btree::{Cursor, Dir};
use crate::error::Result;
use crate::geometry::AgNumber;
use crate::trans::Trans;

/// Free extents examined on each side of the target before giving up on
/// nearness.
const NEAR_SCAN: usize = 24;

fn align_up(x: u32, a: u32) -> u64 {
    u64::from(x).div_ceil(u64::from(a)) * u64::from(a)
}

/// Where in `f` to put up to `want` blocks aligned to `align`, as near
/// `target` as possible: (start, length), or None if nothing fits.
fn place(f: Free, target: u32, want: u32, align: u32) -> Option<(u32, u32)> {
    let end = u64::from(f.end());
    let lo = align_up(f.bno, align);
    if lo >= end {
        return None;
    }
    let len = u64::from(want).min(end - lo);
    let a = u64::from(align);
    let hi = (end - len) / a * a;
    let s = align_up(target, align).clamp(lo, hi.max(lo));
    Some((s as u32, len as u32))
}

/// A candidate extent: the free extent, start and length chosen in it.
type Cand = (Free, u32, u32);

fn better(a: &Option<Cand>, b: &Cand, target: u32) -> bool {
    match a {
        None => true,
        Some((_, s, l)) => b.2 > *l || (b.2 == *l && b.1.abs_diff(target) < s.abs_diff(target)),
    }
}

/// Looks at up to [`NEAR_SCAN`] free extents from the cursor (which sits
/// on one when `more`), moving right or left, and keeps the best candidate.
#[allow(clippy::too_many_arguments)]
fn scan_side(
    c: &mut Cursor<AllocBt>,
    tp: &mut Trans<'_>,
    mut more: bool,
    rightwards: bool,
    target: u32,
    maxlen: u32,
    align: u32,
    best: &mut Option<Cand>,
) -> Result<()> {
    for _ in 0..NEAR_SCAN {
        if !more {
            break;
        }
        let f = cur_free(c, tp)?;
        if let Some((s, l)) = place(f, target, maxlen, align) {
            let cand = (f, s, l);
            if better(best, &cand, target) {
                *best = Some(cand);
            }
            if l == maxlen {
                break;
            }
        }
        more = if rightwards {
            c.increment(tp)?
        } else {
            c.decrement(tp)?
        };
    }
    Ok(())
}

/// Picks the blocks to allocate in AG `agno`: (free extent, start, len)
/// with `minlen <= len <= maxlen`, or None.
pub(crate) fn choose(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    target: u32,
    minlen: u32,
    maxlen: u32,
    align: u32,
) -> Result<Option<Cand>> {
    let mut best: Option<Cand> = None;
    let mut c = AllocBt::cursor(tp, agno, Which::Bno);
    // Leftwards from the extent at or before the target, then rightwards
    // from the first extent after it.
    let more = lookup(
        &mut c,
        tp,
        Free {
            bno: target,
            len: 0,
        },
        Dir::Le,
    )?
    .is_some();
    scan_side(&mut c, tp, more, false, target, maxlen, align, &mut best)?;
    let after = Free {
        bno: target.saturating_add(1),
        len: 0,
    };
    let more = lookup(&mut c, tp, after, Dir::Ge)?.is_some();
    scan_side(&mut c, tp, more, true, target, maxlen, align, &mut best)?;
    if best.is_none_or(|b| b.2 < maxlen) {
        // By size: the smallest extent holding everything, else the largest.
        let mut k = AllocBt::cursor(tp, agno, Which::Cnt);
        let want = (u64::from(maxlen) + u64::from(align) - 1).min(u64::from(u32::MAX)) as u32;
        let f = match lookup(&mut k, tp, Free { bno: 0, len: want }, Dir::Ge)? {
            Some(f) => Some(f),
            None => lookup(
                &mut k,
                tp,
                Free {
                    bno: u32::MAX,
                    len: u32::MAX,
                },
                Dir::Le,
            )?,
        };
        if let Some(f) = f {
            if let Some((s, l)) = place(f, target, maxlen, align) {
                let cand = (f, s, l);
                if better(&best, &cand, target) {
                    best = Some(cand);
                }
            }
        }
    }
    Ok(best.filter(|b| b.2 >= minlen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement() {
        let f = Free { bno: 10, len: 20 };
        assert_eq!(place(f, 0, 5, 1), Some((10, 5)));
        assert_eq!(place(f, 100, 5, 1), Some((25, 5)));
        assert_eq!(place(f, 15, 5, 1), Some((15, 5)));
        assert_eq!(place(f, 28, 5, 1), Some((25, 5)));
        assert_eq!(place(f, 0, 50, 1), Some((10, 20)));
        assert_eq!(place(f, 0, 4, 8), Some((16, 4)));
        assert_eq!(place(f, 100, 4, 8), Some((24, 4)));
        assert_eq!(place(Free { bno: 9, len: 6 }, 0, 4, 16), None);
    }
}

//! Free space changes inside one AG: taking part of a free extent,
//! returning blocks (merging with free neighbours), keeping the free
//! list filled, `agf_freeblks` and `agf_longest`.
//!
//! Both btrees always hold the same extents. The superblock's free block
//! counter is not touched here: blocks moving between the free space
//! btrees, their own blocks and the free list all count as free.

use super::abt::{cur_free, lookup, AllocBt, Free, Which};
use super::agf::{self, off};
use super::rmap::{self, Rmap};
use super::Owner;
use crate::btree::Dir;
use crate::error::{Error, Location, Result};
use crate::geometry::AgNumber;
use crate::trans::Trans;

fn mismatch(agno: AgNumber, detail: String) -> Error {
    Error::corrupt(
        "free space btrees",
        Location::Other(format!("AG {}", agno.0)),
        detail,
    )
}

/// Removes blocks `s..s+len` (inside free extent `f`) from free space.
pub(crate) fn take(tp: &mut Trans<'_>, agno: AgNumber, f: Free, s: u32, len: u32) -> Result<()> {
    if s < f.bno || s + len > f.end() || len == 0 {
        return Err(Error::Invalid(format!("take {s}+{len} from {f:?}")));
    }
    let left = Free {
        bno: f.bno,
        len: s - f.bno,
    };
    let right = Free {
        bno: s + len,
        len: f.end() - (s + len),
    };
    let mut cnt = AllocBt::cursor(tp, agno, Which::Cnt);
    if lookup(&mut cnt, tp, f, Dir::Eq)? != Some(f) {
        return Err(mismatch(agno, format!("{f:?} is not in the cntbt")));
    }
    cnt.delete(tp)?;
    for piece in [left, right] {
        if piece.len > 0 {
            cnt.insert(tp, &piece.to_rec())?;
        }
    }
    let mut bno = AllocBt::cursor(tp, agno, Which::Bno);
    if lookup(&mut bno, tp, f, Dir::Eq)? != Some(f) {
        return Err(mismatch(agno, format!("{f:?} is not in the bnobt")));
    }
    match (left.len > 0, right.len > 0) {
        (true, r) => {
            bno.update(tp, &left.to_rec())?;
            if r {
                bno.insert(tp, &right.to_rec())?;
            }
        }
        (false, true) => bno.update(tp, &right.to_rec())?,
        (false, false) => bno.delete(tp)?,
    }
    let id = agf::read_agf(tp, agno)?;
    agf::add(tp, id, off::FREEBLKS, -i64::from(len), agno)
}

/// Returns blocks `start..start+len` to free space, merging with free
/// neighbours. An error if any of them is already free.
pub(crate) fn give(tp: &mut Trans<'_>, agno: AgNumber, start: u32, len: u32) -> Result<()> {
    let new = Free { bno: start, len };
    let mut b = AllocBt::cursor(tp, agno, Which::Bno);
    let left = lookup(&mut b, tp, new, Dir::Le)?;
    if let Some(l) = left {
        if l.end() > start {
            return Err(mismatch(
                agno,
                format!("freeing {start}+{len}: {l:?} is free"),
            ));
        }
    }
    let right = lookup(&mut b, tp, new, Dir::Ge)?;
    if let Some(r) = right {
        if r.bno < new.end() {
            return Err(mismatch(
                agno,
                format!("freeing {start}+{len}: {r:?} is free"),
            ));
        }
    }
    let left = left.filter(|l| l.end() == start);
    let right = right.filter(|r| r.bno == new.end());
    let merged = Free {
        bno: left.map_or(start, |l| l.bno),
        len: len + left.map_or(0, |l| l.len) + right.map_or(0, |r| r.len),
    };
    match (left, right) {
        (Some(l), r) => {
            if let Some(r) = r {
                lookup(&mut b, tp, r, Dir::Eq)?;
                b.delete(tp)?;
            }
            if lookup(&mut b, tp, l, Dir::Eq)? != Some(l) {
                return Err(mismatch(agno, format!("{l:?} vanished from the bnobt")));
            }
            b.update(tp, &merged.to_rec())?;
        }
        (None, Some(r)) => {
            lookup(&mut b, tp, r, Dir::Eq)?;
            b.update(tp, &merged.to_rec())?;
        }
        (None, None) => b.insert(tp, &merged.to_rec())?,
    }
    let mut c = AllocBt::cursor(tp, agno, Which::Cnt);
    for f in [left, right].into_iter().flatten() {
        if lookup(&mut c, tp, f, Dir::Eq)? != Some(f) {
            return Err(mismatch(agno, format!("{f:?} is not in the cntbt")));
        }
        c.delete(tp)?;
    }
    c.insert(tp, &merged.to_rec())?;
    let id = agf::read_agf(tp, agno)?;
    agf::add(tp, id, off::FREEBLKS, i64::from(len), agno)
}

/// Sets `agf_longest` from the cntbt's last record.
pub(crate) fn update_longest(tp: &mut Trans<'_>, agno: AgNumber) -> Result<()> {
    let mut c = AllocBt::cursor(tp, agno, Which::Cnt);
    let longest = if c.lookup(tp, &[0xff; 8], Dir::Le)? {
        cur_free(&c, tp)?.len
    } else {
        0
    };
    let id = agf::read_agf(tp, agno)?;
    agf::set(tp, id, off::LONGEST, longest);
    Ok(())
}

/// The free list length the AG needs now.
pub(crate) fn need(tp: &mut Trans<'_>, agno: AgNumber) -> Result<u32> {
    let id = agf::read_agf(tp, agno)?;
    let bl = agf::get(tp, id, off::BNO_LEVEL);
    let cl = agf::get(tp, id, off::CNT_LEVEL);
    let mut n = agf::min_freelist(tp.geo(), bl, cl);
    if tp.geo().features.rmapbt {
        let rl = rmap::levels(tp, agno)?.max(1);
        n += rl.saturating_add(1).min(rmap::maxlevels(tp)) * 2 - 2;
    }
    Ok(n)
}

/// Trims the free list to what the AG needs and refills it when short.
/// With `freeing`, running out of space while refilling is not an error.
pub(crate) fn fix_freelist(tp: &mut Trans<'_>, agno: AgNumber, freeing: bool) -> Result<()> {
    let id = agf::read_agf(tp, agno)?;
    while agf::get(tp, id, off::FLCOUNT) > need(tp, agno)? {
        let Some(b) = agf::freelist_pop(tp, agno)? else {
            break;
        };
        if tp.geo().features.rmapbt {
            rmap::unmap(tp, agno, Rmap::new(b, 1, &Owner::Ag))?;
        }
        give(tp, agno, b, 1)?;
    }
    loop {
        let have = agf::get(tp, id, off::FLCOUNT);
        let want = need(tp, agno)?;
        if have >= want {
            break;
        }
        let want = want - have;
        let mut c = AllocBt::cursor(tp, agno, Which::Cnt);
        let f = match lookup(&mut c, tp, Free { bno: 0, len: want }, Dir::Ge)? {
            Some(f) => Some(f),
            None => lookup(
                &mut c,
                tp,
                Free {
                    bno: u32::MAX,
                    len: u32::MAX,
                },
                Dir::Le,
            )?,
        };
        let Some(f) = f else {
            if freeing {
                break;
            }
            return Err(Error::NoSpace(format!(
                "AG {} cannot refill its free list",
                agno.0
            )));
        };
        let n = want.min(f.len);
        take(tp, agno, f, f.bno, n)?;
        for b in f.bno..f.bno + n {
            agf::freelist_push(tp, agno, b)?;
        }
        if tp.geo().features.rmapbt {
            rmap::map(tp, agno, Rmap::new(f.bno, n, &Owner::Ag))?;
        }
    }
    Ok(())
}

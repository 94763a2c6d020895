//! Pure extent-list editing: merging, inserting, trimming and splitting
//! runs of extents held in memory. The fork code reads a window of
//! records around a change, edits it here, and writes back the
//! difference.

use crate::inode::Extent;
use xfs_format::types::XFS_MAX_BMBT_EXTLEN;

/// Longest extent one record may describe, in blocks.
pub(crate) const MAX_EXTLEN: u64 = XFS_MAX_BMBT_EXTLEN;

/// True when `b` continues `a` in file space, disk space (inside one AG
/// of `2^ag_blk_log` block numbers) and state, and the sum still fits one
/// record.
pub(crate) fn can_merge(a: &Extent, b: &Extent, ag_blk_log: u8) -> bool {
    a.end() == b.offset
        && a.start.0 + a.len == b.start.0
        && a.start.0 >> ag_blk_log == b.start.0 >> ag_blk_log
        && a.unwritten == b.unwritten
        && a.len + b.len <= MAX_EXTLEN
}

/// Merges every mergeable neighbour pair of a sorted run.
pub(crate) fn merge_run(v: Vec<Extent>, ag_blk_log: u8) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(last) if can_merge(last, &e, ag_blk_log) => last.len += e.len,
            _ => out.push(e),
        }
    }
    out
}

/// `run` with the new mapping `e` added (it must not overlap anything in
/// `run`), merged with its neighbours where possible.
pub(crate) fn insert(run: &[Extent], e: Extent, ag_blk_log: u8) -> Vec<Extent> {
    let mut v = run.to_vec();
    let at = v.partition_point(|x| x.offset < e.offset);
    v.insert(at, e);
    merge_run(v, ag_blk_log)
}

/// Cuts `e` to the file blocks inside `a..b` (which must overlap it).
pub(crate) fn clip(e: &Extent, a: u64, b: u64) -> Extent {
    let lo = e.offset.max(a);
    let hi = e.end().min(b);
    Extent {
        offset: lo,
        start: crate::geometry::FsBlock(e.start.0 + (lo - e.offset)),
        len: hi - lo,
        unwritten: e.unwritten,
    }
}

/// The parts of `e` outside file blocks `a..b`: up to two pieces.
pub(crate) fn remove(e: &Extent, a: u64, b: u64) -> Vec<Extent> {
    let mut out = Vec::with_capacity(2);
    if e.offset < a {
        out.push(clip(e, e.offset, a.min(e.end())));
    }
    if e.end() > b {
        out.push(clip(e, b.max(e.offset), e.end()));
    }
    out
}

/// `run` with file blocks `a..b` marked written: unwritten extents that
/// cross the range are split (into up to three), and the results merged
/// with their neighbours.
pub(crate) fn set_written(run: &[Extent], a: u64, b: u64, ag_blk_log: u8) -> Vec<Extent> {
    let mut v = Vec::with_capacity(run.len() + 2);
    for e in run {
        if !e.unwritten || e.end() <= a || e.offset >= b {
            v.push(*e);
            continue;
        }
        let mut pieces = remove(e, a, b);
        let mut mid = clip(e, a, b);
        mid.unwritten = false;
        let at = pieces.partition_point(|x| x.offset < mid.offset);
        pieces.insert(at, mid);
        v.extend(pieces);
    }
    merge_run(v, ag_blk_log)
}

/// The change from `old` to `new` with equal records at both ends left
/// out: `(old_part, new_part)`.
pub(crate) fn diff<'a>(old: &'a [Extent], new: &'a [Extent]) -> (&'a [Extent], &'a [Extent]) {
    let mut p = 0;
    while p < old.len() && p < new.len() && old[p] == new[p] {
        p += 1;
    }
    let mut s = 0;
    while s < old.len() - p && s < new.len() - p && old[old.len() - 1 - s] == new[new.len() - 1 - s]
    {
        s += 1;
    }
    (&old[p..old.len() - s], &new[p..new.len() - s])
}

/// Checks a run is sorted, non-overlapping and has no empty or
/// over-long extents.
pub(crate) fn well_formed(run: &[Extent]) -> bool {
    run.iter().all(|e| e.len > 0 && e.len <= MAX_EXTLEN)
        && run.windows(2).all(|w| w[0].end() <= w[1].offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::FsBlock;

    const LOG: u8 = 16;

    fn ext(offset: u64, start: u64, len: u64, unwritten: bool) -> Extent {
        Extent {
            offset,
            start: FsBlock(start),
            len,
            unwritten,
        }
    }

    #[test]
    fn insert_merges_both_sides() {
        let run = vec![ext(0, 100, 10, false), ext(20, 120, 5, false)];
        let v = insert(&run, ext(10, 110, 10, false), LOG);
        assert_eq!(v, vec![ext(0, 100, 25, false)]);
    }

    #[test]
    fn insert_keeps_apart_when_not_contiguous() {
        let run = vec![ext(0, 100, 10, false)];
        // contiguous in file, not on disk
        assert_eq!(insert(&run, ext(10, 200, 1, false), LOG).len(), 2);
        // contiguous on disk, not in file
        assert_eq!(insert(&run, ext(11, 110, 1, false), LOG).len(), 2);
        // different state
        assert_eq!(insert(&run, ext(10, 110, 1, true), LOG).len(), 2);
        // across an AG boundary
        let a = ext(0, (1 << LOG) - 4, 4, false);
        assert_eq!(insert(&[a], ext(4, 1 << LOG, 4, false), LOG).len(), 2);
    }

    #[test]
    fn merge_respects_max_length() {
        let run = vec![ext(0, 0, MAX_EXTLEN - 1, false)];
        let v = insert(&run, ext(MAX_EXTLEN - 1, MAX_EXTLEN - 1, 2, false), 40);
        assert_eq!(v.len(), 2);
        let v = insert(&run, ext(MAX_EXTLEN - 1, MAX_EXTLEN - 1, 1, false), 40);
        assert_eq!(v, vec![ext(0, 0, MAX_EXTLEN, false)]);
    }

    #[test]
    fn remove_splits_and_trims() {
        let e = ext(10, 100, 10, false);
        assert_eq!(
            remove(&e, 12, 15),
            vec![ext(10, 100, 2, false), ext(15, 105, 5, false)]
        );
        assert_eq!(remove(&e, 0, 15), vec![ext(15, 105, 5, false)]);
        assert_eq!(remove(&e, 15, u64::MAX), vec![ext(10, 100, 5, false)]);
        assert!(remove(&e, 10, 20).is_empty());
        assert!(remove(&e, 0, u64::MAX).is_empty());
    }

    #[test]
    fn set_written_splits_into_three() {
        let run = vec![ext(0, 100, 10, true)];
        let v = set_written(&run, 3, 6, LOG);
        assert_eq!(
            v,
            vec![
                ext(0, 100, 3, true),
                ext(3, 103, 3, false),
                ext(6, 106, 4, true)
            ]
        );
        assert!(well_formed(&v));
    }

    #[test]
    fn set_written_merges_with_written_neighbours() {
        let run = vec![
            ext(0, 100, 5, false),
            ext(5, 105, 5, true),
            ext(10, 110, 5, false),
        ];
        assert_eq!(set_written(&run, 0, 100, LOG), vec![ext(0, 100, 15, false)]);
        assert_eq!(
            set_written(&run, 5, 7, LOG),
            vec![
                ext(0, 100, 7, false),
                ext(7, 107, 3, true),
                ext(10, 110, 5, false)
            ]
        );
    }

    #[test]
    fn diff_strips_common_ends() {
        let a = ext(0, 1, 1, false);
        let b = ext(5, 10, 1, false);
        let c = ext(9, 20, 1, false);
        let b2 = ext(5, 10, 2, false);
        let (x, y) = ([a, b, c], [a, b2, c]);
        let (o, n) = diff(&x, &y);
        assert_eq!((o, n), (&[b][..], &[b2][..]));
        let (x, y) = ([a, c], [a, b, c]);
        let (o, n) = diff(&x, &y);
        assert_eq!((o.len(), n), (0, &[b][..]));
        let (x, y) = ([a], [a]);
        let (o, n) = diff(&x, &y);
        assert!(o.is_empty() && n.is_empty());
    }
}

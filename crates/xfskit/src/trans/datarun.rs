//! The data write combiner's runs: file data queued for writing, keyed
//! by byte offset. Small writes that continue a run are appended to it; a
//! write over pending bytes is merged into them in memory (the newest bytes
//! win), so rewriting a block not yet on disk (an unaligned append's first
//! block) costs no device I/O; pending bytes can be read back from here.

use crate::dev::aligned::{self, AlignedBuf, SharedBytes};
use std::collections::BTreeMap;

/// One run of pending file data.
pub(crate) enum Run {
    /// In an aligned buffer (written from where it is with direct I/O;
    /// back to the pool after).
    Aligned(AlignedBuf),
    /// In a plain vector handed over by value (a small file's data, moved
    /// rather than copied: the writer copies it if it must).
    Plain(Vec<u8>),
    /// A piece of a shared buffer (a tar batch's data), with its zero
    /// padding, where it lies; then this many more zeros to the block's end.
    Shared(SharedBytes, usize),
}

impl Run {
    /// The bytes, in at most two pieces (the second is zeros).
    pub(crate) fn pieces(&self) -> [&[u8]; 2] {
        match self {
            Run::Aligned(b) => [b.as_slice(), &[]],
            Run::Plain(v) => [v, &[]],
            Run::Shared(s, z) => [s.padded(), aligned::zeros(*z)],
        }
    }

    pub(crate) fn len(&self) -> usize {
        let [a, b] = self.pieces();
        a.len() + b.len()
    }

    /// A copy of bytes `from..to` of the run.
    pub(crate) fn copy_range(&self, from: usize, to: usize) -> AlignedBuf {
        match self.pieces() {
            [a, []] => AlignedBuf::copy_of(&a[from..to]),
            [a, b] => AlignedBuf::copy_of(&[a, b].concat()[from..to]),
        }
    }

    /// Returns the run's memory (pooled buffers to the pool).
    pub(crate) fn recycle(self) {
        if let Run::Aligned(b) = self {
            aligned::give(b);
        }
    }
}

/// Pending data writes: runs keyed by byte offset, in aligned buffers
/// (written from where they are with direct I/O). Adjacent small writes
/// are appended to the run they extend; buffers handed over by value are
/// queued as they are. Everything is written back sorted, adjacent runs
/// merged into one write.
#[derive(Default)]
pub(crate) struct DataRun {
    pub(crate) runs: BTreeMap<u64, Run>,
    pub(crate) bytes: usize,
}

/// Bytes queued by [`WriteState::write_data`] (copied) or
/// [`WriteState::write_data_owned`] (moved).
pub(crate) enum Piece<'a> {
    Copied(&'a [u8]),
    Moved(AlignedBuf),
    Vec(Vec<u8>),
    Shared(SharedBytes, usize),
}

impl Piece<'_> {
    /// The bytes, in at most two pieces (the second is zeros).
    pub(crate) fn pieces(&self) -> [&[u8]; 2] {
        match self {
            Piece::Copied(b) => [b, &[]],
            Piece::Moved(b) => [b.as_slice(), &[]],
            Piece::Vec(v) => [v, &[]],
            Piece::Shared(b, z) => [b.padded(), aligned::zeros(*z)],
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Piece::Copied(b) => b.len(),
            Piece::Moved(b) => b.len(),
            Piece::Vec(v) => v.len(),
            Piece::Shared(b, z) => b.padded().len() + z,
        }
    }
}

impl DataRun {
    /// True when a pending run covers any of bytes `off..end`.
    pub(crate) fn overlaps(&self, off: u64, end: u64) -> bool {
        let pred_end = self
            .runs
            .range(..=off)
            .next_back()
            .map(|(&s, v)| s + v.len() as u64);
        let next = self.runs.range(off + 1..).next().map(|(&s, _)| s);
        pred_end.is_some_and(|e| e > off) || next.is_some_and(|s| s < end)
    }

    /// Queues `piece` at `off` over the pending runs it overlaps: they
    /// and the piece become one run spanning all of them, the piece's bytes
    /// last (the newest data wins, as if the old runs had been written
    /// first). Callers check [`DataRun::overlaps`] first.
    pub(crate) fn merge(&mut self, off: u64, piece: Piece<'_>) {
        let end = off + piece.len() as u64;
        // Inside one run in an aligned buffer (a rewrite of data still
        // pending): overwritten where it lies, not copied.
        if let Some((&s, Run::Aligned(b))) = self.runs.range_mut(..=off).next_back() {
            if s + b.len() as u64 >= end {
                let mut at = (off - s) as usize;
                let out = b.as_mut_slice();
                for p in piece.pieces() {
                    out[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                if let Piece::Moved(b) = piece {
                    aligned::give(b);
                }
                return;
            }
        }
        let first = self
            .runs
            .range(..off)
            .next_back()
            .filter(|(&s, r)| s + r.len() as u64 > off)
            .map(|(&s, _)| s);
        let keys: Vec<u64> = first
            .into_iter()
            .chain(self.runs.range(off..end).map(|(&s, _)| s))
            .collect();
        let old: Vec<(u64, Run)> = keys
            .into_iter()
            .filter_map(|k| self.runs.remove(&k).map(|r| (k, r)))
            .collect();
        let lo = old.first().map_or(off, |(s, _)| (*s).min(off));
        let hi = old
            .iter()
            .map(|(s, r)| s + r.len() as u64)
            .fold(end, u64::max);
        let mut buf = AlignedBuf::with_capacity((hi - lo) as usize);
        buf.set_len((hi - lo) as usize);
        let out = buf.as_mut_slice();
        for (s, r) in &old {
            let mut at = (s - lo) as usize;
            for p in r.pieces() {
                out[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            self.bytes = self.bytes.saturating_sub(r.len());
        }
        let mut at = (off - lo) as usize;
        for p in piece.pieces() {
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        if let Piece::Moved(b) = piece {
            aligned::give(b);
        }
        old.into_iter().for_each(|(_, r)| r.recycle());
        self.bytes += buf.len();
        self.runs.insert(lo, Run::Aligned(buf));
    }

    /// Copies pending bytes `off..off + buf.len()` into `buf` when one
    /// pending run holds all of them; false (and `buf` untouched) if not.
    pub(crate) fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        let Some((&s, r)) = self.runs.range(..=off).next_back() else {
            return false;
        };
        let end = off + buf.len() as u64;
        if s + (r.len() as u64) < end {
            return false;
        }
        let mut at = 0usize; // position in the run
        let mut filled = 0usize;
        let from = (off - s) as usize;
        for p in r.pieces() {
            let (plo, phi) = (at, at + p.len());
            at = phi;
            let lo = from.max(plo);
            let hi = (from + buf.len()).min(phi);
            if lo < hi {
                buf[lo - from..hi - from].copy_from_slice(&p[lo - plo..hi - plo]);
                filled += hi - lo;
            }
        }
        filled == buf.len()
    }

    /// Queues `piece` at `off` (no pending run overlaps it).
    pub(crate) fn insert(&mut self, off: u64, piece: Piece<'_>) {
        self.bytes += piece.len();
        let bytes = match piece {
            Piece::Moved(b) => {
                self.runs.insert(off, Run::Aligned(b));
                return;
            }
            Piece::Vec(v) => {
                self.runs.insert(off, Run::Plain(v));
                return;
            }
            Piece::Shared(b, z) => {
                self.runs.insert(off, Run::Shared(b, z));
                return;
            }
            Piece::Copied(b) => b,
        };
        let pred = self
            .runs
            .range_mut(..off)
            .next_back()
            .filter(|(&s, v)| s + v.len() as u64 == off);
        let grow = match pred {
            Some((_, Run::Aligned(v))) => {
                if v.extend_from_slice(bytes) {
                    return;
                }
                Some(v.len())
            }
            Some((_, v)) => Some(v.len()),
            None => None,
        };
        // A run that continues a full one gets a pooled buffer (recycled
        // memory, room for many more small writes); an isolated write gets
        // only the room it needs.
        let mut v = if grow.is_some() && bytes.len() <= aligned::RUN_BUF {
            aligned::take_small()
        } else {
            AlignedBuf::with_capacity(bytes.len())
        };
        v.extend_from_slice(bytes);
        self.runs.insert(off, Run::Aligned(v));
    }
}

/// A run's pieces at their byte offsets (shared bytes and the zeros after
/// them are two), empty ones left out.
pub(crate) fn pieces_at(off: u64, r: &Run) -> impl Iterator<Item = (u64, &[u8])> {
    let [a, b] = r.pieces();
    [(off, a), (off + a.len() as u64, b)]
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_at(d: &DataRun, off: u64, len: usize) -> Option<Vec<u8>> {
        let mut b = vec![0xEE; len];
        d.read(off, &mut b).then_some(b)
    }

    #[test]
    fn overlapping_writes_merge_newest_last() {
        let mut d = DataRun::default();
        d.insert(4096, Piece::Copied(&[1; 8192]));
        // An unaligned append's rewrite of the last block, running past it.
        assert!(d.overlaps(8192, 16384));
        d.merge(8192, Piece::Copied(&[2; 8192]));
        assert_eq!(d.runs.len(), 1);
        assert_eq!(d.bytes, 12288);
        let all = bytes_at(&d, 4096, 12288).unwrap();
        assert!(all[..4096].iter().all(|&b| b == 1));
        assert!(all[4096..].iter().all(|&b| b == 2));
        // A piece covering two runs and the gap between them.
        d.insert(32768, Piece::Copied(&[3; 4096]));
        d.merge(12288, Piece::Copied(&[4; 24576]));
        assert_eq!(d.runs.len(), 1);
        let all = bytes_at(&d, 4096, 32768).unwrap();
        assert!(all[4096..8192].iter().all(|&b| b == 2));
        assert!(all[8192..].iter().all(|&b| b == 4));
        assert_eq!(d.bytes, 32768);
    }

    #[test]
    fn a_rewrite_inside_one_run_stays_in_place() {
        let mut d = DataRun::default();
        d.insert(0, Piece::Copied(&[1; 16384]));
        d.merge(4096, Piece::Copied(&[2; 100]));
        assert_eq!((d.runs.len(), d.bytes), (1, 16384));
        let all = bytes_at(&d, 0, 16384).unwrap();
        assert!(all[..4096].iter().all(|&b| b == 1));
        assert!(all[4096..4196].iter().all(|&b| b == 2));
        assert!(all[4196..].iter().all(|&b| b == 1));
    }

    #[test]
    fn reads_only_what_one_run_holds() {
        let mut d = DataRun::default();
        d.insert(0, Piece::Copied(&[5; 4096]));
        d.insert(8192, Piece::Copied(&[6; 4096]));
        assert_eq!(bytes_at(&d, 0, 4096), Some(vec![5; 4096]));
        assert_eq!(bytes_at(&d, 8192 + 100, 50), Some(vec![6; 50]));
        assert_eq!(bytes_at(&d, 4096, 4096), None);
        assert_eq!(bytes_at(&d, 0, 8192), None);
        assert_eq!(bytes_at(&d, 12288, 1), None);
    }
}

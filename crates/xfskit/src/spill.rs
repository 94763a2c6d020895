//! Sorted streams of fixed-size records in bounded memory (the check's
//! namespace and rmap passes, the name index of paths without parent
//! pointers).
//!
//! The namespace pass of the check joins what it learnt of every inode with
//! every directory entry. Held as arrays, that grows with the filesystem
//! (tens of bytes per inode); here each kind of record goes to a
//! [`Sorter`] that keeps at most its share of the memory bound, writes
//! each full share as a sorted run to an unnamed temporary file, and at
//! the end gives all records back in order by merging the runs. Below the
//! bound nothing is written and the records are only sorted.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// A record of fixed encoded size, ordered by the key the join needs.
pub(crate) trait Rec: Copy + Ord + Send {
    /// Bytes of one encoded record.
    const SIZE: usize;
    /// Writes the record into `out` (`SIZE` bytes).
    fn put(&self, out: &mut [u8]);
    /// Reads a record from `b` (`SIZE` bytes).
    fn get(b: &[u8]) -> Self;
}

/// Where spilled runs go, and how much each sorter may keep in memory.
#[derive(Debug, Clone)]
pub(crate) struct SpillConfig {
    /// Directory of the temporary files (None: the system's).
    pub dir: Option<PathBuf>,
}

/// Collects records, spilling sorted runs past its memory share.
pub(crate) struct Sorter<R: Rec> {
    mem: Vec<R>,
    /// Records kept in memory before a run is written.
    cap: usize,
    config: SpillConfig,
    file: Option<File>,
    /// Runs in the file: (byte offset, records).
    runs: Vec<(u64, u64)>,
    end: u64,
}

/// Fewest records a sorter keeps in memory, whatever its share.
const MIN_RECORDS: usize = 64;

impl<R: Rec> Sorter<R> {
    /// A sorter that keeps at most about `bytes` of records in memory.
    pub(crate) fn new(bytes: usize, config: SpillConfig) -> Self {
        let cap = (bytes / std::mem::size_of::<R>().max(1)).max(MIN_RECORDS);
        Sorter {
            mem: Vec::new(),
            cap,
            config,
            file: None,
            runs: Vec::new(),
            end: 0,
        }
    }

    /// Adds the records of `v`, leaving it empty.
    pub(crate) fn append(&mut self, v: &mut Vec<R>) -> io::Result<()> {
        for r in v.drain(..) {
            if self.mem.len() >= self.cap {
                self.spill()?;
            }
            self.mem.push(r);
        }
        Ok(())
    }

    /// Adds one record.
    pub(crate) fn push(&mut self, r: R) -> io::Result<()> {
        if self.mem.len() >= self.cap {
            self.spill()?;
        }
        self.mem.push(r);
        Ok(())
    }

    /// Runs written so far.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Writes the records in memory as one sorted run.
    fn spill(&mut self) -> io::Result<()> {
        if self.mem.is_empty() {
            return Ok(());
        }
        self.mem.sort_unstable();
        if self.file.is_none() {
            self.file = Some(match &self.config.dir {
                Some(d) => tempfile::tempfile_in(d)?,
                None => tempfile::tempfile()?,
            });
        }
        let file = self.file.as_ref().expect("just made");
        let mut w = io::BufWriter::with_capacity(1 << 20, FileAt { file, at: self.end });
        let mut rec = vec![0u8; R::SIZE];
        for r in &self.mem {
            r.put(&mut rec);
            w.write_all(&rec)?;
        }
        w.flush()?;
        let n = self.mem.len() as u64;
        self.runs.push((self.end, n));
        self.end += n * R::SIZE as u64;
        self.mem.clear();
        // Give the share back: the next run refills it.
        self.mem.shrink_to(self.cap);
        Ok(())
    }

    /// Every record, in order.
    pub(crate) fn into_sorted(mut self) -> io::Result<Sorted<R>> {
        self.mem.sort_unstable();
        if self.runs.is_empty() {
            return Ok(Sorted {
                mem: std::mem::take(&mut self.mem).into_iter(),
                readers: Vec::new(),
                heap: BinaryHeap::new(),
                mem_head: None,
            });
        }
        let file = self.file.take().expect("runs are in a file");
        let file = std::sync::Arc::new(file);
        // A read buffer per run, from the memory the runs gave back.
        let per_run = ((self.cap * std::mem::size_of::<R>()) / (self.runs.len() + 1))
            .clamp(R::SIZE * 64, 1 << 20);
        let mut readers = Vec::with_capacity(self.runs.len());
        for &(at, n) in &self.runs {
            readers.push(RunReader::new(file.clone(), at, n, per_run));
        }
        let mut heap = BinaryHeap::with_capacity(readers.len());
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(rec) = r.next_rec()? {
                heap.push(Reverse((rec, i)));
            }
        }
        let mut mem = std::mem::take(&mut self.mem).into_iter();
        let mem_head = mem.next();
        Ok(Sorted {
            mem,
            readers,
            heap,
            mem_head,
        })
    }
}

/// A writer at a moving offset of a file.
struct FileAt<'f> {
    file: &'f File,
    at: u64,
}

impl Write for FileAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads one run back, a buffer at a time.
struct RunReader<R> {
    file: std::sync::Arc<File>,
    at: u64,
    left: u64,
    buf: Vec<u8>,
    pos: usize,
    _rec: std::marker::PhantomData<R>,
}

impl<R: Rec> RunReader<R> {
    fn new(file: std::sync::Arc<File>, at: u64, n: u64, bytes: usize) -> Self {
        let per = (bytes / R::SIZE).max(1);
        RunReader {
            file,
            at,
            left: n,
            buf: Vec::with_capacity(per * R::SIZE),
            pos: 0,
            _rec: std::marker::PhantomData,
        }
    }

    fn next_rec(&mut self) -> io::Result<Option<R>> {
        if self.pos >= self.buf.len() {
            if self.left == 0 {
                return Ok(None);
            }
            let per = (self.buf.capacity() / R::SIZE).max(1) as u64;
            let n = per.min(self.left);
            self.buf.resize(n as usize * R::SIZE, 0);
            self.file.read_exact_at(&mut self.buf, self.at)?;
            self.at += n * R::SIZE as u64;
            self.left -= n;
            self.pos = 0;
        }
        let r = R::get(&self.buf[self.pos..self.pos + R::SIZE]);
        self.pos += R::SIZE;
        Ok(Some(r))
    }
}

/// The records of a [`Sorter`] in order: the runs and what stayed in
/// memory, merged.
pub(crate) struct Sorted<R: Rec> {
    mem: std::vec::IntoIter<R>,
    mem_head: Option<R>,
    readers: Vec<RunReader<R>>,
    heap: BinaryHeap<Reverse<(R, usize)>>,
}

impl<R: Rec> Sorted<R> {
    /// The next record, or an error reading a run back.
    pub(crate) fn next_rec(&mut self) -> io::Result<Option<R>> {
        if self.readers.is_empty() {
            return Ok(self.mem.next());
        }
        let from_runs = self.heap.peek().map(|Reverse((r, _))| *r);
        match (self.mem_head, from_runs) {
            (None, None) => Ok(None),
            (Some(m), run) if run.is_none_or(|r| m <= r) => {
                self.mem_head = self.mem.next();
                Ok(Some(m))
            }
            _ => {
                let Reverse((r, i)) = self.heap.pop().expect("peeked");
                if let Some(n) = self.readers[i].next_rec()? {
                    self.heap.push(Reverse((n, i)));
                }
                Ok(Some(r))
            }
        }
    }
}

/// A stream of sorted records that can be looked at before it is taken.
pub(crate) struct Peek<R: Rec> {
    src: Sorted<R>,
    head: Option<R>,
}

impl<R: Rec> Peek<R> {
    pub(crate) fn new(mut src: Sorted<R>) -> io::Result<Self> {
        let head = src.next_rec()?;
        Ok(Peek { src, head })
    }

    /// The next record, not taken.
    pub(crate) fn peek(&self) -> Option<&R> {
        self.head.as_ref()
    }

    /// Takes the next record.
    pub(crate) fn take(&mut self) -> io::Result<Option<R>> {
        let h = self.head.take();
        if h.is_some() {
            self.head = self.src.next_rec()?;
        }
        Ok(h)
    }

    /// Takes the next record if `f` accepts it.
    pub(crate) fn take_if(&mut self, f: impl Fn(&R) -> bool) -> io::Result<Option<R>> {
        if self.head.as_ref().is_some_and(&f) {
            self.take()
        } else {
            Ok(None)
        }
    }

    /// Takes the first of the next records that `f` accepts and drops the
    /// rest of them (a key listed twice counts once).
    pub(crate) fn take_first(&mut self, f: impl Fn(&R) -> bool) -> io::Result<Option<R>> {
        let first = self.take_if(&f)?;
        if first.is_some() {
            while self.take_if(&f)?.is_some() {}
        }
        Ok(first)
    }
}

/// The lowest of the keys at the heads of merged streams (`None` once all
/// are done).
pub(crate) fn lowest<const N: usize>(heads: [Option<u64>; N]) -> Option<u64> {
    heads.into_iter().flatten().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{be32, be64, put_be32, put_be64};

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Pair(u64, u32);

    impl Rec for Pair {
        const SIZE: usize = 12;
        fn put(&self, out: &mut [u8]) {
            put_be64(out, 0, self.0);
            put_be32(out, 8, self.1);
        }
        fn get(b: &[u8]) -> Self {
            Pair(be64(b, 0), be32(b, 8))
        }
    }

    fn drain(s: Sorter<Pair>) -> Vec<Pair> {
        let mut out = Vec::new();
        let mut it = s.into_sorted().unwrap();
        while let Some(r) = it.next_rec().unwrap() {
            out.push(r);
        }
        out
    }

    fn records(n: u64) -> Vec<Pair> {
        // A scrambled order with repeated keys.
        (0..n)
            .map(|i| Pair((i * 7919) % (n / 3 + 1), (i % 13) as u32))
            .collect()
    }

    #[test]
    fn in_memory_and_spilled_give_the_same_order() {
        let cfg = SpillConfig { dir: None };
        let recs = records(50_000);
        let mut want = recs.clone();
        want.sort();
        let mut big = Sorter::new(usize::MAX / 2, cfg.clone());
        let mut small = Sorter::new(0, cfg);
        for (k, r) in recs.iter().enumerate() {
            if k % 2 == 0 {
                big.push(*r).unwrap();
                small.push(*r).unwrap();
            } else {
                big.append(&mut vec![*r]).unwrap();
                small.append(&mut vec![*r]).unwrap();
            }
        }
        assert_eq!(big.runs(), 0);
        // 64 records a run: 781 runs and a remainder in memory.
        assert_eq!(small.runs(), 781);
        assert_eq!(drain(big), want);
        assert_eq!(drain(small), want);
    }

    #[test]
    fn empty_and_exact_multiples() {
        let cfg = SpillConfig { dir: None };
        assert!(drain(Sorter::new(0, cfg.clone())).is_empty());
        let mut s = Sorter::new(0, cfg);
        let recs = records(2048);
        for r in &recs {
            s.push(*r).unwrap();
        }
        let mut want = recs;
        want.sort();
        assert_eq!(drain(s), want);
    }
}

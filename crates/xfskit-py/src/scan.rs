//! Bulkstat: every allocated inode from the inode btrees (no tree walk),
//! as an iterator of records or as column buffers for an Arrow table.

use crate::errors::WithPath;
use crate::fsys::PyFs;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Mutex;
use xfskit::scan::{Bstat, BulkstatOptions};

/// The record fields in order (the Python `BulkstatRecord` names them).
pub const FIELDS: [&str; 21] = [
    "ino",
    "mode",
    "nlink",
    "uid",
    "gid",
    "rdev",
    "blksize",
    "size",
    "blocks",
    "xflags",
    "extents",
    "aextents",
    "forkoff",
    "gen",
    "projid",
    "extsize",
    "cowextsize",
    "atime_ns",
    "mtime_ns",
    "ctime_ns",
    "btime_ns",
];

/// Nanoseconds as i64, saturating (bigtime reaches past the year 2262).
fn ns64(t: i128) -> i64 {
    t.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

type Rec = (
    (u64, u16, u32, u32, u32, u32, u32, u64, u64, u32),
    (u64, u32, u32, u32, u32, u32, u32, i128, i128, i128, i128),
);

fn record(b: &Bstat) -> Rec {
    (
        (
            b.ino, b.mode, b.nlink, b.uid, b.gid, b.rdev, b.blksize, b.size, b.blocks, b.xflags,
        ),
        (
            b.extents,
            b.aextents,
            b.forkoff,
            b.gen,
            b.projectid,
            b.extsize_blks,
            b.cowextsize_blks,
            b.atime,
            b.mtime,
            b.ctime,
            b.btime,
        ),
    )
}

/// Batches from the scan thread (in inode order), ended by an error or
/// the channel's close.
#[pyclass(module = "xfskit._xfskit", name = "BulkstatIter")]
pub struct BulkstatIter {
    rx: Mutex<Receiver<Result<Vec<Bstat>, xfskit::Error>>>,
    queue: VecDeque<Bstat>,
}

#[pymethods]
impl BulkstatIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next record as two tuples (the Python layer flattens them).
    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Rec>> {
        while self.queue.is_empty() {
            let rx = &self.rx;
            let got = py.detach(|| rx.lock().unwrap_or_else(|p| p.into_inner()).recv());
            match got {
                Ok(Ok(batch)) => self.queue.extend(batch),
                Ok(Err(e)) => return Err(e).py(),
                Err(_) => return Ok(None),
            }
        }
        Ok(self.queue.pop_front().map(|b| record(&b)))
    }
}

fn options(ag: Option<u32>, threads: usize) -> BulkstatOptions {
    BulkstatOptions {
        threads,
        ag,
        ..Default::default()
    }
}

#[pymethods]
impl PyFs {
    /// Starts a bulkstat scan on its own thread; records come through the
    /// iterator as it is read (at most a few batches wait).
    #[pyo3(signature = (ag=None, threads=0))]
    fn bulkstat(&self, ag: Option<u32>, threads: usize) -> PyResult<BulkstatIter> {
        let fs = self.get()?;
        let (tx, rx) = sync_channel::<Result<Vec<Bstat>, xfskit::Error>>(4);
        std::thread::spawn(move || {
            let r = xfskit::scan::for_each_batch(&fs, &options(ag, threads), |b| {
                tx.send(Ok(b.to_vec()))
                    .map_err(|_| xfskit::Error::Invalid("the iterator was dropped".into()))
            });
            if let Err(e) = r {
                let _ = tx.send(Err(e));
            }
        });
        Ok(BulkstatIter {
            rx: Mutex::new(rx),
            queue: VecDeque::new(),
        })
    }

    /// Bulkstat as columns: (rows, [(name, kind, native-endian bytes)]),
    /// kind one of "u64", "u32", "u16", "ts" (i64 nanoseconds). One
    /// buffer per column, no Python object per inode.
    #[pyo3(signature = (ag=None, threads=0))]
    #[allow(clippy::type_complexity)]
    fn bulkstat_columns<'py>(
        &self,
        py: Python<'py>,
        ag: Option<u32>,
        threads: usize,
    ) -> PyResult<(
        usize,
        Vec<(&'static str, &'static str, Bound<'py, PyBytes>)>,
    )> {
        let fs = self.get()?;
        let mut u64s: [Vec<u64>; 4] = Default::default(); // ino size blocks extents
        let mut u32s: [Vec<u32>; 12] = Default::default();
        let mut u16s: Vec<u16> = Vec::new();
        let mut ts: [Vec<i64>; 4] = Default::default();
        py.detach(|| {
            xfskit::scan::for_each_batch(&fs, &options(ag, threads), |batch| {
                for b in batch {
                    for (v, x) in u64s.iter_mut().zip([b.ino, b.size, b.blocks, b.extents]) {
                        v.push(x);
                    }
                    let w = [
                        b.nlink,
                        b.uid,
                        b.gid,
                        b.rdev,
                        b.blksize,
                        b.xflags,
                        b.aextents,
                        b.forkoff,
                        b.gen,
                        b.projectid,
                        b.extsize_blks,
                        b.cowextsize_blks,
                    ];
                    for (v, x) in u32s.iter_mut().zip(w) {
                        v.push(x);
                    }
                    u16s.push(b.mode);
                    for (v, x) in ts.iter_mut().zip([b.atime, b.mtime, b.ctime, b.btime]) {
                        v.push(ns64(x));
                    }
                }
                Ok(())
            })
            .py()
        })?;
        let rows = u16s.len();
        let mut out = Vec::new();
        let mut put = |name: &'static str, kind: &'static str, bytes: Vec<u8>| {
            out.push((name, kind, PyBytes::new(py, &bytes)));
        };
        fn ne<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(|&x| f(x)).collect()
        }
        put("ino", "u64", ne(&u64s[0], u64::to_ne_bytes));
        put("mode", "u16", ne(&u16s, u16::to_ne_bytes));
        let names32 = [
            "nlink",
            "uid",
            "gid",
            "rdev",
            "blksize",
            "xflags",
            "aextents",
            "forkoff",
            "gen",
            "projid",
            "extsize",
            "cowextsize",
        ];
        put("size", "u64", ne(&u64s[1], u64::to_ne_bytes));
        put("blocks", "u64", ne(&u64s[2], u64::to_ne_bytes));
        put("extents", "u64", ne(&u64s[3], u64::to_ne_bytes));
        for (name, v) in names32.iter().zip(&u32s) {
            put(name, "u32", ne(v, u32::to_ne_bytes));
        }
        for (name, v) in ["atime", "mtime", "ctime", "btime"].iter().zip(&ts) {
            put(name, "ts", ne(v, i64::to_ne_bytes));
        }
        Ok((rows, out))
    }
}

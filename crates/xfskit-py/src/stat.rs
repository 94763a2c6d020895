//! `StatResult`: an inode as `os.stat_result` shows a file.

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use xfskit::inode::{FileType, Inode, Timestamp};

fn ns(t: Timestamp) -> i128 {
    i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec)
}

/// The fields of `os.stat_result` for one inode of the image: `st_mode`,
/// `st_ino`, `st_dev` (0: an image has no device number), `st_nlink`,
/// `st_uid`, `st_gid`, `st_size`, `st_rdev`, `st_blocks` (512-byte units),
/// `st_blksize`, the times as float seconds (`st_atime`...) and integer
/// nanoseconds (`st_atime_ns`...), and the creation time
/// (`st_birthtime`, `st_birthtime_ns`). Indexing `[0]`..`[9]` gives the
/// classic tuple (mode, ino, dev, nlink, uid, gid, size, atime, mtime,
/// ctime) with integer seconds, as `os.stat_result` does.
#[pyclass(module = "xfskit", name = "StatResult", frozen)]
#[derive(Clone)]
pub struct StatResult {
    #[pyo3(get)]
    st_mode: u32,
    #[pyo3(get)]
    st_ino: u64,
    #[pyo3(get)]
    st_dev: u64,
    #[pyo3(get)]
    st_nlink: u64,
    #[pyo3(get)]
    st_uid: u32,
    #[pyo3(get)]
    st_gid: u32,
    #[pyo3(get)]
    st_size: u64,
    #[pyo3(get)]
    st_rdev: u64,
    #[pyo3(get)]
    st_blocks: u64,
    #[pyo3(get)]
    st_blksize: u32,
    #[pyo3(get)]
    st_atime_ns: i128,
    #[pyo3(get)]
    st_mtime_ns: i128,
    #[pyo3(get)]
    st_ctime_ns: i128,
    #[pyo3(get)]
    st_birthtime_ns: i128,
}

/// `st_blksize` as kernel XFS reports it: the page size or the block size,
/// whichever is larger (without the `largeio` mount option).
fn blksize(block_size: u32) -> u32 {
    block_size.max(4096)
}

impl StatResult {
    /// `st_mode`.
    pub fn mode(&self) -> u32 {
        self.st_mode
    }

    /// The stat of `ip` on a filesystem of `block_size`-byte blocks.
    pub fn of(ip: &Inode, block_size: u32) -> StatResult {
        let rdev = match ip.file_type {
            FileType::CharDev | FileType::BlockDev => {
                let (ma, mi) = ip.rdev_major_minor();
                libc::makedev(ma, mi)
            }
            _ => 0,
        };
        StatResult {
            st_mode: u32::from(ip.mode),
            st_ino: ip.ino.0,
            st_dev: 0,
            st_nlink: u64::from(ip.nlink),
            st_uid: ip.uid,
            st_gid: ip.gid,
            st_size: ip.size,
            st_rdev: rdev,
            st_blocks: ip.nblocks.saturating_mul(u64::from(block_size)) / 512,
            st_blksize: blksize(block_size),
            st_atime_ns: ns(ip.atime),
            st_mtime_ns: ns(ip.mtime),
            st_ctime_ns: ns(ip.ctime),
            st_birthtime_ns: ns(ip.crtime),
        }
    }
}

fn secs(ns: i128) -> f64 {
    ns as f64 / 1e9
}

fn whole_secs(ns: i128) -> i128 {
    ns.div_euclid(1_000_000_000)
}

#[pymethods]
impl StatResult {
    #[getter]
    fn st_atime(&self) -> f64 {
        secs(self.st_atime_ns)
    }
    #[getter]
    fn st_mtime(&self) -> f64 {
        secs(self.st_mtime_ns)
    }
    #[getter]
    fn st_ctime(&self) -> f64 {
        secs(self.st_ctime_ns)
    }
    #[getter]
    fn st_birthtime(&self) -> f64 {
        secs(self.st_birthtime_ns)
    }

    fn __len__(&self) -> usize {
        10
    }

    fn __getitem__(&self, py: Python<'_>, i: isize) -> PyResult<Py<PyAny>> {
        let i = if i < 0 { i + 10 } else { i };
        let v = match i {
            0 => self.st_mode.into_pyobject(py)?.into_any(),
            1 => self.st_ino.into_pyobject(py)?.into_any(),
            2 => self.st_dev.into_pyobject(py)?.into_any(),
            3 => self.st_nlink.into_pyobject(py)?.into_any(),
            4 => self.st_uid.into_pyobject(py)?.into_any(),
            5 => self.st_gid.into_pyobject(py)?.into_any(),
            6 => self.st_size.into_pyobject(py)?.into_any(),
            7 => whole_secs(self.st_atime_ns).into_pyobject(py)?.into_any(),
            8 => whole_secs(self.st_mtime_ns).into_pyobject(py)?.into_any(),
            9 => whole_secs(self.st_ctime_ns).into_pyobject(py)?.into_any(),
            _ => return Err(PyIndexError::new_err("stat result index out of range")),
        };
        Ok(v.unbind())
    }

    fn __repr__(&self) -> String {
        format!(
            "xfskit.StatResult(st_mode={:#o}, st_ino={}, st_dev={}, st_nlink={}, st_uid={}, \
             st_gid={}, st_size={}, st_atime={}, st_mtime={}, st_ctime={})",
            self.st_mode,
            self.st_ino,
            self.st_dev,
            self.st_nlink,
            self.st_uid,
            self.st_gid,
            self.st_size,
            whole_secs(self.st_atime_ns),
            whole_secs(self.st_mtime_ns),
            whole_secs(self.st_ctime_ns)
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<StatResult>() {
            Ok(o) => {
                let o = o.get();
                (
                    self.st_mode,
                    self.st_ino,
                    self.st_nlink,
                    self.st_uid,
                    self.st_gid,
                    self.st_size,
                    self.st_mtime_ns,
                    self.st_ctime_ns,
                ) == (
                    o.st_mode,
                    o.st_ino,
                    o.st_nlink,
                    o.st_uid,
                    o.st_gid,
                    o.st_size,
                    o.st_mtime_ns,
                    o.st_ctime_ns,
                )
            }
            Err(_) => false,
        }
    }
}

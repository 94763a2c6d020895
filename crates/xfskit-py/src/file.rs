//! `_xfskit.Handle`: an open file of the image for positional reads and
//! (on a writable filesystem) writes. The Python layer keeps the position
//! and makes it an `io.RawIOBase`.

use crate::errors::{self, WithPath};
use crate::fsys::PyFs;
use crate::stat::StatResult;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::mem::MaybeUninit;
use xfskit::inode::{DataDev, Extent, FileType, Fork, Inode};
use xfskit::{Fs, Ino};

/// An open regular file.
#[pyclass(module = "xfskit._xfskit", name = "Handle", frozen)]
pub struct Handle {
    owner: Py<PyFs>,
    ino: Ino,
    /// Size and data fork map, kept when the filesystem is read-only (the
    /// file cannot change under us); a writable one reads the inode again.
    map: Option<(u64, Vec<Extent>, DataDev)>,
}

impl Handle {
    /// A handle on `ip` (a regular file, else an error naming why).
    pub fn new(
        owner: Py<PyFs>,
        fs: &Fs,
        ip: Inode,
        fs_writable: bool,
        _write: bool,
    ) -> PyResult<Handle> {
        if ip.file_type != FileType::File {
            return Err(errors::os(
                libc::EINVAL,
                format!("inode {} is not a regular file", ip.ino.0),
                None,
            ));
        }
        let map = if fs_writable {
            None
        } else {
            let ext = xfskit::inode::extents(fs, &ip, Fork::Data).py()?;
            xfskit::inode::require_data_dev(fs, &ip, &ext).py()?;
            Some((ip.size, ext, DataDev::of(&ip)))
        };
        Ok(Handle {
            owner,
            ino: ip.ino,
            map,
        })
    }

    fn fs(&self, py: Python<'_>) -> PyResult<std::sync::Arc<Fs>> {
        self.owner.bind(py).get().get()
    }

    /// Every byte of the file.
    pub fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.size(py)?;
        let n = usize::try_from(n).map_err(|_| errors::os(libc::EFBIG, "file too large", None))?;
        self.pread(py, 0, n)
    }
}

#[pymethods]
impl Handle {
    /// The inode number.
    #[getter]
    fn ino(&self) -> u64 {
        self.ino.0
    }

    /// The file's size now.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        if let Some((size, _, _)) = &self.map {
            return Ok(*size);
        }
        let fs = self.fs(py)?;
        py.detach(|| Ok(fs.inode(self.ino).py()?.size))
    }

    /// Up to `n` bytes at offset `off` (fewer at the end, b"" past it).
    fn pread<'py>(&self, py: Python<'py>, off: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let fs = self.fs(py)?;
        if let Some((size, map, dev)) = &self.map {
            let want = size.saturating_sub(off).min(n as u64) as usize;
            let (obj, ptr) = bytes_uninit(py, want)?;
            // SAFETY: the object's buffer holds `want` bytes, and nobody
            // else sees it before it is returned; as MaybeUninit nothing
            // reads it before it is written.
            let buf =
                unsafe { std::slice::from_raw_parts_mut(ptr.cast::<MaybeUninit<u8>>(), want) };
            py.detach(|| {
                let got =
                    xfskit::inode::read_mapped_uninit(&fs, map, *dev, *size, off, buf).py()?;
                buf[got..].fill(MaybeUninit::new(0));
                Ok::<_, PyErr>(())
            })?;
            return Ok(obj);
        }
        let v = py.detach(|| {
            let ip = fs.inode(self.ino).py()?;
            let want = ip.size.saturating_sub(off).min(n as u64) as usize;
            let mut v = vec![0u8; want];
            let got = xfskit::inode::read_at(&fs, &ip, off, &mut v).py()?;
            v.truncate(got);
            Ok::<_, PyErr>(v)
        })?;
        Ok(PyBytes::new(py, &v))
    }

    /// Writes `data` at `off` (writable filesystems only); returns its length.
    fn pwrite(&self, py: Python<'_>, off: u64, data: &[u8]) -> PyResult<usize> {
        let fs = self.owner.bind(py).get().get_rw(b"")?;
        py.detach(|| fs.write_at(self.ino, off, data).py())?;
        Ok(data.len())
    }

    /// Sets the size to `size` (writable filesystems only).
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        let fs = self.owner.bind(py).get().get_rw(b"")?;
        py.detach(|| fs.truncate(self.ino, size).py())
    }

    /// Makes the file's changes durable in the log (writable filesystems).
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        let me = self.owner.bind(py).get();
        let fs = me.get()?;
        if !me.writable {
            return Ok(());
        }
        py.detach(|| fs.fsync(self.ino).py())
    }

    /// The file's stat.
    fn fstat(&self, py: Python<'_>) -> PyResult<StatResult> {
        let fs = self.fs(py)?;
        py.detach(|| {
            let ip = fs.inode(self.ino).py()?;
            Ok(StatResult::of(&ip, fs.geometry().block_size))
        })
    }
}

/// A new `bytes` object of `len` bytes whose contents are not written
/// yet, and its buffer: the data is read straight into it (no zeroing
/// pass first). The caller writes every byte before anyone sees it.
fn bytes_uninit(py: Python<'_>, len: usize) -> PyResult<(Bound<'_, PyBytes>, *mut u8)> {
    let n = pyo3::ffi::Py_ssize_t::try_from(len)
        .map_err(|_| errors::os(libc::EFBIG, "file too large", None))?;
    // SAFETY: PyBytes_FromStringAndSize(NULL, n) returns a new bytes
    // object of n bytes (or NULL with an exception set), whose buffer is
    // ours to write until the object is shared.
    unsafe {
        let p = pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), n);
        let obj = Bound::from_owned_ptr_or_err(py, p)?.cast_into_unchecked::<PyBytes>();
        let buf = pyo3::ffi::PyBytes_AsString(p).cast::<u8>();
        Ok((obj, buf))
    }
}

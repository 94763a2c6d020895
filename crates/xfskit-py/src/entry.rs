//! `xfskit.DirEntry`: an entry of `Filesystem.scandir`, as `os.DirEntry`.
//!
//! Built in Rust for every entry a scandir returns (no Python `__init__`
//! per entry); its stat is read once, by its inode, and kept.

use crate::fsys::PyFs;
use crate::stat::StatResult;
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};
use std::sync::atomic::{AtomicU8, Ordering};

/// An entry of `Filesystem.scandir`, like `os.DirEntry`: `name`, `path`
/// (str or bytes, as the directory was given), `inode()`, `is_dir()`,
/// `is_file()`, `is_symlink()` (from the directory's file type when it
/// records one), and `stat()` (read by the entry's inode on first use and
/// kept; a symbolic link is followed by its path, as `os` does).
#[pyclass(module = "xfskit", name = "DirEntry", frozen)]
pub struct DirEntry {
    /// The entry's name.
    #[pyo3(get)]
    name: Py<PyAny>,
    /// The directory's path joined with the name.
    #[pyo3(get)]
    path: Py<PyAny>,
    ino: u64,
    /// The type letter (d, f, l, c, b, p, s), or 0 until known.
    ltype: AtomicU8,
    /// The `xfskit.Filesystem` the entry came from.
    fs: Py<PyAny>,
    inner: Py<PyFs>,
    lstat: PyOnceLock<Py<StatResult>>,
    stat: PyOnceLock<Py<StatResult>>,
}

/// `os.fsdecode` of `b`: UTF-8, undecodable bytes as surrogate escapes.
pub fn fsdecode<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the pointer and length describe `b`; the result is a new
    // reference or NULL with an exception set.
    unsafe {
        let p = pyo3::ffi::PyUnicode_DecodeFSDefaultAndSize(
            b.as_ptr().cast(),
            b.len() as pyo3::ffi::Py_ssize_t,
        );
        Bound::from_owned_ptr_or_err(py, p)
    }
}

fn letter_of_mode(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => b'd',
        libc::S_IFREG => b'f',
        libc::S_IFLNK => b'l',
        _ => b'o',
    }
}

impl DirEntry {
    /// The entries of one directory: `top` is the path as the caller gave
    /// it (str or bytes), `top_b` its bytes; `raw` (name, inode, type
    /// letter) from the engine.
    pub fn build(
        py: Python<'_>,
        fs: &Bound<'_, PyAny>,
        inner: &Bound<'_, PyFs>,
        top: &Bound<'_, PyAny>,
        top_b: &[u8],
        raw: Vec<crate::fsys::RawEntry>,
    ) -> PyResult<Vec<Py<DirEntry>>> {
        let as_bytes = top.is_instance_of::<PyBytes>();
        let mut joined = top_b.to_vec();
        if !joined.ends_with(b"/") {
            joined.push(b'/');
        }
        let dir_len = joined.len();
        let mut out = Vec::with_capacity(raw.len());
        for (name, ino, t) in raw {
            joined.truncate(dir_len);
            joined.extend_from_slice(&name);
            let (name, path) = if as_bytes {
                (
                    PyBytes::new(py, &name).into_any(),
                    PyBytes::new(py, &joined).into_any(),
                )
            } else {
                (fsdecode(py, &name)?, fsdecode(py, &joined)?)
            };
            let e = DirEntry {
                name: name.unbind(),
                path: path.unbind(),
                ino,
                ltype: AtomicU8::new(t.map_or(0, |s| s.as_bytes()[0])),
                fs: fs.clone().unbind(),
                inner: inner.clone().unbind(),
                lstat: PyOnceLock::new(),
                stat: PyOnceLock::new(),
            };
            out.push(Py::new(py, e)?);
        }
        Ok(out)
    }

    fn lstat_of<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, StatResult>> {
        let st = self.lstat.get_or_try_init(py, || {
            let st = self.inner.get().stat_ino(py, self.ino)?;
            Py::new(py, st)
        })?;
        Ok(st.bind(py).clone())
    }

    fn type_letter(&self, py: Python<'_>) -> PyResult<u8> {
        let t = self.ltype.load(Ordering::Relaxed);
        if t != 0 {
            return Ok(t);
        }
        let t = letter_of_mode(self.lstat_of(py)?.get().mode());
        self.ltype.store(t, Ordering::Relaxed);
        Ok(t)
    }

    /// The followed stat's mode, or None when the link's target is missing.
    fn followed_mode(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        match self.stat(py, true) {
            Ok(st) => Ok(Some(st.get().mode())),
            Err(e) if e.is_instance_of::<PyFileNotFoundError>(py) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[pymethods]
impl DirEntry {
    /// The entry's inode number.
    fn inode(&self) -> u64 {
        self.ino
    }

    #[getter(_ino)]
    fn ino_attr(&self) -> u64 {
        self.ino
    }

    #[getter(_fs)]
    fn fs_attr(&self, py: Python<'_>) -> Py<PyAny> {
        self.fs.clone_ref(py)
    }

    /// The type letter without following a symbolic link: d, f, l or o.
    fn _ltype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let t = self.type_letter(py)?;
        let t = match t {
            b'd' | b'f' | b'l' => t,
            _ => b'o',
        };
        Ok(PyString::new(py, std::str::from_utf8(&[t]).unwrap_or("o")))
    }

    /// Whether the entry is a symbolic link.
    fn is_symlink(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.type_letter(py)? == b'l')
    }

    /// Whether the entry is a directory (or a link to one, when following).
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn is_dir(&self, py: Python<'_>, follow_symlinks: bool) -> PyResult<bool> {
        let t = self.type_letter(py)?;
        if t == b'l' && follow_symlinks {
            return Ok(self
                .followed_mode(py)?
                .is_some_and(|m| m & libc::S_IFMT == libc::S_IFDIR));
        }
        Ok(t == b'd')
    }

    /// Whether the entry is a regular file (or a link to one, when following).
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn is_file(&self, py: Python<'_>, follow_symlinks: bool) -> PyResult<bool> {
        let t = self.type_letter(py)?;
        if t == b'l' && follow_symlinks {
            return Ok(self
                .followed_mode(py)?
                .is_some_and(|m| m & libc::S_IFMT == libc::S_IFREG));
        }
        Ok(t == b'f')
    }

    /// Always False: XFS has no junctions.
    fn is_junction(&self) -> bool {
        false
    }

    /// The entry's stat, kept after the first call. A symbolic link is
    /// followed by its path unless `follow_symlinks=False`.
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn stat<'py>(
        &self,
        py: Python<'py>,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, StatResult>> {
        if !follow_symlinks || self.type_letter(py)? != b'l' {
            return self.lstat_of(py);
        }
        let st = self.stat.get_or_try_init(py, || {
            self.fs
                .bind(py)
                .call_method1("stat", (self.path.clone_ref(py),))?
                .cast_into::<StatResult>()
                .map(Bound::unbind)
                .map_err(PyErr::from)
        })?;
        Ok(st.bind(py).clone())
    }

    fn __fspath__(&self, py: Python<'_>) -> Py<PyAny> {
        self.path.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("<xfskit.DirEntry {}>", self.name.bind(py).repr()?))
    }
}

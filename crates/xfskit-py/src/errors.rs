//! Engine errors as Python exceptions: `OSError` with the errno a kernel
//! mount gives (Python picks the subclass: `FileNotFoundError` for ENOENT,
//! `NotADirectoryError` for ENOTDIR...), and `CorruptError` (EUCLEAN) for
//! damage, whose message names the structure and where it is.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;

create_exception!(
    xfskit,
    CorruptError,
    PyOSError,
    "The filesystem or its disk image is damaged (errno EUCLEAN): the message \
     names the structure and where it is (AG, block, inode)."
);

/// `e` as a Python exception; `path` (the path the call was given) becomes
/// the exception's `filename`, as `os` functions set it.
pub fn engine(e: xfskit::Error, path: Option<&[u8]>) -> PyErr {
    let errno = e.errno();
    let msg = e.to_string();
    if e.is_corruption() {
        return CorruptError::new_err((errno, msg));
    }
    os(errno, msg, path)
}

/// An `OSError` with `errno` (Python turns it into the matching subclass).
pub fn os(errno: i32, msg: impl Into<String>, path: Option<&[u8]>) -> PyErr {
    let msg = msg.into();
    match path {
        Some(p) => PyOSError::new_err((errno, msg, String::from_utf8_lossy(p).into_owned())),
        None => PyOSError::new_err((errno, msg)),
    }
}

/// The error of a call on a closed filesystem or file.
pub fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on a closed filesystem")
}

/// A helper that maps engine errors with a path attached.
pub trait WithPath<T> {
    /// Maps the error, naming `path`.
    fn at(self, path: &[u8]) -> Result<T, PyErr>;
    /// Maps the error without a path.
    fn py(self) -> Result<T, PyErr>;
}

impl<T> WithPath<T> for Result<T, xfskit::Error> {
    fn at(self, path: &[u8]) -> Result<T, PyErr> {
        self.map_err(|e| engine(e, Some(path)))
    }
    fn py(self) -> Result<T, PyErr> {
        self.map_err(|e| engine(e, None))
    }
}

//! A Python binary file object (anything with `seek` and `read`, such as an
//! fsspec or obstore file) as an engine `Device`: positional reads are a
//! seek and reads under a lock, with the GIL taken only inside them.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::io;
use std::sync::Mutex;
use xfskit::dev::Device;

/// A read-only device over a Python file object.
pub struct PyFileDevice {
    obj: Py<PyAny>,
    len: u64,
    /// Seek and read are two calls: one reader at a time.
    lock: Mutex<()>,
}

impl PyFileDevice {
    /// Wraps `obj`; its size is found by seeking to its end.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<PyFileDevice> {
        let len: u64 = obj.call_method1("seek", (0, 2))?.extract()?;
        Ok(PyFileDevice {
            obj: obj.clone().unbind(),
            len,
            lock: Mutex::new(()),
        })
    }
}

fn py_io(e: PyErr) -> io::Error {
    io::Error::other(format!("reading the Python file object: {e}"))
}

impl Device for PyFileDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        Python::attach(|py| {
            let f = self.obj.bind(py);
            f.call_method1("seek", (off, 0)).map_err(py_io)?;
            let mut done = 0usize;
            while done < buf.len() {
                let got = f.call_method1("read", (buf.len() - done,)).map_err(py_io)?;
                let bytes = got.cast::<PyBytes>().map_err(|_| {
                    io::Error::other("the Python file object's read() returned no bytes object")
                })?;
                let b = bytes.as_bytes();
                if b.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the Python file object ends at byte {} (read {} bytes at {off})",
                            off + done as u64,
                            buf.len()
                        ),
                    ));
                }
                let n = b.len().min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&b[..n]);
                done += n;
            }
            Ok(())
        })
    }

    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

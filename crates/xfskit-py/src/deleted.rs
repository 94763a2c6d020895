//! Deleted files: the engine's forensic scan (`xfskit deleted`) and the
//! write of one recovered file (`xfskit undelete`'s, for one record).

use crate::errors::{self, WithPath};
use crate::fsys::PyFs;
use pyo3::prelude::*;
use std::os::unix::ffi::OsStrExt;
use xfskit::forensic::{self, Deleted};
use xfskit::inode::FileType;

/// One deleted inode as the scan found it. The Python layer's
/// `DeletedFile` (a dict of the JSON record's fields) keeps it to write
/// the file's data later without a second scan.
#[pyclass(module = "xfskit._xfskit", name = "Deleted", frozen)]
pub struct PyDeleted {
    d: Deleted,
    block_size: u32,
}

#[pymethods]
impl PyDeleted {
    /// The inode number.
    #[getter]
    fn ino(&self) -> u64 {
        self.d.ino
    }

    /// The record as `xfskit deleted --json` prints it, as a JSON text.
    fn json(&self) -> String {
        forensic::to_json(&self.d, self.block_size).to_string()
    }
}

#[pymethods]
impl PyFs {
    /// Finds the deleted inodes (`xfskit deleted`; `quick`: `--quick`, no
    /// free-space sweep), in the scan's order.
    #[pyo3(signature = (quick=false))]
    fn deleted(&self, py: Python<'_>, quick: bool) -> PyResult<Vec<PyDeleted>> {
        let fs = self.get()?;
        let block_size = fs.geometry().block_size;
        let (found, _) = py.detach(|| {
            let opts = forensic::Options {
                skip_free_space: quick,
            };
            forensic::scan(&fs, &opts, &mut |_, _| {}).py()
        })?;
        Ok(found
            .into_iter()
            .map(|d| PyDeleted { d, block_size })
            .collect())
    }

    /// Writes what survives of `rec` to the new host path `dest` (which
    /// must not exist): a file's data (sparse, times set from the inode;
    /// returns its length), or a short symlink made again (returns its
    /// target's length). A directory is EISDIR; a record with no data (no
    /// surviving extent, or a symlink whose target is lost) ENODATA.
    fn undelete(&self, py: Python<'_>, rec: PyRef<'_, PyDeleted>, dest: &[u8]) -> PyResult<u64> {
        let fs = self.get()?;
        let d = &rec.d;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(dest));
        let nodata = |what: &str| {
            errors::os(
                libc::ENODATA,
                format!("deleted inode {}: {what}", d.ino),
                Some(dest),
            )
        };
        match d.file_type {
            Some(FileType::Dir) => Err(errors::os(
                libc::EISDIR,
                format!(
                    "deleted inode {} is a directory: its files are records of their own",
                    d.ino
                ),
                Some(dest),
            )),
            Some(FileType::Symlink) => {
                let Some(t) = &d.symlink else {
                    return Err(nodata("the symlink's target did not survive"));
                };
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), path)
                    .map_err(|e| errors::engine(e.into(), Some(dest)))?;
                Ok(t.len() as u64)
            }
            _ if d.extents.is_empty() && d.size != Some(0) => {
                Err(nodata("no data extent survives"))
            }
            _ => py.detach(|| forensic::write_new(&fs, d, path).at(dest)),
        }
    }
}

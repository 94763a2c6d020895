//! `_xfskit.Fs`: an open filesystem and its read calls. Paths are bytes
//! (the Python layer encodes `str` with `os.fsencode`); every engine call
//! runs with the GIL released.

use crate::errors::{self, WithPath};
use crate::resolve::{self, LookupError};
use crate::stat::StatResult;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::{Arc, Mutex, RwLock};
use xfskit::attr::{acl, Namespace};
use xfskit::inode::{FileType, Inode};
use xfskit::{Fs, Ino};

/// An open filesystem (the Python class `xfskit.Filesystem` wraps it).
#[pyclass(module = "xfskit._xfskit", name = "Fs", frozen)]
pub struct PyFs {
    inner: RwLock<Option<Arc<Fs>>>,
    /// The directory of the last path looked up on a read-only filesystem
    /// (its path as given, and its inode): a walk stats the entries of
    /// one directory after another, so most lookups start there.
    last_dir: Mutex<Option<(Vec<u8>, Inode)>>,
    /// The last path looked up on a read-only filesystem and its inode
    /// (never a symbolic link): `lstat(p)` then `open(p)` or
    /// `read_bytes(p)` find the inode once.
    last_hit: Mutex<Option<(Vec<u8>, Inode)>>,
    /// The last inode `stat_ino` read on a read-only filesystem: a scandir
    /// entry's `stat()` then `open(entry)` read it once.
    last_ino: Mutex<Option<Inode>>,
    /// Opened with `writable=True`.
    #[pyo3(get)]
    pub writable: bool,
}

/// A lookup error as the Python exception `os` would raise for `path`.
pub fn lookup_err(e: LookupError, path: &[u8]) -> PyErr {
    match e {
        LookupError::Engine(e) => errors::engine(e, Some(path)),
        LookupError::Loop => {
            errors::os(libc::ELOOP, "too many levels of symbolic links", Some(path))
        }
        LookupError::NameTooLong => {
            errors::os(libc::ENAMETOOLONG, "file name too long", Some(path))
        }
    }
}

/// A directory entry as the engine gives it: name, inode, type letter.
pub type RawEntry = (Vec<u8>, u64, Option<&'static str>);

/// What `check` returns: (clean, problems total, [(what, where, detail)], stats,
/// warnings).
type CheckTuple = (
    bool,
    u64,
    Vec<(String, String, String)>,
    Py<PyDict>,
    Vec<String>,
);

/// A one-letter file type: d, f, l, c, b, p, s.
pub fn type_letter(t: FileType) -> &'static str {
    match t {
        FileType::Dir => "d",
        FileType::File => "f",
        FileType::Symlink => "l",
        FileType::CharDev => "c",
        FileType::BlockDev => "b",
        FileType::Fifo => "p",
        FileType::Socket => "s",
    }
}

impl PyFs {
    pub fn new(fs: Fs, writable: bool) -> PyFs {
        PyFs {
            inner: RwLock::new(Some(Arc::new(fs))),
            last_dir: Mutex::new(None),
            last_hit: Mutex::new(None),
            last_ino: Mutex::new(None),
            writable,
        }
    }

    /// The engine, or ValueError once closed.
    pub fn get(&self) -> PyResult<Arc<Fs>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(errors::closed)
    }

    /// Looks `path` up as [`lookup`] does, starting from the directory of
    /// the previous lookup when `path` is in it (read-only filesystems,
    /// whose directories cannot change). Anything unusual (a final "..",
    /// a symbolic link to follow, a missing name) takes the full lookup,
    /// which also gives the error.
    pub fn lookup_fast(&self, fs: &Fs, path: &[u8], follow: bool) -> PyResult<Inode> {
        let Some(i) = path.iter().rposition(|&b| b == b'/') else {
            return lookup(fs, path, follow);
        };
        let (dir, name) = (&path[..i], &path[i + 1..]);
        if self.writable || name.is_empty() || name == b"." || name == b".." || name.len() > 255 {
            return lookup(fs, path, follow);
        }
        {
            let g = self.last_hit.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((p, ip)) = g.as_ref() {
                if p == path {
                    return Ok(ip.clone());
                }
            }
        }
        let cached = {
            let g = self.last_dir.lock().unwrap_or_else(|p| p.into_inner());
            g.as_ref()
                .filter(|(d, _)| d == dir)
                .map(|(_, ip)| ip.clone())
        };
        let dir_ip = match cached {
            Some(ip) => ip,
            None => {
                let Ok(ip) = resolve::resolve(fs, dir, true) else {
                    return lookup(fs, path, follow);
                };
                if ip.file_type != FileType::Dir {
                    return lookup(fs, path, follow);
                }
                *self.last_dir.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((dir.to_vec(), ip.clone()));
                ip
            }
        };
        match xfskit::dir::lookup(fs, &dir_ip, name) {
            Ok(Some(ino)) => {
                let ip = fs.inode(ino).at(path)?;
                if ip.file_type == FileType::Symlink {
                    if follow {
                        return lookup(fs, path, follow);
                    }
                    return Ok(ip);
                }
                *self.last_hit.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((path.to_vec(), ip.clone()));
                Ok(ip)
            }
            _ => lookup(fs, path, follow),
        }
    }

    /// Directory `path`'s entries (name, inode, type letter), "." and
    /// ".." left out, read with the GIL released.
    pub fn read_dir(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<RawEntry>> {
        let fs = self.get()?;
        py.detach(|| {
            let ip = self.lookup_fast(&fs, path, true)?;
            if ip.file_type != FileType::Dir {
                return Err(errors::os(libc::ENOTDIR, "not a directory", Some(path)));
            }
            let entries = xfskit::dir::read_dir(&fs, &ip).at(path)?;
            Ok(entries
                .into_iter()
                .map(|e| (e.name, e.ino.0, e.file_type.map(type_letter)))
                .collect())
        })
    }

    /// The engine for a change: EROFS unless opened writable.
    pub fn get_rw(&self, path: &[u8]) -> PyResult<Arc<Fs>> {
        let fs = self.get()?;
        if !self.writable {
            return Err(errors::os(
                libc::EROFS,
                "the filesystem was opened read-only (open it with writable=True)",
                Some(path),
            ));
        }
        Ok(fs)
    }
}

/// Looks `path` up (GIL released by the caller).
pub fn lookup(fs: &Fs, path: &[u8], follow: bool) -> PyResult<Inode> {
    resolve::resolve(fs, path, follow).map_err(|e| lookup_err(e, path))
}

/// The names `listxattr` shows: every attribute by its full name (trusted
/// ones too, as root sees them; parent pointers never), and the ACLs
/// under their Linux names.
fn xattr_names(fs: &Fs, ip: &Inode) -> xfskit::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if !ip.has_attr_fork() {
        return Ok(out);
    }
    for a in xfskit::attr::list_names(fs, ip)? {
        if a.ns == Namespace::Parent {
            continue;
        }
        if let Some(linux) = acl::linux_name(a.ns, &a.name) {
            out.push(linux.to_vec());
        }
        out.push(xfskit::attr::full_name(a.ns, &a.name));
    }
    Ok(out)
}

/// The value `getxattr(name)` gives (ACLs in the Linux encoding).
fn xattr_value(fs: &Fs, ip: &Inode, name: &[u8]) -> xfskit::Result<Option<Vec<u8>>> {
    if let Some(disk) = acl::disk_name(name) {
        return match xfskit::attr::get(fs, ip, Namespace::Trusted, disk)? {
            Some(raw) => acl::to_linux(ip.ino.0, &raw).map(Some),
            None => Ok(None),
        };
    }
    let Some((ns, short)) = xfskit::attr::parse_full_name(name) else {
        return Ok(None);
    };
    xfskit::attr::get(fs, ip, ns, short)
}

#[pymethods]
impl PyFs {
    /// Stat of `path`, following a final symbolic link when `follow`.
    #[pyo3(signature = (path, follow=true))]
    fn stat(&self, py: Python<'_>, path: &[u8], follow: bool) -> PyResult<StatResult> {
        let fs = self.get()?;
        py.detach(|| {
            let ip = self.lookup_fast(&fs, path, follow)?;
            Ok(StatResult::of(&ip, fs.geometry().block_size))
        })
    }

    /// Stat of inode `ino` (which must be allocated).
    pub(crate) fn stat_ino(&self, py: Python<'_>, ino: u64) -> PyResult<StatResult> {
        let fs = self.get()?;
        py.detach(|| {
            let ip = fs.inode(Ino(ino)).py()?;
            let st = StatResult::of(&ip, fs.geometry().block_size);
            if !self.writable {
                *self.last_ino.lock().unwrap_or_else(|p| p.into_inner()) = Some(ip);
            }
            Ok(st)
        })
    }

    /// The entries of directory `path` as (name, inode, type letter or
    /// None when the directory does not record types), in on-disk order,
    /// "." and ".." left out.
    fn scandir(&self, py: Python<'_>, path: &[u8]) -> PyResult<Py<PyList>> {
        let list = PyList::empty(py);
        for (name, ino, t) in self.read_dir(py, path)? {
            list.append((PyBytes::new(py, &name), ino, t))?;
        }
        Ok(list.unbind())
    }

    /// The entries of directory `path` as `xfskit.DirEntry` objects of
    /// the Python filesystem `fs`; `top` is the path as the caller gave
    /// it (str or bytes), `path` its bytes.
    fn scandir_entries(
        slf: &Bound<'_, Self>,
        fs: &Bound<'_, PyAny>,
        top: &Bound<'_, PyAny>,
        path: &[u8],
    ) -> PyResult<Vec<Py<crate::entry::DirEntry>>> {
        let py = slf.py();
        let raw = slf.get().read_dir(py, path)?;
        crate::entry::DirEntry::build(py, fs, slf, top, path, raw)
    }

    /// The target of symbolic link `path`.
    fn readlink(&self, py: Python<'_>, path: &[u8]) -> PyResult<Py<PyBytes>> {
        let fs = self.get()?;
        let t = py.detach(|| {
            let ip = lookup(&fs, path, false)?;
            if ip.file_type != FileType::Symlink {
                return Err(errors::os(libc::EINVAL, "not a symbolic link", Some(path)));
            }
            xfskit::symlink::read_link(&fs, &ip).at(path)
        })?;
        Ok(PyBytes::new(py, &t).unbind())
    }

    /// The extended attribute names of `path`.
    #[pyo3(signature = (path, follow=true))]
    fn listxattr(&self, py: Python<'_>, path: &[u8], follow: bool) -> PyResult<Vec<Py<PyBytes>>> {
        let fs = self.get()?;
        let names = py.detach(|| {
            let ip = self.lookup_fast(&fs, path, follow)?;
            xattr_names(&fs, &ip).at(path)
        })?;
        Ok(names.iter().map(|n| PyBytes::new(py, n).unbind()).collect())
    }

    /// The value of extended attribute `name` of `path` (ENODATA if none).
    #[pyo3(signature = (path, name, follow=true))]
    fn getxattr(
        &self,
        py: Python<'_>,
        path: &[u8],
        name: &[u8],
        follow: bool,
    ) -> PyResult<Py<PyBytes>> {
        let fs = self.get()?;
        let v = py.detach(|| {
            let ip = self.lookup_fast(&fs, path, follow)?;
            xattr_value(&fs, &ip, name)
                .at(path)?
                .ok_or_else(|| errors::os(libc::ENODATA, "no such attribute", Some(path)))
        })?;
        Ok(PyBytes::new(py, &v).unbind())
    }

    /// The geometry as `xfskit info --json` prints it, as a JSON text.
    fn info_json(&self, py: Python<'_>) -> PyResult<String> {
        let fs = self.get()?;
        py.detach(|| {
            let state = format!("{:?}", fs.log_state()).to_lowercase();
            Ok(xfskit::info::to_json(fs.geometry(), &state).to_string())
        })
    }

    /// Opens regular file `path` for reading: a handle for positional reads.
    fn open_read(slf: &Bound<'_, Self>, path: &[u8]) -> PyResult<crate::file::Handle> {
        let me = slf.get();
        let fs = me.get()?;
        let py = slf.py();
        let ip = py.detach(|| {
            let ip = me.lookup_fast(&fs, path, true)?;
            match ip.file_type {
                FileType::Dir => Err(errors::os(libc::EISDIR, "is a directory", Some(path))),
                _ => Ok(ip),
            }
        })?;
        crate::file::Handle::new(slf.clone().unbind(), &fs, ip, me.writable, false)
    }

    /// Opens regular file inode `ino` for reading (a scandir entry's
    /// inode: no path lookup).
    fn open_read_ino(slf: &Bound<'_, Self>, ino: u64) -> PyResult<crate::file::Handle> {
        let me = slf.get();
        let fs = me.get()?;
        let py = slf.py();
        let ip = py.detach(|| {
            let cached = if me.writable {
                None
            } else {
                me.last_ino
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .filter(|ip| ip.ino.0 == ino)
            };
            let ip = match cached {
                Some(ip) => ip,
                None => fs.inode(Ino(ino)).py()?,
            };
            match ip.file_type {
                FileType::Dir => Err(errors::os(libc::EISDIR, "is a directory", None)),
                _ => Ok(ip),
            }
        })?;
        crate::file::Handle::new(slf.clone().unbind(), &fs, ip, me.writable, false)
    }

    /// The whole contents of regular file inode `ino`.
    fn read_file_ino<'py>(slf: &Bound<'py, Self>, ino: u64) -> PyResult<Bound<'py, PyBytes>> {
        Self::open_read_ino(slf, ino)?.read_all(slf.py())
    }

    /// The whole contents of regular file `path` (one call: lookup, map, read).
    fn read_file<'py>(slf: &Bound<'py, Self>, path: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let h = Self::open_read(slf, path)?;
        h.read_all(slf.py())
    }

    /// Checks the whole filesystem read-only (as `xfskit check`):
    /// (clean, problems total, [(what, where, detail)], stats dict, warnings).
    #[pyo3(signature = (threads=0, memory=0))]
    fn check(&self, py: Python<'_>, threads: usize, memory: usize) -> PyResult<CheckTuple> {
        let fs = self.get()?;
        let r = py.detach(|| {
            let opts = xfskit::check::CheckOptions {
                threads,
                memory,
                ..Default::default()
            };
            xfskit::check::check(&fs, &opts).py()
        })?;
        let s = &r.stats;
        let d = PyDict::new(py);
        d.set_item("ags", s.ags)?;
        d.set_item("btree_blocks", s.btree_blocks)?;
        d.set_item("inode_chunks", s.inode_chunks)?;
        d.set_item("inodes", s.inodes)?;
        d.set_item("directories", s.directories)?;
        d.set_item("dir_entries", s.dir_entries)?;
        d.set_item("free_blocks", s.free_blocks)?;
        let problems = r
            .problems
            .iter()
            .map(|p| (p.what.to_string(), p.location.to_string(), p.detail.clone()))
            .collect();
        Ok((
            r.is_clean(),
            s.problems_total,
            problems,
            d.unbind(),
            r.warnings.clone(),
        ))
    }

    /// Copies `path` of the image (a directory's contents, or one file)
    /// into the host directory `dest` (as `xfskit extract`).
    #[pyo3(signature = (dest, path, threads=3, preserve=true, chown=None, strict=false))]
    #[allow(clippy::too_many_arguments)]
    fn extract(
        &self,
        py: Python<'_>,
        dest: std::path::PathBuf,
        path: &[u8],
        threads: usize,
        preserve: bool,
        chown: Option<bool>,
        strict: bool,
    ) -> PyResult<Py<PyDict>> {
        let fs = self.get()?;
        let r = py.detach(|| {
            let opts = xfskit::extract::ExtractOptions {
                threads: threads.max(1),
                chown,
                preserve,
                strict,
                ..Default::default()
            };
            let progress = xfskit::extract::Progress::default();
            xfskit::extract::extract(&fs, path, &dest, &opts, &progress).at(path)
        })?;
        let d = PyDict::new(py);
        d.set_item("entries", r.entries)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("hard_links", r.hard_links)?;
        d.set_item("warnings", r.warnings.clone())?;
        d.set_item("damaged", r.damaged.clone())?;
        let inc: Vec<(String, String)> = r
            .incomplete
            .iter()
            .map(|i| (i.path.display().to_string(), i.to_string()))
            .collect();
        d.set_item("incomplete", inc)?;
        Ok(d.unbind())
    }

    /// Writes everything back and leaves a clean log (writable only).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.get()?;
        if !self.writable {
            return Ok(());
        }
        py.detach(|| fs.sync().py())
    }

    /// Syncs (when writable) and closes; later calls raise ValueError.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(fs) = taken {
            if self.writable {
                py.detach(|| fs.sync().py())?;
            }
        }
        Ok(())
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

//! The changes of a writable filesystem: each is one engine call (one
//! journaled transaction, or a few), as the CLI's offline edits make them.
//! New inodes belong to the calling process's effective user and group.

use crate::errors::{self, WithPath};
use crate::fsys::{lookup, lookup_err, PyFs};
use crate::resolve;
use pyo3::prelude::*;
use xfskit::build::{Meta, NodeKind};
use xfskit::inode::{FileType, Timestamp};
use xfskit::namespace::{AttrChange, SetTime};
use xfskit::Fs;

fn now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

fn meta(mode: u32) -> Meta {
    let t = now();
    let (uid, gid) = ids();
    Meta {
        mode: (mode & 0o7777) as u16,
        uid,
        gid,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

/// The effective user and group of this process.
#[allow(unsafe_code)]
fn ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

fn parent(fs: &Fs, path: &[u8]) -> PyResult<(xfskit::inode::Inode, Vec<u8>)> {
    resolve::parent_of(fs, path).map_err(|e| lookup_err(e, path))
}

fn ts(ns: i128) -> Timestamp {
    Timestamp {
        sec: ns.div_euclid(1_000_000_000) as i64,
        nsec: ns.rem_euclid(1_000_000_000) as u32,
    }
}

#[pymethods]
impl PyFs {
    /// Creates directory `path` with permission bits `mode` (the caller
    /// applies its umask).
    fn mkdir(&self, py: Python<'_>, path: &[u8], mode: u32) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let (dir, name) = parent(&fs, path)?;
            fs.create(dir.ino, &name, &NodeKind::Dir, &meta(mode))
                .at(path)
                .map(|_| ())
        })
    }

    /// Opens `path` for writing: creates it (permission bits `mode`) when
    /// missing and `create`, fails with EEXIST when it exists and
    /// `exclusive`, empties it when `trunc`. Returns the handle.
    #[pyo3(signature = (path, mode, create, exclusive, trunc))]
    fn open_write(
        slf: &Bound<'_, Self>,
        path: &[u8],
        mode: u32,
        create: bool,
        exclusive: bool,
        trunc: bool,
    ) -> PyResult<crate::file::Handle> {
        let me = slf.get();
        let fs = me.get_rw(path)?;
        let py = slf.py();
        let ip = py.detach(|| {
            let found = match resolve::resolve(&fs, path, true) {
                Ok(ip) => Some(ip),
                Err(resolve::LookupError::Engine(xfskit::Error::NotFound(_))) if create => None,
                Err(e) => return Err(lookup_err(e, path)),
            };
            let ino = match found {
                Some(ip) => {
                    if exclusive {
                        return Err(errors::os(libc::EEXIST, "file exists", Some(path)));
                    }
                    if ip.file_type == FileType::Dir {
                        return Err(errors::os(libc::EISDIR, "is a directory", Some(path)));
                    }
                    if trunc && ip.file_type == FileType::File && ip.size != 0 {
                        fs.truncate(ip.ino, 0).at(path)?;
                    }
                    ip.ino
                }
                None => {
                    let (dir, name) = parent(&fs, path)?;
                    fs.create(dir.ino, &name, &NodeKind::File { size: 0 }, &meta(mode))
                        .at(path)?
                }
            };
            fs.inode(ino).at(path)
        })?;
        crate::file::Handle::new(slf.clone().unbind(), &fs, ip, true, true)
    }

    /// Removes the non-directory `path` (EISDIR for a directory).
    fn remove(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let ip = lookup(&fs, path, false)?;
            if ip.file_type == FileType::Dir {
                return Err(errors::os(libc::EISDIR, "is a directory", Some(path)));
            }
            let (dir, name) = parent(&fs, path)?;
            fs.unlink(dir.ino, &name).at(path)
        })
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let ip = lookup(&fs, path, false)?;
            if ip.file_type != FileType::Dir {
                return Err(errors::os(libc::ENOTDIR, "not a directory", Some(path)));
            }
            let (dir, name) = parent(&fs, path)?;
            fs.rmdir(dir.ino, &name).at(path)
        })
    }

    /// Renames `src` to `dst`, replacing a file (or empty directory) there.
    fn rename(&self, py: Python<'_>, src: &[u8], dst: &[u8]) -> PyResult<()> {
        let fs = self.get_rw(src)?;
        py.detach(|| {
            let (sdir, sname) = parent(&fs, src)?;
            let (ddir, dname) = parent(&fs, dst)?;
            fs.rename(sdir.ino, &sname, ddir.ino, &dname).at(src)
        })
    }

    /// Makes `path` a symbolic link to `target`.
    fn symlink(&self, py: Python<'_>, target: &[u8], path: &[u8]) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let (dir, name) = parent(&fs, path)?;
            fs.create(
                dir.ino,
                &name,
                &NodeKind::Symlink(target.to_vec()),
                &meta(0o777),
            )
            .at(path)
            .map(|_| ())
        })
    }

    /// Makes `dst` another name of `src` (its symbolic link followed when
    /// `follow`, as `os.link` does by default).
    #[pyo3(signature = (src, dst, follow=true))]
    fn link(&self, py: Python<'_>, src: &[u8], dst: &[u8], follow: bool) -> PyResult<()> {
        let fs = self.get_rw(dst)?;
        py.detach(|| {
            let ip = lookup(&fs, src, follow)?;
            if ip.file_type == FileType::Dir {
                return Err(errors::os(
                    libc::EPERM,
                    "hard link to a directory",
                    Some(src),
                ));
            }
            let (dir, name) = parent(&fs, dst)?;
            fs.link(dir.ino, &name, ip.ino).at(dst)
        })
    }

    /// Changes mode bits, owner and times of `path` in one transaction:
    /// each argument that is None is left alone; a time of -1 means now.
    #[pyo3(signature = (path, follow=true, mode=None, uid=None, gid=None, atime_ns=None, mtime_ns=None))]
    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        py: Python<'_>,
        path: &[u8],
        follow: bool,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<i128>,
        mtime_ns: Option<i128>,
    ) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        let time = |t: Option<i128>| {
            t.map(|n| {
                if n == -1 {
                    SetTime::Now
                } else {
                    SetTime::At(ts(n))
                }
            })
        };
        let change = AttrChange {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            atime: time(atime_ns),
            mtime: time(mtime_ns),
            ctime: None,
        };
        py.detach(|| {
            let ip = lookup(&fs, path, follow)?;
            fs.change_attrs(ip.ino, &change).at(path).map(|_| ())
        })
    }

    /// Sets the size of regular file `path`.
    fn truncate(&self, py: Python<'_>, path: &[u8], length: u64) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let ip = lookup(&fs, path, true)?;
            match ip.file_type {
                FileType::Dir => Err(errors::os(libc::EISDIR, "is a directory", Some(path))),
                FileType::File => fs.truncate(ip.ino, length).at(path),
                _ => Err(errors::os(libc::EINVAL, "not a regular file", Some(path))),
            }
        })
    }

    /// Sets extended attribute `name`; `flags` 1 (XATTR_CREATE) fails when
    /// it exists, 2 (XATTR_REPLACE) when it does not.
    #[pyo3(signature = (path, name, value, flags=0, follow=true))]
    fn setxattr(
        &self,
        py: Python<'_>,
        path: &[u8],
        name: &[u8],
        value: &[u8],
        flags: i32,
        follow: bool,
    ) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let ip = lookup(&fs, path, follow)?;
            if flags & 3 != 0 {
                let exists = match xfskit::attr::parse_full_name(name) {
                    Some((ns, short)) => xfskit::attr::get(&fs, &ip, ns, short).at(path)?.is_some(),
                    None => false,
                };
                if flags & 1 != 0 && exists {
                    return Err(errors::os(libc::EEXIST, "attribute exists", Some(path)));
                }
                if flags & 2 != 0 && !exists {
                    return Err(errors::os(libc::ENODATA, "no such attribute", Some(path)));
                }
            }
            fs.set_xattr(ip.ino, name, value).at(path)
        })
    }

    /// Removes extended attribute `name` (ENODATA when there is none).
    #[pyo3(signature = (path, name, follow=true))]
    fn removexattr(&self, py: Python<'_>, path: &[u8], name: &[u8], follow: bool) -> PyResult<()> {
        let fs = self.get_rw(path)?;
        py.detach(|| {
            let ip = lookup(&fs, path, follow)?;
            fs.remove_xattr(ip.ino, name).at(path)
        })
    }
}

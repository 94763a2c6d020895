//! Extended attributes of directory-source entries: read through an open
//! descriptor where there is one, else by path without following a final
//! symlink. Only names XFS can store are kept, sorted, so the target sees
//! them in the same order every time. A short list or value costs one call.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::io::Errno;

use super::feed::{io_at, storable_xattr};
use crate::error::Result;

/// Where xattrs are read from: an open file or directory, or a path whose
/// last component is not followed.
#[derive(Clone, Copy)]
pub(crate) enum On<'a> {
    /// An open file or directory.
    Fd(&'a OwnedFd),
    /// A path; a symlink at its end is not followed.
    Path(&'a Path),
}

fn not_supported(e: Errno) -> bool {
    e == Errno::NOTSUP || e == Errno::NOSYS
}

impl On<'_> {
    fn list(self, buf: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            On::Fd(fd) => rustix::fs::flistxattr(fd, buf),
            On::Path(p) => rustix::fs::llistxattr(p, buf),
        }
    }

    fn get(self, name: &OsStr, buf: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            On::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
            On::Path(p) => rustix::fs::lgetxattr(p, name, buf),
        }
    }

    fn size(self, name: &OsStr) -> rustix::io::Result<usize> {
        match self {
            On::Fd(fd) => rustix::fs::fgetxattr_query(fd, name),
            On::Path(p) => rustix::fs::lgetxattr_query(p, name),
        }
    }

    /// Storable xattr names, sorted. One call when the list is short.
    pub(crate) fn names(self, path: &Path) -> Result<Vec<Vec<u8>>> {
        // Most files have no xattrs or a short list: a stack buffer first,
        // the heap only for a long list.
        let mut small = [0u8; 512];
        let mut big = Vec::new();
        let mut in_big = false;
        let n = loop {
            let buf: &mut [u8] = if in_big { &mut big } else { &mut small };
            match self.list(buf) {
                Ok(n) => break n,
                Err(Errno::RANGE) => {
                    let need = match self.list(&mut []) {
                        Ok(n) => n,
                        Err(e) if not_supported(e) => return Ok(Vec::new()),
                        Err(e) => return Err(io_at(path, e.into())),
                    };
                    let len = need.max(buf.len() * 2);
                    big.resize(len, 0);
                    in_big = true;
                }
                Err(e) if not_supported(e) => return Ok(Vec::new()),
                Err(e) => return Err(io_at(path, e.into())),
            }
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let list = if in_big { &big[..n] } else { &small[..n] };
        let mut names: Vec<Vec<u8>> = list
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty() && storable_xattr(n))
            .map(<[u8]>::to_vec)
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Storable xattrs with their values, sorted by name.
    pub(crate) fn values(self, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for name in self.names(path)? {
            let cname = OsStr::from_bytes(&name);
            let mut buf = vec![0u8; 256];
            loop {
                match self.get(cname, &mut buf) {
                    Ok(n) => {
                        buf.truncate(n);
                        out.push((name, buf));
                        break;
                    }
                    Err(Errno::RANGE) => {
                        let need = match self.size(cname) {
                            Ok(n) => n,
                            Err(Errno::NODATA) => break,
                            Err(e) => return Err(io_at(path, e.into())),
                        };
                        buf.resize(need.max(buf.len() * 2), 0);
                    }
                    Err(Errno::NODATA) => break,
                    Err(e) => return Err(io_at(path, e.into())),
                }
            }
        }
        Ok(out)
    }

    /// (name length, value length) of the storable xattrs.
    pub(crate) fn sizes(self, path: &Path) -> Result<Vec<(usize, usize)>> {
        let mut out = Vec::new();
        for name in self.names(path)? {
            if let Ok(len) = self.size(OsStr::from_bytes(&name)) {
                out.push((name.len(), len));
            }
        }
        Ok(out)
    }
}

//! `xfskit cp SRC... IMAGE:DEST`: host files and trees into an image.
//!
//! A directory is fed by the build's directory source (read-ahead threads,
//! holes kept, hard links within the copy kept, xattrs) into a target that
//! is rooted at the destination directory and merges with what is there:
//! an existing directory is entered, an existing non-directory replaced.
//! Without `-a` new inodes belong to root (or `--owner`), carry the
//! source's permission bits without set-id bits, the time of the copy, and
//! no xattrs.

use super::{child, Outcome};
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use xfskit::build::feed::{FeedOptions, FeedStats};
use xfskit::build::idmap::IdMap;
use xfskit::build::{BuildTarget, Meta, NodeKind};
use xfskit::dev::AlignedBuf;
use xfskit::geometry::Ino;
use xfskit::inode::{FileType, Timestamp};
use xfskit::{Error, Fs};

/// How copies into the image are made.
pub struct InOptions {
    /// Keep owners, set-id bits, times and xattrs (`-a`).
    pub archive: bool,
    /// Owner of new inodes without `-a`.
    pub owner: (u32, u32),
    /// The time of the copy.
    pub now: Timestamp,
}

impl InOptions {
    /// The metadata a new inode gets for a source with `meta`.
    fn adjust(&self, meta: &Meta) -> Meta {
        if self.archive {
            return meta.clone();
        }
        let t = self.now;
        Meta {
            mode: meta.mode & 0o1777,
            uid: self.owner.0,
            gid: self.owner.1,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        }
    }
}

/// The image as a build target rooted at one directory.
struct Into<'a> {
    fs: &'a Fs,
    root: Ino,
    o: &'a InOptions,
}

impl Into<'_> {
    /// Makes room for `name` in `parent`: an existing directory is
    /// returned when a directory is wanted, any other existing entry of a
    /// kind that may be replaced is removed.
    fn clear(&self, parent: Ino, name: &[u8], want_dir: bool) -> Result<Option<Ino>, Error> {
        if !want_dir {
            // Unlinked without reading the inode first: reading an inode
            // from the device writes pending file data and the log first.
            return match self.fs.unlink(parent, name) {
                Ok(()) => Ok(None),
                Err(Error::IsDir(_)) => {
                    Err(Error::IsDir(String::from_utf8_lossy(name).into_owned()))
                }
                Err(e) => Err(e),
            };
        }
        let dir = self.fs.inode(parent)?;
        let Some(old) = child(self.fs, &dir, name)? else {
            return Ok(None);
        };
        let is_dir = self.fs.inode(old)?.file_type == FileType::Dir;
        match (want_dir, is_dir) {
            (true, true) => Ok(Some(old)),
            (false, false) => {
                self.fs.unlink(parent, name)?;
                Ok(None)
            }
            (true, false) => Err(Error::NotDir(String::from_utf8_lossy(name).into_owned())),
            (false, true) => Err(Error::IsDir(String::from_utf8_lossy(name).into_owned())),
        }
    }
}

impl BuildTarget for Into<'_> {
    fn root(&self) -> Ino {
        self.root
    }

    fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
    ) -> Result<Ino, Error> {
        let meta = self.o.adjust(meta);
        match self.fs.create(parent, name, kind, &meta) {
            Err(Error::Exists(_)) => {
                if let Some(dir) = self.clear(parent, name, *kind == NodeKind::Dir)? {
                    return Ok(dir);
                }
                self.fs.create(parent, name, kind, &meta)
            }
            r => r,
        }
    }

    fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.fs.write_at_opt(ino, offset, data, false)
    }

    fn write_owned(&mut self, ino: Ino, offset: u64, data: AlignedBuf) -> Result<(), Error> {
        self.fs.write_owned(ino, offset, data, false)
    }

    fn link(&mut self, parent: Ino, name: &[u8], target: Ino) -> Result<(), Error> {
        match self.fs.link(parent, name, target) {
            Err(Error::Exists(_)) => {
                self.clear(parent, name, false)?;
                self.fs.link(parent, name, target)
            }
            r => r,
        }
    }

    fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<(), Error> {
        if !self.o.archive {
            return Ok(());
        }
        self.fs.set_xattr_opt(ino, name, value, false)
    }

    fn set_meta(&mut self, ino: Ino, meta: &Meta) -> Result<(), Error> {
        self.fs.set_meta(ino, &self.o.adjust(meta))
    }

    fn create_file(
        &mut self,
        parent: Ino,
        name: &[u8],
        meta: &Meta,
        data: &[u8],
        xattrs: &[(&[u8], &[u8])],
    ) -> Result<Ino, Error> {
        let meta = self.o.adjust(meta);
        let xattrs = if self.o.archive { xattrs } else { &[] };
        match self.fs.create_file(parent, name, &meta, data, xattrs) {
            Err(Error::Exists(_)) => {
                self.clear(parent, name, false)?;
                self.fs.create_file(parent, name, &meta, data, xattrs)
            }
            r => r,
        }
    }
}

/// Metadata of a host file, as `-a` keeps it.
fn host_meta(m: &std::fs::Metadata) -> Meta {
    let t = |s: i64, ns: i64| Timestamp {
        sec: s,
        nsec: ns.clamp(0, 999_999_999) as u32,
    };
    let ctime = t(m.ctime(), m.ctime_nsec());
    Meta {
        mode: (m.mode() & 0o7777) as u16,
        uid: m.uid(),
        gid: m.gid(),
        atime: t(m.atime(), m.atime_nsec()),
        mtime: t(m.mtime(), m.mtime_nsec()),
        ctime,
        crtime: ctime,
    }
}

/// Host xattrs of `path` (not following a symlink), for `-a`.
fn host_xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    xfskit::build::feed::read_xattrs(path).unwrap_or_default()
}

/// Copies the host `src` to `name` in image directory `dir`. `follow`:
/// a symlink named on the command line is copied as what it points to.
#[allow(clippy::too_many_arguments)]
pub fn copy_in(
    fs: &Fs,
    src: &Path,
    dir: Ino,
    name: &[u8],
    recursive: bool,
    o: &InOptions,
    progress: Option<&dyn Fn(&FeedStats)>,
    out: &mut Outcome,
) {
    let shown = src.display().to_string();
    let md = if o.archive || recursive {
        std::fs::symlink_metadata(src)
    } else {
        std::fs::metadata(src)
    };
    let md = match md {
        Ok(m) => m,
        Err(e) => return out.fail(&shown, &Error::Io(e)),
    };
    let mut t = Into { fs, root: dir, o };
    let meta = host_meta(&md);
    let ft = md.file_type();
    let r = (|| -> Result<(), Error> {
        if ft.is_dir() {
            if !recursive {
                return Err(Error::Invalid("is a directory (use -r)".into()));
            }
            let top = t.create(dir, name, &NodeKind::Dir, &meta)?;
            let ids = IdMap::default();
            let fo = FeedOptions {
                ids: &ids,
                default_time: o.now,
                one_file_system: false,
                progress,
                jobs: 1,
            };
            let mut inner = Into { fs, root: top, o };
            xfskit::build::source_dir::feed(src, &mut inner, &fo)?;
            return Ok(());
        }
        let xattrs = if o.archive {
            host_xattrs(src)
        } else {
            Vec::new()
        };
        let xr: Vec<(&[u8], &[u8])> = xattrs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let kind = if ft.is_file() {
            return copy_file(&mut t, src, dir, name, &meta, md.len(), &xr);
        } else if ft.is_symlink() {
            let target = std::fs::read_link(src)?;
            NodeKind::Symlink(std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec())
        } else if ft.is_char_device() || ft.is_block_device() {
            let rdev = md.rdev();
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            if ft.is_char_device() {
                NodeKind::CharDev { major, minor }
            } else {
                NodeKind::BlockDev { major, minor }
            }
        } else if ft.is_fifo() {
            NodeKind::Fifo
        } else {
            NodeKind::Socket
        };
        let ino = t.create(dir, name, &kind, &meta)?;
        for (n, v) in &xr {
            t.set_xattr(ino, n, v)?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        out.fail(&shown, &e);
    }
}

/// Copies what the host directory `src` holds into the image directory
/// `dir`, merging into it (`cp -r SRC/. DEST` of an existing DEST). With
/// `archive`, `dir` then takes the source directory's attributes and
/// xattrs, as `cp -a` gives them; otherwise it keeps its own.
#[allow(clippy::too_many_arguments)]
pub fn copy_contents_in(
    fs: &Fs,
    src: &Path,
    dir: Ino,
    recursive: bool,
    o: &InOptions,
    progress: Option<&dyn Fn(&FeedStats)>,
    out: &mut Outcome,
) {
    let shown = src.display().to_string();
    let r = (|| -> Result<(), Error> {
        let md = std::fs::metadata(src)?;
        if !md.is_dir() {
            return Err(Error::NotDir(shown.clone()));
        }
        if !recursive {
            return Err(Error::Invalid("is a directory (use -r)".into()));
        }
        let ids = IdMap::default();
        let fo = FeedOptions {
            ids: &ids,
            default_time: o.now,
            one_file_system: false,
            progress,
            jobs: 1,
        };
        let mut inner = Into { fs, root: dir, o };
        xfskit::build::source_dir::feed(src, &mut inner, &fo)?;
        if o.archive {
            for (n, v) in host_xattrs(src) {
                inner.set_xattr(dir, &n, &v)?;
            }
            inner.set_meta(dir, &host_meta(&md))?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        out.fail(&shown, &e);
    }
}

/// Copies a regular host file: small ones in one transaction, larger
/// ones data segment by data segment (holes stay holes).
fn copy_file(
    t: &mut Into<'_>,
    src: &Path,
    dir: Ino,
    name: &[u8],
    meta: &Meta,
    size: u64,
    xattrs: &[(&[u8], &[u8])],
) -> Result<(), Error> {
    let at = |e: std::io::Error| xfskit::build::feed::io_at(src, e);
    let f = File::open(src).map_err(at)?;
    if size <= 1 << 20 {
        let mut data = Vec::with_capacity(size as usize);
        std::io::Read::read_to_end(&mut &f, &mut data).map_err(at)?;
        t.create_file(dir, name, meta, &data, xattrs)?;
        return Ok(());
    }
    let ino = t.create(dir, name, &NodeKind::File { size }, meta)?;
    for (n, v) in xattrs {
        t.set_xattr(ino, n, v)?;
    }
    let mut buf = vec![0u8; 4 << 20];
    for (start, len) in xfskit::build::feed::data_segments(&f, src, size)? {
        let mut off = start;
        while off < start + len {
            let n = (start + len - off).min(buf.len() as u64) as usize;
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf[..n], off).map_err(at)?;
            t.write_data(ino, off, &buf[..n])?;
            off += n as u64;
        }
    }
    // A hole at the end: the size says where the file ends.
    if t.fs.inode(ino)?.size != size {
        t.fs.truncate(ino, size)?;
    }
    t.set_meta(ino, meta)
}

//! Offline edits of an image: `cp`, `mkdir`, `rm`, `mv`, `ln`, `chmod`,
//! `chown`, `touch`, `truncate`, `setfattr`, `chattr`, `chproj` (and
//! `getfattr`, `lsattr` and `lsproj`, which only read).
//!
//! Every editing command opens the filesystem (bare, in a partition, an
//! LVM volume or a qcow2 disk) for writing with the journal on, makes all
//! of its changes as engine transactions, and syncs once at the end, which
//! leaves the log clean. Killed part way, the image holds a log the kernel
//! (or `xfskit recover`, or the next xfskit edit) replays: every change
//! the log reached is kept, nothing is half done.
//!
//! Errors about one path are printed as `xfskit CMD: PATH: message` and the
//! command goes on with the next path, as coreutils do; the exit code is
//! the worst of the codes [`super::code_of`] gives them (see
//! [`super::worse`]).

use crate::cmd::out::errln;
pub mod attrs;
pub mod cp;
mod cp_in;
pub mod flags;
mod glob;
pub mod help;
pub mod names;
mod parse;
pub mod xattr;

use std::path::Path;
use std::process::ExitCode;
use xfskit::build::Meta;
use xfskit::geometry::Ino;
use xfskit::inode::{FileType, Inode, Timestamp};
use xfskit::{Error, Fs, OpenOptions};

pub use glob::expand;

/// Opens the filesystem in `image` for writing, journaled.
pub fn open_rw(image: &Path, disk: &super::DiskArgs) -> Result<Fs, Error> {
    let img = xfskit::disk::open(image, &disk.image_options(true))?;
    for note in &img.notes {
        errln!("xfskit: warning: {}: {note}", image.display());
    }
    Fs::from_device_rw(
        super::with_undo(img.device, disk)?,
        &super::with_rtdev(&OpenOptions::default(), disk),
    )
}

/// The outcome of a command run over several paths.
pub struct Outcome {
    cmd: &'static str,
    code: u8,
}

impl Outcome {
    /// A command named `cmd` in messages.
    pub fn new(cmd: &'static str) -> Outcome {
        Outcome { cmd, code: 0 }
    }

    /// Reports that `path` failed with `e` and keeps the highest code.
    pub fn fail(&mut self, path: &str, e: &Error) {
        errln!("xfskit {}: {path}: {}", self.cmd, short_message(e));
        self.code = super::worse(self.code, super::code_of(e));
    }

    /// Reports a failure that is not an engine error.
    pub fn fail_msg(&mut self, path: &str, msg: &str, code: u8) {
        errln!("xfskit {}: {path}: {msg}", self.cmd);
        self.code = super::worse(self.code, code);
    }

    /// Keeps `code` if it is worse than the code so far (for outcomes
    /// already reported).
    pub fn note(&mut self, code: u8) {
        self.code = super::worse(self.code, code);
    }

    /// Runs `f` for `path`, reporting its error.
    pub fn run(&mut self, path: &str, f: impl FnOnce() -> Result<(), Error>) {
        if let Err(e) = f() {
            self.fail(path, &e);
        }
    }

    /// Syncs `fs` (the changes go in place, the log is left clean) and
    /// returns the exit code.
    pub fn finish(mut self, fs: &Fs) -> Result<ExitCode, Error> {
        if fs.is_writable() {
            if let Err(e) = fs.sync() {
                self.fail("sync", &e);
            }
        }
        Ok(ExitCode::from(self.code))
    }

    /// The exit code so far.
    pub fn code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

/// The message of `e` without the kind prefix when the path already says
/// what went wrong ("not found: x" becomes "No such file or directory").
fn short_message(e: &Error) -> String {
    match e {
        Error::NotFound(m) if m.starts_with("no match") => "no match".into(),
        Error::NotFound(_) => "no such file or directory".into(),
        Error::NotDir(_) => "not a directory".into(),
        Error::IsDir(_) => "is a directory".into(),
        Error::Exists(_) => "already exists".into(),
        Error::NotEmpty(_) => "directory not empty".into(),
        Error::NotPermitted(_) => "operation not permitted".into(),
        _ => super::message(e),
    }
}

/// `path` split into its components, "." dropped; ".." kept for lookup.
pub fn components(path: &str) -> Vec<&[u8]> {
    path.as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

/// The directory holding `path` and the last name of `path`. The root
/// (and paths ending in "..") have no such pair: an error naming `path`.
pub fn parent_of(fs: &Fs, path: &str) -> Result<(Inode, Vec<u8>), Error> {
    let comps = components(path);
    let Some((&last, dirs)) = comps.split_last() else {
        return Err(Error::Invalid("the root directory has no name".into()));
    };
    if last == b".." {
        return Err(Error::Invalid(
            "a path ending in '..' names no entry".into(),
        ));
    }
    let dir_path = dirs.join(&b'/');
    let dir = fs.lookup_path(&dir_path)?;
    if dir.file_type != FileType::Dir {
        return Err(Error::NotDir(
            String::from_utf8_lossy(&dir_path).into_owned(),
        ));
    }
    Ok((dir, last.to_vec()))
}

/// The inode at `path`, or `None` when nothing is there.
pub fn lookup_opt(fs: &Fs, path: &str) -> Result<Option<Inode>, Error> {
    match fs.lookup_path(path.as_bytes()) {
        Ok(i) => Ok(Some(i)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The entry `name` of directory `dir`, if any.
pub fn child(fs: &Fs, dir: &Inode, name: &[u8]) -> Result<Option<Ino>, Error> {
    xfskit::dir::lookup(fs, dir, name)
}

/// The time now, from the system clock.
pub fn now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

/// Metadata of a new inode made by an edit: `mode`, owned by `uid:gid`,
/// every time now.
pub fn new_meta(mode: u16, uid: u32, gid: u32) -> Meta {
    let t = now();
    Meta {
        mode,
        uid,
        gid,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

/// Joins an image path and a name.
pub fn join(dir: &str, name: &[u8]) -> String {
    let n = String::from_utf8_lossy(name);
    if dir.ends_with('/') {
        format!("{dir}{n}")
    } else {
        format!("{dir}/{n}")
    }
}

/// The last component of `path` (for copies into a directory).
pub fn base_name(path: &str) -> Option<&[u8]> {
    components(path).last().copied().filter(|c| *c != b"..")
}

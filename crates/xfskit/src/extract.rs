//! Copying a tree out of an image onto the host filesystem.
//!
//! The walk runs on the calling thread: it creates directories and hands
//! every other entry to a small pool of workers, which create the file,
//! symlink or node, copy the mapped and written extents (holes and
//! unwritten extents are skipped, then the size is set), and apply
//! xattrs, owner, mode and nanosecond times. Workers never add entries to a
//! directory after the walk left it, except through the two final passes:
//! hard links (linked to the first extracted path once every worker is
//! done) and directory metadata (applied deepest first, so a directory's
//! times are set after its contents).
//!
//! The destination may refuse single entries (an xattr too big for it, a
//! device node without privilege, a name too long, no space for one
//! file): unless [`ExtractOptions::strict`], each refusal is recorded in
//! [`ExtractReport::incomplete`] and the rest goes on, as damaged image
//! entries do in [`ExtractReport::damaged`]. A file whose contents could
//! not be written is removed rather than left short.

use crate::attr;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{extents, FileType, Fork, Inode, Timestamp};
use crate::symlink;
use crate::walk::{self, Control, Entry, Visitor};
use rustix::fs::{AtFlags, Mode, Timespec, Timestamps, CWD};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

/// How to extract.
#[derive(Debug, Clone)]
pub struct ExtractOptions {
    /// Worker threads copying files (at least 1).
    pub threads: usize,
    /// Set owners: `None` means "when running as root".
    pub chown: Option<bool>,
    /// Bytes read from the image per request.
    pub chunk_bytes: usize,
    /// Keep times and xattrs (`xfskit cp` out without `-a` does not:
    /// files get the time of the copy, no xattrs).
    pub preserve: bool,
    /// Stop at the first thing the destination refuses, instead of
    /// recording it in [`ExtractReport::incomplete`] and going on.
    pub strict: bool,
}

impl Default for ExtractOptions {
    fn default() -> Self {
        ExtractOptions {
            threads: 3,
            chown: None,
            chunk_bytes: 4 << 20,
            preserve: true,
            strict: false,
        }
    }
}

/// Counters updated while extracting, for progress reports.
#[derive(Debug, Default)]
pub struct Progress {
    /// Entries created.
    pub entries: AtomicU64,
    /// File content bytes written.
    pub bytes: AtomicU64,
}

/// What an extraction did.
#[derive(Debug, Clone, Default)]
pub struct ExtractReport {
    /// Entries created, the top directory included.
    pub entries: u64,
    /// Bytes of file contents written.
    pub bytes: u64,
    /// Hard links made.
    pub hard_links: u64,
    /// Things that could not be preserved (each kind reported once).
    pub warnings: Vec<String>,
    /// Entries skipped because the image is damaged there: their path and
    /// the damage found (the rest of the tree was extracted).
    pub damaged: Vec<(String, String)>,
    /// What the destination refused (the rest of the tree was extracted).
    pub incomplete: Vec<Incomplete>,
    /// Realtime files skipped because their data is on the realtime
    /// device, which was not given: their path and why.
    pub unreadable: Vec<(String, String)>,
}

impl ExtractReport {
    /// One line counting the entries in [`Self::incomplete`] and what was
    /// refused, e.g. "3 entries not fully extracted (2 xattrs, 1 device
    /// node)"; `None` when nothing was.
    pub fn incomplete_summary(&self) -> Option<String> {
        if self.incomplete.is_empty() {
            return None;
        }
        let mut paths: Vec<&Path> = self.incomplete.iter().map(|i| i.path.as_path()).collect();
        paths.sort();
        paths.dedup();
        let mut kinds: Vec<(Part, usize)> = Vec::new();
        for i in &self.incomplete {
            match kinds.iter_mut().find(|(k, _)| *k == i.part) {
                Some((_, n)) => *n += 1,
                None => kinds.push((i.part, 1)),
            }
        }
        kinds.sort_by_key(|(k, _)| *k);
        let parts: Vec<String> = kinds
            .iter()
            .map(|(k, n)| format!("{n} {}", k.noun(*n)))
            .collect();
        let n = paths.len();
        Some(format!(
            "{n} {} not fully extracted ({})",
            if n == 1 { "entry" } else { "entries" },
            parts.join(", ")
        ))
    }
}

/// Something the destination refused to store.
#[derive(Debug, Clone)]
pub struct Incomplete {
    /// The destination path of the entry.
    pub path: PathBuf,
    /// What part of it is missing.
    pub part: Part,
    /// What failed, e.g. "setting xattr user.big (8000 bytes)".
    pub what: String,
    /// Why, as the destination said it, e.g. "No space left on device".
    pub why: String,
}

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.path.display(), self.what, self.why)
    }
}

/// The part of an entry that the destination refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// A regular file (not created, or its contents not written: removed).
    File,
    /// A directory (not created: nothing under it was extracted).
    Directory,
    /// A symbolic link.
    Symlink,
    /// A character or block device node.
    DeviceNode,
    /// A fifo.
    Fifo,
    /// A socket.
    Socket,
    /// A hard link.
    HardLink,
    /// One extended attribute (or ACL).
    Xattr,
    /// The owner or group.
    Owner,
    /// The permission bits.
    Mode,
    /// The access and modification times.
    Times,
}

impl Part {
    /// The noun for `n` of these, as the summary counts them.
    pub fn noun(self, n: usize) -> &'static str {
        let (one, many) = match self {
            Part::File => ("file", "files"),
            Part::Directory => ("directory", "directories"),
            Part::Symlink => ("symlink", "symlinks"),
            Part::DeviceNode => ("device node", "device nodes"),
            Part::Fifo => ("fifo", "fifos"),
            Part::Socket => ("socket", "sockets"),
            Part::HardLink => ("hard link", "hard links"),
            Part::Xattr => ("xattr", "xattrs"),
            Part::Owner => ("owner", "owners"),
            Part::Mode => ("mode", "modes"),
            Part::Times => ("set of times", "sets of times"),
        };
        if n == 1 {
            one
        } else {
            many
        }
    }

    fn of(t: FileType) -> Part {
        match t {
            FileType::File => Part::File,
            FileType::Dir => Part::Directory,
            FileType::Symlink => Part::Symlink,
            FileType::CharDev | FileType::BlockDev => Part::DeviceNode,
            FileType::Fifo => Part::Fifo,
            FileType::Socket => Part::Socket,
        }
    }
}

/// True for the errors with which a destination refuses one entry (the
/// next may well work): no space or quota, a value or name too long or
/// invalid for it, no privilege, a name taken. Other errors (EIO, EROFS)
/// end the extraction.
fn is_refusal(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let Some(errno) = Errno::from_io_error(e) else {
        return false;
    };
    [
        Errno::NOSPC,
        Errno::DQUOT,
        Errno::TOOBIG,
        Errno::RANGE,
        Errno::FBIG,
        Errno::PERM,
        Errno::ACCESS,
        Errno::NAMETOOLONG,
        Errno::INVAL,
        Errno::ILSEQ,
        Errno::EXIST,
        Errno::MLINK,
        Errno::NOTSUP,
    ]
    .contains(&errno)
}

/// An I/O error's message without Rust's " (os error N)".
fn why(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

/// Extracts `src` (a path in the image; "" or "/" for the root) to `dest`.
///
/// A directory's contents go into `dest`, which must not exist or be an
/// empty directory; any other file is written as `dest/NAME`.
pub fn extract(
    fs: &Fs,
    src: &[u8],
    dest: &Path,
    opts: &ExtractOptions,
    progress: &Progress,
) -> Result<ExtractReport> {
    let start = fs.lookup_path(src)?;
    prepare_dest(dest)?;
    let chown = opts
        .chown
        .unwrap_or_else(|| rustix::process::geteuid().is_root());
    let shared = Shared {
        fs,
        chown,
        preserve: opts.preserve,
        strict: opts.strict,
        chunk: opts.chunk_bytes.max(64 << 10),
        progress,
        warn: Mutex::new(Vec::new()),
        damaged: Mutex::new(Vec::new()),
        unreadable: Mutex::new(Vec::new()),
        incomplete: Mutex::new(Vec::new()),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
    };
    let (tx, rx) = mpsc::sync_channel::<Job>(512);
    let rx = Mutex::new(rx);
    let mut v = ExtractVisitor {
        dest: dest.to_path_buf(),
        tx: Some(tx),
        shared: &shared,
        dirs: Vec::new(),
        links: Vec::new(),
    };
    // A non-directory start is extracted under its own name.
    let start_path = if start.file_type == FileType::Dir {
        Vec::new()
    } else {
        src.split(|&b| b == b'/')
            .rfind(|c| !c.is_empty())
            .unwrap_or(b"file")
            .to_vec()
    };
    let walked = std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| worker(&shared, &rx));
        }
        let r = walk::walk_from(fs, start, &start_path, &mut v);
        v.tx = None; // workers end when the queue drains
        r
    });
    if let Some(e) = shared.error.lock().map_err(|_| poisoned())?.take() {
        return Err(e);
    }
    walked?;
    let mut report = ExtractReport::default();
    for (first, path) in &v.links {
        let (first, full) = (dest.join(os(first)), dest.join(os(path)));
        if std::fs::symlink_metadata(&first).is_err() {
            // Its first link was refused: say so rather than ENOENT.
            let what = format!("making a hard link to {}", first.display());
            shared.record(
                &full,
                Part::HardLink,
                what,
                "that file was not extracted".into(),
            );
            continue;
        }
        if let Err(e) = std::fs::hard_link(&first, &full) {
            let what = format!("making a hard link to {}", first.display());
            shared
                .refused(&full, Part::HardLink, what, e)
                .map_err(|e| at(&full, e))?;
            continue;
        }
        progress.entries.fetch_add(1, Ordering::Relaxed);
        report.hard_links += 1;
    }
    // Directories were recorded parents first; apply children first.
    for (path, ino) in v.dirs.iter().rev() {
        let inode = fs.inode(*ino)?;
        let full = dest.join(os(path));
        shared
            .finish(&full, None, &inode, false)
            .map_err(|e| at(&full, e))?;
    }
    report.entries = progress.entries.load(Ordering::Relaxed);
    report.bytes = progress.bytes.load(Ordering::Relaxed);
    report.warnings = shared.warn.into_inner().map_err(|_| poisoned())?;
    report.damaged = shared.damaged.into_inner().map_err(|_| poisoned())?;
    report.unreadable = shared.unreadable.into_inner().map_err(|_| poisoned())?;
    report.incomplete = shared.incomplete.into_inner().map_err(|_| poisoned())?;
    Ok(report)
}

/// `e` with `path` in front of its message, for the I/O errors that end
/// an extraction.
fn at(path: &Path, e: Error) -> Error {
    match e {
        Error::Io(io) => Error::Io(std::io::Error::new(
            io.kind(),
            format!("{}: {io}", path.display()),
        )),
        other => other,
    }
}

fn poisoned() -> Error {
    Error::Invalid("a worker thread panicked".into())
}

fn os(p: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(p))
}

fn prepare_dest(dest: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(dest)?;
            Ok(())
        }
        Err(e) => Err(Error::Io(e)),
        Ok(md) if md.is_dir() => {
            if std::fs::read_dir(dest)?.next().is_some() {
                return Err(Error::Invalid(format!(
                    "{} exists and is not empty",
                    dest.display()
                )));
            }
            Ok(())
        }
        Ok(_) => Err(Error::Invalid(format!(
            "{} exists and is not a directory",
            dest.display()
        ))),
    }
}

/// A non-directory for a worker to create.
struct Job {
    path: PathBuf,
    inode: Inode,
}

/// State the walk and the workers share.
struct Shared<'a> {
    fs: &'a Fs,
    chown: bool,
    preserve: bool,
    strict: bool,
    chunk: usize,
    progress: &'a Progress,
    warn: Mutex<Vec<String>>,
    /// (path, damage) of entries skipped.
    damaged: Mutex<Vec<(String, String)>>,
    /// (path, why) of realtime files skipped.
    unreadable: Mutex<Vec<(String, String)>>,
    /// What the destination refused.
    incomplete: Mutex<Vec<Incomplete>>,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
}

fn worker(sh: &Shared<'_>, rx: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if sh.failed.load(Ordering::Relaxed) {
            continue; // drain the queue so the walk is not blocked
        }
        if let Err(e) = sh.create(&job.path, &job.inode) {
            if walk::is_damage(&e) {
                // One damaged file does not cost the others.
                sh.record_damage(job.path.display().to_string(), &e);
                continue;
            }
            if matches!(e, Error::Unsupported(_)) && job.inode.is_realtime() {
                // Its data is on a device we were not given: skip it (no
                // empty stand-in is left) and go on.
                let _ = std::fs::remove_file(&job.path);
                if let Ok(mut v) = sh.unreadable.lock() {
                    v.push((job.path.display().to_string(), e.to_string()));
                }
                continue;
            }
            let e = at(&job.path, e);
            if let Ok(mut slot) = sh.error.lock() {
                slot.get_or_insert(e);
            }
            sh.failed.store(true, Ordering::Relaxed);
        }
    }
}

fn timespec(t: Timestamp) -> Timespec {
    Timespec {
        tv_sec: t.sec,
        tv_nsec: i64::from(t.nsec),
    }
}

impl Shared<'_> {
    /// Records an entry skipped for damage.
    fn record_damage(&self, path: String, e: &Error) {
        if let Ok(mut d) = self.damaged.lock() {
            d.push((path, e.to_string()));
        }
    }

    /// Records that the destination refused `part` of `path`.
    fn record(&self, path: &Path, part: Part, what: String, why: String) {
        if let Ok(mut v) = self.incomplete.lock() {
            v.push(Incomplete {
                path: path.to_path_buf(),
                part,
                what,
                why,
            });
        }
    }

    /// Handles the destination's error `e` doing `what` for `part` of
    /// `path`: a refusal is recorded and `Ok` returned (go on with the
    /// next step), unless strict; anything else is an error saying what
    /// failed (the caller adds the path).
    fn refused(&self, path: &Path, part: Part, what: String, e: std::io::Error) -> Result<()> {
        if self.strict || !is_refusal(&e) {
            return Err(Error::Io(std::io::Error::new(
                e.kind(),
                format!("{what}: {}", why(&e)),
            )));
        }
        self.record(path, part, what, why(&e));
        Ok(())
    }

    /// Records a warning once per kind.
    fn warn_once(&self, what: &str) {
        if let Ok(mut w) = self.warn.lock() {
            if !w.iter().any(|x| x == what) {
                w.push(what.to_string());
            }
        }
    }

    /// Creates one non-directory and applies its metadata.
    fn create(&self, path: &Path, inode: &Inode) -> Result<()> {
        let perm = Mode::from_raw_mode(u32::from(inode.perm()));
        let part = Part::of(inode.file_type);
        let made = match inode.file_type {
            FileType::File => {
                let f = match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                {
                    Ok(f) => f,
                    Err(e) => return self.refused(path, part, "creating the file".into(), e),
                };
                if let Some((what, e)) = self.copy_contents(&f, inode)? {
                    // A short file would pass for the real one: remove it
                    // (which also gives back the space it took).
                    drop(f);
                    let _ = std::fs::remove_file(path);
                    if self.strict || !is_refusal(&e) {
                        return self.refused(path, part, what, e);
                    }
                    let why = format!("{} (the file was removed)", why(&e));
                    self.record(path, part, what, why);
                    return Ok(());
                }
                self.progress.entries.fetch_add(1, Ordering::Relaxed);
                return self.finish(path, Some(&f), inode, false);
            }
            FileType::Symlink => {
                let target = symlink::read_link(self.fs, inode)?;
                rustix::fs::symlinkat(OsStr::from_bytes(&target), CWD, path)
                    .map_err(|e| ("making the symlink", e))
            }
            FileType::CharDev | FileType::BlockDev => {
                let (maj, min) = inode.rdev_major_minor();
                let ft = if inode.file_type == FileType::CharDev {
                    rustix::fs::FileType::CharacterDevice
                } else {
                    rustix::fs::FileType::BlockDevice
                };
                rustix::fs::mknodat(CWD, path, ft, perm, rustix::fs::makedev(maj, min))
                    .map_err(|e| ("making the device node", e))
            }
            FileType::Fifo => rustix::fs::mknodat(CWD, path, rustix::fs::FileType::Fifo, perm, 0)
                .map_err(|e| ("making the fifo", e)),
            FileType::Socket => {
                rustix::fs::mknodat(CWD, path, rustix::fs::FileType::Socket, perm, 0)
                    .map_err(|e| ("making the socket", e))
            }
            FileType::Dir => {
                return Err(Error::Invalid("directories are created by the walk".into()))
            }
        };
        if let Err((what, e)) = made {
            return self.refused(path, part, what.into(), e.into());
        }
        self.progress.entries.fetch_add(1, Ordering::Relaxed);
        self.finish(path, None, inode, inode.file_type == FileType::Symlink)
    }

    /// Writes the mapped, written extents of a regular file, then its size.
    /// Errors reading the image are errors; an error writing to the
    /// destination is returned as `Some` with what was being done.
    fn copy_contents(&self, f: &File, inode: &Inode) -> Result<Option<(String, std::io::Error)>> {
        let geo = self.fs.geometry();
        let bs = u64::from(geo.block_size);
        let map = extents(self.fs, inode, Fork::Data)?;
        crate::inode::require_data_dev(self.fs, inode, &map)?;
        let dev = crate::inode::DataDev::of(inode);
        let writing = || format!("writing its contents ({} bytes)", inode.size);
        let mut buf = Vec::new();
        for e in map.iter().filter(|e| !e.unwritten) {
            let file_start = e.offset.saturating_mul(bs);
            if file_start >= inode.size {
                break;
            }
            let file_end = e.end().saturating_mul(bs).min(inode.size);
            let dev_start = dev.byte_offset(self.fs, e.start, 0);
            let total = file_end - file_start;
            let ahead = (self.chunk as u64) * 4;
            dev.will_need(self.fs, dev_start, total.min(ahead));
            let mut done = 0u64;
            while done < total {
                let n = (total - done).min(self.chunk as u64) as usize;
                if buf.len() < n {
                    buf.resize(n, 0);
                }
                if done + ahead < total && done.is_multiple_of(ahead) {
                    let next = done + ahead;
                    dev.will_need(self.fs, dev_start + next, (total - next).min(ahead));
                }
                dev.read(self.fs, e.start, done, &mut buf[..n])?;
                if let Err(e) = f.write_all_at(&buf[..n], file_start + done) {
                    return Ok(Some((writing(), e)));
                }
                done += n as u64;
                self.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        if let Err(e) = f.set_len(inode.size) {
            return Ok(Some((format!("setting its size to {}", inode.size), e)));
        }
        Ok(None)
    }

    /// Applies xattrs, owner, mode and times to an extracted path (through
    /// `file` when it is open: fewer path lookups). What the destination
    /// refuses is recorded (see [`Self::refused`]) and the rest applied.
    fn finish(&self, path: &Path, file: Option<&File>, inode: &Inode, is_link: bool) -> Result<()> {
        if self.preserve && has_attrs(inode) {
            for mut x in attr::list(self.fs, inode)? {
                // ACLs are restored as ACLs (the destination stores them its
                // own way), not as XFS's private trusted attributes.
                let name = match attr::acl::linux_name(x.ns, &x.name) {
                    Some(linux) => {
                        x.value = attr::acl::to_linux(inode.ino.0, &x.value)?;
                        linux.to_vec()
                    }
                    None => x.full_name(),
                };
                let flags = rustix::fs::XattrFlags::empty();
                let r = match file {
                    Some(f) => rustix::fs::fsetxattr(f, OsStr::from_bytes(&name), &x.value, flags),
                    None => rustix::fs::lsetxattr(path, OsStr::from_bytes(&name), &x.value, flags),
                };
                match r {
                    Ok(()) => {}
                    Err(rustix::io::Errno::PERM | rustix::io::Errno::ACCESS) => self.warn_once(
                        &format!("no permission to set {} xattrs (needs root)", x.ns.prefix()),
                    ),
                    Err(rustix::io::Errno::NOTSUP) => self.warn_once(&format!(
                        "the destination does not support {} xattrs",
                        x.ns.prefix()
                    )),
                    Err(e) => {
                        let what = format!(
                            "setting xattr {} ({} bytes)",
                            String::from_utf8_lossy(&name),
                            x.value.len()
                        );
                        self.refused(path, Part::Xattr, what, e.into())?;
                    }
                }
            }
        }
        if self.chown {
            // An id of 2^32 - 1 is chown's "leave as is": no file can be
            // given it, so it is left alone.
            let uid = (inode.uid != u32::MAX).then(|| rustix::fs::Uid::from_raw(inode.uid));
            let gid = (inode.gid != u32::MAX).then(|| rustix::fs::Gid::from_raw(inode.gid));
            if uid.is_none() || gid.is_none() {
                self.warn_once("an owner or group id of 4294967295 (no id) was not set");
            }
            let r = match file {
                Some(f) => rustix::fs::fchown(f, uid, gid),
                None => rustix::fs::chownat(CWD, path, uid, gid, AtFlags::SYMLINK_NOFOLLOW),
            };
            if let Err(e) = r {
                let what = format!("setting the owner to {}:{}", inode.uid, inode.gid);
                self.refused(path, Part::Owner, what, e.into())?;
            }
        } else if self.preserve {
            self.warn_once("owners were not preserved (not running as root)");
        }
        if !is_link {
            let perm = Mode::from_raw_mode(u32::from(inode.perm()));
            let r = match file {
                Some(f) => rustix::fs::fchmod(f, perm),
                None => rustix::fs::chmodat(CWD, path, perm, AtFlags::empty()),
            };
            if let Err(e) = r {
                let what = format!("setting the mode to {:o}", inode.perm());
                self.refused(path, Part::Mode, what, e.into())?;
            }
        }
        if !self.preserve {
            return Ok(());
        }
        let times = Timestamps {
            last_access: timespec(inode.atime),
            last_modification: timespec(inode.mtime),
        };
        let r = match file {
            Some(f) => rustix::fs::futimens(f, &times),
            None => rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW),
        };
        if let Err(e) = r {
            self.refused(path, Part::Times, "setting the times".into(), e.into())?;
        }
        Ok(())
    }
}

/// True when the inode may hold attributes: it has an attr fork that is
/// not an empty extent list (the kernel treats that as no attributes).
pub fn has_attrs(inode: &Inode) -> bool {
    inode.has_attr_fork()
        && !(inode.aformat == crate::inode::ForkFormat::Extents && inode.anextents == 0)
}

/// The walk side: makes directories, queues everything else.
struct ExtractVisitor<'s, 'a> {
    dest: PathBuf,
    tx: Option<mpsc::SyncSender<Job>>,
    shared: &'s Shared<'a>,
    /// Directories to finish at the end (relative path, inode), parents first.
    dirs: Vec<(Vec<u8>, Ino)>,
    /// Hard links to make at the end: (first path, this path).
    links: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Visitor for ExtractVisitor<'_, '_> {
    fn damaged(&mut self, path: &[u8], e: Error) -> Result<()> {
        let full = self.dest.join(os(path));
        self.shared.record_damage(full.display().to_string(), &e);
        Ok(())
    }

    fn entry(&mut self, e: &Entry<'_>) -> Result<Control> {
        if self.shared.failed.load(Ordering::Relaxed) {
            return Ok(Control::Stop);
        }
        let full = self.dest.join(os(e.path));
        if e.inode.file_type == FileType::Dir {
            if e.depth > 0 {
                if let Err(err) = std::fs::create_dir(&full) {
                    let what = "making the directory (nothing under it was extracted)";
                    self.shared
                        .refused(&full, Part::Directory, what.into(), err)
                        .map_err(|err| at(&full, err))?;
                    return Ok(Control::SkipDir);
                }
            }
            self.shared.progress.entries.fetch_add(1, Ordering::Relaxed);
            self.dirs.push((e.path.to_vec(), e.inode.ino));
            return Ok(Control::Continue);
        }
        if let Some(first) = e.first_link {
            self.links.push((first.to_vec(), e.path.to_vec()));
            return Ok(Control::Continue);
        }
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::Invalid("extract queue closed".into()))?;
        if tx
            .send(Job {
                path: full,
                inode: e.inode.clone(),
            })
            .is_err()
        {
            return Ok(Control::Stop);
        }
        Ok(Control::Continue)
    }
}

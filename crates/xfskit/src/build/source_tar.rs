//! A tar archive as a build source: plain, gzip, zstd or xz (recognised by
//! their magic bytes), from a file or from standard input (spooled to an
//! anonymous temporary file in `$TMPDIR` so it can be read twice: once to
//! size the image, once to fill it).
//!
//! Entries may come in any order. Directories a path implies but the archive
//! does not list are made with mode 0755, owner 0:0 (through the id map) and
//! the default time (`SOURCE_DATE_EPOCH`, else 0); a directory's own header
//! updates it whenever it appears, and every directory's metadata is set at
//! the end. Nothing is kept per file: only a path -> inode map of the
//! directories (every entry's parent is looked up there), so memory grows
//! with the directories, not the files. A hard link names an earlier entry
//! by its path: its directory comes from that map and its inode from the
//! directory itself, read back through the target. A name that appears
//! twice is an error (the directory refuses the second one), unless both
//! are directories (their headers then merge, the later one winning).
//! Paths with `..` are refused; leading `/` and `./` are dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek};
use std::path::Path;

use super::feed::{
    check_name, check_symlink, create_small_file, meta_at, set_xattr, storable_xattr, FeedOptions,
    FeedStats, CHUNK_BYTES,
};
use super::size::{Census, Layout};
use super::tar_parsed::{Entries, Parsed};
use super::tar_reader::{TarEntry, TarKind, TarReader};
use super::target::{BuildTarget, Meta, NodeKind};
use super::workers::{with_pool, Dir, Job, Pool, Xattrs};
use super::FsTarget;
use crate::error::{Error, Result};
use crate::geometry::Ino;

/// A tar archive: a file, read from the start as often as needed, or a
/// stream (standard input), read once as it comes, or copied to a
/// temporary file first when it must be read twice (sizing scans it).
pub struct TarSource {
    backing: std::sync::Mutex<Backing>,
    name: String,
}

enum Backing {
    File(File),
    /// Not read yet (`None` once handed out).
    Stream(Option<Box<dyn Read + Send>>),
}

impl TarSource {
    /// An archive file.
    pub fn open(path: &Path) -> Result<TarSource> {
        let file = File::open(path).map_err(|e| super::feed::io_at(path, e))?;
        Ok(TarSource {
            backing: std::sync::Mutex::new(Backing::File(file)),
            name: path.display().to_string(),
        })
    }

    /// Copies standard input (or any stream) to an anonymous temporary file.
    pub fn spool(mut input: impl Read) -> Result<TarSource> {
        let mut file = tempfile::tempfile()?;
        std::io::copy(&mut input, &mut file)?;
        Ok(TarSource {
            backing: std::sync::Mutex::new(Backing::File(file)),
            name: "standard input".into(),
        })
    }

    /// A stream (standard input) read as it comes: a build with the size
    /// given reads it once, straight into the image; a scan (sizing) first
    /// copies it to an anonymous temporary file.
    pub fn stream(input: Box<dyn Read + Send>, name: &str) -> TarSource {
        TarSource {
            backing: std::sync::Mutex::new(Backing::Stream(Some(input))),
            name: name.into(),
        }
    }

    /// Where the archive came from, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn backing(&self) -> std::sync::MutexGuard<'_, Backing> {
        self.backing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes a stream readable twice: copies it to a temporary file.
    fn rewindable(&self) -> Result<()> {
        let mut b = self.backing();
        if let Backing::Stream(s) = &mut *b {
            let Some(mut input) = s.take() else {
                return Err(self.consumed());
            };
            let mut file = tempfile::tempfile()?;
            std::io::copy(&mut input, &mut file)?;
            *b = Backing::File(file);
        }
        Ok(())
    }

    fn consumed(&self) -> Error {
        Error::Invalid(format!(
            "{}: already read (a stream is read once)",
            self.name
        ))
    }

    /// A fresh decompressed stream from the start of the archive, read
    /// and decompressed ahead on a thread of its own.
    pub fn reader(&self) -> Result<Box<dyn Read + Send>> {
        let mut b = self.backing();
        let raw: Box<dyn Read + Send> = match &mut *b {
            Backing::File(file) => {
                let mut f = file.try_clone()?;
                f.seek(std::io::SeekFrom::Start(0))?;
                Box::new(f)
            }
            Backing::Stream(s) => s.take().ok_or_else(|| self.consumed())?,
        };
        Ok(Box::new(super::readahead::ReadAhead::new(decompress(raw)?)))
    }
}

/// Wraps `r` in the decompressor its first bytes call for.
pub fn decompress(r: impl Read + Send + 'static) -> Result<Box<dyn Read + Send>> {
    let mut b = BufReader::with_capacity(1 << 16, r);
    let head = b.fill_buf()?.to_vec();
    let starts = |m: &[u8]| head.starts_with(m);
    Ok(if starts(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(b))
    } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(b)?)
    } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Box::new(xz2::read::XzDecoder::new_multi_decoder(b))
    } else if starts(b"BZh") || starts(&[0x04, 0x22, 0x4d, 0x18]) {
        return Err(Error::Unsupported(
            "bzip2/lz4 compressed archives; decompress to standard input instead \
             (for example: bzip2 -dc A.tar.bz2 | xfskit build - IMAGE)"
                .into(),
        ));
    } else {
        Box::new(b)
    })
}

/// Splits an archive path into its normalised form ("a/b/c", "" for the
/// root), refusing `..`.
pub fn normalize(path: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(path.len());
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => continue,
            b".." => {
                return Err(Error::Invalid(format!(
                    "{}: tar path with '..' refused",
                    String::from_utf8_lossy(path)
                )))
            }
            _ => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

pub(super) fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

fn entry_meta(e: &TarEntry, opts: &FeedOptions<'_>) -> Meta {
    let ctime = e.ctime.unwrap_or(e.mtime);
    Meta {
        mode: e.mode,
        uid: opts.ids.uid(e.uid),
        gid: opts.ids.gid(e.gid),
        atime: e.atime.unwrap_or(e.mtime),
        mtime: e.mtime,
        ctime,
        crtime: e.crtime.unwrap_or(ctime),
    }
}

/// The feed's state: what has been made so far.
pub(super) struct Tree<'t, 'o> {
    pub(super) t: &'t mut dyn BuildTarget,
    pub(super) opts: &'t FeedOptions<'o>,
    pub(super) dirs: BTreeMap<Vec<u8>, (Dir, Meta)>,
    /// Directories whose metadata changed after they were made (the root,
    /// a directory's own entry after entries inside it): with the
    /// engine's [`crate::Fs::keep_dir_times`] on, only these need their
    /// metadata set at the end.
    pub(super) retime: BTreeSet<Vec<u8>>,
    pub(super) stats: FeedStats,
    /// Workers for everything but directories (parallel feed only).
    pub(super) pool: Option<&'t Pool<'t>>,
}

impl Tree<'_, '_> {
    fn default_meta(&self) -> Meta {
        let ids = self.opts.ids;
        meta_at(0o755, ids.uid(0), ids.gid(0), self.opts.default_time)
    }

    /// Directory `path`, making it and its missing ancestors.
    fn dir(&mut self, path: &[u8]) -> Result<Dir> {
        if let Some(d) = self.dirs.get(path) {
            return Ok(d.0);
        }
        let mut dir = Dir::Made(self.t.root());
        let mut end = 0;
        while end < path.len() {
            end = path[end + 1..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(path.len(), |i| end + 1 + i);
            let prefix = &path[..end];
            if let Some(d) = self.dirs.get(prefix) {
                dir = d.0;
                continue;
            }
            let (_, name) = split(prefix);
            check_name(name, &show(prefix))?;
            let meta = self.default_meta();
            dir = self
                .make_dir(dir, name, meta.clone(), Vec::new())
                .map_err(|e| match e {
                    Error::Exists(_) => Error::Invalid(format!(
                        "{}: used as a directory but the archive made it a file",
                        show(prefix)
                    )),
                    e => e,
                })?;
            self.dirs.insert(prefix.to_vec(), (dir, meta));
        }
        Ok(dir)
    }

    /// Makes directory `name` in `parent` with its xattrs (ids mapped),
    /// through the workers when there are some.
    fn make_dir(&mut self, parent: Dir, name: &[u8], meta: Meta, xattrs: Xattrs) -> Result<Dir> {
        self.stats.dirs += 1;
        self.stats.xattrs += xattrs.len() as u64;
        if let Some(pool) = self.pool {
            return pool.mkdir(parent, name.to_vec(), meta, xattrs);
        }
        let ino = self
            .t
            .create(self.ino(parent)?, name, &NodeKind::Dir, &meta)?;
        for (n, v) in &xattrs {
            self.t.set_xattr(ino, n, v)?;
        }
        Ok(Dir::Made(ino))
    }

    /// The inode of `d` (waiting for the workers when one has yet to make it).
    pub(super) fn ino(&self, d: Dir) -> Result<Ino> {
        match (d, self.pool) {
            (Dir::Made(ino), _) => Ok(ino),
            (d, Some(pool)) => pool.resolve(d),
            (_, None) => Err(Error::Invalid(
                "a directory made without workers is pending".into(),
            )),
        }
    }

    fn xattrs(&mut self, ino: Ino, e: &TarEntry) -> Result<()> {
        for (n, v) in &e.xattrs {
            if storable_xattr(n) {
                set_xattr(self.t, self.opts.ids, ino, n, v, &mut self.stats)?;
            }
        }
        Ok(())
    }

    /// The target's refusal of a name its directory has already, as the
    /// archive's duplicate.
    fn exists_is_duplicate(&self, err: Error, path: &[u8], e: &TarEntry) -> Error {
        match err {
            Error::Exists(_) => self.duplicate(path, e),
            err => err,
        }
    }

    fn duplicate(&self, path: &[u8], e: &TarEntry) -> Error {
        Error::Invalid(format!(
            "{}: appears twice in the archive (again at byte {}); \
             xfskit build does not replace entries",
            show(path),
            e.offset
        ))
    }

    /// A regular file whose data fits in `buf`: read whole, then created
    /// with its data and xattrs in one step (`BuildTarget::create_file`).
    fn small_file(
        &mut self,
        r: &mut dyn Entries,
        e: &TarEntry,
        path: Vec<u8>,
        parent: Ino,
        meta: &Meta,
        buf: &mut [u8],
    ) -> Result<()> {
        let xattrs: Vec<(Vec<u8>, Vec<u8>)> = e
            .xattrs
            .iter()
            .filter(|(n, _)| storable_xattr(n))
            .cloned()
            .collect();
        let (_, name) = split(&path);
        let (t, ids, stats) = (&mut *self.t, self.opts.ids, &mut self.stats);
        // A file that is not sparse and fits in `buf` arrives in one piece
        // (an empty one in none), created as it comes.
        let mut made = None;
        r.data(e, buf, &mut |_, data| {
            made = Some(create_small_file(
                t, ids, parent, name, meta, data, &xattrs, stats,
            )?);
            Ok(())
        })?;
        if made.is_none() {
            create_small_file(t, ids, parent, name, meta, &[], &xattrs, stats)?;
        }
        Ok(())
    }

    fn entry(&mut self, r: &mut dyn Entries, e: &TarEntry, buf: &mut [u8]) -> Result<()> {
        let path = normalize(&e.path)?;
        let meta = entry_meta(e, self.opts);
        if e.kind == TarKind::Dir {
            if let Some(d) = self.dirs.get_mut(&path) {
                d.1 = meta;
                self.retime.insert(path.clone());
                let dir = d.0;
                if let Some(pool) = self.pool {
                    let xattrs = self.mapped_xattrs(e);
                    if !xattrs.is_empty() {
                        self.stats.xattrs += xattrs.len() as u64;
                        pool.push(pool.worker_for(dir), Job::SetXattrs { dir, xattrs })?;
                    }
                    return Ok(());
                }
                return self.xattrs(self.ino(dir)?, e);
            }
        } else if path.is_empty() {
            return Err(Error::Invalid(format!(
                "{}: the archive's root is not a directory",
                e.display()
            )));
        } else if self.dirs.contains_key(&path) {
            return Err(self.duplicate(&path, e));
        }
        let (parent_path, name) = split(&path);
        check_name(name, &show(&path))?;
        let parent = self.dir(parent_path)?;
        let kind = match &e.kind {
            TarKind::HardLink(target) => {
                let tp = normalize(target)?;
                let Some(ino) = self.link_target(&tp)? else {
                    return Err(Error::Invalid(format!(
                        "{}: hard link to {}, which is not an earlier file of the archive",
                        show(&path),
                        show(&tp)
                    )));
                };
                match self.pool {
                    Some(pool) => {
                        let job = Job::Link {
                            parent,
                            name: name.to_vec(),
                            target: ino,
                        };
                        pool.push(pool.worker_for(parent), job)?;
                    }
                    None => self.t.link(self.ino(parent)?, name, ino)?,
                }
                self.stats.hardlinks += 1;
                return Ok(());
            }
            TarKind::Dir => NodeKind::Dir,
            TarKind::File => NodeKind::File { size: e.size },
            TarKind::Symlink(target) => {
                check_symlink(target, &show(&path))?;
                NodeKind::Symlink(target.clone())
            }
            &TarKind::CharDev(major, minor) => NodeKind::CharDev { major, minor },
            &TarKind::BlockDev(major, minor) => NodeKind::BlockDev { major, minor },
            TarKind::Fifo => NodeKind::Fifo,
        };
        if kind == NodeKind::Dir {
            let xattrs = self.mapped_xattrs(e);
            let dir = self
                .make_dir(parent, name, meta.clone(), xattrs)
                .map_err(|err| self.exists_is_duplicate(err, &path, e))?;
            self.dirs.insert(path, (dir, meta));
            return Ok(());
        }
        if let Some(pool) = self.pool {
            return self.dispatch(pool, r, e, path, parent, kind, meta, buf);
        }
        let parent = self.ino(parent)?;
        if e.kind == TarKind::File && e.sparse.is_none() && e.size <= buf.len() as u64 {
            return self
                .small_file(r, e, path.clone(), parent, &meta, buf)
                .map_err(|err| self.exists_is_duplicate(err, &path, e));
        }
        let ino = self
            .t
            .create(parent, name, &kind, &meta)
            .map_err(|err| self.exists_is_duplicate(err, &path, e))?;
        self.xattrs(ino, e)?;
        match kind {
            NodeKind::Dir => {}
            NodeKind::File { .. } => {
                self.stats.files += 1;
                let (t, stats) = (&mut *self.t, &mut self.stats);
                r.data(e, buf, &mut |off, data| {
                    stats.bytes += data.len() as u64;
                    t.write_data(ino, off, data)
                })?;
            }
            NodeKind::Symlink(_) => self.stats.symlinks += 1,
            _ => self.stats.specials += 1,
        }
        Ok(())
    }
}

/// Feeds the archive into `t`. The archive's root entry (`./`), if any,
/// gives the root directory its metadata; otherwise it gets the defaults.
///
/// With `opts.jobs` above 1 and a target that can be written from several
/// threads ([`BuildTarget::fs`]), this thread reads the archive and makes
/// the directories while workers, one per group of AGs, create everything
/// else ([`super::workers`]).
pub fn feed(src: &TarSource, t: &mut dyn BuildTarget, opts: &FeedOptions<'_>) -> Result<FeedStats> {
    if opts.jobs >= 1 {
        if let Some(fs) = t.fs() {
            let mut main = FsTarget::new(fs);
            // A worker meets a name given twice when it adds it to its
            // directory; it knows the name, not the archive path.
            let twice = |e| match e {
                Error::Exists(name) => Error::Invalid(format!(
                    "{name}: appears twice in one directory of the archive (or a file's \
                     name is also used as a directory); xfskit build does not replace entries"
                )),
                e => e,
            };
            return with_pool(fs, opts.jobs, |pool| {
                let (stats, dirs, retime) = walk(src, &mut main, opts, Some(pool))?;
                // Queued after every entry of each directory (all made by
                // the directory's worker). Directories made with their
                // final metadata keep it when the engine keeps their times
                // (re-reading each inode at the end cost one synchronous
                // read per directory).
                let all = !fs.keeps_dir_times();
                for (path, (dir, meta)) in dirs {
                    if all || retime.contains(&path) {
                        pool.push(pool.worker_for(dir), Job::SetMeta { dir, meta })?;
                    }
                }
                Ok(stats)
            })
            .map_err(twice);
        }
    }
    let (stats, dirs, _) = walk(src, t, opts, None)?;
    set_dir_meta(t, &dirs)?;
    Ok(stats)
}

type Dirs = BTreeMap<Vec<u8>, (Dir, Meta)>;

/// Every directory's metadata, once nothing more is added to any of them.
fn set_dir_meta(t: &mut dyn BuildTarget, dirs: &Dirs) -> Result<()> {
    // Deepest first is not needed: set_meta only touches the directory itself.
    for (dir, meta) in dirs.values() {
        match dir {
            Dir::Made(ino) => t.set_meta(*ino, meta)?,
            Dir::Pending { .. } => {
                return Err(Error::Invalid(
                    "a directory made without workers is pending".into(),
                ))
            }
        }
    }
    Ok(())
}

/// Reads the whole archive into `t` (and `pool`, when given); returns the
/// counts and the directories.
fn walk<'a>(
    src: &TarSource,
    t: &'a mut dyn BuildTarget,
    opts: &'a FeedOptions<'_>,
    pool: Option<&'a Pool<'a>>,
) -> Result<(FeedStats, Dirs, BTreeSet<Vec<u8>>)> {
    let mut r = Parsed::start(src.reader()?)?;
    let root = t.root();
    let mut tree = Tree {
        t,
        opts,
        dirs: BTreeMap::new(),
        // The root was made by mkfs, not with the archive's metadata.
        retime: BTreeSet::from([Vec::new()]),
        stats: FeedStats::default(),
        pool,
    };
    let meta = tree.default_meta();
    tree.dirs.insert(Vec::new(), (Dir::Made(root), meta));
    tree.stats.dirs = 1;
    let mut buf = vec![0u8; CHUNK_BYTES];
    while let Some(e) = r.next_entry()? {
        tree.entry(&mut r, &e, &mut buf)?;
        tree.stats.tick(opts);
    }
    Ok((tree.stats, tree.dirs, tree.retime))
}

/// Counts what [`feed`] would write, for sizing the image.
pub fn scan(src: &TarSource, l: &Layout) -> Result<Census> {
    src.rewindable()?;
    let mut r = TarReader::new(src.reader()?);
    let mut c = Census::default();
    // Directory path -> (entries, name bytes).
    let mut dirs: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
    dirs.insert(Vec::new(), (0, 0));
    // Counts `path` in its parent, and makes missing parents the same way.
    fn add_parents(dirs: &mut HashMap<Vec<u8>, (u64, u64)>, path: &[u8]) {
        let mut p = path.to_vec();
        loop {
            let (parent, name) = split(&p);
            let existed = dirs.contains_key(parent);
            let d = dirs.entry(parent.to_vec()).or_insert((0, 0));
            d.0 += 1;
            d.1 += name.len() as u64;
            if existed {
                return;
            }
            p = parent.to_vec();
        }
    }
    let mut sizes = Vec::new();
    while let Some(e) = r.next_entry()? {
        let path = normalize(&e.path)?;
        sizes.clear();
        sizes.extend(e.xattrs.iter().map(|(n, v)| (n.len(), v.len())));
        c.add_xattrs(l, &sizes);
        if path.is_empty() {
            continue;
        }
        if e.kind == TarKind::Dir {
            if !dirs.contains_key(&path) {
                dirs.insert(path.clone(), (0, 0));
                add_parents(&mut dirs, &path);
            }
            continue;
        }
        add_parents(&mut dirs, &path);
        match &e.kind {
            TarKind::HardLink(_) => c.add_hardlink(),
            TarKind::File => c.add_file(l, e.segments()),
            TarKind::Symlink(t) => c.add_symlink(l, t.len() as u64),
            _ => c.add_special(),
        }
    }
    for (entries, bytes) in dirs.values() {
        c.add_dir(l, *entries, *bytes);
    }
    Ok(c)
}

//! Deleted files: what an unlink leaves behind, gathered and paired.
//!
//! Evidence, each named in the records it gives:
//! - `inode`: a freed inode in an allocated chunk. Freeing resets the mode,
//!   the size and the extent count and bumps the generation, but keeps the
//!   owner, the times and the literal area: the old extent records (or the
//!   root of the old mapping btree) and, on parent-pointer filesystems,
//!   the short-form attribute that named the file and its directory.
//! - `freed-chunk`: the same, for inodes of a chunk that was freed whole
//!   and left the inode btree (found in free space, v5 only: the inode
//!   names its own number).
//! - `parent-pointer`: that attribute.
//! - `dir-entry`: a removed entry in a directory still in use. Removal
//!   turns the entry into a free region whose tag and length overwrite the
//!   first four bytes; the name, its file type and the low 32 bits of the
//!   inode number stay until the space is reused (entries merged into a
//!   region that began before them keep all 64 bits).
//! - `freed-dir-block`: an entry in a directory block that was freed (the
//!   directory shrank, or was removed), found in free space by its v5
//!   header, which names the directory that owned it.
//!
//! Only inodes that are free now count: an entry naming an inode in use is
//! a rename's or a relink's leftover, not a deletion. Nothing is written:
//! the filesystem is read as any read-only command reads it (a dirty log
//! replayed in memory).
//!
//! Cost: the inode btrees, every directory in use, and (unless
//! [`Options::skip_free_space`]) every free block, read once in large
//! reads. Memory follows the freed inodes and the names found for them.

mod logsrc;
pub mod raw;

use crate::dir::data::DirMap;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, FsBlock, Ino};
use crate::inode::{Extent, FileType, ForkFormat};
use raw::{DeadEntry, FreedCore, Time};
use std::collections::{BTreeMap, HashMap, HashSet};
use xfs_format::dir::block::{XFS_DIR3_BLK_HDR_SIZE, XFS_DIR3_DATA_CRC_OFF};
use xfs_format::dir::{XFS_DIR3_BLOCK_MAGIC, XFS_DIR3_DATA_MAGIC};
use xfs_format::inode::{litino, LITERAL_OFFSET, XFS_DINODE_MAGIC};
use zerocopy::FromBytes;

/// `di_format` of an extent list.
const FORMAT_EXTENTS: u8 = 2;

/// What to look at.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Leave free space unread: no freed chunks, no freed directory
    /// blocks (the scan then costs the inode btrees and the directories).
    pub skip_free_space: bool,
}

/// Where a piece of evidence came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A freed inode in an allocated chunk.
    Inode,
    /// A freed inode of a chunk that was freed.
    FreedChunk,
    /// The parent pointer left in a freed inode.
    ParentPointer,
    /// A removed entry of a directory in use.
    DirEntry,
    /// An entry of a freed directory block.
    FreedDirBlock,
    /// The log's items: the inode as it was logged before its unlink
    /// (its size, its mapping), and the directory entries logged when
    /// names were added.
    Log,
}

impl Source {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Source::Inode => "inode",
            Source::FreedChunk => "freed-chunk",
            Source::ParentPointer => "parent-pointer",
            Source::DirEntry => "dir-entry",
            Source::FreedDirBlock => "freed-dir-block",
            Source::Log => "log",
        }
    }
}

/// How far a record can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Confidence {
    /// Some of the data blocks are in use again: the content may belong
    /// to another file now.
    Reused,
    /// No name was found: data (or an inode) only.
    DataOnly,
    /// The name comes from one source.
    Named,
    /// Two independent sources give the same name, and the data blocks
    /// are all still free.
    Confirmed,
}

impl Confidence {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Confidence::Reused => "reused",
            Confidence::DataOnly => "data-only",
            Confidence::Named => "named",
            Confidence::Confirmed => "confirmed",
        }
    }
}

/// One name of a deleted inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The directory that held it.
    pub dir: u64,
    pub name: Vec<u8>,
    /// The sources that give it.
    pub sources: Vec<Source>,
    /// The full path, when every directory up to the root is known (in use,
    /// or deleted and named itself).
    pub path: Option<Vec<u8>>,
}

/// An extent of a deleted file and whether its blocks are still free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedExtent {
    pub extent: Extent,
    /// Every block of it is free now (not reused since the deletion).
    pub free: bool,
}

/// One deleted inode and what is known of it.
#[derive(Debug, Clone)]
pub struct Deleted {
    pub ino: u64,
    /// The generation it was freed with (the file had this minus one).
    pub gen: u32,
    /// Its type, from a directory entry's file type or from what it held.
    pub file_type: Option<FileType>,
    pub uid: u32,
    pub gid: u32,
    pub projid: u32,
    pub atime: Time,
    pub mtime: Time,
    /// The time of the last change, which is the deletion's.
    pub ctime: Time,
    pub crtime: Time,
    /// Names, the best first (most sources, then a full path).
    pub names: Vec<Name>,
    /// The data fork's extents that survive.
    pub extents: Vec<DeletedExtent>,
    /// The target of a short symlink, from the literal area.
    pub symlink: Option<Vec<u8>>,
    /// The file's size, when the inode survives as it was before the
    /// deletion (else unknown: freeing resets it).
    pub size: Option<u64>,
    /// The sources of the inode itself and its names.
    pub sources: Vec<Source>,
    pub confidence: Confidence,
}

impl Deleted {
    /// The best full path, if any.
    pub fn path(&self) -> Option<&[u8]> {
        self.names.iter().find_map(|n| n.path.as_deref())
    }

    /// Bytes the surviving extents reach (the size itself is reset when a
    /// file is freed: the last block is whole).
    pub fn mapped_bytes(&self, block_size: u32) -> u64 {
        self.extents
            .iter()
            .map(|e| e.extent.end())
            .max()
            .unwrap_or(0)
            * u64::from(block_size)
    }
}

/// The name of a deleted inode's type in reports: "file", "dir",
/// "symlink", "chardev", "blockdev", "fifo", "socket", or "unknown".
pub fn type_name(t: Option<FileType>) -> &'static str {
    match t {
        Some(FileType::File) => "file",
        Some(FileType::Dir) => "dir",
        Some(FileType::Symlink) => "symlink",
        Some(FileType::CharDev) => "chardev",
        Some(FileType::BlockDev) => "blockdev",
        Some(FileType::Fifo) => "fifo",
        Some(FileType::Socket) => "socket",
        None => "unknown",
    }
}

/// The record of one deleted inode as `xfskit deleted --json` prints it
/// (and the Python package gives it): inode, generation, type, owners,
/// the four times as {sec, nsec}, the best path, the names (dir, name,
/// path, sources), the extents (offset, start, len in blocks, unwritten,
/// free), mapped_bytes, size (null when unknown), symlink, sources,
/// confidence. Names and targets that are not UTF-8 show U+FFFD.
pub fn to_json(d: &Deleted, block_size: u32) -> serde_json::Value {
    use serde_json::json;
    let time = |t: Time| json!({"sec": t.0, "nsec": t.1});
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let sources = |v: &[Source]| v.iter().map(|s| s.name()).collect::<Vec<_>>();
    json!({
        "inode": d.ino,
        "generation": d.gen,
        "type": type_name(d.file_type),
        "uid": d.uid,
        "gid": d.gid,
        "projid": d.projid,
        "atime": time(d.atime),
        "mtime": time(d.mtime),
        "ctime": time(d.ctime),
        "crtime": time(d.crtime),
        "path": d.path().map(lossy),
        "names": d.names.iter().map(|n| json!({
            "dir": n.dir,
            "name": lossy(&n.name),
            "path": n.path.as_deref().map(lossy),
            "sources": sources(&n.sources),
        })).collect::<Vec<_>>(),
        "extents": d.extents.iter().map(|e| json!({
            "offset": e.extent.offset,
            "start": e.extent.start.0,
            "len": e.extent.len,
            "unwritten": e.extent.unwritten,
            "free": e.free,
        })).collect::<Vec<_>>(),
        "mapped_bytes": d.mapped_bytes(block_size),
        "size": d.size,
        "symlink": d.symlink.as_deref().map(lossy),
        "sources": sources(&d.sources),
        "confidence": d.confidence.name(),
    })
}

/// What a scan looked at.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Freed inodes read (in allocated chunks and in free space).
    pub freed_inodes: u64,
    /// Directories in use read.
    pub dirs: u64,
    /// Free blocks read.
    pub free_blocks_read: u64,
    /// Freed directory blocks found.
    pub freed_dir_blocks: u64,
    /// Log transactions read (the old passes' included).
    pub log_transactions: u64,
}

/// The names found for each freed inode: (directory, name) and the
/// sources that give it.
type NameMap = HashMap<u64, BTreeMap<(u64, Vec<u8>), Vec<Source>>>;

/// A candidate while names are gathered.
struct Cand {
    core: FreedCore,
    source: Source,
    extents: Vec<Extent>,
    symlink: Option<Vec<u8>>,
    /// Owner of freed directory blocks: it was a directory.
    was_dir: bool,
    /// The whole inode as it was before the deletion (a chunk freed before
    /// the inode's own free was written back: its buffer was dropped), so
    /// its type and size are known and its generation was not bumped.
    stale: Option<(FileType, u64)>,
    /// Its generation was bumped by the free (a freed inode's slot; a
    /// stale inode's was not).
    gen_bumped: bool,
    /// Sources that added to it beside `source`.
    also: Vec<Source>,
}

/// A directory in use: its parent, its name there, its generation.
struct LiveDir {
    parent: u64,
    name: Vec<u8>,
    gen: u32,
}

/// Finds the deleted inodes of `fs`, calling `progress` with (bytes of
/// free space read, bytes of it in all) during the free-space sweep.
pub fn scan(
    fs: &Fs,
    opts: &Options,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<Deleted>, Stats)> {
    let geo = fs.geometry().clone();
    let mut stats = Stats::default();
    // Free space of each AG, by block.
    let mut free: Vec<Vec<(u32, u32)>> = vec![Vec::new(); geo.ag_count as usize];
    crate::db::freesp::scan(
        fs,
        &crate::db::freesp::Options::default(),
        &mut |a, b, l| {
            free[a as usize].push((b, l));
        },
    )?;
    for f in &mut free {
        f.sort_unstable();
    }
    let mut cands: HashMap<u64, Cand> = HashMap::new();
    // A log replayed at open: the device's own blocks are older than the
    // log's, and for what the log freed, older is what was deleted.
    let before = fs.before_log().and_then(|r| r.ok());
    freed_in_chunks(fs, before.as_ref(), &mut cands, &mut stats)?;
    let mut freed_blocks: Vec<(u64, Vec<DeadEntry>)> = Vec::new();
    if !opts.skip_free_space {
        sweep_free(
            fs,
            before.as_ref(),
            &free,
            &mut cands,
            &mut freed_blocks,
            &mut stats,
            progress,
        )?;
    }
    // The log: sizes and mappings as they were before the unlinks, and
    // the names logged when they were made.
    let wanted: HashSet<u64> = cands.keys().copied().collect();
    let ev = logsrc::read(before.as_ref().unwrap_or(fs), &wanted)?;
    stats.log_transactions = ev.transactions;
    let log_ok = from_log(fs, before.as_ref(), &ev, &mut cands);
    // Names from directories in use (and the map of their paths).
    let mut live: HashMap<u64, LiveDir> = HashMap::new();
    let mut dead: Vec<(u64, DeadEntry, Source)> = Vec::new();
    walk_dirs(fs, &mut live, &mut dead, &mut stats)?;
    for (dir, e) in &ev.entries {
        let (dir, e) = (*dir, e.clone());
        // A name the log gives counts for an inode whose one life in the
        // log is the one found freed, in a directory whose every life in
        // the log is the one in use now (or the one found freed): a
        // directory number used again is another directory.
        let dir_ok = dir == geo.root_ino.0
            || live
                .get(&dir)
                .is_some_and(|l| ev.lives(dir).iter().all(|&(gen, _)| gen == l.gen))
            || (cands.contains_key(&dir) && log_ok.contains(&dir))
            || (cands.contains_key(&dir) && ev.lives(dir).is_empty());
        if dir_ok && log_ok.contains(&e.ino) {
            dead.push((dir, e, Source::Log));
        }
    }
    for (dir, ents) in freed_blocks {
        if let Some(c) = cands.get_mut(&dir) {
            c.was_dir = true;
        }
        // A freed block names its directory by number only: when the log
        // shows that number in use by a directory of another life than
        // the one in use now, the block may be the older one's.
        if live
            .get(&dir)
            .is_some_and(|l| ev.lives(dir).iter().any(|&(gen, _)| gen != l.gen))
        {
            continue;
        }
        for e in ents {
            dead.push((dir, e, Source::FreedDirBlock));
        }
    }
    // Pair the names with the freed inodes.
    let mut low: HashMap<u32, Vec<u64>> = HashMap::new();
    for &i in cands.keys() {
        low.entry(i as u32).or_default().push(i);
    }
    let mut names: NameMap = HashMap::new();
    let mut ftypes: HashMap<u64, u8> = HashMap::new();
    for (dir, e, src) in dead {
        let targets: Vec<u64> = if e.low32_only {
            low.get(&(e.ino as u32)).cloned().unwrap_or_default()
        } else if cands.contains_key(&e.ino) {
            vec![e.ino]
        } else {
            Vec::new()
        };
        // A clobbered number matching several freed inodes names none.
        if targets.len() != 1 || targets[0] == dir {
            continue;
        }
        let t = targets[0];
        let s = names
            .entry(t)
            .or_default()
            .entry((dir, e.name))
            .or_default();
        if !s.contains(&src) {
            s.push(src);
        }
        if let Some(f) = e.ftype {
            ftypes.entry(t).or_insert(f);
        }
    }
    for (i, c) in &cands {
        if let Some((dir, pgen, name)) = &c.core.pptr {
            // The pointer names the directory with its generation: a
            // directory in use since then under another generation is
            // another directory.
            let ok = match live.get(dir) {
                Some(l) => l.gen == *pgen,
                None => cands
                    .get(dir)
                    .is_some_and(|d| d.core.gen == pgen.wrapping_add(u32::from(d.gen_bumped))),
            };
            if ok || *dir == geo.root_ino.0 {
                let s = names
                    .entry(*i)
                    .or_default()
                    .entry((*dir, name.clone()))
                    .or_default();
                s.push(Source::ParentPointer);
            }
        }
    }
    // Paths, and the records.
    let mut out = Vec::new();
    let root = geo.root_ino.0;
    let resolver = Resolver {
        root,
        live: &live,
        names: &names,
    };
    for (i, c) in &cands {
        let mut ns: Vec<Name> = names
            .get(i)
            .map(|m| {
                m.iter()
                    .map(|((dir, name), srcs)| {
                        let mut sources = srcs.clone();
                        sources.sort_unstable();
                        Name {
                            dir: *dir,
                            name: name.clone(),
                            path: resolver.path_in(*dir, name, &mut HashSet::from([*i])),
                            sources,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        ns.sort_by(|a, b| {
            b.sources
                .len()
                .cmp(&a.sources.len())
                .then(b.path.is_some().cmp(&a.path.is_some()))
                .then(a.name.cmp(&b.name))
        });
        let file_type = c.stale.map(|(t, _)| t).or_else(|| {
            ftypes
                .get(i)
                .and_then(|&f| crate::dir::decode_ftype(f).ok().flatten())
                .or(c.was_dir.then_some(FileType::Dir))
        });
        let (extents, symlink) = match file_type {
            Some(FileType::Dir) => (Vec::new(), None),
            Some(FileType::Symlink) if c.symlink.is_some() => (Vec::new(), c.symlink.clone()),
            Some(FileType::File) | None => (c.extents.clone(), None),
            _ => (Vec::new(), None),
        };
        if ns.is_empty() && extents.is_empty() {
            continue;
        }
        let extents: Vec<DeletedExtent> = extents
            .into_iter()
            .map(|e| DeletedExtent {
                free: is_free(&geo, &free, e.start, e.len),
                extent: e,
            })
            .collect();
        let mut sources = vec![c.source];
        for s in &c.also {
            if !sources.contains(s) {
                sources.push(*s);
            }
        }
        for n in &ns {
            for s in &n.sources {
                if !sources.contains(s) {
                    sources.push(*s);
                }
            }
        }
        let confidence = if extents.iter().any(|e| !e.free) {
            Confidence::Reused
        } else if ns.is_empty() {
            Confidence::DataOnly
        } else if ns[0].sources.len() >= 2 {
            Confidence::Confirmed
        } else {
            Confidence::Named
        };
        // A size of 0 beside mapped blocks is an inode the kernel's
        // inactivation had begun to truncate (the size goes first, then
        // the extents): the size it had is unknown.
        let size = c
            .stale
            .map(|(_, z)| z)
            .filter(|&z| z != 0 || extents.is_empty());
        out.push(Deleted {
            ino: *i,
            gen: c.core.gen,
            file_type,
            uid: c.core.uid,
            gid: c.core.gid,
            projid: c.core.projid,
            atime: c.core.atime,
            mtime: c.core.mtime,
            ctime: c.core.ctime,
            crtime: c.core.crtime,
            names: ns,
            extents,
            symlink,
            size,
            sources,
            confidence,
        });
    }
    out.sort_by_key(|d| d.ino);
    Ok((out, stats))
}

struct Resolver<'a> {
    root: u64,
    live: &'a HashMap<u64, LiveDir>,
    names: &'a NameMap,
}

impl Resolver<'_> {
    /// The path of `name` in directory `dir`, `seen` guarding loops.
    fn path_in(&self, dir: u64, name: &[u8], seen: &mut HashSet<u64>) -> Option<Vec<u8>> {
        let mut p = self.dir_path(dir, seen)?;
        p.push(b'/');
        p.extend_from_slice(name);
        Some(p)
    }

    fn dir_path(&self, dir: u64, seen: &mut HashSet<u64>) -> Option<Vec<u8>> {
        if dir == self.root {
            return Some(Vec::new());
        }
        if !seen.insert(dir) || seen.len() > 4096 {
            return None;
        }
        if let Some(l) = self.live.get(&dir) {
            return self.path_in(l.parent, &l.name, seen);
        }
        // A deleted directory: by its best name.
        let m = self.names.get(&dir)?;
        let ((parent, name), _) = m.iter().max_by_key(|(_, s)| s.len())?;
        self.path_in(*parent, name, seen)
    }
}

/// True when `len` blocks from `start` all lie in one free extent.
fn is_free(
    geo: &crate::geometry::Geometry,
    free: &[Vec<(u32, u32)>],
    start: FsBlock,
    len: u64,
) -> bool {
    let (AgNumber(a), AgBlock(b)) = geo.fsb_split(start);
    let Some(f) = free.get(a as usize) else {
        return false;
    };
    let i = f.partition_point(|&(s, _)| s <= b);
    i > 0 && {
        let (s, l) = f[i - 1];
        u64::from(b) + len <= u64::from(s) + u64::from(l)
    }
}

/// Decodes what a freed inode slot holds into a candidate.
fn candidate(fs: &Fs, before: Option<&Fs>, ino: u64, raw: &[u8], source: Source) -> Option<Cand> {
    let geo = fs.geometry();
    let core = raw::freed_core(geo, ino, raw)?;
    let isize = raw.len();
    let fork_end = core.attr_off.unwrap_or(isize);
    let mut extents = raw::literal_extents(geo, raw, fork_end);
    if extents.is_empty() {
        // A mapping btree's root: the fork's size decides where its
        // pointers lie. Try the attribute area's start, the whole literal
        // area, then every other size; a pointer counts only when it
        // leads to a mapping block of this inode.
        let most = (litino(isize) - 4) / 16;
        let mut tries: Vec<usize> = Vec::new();
        if let Some(a) = core.attr_off {
            tries.push((a - LITERAL_OFFSET).saturating_sub(4) / 16);
        }
        tries.push(most);
        tries.extend((1..most).rev());
        let mut seen = HashSet::new();
        for m in tries {
            if m == 0 || !seen.insert(m) {
                continue;
            }
            let Some((level, ptrs)) = raw::literal_bmbt_root(raw, m) else {
                if m == most {
                    break;
                }
                continue;
            };
            if let Some(v) = follow_bmbt(fs, before, ino, level, &ptrs) {
                extents = v;
                break;
            }
        }
    }
    let symlink = raw::literal_symlink(raw, fork_end);
    Some(Cand {
        core,
        source,
        extents,
        symlink,
        was_dir: false,
        stale: None,
        gen_bumped: true,
        also: Vec::new(),
    })
}

/// An inode of a freed chunk whose last write before the chunk was freed
/// still shows it in use: decoded whole (its CRC must hold). Its entries,
/// when it is a short-form directory, go to `names`.
fn stale_candidate(
    fs: &Fs,
    ino: u64,
    raw: &[u8],
    names: &mut Vec<(u64, DeadEntry)>,
) -> Option<Cand> {
    let geo = fs.geometry();
    let i = crate::inode::decode_checked(fs, Ino(ino), raw).ok()?;
    if i.nlink == 0 && i.mode == 0 {
        return None;
    }
    let t = |t: crate::inode::Timestamp| (t.sec, t.nsec);
    let mut core = FreedCore {
        ino,
        gen: i.gen,
        uid: i.uid,
        gid: i.gid,
        projid: i.projid,
        atime: t(i.atime),
        mtime: t(i.mtime),
        ctime: t(i.ctime),
        crtime: t(i.crtime),
        pptr: None,
        attr_off: None,
    };
    if let Some(c) = raw::freed_core_any_mode(geo, ino, raw) {
        core.pptr = c.pptr;
        core.attr_off = c.attr_off;
    }
    let extents = match i.format {
        ForkFormat::Extents | ForkFormat::Btree if i.file_type != FileType::Dir => {
            crate::inode::extents(fs, &i, crate::inode::Fork::Data).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let symlink = (i.file_type == FileType::Symlink && i.format == ForkFormat::Local)
        .then(|| i.data_fork[..(i.size as usize).min(i.data_fork.len())].to_vec());
    if i.file_type == FileType::Dir && i.format == ForkFormat::Local {
        if let Some(h) = xfs_format::dir::sf::parse_sf_hdr(&i.data_fork) {
            for e in
                xfs_format::dir::sf::SfIter::new(&i.data_fork, &h, geo.features.ftype).flatten()
            {
                if raw::valid_name(e.name) && geo.ino_valid(Ino(e.inumber)) {
                    names.push((
                        ino,
                        DeadEntry {
                            ino: e.inumber,
                            low32_only: false,
                            name: e.name.to_vec(),
                            ftype: e.ftype,
                            live: true,
                        },
                    ));
                }
            }
        }
    }
    Some(Cand {
        core,
        source: Source::FreedChunk,
        extents,
        symlink,
        was_dir: i.file_type == FileType::Dir,
        stale: Some((i.file_type, i.size)),
        gen_bumped: false,
        also: Vec::new(),
    })
}

/// The same inode before the log replayed at open (`raw`, read from
/// `before`), when it was still in use there: the deletion, or the end of
/// the file's life, is only in the log, and the device still holds the
/// inode as it was. It replaces what `after` kept (read through the log)
/// when it is the same life of the inode (the same creation time on v5;
/// the generation equal, or one behind where `after` is a freed slot, as
/// a free bumps it) and the log's mapping is the device's with extents
/// taken off its end (a truncation). `after`'s times stay: its ctime is
/// the deletion's.
fn before_deletion(before: &Fs, ino: u64, raw: &[u8], after: &Cand) -> Option<Cand> {
    let mut names = Vec::new();
    let b = stale_candidate(before, ino, raw, &mut names)?;
    let gen = if after.gen_bumped {
        b.core.gen.wrapping_add(1)
    } else {
        b.core.gen
    };
    let same_life =
        after.core.gen == gen && (!before.geometry().v5 || after.core.crtime == b.core.crtime);
    let kind = |c: &Cand| c.stale.map(|(t, _)| t);
    if !same_life
        || kind(&b) == Some(FileType::Dir)
        || (after.stale.is_some() && kind(after) != kind(&b))
        || b.extents.is_empty()
        || !raw::truncation_of(&after.extents, &b.extents)
    {
        return None;
    }
    Some(Cand {
        core: FreedCore {
            pptr: after.core.pptr.clone().or(b.core.pptr),
            ..after.core.clone()
        },
        source: after.source,
        gen_bumped: after.gen_bumped,
        also: after.also.clone(),
        ..b
    })
}

/// Adds what the log shows of each candidate: its type and size where the
/// inode itself no longer has them, and its mapping where the one found
/// is that one truncated (or none). Only where every life of the inode
/// the log shows is the candidate's (same generation, same creation
/// time): an inode number used again is another file. Returns the
/// candidates for which that holds (the log may name them).
fn from_log(
    fs: &Fs,
    before: Option<&Fs>,
    ev: &logsrc::Evidence,
    cands: &mut HashMap<u64, Cand>,
) -> HashSet<u64> {
    let mut ok = HashSet::new();
    for (ino, c) in cands.iter_mut() {
        let Some(li) = ev.inodes.get(ino) else {
            continue;
        };
        let life = (
            c.core.gen.wrapping_sub(u32::from(c.gen_bumped)),
            c.core.crtime,
        );
        if li.lives.iter().any(|l| *l != life) {
            continue;
        }
        ok.insert(*ino);
        let Some(snap) = &li.last else {
            continue;
        };
        let mut names = Vec::new();
        let decoded = |f: &Fs, names: &mut Vec<_>| {
            let mut raw = snap.raw.clone();
            if !snap.fork {
                // Its fork was not logged: the core alone.
                let lit = xfs_format::inode::XFS_DINODE_SIZE;
                raw[lit..].fill(0);
                if let Ok((d, _)) = xfs_format::inode::Dinode::mut_from_prefix(&mut raw[..]) {
                    d.di_format = FORMAT_EXTENTS;
                    d.di_nextents.set(0);
                    d.di_big_nextents.set(0);
                    d.di_forkoff = 0;
                    d.di_aformat = FORMAT_EXTENTS;
                    d.di_anextents.set(0);
                }
                xfs_format::crc::stamp(&mut raw, xfs_format::inode::XFS_DINODE_CRC_OFF);
            }
            stale_candidate(f, *ino, &raw, names)
        };
        let b = before
            .and_then(|f| decoded(f, &mut names))
            .filter(|b| !b.extents.is_empty())
            .or_else(|| decoded(fs, &mut names));
        let Some(b) = b else {
            continue;
        };
        let Some((kind, size)) = b.stale else {
            continue;
        };
        if kind == FileType::Dir {
            continue;
        }
        let mut added = false;
        if c.stale.is_none() {
            c.stale = Some((kind, size));
            added = true;
        }
        if snap.fork && !b.extents.is_empty() && raw::truncation_of(&c.extents, &b.extents) {
            added |= c.extents != b.extents;
            c.extents = b.extents;
        }
        if c.symlink.is_none() && b.symlink.is_some() {
            c.symlink = b.symlink;
            added = true;
        }
        if added && !c.also.contains(&Source::Log) {
            c.also.push(Source::Log);
        }
    }
    ok
}

/// The extents of a mapping btree whose blocks are still as they were.
/// With `before` (the device before the log replayed at open), a block is
/// taken as it was there when the log's version only lost records from
/// its end (a truncation the log holds).
fn follow_bmbt(
    fs: &Fs,
    before: Option<&Fs>,
    owner: u64,
    level: u16,
    ptrs: &[u64],
) -> Option<Vec<Extent>> {
    let geo = fs.geometry();
    let mut out: Vec<Extent> = Vec::new();
    let mut stack: Vec<(u16, u64)> = ptrs.iter().rev().map(|&p| (level - 1, p)).collect();
    let mut budget = 1 << 16;
    while let Some((lv, p)) = stack.pop() {
        budget -= 1;
        if budget == 0 || !geo.fsb_valid(FsBlock(p)) {
            return None;
        }
        let mut buf = vec![0u8; geo.block_size as usize];
        let at = geo.fsb_to_daddr(FsBlock(p)).bytes();
        fs.read_bytes(at, &mut buf).ok()?;
        let now = raw::bmbt_block(geo, &buf, owner, lv);
        let old = before.and_then(|b| {
            let mut v = vec![0u8; buf.len()];
            b.read_bytes(at, &mut v).ok()?;
            raw::bmbt_block(geo, &v, owner, lv)
        });
        let node = match (now, old) {
            (Some(n), Some(o)) if n.truncates(&o) => o,
            (Some(n), _) => n,
            (None, o) => o?,
        };
        match node {
            raw::BmbtNode::Leaf(v) => {
                for e in v {
                    if out.last().is_some_and(|l| e.offset < l.end()) {
                        return None;
                    }
                    out.push(e);
                }
            }
            raw::BmbtNode::Node(v) => {
                if lv == 0 {
                    return None;
                }
                stack.extend(v.iter().rev().map(|&c| (lv - 1, c)));
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Freed inodes of the chunks the inode btrees list.
fn freed_in_chunks(
    fs: &Fs,
    before: Option<&Fs>,
    cands: &mut HashMap<u64, Cand>,
    stats: &mut Stats,
) -> Result<()> {
    let geo = fs.geometry().clone();
    let isize = geo.inode_size as usize;
    for agno in 0..geo.ag_count {
        let mut chunks = Vec::new();
        crate::scan::inobt::walk(fs, agno, 0, |r| {
            let holes = r.hole_inodes();
            let free = r.free & !holes;
            if free != 0 {
                chunks.push((r.startino, free));
            }
            Ok(true)
        })?;
        for (startino, free) in chunks {
            let first = geo.ino_make(AgNumber(agno), startino);
            let n = (64 - free.leading_zeros()) as usize;
            let lo = free.trailing_zeros() as usize;
            let mut buf = vec![0u8; (n - lo) * isize];
            let at = geo.ino_to_bytes(Ino(first.0 + lo as u64));
            fs.read_bytes(at, &mut buf)?;
            let old = before.and_then(|b| {
                let mut v = vec![0u8; buf.len()];
                b.read_bytes(at, &mut v).ok().map(|_| v)
            });
            for i in lo..n {
                if free & (1 << i) == 0 {
                    continue;
                }
                let ino = first.0 + i as u64;
                let raw = &buf[(i - lo) * isize..(i - lo + 1) * isize];
                stats.freed_inodes += 1;
                let Some(mut c) = candidate(fs, before, ino, raw, Source::Inode) else {
                    continue;
                };
                if let (Some(b), Some(o)) = (before, &old) {
                    let raw = &o[(i - lo) * isize..(i - lo + 1) * isize];
                    if raw != &buf[(i - lo) * isize..(i - lo + 1) * isize] {
                        if let Some(w) = before_deletion(b, ino, raw, &c) {
                            c = w;
                        }
                    }
                }
                cands.insert(ino, c);
            }
        }
    }
    Ok(())
}

/// Reads every free block once: freed inode chunks and freed directory
/// blocks (v5: both name themselves).
fn sweep_free(
    fs: &Fs,
    before: Option<&Fs>,
    free: &[Vec<(u32, u32)>],
    cands: &mut HashMap<u64, Cand>,
    blocks: &mut Vec<(u64, Vec<DeadEntry>)>,
    stats: &mut Stats,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let geo = fs.geometry().clone();
    if !geo.v5 {
        return Ok(());
    }
    let bs = geo.block_size as usize;
    let total: u64 = free
        .iter()
        .flatten()
        .map(|&(_, l)| u64::from(l) * bs as u64)
        .sum();
    let mut done = 0u64;
    let per_read = (1usize << 20) / bs;
    let mut buf = vec![0u8; per_read * bs];
    let uuid = if geo.features.meta_uuid {
        geo.meta_uuid
    } else {
        geo.uuid
    };
    let isize = geo.inode_size as usize;
    let dirfsbs = geo.dir_blk_fsbs() as usize;
    let mut stale_names: Vec<(u64, DeadEntry)> = Vec::new();
    for (agno, exts) in free.iter().enumerate() {
        let agno = agno as u32;
        for &(start, len) in exts {
            let mut b = start;
            while b < start + len {
                let n = ((start + len - b) as usize).min(per_read);
                let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(b));
                let chunk = &mut buf[..n * bs];
                fs.read_bytes(daddr.bytes(), chunk)?;
                for k in 0..n {
                    let blk = &chunk[k * bs..(k + 1) * bs];
                    let agbno = b + k as u32;
                    let magic = u32::from_be_bytes([blk[0], blk[1], blk[2], blk[3]]);
                    if u16::from_be_bytes([blk[0], blk[1]]) == XFS_DINODE_MAGIC {
                        let at = geo.agb_to_daddr(AgNumber(agno), AgBlock(b + k as u32));
                        let old = before.and_then(|f| {
                            let mut v = vec![0u8; bs];
                            f.read_bytes(at.bytes(), &mut v).ok().map(|_| v)
                        });
                        for s in 0..geo.inodes_per_block as usize {
                            let agino = (agbno << geo.inopb_log) | s as u32;
                            let ino = geo.ino_make(AgNumber(agno), agino).0;
                            let raw = &blk[s * isize..(s + 1) * isize];
                            if cands.contains_key(&ino) {
                                continue;
                            }
                            stats.freed_inodes += 1;
                            let c = candidate(fs, before, ino, raw, Source::FreedChunk)
                                .or_else(|| stale_candidate(fs, ino, raw, &mut stale_names));
                            let Some(mut c) = c else {
                                continue;
                            };
                            if let (Some(f), Some(o)) = (before, &old) {
                                let raw = &o[s * isize..(s + 1) * isize];
                                if let Some(w) = before_deletion(f, ino, raw, &c) {
                                    c = w;
                                }
                            }
                            cands.insert(ino, c);
                        }
                    } else if magic == XFS_DIR3_BLOCK_MAGIC || magic == XFS_DIR3_DATA_MAGIC {
                        let db = if dirfsbs == 1 {
                            blk.to_vec()
                        } else {
                            let mut v = vec![0u8; dirfsbs * bs];
                            let d = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno));
                            if fs.read_bytes(d.bytes(), &mut v).is_err() {
                                continue;
                            }
                            v
                        };
                        let here = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno)).0;
                        if let Some((owner, ents)) = freed_dir_block(&geo, &db, here, &uuid, magic)
                        {
                            stats.freed_dir_blocks += 1;
                            blocks.push((owner, ents));
                        }
                    }
                }
                stats.free_blocks_read += n as u64;
                done += (n * bs) as u64;
                progress(done, total);
                b += n as u32;
            }
        }
    }
    for (dir, e) in stale_names {
        blocks.push((dir, vec![e]));
    }
    Ok(())
}

/// The owner and entries of a freed v5 directory data block at `daddr`.
fn freed_dir_block(
    geo: &crate::geometry::Geometry,
    db: &[u8],
    daddr: u64,
    uuid: &[u8; 16],
    magic: u32,
) -> Option<(u64, Vec<DeadEntry>)> {
    let h = <xfs_format::dir::block::Dir3BlkHdr as zerocopy::FromBytes>::ref_from_prefix(db)
        .ok()?
        .0;
    if h.blkno.get() != daddr
        || &h.uuid.0 != uuid
        || !xfs_format::crc::verify(db, XFS_DIR3_DATA_CRC_OFF)
        || !geo.ino_valid(Ino(h.owner.get()))
    {
        return None;
    }
    let hdr = geo.layout().dir_data_hdr;
    debug_assert!(hdr >= XFS_DIR3_BLK_HDR_SIZE);
    let end = if magic == XFS_DIR3_BLOCK_MAGIC {
        let tail = db.len() - 8;
        let count = u32::from_be_bytes(db[tail..tail + 4].try_into().ok()?) as usize;
        tail.checked_sub(count * 8)?
    } else {
        db.len()
    };
    Some((h.owner.get(), raw::block_entries(geo, db, hdr, end, true)))
}

/// Walks every directory in use from the root: their paths, and the names
/// their blocks no longer list.
fn walk_dirs(
    fs: &Fs,
    live: &mut HashMap<u64, LiveDir>,
    dead: &mut Vec<(u64, DeadEntry, Source)>,
    stats: &mut Stats,
) -> Result<()> {
    let geo = fs.geometry().clone();
    let root = fs.root()?;
    let mut queue = vec![root];
    while let Some(d) = queue.pop() {
        stats.dirs += 1;
        let ents = match crate::dir::read_dir(fs, &d) {
            Ok(e) => e,
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            // A damaged directory: what it lists is lost to the walk, not
            // the scan.
            Err(_) => continue,
        };
        for e in &ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let is_dir = match e.file_type {
                Some(t) => t == FileType::Dir,
                None => fs.inode(e.ino).is_ok_and(|i| i.file_type == FileType::Dir),
            };
            if is_dir && !live.contains_key(&e.ino.0) && e.ino != geo.root_ino {
                if let Ok(i) = fs.inode(e.ino) {
                    if i.file_type == FileType::Dir {
                        live.insert(
                            e.ino.0,
                            LiveDir {
                                parent: d.ino.0,
                                name: e.name.clone(),
                                gen: i.gen,
                            },
                        );
                        queue.push(i);
                    }
                }
            }
        }
        if d.format == ForkFormat::Local {
            continue;
        }
        let Ok(map) = DirMap::new(fs, &d) else {
            continue;
        };
        let dbs: Vec<u64> = map.dbs_below(map.leaf_first_db()).collect();
        for db in dbs {
            let Ok(buf) = map.read_data(db) else {
                continue;
            };
            let Ok((end, _)) = crate::dir::data::data_end(&geo, d.ino.0, db, &buf) else {
                continue;
            };
            for e in raw::block_entries(&geo, &buf, geo.layout().dir_data_hdr, end, false) {
                dead.push((d.ino.0, e, Source::DirEntry));
            }
        }
    }
    Ok(())
}

/// Reads the surviving data of `d` into `out` (a sparse file: holes and
/// unwritten extents are skipped), returning the bytes written up to.
pub fn read_data(fs: &Fs, d: &Deleted, out: &std::fs::File) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let geo = fs.geometry();
    let bs = u64::from(geo.block_size);
    let mut buf = vec![0u8; 1 << 20];
    for e in &d.extents {
        if e.extent.unwritten {
            continue;
        }
        let mut done = 0u64;
        let total = e.extent.len * bs;
        let base = geo.fsb_to_daddr(e.extent.start).bytes();
        while done < total {
            let n = (total - done).min(buf.len() as u64) as usize;
            fs.read_bytes(base + done, &mut buf[..n])?;
            out.write_all_at(&buf[..n], e.extent.offset * bs + done)?;
            done += n as u64;
        }
    }
    let size = d.size.unwrap_or_else(|| d.mapped_bytes(geo.block_size));
    out.set_len(size)?;
    Ok(size)
}

/// Writes the surviving data of `d` to a new file at `dest` (refused with
/// `EEXIST` if anything is there) as [`read_data`] does, and sets its
/// access and modification times from the inode. Returns the file's
/// length.
pub fn write_new(fs: &Fs, d: &Deleted, dest: &std::path::Path) -> Result<u64> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)?;
    let n = read_data(fs, d, &f)?;
    let t = |t: Time| {
        std::time::UNIX_EPOCH
            + std::time::Duration::from_secs(t.0.max(0) as u64)
            + std::time::Duration::from_nanos(u64::from(t.1))
    };
    f.set_times(
        std::fs::FileTimes::new()
            .set_accessed(t(d.atime))
            .set_modified(t(d.mtime)),
    )?;
    Ok(n)
}

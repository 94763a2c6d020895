//! Filestreams: the data of the files of one directory goes to one AG
//! (the directory's stream), and directories written at the same time get
//! different AGs, so parallel writers into separate directories do not
//! interleave their files' blocks (the kernel's `filestreams` mount option
//! and the `XFS_DIFLAG_FILESTREAM` inode flag, which new files and
//! directories inherit).
//!
//! As in the kernel, a stream lives in memory only: it is made by the first
//! data allocation of a file of the directory and forgotten when no file
//! of the directory allocated for [`STREAM_TIMEOUT`]. A new stream takes
//! the first AG, from the directory's own, that no other live stream uses
//! and that has at least 2% of its blocks free; failing that, the AG with
//! the most free blocks among those looked at. When the stream's AG cannot
//! hold an allocation, the allocator's fallback to the next AGs moves the
//! stream to where the blocks were found.
//!
//! The engine knows a file's directory only when it sees both: at create,
//! and when a caller says so ([`Fs::note_parent`], a FUSE lookup). Those
//! hints, and the live streams, are bounded: a full table is emptied
//! rather than grown, which costs placement, never correctness.

use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr, FsBlock, Ino};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a directory keeps its AG after its last allocation (the
/// kernel's `fs.xfs.filestream_centisecs` default, 30 s).
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// Most file-to-directory hints kept.
const MAX_HINTS: usize = 1 << 16;
/// Most live streams kept.
const MAX_STREAMS: usize = 1 << 14;
/// Most AGs a new stream looks at: with millions of AGs the pick must not
/// read every AGF (the kernel's pass does, in the worst case).
const MAX_SCAN: u32 = 256;

#[derive(Debug, Clone, Copy)]
struct Stream {
    ag: u32,
    used: Instant,
}

#[derive(Default)]
struct Inner {
    /// Live streams by directory inode.
    dirs: HashMap<u64, Stream>,
    /// Live streams per AG (only AGs with at least one).
    per_ag: HashMap<u32, u32>,
    /// The directory of files that may allocate soon, by file inode.
    parents: HashMap<u64, u64>,
}

impl Inner {
    fn put_ag(&mut self, ag: u32) {
        if let Some(n) = self.per_ag.get_mut(&ag) {
            *n -= 1;
            if *n == 0 {
                self.per_ag.remove(&ag);
            }
        }
    }

    fn expire(&mut self, now: Instant, timeout: Duration) {
        let old: Vec<(u64, u32)> = self
            .dirs
            .iter()
            .filter(|(_, s)| now.duration_since(s.used) >= timeout)
            .map(|(d, s)| (*d, s.ag))
            .collect();
        for (d, ag) in old {
            self.dirs.remove(&d);
            self.put_ag(ag);
        }
    }
}

/// The filestream state of a writable filesystem.
pub struct Filestreams {
    /// Every regular file streams (the mount option), not only those with
    /// the inode flag.
    pub all: bool,
    /// How long a stream lives without allocations.
    pub timeout: Duration,
    inner: Mutex<Inner>,
}

impl Default for Filestreams {
    fn default() -> Self {
        Filestreams {
            all: false,
            timeout: STREAM_TIMEOUT,
            inner: Mutex::new(Inner::default()),
        }
    }
}

impl Filestreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when a file with inode flags `flags` streams.
    pub fn applies(&self, flags: u16) -> bool {
        self.all || flags & xfs_format::inode::XFS_DIFLAG_FILESTREAM != 0
    }

    /// Remembers that `file` is in directory `dir`.
    pub fn note_parent(&self, file: Ino, dir: Ino) {
        let mut g = self.lock();
        if g.parents.len() >= MAX_HINTS && !g.parents.contains_key(&file.0) {
            g.parents.clear();
        }
        g.parents.insert(file.0, dir.0);
    }

    /// Forgets `file`'s directory (the file is gone).
    pub fn forget(&self, file: Ino) {
        self.lock().parents.remove(&file.0);
    }

    /// The stream AG for a data allocation of `file`, making the stream
    /// when its directory has none; None when the directory is unknown.
    pub(crate) fn ag_for(&self, fs: &Fs, file: Ino) -> Option<u32> {
        let now = Instant::now();
        let dir = {
            let mut g = self.lock();
            let dir = *g.parents.get(&file.0)?;
            if let Some(s) = g.dirs.get_mut(&dir) {
                if now.duration_since(s.used) < self.timeout {
                    s.used = now;
                    return Some(s.ag);
                }
            }
            g.expire(now, self.timeout);
            dir
        };
        // Free-block counts are read outside the lock (they may cost I/O);
        // two files of one new directory racing here both pick, and the
        // later insert wins with its count kept right.
        let busy: HashMap<u32, u32> = self.lock().per_ag.clone();
        let ag = pick_ag(fs, fs.geometry().ino_agno(Ino(dir)).0, &busy);
        let mut g = self.lock();
        if g.dirs.len() >= MAX_STREAMS {
            g.dirs.clear();
            g.per_ag.clear();
        }
        if let Some(old) = g.dirs.insert(dir, Stream { ag, used: now }) {
            g.put_ag(old.ag);
        }
        *g.per_ag.entry(ag).or_insert(0) += 1;
        Some(ag)
    }

    /// The allocation for `file` landed in AG `ag`: when that is not its
    /// stream's AG (the stream's was full), the stream moves there.
    pub(crate) fn landed(&self, file: Ino, ag: u32) {
        let mut g = self.lock();
        let Some(&dir) = g.parents.get(&file.0) else {
            return;
        };
        let Some(old) = g.dirs.get(&dir).map(|s| s.ag) else {
            return;
        };
        if old != ag {
            g.put_ag(old);
            *g.per_ag.entry(ag).or_insert(0) += 1;
            if let Some(s) = g.dirs.get_mut(&dir) {
                s.ag = ag;
            }
        }
    }

    /// Live streams: (directory inode, AG), for tests and diagnostics.
    pub fn streams(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self.lock().dirs.iter().map(|(d, s)| (*d, s.ag)).collect();
        v.sort_unstable();
        v
    }
}

/// Free blocks of AG `agno` as its AGF says (committed changes included);
/// None when the AGF cannot be read.
fn ag_free(fs: &Fs, agno: u32) -> Option<u32> {
    let geo = fs.geometry();
    let ag0 = geo.agb_to_daddr(AgNumber(agno), AgBlock(0));
    let d = Daddr(ag0.0 + xfs_format::ag::XFS_AGF_SECTOR * u64::from(geo.sect_size >> 9));
    let b = fs
        .read_meta(d, geo.sect_size, &crate::buf::Verifier::Agf { agno })
        .ok()?;
    Some(crate::bytes::be32(&b, super::agf::off::FREEBLKS))
}

/// The AG for a new stream, looking from `start` on.
fn pick_ag(fs: &Fs, start: u32, busy: &HashMap<u32, u32>) -> u32 {
    let geo = fs.geometry();
    let count = geo.ag_count;
    let minfree = geo.ag_blocks / 50;
    let mut best: Option<(u32, u32)> = None;
    for i in 0..count.min(MAX_SCAN) {
        let ag = (start + i) % count;
        let Some(free) = ag_free(fs, ag) else {
            continue;
        };
        if best.is_none_or(|(_, f)| free > f) {
            best = Some((ag, free));
        }
        if !busy.contains_key(&ag) && free >= minfree && free > 0 {
            return ag;
        }
    }
    best.map_or(start % count.max(1), |(ag, _)| ag)
}

/// Where a stream's file allocates first: near the inode when the inode
/// is in the stream's AG, else from the AG's start.
pub(crate) fn target(fs: &Fs, ino: Ino, ag: u32) -> FsBlock {
    let geo = fs.geometry();
    if geo.ino_agno(ino).0 == ag {
        geo.fsb_make(AgNumber(ag), geo.ino_agbno(ino))
    } else {
        geo.fsb_make(AgNumber(ag), AgBlock(0))
    }
}

impl Fs {
    /// Tells the engine that regular file `file` is in directory `dir`, so
    /// its data can follow the directory's filestream (a FUSE lookup does;
    /// creates do by themselves). Nothing on a read-only filesystem.
    pub fn note_parent(&self, file: Ino, dir: Ino) {
        if let Ok(ws) = self.write_state() {
            ws.alloc.filestreams.note_parent(file, dir);
        }
    }

    /// The filestream state (None when read-only).
    pub fn filestreams(&self) -> Option<&Filestreams> {
        self.write_state().ok().map(|ws| &ws.alloc.filestreams)
    }
}

//! What the inode pass learns for the namespace pass, as fixed-size
//! records: one per allocated inode, one per directory entry, one per
//! directory. Workers fill small batches and hand them to the shared
//! [`NsStore`], whose sorters keep them within the check's memory bound
//! (spilling sorted runs to a temporary file past it); the namespace pass
//! then joins the three sorted streams (`links.rs`).
//!
//! Names are not kept: a problem about an entry records the entry's
//! directory and position, and the name is read again when the report is
//! written.

use crate::bytes::{be32, be64, put_be32, put_be64};
use crate::inode::FileType;
use crate::spill::{Rec, Sorter, SpillConfig};
use std::io;
use std::sync::Mutex;

/// File type codes in records (0: allocated but not decoded).
pub(crate) const KIND_UNDECODED: u8 = 0;

/// The code of a decoded inode's type.
pub(crate) fn kind_of(t: FileType) -> u8 {
    match t {
        FileType::File => 1,
        FileType::Dir => 2,
        FileType::Symlink => 3,
        FileType::CharDev => 4,
        FileType::BlockDev => 5,
        FileType::Fifo => 6,
        FileType::Socket => 7,
    }
}

/// The type of a code (None: not decoded).
pub(crate) fn type_of(k: u8) -> Option<FileType> {
    Some(match k {
        1 => FileType::File,
        2 => FileType::Dir,
        3 => FileType::Symlink,
        4 => FileType::CharDev,
        5 => FileType::BlockDev,
        6 => FileType::Fifo,
        7 => FileType::Socket,
        _ => return None,
    })
}

/// An allocated inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct InodeRec {
    pub ino: u64,
    /// [`kind_of`] its type, or [`KIND_UNDECODED`].
    pub kind: u8,
    pub nlink: u32,
    pub gen: u32,
    /// Its parent pointers could be read (parent-pointer filesystems).
    pub pptr_ok: bool,
    /// How many parent pointers it has, and the sum of their fingerprints.
    pub pcount: u32,
    pub psum: u64,
    /// It carries the metadata flag (a file of the metadata directory tree).
    pub meta: bool,
}

impl Rec for InodeRec {
    const SIZE: usize = 31;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.ino);
        b[8] = self.kind;
        put_be32(b, 9, self.nlink);
        put_be32(b, 13, self.gen);
        b[17] = u8::from(self.pptr_ok);
        put_be32(b, 18, self.pcount);
        put_be64(b, 22, self.psum);
        b[30] = u8::from(self.meta);
    }
    fn get(b: &[u8]) -> Self {
        InodeRec {
            meta: b[30] != 0,
            ino: be64(b, 0),
            kind: b[8],
            nlink: be32(b, 9),
            gen: be32(b, 13),
            pptr_ok: b[17] != 0,
            pcount: be32(b, 18),
            psum: be64(b, 22),
        }
    }
}

/// A directory entry other than "." and "..".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EntryRec {
    /// The inode it names (the sort key).
    pub target: u64,
    /// The directory holding it.
    pub dir: u64,
    /// Its position among the directory's entries, in on-disk order.
    pub pos: u32,
    /// [`kind_of`] the type it records (0: none recorded).
    pub kind: u8,
    /// The directory holding it is a metadata directory.
    pub dir_meta: bool,
    /// Fingerprint of the parent pointer it calls for (parent-pointer
    /// filesystems; 0 otherwise).
    pub fp: u64,
}

impl Rec for EntryRec {
    const SIZE: usize = 29;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.target);
        put_be64(b, 8, self.dir);
        put_be32(b, 16, self.pos);
        b[20] = self.kind | if self.dir_meta { 0x80 } else { 0 };
        put_be64(b, 21, self.fp);
    }
    fn get(b: &[u8]) -> Self {
        EntryRec {
            target: be64(b, 0),
            dir: be64(b, 8),
            pos: be32(b, 16),
            kind: b[20] & 0x7f,
            dir_meta: b[20] & 0x80 != 0,
            fp: be64(b, 21),
        }
    }
}

/// A directory read whole, with its ".." entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DirRec {
    pub ino: u64,
    /// The ".." entry (u64::MAX: none could be read).
    pub parent: u64,
}

impl Rec for DirRec {
    const SIZE: usize = 16;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.ino);
        put_be64(b, 8, self.parent);
    }
    fn get(b: &[u8]) -> Self {
        DirRec {
            ino: be64(b, 0),
            parent: be64(b, 8),
        }
    }
}

/// One key (a directory holding an entry for a subdirectory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key(pub u64);

impl Rec for Key {
    const SIZE: usize = 8;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.0);
    }
    fn get(b: &[u8]) -> Self {
        Key(be64(b, 0))
    }
}

/// A directory's ".." as the second join needs it: (parent, child, the
/// parent has an entry for the child).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ParentRec {
    pub parent: u64,
    pub child: u64,
    pub held: bool,
    /// A directory whose entry names the child, when `parent` holds none
    /// (u64::MAX: none or not needed).
    pub holder: u64,
}

impl Rec for ParentRec {
    const SIZE: usize = 25;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.parent);
        put_be64(b, 8, self.child);
        b[16] = u8::from(self.held);
        put_be64(b, 17, self.holder);
    }
    fn get(b: &[u8]) -> Self {
        ParentRec {
            parent: be64(b, 0),
            child: be64(b, 8),
            held: b[16] != 0,
            holder: be64(b, 17),
        }
    }
}

/// A decoded directory for the second join: its link count, and whether
/// that count is to be checked (not for one outside the tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DirLinks {
    pub ino: u64,
    pub nlink: u32,
    pub check: bool,
}

impl Rec for DirLinks {
    const SIZE: usize = 13;
    fn put(&self, b: &mut [u8]) {
        put_be64(b, 0, self.ino);
        put_be32(b, 8, self.nlink);
        b[12] = u8::from(self.check);
    }
    fn get(b: &[u8]) -> Self {
        DirLinks {
            ino: be64(b, 0),
            nlink: be32(b, 8),
            check: b[12] != 0,
        }
    }
}

/// The default bound of what the namespace records may take in memory.
pub const DEFAULT_MEMORY: usize = 512 << 20;

/// Shares of the bound, in tenths: inodes, entries, directories; the
/// rest (one tenth) goes to the second join's three sorters.
const SHARE_INODES: usize = 3;
const SHARE_ENTRIES: usize = 5;
const SHARE_DIRS: usize = 1;

/// The shared sorters the inode pass fills.
pub(crate) struct NsStore {
    pub inodes: Mutex<Sorter<InodeRec>>,
    pub entries: Mutex<Sorter<EntryRec>>,
    pub dirs: Mutex<Sorter<DirRec>>,
    /// The first error writing a spill file.
    pub failed: Mutex<Option<io::Error>>,
    pub memory: usize,
    pub config: SpillConfig,
}

impl NsStore {
    pub(crate) fn new(memory: usize, config: SpillConfig) -> Self {
        let part = |n: usize| memory / 10 * n;
        NsStore {
            inodes: Mutex::new(Sorter::new(part(SHARE_INODES), config.clone())),
            entries: Mutex::new(Sorter::new(part(SHARE_ENTRIES), config.clone())),
            dirs: Mutex::new(Sorter::new(part(SHARE_DIRS), config.clone())),
            failed: Mutex::new(None),
            memory,
            config,
        }
    }

    /// A sorter for one of the second join's streams.
    pub(crate) fn second<R: crate::spill::Rec>(&self) -> Sorter<R> {
        Sorter::new(self.memory / 30, self.config.clone())
    }

    /// Moves a worker's batch into the sorters.
    pub(crate) fn flush(&self, b: &mut NsBatch) {
        let r = (|| -> io::Result<()> {
            if !b.inodes.is_empty() {
                lock(&self.inodes).append(&mut b.inodes)?;
            }
            if !b.entries.is_empty() {
                lock(&self.entries).append(&mut b.entries)?;
            }
            if !b.dirs.is_empty() {
                lock(&self.dirs).append(&mut b.dirs)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            b.inodes.clear();
            b.entries.clear();
            b.dirs.clear();
            lock(&self.failed).get_or_insert(e);
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A worker's records not yet handed over.
#[derive(Debug, Default)]
pub(crate) struct NsBatch {
    pub inodes: Vec<InodeRec>,
    pub entries: Vec<EntryRec>,
    pub dirs: Vec<DirRec>,
}

/// Records a batch holds before it is handed over.
pub(crate) const BATCH: usize = 8192;

impl NsBatch {
    /// True when it is time to hand the batch over.
    pub(crate) fn full(&self) -> bool {
        self.inodes.len() + self.entries.len() + self.dirs.len() >= BATCH
    }
}

//! Read-only consistency check of an unmounted filesystem, in the spirit of
//! `xfs_repair -n`.
//!
//! The check runs in three passes:
//! 1. per AG, in parallel: AG headers, free list, free space btrees,
//!    reference count and reverse mapping btrees, inode btrees;
//! 2. per piece of an AG, at least 8 pieces in parallel (the pass waits on
//!    the disk, which serves several readers faster than one): the inode
//!    clusters are read in address order in merged reads, with readahead
//!    that also covers the short gaps between them (where the directory
//!    blocks of the inodes just read usually are); every allocated inode is
//!    decoded and its forks, directory entries and attributes walked; every
//!    block any structure uses is claimed in the ownership map of claimed
//!    extents ([`space::OwnerMap`]);
//! 3. the files' reverse mappings per AG against the rmapbt (in parallel;
//!    `rmap.rs`: the rest of the rmapbt was compared at the end of each
//!    AG's pass 1), then serially: unclaimed blocks, link counts,
//!    directory tree shape and the superblock counters.
//!
//! Metadata whose LSN is at or past the log head is noted as it is read
//! ([`Fs::watch_lsns`]) and reported once, with the newest such block.
//!
//! Problems never stop the check: each becomes a [`Problem`] and the walk
//! goes on with what is still trustworthy. Only failures that prevent any
//! check (the device cannot be read) are returned as errors.
//!
//! Memory follows the metadata, not the size of the filesystem nor its
//! number of AGs (an 8 EiB filesystem has millions, mostly empty): the
//! ownership map holds claimed extents (joined when they touch), all AGs
//! of a lock in one map; pass 1 folds each AG's counters into totals as
//! the AG finishes and keeps inode chunks only for AGs that have any;
//! pass 2 runs only on those and keeps only non-empty results; the
//! namespace pass's records (about 30 bytes per allocated inode and per
//! directory entry, no names) stay within [`CheckOptions::memory`],
//! spilled as sorted runs to a temporary file past it (`ns.rs`,
//! `spill.rs`); with an rmapbt, the file mappings expected and found (one
//! record per extent and bmbt block) wait per AG for pass 3, while the
//! AG-metadata mappings are compared and dropped as each AG's pass 1
//! ends. An empty AG costs only the claimed runs of its own metadata
//! (headers, btree roots, free list, free space: a few runs).

mod ag;
mod attr_index;
mod dir_index;
mod dirs;
mod inode_fields;
pub(crate) mod inodes;
mod links;
mod ns;
mod owners;
mod pptrs;
mod quota;
pub(crate) mod rmap;
mod rt;
mod rtgroups;
pub(crate) mod sb;
pub mod space;
use crate::spill;

pub(crate) use ag::set_ident as set_ag_ident;
pub use ns::DEFAULT_MEMORY;

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Problems kept in a report; further ones are only counted.
pub const MAX_PROBLEMS: usize = 10_000;

/// How the problem of metadata stamped at or past the log head ends its
/// words (what `repair` fixes by formatting the log past it).
pub const LSN_AHEAD: &str = "the log must be reformatted past it";

/// One inconsistency found by the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The structure at fault ("AGF", "bnobt block", "inode", ...).
    pub what: &'static str,
    /// Where it is.
    pub location: Location,
    /// What is wrong, in words.
    pub detail: String,
    /// What would make it right, when the check knows (what `repair`
    /// does).
    pub fix: Option<Fix>,
}

/// A change that makes one problem right, as the check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// An AG header field set to the value the check counted.
    AgField(FieldFix),
    /// An inode's link count set to the names (and, for a directory,
    /// subdirectories) counted.
    Nlink {
        /// The inode.
        ino: u64,
        /// The count.
        nlink: u32,
    },
    /// A directory entry whose target is free or not a valid inode,
    /// removed.
    DropEntry {
        /// The directory.
        dir: u64,
        /// The entry's name.
        name: Vec<u8>,
    },
    /// A directory entry's file type set to its target's.
    EntryType {
        /// The directory.
        dir: u64,
        /// The entry's name.
        name: Vec<u8>,
        /// The inode it names.
        target: u64,
        /// The file type code of that inode.
        ftype: u8,
    },
    /// A directory's '..' pointed at the directory that names it.
    DotDot {
        /// The directory.
        dir: u64,
        /// The directory holding its entry.
        parent: u64,
    },
    /// A parent pointer added for an entry that has none.
    AddParent {
        /// The inode named.
        ino: u64,
        /// The entry's name.
        name: Vec<u8>,
        /// The directory holding the entry.
        dir: u64,
        /// That directory's generation.
        gen: u32,
    },
    /// A parent pointer that names no entry, removed.
    DropParent {
        /// The inode holding it.
        ino: u64,
        /// The name it records.
        name: Vec<u8>,
        /// The directory it records.
        dir: u64,
        /// The generation it records.
        gen: u32,
    },
    /// An inode whose only faults are its CRC and perhaps its magic
    /// number: both written again (as xfs_repair rewrites them).
    InodeCrc {
        /// The inode.
        ino: u64,
        /// The magic number is wrong too.
        magic: bool,
    },
    /// A field of an inode's core with bits cleared and set (a flag that
    /// does not belong, a count or hint that must be zero), as xfs_repair
    /// clears them.
    InodeBits {
        /// The inode.
        ino: u64,
        /// The field's byte offset in the core.
        offset: usize,
        /// Its width in bytes (2, 4 or 8).
        width: usize,
        /// Bits cleared.
        clear: u64,
        /// Bits set after.
        set: u64,
    },
    /// An attribute fork that cannot be read, cleared (as xfs_repair
    /// clears it): no fork offset, an empty extents fork. Its blocks are
    /// then freed and its parent pointers written again in later rounds.
    ClearAttrFork {
        /// The inode.
        ino: u64,
    },
    /// A directory whose blocks or entries are damaged, emptied (its
    /// blocks freed, its '..' from its parent pointer) on a filesystem
    /// with parent pointers: its children, disconnected then, are put back
    /// by their parent pointers.
    ResetDir {
        /// The directory.
        ino: u64,
    },
    /// An AG header (AGF, AGI or AGFL) whose identity alone is wrong (its
    /// magic number, version, AG number, AG length, UUID or CRC), which
    /// is otherwise sound: those written again, as xfs_repair writes them.
    AgHeaderIdent {
        /// Its AG.
        agno: u32,
        /// Its sector in the AG (1 AGF, 2 AGI, 3 AGFL).
        sector: u64,
    },
    /// A free list whose first, last and count do not agree, emptied as
    /// the kernel resets it (first 0, last the list's size - 1, count 0);
    /// its blocks are freed in a later round.
    ResetAgfl {
        /// Its AG.
        agno: u32,
        /// Entries the AGFL holds.
        size: u32,
    },
    /// An allocated inode that cannot be decoded, cleared (freed, as
    /// xfs_repair clears it); entries naming it go in a later round.
    ClearInode {
        /// The inode.
        ino: u64,
    },
    /// A reverse mapping that none of its owner's mappings holds (an
    /// owner cleared or gone), removed.
    DropRmap {
        /// Its AG.
        agno: u32,
        /// First block in the AG.
        agbno: u32,
        /// Blocks.
        len: u32,
        /// Owner, file offset and `XFS_RMAP_OFF_*` flags, as recorded.
        owner: u64,
        /// File offset.
        offset: u64,
        /// Flag bits of the record's offset field.
        flags: u64,
    },
    /// A reverse mapping that is expected and missing, where no record
    /// of its owner overlaps it, added.
    AddRmap {
        /// Its AG.
        agno: u32,
        /// First block in the AG.
        agbno: u32,
        /// Blocks.
        len: u32,
        /// Owner (an inode or an `XFS_RMAP_OWN_*` code).
        owner: u64,
        /// File offset.
        offset: u64,
        /// `XFS_RMAP_OFF_*` flag bits.
        flags: u64,
    },
    /// An AG's free space btrees (bnobt and cntbt), damaged, built again
    /// from what everything else in the AG uses
    /// ([`CheckReport::free_space`] lists what they hold), as xfs_repair
    /// rebuilds them.
    RebuildFreeSpace {
        /// The AG.
        agno: u32,
    },
    /// An AG's free inode btree, damaged, built again from its inode
    /// btree (every chunk with a free inode), through the journal.
    RebuildFinobt {
        /// The AG.
        agno: u32,
    },
    /// An AG's inode btree that cannot be read, built again from the
    /// inode chunks its rmapbt records ([`CheckReport::inobt_rebuild`]),
    /// and its finobt from that, through the journal.
    RebuildInobt {
        /// The AG.
        agno: u32,
    },
    /// An AG's refcount btree that cannot be read, built again from the
    /// files' data mappings ([`CheckReport::refcount_rebuild`]), through
    /// the journal (copy-on-write staging extents are not kept: their
    /// mappings go, and their blocks are freed, in later rounds).
    RebuildRefcount {
        /// The AG.
        agno: u32,
    },
    /// A data fork that cannot be read, or that maps fewer blocks than
    /// its inode counts, written again from the inode's reverse mappings
    /// (when they hold exactly the blocks the inode counts, nothing else
    /// uses them, and they fit in the inode as extents): in place, as
    /// xfs_repair rebuilds a fork from the rmapbt.
    RebuildFork {
        /// The inode.
        ino: u64,
        /// Its extents: (file block, filesystem block, length, unwritten),
        /// in file order.
        extents: Vec<(u64, u64, u64, bool)>,
        /// The blocks it counts then (`di_nblocks`).
        nblocks: u64,
    },
    /// As [`Fix::RebuildFork`], for extents that do not fit in the inode:
    /// the fork built as a bmbt through the journal (new blocks from free
    /// space, with their reverse mappings), the old bmbt blocks the
    /// rmapbt records freed with their records, in one transaction.
    RebuildForkBtree {
        /// The inode.
        ino: u64,
        /// Its extents: (file block, filesystem block, length, unwritten),
        /// in file order.
        extents: Vec<(u64, u64, u64, bool)>,
        /// The blocks its extents hold (the new bmbt blocks are added).
        nblocks: u64,
        /// The old bmbt blocks: (AG, first block, length).
        old_bmbt: Vec<(u32, u32, u32)>,
    },
    /// Blocks that are neither free nor in use, returned to free space.
    FreeBlocks {
        /// Their AG.
        agno: u32,
        /// First block in the AG.
        agbno: u32,
        /// Blocks.
        len: u32,
    },
    /// A quota file whose counts do not match what the files use (or
    /// that lacks a record an owner needs, or holds one that is not a
    /// valid dquot), counted again: its records rewritten with the counts
    /// found, one that is not a valid dquot of its slot made anew without
    /// limits, as xfs_repair makes it.
    RecountQuota {
        /// The kind of quota.
        kind: crate::quota::Kind,
    },
    /// An allocated inode that no directory names, given a name again:
    /// back in its old directory when a parent pointer says where, in
    /// lost+found otherwise.
    Disconnected {
        /// The inode.
        ino: u64,
    },
}

/// The AG header a [`FieldFix`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgHeader {
    /// The AG free space header.
    Agf,
    /// The AG inode header.
    Agi,
}

/// A 32-bit field of an AG header and the value the check counted for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldFix {
    /// The header.
    pub header: AgHeader,
    /// Its AG.
    pub agno: u32,
    /// The field's byte offset in the header.
    pub offset: usize,
    /// The value counted.
    pub value: u32,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}: {}", self.what, self.location, self.detail)
    }
}

/// Counts of what the check looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// AGs checked.
    pub ags: u32,
    /// Metadata blocks of AG btrees visited.
    pub btree_blocks: u64,
    /// Inode records (chunks) in the inode btrees.
    pub inode_chunks: u64,
    /// Allocated inodes decoded.
    pub inodes: u64,
    /// Directories whose entries were read.
    pub directories: u64,
    /// Directory entries checked.
    pub dir_entries: u64,
    /// Free blocks counted in the free space btrees.
    pub free_blocks: u64,
    /// Problems found (may exceed the number kept).
    pub problems_total: u64,
}

/// A progress callback: (pass name, AGs done, AGs in total).
pub type Progress<'a> = &'a (dyn Fn(&str, u32, u32) + Sync);

/// Tuning of the check.
#[derive(Default)]
pub struct CheckOptions<'a> {
    /// Worker threads (0: one per AG up to the available parallelism for
    /// the header pass, and at least 8 concurrent readers for the inode
    /// pass, which waits on the disk more than it computes).
    pub threads: usize,
    /// Called after each AG of each parallel pass with (pass, done, total).
    pub progress: Option<Progress<'a>>,
    /// Bound on the memory of what the check keeps per inode, per
    /// directory entry (three quarters) and per file mapping that the
    /// rmapbt is compared with (a quarter) (0: [`DEFAULT_MEMORY`]); past
    /// it, sorted runs go to a temporary file.
    pub memory: usize,
    /// Directory of that temporary file (None: the system's, `TMPDIR`).
    pub tmpdir: Option<std::path::PathBuf>,
}

/// The result of a check.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Problems found, at most [`MAX_PROBLEMS`], in no particular order
    /// across AGs.
    pub problems: Vec<Problem>,
    /// What was looked at.
    pub stats: CheckStats,
    /// Parts of the filesystem the check could not look at, in words (the
    /// realtime section, without its device): a clean report with these
    /// is not a full check.
    pub unchecked: Vec<String>,
    /// What is valid on disk but keeps the filesystem from being used as
    /// usual, in words (a log below the kernel's minimum size, which
    /// Linux refuses to mount). Not problems: `xfs_repair -n` reports
    /// none of these.
    pub warnings: Vec<String>,
    /// The superblock counters as the AG headers sum them (what the
    /// superblock should hold when the AG headers are right).
    pub ag_totals: AgCounts,
    /// Per AG whose free space btrees are damaged ([`Fix::RebuildFreeSpace`]),
    /// the free extents (start, length) that everything else leaves, in
    /// block order.
    pub free_space: Vec<(u32, Vec<(u32, u32)>)>,
    /// Per AG whose rmapbt cannot be read whole (rebuilt with its free
    /// space btrees), what it should hold but for the blocks of those
    /// three trees: (start, length, owner, offset with its
    /// `XFS_RMAP_OFF_*` flags), unsorted. The whole set of one such AG
    /// is held in memory.
    pub rmap_rebuild: Vec<(u32, Vec<RmapRecord>)>,
    /// Per AG whose inobt cannot be read (rebuilt from its rmapbt's inode
    /// chunk records, with the finobt), its chunks: (first AG inode, hole
    /// mask, inodes, free inodes, free mask), in order.
    pub inobt_rebuild: Vec<(u32, Vec<InodeChunk>)>,
    /// Per AG whose refcount btree cannot be read, the shared extents its
    /// files' data mappings make: (start, length, owners), in order.
    pub refcount_rebuild: Vec<(u32, Vec<SharedExtent>)>,
}

/// A reverse mapping: (start, length, owner, offset with its
/// `XFS_RMAP_OFF_*` flags).
pub type RmapRecord = (u32, u32, u64, u64);

/// A shared extent: (start, length, owners).
pub type SharedExtent = (u32, u32, u32);

/// An inode btree record: (first AG inode, hole mask, inodes, free
/// inodes, free mask).
pub type InodeChunk = (u32, u16, u8, u8, u64);

/// Inode and free block counts summed over the AG headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgCounts {
    /// Inodes in the inode btrees (`sb_icount`).
    pub icount: u64,
    /// Free inodes in them (`sb_ifree`).
    pub ifree: u64,
    /// Free blocks: free space, free lists and non-root btree blocks
    /// (`sb_fdblocks`).
    pub fdblocks: u64,
}

impl CheckReport {
    /// True when no problem was found.
    pub fn is_clean(&self) -> bool {
        self.stats.problems_total == 0
    }
}

/// Collects problems from many threads, keeping at most [`MAX_PROBLEMS`].
#[derive(Default)]
pub(crate) struct Sink {
    kept: Mutex<Vec<Problem>>,
    total: AtomicU64,
}

impl Sink {
    /// Records a problem, with the fix that mends it when that is known.
    pub(crate) fn add_maybe(
        &self,
        what: &'static str,
        location: Location,
        detail: String,
        fix: Option<Fix>,
    ) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut v = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < MAX_PROBLEMS {
            v.push(Problem {
                what,
                location,
                detail,
                fix,
            });
        }
    }

    /// Records a problem.
    pub(crate) fn add(&self, what: &'static str, location: Location, detail: impl Into<String>) {
        self.add_maybe(what, location, detail.into(), None)
    }

    /// [`Sink::add`] of a problem whose fix is known.
    pub(crate) fn add_fix(&self, what: &'static str, location: Location, detail: String, fix: Fix) {
        self.add_maybe(what, location, detail, Some(fix))
    }

    /// Records an engine error met while walking, with the fix that mends
    /// it (errors without a location, I/O and unsupported, are kept with
    /// their text and no fix). Met in inode `ino`'s blocks, a block named
    /// only by its disk address is named with the inode too.
    pub(crate) fn error_with(&self, e: Error, ino: Option<u64>, fix: Option<Fix>) {
        let at = |location: Location| match (location, ino) {
            (Location::Daddr(d), Some(ino)) => Location::Other(format!("daddr {d} of inode {ino}")),
            (other, _) => other,
        };
        match e {
            Error::BadCrc { what, location } => {
                self.add_maybe(what, at(location), "bad CRC".into(), fix)
            }
            Error::Corrupt {
                what,
                location,
                detail,
            } => self.add_maybe(what, at(location), detail, fix),
            Error::Io(e) => self.add("device", Location::Other("read".into()), e.to_string()),
            other => self.add(
                "structure",
                Location::Other("unknown".into()),
                other.to_string(),
            ),
        }
    }

    /// Records an engine error met while walking.
    pub(crate) fn error(&self, e: Error) {
        self.error_with(e, None, None)
    }

    /// [`Sink::error`] of an error met in inode `ino`'s blocks.
    pub(crate) fn error_in(&self, e: Error, ino: u64) {
        self.error_with(e, Some(ino), None)
    }

    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    fn into_problems(self) -> Vec<Problem> {
        self.kept.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

/// Shared counters for [`CheckStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) btree_blocks: AtomicU64,
    pub(crate) inode_chunks: AtomicU64,
    pub(crate) inodes: AtomicU64,
    pub(crate) directories: AtomicU64,
    pub(crate) dir_entries: AtomicU64,
    pub(crate) free_blocks: AtomicU64,
}

/// State shared by all workers.
pub(crate) struct Ctx<'a> {
    pub(crate) fs: &'a Fs,
    pub(crate) sink: Sink,
    pub(crate) map: space::OwnerMap,
    /// Reverse mappings expected and found, compared per AG.
    pub(crate) rmaps: rmap::Rmaps,
    /// What the inode pass keeps for the namespace pass.
    pub(crate) ns: ns::NsStore,
    pub(crate) counters: Counters,
    /// The primary superblock's sector, as on disk.
    pub(crate) sb0: Vec<u8>,
    /// Inodes the superblock names that are metadata files (metadata
    /// directory root, realtime bitmap and summary, quota files), not null.
    pub(crate) meta_roots: Vec<u64>,
    /// Realtime files' extents, for the realtime section's check.
    pub(crate) rt: rt::RtClaims,
    /// Realtime groups' mappings and metadata btrees, for their check.
    pub(crate) rtg: rtgroups::RtgState,
    /// What each user, group and project uses, for the quota counts.
    pub(crate) quota: quota::Usage,
    /// Per AG whose inobt cannot be read, the chunks its rmapbt records
    /// (what the rebuilt inobt holds).
    pub(crate) inobt_rebuild: Mutex<std::collections::BTreeMap<u32, Vec<ag::Chunk>>>,
}

/// Locks a mutex of the check's state, poisoned or not.
pub(crate) fn lock_map<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `work(i)` for every `i` in `0..count` on at most `threads`
/// threads and folds each result into `acc` with `fold` as soon as it is
/// made (under a lock, in no particular order), so nothing is kept per
/// item unless `fold` keeps it. Reports progress as (pass, done, count).
fn per_ag<T, A: Send>(
    count: u32,
    threads: usize,
    pass: &str,
    progress: Option<Progress<'_>>,
    acc: A,
    work: &(dyn Fn(u32) -> T + Sync),
    fold: &(dyn Fn(&mut A, u32, T) + Sync),
) -> A {
    let next = AtomicU32::new(0);
    let done = AtomicU32::new(0);
    let acc = Mutex::new(acc);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, count.max(1) as usize) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let r = work(i);
                fold(&mut acc.lock().unwrap_or_else(|p| p.into_inner()), i, r);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(p) = progress {
                    p(pass, d, count);
                }
            });
        }
    });
    acc.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Fewest concurrent readers of the inode pass (when not set by
/// [`CheckOptions::threads`]).
const MIN_STREAMS: usize = 8;

/// Pieces of work of the inode pass: (index into `chunks`, range of that
/// AG's chunks). Only AGs with chunks are listed in `chunks`; each is cut
/// into equal pieces, enough of them for `streams` readers.
fn split_units(
    chunks: &[(u32, Vec<ag::Chunk>)],
    streams: usize,
) -> Vec<(usize, std::ops::Range<usize>)> {
    let per_ag = streams.div_ceil(chunks.len().max(1)).max(1);
    let mut units = Vec::new();
    for (i, (_, c)) in chunks.iter().enumerate() {
        let n = c.len();
        let pieces = per_ag.min(n).max(1);
        for k in 0..pieces {
            units.push((i, n * k / pieces..n * (k + 1) / pieces));
        }
    }
    units
}

/// Checks the whole filesystem. Returns an error only when the check
/// cannot run at all; everything found on the image is in the report.
pub fn check(fs: &Fs, opts: &CheckOptions<'_>) -> Result<CheckReport> {
    let geo = fs.geometry();
    let threads = if opts.threads == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        opts.threads
    };
    let mut sb0 = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(0, &mut sb0)?;
    let sb0_for_quota = sb0.clone();
    // The superblock must be readable; everything else is a problem.
    let sb = links::read_sb_counters(fs)?;
    // The bound: a quarter for the file mappings the rmapbt is compared
    // with, the rest for the namespace pass's records.
    let memory = if opts.memory == 0 {
        DEFAULT_MEMORY
    } else {
        opts.memory
    };
    let spill_config = spill::SpillConfig {
        dir: opts.tmpdir.clone(),
    };
    let ctx = Ctx {
        fs,
        sink: Sink::default(),
        map: space::OwnerMap::new(geo),
        rmaps: rmap::Rmaps::new(geo, memory / 4, spill_config.clone()),
        ns: ns::NsStore::new(memory - memory / 4, spill_config),
        counters: Counters::default(),
        sb0,
        meta_roots: sb.meta_inodes.iter().copied().chain(sb.metadir).collect(),
        rt: rt::RtClaims::default(),
        rtg: rtgroups::RtgState::default(),
        quota: quota::Usage::new(&sb0_for_quota, geo.v5, metadir_quota_files(fs)),
        inobt_rebuild: Mutex::default(),
    };
    // Metadata stamped at or past the log head is noted as it is read
    // (xfs_repair reformats the log then; the kernel refuses the blocks).
    let head = crate::log::log_dev(fs.device(), geo)
        .and_then(|l| crate::log::find::find_ends(&l))
        .ok()
        .filter(|e| !e.empty && e.head_cycle > 0)
        .map(|e| (u64::from(e.head_cycle) << 32) | e.head_blk);
    if let Some(h) = head {
        fs.watch_lsns(h);
    }

    sb::check_root_inos(&ctx);
    // Pass 1 folds each AG's counters into running totals and keeps the
    // inode chunks only of AGs that have any.
    let (totals, mut chunks) = per_ag(
        geo.ag_count,
        threads,
        "AG headers and btrees",
        opts.progress,
        (links::AgTotals::default(), Vec::new()),
        &|agno| ag::check_ag(&ctx, agno),
        &|(t, chunks), agno, h| {
            t.add(&h);
            if !h.chunks.is_empty() {
                chunks.push((agno, h.chunks));
            }
        },
    );
    chunks.sort_unstable_by_key(|(agno, _)| *agno);
    // The inode pass waits on the disk far more than it computes, and the
    // disk delivers more to several streams than to one: cut the AGs into
    // pieces so that at least MIN_STREAMS read at once.
    let streams = if opts.threads == 0 {
        threads.max(MIN_STREAMS)
    } else {
        opts.threads
    };
    let units = split_units(&chunks, streams);
    per_ag(
        units.len() as u32,
        streams,
        "inodes",
        opts.progress,
        (),
        &|u| {
            let (i, range) = &units[u as usize];
            let (agno, c) = &chunks[*i];
            inodes::check_inodes(&ctx, *agno, &c[range.clone()])
        },
        &|_, _, ()| {},
    );
    drop(units);
    drop(chunks);
    if let Some(e) = ns::lock(&ctx.ns.failed).take() {
        return Err(Error::Io(e));
    }

    ctx.rmaps.finish(&ctx).map_err(Error::Io)?;
    attach_fork_rebuilds(&ctx);
    ctx.quota.finish(&ctx);
    // The realtime section, when its device was given (as xfs_repair
    // needs it): bitmap, summary and free count against the files.
    if geo.rt_blocks > 0 && fs.rt_readable() {
        if geo.has_rtgroups() {
            rtgroups::finish(&ctx, ctx.rt.used(&ctx));
        } else {
            rt::finish(&ctx, &ctx.rt);
        }
    }
    if let (Some(h), Some(a)) = (head, fs.lsn_ahead()) {
        ctx.sink.add(
            a.what,
            a.location,
            format!(
                "LSN {}:{} is not behind the log head {}:{} ({} block(s) so): {LSN_AHEAD}",
                a.lsn >> 32,
                a.lsn as u32,
                h >> 32,
                h as u32,
                a.blocks
            ),
        );
    }
    let rebuilt = mark_space_rebuilds(&ctx);
    ctx.map.report_unclaimed(&ctx);
    ctx.map.report_refcounts(&ctx);
    // The records come back sorted, so the report does not depend on
    // which worker read what first.
    links::check_namespace(&ctx, &sb).map_err(Error::Io)?;
    links::check_counters(&ctx, &sb, &totals);

    let c = &ctx.counters;
    let stats = CheckStats {
        ags: geo.ag_count,
        btree_blocks: c.btree_blocks.load(Ordering::Relaxed),
        inode_chunks: c.inode_chunks.load(Ordering::Relaxed),
        inodes: c.inodes.load(Ordering::Relaxed),
        directories: c.directories.load(Ordering::Relaxed),
        dir_entries: c.dir_entries.load(Ordering::Relaxed),
        free_blocks: c.free_blocks.load(Ordering::Relaxed),
        problems_total: ctx.sink.total(),
    };
    let mut unchecked = Vec::new();
    if geo.rt_blocks > 0 && !fs.rt_readable() {
        let parts = if geo.zoned {
            "its zones' rmap btrees and the realtime files' data"
        } else if geo.has_rtgroups() {
            "its groups' bitmaps, summaries, rmap and refcount btrees and the realtime files' data"
        } else {
            "its bitmap, summary and the realtime files' data"
        };
        unchecked.push(format!(
            "the realtime section ({} blocks: {parts}) was not checked: needs the realtime device: --rtdev",
            geo.rt_blocks
        ));
    }
    let unfound = metadir_quota_files(fs).is_some_and(|f| f.iter().any(Option::is_none));
    if let Some(kinds) = checked_quotas(fs).filter(|_| geo.features.metadir && unfound) {
        unchecked.push(format!(
            "the {kinds} quota counts, which the superblock marks checked, were not compared \
             with what the files use: the quota files of the metadata directory were not all found"
        ));
    }
    if crate::log::log_missing(fs.device(), geo) {
        unchecked.push(format!(
            "the external log ({} blocks) was not checked, nor replayed: needs the log device: --logdev",
            geo.log_blocks
        ));
    }
    let mut rmap_rebuild = Vec::new();
    for &a in &rebuilt {
        if let Some(recs) = rmap::rebuilt_records(&ctx, a) {
            rmap_rebuild.push((a, recs));
        }
    }
    let free_space = rebuilt
        .iter()
        .map(|&a| {
            let with_rmap = rmap_rebuild.iter().any(|(r, _)| *r == a);
            (a, ctx.map.free_space(a, with_rmap))
        })
        .collect();
    let inobt_rebuild = std::mem::take(&mut *lock_map(&ctx.inobt_rebuild))
        .into_iter()
        .map(|(a, chunks)| {
            let recs = chunks
                .iter()
                .map(|c| {
                    (
                        c.startino,
                        c.holemask,
                        c.count as u8,
                        c.freecount as u8,
                        c.free,
                    )
                })
                .collect();
            (a, recs)
        })
        .collect();
    let refcount_rebuild = ctx
        .rmaps
        .kept_files()
        .into_iter()
        .map(|a| (a, ctx.rmaps.take_refcounts(a)))
        .collect();
    Ok(CheckReport {
        problems: ctx.sink.into_problems(),
        stats,
        unchecked,
        warnings: warnings(geo),
        ag_totals: AgCounts {
            icount: totals.icount,
            ifree: totals.ifree,
            fdblocks: totals.fdblocks,
        },
        free_space,
        rmap_rebuild,
        inobt_rebuild,
        refcount_rebuild,
    })
}

/// Gives the problems of each inode whose data fork [`rmap::Rmaps::finish`]
/// rebuilt from the rmapbt that rebuild as their fix: its fork and block
/// count problems, and every other problem of the inode that has no fix
/// of its own (the next round's check finds again what the rebuild does
/// not mend).
fn attach_fork_rebuilds(ctx: &Ctx<'_>) {
    let forks = ctx.rmaps.take_fork_rebuilds();
    if forks.is_empty() {
        return;
    }
    let by_ino: std::collections::HashMap<u64, &rmap::ForkRebuild> =
        forks.iter().map(|f| (f.ino, f)).collect();
    let nblocks = std::mem::offset_of!(xfs_format::inode::Dinode, di_nblocks);
    let mut kept = ctx.sink.kept.lock().unwrap_or_else(|p| p.into_inner());
    for p in kept.iter_mut() {
        let ino = match &p.location {
            Location::Inode(i) => *i,
            Location::InodeBlock {
                ino, fork: "data", ..
            } => *ino,
            // A block of its fork named by its disk address ([`Sink::error_with`]).
            Location::Other(s) => match s
                .strip_prefix("daddr ")
                .and_then(|r| r.split_once(" of inode "))
                .and_then(|(_, i)| i.parse().ok())
            {
                Some(i) => i,
                None => continue,
            },
            _ => continue,
        };
        let Some(f) = by_ino.get(&ino) else {
            continue;
        };
        let replace = match &p.fix {
            None => true,
            Some(Fix::InodeBits { offset, .. }) => *offset == nblocks,
            _ => false,
        };
        if replace {
            p.fix = Some(match &f.old_bmbt {
                None => Fix::RebuildFork {
                    ino,
                    extents: f.extents.clone(),
                    nblocks: f.nblocks,
                },
                Some(old) => Fix::RebuildForkBtree {
                    ino,
                    extents: f.extents.clone(),
                    nblocks: f.nblocks,
                    old_bmbt: old.clone(),
                },
            });
        }
    }
}

/// The AG a problem is in, where its location says.
fn problem_ag(geo: &crate::geometry::Geometry, l: &Location) -> Option<u32> {
    match l {
        Location::AgBlock { agno, .. } => Some(*agno),
        Location::Daddr(d) => {
            let per_ag = u64::from(geo.ag_blocks) * u64::from(geo.block_size >> 9);
            u32::try_from(d / per_ag.max(1)).ok()
        }
        Location::Other(s) => s
            .strip_prefix("AG ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok()),
        _ => None,
    }
}

/// Finds the AGs whose free space btrees are damaged (a problem in a
/// bnobt or cntbt block, or the two disagreeing), marks them for a
/// rebuild in the ownership map, and gives their problems (and the AGF
/// counters counted in them) the rebuild as their fix. v5 only (the
/// rebuilt blocks are v5 blocks).
fn mark_space_rebuilds(ctx: &Ctx<'_>) -> BTreeSet<u32> {
    let geo = ctx.fs.geometry();
    let mut ags = BTreeSet::new();
    if !geo.v5 {
        return ags;
    }
    // An rmapbt that cannot be read whole is rebuilt with the free space
    // btrees (its blocks come from free space).
    let rmap_ags: BTreeSet<u32> = ctx.rmaps.skipped().into_iter().collect();
    ags.extend(rmap_ags.iter().copied());
    let mut kept = ctx.sink.kept.lock().unwrap_or_else(|p| p.into_inner());
    let tree = |p: &Problem| {
        matches!(
            p.what,
            "bnobt block" | "cntbt block" | "bnobt record" | "free space btrees"
        )
    };
    for p in kept.iter() {
        if tree(p) {
            if let Some(a) = problem_ag(geo, &p.location).filter(|&a| a < geo.ag_count) {
                ags.insert(a);
            }
        }
    }
    use xfs_format::ag::Agf;
    let counted = [
        std::mem::offset_of!(Agf, agf_freeblks),
        std::mem::offset_of!(Agf, agf_longest),
        std::mem::offset_of!(Agf, agf_btreeblks),
        std::mem::offset_of!(Agf, agf_rmap_blocks),
    ];
    for p in kept.iter_mut() {
        let Some(agno) = problem_ag(geo, &p.location).filter(|a| ags.contains(a)) else {
            continue;
        };
        let counter = matches!(&p.fix, Some(Fix::AgField(f))
            if f.header == AgHeader::Agf && counted.contains(&f.offset));
        let rmap_tree = p.what == "rmapbt block" && rmap_ags.contains(&agno);
        if tree(p) || counter || rmap_tree {
            p.fix = Some(Fix::RebuildFreeSpace { agno });
        }
    }
    // A refcount btree rebuilt from the files' mappings.
    let refc_ags: BTreeSet<u32> = ctx.rmaps.kept_files().into_iter().collect();
    let refc_blocks = std::mem::offset_of!(xfs_format::ag::Agf, agf_refcount_blocks);
    for p in kept.iter_mut() {
        let Some(agno) = problem_ag(geo, &p.location).filter(|a| refc_ags.contains(a)) else {
            continue;
        };
        let counter = matches!(&p.fix, Some(Fix::AgField(f))
            if f.header == AgHeader::Agf && f.offset == refc_blocks);
        if p.what == "refcountbt block" || counter {
            p.fix = Some(Fix::RebuildRefcount { agno });
        }
    }
    // An inobt rebuilt from the rmapbt's chunks (its finobt with it).
    let ino_ags: BTreeSet<u32> = lock_map(&ctx.inobt_rebuild).keys().copied().collect();
    {
        use xfs_format::ag::Agi;
        let counted = [
            std::mem::offset_of!(Agi, agi_count),
            std::mem::offset_of!(Agi, agi_freecount),
            std::mem::offset_of!(Agi, agi_iblocks),
            std::mem::offset_of!(Agi, agi_fblocks),
        ];
        for p in kept.iter_mut() {
            let Some(agno) = problem_ag(geo, &p.location).filter(|a| ino_ags.contains(a)) else {
                continue;
            };
            let counter = matches!(&p.fix, Some(Fix::AgField(f))
                if f.header == AgHeader::Agi && counted.contains(&f.offset));
            if matches!(p.what, "inobt block" | "finobt block" | "finobt") || counter {
                p.fix = Some(Fix::RebuildInobt { agno });
            }
        }
    }
    // A finobt is rebuilt from a sound inobt (xfs_repair rebuilds both).
    if geo.features.finobt {
        let mut fino = BTreeSet::new();
        let mut ino_bad = BTreeSet::new();
        for p in kept.iter() {
            let Some(a) = problem_ag(geo, &p.location).filter(|&a| a < geo.ag_count) else {
                continue;
            };
            match p.what {
                "finobt block" | "finobt" => {
                    fino.insert(a);
                }
                "inobt block" => {
                    ino_bad.insert(a);
                }
                _ => {}
            }
        }
        let fblocks = std::mem::offset_of!(xfs_format::ag::Agi, agi_fblocks);
        for p in kept.iter_mut() {
            let Some(agno) = problem_ag(geo, &p.location)
                .filter(|a| fino.contains(a) && !ino_bad.contains(a) && !ino_ags.contains(a))
            else {
                continue;
            };
            let counter = matches!(&p.fix, Some(Fix::AgField(f))
                if f.header == AgHeader::Agi && f.offset == fblocks);
            if matches!(p.what, "finobt block" | "finobt") || counter {
                p.fix = Some(Fix::RebuildFinobt { agno });
            }
        }
    }
    for &a in &ags {
        ctx.map.rebuild_free_space(a);
    }
    ags
}

/// The kinds of quota whose counts the primary superblock marks checked
/// ("user, group and project"), None when none is.
/// On a metadata-directory filesystem, its quota files (`/quota/user`,
/// `group`, `project`; None where missing or not accounted).
fn metadir_quota_files(fs: &Fs) -> Option<[Option<u64>; 3]> {
    fs.geometry()
        .features
        .metadir
        .then(|| crate::quota::Kind::ALL.map(|k| crate::quota::quota_file(fs, k).ok().flatten()))
}

fn checked_quotas(fs: &Fs) -> Option<String> {
    use xfs_format::sb::{XFS_GQUOTA_CHKD, XFS_OQUOTA_CHKD, XFS_PQUOTA_CHKD, XFS_UQUOTA_CHKD};
    let mut sb = vec![0u8; fs.geometry().sect_size as usize];
    fs.read_bytes(0, &mut sb).ok()?;
    let o = xfs_format::sb::XFS_SB_QFLAGS_OFF;
    let q = u16::from_be_bytes([sb[o], sb[o + 1]]);
    let kinds: Vec<&str> = [
        (XFS_UQUOTA_CHKD, "user"),
        (XFS_GQUOTA_CHKD, "group"),
        (XFS_PQUOTA_CHKD, "project"),
        (XFS_OQUOTA_CHKD, "group or project"),
    ]
    .iter()
    .filter(|(b, _)| q & b != 0)
    .map(|&(_, n)| n)
    .collect();
    match kinds.as_slice() {
        [] => None,
        [one] => Some(one.to_string()),
        [init @ .., last] => Some(format!("{} and {last}", init.join(", "))),
    }
}

/// The report's warnings for `geo` (see [`CheckReport::warnings`]).
fn warnings(geo: &crate::geometry::Geometry) -> Vec<String> {
    use crate::log::resv;
    let mut out = Vec::new();
    if geo.v5 {
        let min =
            resv::min_log_blocks(&resv::ResvGeometry::from_geometry(geo), resv::Rules::Kernel);
        if u64::from(geo.log_blocks) < min {
            out.push(format!(
                "the log is {} blocks, below the minimum of {min} blocks that Linux requires for \
                 this geometry: the kernel refuses to mount it, and xfskit refuses to write to it",
                geo.log_blocks
            ));
        }
    }
    out
}

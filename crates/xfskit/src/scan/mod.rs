//! Whole-filesystem scans: bulkstat of every allocated inode.
//!
//! A scan runs one thread per allocation group (at most
//! [`BulkstatOptions::threads`] at once; AGs are handed out in order from an
//! atomic counter). Each thread walks its AG's inode btree and reads the
//! inode clusters that hold allocated inodes in large merged reads (see
//! [`inobt`] and the `ag` module). Within an AG, results are in inode
//! number order.
//!
//! Entry points: [`bulkstat`] hands batches to a shared sink from the
//! worker threads as they come (AGs interleave); [`for_each_batch`]
//! delivers them on the calling thread in inode number order across the
//! whole filesystem, and [`for_each_mapped`] does the same after turning
//! each batch into something else on the worker threads.

mod ag;
mod bstat;
mod decode;
mod gate;
pub mod inobt;

pub use bstat::{reported_rdev, xflag, xflags, Bstat, DEV_BLKSIZE};

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use xfs_format::sb::Dsb;
use zerocopy::FromBytes;

/// How to run a bulkstat scan.
#[derive(Debug, Clone, Default)]
pub struct BulkstatOptions {
    /// Worker threads (0: one per CPU). Never more than the AGs scanned.
    pub threads: usize,
    /// Inode clusters per merged read (0: [`DEFAULT_BATCH`]).
    pub batch: usize,
    /// Scan only this AG.
    pub ag: Option<u32>,
    /// Report only inodes with this number or a higher one.
    pub start_ino: Option<u64>,
}

/// Default clusters per merged read (1 MiB with 16 KiB clusters).
pub const DEFAULT_BATCH: usize = 64;

/// What a scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// AGs scanned.
    pub ags: u64,
    /// Inode btree blocks read.
    pub inobt_blocks: u64,
    /// Inode chunks (inobt records) visited.
    pub chunks: u64,
    /// Inode clusters read.
    pub clusters_read: u64,
    /// Read calls issued for inode clusters.
    pub reads: u64,
    /// Bytes of inode clusters read.
    pub bytes_read: u64,
    /// Inodes reported.
    pub inodes: u64,
    /// Allocated inodes not reported (metadata inodes, mode 0).
    pub skipped: u64,
}

impl ScanStats {
    fn add(&mut self, o: &ScanStats) {
        self.ags += o.ags;
        self.inobt_blocks += o.inobt_blocks;
        self.chunks += o.chunks;
        self.clusters_read += o.clusters_read;
        self.reads += o.reads;
        self.bytes_read += o.bytes_read;
        self.inodes += o.inodes;
        self.skipped += o.skipped;
    }
}

/// The resolved plan of a scan.
struct Plan {
    /// AGs to scan, in order (a range, not a list: a filesystem may have
    /// millions of AGs).
    ags: std::ops::Range<u32>,
    /// First AG inode number to report in the first AG.
    first_agino: u32,
    threads: usize,
    batch: usize,
    hidden: Vec<u64>,
}

impl Plan {
    fn new(fs: &Fs, opts: &BulkstatOptions) -> Result<Plan> {
        let geo = fs.geometry();
        if let Some(a) = opts.ag {
            if a >= geo.ag_count {
                return Err(Error::Invalid(format!(
                    "AG {a} does not exist (the filesystem has {})",
                    geo.ag_count
                )));
            }
        }
        let (start_ag, first_agino) = match opts.start_ino {
            Some(s) => {
                let shift = u32::from(geo.ag_blk_log) + u32::from(geo.inopb_log);
                let ag = s >> shift;
                if ag >= u64::from(geo.ag_count) {
                    (geo.ag_count, 0)
                } else {
                    (ag as u32, geo.ino_agino(Ino(s)))
                }
            }
            None => (0, 0),
        };
        let ags = match opts.ag {
            Some(a) if a < start_ag => 0..0,
            Some(a) => a..a + 1,
            None => start_ag..geo.ag_count,
        };
        let first_agino = if !ags.is_empty() && ags.start == start_ag {
            first_agino
        } else {
            0
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = if opts.threads == 0 {
            cpus
        } else {
            opts.threads
        };
        let threads = threads.min(ags.len()).max(1);
        let batch = if opts.batch == 0 {
            DEFAULT_BATCH
        } else {
            opts.batch
        };
        Ok(Plan {
            ags,
            first_agino,
            threads,
            batch,
            hidden: hidden_inodes(fs)?,
        })
    }

    fn job<'a>(&'a self, idx: usize, stop: &'a AtomicBool) -> ag::AgJob<'a> {
        ag::AgJob {
            agno: self.ags.start + idx as u32,
            start_agino: if idx == 0 { self.first_agino } else { 0 },
            batch: self.batch,
            hidden: &self.hidden,
            stop,
        }
    }
}

/// Metadata inodes the kernel keeps private: realtime bitmap and summary,
/// and the quota files.
fn hidden_inodes(fs: &Fs) -> Result<Vec<u64>> {
    let mut sector = vec![0u8; 512];
    fs.read_bytes(0, &mut sector)?;
    let Ok((sb, _)) = Dsb::ref_from_prefix(&sector) else {
        return Ok(Vec::new());
    };
    let geo = fs.geometry();
    let all = [
        geo.rbm_ino.0,
        geo.rsum_ino.0,
        sb.sb_uquotino.get(),
        sb.sb_gquotino.get(),
        sb.sb_pquotino.get(),
    ];
    Ok(all
        .into_iter()
        .filter(|&i| i != 0 && i != u64::MAX)
        .collect())
}

/// Runs `work(index into plan.ags)` on up to `plan.threads` scoped threads,
/// handing out AGs in order. Returns the first error.
fn run_workers(
    plan: &Plan,
    stop: &AtomicBool,
    work: impl Fn(usize) -> Result<ScanStats> + Sync,
) -> Result<ScanStats> {
    let next = AtomicU32::new(0);
    let total = Mutex::new((ScanStats::default(), None::<Error>));
    std::thread::scope(|s| {
        for _ in 0..plan.threads {
            s.spawn(|| loop {
                let idx = next.fetch_add(1, Ordering::Relaxed) as usize;
                if idx >= plan.ags.len() || stop.load(Ordering::Relaxed) {
                    break;
                }
                let r = work(idx);
                let mut t = total.lock().unwrap_or_else(|p| p.into_inner());
                match r {
                    Ok(st) => t.0.add(&st),
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        if t.1.is_none() {
                            t.1 = Some(e);
                        }
                    }
                }
            });
        }
    });
    let (stats, err) = total.into_inner().unwrap_or_else(|p| p.into_inner());
    match err {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Scans every allocated inode, calling `sink` from the worker threads with
/// batches of records. Batches of one AG arrive in inode order; batches of
/// different AGs interleave.
pub fn bulkstat(
    fs: &Fs,
    opts: &BulkstatOptions,
    sink: impl Fn(&[Bstat]) + Sync,
) -> Result<ScanStats> {
    let plan = Plan::new(fs, opts)?;
    let stop = AtomicBool::new(false);
    run_workers(&plan, &stop, |idx| {
        ag::scan_ag(fs, &plan.job(idx, &stop), &mut |batch| {
            sink(batch);
            true
        })
    })
}

enum Msg<T> {
    Batch(usize, T),
    Done(usize),
}

/// Scans every allocated inode and calls `f` on the calling thread with
/// batches of records in inode number order. An error from `f` stops the
/// scan and is returned.
pub fn for_each_batch(
    fs: &Fs,
    opts: &BulkstatOptions,
    mut f: impl FnMut(&[Bstat]) -> Result<()>,
) -> Result<ScanStats> {
    for_each_mapped(fs, opts, |b| b.to_vec(), |v| f(&v))
}

/// Like [`for_each_batch`], but each batch is first turned into a `T` by
/// `map` on the worker thread that decoded it (for example formatted as
/// text), and `f` receives the `T`s on the calling thread in inode number
/// order. This moves per-record work off the single consuming thread.
///
/// Memory is bounded: output of later AGs waiting for its turn is held up
/// to a fixed number of batches, then their workers wait.
pub fn for_each_mapped<T: Send>(
    fs: &Fs,
    opts: &BulkstatOptions,
    map: impl Fn(&[Bstat]) -> T + Sync,
    mut f: impl FnMut(T) -> Result<()>,
) -> Result<ScanStats> {
    let plan = Plan::new(fs, opts)?;
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::sync_channel::<Msg<T>>(plan.threads * 4);
    let gate = gate::Gate::default();
    std::thread::scope(|s| {
        let workers = s.spawn(|| {
            let r = run_workers(&plan, &stop, |idx| {
                let tx = tx.clone();
                let r = ag::scan_ag(fs, &plan.job(idx, &stop), &mut |batch| {
                    let b = map(batch);
                    gate.wait_turn(idx, &stop);
                    tx.send(Msg::Batch(idx, b)).is_ok()
                });
                let _ = tx.send(Msg::Done(idx));
                r
            });
            drop(tx);
            r
        });
        // Deliver AG `cur` as it comes; hold later AGs until their turn.
        // Invariant: nothing of AG `cur` is ever held.
        let mut cur = 0usize;
        let mut held: BTreeMap<usize, Vec<T>> = BTreeMap::new();
        let mut done: BTreeSet<usize> = BTreeSet::new();
        let mut failed: Option<Error> = None;
        let mut deliver = |b: T, failed: &mut Option<Error>| {
            if failed.is_none() {
                if let Err(e) = f(b) {
                    stop.store(true, Ordering::Relaxed);
                    *failed = Some(e);
                }
            }
        };
        for msg in rx.iter() {
            match msg {
                Msg::Batch(i, b) if i == cur => deliver(b, &mut failed),
                Msg::Batch(i, b) => held.entry(i).or_default().push(b),
                Msg::Done(i) => {
                    done.insert(i);
                }
            }
            while done.remove(&cur) {
                cur += 1;
                for b in held.remove(&cur).unwrap_or_default() {
                    deliver(b, &mut failed);
                }
            }
            if failed.is_some() {
                held.clear(); // keep draining so that the workers can finish
                gate.release();
            }
            gate.set(cur, held.values().map(Vec::len).sum());
        }
        let r = workers
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("a scan thread panicked".into())));
        match failed {
            Some(e) => Err(e),
            None => r,
        }
    })
}

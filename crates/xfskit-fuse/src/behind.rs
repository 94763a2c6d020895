//! Write-behind for FUSE over io_uring: a WRITE is checked, answered, and
//! carried out by a worker on another CPU while the writer goes on.
//!
//! Through io_uring a request is served on the CPU that made it (see
//! [`crate::uring`]), so the writer waits for the whole of the engine's
//! write (block allocation, the transaction, queueing the data) while the
//! other CPU idles. Kernel XFS does not make write(2) wait for that
//! either: it allocates at writeback (delayed allocation). Here the queue
//! thread does what can fail first, on the caller's time:
//!
//! - the mount is writable, the range fits (EFBIG), the inode is a
//!   regular file that its flags let this write change (EPERM), and a
//!   failure of an earlier write-behind on it is reported now;
//! - there is room (and no quota limits are enforced): only while the free blocks exceed twice what is
//!   queued plus a margin (1/16 of the filesystem, at least 16 MiB) is a
//!   write deferred; near full every write is done in place, so ENOSPC
//!   comes from write(2) exactly as before;
//!
//! then copies the data, queues it for the worker pinned to the next CPU
//! and answers, if that CPU has time to spare (no requests served there in
//! the last millisecond, its worker keeping up); else the write is done
//! in place. Workers take writes in order, and an inode with writes
//! queued has its next ones queued behind them on the same worker, so
//! they happen in the order they came.
//!
//! Everything that could see the difference waits first ([`Behind::settle`]
//! for its inode, [`Behind::settle_all`] for what may free or count
//! inodes or blocks): any other request about an inode with writes
//! queued (attributes, reads, fsync, truncate, xattrs...), an entry
//! handed out for one (lookup, link), unlink, rmdir, rename, statfs,
//! readdirplus, copy_file_range, the freeing of an orphan, and the end of
//! the mount. A write that fails in the worker after all (an I/O error, a
//! corrupt structure) is logged, and its errno is returned by the next
//! fsync or write of the inode, as kernel XFS reports writeback errors.

use crate::errno::to_errno;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use xfskit::Ino;

/// Most bytes waiting in all workers' queues; a writer waits beyond it.
const MAX_QUEUED: usize = 16 << 20;
/// How long a worker keeps looking for more work before it sleeps. Waking
/// a sleeping thread on another CPU cost the writer 20-30 us here (an
/// inter-processor interrupt through the hypervisor), as much as the
/// write it hands over; a worker that polls while writes keep coming is
/// never woken. Workers run SCHED_IDLE under the placement watcher, as the
/// queue threads do, and poll only then: on a CPU other tasks want they
/// sleep (with workers polling at the normal policy, 4 writers on 2 CPUs
/// took 3.3 s in bench/mount.sh's (f) where session 14 had 2.2 s).
const POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// One deferred WRITE.
struct Job {
    node: INodeNo,
    offset: u64,
    data: Vec<u8>,
    kill: bool,
    appending: bool,
    /// When the write was asked for: its mtime and ctime.
    at: Option<xfskit::inode::Timestamp>,
}

#[derive(Default)]
struct State {
    /// Per worker, the writes it has not finished (the front one may be
    /// running).
    queues: Vec<VecDeque<Job>>,
    /// Inodes with writes queued: the worker holding them and how many.
    pending: HashMap<u64, (usize, usize)>,
    /// Bytes queued.
    bytes: usize,
    /// Errors of failed write-behinds, reported once per inode.
    errors: HashMap<u64, Errno>,
}

/// The write-behind queues of a mount (idle until [`Behind::start`]).
#[derive(Default)]
pub(crate) struct Behind {
    on: AtomicBool,
    /// Writes queued or running, for a lock-free "nothing to wait for".
    queued: AtomicUsize,
    state: Mutex<State>,
    /// Per worker: signalled when it has work.
    ready: Vec<Condvar>,
    /// Signalled when writes finish.
    done: Condvar,
    /// Per worker: writes handed to it so far (polled without the lock).
    handed: Vec<AtomicUsize>,
    /// Per worker: asleep on `ready` (under the lock).
    asleep: Vec<AtomicBool>,
    /// Per CPU: when its io_uring queue last served a request
    /// (microseconds since `epoch`).
    served: Vec<AtomicU64>,
    epoch: std::sync::OnceLock<std::time::Instant>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Behind {
    /// Queues for `workers` workers (none before `start`).
    pub(crate) fn new(workers: usize) -> Behind {
        Behind {
            ready: (0..workers).map(|_| Condvar::new()).collect(),
            handed: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            asleep: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            served: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        }
    }

    fn workers(&self) -> usize {
        self.ready.len()
    }

    /// Whether WRITEs may be deferred.
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    fn micros(&self) -> u64 {
        let e = self.epoch.get_or_init(std::time::Instant::now);
        e.elapsed().as_micros() as u64 + 1
    }

    /// Called by CPU `cpu`'s queue thread for each request it serves.
    pub(crate) fn served_on(&self, cpu: usize) {
        if self.is_on() {
            if let Some(s) = self.served.get(cpu) {
                s.store(self.micros(), Ordering::Relaxed);
            }
        }
    }

    /// Whether CPU `cpu` served a request in the last millisecond: someone
    /// is making requests there, so it has no time to spare.
    fn busy(&self, cpu: usize) -> bool {
        let last = self
            .served
            .get(cpu)
            .map_or(0, |s| s.load(Ordering::Relaxed));
        last != 0 && self.micros().saturating_sub(last) < 1000
    }

    /// Waits until no write to `ino` is queued.
    pub(crate) fn settle(&self, ino: Ino) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = lock(&self.state);
        while s.pending.contains_key(&ino.0) {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until no write is queued at all.
    pub(crate) fn settle_all(&self) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = lock(&self.state);
        while !s.pending.is_empty() {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// True while writes to `ino` are queued.
    pub(crate) fn has_pending(&self, ino: Ino) -> bool {
        self.queued.load(Ordering::Acquire) != 0 && lock(&self.state).pending.contains_key(&ino.0)
    }

    /// The error of a failed write-behind to `ino`, once.
    pub(crate) fn take_error(&self, ino: Ino) -> Option<Errno> {
        if !self.is_on() {
            return None;
        }
        lock(&self.state).errors.remove(&ino.0)
    }
}

impl XfsFuse {
    /// Starts one worker per CPU, each pinned to its CPU, and turns
    /// write-behind on (not with one CPU, where nothing runs alongside,
    /// nor with the writeback cache, whose WRITEs come from writeback
    /// anyway).
    pub(crate) fn start_write_behind(
        &'static self,
        placement: &'static crate::placement::Placement,
    ) {
        let n = self.behind.workers();
        if n < 2 || self.writeback_cache || !self.writable || !self.write_behind {
            return;
        }
        // For tests: each deferred write waits this long before it is done,
        // so that a test can tell an early answer and see who waits for it.
        let delay = std::env::var("XFSKIT_TEST_BEHIND_DELAY_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(std::time::Duration::from_millis);
        lock(&self.behind.state).queues = (0..n).map(|_| VecDeque::new()).collect();
        for w in 0..n {
            let spawned = std::thread::Builder::new()
                .name(format!("xfskit-behind{w}"))
                .spawn(move || {
                    crate::uring::pin_to_cpu(w);
                    placement.join();
                    self.write_worker(w, delay)
                });
            if let Err(e) = spawned {
                eprintln!("xfskit-fuse: no write-behind thread ({e}); writes stay in place");
                return;
            }
        }
        self.behind.on.store(true, Ordering::Relaxed);
    }

    fn write_worker(&self, w: usize, delay: Option<std::time::Duration>) {
        let b = &self.behind;
        let mut taken = 0usize;
        let mut last = std::time::Instant::now();
        let mut polling = false;
        let mut spins = 0u32;
        loop {
            // Poll while writes came lately, then sleep until handed one.
            // Only at SCHED_IDLE (crate::placement), where polling takes
            // nothing from other tasks: a worker the watcher put back to
            // the normal policy (its CPU is busy) sleeps instead.
            if b.handed[w].load(Ordering::Acquire) == taken {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(1024) {
                    polling = crate::placement::running_idle();
                }
                if polling && last.elapsed() < POLL {
                    std::hint::spin_loop();
                    continue;
                }
                let mut s = lock(&b.state);
                while s.queues[w].is_empty() {
                    b.asleep[w].store(true, Ordering::Relaxed);
                    s = b.ready[w].wait(s).unwrap_or_else(|p| p.into_inner());
                }
                b.asleep[w].store(false, Ordering::Relaxed);
            }
            let (node, offset, len, data, kill, appending, at) = {
                let mut s = lock(&b.state);
                let Some(j) = s.queues[w].front_mut() else {
                    continue;
                };
                taken += 1;
                (
                    j.node,
                    j.offset,
                    j.data.len(),
                    std::mem::take(&mut j.data),
                    j.kill,
                    j.appending,
                    j.at,
                )
            };
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            // A bug met here fails this write (EIO at the next fsync), not
            // every request that would wait for it.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.do_write(node, offset, &data, kill, appending, at)
            }))
            .unwrap_or_else(|_| {
                eprintln!("xfskit-fuse: a deferred write panicked (reported as EIO)");
                Err(Errno::EIO)
            });
            drop(data);
            let mut s = lock(&b.state);
            s.queues[w].pop_front();
            s.bytes -= len;
            let ino = self.ino(node).0;
            if let Err(e) = r {
                eprintln!(
                    "xfskit-fuse: a deferred write of {len} bytes at {offset} to inode {ino} \
                     failed ({e:?}); the next fsync or write of it returns the error"
                );
                s.errors.insert(ino, e);
            }
            if let Some(p) = s.pending.get_mut(&ino) {
                p.1 -= 1;
                if p.1 == 0 {
                    s.pending.remove(&ino);
                }
            }
            b.queued.fetch_sub(1, Ordering::Release);
            drop(s);
            b.done.notify_all();
            last = std::time::Instant::now();
            polling = crate::placement::running_idle();
        }
    }

    /// WRITE through write-behind (see the module): checked and queued
    /// for the worker after CPU `cpu`'s, or done in place when that is not
    /// safe; either way the bytes written.
    pub(crate) fn write_behind(
        &self,
        cpu: usize,
        node: INodeNo,
        offset: u64,
        data: &[u8],
        kill: bool,
        appending: bool,
    ) -> Result<u32, Errno> {
        let b = &self.behind;
        let ino = self.ino(node);
        if let Some(e) = b.take_error(ino) {
            return Err(e);
        }
        if !b.is_on() {
            return self.do_write(node, offset, data, kill, appending, None);
        }
        if kill && self.kill_privileges(node, true)?.is_some() {
            // Set-id bits to drop: done before the answer, so that a stat
            // after the write (answered from the kernel's cache, which
            // the drop invalidates) sees them gone.
            b.settle(ino);
            return self.do_write(node, offset, data, kill, appending, None);
        }
        let n = self.write_allowed(offset, data.len())?;
        self.fs
            .check_write(ino, appending)
            .map_err(|e| to_errno(&e))?;
        // Handed over only to the worker of a CPU that has time to spare:
        // its queue serves no requests (nobody writes there) and the worker
        // keeps up (at most one write waiting). With every CPU busy (4
        // writers on 2 CPUs, measured by hand: 2.1 s in place, 2.4-2.6 s
        // deferred) deferring gains nothing and costs the copy and a CPU's
        // caches: done in place. An inode with writes queued keeps its
        // worker, so that they stay in order; near full, writes wait for
        // those before them and are done in place.
        let next = (cpu + 1) % b.workers();
        let spare = !b.busy(next);
        let mut s = lock(&b.state);
        let room = self.room_for(s.bytes + data.len());
        let w = match s.pending.get(&ino.0) {
            Some(&(w, _)) if room => w,
            None if room && spare && s.queues[next].len() < 2 => next,
            _ => {
                drop(s);
                b.settle(ino);
                return self.do_write(node, offset, data, kill, appending, None);
            }
        };
        while s.bytes > 0 && s.bytes + data.len() > MAX_QUEUED {
            s = b.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        let job = Job {
            node,
            offset,
            data: data.to_vec(),
            kill,
            appending,
            at: self.fs.clock().ok(),
        };
        s.bytes += data.len();
        s.pending.entry(ino.0).or_insert((w, 0)).1 += 1;
        s.queues[w].push_back(job);
        b.queued.fetch_add(1, Ordering::Release);
        b.handed[w].fetch_add(1, Ordering::Release);
        let wake = b.asleep[w].load(Ordering::Relaxed);
        drop(s);
        if wake {
            b.ready[w].notify_one();
        }
        Ok(n)
    }

    /// Whether `queued` bytes may wait for a worker: the free blocks must
    /// stay over twice that plus a margin, and no quota limit may refuse
    /// them (a write that could fail with EDQUOT is done in place, so
    /// write(2) returns it).
    fn room_for(&self, queued: usize) -> bool {
        if self.fs.quotas_enforced() {
            return false;
        }
        let geo = self.fs.geometry();
        let bs = u64::from(geo.block_size);
        let want = 2 * (queued as u64).div_ceil(bs);
        let margin = (geo.data_blocks / 16).max((16 << 20) / bs);
        self.fs.free_blocks() > want + margin
    }
}

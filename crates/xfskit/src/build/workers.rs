//! Parallel population: a source's reading thread hands namespace work to
//! worker threads, one per group of AGs, all writing into one shared
//! [`Fs`].
//!
//! An entry goes to the worker of its parent directory's AG (`AG % jobs`),
//! so work in different AGs proceeds side by side while the entries of one
//! directory are still added in the order the source gave them (one queue,
//! run in order, per worker). Queues are bounded in jobs and bytes, so the
//! reader never runs far ahead. A worker records the inode it creates for
//! every job given a key; [`Pool::drain`] waits until every queue is empty
//! and hands those back (for hard links, which need the inode of an
//! earlier file).
//!
//! Directories are jobs too ([`Pool::mkdir`]): the feeding thread names a
//! new directory by a [`Dir::Pending`] slot at once and goes on; the
//! worker that runs the [`Job::Mkdir`] fills the slot in, and a job naming
//! a slot not filled yet waits for it. A directory is made by the worker
//! of its parent, in order with the parent's other entries, and its inode
//! search starts in the AG the feeding thread took from the rotor when it
//! queued it, so its children are routed before it exists. Every change
//! to a directory (its entries, its xattrs, its final metadata) thus runs
//! on one worker in the source's order, and with one worker the result is
//! the sequential feed's. A job only ever waits for a job queued before
//! it, so the oldest job can always run.
//! The first error stops everything: later jobs are dropped unrun and
//! [`with_pool`] returns that error.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::target::{Meta, NodeKind};
use crate::dev::{AlignedBuf, FileData};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;

/// Bytes of queued file data allowed across all workers.
pub const QUEUE_BYTES: usize = 64 << 20;
/// Jobs allowed in one worker's queue.
const QUEUE_JOBS: usize = 4096;

/// Extended attributes, full names, values with ids already mapped.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// A directory as jobs name it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    /// Made already.
    Made(Ino),
    /// Made by a queued [`Job::Mkdir`], which fills in slot `slot`; its
    /// entries go to worker `worker`.
    Pending {
        /// Index in the pool's table of directories.
        slot: u32,
        /// The worker of the directory's (intended) AG.
        worker: u32,
    },
}

/// One piece of work for a worker.
pub enum Job {
    /// A regular file with all its data and xattrs (`Fs::create_file`).
    File {
        /// Parent directory.
        parent: Dir,
        /// The new name.
        name: Vec<u8>,
        /// Reported with the new inode by [`Pool::drain`], when given.
        key: Option<Vec<u8>>,
        /// Owner, mode and times.
        meta: Meta,
        /// The whole contents.
        data: FileData,
        /// Extended attributes.
        xattrs: Xattrs,
    },
    /// Any other non-directory (a large or sparse file, whose data follows
    /// in [`Job::Data`] jobs, a symlink, a device node), then its xattrs.
    Create {
        /// Parent directory.
        parent: Dir,
        /// The new name.
        name: Vec<u8>,
        /// Reported with the new inode by [`Pool::drain`], when given.
        key: Option<Vec<u8>>,
        /// What to create.
        kind: NodeKind,
        /// Owner, mode and times.
        meta: Meta,
        /// Extended attributes.
        xattrs: Xattrs,
    },
    /// Data for the inode of the last [`Job::Create`] of the same worker.
    Data {
        /// File byte offset.
        offset: u64,
        /// The bytes (queued for the device as they are).
        data: AlignedBuf,
    },
    /// Consecutive [`Job::File`]s of one parent, made in one transaction
    /// ([`Fs::create_files`]). The pool groups them as they are pushed, so
    /// the groups depend only on the order of the jobs.
    Files(Vec<Job>),
    /// A new directory, with its xattrs; fills in its slot.
    Mkdir {
        /// Parent directory.
        parent: Dir,
        /// The new name.
        name: Vec<u8>,
        /// Owner, mode and times.
        meta: Meta,
        /// Extended attributes.
        xattrs: Xattrs,
        /// The AG its inode search starts in ([`Fs::next_dir_ag`]).
        ag: u32,
        /// Its slot in the pool's table of directories.
        slot: u32,
    },
    /// Sets a directory's metadata again, after its last entry.
    SetMeta {
        /// The directory.
        dir: Dir,
        /// Owner, mode and times.
        meta: Meta,
    },
    /// Sets xattrs of an existing directory.
    SetXattrs {
        /// The directory.
        dir: Dir,
        /// Extended attributes.
        xattrs: Xattrs,
    },
    /// A hard link `name` in `parent` to `target`.
    Link {
        /// Parent directory.
        parent: Dir,
        /// The new name.
        name: Vec<u8>,
        /// The existing inode.
        target: Ino,
    },
}

impl Job {
    /// Bytes the job holds, for the queue budget.
    fn bytes(&self) -> usize {
        let x = |xs: &Xattrs| xs.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
        match self {
            Job::File {
                name, data, xattrs, ..
            } => name.len() + data.len() + x(xattrs),
            Job::Create { name, xattrs, .. } => name.len() + x(xattrs),
            Job::Data { data, .. } => data.len(),
            Job::Link { name, .. } => name.len(),
            Job::Mkdir { name, xattrs, .. } => name.len() + x(xattrs),
            Job::SetMeta { .. } => 0,
            Job::SetXattrs { xattrs, .. } => x(xattrs),
            Job::Files(g) => g.iter().map(Job::bytes).sum(),
        }
    }
}

/// [`Job::File`]s being gathered into one [`Job::Files`] for a worker.
#[derive(Default)]
struct Open {
    jobs: Vec<Job>,
    parent: Option<Dir>,
    data: usize,
}

#[derive(Default)]
struct QState {
    jobs: VecDeque<(Job, usize)>,
    bytes: usize,
    /// The worker is running jobs taken from the queue.
    busy: bool,
    /// The worker sleeps, waiting for jobs.
    idle: bool,
    /// The feeding thread sleeps, waiting for room or for the worker to
    /// finish.
    feeder_waiting: bool,
    /// No more jobs will come.
    closed: bool,
    /// The worker has exited (normally or by panic).
    gone: bool,
    /// Keys of the inodes created since the last drain.
    done: Vec<(Vec<u8>, Ino)>,
}

/// One worker's queue. Condition variables are only signalled when
/// someone sleeps on them, and an idle worker is woken only once a batch
/// has gathered (or when the feeder needs it done): a wake-up costs a
/// system call, a job only a few microseconds.
#[derive(Default)]
struct Queue {
    st: Mutex<QState>,
    /// The worker waits here for jobs.
    work: Condvar,
    /// The feeding thread waits here for room or for an empty queue.
    room: Condvar,
}

/// Jobs gathered before an idle worker is woken.
const WAKE_JOBS: usize = 64;
/// Bytes gathered before an idle worker is woken.
const WAKE_BYTES: usize = 1 << 20;

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_room<'a>(&self, mut st: MutexGuard<'a, QState>) -> MutexGuard<'a, QState> {
        if st.idle && !st.jobs.is_empty() {
            self.work.notify_one();
        }
        st.feeder_waiting = true;
        st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        st.feeder_waiting = false;
        st
    }

    fn wake_all(&self) {
        let _st = self.lock();
        self.work.notify_all();
        self.room.notify_all();
    }
}

/// Worker threads sharing one filesystem; see the module comment.
pub struct Pool<'f> {
    fs: &'f Fs,
    queues: Vec<Queue>,
    /// Per worker, the small files gathered but not yet queued.
    open: Vec<Mutex<Open>>,
    max_bytes: usize,
    stop: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Directories made by [`Job::Mkdir`]s, by slot; `None` until made.
    dirs: Mutex<Vec<Option<Ino>>>,
    /// Signalled when a slot is filled in (or the pool stops).
    dir_made: Condvar,
}

/// Marks a worker's queue as gone however the worker ends, so the feeder
/// never waits on a worker that will not come back.
struct Gone<'a>(&'a Pool<'a>, usize);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop.store(true, Ordering::SeqCst);
        }
        let q = &self.0.queues[self.1];
        let mut st = q.lock();
        st.gone = true;
        st.busy = false;
        q.room.notify_all();
    }
}

impl<'f> Pool<'f> {
    /// The worker for entries of directory `parent`.
    pub fn worker_for(&self, parent: Dir) -> usize {
        match parent {
            Dir::Made(ino) => self.fs.geometry().ino_agno(ino).0 as usize % self.queues.len(),
            Dir::Pending { worker, .. } => worker as usize,
        }
    }

    /// Queues the making of directory `name` in `parent` (with its xattrs,
    /// ids already mapped) and returns how later jobs name it.
    pub fn mkdir(&self, parent: Dir, name: Vec<u8>, meta: Meta, xattrs: Xattrs) -> Result<Dir> {
        let ag = self.fs.next_dir_ag()?;
        let slot = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            dirs.push(None);
            u32::try_from(dirs.len() - 1)
                .map_err(|_| Error::Invalid("more than 2^32 directories".into()))?
        };
        let job = Job::Mkdir {
            parent,
            name,
            meta,
            xattrs,
            ag,
            slot,
        };
        self.push(self.worker_for(parent), job)?;
        Ok(Dir::Pending {
            slot,
            worker: (ag as usize % self.queues.len()) as u32,
        })
    }

    /// The inode of `d`, waiting until a worker has made it.
    pub fn resolve(&self, d: Dir) -> Result<Ino> {
        let slot = match d {
            Dir::Made(ino) => return Ok(ino),
            Dir::Pending { slot, .. } => slot as usize,
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match dirs.get(slot) {
                Some(Some(ino)) => return Ok(*ino),
                Some(None) => {}
                None => return Err(Error::Invalid(format!("no directory slot {slot}"))),
            }
            if self.stopped() {
                return Err(Self::stopped_error());
            }
            // The job that makes it was queued earlier, maybe to a worker
            // still waiting for more jobs before it starts.
            drop(dirs);
            self.kick();
            dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            if matches!(dirs.get(slot), Some(None)) && !self.stopped() {
                dirs = self
                    .dir_made
                    .wait_timeout(dirs, std::time::Duration::from_millis(50))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }

    /// Wakes every idle worker that has jobs queued.
    fn kick(&self) {
        for q in &self.queues {
            let st = q.lock();
            if st.idle && !st.jobs.is_empty() {
                q.work.notify_one();
            }
        }
    }

    fn made_dir(&self, slot: u32, ino: Ino) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = dirs.get_mut(slot as usize) {
            *s = Some(ino);
        }
        drop(dirs);
        self.dir_made.notify_all();
    }

    /// True once an error has stopped the pool.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        drop(slot);
        self.stop.store(true, Ordering::SeqCst);
        for q in &self.queues {
            q.wake_all();
        }
        let _dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        self.dir_made.notify_all();
    }

    fn stopped_error() -> Error {
        Error::Invalid("build stopped by an error on another thread".into())
    }

    /// Queues `job` for worker `w`, waiting while its queue is full.
    /// Consecutive small files of one parent are gathered and queued as
    /// one [`Job::Files`].
    pub fn push(&self, w: usize, job: Job) -> Result<()> {
        let mut open = self.open[w].lock().unwrap_or_else(|p| p.into_inner());
        if let Job::File { parent, data, .. } = &job {
            let (parent, n) = (*parent, data.len());
            let fits = open.parent == Some(parent)
                && open.jobs.len() < crate::namespace::BATCH_FILES
                && open.data + n <= crate::namespace::BATCH_BYTES;
            if !fits {
                self.flush_open(w, &mut open)?;
            }
            open.parent = Some(parent);
            open.data += n;
            open.jobs.push(job);
            return Ok(());
        }
        self.flush_open(w, &mut open)?;
        drop(open);
        self.enqueue(w, job)
    }

    /// Queues what `open` gathered for worker `w`.
    fn flush_open(&self, w: usize, open: &mut Open) -> Result<()> {
        let mut jobs = std::mem::take(&mut open.jobs);
        open.parent = None;
        open.data = 0;
        match jobs.len() {
            0 => Ok(()),
            1 => self.enqueue(w, jobs.remove(0)),
            _ => self.enqueue(w, Job::Files(jobs)),
        }
    }

    /// Queues every worker's gathered small files.
    fn flush_all(&self) -> Result<()> {
        for w in 0..self.open.len() {
            let mut open = self.open[w].lock().unwrap_or_else(|p| p.into_inner());
            self.flush_open(w, &mut open)?;
        }
        Ok(())
    }

    fn enqueue(&self, w: usize, job: Job) -> Result<()> {
        let n = job.bytes();
        let q = &self.queues[w];
        let mut st = q.lock();
        while !st.jobs.is_empty()
            && (st.jobs.len() >= QUEUE_JOBS || st.bytes + n > self.max_bytes)
            && !st.gone
            && !self.stopped()
        {
            st = q.wait_room(st);
        }
        if st.gone || self.stopped() {
            return Err(Self::stopped_error());
        }
        st.jobs.push_back((job, n));
        st.bytes += n;
        if st.idle && (st.jobs.len() >= WAKE_JOBS || st.bytes >= WAKE_BYTES) {
            q.work.notify_one();
        }
        Ok(())
    }

    /// Waits until every worker has run every queued job, and returns the
    /// keys of the inodes created since the last drain, with the inodes.
    pub fn drain(&self) -> Result<Vec<(Vec<u8>, Ino)>> {
        self.flush_all()?;
        let mut out = Vec::new();
        for q in &self.queues {
            let mut st = q.lock();
            while (!st.jobs.is_empty() || st.busy) && !st.gone && !self.stopped() {
                st = q.wait_room(st);
            }
            if self.stopped() || (st.gone && !st.jobs.is_empty()) {
                return Err(Self::stopped_error());
            }
            out.append(&mut st.done);
        }
        Ok(out)
    }

    /// Waits until worker `w` has run every job queued so far (what the
    /// other workers do goes on).
    pub fn settle(&self, w: usize) -> Result<()> {
        {
            let mut open = self.open[w].lock().unwrap_or_else(|p| p.into_inner());
            self.flush_open(w, &mut open)?;
        }
        let q = &self.queues[w];
        let mut st = q.lock();
        while (!st.jobs.is_empty() || st.busy) && !st.gone && !self.stopped() {
            st = q.wait_room(st);
        }
        if self.stopped() || (st.gone && !st.jobs.is_empty()) {
            return Err(Self::stopped_error());
        }
        Ok(())
    }

    fn close(&self) {
        for q in &self.queues {
            let mut st = q.lock();
            st.closed = true;
            q.work.notify_all();
        }
    }

    /// Worker `w`'s loop: takes everything queued at once and runs it in
    /// order, until the queue is closed and empty.
    fn work(&self, w: usize) {
        let _gone = Gone(self, w);
        let q = &self.queues[w];
        let mut cur: Option<Ino> = None;
        let mut made = Vec::new();
        let mut batch = VecDeque::new();
        loop {
            {
                let mut st = q.lock();
                st.done.append(&mut made);
                while st.jobs.is_empty() && !st.closed {
                    st.busy = false;
                    if st.feeder_waiting {
                        q.room.notify_all();
                    }
                    st.idle = true;
                    st = q.work.wait(st).unwrap_or_else(|p| p.into_inner());
                    st.idle = false;
                }
                if st.jobs.is_empty() {
                    return;
                }
                std::mem::swap(&mut batch, &mut st.jobs);
                st.bytes = 0;
                st.busy = true;
                if st.feeder_waiting {
                    q.room.notify_all();
                }
            }
            for (job, _) in batch.drain(..) {
                if self.stopped() {
                    continue;
                }
                if let Err(e) = self.run(job, &mut cur, &mut made) {
                    self.fail(e);
                }
            }
        }
    }

    /// Runs [`Job::File`]s of one parent as one batch
    /// ([`Fs::create_files`]); returns the keyed inodes made.
    fn run_files(&self, group: Vec<Job>) -> Result<Vec<(Vec<u8>, Ino)>> {
        let mut parent = None;
        let mut keys = Vec::with_capacity(group.len());
        let mut files = Vec::with_capacity(group.len());
        for job in group {
            if let Job::File {
                parent: p,
                name,
                key,
                meta,
                data,
                xattrs,
            } = job
            {
                parent = Some(p);
                keys.push(key);
                files.push(crate::namespace::NewFileOwned {
                    name,
                    meta,
                    data,
                    xattrs,
                });
            }
        }
        let Some(parent) = parent else {
            return Ok(Vec::new());
        };
        let inos = self.fs.create_files_owned(self.resolve(parent)?, files)?;
        Ok(keys
            .into_iter()
            .zip(inos)
            .filter_map(|(k, ino)| k.map(|k| (k, ino)))
            .collect())
    }

    /// Runs one job; the keyed inodes it makes go to `made`.
    fn run(&self, job: Job, cur: &mut Option<Ino>, made: &mut Vec<(Vec<u8>, Ino)>) -> Result<()> {
        let fs = self.fs;
        let m = match job {
            Job::File {
                parent,
                name,
                key,
                meta,
                data,
                xattrs,
            } => {
                let refs: Vec<(&[u8], &[u8])> =
                    xattrs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
                let parent = self.resolve(parent)?;
                let ino = fs.create_file(parent, &name, &meta, data.as_slice(), &refs)?;
                key.map(|k| (k, ino))
            }
            Job::Create {
                parent,
                name,
                key,
                kind,
                meta,
                xattrs,
            } => {
                let ino = fs.create(self.resolve(parent)?, &name, &kind, &meta)?;
                for (n, v) in &xattrs {
                    fs.set_xattr_opt(ino, n, v, false)?;
                }
                *cur = Some(ino);
                key.map(|k| (k, ino))
            }
            Job::Data { offset, data } => {
                let ino =
                    cur.ok_or_else(|| Error::Invalid("file data queued without its file".into()))?;
                fs.write_owned(ino, offset, data, false)?;
                None
            }
            Job::Link {
                parent,
                name,
                target,
            } => {
                fs.link(self.resolve(parent)?, &name, target)?;
                None
            }
            Job::Mkdir {
                parent,
                name,
                meta,
                xattrs,
                ag,
                slot,
            } => {
                let ino = fs.mkdir_from(self.resolve(parent)?, &name, &meta, ag)?;
                for (n, v) in &xattrs {
                    fs.set_xattr_opt(ino, n, v, false)?;
                }
                self.made_dir(slot, ino);
                None
            }
            Job::SetMeta { dir, meta } => {
                fs.set_meta(self.resolve(dir)?, &meta)?;
                None
            }
            Job::SetXattrs { dir, xattrs } => {
                let ino = self.resolve(dir)?;
                for (n, v) in &xattrs {
                    fs.set_xattr_opt(ino, n, v, false)?;
                }
                None
            }
            Job::Files(group) => {
                made.extend(self.run_files(group)?);
                None
            }
        };
        made.extend(m);
        Ok(())
    }
}

/// Runs `body` on this thread with a pool of `jobs` workers (at most one
/// per AG) writing into `fs`, then lets the workers finish what is queued. Returns the first
/// error of a worker (ahead of the error `body` saw because of it), else
/// `body`'s result.
pub fn with_pool<R>(fs: &Fs, jobs: usize, body: impl FnOnce(&Pool<'_>) -> Result<R>) -> Result<R> {
    // Entries go to workers by AG: more workers than AGs would idle.
    let jobs = jobs.clamp(1, (fs.geometry().ag_count as usize).max(1));
    let pool = Pool {
        fs,
        queues: (0..jobs).map(|_| Queue::default()).collect(),
        open: (0..jobs).map(|_| Mutex::new(Open::default())).collect(),
        // A worker's batch in hand and its queue each hold up to this.
        max_bytes: (QUEUE_BYTES / jobs / 2).max(super::feed::CHUNK_BYTES),
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        dirs: Mutex::new(Vec::new()),
        dir_made: Condvar::new(),
    };
    let r = std::thread::scope(|sc| {
        let mut r = Ok(());
        for w in 0..jobs {
            let p = &pool;
            if let Err(e) = std::thread::Builder::new()
                .name(format!("xfskit-build-{w}"))
                .spawn_scoped(sc, move || p.work(w))
            {
                r = Err(Error::Io(e));
                break;
            }
        }
        let r = r
            .and_then(|()| body(&pool))
            .and_then(|v| pool.flush_all().map(|()| v));
        if r.is_err() {
            pool.stop.store(true, Ordering::SeqCst);
        }
        pool.close();
        r
    });
    let first = pool.error.into_inner().unwrap_or_else(|p| p.into_inner());
    match first {
        Some(e) => Err(e),
        None => r,
    }
}

//! An ordered read-ahead pipeline: one producer lays out a sequence of
//! steps, a pool of worker threads does the slow part of each step (source
//! I/O) in parallel, and the calling thread consumes the results in exactly
//! the order the producer gave them.
//!
//! Memory is bounded two ways: at most [`Window::max_entries`] steps are in
//! flight between the producer and the consumer, and workers reserve the
//! bytes they are about to hold ([`Budget::reserve`]) against
//! [`Window::max_bytes`]. The step the consumer waits for may always go
//! over the byte limit, so the pipeline never stalls on one large step.
//!
//! Errors travel in order like any result: the consumer sees the first
//! failing step of the sequence, whatever thread hit it first.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// How far ahead the pipeline may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Worker threads (at least 1).
    pub readers: usize,
    /// Bytes that workers may hold for steps not yet consumed.
    pub max_bytes: usize,
    /// Steps between the producer and the consumer.
    pub max_entries: usize,
}

impl Default for Window {
    fn default() -> Window {
        // 32 readers: a cold source of small files is bound by the disk's
        // random reads, which it serves faster the more are queued (200,000
        // files of 4 KiB, cold: 9.0 s with 8 readers, 6.5 s with 32, 6.4 s
        // with 64); a warm one costs a few idle threads.
        Window {
            readers: 32,
            max_bytes: 64 << 20,
            max_entries: 4096,
        }
    }
}

impl Window {
    /// The default window, with `XFSKIT_BUILD_READERS`,
    /// `XFSKIT_BUILD_WINDOW_MIB` and `XFSKIT_BUILD_WINDOW_ENTRIES` from the
    /// environment when they are set to numbers.
    pub fn from_env() -> Window {
        let get = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        };
        let mut w = Window::default();
        if let Some(n) = get("XFSKIT_BUILD_READERS") {
            w.readers = n.clamp(1, 256);
        }
        if let Some(n) = get("XFSKIT_BUILD_WINDOW_MIB") {
            w.max_bytes = n.clamp(1, 1 << 16) << 20;
        }
        if let Some(n) = get("XFSKIT_BUILD_WINDOW_ENTRIES") {
            w.max_entries = n.clamp(1, 1 << 20);
        }
        w
    }
}

enum Slot<T> {
    Pending,
    Done(Result<T>, usize),
}

/// Steps handed over under one lock.
const BATCH: usize = 64;

struct State<J, T> {
    jobs: VecDeque<(u64, J)>,
    /// Results from sequence number `base` on.
    slots: VecDeque<Slot<T>>,
    base: u64,
    bytes: usize,
    producer_done: bool,
    stop: bool,
    /// Workers asleep and not yet woken.
    idle_workers: usize,
    consumer_waiting: bool,
    producer_waiting: bool,
    byte_waiters: usize,
}

struct Shared<J, T> {
    win: Window,
    state: Mutex<State<J, T>>,
    work_cv: Condvar,
    ready_cv: Condvar,
    space_cv: Condvar,
    bytes_cv: Condvar,
}

fn stopped() -> Error {
    Error::Invalid("the build source pipeline was stopped".into())
}

impl<J, T> Shared<J, T> {
    fn lock(&self) -> MutexGuard<'_, State<J, T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(
        &self,
        cv: &Condvar,
        s: MutexGuard<'a, State<J, T>>,
    ) -> MutexGuard<'a, State<J, T>> {
        cv.wait(s).unwrap_or_else(|p| p.into_inner())
    }

    fn wake_workers(&self, s: &mut State<J, T>, n: usize) {
        for _ in 0..n.min(s.idle_workers) {
            s.idle_workers -= 1;
            self.work_cv.notify_one();
        }
    }
}

enum Pending<J, T> {
    Ready(T),
    Job(J),
}

/// The producer's side: hands steps to the pipeline in order, in batches.
pub struct Producer<'a, J, T> {
    shared: &'a Shared<J, T>,
    batch: Vec<Pending<J, T>>,
}

impl<J, T> Producer<'_, J, T> {
    /// A step whose result is already known.
    pub fn ready(&mut self, item: T) -> Result<()> {
        self.batch.push(Pending::Ready(item));
        if self.batch.len() >= self.batch_max() {
            self.flush()?;
        }
        Ok(())
    }

    /// A step a worker completes.
    pub fn job(&mut self, job: J) -> Result<()> {
        self.batch.push(Pending::Job(job));
        if self.batch.len() >= self.batch_max() {
            self.flush()?;
        }
        Ok(())
    }

    fn batch_max(&self) -> usize {
        BATCH.min(self.shared.win.max_entries).max(1)
    }

    /// Hands over the steps given so far (call before slow work, so the
    /// workers and the consumer need not wait for them).
    pub fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let sh = self.shared;
        let max = sh.win.max_entries.max(1);
        let mut s = sh.lock();
        // Wait for room for the batch; once full, until half the window
        // is free again, so the consumer need not wake us for every step.
        if s.slots.len() + self.batch.len() > max.max(self.batch.len()) {
            while !s.stop && s.slots.len() > max / 2 {
                s.producer_waiting = true;
                s = sh.wait(&sh.space_cv, s);
            }
            s.producer_waiting = false;
        }
        if s.stop {
            return Err(stopped());
        }
        let was_empty = s.slots.is_empty();
        let mut jobs = 0;
        for p in self.batch.drain(..) {
            let seq = s.base + s.slots.len() as u64;
            match p {
                Pending::Ready(t) => s.slots.push_back(Slot::Done(Ok(t), 0)),
                Pending::Job(j) => {
                    s.slots.push_back(Slot::Pending);
                    s.jobs.push_back((seq, j));
                    jobs += 1;
                }
            }
        }
        sh.wake_workers(&mut s, jobs);
        if was_empty && s.consumer_waiting && matches!(s.slots.front(), Some(Slot::Done(..))) {
            sh.ready_cv.notify_one();
        }
        Ok(())
    }
}

/// Results a worker finished but has not published yet.
type Finished<T> = Vec<(u64, Result<T>, usize)>;

/// A worker's handle on the byte window for the step it works on.
pub struct Budget<'a, 'b, J, T> {
    shared: &'a Shared<J, T>,
    seq: u64,
    reserved: usize,
    finished: &'b mut Finished<T>,
}

impl<J, T> Budget<'_, '_, J, T> {
    /// Waits until `bytes` more fit in the byte window (or this step is the
    /// one the consumer waits for), then counts them as held until the
    /// consumer has taken the step.
    pub fn reserve(&mut self, bytes: usize) -> Result<()> {
        let sh = self.shared;
        let mut s = sh.lock();
        if s.bytes + bytes > sh.win.max_bytes && s.base != self.seq {
            // Earlier steps of this worker's batch may be what the
            // consumer needs before it frees anything.
            publish(sh, &mut s, self.finished);
        }
        while !s.stop && s.bytes + bytes > sh.win.max_bytes && s.base != self.seq {
            s.byte_waiters += 1;
            s = sh.wait(&sh.bytes_cv, s);
            s.byte_waiters -= 1;
        }
        if s.stop {
            return Err(stopped());
        }
        s.bytes += bytes;
        self.reserved += bytes;
        Ok(())
    }
}

/// The consumer's side: takes results in order.
pub struct Consumer<'a, J, T> {
    shared: &'a Shared<J, T>,
    /// Results taken but not yet handed out, with their bytes.
    taken: VecDeque<Result<T>>,
    held: usize,
}

impl<J, T> Consumer<'_, J, T> {
    /// The next result in order; `None` after the last. Results are taken
    /// in batches; their bytes are released when the next batch is taken.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<T>> {
        if let Some(r) = self.taken.pop_front() {
            return r.map(Some);
        }
        let sh = self.shared;
        let mut s = sh.lock();
        s.bytes -= std::mem::take(&mut self.held);
        loop {
            while self.taken.len() < BATCH && matches!(s.slots.front(), Some(Slot::Done(..))) {
                let Some(Slot::Done(r, cost)) = s.slots.pop_front() else {
                    unreachable!("front slot checked above");
                };
                s.base += 1;
                self.held += cost;
                self.taken.push_back(r);
            }
            if s.producer_waiting && s.slots.len() <= sh.win.max_entries / 2 {
                sh.space_cv.notify_one();
            }
            if s.byte_waiters > 0 {
                sh.bytes_cv.notify_all();
            }
            if let Some(r) = self.taken.pop_front() {
                return r.map(Some);
            }
            if s.slots.is_empty() && s.producer_done {
                return Ok(None);
            }
            s.consumer_waiting = true;
            s = sh.wait(&sh.ready_cv, s);
            s.consumer_waiting = false;
        }
    }
}

/// Puts finished results into their slots.
fn publish<J, T>(sh: &Shared<J, T>, s: &mut State<J, T>, finished: &mut Finished<T>) {
    for (seq, r, cost) in finished.drain(..) {
        let Some(i) = seq.checked_sub(s.base).map(|i| i as usize) else {
            continue;
        };
        if let Some(slot) = s.slots.get_mut(i) {
            *slot = Slot::Done(r, cost);
            if i == 0 && s.consumer_waiting {
                sh.ready_cv.notify_one();
            }
        }
    }
}

/// Most steps a worker takes at once (fewer when the queue is short).
const WORKER_BATCH: usize = 8;

#[allow(clippy::type_complexity)]
fn worker<J, T>(
    sh: &Shared<J, T>,
    work: &(dyn Fn(J, &mut Budget<'_, '_, J, T>) -> Result<T> + Sync),
) {
    let mut mine: VecDeque<(u64, J)> = VecDeque::new();
    let mut finished: Finished<T> = Vec::new();
    let mut s = sh.lock();
    loop {
        publish(sh, &mut s, &mut finished);
        loop {
            if s.stop {
                return;
            }
            if !s.jobs.is_empty() {
                let k = (s.jobs.len() / (2 * sh.win.readers.max(1))).clamp(1, WORKER_BATCH);
                let take = k.min(s.jobs.len());
                mine.extend(s.jobs.drain(..take));
                break;
            }
            if s.producer_done {
                return;
            }
            s.idle_workers += 1;
            s = sh.wait(&sh.work_cv, s);
        }
        drop(s);
        while let Some((seq, job)) = mine.pop_front() {
            let mut budget = Budget {
                shared: sh,
                seq,
                reserved: 0,
                finished: &mut finished,
            };
            let r = work(job, &mut budget);
            let cost = budget.reserved;
            finished.push((seq, r, cost));
        }
        s = sh.lock();
    }
}

/// Runs `produce` on one thread and `win.readers` workers applying `work`,
/// while `consume` takes the results in order on the calling thread. When
/// `consume` returns (done or failed) the other threads stop and are
/// joined. A failed `produce` shows up as an error after the steps it
/// produced.
pub fn run<J, T, R>(
    win: Window,
    produce: impl FnOnce(&mut Producer<'_, J, T>) -> Result<()> + Send,
    work: impl Fn(J, &mut Budget<'_, '_, J, T>) -> Result<T> + Sync,
    consume: impl FnOnce(&mut Consumer<'_, J, T>) -> Result<R>,
) -> Result<R>
where
    J: Send,
    T: Send,
{
    let shared = Shared {
        win,
        state: Mutex::new(State {
            jobs: VecDeque::new(),
            slots: VecDeque::new(),
            base: 0,
            bytes: 0,
            producer_done: false,
            stop: false,
            idle_workers: 0,
            consumer_waiting: false,
            producer_waiting: false,
            byte_waiters: 0,
        }),
        work_cv: Condvar::new(),
        ready_cv: Condvar::new(),
        space_cv: Condvar::new(),
        bytes_cv: Condvar::new(),
    };
    let sh = &shared;
    let work = &work;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            super::readahead::yield_cpu();
            let mut p = Producer {
                shared: sh,
                batch: Vec::with_capacity(BATCH),
            };
            let r = produce(&mut p).and_then(|()| p.flush());
            if r.is_err() {
                // Steps before the failure still come first.
                let _ = p.flush();
            }
            let mut s = sh.lock();
            if let Err(e) = r {
                if !s.stop {
                    s.slots.push_back(Slot::Done(Err(e), 0));
                }
            }
            s.producer_done = true;
            sh.work_cv.notify_all();
            sh.ready_cv.notify_all();
        });
        for _ in 0..win.readers.max(1) {
            scope.spawn(move || {
                super::readahead::yield_cpu();
                worker(sh, work)
            });
        }
        let mut c = Consumer {
            shared: sh,
            taken: VecDeque::new(),
            held: 0,
        };
        let r = consume(&mut c);
        let mut s = sh.lock();
        s.stop = true;
        s.jobs.clear();
        sh.work_cv.notify_all();
        sh.space_cv.notify_all();
        sh.bytes_cv.notify_all();
        sh.ready_cv.notify_all();
        drop(s);
        r
    })
}

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
        Window {
            readers: 8,
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

struct State<J, T> {
    jobs: VecDeque<(u64, J)>,
    /// Results from sequence number `base` on.
    slots: VecDeque<Slot<T>>,
    base: u64,
    bytes: usize,
    producer_done: bool,
    stop: bool,
    idle_workers: usize,
    consumer_waiting: bool,
    space_waiters: usize,
}

struct Shared<J, T> {
    win: Window,
    state: Mutex<State<J, T>>,
    work_cv: Condvar,
    ready_cv: Condvar,
    space_cv: Condvar,
}

fn stopped() -> Error {
    Error::Invalid("the build source pipeline was stopped".into())
}

impl<J, T> Shared<J, T> {
    fn lock(&self) -> MutexGuard<'_, State<J, T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until another step fits in the entry window; returns its number.
    fn admit<'a>(&'a self, mut s: MutexGuard<'a, State<J, T>>) -> Result<MutexGuard<'a, State<J, T>>> {
        while !s.stop && s.slots.len() >= self.win.max_entries.max(1) {
            s.space_waiters += 1;
            s = self.space_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            s.space_waiters -= 1;
        }
        if s.stop {
            return Err(stopped());
        }
        Ok(s)
    }
}

/// The producer's side: hands steps to the pipeline in order.
pub struct Producer<'a, J, T> {
    shared: &'a Shared<J, T>,
}

impl<J, T> Producer<'_, J, T> {
    /// A step whose result is already known.
    pub fn ready(&mut self, item: T) -> Result<()> {
        let s = self.shared.admit(self.shared.lock())?;
        self.push_done(s, Ok(item));
        Ok(())
    }

    fn push_done(&self, mut s: MutexGuard<'_, State<J, T>>, r: Result<T>) {
        s.slots.push_back(Slot::Done(r, 0));
        if s.slots.len() == 1 && s.consumer_waiting {
            self.shared.ready_cv.notify_one();
        }
    }

    /// A step a worker completes.
    pub fn job(&mut self, job: J) -> Result<()> {
        let mut s = self.shared.admit(self.shared.lock())?;
        let seq = s.base + s.slots.len() as u64;
        s.slots.push_back(Slot::Pending);
        s.jobs.push_back((seq, job));
        if s.idle_workers > 0 {
            self.shared.work_cv.notify_one();
        }
        Ok(())
    }
}

/// A worker's handle on the byte window for the step it works on.
pub struct Budget<'a, J, T> {
    shared: &'a Shared<J, T>,
    seq: u64,
    reserved: usize,
}

impl<J, T> Budget<'_, J, T> {
    /// Waits until `bytes` more fit in the byte window (or this step is the
    /// one the consumer waits for), then counts them as held until the
    /// consumer has taken the step.
    pub fn reserve(&mut self, bytes: usize) -> Result<()> {
        let sh = self.shared;
        let mut s = sh.lock();
        while !s.stop && s.bytes + bytes > sh.win.max_bytes && s.base != self.seq {
            s.space_waiters += 1;
            s = sh.space_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            s.space_waiters -= 1;
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
    held: usize,
}

impl<J, T> Consumer<'_, J, T> {
    /// The next result in order; `None` after the last. Taking a result
    /// releases the bytes of the one taken before.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<T>> {
        let sh = self.shared;
        let mut s = sh.lock();
        s.bytes -= std::mem::take(&mut self.held);
        loop {
            if matches!(s.slots.front(), Some(Slot::Done(..))) {
                let Some(Slot::Done(r, cost)) = s.slots.pop_front() else {
                    unreachable!("front slot checked above");
                };
                s.base += 1;
                self.held = cost;
                if s.space_waiters > 0 {
                    sh.space_cv.notify_all();
                }
                return r.map(Some);
            }
            if s.slots.is_empty() && s.producer_done {
                return Ok(None);
            }
            if s.space_waiters > 0 {
                sh.space_cv.notify_all();
            }
            s.consumer_waiting = true;
            s = sh.ready_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            s.consumer_waiting = false;
        }
    }
}

fn worker<J, T>(sh: &Shared<J, T>, work: &(dyn Fn(J, &mut Budget<'_, J, T>) -> Result<T> + Sync)) {
    loop {
        let (seq, job) = {
            let mut s = sh.lock();
            loop {
                if s.stop {
                    return;
                }
                if let Some(j) = s.jobs.pop_front() {
                    break j;
                }
                if s.producer_done {
                    return;
                }
                s.idle_workers += 1;
                s = sh.work_cv.wait(s).unwrap_or_else(|p| p.into_inner());
                s.idle_workers -= 1;
            }
        };
        let mut budget = Budget {
            shared: sh,
            seq,
            reserved: 0,
        };
        let r = work(job, &mut budget);
        let mut s = sh.lock();
        let Some(i) = seq.checked_sub(s.base).map(|i| i as usize) else {
            return;
        };
        if let Some(slot) = s.slots.get_mut(i) {
            *slot = Slot::Done(r, budget.reserved);
            if i == 0 && s.consumer_waiting {
                sh.ready_cv.notify_one();
            }
        }
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
    work: impl Fn(J, &mut Budget<'_, J, T>) -> Result<T> + Sync,
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
            space_waiters: 0,
        }),
        work_cv: Condvar::new(),
        ready_cv: Condvar::new(),
        space_cv: Condvar::new(),
    };
    let sh = &shared;
    let work = &work;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut p = Producer { shared: sh };
            let r = produce(&mut p);
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
            scope.spawn(move || worker(sh, work));
        }
        let mut c = Consumer {
            shared: sh,
            held: 0,
        };
        let r = consume(&mut c);
        let mut s = sh.lock();
        s.stop = true;
        s.jobs.clear();
        sh.work_cv.notify_all();
        sh.space_cv.notify_all();
        sh.ready_cv.notify_all();
        drop(s);
        r
    })
}

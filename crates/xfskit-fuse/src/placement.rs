//! Where the kernel wakes a process whose FUSE request was answered.
//!
//! A queue thread of [`crate::uring`] answers on the CPU the request was
//! made on, and the waiting process should run next on that same CPU. But
//! while the thread runs the scheduler sees that CPU as busy and wakes the
//! process on an idle one instead: every round trip then pays a wake-up of
//! another CPU, which on a small virtual machine costs more than serving
//! the request (5,000 small files: 1.3 s; the same with the writer pinned
//! to one CPU: 0.6 s). The scheduler treats a CPU that runs only
//! SCHED_IDLE tasks as free, so queue threads run SCHED_IDLE: the process
//! is woken where it was and takes the CPU back at once.
//!
//! SCHED_IDLE threads all but stop when a normal task wants their CPU, and
//! the threads are pinned, so a watcher thread (normal priority) bounds
//! that: every few milliseconds while requests flow it looks at each queue
//! thread (/proc/self/task/TID/stat and schedstat) and puts one that is
//! kept waiting for its CPU back to the normal policy for a while. Being
//! preempted by the process it just answered is the point and is short
//! (tens of microseconds a time); waiting runnable through a whole tick,
//! or long waits on average, mean another task holds the CPU.
//! When requests stop, the watcher parks and leaves every thread normal.
//! `XFSKIT_URING_NORMAL=1` in the environment keeps them normal throughout
//! (to measure the difference).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How often the watcher looks while requests flow.
const TICK: Duration = Duration::from_millis(5);
/// Average wait for the CPU per run that counts as competition for it
/// (being preempted by the answered process costs that process's time
/// between two requests: tens of microseconds for a tight loop).
const LONG_WAIT_NS: u64 = 2_000_000;
/// How long a thread that met competition stays at the normal policy.
const NORMAL_FOR: Duration = Duration::from_millis(500);
/// Ticks without a request before the watcher parks.
const QUIET_TICKS: u32 = 20;

/// Shared by the queue threads and the watcher.
pub(crate) struct Placement {
    served: AtomicU64,
    parked: AtomicBool,
    tids: Mutex<Vec<i32>>,
    watcher: OnceLock<Thread>,
}

impl Placement {
    /// Starts the watcher (none with `XFSKIT_URING_NORMAL` set); queue
    /// threads then [`Placement::join`].
    pub(crate) fn start() -> &'static Placement {
        let p: &'static Placement = Box::leak(Box::new(Placement {
            served: AtomicU64::new(0),
            parked: AtomicBool::new(true),
            tids: Mutex::new(Vec::new()),
            watcher: OnceLock::new(),
        }));
        if std::env::var_os("XFSKIT_URING_NORMAL").is_some() {
            return p;
        }
        match std::thread::Builder::new()
            .name("xfskit-placer".into())
            .spawn(move || p.watch())
        {
            Ok(h) => {
                let _ = p.watcher.set(h.thread().clone());
            }
            Err(e) => eprintln!("xfskit-fuse: no placement watcher ({e}); queues stay normal"),
        }
        p
    }

    /// Registers the calling queue thread, or write-behind worker (it
    /// starts at the normal policy).
    pub(crate) fn join(&self) {
        let tid = nix::unistd::gettid().as_raw();
        self.tids.lock().unwrap().push(tid);
    }

    /// Called by a queue thread for each request it serves.
    pub(crate) fn served(&self) {
        self.served.fetch_add(1, Relaxed);
        if self.parked.load(Relaxed) && self.parked.swap(false, Relaxed) {
            if let Some(w) = self.watcher.get() {
                w.unpark();
            }
        }
    }

    fn watch(&self) {
        // Per thread: its counters at the last tick, and until when it
        // stays normal (None: it runs SCHED_IDLE).
        let mut seen: Vec<(i32, Sched, Option<Instant>, Files)> = Vec::new();
        let mut last = 0;
        let mut quiet = 0;
        loop {
            if self.parked.load(Relaxed) {
                // Nothing flows: leave every thread normal, so that the
                // next request is served at once whatever else runs.
                for t in &mut seen {
                    if t.2.is_none() {
                        set_idle(t.0, false);
                    }
                    t.2 = Some(Instant::now());
                }
                std::thread::park();
                for t in &mut seen {
                    t.1 = Sched::of(&t.3);
                }
                quiet = 0;
                continue;
            }
            std::thread::sleep(TICK);
            for &tid in self.tids.lock().unwrap().iter() {
                if !seen.iter().any(|t| t.0 == tid) {
                    let files = Files::of(tid);
                    seen.push((tid, Sched::of(&files), Some(Instant::now()), files));
                }
            }
            let now = Instant::now();
            for t in &mut seen {
                let mut cur = Sched::of(&t.3);
                let contended = cur.kept_waiting_since(&t.1, &t.3);
                t.1 = cur;
                match t.2 {
                    None if contended => {
                        set_idle(t.0, false);
                        t.2 = Some(now + NORMAL_FOR);
                    }
                    Some(_) if contended => t.2 = Some(now + NORMAL_FOR),
                    Some(until) if now >= until => {
                        set_idle(t.0, true);
                        t.2 = None;
                    }
                    _ => {}
                }
            }
            let s = self.served.load(Relaxed);
            if s == last {
                quiet += 1;
                if quiet >= QUIET_TICKS {
                    self.parked.store(true, Relaxed);
                    // A request that came after the last look unparks us
                    // (served() saw `parked`), or is seen here.
                    if self.served.load(Relaxed) != s {
                        self.parked.store(false, Relaxed);
                    }
                }
            } else {
                quiet = 0;
                last = s;
            }
        }
    }
}

/// A queue thread's scheduler files, kept open (a read at offset 0 gives
/// fresh contents).
struct Files {
    stat: Option<std::fs::File>,
    schedstat: Option<std::fs::File>,
}

impl Files {
    fn of(tid: i32) -> Files {
        let open = |f: &str| std::fs::File::open(format!("/proc/self/task/{tid}/{f}")).ok();
        Files {
            stat: open("stat"),
            schedstat: open("schedstat"),
        }
    }
}

fn read_fresh(f: &Option<std::fs::File>, buf: &mut [u8]) -> usize {
    use std::os::unix::fs::FileExt;
    f.as_ref().and_then(|f| f.read_at(buf, 0).ok()).unwrap_or(0)
}

/// What the scheduler reports of a thread.
#[derive(Default)]
struct Sched {
    /// Seen runnable at this look (only looked at when it had little CPU).
    runnable: bool,
    /// Nanoseconds waiting runnable, and runs (schedstat).
    waited: u64,
    runs: u64,
}

impl Sched {
    fn of(files: &Files) -> Sched {
        let mut buf = [0u8; 128];
        let n = read_fresh(&files.schedstat, &mut buf);
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        let mut f = text
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        let _on_cpu = f.next();
        Sched {
            runnable: false,
            waited: f.next().unwrap_or(0),
            runs: f.next().unwrap_or(0),
        }
    }

    /// Whether another task kept the thread from its CPU since `before`:
    /// it waited long on average, or it was runnable at both looks and did
    /// not run in between (waiting for the CPU, not for requests).
    fn kept_waiting_since(&mut self, before: &Sched, files: &Files) -> bool {
        let runs = self.runs.saturating_sub(before.runs);
        let waited = self.waited.saturating_sub(before.waited);
        if runs > 0 && waited / runs > LONG_WAIT_NS {
            return true;
        }
        if runs > 0 {
            return false;
        }
        let mut buf = [0u8; 512];
        let n = read_fresh(&files.stat, &mut buf);
        // The state follows the parenthesised command name.
        let text = &buf[..n];
        let state = text
            .iter()
            .rposition(|&b| b == b')')
            .and_then(|i| text.get(i + 2));
        self.runnable = state == Some(&b'R');
        self.runnable && before.runnable
    }
}

/// Whether the calling thread runs SCHED_IDLE (the watcher's choice).
#[allow(unsafe_code)]
pub(crate) fn running_idle() -> bool {
    // SAFETY: a plain system call about the calling thread.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}

/// Puts thread `tid` at SCHED_IDLE or back at the normal policy.
#[allow(unsafe_code)]
fn set_idle(tid: i32, idle: bool) {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain system call on a thread of this process, with a
    // valid parameter block; failure leaves the policy as it was.
    unsafe {
        libc::sched_setscheduler(tid, policy, &param);
    }
}

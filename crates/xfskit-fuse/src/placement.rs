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
    /// Serving threads of /dev/fuse (fuser's `fuser-N`) to find, pin and
    /// watch; 0 for io_uring queues, which join themselves.
    dev_threads: usize,
}

/// How often a parked watcher of /dev/fuse threads looks whether requests
/// flow again (nothing tells it: fuser's threads have no hook per request):
/// first after 100 ms, then less often the longer nothing comes, up to
/// once a second (an idle mount costs a look a second; the threads serve
/// at the normal policy meanwhile, as before the placement).
const DEV_POLL: Duration = Duration::from_millis(100);
const DEV_POLL_MAX: Duration = Duration::from_secs(1);

impl Placement {
    /// Starts the watcher (none with `XFSKIT_URING_NORMAL` set); queue
    /// threads then [`Placement::join`].
    pub(crate) fn start() -> &'static Placement {
        Placement::start_with(0)
    }

    /// The same for the `threads` serving threads that fuser starts on
    /// /dev/fuse (named `fuser-0`...): the watcher finds them, pins thread
    /// N to the N-th CPU this process may use and runs them SCHED_IDLE
    /// while requests flow. /dev/fuse wakes whichever thread waited
    /// longest, but the thread on the requester's CPU, preempted by the
    /// requester it has just answered, reads the next request before the
    /// woken one gets there: the round trip stays on one CPU (20,000 small
    /// files: 7.0 s unpinned at the normal policy, 3.9 s so).
    pub(crate) fn start_dev(threads: usize) -> &'static Placement {
        Placement::start_with(threads.max(1))
    }

    fn start_with(dev_threads: usize) -> &'static Placement {
        let p: &'static Placement = Box::leak(Box::new(Placement {
            served: AtomicU64::new(0),
            parked: AtomicBool::new(true),
            tids: Mutex::new(Vec::new()),
            watcher: OnceLock::new(),
            dev_threads,
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

    /// Finds fuser's serving threads not yet watched, pins each to a CPU
    /// and watches it.
    fn find_dev_threads(&self) {
        if self.tids.lock().unwrap().len() >= self.dev_threads {
            return;
        }
        let cpus = allowed_cpus();
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let Some(n) = comm
                .trim()
                .strip_prefix("fuser-")
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let mut tids = self.tids.lock().unwrap();
            if tids.contains(&tid) {
                continue;
            }
            if let Some(&cpu) = cpus.get(n % cpus.len().max(1)) {
                let mut set = nix::sched::CpuSet::new();
                if set.set(cpu).is_ok() {
                    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set);
                }
            }
            tids.push(tid);
        }
    }

    /// Starts watching threads that joined since; true if there were any.
    fn see_new(&self, seen: &mut Vec<(i32, Sched, Option<Instant>, Files)>) -> bool {
        let before = seen.len();
        for &tid in self.tids.lock().unwrap().iter() {
            if !seen.iter().any(|t| t.0 == tid) {
                let files = Files::of(tid);
                seen.push((tid, Sched::of(&files), Some(Instant::now()), files));
            }
        }
        seen.len() > before
    }

    /// What shows requests flowing: the count queue threads report, and
    /// for /dev/fuse threads how often they ran at the last look (`t.1`).
    fn activity(&self, seen: &[(i32, Sched, Option<Instant>, Files)]) -> u64 {
        let mut a = self.served.load(Relaxed);
        if self.dev_threads > 0 {
            a += seen.iter().map(|t| t.1.runs).sum::<u64>();
        }
        a
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
                if self.dev_threads > 0 {
                    let mut was = self.activity(&seen);
                    let mut wait = DEV_POLL;
                    loop {
                        std::thread::park_timeout(wait);
                        wait = (wait * 2).min(DEV_POLL_MAX);
                        self.find_dev_threads();
                        let new = self.see_new(&mut seen);
                        for t in &mut seen {
                            t.1 = Sched::of(&t.3);
                        }
                        if new {
                            was = self.activity(&seen);
                        } else if self.activity(&seen) != was {
                            self.parked.store(false, Relaxed);
                            break;
                        }
                    }
                } else {
                    std::thread::park();
                }
                for t in &mut seen {
                    t.1 = Sched::of(&t.3);
                }
                quiet = 0;
                continue;
            }
            std::thread::sleep(TICK);
            self.see_new(&mut seen);
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
            let s = self.activity(&seen);
            if s == last {
                quiet += 1;
                if quiet >= QUIET_TICKS {
                    self.parked.store(true, Relaxed);
                    // A request that came after the last look unparks us
                    // (served() saw `parked`), or is seen here.
                    if self.activity(&seen) != s {
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

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
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

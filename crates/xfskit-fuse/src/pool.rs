//! Worker threads for READ requests, used only when reads overlap.
//!
//! One serving thread answers a lone synchronous reader fastest: a random
//! 4 KiB read then costs one wake-up of that thread and one disk read, and
//! a second thread only adds hand-offs. But a reader that keeps several
//! requests outstanding (several processes, or the kernel's asynchronous
//! readahead) would wait for each disk read in turn. So the serving thread
//! keeps a READ for itself when nothing else is in flight and nothing is
//! queued in the FUSE device, and otherwise hands it to a pool of workers
//! (started on the first hand-off) and goes back for the next request,
//! letting the disk work on several reads at once.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// A queued piece of work.
type Job = Box<dyn FnOnce(Finished<'_>) + Send + 'static>;

/// Handed to a job: call [`Finished::now`] once the work is done but before
/// answering the kernel. A lone reader's next request can arrive as soon as
/// it has its answer; if the job still counted as in flight then, that
/// request would be handed off too, and a lone reader would stay on the
/// workers for good.
pub struct Finished<'a>(Option<&'a AtomicUsize>);

impl Default for Finished<'_> {
    /// A job that was never counted (run on the thread that received it).
    fn default() -> Self {
        Finished(None)
    }
}

impl Finished<'_> {
    /// Stops counting the job as in flight (also done on drop).
    pub fn now(&mut self) {
        if let Some(n) = self.0.take() {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.now();
    }
}

/// A lazily started pool of threads for READ requests.
pub struct ReadPool {
    /// Workers to start on the first hand-off (0: never hand off).
    workers: usize,
    /// Workers actually started (set on the first hand-off).
    started: OnceLock<usize>,
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// Jobs handed off and not finished yet.
    in_flight: AtomicUsize,
    /// A duplicate of the FUSE device descriptor, polled to see whether the
    /// kernel has more requests waiting.
    dev: OnceLock<OwnedFd>,
}

impl ReadPool {
    /// A pool of `workers` threads (none started yet).
    pub fn new(workers: usize) -> ReadPool {
        ReadPool {
            workers,
            started: OnceLock::new(),
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            in_flight: AtomicUsize::new(0),
            dev: OnceLock::new(),
        }
    }

    /// Lets the pool watch the FUSE device `fd` for waiting requests.
    /// Without it every READ is served by the thread that received it.
    pub fn watch(&self, fd: OwnedFd) {
        let _ = self.dev.set(fd);
    }

    /// Whether a READ received now should go to a worker: some hand-off is
    /// still running, or the kernel has more requests queued.
    pub fn should_hand_off(&self) -> bool {
        if self.workers == 0 {
            return false;
        }
        let Some(dev) = self.dev.get() else {
            return false;
        };
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return true;
        }
        requests_waiting(dev)
    }

    /// Runs `job` on a worker; runs it here if no worker can be started.
    pub fn hand_off(&'static self, job: impl FnOnce(Finished<'_>) + Send + 'static) {
        if !self.start() {
            return job(Finished(None));
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        match self.queue.lock() {
            Ok(mut q) => q.push_back(Box::new(job)),
            Err(_) => {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                return job(Finished(None));
            }
        }
        self.ready.notify_one();
    }

    /// Starts the workers once; false if none could be started.
    fn start(&'static self) -> bool {
        let started = *self.started.get_or_init(|| {
            (0..self.workers)
                .take_while(|i| {
                    std::thread::Builder::new()
                        .name(format!("xfskit-read-{i}"))
                        .spawn(move || self.work())
                        .is_ok()
                })
                .count()
        });
        // Jobs queued with no worker would wait forever.
        started > 0
    }

    fn work(&self) {
        loop {
            let job = {
                let Ok(mut q) = self.queue.lock() else { return };
                loop {
                    if let Some(j) = q.pop_front() {
                        break j;
                    }
                    q = match self.ready.wait(q) {
                        Ok(q) => q,
                        Err(_) => return,
                    };
                }
            };
            job(Finished(Some(&self.in_flight)));
        }
    }
}

/// Whether the FUSE device has a request ready to be read (a zero-timeout
/// poll; errors count as "no").
fn requests_waiting(dev: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(dev, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(n) => n > 0 && fds[0].revents().contains(PollFlags::IN),
        Err(_) => false,
    }
}

/// Duplicates the FUSE device descriptor of a session for [`ReadPool::watch`].
pub fn dup_device(session: &impl AsFd) -> Option<OwnedFd> {
    session.as_fd().try_clone_to_owned().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn leak(p: ReadPool) -> &'static ReadPool {
        Box::leak(Box::new(p))
    }

    #[test]
    fn without_a_device_nothing_is_handed_off() {
        let p = leak(ReadPool::new(4));
        assert!(!p.should_hand_off());
    }

    #[test]
    fn busy_pool_hands_off_and_runs_jobs() {
        let p = leak(ReadPool::new(2));
        // Any descriptor that polls as not readable stands in for the device:
        // the write end of a pipe.
        let (r, w) = rustix::pipe::pipe().unwrap();
        p.watch(w);
        assert!(!p.should_hand_off(), "idle pool with nothing waiting");
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = tx.clone();
        p.hand_off(move |_| {
            go_rx.recv().unwrap();
            t.send(1).unwrap();
        });
        assert!(p.should_hand_off(), "a job is still running");
        go_tx.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), 1);
        for _ in 0..1000 {
            if !p.should_hand_off() {
                break;
            }
            std::thread::yield_now();
        }
        assert!(
            !p.should_hand_off(),
            "finished jobs are no longer in flight"
        );
        for i in 0..10 {
            let t = tx.clone();
            p.hand_off(move |_| t.send(i).unwrap());
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        drop(r);
    }

    #[test]
    fn finished_jobs_stop_counting_before_they_answer() {
        let p = leak(ReadPool::new(1));
        let (_r, w) = rustix::pipe::pipe().unwrap();
        p.watch(w);
        let (tx, rx) = mpsc::channel();
        p.hand_off(move |mut done| {
            done.now();
            // The "answer": whoever gets it sees an idle pool.
            tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        rx.recv().unwrap();
        assert!(!p.should_hand_off(), "still counted after Finished::now");
    }

    #[test]
    fn waiting_requests_are_seen() {
        let p = leak(ReadPool::new(1));
        let (r, w) = rustix::pipe::pipe().unwrap();
        rustix::io::write(&w, b"x").unwrap();
        p.watch(r);
        assert!(p.should_hand_off());
    }

    #[test]
    fn zero_workers_never_hand_off() {
        let p = leak(ReadPool::new(0));
        let (r, w) = rustix::pipe::pipe().unwrap();
        rustix::io::write(&w, b"x").unwrap();
        p.watch(r);
        assert!(!p.should_hand_off());
        let (tx, rx) = mpsc::channel();
        p.hand_off(move |_| tx.send(7).unwrap());
        assert_eq!(rx.try_recv().unwrap(), 7, "ran on the caller");
    }
}

//! Back-pressure for ordered delivery: the consumer of
//! [`super::for_each_mapped`] delivers AG by AG and must hold the output
//! of later AGs until their turn. Workers scanning a later AG wait here
//! while too much is held, so memory stays bounded however slow the
//! current AG is. The worker of the AG being delivered never waits, so the
//! scan always moves on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// Most batches held for later AGs before their workers wait.
pub(crate) const MAX_HELD: usize = 64;

#[derive(Default)]
struct State {
    /// Index of the AG being delivered.
    cur: usize,
    /// Batches held for later AGs.
    held: usize,
}

/// Shared by the workers and the consumer of an ordered scan.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
    turn: Condvar,
}

impl Gate {
    /// Called by the worker of AG `idx` before it sends a batch: waits
    /// while `idx` is not being delivered, [`MAX_HELD`] batches are held,
    /// and the scan is not stopped.
    pub(crate) fn wait_turn(&self, idx: usize, stop: &AtomicBool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while idx != s.cur && s.held >= MAX_HELD && !stop.load(Ordering::Relaxed) {
            s = self.turn.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Called by the consumer whenever what it holds or delivers changes.
    pub(crate) fn set(&self, cur: usize, held: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.cur != cur || s.held != held {
            s.cur = cur;
            s.held = held;
            self.turn.notify_all();
        }
    }

    /// Wakes every waiting worker (after the scan was stopped).
    pub(crate) fn release(&self) {
        let _s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn later_ags_wait_while_too_much_is_held() {
        let gate = Gate::default();
        let stop = AtomicBool::new(false);
        let passed = AtomicUsize::new(0);
        gate.set(0, MAX_HELD);
        // The AG being delivered never waits.
        gate.wait_turn(0, &stop);
        std::thread::scope(|s| {
            s.spawn(|| {
                gate.wait_turn(1, &stop);
                passed.fetch_add(1, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(
                passed.load(Ordering::SeqCst),
                0,
                "AG 1 went on past the limit"
            );
            // AG 0 is done: AG 1 is delivered now and goes on.
            gate.set(1, MAX_HELD);
        });
        assert_eq!(passed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_stopped_scan_releases_the_waiters() {
        let gate = Gate::default();
        let stop = AtomicBool::new(false);
        gate.set(0, MAX_HELD + 1);
        std::thread::scope(|s| {
            let t = s.spawn(|| gate.wait_turn(3, &stop));
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::SeqCst);
            gate.release();
            t.join().expect("waiter ends");
        });
        // Under the limit nobody waits.
        gate.set(0, MAX_HELD - 1);
        gate.wait_turn(5, &AtomicBool::new(false));
    }
}

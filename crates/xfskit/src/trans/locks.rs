//! Lock sets: per-AG and per-inode locks that only hold the numbers in
//! use, so a filesystem of 8 million AGs costs nothing until one is locked.
//! Waiters sleep on one condition variable per set.

use crate::buf::fasthash::FastSet;
use std::sync::{Condvar, Mutex};

/// A set of held locks on numbered objects (AGs, inodes). Only held
/// numbers take memory, so 8 million AGs cost nothing until locked.
#[derive(Default)]
pub struct LockSet {
    held: Mutex<Held>,
    freed: Condvar,
}

#[derive(Default)]
struct Held {
    set: FastSet<u64>,
    waiters: usize,
}

impl LockSet {
    /// Blocks until `n` is free, then holds it.
    pub fn lock(&self, n: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while held.set.contains(&n) {
            held.waiters += 1;
            held = self.freed.wait(held).unwrap_or_else(|e| e.into_inner());
            held.waiters -= 1;
        }
        held.set.insert(n);
    }

    /// Holds `n` if it is free right now; false (nothing held) if not.
    pub fn try_lock(&self, n: u64) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.set.insert(n)
    }

    /// Releases `n`.
    pub fn unlock(&self, n: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.set.remove(&n);
        // Waking is a system call: only when someone waits.
        if held.waiters > 0 {
            self.freed.notify_all();
        }
    }
}

//! Allocation policy kept between transactions: the rotors where new
//! directories' inodes and realtime files' first extents start looking,
//! directories' data streams, and realtime extents freed since the last
//! log force.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Where allocations start, and what they must wait for.
#[derive(Default)]
pub struct AllocPolicy {
    /// The AG where the next new directory's inode search starts
    /// (crate::ialloc's rotor).
    pub dir_rotor: AtomicU32,
    /// The realtime group where the next file without realtime extents
    /// starts looking (the kernel's realtime group rotor).
    pub rtg_rotor: AtomicU32,
    /// Directories' data streams (see [`crate::alloc::filestream`]).
    pub filestreams: crate::alloc::filestream::Filestreams,
    /// Realtime extents were freed since the last log force: they may not
    /// take new data until the free is on disk (see `take_rt_freed`).
    rt_freed: AtomicBool,
}

impl AllocPolicy {
    /// The AG where the next new directory's inode search starts, the
    /// rotor advanced by one (atomically, so threads spread too).
    pub(super) fn next_dir_ag(&self, agcount: u32) -> u32 {
        let prev = self
            .dir_rotor
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((v % agcount + 1) % agcount)
            })
            .unwrap_or(0);
        prev % agcount
    }

    /// Notes that realtime extents were freed (see [`Self::take_rt_freed`]).
    pub(super) fn note_rt_freed(&self) {
        self.rt_freed.store(true, Ordering::SeqCst);
    }

    /// True (once) when realtime extents were freed since the last call:
    /// the caller forces the log before writing data into realtime
    /// extents, so the free is on disk before new data lands in space an
    /// old owner may still map on disk (the kernel's busy extents).
    pub(super) fn take_rt_freed(&self) -> bool {
        self.rt_freed.swap(false, Ordering::SeqCst)
    }
}

//! Inode generation numbers: a sequence that looks random (splitmix64
//! over a counter), from a random start unless seeded. A fixed start would
//! give a file made in an inode number freed since an earlier opening the
//! very generation the old file had, and a file handle of the old file
//! (NFS, open_by_handle_at) would open the new one; kernel XFS gives new
//! inodes random generations.

use std::sync::atomic::{AtomicU64, Ordering};

/// The source of inode generation numbers.
pub struct Generations {
    next: AtomicU64,
}

impl Generations {
    /// A sequence from a random start.
    pub(super) fn new() -> Generations {
        Generations {
            next: AtomicU64::new(random_seed()),
        }
    }

    /// Seeds the sequence (reproducible builds).
    pub(super) fn seed(&self, seed: u64) {
        self.next.store(seed, Ordering::Relaxed);
    }

    /// The next generation number.
    pub(super) fn next(&self) -> u32 {
        let n = self
            .next
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = n;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }
}

/// A random 64-bit value: std's hash keys, which come from the operating
/// system's random source, over the clock.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(t.as_nanos());
    h.finish()
}

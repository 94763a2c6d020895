//! A sharded cache of verified metadata buffers.
//!
//! Buffers enter the cache only after their verifier passed, so a cached
//! buffer never needs checking again. Each shard is bounded in bytes; when a
//! shard is full its oldest half is dropped (a cheap clock approximation).

use super::fasthash::FastMap;
use std::sync::{Arc, Mutex};

const SHARDS: usize = 32;

/// Key of a cached buffer: disk address (512-byte units) and length in bytes.
pub type BufKey = (u64, u32);

struct Shard {
    map: FastMap<BufKey, (u64, Arc<[u8]>)>,
    bytes: usize,
    tick: u64,
}

/// Verified metadata buffers keyed by disk address.
pub struct BufCache {
    shards: Vec<Mutex<Shard>>,
    shard_limit: usize,
}

impl BufCache {
    /// A cache holding at most about `limit_bytes`.
    pub fn new(limit_bytes: usize) -> BufCache {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: FastMap::default(),
                    bytes: 0,
                    tick: 0,
                })
            })
            .collect();
        BufCache {
            shards,
            shard_limit: (limit_bytes / SHARDS).max(64 * 1024),
        }
    }

    fn shard(&self, key: BufKey) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        &self.shards[(h as usize) % SHARDS]
    }

    /// The cached buffer for `key`, if any.
    pub fn get(&self, key: BufKey) -> Option<Arc<[u8]>> {
        let mut s = self.shard(key).lock().ok()?;
        s.tick += 1;
        let tick = s.tick;
        let e = s.map.get_mut(&key)?;
        e.0 = tick;
        Some(e.1.clone())
    }

    /// Inserts a verified buffer.
    pub fn insert(&self, key: BufKey, data: Arc<[u8]>) {
        let Ok(mut s) = self.shard(key).lock() else {
            return;
        };
        s.tick += 1;
        let tick = s.tick;
        s.bytes += data.len();
        if let Some(old) = s.map.insert(key, (tick, data)) {
            s.bytes -= old.1.len();
        }
        if s.bytes > self.shard_limit {
            // Drop everything older than the median use.
            let mut ticks: Vec<u64> = s.map.values().map(|e| e.0).collect();
            let mid = ticks.len() / 2;
            let (_, median, _) = ticks.select_nth_unstable(mid);
            let median = *median;
            s.map.retain(|_, e| e.0 >= median);
            s.bytes = s.map.values().map(|e| e.1.len()).sum();
        }
    }

    /// Forgets a buffer (after it was rewritten or found corrupt).
    pub fn invalidate(&self, key: BufKey) {
        if let Ok(mut s) = self.shard(key).lock() {
            if let Some(old) = s.map.remove(&key) {
                s.bytes -= old.1.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_hits() {
        let c = BufCache::new(SHARDS * 64 * 1024);
        for i in 0..10_000u64 {
            c.insert((i, 4096), vec![i as u8; 4096].into());
        }
        let total: usize = c.shards.iter().map(|s| s.lock().unwrap().bytes).sum();
        assert!(
            total <= SHARDS * (64 * 1024 + 4096),
            "cache grew to {total}"
        );
        assert_eq!(c.get((9_999, 4096)).unwrap()[0], (9_999u64 as u8));
        c.invalidate((9_999, 4096));
        assert!(c.get((9_999, 4096)).is_none());
    }
}

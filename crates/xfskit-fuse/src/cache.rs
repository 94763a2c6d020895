//! Bounded caches of decoded metadata, keyed by inode number.
//!
//! The image cannot change under a read-only mount, so a decoded inode or a
//! file's extent map stays valid for the life of the mount; the only reason
//! to drop one is memory. Each cache is split in shards (one lock each, so
//! serving threads rarely wait on each other); a shard holds at most a fixed
//! "cost" (bytes, or extents) and, when full, drops its least recently used
//! half in one sweep, which keeps every operation O(1) amortised.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Shards of a cache made with [`InoCache::new`].
const SHARDS: usize = 16;

struct Shard<V> {
    map: HashMap<u64, Slot<V>>,
    cost: usize,
    tick: u64,
}

struct Slot<V> {
    used: u64,
    cost: usize,
    value: Arc<V>,
}

/// A bounded map from inode number to a shared value.
pub struct InoCache<V> {
    shards: Vec<Mutex<Shard<V>>>,
    shard_limit: usize,
}

impl<V> InoCache<V> {
    /// A cache whose entries cost at most about `limit` in total.
    pub fn new(limit: usize) -> InoCache<V> {
        Self::with_shards(limit, SHARDS)
    }

    /// Like [`InoCache::new`] with `shards` shards: fewer shards let single
    /// entries be larger (no entry may cost more than `limit / shards`).
    pub fn with_shards(limit: usize, shards: usize) -> InoCache<V> {
        let shards = shards.max(1);
        InoCache {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        cost: 0,
                        tick: 0,
                    })
                })
                .collect(),
            shard_limit: (limit / shards).max(1),
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<Shard<V>> {
        // Inode numbers of one directory are close together: spread them.
        let h = ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        &self.shards[(h as usize) % self.shards.len()]
    }

    /// The cached value for `ino`, if any.
    pub fn get(&self, ino: u64) -> Option<Arc<V>> {
        let mut s = self.shard(ino).lock().ok()?;
        s.tick += 1;
        let tick = s.tick;
        let slot = s.map.get_mut(&ino)?;
        slot.used = tick;
        Some(slot.value.clone())
    }

    /// Caches `value` for `ino` at `cost` and returns it shared. A value
    /// costing more than a whole shard is returned but not kept.
    pub fn insert(&self, ino: u64, value: V, cost: usize) -> Arc<V> {
        let value = Arc::new(value);
        if cost > self.shard_limit {
            return value;
        }
        let Ok(mut s) = self.shard(ino).lock() else {
            return value;
        };
        s.tick += 1;
        let used = s.tick;
        let slot = Slot {
            used,
            cost,
            value: value.clone(),
        };
        s.cost += cost;
        if let Some(old) = s.map.insert(ino, slot) {
            s.cost -= old.cost;
        }
        if s.cost > self.shard_limit {
            // Keep the more recently used half.
            let mut ticks: Vec<u64> = s.map.values().map(|e| e.used).collect();
            let mid = ticks.len() / 2;
            let median = *ticks.select_nth_unstable(mid).1;
            s.map.retain(|_, e| e.used >= median);
            s.cost = s.map.values().map(|e| e.cost).sum();
        }
        value
    }

    /// The cached value for `ino`, or `load`'s result (cached if `Ok`).
    /// `cost` prices a loaded value.
    pub fn get_or_load<E>(
        &self,
        ino: u64,
        load: impl FnOnce() -> Result<V, E>,
        cost: impl FnOnce(&V) -> usize,
    ) -> Result<Arc<V>, E> {
        if let Some(v) = self.get(ino) {
            return Ok(v);
        }
        let v = load()?;
        let c = cost(&v);
        Ok(self.insert(ino, v, c))
    }

    /// Total cost held (for tests).
    #[cfg(test)]
    fn total_cost(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().cost).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_and_stays_bounded() {
        let c: InoCache<Vec<u8>> = InoCache::new(SHARDS * 1000);
        for i in 0..100_000u64 {
            c.insert(i, vec![i as u8; 10], 10);
        }
        assert!(
            c.total_cost() <= SHARDS * 1000,
            "grew to {}",
            c.total_cost()
        );
        // The most recent insert survives.
        assert_eq!(c.get(99_999).unwrap()[0], 99_999u64 as u8);
        // Recently used entries survive a wave of new ones.
        let hot = 99_999u64;
        for i in 200_000..200_500u64 {
            c.get(hot).unwrap();
            c.insert(i, vec![0; 10], 10);
        }
        assert!(c.get(hot).is_some());
    }

    #[test]
    fn oversized_values_are_not_kept() {
        let c: InoCache<u32> = InoCache::new(SHARDS * 10);
        assert_eq!(*c.insert(7, 1, 11), 1);
        assert!(c.get(7).is_none());
        assert_eq!(*c.insert(7, 2, 10), 2);
        assert_eq!(c.get(7).as_deref(), Some(&2));
    }

    #[test]
    fn fewer_shards_take_larger_entries() {
        let c: InoCache<u32> = InoCache::with_shards(100, 2);
        c.insert(1, 1, 50);
        assert!(c.get(1).is_some());
        c.insert(2, 2, 51);
        assert!(c.get(2).is_none());
    }

    #[test]
    fn load_errors_are_not_cached() {
        let c: InoCache<u32> = InoCache::new(1000);
        let r: Result<_, &str> = c.get_or_load(1, || Err("bad"), |_| 1);
        assert!(r.is_err());
        let r: Result<_, &str> = c.get_or_load(1, || Ok(5), |_| 1);
        assert_eq!(*r.unwrap(), 5);
        let r: Result<_, &str> = c.get_or_load(1, || Ok(6), |_| 1);
        assert_eq!(*r.unwrap(), 5);
    }
}

//! The set of committed, not yet written buffers: a hash map for the
//! lookups every transaction makes, and the sorted set of their offsets
//! for range removal (freed extents) and the sorted writeback.
//!
//! A buffer committed again (the same block changed by the next
//! transaction, the usual case) touches only the hash map.

use super::pending::Pending;
use crate::buf::fasthash::FastMap;
use std::collections::BTreeSet;

/// Pending buffers keyed by byte offset.
#[derive(Default)]
pub(crate) struct Dirty {
    map: FastMap<u64, Pending>,
    keys: BTreeSet<u64>,
}

impl Dirty {
    /// The pending buffer at `off`.
    pub(crate) fn get(&self, off: u64) -> Option<&Pending> {
        self.map.get(&off)
    }

    /// Puts `p` at `off`; returns the buffer it replaces.
    pub(crate) fn insert(&mut self, off: u64, p: Pending) -> Option<Pending> {
        let old = self.map.insert(off, p);
        if old.is_none() {
            self.keys.insert(off);
        }
        old
    }

    /// Sets the LSN the buffer at `off` is stamped with at writeback (the
    /// LSN field at `lsn_off`).
    pub(crate) fn set_lsn(&mut self, off: u64, lsn_off: usize, lsn: u64) {
        if let Some(p) = self.map.get_mut(&off) {
            p.lsn = Some((lsn_off, lsn));
        }
    }

    /// Removes the buffer at `off`.
    pub(crate) fn remove(&mut self, off: u64) -> Option<Pending> {
        let old = self.map.remove(&off);
        if old.is_some() {
            self.keys.remove(&off);
        }
        old
    }

    /// Offsets of the buffers starting in `lo..hi`.
    pub(crate) fn keys_in(&self, lo: u64, hi: u64) -> Vec<u64> {
        self.keys.range(lo..hi).copied().collect()
    }

    /// Every buffer in increasing offset order.
    pub(crate) fn sorted(&self) -> impl Iterator<Item = (u64, &Pending)> {
        self.keys
            .iter()
            .filter_map(|k| self.map.get(k).map(|p| (*k, p)))
    }
}

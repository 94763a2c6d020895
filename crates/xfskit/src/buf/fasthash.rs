//! A fast hasher for the engine's internal maps, whose keys are integers
//! (disk offsets, inode numbers, block numbers) that an image cannot
//! choose freely enough to matter: no flooding resistance is needed, so
//! the standard SipHash is needless cost on every transaction.
//!
//! Each word is folded in with a multiply by an odd 64-bit constant and a
//! rotate; `finish` mixes the high bits down so that hashbrown's use of
//! the top 7 bits and the low bits both see every input bit.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplier: 2^64 divided by the golden ratio, made odd.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hasher state.
#[derive(Default, Clone, Copy)]
pub struct FastHasher {
    h: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.h = (self.h.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = it.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.h ^ (self.h >> 29)
    }
}

/// Builds [`FastHasher`]s.
pub type FastBuild = BuildHasherDefault<FastHasher>;

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, FastBuild>;

/// A `HashSet` with [`FastHasher`].
pub type FastSet<K> = HashSet<K, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_aligned_offsets() {
        // Disk offsets are multiples of 4096: the low and high bits used
        // by the table must still differ.
        let mut low = FastSet::default();
        let mut top = FastSet::default();
        for i in 0..4096u64 {
            let mut h = FastHasher::default();
            h.write_u64(i * 4096);
            let v = h.finish();
            low.insert(v & 0xfff);
            top.insert(v >> 57);
        }
        assert!(low.len() > 2000, "{} distinct low values", low.len());
        assert_eq!(top.len(), 128);
    }

    #[test]
    fn map_works() {
        let mut m: FastMap<(u64, u32), u32> = FastMap::default();
        for i in 0..10_000u64 {
            m.insert((i * 8, 4096), i as u32);
        }
        assert_eq!(m.get(&(800, 4096)), Some(&100));
        assert_eq!(m.len(), 10_000);
    }
}

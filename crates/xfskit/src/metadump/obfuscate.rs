//! Name obfuscation for metadumps: a name is replaced by another of the
//! same length with the same directory/attribute hash, so that every hash
//! index (directory leaf and node blocks, attribute leaves, parent pointer
//! hashes) stays valid without being rebuilt.
//!
//! The hash (`h = rol32(h, 7) ^ byte` for every byte) lets the last five
//! bytes of a name be solved for: the bytes before them are drawn from a
//! pseudo-random generator, then the five are computed from what the hash
//! still needs, 7 bits each (the first of the five gets the top 4 bits; a
//! byte's top bit lands on the same hash bit as the next byte's lowest
//! bit, and the fifth-from-last byte's bit 4 wraps onto bit 0). A byte
//! that would be 0 or '/' has its low bit flipped and the matching bit of
//! its neighbour flipped too. Names shorter than five bytes are kept, as
//! xfs_metadump keeps them.
//!
//! The random bytes come from a generator keyed by the dump's seed, the
//! directory (or the inode owning an attribute) and the old name: the same
//! name in the same directory always gets the same new name, so a parent
//! pointer (whose attribute name is the entry's name) and the directory
//! entry agree whichever is met first. Two names of one directory that
//! would get the same new name (possible for hash-colliding names) are
//! told apart by flipping pairs of bits that offset each other in the
//! hash; the choice is remembered so that the other side of the pair
//! (entry or parent pointer) finds it.

use std::collections::HashMap;

/// The filename alphabet of the random part (64 characters, as xfs_metadump's).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The directory/attribute name hash.
pub use xfs_format::da::da_hashname as hashname;

fn invalid(c: u8) -> bool {
    c == 0 || c == b'/'
}

/// splitmix64: a fast, well-mixed 64-bit generator step.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 64-bit fingerprint of `bytes` under `key`.
fn fingerprint(key: u64, bytes: &[u8]) -> u64 {
    let mut h = mix(key ^ bytes.len() as u64);
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    h
}

/// A bit of a name: (byte counted from the name's end, bit).
type Bit = (usize, u8);

/// Pairs of (byte counted from the name's end, bit) that land on the same
/// hash bit: flipping both keeps the hash. Byte `j` from the end has its
/// bit `k` on hash bit `(k + 7 j) mod 32`; only the last six bytes are used.
fn flip_pairs(len: usize) -> Vec<(Bit, Bit)> {
    let n = len.min(6);
    let mut bits = Vec::new();
    for j in 0..n {
        for k in 0..8u8 {
            bits.push((j, k, (usize::from(k) + 7 * j) % 32));
        }
    }
    let mut pairs = Vec::new();
    for (i, a) in bits.iter().enumerate() {
        for b in &bits[i + 1..] {
            if a.2 == b.2 && a.0 != b.0 {
                pairs.push(((a.0, a.1), (b.0, b.1)));
            }
        }
    }
    pairs
}

/// The obfuscated form of `old` (same length, same hash), with random
/// bytes drawn from `state`. Names shorter than 5 bytes come back as they are.
fn solve(old: &[u8], mut state: u64) -> Vec<u8> {
    let len = old.len();
    if len < 5 {
        return old.to_vec();
    }
    let want = hashname(old);
    let mut out = Vec::with_capacity(len);
    let mut h = 0u32;
    let mut bits = 0u64;
    let mut left = 0;
    for _ in 0..len - 5 {
        if left < 6 {
            state = mix(state);
            bits = state;
            left = 64;
        }
        let c = ALPHABET[(bits & 63) as usize];
        bits >>= 6;
        left -= 6;
        h = h.rotate_left(7) ^ u32::from(c);
        out.push(c);
    }
    // What the last five bytes must contribute.
    let x = h.rotate_left(35 % 32) ^ want;
    let first = out.len();
    let mut carry = 0u8;
    for shift in [28u32, 21, 14, 7, 0] {
        let mut c = ((x >> shift) & 0x7f) as u8 ^ carry;
        carry = 0;
        if invalid(c) {
            c ^= 1;
            carry = 0x80;
        }
        out.push(c);
    }
    if carry != 0 {
        // The last byte's bit 0 is offset by the fifth-from-last byte's bit 4.
        out[first] ^= 0x10;
    }
    out
}

/// The `seq`-th alternate of `name`: the bit pairs named by `seq`'s set
/// bits flipped. `Err(())` when `seq` is past what the name's length
/// allows; `Ok(None)` when the result holds a 0 or '/'.
fn alternate(name: &[u8], seq: u32, pairs: &[(Bit, Bit)]) -> Result<Option<Vec<u8>>, ()> {
    if seq == 0 {
        return Ok(Some(name.to_vec()));
    }
    if u64::from(seq) >= 1u64 << pairs.len().min(31) {
        return Err(());
    }
    let len = name.len();
    let mut out = name.to_vec();
    for (i, &((j0, k0), (j1, k1))) in pairs.iter().enumerate().take(31) {
        if seq & (1 << i) != 0 {
            out[len - 1 - j0] ^= 1 << k0;
            out[len - 1 - j1] ^= 1 << k1;
        }
    }
    if out.iter().any(|&c| invalid(c)) {
        return Ok(None);
    }
    Ok(Some(out))
}

/// The obfuscation state of one dump.
pub struct Obfuscator {
    seed: u64,
    /// Fingerprint of (scope, new name) to the fingerprint of (scope, old
    /// name) that took it.
    taken: HashMap<u64, u64>,
    /// Fingerprint of (scope, old name) to the alternate it needed (only
    /// names that needed one).
    alternates: HashMap<u64, u32>,
    /// Names that found no free alternate (kept as they were).
    pub duplicates: u64,
}

/// Scope of a symbolic link's path components (no table: each component
/// is obfuscated on its own).
pub const SCOPE_SYMLINK: u64 = u64::MAX;
/// The bit that marks an inode's attribute names' scope.
pub const SCOPE_ATTR: u64 = 1 << 63;

impl Obfuscator {
    /// A fresh state for the seed `seed`.
    pub fn new(seed: u64) -> Obfuscator {
        Obfuscator {
            seed,
            taken: HashMap::new(),
            alternates: HashMap::new(),
            duplicates: 0,
        }
    }

    fn candidate(&self, scope: u64, old: &[u8]) -> Vec<u8> {
        solve(
            old,
            mix(self.seed ^ mix(scope)) ^ fingerprint(self.seed, old),
        )
    }

    /// Obfuscates a path component in place (no uniqueness needed).
    pub fn component(&self, name: &mut [u8]) {
        if name.len() < 5 {
            return;
        }
        let new = self.candidate(SCOPE_SYMLINK, name);
        name.copy_from_slice(&new);
    }

    /// Obfuscates `name` in place, a name of the directory (or attribute
    /// set) `scope`: the same old name in the same scope always gets the
    /// same new name, and two old names never the same new one.
    pub fn name(&mut self, scope: u64, name: &mut [u8]) {
        if name.len() < 5 {
            return;
        }
        let oldfp = fingerprint(scope ^ self.seed, name);
        let cand = self.candidate(scope, name);
        // The bit pairs are only needed for an alternate (rare).
        let mut pairs = Vec::new();
        let mut seq = self.alternates.get(&oldfp).copied().unwrap_or(0);
        loop {
            if seq != 0 && pairs.is_empty() {
                pairs = flip_pairs(name.len());
            }
            match alternate(&cand, seq, &pairs) {
                Err(()) => {
                    self.duplicates += 1;
                    return;
                }
                Ok(None) => {}
                Ok(Some(alt)) => {
                    let k = fingerprint(scope.rotate_left(17) ^ self.seed, &alt);
                    match self.taken.get(&k) {
                        None => {
                            self.taken.insert(k, oldfp);
                            if seq != 0 {
                                self.alternates.insert(oldfp, seq);
                            }
                            name.copy_from_slice(&alt);
                            return;
                        }
                        Some(&o) if o == oldfp => {
                            name.copy_from_slice(&alt);
                            return;
                        }
                        Some(_) => {}
                    }
                }
            }
            seq += 1;
            // Thousands of taken alternates: a pathological directory.
            if seq >= 1 << 16 {
                self.duplicates += 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_length_same_hash_valid_bytes() {
        for len in 5..60 {
            for s in 0..200u64 {
                let old: Vec<u8> = (0..len)
                    .map(|i| b'a' + ((i as u64 * 7 + s) % 26) as u8)
                    .collect();
                let new = solve(&old, mix(s));
                assert_eq!(new.len(), old.len());
                assert_eq!(hashname(&new), hashname(&old), "{old:?} -> {new:?}");
                assert!(!new.iter().any(|&c| invalid(c)));
            }
        }
        // Many names: some solve to a 0 or '/' and are fixed up.
        for s in 0..20000u64 {
            let old = format!("n{s:07}").into_bytes();
            let new = solve(&old, mix(s));
            assert_eq!(hashname(&new), hashname(&old));
            assert!(!new.iter().any(|&c| invalid(c)), "{new:?}");
        }
    }

    #[test]
    fn alternates_keep_the_hash() {
        let name = solve(b"hello", 1);
        let pairs = flip_pairs(5);
        assert!(pairs.len() >= 8);
        let mut n = 0;
        for seq in 0..256 {
            if let Ok(Some(a)) = alternate(&name, seq, &pairs) {
                assert_eq!(hashname(&a), hashname(b"hello"));
                n += 1;
            }
        }
        assert!(n > 100);
    }

    #[test]
    fn same_name_same_result_and_no_duplicates() {
        let mut o = Obfuscator::new(42);
        let mut a = b"hello".to_vec();
        o.name(7, &mut a);
        let mut b = b"hello".to_vec();
        o.name(7, &mut b);
        assert_eq!(a, b);
        // Five-byte names have no random part: a hash-colliding pair would
        // collide; the second gets an alternate, remembered.
        let x = b"abcde".to_vec();
        let mut y = x.clone();
        // A different 5-byte name with the same hash: flip a pair.
        let pairs = flip_pairs(5);
        let y2 = alternate(&y, 1, &pairs).unwrap().unwrap();
        y.copy_from_slice(&y2);
        assert_eq!(hashname(&x), hashname(&y));
        let (mut nx, mut ny) = (x.clone(), y.clone());
        o.name(9, &mut nx);
        o.name(9, &mut ny);
        assert_ne!(nx, ny);
        let mut ny2 = y.clone();
        o.name(9, &mut ny2);
        assert_eq!(ny, ny2);
        assert_eq!(hashname(&ny), hashname(&y));
    }
}

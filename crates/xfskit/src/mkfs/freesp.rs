//! The free-space btree leaves of a fresh AG as mkfs.xfs's allocations
//! leave them: every allocation updates, deletes and inserts records the
//! way the btree code does (a deleted record's neighbours shift left and
//! the last slot keeps its old bytes), so the bytes past the record count
//! match too.

/// One leaf: its slots (records and stale ones past `n`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Leaf {
    /// Every slot ever written, in slot order.
    pub slots: Vec<(u32, u32)>,
    /// Records in use.
    pub n: usize,
}

impl Leaf {
    fn delete(&mut self, i: usize) {
        self.slots.copy_within(i + 1..self.n, i);
        self.n -= 1;
    }

    fn insert(&mut self, i: usize, rec: (u32, u32)) {
        if self.slots.len() == self.n {
            self.slots.push((0, 0));
        }
        self.slots.copy_within(i..self.n, i + 1);
        self.slots[i] = rec;
        self.n += 1;
    }
}

/// The by-block and by-size leaves of one AG.
#[derive(Debug, Clone, Default)]
pub(crate) struct FreeTrees {
    /// bnobt leaf (records by start block).
    pub bno: Leaf,
    /// cntbt leaf (records by length, then start).
    pub cnt: Leaf,
}

impl FreeTrees {
    /// The leaves as the AG is initialised with free extents `free`
    /// (sorted by start).
    pub fn new(free: &[(u32, u32)]) -> FreeTrees {
        let mut by_cnt = free.to_vec();
        by_cnt.sort_by_key(|&(s, l)| (l, s));
        FreeTrees {
            bno: Leaf {
                slots: free.to_vec(),
                n: free.len(),
            },
            cnt: Leaf {
                slots: by_cnt.clone(),
                n: by_cnt.len(),
            },
        }
    }

    /// Allocate `[start, start + len)`, which must lie in one free extent:
    /// the by-block record is trimmed in place (a middle piece inserts the
    /// right part after it, nothing left deletes it); the by-size record
    /// is deleted and what is left inserted, left part first.
    pub fn alloc(&mut self, start: u32, len: u32) {
        let Some(i) = (0..self.bno.n).find(|&i| {
            let (s, l) = self.bno.slots[i];
            s <= start && start + len <= s + l
        }) else {
            return;
        };
        let (fs, fl) = self.bno.slots[i];
        let left = (start > fs).then_some((fs, start - fs));
        let right = (start + len < fs + fl).then(|| (start + len, fs + fl - start - len));
        match (left, right) {
            (None, None) => self.bno.delete(i),
            (Some(p), None) | (None, Some(p)) => self.bno.slots[i] = p,
            (Some(l), Some(r)) => {
                self.bno.slots[i] = l;
                self.bno.insert(i + 1, r);
            }
        }
        if let Some(j) = (0..self.cnt.n).find(|&j| self.cnt.slots[j] == (fs, fl)) {
            self.cnt.delete(j);
        }
        for p in [left, right].into_iter().flatten() {
            let key = |r: (u32, u32)| (r.1, r.0);
            let at = (0..self.cnt.n)
                .find(|&k| key(self.cnt.slots[k]) > key(p))
                .unwrap_or(self.cnt.n);
            self.cnt.insert(at, p);
        }
    }

    /// The records in use, by start block.
    pub fn free(&self) -> Vec<(u32, u32)> {
        self.bno.slots[..self.bno.n].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_record_leaves_its_last_slot() {
        let mut t = FreeTrees::new(&[(10, 3), (20, 100)]);
        t.alloc(12, 1);
        t.alloc(11, 1);
        t.alloc(10, 1);
        t.alloc(20, 1);
        assert_eq!(t.free(), vec![(21, 99)]);
        assert_eq!(t.bno.slots, vec![(21, 99), (20, 100)]);
        assert_eq!(t.cnt.slots, vec![(21, 99), (20, 100)]);
        // A middle piece: left updated in place, right inserted after it.
        t.alloc(50, 10);
        assert_eq!(t.free(), vec![(21, 29), (60, 60)]);
        assert_eq!(t.cnt.slots[..t.cnt.n], [(21, 29), (60, 60)]);
    }
}

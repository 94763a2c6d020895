//! The cursor: a path of (block, index) from the root to a leaf record,
//! with lookups, reads, in-place updates and stepping.

use super::block::{Lay, NULL_LONG};
use super::{BtreeOps, MAX_LEVELS};
use crate::error::{Error, Location, Result};
use crate::trans::{BufId, Trans};
use std::cmp::Ordering;

/// Longest key compared from a stack buffer.
const KEY_STACK: usize = 64;

/// Which record a lookup lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The record with exactly this key. When there is none, the cursor
    /// is left at the place such a record would be inserted.
    Eq,
    /// The first record whose key is >= the key. When there is none,
    /// the cursor is past the last record.
    Ge,
    /// The last record whose key is <= the key. When there is none,
    /// the cursor is before the first record ([`Cursor::increment`]
    /// moves to it).
    Le,
}

/// Where one level of the path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// A block held by the transaction.
    Buf(BufId),
    /// The root in the inode (the cursor's own copy).
    IRoot,
}

/// One level of the path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lvl {
    pub loc: Loc,
    /// The block's pointer (0 for an in-inode root).
    pub ptr: u64,
    /// Index of the entry the path goes through (0..=numrecs at a leaf).
    pub idx: usize,
}

/// A position in one btree. Holds buffers by id only: pass the same
/// transaction to every call.
pub struct Cursor<O: BtreeOps> {
    /// The btree type (also reachable for callers, e.g. to read counters).
    pub ops: O,
    /// Path, leaf first. Empty until the first lookup.
    pub(crate) path: Vec<Lvl>,
    /// The in-inode root's bytes (empty for block roots).
    pub(crate) iroot: Vec<u8>,
    /// Stepped off the front of the tree (a failed decrement or `Le`
    /// lookup): no record is under the cursor.
    pub(crate) before_first: bool,
}

impl<O: BtreeOps> Cursor<O> {
    /// A cursor over a tree whose root is a block (AG btrees).
    pub fn new(ops: O) -> Cursor<O> {
        Cursor {
            ops,
            path: Vec::new(),
            iroot: Vec::new(),
            before_first: false,
        }
    }

    /// A cursor over a tree rooted in an inode fork: `root` is the fork
    /// area's bytes in on-disk `bmdr` form (level >= 1).
    pub fn with_inode_root(ops: O, root: Vec<u8>) -> Cursor<O> {
        Cursor {
            ops,
            path: Vec::new(),
            iroot: root,
            before_first: false,
        }
    }

    /// The in-inode root as changed by this cursor (copy it back into
    /// the inode's fork).
    pub fn inode_root(&self) -> &[u8] {
        &self.iroot
    }

    /// Levels in the tree as of the last lookup (0 before any).
    pub fn levels(&self) -> usize {
        self.path.len()
    }

    pub(crate) fn lay(&self, level: usize, loc: Loc) -> Lay {
        let s = self.ops.shape();
        match loc {
            Loc::IRoot => Lay::iroot(&s, level, self.iroot.len()),
            Loc::Buf(_) => Lay::block(&s, level),
        }
    }

    pub(crate) fn data<'b>(&'b self, tp: &'b Trans<'_>, loc: Loc) -> &'b [u8] {
        match loc {
            Loc::IRoot => &self.iroot,
            Loc::Buf(id) => tp.buf(id),
        }
    }

    pub(crate) fn data_mut<'b>(&'b mut self, tp: &'b mut Trans<'_>, loc: Loc) -> &'b mut [u8] {
        match loc {
            Loc::IRoot => &mut self.iroot,
            Loc::Buf(id) => tp.buf_mut(id),
        }
    }

    /// Reads the block `ptr` expected at `level`.
    pub(crate) fn read_block(&self, tp: &mut Trans<'_>, ptr: u64, level: usize) -> Result<BufId> {
        let daddr = self.ops.ptr_daddr(tp, ptr)?;
        let len = self.ops.shape().block_size as u32;
        tp.read_buf(daddr, len, &self.ops.verifier(level as u16))
    }

    pub(crate) fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(
            "btree",
            Location::Other(format!("btree {:#x}", self.ops.shape().magic)),
            detail,
        )
    }

    /// Compares the low key of entry `i` with `key` without allocating
    /// (a record's key is built on the stack when it fits).
    pub(crate) fn cmp_entry(&self, lay: &Lay, d: &[u8], i: usize, key: &[u8]) -> Ordering {
        if lay.leaf {
            let mut buf = [0u8; KEY_STACK];
            if lay.low_len <= KEY_STACK {
                let k = &mut buf[..lay.low_len];
                self.ops.key_of_rec(lay.rec(d, i), k);
                return self.ops.cmp_keys(k, key);
            }
            return self.ops.cmp_keys(&self.entry_key(lay, d, i), key);
        }
        self.ops.cmp_keys(&lay.key(d, i)[..lay.low_len], key)
    }

    /// The low key of entry `i` (a record's key, or a node entry's low key).
    pub(crate) fn entry_key(&self, lay: &Lay, d: &[u8], i: usize) -> Vec<u8> {
        if lay.leaf {
            let mut k = vec![0u8; lay.low_len];
            self.ops.key_of_rec(lay.rec(d, i), &mut k);
            k
        } else {
            lay.key(d, i)[..lay.low_len].to_vec()
        }
    }

    /// The key a parent holds for a (non-empty) block: its first low key,
    /// followed in overlapping trees by the highest high key in it.
    pub(crate) fn block_key(&self, lay: &Lay, d: &[u8]) -> Vec<u8> {
        let mut k = self.entry_key(lay, d, 0);
        if lay.overlapping {
            // The highest high key of the entries, found with two buffers
            // (this runs on every insert into an overlapping tree).
            let n = lay.low_len;
            let mut high = vec![0u8; n];
            let mut h = vec![0u8; n];
            for i in 0..lay.numrecs(d) {
                let cand: &[u8] = if lay.leaf {
                    self.ops.high_key_of_rec(lay.rec(d, i), &mut h);
                    &h
                } else {
                    &lay.key(d, i)[n..]
                };
                if i == 0 || self.ops.cmp_keys(cand, &high) == Ordering::Greater {
                    high.copy_from_slice(&cand[..n]);
                }
            }
            k.extend_from_slice(&high);
        }
        k
    }

    /// [`Self::block_key`] of the block at path level `level`.
    pub(crate) fn path_key(&self, tp: &Trans<'_>, level: usize) -> Vec<u8> {
        let l = self.path[level];
        let lay = self.lay(level, l.loc);
        self.block_key(&lay, self.data(tp, l.loc))
    }

    /// True when the tree keeps high keys in its nodes.
    pub(crate) fn overlapping(&self) -> bool {
        self.ops.shape().overlapping
    }

    /// The key of a record.
    pub fn key_of(&self, rec: &[u8]) -> Vec<u8> {
        let mut k = vec![0u8; self.ops.shape().key_len];
        self.ops.key_of_rec(rec, &mut k);
        k
    }

    /// Walks from the root to the leaf that would hold `key`; the leaf
    /// index is the first record whose key is >= `key`.
    pub(crate) fn descend(&mut self, tp: &mut Trans<'_>, key: &[u8]) -> Result<()> {
        self.path.clear();
        self.before_first = false;
        let (loc, ptr, levels) = if self.ops.shape().root_in_inode {
            if self.iroot.len() < 4 {
                return Err(self.corrupt("in-inode root too short"));
            }
            let l = usize::from(crate::bytes::be16(&self.iroot, 0));
            (Loc::IRoot, 0, l + 1)
        } else {
            let (p, n) = self.ops.root(tp)?;
            if n == 0 || n > MAX_LEVELS {
                return Err(self.corrupt(format!("{n} levels")));
            }
            (Loc::Buf(self.read_block(tp, p, n - 1)?), p, n)
        };
        if levels > MAX_LEVELS {
            return Err(self.corrupt(format!("{levels} levels")));
        }
        self.path.resize(levels, Lvl { loc, ptr, idx: 0 });
        let mut cur = Lvl { loc, ptr, idx: 0 };
        for level in (0..levels).rev() {
            let lay = self.lay(level, cur.loc);
            let d = self.data(tp, cur.loc);
            let n = lay.numrecs(d);
            if n > lay.maxrecs {
                return Err(self.corrupt(format!("{n} entries at level {level}")));
            }
            // Count entries whose key is < key (leaf) or <= key (node).
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let c = self.cmp_entry(&lay, d, mid, key);
                let go_right = if level == 0 {
                    c == Ordering::Less
                } else {
                    c != Ordering::Greater
                };
                if go_right {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if level == 0 {
                cur.idx = lo;
                self.path[0] = cur;
                break;
            }
            if n == 0 {
                return Err(self.corrupt(format!("empty node at level {level}")));
            }
            cur.idx = lo.saturating_sub(1);
            let child = lay.ptr(d, cur.idx);
            self.path[level] = cur;
            cur = Lvl {
                loc: Loc::Buf(self.read_block(tp, child, level - 1)?),
                ptr: child,
                idx: 0,
            };
        }
        Ok(())
    }

    /// Looks up `key`; returns whether a record was found (see [`Dir`]).
    pub fn lookup(&mut self, tp: &mut Trans<'_>, key: &[u8], dir: Dir) -> Result<bool> {
        self.descend(tp, key)?;
        let l = self.path[0];
        let lay = self.lay(0, l.loc);
        let d = self.data(tp, l.loc);
        let n = lay.numrecs(d);
        let exact = l.idx < n && self.cmp_entry(&lay, d, l.idx, key) == Ordering::Equal;
        match dir {
            Dir::Eq => Ok(exact),
            Dir::Ge => {
                if l.idx < n {
                    Ok(true)
                } else if n == 0 {
                    Ok(false)
                } else {
                    self.path[0].idx = n - 1;
                    self.increment(tp)
                }
            }
            Dir::Le => {
                if exact {
                    Ok(true)
                } else if l.idx > 0 {
                    self.path[0].idx = l.idx - 1;
                    Ok(true)
                } else {
                    self.decrement(tp)
                }
            }
        }
    }

    /// The record under the cursor, if it is on one.
    pub fn get<'b>(&'b self, tp: &'b Trans<'_>) -> Option<&'b [u8]> {
        if self.before_first {
            return None;
        }
        let l = self.path.first()?;
        let lay = self.lay(0, l.loc);
        let d = self.data(tp, l.loc);
        (l.idx < lay.numrecs(d)).then(|| lay.rec(d, l.idx))
    }

    /// The record under the cursor, copied; an error when off the end.
    pub fn get_rec(&self, tp: &Trans<'_>) -> Result<Vec<u8>> {
        self.get(tp)
            .map(|r| r.to_vec())
            .ok_or_else(|| Error::Invalid("btree cursor is not on a record".into()))
    }

    /// Overwrites the record under the cursor; a changed key must keep
    /// the record's place in the order. Parent keys are updated.
    pub fn update(&mut self, tp: &mut Trans<'_>, rec: &[u8]) -> Result<()> {
        if self.get(tp).is_none() {
            return Err(Error::Invalid("btree cursor is not on a record".into()));
        }
        let l = self.path[0];
        let lay = self.lay(0, l.loc);
        lay.set_ent(self.data_mut(tp, l.loc), l.idx, rec);
        if l.idx == 0 || self.overlapping() {
            self.fix_keys(tp, 0);
        }
        Ok(())
    }

    /// Sets parent keys from the block at `level` upwards: while the
    /// block is its parent's first child (low keys), or, in overlapping
    /// trees, while the parent's entry changes (high keys).
    pub(crate) fn fix_keys(&mut self, tp: &mut Trans<'_>, mut level: usize) {
        let overlapping = self.overlapping();
        while level + 1 < self.path.len() {
            let l = self.path[level];
            let lay = self.lay(level, l.loc);
            if lay.numrecs(self.data(tp, l.loc)) == 0 {
                return;
            }
            let k = self.path_key(tp, level);
            let p = self.path[level + 1];
            let play = self.lay(level + 1, p.loc);
            if play.key(self.data(tp, p.loc), p.idx) == &k[..] {
                return;
            }
            play.set_key(self.data_mut(tp, p.loc), p.idx, &k);
            if p.idx != 0 && !overlapping {
                return;
            }
            level += 1;
        }
    }

    /// [`Self::fix_keys`] after entry `ent` was inserted into the block at
    /// `level` (which did not split). In an overlapping tree each block on
    /// the path gains at most `ent`'s high key: its new high key is the
    /// higher of the one its parent holds and `ent`'s, so no block's
    /// entries need be read again on the way up, and inserting costs what
    /// the one record costs however full the nodes above it are.
    pub(crate) fn fix_keys_inserted(&mut self, tp: &mut Trans<'_>, level: usize, ent: &[u8]) {
        if !self.overlapping() || level + 1 >= self.path.len() {
            return self.fix_keys(tp, level);
        }
        let n = self.lay(level, self.path[level].loc).low_len;
        let mut high = vec![0u8; n];
        if self.lay(level, self.path[level].loc).leaf {
            self.ops.high_key_of_rec(ent, &mut high);
        } else {
            high.copy_from_slice(&ent[n..2 * n]);
        }
        let mut level = level;
        while level + 1 < self.path.len() {
            let l = self.path[level];
            let lay = self.lay(level, l.loc);
            let mut k = self.entry_key(&lay, self.data(tp, l.loc), 0);
            let p = self.path[level + 1];
            let play = self.lay(level + 1, p.loc);
            let old = play.key(self.data(tp, p.loc), p.idx);
            if self.ops.cmp_keys(&old[n..2 * n], &high) == Ordering::Greater {
                high.copy_from_slice(&old[n..2 * n]);
            }
            k.extend_from_slice(&high);
            if old == &k[..] {
                return;
            }
            play.set_key(self.data_mut(tp, p.loc), p.idx, &k);
            level += 1;
        }
    }

    /// Moves to the next record; false (cursor past the end) when none.
    /// From before the first record, moves to the first.
    pub fn increment(&mut self, tp: &mut Trans<'_>) -> Result<bool> {
        if self.path.is_empty() {
            return Ok(false);
        }
        if self.before_first {
            self.before_first = false;
            return Ok(self.get(tp).is_some());
        }
        let mut level = 0;
        loop {
            let l = self.path[level];
            let n = self.lay(level, l.loc).numrecs(self.data(tp, l.loc));
            if l.idx + 1 < n {
                self.path[level].idx += 1;
                break;
            }
            if level + 1 == self.path.len() {
                self.path[0].idx = self
                    .lay(0, self.path[0].loc)
                    .numrecs(self.data(tp, self.path[0].loc));
                return Ok(false);
            }
            level += 1;
        }
        self.descend_edge(tp, level, false)?;
        Ok(true)
    }

    /// Moves to the previous record; false (cursor before the first
    /// record: [`Cursor::get`] gives None) when none.
    pub fn decrement(&mut self, tp: &mut Trans<'_>) -> Result<bool> {
        if self.path.is_empty() || self.before_first {
            return Ok(false);
        }
        let mut level = 0;
        loop {
            if self.path[level].idx > 0 {
                self.path[level].idx -= 1;
                break;
            }
            if level + 1 == self.path.len() {
                self.before_first = true;
                return Ok(false);
            }
            level += 1;
        }
        self.descend_edge(tp, level, true)?;
        Ok(true)
    }

    /// Below `level`, follows the path's pointer at each level to the
    /// first (or, with `last`, the last) entry of each lower block.
    fn descend_edge(&mut self, tp: &mut Trans<'_>, level: usize, last: bool) -> Result<()> {
        for lv in (1..=level).rev() {
            let l = self.path[lv];
            let lay = self.lay(lv, l.loc);
            let child = lay.ptr(self.data(tp, l.loc), l.idx);
            if child == NULL_LONG {
                return Err(self.corrupt("null child pointer"));
            }
            let id = self.read_block(tp, child, lv - 1)?;
            let clay = self.lay(lv - 1, Loc::Buf(id));
            let n = clay.numrecs(tp.buf(id));
            if n == 0 {
                return Err(self.corrupt(format!("empty block at level {}", lv - 1)));
            }
            self.path[lv - 1] = Lvl {
                loc: Loc::Buf(id),
                ptr: child,
                idx: if last { n - 1 } else { 0 },
            };
        }
        Ok(())
    }
}

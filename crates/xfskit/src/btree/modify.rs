//! Changing a tree's shape: insert (split a full block into a new right
//! sibling, grow a new root) and delete (borrow from or join with a
//! sibling under the same parent, shrink the root).

use super::block::{init_header, Lay, NULL_LONG};
use super::cursor::{Cursor, Dir, Loc, Lvl};
use super::BtreeOps;
use crate::error::{Error, Result};
use crate::trans::{BufId, Trans};
use std::cmp::Ordering;

impl<O: BtreeOps> Cursor<O> {
    /// Inserts record `rec` (its key must not be in the tree yet). The
    /// cursor ends on the new record.
    pub fn insert(&mut self, tp: &mut Trans<'_>, rec: &[u8]) -> Result<()> {
        let key = self.key_of(rec);
        if self.lookup(tp, &key, Dir::Eq)? {
            return Err(Error::Invalid(format!(
                "btree {:#x}: key already present",
                self.ops.shape().magic
            )));
        }
        let mut level = 0;
        let mut idx = self.path[0].idx;
        let mut ent = rec.to_vec();
        let mut reshaped = false;
        loop {
            let l = self.path[level];
            let lay = self.lay(level, l.loc);
            let n = lay.numrecs(self.data(tp, l.loc));
            if n < lay.maxrecs {
                lay.insert(self.data_mut(tp, l.loc), idx, &ent);
                self.path[level].idx = idx;
                if idx == 0 || self.overlapping() {
                    self.fix_keys_inserted(tp, level, &ent);
                }
                break;
            }
            reshaped = true;
            if level + 1 == self.path.len() {
                match l.loc {
                    Loc::IRoot => {
                        self.push_iroot(tp)?;
                        continue;
                    }
                    Loc::Buf(_) => self.grow_root(tp)?,
                }
            }
            ent = self.split(tp, level, idx, &ent)?;
            level += 1;
            idx = self.path[level].idx + 1;
        }
        // Without a split the path already ends on the new record.
        if reshaped {
            self.lookup(tp, &key, Dir::Eq)?;
        }
        Ok(())
    }

    /// Inserts `rec` right after the record under the cursor when that is
    /// its place and the leaf has room: the next of a run of ascending
    /// records, put in without a lookup from the root. Anywhere else it
    /// is [`Self::insert`]. The cursor ends on the new record.
    pub fn insert_next(&mut self, tp: &mut Trans<'_>, rec: &[u8]) -> Result<()> {
        if !self.fits_next(tp, rec) {
            return self.insert(tp, rec);
        }
        let l = self.path[0];
        let lay = self.lay(0, l.loc);
        let idx = l.idx + 1;
        lay.insert(self.data_mut(tp, l.loc), idx, rec);
        self.path[0].idx = idx;
        // Not the leaf's first entry: only an overlapping tree's high keys
        // can change above it.
        if self.overlapping() {
            self.fix_keys_inserted(tp, 0, rec);
        }
        Ok(())
    }

    /// True when `rec` belongs just after the record under the cursor, in
    /// the same leaf block, and the leaf is not full: its key is above the
    /// current record's, and below the next record's, or the leaf is the
    /// last one.
    fn fits_next(&self, tp: &Trans<'_>, rec: &[u8]) -> bool {
        let Some(l) = self.path.first().copied() else {
            return false;
        };
        if self.before_first || !matches!(l.loc, Loc::Buf(_)) {
            return false;
        }
        let lay = self.lay(0, l.loc);
        let d = self.data(tp, l.loc);
        let n = lay.numrecs(d);
        if l.idx >= n || n >= lay.maxrecs {
            return false;
        }
        let key = self.key_of(rec);
        if self.cmp_entry(&lay, d, l.idx, &key) != Ordering::Less {
            return false;
        }
        if l.idx + 1 < n {
            self.cmp_entry(&lay, d, l.idx + 1, &key) == Ordering::Greater
        } else {
            lay.rightsib(d) == NULL_LONG
        }
    }

    /// A new, empty block at `level` (header written).
    fn new_block(&mut self, tp: &mut Trans<'_>, level: usize, near: u64) -> Result<(u64, BufId)> {
        let s = self.ops.shape();
        let ptr = self.ops.alloc_block(tp, near)?;
        let daddr = self.ops.ptr_daddr(tp, ptr)?;
        let id = tp.get_buf(daddr, s.block_size as u32, Some(s.crc_off()));
        let uuid = tp.geo().meta_uuid;
        init_header(&s, tp.buf_mut(id), level, daddr.0, &uuid);
        Ok((ptr, id))
    }

    /// Adds a root block above the current (full) block root, with one
    /// entry for the old root.
    fn grow_root(&mut self, tp: &mut Trans<'_>) -> Result<()> {
        let top = self.path.len() - 1;
        let old = self.path[top];
        let key = self.path_key(tp, top);
        let (ptr, id) = self.new_block(tp, top + 1, old.ptr)?;
        let lay = self.lay(top + 1, Loc::Buf(id));
        let mut e = key;
        e.extend_from_slice(&lay.ptr_bytes(old.ptr));
        lay.insert(tp.buf_mut(id), 0, &e);
        self.path.push(Lvl {
            loc: Loc::Buf(id),
            ptr,
            idx: 0,
        });
        self.ops.set_root(tp, ptr, self.path.len())
    }

    /// Moves the full in-inode root's entries into a new block below it;
    /// the inode keeps one entry (the tree grows a level).
    fn push_iroot(&mut self, tp: &mut Trans<'_>) -> Result<()> {
        let top = self.path.len() - 1;
        let rlay = self.lay(top, Loc::IRoot);
        let ents = rlay.ents(&self.iroot);
        let near = if rlay.leaf || ents.is_empty() {
            0
        } else {
            rlay.ptr(&self.iroot, 0)
        };
        let (ptr, id) = self.new_block(tp, top, near)?;
        let blay = self.lay(top, Loc::Buf(id));
        blay.set_ents(tp.buf_mut(id), &ents);
        let key = self.block_key(&blay, tp.buf(id));
        let nlay = Lay::iroot(&self.ops.shape(), top + 1, self.iroot.len());
        nlay.set_level(&mut self.iroot, top + 1);
        let mut e = key;
        e.extend_from_slice(&nlay.ptr_bytes(ptr));
        nlay.set_ents(&mut self.iroot, &[e]);
        self.path[top] = Lvl {
            loc: Loc::Buf(id),
            ptr,
            idx: self.path[top].idx,
        };
        self.path.push(Lvl {
            loc: Loc::IRoot,
            ptr: 0,
            idx: 0,
        });
        self.ops.set_root(tp, 0, self.path.len())
    }

    /// Splits the full block at `level` while inserting `ent` at `idx`;
    /// returns the parent entry for the new right block.
    fn split(
        &mut self,
        tp: &mut Trans<'_>,
        level: usize,
        idx: usize,
        ent: &[u8],
    ) -> Result<Vec<u8>> {
        let l = self.path[level];
        let Loc::Buf(lid) = l.loc else {
            return Err(self.corrupt("split of an in-inode root"));
        };
        let lay = self.lay(level, l.loc);
        let mut ents = lay.ents(tp.buf(lid));
        ents.insert(idx, ent.to_vec());
        let lcount = ents.len() / 2;
        let (rptr, rid) = self.new_block(tp, level, l.ptr)?;
        let old_right = lay.rightsib(tp.buf(lid));
        {
            let d = tp.buf_mut(lid);
            lay.set_ents(d, &ents[..lcount]);
            lay.set_rightsib(d, rptr);
        }
        {
            let d = tp.buf_mut(rid);
            lay.set_ents(d, &ents[lcount..]);
            lay.set_leftsib(d, l.ptr);
            lay.set_rightsib(d, old_right);
        }
        if old_right != NULL_LONG {
            let oid = self.read_block(tp, old_right, level)?;
            lay.set_leftsib(tp.buf_mut(oid), rptr);
        }
        if idx == 0 || self.overlapping() {
            self.fix_keys(tp, level);
        }
        let mut pe = self.block_key(&lay, tp.buf(rid));
        pe.extend_from_slice(&lay.ptr_bytes(rptr));
        Ok(pe)
    }

    /// Deletes the record under the cursor. The cursor ends on the record
    /// that followed it (or past the end).
    pub fn delete(&mut self, tp: &mut Trans<'_>) -> Result<()> {
        let rec = self.get_rec(tp)?;
        let key = self.key_of(&rec);
        let mut level = 0;
        let mut idx = self.path[0].idx;
        loop {
            let l = self.path[level];
            let lay = self.lay(level, l.loc);
            lay.remove(self.data_mut(tp, l.loc), idx);
            let n = lay.numrecs(self.data(tp, l.loc));
            if n > 0 && (idx == 0 || self.overlapping()) {
                self.fix_keys(tp, level);
            }
            let top = self.path.len() - 1;
            if level == top {
                match l.loc {
                    Loc::Buf(id) if level > 0 && n == 1 => {
                        let child = lay.ptr(tp.buf(id), 0);
                        tp.stale_buf(id);
                        self.ops.free_block(tp, l.ptr)?;
                        self.path.pop();
                        self.ops.set_root(tp, child, self.path.len())?;
                    }
                    Loc::IRoot => self.try_kill_iroot(tp)?,
                    _ => {}
                }
                break;
            }
            if n >= lay.maxrecs / 2 {
                break;
            }
            if level + 1 == top && self.path[top].loc == Loc::IRoot {
                let rlay = self.lay(top, Loc::IRoot);
                if rlay.numrecs(&self.iroot) == 1 {
                    self.try_kill_iroot(tp)?;
                    break;
                }
            }
            match self.rebalance(tp, level, n)? {
                Some(pidx) => {
                    level += 1;
                    idx = pidx;
                }
                None => break,
            }
        }
        self.lookup(tp, &key, Dir::Ge)?;
        Ok(())
    }

    /// Fixes an underfull block at `level` (holding `n` entries) using a
    /// sibling under the same parent. Returns the parent index to remove
    /// when two blocks were joined.
    fn rebalance(&mut self, tp: &mut Trans<'_>, level: usize, n: usize) -> Result<Option<usize>> {
        let l = self.path[level];
        let Loc::Buf(id) = l.loc else {
            return Ok(None);
        };
        let lay = self.lay(level, l.loc);
        let ov = self.overlapping();
        let min = lay.maxrecs / 2;
        let p = self.path[level + 1];
        let play = self.lay(level + 1, p.loc);
        let pn = play.numrecs(self.data(tp, p.loc));
        if p.idx + 1 < pn {
            let rptr = play.ptr(self.data(tp, p.loc), p.idx + 1);
            let rid = self.read_block(tp, rptr, level)?;
            let rn = lay.numrecs(tp.buf(rid));
            if rn > min {
                let e = lay.ent(tp.buf(rid), 0);
                lay.remove(tp.buf_mut(rid), 0);
                lay.insert(tp.buf_mut(id), n, &e);
                let rk = self.block_key(&lay, tp.buf(rid));
                play.set_key(self.data_mut(tp, p.loc), p.idx + 1, &rk);
                if n == 0 || ov {
                    self.fix_keys(tp, level);
                }
                if ov {
                    self.fix_keys(tp, level + 1);
                }
                return Ok(None);
            }
            self.join(tp, level, id, l.ptr, rid, rptr)?;
            if n == 0 || ov {
                self.fix_keys(tp, level);
            }
            return Ok(Some(p.idx + 1));
        }
        if p.idx > 0 {
            let lptr = play.ptr(self.data(tp, p.loc), p.idx - 1);
            let lid = self.read_block(tp, lptr, level)?;
            let ln = lay.numrecs(tp.buf(lid));
            if ln > min {
                let e = lay.ent(tp.buf(lid), ln - 1);
                lay.remove(tp.buf_mut(lid), ln - 1);
                lay.insert(tp.buf_mut(id), 0, &e);
                let lk = self.block_key(&lay, tp.buf(lid));
                play.set_key(self.data_mut(tp, p.loc), p.idx - 1, &lk);
                self.fix_keys(tp, level);
                if ov {
                    self.fix_keys(tp, level + 1);
                }
                return Ok(None);
            }
            self.join(tp, level, lid, lptr, id, l.ptr)?;
            let lk = self.block_key(&lay, tp.buf(lid));
            play.set_key(self.data_mut(tp, p.loc), p.idx - 1, &lk);
            return Ok(Some(p.idx));
        }
        Ok(None)
    }

    /// Moves every entry of block `rid` into its left neighbour `lid` and
    /// frees `rid`.
    fn join(
        &mut self,
        tp: &mut Trans<'_>,
        level: usize,
        lid: BufId,
        lptr: u64,
        rid: BufId,
        rptr: u64,
    ) -> Result<()> {
        let lay = self.lay(level, Loc::Buf(lid));
        let mut ents = lay.ents(tp.buf(lid));
        ents.extend(lay.ents(tp.buf(rid)));
        if ents.len() > lay.maxrecs {
            return Err(self.corrupt("join would overfill a block"));
        }
        let far = lay.rightsib(tp.buf(rid));
        {
            let d = tp.buf_mut(lid);
            lay.set_ents(d, &ents);
            lay.set_rightsib(d, far);
        }
        if far != NULL_LONG {
            let fid = self.read_block(tp, far, level)?;
            lay.set_leftsib(tp.buf_mut(fid), lptr);
        }
        tp.stale_buf(rid);
        self.ops.free_block(tp, rptr)
    }

    /// When the in-inode root has one entry and its child is a node whose
    /// entries fit in the inode, pulls them up (the tree shrinks a level).
    fn try_kill_iroot(&mut self, tp: &mut Trans<'_>) -> Result<()> {
        let top = self.path.len() - 1;
        if top == 0 || (top == 1 && !self.ops.iroot_records()) {
            return Ok(());
        }
        let rlay = self.lay(top, Loc::IRoot);
        if rlay.numrecs(&self.iroot) != 1 {
            return Ok(());
        }
        let child = rlay.ptr(&self.iroot, 0);
        let cid = self.read_block(tp, child, top - 1)?;
        let clay = self.lay(top - 1, Loc::Buf(cid));
        let ents = clay.ents(tp.buf(cid));
        // The kernel measures the child against the room of the root's
        // own level (key/pointer pairs), also when the child is a leaf.
        let room = Lay::iroot(&self.ops.shape(), top, self.iroot.len()).maxrecs;
        let nlay = Lay::iroot(&self.ops.shape(), top - 1, self.iroot.len());
        if ents.len() > room || ents.len() > nlay.maxrecs {
            return Ok(());
        }
        nlay.set_level(&mut self.iroot, top - 1);
        nlay.set_ents(&mut self.iroot, &ents);
        tp.stale_buf(cid);
        self.ops.free_block(tp, child)?;
        self.path.pop();
        self.path[top - 1] = Lvl {
            loc: Loc::IRoot,
            ptr: 0,
            idx: 0,
        };
        self.ops.set_root(tp, 0, self.path.len())
    }
}

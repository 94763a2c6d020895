//! Range queries on overlapping-interval trees (the rmapbt with reflink):
//! every record whose key interval meets a given one. A lookup by low key
//! finds where a record would sit, but a record that starts far earlier
//! may still reach the block asked about; the high keys kept in the
//! nodes say which subtrees can hold such records, so only those are
//! read.

use super::cursor::{Cursor, Loc};
use super::{BtreeOps, MAX_LEVELS};
use crate::error::Result;
use crate::trans::Trans;
use std::cmp::Ordering;

impl<O: BtreeOps> Cursor<O> {
    /// The records whose interval `[low key, high key]` meets `[lo, hi]`,
    /// in key order. For roots in blocks and in inodes.
    pub fn query_range(
        &mut self,
        tp: &mut Trans<'_>,
        lo: &[u8],
        hi: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if self.ops.shape().root_in_inode {
            if self.iroot.len() < 4 {
                return Err(self.corrupt("in-inode root too short"));
            }
            let level = usize::from(crate::bytes::be16(&self.iroot, 0));
            if level >= MAX_LEVELS {
                return Err(self.corrupt(format!("{} levels", level + 1)));
            }
            self.visit_at(tp, Loc::IRoot, level, lo, hi, &mut out)?;
            return Ok(out);
        }
        let (ptr, levels) = self.ops.root(tp)?;
        if levels == 0 || levels > MAX_LEVELS {
            return Err(self.corrupt(format!("{levels} levels")));
        }
        self.visit(tp, ptr, levels - 1, lo, hi, &mut out)?;
        Ok(out)
    }

    fn visit(
        &mut self,
        tp: &mut Trans<'_>,
        ptr: u64,
        level: usize,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let id = self.read_block(tp, ptr, level)?;
        self.visit_at(tp, Loc::Buf(id), level, lo, hi, out)
    }

    fn visit_at(
        &mut self,
        tp: &mut Trans<'_>,
        loc: Loc,
        level: usize,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let lay = self.lay(level, loc);
        let d = self.data(tp, loc);
        let n = lay.numrecs(d);
        if n > lay.maxrecs {
            return Err(self.corrupt(format!("{n} entries at level {level}")));
        }
        let key_len = lay.low_len;
        let mut low = vec![0u8; key_len];
        let mut high = vec![0u8; key_len];
        if level == 0 {
            for i in 0..n {
                let rec = lay.rec(d, i);
                self.ops.key_of_rec(rec, &mut low);
                if self.ops.cmp_keys(&low, hi) == Ordering::Greater {
                    break;
                }
                self.ops.high_key_of_rec(rec, &mut high);
                if self.ops.cmp_keys(&high, lo) != Ordering::Less {
                    out.push(rec.to_vec());
                }
            }
            return Ok(());
        }
        let mut children = Vec::new();
        for i in 0..n {
            let k = lay.key(d, i);
            let (l, h) = if lay.overlapping {
                (&k[..key_len], &k[key_len..2 * key_len])
            } else {
                (&k[..key_len], &hi[..key_len])
            };
            if self.ops.cmp_keys(l, hi) == Ordering::Greater {
                break;
            }
            if self.ops.cmp_keys(h, lo) != Ordering::Less {
                children.push(lay.ptr(d, i));
            }
        }
        for c in children {
            self.visit(tp, c, level - 1, lo, hi, out)?;
        }
        Ok(())
    }
}

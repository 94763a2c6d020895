//! Byte-level access to one btree block (or an in-inode root): header
//! fields, records, keys and pointers, and shifting entries in and out.
//!
//! An "entry" is what one slot holds: a record in a leaf, a key followed
//! by its pointer in a node (the two live in separate arrays on disk).

use super::Shape;
use crate::bytes::{be16, be32, be64};

/// Null short (AG block) pointer.
pub const NULL_SHORT: u32 = u32::MAX;
/// Null long (filesystem block) pointer.
pub const NULL_LONG: u64 = u64::MAX;

/// Where the parts of one block (or in-inode root) are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lay {
    pub hdr: usize,
    pub maxrecs: usize,
    pub leaf: bool,
    pub rec_len: usize,
    /// Bytes of a node entry's key part (low key, or low + high key).
    pub key_len: usize,
    /// Bytes of one key.
    pub low_len: usize,
    pub overlapping: bool,
    pub ptr_len: usize,
    /// The 4-byte `bmdr` header of a root in an inode.
    pub iroot: bool,
    pub long: bool,
}

impl Lay {
    /// Layout of a block at `level`.
    pub fn block(s: &Shape, level: usize) -> Lay {
        Lay {
            hdr: s.hdr_len(),
            maxrecs: s.maxrecs(level),
            leaf: level == 0,
            rec_len: s.rec_len,
            key_len: s.node_key_len(),
            low_len: s.key_len,
            overlapping: s.overlapping,
            ptr_len: s.ptr_len(),
            iroot: false,
            long: s.long_ptrs,
        }
    }

    /// Layout of an in-inode root of `len` bytes at `level`.
    pub fn iroot(s: &Shape, level: usize, len: usize) -> Lay {
        let per = if level == 0 {
            s.rec_len
        } else {
            s.node_key_len() + s.ptr_len()
        };
        Lay {
            hdr: 4,
            maxrecs: len.saturating_sub(4) / per.max(1),
            leaf: level == 0,
            rec_len: s.rec_len,
            key_len: s.node_key_len(),
            low_len: s.key_len,
            overlapping: s.overlapping,
            ptr_len: s.ptr_len(),
            iroot: true,
            long: s.long_ptrs,
        }
    }

    pub fn numrecs(&self, d: &[u8]) -> usize {
        usize::from(be16(d, if self.iroot { 2 } else { 6 }))
    }

    pub fn set_numrecs(&self, d: &mut [u8], n: usize) {
        let o = if self.iroot { 2 } else { 6 };
        d[o..o + 2].copy_from_slice(&(n as u16).to_be_bytes());
    }

    pub fn set_level(&self, d: &mut [u8], l: usize) {
        let o = if self.iroot { 0 } else { 4 };
        d[o..o + 2].copy_from_slice(&(l as u16).to_be_bytes());
    }

    /// Offset of record/key `i` (records in a leaf, keys in a node).
    fn slot(&self, i: usize) -> usize {
        self.hdr
            + i * if self.leaf {
                self.rec_len
            } else {
                self.key_len
            }
    }

    fn ptr_off(&self, i: usize) -> usize {
        self.hdr + self.maxrecs * self.key_len + i * self.ptr_len
    }

    /// Record `i` of a leaf.
    pub fn rec<'a>(&self, d: &'a [u8], i: usize) -> &'a [u8] {
        let o = self.slot(i);
        &d[o..o + self.rec_len]
    }

    /// Key `i` of a node.
    pub fn key<'a>(&self, d: &'a [u8], i: usize) -> &'a [u8] {
        let o = self.slot(i);
        &d[o..o + self.key_len]
    }

    /// Pointer `i` of a node.
    pub fn ptr(&self, d: &[u8], i: usize) -> u64 {
        let o = self.ptr_off(i);
        if self.long {
            be64(d, o)
        } else {
            u64::from(be32(d, o))
        }
    }

    /// Encodes a pointer in this tree's width.
    pub fn ptr_bytes(&self, p: u64) -> Vec<u8> {
        if self.long {
            p.to_be_bytes().to_vec()
        } else {
            (p as u32).to_be_bytes().to_vec()
        }
    }

    /// Entry `i` (record, or key then pointer).
    pub fn ent(&self, d: &[u8], i: usize) -> Vec<u8> {
        if self.leaf {
            self.rec(d, i).to_vec()
        } else {
            let mut e = self.key(d, i).to_vec();
            let o = self.ptr_off(i);
            e.extend_from_slice(&d[o..o + self.ptr_len]);
            e
        }
    }

    /// Overwrites entry `i`.
    pub fn set_ent(&self, d: &mut [u8], i: usize, e: &[u8]) {
        let o = self.slot(i);
        if self.leaf {
            d[o..o + self.rec_len].copy_from_slice(&e[..self.rec_len]);
        } else {
            d[o..o + self.key_len].copy_from_slice(&e[..self.key_len]);
            let p = self.ptr_off(i);
            d[p..p + self.ptr_len].copy_from_slice(&e[self.key_len..self.key_len + self.ptr_len]);
        }
    }

    /// Overwrites key `i` of a node (or record `i` of a leaf).
    pub fn set_key(&self, d: &mut [u8], i: usize, k: &[u8]) {
        let o = self.slot(i);
        let n = if self.leaf {
            self.rec_len
        } else {
            self.key_len
        };
        d[o..o + n].copy_from_slice(&k[..n]);
    }

    /// Inserts entry `e` at `i`, shifting later entries right. The caller
    /// checks there is room.
    pub fn insert(&self, d: &mut [u8], i: usize, e: &[u8]) {
        let n = self.numrecs(d);
        let w = if self.leaf {
            self.rec_len
        } else {
            self.key_len
        };
        d.copy_within(self.slot(i)..self.slot(n), self.slot(i) + w);
        if !self.leaf {
            d.copy_within(
                self.ptr_off(i)..self.ptr_off(n),
                self.ptr_off(i) + self.ptr_len,
            );
        }
        self.set_ent(d, i, e);
        self.set_numrecs(d, n + 1);
    }

    /// Removes entry `i`, shifting later entries left.
    pub fn remove(&self, d: &mut [u8], i: usize) {
        let n = self.numrecs(d);
        d.copy_within(self.slot(i + 1)..self.slot(n), self.slot(i));
        if !self.leaf {
            d.copy_within(self.ptr_off(i + 1)..self.ptr_off(n), self.ptr_off(i));
        }
        self.set_numrecs(d, n - 1);
    }

    /// All entries.
    pub fn ents(&self, d: &[u8]) -> Vec<Vec<u8>> {
        (0..self.numrecs(d)).map(|i| self.ent(d, i)).collect()
    }

    /// Replaces all entries by `es`.
    pub fn set_ents(&self, d: &mut [u8], es: &[Vec<u8>]) {
        for (i, e) in es.iter().enumerate() {
            self.set_ent(d, i, e);
        }
        self.set_numrecs(d, es.len());
    }

    pub fn rightsib(&self, d: &[u8]) -> u64 {
        if self.long {
            be64(d, 16)
        } else {
            widen(be32(d, 12))
        }
    }

    pub fn set_leftsib(&self, d: &mut [u8], p: u64) {
        if self.long {
            d[8..16].copy_from_slice(&p.to_be_bytes());
        } else {
            d[8..12].copy_from_slice(&narrow(p).to_be_bytes());
        }
    }

    pub fn set_rightsib(&self, d: &mut [u8], p: u64) {
        if self.long {
            d[16..24].copy_from_slice(&p.to_be_bytes());
        } else {
            d[12..16].copy_from_slice(&narrow(p).to_be_bytes());
        }
    }
}

/// A short pointer as u64 (null becomes [`NULL_LONG`]).
fn widen(p: u32) -> u64 {
    if p == NULL_SHORT {
        NULL_LONG
    } else {
        u64::from(p)
    }
}

fn narrow(p: u64) -> u32 {
    if p == NULL_LONG {
        NULL_SHORT
    } else {
        p as u32
    }
}

/// Writes a fresh v5 block header (no entries, null siblings).
pub(crate) fn init_header(s: &Shape, d: &mut [u8], level: usize, daddr: u64, uuid: &[u8; 16]) {
    d[0..4].copy_from_slice(&s.magic.to_be_bytes());
    d[4..6].copy_from_slice(&(level as u16).to_be_bytes());
    d[6..8].copy_from_slice(&0u16.to_be_bytes());
    if s.long_ptrs {
        d[8..16].copy_from_slice(&NULL_LONG.to_be_bytes());
        d[16..24].copy_from_slice(&NULL_LONG.to_be_bytes());
        d[24..32].copy_from_slice(&daddr.to_be_bytes());
        d[32..40].fill(0);
        d[40..56].copy_from_slice(uuid);
        d[56..64].copy_from_slice(&s.owner.to_be_bytes());
    } else {
        d[8..12].copy_from_slice(&NULL_SHORT.to_be_bytes());
        d[12..16].copy_from_slice(&NULL_SHORT.to_be_bytes());
        d[16..24].copy_from_slice(&daddr.to_be_bytes());
        d[24..32].fill(0);
        d[32..48].copy_from_slice(uuid);
        d[48..52].copy_from_slice(&(s.owner as u32).to_be_bytes());
    }
}

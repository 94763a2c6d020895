//! Helpers shared by the generic btree tests: a test btree (`TestOps`)
//! whose blocks come from the real allocator, its record and key codecs,
//! and checks of a tree against its model and of its on-disk structure.
#![allow(dead_code)]

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use xfskit::alloc::{alloc_extent, free_extent, AllocReq, Owner};
use xfskit::btree::{BtreeOps, Cursor, Dir, Shape, NULL_LONG};
use xfskit::buf::Verifier;
use xfskit::geometry::{AgBlock, AgNumber, Daddr, FsBlock};
use xfskit::trans::Trans;

pub const OWNER_INO: u64 = 1234;

/// A scratch btree: root kept here, blocks from the allocator.
pub struct TestOps {
    pub long: bool,
    /// Records are intervals [k, k + v % 50] with high keys in nodes.
    pub overlap: bool,
    pub inode_root: bool,
    /// The in-inode root may hold records (shrinks back to a leaf root).
    pub iroot_records: bool,
    pub root: u64,
    pub levels: usize,
    pub blocks: HashSet<u64>,
    pub block_size: usize,
    pub max_levels_seen: usize,
}

impl TestOps {
    pub fn fsb(&self, tp: &Trans<'_>, ptr: u64) -> FsBlock {
        if self.long {
            FsBlock(ptr)
        } else {
            tp.geo().fsb_make(AgNumber(0), AgBlock(ptr as u32))
        }
    }
}

impl BtreeOps for TestOps {
    fn shape(&self) -> Shape {
        Shape {
            magic: if self.long { 0x424d_4133 } else { 0x4142_3342 },
            long_ptrs: self.long,
            rec_len: if self.long { 16 } else { 8 },
            key_len: if self.overlap { 4 } else { 8 },
            block_size: self.block_size,
            owner: if self.long { OWNER_INO } else { 0 },
            root_in_inode: self.inode_root,
            overlapping: self.overlap,
        }
    }
    fn root(&self, _tp: &mut Trans<'_>) -> xfskit::Result<(u64, usize)> {
        Ok((self.root, self.levels))
    }
    fn set_root(&mut self, _tp: &mut Trans<'_>, ptr: u64, levels: usize) -> xfskit::Result<()> {
        self.root = ptr;
        self.levels = levels;
        self.max_levels_seen = self.max_levels_seen.max(levels);
        Ok(())
    }
    fn alloc_block(&mut self, tp: &mut Trans<'_>, near: u64) -> xfskit::Result<u64> {
        let target = if near == 0 || near == NULL_LONG {
            FsBlock(0)
        } else {
            self.fsb(tp, near)
        };
        let req = AllocReq {
            target,
            minlen: 1,
            maxlen: 1,
            alignment: 1,
            ag_only: true,
            owner: Owner::Ag,
        };
        let (fsb, _) = alloc_extent(tp, &req)?;
        let ptr = if self.long {
            fsb.0
        } else {
            u64::from(tp.geo().fsb_split(fsb).1 .0)
        };
        assert!(self.blocks.insert(ptr), "block {ptr} handed out twice");
        Ok(ptr)
    }
    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> xfskit::Result<()> {
        assert!(self.blocks.remove(&ptr), "freeing unknown block {ptr}");
        let fsb = self.fsb(tp, ptr);
        free_extent(tp, fsb, 1, &Owner::Ag)
    }
    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> xfskit::Result<Daddr> {
        Ok(tp.geo().fsb_to_daddr(self.fsb(tp, ptr)))
    }
    fn verifier(&self, level: u16) -> Verifier<'static> {
        if self.long {
            Verifier::Bmbt {
                owner: OWNER_INO,
                level: Some(level),
            }
        } else {
            Verifier::ShortBtree {
                magic: 0x4142_3342,
                agno: 0,
                level: Some(level),
            }
        }
    }
    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        let n = key.len();
        key.copy_from_slice(&rec[..n]);
    }
    fn high_key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        if self.overlap {
            key.copy_from_slice(&high_of(rec).to_be_bytes());
        } else {
            self.key_of_rec(rec, key);
        }
    }
    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        let n = if self.long { 8 } else { 4 };
        a[..n].cmp(&b[..n])
    }

    fn iroot_records(&self) -> bool {
        self.iroot_records
    }
}

/// Last block of a test interval record (overlap mode).
pub fn high_of(rec: &[u8]) -> u32 {
    let k = u32::from_be_bytes(rec[..4].try_into().unwrap());
    let v = u32::from_be_bytes(rec[4..8].try_into().unwrap());
    k + v % 50
}

pub fn rec(long: bool, k: u64, v: u64) -> Vec<u8> {
    if long {
        let mut r = k.to_be_bytes().to_vec();
        r.extend_from_slice(&v.to_be_bytes());
        r
    } else {
        let mut r = (k as u32).to_be_bytes().to_vec();
        r.extend_from_slice(&(v as u32).to_be_bytes());
        r
    }
}

pub fn key(long: bool, k: u64) -> Vec<u8> {
    let mut r = rec(long, k, 0);
    r.truncate(8);
    r
}

/// Keys in the short test tree are u32 (first 4 bytes), values the next 4.
pub fn unrec(long: bool, r: &[u8]) -> (u64, u64) {
    if long {
        (
            u64::from_be_bytes(r[..8].try_into().unwrap()),
            u64::from_be_bytes(r[8..16].try_into().unwrap()),
        )
    } else {
        (
            u64::from(u32::from_be_bytes(r[..4].try_into().unwrap())),
            u64::from(u32::from_be_bytes(r[4..8].try_into().unwrap())),
        )
    }
}

/// Walks the whole tree in order and compares with the model.
pub fn check_model(
    c: &mut Cursor<TestOps>,
    tp: &mut Trans<'_>,
    long: bool,
    m: &BTreeMap<u64, u64>,
) {
    let mut got = Vec::new();
    let mut more = c.lookup(tp, &key(long, 0), Dir::Ge).unwrap();
    while more {
        got.push(unrec(long, c.get(tp).unwrap()));
        more = c.increment(tp).unwrap();
    }
    let want: Vec<(u64, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(got.len(), want.len(), "record count");
    assert_eq!(got, want);
    // And backwards.
    let mut back = Vec::new();
    let mut more = c
        .lookup(tp, &key(long, u64::from(u32::MAX)), Dir::Le)
        .unwrap();
    while more {
        back.push(unrec(long, c.get(tp).unwrap()));
        more = c.decrement(tp).unwrap();
    }
    back.reverse();
    assert_eq!(back, want);
    // Stepping off either end and back.
    if let (Some(&(lo, _)), Some(&(hi, _))) = (want.first(), want.last()) {
        if lo > 0 {
            assert!(!c.lookup(tp, &key(long, lo - 1), Dir::Le).unwrap());
            assert!(c.get(tp).is_none());
            assert!(!c.decrement(tp).unwrap());
            assert!(c.increment(tp).unwrap());
            assert_eq!(unrec(long, c.get(tp).unwrap()).0, lo);
        }
        assert!(!c.lookup(tp, &key(long, hi + 1), Dir::Ge).unwrap());
        assert!(c.get(tp).is_none());
        assert!(c.decrement(tp).unwrap());
        assert_eq!(unrec(long, c.get(tp).unwrap()).0, hi);
    }
}

/// Entries of a block or in-inode root, header size, maxrecs.
pub fn entries(ops: &TestOps, d: &[u8], iroot: bool, level: usize) -> (usize, usize, usize) {
    let s = ops.shape();
    let hdr = if iroot { 4 } else { s.hdr_len() };
    let n = if iroot { be16(d, 2) } else { be16(d, 6) } as usize;
    let per = if level == 0 {
        s.rec_len
    } else {
        s.node_key_len() + s.ptr_len()
    };
    (n, hdr, (d.len() - hdr) / per)
}

pub fn be16(d: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([d[o], d[o + 1]])
}

/// Checks the tree's structure: levels, entry counts (minrecs for blocks
/// with siblings), parent keys equal to children's first keys, sibling
/// chains, and that the blocks reached are exactly the ones allocated.
pub fn check_structure(c: &Cursor<TestOps>, tp: &mut Trans<'_>) {
    let ops = &c.ops;
    let s = ops.shape();
    let (top, root): (usize, Vec<u8>) = if s.root_in_inode {
        (be16(c.inode_root(), 0) as usize, c.inode_root().to_vec())
    } else {
        let d = ops.ptr_daddr(tp, ops.root).unwrap();
        let id = tp
            .read_buf(
                d,
                s.block_size as u32,
                &ops.verifier((ops.levels - 1) as u16),
            )
            .unwrap();
        (ops.levels - 1, tp.buf(id).to_vec())
    };
    // Per level: (ptr, leftsib, rightsib) in key order.
    let mut by_level: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); top + 1];
    let mut seen = HashSet::new();
    if !s.root_in_inode {
        seen.insert(ops.root);
    }
    let mut stack = vec![(root, top, s.root_in_inode, None::<Vec<u8>>, true)];
    while let Some((d, level, iroot, pkey, lone)) = stack.pop() {
        let (n, hdr, maxrecs) = entries(ops, &d, iroot, level);
        assert!(n <= maxrecs);
        if !iroot && level < top && !lone {
            assert!(
                n >= maxrecs / 2,
                "level {level}: {n} entries, min {}",
                maxrecs / 2
            );
        }
        let first = |i: usize| -> Vec<u8> {
            let w = if level == 0 {
                s.rec_len
            } else {
                s.node_key_len()
            };
            let o = hdr + i * w;
            d[o..o + w].to_vec()
        };
        if let Some(k) = pkey {
            if n == 0 {
                // Only the lone child of an in-inode root may empty out
                // (the bmap code turns such a fork back into extents).
                assert!(lone && level == 0, "empty non-root block at level {level}");
                continue;
            }
            let n_cmp = if s.long_ptrs { 8 } else { 4 };
            assert_eq!(
                &k[..n_cmp],
                &first(0)[..n_cmp],
                "parent key differs at level {level}"
            );
            if s.overlapping {
                let high = (0..n)
                    .map(|i| {
                        let e = first(i);
                        if level == 0 {
                            high_of(&e)
                        } else {
                            u32::from_be_bytes(e[4..8].try_into().unwrap())
                        }
                    })
                    .max()
                    .unwrap();
                let got = u32::from_be_bytes(k[4..8].try_into().unwrap());
                assert_eq!(got, high, "high key at level {level}");
            }
        }
        for i in 1..n {
            assert_eq!(
                ops.cmp_keys(&first(i - 1), &first(i)),
                Ordering::Less,
                "order"
            );
        }
        if level == 0 {
            continue;
        }
        let mut kids = Vec::new();
        for i in 0..n {
            let o = hdr + maxrecs * s.node_key_len() + i * s.ptr_len();
            let p = if s.long_ptrs {
                u64::from_be_bytes(d[o..o + 8].try_into().unwrap())
            } else {
                u64::from(u32::from_be_bytes(d[o..o + 4].try_into().unwrap()))
            };
            assert!(seen.insert(p), "block {p} reached twice");
            let daddr = ops.ptr_daddr(tp, p).unwrap();
            let id = tp
                .read_buf(
                    daddr,
                    s.block_size as u32,
                    &ops.verifier((level - 1) as u16),
                )
                .unwrap();
            let b = tp.buf(id).to_vec();
            let (ls, rs) = if s.long_ptrs {
                (
                    u64::from_be_bytes(b[8..16].try_into().unwrap()),
                    u64::from_be_bytes(b[16..24].try_into().unwrap()),
                )
            } else {
                let w = |o: usize| {
                    let v = u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
                    if v == u32::MAX {
                        NULL_LONG
                    } else {
                        u64::from(v)
                    }
                };
                (w(8), w(12))
            };
            kids.push((p, ls, rs));
            stack.push((b, level - 1, false, Some(first(i)), iroot && n == 1));
        }
        by_level[level - 1].extend(kids);
    }
    // Siblings: nodes are pushed in key order per parent, but the stack
    // visits parents right to left; sort each level by the chain instead.
    for lv in by_level.iter() {
        if lv.is_empty() {
            continue;
        }
        let heads: Vec<_> = lv.iter().filter(|k| k.1 == NULL_LONG).collect();
        assert_eq!(heads.len(), 1, "one leftmost block per level");
        let mut cur = *heads[0];
        let mut count = 1;
        while cur.2 != NULL_LONG {
            let next = lv
                .iter()
                .find(|k| k.0 == cur.2)
                .expect("right sibling in level");
            assert_eq!(next.1, cur.0, "left sibling back pointer");
            cur = *next;
            count += 1;
        }
        assert_eq!(count, lv.len(), "sibling chain covers the level");
    }
    assert_eq!(seen, ops.blocks, "blocks reached vs allocated");
}

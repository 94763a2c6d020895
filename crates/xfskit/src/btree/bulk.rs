//! Bulk loading: a whole btree built bottom-up from its sorted records
//! into blocks chosen beforehand, as repair rebuilds a tree from what the
//! rest of the filesystem says it must hold (the shape of libxfs's
//! `xfs_btree_bload`, without its slack: blocks are filled evenly).
//!
//! Each node entry holds its child's first key; in an overlapping tree
//! (the rmapbt) also the highest key below it. Every block of a level holds the same number of entries give or take
//! one, so a level of two blocks or more keeps each at or above
//! [`Shape::minrecs`]. The blocks come back as bytes, CRC stamped (v5),
//! for the caller to write where it wants.

use super::block::{init_header, Lay, NULL_LONG};
use super::{BtreeOps, Shape};

/// Blocks each level of a tree of `n` records needs, leaves first (an
/// empty tree is one empty leaf).
pub fn level_blocks(shape: &Shape, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut entries = n;
    let mut level = 0;
    loop {
        let blocks = entries.div_ceil(shape.maxrecs(level).max(1)).max(1);
        out.push(blocks);
        if blocks == 1 {
            return out;
        }
        entries = blocks;
        level += 1;
    }
}

/// A tree built by [`build`].
#[derive(Debug)]
pub struct Built {
    /// The root block's pointer.
    pub root: u64,
    /// Levels.
    pub levels: usize,
    /// Every block: its pointer and contents.
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// Builds the tree of `ops` holding `recs` (whole records, sorted in the
/// tree's order) in the blocks `ptrs` (as many as [`level_blocks`] sums,
/// used leaves first, left to right). `daddr` gives each block's disk
/// address for its header; `uuid` is the filesystem's metadata UUID.
pub fn build<O: BtreeOps>(
    ops: &O,
    recs: &[&[u8]],
    ptrs: &[u64],
    daddr: &dyn Fn(u64) -> u64,
    uuid: &[u8; 16],
) -> Built {
    let s = ops.shape();
    let shape_levels = level_blocks(&s, recs.len());
    assert_eq!(
        ptrs.len(),
        shape_levels.iter().sum::<usize>(),
        "bulk load: blocks given do not match the tree's size"
    );
    let mut next = ptrs.iter().copied();
    let mut blocks = Vec::with_capacity(ptrs.len());
    // The entries of the level being built: leaf records, then the
    // (low key, high key, pointer) of each block of the level below.
    let mut entries: Vec<Vec<u8>> = recs.iter().map(|r| r.to_vec()).collect();
    let kl = s.key_len;
    let mut root = 0;
    for (level, &count) in shape_levels.iter().enumerate() {
        let lay = Lay::block(&s, level);
        let mine: Vec<u64> = next.by_ref().take(count).collect();
        let mut up = Vec::with_capacity(count);
        let (base, extra) = (entries.len() / count, entries.len() % count);
        let mut at = 0;
        for (i, &p) in mine.iter().enumerate() {
            let n = base + usize::from(i < extra);
            let mut d = vec![0u8; s.block_size];
            init_header(&s, &mut d, level, daddr(p), uuid);
            lay.set_leftsib(&mut d, if i == 0 { NULL_LONG } else { mine[i - 1] });
            lay.set_rightsib(&mut d, mine.get(i + 1).copied().unwrap_or(NULL_LONG));
            let ents = &entries[at..at + n];
            for (j, e) in ents.iter().enumerate() {
                lay.set_ent(&mut d, j, e);
            }
            lay.set_numrecs(&mut d, n);
            // The parent's entry: the block's first key (and, overlapping,
            // the highest key below it), then its pointer.
            let mut low = vec![0u8; kl];
            let mut high = vec![0u8; kl];
            if n > 0 {
                if level == 0 {
                    ops.key_of_rec(&ents[0], &mut low);
                } else {
                    low.copy_from_slice(&ents[0][..kl]);
                }
                if s.overlapping {
                    let mut h = vec![0u8; kl];
                    for (j, e) in ents.iter().enumerate() {
                        if level == 0 {
                            ops.high_key_of_rec(e, &mut h);
                        } else {
                            h.copy_from_slice(&e[kl..2 * kl]);
                        }
                        if j == 0 || ops.cmp_keys(&h, &high) == std::cmp::Ordering::Greater {
                            high.copy_from_slice(&h);
                        }
                    }
                }
            }
            let mut key = low;
            if s.overlapping {
                key.extend_from_slice(&high);
            }
            key.extend_from_slice(&lay.ptr_bytes(p));
            up.push(key);
            at += n;
            xfs_format::crc::stamp(&mut d, s.crc_off());
            blocks.push((p, d));
            root = p;
        }
        entries = up;
    }
    Built {
        root,
        levels: shape_levels.len(),
        blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::abt::{AllocBt, Which};
    use crate::geometry::AgNumber;

    fn bno(block_size: usize) -> AllocBt {
        AllocBt::new(AgNumber(3), Which::Bno, block_size)
    }

    #[test]
    fn levels_follow_the_fanout() {
        let s = bno(1024).shape();
        let (leaf, node) = (s.maxrecs(0), s.maxrecs(1));
        assert_eq!(level_blocks(&s, 0), vec![1]);
        assert_eq!(level_blocks(&s, leaf), vec![1]);
        assert_eq!(level_blocks(&s, leaf + 1), vec![2, 1]);
        assert_eq!(level_blocks(&s, leaf * node + 1), vec![node + 1, 2, 1]);
    }

    #[test]
    fn a_built_tree_reads_back_in_order_with_even_blocks() {
        let ops = bno(1024);
        let s = ops.shape();
        let n = s.maxrecs(0) * 3 + 5;
        let recs: Vec<[u8; 8]> = (0..n as u32)
            .map(|i| {
                let mut r = [0u8; 8];
                r[..4].copy_from_slice(&(i * 10).to_be_bytes());
                r[4..].copy_from_slice(&3u32.to_be_bytes());
                r
            })
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
        let need: usize = level_blocks(&s, n).iter().sum();
        let ptrs: Vec<u64> = (100..100 + need as u64).collect();
        let t = build(&ops, &refs, &ptrs, &|p| p * 2, &[7; 16]);
        assert_eq!(t.levels, 2);
        assert_eq!(t.root, 100 + need as u64 - 1);
        // Walk it: the root's pointers, each leaf's records in order.
        let get = |p: u64| &t.blocks.iter().find(|b| b.0 == p).unwrap().1;
        let root = get(t.root);
        let node = Lay::block(&s, 1);
        let leaf = Lay::block(&s, 0);
        let mut seen = Vec::new();
        for i in 0..node.numrecs(root) {
            let child = get(node.ptr(root, i));
            assert!(leaf.numrecs(child) >= s.minrecs(0));
            assert_eq!(node.key(root, i), leaf.rec(child, 0));
            for j in 0..leaf.numrecs(child) {
                seen.push(leaf.rec(child, j).to_vec());
            }
        }
        assert_eq!(seen, recs.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        // Siblings chain the leaves; CRCs verify.
        let first = get(node.ptr(root, 0));
        assert_eq!(leaf.rightsib(first), node.ptr(root, 1));
        for (_, d) in &t.blocks {
            assert!(xfs_format::crc::verify(d, s.crc_off()));
        }
    }
}

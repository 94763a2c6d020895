//! In-block layouts for writing: attr leaf blocks and da node blocks as
//! lists of entries, encoded whole (a changed leaf is always written
//! compacted: entries sorted by hash, names and values packed from the
//! end of the block, one free region between them).
//!
//! Decoding goes through the read code (`attr::leaf::parse`); the node
//! decoder here is the small one the read code keeps inline.

use crate::attr::leaf::{
    self, be16, be32, ATTR3_LEAF_MAGIC, ENTRY_SIZE, ENT_FLAGS, ENT_NAMEIDX, HDR_COUNT,
    HDR_FIRSTUSED, INFO_BACK, INFO_FORW, INFO_MAGIC, LEAF_HDR, LOCAL_HDR, REMOTE_HDR,
};
use crate::attr::node::{
    DA3_NODE_MAGIC, DA_MAXDEPTH, NODE_COUNT, NODE_ENTRY, NODE_ENT_BEFORE, NODE_HDR, NODE_LEVEL,
};
use crate::attr::{loc, Namespace, ValueRef, FLAG_LOCAL};
use crate::bytes::put_be16;
use crate::error::{Error, Result};

/// Size of the da3 block info every leaf and node starts with.
pub(crate) const INFO_SIZE: usize = 56;
/// Offset of the CRC in a da3 block.
pub(crate) const DA_CRC_OFF: usize = 12;
const INFO_BLKNO: usize = 16;
const INFO_UUID: usize = 32;
const INFO_OWNER: usize = 48;
/// Offset of the bytes-used count in a leaf header.
const HDR_USEDBYTES: usize = 58;
/// Offset of the free map (3 x (base be16, size be16)) in a leaf header.
const HDR_FREEMAP: usize = 64;
/// Names and values are aligned to this many bytes.
const NAME_ALIGN: usize = 4;

/// Where a leaf entry's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LVal {
    /// Next to the name.
    Local(Vec<u8>),
    /// In remote blocks from attr-fork block `blk`.
    Remote { blk: u32, len: u32 },
}

/// One leaf entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LEnt {
    pub hash: u32,
    pub ns: Namespace,
    pub name: Vec<u8>,
    pub val: LVal,
}

/// Bytes a local name/value takes in the name area.
pub(crate) fn local_entsize(namelen: usize, valuelen: usize) -> usize {
    (LOCAL_HDR + namelen + valuelen).next_multiple_of(NAME_ALIGN)
}

/// Bytes a remote name takes in the name area (the kernel's historical
/// struct padding included).
pub(crate) fn remote_entsize(namelen: usize) -> usize {
    (REMOTE_HDR + 2 + namelen).next_multiple_of(NAME_ALIGN)
}

/// True when a value of this size stays in the leaf (below 3/4 block).
pub(crate) fn is_local(bsize: usize, namelen: usize, valuelen: usize) -> bool {
    local_entsize(namelen, valuelen) < bsize / 2 + bsize / 4
}

impl LEnt {
    /// Bytes this entry takes in the name area.
    pub fn size(&self) -> usize {
        match &self.val {
            LVal::Local(v) => local_entsize(self.name.len(), v.len()),
            LVal::Remote { .. } => remote_entsize(self.name.len()),
        }
    }

    fn flags(&self) -> u8 {
        let l = if matches!(self.val, LVal::Local(_)) {
            FLAG_LOCAL
        } else {
            0
        };
        l | super::sf::ns_flags(self.ns)
    }
}

/// Bytes a leaf holding `ents` uses (header, entry table, names).
pub(crate) fn leaf_used(ents: &[LEnt]) -> usize {
    LEAF_HDR + ents.len() * ENTRY_SIZE + ents.iter().map(LEnt::size).sum::<usize>()
}

/// True when `ents` fit in one leaf of `bsize` bytes.
pub(crate) fn leaf_fits(bsize: usize, ents: &[LEnt]) -> bool {
    leaf_used(ents) <= bsize
}

/// Decodes a verified leaf: its entries, forward and back links.
pub(crate) fn decode_leaf(ino: u64, dablk: u64, buf: &[u8]) -> Result<(Vec<LEnt>, u32, u32)> {
    let lf = leaf::parse(&xfs_format::layout::V5, ino, dablk, buf)?;
    if lf.entries.len() != usize::from(be16(buf, HDR_COUNT)) {
        return Err(Error::Unsupported(format!(
            "inode {ino}: attr leaf {dablk} holds hidden (incomplete or parent) entries"
        )));
    }
    let ents = lf
        .entries
        .into_iter()
        .map(|r| LEnt {
            hash: r.hash,
            ns: r.ns,
            name: r.name,
            val: match r.value {
                ValueRef::Local(v) => LVal::Local(v),
                ValueRef::Remote { blk, len } => LVal::Remote { blk, len },
            },
        })
        .collect::<Vec<_>>();
    if ents.windows(2).any(|w| w[0].hash > w[1].hash) {
        return Err(Error::corrupt(
            "attr leaf block",
            loc(ino, dablk),
            "entries are not in hash order",
        ));
    }
    Ok((ents, lf.forw, lf.back))
}

/// Writes `ents` (sorted by hash; they must fit) into leaf block `buf`,
/// keeping its block info (links, identity) and rewriting the rest.
pub(crate) fn encode_leaf(buf: &mut [u8], ents: &[LEnt]) {
    let bsize = buf.len();
    buf[INFO_SIZE..].fill(0);
    buf[INFO_MAGIC..INFO_MAGIC + 2].copy_from_slice(&ATTR3_LEAF_MAGIC.to_be_bytes());
    let mut top = bsize;
    let mut used = 0usize;
    for (i, e) in ents.iter().enumerate() {
        let sz = e.size();
        top -= sz;
        used += sz;
        let t = LEAF_HDR + i * ENTRY_SIZE;
        buf[t..t + 4].copy_from_slice(&e.hash.to_be_bytes());
        buf[t + ENT_NAMEIDX..t + ENT_NAMEIDX + 2].copy_from_slice(&(top as u16).to_be_bytes());
        buf[t + ENT_FLAGS] = e.flags();
        let n = &mut buf[top..top + sz];
        match &e.val {
            LVal::Local(v) => {
                n[0..2].copy_from_slice(&(v.len() as u16).to_be_bytes());
                n[2] = e.name.len() as u8;
                n[LOCAL_HDR..LOCAL_HDR + e.name.len()].copy_from_slice(&e.name);
                let vs = LOCAL_HDR + e.name.len();
                n[vs..vs + v.len()].copy_from_slice(v);
            }
            LVal::Remote { blk, len } => {
                n[0..4].copy_from_slice(&blk.to_be_bytes());
                n[4..8].copy_from_slice(&len.to_be_bytes());
                n[8] = e.name.len() as u8;
                n[REMOTE_HDR..REMOTE_HDR + e.name.len()].copy_from_slice(&e.name);
            }
        }
    }
    let table_end = LEAF_HDR + ents.len() * ENTRY_SIZE;
    // A 64 KiB block's "first used = block size" does not fit 16 bits.
    let firstused = if top >= 1 << 16 { 0 } else { top as u16 };
    put_be16(buf, HDR_COUNT, ents.len() as u16);
    put_be16(buf, HDR_USEDBYTES, used as u16);
    put_be16(buf, HDR_FIRSTUSED, firstused);
    put_be16(buf, HDR_FREEMAP, table_end as u16);
    put_be16(buf, HDR_FREEMAP + 2, (top - table_end) as u16);
}

/// One da node entry: the highest hash below `before`, and the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NEnt {
    pub hash: u32,
    pub before: u32,
}

/// Most entries a node of `bsize` bytes holds.
pub(crate) fn node_max(bsize: usize) -> usize {
    (bsize - NODE_HDR) / NODE_ENTRY
}

/// True when `buf` (a verified da3 block) is a node.
pub(crate) fn is_node(buf: &[u8]) -> bool {
    be16(buf, INFO_MAGIC) == DA3_NODE_MAGIC
}

/// Decodes a verified node: level and entries.
pub(crate) fn decode_node(ino: u64, dablk: u64, buf: &[u8]) -> Result<(u16, Vec<NEnt>)> {
    let count = usize::from(be16(buf, NODE_COUNT));
    let level = be16(buf, NODE_LEVEL);
    if count == 0 || count > node_max(buf.len()) || level == 0 || level > DA_MAXDEPTH {
        return Err(Error::corrupt(
            "attr btree node",
            loc(ino, dablk),
            format!("{count} entries at level {level}"),
        ));
    }
    let ents = (0..count)
        .map(|i| {
            let o = NODE_HDR + i * NODE_ENTRY;
            NEnt {
                hash: be32(buf, o),
                before: be32(buf, o + NODE_ENT_BEFORE),
            }
        })
        .collect();
    Ok((level, ents))
}

/// Writes a node's header fields and entries, keeping its block info.
pub(crate) fn encode_node(buf: &mut [u8], level: u16, ents: &[NEnt]) {
    buf[INFO_SIZE..].fill(0);
    buf[INFO_MAGIC..INFO_MAGIC + 2].copy_from_slice(&DA3_NODE_MAGIC.to_be_bytes());
    put_be16(buf, NODE_COUNT, ents.len() as u16);
    put_be16(buf, NODE_LEVEL, level);
    for (i, e) in ents.iter().enumerate() {
        let o = NODE_HDR + i * NODE_ENTRY;
        buf[o..o + 4].copy_from_slice(&e.hash.to_be_bytes());
        buf[o + NODE_ENT_BEFORE..o + NODE_ENT_BEFORE + 4].copy_from_slice(&e.before.to_be_bytes());
    }
}

/// Fills the block info of a new da3 block.
pub(crate) fn init_info(buf: &mut [u8], magic: u16, daddr: u64, uuid: &[u8; 16], owner: u64) {
    buf[..INFO_SIZE].fill(0);
    buf[INFO_MAGIC..INFO_MAGIC + 2].copy_from_slice(&magic.to_be_bytes());
    buf[INFO_BLKNO..INFO_BLKNO + 8].copy_from_slice(&daddr.to_be_bytes());
    buf[INFO_UUID..INFO_UUID + 16].copy_from_slice(uuid);
    buf[INFO_OWNER..INFO_OWNER + 8].copy_from_slice(&owner.to_be_bytes());
}

/// Forward and back sibling links of a da3 block.
pub(crate) fn links(buf: &[u8]) -> (u32, u32) {
    (be32(buf, INFO_FORW), be32(buf, INFO_BACK))
}

/// Sets the forward sibling link.
pub(crate) fn set_forw(buf: &mut [u8], v: u32) {
    buf[INFO_FORW..INFO_FORW + 4].copy_from_slice(&v.to_be_bytes());
}

/// Sets the back sibling link.
pub(crate) fn set_back(buf: &mut [u8], v: u32) {
    buf[INFO_BACK..INFO_BACK + 4].copy_from_slice(&v.to_be_bytes());
}

/// Sets the recorded block number (disk address) of a da3 block.
pub(crate) fn set_blkno(buf: &mut [u8], daddr: u64) {
    buf[INFO_BLKNO..INFO_BLKNO + 8].copy_from_slice(&daddr.to_be_bytes());
}

/// Where to cut an overfull entry list so every piece fits a block of
/// `bsize` bytes: the start index of every piece after the first. Two
/// pieces of balanced size when possible, else as few as a greedy fill
/// gives. `size(i)` is the bytes entry `i` takes, `fixed` a block's
/// fixed overhead.
pub(crate) fn split_points(
    n: usize,
    bsize: usize,
    fixed: usize,
    size: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let total: usize = (0..n).map(&size).sum();
    let mut best: Option<(usize, usize)> = None;
    let mut left = 0usize;
    for cut in 1..n {
        left += size(cut - 1);
        let right = total - left;
        if fixed + left <= bsize && fixed + right <= bsize {
            let worst = left.max(right);
            if best.is_none_or(|(_, w)| worst < w) {
                best = Some((cut, worst));
            }
        }
    }
    if let Some((cut, _)) = best {
        return vec![cut];
    }
    let mut cuts = Vec::new();
    let mut fill = 0usize;
    for i in 0..n {
        let s = size(i);
        if fill > 0 && fixed + fill + s > bsize {
            cuts.push(i);
            fill = 0;
        }
        fill += s;
    }
    cuts
}

/// Pieces of `ents` cut at `cuts`.
pub(crate) fn cut<T: Clone>(ents: &[T], cuts: &[usize]) -> Vec<Vec<T>> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &c in cuts.iter().chain(std::iter::once(&ents.len())) {
        out.push(ents[from..c].to_vec());
        from = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lent(name: &str, v: LVal) -> LEnt {
        LEnt {
            hash: crate::attr::name_hash(name.as_bytes()),
            ns: Namespace::User,
            name: name.as_bytes().to_vec(),
            val: v,
        }
    }

    #[test]
    fn leaf_round_trips_through_the_reader() {
        for bsize in [1024usize, 4096, 65536] {
            let mut ents: Vec<LEnt> = (0..20)
                .map(|i| lent(&format!("name{i}"), LVal::Local(vec![i as u8; i])))
                .collect();
            ents.push(lent("big", LVal::Remote { blk: 9, len: 70000 }));
            ents.sort_by_key(|e| e.hash);
            assert!(leaf_fits(bsize, &ents));
            let mut buf = vec![0u8; bsize];
            init_info(&mut buf, ATTR3_LEAF_MAGIC, 8, &[1; 16], 5);
            encode_leaf(&mut buf, &ents);
            let (back, f, b) = decode_leaf(5, 0, &buf).unwrap();
            assert_eq!((f, b), (0, 0));
            assert_eq!(back, ents);
            // usedbytes and first-used agree with what xfs_repair recomputes.
            let used: usize = ents.iter().map(LEnt::size).sum();
            assert_eq!(usize::from(be16(&buf, HDR_USEDBYTES)), used);
            let firstused = usize::from(be16(&buf, HDR_FIRSTUSED));
            assert_eq!(firstused, bsize - used);
            let fm_base = usize::from(be16(&buf, HDR_FREEMAP));
            let fm_size = usize::from(be16(&buf, HDR_FREEMAP + 2));
            assert_eq!(fm_base + fm_size, firstused);
            assert_eq!(fm_base % 4 + fm_size % 4, 0);
        }
    }

    #[test]
    fn empty_leaf_and_sizes() {
        let mut buf = vec![0u8; 4096];
        encode_leaf(&mut buf, &[]);
        assert_eq!(be16(&buf, HDR_FIRSTUSED), 4096);
        assert_eq!(local_entsize(1, 1), 8);
        assert_eq!(remote_entsize(1), 12);
        assert!(is_local(4096, 10, 3000));
        assert!(!is_local(4096, 10, 3072));
    }

    #[test]
    fn node_round_trip() {
        let mut buf = vec![0u8; 1024];
        let ents: Vec<NEnt> = (0..node_max(1024) as u32)
            .map(|i| NEnt {
                hash: i * 3,
                before: i + 1,
            })
            .collect();
        encode_node(&mut buf, 2, &ents);
        assert!(is_node(&buf));
        assert_eq!(decode_node(1, 0, &buf).unwrap(), (2, ents));
    }

    #[test]
    fn splits_fit() {
        let sizes = [700usize, 8, 8, 8, 700, 8, 8];
        let cuts = split_points(sizes.len(), 1024, 80, |i| sizes[i]);
        assert_eq!(cuts.len(), 1);
        let sizes = [700usize, 300, 700, 300];
        let cuts = split_points(sizes.len(), 1024, 80, |i| sizes[i]);
        assert!(cuts.len() >= 2);
        let pieces = cut(&sizes, &cuts);
        for p in pieces {
            assert!(80 + p.iter().sum::<usize>() <= 1024);
        }
    }
}

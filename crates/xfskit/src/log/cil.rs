//! The committed item list: what transactions changed since the last
//! checkpoint, gathered in memory (the kernel's delayed logging), and how
//! a checkpoint is formatted into log items.
//!
//! A buffer changed by many transactions of one checkpoint is logged once,
//! with the union of their dirty 128-byte chunks and its newest bytes.
//! Inodes are logged as inode items (core and forks, `item_inode.rs`), a
//! new full inode chunk as one icreate item. Freed blocks that the live
//! log holds get cancel items, so that recovery does not replay old
//! contents over a block that was freed and reused.

use super::buftype::{self, BufKind, BLFT_SHIFT};
use super::item_inode::{icreate_region, inode_regions, Icreate};
use crate::bytes::{be16, be32};
use crate::error::{Error, Result};
use crate::geometry::{AgBlock, Geometry, Ino};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes covered by one bit of a buffer's dirty map.
pub(crate) const CHUNK: usize = 128;
/// Buffer log item type.
const XFS_LI_BUF: u16 = 0x123c;
const XFS_LI_DQUOT: u16 = 0x123d;
use xfs_format::log_item::XFS_BLF_INODE_BUF;
use xfs_format::quota::XFS_DISK_DQUOT_SIZE;
/// `blf_flags`: the buffer was freed; replay nothing of it before this.
const XFS_BLF_CANCEL: u16 = 1 << 1;
/// Transaction header magic ("TRAN").
const XFS_TRANS_HEADER_MAGIC: u32 = xfs_format::log_item::XFS_TRANS_HEADER_MAGIC;
/// Transaction type of a checkpoint.
const XFS_TRANS_CHECKPOINT: u32 = 40;
/// Bytes of `xfs_buf_log_format` before its dirty map.
const BLF_HEAD: usize = 20;

/// The OR over the chunk of `f(word of a, word of b)`, 8 bytes at a time
/// (`a` and `b` of one length): no early exit, so the loop vectorises,
/// which a byte-wise `any` or a `memcmp` call per 128-byte chunk does not.
/// Directory blocks go through this on every commit that touches them.
#[inline(always)]
fn fold_words(a: &[u8], b: &[u8], f: impl Fn(u64, u64) -> u64) -> u64 {
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]));
    if let (Ok(a), Ok(b)) = (<&[u8; CHUNK]>::try_from(a), <&[u8; CHUNK]>::try_from(b)) {
        // A whole chunk: a fixed length the compiler unrolls.
        let mut acc = 0;
        for i in 0..CHUNK / 8 {
            acc |= f(word(&a[i * 8..i * 8 + 8]), word(&b[i * 8..i * 8 + 8]));
        }
        return acc;
    }
    let (wa, wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (wa.remainder(), wb.remainder());
    let mut acc = wa.zip(wb).fold(0, |acc, (x, y)| acc | f(word(x), word(y)));
    for (x, y) in ra.iter().zip(rb) {
        acc |= f(*x as u64, *y as u64);
    }
    acc
}

/// A dirty map: one bit per 128-byte chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DirtyMap(pub Vec<u32>);

impl DirtyMap {
    /// An empty map for a buffer of `len` bytes.
    pub(crate) fn new(len: usize) -> DirtyMap {
        DirtyMap(vec![0; len.div_ceil(CHUNK).div_ceil(32)])
    }

    /// Every chunk of a `len`-byte buffer.
    pub(crate) fn full(len: usize) -> DirtyMap {
        let mut m = DirtyMap::new(len);
        m.set_range(0, len);
        m
    }

    /// The chunks of `data` that hold a byte other than zero.
    pub(crate) fn nonzero(data: &[u8]) -> DirtyMap {
        let mut m = DirtyMap::new(data.len());
        for (i, c) in data.chunks(CHUNK).enumerate() {
            if fold_words(c, c, |a, _| a) != 0 {
                m.0[i / 32] |= 1 << (i % 32);
            }
        }
        m
    }

    /// The chunks where `new` differs from `old` (same length).
    pub(crate) fn diff(old: &[u8], new: &[u8]) -> DirtyMap {
        let mut m = DirtyMap::new(new.len());
        for (i, (a, b)) in old.chunks(CHUNK).zip(new.chunks(CHUNK)).enumerate() {
            if a.len() != b.len() || fold_words(a, b, |x, y| x ^ y) != 0 {
                m.0[i / 32] |= 1 << (i % 32);
            }
        }
        m
    }

    /// Marks bytes `off..off+len`.
    pub(crate) fn set_range(&mut self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        for i in off / CHUNK..=(off + len - 1) / CHUNK {
            if let Some(w) = self.0.get_mut(i / 32) {
                *w |= 1 << (i % 32);
            }
        }
    }

    /// Drops `o`'s chunks.
    pub(crate) fn minus(&mut self, o: &DirtyMap) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a &= !b;
        }
    }

    /// Adds `o`'s chunks.
    pub(crate) fn or(&mut self, o: &DirtyMap) {
        if o.0.len() > self.0.len() {
            self.0.resize(o.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }

    /// True when no chunk is marked.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    fn bit(&self, i: usize) -> bool {
        self.0.get(i / 32).is_some_and(|w| w & (1 << (i % 32)) != 0)
    }

    /// Runs of marked chunks as byte ranges, within `len`.
    pub(crate) fn runs(&self, len: usize) -> Vec<(usize, usize)> {
        let n = len.div_ceil(CHUNK);
        let mut out = Vec::new();
        let mut i = 0;
        while i < n {
            if !self.bit(i) {
                i += 1;
                continue;
            }
            let s = i;
            while i < n && self.bit(i) {
                i += 1;
            }
            out.push((s * CHUNK, (i * CHUNK).min(len)));
        }
        out
    }
}

/// A buffer waiting for the next checkpoint.
pub(crate) struct CilBuf {
    pub data: Arc<[u8]>,
    pub map: DirtyMap,
    pub kind: BufKind,
}

/// A dquot record waiting for the next checkpoint: logged as a dquot
/// item (its id, the block holding it and its offset there, and the
/// 104-byte record), as the kernel logs a dquot.
#[derive(Debug, Clone)]
pub(crate) struct CilDquot {
    pub id: u32,
    /// Byte offset and length of the block of records.
    pub buf_off: u64,
    pub buf_len: u32,
    /// Byte offset of the record in the block.
    pub boffset: u32,
    pub rec: [u8; XFS_DISK_DQUOT_SIZE],
}

/// Where an inode's cluster buffer is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClusterGeo {
    block_size: u64,
    bpc: u32,
    align: u32,
}

impl ClusterGeo {
    pub(crate) fn new(geo: &Geometry) -> ClusterGeo {
        ClusterGeo {
            block_size: u64::from(geo.block_size),
            bpc: geo.blocks_per_cluster(),
            align: geo.inode_align,
        }
    }

    /// (byte offset, bytes) of the cluster buffer holding `ino`.
    pub(crate) fn cluster_of(&self, geo: &Geometry, ino: Ino) -> Result<(u64, u32)> {
        let agno = geo.ino_agno(ino);
        let agbno = geo.ino_agbno(ino).0;
        let start = if self.bpc <= 1 {
            agbno
        } else if self.align >= self.bpc {
            let off = agbno % self.align;
            agbno - off + off / self.bpc * self.bpc
        } else {
            return Err(Error::Unsupported(format!(
                "journaling inodes whose clusters ({} blocks) are not chunk-aligned",
                self.bpc
            )));
        };
        let off = geo.agb_to_daddr(agno, AgBlock(start)).bytes();
        Ok((off, (u64::from(self.bpc) * self.block_size) as u32))
    }
}

/// The kind of a buffer a transaction changed, or an error naming it when
/// its magic number is not one the log knows.
pub(crate) fn classify(off: u64, data: &[u8]) -> Result<BufKind> {
    buftype::classify(data).ok_or_else(|| {
        Error::Invalid(format!(
            "a transaction changed a block at byte {off} with no known magic number"
        ))
    })
}

/// The chunks of a directory block that must reach the log once they are
/// in use, for the kinds whose unused space need not be logged (the kernel
/// logs only the ranges it changes, so a new block's free space stays as
/// the disk had it after recovery); None for every other kind, whose new
/// blocks are logged whole.
///
/// - Data blocks: the chunks holding a byte other than zero. A chunk with
///   any byte of the header, an entry or a free region's header or tag
///   holds one (the magic; an entry's zero runs are at most 7 bytes, next
///   to its name length, name or tag; a free region's tag and length are
///   not zero), so a chunk all zero is inside a free region.
/// - Single-block directories: the same, and the leaf entries and tail at
///   the end (a stale entry can be all zero).
/// - LEAF1 blocks: the header, the leaf entries, the bests array and the
///   tail (a best-free count of a full data block is zero); LEAFN blocks:
///   the header and the leaf entries.
///
/// A corrupt count only widens the ranges.
pub(crate) fn live_chunks(data: &[u8]) -> Option<DirtyMap> {
    use xfs_format::dir::block::XFS_DIR3_LEAF_HDR_SIZE;
    let len = data.len();
    let kind = buftype::classify(data)?;
    match kind.blft {
        buftype::blft::DIR_DATA => Some(DirtyMap::nonzero(data)),
        buftype::blft::DIR_BLOCK => {
            let mut m = DirtyMap::nonzero(data);
            let leaf = 8usize.saturating_add((be32(data, len - 8) as usize).saturating_mul(8));
            m.set_range(len.saturating_sub(leaf), leaf.min(len));
            Some(m)
        }
        buftype::blft::DIR_LEAF1 | buftype::blft::DIR_LEAFN => {
            let mut m = DirtyMap::nonzero(data);
            let ents = XFS_DIR3_LEAF_HDR_SIZE + usize::from(be16(data, 56)) * 8;
            m.set_range(0, ents.min(len));
            if kind.blft == buftype::blft::DIR_LEAF1 {
                let tail = 4usize.saturating_add((be32(data, len - 4) as usize).saturating_mul(2));
                m.set_range(len.saturating_sub(tail), tail.min(len));
            }
            Some(m)
        }
        _ => None,
    }
}

/// Everything committed since the last checkpoint.
#[derive(Default)]
pub(crate) struct Cil {
    pub bufs: BTreeMap<u64, CilBuf>,
    /// Inodes by byte offset, newest bytes.
    pub inodes: BTreeMap<u64, (Ino, Arc<[u8]>)>,
    /// New inode chunks recovery initialises itself.
    pub icreates: Vec<Icreate>,
    /// Cancel items to log: (byte offset, bytes).
    pub cancels: BTreeMap<u64, u32>,
    /// Blocks freed since the last checkpoint (byte ranges), the kernel's
    /// busy extents: until the checkpoint that frees them is on disk, the
    /// disk still gives them to their old owner, so file data must not be
    /// written there.
    pub freed: Ranges,
    /// Blocks allocated to file data since the last checkpoint (byte
    /// ranges): their data goes to disk before the checkpoint, so it never
    /// makes reachable blocks that do not hold their data.
    pub allocated: Ranges,
    /// Blocks whose reference count dropped since the last checkpoint
    /// (byte ranges): the disk still gives them to the owner that let
    /// them go, so file data must not overwrite them in place before the
    /// checkpoint.
    pub unshared: Ranges,
    /// Done items recovery logs (and raw items tests log), the regions
    /// of each, its format region first.
    pub done: Vec<Vec<Vec<u8>>>,
    /// Dquot records by byte offset, newest bytes.
    pub dquots: BTreeMap<u64, CilDquot>,
    /// Byte offsets of inodes (in `inodes`) whose `di_next_unlinked`
    /// changed: logged as inode buffer items of their clusters too.
    pub unlinked: std::collections::BTreeSet<u64>,
    /// Bytes the checkpoint will log, roughly.
    pub bytes: usize,
}

/// A set of byte ranges, kept merged where they overlap or touch, so that
/// asking whether a range is covered or touched costs a lookup, not a scan
/// (a checkpoint may allocate and free thousands of ranges).
#[derive(Debug, Default, Clone)]
pub struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds bytes `lo..hi`.
    pub fn insert(&mut self, lo: u64, hi: u64) {
        if lo >= hi {
            return;
        }
        let (mut lo, mut hi) = (lo, hi);
        if let Some((&a, &b)) = self.0.range(..=lo).next_back() {
            if b >= lo {
                lo = a;
                hi = hi.max(b);
                self.0.remove(&a);
            }
        }
        while let Some((&a, &b)) = self.0.range(lo..=hi).next() {
            hi = hi.max(b);
            self.0.remove(&a);
        }
        self.0.insert(lo, hi);
    }

    /// Whether every byte of `lo..hi` is in the set (an empty range is).
    pub fn covers(&self, lo: u64, hi: u64) -> bool {
        lo >= hi
            || self
                .0
                .range(..=lo)
                .next_back()
                .is_some_and(|(_, &b)| b >= hi)
    }

    /// Whether a range of the set starts before `hi` and ends after `lo`.
    pub fn overlaps(&self, lo: u64, hi: u64) -> bool {
        self.0.range(..hi).next_back().is_some_and(|(_, &b)| b > lo)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The starts and ends of the set's ranges strictly inside `lo..hi`.
    pub fn bounds_within(&self, lo: u64, hi: u64) -> Vec<u64> {
        let mut v = Vec::new();
        let first = self.0.range(..=lo).next_back();
        for (&a, &b) in first.into_iter().chain(self.0.range(lo + 1..hi)) {
            for x in [a, b] {
                if lo < x && x < hi {
                    v.push(x);
                }
            }
        }
        v
    }
}

impl Cil {
    pub(crate) fn is_empty(&self) -> bool {
        self.bufs.is_empty()
            && self.inodes.is_empty()
            && self.cancels.is_empty()
            && self.icreates.is_empty()
            && self.done.is_empty()
            && self.dquots.is_empty()
    }

    /// A block freed earlier in this checkpoint is logged again: its cancel
    /// item goes (recovery processes a checkpoint's cancels after its
    /// buffers, so both in one checkpoint would drop the new contents).
    /// The new item covers the whole block, so replaying the older items
    /// first does no harm.
    fn reused(&mut self, off: u64, len: u32) -> bool {
        self.cancels.get(&off) == Some(&len) && self.cancels.remove(&off).is_some()
    }

    /// Adds a changed dquot record (a newer one replaces the older).
    pub(crate) fn add_dquot(&mut self, q: CilDquot) {
        let at = q.buf_off + u64::from(q.boffset);
        if self.dquots.insert(at, q).is_none() {
            self.bytes += XFS_DISK_DQUOT_SIZE + 24 + 32;
        }
    }

    /// Adds a changed buffer of kind `kind` (see [`classify`]).
    pub(crate) fn add_buf(&mut self, off: u64, data: Arc<[u8]>, map: DirtyMap, kind: BufKind) {
        let map = if self.reused(off, data.len() as u32) {
            DirtyMap::full(data.len())
        } else {
            map
        };
        let chunks = |m: &DirtyMap| m.0.iter().map(|w| w.count_ones() as usize).sum::<usize>();
        match self.bufs.get_mut(&off) {
            Some(b) if b.data.len() == data.len() => {
                let before = chunks(&b.map);
                b.map.or(&map);
                self.bytes += (chunks(&b.map) - before) * CHUNK;
                b.data = data;
                b.kind = kind;
            }
            _ => {
                self.bytes += chunks(&map) * CHUNK + 64;
                self.bufs.insert(off, CilBuf { data, map, kind });
            }
        }
    }

    /// Adds a changed inode (in the cluster buffer at `cluster`).
    pub(crate) fn add_inode(&mut self, off: u64, ino: Ino, data: Arc<[u8]>, cluster: (u64, u32)) {
        self.reused(cluster.0, cluster.1);
        if self.inodes.insert(off, (ino, data)).is_none() {
            self.bytes += 300;
        }
    }

    /// Notes that the inode at byte `off` changed its `di_next_unlinked`.
    pub(crate) fn add_unlinked(&mut self, off: u64) {
        if self.unlinked.insert(off) {
            self.bytes += CHUNK + 64;
        }
    }

    /// Adds a new inode chunk (whose cluster buffers are `clusters`).
    pub(crate) fn add_icreate(&mut self, c: Icreate, clusters: &[(u64, u32)]) {
        for &(o, l) in clusters {
            self.reused(o, l);
        }
        self.bytes += 64;
        self.icreates.push(c);
    }
}

/// The cluster buffers of a new inode chunk: (byte offset, bytes).
pub(crate) fn chunk_clusters(
    geo: &Geometry,
    cg: &ClusterGeo,
    c: &Icreate,
) -> Result<Vec<(u64, u32)>> {
    let bpc = geo.blocks_per_cluster().max(1);
    let mut out = Vec::new();
    let mut b = c.agbno;
    while b < c.agbno + c.length {
        let ino = geo.ino_make(crate::geometry::AgNumber(c.agno), b << geo.inopb_log);
        out.push(cg.cluster_of(geo, ino)?);
        b += bpc;
    }
    Ok(out)
}

/// The inode cluster buffers whose `di_next_unlinked` fields the
/// checkpoint logs: by byte offset, the chunks covering those fields and
/// the cluster's bytes there, taken from the inodes' newest bytes (what
/// their in-place writes put in the cluster; the rest stays zero and is
/// not logged). An inode no longer in the checkpoint (its chunk freed:
/// the cluster is cancelled) is left out.
fn unlinked_clusters(
    cil: &Cil,
    geo: &Geometry,
    cg: &ClusterGeo,
) -> Result<BTreeMap<u64, (DirtyMap, Vec<u8>)>> {
    use xfs_format::inode::XFS_DINODE_NEXT_UNLINKED_OFF as NEXT;
    let mut out: BTreeMap<u64, (DirtyMap, Vec<u8>)> = BTreeMap::new();
    for &off in &cil.unlinked {
        let Some((ino, data)) = cil.inodes.get(&off) else {
            continue;
        };
        let (coff, clen) = cg.cluster_of(geo, *ino)?;
        let at = (off - coff) as usize;
        if at + data.len() > clen as usize {
            return Err(Error::Invalid(format!(
                "inode {} lies outside its cluster buffer",
                ino.0
            )));
        }
        let (map, bytes) = out
            .entry(coff)
            .or_insert_with(|| (DirtyMap::new(clen as usize), vec![0; clen as usize]));
        map.set_range(at + NEXT, 4);
        // The chunks the field touches, filled from the inode's bytes.
        let lo = (at + NEXT) / CHUNK * CHUNK;
        let hi = ((at + NEXT + 4).div_ceil(CHUNK) * CHUNK).min(clen as usize);
        let (ilo, ihi) = (lo.max(at), hi.min(at + data.len()));
        bytes[ilo..ihi].copy_from_slice(&data[ilo - at..ihi - at]);
    }
    Ok(out)
}

/// A checkpoint's items as log regions: one op per region.
pub(crate) struct Formatted {
    pub regions: Vec<Vec<u8>>,
    /// Buffers the checkpoint logs: (byte offset, bytes).
    pub logged: Vec<(u64, u32)>,
    /// Metadata buffers whose LSN the writeback stamps: (byte offset,
    /// offset of the LSN field).
    pub stamped: Vec<(u64, usize)>,
}

fn le16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// `xfs_buf_log_format` for a buffer at byte `off` of `len` bytes, with
/// `nregions` data regions after it.
fn blf(off: u64, len: u32, flags: u16, nregions: usize, map: &DirtyMap) -> Vec<u8> {
    let mut v = Vec::with_capacity(BLF_HEAD + 4 * map.0.len());
    le16(&mut v, XFS_LI_BUF);
    le16(&mut v, (1 + nregions) as u16);
    le16(&mut v, flags);
    le16(&mut v, (len / 512) as u16);
    v.extend_from_slice(&((off / 512) as i64).to_le_bytes());
    le32(&mut v, map.0.len() as u32);
    for w in &map.0 {
        le32(&mut v, *w);
    }
    v
}

/// Formats the CIL as the items of one checkpoint transaction `tid`: the
/// transaction header, cancels, buffers, then inode clusters.
pub(crate) fn format(cil: &Cil, geo: &Geometry, cg: &ClusterGeo, tid: u32) -> Result<Formatted> {
    let mut regions: Vec<Vec<u8>> = Vec::new();
    let mut logged = Vec::new();
    let mut stamped = Vec::new();
    let mut items = 0u32;
    regions.push(Vec::new()); // the transaction header, filled in below
    for (&off, &len) in &cil.cancels {
        let map = DirtyMap::new(len as usize);
        regions.push(blf(off, len, XFS_BLF_CANCEL, 0, &map));
        items += 1;
    }
    for (&off, b) in &cil.bufs {
        if b.map.is_empty() {
            continue;
        }
        let len = b.data.len();
        let runs = b.map.runs(len);
        // A dquot buffer also carries its kind's flag: recovery replays
        // it only where that kind's quota is on.
        use xfs_format::log_item::{XFS_BLF_GDQUOT_BUF, XFS_BLF_PDQUOT_BUF, XFS_BLF_UDQUOT_BUF};
        let dq = match b.kind.blft {
            buftype::blft::UDQUOT => XFS_BLF_UDQUOT_BUF,
            buftype::blft::PDQUOT => XFS_BLF_PDQUOT_BUF,
            buftype::blft::GDQUOT => XFS_BLF_GDQUOT_BUF,
            _ => 0,
        };
        let flags = b.kind.blft << BLFT_SHIFT | dq;
        regions.push(blf(off, len as u32, flags, runs.len(), &b.map));
        for (s, e) in runs {
            regions.push(b.data[s..e].to_vec());
        }
        logged.push((off, len as u32));
        if let Some(l) = b.kind.lsn_off {
            stamped.push((off, l));
        }
        items += 1;
    }
    for c in &cil.icreates {
        regions.push(icreate_region(geo, c));
        logged.extend(chunk_clusters(geo, cg, c)?);
        items += 1;
    }
    for (cluster, (map, bytes)) in unlinked_clusters(cil, geo, cg)? {
        let len = bytes.len();
        let runs = map.runs(len);
        let flags = buftype::blft::DINO << BLFT_SHIFT | XFS_BLF_INODE_BUF;
        regions.push(blf(cluster, len as u32, flags, runs.len(), &map));
        for (s, e) in runs {
            regions.push(bytes[s..e].to_vec());
        }
        logged.push((cluster, len as u32));
        items += 1;
    }
    for (ino, data) in cil.inodes.values() {
        let (r, cluster) = inode_regions(geo, cg, *ino, data)?;
        regions.extend(r);
        logged.push(cluster);
        items += 1;
    }
    for q in cil.dquots.values() {
        // xfs_dq_logformat (host order), then the record as in memory.
        let mut f = Vec::with_capacity(24);
        le16(&mut f, XFS_LI_DQUOT);
        le16(&mut f, 2);
        le32(&mut f, q.id);
        f.extend_from_slice(&((q.buf_off / 512) as i64).to_le_bytes());
        le32(&mut f, 1);
        le32(&mut f, q.boffset);
        regions.push(f);
        regions.push(q.rec.to_vec());
        logged.push((q.buf_off, q.buf_len));
        items += 1;
    }
    for d in &cil.done {
        regions.extend(d.iter().cloned());
        items += 1;
    }
    let mut th = Vec::with_capacity(16);
    le32(&mut th, XFS_TRANS_HEADER_MAGIC);
    le32(&mut th, XFS_TRANS_CHECKPOINT);
    le32(&mut th, tid);
    le32(&mut th, items);
    regions[0] = th;
    Ok(Formatted {
        regions,
        logged,
        stamped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_answer_as_their_union() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 25); // touches the first
        assert!(r.covers(10, 25) && !r.covers(10, 26) && r.covers(5, 5));
        assert!(!r.covers(25, 30) && r.covers(32, 40));
        assert!(r.overlaps(24, 31) && !r.overlaps(25, 30) && !r.overlaps(40, 50));
        r.insert(0, 100); // swallows everything
        assert!(r.covers(0, 100) && r.0.len() == 1);
        r.insert(5, 5);
        assert_eq!(r.0.len(), 1);
    }

    #[test]
    fn dirty_map_runs_and_diff() {
        let old = vec![0u8; 1024];
        let mut new = old.clone();
        new[5] = 1;
        new[300] = 2;
        new[383] = 3;
        new[1023] = 4;
        let m = DirtyMap::diff(&old, &new);
        assert_eq!(m.0, vec![0b1000_0101]);
        assert_eq!(m.runs(1024), vec![(0, 128), (256, 384), (896, 1024)]);
        let mut f = DirtyMap::new(1024);
        f.set_range(100, 200);
        assert_eq!(f.runs(1024), vec![(0, 384)]);
        assert_eq!(DirtyMap::full(65536).0.len(), 16);
    }

    #[test]
    fn word_wise_maps_match_byte_wise_ones() {
        // Every byte position of a 4 KiB block (and of a length that is
        // not a multiple of 8 or of a chunk), one byte set at a time.
        for len in [4096usize, 1000] {
            let zero = vec![0u8; len];
            for at in 0..len {
                let mut b = zero.clone();
                b[at] = 0x80;
                let mut want = DirtyMap::new(len);
                want.set_range(at, 1);
                assert_eq!(DirtyMap::nonzero(&b), want, "nonzero, byte {at} of {len}");
                assert_eq!(DirtyMap::diff(&zero, &b), want, "diff, byte {at} of {len}");
                assert_eq!(DirtyMap::diff(&b, &b), DirtyMap::new(len));
            }
            assert_eq!(DirtyMap::nonzero(&zero), DirtyMap::new(len));
        }
    }

    #[test]
    fn directory_blocks_log_what_is_in_use() {
        use xfs_format::dir::{XFS_DIR3_BLOCK_MAGIC, XFS_DIR3_DATA_MAGIC, XFS_DIR3_LEAF1_MAGIC};
        let runs = |b: &[u8]| live_chunks(b).map(|m| m.runs(b.len()));
        // A data block: header and one entry in use, then free space with
        // its header at 80 and its tag at 4094.
        let mut d = vec![0u8; 4096];
        d[0..4].copy_from_slice(&XFS_DIR3_DATA_MAGIC.to_be_bytes());
        d[64 + 8] = 1;
        d[80] = 0xff;
        d[4094] = 0x50;
        assert_eq!(runs(&d), Some(vec![(0, 128), (3968, 4096)]));
        // A single-block directory: its 3 leaf entries and tail are in use
        // even where zero (a stale entry of hash 0).
        let mut b = d.clone();
        b[0..4].copy_from_slice(&XFS_DIR3_BLOCK_MAGIC.to_be_bytes());
        b[4094] = 0;
        b[4088..4092].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(runs(&b), Some(vec![(0, 128), (3968, 4096)]));
        b[4088..4092].copy_from_slice(&20u32.to_be_bytes());
        assert_eq!(runs(&b), Some(vec![(0, 128), (3840, 4096)]));
        // A LEAF1 block: 30 entries (64 + 240 bytes) and 70 bests, all
        // zero, before the tail.
        let mut l = vec![0u8; 4096];
        l[8..10].copy_from_slice(&XFS_DIR3_LEAF1_MAGIC.to_be_bytes());
        l[56..58].copy_from_slice(&30u16.to_be_bytes());
        l[4092..4096].copy_from_slice(&70u32.to_be_bytes());
        assert_eq!(runs(&l), Some(vec![(0, 384), (3840, 4096)]));
        // Other kinds (and garbage counts) answer whole or widen.
        assert_eq!(runs(&vec![0u8; 4096]), None);
        l[4092..4096].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(runs(&l), Some(vec![(0, 4096)]));
    }

    #[test]
    fn buffer_format_header() {
        let mut m = DirtyMap::new(4096);
        m.set_range(0, 10);
        let v = blf(8 * 4096, 4096, 4 << BLFT_SHIFT, 1, &m);
        assert_eq!(v.len(), 20 + 4);
        assert_eq!(u16::from_le_bytes([v[0], v[1]]), 0x123c);
        assert_eq!(u16::from_le_bytes([v[2], v[3]]), 2);
        assert_eq!(u16::from_le_bytes([v[6], v[7]]), 8);
        assert_eq!(i64::from_le_bytes(v[8..16].try_into().unwrap()), 64);
        assert_eq!(u32::from_le_bytes(v[16..20].try_into().unwrap()), 1);
    }
}

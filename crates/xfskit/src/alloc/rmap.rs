//! The reverse mapping btree (rmapbt): one record per owned extent of an
//! AG (owner, and for inode owners the file offset and fork/bmbt/
//! unwritten flags). Records of one owner that touch physically (and,
//! for file data, logically) are kept merged, as the kernel does, so
//! xfs_repair finds every mapping it expects inside one record.
//!
//! Without reflink, records never overlap, so lookups by the low key find
//! the record holding a block. With reflink, records of different owners
//! overlap where blocks are shared: the record of one owner holding a
//! block, and an owner's neighbours to merge with, are found by a range
//! query on the high keys ([`Cursor::query_range`]), as the kernel's
//! shared-extent mapping functions do.

use super::agf::{self, off};
use super::Owner;
use crate::btree::{BtreeOps, Cursor, Dir, Shape};
use crate::buf::Verifier;
use crate::bytes::{be32, be64};
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr};
use crate::trans::Trans;
use std::cmp::Ordering;
use xfs_format::btree as xbt;

const ROOT: usize = std::mem::offset_of!(xfs_format::ag::Agf, agf_rmap_root);
const LEVEL: usize = std::mem::offset_of!(xfs_format::ag::Agf, agf_rmap_level);
const BLOCKS: usize = std::mem::offset_of!(xfs_format::ag::Agf, agf_rmap_blocks);

/// Flag bits kept in the high bits of `rm_offset`.
const FLAGS: u64 =
    xbt::XFS_RMAP_OFF_ATTR_FORK | xbt::XFS_RMAP_OFF_BMBT_BLOCK | xbt::XFS_RMAP_OFF_UNWRITTEN;

/// One reverse mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rmap {
    pub start: u32,
    pub len: u32,
    pub owner: u64,
    /// File offset (inode owners, not bmbt), else 0.
    pub offset: u64,
    /// `XFS_RMAP_OFF_*` flag bits.
    pub flags: u64,
}

fn non_inode(owner: u64) -> bool {
    owner & (1 << 63) != 0
}

impl Rmap {
    /// The mapping of `len` blocks at `start` for `owner`.
    pub fn new(start: u32, len: u32, owner: &Owner) -> Rmap {
        let (o, offset, flags) = match *owner {
            Owner::Inode {
                ino,
                attr_fork,
                offset,
                bmbt,
            } => {
                let mut f = 0;
                if attr_fork {
                    f |= xbt::XFS_RMAP_OFF_ATTR_FORK;
                }
                if bmbt {
                    f |= xbt::XFS_RMAP_OFF_BMBT_BLOCK;
                }
                (ino.0, if bmbt { 0 } else { offset }, f)
            }
            Owner::Inobt => (xbt::XFS_RMAP_OWN_INOBT, 0, 0),
            Owner::Inodes => (xbt::XFS_RMAP_OWN_INODES, 0, 0),
            Owner::Ag => (xbt::XFS_RMAP_OWN_AG, 0, 0),
            Owner::Refc => (xbt::XFS_RMAP_OWN_REFC, 0, 0),
            Owner::Cow => (xbt::XFS_RMAP_OWN_COW, 0, 0),
        };
        Rmap {
            start,
            len,
            owner: o,
            offset: offset & xbt::XFS_RMAP_OFF_MASK,
            flags,
        }
    }

    fn end(&self) -> u64 {
        u64::from(self.start) + u64::from(self.len)
    }

    /// Blocks that reflink may share with other owners: a file's data
    /// fork (not its bmbt blocks or attribute fork, nor any non-inode
    /// owner's).
    fn sharable(&self) -> bool {
        !non_inode(self.owner)
            && self.flags & (xbt::XFS_RMAP_OFF_BMBT_BLOCK | xbt::XFS_RMAP_OFF_ATTR_FORK) == 0
    }

    /// File offsets matter (inode data, not bmbt blocks).
    fn has_offset(&self) -> bool {
        !non_inode(self.owner) && self.flags & xbt::XFS_RMAP_OFF_BMBT_BLOCK == 0
    }

    pub(crate) fn to_rec(self) -> [u8; 24] {
        let mut r = [0u8; 24];
        r[0..4].copy_from_slice(&self.start.to_be_bytes());
        r[4..8].copy_from_slice(&self.len.to_be_bytes());
        r[8..16].copy_from_slice(&self.owner.to_be_bytes());
        r[16..24].copy_from_slice(&(self.offset | self.flags).to_be_bytes());
        r
    }

    fn from_rec(r: &[u8]) -> Rmap {
        let off = be64(r, 16);
        Rmap {
            start: be32(r, 0),
            len: be32(r, 4),
            owner: be64(r, 8),
            offset: off & xbt::XFS_RMAP_OFF_MASK,
            flags: off & FLAGS,
        }
    }

    /// The search key of this mapping.
    fn key(&self) -> [u8; 20] {
        let mut k = [0u8; 20];
        key_of(&self.to_rec(), &mut k);
        k
    }

    /// True when `self` is directly followed by `next` in one record.
    pub(crate) fn joins(&self, next: &Rmap) -> bool {
        self.owner == next.owner
            && self.flags == next.flags
            && self.end() == u64::from(next.start)
            && (!self.has_offset() || self.offset + u64::from(self.len) == next.offset)
            && u64::from(self.len) + u64::from(next.len) <= u64::from(u32::MAX)
    }
}

fn key_of(rec: &[u8], key: &mut [u8]) {
    key[0..4].copy_from_slice(&rec[0..4]);
    key[4..12].copy_from_slice(&rec[8..16]);
    let off = be64(rec, 16) & !xbt::XFS_RMAP_OFF_UNWRITTEN;
    key[12..20].copy_from_slice(&off.to_be_bytes());
}

/// The rmapbt of one AG. Blocks come from the free list like the free
/// space btrees' and are counted in `agf_btreeblks` and
/// `agf_rmap_blocks`.
pub(crate) struct RmapBt {
    agno: AgNumber,
    block_size: usize,
}

impl RmapBt {
    /// AG `agno`'s rmapbt on a filesystem of `block_size` blocks (outside
    /// a transaction: the bulk loader's).
    pub(crate) fn new(agno: AgNumber, block_size: usize) -> RmapBt {
        RmapBt { agno, block_size }
    }

    pub fn cursor(tp: &Trans<'_>, agno: AgNumber) -> Cursor<RmapBt> {
        Cursor::new(RmapBt {
            agno,
            block_size: tp.geo().block_size as usize,
        })
    }

    fn count(&self, tp: &mut Trans<'_>, delta: i64) -> Result<()> {
        let id = agf::read_agf(tp, self.agno)?;
        agf::add(tp, id, off::BTREEBLKS, delta, self.agno)?;
        agf::add(tp, id, BLOCKS, delta, self.agno)
    }
}

impl BtreeOps for RmapBt {
    fn shape(&self) -> Shape {
        Shape {
            magic: xbt::XFS_RMAP_CRC_MAGIC,
            long_ptrs: false,
            rec_len: 24,
            key_len: 20,
            block_size: self.block_size,
            owner: u64::from(self.agno.0),
            root_in_inode: false,
            overlapping: true,
        }
    }

    fn root(&self, tp: &mut Trans<'_>) -> Result<(u64, usize)> {
        let id = agf::read_agf(tp, self.agno)?;
        Ok((
            u64::from(agf::get(tp, id, ROOT)),
            agf::get(tp, id, LEVEL) as usize,
        ))
    }

    fn set_root(&mut self, tp: &mut Trans<'_>, ptr: u64, levels: usize) -> Result<()> {
        let id = agf::read_agf(tp, self.agno)?;
        agf::set(tp, id, ROOT, ptr as u32);
        agf::set(tp, id, LEVEL, levels as u32);
        Ok(())
    }

    fn alloc_block(&mut self, tp: &mut Trans<'_>, _near: u64) -> Result<u64> {
        let bno = agf::freelist_pop(tp, self.agno)?
            .ok_or_else(|| Error::NoSpace(format!("AG {} free list is empty", self.agno.0)))?;
        self.count(tp, 1)?;
        Ok(u64::from(bno))
    }

    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()> {
        agf::freelist_push(tp, self.agno, ptr as u32)?;
        self.count(tp, -1)
    }

    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr> {
        let geo = tp.geo();
        if ptr == 0 || ptr >= u64::from(geo.ag_len(self.agno)) {
            return Err(bad(self.agno, format!("pointer to block {ptr}")));
        }
        Ok(geo.agb_to_daddr(self.agno, AgBlock(ptr as u32)))
    }

    fn verifier(&self, level: u16) -> Verifier<'static> {
        Verifier::ShortBtree {
            magic: xbt::XFS_RMAP_CRC_MAGIC,
            agno: self.agno.0,
            level: Some(level),
        }
    }

    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        rec_key(rec, key);
    }

    fn high_key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        rec_high_key(rec, key);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        cmp_rmap_keys(a, b)
    }
}

fn bad(agno: AgNumber, detail: String) -> Error {
    Error::corrupt("rmapbt", Location::Other(format!("AG {}", agno.0)), detail)
}

/// Where a reverse-mapping btree lives: an AG's rmapbt, or a realtime
/// group's rmap btree rooted in its inode (`alloc/rtrmap.rs`). The record
/// logic below (merging an owner's neighbours, trimming and splitting)
/// serves both: their records and keys are the same.
pub(crate) trait RmapSite {
    /// The btree type.
    type Ops: BtreeOps;
    /// A cursor over the tree as this transaction sees it.
    fn cursor(&mut self, tp: &mut Trans<'_>) -> Result<Cursor<Self::Ops>>;
    /// Takes back a cursor that changed the tree (a root in an inode is
    /// kept from it).
    fn done(&mut self, tp: &mut Trans<'_>, c: Cursor<Self::Ops>) -> Result<()>;
    /// Blocks of the AG or group.
    fn blocks(&self, tp: &Trans<'_>) -> u64;
    /// Records of different owners may overlap (reflink).
    fn shared(&self, tp: &Trans<'_>) -> bool;
    /// A corruption error naming the tree and where it is.
    fn bad(&self, detail: String) -> Error;
}

/// The rmapbt of one AG as a [`RmapSite`].
pub(crate) struct AgSite(pub AgNumber);

impl RmapSite for AgSite {
    type Ops = RmapBt;

    fn cursor(&mut self, tp: &mut Trans<'_>) -> Result<Cursor<RmapBt>> {
        Ok(RmapBt::cursor(tp, self.0))
    }

    fn done(&mut self, _tp: &mut Trans<'_>, _c: Cursor<RmapBt>) -> Result<()> {
        Ok(())
    }

    fn blocks(&self, tp: &Trans<'_>) -> u64 {
        u64::from(tp.geo().ag_len(self.0))
    }

    fn shared(&self, tp: &Trans<'_>) -> bool {
        tp.geo().features.reflink
    }

    fn bad(&self, detail: String) -> Error {
        bad(self.0, detail)
    }
}

/// Record ops shared by both trees: the key of a record (start, owner,
/// offset without the unwritten flag) and its high key.
pub(crate) fn rec_key(rec: &[u8], key: &mut [u8]) {
    key_of(rec, key);
}

/// See [`rec_key`]: the key of the record's last block.
pub(crate) fn rec_high_key(rec: &[u8], key: &mut [u8]) {
    let r = Rmap::from_rec(rec);
    let adj = r.len.saturating_sub(1);
    let mut h = r;
    h.start = r.start.saturating_add(adj);
    if r.has_offset() {
        h.offset = (r.offset + u64::from(adj)) & xbt::XFS_RMAP_OFF_MASK;
    }
    key_of(&h.to_rec(), key);
}

/// Orders two rmap keys: (start, owner, offset), all big-endian and
/// unsigned, so the order is that of their bytes.
pub(crate) fn cmp_rmap_keys(a: &[u8], b: &[u8]) -> Ordering {
    a[..20].cmp(&b[..20])
}

fn cur<S: RmapSite>(s: &S, c: &Cursor<S::Ops>, tp: &Trans<'_>) -> Result<Rmap> {
    let r = Rmap::from_rec(&c.get_rec(tp)?);
    if r.len == 0 || r.end() > s.blocks(tp) {
        return Err(s.bad(format!("record {r:?}")));
    }
    Ok(r)
}

/// Positions `c` on exactly `r`'s record.
fn seek<S: RmapSite>(s: &S, c: &mut Cursor<S::Ops>, tp: &mut Trans<'_>, r: &Rmap) -> Result<()> {
    if !c.lookup(tp, &r.key(), Dir::Eq)? {
        return Err(s.bad(format!("record {r:?} vanished")));
    }
    Ok(())
}

/// The records of the tree holding block `bno`, of any owner.
fn holding<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, bno: u32) -> Result<Vec<Rmap>> {
    let mut c = s.cursor(tp)?;
    let mut lo = [0u8; 20];
    lo[0..4].copy_from_slice(&bno.to_be_bytes());
    let mut hi = [0xffu8; 20];
    hi[0..4].copy_from_slice(&bno.to_be_bytes());
    let recs = c.query_range(tp, &lo, &hi)?;
    let len = s.blocks(tp);
    recs.iter()
        .map(|b| {
            let r = Rmap::from_rec(b);
            if r.len == 0 || r.end() > len {
                return Err(s.bad(format!("record {r:?}")));
            }
            Ok(r)
        })
        .collect()
}

/// The record of `r`'s owner (and fork/bmbt flags) holding `r`'s first
/// block at `r`'s file offset.
fn owned<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: &Rmap) -> Result<Option<Rmap>> {
    let same = |l: &Rmap| {
        l.owner == r.owner
            && (l.flags & !xbt::XFS_RMAP_OFF_UNWRITTEN) == (r.flags & !xbt::XFS_RMAP_OFF_UNWRITTEN)
            && (!l.has_offset() || l.offset + u64::from(r.start - l.start) == r.offset)
    };
    Ok(holding(tp, s, r.start)?.into_iter().find(same))
}

/// [`map`] where records may overlap (reflink): neighbours of the same
/// owner are found by range queries, other owners' records are let be.
/// With `fresh`, the blocks were just taken from free space, so no record
/// of their owner can hold them and that search is left out.
fn map_shared<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: Rmap, fresh: bool) -> Result<()> {
    if !fresh {
        if let Some(o) = owned(tp, s, &r)? {
            return Err(s.bad(format!("mapping {r:?} overlaps {o:?}")));
        }
    }
    let left = if r.start > 0 {
        holding(tp, s, r.start - 1)?
            .into_iter()
            .find(|l| l.joins(&r))
    } else {
        None
    };
    let right = if r.end() < s.blocks(tp) {
        holding(tp, s, r.start + r.len)?
            .into_iter()
            .find(|g| g.start == r.start + r.len && r.joins(g))
    } else {
        None
    };
    let mut c = s.cursor(tp)?;
    join(s, &mut c, tp, r, left, right, true)?;
    s.done(tp, c)
}

/// Records that `r` is now owned (merging with neighbours).
pub(crate) fn map(tp: &mut Trans<'_>, agno: AgNumber, r: Rmap) -> Result<()> {
    map_in(tp, &mut AgSite(agno), r)
}

/// Records mappings of blocks just taken from free space for owners that
/// have no other mapping they could join (new inodes' first data): no
/// record can overlap them or merge with them, so each goes in as it is,
/// without [`map`]'s searches for neighbours. The run is ascending and
/// adjacent (one extent split among new files): each record after the
/// first goes in beside the one before it, without a lookup from the root
/// while the leaf has room.
pub(crate) fn map_unjoined_run(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    run: impl IntoIterator<Item = Rmap>,
) -> Result<()> {
    let mut c = RmapBt::cursor(tp, agno);
    let mut first = true;
    for r in run {
        if first {
            c.insert(tp, &r.to_rec())?;
            first = false;
        } else {
            c.insert_next(tp, &r.to_rec())?;
        }
    }
    Ok(())
}

/// [`map`] in any reverse-mapping tree.
pub(crate) fn map_in<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: Rmap) -> Result<()> {
    map_in_as(tp, s, r, false)
}

/// [`map`] of blocks just taken from free space: with reflink the search
/// for a record of the owner already holding them is left out (nothing
/// holds free blocks); neighbours are still merged with.
pub(crate) fn map_fresh(tp: &mut Trans<'_>, agno: AgNumber, r: Rmap) -> Result<()> {
    map_in_as(tp, &mut AgSite(agno), r, true)
}

fn map_in_as<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: Rmap, fresh: bool) -> Result<()> {
    // Only file data is ever shared. Fresh blocks of any other owner (inode
    // chunks, btree blocks, attribute forks) overlap no record, and their
    // only possible neighbours to join, being unshared too, are the ones
    // found by the plain lookups below: the shared tree's range queries are
    // left out, as the kernel maps metadata with its plain rmap_map.
    if s.shared(tp) && (r.sharable() || !fresh) {
        return map_shared(tp, s, r, fresh);
    }
    let mut c = s.cursor(tp)?;
    let left = if c.lookup(tp, &r.key(), Dir::Le)? {
        Some(cur(s, &c, tp)?)
    } else {
        None
    };
    if let Some(l) = left {
        if l.end() > u64::from(r.start) {
            return Err(s.bad(format!("mapping {r:?} overlaps {l:?}")));
        }
    }
    let right = if c.lookup(tp, &r.key(), Dir::Ge)? {
        Some(cur(s, &c, tp)?)
    } else {
        None
    };
    if let Some(g) = right {
        if r.end() > u64::from(g.start) {
            return Err(s.bad(format!("mapping {r:?} overlaps {g:?}")));
        }
    }
    let left = left.filter(|l| l.joins(&r));
    let right = right.filter(|g| r.joins(g));
    // A right neighbour taken in moves rather than changing its key in
    // place wherever records may overlap.
    let shared = s.shared(tp);
    join(s, &mut c, tp, r, left, right, shared)?;
    s.done(tp, c)
}

/// Inserts `r`, merged with `left` (ending where it starts) and `right`
/// (starting where it ends), its owner's neighbours when they join it.
/// With overlapping records (`shared`) a record whose start changes is
/// moved (deleted and inserted): other owners' records may sit between
/// its old and new keys.
fn join<S: RmapSite>(
    s: &S,
    c: &mut Cursor<S::Ops>,
    tp: &mut Trans<'_>,
    r: Rmap,
    left: Option<Rmap>,
    right: Option<Rmap>,
    shared: bool,
) -> Result<()> {
    match (left, right) {
        (Some(l), Some(g))
            if u64::from(l.len) + u64::from(r.len) + u64::from(g.len) <= u64::from(u32::MAX) =>
        {
            seek(s, c, tp, &g)?;
            c.delete(tp)?;
            seek(s, c, tp, &l)?;
            let mut m = l;
            m.len += r.len + g.len;
            c.update(tp, &m.to_rec())
        }
        (Some(l), _) => {
            seek(s, c, tp, &l)?;
            let mut m = l;
            m.len += r.len;
            c.update(tp, &m.to_rec())
        }
        (None, Some(g)) => {
            seek(s, c, tp, &g)?;
            let mut m = r;
            m.len += g.len;
            if shared {
                c.delete(tp)?;
                c.insert(tp, &m.to_rec())
            } else {
                c.update(tp, &m.to_rec())
            }
        }
        (None, None) => c.insert(tp, &r.to_rec()),
    }
}

/// Records that `r` is no longer owned (trimming or splitting the
/// records holding it; it may span several records of its owner, e.g.
/// written and unwritten parts). The unwritten flag of `r` is ignored.
pub(crate) fn unmap(tp: &mut Trans<'_>, agno: AgNumber, r: Rmap) -> Result<()> {
    unmap_in(tp, &mut AgSite(agno), r)
}

/// [`unmap`] in any reverse-mapping tree.
pub(crate) fn unmap_in<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: Rmap) -> Result<()> {
    let mut rest = r;
    while rest.len > 0 {
        let piece = unmap_one(tp, s, rest)?;
        rest.start += piece;
        rest.len -= piece;
        if rest.has_offset() {
            rest.offset += u64::from(piece);
        }
    }
    Ok(())
}

/// Unmaps the start of `r` from the one record holding its first block;
/// returns how many blocks that was.
fn unmap_one<S: RmapSite>(tp: &mut Trans<'_>, s: &mut S, r: Rmap) -> Result<u32> {
    let shared = s.shared(tp);
    let found = if shared {
        owned(tp, s, &r)?
    } else {
        let mut c = s.cursor(tp)?;
        if c.lookup(tp, &r.key(), Dir::Le)? {
            Some(cur(s, &c, tp)?)
        } else {
            None
        }
    };
    let Some(l) = found else {
        return Err(s.bad(format!("no mapping holds {r:?}")));
    };
    let mut c = s.cursor(tp)?;
    seek(s, &mut c, tp, &l)?;
    let same_owner = l.owner == r.owner
        && (l.flags & !xbt::XFS_RMAP_OFF_UNWRITTEN) == (r.flags & !xbt::XFS_RMAP_OFF_UNWRITTEN);
    if l.start > r.start || l.end() <= u64::from(r.start) {
        return Err(s.bad(format!("no mapping holds {r:?}")));
    }
    // The part of `r` inside this record.
    let mut r = r;
    r.len = (l.end().min(r.end()) - u64::from(r.start)) as u32;
    let inside = l.start <= r.start && r.end() <= l.end();
    let offset_ok =
        inside && (!l.has_offset() || l.offset + u64::from(r.start - l.start) == r.offset);
    if !same_owner || !offset_ok {
        return Err(s.bad(format!("unmapping {r:?} from {l:?}")));
    }
    let head = r.start - l.start;
    let tail = (l.end() - r.end()) as u32;
    match (head > 0, tail > 0) {
        (false, false) => c.delete(tp)?,
        (false, true) => {
            let mut m = l;
            m.start = r.start + r.len;
            m.len = tail;
            if l.has_offset() {
                m.offset = l.offset + u64::from(r.len);
            }
            if shared {
                // Other owners' records may sit between the old and the
                // new start: the record moves.
                c.delete(tp)?;
                c.insert(tp, &m.to_rec())?
            } else {
                c.update(tp, &m.to_rec())?
            }
        }
        (true, false) => {
            let mut m = l;
            m.len = head;
            c.update(tp, &m.to_rec())?
        }
        (true, true) => {
            let mut m = l;
            m.len = head;
            c.update(tp, &m.to_rec())?;
            let mut t = l;
            t.start = r.start + r.len;
            t.len = tail;
            if l.has_offset() {
                t.offset = l.offset + u64::from(head + r.len);
            }
            c.insert(tp, &t.to_rec())?
        }
    }
    s.done(tp, c)?;
    Ok(r.len)
}

/// Most levels the rmapbt of this filesystem can have.
pub(crate) fn maxlevels(tp: &Trans<'_>) -> u32 {
    let geo = tp.geo();
    let bs = geo.block_size as usize;
    let leaf_min = (xfs_format::btree::maxrecs(bs, 56, 24, true, 40, 4) / 2).max(1) as u64;
    let node_min = (xfs_format::btree::maxrecs(bs, 56, 24, false, 40, 4) / 2).max(2) as u64;
    let mut blocks = u64::from(geo.ag_blocks).div_ceil(leaf_min);
    let mut levels = 1;
    while blocks > 1 {
        blocks = blocks.div_ceil(node_min);
        levels += 1;
    }
    levels
}

/// rmapbt levels of AG `agno`.
pub(crate) fn levels(tp: &mut Trans<'_>, agno: AgNumber) -> Result<u32> {
    let id = agf::read_agf(tp, agno)?;
    Ok(agf::get(tp, id, LEVEL))
}

/// Every record of AG `agno`'s rmapbt, by start.
pub(crate) fn records(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Vec<(u32, u32, u64, u64)>> {
    let mut c = RmapBt::cursor(tp, agno);
    let mut out = Vec::new();
    let mut more = c.lookup(tp, &[0u8; 20], Dir::Ge)?;
    while more {
        let r = cur(&AgSite(agno), &c, tp)?;
        out.push((r.start, r.len, r.owner, r.offset | r.flags));
        more = c.increment(tp)?;
    }
    Ok(out)
}

/// The records of AG `agno`'s rmapbt that overlap blocks `lo..hi`, by
/// start. Without reflink records never overlap one another, so the last
/// record starting at or before `lo` and those after it up to `hi` are all
/// there can be: a lookup and a short walk. With reflink a record starting
/// anywhere before `lo` may reach it, and the whole AG is read.
pub(crate) fn records_overlapping(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    lo: u32,
    hi: u32,
) -> Result<Vec<(u32, u32, u64, u64)>> {
    let overlaps = |s: u32, l: u32| s < hi && u64::from(lo) < u64::from(s) + u64::from(l);
    if tp.geo().features.reflink {
        let mut all = records(tp, agno)?;
        all.retain(|&(s, l, _, _)| overlaps(s, l));
        return Ok(all);
    }
    let mut c = RmapBt::cursor(tp, agno);
    let mut key = [0xffu8; 20];
    key[..4].copy_from_slice(&lo.to_be_bytes());
    let mut more = c.lookup(tp, &key, Dir::Le)? || c.lookup(tp, &[0u8; 20], Dir::Ge)?;
    let mut out = Vec::new();
    while more {
        let r = cur(&AgSite(agno), &c, tp)?;
        if r.start >= hi {
            break;
        }
        if overlaps(r.start, r.len) {
            out.push((r.start, r.len, r.owner, r.offset | r.flags));
        }
        more = c.increment(tp)?;
    }
    Ok(out)
}

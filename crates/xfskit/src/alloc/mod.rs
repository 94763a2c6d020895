//! Free-space allocation: both free-space btrees (by block and by size),
//! the AG free list (AGFL) and its refills, AGF counters, and the
//! superblock's free-block counter.
//!
//! Counting: a block is "free" for the superblock (`sb_fdblocks`, what
//! xfs_repair recomputes) when it is in the free space btrees, on the
//! free list, or a free space btree block other than a root
//! (`agf_btreeblks`). Moving blocks between those places therefore never
//! changes `fdblocks`; only [`alloc_extent`] and [`free_extent`] do.
//!
//! rmapbt: every allocation and free maps or unmaps its [`Owner`] in the
//! reverse mapping btree (merging neighbours like the kernel); blocks
//! moving to and from the free list are owned by the AG. Unwritten
//! extents need [`rmap_convert`] from the bmap code.

pub(crate) mod abt;
pub(crate) use refcount::rebuild as rebuild_refcount;
mod agf;
mod choose;
pub mod filestream;
mod refcount;
pub(crate) mod rmap;
pub(crate) mod rtalloc;
pub(crate) mod rtrefc;
pub(crate) mod rtrmap;
mod space;

use crate::error::{Error, Result};
use crate::geometry::{AgBlock, AgNumber, FsBlock, Ino};
use crate::trans::Trans;

/// Who owns allocated blocks (recorded in the rmapbt when the filesystem
/// has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Blocks of an inode's fork: file data, directory or attr blocks at
    /// file block `offset`, or bmbt blocks (`bmbt`).
    Inode {
        /// Owning inode.
        ino: Ino,
        /// The attr fork rather than the data fork.
        attr_fork: bool,
        /// File block of the first allocated block.
        offset: u64,
        /// A bmbt block rather than fork contents.
        bmbt: bool,
    },
    /// Inode btree blocks (inobt, finobt).
    Inobt,
    /// Inode chunks.
    Inodes,
    /// Free-space btree and AGFL blocks.
    Ag,
    /// Reference count btree blocks.
    Refc,
    /// Copy-on-write staging extents.
    Cow,
}

/// Blocks of each AG that only inode btree, free space and refcount
/// btree allocations may use: a full AG must still let an unlink grow
/// its finobt/inobt (the kernel keeps a larger, in-memory per-AG
/// reservation for the same purpose).
pub const AG_RESERVE: u32 = 16;

/// What to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocReq {
    /// Where the blocks should preferably be (AG and block).
    pub target: FsBlock,
    /// Fewest blocks acceptable.
    pub minlen: u32,
    /// Most blocks wanted.
    pub maxlen: u32,
    /// The start must be a multiple of this (1: any).
    pub alignment: u32,
    /// Only the target's AG (do not fall back to other AGs).
    pub ag_only: bool,
    /// Owner of the blocks.
    pub owner: Owner,
}

/// Allocates one extent of `minlen..=maxlen` blocks, as near `target` as
/// possible, trying other AGs when the target's AG cannot satisfy it
/// (unless `ag_only`). Locks the AGs it touches. Returns the first block
/// and the length. `Error::NoSpace` when nothing fits anywhere.
pub fn alloc_extent(tp: &mut Trans<'_>, req: &AllocReq) -> Result<(FsBlock, u32)> {
    alloc_extent_for(tp, req, None)
}

/// [`alloc_extent`] for blocks that go to several owners: one extent of
/// `req.minlen..=req.maxlen` blocks whose blocks are handed to `pieces` in
/// order (`(blocks, owner)` each), every piece recorded in the rmapbt
/// under its own owner as it would be had it been allocated alone. The
/// free space btrees, the free list and the counters change once for
/// the whole extent. The extent may be shorter than the pieces' total:
/// then only the pieces (and the part of a piece) it covers are mapped.
/// `req.maxlen` must not exceed the total; `req.owner` is not used.
/// Every owner must be one with no reverse mapping its piece could join
/// (a new inode's first data blocks, at file offset 0): the records are
/// inserted without looking for neighbours to merge with.
pub fn alloc_extent_pieces(
    tp: &mut Trans<'_>,
    req: &AllocReq,
    pieces: &[(u32, Owner)],
) -> Result<(FsBlock, u32)> {
    let total: u64 = pieces.iter().map(|p| u64::from(p.0)).sum();
    if u64::from(req.maxlen) > total {
        return Err(Error::Invalid(format!(
            "allocation request {req:?} for pieces of {total} blocks"
        )));
    }
    alloc_extent_for(tp, req, Some(pieces))
}

fn alloc_extent_for(
    tp: &mut Trans<'_>,
    req: &AllocReq,
    pieces: Option<&[(u32, Owner)]>,
) -> Result<(FsBlock, u32)> {
    let geo = tp.geo();
    if req.minlen == 0 || req.maxlen < req.minlen || req.alignment == 0 {
        return Err(Error::Invalid(format!("allocation request {req:?}")));
    }
    let (tag, tbno) = if geo.fsb_valid(req.target) {
        let (a, b) = geo.fsb_split(req.target);
        (a.0, b.0)
    } else {
        (0, 0)
    };
    // The AGs to try, in order, without listing them (8 million AGs are a
    // normal filesystem): the target's AG, then the ones after it, then
    // the ones before.
    let (after, before) = if req.ag_only {
        (tag..tag + 1, 0..0)
    } else {
        (tag..geo.ag_count, 0..tag)
    };
    for agno in after.chain(before) {
        let ag = AgNumber(agno);
        // AG locks are taken in increasing order; going back below one
        // already held must not wait (the AG is skipped when busy).
        let below_held = tp.highest_ag().is_some_and(|h| agno < h.0);
        if below_held || agno < tag {
            if !tp.try_lock_ag(ag) {
                continue;
            }
        } else {
            tp.lock_ag(ag);
        }
        let target = if agno == tag { tbno } else { 0 };
        if let Some((s, len)) = alloc_in_ag(tp, ag, target, req, pieces)? {
            tp.delta_mut().fdblocks -= i64::from(len);
            return Ok((geo.fsb_make(ag, AgBlock(s)), len));
        }
    }
    Err(Error::NoSpace(format!(
        "no free extent of {} blocks (alignment {})",
        req.minlen, req.alignment
    )))
}

/// One AG's attempt: None when it cannot satisfy the request.
fn alloc_in_ag(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    target: u32,
    req: &AllocReq,
    pieces: Option<&[(u32, Owner)]>,
) -> Result<Option<(u32, u32)>> {
    let id = agf::read_agf(tp, agno)?;
    let freeblks = i64::from(agf::get(tp, id, agf::off::FREEBLKS));
    let flcount = i64::from(agf::get(tp, id, agf::off::FLCOUNT));
    let longest = i64::from(agf::get(tp, id, agf::off::LONGEST));
    let need = i64::from(space::need(tp, agno)?);
    let alloc_len = i64::from(req.minlen) + i64::from(req.alignment) - 1;
    // A refill of the free list may come out of the longest extent.
    let deficit = (need - flcount).max(0);
    if longest - deficit < alloc_len {
        return Ok(None);
    }
    let reserve = match req.owner {
        Owner::Inobt | Owner::Ag | Owner::Refc | Owner::Cow => 0,
        Owner::Inode { .. } | Owner::Inodes => i64::from(AG_RESERVE),
    };
    let available = freeblks + flcount.min(need) - need - reserve;
    if available < alloc_len {
        return Ok(None);
    }
    let maxlen = i64::from(req.maxlen).min(available) as u32;
    space::fix_freelist(tp, agno, false)?;
    let Some((f, s, len)) = choose::choose(tp, agno, target, req.minlen, maxlen, req.alignment)?
    else {
        return Ok(None);
    };
    space::take(tp, agno, f, s, len)?;
    if tp.geo().features.rmapbt {
        match pieces {
            None => rmap::map_fresh(tp, agno, rmap::Rmap::new(s, len, &req.owner))?,
            Some(pieces) => {
                let (mut at, mut left) = (s, len);
                let run = pieces.iter().map_while(|(n, owner)| {
                    let k = (*n).min(left);
                    if k == 0 {
                        return None;
                    }
                    let r = rmap::Rmap::new(at, k, owner);
                    at += k;
                    left -= k;
                    Some(r)
                });
                rmap::map_unjoined_run(tp, agno, run)?;
            }
        }
    }
    space::update_longest(tp, agno)?;
    Ok(Some((s, len)))
}

/// Returns `len` blocks from `start` to free space (merging with free
/// neighbours).
pub fn free_extent(tp: &mut Trans<'_>, start: FsBlock, len: u32, owner: &Owner) -> Result<()> {
    free_extent_inner(tp, start, len, Some(owner))
}

/// Adds (`map`) or removes a reverse mapping of `len` blocks at `start`
/// with a raw owner, file offset and `XFS_RMAP_OFF_*` flag bits, as a
/// recovered reverse-mapping intent names it. A no-op without an rmapbt.
pub fn rmap_apply(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    owner: u64,
    offset: u64,
    flags: u64,
    map: bool,
) -> Result<()> {
    let geo = tp.geo();
    if !geo.features.rmapbt {
        return Ok(());
    }
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!(
            "mapping {len} blocks at {}",
            start.0
        )));
    }
    let (agno, agbno) = geo.fsb_split(start);
    tp.lock_ag(agno);
    space::fix_freelist(tp, agno, false)?;
    let r = rmap::Rmap {
        start: agbno.0,
        len,
        owner,
        offset: offset & xfs_format::btree::XFS_RMAP_OFF_MASK,
        flags,
    };
    if map {
        rmap::map(tp, agno, r)
    } else {
        rmap::unmap(tp, agno, r)
    }
}

/// Gives up one owner's use of `len` blocks from `start` on a reflink
/// filesystem: their owner count drops by one and the blocks whose count
/// reaches zero are freed; `owner`'s reverse mapping goes in either case.
/// For extents of inodes that may share blocks (the reflink inode flag);
/// other extents are freed with [`free_extent`].
pub fn release_extent(tp: &mut Trans<'_>, start: FsBlock, len: u32, owner: &Owner) -> Result<()> {
    if !tp.geo().features.reflink {
        return free_extent(tp, start, len, owner);
    }
    let freed = refcount::adjust_fsb(tp, start, len, -1)?;
    let geo = tp.geo();
    if geo.features.rmapbt {
        let (agno, agbno) = geo.fsb_split(start);
        rmap::unmap(tp, agno, rmap::Rmap::new(agbno.0, len, owner))?;
    }
    for (s, l) in freed {
        free_extent_inner(tp, s, l, None)?;
    }
    Ok(())
}

/// Adds one owner to `len` blocks from `start` (one AG) on a reflink
/// filesystem: a file mapping them too. Maps `owner` in the reverse
/// mapping btree when there is one.
pub fn share_extent(tp: &mut Trans<'_>, start: FsBlock, len: u32, owner: &Owner) -> Result<()> {
    let geo = tp.geo();
    if !geo.features.reflink {
        return Err(Error::Unsupported(
            "sharing blocks on a filesystem without reflink".into(),
        ));
    }
    let freed = refcount::adjust_fsb(tp, start, len, 1)?;
    debug_assert!(freed.is_empty());
    if geo.features.rmapbt {
        let (agno, agbno) = geo.fsb_split(start);
        rmap::map(tp, agno, rmap::Rmap::new(agbno.0, len, owner))?;
    }
    Ok(())
}

/// The runs of `len` blocks from `start` (one AG) that more than one
/// file maps, as (first block, length, owners); empty without reflink.
pub fn shared_runs(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
) -> Result<Vec<(FsBlock, u32, u32)>> {
    let geo = tp.geo();
    if !geo.features.reflink {
        return Ok(Vec::new());
    }
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!("{len} blocks at {}", start.0)));
    }
    let (agno, agbno) = geo.fsb_split(start);
    tp.lock_ag(agno);
    let runs = refcount::shared(tp, agno, agbno.0, len)?;
    let geo = tp.geo();
    Ok(runs
        .into_iter()
        .map(|r| (geo.fsb_make(agno, AgBlock(r.start)), r.len, r.count))
        .collect())
}

/// Shared runs of AG `agno` as (start, length, owners), by start (for
/// checks and tests).
pub fn ag_refcount_records(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Vec<(u32, u32, u32)>> {
    if !tp.geo().features.reflink {
        return Ok(Vec::new());
    }
    let len = tp.geo().ag_len(agno);
    Ok(refcount::shared(tp, agno, 0, len)?
        .into_iter()
        .map(|r| (r.start, r.len, r.count))
        .collect())
}

/// Frees every copy-on-write staging extent of AG `agno` (their blocks
/// hold nothing any file maps) and drops their records, as the kernel
/// does at mount. Returns how many were freed.
pub fn free_cow_staging(tp: &mut Trans<'_>, agno: AgNumber) -> Result<usize> {
    if !tp.geo().features.reflink {
        return Ok(0);
    }
    tp.lock_ag(agno);
    let recs = refcount::cow_records(tp, agno)?;
    for &(s, l) in &recs {
        space::fix_freelist(tp, agno, true)?;
        refcount::cow_remove(tp, agno, s, l)?;
        let fsb = tp.geo().fsb_make(agno, AgBlock(s));
        free_extent(tp, fsb, l, &Owner::Cow)?;
    }
    Ok(recs.len())
}

/// Applies one reference count change of a recovered intent to `len`
/// blocks from `start` (one AG): `XFS_REFCOUNT_INCREASE`, `DECREASE`
/// (blocks left with no owner are freed), `ALLOC_COW` or `FREE_COW`
/// (adding or removing a staging record).
pub fn refcount_apply(tp: &mut Trans<'_>, start: FsBlock, len: u32, op: u32) -> Result<()> {
    use xfs_format::log_intent as li;
    let geo = tp.geo();
    if !geo.features.reflink {
        return Err(Error::Unsupported(
            "reference count change on a filesystem without reflink".into(),
        ));
    }
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!("{len} blocks at {}", start.0)));
    }
    let (agno, agbno) = geo.fsb_split(start);
    match op {
        li::XFS_REFCOUNT_INCREASE | li::XFS_REFCOUNT_DECREASE => {
            let delta = if op == li::XFS_REFCOUNT_INCREASE {
                1
            } else {
                -1
            };
            for (s, l) in refcount::adjust_fsb(tp, start, len, delta)? {
                free_extent_inner(tp, s, l, None)?;
            }
            Ok(())
        }
        li::XFS_REFCOUNT_ALLOC_COW | li::XFS_REFCOUNT_FREE_COW => {
            tp.lock_ag(agno);
            space::fix_freelist(tp, agno, false)?;
            if op == li::XFS_REFCOUNT_ALLOC_COW {
                refcount::cow_add(tp, agno, agbno.0, len)
            } else {
                refcount::cow_remove(tp, agno, agbno.0, len)
            }
        }
        _ => Err(Error::Invalid(format!("reference count operation {op}"))),
    }
}

/// [`free_extent`] leaving the rmapbt alone: log recovery finishing an
/// extent-free intent whose reverse mapping is already gone.
pub fn free_extent_no_rmap(tp: &mut Trans<'_>, start: FsBlock, len: u32) -> Result<()> {
    free_extent_inner(tp, start, len, None)
}

fn free_extent_inner(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    owner: Option<&Owner>,
) -> Result<()> {
    let geo = tp.geo();
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!(
            "freeing {len} blocks at {}",
            start.0
        )));
    }
    let (agno, agbno) = geo.fsb_split(start);
    if agbno.0 == 0 {
        return Err(Error::Invalid("freeing an AG header block".into()));
    }
    tp.lock_ag(agno);
    // Whatever was pending for these blocks (metadata written earlier in
    // this or another transaction) must never reach the disk: the blocks
    // may be reused for anything, file data included.
    let daddr = geo.fsb_to_daddr(start);
    tp.forget_range(daddr, u64::from(len) << geo.block_log);
    space::fix_freelist(tp, agno, true)?;
    if let (true, Some(owner)) = (geo.features.rmapbt, owner) {
        rmap::unmap(tp, agno, rmap::Rmap::new(agbno.0, len, owner))?;
    }
    space::give(tp, agno, agbno.0, len)?;
    space::update_longest(tp, agno)?;
    tp.delta_mut().fdblocks += i64::from(len);
    Ok(())
}

/// Marks allocated blocks `start..start+len` of `owner` as unwritten or
/// written in the reverse mapping btree (a no-op without one). Call it
/// after allocating blocks for an unwritten extent and when converting
/// an extent, with the same owner (file offset) as the mapping.
pub fn rmap_convert(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    owner: &Owner,
    unwritten: bool,
) -> Result<()> {
    let geo = tp.geo();
    if !geo.features.rmapbt {
        return Ok(());
    }
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!(
            "converting {len} blocks at {}",
            start.0
        )));
    }
    let (agno, agbno) = geo.fsb_split(start);
    tp.lock_ag(agno);
    let mut r = rmap::Rmap::new(agbno.0, len, owner);
    // Same reservation rules as a free: the free list must be ready for
    // splits of the rmapbt.
    space::fix_freelist(tp, agno, true)?;
    rmap::unmap(tp, agno, r)?;
    if unwritten {
        r.flags |= xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN;
    }
    rmap::map(tp, agno, r)
}

/// Free blocks of AG `agno` (from its AGF, as this transaction sees it).
pub fn ag_free_blocks(tp: &mut Trans<'_>, agno: AgNumber) -> Result<u64> {
    if agno.0 >= tp.geo().ag_count {
        return Err(Error::Invalid(format!("AG {}", agno.0)));
    }
    let id = agf::read_agf(tp, agno)?;
    Ok(u64::from(agf::get(tp, id, agf::off::FREEBLKS)))
}

/// Reverse mappings of AG `agno` as (start, length, owner, offset with
/// flag bits), by start; empty without an rmapbt (for checks and tests).
pub fn ag_rmap_records(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Vec<(u32, u32, u64, u64)>> {
    if !tp.geo().features.rmapbt {
        return Ok(Vec::new());
    }
    rmap::records(tp, agno)
}

/// Reverse mappings of AG `agno` overlapping blocks `lo..hi`, as
/// [`ag_rmap_records`] gives them; empty without an rmapbt.
pub(crate) fn ag_rmap_overlapping(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    lo: u32,
    hi: u32,
) -> Result<Vec<(u32, u32, u64, u64)>> {
    if !tp.geo().features.rmapbt {
        return Ok(Vec::new());
    }
    rmap::records_overlapping(tp, agno, lo, hi)
}

/// Free extents of AG `agno` by block number, as this transaction sees
/// them (for checks and tests).
pub fn ag_free_extents(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Vec<(u32, u32)>> {
    let mut c = abt::AllocBt::cursor(tp, agno, abt::Which::Bno);
    let mut out = Vec::new();
    let mut more = c.lookup(tp, &[0u8; 8], crate::btree::Dir::Ge)?;
    while more {
        let f = abt::cur_free(&c, tp)?;
        out.push((f.bno, f.len));
        more = c.increment(tp)?;
    }
    Ok(out)
}

/// Reverse mappings of realtime group `rgno`'s realtime rmap btree as
/// (start in the group, length, owner, offset with flag bits), by start
/// (for checks and tests).
pub fn rt_rmap_records(tp: &mut Trans<'_>, rgno: u32) -> Result<Vec<(u32, u32, u64, u64)>> {
    rtrmap::records(tp, rgno)
}

//! The reference count btree (refcountbt) of reflink filesystems: one
//! record per run of AG blocks owned by two or more file mappings, with
//! the number of owners. A block in use with no record has one owner.
//! Records are kept maximal, as the kernel keeps them and as xfs_repair
//! rebuilds them: neighbours that touch and have the same count are one
//! record (up to the longest record, [`MAX_LEN`]).
//!
//! Copy-on-write staging extents (records whose start block carries
//! [`XFS_REFC_COWFLAG`]) sort after every shared record; the functions
//! here only see the shared domain. xfskit stages no copy-on-write: it
//! writes new blocks and remaps them in one transaction.
//!
//! Blocks of the tree come from the AG's free space (owner: the refcount
//! btree) and are counted in `agf_refcount_blocks`, as the kernel does.

use super::agf;
use super::{AllocReq, Owner};
use crate::btree::{BtreeOps, Cursor, Dir, Shape};
use crate::buf::Verifier;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr, FsBlock};
use crate::trans::Trans;
use std::cmp::Ordering;
use std::mem::offset_of;
use xfs_format::ag::Agf;
use xfs_format::btree::{XFS_REFC_COWFLAG, XFS_REFC_CRC_MAGIC};

const ROOT: usize = offset_of!(Agf, agf_refcount_root);
const LEVEL: usize = offset_of!(Agf, agf_refcount_level);
const BLOCKS: usize = offset_of!(Agf, agf_refcount_blocks);

/// Longest run one record may describe (the kernel's `MAXREFCEXTLEN`).
pub(crate) const MAX_LEN: u32 = (1 << 31) - 1;

/// One record of the shared domain: `len` blocks from `start` with
/// `count` owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refc {
    pub start: u32,
    pub len: u32,
    pub count: u32,
}

impl Refc {
    fn end(&self) -> u64 {
        u64::from(self.start) + u64::from(self.len)
    }

    fn to_rec(self) -> [u8; 12] {
        let mut r = [0u8; 12];
        r[0..4].copy_from_slice(&self.start.to_be_bytes());
        r[4..8].copy_from_slice(&self.len.to_be_bytes());
        r[8..12].copy_from_slice(&self.count.to_be_bytes());
        r
    }

    fn from_rec(r: &[u8]) -> Refc {
        Refc {
            start: be32(r, 0),
            len: be32(r, 4),
            count: be32(r, 8),
        }
    }
}

/// The refcountbt of one AG.
pub(crate) struct RefcountBt {
    agno: AgNumber,
    block_size: usize,
}

impl RefcountBt {
    pub fn cursor(tp: &Trans<'_>, agno: AgNumber) -> Cursor<RefcountBt> {
        Cursor::new(RefcountBt {
            agno,
            block_size: tp.geo().block_size as usize,
        })
    }

    fn count(&self, tp: &mut Trans<'_>, delta: i64) -> Result<()> {
        let id = agf::read_agf(tp, self.agno)?;
        agf::add(tp, id, BLOCKS, delta, self.agno)
    }
}

impl BtreeOps for RefcountBt {
    fn shape(&self) -> Shape {
        Shape {
            magic: XFS_REFC_CRC_MAGIC,
            long_ptrs: false,
            rec_len: 12,
            key_len: 4,
            block_size: self.block_size,
            owner: u64::from(self.agno.0),
            root_in_inode: false,
            overlapping: false,
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

    fn alloc_block(&mut self, tp: &mut Trans<'_>, near: u64) -> Result<u64> {
        let geo = tp.geo();
        let near = if near > 0 && near < u64::from(geo.ag_len(self.agno)) {
            near as u32
        } else {
            0
        };
        let req = AllocReq {
            target: geo.fsb_make(self.agno, AgBlock(near)),
            minlen: 1,
            maxlen: 1,
            alignment: 1,
            ag_only: true,
            owner: Owner::Refc,
        };
        let (fsb, _) = super::alloc_extent(tp, &req)?;
        self.count(tp, 1)?;
        Ok(u64::from(tp.geo().fsb_split(fsb).1 .0))
    }

    fn free_block(&mut self, tp: &mut Trans<'_>, ptr: u64) -> Result<()> {
        let fsb = tp.geo().fsb_make(self.agno, AgBlock(ptr as u32));
        super::free_extent(tp, fsb, 1, &Owner::Refc)?;
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
            magic: XFS_REFC_CRC_MAGIC,
            agno: self.agno.0,
            level: Some(level),
        }
    }

    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        key[0..4].copy_from_slice(&rec[0..4]);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        be32(a, 0).cmp(&be32(b, 0))
    }
}

fn bad(agno: AgNumber, detail: String) -> Error {
    Error::corrupt(
        "refcountbt",
        Location::Other(format!("AG {}", agno.0)),
        detail,
    )
}

/// The record under the cursor; None past the shared domain.
fn cur(c: &Cursor<RefcountBt>, tp: &Trans<'_>) -> Result<Option<Refc>> {
    let r = Refc::from_rec(&c.get_rec(tp)?);
    if r.start & XFS_REFC_COWFLAG != 0 {
        return Ok(None);
    }
    if r.len == 0 || r.count < 2 || r.end() > u64::from(tp.geo().ag_len(c.ops.agno)) {
        return Err(bad(c.ops.agno, format!("record {r:?}")));
    }
    Ok(Some(r))
}

/// The shared records that overlap or touch `start..end`, by start.
fn around(tp: &mut Trans<'_>, agno: AgNumber, start: u32, end: u64) -> Result<Vec<Refc>> {
    let mut c = RefcountBt::cursor(tp, agno);
    let mut out: Vec<Refc> = Vec::new();
    // From the record holding the block before `start`: it may touch.
    let before = start.saturating_sub(1);
    let mut more = c.lookup(tp, &before.to_be_bytes(), Dir::Le)?;
    if !more {
        more = c.lookup(tp, &before.to_be_bytes(), Dir::Ge)?;
    }
    while more {
        let Some(r) = cur(&c, tp)? else { break };
        if u64::from(r.start) > end {
            break;
        }
        if r.end() >= u64::from(start) {
            if out.last().is_some_and(|p| p.end() > u64::from(r.start)) {
                return Err(bad(agno, format!("records overlap at {r:?}")));
            }
            out.push(r);
        }
        more = c.increment(tp)?;
    }
    Ok(out)
}

/// Runs of `start..start+len` with more than one owner, as
/// (start, length, owners), by start.
pub(crate) fn shared(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    start: u32,
    len: u32,
) -> Result<Vec<Refc>> {
    let end = u64::from(start) + u64::from(len);
    Ok(around(tp, agno, start, end)?
        .into_iter()
        .filter(|r| r.end() > u64::from(start) && u64::from(r.start) < end)
        .map(|r| {
            let s = r.start.max(start);
            let e = r.end().min(end);
            Refc {
                start: s,
                len: (e - u64::from(s)) as u32,
                count: r.count,
            }
        })
        .collect())
}

/// Adds `delta` (+1 or -1) to the owner count of every block of
/// `start..start+len` in AG `agno`. Returns the runs whose count fell to
/// zero, for the caller to free.
pub(crate) fn adjust(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    start: u32,
    len: u32,
    delta: i32,
) -> Result<Vec<(u32, u32)>> {
    let end = u64::from(start) + u64::from(len);
    if len == 0 || end > u64::from(tp.geo().ag_len(agno)) || !(delta == 1 || delta == -1) {
        return Err(Error::Invalid(format!(
            "refcount change {delta} of AG {} blocks {start}+{len}",
            agno.0
        )));
    }
    let old = around(tp, agno, start, end)?;
    // Cut points: the range's ends and every old record's ends.
    let mut cuts: Vec<u64> = vec![u64::from(start), end];
    for r in &old {
        cuts.push(u64::from(r.start));
        cuts.push(r.end());
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut new: Vec<Refc> = Vec::new();
    let mut freed: Vec<(u32, u32)> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let was = old
            .iter()
            .find(|r| u64::from(r.start) <= a && r.end() >= b)
            .map(|r| r.count);
        let inside = a >= u64::from(start) && b <= end;
        let count = match (was, inside) {
            (None, false) => continue,
            (Some(c), false) => c,
            (was, true) => {
                let c = i64::from(was.unwrap_or(1)) + i64::from(delta);
                u32::try_from(c).map_err(|_| bad(agno, format!("owner count of {a}..{b}")))?
            }
        };
        if count == 0 {
            match freed.last_mut() {
                Some(f) if u64::from(f.0) + u64::from(f.1) == a => f.1 += (b - a) as u32,
                _ => freed.push((a as u32, (b - a) as u32)),
            }
            continue;
        }
        if count == 1 {
            continue;
        }
        match new.last_mut() {
            Some(p)
                if p.end() == a
                    && p.count == count
                    && u64::from(p.len) + (b - a) <= u64::from(MAX_LEN) =>
            {
                p.len += (b - a) as u32
            }
            _ => new.push(Refc {
                start: a as u32,
                len: (b - a) as u32,
                count,
            }),
        }
    }
    replace(tp, agno, &old, &new)?;
    Ok(freed)
}

/// Replaces records `old` with `new` (both by start), leaving records
/// that are in both alone.
fn replace(tp: &mut Trans<'_>, agno: AgNumber, old: &[Refc], new: &[Refc]) -> Result<()> {
    let mut c = RefcountBt::cursor(tp, agno);
    for r in old.iter().filter(|r| !new.contains(r)) {
        if !c.lookup(tp, &r.start.to_be_bytes(), Dir::Eq)? {
            return Err(bad(agno, format!("record {r:?} vanished")));
        }
        c.delete(tp)?;
    }
    for r in new.iter().filter(|r| !old.contains(r)) {
        c.insert(tp, &r.to_rec())?;
    }
    Ok(())
}

/// [`adjust`] for a filesystem block range, which must lie in one AG.
pub(crate) fn adjust_fsb(
    tp: &mut Trans<'_>,
    start: FsBlock,
    len: u32,
    delta: i32,
) -> Result<Vec<(FsBlock, u32)>> {
    let geo = tp.geo();
    if len == 0 || !geo.fsb_range_valid(start, u64::from(len)) {
        return Err(Error::Invalid(format!(
            "refcount change of {len} blocks at {}",
            start.0
        )));
    }
    let (agno, agbno) = geo.fsb_split(start);
    if delta < 0 {
        let lo = geo.fsb_to_daddr(start).bytes();
        tp.note_unshared(lo, lo + (u64::from(len) << geo.block_log));
    }
    tp.lock_ag(agno);
    super::space::fix_freelist(tp, agno, delta < 0)?;
    let freed = adjust(tp, agno, agbno.0, len, delta)?;
    let geo = tp.geo();
    Ok(freed
        .into_iter()
        .map(|(s, l)| (geo.fsb_make(agno, AgBlock(s)), l))
        .collect())
}

/// The copy-on-write staging records of AG `agno` as (start, length), by
/// start (the flag bit taken off).
pub(crate) fn cow_records(tp: &mut Trans<'_>, agno: AgNumber) -> Result<Vec<(u32, u32)>> {
    let mut c = RefcountBt::cursor(tp, agno);
    let mut out = Vec::new();
    let mut more = c.lookup(tp, &XFS_REFC_COWFLAG.to_be_bytes(), Dir::Ge)?;
    while more {
        let r = Refc::from_rec(&c.get_rec(tp)?);
        let start = r.start & !XFS_REFC_COWFLAG;
        if r.start & XFS_REFC_COWFLAG == 0
            || r.len == 0
            || r.count != 1
            || u64::from(start) + u64::from(r.len) > u64::from(tp.geo().ag_len(agno))
        {
            return Err(bad(agno, format!("staging record {r:?}")));
        }
        out.push((start, r.len));
        more = c.increment(tp)?;
    }
    Ok(out)
}

/// Records `start..start+len` as a copy-on-write staging extent.
pub(crate) fn cow_add(tp: &mut Trans<'_>, agno: AgNumber, start: u32, len: u32) -> Result<()> {
    let end = u64::from(start) + u64::from(len);
    if len == 0 || end > u64::from(tp.geo().ag_len(agno)) {
        return Err(Error::Invalid(format!(
            "staging extent of AG {} blocks {start}+{len}",
            agno.0
        )));
    }
    if cow_records(tp, agno)?
        .iter()
        .any(|&(s, l)| u64::from(s) < end && start < s + l)
    {
        return Err(bad(
            agno,
            format!("staging extent {start}+{len} overlaps another"),
        ));
    }
    let mut c = RefcountBt::cursor(tp, agno);
    let r = Refc {
        start: start | XFS_REFC_COWFLAG,
        len,
        count: 1,
    };
    c.insert(tp, &r.to_rec())
}

/// Takes `start..start+len` out of the copy-on-write staging records
/// (trimming or splitting the records holding it).
pub(crate) fn cow_remove(tp: &mut Trans<'_>, agno: AgNumber, start: u32, len: u32) -> Result<()> {
    let end = u64::from(start) + u64::from(len);
    let mut c = RefcountBt::cursor(tp, agno);
    for (s, l) in cow_records(tp, agno)? {
        let e = u64::from(s) + u64::from(l);
        if e <= u64::from(start) || u64::from(s) >= end {
            continue;
        }
        if !c.lookup(tp, &(s | XFS_REFC_COWFLAG).to_be_bytes(), Dir::Eq)? {
            return Err(bad(agno, format!("staging record at {s} vanished")));
        }
        c.delete(tp)?;
        let mut keep = |a: u64, b: u64| -> Result<()> {
            if a < b {
                let r = Refc {
                    start: a as u32 | XFS_REFC_COWFLAG,
                    len: (b - a) as u32,
                    count: 1,
                };
                c.insert(tp, &r.to_rec())?;
            }
            Ok(())
        };
        keep(u64::from(s), u64::from(start).max(u64::from(s)))?;
        keep(end.min(e), e)?;
    }
    Ok(())
}

/// Makes AG `agno`'s refcount btree anew in `tp` (repair's) holding the
/// shared extents `recs` (start, length, owners; in order, maximal): a new
/// empty root, then each record inserted. The old tree's blocks are left
/// for repair's next round to free.
pub(crate) fn rebuild(tp: &mut Trans<'_>, agno: AgNumber, recs: &[(u32, u32, u32)]) -> Result<()> {
    let id = agf::read_agf(tp, agno)?;
    agf::set(tp, id, BLOCKS, 0);
    let mut ops = RefcountBt {
        agno,
        block_size: tp.geo().block_size as usize,
    };
    let ptr = ops.alloc_block(tp, 0)?;
    let s = ops.shape();
    let daddr = ops.ptr_daddr(tp, ptr)?;
    let b = tp.get_buf(daddr, s.block_size as u32, Some(s.crc_off()));
    let uuid = tp.geo().meta_uuid;
    crate::btree::block::init_header(&s, tp.buf_mut(b), 0, daddr.0, &uuid);
    ops.set_root(tp, ptr, 1)?;
    for &(start, len, count) in recs {
        if count < 2 || len == 0 || start & XFS_REFC_COWFLAG != 0 {
            return Err(Error::Invalid(format!(
                "refcount record {start}+{len} of {count} owners"
            )));
        }
        let mut c = RefcountBt::cursor(tp, agno);
        c.insert(tp, &Refc { start, len, count }.to_rec())?;
    }
    Ok(())
}

//! Reverse mappings: each rmapbt record checked on its own (flags, range,
//! owner, order, records that should have been one), then the rmapbt
//! compared with the mappings the rest of the check expects: AG headers,
//! the log, free list and btree blocks with their owner codes, inode
//! chunks and copy-on-write staging extents (pass 1, per AG, compared at
//! the end of the AG), and each file's data and attr fork extents with
//! their offsets and unwritten state and its bmbt blocks (pass 2, which
//! may land in any AG, compared per AG after it).
//!
//! As xfs_repair decides: an expected mapping is there when one record
//! of the same owner, fork and bmbt flag holds all of it (same unwritten
//! state, and for file data the same file offsets). A record that does
//! not hold only expected blocks of its owner is reported too (xfs_repair
//! rebuilds the tree from what it expects, so such a record would go).
//!
//! Memory: pass 1 keeps the expected non-file mappings of the AGs being
//! checked and drops them when the AG is done. The file mappings (expected
//! and found) go to sorters that keep at most their share of the check's
//! memory bound and spill sorted runs past it; the comparison at the end
//! merges the two sorted streams one owner of one AG at a time.

use super::owners::Use;
use super::Ctx;
use crate::bytes::{be32, be64, put_be32, put_be64};
use crate::error::Location;
use crate::geometry::{AgNumber, Ino};
use crate::spill::{Peek, Rec, Sorter, SpillConfig};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use xfs_format::btree as xbt;

/// Flag: attr fork.
pub(crate) const ATTR: u8 = 1;
/// Flag: a bmbt block.
pub(crate) const BMBT: u8 = 2;
/// Flag: unwritten extent.
pub(crate) const UNWRITTEN: u8 = 4;

/// The `XFS_RMAP_OFF_*` bits of an offset field for [`Rmap::flags`].
pub(crate) fn off_flags(flags: u8) -> u64 {
    use xfs_format::btree as fb;
    let mut out = 0u64;
    for (bit, off) in [
        (ATTR, fb::XFS_RMAP_OFF_ATTR_FORK),
        (BMBT, fb::XFS_RMAP_OFF_BMBT_BLOCK),
        (UNWRITTEN, fb::XFS_RMAP_OFF_UNWRITTEN),
    ] {
        if flags & bit != 0 {
            out |= off;
        }
    }
    out
}

/// One reverse mapping (found in the rmapbt or expected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rmap {
    pub start: u32,
    pub len: u32,
    pub owner: u64,
    /// File offset (file data only), else 0.
    pub offset: u64,
    /// [`ATTR`], [`BMBT`], [`UNWRITTEN`].
    pub flags: u8,
}

fn non_inode(owner: u64) -> bool {
    owner >> 63 != 0
}

impl Rmap {
    /// Blocks owned by one of the `XFS_RMAP_OWN_*` owners.
    pub fn ag(start: u32, len: u32, owner: u64) -> Rmap {
        Rmap {
            start,
            len,
            owner,
            offset: 0,
            flags: 0,
        }
    }

    /// A file's extent.
    pub fn file(start: u32, len: u32, ino: u64, offset: u64, attr: bool, unwritten: bool) -> Rmap {
        let mut flags = 0;
        if attr {
            flags |= ATTR;
        }
        if unwritten {
            flags |= UNWRITTEN;
        }
        Rmap {
            start,
            len,
            owner: ino,
            offset,
            flags,
        }
    }

    /// A bmbt block of a file's fork.
    pub fn bmbt(start: u32, ino: u64, attr: bool) -> Rmap {
        Rmap {
            start,
            len: 1,
            owner: ino,
            offset: 0,
            flags: BMBT | if attr { ATTR } else { 0 },
        }
    }

    fn end(&self) -> u64 {
        u64::from(self.start) + u64::from(self.len)
    }

    fn has_offset(&self) -> bool {
        !non_inode(self.owner) && self.flags & BMBT == 0
    }

    /// Records of one kind hold each other's blocks: owner, fork, bmbt.
    fn kind(&self) -> (u64, u8) {
        (self.owner, self.flags & (ATTR | BMBT))
    }

    /// True when this record (from the tree) holds all of `w`, with the
    /// same state and, for file data, the same file offsets.
    fn holds(&self, w: &Rmap) -> bool {
        self.kind() == w.kind()
            && self.flags == w.flags
            && self.start <= w.start
            && self.end() >= w.end()
            && (!self.has_offset()
                || self.offset.checked_add(u64::from(w.start - self.start)) == Some(w.offset))
    }

    /// True when `w` maps blocks as this record says it would: same
    /// kind and state, and for file data the same block-to-offset shift.
    fn agrees(&self, w: &Rmap) -> bool {
        self.kind() == w.kind()
            && self.flags == w.flags
            && (!self.has_offset()
                || self.offset.wrapping_sub(u64::from(self.start))
                    == w.offset.wrapping_sub(u64::from(w.start)))
    }

    /// True when `next` continues this record (one record should hold both).
    fn joins(&self, next: &Rmap) -> bool {
        self.owner == next.owner
            && self.end() == u64::from(next.start)
            && u64::from(self.len) + u64::from(next.len) <= u64::from(u32::MAX)
            && (non_inode(self.owner)
                || (self.flags == next.flags
                    && (self.flags & BMBT != 0
                        || self.offset + u64::from(self.len) == next.offset)))
    }
}

/// Words for an owner.
pub(crate) fn owner_name(owner: u64) -> String {
    match owner {
        xbt::XFS_RMAP_OWN_FS => "AG headers".into(),
        xbt::XFS_RMAP_OWN_LOG => "the log".into(),
        xbt::XFS_RMAP_OWN_AG => "free space btrees and free list".into(),
        xbt::XFS_RMAP_OWN_INOBT => "inode btrees".into(),
        xbt::XFS_RMAP_OWN_INODES => "inode chunks".into(),
        xbt::XFS_RMAP_OWN_REFC => "refcount btree".into(),
        xbt::XFS_RMAP_OWN_COW => "CoW staging".into(),
        o if non_inode(o) => format!("owner {:#x}", o),
        ino => format!("inode {ino}"),
    }
}

impl std::fmt::Display for Rmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "blocks {}..{} of {}",
            self.start,
            self.end(),
            owner_name(self.owner)
        )?;
        if self.flags & ATTR != 0 {
            f.write_str(" attr fork")?;
        }
        if self.flags & BMBT != 0 {
            f.write_str(" bmbt")?;
        }
        if self.flags & UNWRITTEN != 0 {
            f.write_str(" unwritten")?;
        }
        if self.has_offset() {
            write!(f, " at file block {}", self.offset)?;
        }
        Ok(())
    }
}

/// The owner of the blocks of an AG btree, by its magic number.
pub(crate) fn btree_owner(magic: u32) -> u64 {
    match magic {
        xbt::XFS_IBT_CRC_MAGIC | xbt::XFS_FIBT_CRC_MAGIC => xbt::XFS_RMAP_OWN_INOBT,
        xbt::XFS_REFC_CRC_MAGIC => xbt::XFS_RMAP_OWN_REFC,
        _ => xbt::XFS_RMAP_OWN_AG,
    }
}

/// Checks the rmapbt's leaf records one by one, in tree order, as the walk
/// delivers them, and splits the good ones by owner.
pub(crate) struct RecordCheck {
    agno: u32,
    aglen: u32,
    reflink: bool,
    /// The last record, for order (its raw key) and merging.
    last: Option<(Rmap, u64)>,
    /// Records of non-inode owners.
    pub ag: Vec<Rmap>,
    /// Records of inodes.
    pub files: Vec<Rmap>,
}

impl RecordCheck {
    pub(crate) fn new(ctx: &Ctx<'_>, agno: u32) -> RecordCheck {
        let geo = ctx.fs.geometry();
        RecordCheck {
            agno,
            aglen: geo.ag_len(AgNumber(agno)),
            reflink: geo.features.reflink,
            last: None,
            ag: Vec::new(),
            files: Vec::new(),
        }
    }

    /// One leaf record `r` of rmapbt block `blk`.
    pub(crate) fn record(&mut self, ctx: &Ctx<'_>, r: &[u8], blk: u32) {
        let geo = ctx.fs.geometry();
        let agno = self.agno;
        let bad = |d: String| {
            ctx.sink
                .add("rmapbt block", Location::AgBlock { agno, agbno: blk }, d)
        };
        if r.len() < 24 {
            return;
        }
        let (start, len, owner, raw) = (be32(r, 0), be32(r, 4), be64(r, 8), be64(r, 16));
        let known = xbt::XFS_RMAP_OFF_MASK
            | xbt::XFS_RMAP_OFF_ATTR_FORK
            | xbt::XFS_RMAP_OFF_BMBT_BLOCK
            | xbt::XFS_RMAP_OFF_UNWRITTEN;
        if raw & !known != 0 {
            return bad(format!(
                "record {start}+{len} of owner {owner:#x} has unknown flags in {raw:#x}"
            ));
        }
        if start >= self.aglen
            || len == 0
            || u64::from(start) + u64::from(len) > u64::from(self.aglen)
        {
            return bad(format!("record {start}+{len} is outside the AG"));
        }
        let mut flags = 0;
        if raw & xbt::XFS_RMAP_OFF_ATTR_FORK != 0 {
            flags |= ATTR;
        }
        if raw & xbt::XFS_RMAP_OFF_BMBT_BLOCK != 0 {
            flags |= BMBT;
        }
        if raw & xbt::XFS_RMAP_OFF_UNWRITTEN != 0 {
            flags |= UNWRITTEN;
        }
        let rec = Rmap {
            start,
            len,
            owner,
            offset: raw & xbt::XFS_RMAP_OFF_MASK,
            flags,
        };
        let special = (xbt::XFS_RMAP_OWN_COW..=xbt::XFS_RMAP_OWN_FS).contains(&owner);
        let inode_ok = !non_inode(owner)
            && owner >> (geo.ag_blk_log + geo.inopb_log) < u64::from(geo.ag_count)
            && geo.ino_agbno(Ino(owner)).0 < geo.ag_blocks;
        if !special && !inode_ok {
            bad(format!("{rec}: no such owner"));
        }
        if non_inode(owner) && (flags != 0 || rec.offset != 0) {
            bad(format!(
                "{rec}: an owner other than an inode with flags or an offset ({raw:#x})"
            ));
        }
        if let Some((prev, prev_raw)) = self.last {
            let in_order = if self.reflink {
                (start, owner, raw) > (prev.start, prev.owner, prev_raw)
            } else {
                u64::from(start) >= prev.end()
            };
            if !in_order {
                bad(format!("{rec} is out of order after {prev}"));
            }
            if prev.joins(&rec) {
                bad(format!(
                    "{rec} continues {prev}: one record should hold both"
                ));
            }
        }
        self.last = Some((rec, raw));
        if !special && !inode_ok {
            return;
        }
        if non_inode(owner) {
            self.ag.push(rec);
        } else {
            self.files.push(rec);
        }
    }
}

/// A btree key as it compares: (start block, owner, offset with the
/// attr-fork and bmbt flags; the unwritten flag is not part of keys).
type Key = (u32, u64, u64);

fn key_at(k: &[u8]) -> Key {
    (
        be32(k, 0),
        be64(k, 4),
        be64(k, 12) & !xbt::XFS_RMAP_OFF_UNWRITTEN,
    )
}

/// The low key of leaf record `r`.
fn rec_low(r: &[u8]) -> Key {
    (
        be32(r, 0),
        be64(r, 8),
        be64(r, 16) & !xbt::XFS_RMAP_OFF_UNWRITTEN,
    )
}

/// The high key of leaf record `r`: its last block, and for file data
/// its last file offset.
fn rec_high(r: &[u8]) -> Key {
    let (start, len, owner, off) = (be32(r, 0), be32(r, 4), be64(r, 8), be64(r, 16));
    let last = len.saturating_sub(1);
    let off = off & !xbt::XFS_RMAP_OFF_UNWRITTEN;
    let off = if non_inode(owner) || off & xbt::XFS_RMAP_OFF_BMBT_BLOCK != 0 {
        off
    } else {
        off.wrapping_add(u64::from(last))
    };
    (start.wrapping_add(last), owner, off)
}

/// Checks the keys of rmapbt block `agbno` (`blk`, at `level`) against
/// the key its parent holds for it (`parent`: low key then high key, 40
/// bytes): the parent's low key is the block's first key, and nothing in
/// the block goes past the parent's high key; in a node, the low keys
/// are in order. Returns false when a key is wrong (the tree then cannot
/// be searched, and is rebuilt).
pub(crate) fn check_keys(
    ctx: &Ctx<'_>,
    agno: u32,
    agbno: u32,
    level: u32,
    blk: &[u8],
    parent: Option<&[u8]>,
) -> bool {
    let ok = std::cell::Cell::new(true);
    const HDR: usize = 56;
    const REC: usize = 24;
    const KEY: usize = 20;
    let numrecs = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
    let bad = |d: String| {
        ok.set(false);
        ctx.sink
            .add("rmapbt block", Location::AgBlock { agno, agbno }, d)
    };
    let show = |k: Key| format!("({}, {:#x}, {:#x})", k.0, k.1, k.2);
    // (low key, high key) of every record or child pointer.
    let mut entries: Vec<(Key, Key)> = Vec::with_capacity(numrecs);
    if level == 0 {
        for i in 0..numrecs {
            let Some(r) = blk.get(HDR + i * REC..HDR + (i + 1) * REC) else {
                break;
            };
            entries.push((rec_low(r), rec_high(r)));
        }
    } else {
        for i in 0..numrecs {
            let o = HDR + i * 2 * KEY;
            let Some(k) = blk.get(o..o + 2 * KEY) else {
                break;
            };
            entries.push((key_at(&k[..KEY]), key_at(&k[KEY..])));
        }
        for (i, w) in entries.windows(2).enumerate() {
            if w[1].0 < w[0].0 {
                bad(format!(
                    "key {} {} is below the key before it {}",
                    i + 1,
                    show(w[1].0),
                    show(w[0].0)
                ));
            }
        }
    }
    let Some(p) = parent.filter(|p| p.len() >= 2 * KEY) else {
        return ok.get();
    };
    let (low, high) = (key_at(&p[..KEY]), key_at(&p[KEY..2 * KEY]));
    if let Some(&(first, _)) = entries.first() {
        if first != low {
            bad(format!(
                "first key {} is not the key {} in the parent block",
                show(first),
                show(low)
            ));
        }
    }
    if let Some((i, &(_, h))) = entries.iter().enumerate().find(|(_, e)| e.1 > high) {
        bad(format!(
            "{} {i} reaches {} past the high key {} in the parent block",
            if level == 0 { "record" } else { "key" },
            show(h),
            show(high)
        ));
    }
    ok.get()
}

/// Reports at most this many mismatches of one kind per AG; the rest are counted.
const MAX_REPORTS: usize = 32;

/// Compares what AG `agno`'s rmapbt holds (`found`) with what the check
/// expects (`want`), both of one class of owners.
pub(crate) fn compare(ctx: &Ctx<'_>, agno: u32, want: Vec<Rmap>, found: Vec<Rmap>) {
    compare_in(
        ctx,
        "rmapbt",
        &|agbno| Location::AgBlock { agno, agbno },
        &format!("AG {agno} rmapbt"),
        want,
        found,
    );
}

/// [`compare`] for any group's reverse-mapping btree: problems are
/// reported as `what`, at `at(block)`, and summed up under `scope`.
pub(crate) fn compare_in(
    ctx: &Ctx<'_>,
    what: &'static str,
    at: &dyn Fn(u32) -> Location,
    scope: &str,
    mut want: Vec<Rmap>,
    mut found: Vec<Rmap>,
) {
    want.sort_unstable_by_key(Rmap::order);
    found.sort_unstable_by_key(Rmap::order);
    let mut t = Tally::new(ctx, what, Box::new(at), scope.to_string());
    t.compare(&mut want, &found);
    t.end();
}

/// The comparison's sort key: owner with fork and bmbt flag, start, length,
/// offset, flags.
type OrderKey = ((u64, u8), u32, u32, u64, u8);

impl Rmap {
    /// The order of the comparison: by owner, fork and bmbt flag, then start.
    fn order(&self) -> OrderKey {
        (self.kind(), self.start, self.len, self.offset, self.flags)
    }
}

/// The problems of one group's comparison, counted over all its owners.
struct Tally<'c, 'a> {
    ctx: &'c Ctx<'a>,
    what: &'static str,
    at: Box<dyn Fn(u32) -> Location + 'c>,
    scope: String,
    missing: usize,
    extra: usize,
}

impl<'c, 'a> Tally<'c, 'a> {
    fn new(
        ctx: &'c Ctx<'a>,
        what: &'static str,
        at: Box<dyn Fn(u32) -> Location + 'c>,
        scope: String,
    ) -> Self {
        Tally {
            ctx,
            what,
            at,
            scope,
            missing: 0,
            extra: 0,
        }
    }

    /// Compares `want` with `found`, both sorted by [`Rmap::order`]
    /// (`want` loses its duplicates).
    fn compare(&mut self, want: &mut Vec<Rmap>, found: &[Rmap]) {
        let (ctx, what, at) = (self.ctx, self.what, &self.at);
        want.dedup();
        // Every expected mapping is held by one record.
        for w in want.iter() {
            // Records of w's kind starting at or before w, the latest first.
            let i = found.partition_point(|b| (b.kind(), b.start) <= (w.kind(), w.start));
            let mut near = None;
            let mut ok = false;
            for b in found[..i].iter().rev().take(16) {
                if b.kind() != w.kind() {
                    break;
                }
                if b.holds(w) {
                    ok = true;
                    break;
                }
                if b.end() > u64::from(w.start) && near.is_none() {
                    near = Some(*b);
                }
            }
            if ok {
                continue;
            }
            self.missing += 1;
            if self.missing > MAX_REPORTS {
                continue;
            }
            let d = match near {
                Some(b) => format!("reverse mapping {b} does not match {w}"),
                None => format!("no reverse mapping for {w}"),
            };
            // Added when no record of its owner overlaps it (one that
            // does is trimmed first, as a record holding what it should
            // not, and the mapping added in the round after).
            let overlapped = found[..i]
                .iter()
                .rev()
                .take_while(|b| b.kind() == w.kind())
                .any(|b| b.end() > u64::from(w.start))
                || found[i..]
                    .iter()
                    .take_while(|b| b.kind() == w.kind())
                    .any(|b| u64::from(b.start) < w.end());
            let fix = match (self.what, at(w.start)) {
                ("rmapbt", Location::AgBlock { agno, agbno }) if !overlapped => {
                    Some(super::Fix::AddRmap {
                        agno,
                        agbno,
                        len: w.len,
                        owner: w.owner,
                        offset: w.offset,
                        flags: off_flags(w.flags),
                    })
                }
                _ => None,
            };
            ctx.sink.add_maybe(what, at(w.start), d, fix);
        }

        // Every record holds only expected blocks of its owner.
        for b in found {
            let mut i = want.partition_point(|w| (w.kind(), w.start) < (b.kind(), b.start));
            // Step back over expected mappings of the kind that reach into b.
            let mut back = 0;
            while i > 0
                && back < 16
                && want[i - 1].kind() == b.kind()
                && want[i - 1].end() > u64::from(b.start)
            {
                i -= 1;
                back += 1;
            }
            // The runs of b that no expected mapping of its owner holds.
            let mut gaps: Vec<(u64, u64)> = Vec::new();
            let mut covered = u64::from(b.start);
            for w in &want[i..] {
                if w.kind() != b.kind() || covered >= b.end() || u64::from(w.start) >= b.end() {
                    break;
                }
                if w.end() > covered && b.agrees(w) {
                    if u64::from(w.start) > covered {
                        gaps.push((covered, u64::from(w.start)));
                    }
                    covered = w.end();
                }
            }
            if covered < b.end() {
                gaps.push((covered, b.end()));
            }
            for (gs, ge) in gaps {
                self.extra += 1;
                if self.extra > MAX_REPORTS {
                    continue;
                }
                // The run goes from the record (the whole record when no
                // mapping of its owner holds any of it: an owner cleared
                // or gone).
                let fix = match (self.what, at(gs as u32)) {
                    ("rmapbt", Location::AgBlock { agno, agbno }) => Some(super::Fix::DropRmap {
                        agno,
                        agbno,
                        len: (ge - gs) as u32,
                        owner: b.owner,
                        offset: if b.has_offset() {
                            b.offset + (gs - u64::from(b.start))
                        } else {
                            b.offset
                        },
                        flags: off_flags(b.flags),
                    }),
                    _ => None,
                };
                ctx.sink.add_maybe(
                    what,
                    at(gs as u32),
                    format!("record {b}: block {gs} is not mapped so by its owner"),
                    fix,
                );
            }
        }
    }

    /// The counts of what was not reported one by one.
    fn end(self) {
        if self.missing > MAX_REPORTS {
            self.ctx.sink.add(
                self.what,
                Location::Other(self.scope.clone()),
                format!(
                    "{} more expected mapping(s) not found",
                    self.missing - MAX_REPORTS
                ),
            );
        }
        if self.extra > MAX_REPORTS {
            self.ctx.sink.add(
                self.what,
                Location::Other(self.scope),
                format!(
                    "{} more record(s) not matching their owners",
                    self.extra - MAX_REPORTS
                ),
            );
        }
    }
}

/// A file mapping of an AG, as the sorters keep it: ordered by AG, then
/// as [`Rmap::order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AgRmap {
    agno: u32,
    r: Rmap,
}

impl AgRmap {
    fn key(&self) -> (u32, OrderKey) {
        (self.agno, self.r.order())
    }

    /// The comparison's unit: one owner's fork (or bmbt blocks) in one AG.
    fn group(&self) -> (u32, (u64, u8)) {
        (self.agno, self.r.kind())
    }
}

impl PartialOrd for AgRmap {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for AgRmap {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

impl Rec for AgRmap {
    const SIZE: usize = 29;
    fn put(&self, b: &mut [u8]) {
        put_be32(b, 0, self.agno);
        put_be32(b, 4, self.r.start);
        put_be32(b, 8, self.r.len);
        put_be64(b, 12, self.r.owner);
        put_be64(b, 20, self.r.offset);
        b[28] = self.r.flags;
    }
    fn get(b: &[u8]) -> Self {
        AgRmap {
            agno: be32(b, 0),
            r: Rmap {
                start: be32(b, 4),
                len: be32(b, 8),
                owner: be64(b, 12),
                offset: be64(b, 20),
                flags: b[28],
            },
        }
    }
}

/// Sorters the file mappings are spread over (by thread, so that the
/// inode pass's workers seldom wait for each other).
const SHARDS: usize = 8;

/// One shard: the file mappings expected and found.
struct Shard {
    want: Sorter<AgRmap>,
    found: Sorter<AgRmap>,
}

fn my_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
    SHARD.with(|s| *s)
}

/// The mappings kept between the passes.
pub(crate) struct Rmaps {
    on: bool,
    ag_count: u32,
    /// Expected mappings of non-inode owners, per AG, until pass 1 is
    /// done with the AG.
    ag_want: Mutex<HashMap<u32, Vec<Rmap>>>,
    shards: Vec<Mutex<Shard>>,
    /// AGs whose rmapbt could not be read whole: not compared.
    skip: Mutex<HashSet<u32>>,
    /// What those AGs' rmapbts should hold, for their rebuild.
    rebuild: Mutex<HashMap<u32, Vec<Rmap>>>,
    /// Per AG whose refcount btree is rebuilt, the file data mappings
    /// expected there (what the shared counts are counted from).
    refc: Mutex<HashMap<u32, Vec<Rmap>>>,
    /// Inodes whose data fork may be rebuilt from their reverse
    /// mappings (it cannot be read, or maps fewer blocks than the inode
    /// counts): what each needs.
    suspects: Mutex<HashMap<u64, Suspect>>,
    /// The data forks rebuilt from the rmapbt ([`Rmaps::take_fork_rebuilds`]).
    forks: Mutex<Vec<ForkRebuild>>,
    /// The first error writing or reading a spill file.
    failed: Mutex<Option<std::io::Error>>,
}

/// What an inode whose data fork is in doubt needs for its fork to be
/// rebuilt from its reverse mappings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Suspect {
    /// The blocks the inode counts (`di_nblocks`): its records in the
    /// rmapbt must come to exactly these.
    pub nblocks: u64,
    /// Extent records its data fork holds in the inode.
    pub capacity: u64,
}

/// A data fork rebuilt from the rmapbt.
#[derive(Debug, Clone)]
pub(crate) struct ForkRebuild {
    /// The inode.
    pub ino: u64,
    /// Its extents (file block, filesystem block, length, unwritten) in
    /// file order.
    pub extents: Vec<(u64, u64, u64, bool)>,
    /// The blocks its extents hold (`di_nblocks` of an extents fork).
    pub nblocks: u64,
    /// None when the extents fit in the inode; otherwise the fork is
    /// built as a bmbt, and these are its old bmbt blocks as the rmapbt
    /// records them (AG, first block, length), freed with their records.
    pub old_bmbt: Option<Vec<(u32, u32, u32)>>,
}

/// Longest extent a bmbt record holds (21 bits of length).
const MAX_EXTENT: u64 = (1 << 21) - 1;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Rmaps {
    /// Mappings of `geo`'s filesystem kept in about `memory` bytes, past
    /// which sorted runs are spilled as `config` says.
    pub(crate) fn new(
        geo: &crate::geometry::Geometry,
        memory: usize,
        config: SpillConfig,
    ) -> Rmaps {
        let share = memory / (2 * SHARDS);
        Rmaps {
            on: geo.features.rmapbt,
            ag_count: geo.ag_count,
            ag_want: Mutex::new(HashMap::new()),
            shards: (0..if geo.features.rmapbt { SHARDS } else { 0 })
                .map(|_| {
                    Mutex::new(Shard {
                        want: Sorter::new(share, config.clone()),
                        found: Sorter::new(share, config.clone()),
                    })
                })
                .collect(),
            skip: Mutex::new(HashSet::new()),
            rebuild: Mutex::new(HashMap::new()),
            refc: Mutex::new(HashMap::new()),
            suspects: Mutex::new(HashMap::new()),
            forks: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
        }
    }

    /// True when the filesystem has reverse mappings to compare.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    fn note(&self, r: std::io::Result<()>) {
        if let Err(e) = r {
            lock(&self.failed).get_or_insert(e);
        }
    }

    /// Records that the check expects mapping `r` in AG `agno`. Mappings
    /// outside the AGs are left out (the ownership map reports them).
    pub(crate) fn expect(&self, agno: u32, r: Rmap) {
        if !self.on || agno >= self.ag_count || r.len == 0 {
            return;
        }
        if non_inode(r.owner) {
            lock(&self.ag_want).entry(agno).or_default().push(r);
            return;
        }
        let res = lock(&self.shards[my_shard()]).want.push(AgRmap { agno, r });
        self.note(res);
    }

    /// Keeps the file mappings found in AG `agno`'s rmapbt for [`Rmaps::finish`].
    pub(crate) fn found_files(&self, agno: u32, recs: Vec<Rmap>) {
        if !self.on || recs.is_empty() {
            return;
        }
        let mut v: Vec<AgRmap> = recs.into_iter().map(|r| AgRmap { agno, r }).collect();
        let res = lock(&self.shards[my_shard()]).found.append(&mut v);
        self.note(res);
    }

    /// Leaves AG `agno` out of the comparison (its rmapbt could not be
    /// read whole), keeping what it should hold (`want`, what pass 1
    /// expects, and the file mappings [`Rmaps::finish`] adds) for its
    /// rebuild. The AG's whole set is held in memory.
    pub(crate) fn skip(&self, agno: u32, want: Vec<Rmap>) {
        lock(&self.skip).insert(agno);
        lock(&self.rebuild).entry(agno).or_default().extend(want);
    }

    /// What AG `agno`'s rmapbt should hold, when it was skipped: every
    /// mapping expected (unsorted, maybe repeated).
    pub(crate) fn take_rebuild(&self, agno: u32) -> Option<Vec<Rmap>> {
        lock(&self.rebuild).remove(&agno)
    }

    /// Keeps the file data mappings expected in AG `agno` for
    /// [`Rmaps::take_refcounts`] (its refcount btree is rebuilt).
    pub(crate) fn keep_files(&self, agno: u32) {
        lock(&self.refc).entry(agno).or_default();
    }

    /// The AGs whose file data mappings were kept.
    pub(crate) fn kept_files(&self) -> Vec<u32> {
        let mut v: Vec<u32> = lock(&self.refc).keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The shared extents of AG `agno` as the files' data mappings kept
    /// there overlap: maximal runs of two owners or more, as (start,
    /// length, owners), in order (what its rebuilt refcount btree holds).
    pub(crate) fn take_refcounts(&self, agno: u32) -> Vec<(u32, u32, u32)> {
        let maps = lock(&self.refc).remove(&agno).unwrap_or_default();
        let mut edges: Vec<(u64, i64)> = Vec::with_capacity(2 * maps.len());
        for r in maps.iter().filter(|r| r.flags & (ATTR | BMBT) == 0) {
            edges.push((u64::from(r.start), 1));
            edges.push((r.end(), -1));
        }
        edges.sort_unstable();
        let mut out: Vec<(u32, u32, u32)> = Vec::new();
        let mut n = 0i64;
        let mut at = 0u64;
        for (x, d) in edges {
            if x > at && n >= 2 {
                let (s, l, c) = (at as u32, (x - at) as u32, n as u32);
                match out.last_mut() {
                    Some(p) if p.0 + p.1 == s && p.2 == c && p.1 + l < (1 << 31) => p.1 += l,
                    _ => out.push((s, l, c)),
                }
            }
            at = x;
            n += d;
        }
        out
    }

    /// Notes that inode `ino`'s data fork may be rebuilt from its
    /// reverse mappings ([`Rmaps::finish`] decides).
    pub(crate) fn suspect(&self, ino: u64, s: Suspect) {
        if self.on {
            lock(&self.suspects).insert(ino, s);
        }
    }

    /// The data forks [`Rmaps::finish`] rebuilt from the rmapbt, by inode.
    pub(crate) fn take_fork_rebuilds(&self) -> Vec<ForkRebuild> {
        let mut v = std::mem::take(&mut *lock(&self.forks));
        v.sort_unstable_by_key(|f| f.ino);
        v
    }

    /// The AGs skipped.
    pub(crate) fn skipped(&self) -> Vec<u32> {
        let mut v: Vec<u32> = lock(&self.rebuild).keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Takes what pass 1 expects of AG `agno` (no file has been read yet).
    pub(crate) fn take_expected(&self, agno: u32) -> Vec<Rmap> {
        lock(&self.ag_want).remove(&agno).unwrap_or_default()
    }

    /// Compares the file mappings of every AG that has any, merging the
    /// sorted streams one owner of one AG at a time. Errs only when a
    /// spill file could not be written or read back.
    pub(crate) fn finish(&self, ctx: &Ctx<'_>) -> std::io::Result<()> {
        if !self.on {
            return Ok(());
        }
        if let Some(e) = lock(&self.failed).take() {
            return Err(e);
        }
        let skip = std::mem::take(&mut *lock(&self.skip));
        let mut wants = Vec::with_capacity(SHARDS + 1);
        let mut founds = Vec::with_capacity(SHARDS);
        // Anything of a non-inode owner expected after its AG's pass 1
        // is compared here too.
        let mut late: Vec<AgRmap> = std::mem::take(&mut *lock(&self.ag_want))
            .into_iter()
            .flat_map(|(agno, v)| v.into_iter().map(move |r| AgRmap { agno, r }))
            .collect();
        // (few: kept in memory whatever their number)
        let mut s = Sorter::new(usize::MAX, SpillConfig { dir: None });
        s.append(&mut late)?;
        wants.push(Peek::new(s.into_sorted()?)?);
        for sh in &self.shards {
            let sh = std::mem::replace(
                &mut *lock(sh),
                Shard {
                    want: Sorter::new(0, SpillConfig { dir: None }),
                    found: Sorter::new(0, SpillConfig { dir: None }),
                },
            );
            wants.push(Peek::new(sh.want.into_sorted()?)?);
            founds.push(Peek::new(sh.found.into_sorted()?)?);
        }
        let mut want = Merge(wants);
        let mut found = Merge(founds);
        let mut wg: Vec<Rmap> = Vec::new();
        let mut fg: Vec<Rmap> = Vec::new();
        let mut cur: Option<(u32, Tally)> = None;
        let suspects = std::mem::take(&mut *lock(&self.suspects));
        // Per suspect: the blocks all its records hold, those of them in
        // its data fork's bmbt, whether any AG of its records was skipped,
        // its data fork's groups (AG, expected, found), compared only if
        // the fork is not rebuilt, and its data fork bmbt's groups,
        // compared unless the fork is rebuilt as a bmbt.
        type Groups = Vec<(u32, Vec<Rmap>, Vec<Rmap>)>;
        type Diverted = (u64, u64, bool, Groups, Groups);
        let mut diverted: HashMap<u64, Diverted> = HashMap::new();
        loop {
            let g = match (
                want.peek().map(AgRmap::group),
                found.peek().map(AgRmap::group),
            ) {
                (None, None) => break,
                (Some(a), None) | (None, Some(a)) => a,
                (Some(a), Some(b)) => a.min(b),
            };
            wg.clear();
            fg.clear();
            while let Some(r) = want.take_if(|r| r.group() == g)? {
                wg.push(r.r);
            }
            while let Some(r) = found.take_if(|r| r.group() == g)? {
                fg.push(r.r);
            }
            let agno = g.0;
            if let Some(v) = lock(&self.refc).get_mut(&agno) {
                v.extend(wg.iter().copied());
            }
            let owner = (g.1).0;
            if suspects.contains_key(&owner) {
                let d = diverted.entry(owner).or_default();
                let held = fg.iter().map(|r| u64::from(r.len)).sum::<u64>();
                d.0 += held;
                if (g.1).1 == BMBT {
                    d.1 += held;
                }
                d.2 |= skip.contains(&agno);
                if (g.1).1 == 0 && !skip.contains(&agno) {
                    d.3.push((agno, wg.clone(), fg.clone()));
                    continue;
                }
                if (g.1).1 == BMBT && !skip.contains(&agno) {
                    d.4.push((agno, wg.clone(), fg.clone()));
                    continue;
                }
            }
            if skip.contains(&agno) {
                lock(&self.rebuild)
                    .entry(agno)
                    .or_default()
                    .extend(wg.iter().copied());
                continue;
            }
            if cur.as_ref().is_none_or(|(a, _)| *a != agno) {
                if let Some((_, t)) = cur.take() {
                    t.end();
                }
                let at = Box::new(move |agbno| Location::AgBlock { agno, agbno });
                cur = Some((
                    agno,
                    Tally::new(ctx, "rmapbt", at, format!("AG {agno} rmapbt")),
                ));
            }
            let (_, t) = cur.as_mut().expect("just set");
            t.compare(&mut wg, &fg);
        }
        if let Some((_, t)) = cur {
            t.end();
        }
        let mut owners: Vec<u64> = diverted.keys().copied().collect();
        owners.sort_unstable();
        for owner in owners {
            let (held, bmbt, skipped, groups, bmbt_groups) =
                diverted.remove(&owner).expect("listed");
            let s = suspects[&owner];
            // A fork built as a bmbt frees the old bmbt blocks the rmapbt
            // records: only when nothing else claims them.
            let rebuilt = (!skipped && held == s.nblocks)
                .then(|| rebuilt_fork(ctx, &groups))
                .flatten()
                .filter(|e| {
                    e.len() as u64 <= s.capacity
                        || bmbt_groups.iter().all(|(agno, want, found)| {
                            unheld(want, found)
                                .into_iter()
                                .all(|(s, e)| ctx.map.unclaimed(*agno, s, e))
                        })
                });
            let compare = |groups: Groups| {
                for (agno, mut want, found) in groups {
                    let at = Box::new(move |agbno| Location::AgBlock { agno, agbno });
                    let mut t = Tally::new(ctx, "rmapbt", at, format!("AG {agno} rmapbt"));
                    t.compare(&mut want, &found);
                    t.end();
                }
            };
            match rebuilt {
                Some(extents) => {
                    for (agno, want, found) in &groups {
                        claim_unheld(ctx, *agno, owner, want, found, Use::Data);
                    }
                    let old_bmbt = if extents.len() as u64 <= s.capacity {
                        // In place: the old bmbt blocks' records are
                        // compared as ever (later rounds free them).
                        compare(bmbt_groups);
                        None
                    } else {
                        // Built as a bmbt through the journal, which
                        // frees the old bmbt blocks the rmapbt records.
                        let mut old = Vec::new();
                        for (agno, want, found) in &bmbt_groups {
                            claim_unheld(ctx, *agno, owner, want, found, Use::Bmbt);
                            old.extend(found.iter().map(|r| (*agno, r.start, r.len)));
                        }
                        Some(old)
                    };
                    // The data fork's bmbt blocks go with its btree.
                    lock(&self.forks).push(ForkRebuild {
                        ino: owner,
                        extents,
                        nblocks: held - bmbt,
                        old_bmbt,
                    });
                }
                None => {
                    compare(groups);
                    compare(bmbt_groups);
                }
            }
        }
        Ok(())
    }
}

/// The data fork of inode `ino` as its rmapbt records (`groups`: per AG,
/// expected and found) say it: its extents in file order. None when the
/// records overlap in the file or hold blocks something else uses.
fn rebuilt_fork(
    ctx: &Ctx<'_>,
    groups: &[(u32, Vec<Rmap>, Vec<Rmap>)],
) -> Option<Vec<(u64, u64, u64, bool)>> {
    let geo = ctx.fs.geometry();
    let mut recs: Vec<(u64, u64, u64, bool)> = Vec::new();
    for (agno, want, found) in groups {
        for r in found {
            let fsb = geo
                .fsb_make(AgNumber(*agno), crate::geometry::AgBlock(r.start))
                .0;
            recs.push((r.offset, fsb, u64::from(r.len), r.flags & UNWRITTEN != 0));
        }
        for (s, e) in unheld(want, found) {
            if !ctx.map.free_for_data(*agno, s, e) {
                return None;
            }
        }
    }
    if recs.is_empty() {
        return None;
    }
    recs.sort_unstable();
    let mut out: Vec<(u64, u64, u64, bool)> = Vec::new();
    for (off, fsb, len, unwritten) in recs {
        if out.last().is_some_and(|p| p.0 + p.2 > off) {
            return None;
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_EXTENT);
            out.push((off + done, fsb + done, n, unwritten));
            done += n;
        }
    }
    Some(out)
}

/// The runs of the records `found` (sorted) that no mapping of `want`
/// holds: what the inode's fork, as read, did not claim.
fn unheld(want: &[Rmap], found: &[Rmap]) -> Vec<(u32, u32)> {
    let mut gaps = Vec::new();
    for b in found {
        let mut covered = u64::from(b.start);
        let mut held: Vec<&Rmap> = want
            .iter()
            .filter(|w| b.agrees(w) && w.end() > u64::from(b.start) && u64::from(w.start) < b.end())
            .collect();
        held.sort_unstable_by_key(|w| w.start);
        for w in held {
            if u64::from(w.start) > covered {
                gaps.push((covered as u32, w.start));
            }
            covered = covered.max(w.end());
        }
        if covered < b.end() {
            gaps.push((covered as u32, b.end() as u32));
        }
    }
    gaps
}

/// Claims for inode `ino` the blocks of its records that its fork, as
/// read, did not.
fn claim_unheld(ctx: &Ctx<'_>, agno: u32, ino: u64, want: &[Rmap], found: &[Rmap], what: Use) {
    for (s, e) in unheld(want, found) {
        ctx.map.claim(
            &ctx.sink,
            agno,
            s,
            u64::from(e - s),
            what,
            "extent map",
            &|| Location::Inode(ino),
        );
    }
}

/// What AG `agno`'s rebuilt rmapbt holds but for its own blocks and the
/// free space btrees' (which the rebuild places): every mapping expected
/// but the AG's own (`XFS_RMAP_OWN_AG`), and the free list's blocks as
/// the AG's, as (start, length, owner, offset with `XFS_RMAP_OFF_*`
/// flags), unsorted. None when the AG's rmapbt was read whole.
pub(crate) fn rebuilt_records(ctx: &Ctx<'_>, agno: u32) -> Option<Vec<(u32, u32, u64, u64)>> {
    let want = ctx.rmaps.take_rebuild(agno)?;
    let own_ag = xfs_format::btree::XFS_RMAP_OWN_AG;
    let mut out: Vec<(u32, u32, u64, u64)> = want
        .into_iter()
        .filter(|r| r.owner != own_ag)
        .map(|r| (r.start, r.len, r.owner, r.offset | off_flags(r.flags)))
        .collect();
    out.extend(
        ctx.map
            .agfl_runs(agno)
            .into_iter()
            .map(|(s, l)| (s, l, own_ag, 0)),
    );
    Some(out)
}

/// The k-way merge of the shards' sorted streams.
struct Merge(Vec<Peek<AgRmap>>);

impl Merge {
    fn head(&self) -> Option<usize> {
        let mut best: Option<(usize, &AgRmap)> = None;
        for (i, p) in self.0.iter().enumerate() {
            if let Some(r) = p.peek() {
                if best.is_none_or(|(_, b)| r < b) {
                    best = Some((i, r));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    fn peek(&self) -> Option<&AgRmap> {
        self.head().and_then(|i| self.0[i].peek())
    }

    fn take_if(&mut self, f: impl Fn(&AgRmap) -> bool) -> std::io::Result<Option<AgRmap>> {
        match self.head() {
            Some(i) => self.0[i].take_if(f),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_what_it_covers_with_the_same_offsets() {
        let b = Rmap::file(100, 10, 131, 50, false, false);
        assert!(b.holds(&Rmap::file(102, 3, 131, 52, false, false)));
        assert!(
            !b.holds(&Rmap::file(102, 3, 131, 53, false, false)),
            "offset"
        );
        assert!(!b.holds(&Rmap::file(102, 3, 131, 52, true, false)), "fork");
        assert!(
            !b.holds(&Rmap::file(102, 3, 131, 52, false, true)),
            "unwritten"
        );
        assert!(
            !b.holds(&Rmap::file(108, 3, 131, 58, false, false)),
            "past the end"
        );
        assert!(
            !b.holds(&Rmap::file(102, 3, 132, 52, false, false)),
            "owner"
        );
        let ag = Rmap::ag(10, 5, xbt::XFS_RMAP_OWN_AG);
        assert!(ag.holds(&Rmap::ag(12, 1, xbt::XFS_RMAP_OWN_AG)));
        assert!(!ag.holds(&Rmap::ag(12, 1, xbt::XFS_RMAP_OWN_INOBT)));
        let bm = Rmap::bmbt(7, 131, false);
        assert!(bm.holds(&Rmap::bmbt(7, 131, false)));
        assert!(!bm.holds(&Rmap::bmbt(7, 131, true)));
    }

    #[test]
    fn touching_records_of_one_owner_join() {
        let a = Rmap::file(100, 10, 131, 50, false, false);
        assert!(a.joins(&Rmap::file(110, 2, 131, 60, false, false)));
        assert!(!a.joins(&Rmap::file(110, 2, 131, 61, false, false)));
        assert!(!a.joins(&Rmap::file(110, 2, 131, 60, false, true)));
        let g = Rmap::ag(10, 5, xbt::XFS_RMAP_OWN_AG);
        assert!(g.joins(&Rmap::ag(15, 1, xbt::XFS_RMAP_OWN_AG)));
        assert!(!g.joins(&Rmap::ag(16, 1, xbt::XFS_RMAP_OWN_AG)));
        assert!(!g.joins(&Rmap::ag(15, 1, xbt::XFS_RMAP_OWN_INOBT)));
    }
}

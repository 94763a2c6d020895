//! Block ownership: every block of every AG must be claimed exactly once,
//! by a header, the log, the free list, a btree, free space, an inode
//! chunk or a file fork.
//!
//! The map holds claimed extents, not blocks: disjoint `[start, end)` runs
//! per AG, each tagged with its [`Use`], and runs of one use that touch
//! are joined. AGs are spread over a fixed number of locks, each holding
//! one sorted map keyed by (AG, start) for all its AGs, so an AG costs its
//! runs and nothing more (an untouched AG nothing at all); a map that has
//! grown by half is rebuilt with full nodes. Its size
//! follows the metadata (extents and btree blocks), never the size of the
//! filesystem; nothing is allocated per AG or per block up front.

use super::{Ctx, Sink};
use crate::error::Location;
use crate::geometry::{AgNumber, Geometry};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Who uses a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Use {
    /// Nobody (yet).
    Unknown = 0,
    /// Superblock, AGF, AGI, AGFL sectors.
    Header,
    /// The internal log.
    Log,
    /// A block on the AG free list.
    Agfl,
    /// An inode, rmap or refcount btree block.
    AgBtree,
    /// A free space btree (bnobt, cntbt) block: free space once those
    /// trees are rebuilt.
    SpaceBtree,
    /// A reverse mapping btree block: free space once that tree is
    /// rebuilt.
    RmapBtree,
    /// Free space.
    Free,
    /// An inode chunk.
    Inodes,
    /// File data, directory or attribute blocks.
    Data,
    /// A bmbt (fork btree) block.
    Bmbt,
    /// Copy-on-write staging extent (owned by the refcount btree).
    Cow,
}

impl Use {
    /// Words for reports.
    pub fn name(self) -> &'static str {
        match self {
            Use::Unknown => "unaccounted",
            Use::Header => "AG header",
            Use::Log => "log",
            Use::Agfl => "free list",
            Use::AgBtree | Use::SpaceBtree | Use::RmapBtree => "AG btree",
            Use::Free => "free space",
            Use::Inodes => "inode chunk",
            Use::Data => "file data",
            Use::Bmbt => "bmbt",
            Use::Cow => "CoW staging",
        }
    }
}

/// The key of block `agbno` of AG `agno` in a [`Shard`]: AG first, so the
/// runs of one AG are one contiguous key range.
fn key(agno: u32, agbno: u32) -> u64 {
    (u64::from(agno) << 32) | u64::from(agbno)
}

/// The claims of the AGs of one lock. One ordered map for all of them
/// (not one per AG): an AG costs only its runs, with no map, node or
/// table entry of its own, which matters with millions of mostly empty AGs.
#[derive(Default)]
struct Shard {
    /// Claimed runs: key(agno, start) -> (end, use); disjoint within an AG.
    runs: BTreeMap<u64, (u32, Use)>,
    /// Per AG that has any, the extents the refcount btree says are
    /// shared (refcount > 1), sorted.
    shared: HashMap<u32, Vec<(u32, u32)>>,
    /// Per AG that has shared extents, their reference counts
    /// (start, length, refcount), sorted.
    refcounts: HashMap<u32, Vec<(u32, u32, u32)>>,
    /// Per AG that has shared extents, the file data claims inside them
    /// (start, end), clipped to them.
    shared_claims: HashMap<u32, Vec<(u32, u32)>>,
    /// Runs in the map when it was last rebuilt (see [`Shard::compact`]).
    packed: usize,
    /// AGs whose refcount btree could not be read: any block may be
    /// shared, and the counts are not compared (the tree is rebuilt).
    unknown: std::collections::HashSet<u32>,
}

/// Fewest runs in a shard before it is ever rebuilt.
const COMPACT_MIN: usize = 1024;

impl Shard {
    /// Rebuilds the map with full nodes once it has grown by half since
    /// the last rebuild. Runs mostly arrive in ascending order (AG by AG),
    /// which leaves the nodes of an ordered map about half full; a map
    /// built from sorted runs packs them full. The rebuilds cost O(n)
    /// each and happen after every 50% of growth: O(1) per run overall.
    fn compact(&mut self) {
        let n = self.runs.len();
        if n < COMPACT_MIN || n < self.packed + self.packed / 2 {
            return;
        }
        let sorted: Vec<(u64, (u32, Use))> = std::mem::take(&mut self.runs).into_iter().collect();
        self.runs = sorted.into_iter().collect();
        self.packed = self.runs.len();
    }

    /// Records `[s, e)` of AG `agno` as used by `who`, joining touching
    /// runs of the same use. The range must be unclaimed.
    fn insert(&mut self, agno: u32, mut s: u32, mut e: u32, who: Use) {
        let prev = self.runs.range(key(agno, 0)..key(agno, s)).next_back();
        if let Some((&pk, &(pe, pu))) = prev {
            if pe == s && pu == who {
                self.runs.remove(&pk);
                s = pk as u32;
            }
        }
        if let Some(&(ne, nu)) = self.runs.get(&key(agno, e)) {
            if nu == who {
                self.runs.remove(&key(agno, e));
                e = ne;
            }
        }
        self.runs.insert(key(agno, s), (e, who));
    }

    /// The claimed runs of AG `agno` that overlap `[s, e)`, clipped to it,
    /// in order.
    fn overlaps(&self, agno: u32, s: u32, e: u32) -> Vec<(u32, u32, Use)> {
        let mut v = Vec::new();
        let prev = self.runs.range(key(agno, 0)..key(agno, s)).next_back();
        if let Some((_, &(pe, pu))) = prev {
            if pe > s {
                v.push((s, pe.min(e), pu));
            }
        }
        for (&rk, &(re, ru)) in self.runs.range(key(agno, s)..key(agno, e)) {
            v.push((rk as u32, re.min(e), ru));
        }
        v
    }

    /// The claimed runs of AG `agno`, in order, as (start, end).
    fn ag_runs(&self, agno: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let end = (u64::from(agno) + 1) << 32;
        self.runs
            .range(key(agno, 0)..end)
            .map(|(&k, &(e, _))| (k as u32, e))
    }

    /// The first block of `[s, e)` of AG `agno` outside every shared
    /// extent, and how many such blocks there are.
    fn unshared(&self, agno: u32, s: u32, e: u32) -> Option<(u32, u64)> {
        let shared = self.shared.get(&agno).map_or(&[][..], |v| &v[..]);
        let mut first = None;
        let mut n = 0u64;
        let mut at = s;
        let i = shared.partition_point(|&(ss, sl)| u64::from(ss) + u64::from(sl) <= u64::from(s));
        for &(ss, sl) in &shared[i..] {
            if ss >= e {
                break;
            }
            let se = (u64::from(ss) + u64::from(sl)).min(u64::from(e)) as u32;
            if ss > at {
                first.get_or_insert(at);
                n += u64::from(ss - at);
            }
            at = at.max(se);
        }
        if at < e {
            first.get_or_insert(at);
            n += u64::from(e - at);
        }
        first.map(|f| (f, n))
    }
}

/// Locks the AG maps are spread over.
const SHARDS: u32 = 64;

/// Claimed extents of the data section, per AG, made on first use.
pub struct OwnerMap {
    ag_count: u32,
    /// Length of each AG (the last may be shorter).
    ag_len: u32,
    last_len: u32,
    shards: Vec<Mutex<Shard>>,
    /// AGs whose free space btrees are rebuilt (their unclaimed blocks
    /// are free space then, not blocks to free).
    rebuilt: Mutex<std::collections::BTreeSet<u32>>,
}

impl OwnerMap {
    /// An empty map for the geometry.
    pub fn new(geo: &Geometry) -> OwnerMap {
        let last = geo.ag_count.saturating_sub(1);
        OwnerMap {
            ag_count: geo.ag_count,
            ag_len: geo.ag_len(AgNumber(0)),
            last_len: geo.ag_len(AgNumber(last)),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            rebuilt: Mutex::default(),
        }
    }

    fn len_of(&self, agno: u32) -> u32 {
        if agno + 1 == self.ag_count {
            self.last_len
        } else {
            self.ag_len
        }
    }

    fn with_shard<T>(&self, agno: u32, f: impl FnOnce(&mut Shard) -> T) -> T {
        let mut s = self.shards[(agno % SHARDS) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// Records shared (reflinked) extents of an AG, which file data may claim more than once.
    /// `shared`: (start, length, refcount) of each shared record.
    pub(crate) fn set_shared(&self, agno: u32, mut shared: Vec<(u32, u32, u32)>) {
        if agno >= self.ag_count {
            return;
        }
        shared.sort_unstable();
        self.with_shard(agno, |m| {
            if shared.is_empty() {
                m.shared.remove(&agno);
                m.refcounts.remove(&agno);
            } else {
                m.shared
                    .insert(agno, shared.iter().map(|&(s, l, _)| (s, l)).collect());
                m.refcounts.insert(agno, shared);
            }
        });
    }

    /// Records that AG `agno`'s refcount btree could not be read: file data
    /// may claim any of its blocks more than once (the rebuilt tree counts
    /// them), and no count is compared.
    pub(crate) fn set_shared_unknown(&self, agno: u32) {
        if agno >= self.ag_count {
            return;
        }
        let len = self.len_of(agno);
        self.with_shard(agno, |m| {
            m.shared.insert(agno, vec![(0, len)]);
            m.refcounts.remove(&agno);
            m.unknown.insert(agno);
        });
    }

    /// Reports every shared record whose reference count is not the number
    /// of file data mappings of each of its blocks (xfs_repair recounts
    /// them from the files).
    pub(crate) fn report_refcounts(&self, ctx: &Ctx<'_>) {
        let mut ags: Vec<u32> = Vec::new();
        for s in &self.shards {
            let s = s.lock().unwrap_or_else(|p| p.into_inner());
            ags.extend(s.refcounts.keys().copied());
        }
        ags.sort_unstable();
        for agno in ags {
            let (recs, mut claims) = self.with_shard(agno, |m| {
                (
                    m.refcounts.get(&agno).cloned().unwrap_or_default(),
                    m.shared_claims.remove(&agno).unwrap_or_default(),
                )
            });
            claims.sort_unstable();
            for (start, len, rc) in recs {
                let end = u64::from(start) + u64::from(len);
                // Count the claims over each piece of the record: a sweep
                // over the claims' edges inside it.
                let mut edges: Vec<(u64, i64)> = Vec::new();
                for &(cs, ce) in &claims {
                    if u64::from(cs) >= end {
                        break;
                    }
                    let (a, b) = (u64::from(cs).max(u64::from(start)), u64::from(ce).min(end));
                    if a < b {
                        edges.push((a, 1));
                        edges.push((b, -1));
                    }
                }
                edges.sort_unstable();
                let mut n = 0i64;
                let mut at = u64::from(start);
                let mut bad: Option<(u64, i64)> = None;
                for (x, d) in edges {
                    if x > at && n != i64::from(rc) && bad.is_none() {
                        bad = Some((at, n));
                    }
                    at = at.max(x);
                    n += d;
                }
                if at < end && n != i64::from(rc) && bad.is_none() {
                    bad = Some((at, n));
                }
                if let Some((b, n)) = bad {
                    ctx.sink.add(
                        "refcountbt record",
                        Location::AgBlock { agno, agbno: start },
                        format!(
                            "extent {start}+{len} has refcount {rc}, but {n} file mapping(s) hold block {b}"
                        ),
                    );
                }
            }
        }
    }

    /// Claims `len` blocks at `agbno` for `who`. Reports a problem naming
    /// `what`/`owner` for blocks outside the AG or already claimed; returns
    /// false then. The unclaimed part of the range is claimed even so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn claim(
        &self,
        sink: &Sink,
        agno: u32,
        agbno: u32,
        len: u64,
        who: Use,
        what: &'static str,
        owner: &dyn Fn() -> Location,
    ) -> bool {
        if agno >= self.ag_count {
            sink.add(
                what,
                owner(),
                format!("claims blocks in AG {agno}, which does not exist"),
            );
            return false;
        }
        let end = u64::from(agbno) + len;
        if end > u64::from(self.len_of(agno)) || len == 0 {
            sink.add(
                what,
                owner(),
                format!("claims AG {agno} blocks {agbno}..{end}, outside the AG"),
            );
            return false;
        }
        let (s, e) = (agbno, end as u32);
        let clash = self.with_shard(agno, |m| {
            let mut clash: Option<(u32, Use, u64)> = None;
            let mut note = |b: u32, u: Use, n: u64| match &mut clash {
                Some((_, _, c)) => *c += n,
                None => clash = Some((b, u, n)),
            };
            let mut free: Vec<(u32, u32)> = Vec::new();
            let mut at = s;
            for (os, oe, ou) in m.overlaps(agno, s, e) {
                if os > at {
                    free.push((at, os));
                }
                if ou == Use::Data && who == Use::Data {
                    // Reflinked data may be claimed by several files.
                    if let Some((b, n)) = m.unshared(agno, os, oe) {
                        note(b, ou, n);
                    }
                } else {
                    note(os, ou, u64::from(oe - os));
                }
                at = oe;
            }
            if at < e {
                free.push((at, e));
            }
            for (fs, fe) in free {
                m.insert(agno, fs, fe, who);
            }
            if who == Use::Data && !m.unknown.contains(&agno) {
                if let Some(sh) = m.shared.get(&agno) {
                    let i = sh
                        .partition_point(|&(ss, sl)| u64::from(ss) + u64::from(sl) <= u64::from(s));
                    let mut pieces = Vec::new();
                    for &(ss, sl) in &sh[i..] {
                        if ss >= e {
                            break;
                        }
                        let se = (u64::from(ss) + u64::from(sl)).min(u64::from(e)) as u32;
                        pieces.push((ss.max(s), se));
                    }
                    if !pieces.is_empty() {
                        m.shared_claims.entry(agno).or_default().extend(pieces);
                    }
                }
            }
            m.compact();
            clash
        });
        if let Some((b, old, n)) = clash {
            sink.add(
                what,
                owner(),
                format!(
                    "{} use of AG {agno} block {b} ({n} block(s) of {agbno}..{end}) is already claimed as {}: cross-linked",
                    who.name(),
                    old.name()
                ),
            );
            return false;
        }
        true
    }

    /// True when file data may claim `[s, e)` of AG `agno` without a
    /// clash: nothing claims it, or only other file data where the
    /// refcount btree says the blocks are shared.
    pub(crate) fn free_for_data(&self, agno: u32, s: u32, e: u32) -> bool {
        if agno >= self.ag_count || s >= e || e > self.len_of(agno) {
            return false;
        }
        self.with_shard(agno, |m| {
            m.overlaps(agno, s, e).into_iter().all(|(os, oe, ou)| {
                ou == Use::Data && (m.unknown.contains(&agno) || m.unshared(agno, os, oe).is_none())
            })
        })
    }

    /// True when nothing claims blocks `s..e` of AG `agno` (inside it).
    pub(crate) fn unclaimed(&self, agno: u32, s: u32, e: u32) -> bool {
        if agno >= self.ag_count || s >= e || e > self.len_of(agno) {
            return false;
        }
        self.with_shard(agno, |m| m.overlaps(agno, s, e).is_empty())
    }

    /// Marks AG `agno`'s free space btrees as rebuilt: see
    /// [`OwnerMap::free_space`].
    pub(crate) fn rebuild_free_space(&self, agno: u32) {
        self.rebuilt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(agno);
    }

    /// The free extents of AG `agno` as everything but its free space
    /// btrees claims them: the blocks that neither the AG headers, the
    /// log, the free list, the other AG btrees, inode chunks, files nor
    /// CoW staging use, with the old free space btrees' blocks and
    /// records counted free (and the old rmapbt's blocks too, with
    /// `rmap`: it is rebuilt as well). What a rebuilt bnobt and cntbt hold.
    pub(crate) fn free_space(&self, agno: u32, rmap: bool) -> Vec<(u32, u32)> {
        let len = self.len_of(agno);
        let mut free = Vec::new();
        let mut at = 0u32;
        self.with_shard(agno, |m| {
            let end = (u64::from(agno) + 1) << 32;
            for (&k, &(e, u)) in m.runs.range(key(agno, 0)..end) {
                if matches!(u, Use::Free | Use::SpaceBtree) || (rmap && u == Use::RmapBtree) {
                    continue;
                }
                let s = k as u32;
                if s > at {
                    free.push((at, s - at));
                }
                at = at.max(e);
            }
        });
        if at < len {
            free.push((at, len - at));
        }
        free
    }

    /// The runs of AG `agno` the free list claims, as (start, length).
    pub(crate) fn agfl_runs(&self, agno: u32) -> Vec<(u32, u32)> {
        self.with_shard(agno, |m| {
            let end = (u64::from(agno) + 1) << 32;
            m.runs
                .range(key(agno, 0)..end)
                .filter(|(_, &(_, u))| u == Use::Agfl)
                .map(|(&k, &(e, _))| (k as u32, e - k as u32))
                .collect()
        })
    }

    /// Reports every run of blocks nobody claimed.
    pub(crate) fn report_unclaimed(&self, ctx: &Ctx<'_>) {
        let rebuilt = self
            .rebuilt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for agno in 0..self.ag_count {
            let len = self.len_of(agno);
            let mut gaps: Vec<(u32, u32)> = Vec::new();
            let mut at = 0u32;
            self.with_shard(agno, |m| {
                for (s, e) in m.ag_runs(agno) {
                    if s > at {
                        gaps.push((at, s));
                    }
                    at = at.max(e);
                }
            });
            if at < len {
                gaps.push((at, len));
            }
            for (s, e) in gaps {
                let fix = if rebuilt.contains(&agno) {
                    super::Fix::RebuildFreeSpace { agno }
                } else {
                    super::Fix::FreeBlocks {
                        agno,
                        agbno: s,
                        len: e - s,
                    }
                };
                ctx.sink.add_fix(
                    "block",
                    Location::AgBlock { agno, agbno: s },
                    format!("{} block(s) {s}..{e} are neither free nor in use", e - s),
                    fix,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_and_stay_disjoint() {
        let mut m = Shard::default();
        m.insert(3, 10, 20, Use::Inodes);
        m.insert(3, 20, 30, Use::Inodes);
        m.insert(3, 0, 10, Use::Inodes);
        assert_eq!(m.runs.len(), 1);
        m.insert(3, 30, 31, Use::Data);
        assert_eq!(m.runs.len(), 2);
        assert_eq!(
            m.overlaps(3, 5, 31),
            vec![(5, 30, Use::Inodes), (30, 31, Use::Data)]
        );
        assert!(m.overlaps(3, 31, 40).is_empty());
        // Runs of neighbouring AGs neither join nor overlap.
        m.insert(2, 100, u32::MAX, Use::Data);
        m.insert(4, 0, 5, Use::Data);
        assert_eq!(m.runs.len(), 4);
        assert_eq!(m.overlaps(3, 0, 50).len(), 2);
        assert_eq!(m.ag_runs(3).collect::<Vec<_>>(), vec![(0, 30), (30, 31)]);
        assert_eq!(m.ag_runs(4).collect::<Vec<_>>(), vec![(0, 5)]);
    }

    #[test]
    fn rebuilt_map_keeps_every_run() {
        let mut m = Shard::default();
        for agno in 0..3000u32 {
            m.insert(agno, 0, 1, Use::Header);
            m.insert(agno, 1, 7, Use::AgBtree);
            m.insert(agno, 10, 100, Use::Free);
            m.compact();
        }
        assert!(m.packed >= COMPACT_MIN, "rebuilt at least once");
        assert_eq!(m.runs.len(), 9000);
        assert_eq!(
            m.ag_runs(1234).collect::<Vec<_>>(),
            vec![(0, 1), (1, 7), (10, 100)]
        );
        m.insert(1234, 7, 10, Use::AgBtree);
        assert_eq!(
            m.ag_runs(1234).collect::<Vec<_>>(),
            vec![(0, 1), (1, 10), (10, 100)]
        );
    }

    #[test]
    fn unshared_blocks_are_counted() {
        let mut m = Shard::default();
        m.shared.insert(1, vec![(10, 5), (20, 5)]);
        assert_eq!(m.unshared(1, 10, 15), None);
        assert_eq!(m.unshared(1, 8, 12), Some((8, 2)));
        assert_eq!(m.unshared(1, 12, 22), Some((15, 5)));
        assert_eq!(m.unshared(1, 22, 30), Some((25, 5)));
        assert_eq!(m.unshared(0, 10, 15), Some((10, 5)));
    }
}

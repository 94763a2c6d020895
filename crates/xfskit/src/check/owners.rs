//! Block ownership: every block of every AG must be claimed exactly once,
//! by a header, the log, the free list, a btree, free space, an inode
//! chunk or a file fork.
//!
//! The map holds claimed extents, not blocks: per AG, a sorted map of
//! disjoint `[start, end)` runs, each tagged with its [`Use`], and runs of
//! one use that touch are joined. Its size follows the metadata (extents
//! and btree blocks), never the size of the filesystem, and an AG's map is
//! only made when something in it is claimed; nothing is allocated per AG
//! or per block up front. AGs are spread over a fixed number of locks.

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
    /// A free space, inode, rmap or refcount btree block.
    AgBtree,
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
            Use::AgBtree => "AG btree",
            Use::Free => "free space",
            Use::Inodes => "inode chunk",
            Use::Data => "file data",
            Use::Bmbt => "bmbt",
            Use::Cow => "CoW staging",
        }
    }
}

/// The claims of one AG.
#[derive(Default)]
struct AgMap {
    /// Claimed runs: start -> (end, use); disjoint.
    runs: BTreeMap<u32, (u32, Use)>,
    /// Extents the refcount btree says are shared (refcount > 1), sorted.
    shared: Vec<(u32, u32)>,
}

impl AgMap {
    /// Records `[s, e)` as used by `who`, joining touching runs of the
    /// same use. The range must be unclaimed.
    fn insert(&mut self, mut s: u32, mut e: u32, who: Use) {
        if let Some((&ps, &(pe, pu))) = self.runs.range(..s).next_back() {
            if pe == s && pu == who {
                self.runs.remove(&ps);
                s = ps;
            }
        }
        if let Some(&(ne, nu)) = self.runs.get(&e) {
            if nu == who {
                self.runs.remove(&e);
                e = ne;
            }
        }
        self.runs.insert(s, (e, who));
    }

    /// The claimed runs that overlap `[s, e)`, clipped to it, in order.
    fn overlaps(&self, s: u32, e: u32) -> Vec<(u32, u32, Use)> {
        let mut v = Vec::new();
        if let Some((_, &(pe, pu))) = self.runs.range(..s).next_back() {
            if pe > s {
                v.push((s, pe.min(e), pu));
            }
        }
        for (&rs, &(re, ru)) in self.runs.range(s..e) {
            v.push((rs, re.min(e), ru));
        }
        v
    }

    /// The first block of `[s, e)` outside every shared extent, and how
    /// many such blocks there are.
    fn unshared(&self, s: u32, e: u32) -> Option<(u32, u64)> {
        let mut first = None;
        let mut n = 0u64;
        let mut at = s;
        let i = self
            .shared
            .partition_point(|&(ss, sl)| u64::from(ss) + u64::from(sl) <= u64::from(s));
        for &(ss, sl) in &self.shared[i..] {
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
    shards: Vec<Mutex<HashMap<u32, AgMap>>>,
}

impl OwnerMap {
    /// An empty map for the geometry.
    pub fn new(geo: &Geometry) -> OwnerMap {
        let last = geo.ag_count.saturating_sub(1);
        OwnerMap {
            ag_count: geo.ag_count,
            ag_len: geo.ag_len(AgNumber(0)),
            last_len: geo.ag_len(AgNumber(last)),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn len_of(&self, agno: u32) -> u32 {
        if agno + 1 == self.ag_count {
            self.last_len
        } else {
            self.ag_len
        }
    }

    fn with_ag<T>(&self, agno: u32, f: impl FnOnce(&mut AgMap) -> T) -> T {
        let mut s = self.shards[(agno % SHARDS) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(s.entry(agno).or_default())
    }

    /// Records shared (reflinked) extents of an AG, which file data may claim more than once.
    pub(crate) fn set_shared(&self, agno: u32, mut shared: Vec<(u32, u32)>) {
        if agno >= self.ag_count {
            return;
        }
        shared.sort_unstable();
        self.with_ag(agno, |m| m.shared = shared);
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
        let clash = self.with_ag(agno, |m| {
            let mut clash: Option<(u32, Use, u64)> = None;
            let mut note = |b: u32, u: Use, n: u64| match &mut clash {
                Some((_, _, c)) => *c += n,
                None => clash = Some((b, u, n)),
            };
            let mut free: Vec<(u32, u32)> = Vec::new();
            let mut at = s;
            for (os, oe, ou) in m.overlaps(s, e) {
                if os > at {
                    free.push((at, os));
                }
                if ou == Use::Data && who == Use::Data {
                    // Reflinked data may be claimed by several files.
                    if let Some((b, n)) = m.unshared(os, oe) {
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
                m.insert(fs, fe, who);
            }
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

    /// Reports every run of blocks nobody claimed.
    pub(crate) fn report_unclaimed(&self, ctx: &Ctx<'_>) {
        for agno in 0..self.ag_count {
            let len = self.len_of(agno);
            let mut gaps: Vec<(u32, u32)> = Vec::new();
            let shard = self.shards[(agno % SHARDS) as usize]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut at = 0u32;
            if let Some(m) = shard.get(&agno) {
                for (&s, &(e, _)) in &m.runs {
                    if s > at {
                        gaps.push((at, s));
                    }
                    at = at.max(e);
                }
            }
            drop(shard);
            if at < len {
                gaps.push((at, len));
            }
            for (s, e) in gaps {
                ctx.sink.add(
                    "block",
                    Location::AgBlock { agno, agbno: s },
                    format!("{} block(s) {s}..{e} are neither free nor in use", e - s),
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
        let mut m = AgMap::default();
        m.insert(10, 20, Use::Inodes);
        m.insert(20, 30, Use::Inodes);
        m.insert(0, 10, Use::Inodes);
        assert_eq!(m.runs.len(), 1);
        m.insert(30, 31, Use::Data);
        assert_eq!(m.runs.len(), 2);
        assert_eq!(
            m.overlaps(5, 31),
            vec![(5, 30, Use::Inodes), (30, 31, Use::Data)]
        );
        assert!(m.overlaps(31, 40).is_empty());
    }

    #[test]
    fn unshared_blocks_are_counted() {
        let mut m = AgMap::default();
        m.shared = vec![(10, 5), (20, 5)];
        assert_eq!(m.unshared(10, 15), None);
        assert_eq!(m.unshared(8, 12), Some((8, 2)));
        assert_eq!(m.unshared(12, 22), Some((15, 5)));
        assert_eq!(m.unshared(22, 30), Some((25, 5)));
    }
}

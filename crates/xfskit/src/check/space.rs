//! Block ownership: every block of every AG must be claimed exactly once,
//! by a header, the log, the free list, a btree, free space, an inode
//! chunk or a file fork. Also a walker for the AG (short-pointer) btrees.

use super::{Ctx, Sink};
use crate::buf::verify::{short_btree_sizes, Verifier};
use crate::bytes::be32;
use crate::error::Location;
use crate::geometry::{AgBlock, AgNumber, Geometry};
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
    fn from_u8(v: u8) -> Use {
        match v {
            1 => Use::Header,
            2 => Use::Log,
            3 => Use::Agfl,
            4 => Use::AgBtree,
            5 => Use::Free,
            6 => Use::Inodes,
            7 => Use::Data,
            8 => Use::Bmbt,
            9 => Use::Cow,
            _ => Use::Unknown,
        }
    }

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

struct AgMap {
    uses: Vec<u8>,
    /// Extents the refcount btree says are shared (refcount > 1), sorted.
    shared: Vec<(u32, u32)>,
}

/// One byte per block of the data section, per AG, each under its own lock.
pub struct OwnerMap {
    ags: Vec<Mutex<AgMap>>,
}

impl OwnerMap {
    /// An empty map for the geometry.
    pub fn new(geo: &Geometry) -> OwnerMap {
        let ags = (0..geo.ag_count)
            .map(|a| {
                Mutex::new(AgMap {
                    uses: vec![0; geo.ag_len(AgNumber(a)) as usize],
                    shared: Vec::new(),
                })
            })
            .collect();
        OwnerMap { ags }
    }

    /// Records shared (reflinked) extents of an AG, which file data may claim more than once.
    pub(crate) fn set_shared(&self, agno: u32, mut shared: Vec<(u32, u32)>) {
        shared.sort_unstable();
        if let Some(m) = self.ags.get(agno as usize) {
            m.lock().unwrap_or_else(|p| p.into_inner()).shared = shared;
        }
    }

    /// Claims `len` blocks at `agbno` for `who`. Reports a problem naming
    /// `what`/`owner` for blocks outside the AG or already claimed; returns
    /// false then.
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
        let Some(m) = self.ags.get(agno as usize) else {
            sink.add(
                what,
                owner(),
                format!("claims blocks in AG {agno}, which does not exist"),
            );
            return false;
        };
        let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
        let end = u64::from(agbno) + len;
        if end > m.uses.len() as u64 || len == 0 {
            sink.add(
                what,
                owner(),
                format!("claims AG {agno} blocks {agbno}..{end}, outside the AG"),
            );
            return false;
        }
        let mut clash: Option<(u32, Use, u64)> = None;
        for b in agbno..end as u32 {
            let old = Use::from_u8(m.uses[b as usize]);
            let ok = match old {
                Use::Unknown => true,
                Use::Data if who == Use::Data => is_shared(&m.shared, b),
                _ => false,
            };
            if ok {
                m.uses[b as usize] = who as u8;
            } else {
                match &mut clash {
                    Some((_, _, n)) => *n += 1,
                    None => clash = Some((b, old, 1)),
                }
            }
        }
        drop(m);
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
        for (agno, m) in self.ags.iter().enumerate() {
            let m = m.lock().unwrap_or_else(|p| p.into_inner());
            let mut b = 0usize;
            while b < m.uses.len() {
                if m.uses[b] != 0 {
                    b += 1;
                    continue;
                }
                let start = b;
                while b < m.uses.len() && m.uses[b] == 0 {
                    b += 1;
                }
                ctx.sink.add(
                    "block",
                    Location::AgBlock {
                        agno: agno as u32,
                        agbno: start as u32,
                    },
                    format!(
                        "{} block(s) {start}..{b} are neither free nor in use",
                        b - start
                    ),
                );
            }
        }
    }
}

fn is_shared(shared: &[(u32, u32)], b: u32) -> bool {
    let i = shared.partition_point(|&(s, _)| s <= b);
    i > 0 && {
        let (s, l) = shared[i - 1];
        u64::from(b) < u64::from(s) + u64::from(l)
    }
}

/// Walks one short-pointer btree of an AG from its root, claiming and
/// verifying every block and calling `rec` with each leaf record's bytes
/// and the block it came from. Returns the number of blocks visited.
pub(crate) fn walk_short(
    ctx: &Ctx<'_>,
    agno: u32,
    magic: u32,
    root: u32,
    levels: u32,
    rec: &mut dyn FnMut(&[u8], u32),
) -> u64 {
    let geo = ctx.fs.geometry();
    let v = Verifier::ShortBtree {
        magic,
        agno,
        level: None,
    };
    let what = v.what();
    if levels == 0 || levels > 9 {
        ctx.sink.add(
            what,
            Location::AgBlock { agno, agbno: root },
            format!("tree height {levels} from the AG header"),
        );
        return 0;
    }
    let mut w = Walk {
        blocks: 0,
        last: vec![None; levels as usize],
    };
    visit(
        ctx,
        geo,
        agno,
        magic,
        what,
        root,
        levels - 1,
        rec,
        &mut w,
        None,
    );
    // The last block of each level has no right sibling.
    for (lvl, last) in w.last.iter().enumerate() {
        if let Some((bno, right)) = *last {
            if right != NULL_AGBLOCK {
                let at = Location::AgBlock { agno, agbno: bno };
                ctx.sink.add(
                    what,
                    at,
                    format!("last block of level {lvl} has right sibling {right}"),
                );
            }
        }
    }
    let blocks = w.blocks;
    ctx.counters
        .btree_blocks
        .fetch_add(blocks, std::sync::atomic::Ordering::Relaxed);
    blocks
}

/// "No block" in short btree sibling pointers.
const NULL_AGBLOCK: u32 = u32::MAX;

/// Walk state: blocks visited and, per level, the last block seen and its right sibling.
struct Walk {
    blocks: u64,
    last: Vec<Option<(u32, u32)>>,
}

#[allow(clippy::too_many_arguments)]
fn visit(
    ctx: &Ctx<'_>,
    geo: &Geometry,
    agno: u32,
    magic: u32,
    what: &'static str,
    agbno: u32,
    level: u32,
    rec: &mut dyn FnMut(&[u8], u32),
    w: &mut Walk,
    want_key: Option<&[u8]>,
) {
    let loc = || Location::AgBlock { agno, agbno };
    if agbno == 0 || agbno >= geo.ag_len(AgNumber(agno)) {
        ctx.sink.add(
            what,
            loc(),
            format!("btree pointer to block {agbno} outside the AG"),
        );
        return;
    }
    // Claiming first also stops loops: a block seen twice is a clash.
    if !ctx
        .map
        .claim(&ctx.sink, agno, agbno, 1, Use::AgBtree, what, &loc)
    {
        return;
    }
    w.blocks += 1;
    let v = Verifier::ShortBtree {
        magic,
        agno,
        level: Some(level as u16),
    };
    let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno));
    let blk = match ctx.fs.read_meta(daddr, geo.block_size, &v) {
        Ok(b) => b,
        Err(e) => return ctx.sink.error(e),
    };
    // Sibling pointers chain the blocks of each level left to right.
    let (left, right) = (be32(&blk, 8), be32(&blk, 12));
    if let Some(slot) = w.last.get_mut(level as usize) {
        let want_left = slot.map_or(NULL_AGBLOCK, |(b, _)| b);
        if left != want_left {
            ctx.sink.add(
                what,
                loc(),
                format!("left sibling {left}, expected {want_left}"),
            );
        }
        if let Some((prev, prev_right)) = *slot {
            if prev_right != agbno {
                ctx.sink.add(
                    what,
                    Location::AgBlock { agno, agbno: prev },
                    format!("right sibling {prev_right}, expected {agbno}"),
                );
            }
        }
        *slot = Some((agbno, right));
    }
    let (hdr, rsz, ksz, psz) = short_btree_sizes(magic);
    let numrecs = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
    // The parent's key is the lowest key below it: our first record's or
    // first key's leading bytes (rmap keys differ from records; skipped).
    if let (Some(k), true) = (
        want_key,
        magic != xfs_format::btree::XFS_RMAP_CRC_MAGIC && numrecs > 0,
    ) {
        if blk.get(hdr..hdr + ksz) != Some(k) {
            ctx.sink.add(
                what,
                loc(),
                "first key does not match the key in the parent block",
            );
        }
    }
    if level == 0 {
        for i in 0..numrecs {
            let o = hdr + i * rsz;
            if let Some(r) = blk.get(o..o + rsz) {
                rec(r, agbno);
            }
        }
        return;
    }
    let maxrecs = (blk.len() - hdr) / (ksz + psz);
    for i in 0..numrecs {
        let o = hdr + maxrecs * ksz + i * psz;
        if o + 4 > blk.len() {
            break;
        }
        visit(
            ctx,
            geo,
            agno,
            magic,
            what,
            be32(&blk, o),
            level - 1,
            rec,
            w,
            blk.get(hdr + i * ksz..hdr + (i + 1) * ksz),
        );
    }
}

//! Walker for the AG (short-pointer) btrees, claiming their blocks in the
//! ownership map (which lives in the `owners` module and is re-exported
//! here).

pub use super::owners::{OwnerMap, Use};
use super::Ctx;
use crate::buf::verify::{short_btree_sizes, Verifier};
use crate::bytes::be32;
use crate::error::Location;
use crate::geometry::{AgBlock, AgNumber, Geometry};

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
    walk_short_whole(ctx, agno, magic, root, levels, rec).0
}

/// [`walk_short`], also saying whether every block of the tree could be
/// read (no pointer outside the AG, no block claimed twice, no read or
/// verification failure): only then are its records all there.
pub(crate) fn walk_short_whole(
    ctx: &Ctx<'_>,
    agno: u32,
    magic: u32,
    root: u32,
    levels: u32,
    rec: &mut dyn FnMut(&[u8], u32),
) -> (u64, bool) {
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
        return (0, false);
    }
    let mut w = Walk {
        blocks: 0,
        whole: true,
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
    (blocks, w.whole)
}

/// "No block" in short btree sibling pointers.
const NULL_AGBLOCK: u32 = u32::MAX;

/// Walk state: blocks visited and, per level, the last block seen and its right sibling.
struct Walk {
    blocks: u64,
    /// False once a block could not be visited.
    whole: bool,
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
        w.whole = false;
        return;
    }
    // Read and verified first: a block that is not of this tree (a
    // pointer gone astray, a block overwritten) is not claimed for it,
    // so that its real owner still claims it.
    let v = Verifier::ShortBtree {
        magic,
        agno,
        level: Some(level as u16),
    };
    let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno));
    let blk = match ctx.fs.read_meta(daddr, geo.block_size, &v) {
        Ok(b) => b,
        Err(e) => {
            w.whole = false;
            return ctx.sink.error(e);
        }
    };
    // Claiming also stops loops: a block seen twice is a clash.
    let who = if matches!(
        magic,
        xfs_format::btree::XFS_ABTB_CRC_MAGIC | xfs_format::btree::XFS_ABTC_CRC_MAGIC
    ) {
        Use::SpaceBtree
    } else if magic == xfs_format::btree::XFS_RMAP_CRC_MAGIC {
        Use::RmapBtree
    } else {
        Use::AgBtree
    };
    if !ctx.map.claim(&ctx.sink, agno, agbno, 1, who, what, &loc) {
        w.whole = false;
        return;
    }
    ctx.rmaps.expect(
        agno,
        super::rmap::Rmap::ag(agbno, 1, super::rmap::btree_owner(magic)),
    );
    w.blocks += 1;
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
    let (_, rsz, ksz, psz) = short_btree_sizes(magic);
    let hdr = ctx.fs.geometry().layout().sblock_hdr;
    let numrecs = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
    if magic == xfs_format::btree::XFS_RMAP_CRC_MAGIC
        && !super::rmap::check_keys(ctx, agno, agbno, level, &blk, want_key)
    {
        w.whole = false;
    }
    // The parent's key is the lowest key below it: our first record's or
    // first key's leading bytes (rmap keys differ from records: above).
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

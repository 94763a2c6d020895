//! Free space btrees rebuilt: an AG's bnobt and cntbt, damaged, made
//! again from the free extents the check found everything else leaves
//! ([`crate::check::CheckReport::free_space`]), as xfs_repair's phase 5
//! rebuilds them.
//!
//! The new trees take the last blocks of the AG's largest free extent
//! (so the count of extents, and the trees' size, stay what was counted)
//! and are written there directly, then flushed; only then does the AGF,
//! one sector, point at them, with the free block count, longest extent
//! and btree block count they give. A crash before that sector is
//! written leaves the old (damaged) trees named, which the next repair
//! rebuilds again; after it, the trees are whole. On an rmapbt
//! filesystem the reverse mappings of the old and new tree blocks are
//! then wrong, and the next round's check gives them their fixes (the
//! old blocks' records trimmed, the new blocks' added) through the
//! journal.

use crate::alloc::abt::{AllocBt, Which};
use crate::btree::bulk;
use crate::btree::BtreeOps;
use crate::bytes::be32;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Geometry};
use std::mem::offset_of;
use std::sync::Arc;
use xfs_format::ag::Agf;

/// Rebuilds AG `agno`'s free space btrees to hold `free` (start, length;
/// in block order) on `dev`, whose sectors are `sect` bytes. Returns what
/// was done, in words.
pub(super) fn rebuild(
    dev: &Arc<dyn Device>,
    geo: &Geometry,
    sect: usize,
    agno: u32,
    free: &[(u32, u32)],
) -> Result<String> {
    let ag = AgNumber(agno);
    let bs = geo.block_size as usize;
    let (bno, cnt) = (
        AllocBt::new(ag, Which::Bno, bs),
        AllocBt::new(ag, Which::Cnt, bs),
    );
    let need_of = |t: &AllocBt| bulk::level_blocks(&t.shape(), free.len());
    let (bno_levels, cnt_levels) = (need_of(&bno), need_of(&cnt));
    let (nb, nc) = (
        bno_levels.iter().sum::<usize>(),
        cnt_levels.iter().sum::<usize>(),
    );
    let total = (nb + nc) as u32;
    // The largest extent (the first of equals) gives up its tail: it
    // must keep a block, so that no extent goes and the trees' size holds.
    let big = free
        .iter()
        .enumerate()
        .max_by_key(|(i, e)| (e.1, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
        .filter(|&i| free[i].1 > total)
        .ok_or_else(|| {
            Error::NoSpace(format!(
                "AG {agno}: no free extent of more than {total} blocks to hold the rebuilt free space btrees"
            ))
        })?;
    let mut free = free.to_vec();
    free[big].1 -= total;
    let first = free[big].0 + free[big].1;
    let ptrs: Vec<u64> = (u64::from(first)..u64::from(first + total)).collect();
    let (bno_ptrs, cnt_ptrs) = ptrs.split_at(nb);

    let recs: Vec<[u8; 8]> = free
        .iter()
        .map(|&(s, l)| {
            let mut r = [0u8; 8];
            r[..4].copy_from_slice(&s.to_be_bytes());
            r[4..].copy_from_slice(&l.to_be_bytes());
            r
        })
        .collect();
    let by_bno: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
    let mut by_cnt = by_bno.clone();
    by_cnt.sort_by_key(|r| (be32(r, 4), be32(r, 0)));
    let daddr = |p: u64| geo.agb_to_daddr(ag, AgBlock(p as u32)).0;
    let trees = [
        bulk::build(&bno, &by_bno, bno_ptrs, &daddr, &geo.meta_uuid),
        bulk::build(&cnt, &by_cnt, cnt_ptrs, &daddr, &geo.meta_uuid),
    ];
    for t in &trees {
        for (p, d) in &t.blocks {
            dev.write_at(d, geo.agb_to_daddr(ag, AgBlock(*p as u32)).bytes())
                .map_err(Error::Io)?;
        }
    }
    dev.flush().map_err(Error::Io)?;

    // The AGF names them last.
    let at = geo.agb_to_daddr(ag, AgBlock(0)).bytes()
        + xfs_format::ag::XFS_AGF_SECTOR * sect as u64;
    let mut h = vec![0u8; sect];
    dev.read_at(&mut h, at).map_err(Error::Io)?;
    if be32(&h, 0) != xfs_format::ag::XFS_AGF_MAGIC {
        return Err(Error::corrupt(
            "AGF",
            Location::Other(format!("AG {agno} AGF")),
            "bad magic: the free space btrees are not rebuilt under it",
        ));
    }
    let freeblks: u64 = free.iter().map(|e| u64::from(e.1)).sum();
    let longest = free.iter().map(|e| e.1).max().unwrap_or(0);
    let rmap_blocks = if geo.features.rmapbt {
        be32(&h, offset_of!(Agf, agf_rmap_blocks)).saturating_sub(1)
    } else {
        0
    };
    let btreeblks = (nb as u32 - 1) + (nc as u32 - 1) + rmap_blocks;
    let mut set = |off: usize, v: u32| h[off..off + 4].copy_from_slice(&v.to_be_bytes());
    set(offset_of!(Agf, agf_bno_root), trees[0].root as u32);
    set(offset_of!(Agf, agf_cnt_root), trees[1].root as u32);
    set(offset_of!(Agf, agf_bno_level), trees[0].levels as u32);
    set(offset_of!(Agf, agf_cnt_level), trees[1].levels as u32);
    set(offset_of!(Agf, agf_freeblks), freeblks as u32);
    set(offset_of!(Agf, agf_longest), longest);
    set(offset_of!(Agf, agf_btreeblks), btreeblks);
    xfs_format::crc::stamp(&mut h, xfs_format::ag::XFS_AGF_CRC_OFF);
    dev.write_at(&h, at).map_err(Error::Io)?;
    dev.flush().map_err(Error::Io)?;
    Ok(format!(
        "AG {agno}: free space btrees rebuilt from what the AG uses: {} free extent(s), {freeblks} block(s), in {nb} bnobt and {nc} cntbt block(s) at {first}",
        free.len()
    ))
}

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
//!
//! An rmapbt that cannot be read whole is rebuilt with them, from the
//! mappings the check expects
//! ([`crate::check::CheckReport::rmap_rebuild`]) and one record of the
//! AG's own for the three new trees' blocks (which then need no fix).

use crate::alloc::abt::{AllocBt, Which};
use crate::alloc::rmap::{Rmap, RmapBt};
use crate::btree::bulk;
use crate::btree::BtreeOps;
use crate::bytes::be32;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Geometry};
use std::mem::offset_of;
use std::sync::Arc;
use xfs_format::ag::Agf;

/// `recs` (start, length, owner, offset with flags) sorted in rmapbt
/// order, repeats dropped and records that continue each other joined.
fn rmap_order(recs: &[(u32, u32, u64, u64)]) -> Vec<Rmap> {
    use xfs_format::btree as xbt;
    let flags =
        xbt::XFS_RMAP_OFF_ATTR_FORK | xbt::XFS_RMAP_OFF_BMBT_BLOCK | xbt::XFS_RMAP_OFF_UNWRITTEN;
    let mut v: Vec<Rmap> = recs
        .iter()
        .map(|&(start, len, owner, off)| Rmap {
            start,
            len,
            owner,
            offset: off & xbt::XFS_RMAP_OFF_MASK,
            flags: off & flags,
        })
        .collect();
    let key = |r: &Rmap| {
        (
            r.start,
            r.owner,
            r.offset | (r.flags & !xbt::XFS_RMAP_OFF_UNWRITTEN),
            r.len,
            r.flags,
        )
    };
    v.sort_unstable_by_key(key);
    v.dedup();
    let mut out: Vec<Rmap> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(l) if l.joins(&r) => l.len += r.len,
            _ => out.push(r),
        }
    }
    out
}

/// Rebuilds AG `agno`'s free space btrees to hold `free` (start, length;
/// in block order) on `dev`, whose sectors are `sect` bytes. Returns what
/// was done, in words.
pub(super) fn rebuild(
    dev: &Arc<dyn Device>,
    geo: &Geometry,
    sect: usize,
    agno: u32,
    free: &[(u32, u32)],
    rmaps: Option<&[(u32, u32, u64, u64)]>,
) -> Result<String> {
    let ag = AgNumber(agno);
    let bs = geo.block_size as usize;
    let (bno, cnt) = (
        AllocBt::new(ag, Which::Bno, bs),
        AllocBt::new(ag, Which::Cnt, bs),
    );
    let need_of = |t: &AllocBt| bulk::level_blocks(&t.shape(), free.len());
    let (nb, nc) = (
        need_of(&bno).iter().sum::<usize>(),
        need_of(&cnt).iter().sum::<usize>(),
    );
    let rmapbt = RmapBt::new(ag, bs);
    // The rmapbt's size depends on its records, which include the run
    // of the new trees' blocks, which joins its neighbours or not
    // depending on where it lands: sized again until it holds.
    let mut rmap_n = rmaps.map_or(0, |r| r.len() + 1);
    let mut placed = None;
    for _ in 0..4 {
        let nr = if rmaps.is_some() {
            bulk::level_blocks(&rmapbt.shape(), rmap_n).iter().sum()
        } else {
            0
        };
        let total = (nb + nc + nr) as u32;
        // The largest extent (the first of equals) gives up its tail: it
        // must keep a block, so that no extent goes and the free space
        // trees' size holds.
        let big = free
            .iter()
            .enumerate()
            .max_by_key(|(i, e)| (e.1, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
            .filter(|&i| free[i].1 > total)
            .ok_or_else(|| {
                Error::NoSpace(format!(
                    "AG {agno}: no free extent of more than {total} blocks to hold the rebuilt btrees"
                ))
            })?;
        let first = free[big].0 + free[big].1 - total;
        let recs = rmaps.map(|r| {
            let mut all = r.to_vec();
            all.push((first, total, xfs_format::btree::XFS_RMAP_OWN_AG, 0));
            rmap_order(&all)
        });
        let fits = recs.as_ref().is_none_or(|v| {
            bulk::level_blocks(&rmapbt.shape(), v.len())
                .iter()
                .sum::<usize>()
                == nr
        });
        if fits {
            placed = Some((big, first, total, nr, recs));
            break;
        }
        rmap_n = recs.map_or(0, |v| v.len());
    }
    let Some((big, first, total, nr, rmap_recs)) = placed else {
        return Err(Error::Unsupported(format!(
            "AG {agno}: the rebuilt rmapbt's size does not settle"
        )));
    };
    let mut free = free.to_vec();
    free[big].1 -= total;
    let ptrs: Vec<u64> = (u64::from(first)..u64::from(first + total)).collect();
    let (bno_ptrs, rest) = ptrs.split_at(nb);
    let (cnt_ptrs, rmap_ptrs) = rest.split_at(nc);

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
    let mut trees = vec![
        bulk::build(&bno, &by_bno, bno_ptrs, &daddr, &geo.meta_uuid),
        bulk::build(&cnt, &by_cnt, cnt_ptrs, &daddr, &geo.meta_uuid),
    ];
    if let Some(recs) = &rmap_recs {
        let raw: Vec<[u8; 24]> = recs.iter().map(|r| r.to_rec()).collect();
        let refs: Vec<&[u8]> = raw.iter().map(|r| &r[..]).collect();
        trees.push(bulk::build(
            &rmapbt,
            &refs,
            rmap_ptrs,
            &daddr,
            &geo.meta_uuid,
        ));
    }
    for t in &trees {
        for (p, d) in &t.blocks {
            dev.write_at(d, geo.agb_to_daddr(ag, AgBlock(*p as u32)).bytes())
                .map_err(Error::Io)?;
        }
    }
    dev.flush().map_err(Error::Io)?;

    // The AGF names them last.
    let at =
        geo.agb_to_daddr(ag, AgBlock(0)).bytes() + xfs_format::ag::XFS_AGF_SECTOR * sect as u64;
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
    let rmap_blocks = if rmap_recs.is_some() {
        nr as u32 - 1
    } else if geo.features.rmapbt {
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
    if let Some(t) = trees.get(2) {
        set(offset_of!(Agf, agf_rmap_root), t.root as u32);
        set(offset_of!(Agf, agf_rmap_level), t.levels as u32);
        set(offset_of!(Agf, agf_rmap_blocks), nr as u32);
    }
    xfs_format::crc::stamp(&mut h, xfs_format::ag::XFS_AGF_CRC_OFF);
    dev.write_at(&h, at).map_err(Error::Io)?;
    dev.flush().map_err(Error::Io)?;
    let rmap_words = match &rmap_recs {
        Some(r) => format!("; rmapbt rebuilt: {} record(s) in {nr} block(s)", r.len()),
        None => String::new(),
    };
    Ok(format!(
        "AG {agno}: free space btrees rebuilt from what the AG uses: {} free extent(s), {freeblks} block(s), in {nb} bnobt and {nc} cntbt block(s) at {first}{rmap_words}",
        free.len()
    ))
}

//! Inode allocation: inode chunks (sparse ones included), the inode btree
//! and free inode btree, AGI counters, superblock inode counters.
//!
//! Placement follows the kernel's inode64 policy: a new directory goes to
//! the next AG of a per-filesystem rotor, anything else to its parent's
//! AG; an AG is used when it has a free inode or room for a new chunk,
//! otherwise the following AGs are tried. Inside an AG the free inode
//! btree (when present) finds the free inode nearest the parent.
//!
//! The directory rotor is a counter in the filesystem's write state
//! (`AllocPolicy::dir_rotor`), so two builds of one image place alike.
//! Freeing the last used inode of a chunk frees the chunk (the kernel's
//! default, no `ikeep`), except when one block holds several chunks.
//! The inodes of a new chunk are logged whole as free inodes (generation
//! from the filesystem's seeded sequence), so writeback merges them into
//! cluster-sized writes; a freed chunk's pending inode writes are dropped.

pub(crate) mod agi;
mod chunk;
mod rec;
mod tree;
pub(crate) use rec::IRec;
pub(crate) use tree::{rebuild_finobt, rebuild_inobt};

use crate::buf::Verifier;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber, Daddr, Ino};
use crate::inode::ForkFormat;
use crate::trans::{BufId, Trans};
use agi::off;
use chunk::ChunkGeo;
use tree::Tree;
use xfs_format::ag::{Agf, XFS_AGF_SECTOR};
use xfs_format::btree::XFS_INODES_PER_CHUNK;
use xfs_format::types::NULLAGINO;
use xfs_format::types::{S_IFDIR, S_IFMT};

/// The AG the next new directory starts its search in: the one the
/// transaction was given ([`Trans::start_dirs_at`]), else the filesystem's
/// rotor, advanced by one.
fn next_rotor(tp: &mut Trans<'_>, agcount: u32) -> Result<u32> {
    if let Some(ag) = tp.take_dir_start() {
        return Ok(ag % agcount);
    }
    Ok(tp.fs().write_state()?.next_dir_ag(agcount))
}

/// Allocates a free inode for a new file of type `mode` created in
/// directory `parent`. Placement follows the inode64 policy: new
/// directories rotate across AGs, everything else goes near its parent.
/// A new chunk is allocated (and its inodes initialised as free inodes)
/// when no free inode is left. The caller initialises the inode with
/// `Inode::new` and logs it.
pub fn alloc_inode(tp: &mut Trans<'_>, parent: Ino, mode: u16) -> Result<Ino> {
    let mut got = alloc_inodes(tp, parent, mode, 1)?;
    got.pop()
        .ok_or_else(|| Error::NoSpace("no free inode and no room for an inode chunk".into()))
}

/// Allocates `n` free inodes for new files of type `mode` in directory
/// `parent`: what `n` calls of [`alloc_inode`] give, in the same order,
/// with each btree record changed once for all the inodes taken from its
/// chunk instead of once per inode.
pub fn alloc_inodes(tp: &mut Trans<'_>, parent: Ino, mode: u16, n: u32) -> Result<Vec<Ino>> {
    let mut out = Vec::with_capacity(n as usize);
    while out.len() < n as usize {
        let want = n - out.len() as u32;
        let before = out.len();
        alloc_some(tp, parent, mode, want, &mut out)?;
        if out.len() == before {
            return Err(Error::NoSpace(
                "no free inode and no room for an inode chunk".into(),
            ));
        }
    }
    Ok(out)
}

/// Takes up to `want` inodes from one chunk (see [`alloc_inode`] for the
/// placement), appended to `out`; none when nothing is left anywhere.
fn alloc_some(
    tp: &mut Trans<'_>,
    parent: Ino,
    mode: u16,
    want: u32,
    out: &mut Vec<Ino>,
) -> Result<()> {
    let geo = tp.geo();
    let cg = ChunkGeo::new(geo)?;
    let agcount = geo.ag_count;
    let is_dir = mode & S_IFMT == S_IFDIR;
    let pagno = if geo.ino_valid(parent) {
        geo.ino_agno(parent).0
    } else {
        0
    };
    let start = if is_dir {
        next_rotor(tp, agcount)?
    } else {
        pagno
    };
    for i in 0..agcount {
        let agno = AgNumber((start + i) % agcount);
        // A cheap look at the committed headers first, so that hopeless
        // AGs are neither locked nor joined.
        if !tp.holds_ag(agno) {
            if !worth_trying(tp, agno, &cg)? {
                continue;
            }
            // Wrapped around to a lower AG than the ones this search
            // locked: only take it if that does not wait (lock order).
            if agno.0 < start && !tp.try_lock_ag(agno) {
                continue;
            }
        }
        if alloc_in_ag(tp, agno, parent, &cg, want, out)? {
            return Ok(());
        }
    }
    Ok(())
}

/// True when AG `agno`'s committed headers show a free inode or a free
/// extent long enough for the smallest chunk.
fn worth_trying(tp: &Trans<'_>, agno: AgNumber, cg: &ChunkGeo) -> Result<bool> {
    let fs = tp.fs();
    let geo = fs.geometry();
    let sect = u64::from(geo.sect_size / 512);
    let ag0 = geo.agb_to_daddr(agno, AgBlock(0));
    let agi = fs.read_meta(
        agi::agi_daddr(tp, agno),
        geo.sect_size,
        &Verifier::Agi { agno: agno.0 },
    )?;
    if be32(&agi, off::FREECOUNT) > 0 {
        return Ok(true);
    }
    let agf = fs.read_meta(
        Daddr(ag0.0 + XFS_AGF_SECTOR * sect),
        geo.sect_size,
        &Verifier::Agf { agno: agno.0 },
    )?;
    let longest = be32(&agf, std::mem::offset_of!(Agf, agf_longest));
    Ok(longest >= cg.min_blocks)
}

/// Takes up to `want` free inodes of one chunk in AG `agno` (the one the
/// next single allocation would use, lowest inodes first), allocating a
/// chunk if the AG has none; false when the AG has no room.
fn alloc_in_ag(
    tp: &mut Trans<'_>,
    agno: AgNumber,
    parent: Ino,
    cg: &ChunkGeo,
    want: u32,
    out: &mut Vec<Ino>,
) -> Result<bool> {
    let agi_id = agi::read_agi(tp, agno)?;
    if agi::get(tp, agi_id, off::FREECOUNT) == 0
        && chunk::alloc_chunk(tp, agi_id, agno, cg)?.is_none()
    {
        return Ok(false);
    }
    let geo = tp.geo();
    let near = if geo.ino_agno(parent) == agno && geo.ino_valid(parent) {
        Some(geo.ino_agino(parent))
    } else {
        None
    };
    let finobt = geo.features.finobt;
    let found = if finobt {
        pick_finobt(tp, agi_id, agno, near)?
    } else {
        pick_inobt(tp, agi_id, agno, near)?
    };
    let Some(frec) = found else {
        return Err(agi_corrupt(
            agno,
            "the AGI counts free inodes the btrees do not have",
        ));
    };
    if frec.first_free().is_none() {
        return Err(agi_corrupt(agno, "a chosen chunk has no free inode"));
    }
    // Change the inobt record on its own terms and check that both agree.
    let mut irec = if finobt {
        tree::lookup_eq(tp, agno, Tree::Ino, frec.startino)?
            .ok_or_else(|| agi_corrupt(agno, "a finobt chunk is missing from the inobt"))?
    } else {
        frec
    };
    let mut f = frec;
    let mut taken = 0u32;
    while taken < want {
        let Some(idx) = f.first_free() else {
            break;
        };
        irec.take(idx)?;
        f.take(idx)?;
        let ino = geo.ino_make(agno, irec.startino + idx);
        tp.lock_inode(ino);
        out.push(ino);
        taken += 1;
    }
    tree::update(tp, agno, Tree::Ino, &irec)?;
    if finobt {
        if f != irec {
            return Err(agi_corrupt(agno, "inobt and finobt records differ"));
        }
        if f.freecount == 0 {
            tree::delete(tp, agno, Tree::Fino, f.startino)?;
        } else {
            tree::update(tp, agno, Tree::Fino, &f)?;
        }
    }
    agi::add(tp, agi_id, off::FREECOUNT, -i64::from(taken))?;
    tp.delta_mut().ifree -= i64::from(taken);
    Ok(true)
}

fn agi_corrupt(agno: AgNumber, detail: &str) -> Error {
    Error::corrupt(
        "inode btree",
        Location::Other(format!("AG {}", agno.0)),
        detail.to_string(),
    )
}

/// Distance in inodes from `agino` to a chunk.
fn distance(r: &IRec, agino: u32) -> u32 {
    if agino < r.startino {
        r.startino - agino
    } else {
        agino.saturating_sub(r.startino + XFS_INODES_PER_CHUNK - 1)
    }
}

/// The finobt record nearest the parent, or the most recent chunk's, or
/// the first.
fn pick_finobt(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    near: Option<u32>,
) -> Result<Option<IRec>> {
    if let Some(p) = near {
        let le = tree::lookup_le(tp, agno, Tree::Fino, p)?;
        let ge = tree::lookup_ge(tp, agno, Tree::Fino, p)?;
        return Ok(match (le, ge) {
            (Some(a), Some(b)) => Some(if distance(&b, p) < distance(&a, p) {
                b
            } else {
                a
            }),
            (a, b) => a.or(b),
        });
    }
    let newino = agi::get(tp, agi_id, off::NEWINO);
    if newino != NULLAGINO {
        if let Some(r) = tree::lookup_eq(tp, agno, Tree::Fino, newino)? {
            return Ok(Some(r));
        }
    }
    tree::lookup_ge(tp, agno, Tree::Fino, 0)
}

/// Without a finobt: the first chunk with a free inode at or after the
/// parent's chunk (or the newest chunk), wrapping to the AG's start.
fn pick_inobt(
    tp: &mut Trans<'_>,
    agi_id: BufId,
    agno: AgNumber,
    near: Option<u32>,
) -> Result<Option<IRec>> {
    let newino = agi::get(tp, agi_id, off::NEWINO);
    let from = near.unwrap_or(if newino == NULLAGINO { 0 } else { newino });
    let from = tree::lookup_le(tp, agno, Tree::Ino, from)?.map_or(0, |r| r.startino);
    for (lo, hi) in [(from, u32::MAX), (0, from)] {
        let mut at = lo;
        while at < hi {
            let Some(r) = tree::lookup_ge(tp, agno, Tree::Ino, at)? else {
                break;
            };
            if r.startino >= hi {
                break;
            }
            if r.freecount > 0 {
                return Ok(Some(r));
            }
            at = r.startino + XFS_INODES_PER_CHUNK;
        }
    }
    Ok(None)
}

/// Whether inode `ino` is in use as the inode btree says: its chunk
/// exists and the inode is neither free nor in a sparse hole. Takes the
/// AG lock for the lookup (in a transaction that changes nothing).
pub(crate) fn in_use(fs: &crate::fs::Fs, ino: Ino) -> Result<bool> {
    let mut tp = fs.trans()?;
    let geo = tp.geo();
    let agno = geo.ino_agno(ino);
    let agino = geo.ino_agino(ino);
    agi::read_agi(&mut tp, agno)?;
    let rec = tree::lookup_le(&mut tp, agno, Tree::Ino, agino)?
        .filter(|r| agino - r.startino < XFS_INODES_PER_CHUNK);
    Ok(rec.is_some_and(|r| r.free & (1u64 << (agino - r.startino)) == 0))
}

/// Frees inode `ino` (its forks must already be empty): the on-disk inode
/// becomes a free inode, the btrees and counters are updated, and the
/// chunk is freed when none of its inodes is in use.
pub fn free_inode(tp: &mut Trans<'_>, ino: Ino) -> Result<()> {
    let geo = tp.geo();
    if !geo.ino_valid(ino) {
        return Err(Error::Invalid(format!("inode {} does not exist", ino.0)));
    }
    let agno = geo.ino_agno(ino);
    let agino = geo.ino_agino(ino);
    tp.lock_inode(ino);
    let agi_id = agi::read_agi(tp, agno)?;
    let mut irec = tree::lookup_le(tp, agno, Tree::Ino, agino)?
        .filter(|r| agino - r.startino < XFS_INODES_PER_CHUNK)
        .ok_or_else(|| Error::Invalid(format!("inode {} is in no inode chunk", ino.0)))?;
    let idx = agino - irec.startino;
    if irec.free & (1u64 << idx) != 0 {
        return Err(Error::Invalid(format!("inode {} is not in use", ino.0)));
    }
    let ip = tp.read_inode(ino)?;
    if ip.nblocks != 0 || ip.nextents != 0 || ip.anextents != 0 {
        return Err(Error::Invalid(format!(
            "inode {} still has blocks; empty its forks before freeing it",
            ino.0
        )));
    }
    irec.give(idx)?;
    let finobt = geo.features.finobt;
    let frec = if finobt {
        tree::lookup_eq(tp, agno, Tree::Fino, irec.startino)?
    } else {
        None
    };
    if irec.all_free() && !ChunkGeo::multi_chunk_blocks(geo) {
        // The whole chunk goes.
        let n = i64::from(irec.count);
        tree::delete(tp, agno, Tree::Ino, irec.startino)?;
        if finobt {
            match frec {
                Some(_) => tree::delete(tp, agno, Tree::Fino, irec.startino)?,
                None if irec.freecount == 1 => {}
                None => {
                    return Err(agi_corrupt(
                        agno,
                        "a chunk with free inodes is not in the finobt",
                    ))
                }
            }
        }
        agi::add(tp, agi_id, off::COUNT, -n)?;
        agi::add(tp, agi_id, off::FREECOUNT, -(n - 1))?;
        let d = tp.delta_mut();
        d.icount -= n;
        d.ifree -= n - 1;
        chunk::free_chunk(tp, agno, &irec)?;
        return Ok(());
    }
    tree::update(tp, agno, Tree::Ino, &irec)?;
    if finobt {
        match frec {
            None if irec.freecount == 1 => tree::insert(tp, agno, Tree::Fino, &irec)?,
            None => {
                return Err(agi_corrupt(
                    agno,
                    "a chunk with free inodes is not in the finobt",
                ))
            }
            Some(mut f) => {
                f.give(idx)?;
                if f != irec {
                    return Err(agi_corrupt(agno, "inobt and finobt records differ"));
                }
                tree::update(tp, agno, Tree::Fino, &f)?;
            }
        }
    }
    agi::add(tp, agi_id, off::FREECOUNT, 1)?;
    tp.delta_mut().ifree += 1;
    // The inode itself: no type, no forks, next generation.
    let mut free = ip;
    free.mode = 0;
    free.nlink = 0;
    free.size = 0;
    free.format = ForkFormat::Extents;
    free.forkoff = 0;
    free.aformat = ForkFormat::Extents;
    free.data_fork.clear();
    free.attr_fork.clear();
    free.flags = 0;
    free.flags2 = 0;
    if geo.features.bigtime {
        free.flags2 |= xfs_format::inode::XFS_DIFLAG2_BIGTIME;
    }
    if geo.features.nrext64 {
        free.flags2 |= xfs_format::inode::XFS_DIFLAG2_NREXT64;
    }
    free.rdev = 0;
    free.gen = free.gen.wrapping_add(1);
    free.next_unlinked = NULLAGINO;
    tp.log_inode(&free)?;
    Ok(())
}

/// Frees everything `ip` owns and the inode itself.
pub(crate) fn destroy(tp: &mut Trans<'_>, mut ip: crate::inode::Inode) -> Result<()> {
    if matches!(ip.format, ForkFormat::Extents | ForkFormat::Btree) {
        crate::bmap::unmap_range(tp, &mut ip, crate::inode::Fork::Data, 0, u64::MAX)?;
    }
    if ip.has_attr_fork() && matches!(ip.aformat, ForkFormat::Extents | ForkFormat::Btree) {
        crate::bmap::unmap_range(tp, &mut ip, crate::inode::Fork::Attr, 0, u64::MAX)?;
    }
    // The allocator reads the inode back: it must see the empty forks.
    ip.nlink = 0;
    ip.size = 0;
    if ip.has_attr_fork() {
        ip.forkoff = 0;
        ip.attr_fork.clear();
        ip.anextents = 0;
    }
    if matches!(ip.format, ForkFormat::Local) {
        ip.data_fork.clear();
    }
    tp.log_inode(&ip)?;
    if let Ok(ws) = tp.fs().write_state() {
        ws.alloc.filestreams.forget(ip.ino);
    }
    free_inode(tp, ip.ino)
}

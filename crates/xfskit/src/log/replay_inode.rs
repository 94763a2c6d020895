//! Replaying inode items and inode chunk creations into the overlay.
//!
//! An inode item carries the inode's log core (host order) and, by its
//! field flags, the data fork and the attribute fork as they were in
//! memory: local bytes and extent lists are copied as they are, btree
//! roots are converted from their in-memory block form to the fork's
//! on-disk root. The inode then gets the transaction's LSN and a new CRC.

use super::dinode::{bmbt_root_to_bmdr, check_log_dinode, log_dinode_to_disk, meta_root_to_disk};
use super::replay::{ItemAt, Replayer};
use super::trans::Item;
use crate::error::Result;
use crate::geometry::Geometry;
use xfs_format::inode::{Dinode, XFS_DINODE_CRC_OFF, XFS_DINODE_MAGIC, XFS_DINODE_SIZE};
use xfs_format::log_item::*;
use xfs_format::types::{S_IFDIR, S_IFMT, S_IFREG};
use zerocopy::{FromBytes, IntoBytes};

const FMT_LOCAL: u8 = 1;
const FMT_EXTENTS: u8 = 2;
const FMT_BTREE: u8 = 3;
/// A metadata file's btree rooted in the inode (realtime rmap, refcount).
const FMT_META_BTREE: u8 = 5;

/// The fields of an inode format region that replay needs.
pub(crate) struct InodeFmt {
    pub(crate) size: u16,
    pub(crate) fields: u32,
    pub(crate) ino: u64,
    pub(crate) rdev: u32,
    pub(crate) blkno: i64,
    pub(crate) len: i32,
    pub(crate) boffset: i32,
}

pub(crate) fn parse_inode_fmt(r: &[u8], at: ItemAt) -> Result<InodeFmt> {
    if r.len() == XFS_INODE_LOG_FORMAT_SIZE {
        let f = InodeLogFormat::read_from_bytes(r).expect("size checked");
        Ok(InodeFmt {
            size: f.ilf_size.get(),
            fields: f.ilf_fields.get(),
            ino: f.ilf_ino.get(),
            rdev: u32::from_le_bytes(f.ilf_u[..4].try_into().expect("4")),
            blkno: f.ilf_blkno.get(),
            len: f.ilf_len.get(),
            boffset: f.ilf_boffset.get(),
        })
    } else if r.len() == XFS_INODE_LOG_FORMAT_32_SIZE {
        let f = InodeLogFormat32::read_from_bytes(r).expect("size checked");
        Ok(InodeFmt {
            size: f.ilf_size.get(),
            fields: f.ilf_fields.get(),
            ino: f.ilf_ino.get(),
            rdev: u32::from_le_bytes(f.ilf_u[..4].try_into().expect("4")),
            blkno: f.ilf_blkno.get(),
            len: f.ilf_len.get(),
            boffset: f.ilf_boffset.get(),
        })
    } else {
        Err(at.err(
            "inode log item",
            format!("format region of {} bytes", r.len()),
        ))
    }
}

/// Replays one inode item under `lsn`.
pub(crate) fn replay_inode(rp: &mut Replayer<'_>, it: &Item, lsn: u64, at: ItemAt) -> Result<()> {
    let f = parse_inode_fmt(&it.regions[0], at)?;
    let loc = |d: String| at.err("inode log item", format!("inode {}: {d}", f.ino));
    if it.regions.len() < 2 || usize::from(f.size) != it.regions.len() {
        return Err(loc(format!(
            "{} regions where the item announces {}",
            it.regions.len(),
            f.size
        )));
    }
    let len_bb = u32::try_from(f.len).map_err(|_| loc(format!("buffer length {}", f.len)))?;
    if rp.is_cancelled(f.blkno, len_bb) {
        rp.stats.inodes_cancelled += 1;
        return Ok(());
    }
    let daddr = rp.check_range(f.blkno, u64::from(len_bb), at)?;
    let isize = rp.geo.inode_size as usize;
    let blen = len_bb as usize * 512;
    let ioff = usize::try_from(f.boffset)
        .ok()
        .filter(|o| o + isize <= blen)
        .ok_or_else(|| {
            loc(format!(
                "offset {} outside its {blen}-byte buffer",
                f.boffset
            ))
        })?;
    // Only the sectors holding this inode are read and written back: a
    // cluster holds many inodes, each logged on its own.
    let s0 = ioff / 512;
    let s1 = (ioff + isize).div_ceil(512);
    let mut buf = rp.read(daddr + s0 as u64, (s1 - s0) as u64)?;
    let ioff = ioff - s0 * 512;
    let slot = &mut buf[ioff..ioff + isize];
    match apply(rp.geo, &f, it, slot, lsn, at, &mut rp.stats.warnings)? {
        Applied::Newer => {
            rp.stats.inodes_newer += 1;
            return Ok(());
        }
        Applied::Done => {}
    }
    xfs_format::crc::stamp(slot, XFS_DINODE_CRC_OFF);
    rp.write_part(daddr, daddr + s0 as u64, &buf);
    rp.stats.inodes_replayed += 1;
    Ok(())
}

/// What [`apply`] did.
pub(crate) enum Applied {
    /// The item went over the inode.
    Done,
    /// The inode on disk is newer than the item: left alone.
    Newer,
}

/// Applies inode item `it` (format `f`, logged under `lsn`) over the
/// inode `slot` (its on-disk bytes, magic checked), as recovery does; the
/// CRC is left to the caller.
fn apply(
    geo: &Geometry,
    f: &InodeFmt,
    it: &Item,
    slot: &mut [u8],
    lsn: u64,
    at: ItemAt,
    warnings: &mut Vec<String>,
) -> Result<Applied> {
    let loc = |d: String| at.err("inode log item", format!("inode {}: {d}", f.ino));
    let isize = slot.len();
    let mut dip = Dinode::read_from_bytes(&slot[..XFS_DINODE_SIZE]).expect("176 bytes");
    if dip.di_magic.get() != XFS_DINODE_MAGIC {
        return Err(loc("the inode in its buffer has a bad magic".into()));
    }
    let lr = &it.regions[1];
    if lr.len() < XFS_LOG_DINODE_SIZE {
        return Err(loc(format!("log inode core of {} bytes", lr.len())));
    }
    let ld = LogDinode::read_from_bytes(&lr[..XFS_LOG_DINODE_SIZE]).expect("176 bytes");
    check_log_dinode(&ld, f.ino, geo.features_incompat & (1 << 5) != 0)?;
    let prior = dip.di_lsn.get();
    if dip.di_version >= 3 && prior != 0 && prior != u64::MAX && prior > lsn {
        return Ok(Applied::Newer);
    }
    let mode = ld.di_mode.get() & S_IFMT;
    let fmt = ld.di_format;
    let meta_btree =
        fmt == FMT_META_BTREE && ld.di_flags2.get() & xfs_format::inode::XFS_DIFLAG2_METADATA != 0;
    if (mode == S_IFREG && fmt != FMT_EXTENTS && fmt != FMT_BTREE && !meta_btree)
        || (mode == S_IFDIR && !matches!(fmt, FMT_LOCAL | FMT_EXTENTS | FMT_BTREE))
    {
        return Err(loc(format!(
            "data fork format {fmt} for mode {:o}",
            ld.di_mode.get()
        )));
    }
    if usize::from(ld.di_forkoff) * 8 > isize - XFS_DINODE_SIZE {
        return Err(loc(format!("attr fork offset {}", ld.di_forkoff)));
    }
    log_dinode_to_disk(&ld, &mut dip, lsn);
    slot[..XFS_DINODE_SIZE].copy_from_slice(dip.as_bytes());
    let lit = isize - XFS_DINODE_SIZE;
    let dsize = if ld.di_forkoff == 0 {
        lit
    } else {
        usize::from(ld.di_forkoff) * 8
    };
    let (aoff, asize) = (XFS_DINODE_SIZE + dsize, lit - dsize);
    if f.fields & XFS_ILOG_DEV != 0 {
        slot[XFS_DINODE_SIZE..XFS_DINODE_SIZE + 4].copy_from_slice(&f.rdev.to_be_bytes());
    }
    let mut next = 2;
    if f.size > 2 && f.fields & XFS_ILOG_DFORK != 0 {
        let src = &it.regions[next];
        next += 1;
        let dst = &mut slot[XFS_DINODE_SIZE..XFS_DINODE_SIZE + dsize];
        match f.fields & XFS_ILOG_DFORK {
            XFS_ILOG_DDATA | XFS_ILOG_DEXT => {
                if src.len() > dsize {
                    return Err(loc(format!("{} bytes of data fork in {dsize}", src.len())));
                }
                dst[..src.len()].copy_from_slice(src);
            }
            XFS_ILOG_DBROOT if meta_btree => {
                meta_root_to_disk(src, dst, ld.di_metatype.get(), f.ino)?
            }
            XFS_ILOG_DBROOT => bmbt_root_to_bmdr(src, dst, f.ino)?,
            x => return Err(loc(format!("data fork flags {x:#x}"))),
        }
    }
    if f.size > 2 && f.fields & XFS_ILOG_AFORK != 0 {
        let src = it
            .regions
            .get(next)
            .ok_or_else(|| loc("attr fork region missing".into()))?;
        if ld.di_forkoff == 0 {
            return Err(loc("attr fork logged without an attr fork".into()));
        }
        let dst = &mut slot[aoff..aoff + asize];
        match f.fields & XFS_ILOG_AFORK {
            XFS_ILOG_ADATA | XFS_ILOG_AEXT => {
                if src.len() > asize {
                    return Err(loc(format!("{} bytes of attr fork in {asize}", src.len())));
                }
                dst[..src.len()].copy_from_slice(src);
            }
            XFS_ILOG_ABROOT => bmbt_root_to_bmdr(src, dst, f.ino)?,
            x => return Err(loc(format!("attr fork flags {x:#x}"))),
        }
    }
    if f.fields & (XFS_ILOG_DOWNER | XFS_ILOG_AOWNER) != 0 && dip.di_mode.get() != 0 {
        warnings.push(format!(
            "inode {}: a fork owner change (from an extent swap) was not replayed",
            f.ino
        ));
    }
    Ok(Applied::Done)
}

/// The inode number and field flags (`ilf_fields`) of inode item `it`,
/// `None` when it is not a whole inode item.
pub(crate) fn inode_item_fields(it: &Item) -> Option<(u64, u32)> {
    let at = ItemAt {
        rec_blk: 0,
        index: 0,
    };
    let f = parse_inode_fmt(it.regions.first()?, at).ok()?;
    (it.regions.len() >= 2 && usize::from(f.size) == it.regions.len()).then_some((f.ino, f.fields))
}

/// Applies inode item `it` (logged under `lsn`) over `slot`, the bytes of
/// one inode (at least its magic), as recovery would, and stamps the CRC.
/// For reading evidence from the log's items: over an inode of zeros, what
/// the items do not log stays zero. False when the item does not apply.
pub(crate) fn apply_inode_item(geo: &Geometry, it: &Item, lsn: u64, slot: &mut [u8]) -> bool {
    let at = ItemAt {
        rec_blk: xfs_format::log::block_lsn(lsn).into(),
        index: 0,
    };
    let Some(f) = it.regions.first().and_then(|r| parse_inode_fmt(r, at).ok()) else {
        return false;
    };
    if it.regions.len() < 2 || usize::from(f.size) != it.regions.len() {
        return false;
    }
    let mut w = Vec::new();
    if !matches!(apply(geo, &f, it, slot, lsn, at, &mut w), Ok(Applied::Done)) {
        return false;
    }
    xfs_format::crc::stamp(slot, XFS_DINODE_CRC_OFF);
    true
}

/// Initialises a new inode chunk, unless its clusters were freed later.
pub(crate) fn replay_icreate(rp: &mut Replayer<'_>, it: &Item, at: ItemAt) -> Result<()> {
    let r = &it.regions[0];
    let icl = IcreateLog::read_from_bytes(r)
        .map_err(|_| at.err("icreate log item", format!("region of {} bytes", r.len())))?;
    let geo = rp.geo;
    let bad = |d: String| at.err("icreate log item", d);
    let agno = icl.icl_ag.get();
    let agbno = icl.icl_agbno.get();
    let count = icl.icl_count.get();
    let length = icl.icl_length.get();
    if icl.icl_size.get() != 1 {
        return Err(bad(format!("size {}", icl.icl_size.get())));
    }
    if agno >= geo.ag_count {
        return Err(bad(format!("AG {agno} of {}", geo.ag_count)));
    }
    if agbno == 0 || agbno >= geo.ag_blocks || length == 0 || length >= geo.ag_blocks {
        return Err(bad(format!("chunk of {length} blocks at AG block {agbno}")));
    }
    if icl.icl_isize.get() != geo.inode_size {
        return Err(bad(format!("inode size {}", icl.icl_isize.get())));
    }
    if count == 0 || count >> geo.inopb_log != length {
        return Err(bad(format!("{count} inodes in {length} blocks")));
    }
    let bpc = geo.blocks_per_cluster();
    if length % bpc != 0 || agbno + length > geo.ag_len(crate::geometry::AgNumber(agno)) {
        return Err(bad(format!("chunk of {length} blocks at AG block {agbno}")));
    }
    let nbufs = length / bpc;
    let bb_per_cluster = u64::from(bpc) << (geo.block_log - 9);
    let daddr_of = |i: u32| {
        geo.agb_to_daddr(
            crate::geometry::AgNumber(agno),
            crate::geometry::AgBlock(agbno + i * bpc),
        )
        .0
    };
    let cancelled = (0..nbufs)
        .filter(|&i| rp.is_cancelled(daddr_of(i) as i64, bb_per_cluster as u32))
        .count();
    if cancelled > 0 {
        if cancelled != nbufs as usize {
            rp.stats.warnings.push(format!(
                "AG {agno} block {agbno}: partly cancelled inode chunk not initialised"
            ));
        }
        return Ok(());
    }
    let isize = geo.inode_size as usize;
    let first_ino = geo
        .ino_make(crate::geometry::AgNumber(agno), agbno << geo.inopb_log)
        .0;
    let gen = icl.icl_gen.get();
    for i in 0..nbufs {
        let mut b = vec![0u8; (bb_per_cluster * 512) as usize];
        for (j, slot) in b.chunks_exact_mut(isize).enumerate() {
            let ino = first_ino + u64::from(i * geo.inodes_per_cluster()) + j as u64;
            slot[0..2].copy_from_slice(&XFS_DINODE_MAGIC.to_be_bytes());
            slot[4] = 3;
            slot[92..96].copy_from_slice(&gen.to_be_bytes());
            slot[96..100].copy_from_slice(&u32::MAX.to_be_bytes());
            slot[152..160].copy_from_slice(&ino.to_be_bytes());
            slot[160..176].copy_from_slice(&geo.meta_uuid);
            xfs_format::crc::stamp(slot, XFS_DINODE_CRC_OFF);
        }
        rp.write(daddr_of(i), &b, None);
    }
    rp.stats.icreates += 1;
    Ok(())
}

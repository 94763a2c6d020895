//! Growing the data section of an unmounted filesystem, as the kernel's
//! `xfs_growfs` does on a mounted one.
//!
//! The new size is cut as the kernel cuts it: a trailing piece smaller than
//! [`MIN_AG_BLOCKS`] after the last whole AG is left out. Then, in the
//! kernel's order:
//!
//! 1. every new AG gets its headers and empty btree roots (the same blocks
//!    a fresh AG has, with an empty free list, as the kernel's
//!    `xfs_ag_init_headers` leaves them), written and flushed in space that
//!    no structure of the old filesystem references;
//! 2. one logged transaction changes the primary superblock (`sb_dblocks`,
//!    `sb_agcount`, `sb_fdblocks`) and, when the old last AG grows to a
//!    longer length, its AGF and AGI lengths, its free-space counters and the
//!    free extent at its end in both free-space btrees (the kernel frees the
//!    new space with no reverse mapping: the rmap btree does not change);
//!    the log is written back and left clean ([`Fs::sync`]);
//! 3. the secondary superblocks of the old AGs are brought to the new
//!    `sb_dblocks` and `sb_agcount`, in place, as the kernel updates them
//!    after its transaction. Run again, [`grow`] finishes an interrupted step 3.
//!
//! A crash before the transaction reaches the log leaves the old
//! filesystem (the new AGs' blocks lie past its end); after it, recovery
//! (ours or the kernel's) gives the new one.

use crate::bytes::{be32, put_be32, put_be64};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr, Geometry};
use crate::log::buftype::{blft, BufKind};
use std::mem::offset_of;
use xfs_format::ag::{
    agfl_size, set_agfl_entry, Agf, AgflHdr, Agi, XFS_AGFL_CRC_OFF, XFS_AGFL_MAGIC,
    XFS_AGF_CRC_OFF, XFS_AGF_LSN_OFF, XFS_AGF_MAGIC, XFS_AGF_VERSION, XFS_AGI_CRC_OFF,
    XFS_AGI_LSN_OFF, XFS_AGI_MAGIC, XFS_AGI_VERSION,
};
use xfs_format::btree::*;
use xfs_format::crc::stamp;
use xfs_format::sb::{self as fsb, Dsb};
use xfs_format::types::{NULLAGBLOCK, NULLAGINO};
use zerocopy::{FromZeros, IntoBytes};

/// The smallest AG the kernel's growfs adds (`XFS_MIN_AG_BLOCKS`): a
/// shorter trailing piece is left unused.
pub const MIN_AG_BLOCKS: u64 = 64;

/// Growth past this many times the old size warns of many small AGs.
pub const WARN_FACTOR: u64 = 10;

/// What a grow will do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrowPlan {
    /// `sb_dblocks` now.
    pub old_dblocks: u64,
    /// `sb_dblocks` after.
    pub new_dblocks: u64,
    /// `sb_agcount` now.
    pub old_agcount: u32,
    /// `sb_agcount` after.
    pub new_agcount: u32,
    /// `sb_agblocks`.
    pub agblocks: u32,
    /// Blocks asked for but left out (a trailing piece under [`MIN_AG_BLOCKS`]).
    pub dropped: u64,
}

impl GrowPlan {
    /// Nothing changes in the superblock.
    pub fn is_noop(&self) -> bool {
        self.new_dblocks == self.old_dblocks
    }

    /// Length of AG `agno` after the grow.
    pub fn ag_len(&self, agno: u32) -> u32 {
        if agno + 1 < self.new_agcount {
            self.agblocks
        } else {
            (self.new_dblocks - u64::from(self.new_agcount - 1) * u64::from(self.agblocks)) as u32
        }
    }

    /// Length of the old last AG before the grow.
    pub fn old_last_len(&self) -> u32 {
        (self.old_dblocks - u64::from(self.old_agcount - 1) * u64::from(self.agblocks)) as u32
    }
}

/// Refuses what grow does not do (exit 3 in the CLI): v4, a realtime
/// section, an external log, a metadata directory (realtime groups), zoned.
pub fn check_supported(geo: &Geometry) -> Result<()> {
    let refuse = |what: &str| Err(Error::Unsupported(format!("grow: {what}")));
    if !geo.v5 {
        return refuse("v4 (crc=0) filesystems are read-only in xfskit");
    }
    if geo.rt_blocks != 0 || geo.zoned {
        return refuse("a realtime section cannot be grown (the data section either, with one)");
    }
    if geo.log_start.0 == 0 {
        return refuse("external logs are not supported");
    }
    if geo.features.metadir {
        return refuse("filesystems with a metadata directory (realtime groups) are not supported");
    }
    Ok(())
}

/// The plan for a data section of `target` blocks (the kernel's rounding).
pub fn plan(geo: &Geometry, target: u64) -> Result<GrowPlan> {
    check_supported(geo)?;
    let ag = u64::from(geo.ag_blocks);
    if target < geo.data_blocks {
        return Err(Error::Unsupported(format!(
            "grow: shrinking ({} to {target} blocks) is not supported",
            geo.data_blocks
        )));
    }
    let mut nb = target;
    let mut count = nb / ag;
    let rem = nb % ag;
    if rem >= MIN_AG_BLOCKS {
        count += 1;
    } else if rem != 0 {
        nb = count * ag;
    }
    if nb < geo.data_blocks {
        // The cut fell inside the current last AG: nothing to add.
        nb = geo.data_blocks;
        count = u64::from(geo.ag_count);
    }
    if count > u64::from(u32::MAX) {
        return Err(Error::Unsupported(format!(
            "grow: {target} blocks would need more than 2^32 AGs"
        )));
    }
    Ok(GrowPlan {
        old_dblocks: geo.data_blocks,
        new_dblocks: nb,
        old_agcount: geo.ag_count,
        new_agcount: count as u32,
        agblocks: geo.ag_blocks,
        dropped: target - nb,
    })
}

const SB_KIND: BufKind = BufKind {
    blft: blft::SB,
    lsn_off: Some(fsb::XFS_SB_LSN_OFF),
};
const AGF_KIND: BufKind = BufKind {
    blft: blft::AGF,
    lsn_off: Some(XFS_AGF_LSN_OFF),
};
const AGI_KIND: BufKind = BufKind {
    blft: blft::AGI,
    lsn_off: Some(XFS_AGI_LSN_OFF),
};
const BT_KIND: BufKind = BufKind {
    blft: blft::BTREE,
    lsn_off: Some(offset_of!(BtreeBlockShort, bb_lsn)),
};

/// AG block numbers of a fresh AG's fixed blocks.
struct Fixed {
    bno: u32,
    cnt: u32,
    ino: u32,
    fino: Option<u32>,
    rmap: Option<u32>,
    refc: Option<u32>,
    prealloc: u32,
}

fn fixed(geo: &Geometry) -> Fixed {
    let agfl = (3 * geo.sect_size) >> geo.block_log;
    let bno = agfl + 1;
    let ino = bno + 2;
    let mut next = ino + 1;
    let mut take = |on: bool| {
        on.then(|| {
            next += 1;
            next - 1
        })
    };
    let fino = take(geo.features.finobt);
    let rmap = take(geo.features.rmapbt);
    let refc = take(geo.features.reflink);
    Fixed {
        bno,
        cnt: bno + 1,
        ino,
        fino,
        rmap,
        refc,
        prealloc: next,
    }
}

/// The first blocks of new AG `agno` of `len` blocks: a copy of `sb`
/// (the new primary sector), AGF, AGI, AGFL, and the btree roots.
fn new_ag_image(geo: &Geometry, sb: &[u8], f: &Fixed, agno: u32, len: u32) -> Vec<u8> {
    let bs = geo.block_size as usize;
    let ss = geo.sect_size as usize;
    let mut img = vec![0u8; f.prealloc as usize * bs];
    let uuid = xfs_format::types::Uuid(if geo.features.meta_uuid {
        geo.meta_uuid
    } else {
        geo.uuid
    });
    img[..ss].copy_from_slice(&sb[..ss]);
    stamp(&mut img[..ss], fsb::XFS_SB_CRC_OFF);

    let free = len - f.prealloc;
    let mut agf = Agf::new_zeroed();
    agf.agf_magicnum.set(XFS_AGF_MAGIC);
    agf.agf_versionnum.set(XFS_AGF_VERSION);
    agf.agf_seqno.set(agno);
    agf.agf_length.set(len);
    agf.agf_bno_root.set(f.bno);
    agf.agf_cnt_root.set(f.cnt);
    agf.agf_bno_level.set(1);
    agf.agf_cnt_level.set(1);
    if let Some(r) = f.rmap {
        agf.agf_rmap_root.set(r);
        agf.agf_rmap_level.set(1);
        agf.agf_rmap_blocks.set(1);
    }
    if let Some(r) = f.refc {
        agf.agf_refcount_root.set(r);
        agf.agf_refcount_level.set(1);
        agf.agf_refcount_blocks.set(1);
    }
    // An empty free list, as the kernel's new AGs have it.
    agf.agf_flfirst.set(1);
    agf.agf_fllast.set(0);
    agf.agf_flcount.set(0);
    agf.agf_freeblks.set(free);
    agf.agf_longest.set(free);
    agf.agf_uuid = uuid;
    let s = &mut img[ss..2 * ss];
    s[..size_of::<Agf>()].copy_from_slice(agf.as_bytes());
    stamp(s, XFS_AGF_CRC_OFF);

    let mut agi = Agi::new_zeroed();
    agi.agi_magicnum.set(XFS_AGI_MAGIC);
    agi.agi_versionnum.set(XFS_AGI_VERSION);
    agi.agi_seqno.set(agno);
    agi.agi_length.set(len);
    agi.agi_root.set(f.ino);
    agi.agi_level.set(1);
    agi.agi_newino.set(NULLAGINO);
    agi.agi_dirino.set(NULLAGINO);
    for u in agi.agi_unlinked.iter_mut() {
        u.set(NULLAGINO);
    }
    agi.agi_uuid = uuid;
    if let Some(r) = f.fino {
        agi.agi_free_root.set(r);
        agi.agi_free_level.set(1);
    }
    if geo.features.inobtcnt {
        agi.agi_iblocks.set(1);
        agi.agi_fblocks.set(u32::from(f.fino.is_some()));
    }
    let s = &mut img[2 * ss..3 * ss];
    s[..size_of::<Agi>()].copy_from_slice(agi.as_bytes());
    stamp(s, XFS_AGI_CRC_OFF);

    let s = &mut img[3 * ss..4 * ss];
    let mut hdr = AgflHdr::new_zeroed();
    hdr.agfl_magicnum.set(XFS_AGFL_MAGIC);
    hdr.agfl_seqno.set(agno);
    hdr.agfl_uuid = uuid;
    s[..size_of::<AgflHdr>()].copy_from_slice(hdr.as_bytes());
    for i in 0..agfl_size(ss) {
        set_agfl_entry(s, i, NULLAGBLOCK);
    }
    stamp(s, XFS_AGFL_CRC_OFF);

    let ag_base = u64::from(agno) * u64::from(geo.ag_blocks);
    let mut block = |agbno: u32, magic: u32, recs: &[u8], n: usize| {
        let off = agbno as usize * bs;
        let b = &mut img[off..off + bs];
        let mut h = BtreeBlockShort::new_zeroed();
        h.bb_magic.set(magic);
        h.bb_numrecs.set(n as u16);
        h.bb_leftsib.set(NULLAGBLOCK);
        h.bb_rightsib.set(NULLAGBLOCK);
        h.bb_blkno
            .set((ag_base + u64::from(agbno)) << (geo.block_log - 9));
        h.bb_uuid = uuid;
        h.bb_owner.set(agno);
        b[..XFS_BTREE_SBLOCK_CRC_LEN].copy_from_slice(h.as_bytes());
        b[XFS_BTREE_SBLOCK_CRC_LEN..XFS_BTREE_SBLOCK_CRC_LEN + recs.len()].copy_from_slice(recs);
        stamp(b, XFS_BTREE_SBLOCK_CRC_OFF);
    };
    let mut ar = AllocRec::new_zeroed();
    ar.ar_startblock.set(f.prealloc);
    ar.ar_blockcount.set(free);
    block(f.bno, XFS_ABTB_CRC_MAGIC, ar.as_bytes(), 1);
    block(f.cnt, XFS_ABTC_CRC_MAGIC, ar.as_bytes(), 1);
    block(f.ino, XFS_IBT_CRC_MAGIC, &[], 0);
    if let Some(r) = f.fino {
        block(r, XFS_FIBT_CRC_MAGIC, &[], 0);
    }
    if let Some(r) = f.rmap {
        let inobt_end = r;
        let mut raw = vec![
            (0, f.bno, XFS_RMAP_OWN_FS),
            (f.bno, 2, XFS_RMAP_OWN_AG),
            (f.ino, inobt_end - f.ino, XFS_RMAP_OWN_INOBT),
            (r, 1, XFS_RMAP_OWN_AG),
        ];
        if let Some(c) = f.refc {
            raw.push((c, 1, XFS_RMAP_OWN_REFC));
        }
        let mut recs = Vec::new();
        for &(s, l, o) in &raw {
            let mut rr = RmapRec::new_zeroed();
            rr.rm_startblock.set(s);
            rr.rm_blockcount.set(l);
            rr.rm_owner.set(o);
            recs.extend_from_slice(rr.as_bytes());
        }
        block(r, XFS_RMAP_CRC_MAGIC, &recs, raw.len());
    }
    if let Some(c) = f.refc {
        block(c, XFS_REFC_CRC_MAGIC, &[], 0);
    }
    img
}

fn sb_daddr(geo: &Geometry, agno: u32) -> Daddr {
    geo.agb_to_daddr(AgNumber(agno), AgBlock(0))
}

/// Grows a filesystem opened read-write (journaled) on a device that
/// already holds `plan.new_dblocks` blocks. The filesystem must not be
/// used for writing afterwards. With a no-op plan only the secondary
/// superblocks are brought in line (an interrupted grow finished).
pub fn grow(fs: &Fs, plan: &GrowPlan) -> Result<()> {
    let geo = fs.geometry();
    check_supported(geo)?;
    let bs = u64::from(geo.block_size);
    let ss = geo.sect_size as usize;
    if fs.device().len() < plan.new_dblocks * bs {
        return Err(Error::Invalid(format!(
            "grow: the device holds {} bytes, {} blocks need {}",
            fs.device().len(),
            plan.new_dblocks,
            plan.new_dblocks * bs
        )));
    }
    if !plan.is_noop() {
        grow_data(fs, geo, plan)?;
    }
    // Secondary superblocks: after a grow each is a copy of the new
    // primary, as the kernel writes them; a run with nothing to grow only
    // rewrites those an interrupted run left with another size.
    let mut primary = vec![0u8; ss];
    fs.device().read_at(&mut primary, 0).map_err(Error::Io)?;
    let dblocks = crate::bytes::be64(&primary, offset_of!(Dsb, sb_dblocks));
    let agcount = be32(&primary, offset_of!(Dsb, sb_agcount));
    let mut wrote = false;
    for agno in 1..agcount {
        let at = sb_daddr(geo, agno).bytes();
        if plan.is_noop() {
            let mut s = vec![0u8; ss];
            fs.device().read_at(&mut s, at).map_err(Error::Io)?;
            if be32(&s, 0) != fsb::XFS_SB_MAGIC {
                return Err(Error::corrupt(
                    "superblock",
                    Location::Sb(agno),
                    "bad magic in a secondary superblock",
                ));
            }
            let d = crate::bytes::be64(&s, offset_of!(Dsb, sb_dblocks));
            let c = be32(&s, offset_of!(Dsb, sb_agcount));
            if d == dblocks && c == agcount {
                continue;
            }
        }
        fs.device().write_at(&primary, at).map_err(Error::Io)?;
        wrote = true;
    }
    if wrote {
        fs.device().flush().map_err(Error::Io)?;
    }
    Ok(())
}

/// Quota inode fields of 0 as the kernel writes them (NULLFSINO).
fn quota_inos_to_disk(s: &mut [u8]) {
    for off in [
        offset_of!(Dsb, sb_uquotino),
        offset_of!(Dsb, sb_gquotino),
        offset_of!(Dsb, sb_pquotino),
    ] {
        if crate::bytes::be64(s, off) == 0 {
            put_be64(s, off, u64::MAX);
        }
    }
}

fn grow_data(fs: &Fs, geo: &Geometry, plan: &GrowPlan) -> Result<()> {
    let bs = u64::from(geo.block_size);
    let ss = geo.sect_size as usize;
    let f = fixed(geo);
    // The new primary sector, copied into each new AG.
    let mut sb = vec![0u8; ss];
    fs.device().read_at(&mut sb, 0).map_err(Error::Io)?;
    put_be64(&mut sb, offset_of!(Dsb, sb_dblocks), plan.new_dblocks);
    put_be32(&mut sb, offset_of!(Dsb, sb_agcount), plan.new_agcount);
    quota_inos_to_disk(&mut sb);
    // 1. New AGs, in space nothing references yet.
    let mut added_free = 0u64;
    for agno in plan.old_agcount..plan.new_agcount {
        let len = plan.ag_len(agno);
        let img = new_ag_image(geo, &sb, &f, agno, len);
        let at = u64::from(agno) * u64::from(plan.agblocks) * bs;
        fs.device().write_at(&img, at).map_err(Error::Io)?;
        added_free += u64::from(len - f.prealloc);
    }
    if plan.new_agcount > plan.old_agcount {
        fs.device().flush().map_err(Error::Io)?;
    }
    // 2. One transaction: the superblock and the old last AG.
    let mut tp = fs.trans()?;
    let last = plan.old_agcount - 1;
    let old_len = plan.old_last_len();
    let new_len = if plan.new_agcount > plan.old_agcount {
        plan.agblocks
    } else {
        plan.ag_len(last)
    };
    if new_len > old_len {
        let ext = new_len - old_len;
        tp.lock_ag(AgNumber(last));
        let base = sb_daddr(geo, last);
        let sbb = ss as u64 / 512;
        let agf_id = tp.read_raw_buf(
            Daddr(base.0 + sbb),
            ss as u32,
            AGF_KIND,
            Some(XFS_AGF_CRC_OFF),
        )?;
        let agi_id = tp.read_raw_buf(
            Daddr(base.0 + 2 * sbb),
            ss as u32,
            AGI_KIND,
            Some(XFS_AGI_CRC_OFF),
        )?;
        let agf = tp.buf(agf_id).to_vec();
        if be32(&agf, 0) != XFS_AGF_MAGIC || be32(&agf, offset_of!(Agf, agf_length)) != old_len {
            return Err(Error::corrupt(
                "AGF",
                Location::AgBlock {
                    agno: last,
                    agbno: 0,
                },
                "bad magic or a length other than the superblock's",
            ));
        }
        let loc = Location::AgBlock {
            agno: last,
            agbno: 0,
        };
        let bno_root = be32(&agf, offset_of!(Agf, agf_bno_root));
        let cnt_root = be32(&agf, offset_of!(Agf, agf_cnt_root));
        let bno_level = be32(&agf, offset_of!(Agf, agf_bno_level));
        let cnt_level = be32(&agf, offset_of!(Agf, agf_cnt_level));
        if bno_level != 1 || cnt_level != 1 {
            return Err(Error::Unsupported(format!(
                "grow: the last AG ({last})'s free-space btrees have more than one level; \
                 growing its free space into them is not done yet"
            )));
        }
        let bt_len = geo.block_size;
        let at = |b: u32| geo.agb_to_daddr(AgNumber(last), AgBlock(b));
        let bno_id = tp.read_raw_buf(
            at(bno_root),
            bt_len,
            BT_KIND,
            Some(XFS_BTREE_SBLOCK_CRC_OFF),
        )?;
        let cnt_id = tp.read_raw_buf(
            at(cnt_root),
            bt_len,
            BT_KIND,
            Some(XFS_BTREE_SBLOCK_CRC_OFF),
        )?;
        let maxrecs = (geo.block_size as usize - XFS_BTREE_SBLOCK_CRC_LEN) / 8;
        let read_recs = |b: &[u8], magic: u32| -> Result<Vec<(u32, u32)>> {
            let n = u16::from_be_bytes([b[6], b[7]]) as usize;
            if be32(b, 0) != magic || n > maxrecs || u16::from_be_bytes([b[4], b[5]]) != 0 {
                return Err(Error::corrupt(
                    "free-space btree root",
                    loc.clone(),
                    "bad magic, level or record count",
                ));
            }
            Ok((0..n)
                .map(|i| {
                    let o = XFS_BTREE_SBLOCK_CRC_LEN + 8 * i;
                    (be32(b, o), be32(b, o + 4))
                })
                .collect())
        };
        let mut by_bno = read_recs(tp.buf(bno_id), XFS_ABTB_CRC_MAGIC)?;
        let mut by_cnt = read_recs(tp.buf(cnt_id), XFS_ABTC_CRC_MAGIC)?;
        // The new space joins a free extent ending at the old end.
        let mut newrec = (old_len, ext);
        if let Some(&(s, l)) = by_bno.last() {
            if s + l == old_len {
                newrec = (s, l + ext);
                by_bno.pop();
                by_cnt.retain(|&r| r != (s, l));
            }
        }
        by_bno.push(newrec);
        by_cnt.push(newrec);
        by_cnt.sort_by_key(|&(s, l)| (l, s));
        if by_bno.len() > maxrecs {
            return Err(Error::Unsupported(format!(
                "grow: the last AG ({last})'s free-space btree root is full; \
                 splitting it is not done yet"
            )));
        }
        let write_recs = |b: &mut [u8], recs: &[(u32, u32)]| {
            b[6..8].copy_from_slice(&(recs.len() as u16).to_be_bytes());
            for (i, &(s, l)) in recs.iter().enumerate() {
                let o = XFS_BTREE_SBLOCK_CRC_LEN + 8 * i;
                put_be32(b, o, s);
                put_be32(b, o + 4, l);
            }
        };
        write_recs(tp.buf_mut(bno_id), &by_bno);
        write_recs(tp.buf_mut(cnt_id), &by_cnt);
        let longest = by_cnt.last().map_or(0, |r| r.1);
        let b = tp.buf_mut(agf_id);
        put_be32(b, offset_of!(Agf, agf_length), new_len);
        let fb = be32(b, offset_of!(Agf, agf_freeblks));
        put_be32(b, offset_of!(Agf, agf_freeblks), fb + ext);
        put_be32(b, offset_of!(Agf, agf_longest), longest);
        let b = tp.buf_mut(agi_id);
        put_be32(b, offset_of!(Agi, agi_length), new_len);
        added_free += u64::from(ext);
    }
    let sb_id = tp.read_raw_buf(Daddr(0), ss as u32, SB_KIND, Some(fsb::XFS_SB_CRC_OFF))?;
    let fd_off = offset_of!(Dsb, sb_fdblocks);
    let b = tp.buf_mut(sb_id);
    put_be64(b, offset_of!(Dsb, sb_dblocks), plan.new_dblocks);
    put_be32(b, offset_of!(Dsb, sb_agcount), plan.new_agcount);
    let fd = crate::bytes::be64(b, fd_off);
    put_be64(b, fd_off, fd + added_free);
    quota_inos_to_disk(b);
    tp.delta_mut().fdblocks += added_free as i64;
    tp.commit()?;
    fs.sync()
}

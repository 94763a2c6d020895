//! Replaying dquot items, quota-off items and dquot buffers, as the
//! kernel's recovery does on a filesystem whose quota accounting is on.
//!
//! A dquot item is a 24-byte format (`xfs_dq_logformat`, host order: the
//! dquot's id, its buffer's disk address and length in blocks, its offset
//! in the buffer) and the 104-byte record as it was in memory. The record
//! must pass the dquot verifier; it is copied over the record in the
//! buffer unless that one (v5) carries a newer LSN, and the record's CRC
//! is computed again. A quota-off item anywhere in the log turns off the
//! replay of every dquot of its kinds. Dquot buffers (new dquot chunks)
//! are replayed as other buffers, except kinds turned off, and logged
//! regions that start with an invalid dquot are left out.

use super::replay::{ItemAt, Replayer};
use super::trans::Item;
use crate::bytes::le32;
use crate::error::Result;
use xfs_format::quota::{
    dquot_problem, DiskDquot, XFS_DISK_DQUOT_SIZE, XFS_DQBLK_SIZE, XFS_DQTYPE_GROUP,
    XFS_DQTYPE_PROJ, XFS_DQTYPE_REC_MASK, XFS_DQTYPE_USER, XFS_DQUOT_CRC_OFF,
};
use zerocopy::FromBytes;

/// `sb_qflags` accounting bits.
const XFS_UQUOTA_ACCT: u16 = 0x0001;
const XFS_PQUOTA_ACCT: u16 = 0x0008;
const XFS_GQUOTA_ACCT: u16 = 0x0040;
/// Size of `xfs_dq_logformat`.
const DQ_LOGFORMAT_SIZE: usize = 24;
/// Byte offset of `dd_lsn` in a dquot record.
const DQBLK_LSN_OFF: usize = 112;

/// The dquot kinds (`XFS_DQTYPE_*`) a quota-off item turns off.
pub(crate) fn quotaoff_kinds(it: &Item) -> u8 {
    let Some(r) = it.regions.first().filter(|r| r.len() >= 8) else {
        return 0;
    };
    let flags = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as u16;
    let mut k = 0;
    if flags & XFS_UQUOTA_ACCT != 0 {
        k |= XFS_DQTYPE_USER;
    }
    if flags & XFS_GQUOTA_ACCT != 0 {
        k |= XFS_DQTYPE_GROUP;
    }
    if flags & XFS_PQUOTA_ACCT != 0 {
        k |= XFS_DQTYPE_PROJ;
    }
    k
}

/// True when the superblock `sb` has quota accounting on: the kernel
/// replays dquots only on a quota mount, and a mount that keeps the
/// superblock's quota flags is one.
pub(crate) fn accounting_on(sb: &[u8]) -> bool {
    let o = xfs_format::sb::XFS_SB_QFLAGS_OFF;
    sb.len() > o + 1
        && u16::from_be_bytes([sb[o], sb[o + 1]])
            & (XFS_UQUOTA_ACCT | XFS_GQUOTA_ACCT | XFS_PQUOTA_ACCT)
            != 0
}

/// Replays one dquot item under `lsn`.
pub(crate) fn replay_dquot(rp: &mut Replayer<'_>, it: &Item, lsn: u64, at: ItemAt) -> Result<()> {
    let bad = |d: String| at.err("dquot log item", d);
    let f = it
        .regions
        .first()
        .filter(|r| r.len() >= DQ_LOGFORMAT_SIZE)
        .ok_or_else(|| bad("format region too short".into()))?;
    let id = le32(f, 4);
    let blkno = i64::from_le_bytes(f[8..16].try_into().expect("8 bytes"));
    let len = le32(f, 16) as i32;
    let boffset = le32(f, 20) as usize;
    let rec = it
        .regions
        .get(1)
        .filter(|r| r.len() >= XFS_DISK_DQUOT_SIZE)
        .ok_or_else(|| bad(format!("dquot {id}: no record region")))?;
    let d = DiskDquot::ref_from_prefix(rec).expect("104 bytes").0;
    if let Some(why) = dquot_problem(d, Some(id), rp.geo.features.bigtime) {
        return Err(bad(format!("dquot {id}: {why}")));
    }
    if rp.quota_off & d.d_type & XFS_DQTYPE_REC_MASK != 0 {
        rp.stats.dquots_off += 1;
        return Ok(());
    }
    let len_bb = u32::try_from(len)
        .ok()
        .filter(|&l| l > 0)
        .map(|l| u64::from(l) * u64::from(rp.geo.block_size) / 512)
        .ok_or_else(|| bad(format!("dquot {id}: buffer length {len}")))?;
    let daddr = rp.check_range(blkno, len_bb, at)?;
    let mut buf = rp.read(daddr, len_bb)?;
    if boffset + XFS_DQBLK_SIZE > buf.len() {
        return Err(bad(format!(
            "dquot {id}: offset {boffset} outside its {}-byte buffer",
            buf.len()
        )));
    }
    let slot = &mut buf[boffset..boffset + XFS_DQBLK_SIZE];
    if rp.geo.v5 {
        let prior = u64::from_be_bytes(
            slot[DQBLK_LSN_OFF..DQBLK_LSN_OFF + 8]
                .try_into()
                .expect("8"),
        );
        if prior != 0 && prior != u64::MAX && prior >= lsn {
            rp.stats.dquots_newer += 1;
            return Ok(());
        }
    }
    let n = rec.len().min(XFS_DQBLK_SIZE);
    slot[..n].copy_from_slice(&rec[..n]);
    if rp.geo.v5 {
        xfs_format::crc::stamp(slot, XFS_DQUOT_CRC_OFF);
    }
    rp.write(daddr, &buf, None);
    rp.stats.dquots_replayed += 1;
    Ok(())
}

/// The dquot kinds a dquot buffer item's flags name.
pub(crate) fn buf_kinds(blf_flags: u16) -> u8 {
    use xfs_format::log_item::{XFS_BLF_GDQUOT_BUF, XFS_BLF_PDQUOT_BUF, XFS_BLF_UDQUOT_BUF};
    let mut k = 0;
    if blf_flags & XFS_BLF_UDQUOT_BUF != 0 {
        k |= XFS_DQTYPE_USER;
    }
    if blf_flags & XFS_BLF_GDQUOT_BUF != 0 {
        k |= XFS_DQTYPE_GROUP;
    }
    if blf_flags & XFS_BLF_PDQUOT_BUF != 0 {
        k |= XFS_DQTYPE_PROJ;
    }
    k
}

/// True when a logged region of a dquot buffer may be copied: it does
/// not start with an invalid dquot (the kernel checks the first).
pub(crate) fn region_ok(region: &[u8], bigtime: bool) -> bool {
    match DiskDquot::ref_from_prefix(region) {
        Ok((d, _)) => dquot_problem(d, None, bigtime).is_none(),
        Err(_) => false,
    }
}

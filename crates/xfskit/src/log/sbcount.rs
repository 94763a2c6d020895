//! The superblock's lazily kept counters after a replay.

use super::replay::Replayer;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{AgBlock, AgNumber};

/// Recomputes `sb_icount`, `sb_ifree` and `sb_fdblocks` from the AG
/// headers, as the kernel does when it mounts a filesystem whose log was
/// dirty (the superblock's copies are only kept lazily).
pub(crate) fn update_sb_counters(rp: &mut Replayer<'_>) -> Result<()> {
    let geo = rp.geo;
    let ss = geo.sect_size as usize;
    let (mut icount, mut ifree, mut fdblocks) = (0u64, 0u64, 0u64);
    // The AG count of the replayed superblock: a replayed grow (xfskit
    // grow, the kernel's growfs) adds AGs the opening geometry lacks.
    let mut sb = rp.read(0, ss as u64 / 512)?;
    let agcount = be32(&sb, std::mem::offset_of!(xfs_format::sb::Dsb, sb_agcount));
    if agcount < geo.ag_count {
        return Err(Error::corrupt(
            "superblock",
            Location::Sb(0),
            "fewer AGs after recovery than before",
        ));
    }
    for ag in 0..agcount {
        let base = geo.agb_to_daddr(AgNumber(ag), AgBlock(0)).0;
        let sbb = ss as u64 / 512;
        let agf = rp.read(base + sbb, sbb)?;
        let agi = rp.read(base + 2 * sbb, sbb)?;
        if be32(&agf, 0) != xfs_format::ag::XFS_AGF_MAGIC
            || be32(&agi, 0) != xfs_format::ag::XFS_AGI_MAGIC
        {
            return Err(Error::corrupt(
                "AG headers",
                Location::Sb(ag),
                "bad AGF or AGI magic after recovery",
            ));
        }
        use std::mem::offset_of;
        use xfs_format::ag::{Agf, Agi};
        fdblocks += u64::from(be32(&agf, offset_of!(Agf, agf_freeblks)))
            + u64::from(be32(&agf, offset_of!(Agf, agf_flcount)))
            + u64::from(be32(&agf, offset_of!(Agf, agf_btreeblks)));
        icount += u64::from(be32(&agi, offset_of!(Agi, agi_count)));
        ifree += u64::from(be32(&agi, offset_of!(Agi, agi_freecount)));
    }
    use xfs_format::sb::Dsb;
    let o = std::mem::offset_of!(Dsb, sb_icount);
    sb[o..o + 8].copy_from_slice(&icount.to_be_bytes());
    let o = std::mem::offset_of!(Dsb, sb_ifree);
    sb[o..o + 8].copy_from_slice(&ifree.to_be_bytes());
    let o = std::mem::offset_of!(Dsb, sb_fdblocks);
    sb[o..o + 8].copy_from_slice(&fdblocks.to_be_bytes());
    // Dquot items are not replayed: counts they changed must not stay
    // marked checked (the next quota mount runs quotacheck).
    let o = xfs_format::sb::XFS_SB_QFLAGS_OFF;
    let q = u16::from_be_bytes([sb[o], sb[o + 1]]);
    if rp.stats.bufs_quota > 0 && q & xfs_format::sb::XFS_ALL_QUOTA_CHKD != 0 {
        let q = q & !xfs_format::sb::XFS_ALL_QUOTA_CHKD;
        sb[o..o + 2].copy_from_slice(&q.to_be_bytes());
        rp.stats.warnings.push(format!(
            "{} quota log items were not replayed: the quota counts are marked unchecked, \
             and the next quota mount recounts them",
            rp.stats.bufs_quota
        ));
    }
    xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
    rp.write(0, &sb, None);
    Ok(())
}

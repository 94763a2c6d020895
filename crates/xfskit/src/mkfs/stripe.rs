//! Stripe geometry: data stripe unit/width from options or the device, and
//! the log stripe unit, all converted to filesystem blocks.

use super::geometry::{geom, Cfg, DeviceTopology};
use super::layout::*;
use super::options::{MkfsError, MkfsOptions, D_SU, L_SU};

/// Check a stripe unit/width pair (bytes) the way the kernel validates them.
fn stripe_ok(sunit: i64, swidth: i64, sectorsize: i64) -> bool {
    !(swidth > i64::from(i32::MAX)
        || sunit > swidth
        || (sectorsize != 0 && (sunit as i32 as i64) % sectorsize != 0)
        || (sunit != 0 && swidth == 0)
        || (sunit == 0 && swidth != 0)
        || (sunit != 0 && (swidth as i32) % (sunit as i32) != 0))
}

/// Decide the data and log stripe units (fs blocks) from options and device.
pub(crate) fn stripe_factors(
    opts: &MkfsOptions,
    topo: &DeviceTopology,
    cfg: &mut Cfg,
) -> Result<(), MkfsError> {
    let bs = u64::from(cfg.blocksize);
    let mut dsunit: i64 = opts.data_sunit.map_or(0, i64::from);
    let mut dswidth: i64 = opts.data_swidth.map_or(0, i64::from);
    if opts.data_sunit.is_some() != opts.data_swidth.is_some() {
        return Err(geom(
            "both data sunit and data swidth options must be specified".into(),
        ));
    }
    let dsu = match &opts.data_su {
        Some(t) => D_SU.number(t, bs, u64::from(cfg.sectorsize))?,
        None => 0,
    };
    let dsw = opts.data_sw.map_or(0, i64::from);
    if dsu != 0 || dsw != 0 {
        if opts.data_su.is_some() != opts.data_sw.is_some() {
            return Err(geom(
                "both data su and data sw options must be specified".into(),
            ));
        }
        let width = dsu * dsw;
        if width / 512 > i64::from(i32::MAX) {
            return Err(geom(format!(
                "data stripe width ({width}) is too large of a multiple of the data stripe unit ({dsu})"
            )));
        }
        if !stripe_ok(dsu, width, i64::from(cfg.sectorsize)) {
            return Err(geom(format!(
                "invalid data stripe unit {dsu} / width {width}"
            )));
        }
        dsunit = dsu / 512;
        dswidth = width / 512;
    } else if !stripe_ok(dsunit * 512, dswidth * 512, i64::from(cfg.sectorsize)) {
        return Err(geom(format!(
            "invalid data stripe unit {dsunit} / width {dswidth}"
        )));
    }
    let mut noalign = opts.data_noalign;
    if (opts.data_sunit.is_some() || opts.data_su.is_some()) && dsunit == 0 && dswidth == 0 {
        noalign = true;
    }
    if !noalign {
        let mut use_dev = false;
        if dsunit == 0 {
            let (su, sw) = (i64::from(topo.stripe_unit), i64::from(topo.stripe_width));
            if !stripe_ok(su, sw, 0) {
                cfg.warnings.push(format!(
                    "mkfs.xfs: Volume reports invalid stripe unit ({su}) and stripe width ({sw}), ignoring."
                ));
            } else if cfg.dblocks < gib_blocks(1, cfg.blocklog) {
                if su != 0 || sw != 0 {
                    cfg.warnings.push(format!(
                        "mkfs.xfs: small data volume, ignoring data volume stripe unit {} and stripe width {}",
                        su / 512,
                        sw / 512
                    ));
                }
            } else {
                dsunit = su / 512;
                dswidth = sw / 512;
                use_dev = true;
            }
        }
        if (dsunit * 512) % bs as i64 != 0 || (dswidth * 512) % bs as i64 != 0 {
            if !use_dev {
                return Err(geom(format!(
                    "mkfs.xfs: Stripe unit({}) or stripe width({}) is not a multiple of the block size({bs})",
                    dsunit * 512,
                    dswidth * 512
                )));
            }
            dsunit = 0;
            dswidth = 0;
        }
        cfg.dsunit = (dsunit as u64) >> (cfg.blocklog - 9);
        cfg.dswidth = (dswidth as u64) >> (cfg.blocklog - 9);
    }

    let mut lsunit_bb: u64 = 0;
    let mut lsu: u64 = 0;
    if let Some(n) = opts.log_sunit {
        lsunit_bb = u64::from(n);
    } else if let Some(t) = &opts.log_su {
        lsu = L_SU.number(t, bs, u64::from(cfg.sectorsize))? as u64;
    } else if cfg.lsectorsize > LOG_HEADER_SIZE {
        lsu = bs;
    }
    if lsu != 0 {
        if !lsu.is_multiple_of(bs) {
            return Err(geom(format!(
                "log stripe unit ({lsu}) must be a multiple of the block size ({bs})"
            )));
        }
        lsunit_bb = lsu / 512;
    }
    if !(lsunit_bb * 512).is_multiple_of(bs) {
        return Err(geom(format!(
            "log stripe unit ({}) must be a multiple of the block size ({bs})",
            lsunit_bb * 512
        )));
    }
    if lsunit_bb != 0 {
        cfg.lsunit = lsunit_bb >> (cfg.blocklog - 9);
    } else if cfg.dsunit != 0 && cfg.logdev.is_none() {
        // Only an internal log takes the data stripe unit.
        cfg.lsunit = cfg.dsunit;
    }
    if cfg.lsunit * bs > 256 * 1024 {
        if opts.log_su.is_some() || opts.log_sunit.is_some() {
            cfg.warnings.push(format!(
                "log stripe unit ({} bytes) is too large (maximum is 256KiB)\nlog stripe unit adjusted to 32KiB",
                cfg.lsunit * bs
            ));
        }
        cfg.lsunit = (32 * 1024) / bs;
    }
    Ok(())
}

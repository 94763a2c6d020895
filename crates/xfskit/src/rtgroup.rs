//! Realtime groups: the realtime superblock that starts the realtime
//! device, decoded and compared with the primary superblock.
//!
//! Realtime block numbers of a realtime group filesystem are
//! `group << rg_blklog | block in group` ([`Geometry::rtb_split`]); on the
//! device the groups lie end to end ([`Geometry::rtb_to_linear`]).

use crate::dev::Device;
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use std::path::Path;
use xfs_format::rtgroup::{Rtsb, XFS_RTSB_CRC_OFF, XFS_RTSB_MAGIC};
use zerocopy::FromBytes;

/// Reads the realtime superblock (the device's first filesystem block).
pub fn read_rtsb(geo: &Geometry, dev: &dyn Device) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; geo.block_size as usize];
    dev.read_at(&mut buf, 0)?;
    Ok(buf)
}

/// What is wrong with realtime superblock `block` for this filesystem,
/// field by field (empty when it is right).
pub fn rtsb_problems(geo: &Geometry, block: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let Ok((rsb, _)) = Rtsb::ref_from_prefix(block) else {
        return vec!["the block is shorter than a realtime superblock".into()];
    };
    let magic = rsb.rsb_magicnum.get();
    if magic != XFS_RTSB_MAGIC {
        out.push(format!("bad magic {magic:#010x}"));
        return out;
    }
    if !xfs_format::crc::verify(block, XFS_RTSB_CRC_OFF) {
        out.push("bad CRC".into());
    }
    if rsb.rsb_pad.get() != 0 {
        out.push(format!("pad {:#x}, want 0", rsb.rsb_pad.get()));
    }
    if rsb.rsb_uuid.0 != geo.uuid {
        out.push("uuid differs from the superblock's".into());
    }
    if rsb.rsb_meta_uuid.0 != geo.meta_uuid {
        out.push("meta_uuid differs from the superblock's".into());
    }
    let mut label = [0u8; 12];
    label[..geo.label.len()].copy_from_slice(&geo.label);
    if rsb.rsb_fname != label {
        out.push("fname (label) differs from the superblock's".into());
    }
    out
}

/// Refuses a realtime device that does not start with a realtime
/// superblock of this filesystem (its magic and UUID): the wrong device
/// given. Other damage to it is left to `check`.
pub fn require_rtsb(path: &Path, geo: &Geometry, dev: &dyn Device) -> Result<()> {
    let block = read_rtsb(geo, dev).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!(
                "the realtime device {}: realtime superblock: {e}",
                path.display()
            ),
        ))
    })?;
    let rsb = Rtsb::ref_from_prefix(&block).map(|r| r.0).ok();
    let magic = rsb.map(|r| r.rsb_magicnum.get()).unwrap_or(0);
    if magic != XFS_RTSB_MAGIC {
        return Err(Error::Invalid(format!(
            "the realtime device {} does not start with a realtime superblock (magic {magic:#010x} in realtime group 0, block 0): not the realtime device of this filesystem",
            path.display()
        )));
    }
    if rsb.map(|r| r.rsb_uuid.0) != Some(geo.uuid) {
        return Err(Error::Invalid(format!(
            "the realtime device {} belongs to another filesystem (the UUID of its realtime superblock differs)",
            path.display()
        )));
    }
    Ok(())
}

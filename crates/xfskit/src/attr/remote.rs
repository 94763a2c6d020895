//! Remote attribute values: stored in their own attr-fork blocks.
//!
//! On v5 filesystems each filesystem block of a remote value starts with a
//! 56-byte header (magic XARM, byte offset of this piece in the value, bytes
//! of value in this block, CRC, UUID, owner, block number, LSN) followed by
//! that piece of the value. A value of `len` bytes thus takes
//! ceil(len / (block size - 56)) blocks starting at the entry's value block.

use super::leaf::be32;
use super::node::AttrMap;
use super::{loc, XATTR_SIZE_MAX};
use crate::buf::verify::{Verifier, REMOTE_ATTR_MAGIC};
use crate::error::{Error, Result};
use crate::fs::Fs;

/// Size of the per-block remote value header.
pub(crate) const RMT_HDR: usize = 56;
/// Offset of the piece's byte offset in the value (be32).
pub(crate) const RMT_OFFSET: usize = 4;
/// Offset of the piece's length (be32).
pub(crate) const RMT_BYTES: usize = 8;

/// Reads the `len`-byte value starting at attr-fork block `blk`, for the
/// entry found in attr-fork block `entry_dablk`.
pub(crate) fn read_value(
    fs: &Fs,
    ino: u64,
    map: &AttrMap,
    entry_dablk: u64,
    blk: u32,
    len: u32,
) -> Result<Vec<u8>> {
    let bad = |at: u64, d: String| Error::corrupt("remote attribute value", loc(ino, at), d);
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > XATTR_SIZE_MAX {
        return Err(bad(
            entry_dablk,
            format!("value of {len} bytes is larger than the {XATTR_SIZE_MAX}-byte limit"),
        ));
    }
    if blk == 0 {
        return Err(bad(
            entry_dablk,
            "remote value at attr fork block 0 (the root block)".into(),
        ));
    }
    let bsize = fs.geometry().block_size as usize;
    // v4 remote blocks are bare value bytes; v5 ones start with a header.
    let hdr = fs.geometry().layout().remote_hdr;
    let per = bsize.saturating_sub(hdr);
    if per == 0 {
        return Err(bad(
            entry_dablk,
            format!("block size {bsize} cannot hold remote values"),
        ));
    }
    let nblocks = (len as usize).div_ceil(per) as u64;
    // Check the whole run is mapped before allocating anything.
    if nblocks > map.mapped {
        return Err(bad(
            entry_dablk,
            format!(
                "value of {len} bytes needs {nblocks} blocks, the attr fork maps {}",
                map.mapped
            ),
        ));
    }
    let mut daddrs = Vec::with_capacity(nblocks as usize);
    for i in 0..nblocks {
        let dablk = u64::from(blk) + i;
        daddrs.push(map.daddr(fs, dablk).map_err(|d| bad(dablk, d))?);
    }
    let mut value = Vec::with_capacity(len as usize);
    let v = Verifier::Remote {
        magic: REMOTE_ATTR_MAGIC,
        owner: ino,
    };
    for (i, daddr) in daddrs.into_iter().enumerate() {
        let dablk = u64::from(blk) + i as u64;
        let b = fs.read_meta(daddr, fs.geometry().block_size, &v)?;
        if b.len() < hdr + per {
            return Err(bad(dablk, "block shorter than the remote header".into()));
        }
        let want_off = value.len();
        let want_bytes = (len as usize - want_off).min(per);
        if hdr == 0 {
            value.extend_from_slice(&b[..want_bytes]);
            continue;
        }
        let (off, bytes) = (be32(&b, RMT_OFFSET) as usize, be32(&b, RMT_BYTES) as usize);
        if off != want_off || bytes != want_bytes {
            return Err(bad(
                dablk,
                format!("block holds {bytes} bytes at value offset {off}, expected {want_bytes} at {want_off}"),
            ));
        }
        value.extend_from_slice(&b[RMT_HDR..RMT_HDR + bytes]);
    }
    Ok(value)
}

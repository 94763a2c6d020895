//! Symbolic link targets, inline (local) or in remote blocks.
//!
//! A remote target is stored in the data fork's extents in file order. Each
//! extent is one buffer that starts with a 56-byte self-describing header
//! (`xfs_dsymlink_hdr`: magic XSLM, offset of this chunk in the target,
//! bytes in this chunk, CRC, UUID, owner, block number, LSN); the target
//! bytes follow the header.

use crate::buf::verify::{Verifier, REMOTE_SYMLINK_MAGIC};
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::inode::{extents, FileType, Fork, ForkFormat, Inode};

/// Longest symlink target XFS stores.
pub const SYMLINK_MAXLEN: u64 = 1024;
/// Size of the header at the start of each remote symlink extent.
pub const SYMLINK_HDR_SIZE: usize = 56;
/// Offset of the chunk's byte offset in the target (be32).
const HDR_OFFSET: usize = 4;
/// Offset of the chunk's byte count (be32).
const HDR_BYTES: usize = 8;

/// The target of symlink `inode`.
pub fn read_link(fs: &Fs, inode: &Inode) -> Result<Vec<u8>> {
    if inode.file_type != FileType::Symlink {
        return Err(Error::Invalid(format!(
            "inode {} is not a symlink",
            inode.ino.0
        )));
    }
    let ino = inode.ino.0;
    let bad = |offset: u64, d: String| {
        Error::corrupt(
            "symlink",
            Location::InodeBlock {
                ino,
                fork: "data",
                offset,
            },
            d,
        )
    };
    if inode.size == 0 || inode.size > SYMLINK_MAXLEN {
        return Err(bad(0, format!("target length {}", inode.size)));
    }
    let size = inode.size as usize;
    let target = match inode.format {
        ForkFormat::Local => {
            let b = inode
                .data_fork
                .get(..size)
                .ok_or_else(|| bad(0, "target is longer than the data fork".into()))?;
            b.to_vec()
        }
        ForkFormat::Extents | ForkFormat::Btree => {
            let geo = fs.geometry();
            let map = extents(fs, inode, Fork::Data)?;
            let mut out = Vec::with_capacity(size);
            let mut next_fblock = 0u64;
            for e in &map {
                if out.len() >= size {
                    break;
                }
                if e.offset != next_fblock || e.unwritten {
                    return Err(bad(
                        e.offset,
                        "remote target has a hole or unwritten block".into(),
                    ));
                }
                // A target of at most 1 KiB never needs more than two blocks.
                if e.len > 2 {
                    return Err(bad(e.offset, format!("extent of {} blocks", e.len)));
                }
                let len = (e.len as u32) << geo.block_log;
                let daddr = geo.fsb_to_daddr(e.start);
                let buf = fs.read_meta(
                    daddr,
                    len,
                    &Verifier::Remote {
                        magic: REMOTE_SYMLINK_MAGIC,
                        owner: ino,
                    },
                )?;
                // v4 remote blocks hold the bare target; v5 ones a header first.
                let hdr = geo.layout().remote_hdr;
                let want = (len as usize - hdr).min(size - out.len());
                if hdr == 0 {
                    out.extend_from_slice(&buf[..want]);
                    next_fblock = e.end();
                    continue;
                }
                let off = be32(&buf, HDR_OFFSET) as usize;
                let bytes = be32(&buf, HDR_BYTES) as usize;
                if off != out.len() || bytes != want {
                    return Err(bad(
                        e.offset,
                        format!(
                            "header says {bytes} bytes at {off}, expected {want} at {}",
                            out.len()
                        ),
                    ));
                }
                out.extend_from_slice(&buf[SYMLINK_HDR_SIZE..SYMLINK_HDR_SIZE + want]);
                next_fblock = e.end();
            }
            if out.len() != size {
                return Err(bad(
                    next_fblock,
                    format!("remote blocks hold {} of {size} bytes", out.len()),
                ));
            }
            out
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => {
            return Err(bad(0, "symlink with a device fork".into()))
        }
    };
    if target.contains(&0) {
        return Err(bad(0, "target contains NUL".into()));
    }
    Ok(target)
}

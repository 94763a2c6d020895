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
use crate::geometry::Daddr;
use crate::inode::{extents, FileType, Fork, ForkFormat, Inode};
use crate::trans::Trans;
use xfs_format::symlink as xsl;

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

// Writes: a target stored at creation, and moved between the inode and
// remote blocks as the attr fork takes or gives back room.

/// Moves an inline symlink target into a remote block.
pub(crate) fn symlink_to_remote(tp: &mut Trans<'_>, ip: &mut Inode) -> Result<()> {
    if ip.format != ForkFormat::Local {
        return Ok(());
    }
    let size = usize::try_from(ip.size).unwrap_or(usize::MAX);
    let target = ip
        .data_fork
        .get(..size)
        .ok_or_else(|| Error::Invalid(format!("inode {}: symlink longer than its fork", ip.ino.0)))?
        .to_vec();
    write_remote_symlink(tp, ip, &target)
}

/// Moves a remote symlink target back into the inode when it fits the
/// data fork (after its xattrs gave the room back): xfs_repair 6.1 calls a
/// remote target that would fit inline a format mismatch.
pub(crate) fn symlink_to_local(tp: &mut Trans<'_>, ip: &mut Inode) -> Result<()> {
    if ip.file_type != FileType::Symlink || ip.format != ForkFormat::Extents {
        return Ok(());
    }
    let room = if ip.forkoff != 0 {
        usize::from(ip.forkoff) * 8
    } else {
        Inode::literal_size(tp.geo())
    };
    let size = usize::try_from(ip.size).unwrap_or(usize::MAX);
    if size > room {
        return Ok(());
    }
    let target = read_link(tp.fs(), ip)?;
    if target.len() != size {
        return Err(Error::corrupt(
            "symlink",
            Location::Inode(ip.ino.0),
            format!("target of {} bytes, size {size}", target.len()),
        ));
    }
    let blocks = xsl::symlink_blocks(size, tp.geo().block_size as usize) as u64;
    crate::bmap::unmap_range(tp, ip, Fork::Data, 0, blocks)?;
    ip.format = ForkFormat::Local;
    ip.nextents = 0;
    ip.data_fork = target;
    Ok(())
}

/// Stores a symlink target inline when it fits the data fork, else in
/// remote blocks, each extent starting with a self-describing header.
pub(crate) fn write_symlink(tp: &mut Trans<'_>, ip: &mut Inode, target: &[u8]) -> Result<()> {
    let geo = tp.geo();
    ip.size = target.len() as u64;
    let room = if ip.forkoff != 0 {
        usize::from(ip.forkoff) * 8
    } else {
        Inode::literal_size(geo)
    };
    if target.len() <= room {
        ip.format = ForkFormat::Local;
        ip.data_fork = target.to_vec();
        return Ok(());
    }
    write_remote_symlink(tp, ip, target)
}

fn write_remote_symlink(tp: &mut Trans<'_>, ip: &mut Inode, target: &[u8]) -> Result<()> {
    let geo = tp.geo();
    ip.size = target.len() as u64;
    ip.format = ForkFormat::Extents;
    ip.data_fork.clear();
    let bsize = geo.block_size as usize;
    let blocks = xsl::symlink_blocks(target.len(), bsize) as u64;
    let map = crate::bmap::alloc_range(tp, ip, Fork::Data, 0, blocks, false, None)?;
    let mut done = 0usize;
    for e in map {
        if done >= target.len() {
            break;
        }
        let len = (e.len as usize) * bsize;
        let daddr: Daddr = geo.fsb_to_daddr(e.start);
        let id = tp.get_buf(daddr, len as u32, Some(xsl::XFS_SYMLINK_CRC_OFF));
        let chunk = (len - xsl::XFS_SYMLINK_HDR_SIZE).min(target.len() - done);
        let b = tp.buf_mut(id);
        b[0..4].copy_from_slice(&xsl::XFS_SYMLINK_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&(done as u32).to_be_bytes());
        b[8..12].copy_from_slice(&(chunk as u32).to_be_bytes());
        b[16..32].copy_from_slice(&geo.meta_uuid);
        b[32..40].copy_from_slice(&ip.ino.0.to_be_bytes());
        b[40..48].copy_from_slice(&daddr.0.to_be_bytes());
        let h = xsl::XFS_SYMLINK_HDR_SIZE;
        b[h..h + chunk].copy_from_slice(&target[done..done + chunk]);
        done += chunk;
    }
    if done != target.len() {
        return Err(Error::NoSpace(format!(
            "symlink inode {}: mapped blocks hold {done} of {} bytes",
            ip.ino.0,
            target.len()
        )));
    }
    Ok(())
}

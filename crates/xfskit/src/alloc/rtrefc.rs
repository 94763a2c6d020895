//! The realtime refcount btree of a realtime group (`/rtgroups/N.refcount`,
//! realtime groups with reflink): read only. xfskit never shares realtime
//! extents (cloning realtime files is refused), so the tree stays as it
//! is, empty on every filesystem xfskit or mkfs.xfs made. Freeing a
//! realtime extent that it says is shared (a filesystem the kernel
//! cloned realtime files on) is refused, naming the group and block,
//! rather than freeing blocks another file still maps.
//!
//! Records are 12 bytes (start in the group, length, count; a start with
//! bit 31 set is a copy-on-write staging extent, sorted after the
//! shared ones), keys the 4-byte start; the root in the inode is laid
//! out like the rmap btree's, with 4-byte keys.

use crate::btree::{BtreeOps, Cursor, Dir, Shape};
use crate::buf::Verifier;
use crate::bytes::be32;
use crate::error::{Error, Location, Result};
use crate::geometry::{Daddr, FsBlock, Ino};
use crate::inode::ForkFormat;
use crate::trans::Trans;
use std::cmp::Ordering;
use xfs_format::rtgroup::XFS_RTREFC_CRC_MAGIC;

/// Start bit of copy-on-write staging records.
const COW_FLAG: u32 = 1 << 31;

struct RtRefcBt {
    rgno: u32,
    ino: Ino,
    block_size: usize,
}

impl BtreeOps for RtRefcBt {
    fn shape(&self) -> Shape {
        Shape {
            magic: XFS_RTREFC_CRC_MAGIC,
            long_ptrs: true,
            rec_len: 12,
            key_len: 4,
            overlapping: false,
            block_size: self.block_size,
            owner: self.ino.0,
            root_in_inode: true,
        }
    }

    fn root(&self, _tp: &mut Trans<'_>) -> Result<(u64, usize)> {
        Err(read_only())
    }

    fn set_root(&mut self, _tp: &mut Trans<'_>, _ptr: u64, _levels: usize) -> Result<()> {
        Err(read_only())
    }

    fn alloc_block(&mut self, _tp: &mut Trans<'_>, _near: u64) -> Result<u64> {
        Err(read_only())
    }

    fn free_block(&mut self, _tp: &mut Trans<'_>, _ptr: u64) -> Result<()> {
        Err(read_only())
    }

    fn ptr_daddr(&self, tp: &Trans<'_>, ptr: u64) -> Result<Daddr> {
        let geo = tp.geo();
        if !geo.fsb_valid(FsBlock(ptr)) {
            return Err(bad(self.rgno, format!("pointer to block {ptr}")));
        }
        Ok(geo.fsb_to_daddr(FsBlock(ptr)))
    }

    fn verifier(&self, level: u16) -> Verifier<'static> {
        Verifier::MetaBtree {
            magic: XFS_RTREFC_CRC_MAGIC,
            owner: self.ino.0,
            level: Some(level),
        }
    }

    fn key_of_rec(&self, rec: &[u8], key: &mut [u8]) {
        key[..4].copy_from_slice(&rec[..4]);
    }

    fn cmp_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        be32(a, 0).cmp(&be32(b, 0))
    }
}

fn read_only() -> Error {
    Error::Unsupported("xfskit does not change the realtime refcount btree".into())
}

fn bad(rgno: u32, detail: String) -> Error {
    Error::corrupt(
        "realtime refcount btree",
        Location::Other(format!("realtime group {rgno}")),
        detail,
    )
}

/// Refuses to free realtime blocks `rtb..rtb+len` (one group) when the
/// group's refcount btree records any of them as shared. A no-op without
/// realtime groups or reflink, and one inode read when the tree is empty.
pub(crate) fn refuse_shared(tp: &mut Trans<'_>, rtb: u64, len: u64) -> Result<()> {
    let geo = tp.geo();
    if !geo.has_rtgroups() || !geo.features.reflink || len == 0 {
        return Ok(());
    }
    let (rgno, rgbno) = geo.rtb_split(rtb);
    let block_size = geo.block_size as usize;
    let ino = super::rtalloc::rtgroup_file(tp, rgno, "refcount")?;
    let ip = tp.read_inode(ino)?;
    if ip.format != ForkFormat::MetaBtree
        || ip.metatype != xfs_format::inode::XFS_METAFILE_RTREFCOUNT
        || ip.data_fork.len() < 4
    {
        return Err(bad(
            rgno,
            format!("inode {} is not a realtime refcount btree", ino.0),
        ));
    }
    let root = &ip.data_fork;
    if u16::from_be_bytes([root[0], root[1]]) == 0 && u16::from_be_bytes([root[2], root[3]]) == 0 {
        return Ok(());
    }
    let lo = rgbno as u32;
    let hi = rgbno.saturating_add(len).min(u64::from(COW_FLAG)) as u32;
    let mut c = Cursor::with_inode_root(
        RtRefcBt {
            rgno,
            ino,
            block_size,
        },
        root.clone(),
    );
    let mut more =
        c.lookup(tp, &lo.to_be_bytes(), Dir::Le)? || c.lookup(tp, &lo.to_be_bytes(), Dir::Ge)?;
    while more {
        let r = c.get_rec(tp)?;
        let (start, count, refs) = (be32(&r, 0), be32(&r, 4), be32(&r, 8));
        if start >= hi {
            break;
        }
        let end = u64::from(start) + u64::from(count);
        if end > u64::from(lo) && refs > 1 {
            let b = start.max(lo);
            return Err(Error::Unsupported(format!(
                "freeing realtime group {rgno} block {b}: the realtime refcount btree records it as shared by {refs} owners; xfskit does not free shared realtime extents"
            )));
        }
        more = c.increment(tp)?;
    }
    Ok(())
}

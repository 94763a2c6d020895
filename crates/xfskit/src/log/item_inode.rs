//! Inode and inode-chunk log items, as the kernel logs them.
//!
//! An inode item is the 56-byte `xfs_inode_log_format`, the log inode
//! core (the on-disk core in host byte order), then the data fork and the
//! attribute fork when they hold anything: extent records as they lie in
//! the fork, a local fork whole, a btree root in the logged (long block)
//! form, a device number in the format itself. A new full inode chunk is
//! one 28-byte icreate item: recovery initialises the chunk's inodes
//! itself instead of replaying 64 of them.

use super::cil::ClusterGeo;
use super::dinode::{bmdr_to_bmbt_root, disk_to_log_dinode, meta_root_to_log};
use crate::error::{Error, Location, Result};
use crate::geometry::{Geometry, Ino};
use xfs_format::inode::Dinode;
use xfs_format::log_item::{
    IcreateLog, InodeLogFormat, XFS_ILOG_ABROOT, XFS_ILOG_ADATA, XFS_ILOG_AEXT, XFS_ILOG_CORE,
    XFS_ILOG_DBROOT, XFS_ILOG_DDATA, XFS_ILOG_DEV, XFS_ILOG_DEXT, XFS_LI_ICREATE, XFS_LI_INODE,
};
use xfs_format::types::Uuid;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Size of the v3 inode core.
const CORE: usize = 176;
/// Bytes of one extent record.
const REC: usize = 16;

/// A new inode chunk whose inodes recovery initialises itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Icreate {
    pub agno: u32,
    pub agbno: u32,
    pub count: u32,
    pub length: u32,
    pub gen: u32,
}

/// The icreate item's one region.
pub(crate) fn icreate_region(geo: &Geometry, c: &Icreate) -> Vec<u8> {
    let mut l = IcreateLog::new_zeroed();
    l.icl_type.set(XFS_LI_ICREATE);
    l.icl_size.set(1);
    l.icl_ag.set(c.agno);
    l.icl_agbno.set(c.agbno);
    l.icl_count.set(c.count);
    l.icl_isize.set(geo.inode_size);
    l.icl_length.set(c.length);
    l.icl_gen.set(c.gen);
    l.as_bytes().to_vec()
}

/// One fork's part of an inode item: its flag and region. A local fork
/// logs the bytes in use (`used`: the short-form directory's or symlink's
/// size, the short-form attribute list's total size), rounded up to four
/// bytes, as the kernel logs its in-memory fork.
fn fork(
    format: u8,
    area: &[u8],
    (nextents, used): (u64, usize),
    flags: [u32; 3],
    (ino, metatype): (u64, u16),
    uuid: &Uuid,
) -> Result<Option<(u32, Vec<u8>)>> {
    let [data, ext, broot] = flags;
    Ok(match format {
        1 => {
            let len = used.next_multiple_of(4).min(area.len());
            Some((data, area[..len].to_vec()))
        }
        2 => {
            let n = usize::try_from(nextents).unwrap_or(usize::MAX);
            let len = n.saturating_mul(REC);
            if len > area.len() {
                return Err(Error::corrupt(
                    "inode",
                    Location::Inode(ino),
                    format!("{n} extents do not fit the fork"),
                ));
            }
            (len > 0).then(|| (ext, area[..len].to_vec()))
        }
        3 => Some((broot, bmdr_to_bmbt_root(area, ino, uuid)?)),
        5 => Some((broot, meta_root_to_log(area, metatype, ino, uuid)?)),
        _ => None,
    })
}

/// An inode item's regions and its cluster buffer (byte offset, bytes).
pub(crate) type InodeItem = (Vec<Vec<u8>>, (u64, u32));

/// The regions of the inode item for inode `ino` whose on-disk bytes are
/// `raw` (CRC stamped), and its cluster buffer.
pub(crate) fn inode_regions(
    geo: &Geometry,
    cg: &ClusterGeo,
    ino: Ino,
    raw: &[u8],
) -> Result<InodeItem> {
    let (d, _) = Dinode::read_from_prefix(raw)
        .map_err(|_| Error::corrupt("inode", Location::Inode(ino.0), "shorter than its core"))?;
    let (coff, clen) = cg.cluster_of(geo, ino)?;
    let isize = raw.len();
    let uuid = Uuid(geo.meta_uuid);
    let mut f = InodeLogFormat::new_zeroed();
    f.ilf_type.set(XFS_LI_INODE);
    f.ilf_ino.set(ino.0);
    f.ilf_blkno.set((coff / 512) as i64);
    f.ilf_len.set((clen / 512) as i32);
    f.ilf_boffset.set((geo.ino_to_bytes(ino) - coff) as i32);
    let mut fields = XFS_ILOG_CORE;
    let dsize = d.data_fork_size(isize).min(isize.saturating_sub(CORE));
    let darea = &raw[CORE..CORE + dsize];
    let mut regions = vec![Vec::new(), disk_to_log_dinode(&d, 0).as_bytes().to_vec()];
    if d.di_format == 0 {
        if let Some(rdev) = xfs_format::inode::read_rdev(darea) {
            fields |= XFS_ILOG_DEV;
            f.ilf_u[..4].copy_from_slice(&rdev.to_le_bytes());
        }
    } else if let Some((flag, r)) = fork(
        d.di_format,
        darea,
        (
            d.nextents(),
            usize::try_from(d.di_size.get()).unwrap_or(usize::MAX),
        ),
        [XFS_ILOG_DDATA, XFS_ILOG_DEXT, XFS_ILOG_DBROOT],
        (ino.0, d.di_onlink.get()),
        &uuid,
    )? {
        fields |= flag;
        f.ilf_dsize.set(r.len() as u16);
        regions.push(r);
    }
    if let Some(aoff) = d.attr_fork_offset() {
        let asize = d.attr_fork_size(isize);
        if aoff + asize <= isize {
            let area = &raw[aoff..aoff + asize];
            // A short-form attribute list starts with its total size.
            let used = area.get(..2).map_or(area.len(), |b| {
                usize::from(u16::from_be_bytes([b[0], b[1]]))
            });
            if let Some((flag, r)) = fork(
                d.di_aformat,
                area,
                (u64::from(d.anextents()), used),
                [XFS_ILOG_ADATA, XFS_ILOG_AEXT, XFS_ILOG_ABROOT],
                (ino.0, 0),
                &uuid,
            )? {
                fields |= flag;
                f.ilf_asize.set(r.len() as u16);
                regions.push(r);
            }
        }
    }
    f.ilf_fields.set(fields);
    f.ilf_size.set(regions.len() as u16);
    regions[0] = f.as_bytes().to_vec();
    Ok((regions, (coff, clen)))
}

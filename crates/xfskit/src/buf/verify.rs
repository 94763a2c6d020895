//! Verifiers for every kind of metadata block, like libxfs buffer ops:
//! on read, the CRC first, then the self-describing header (magic, block
//! number, filesystem UUID, owner), then the structure.

use crate::bytes::{be16, be32, be64};
use crate::error::{Error, Location, Result};
use crate::geometry::{Daddr, Geometry};
use xfs_format::ag as xag;
use xfs_format::btree as xbt;

/// Which structure a block must be, with what is known about it before
/// reading (its AG, owner inode, btree level).
#[derive(Debug, Clone)]
pub enum Verifier<'a> {
    /// AG free space header of AG `agno`.
    Agf { agno: u32 },
    /// AG inode header of AG `agno`.
    Agi { agno: u32 },
    /// AG free list of AG `agno`.
    Agfl { agno: u32 },
    /// A short-pointer btree block (free space, inode, rmap, refcount) in AG `agno`.
    ShortBtree {
        magic: u32,
        agno: u32,
        level: Option<u16>,
    },
    /// A bmbt block owned by inode `owner`.
    Bmbt { owner: u64, level: Option<u16> },
    /// A block of an inode-rooted metadata btree (the realtime rmap
    /// btree, magic `MAPR`) owned by inode `owner`: the bmbt's header.
    MetaBtree {
        magic: u32,
        owner: u64,
        level: Option<u16>,
    },
    /// A v3 directory/attr block with a 32-bit magic at 0 (XDB3, XDD3, XDF3) owned by `owner`.
    Dir3 { magics: &'a [u32], owner: u64 },
    /// A da-btree style block (da node, dir leaf, attr leaf): 16-bit magic at 8.
    Da3 { magics: &'a [u16], owner: u64 },
    /// A remote attribute value block (XARM) or remote symlink block (XSLM).
    Remote { magic: u32, owner: u64 },
}

/// Where the self-describing fields of a block type live.
struct Ident {
    crc: usize,
    blkno: usize,
    uuid: usize,
    owner: Option<(usize, u8)>,
}

impl Verifier<'_> {
    /// Name of the structure, for errors.
    pub fn what(&self) -> &'static str {
        match self {
            Verifier::Agf { .. } => "AGF",
            Verifier::Agi { .. } => "AGI",
            Verifier::Agfl { .. } => "AGFL",
            Verifier::ShortBtree { magic, .. } => match *magic {
                xbt::XFS_ABTB_CRC_MAGIC => "bnobt block",
                xbt::XFS_ABTC_CRC_MAGIC => "cntbt block",
                xbt::XFS_IBT_CRC_MAGIC => "inobt block",
                xbt::XFS_FIBT_CRC_MAGIC => "finobt block",
                xbt::XFS_RMAP_CRC_MAGIC => "rmapbt block",
                xbt::XFS_REFC_CRC_MAGIC => "refcountbt block",
                _ => "btree block",
            },
            Verifier::Bmbt { .. } => "bmbt block",
            Verifier::MetaBtree { magic, .. } => match *magic {
                xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC => "realtime rmap btree block",
                _ => "realtime refcount btree block",
            },
            Verifier::Dir3 { .. } => "directory block",
            Verifier::Da3 { .. } => "dir/attr btree block",
            Verifier::Remote { magic, .. } => {
                if *magic == REMOTE_SYMLINK_MAGIC {
                    "remote symlink block"
                } else {
                    "remote attribute value block"
                }
            }
        }
    }

    /// Where a block of this kind keeps its CRC (stamped again when a
    /// transaction changes the block).
    pub fn crc_offset(&self) -> Option<usize> {
        match self {
            // Remote blocks carry one header per filesystem block; their
            // writers stamp each one.
            Verifier::Remote { .. } => None,
            _ => Some(self.ident().crc),
        }
    }

    /// Where a block of this kind keeps the LSN of its last write, for the
    /// kinds whose read verifiers compare it with the log's head (kernel
    /// and libxfs: AG headers, btree blocks, directory, dir/attr btree and
    /// remote symlink blocks; not remote attribute values, whose LSN is
    /// never stamped).
    pub fn lsn_offset(&self) -> Option<usize> {
        Some(match self {
            Verifier::Agf { .. } => xag::XFS_AGF_LSN_OFF,
            Verifier::Agi { .. } => xag::XFS_AGI_LSN_OFF,
            Verifier::Agfl { .. } => xag::XFS_AGFL_LSN_OFF,
            Verifier::ShortBtree { .. } => xbt::XFS_BTREE_SBLOCK_LSN_OFF,
            Verifier::Bmbt { .. } | Verifier::MetaBtree { .. } => xbt::XFS_BTREE_LBLOCK_LSN_OFF,
            Verifier::Dir3 { .. } => xfs_format::dir::block::XFS_DIR3_DATA_LSN_OFF,
            Verifier::Da3 { .. } => xfs_format::da::XFS_DA3_LSN_OFF,
            Verifier::Remote { magic, .. } if *magic == REMOTE_SYMLINK_MAGIC => {
                xfs_format::symlink::XFS_SYMLINK_LSN_OFF
            }
            Verifier::Remote { .. } => return None,
        })
    }

    /// The LSN of a block of a kind that carries one (see
    /// [`Verifier::lsn_offset`]) when it is at or past `head` (the log
    /// head, `cycle << 32 | block`), with where the block is: its inode
    /// named for blocks an inode owns.
    pub fn lsn_ahead(
        &self,
        geo: &Geometry,
        daddr: Daddr,
        buf: &[u8],
        head: u64,
    ) -> Option<(u64, Location)> {
        if !geo.v5 {
            return None;
        }
        let off = self.lsn_offset()?;
        if buf.len() < off + 8 {
            return None;
        }
        let lsn = be64(buf, off);
        if !lsn_at_or_past(lsn, head) {
            return None;
        }
        let location = match self {
            Verifier::Bmbt { owner, .. }
            | Verifier::MetaBtree { owner, .. }
            | Verifier::Dir3 { owner, .. }
            | Verifier::Da3 { owner, .. }
            | Verifier::Remote { owner, .. } => {
                Location::Other(format!("daddr {} of inode {owner}", daddr.0))
            }
            _ => self.location(geo, daddr),
        };
        Some((lsn, location))
    }

    fn ident(&self) -> Ident {
        match self {
            Verifier::Agf { .. } => Ident {
                crc: xag::XFS_AGF_CRC_OFF,
                blkno: usize::MAX,
                uuid: 64,
                owner: None,
            },
            Verifier::Agi { .. } => Ident {
                crc: xag::XFS_AGI_CRC_OFF,
                blkno: usize::MAX,
                uuid: 296,
                owner: None,
            },
            Verifier::Agfl { .. } => Ident {
                crc: xag::XFS_AGFL_CRC_OFF,
                blkno: usize::MAX,
                uuid: 8,
                owner: None,
            },
            Verifier::ShortBtree { .. } => Ident {
                crc: xbt::XFS_BTREE_SBLOCK_CRC_OFF,
                blkno: 16,
                uuid: 32,
                owner: Some((48, 4)),
            },
            Verifier::Bmbt { .. } | Verifier::MetaBtree { .. } => Ident {
                crc: xbt::XFS_BTREE_LBLOCK_CRC_OFF,
                blkno: 24,
                uuid: 40,
                owner: Some((56, 8)),
            },
            Verifier::Dir3 { .. } => Ident {
                crc: 4,
                blkno: 8,
                uuid: 24,
                owner: Some((40, 8)),
            },
            Verifier::Da3 { .. } => Ident {
                crc: 12,
                blkno: 16,
                uuid: 32,
                owner: Some((48, 8)),
            },
            Verifier::Remote { .. } => Ident {
                crc: 12,
                blkno: 40,
                uuid: 16,
                owner: Some((32, 8)),
            },
        }
    }

    fn location(&self, geo: &Geometry, daddr: Daddr) -> Location {
        match self {
            Verifier::Agf { agno } | Verifier::Agi { agno } | Verifier::Agfl { agno } => {
                Location::Other(format!(
                    "AG {agno} sector {}",
                    daddr.0
                        - geo
                            .agb_to_daddr(
                                crate::geometry::AgNumber(*agno),
                                crate::geometry::AgBlock(0)
                            )
                            .0
                ))
            }
            Verifier::ShortBtree { agno, .. } => {
                let ag0 = geo
                    .agb_to_daddr(
                        crate::geometry::AgNumber(*agno),
                        crate::geometry::AgBlock(0),
                    )
                    .0;
                let agbno = (daddr.0.saturating_sub(ag0)) >> (geo.block_log - 9);
                Location::AgBlock {
                    agno: *agno,
                    agbno: agbno as u32,
                }
            }
            _ => Location::Daddr(daddr.0),
        }
    }

    /// Full check of a freshly read block: CRC, then structure.
    pub fn check(&self, geo: &Geometry, daddr: Daddr, buf: &[u8]) -> Result<()> {
        if !geo.v5 {
            return self.check_structure(geo, daddr, buf);
        }
        let id = self.ident();
        if buf.len() < id.crc + 4 || !xfs_format::crc::verify(buf, id.crc) {
            // A wrong magic is the more useful diagnosis (wrong block type).
            self.check_magic(geo, daddr, buf)?;
            return Err(Error::BadCrc {
                what: self.what(),
                location: self.location(geo, daddr),
            });
        }
        self.check_structure(geo, daddr, buf)
    }

    fn corrupt(&self, geo: &Geometry, daddr: Daddr, detail: String) -> Error {
        Error::Corrupt {
            what: self.what(),
            location: self.location(geo, daddr),
            detail,
        }
    }

    fn check_magic(&self, geo: &Geometry, daddr: Daddr, buf: &[u8]) -> Result<()> {
        if buf.len() < 64 {
            return Err(self.corrupt(geo, daddr, "block too short".into()));
        }
        // Callers name v5 magics; a v4 filesystem has their v4 twins.
        let l = geo.layout();
        let ok = match self {
            Verifier::Agf { .. } => be32(buf, 0) == xag::XFS_AGF_MAGIC,
            Verifier::Agi { .. } => be32(buf, 0) == xag::XFS_AGI_MAGIC,
            // A v4 AGFL is a bare array of block numbers: nothing to check.
            Verifier::Agfl { .. } => !geo.v5 || be32(buf, 0) == xag::XFS_AGFL_MAGIC,
            Verifier::ShortBtree { magic, .. } => be32(buf, 0) == l.btree_magic(*magic),
            Verifier::Bmbt { .. } => be32(buf, 0) == l.bmap_magic,
            Verifier::MetaBtree { magic, .. } => be32(buf, 0) == *magic,
            Verifier::Dir3 { magics, .. } => magics.iter().any(|&m| l.magic32(m) == be32(buf, 0)),
            Verifier::Da3 { magics, .. } => magics.iter().any(|&m| l.magic16(m) == be16(buf, 8)),
            // v4 remote blocks are bare data.
            Verifier::Remote { magic, .. } => !geo.v5 || be32(buf, 0) == *magic,
        };
        if !ok {
            return Err(self.corrupt(geo, daddr, format!("bad magic {:#010x}", be32(buf, 0))));
        }
        Ok(())
    }

    /// Checks magic, identity (block number, UUID, owner) and header sanity,
    /// without the CRC.
    pub fn check_structure(&self, geo: &Geometry, daddr: Daddr, buf: &[u8]) -> Result<()> {
        self.check_magic(geo, daddr, buf)?;
        if !geo.v5 {
            return self.check_v4(geo, daddr, buf);
        }
        let id = self.ident();
        if buf[id.uuid..id.uuid + 16] != geo.meta_uuid {
            return Err(self.corrupt(geo, daddr, "UUID does not match the filesystem".into()));
        }
        if id.blkno != usize::MAX && be64(buf, id.blkno) != daddr.0 {
            return Err(self.corrupt(
                geo,
                daddr,
                format!("block says it is at daddr {}", be64(buf, id.blkno)),
            ));
        }
        let owner = match id.owner {
            Some((o, 4)) => Some(u64::from(be32(buf, o))),
            Some((o, _)) => Some(be64(buf, o)),
            None => None,
        };
        let want_owner = match self {
            Verifier::ShortBtree { agno, .. } => Some(u64::from(*agno)),
            Verifier::Bmbt { owner, .. }
            | Verifier::MetaBtree { owner, .. }
            | Verifier::Dir3 { owner, .. }
            | Verifier::Da3 { owner, .. }
            | Verifier::Remote { owner, .. } => Some(*owner),
            _ => None,
        };
        if owner != want_owner {
            return Err(self.corrupt(
                geo,
                daddr,
                format!(
                    "owner {} instead of {}",
                    owner.unwrap_or(0),
                    want_owner.unwrap_or(0)
                ),
            ));
        }
        self.check_header(geo, daddr, buf)
    }

    /// The checks of a v4 block: no CRC, block number, UUID or owner to
    /// compare, so only the header's own sanity.
    fn check_v4(&self, geo: &Geometry, daddr: Daddr, buf: &[u8]) -> Result<()> {
        match self {
            Verifier::Agfl { .. } | Verifier::Remote { .. } => Ok(()),
            _ => self.check_header(geo, daddr, buf),
        }
    }

    fn check_header(&self, geo: &Geometry, daddr: Daddr, buf: &[u8]) -> Result<()> {
        match self {
            Verifier::Agf { agno } | Verifier::Agi { agno } => {
                if be32(buf, 4) != 1 || be32(buf, 8) != *agno {
                    return Err(self.corrupt(
                        geo,
                        daddr,
                        format!("version {} / seqno {}", be32(buf, 4), be32(buf, 8)),
                    ));
                }
                let len = be32(buf, 12);
                if len != geo.ag_len(crate::geometry::AgNumber(*agno)) {
                    return Err(self.corrupt(geo, daddr, format!("AG length {len}")));
                }
            }
            Verifier::Agfl { agno } if be32(buf, 4) != *agno => {
                return Err(self.corrupt(geo, daddr, format!("seqno {}", be32(buf, 4))));
            }
            Verifier::ShortBtree { level, .. }
            | Verifier::Bmbt { level, .. }
            | Verifier::MetaBtree { level, .. } => {
                let lvl = be16(buf, 4);
                if level.is_some_and(|l| l != lvl) || lvl > 20 {
                    return Err(self.corrupt(
                        geo,
                        daddr,
                        format!("level {lvl}, expected {}", level.unwrap_or(0)),
                    ));
                }
                let numrecs = usize::from(be16(buf, 6));
                let (hdr, rec, key, ptr) = match self {
                    Verifier::Bmbt { .. } => (geo.layout().lblock_hdr, 16, 8, 8),
                    Verifier::MetaBtree { magic, .. } => {
                        if *magic == xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC {
                            (geo.layout().lblock_hdr, 24, 40, 8)
                        } else {
                            (geo.layout().lblock_hdr, 12, 4, 8)
                        }
                    }
                    Verifier::ShortBtree { magic, .. } => {
                        let (_, rec, key, ptr) = short_btree_sizes(*magic);
                        (geo.layout().sblock_hdr, rec, key, ptr)
                    }
                    _ => unreachable_sizes(),
                };
                let per = if lvl == 0 { rec } else { key + ptr };
                let maxrecs = (buf.len() - hdr) / per;
                if numrecs > maxrecs || (numrecs == 0 && lvl > 0) {
                    return Err(self.corrupt(
                        geo,
                        daddr,
                        format!("{numrecs} records (at most {maxrecs})"),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// XSLM: remote symlink block magic.
pub const REMOTE_SYMLINK_MAGIC: u32 = xfs_format::symlink::XFS_SYMLINK_MAGIC;
/// XARM: remote attribute value block magic.
pub const REMOTE_ATTR_MAGIC: u32 = xfs_format::attr::XFS_ATTR3_RMT_MAGIC;

/// True when metadata stamped `lsn` was written at or after the log head
/// `head` (both `cycle << 32 | block`), by libxfs's signed comparison;
/// the LSN -1 means never logged.
pub fn lsn_at_or_past(lsn: u64, head: u64) -> bool {
    if lsn == u64::MAX {
        return false;
    }
    let (c, b) = ((lsn >> 32) as i32, lsn as u32 as i32);
    let (hc, hb) = ((head >> 32) as i32, head as u32 as i32);
    c > hc || (c == hc && b >= hb)
}

/// Header, record, key and pointer sizes of the short-pointer btrees.
pub fn short_btree_sizes(magic: u32) -> (usize, usize, usize, usize) {
    match magic {
        xbt::XFS_RMAP_CRC_MAGIC => (56, 24, 40, 4),
        xbt::XFS_IBT_CRC_MAGIC | xbt::XFS_FIBT_CRC_MAGIC => (56, 16, 4, 4),
        xbt::XFS_REFC_CRC_MAGIC => (56, 12, 4, 4),
        _ => (56, 8, 8, 4),
    }
}

fn unreachable_sizes() -> (usize, usize, usize, usize) {
    (56, 8, 8, 4)
}

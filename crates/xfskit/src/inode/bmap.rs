//! Fork mappings: the extent list of a data or attr fork, in extents or
//! btree (bmbt) format.

use super::{ForkFormat, Inode};
use crate::buf::verify::Verifier;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::FsBlock;
use xfs_format::types::BmbtIrec;

/// Which fork of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fork {
    /// File contents, directory blocks, symlink target.
    Data,
    /// Extended attributes.
    Attr,
}

impl Fork {
    /// Name used in error locations.
    pub fn name(self) -> &'static str {
        match self {
            Fork::Data => "data",
            Fork::Attr => "attr",
        }
    }
}

/// One mapping of file blocks to filesystem blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First file block (in filesystem blocks).
    pub offset: u64,
    /// First filesystem block, AG-encoded.
    pub start: FsBlock,
    /// Length in blocks.
    pub len: u64,
    /// Preallocated, reads as zeros.
    pub unwritten: bool,
}

impl Extent {
    /// One past the last file block.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Size of one packed extent record.
pub(crate) const REC_SIZE: usize = 16;
/// Size of the in-inode btree root header (level, numrecs).
pub(crate) const BMDR_HDR: usize = 4;
/// Size of a v5 long-pointer btree block header.
pub(crate) const BMBT_HDR: usize = 72;

/// Unpacks one 16-byte extent record.
pub(crate) fn decode_rec(b: &[u8]) -> BmbtIrec {
    let l0 = u64::from_be_bytes(b[0..8].try_into().unwrap_or([0; 8]));
    let l1 = u64::from_be_bytes(b[8..16].try_into().unwrap_or([0; 8]));
    BmbtIrec::unpack(l0, l1)
}

struct Collector<'a> {
    fs: &'a Fs,
    ino: u64,
    fork: Fork,
    /// Where each extent goes, in file offset order.
    sink: &'a mut dyn FnMut(&Extent) -> Result<()>,
    /// Extents handed to the sink so far, and where the last one ended.
    count: u64,
    last_end: Option<u64>,
    /// Extent records the inode claims; we never collect more.
    limit: u64,
    /// The data fork of a realtime file: records map realtime blocks.
    realtime: bool,
    blocks_left: u64,
}

impl Collector<'_> {
    fn corrupt(&self, detail: String) -> Error {
        Error::corrupt(
            "extent map",
            Location::InodeBlock {
                ino: self.ino,
                fork: self.fork.name(),
                offset: 0,
            },
            detail,
        )
    }

    fn push_records(&mut self, recs: &[u8], n: usize) -> Result<()> {
        let geo = self.fs.geometry();
        for i in 0..n {
            let r = decode_rec(&recs[i * REC_SIZE..(i + 1) * REC_SIZE]);
            if self.count >= self.limit {
                return Err(self.corrupt(format!(
                    "more extent records than the {} the inode counts",
                    self.limit
                )));
            }
            if r.blockcount == 0 {
                return Err(
                    self.corrupt(format!("zero-length extent at file block {}", r.startoff))
                );
            }
            if self.realtime {
                // A realtime file's data lives on the realtime device:
                // realtime blocks (group-encoded with realtime groups).
                if !geo.rtb_range_valid(r.startblock, r.blockcount) {
                    let (rgno, rgbno) = geo.rtb_split(r.startblock);
                    let group = if geo.has_rtgroups() {
                        format!(" (realtime group {rgno} block {rgbno})")
                    } else {
                        String::new()
                    };
                    return Err(self.corrupt(format!(
                        "extent at file block {} maps {} blocks at realtime block {}{group} outside the realtime section ({} blocks)",
                        r.startoff, r.blockcount, r.startblock, geo.rt_blocks
                    )));
                }
            } else if !geo.fsb_range_valid(FsBlock(r.startblock), r.blockcount) {
                return Err(self.corrupt(format!(
                    "extent at file block {} maps {} blocks at fs block {} outside the data section",
                    r.startoff, r.blockcount, r.startblock
                )));
            }
            if let Some(end) = self.last_end {
                if r.startoff < end {
                    return Err(self.corrupt(format!(
                        "extent at file block {} overlaps or precedes the one ending at {end}",
                        r.startoff,
                    )));
                }
            }
            let e = Extent {
                offset: r.startoff,
                start: FsBlock(r.startblock),
                len: r.blockcount,
                unwritten: r.unwritten,
            };
            self.count += 1;
            self.last_end = Some(e.end());
            (self.sink)(&e)?;
        }
        Ok(())
    }

    /// Visits the subtree under the bmbt block at `fsb`, expected at `level`.
    fn visit(&mut self, fsb: u64, level: u16) -> Result<()> {
        let geo = self.fs.geometry();
        if self.blocks_left == 0 {
            return Err(
                self.corrupt("the btree has more blocks than the inode accounts for".into())
            );
        }
        self.blocks_left -= 1;
        if !geo.fsb_valid(FsBlock(fsb)) {
            return Err(self.corrupt(format!(
                "btree pointer to fs block {fsb} outside the data section"
            )));
        }
        let daddr = geo.fsb_to_daddr(FsBlock(fsb));
        let v = Verifier::Bmbt {
            owner: self.ino,
            level: Some(level),
        };
        let blk = self.fs.read_meta(daddr, geo.block_size, &v)?;
        let numrecs = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
        let body = &blk[geo.layout().lblock_hdr..];
        if level == 0 {
            return self.push_records(body, numrecs);
        }
        let maxrecs = body.len() / 16;
        let ptrs = &body[maxrecs * 8..];
        for i in 0..numrecs {
            let p = u64::from_be_bytes(ptrs[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            self.visit(p, level - 1)?;
        }
        Ok(())
    }
}

/// Reads the whole extent map of a fork, checked: records in order, no
/// overlap, inside the data section, no more than the inode's count.
pub fn extents(fs: &Fs, inode: &Inode, fork: Fork) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    for_each_extent(fs, inode, fork, &mut |e| {
        out.push(*e);
        Ok(())
    })?;
    Ok(out)
}

/// Hands every extent of a fork to `f` in file offset order, checked as
/// [`extents`] checks them, holding one btree block per level, never the
/// whole map.
pub fn for_each_extent(
    fs: &Fs,
    inode: &Inode,
    fork: Fork,
    f: &mut dyn FnMut(&Extent) -> Result<()>,
) -> Result<()> {
    let (bytes, format, count) = match fork {
        Fork::Data => (&inode.data_fork, inode.format, inode.nextents),
        Fork::Attr => (&inode.attr_fork, inode.aformat, u64::from(inode.anextents)),
    };
    let mut c = Collector {
        fs,
        ino: inode.ino.0,
        fork,
        sink: f,
        count: 0,
        last_end: None,
        limit: count,
        realtime: fork == Fork::Data && inode.is_realtime(),
        blocks_left: inode.nblocks.saturating_add(1),
    };
    match format {
        ForkFormat::Extents => {
            let fit = bytes.len() / REC_SIZE;
            if count > fit as u64 {
                return Err(c.corrupt(format!(
                    "{count} extents do not fit in a {}-byte fork",
                    bytes.len()
                )));
            }
            c.push_records(bytes, count as usize)?;
        }
        ForkFormat::Btree => {
            if bytes.len() < BMDR_HDR {
                return Err(c.corrupt("btree root does not fit in the fork".into()));
            }
            let level = u16::from_be_bytes([bytes[0], bytes[1]]);
            let numrecs = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
            let maxrecs = (bytes.len() - BMDR_HDR) / 16;
            if level == 0 || level > 9 || numrecs == 0 || numrecs > maxrecs {
                return Err(c.corrupt(format!(
                    "btree root with level {level} and {numrecs} records"
                )));
            }
            let ptrs = &bytes[BMDR_HDR + maxrecs * 8..];
            for i in 0..numrecs {
                let p = u64::from_be_bytes(ptrs[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
                c.visit(p, level - 1)?;
            }
            if c.count != count {
                return Err(c.corrupt(format!(
                    "btree holds {} extents, the inode counts {count}",
                    c.count
                )));
            }
        }
        ForkFormat::Local | ForkFormat::Dev | ForkFormat::MetaBtree => {}
    }
    Ok(())
}

/// Finds the extent covering file block `fblock`, or the hole length up to
/// the next extent (`None` with the next extent's offset).
pub fn lookup(map: &[Extent], fblock: u64) -> std::result::Result<&Extent, Option<u64>> {
    let idx = map.partition_point(|e| e.end() <= fblock);
    match map.get(idx) {
        Some(e) if e.offset <= fblock => Ok(e),
        Some(e) => Err(Some(e.offset)),
        None => Err(None),
    }
}

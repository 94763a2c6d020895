//! Realtime groups (`-m metadir=1 -r rtdev=FILE[,rgcount=|rgsize=]`): the
//! group size and count mkfs.xfs 6.15 chooses, and the per-group metadata
//! files under `/rtgroups` (`N.bitmap`, `N.summary`, and `N.rmap`,
//! `N.refcount` with the reverse-mapping and reflink btrees) with their
//! inodes in the `rtgroups` directory's chunk and their blocks near them.
//!
//! Each group's bitmap and summary blocks start with a self-describing
//! header (magic, CRC, owner, disk address, LSN, UUID) followed by
//! big-endian 32-bit words. A fresh section is free but for the first
//! realtime extent of group 0, which holds the realtime superblock.

use xfs_format::crc::stamp;
use xfs_format::rtgroup::{
    RtbufBlkinfo, Rtsb, XFS_RTBITMAP_MAGIC, XFS_RTBUF_CRC_OFF, XFS_RTBUF_HDR_SIZE,
    XFS_RTSB_CRC_OFF, XFS_RTSB_MAGIC, XFS_RTSUMMARY_MAGIC,
};
use xfs_format::types::Uuid;
use zerocopy::{FromZeros, IntoBytes};

use super::geometry::MkfsGeometry;
use super::layout::{highbit, log2_roundup, mib_blocks, tib_blocks};
use super::options::{convert_size, MkfsError, MkfsOptions};

/// Largest realtime group in blocks (the top bit of a group block number
/// stays clear).
const MAX_RGBLOCKS: u64 = (1 << 31) - 1;
/// Largest realtime group count.
const MAX_RGNUMBER: u64 = u32::MAX as u64;

/// What a per-group metadata file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RgFileKind {
    /// `N.bitmap`: one bit per realtime extent of the group.
    Bitmap,
    /// `N.summary`: free runs by size and bitmap block.
    Summary,
    /// `N.rmap`: the group's reverse-mapping btree, rooted in the inode.
    Rmap,
    /// `N.refcount`: the group's reference count btree, rooted in the inode.
    Refcount,
}

impl RgFileKind {
    /// The name suffix under `/rtgroups`.
    pub fn suffix(self) -> &'static str {
        match self {
            RgFileKind::Bitmap => "bitmap",
            RgFileKind::Summary => "summary",
            RgFileKind::Rmap => "rmap",
            RgFileKind::Refcount => "refcount",
        }
    }
}

/// One metadata file of one realtime group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgFile {
    /// The group.
    pub rgno: u32,
    /// Which file.
    pub kind: RgFileKind,
    /// Its inode (in the `rtgroups` directory's chunk).
    pub ino: u64,
    /// Its blocks in the chunk's AG: (first AG block, blocks), file order.
    pub extents: Vec<(u32, u32)>,
}

/// The realtime groups of a fresh filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtgLayout {
    /// sb_rgcount.
    pub rgcount: u32,
    /// Blocks in a full group (the last may be shorter).
    pub rgblocks: u64,
    /// The per-group files, in the order mkfs.xfs creates them.
    pub files: Vec<RgFile>,
}

fn geom(msg: String) -> MkfsError {
    MkfsError::Geometry(msg)
}

/// The largest `l` with `1 << l` strictly below `v` (`v` > 1).
fn log2_rounddown(v: u64) -> u32 {
    highbit(v - 1)
}

/// The group size mkfs.xfs starts from: the whole section under 128 MiB,
/// a quarter of it (rounded up) up to 4 TiB, the largest group above.
fn default_rgsize(blocklog: u32, rblocks: u64) -> u64 {
    if rblocks >= tib_blocks(4, blocklog) {
        return MAX_RGBLOCKS;
    }
    let shift = if rblocks >= mib_blocks(128, blocklog) {
        2
    } else {
        0
    };
    let mut blocks = rblocks >> shift;
    if rblocks & ((1 << shift) - 1) != 0 && blocks < MAX_RGBLOCKS {
        blocks += 1;
    }
    blocks
}

/// A group size that leaves the last group at least two extents: tried in
/// `steps` from `start` up, then down.
fn first_fit(
    rblocks: u64,
    rext: u64,
    start: u64,
    up: &dyn Fn(u64) -> u64,
    down: &dyn Fn(u64) -> u64,
) -> Option<u64> {
    let fits = |s: u64| s != 0 && rblocks % s >= 2 * rext;
    let mut s = start;
    while s != 0 && s <= MAX_RGBLOCKS - rext {
        if fits(s) {
            return Some(s);
        }
        s = up(s);
    }
    let mut s = start;
    while s > 2 * rext {
        if fits(s) {
            return Some(s);
        }
        s = down(s);
    }
    None
}

/// The default group size for a power-of-two extent size: a power of two
/// below the default, stepped by factors of four, then by extents.
fn rgsize_power(blocklog: u32, rblocks: u64, rext: u64) -> Option<u64> {
    let d = default_rgsize(blocklog, rblocks);
    let start = MAX_RGBLOCKS.min(1u64 << log2_rounddown(d.max(2)));
    first_fit(rblocks, rext, start, &|s| s << 2, &|s| s >> 2)
        .or_else(|| first_fit(rblocks, rext, start, &|s| s + rext, &|s| s - rext))
}

/// The default group size for other extent sizes: the default rounded
/// down to whole extents, stepped by extents.
fn rgsize_nonpower(blocklog: u32, rblocks: u64, rext: u64) -> Option<u64> {
    let mut d = default_rgsize(blocklog, rblocks);
    d -= d % rext;
    let start = d.min(MAX_RGBLOCKS);
    first_fit(rblocks, rext, start, &|s| s + rext, &|s| s - rext)
}

/// (blocks per group, group count) for a section of `rblocks` blocks in
/// extents of `rext` blocks, as mkfs.xfs 6.15 chooses them for an image
/// file or a rotational device.
pub(crate) fn group_geometry(
    opts: &MkfsOptions,
    blocksize: u32,
    blocklog: u32,
    sectsize: u32,
    rblocks: u64,
    rext: u64,
) -> Result<(u64, u64), MkfsError> {
    let (rgsize, rgcount) = if let Some(text) = &opts.rt_rgsize {
        let bytes = convert_size(text, u64::from(blocksize), u64::from(sectsize))
            .filter(|&v| v >= 0)
            .ok_or_else(|| {
                MkfsError::BadOption(format!("Invalid value {text} for -r rgsize option"))
            })? as u64;
        if !bytes.is_multiple_of(u64::from(blocksize)) {
            return Err(geom(format!(
                "rgsize ({text}) not a multiple of fs blk size ({blocksize})"
            )));
        }
        let s = bytes >> blocklog;
        if s == 0 {
            return Err(geom(format!("rgsize ({text}) is zero")));
        }
        (s, rblocks.div_ceil(s))
    } else if let Some(n) = opts.rt_rgcount {
        (rblocks.div_ceil(n), n)
    } else if rblocks < 2 * rext {
        (rblocks, 0)
    } else {
        let s = if rext.is_power_of_two() {
            rgsize_power(blocklog, rblocks, rext)
        } else {
            rgsize_nonpower(blocklog, rblocks, rext)
        }
        .ok_or_else(|| {
            geom(format!(
                "realtime group size not at all congruent with extent size ({rext})"
            ))
        })?;
        (s, rblocks.div_ceil(s))
    };
    if rgsize > MAX_RGBLOCKS {
        return Err(geom(format!(
            "realtime group size ({rgsize}) must be less than the maximum ({MAX_RGBLOCKS})"
        )));
    }
    if !rgsize.is_multiple_of(rext) {
        return Err(geom(format!(
            "realtime group size ({rgsize}) not a multiple of rt extent size ({rext})"
        )));
    }
    if rgsize <= rext {
        return Err(geom(format!(
            "realtime group size ({rgsize}) must be at least two realtime extents"
        )));
    }
    if rgcount > MAX_RGNUMBER {
        return Err(geom(format!(
            "realtime group count ({rgcount}) must be less than the maximum ({MAX_RGNUMBER})"
        )));
    }
    Ok((rgsize, rgcount))
}

/// log2 of a group's size in blocks, rounded up (sb_rgblklog).
pub(crate) fn rgblklog(rgextents: u64, rext: u64) -> u32 {
    log2_roundup(rgextents * rext)
}

/// Bitmap blocks of one group of `rgextents` extents.
pub(crate) fn bitmap_blocks(blocksize: u32, rgextents: u64) -> u64 {
    rgextents.div_ceil(8 * (u64::from(blocksize) - XFS_RTBUF_HDR_SIZE as u64))
}

/// Summary blocks of one group.
pub(crate) fn summary_blocks(blocksize: u32, rextslog: u32, rbmblocks: u64) -> u64 {
    let words = (u64::from(blocksize) - XFS_RTBUF_HDR_SIZE as u64) / 4;
    ((u64::from(rextslog) + 1) * rbmblocks).div_ceil(words)
}

/// Extents in group `rgno` (the last group holds what is left).
pub(crate) fn group_extents(g: &MkfsGeometry, rgno: u32) -> u64 {
    let m = g.metadir.as_ref().expect("realtime groups need metadir");
    let full = u64::from(m.rgextents);
    let before = u64::from(rgno) * full;
    full.min(g.rextents - before)
}

/// Free runs of group `rgno` in a fresh section: (first extent, length).
fn free_run(g: &MkfsGeometry, rgno: u32) -> (u64, u64) {
    let n = group_extents(g, rgno);
    if rgno == 0 {
        (1, n - 1)
    } else {
        (0, n)
    }
}

fn header(magic: u32, owner: u64, daddr: u64, uuid: &Uuid) -> RtbufBlkinfo {
    let mut h = RtbufBlkinfo::new_zeroed();
    h.rt_magic.set(magic);
    h.rt_owner.set(owner);
    h.rt_blkno.set(daddr);
    h.rt_uuid = *uuid;
    h
}

/// The blocks of file `f` (bitmap or summary), each stamped; `daddr`
/// gives the disk address of a file block.
pub(crate) fn file_image(
    g: &MkfsGeometry,
    f: &RgFile,
    uuid: &Uuid,
    daddr: &dyn Fn(u64) -> u64,
) -> Vec<u8> {
    let rt = g.rt.as_ref().expect("a realtime section");
    let bs = g.blocksize as usize;
    let nblocks: u64 = f.extents.iter().map(|e| u64::from(e.1)).sum();
    let mut buf = vec![0u8; nblocks as usize * bs];
    let (start, len) = free_run(g, f.rgno);
    let words = (bs - XFS_RTBUF_HDR_SIZE) / 4;
    let bits = words as u64 * 32;
    let magic = match f.kind {
        RgFileKind::Bitmap => XFS_RTBITMAP_MAGIC,
        _ => XFS_RTSUMMARY_MAGIC,
    };
    for (b, blk) in buf.chunks_exact_mut(bs).enumerate() {
        let h = header(magic, f.ino, daddr(b as u64), uuid);
        blk[..XFS_RTBUF_HDR_SIZE].copy_from_slice(h.as_bytes());
        let body = &mut blk[XFS_RTBUF_HDR_SIZE..];
        match f.kind {
            RgFileKind::Bitmap => {
                // Extents [lo, hi) of this block; set the free ones.
                let lo = b as u64 * bits;
                let from = start.max(lo);
                let to = (start + len).min(lo + bits);
                let mut e = from;
                while e < to {
                    let w = ((e - lo) / 32) as usize;
                    let bit = (e - lo) % 32;
                    let n = (32 - bit).min(to - e);
                    let mask = if n == 32 {
                        u32::MAX
                    } else {
                        ((1u32 << n) - 1) << bit
                    };
                    let old = u32::from_be_bytes(body[w * 4..w * 4 + 4].try_into().unwrap());
                    body[w * 4..w * 4 + 4].copy_from_slice(&(old | mask).to_be_bytes());
                    e += n;
                }
            }
            _ => {
                let rbmblocks = u64::from(rt.rbmblocks);
                let level = u64::from(highbit(len));
                let index = level * rbmblocks + start / bits;
                let lo = b as u64 * words as u64;
                if len > 0 && (lo..lo + words as u64).contains(&index) {
                    let w = (index - lo) as usize;
                    body[w * 4..w * 4 + 4].copy_from_slice(&1u32.to_be_bytes());
                }
            }
        }
        stamp(blk, XFS_RTBUF_CRC_OFF);
    }
    buf
}

/// The realtime superblock: the first block of the realtime device.
pub(crate) fn rtsb_image(g: &MkfsGeometry, uuid: &Uuid) -> Vec<u8> {
    let mut buf = vec![0u8; g.blocksize as usize];
    let mut r = Rtsb::new_zeroed();
    r.rsb_magicnum.set(XFS_RTSB_MAGIC);
    r.rsb_fname = g.label;
    r.rsb_uuid = *uuid;
    r.rsb_meta_uuid = *uuid;
    buf[..size_of::<Rtsb>()].copy_from_slice(r.as_bytes());
    stamp(&mut buf, XFS_RTSB_CRC_OFF);
    buf
}

/// Lay out the groups of `g`'s realtime section (sized already, its
/// `rt` set): the group geometry into `g.metadir`, the files' inodes
/// after the `rtgroups` directory's and their blocks among the free
/// extents of that directory's AG, `free` (taken from it), group by group
/// as mkfs.xfs creates them (each group's inodes, then its bitmap's
/// blocks, then its summary's, each near its inode).
pub(crate) fn plan(
    opts: &MkfsOptions,
    g: &mut MkfsGeometry,
    free: &mut Vec<(u32, u32)>,
) -> Result<RtgLayout, MkfsError> {
    let rext = u64::from(g.rextsize);
    let (rgsize, rgcount) = group_geometry(
        opts,
        g.blocksize,
        u32::from(g.blocklog),
        u32::from(g.sectsize),
        g.rblocks,
        rext,
    )?;
    let rgextents = rgsize / rext;
    let rbmblocks = bitmap_blocks(g.blocksize, rgextents);
    let rextslog = highbit(g.rextents);
    let rsumblocks = summary_blocks(g.blocksize, rextslog, rbmblocks);
    let m = g.metadir.as_mut().expect("realtime groups need metadir");
    m.rgcount = rgcount as u32;
    m.rgextents = rgextents as u32;
    m.rgblklog = rgblklog(rgextents, rext) as u8;
    let rt = g.rt.as_mut().expect("a realtime section");
    rt.rbmblocks = rbmblocks as u32;
    rt.rsumblocks = rsumblocks as u32;
    rt.rextslog = rextslog as u8;

    let mut kinds = vec![RgFileKind::Bitmap, RgFileKind::Summary];
    let ro = g.features.ro_compat;
    if ro & 2 != 0 {
        kinds.push(RgFileKind::Rmap);
    }
    if ro & 4 != 0 {
        kinds.push(RgFileKind::Refcount);
    }
    let per = kinds.len() as u64;
    let room = g.chunk_inodes() - 1;
    if rgcount * per > room {
        return Err(MkfsError::Unsupported(format!(
            "{rgcount} realtime groups: xfskit mkfs makes up to {} (their files share one inode chunk); use -r rgcount= or rgsize=",
            room / per
        )));
    }
    let m = g.metadir.expect("metadir");
    let inode_block = |ino: u64| ((ino >> g.inopblog) & ((1u64 << g.agblklog) - 1)) as u32;
    let mut files = Vec::with_capacity((rgcount * per) as usize);
    let mut ino = m.rtdir_ino + 1;
    for rgno in 0..rgcount as u32 {
        let first = files.len();
        for &kind in &kinds {
            files.push(RgFile {
                rgno,
                kind,
                ino,
                extents: Vec::new(),
            });
            ino += 1;
        }
        for (f, len) in files[first..first + 2]
            .iter_mut()
            .zip([rbmblocks, rsumblocks])
        {
            f.extents = super::realtime::alloc_near(free, inode_block(f.ino), len as u32)
                .ok_or_else(|| {
                    geom(format!(
                        "no space in AG {} for realtime group {rgno}'s {}",
                        m.rtdir_agno,
                        f.kind.suffix()
                    ))
                })?;
        }
    }
    // The `rtgroups` directory stays short form in its inode's data fork
    // (past it mkfs.xfs would make a directory block).
    let wide =
        files.iter().any(|f| f.ino > u64::from(u32::MAX)) || m.metadirino > u64::from(u32::MAX);
    let isz = if wide { 8 } else { 4 };
    let dir_bytes: usize = 2
        + isz
        + files
            .iter()
            .map(|f| 4 + format!("{}.{}", f.rgno, f.kind.suffix()).len() + isz)
            .sum::<usize>();
    let fork = if g.features.incompat & 0x80 != 0 {
        192
    } else {
        usize::from(g.inodesize) - 176
    };
    if dir_bytes > fork {
        return Err(MkfsError::Unsupported(format!(
            "{rgcount} realtime groups: their names do not fit in the short-form `rtgroups` directory xfskit mkfs makes; use fewer (-r rgcount= or rgsize=)"
        )));
    }
    Ok(RtgLayout {
        rgcount: rgcount as u32,
        rgblocks: rgsize,
        files,
    })
}

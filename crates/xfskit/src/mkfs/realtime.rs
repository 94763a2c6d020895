//! A classic realtime section (`-r rtdev=FILE,size=,extsize=`): its size
//! in realtime extents, the bitmap and summary files that describe it, and
//! where mkfs.xfs puts their blocks in AG 0.
//!
//! The bitmap has one bit per realtime extent (set = free), in 32-bit words
//! of host (little-endian) order as the kernel keeps them without realtime
//! groups; the summary counts free extents by log2 of their length and the
//! bitmap block where they start, `(rextslog + 1) * rbmblocks` 32-bit
//! counters. A fresh section is one free extent.

use super::geometry::MkfsGeometry;
use super::options::{convert_size, MkfsError, MkfsOptions};

/// Smallest realtime extent in bytes.
const MIN_RTEXTSIZE: u64 = 4096;
/// Largest realtime extent in bytes.
const MAX_RTEXTSIZE: u64 = 1 << 30;

/// The realtime section of a fresh filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtLayout {
    /// The realtime device as named on the command line.
    pub name: String,
    /// sb_rbmblocks: bitmap blocks.
    pub rbmblocks: u32,
    /// Summary blocks.
    pub rsumblocks: u32,
    /// sb_rextslog.
    pub rextslog: u8,
    /// The bitmap file's blocks in AG 0: (first AG block, blocks), in file order.
    pub rbm_extents: Vec<(u32, u32)>,
    /// The summary file's blocks in AG 0.
    pub rsum_extents: Vec<(u32, u32)>,
    /// Realtime groups (metadir filesystems): the per-group files; the
    /// counts above are then each group's.
    pub groups: Option<super::rtgroups::RtgLayout>,
}

fn geom(msg: String) -> MkfsError {
    MkfsError::Geometry(msg)
}

/// The size in bytes of the realtime device at `path` (a file or a block
/// device, measured by seeking to its end).
fn device_bytes(path: &str) -> Result<u64, MkfsError> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path)
        .map_err(|e| MkfsError::Io(format!("cannot open realtime device {path}: {e}")))?;
    f.seek(SeekFrom::End(0))
        .map_err(|e| MkfsError::Io(format!("cannot size realtime device {path}: {e}")))
}

/// The realtime extent size in blocks: `-r extsize=` (a multiple of the
/// block size), else 4 KiB rounded up to a block.
pub(crate) fn extent_blocks(
    opts: &MkfsOptions,
    blocksize: u32,
    blocklog: u32,
    reflink: bool,
) -> Result<u32, MkfsError> {
    let bs = u64::from(blocksize);
    let rt_reflink = reflink && opts.rt_dev.is_some();
    let Some(text) = &opts.rt_extsize else {
        // As mkfs.xfs 6.15: reflink on a realtime section shares single
        // blocks, so the extent is one block (of at least 4 KiB).
        if rt_reflink {
            if bs < MIN_RTEXTSIZE {
                return Err(MkfsError::BadOption(format!(
                    "reflink not supported on rt volume with blocksize {blocksize}"
                )));
            }
            return Ok(1);
        }
        return Ok(if bs < MIN_RTEXTSIZE {
            (MIN_RTEXTSIZE >> blocklog) as u32
        } else {
            1
        });
    };
    let bytes = convert_size(text, bs, 0)
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            MkfsError::BadOption(format!("Invalid value {text} for -r extsize option"))
        })? as u64;
    if !(MIN_RTEXTSIZE..=MAX_RTEXTSIZE).contains(&bytes) {
        return Err(MkfsError::BadOption(format!(
            "Invalid value {text} for -r extsize option. Value is too {}.",
            if bytes < MIN_RTEXTSIZE {
                "small"
            } else {
                "large"
            }
        )));
    }
    if !bytes.is_multiple_of(bs) {
        return Err(geom(format!(
            "illegal rt extent size {bytes}, not a multiple of {blocksize}"
        )));
    }
    if rt_reflink && bytes > bs {
        return Err(MkfsError::BadOption(
            "reflink not supported on realtime with extent sizes > 1".into(),
        ));
    }
    Ok((bytes >> blocklog) as u32)
}

/// Blocks of the realtime section (`-r rtdev=`, `size=`), 0 without one.
pub(crate) fn section_blocks(
    opts: &MkfsOptions,
    blocksize: u32,
    blocklog: u32,
    sectsize: u32,
) -> Result<u64, MkfsError> {
    let Some(name) = &opts.rt_dev else {
        return Ok(0);
    };
    let dev_blocks = device_bytes(name)? >> blocklog;
    if dev_blocks == 0 {
        return Err(geom("Invalid zero length rt subvolume found".into()));
    }
    let Some(text) = &opts.rt_size else {
        return Ok(dev_blocks);
    };
    let bytes = convert_size(text, u64::from(blocksize), u64::from(sectsize))
        .filter(|&v| v > 0)
        .ok_or_else(|| MkfsError::BadOption(format!("Invalid value {text} for -r size option")))?
        as u64;
    if !bytes.is_multiple_of(u64::from(blocksize)) {
        return Err(geom(format!(
            "rt size {bytes} not a multiple of fs blocksize {blocksize}"
        )));
    }
    let blocks = bytes >> blocklog;
    if blocks > dev_blocks {
        return Err(geom(format!(
            "size {text} specified for rt subvolume is too large, maximum is {dev_blocks} blocks"
        )));
    }
    Ok(blocks)
}

/// Size the realtime section of `g` (rextsize already chosen) from the
/// options and the device, and place its bitmap and summary files among
/// AG 0's free extents `free` (taken from it): each allocated near its
/// inode as mkfs.xfs's allocator does.
pub(crate) fn plan(
    opts: &MkfsOptions,
    g: &mut MkfsGeometry,
    free: &mut Vec<(u32, u32)>,
) -> Result<(), MkfsError> {
    let Some(name) = opts.rt_dev.clone() else {
        if opts.rt_size.is_some() {
            return Err(MkfsError::BadOption(
                "size specified for non-existent rt subvolume".into(),
            ));
        }
        return Ok(());
    };
    let rblocks = section_blocks(
        opts,
        g.blocksize,
        u32::from(g.blocklog),
        u32::from(g.sectsize),
    )?;
    let rextents = rblocks / u64::from(g.rextsize);
    if rextents == 0 {
        return Err(geom("cannot have an rt subvolume with zero extents".into()));
    }
    if g.metadir.is_some() {
        g.rblocks = rblocks;
        g.rextents = rextents;
        g.rt = Some(RtLayout {
            name,
            rbmblocks: 0,
            rsumblocks: 0,
            rextslog: 0,
            rbm_extents: Vec::new(),
            rsum_extents: Vec::new(),
            groups: None,
        });
        let groups = super::rtgroups::plan(opts, g, free)?;
        let used: u64 = groups
            .files
            .iter()
            .flat_map(|f| f.extents.iter())
            .map(|e| u64::from(e.1))
            .sum();
        g.fdblocks -= used;
        g.ifree -= groups.files.len() as u64;
        if let Some(rt) = g.rt.as_mut() {
            rt.groups = Some(groups);
        }
        return Ok(());
    }
    let bits_per_block = 8 * u64::from(g.blocksize);
    let rbmblocks = rextents.div_ceil(bits_per_block);
    let rextslog = 63 - rextents.leading_zeros();
    let rsumblocks = ((u64::from(rextslog) + 1) * rbmblocks * 4).div_ceil(u64::from(g.blocksize));
    if rbmblocks > u64::from(u32::MAX) {
        return Err(geom(format!(
            "realtime section of {rextents} extents is too large"
        )));
    }
    let inode_block = |ino: u64| (ino >> g.inopblog) as u32;
    let rbm_extents = alloc_near(free, inode_block(g.rbmino), rbmblocks as u32)
        .ok_or_else(|| geom("no space in AG 0 for the realtime bitmap".into()))?;
    let rsum_extents = alloc_near(free, inode_block(g.rsumino), rsumblocks as u32)
        .ok_or_else(|| geom("no space in AG 0 for the realtime summary".into()))?;
    g.rblocks = rblocks;
    g.rextents = rextents;
    g.fdblocks -= rbmblocks + rsumblocks;
    g.rt = Some(RtLayout {
        name,
        rbmblocks: rbmblocks as u32,
        rsumblocks: rsumblocks as u32,
        rextslog: rextslog as u8,
        rbm_extents,
        rsum_extents,
        groups: None,
    });
    Ok(())
}

/// Allocate `len` blocks from `free` (sorted by start) as the kernel's
/// near-block allocator does for a metadata file: the longest piece
/// (up to what is still needed) closest to the target, the target moving to
/// the end of each piece taken.
pub(crate) fn alloc_near(
    free: &mut Vec<(u32, u32)>,
    target: u32,
    len: u32,
) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let mut left = len;
    let mut target = target;
    while left > 0 {
        let mut best: Option<(u32, u32, u32)> = None; // (len, diff, start)
        for &(s, l) in free.iter() {
            let want = l.min(left);
            let end = s + l;
            let start = if s >= target {
                s
            } else if end >= target + want {
                target
            } else {
                end - want
            };
            let diff = start.abs_diff(target);
            let better = match best {
                None => true,
                Some((bl, bd, _)) => want > bl || (want == bl && diff < bd),
            };
            if better {
                best = Some((want, diff, start));
            }
        }
        let (got, _, start) = best?;
        if got == 0 {
            return None;
        }
        super::writer::carve(free, start, got);
        match out.last_mut() {
            Some((s, l)) if *s + *l == start => *l += got,
            _ => out.push((start, got)),
        }
        left -= got;
        target = start + got;
    }
    Some(out)
}

/// The bitmap file's contents: every realtime extent free.
pub(crate) fn bitmap_image(g: &MkfsGeometry, rt: &RtLayout) -> Vec<u8> {
    let mut buf = vec![0u8; rt.rbmblocks as usize * g.blocksize as usize];
    let full = (g.rextents / 8) as usize;
    buf[..full].fill(0xff);
    let rest = (g.rextents % 8) as u32;
    if rest != 0 {
        // Bit i of a little-endian word is extent i: the low bits of the byte.
        buf[full] = ((1u16 << rest) - 1) as u8;
    }
    buf
}

/// The summary file's contents: the one free extent, counted at the log2
/// of its length for bitmap block 0.
pub(crate) fn summary_image(g: &MkfsGeometry, rt: &RtLayout) -> Vec<u8> {
    let mut buf = vec![0u8; rt.rsumblocks as usize * g.blocksize as usize];
    let index = usize::from(rt.rextslog) * rt.rbmblocks as usize;
    buf[index * 4..index * 4 + 4].copy_from_slice(&1u32.to_le_bytes());
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_allocation_prefers_length_then_distance() {
        // A gap of 7 before the target at 16 and a large extent after.
        let mut free = vec![(9, 7), (24, 1000)];
        assert_eq!(alloc_near(&mut free, 16, 1), Some(vec![(15, 1)]));
        assert_eq!(alloc_near(&mut free, 16, 1), Some(vec![(14, 1)]));
        assert_eq!(alloc_near(&mut free, 16, 20), Some(vec![(24, 20)]));
        assert_eq!(free, vec![(9, 5), (44, 980)]);
        assert_eq!(alloc_near(&mut free, 16, 5000), None);
    }
}

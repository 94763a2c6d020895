//! Exchanging the mappings of two files' data forks, pair of mappings by
//! pair of mappings (libxfs's `xfs_exchmaps.c`): the operation behind
//! [`Fs::exchange_range`](crate::fs::Fs) (`namespace/exchange_range.rs`)
//! and behind recovery's finishing of a logged mapping-exchange intent
//! (`log/exchange.rs`, which decodes and checks the XMI and runs these
//! steps in the kernel's order of recovery).
//!
//! An [`Exchange`] is the intent's state: the request (both inodes with
//! their generations, as the log's [`Xmi`] names them), the block offsets
//! still to do in each file, the blocks left, the flags and the sizes to
//! set at the end. Each step ([`Exchange::next_pair`]) reads the mapping
//! (extent or hole) at the first file's offset, and the one at the second
//! file's offset over as many blocks; with "first file written only", a
//! hole or unwritten extent in the first file is skipped; two holes, or
//! two mappings of the same blocks, are skipped; otherwise the pair is
//! chosen, and [`exchange_pair`] unmaps both (with their reverse mappings,
//! blocks neither freed nor released) and maps each into the other file
//! (unwritten state kept). With "set sizes" a file's size is raised up to
//! the end of what it now maps (but not past its final size), so no
//! mapping lies past the end of the file, and the sizes are set when
//! nothing is left. [`Exchange::intent`] is what is left, as the XMI that
//! each step logs for it.

use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::{FsBlock, Ino};
use crate::inode::{Fork, Inode};
use crate::log::exchange::Xmi;
use xfs_format::inode::{XFS_DIFLAG2_NREXT64, XFS_DIFLAG2_REFLINK};
use xfs_format::log_intent::{
    XFS_EXCHMAPS_INO1_WRITTEN, XFS_EXCHMAPS_PARAMS, XFS_EXCHMAPS_SET_SIZES,
};

/// The mapping (an extent or a hole) at block `off` of `ip`'s data fork,
/// at most `max` blocks long.
fn mapping_at(
    tp: &mut crate::trans::Trans<'_>,
    ip: &Inode,
    off: u64,
    max: u64,
) -> Result<(Option<(FsBlock, bool)>, u64)> {
    match super::next_extent(tp, ip, Fork::Data, off)? {
        Some(e) if e.offset <= off => {
            let skip = off - e.offset;
            Ok((
                Some((FsBlock(e.start.0 + skip), e.unwritten)),
                (e.len - skip).min(max),
            ))
        }
        Some(e) => Ok((None, (e.offset - off).min(max))),
        None => Ok((None, max)),
    }
}

/// Raises `ip`'s size to the end of block `end` if that is more, but not
/// past `limit` (negative: no limit set, nothing changes).
fn raise_size(ip: &mut Inode, block_log: u8, end: u64, limit: i64) {
    if limit < 0 {
        return;
    }
    let bytes = u64::try_from(u128::from(end) << block_log).unwrap_or(u64::MAX);
    let len = bytes.min(limit as u64);
    if len > ip.size {
        ip.size = len;
    }
}

/// A mapping exchange under way (the intent's state, libxfs's
/// `xfs_exchmaps_intent`): the request and what is left of it.
#[derive(Debug, Clone)]
pub struct Exchange {
    xmi: Xmi,
    flags: u64,
    off1: u64,
    off2: u64,
    left: u64,
    isize1: i64,
    isize2: i64,
    /// Pairs of mappings exchanged so far.
    pub pairs: usize,
}

/// A pair of mappings to exchange: offsets, mappings (None: a hole),
/// length.
pub(crate) type Pair = (
    u64,
    u64,
    Option<(FsBlock, bool)>,
    Option<(FsBlock, bool)>,
    u64,
);

impl Exchange {
    /// The exchange `x` asks for, on its two inodes as they are now (read
    /// and locked by the caller), with the sizes to set at the end as `x`
    /// gives them (the caller of a new exchange puts the inodes' sizes
    /// there, each file getting the other's; recovery takes the logged
    /// ones, as Linux 6.18.44 does); and before any step, as the kernel's
    /// `xfs_exchange_mappings` does for a new request and its recovery for
    /// a logged one, the reflink flag set on both when either has it and
    /// the wide extent counters on both (large extent counts). No reflink
    /// flag is cleared afterwards: Linux 6.18.44 keeps it on both files.
    pub(crate) fn prepare(fs: &Fs, x: &Xmi, ip1: &mut Inode, ip2: &mut Inode) -> Exchange {
        let flags = x.flags & XFS_EXCHMAPS_PARAMS;
        let (isize1, isize2) = if flags & XFS_EXCHMAPS_SET_SIZES != 0 {
            (x.isize1, x.isize2)
        } else {
            (-1, -1)
        };
        if ip1.may_share() || ip2.may_share() {
            ip1.flags2 |= XFS_DIFLAG2_REFLINK;
            ip2.flags2 |= XFS_DIFLAG2_REFLINK;
        }
        if fs.geometry().features.nrext64 {
            ip1.flags2 |= XFS_DIFLAG2_NREXT64;
            ip2.flags2 |= XFS_DIFLAG2_NREXT64;
        }
        Exchange {
            xmi: x.clone(),
            flags,
            off1: x.startoff1,
            off2: x.startoff2,
            left: x.blockcount,
            isize1,
            isize2,
            pairs: 0,
        }
    }

    /// The next pair of different mappings, chosen in the caller's
    /// transaction as the kernel's `xfs_exchmaps_finish_one`
    /// chooses it (what needs no exchange skipped, the sizes raised for
    /// the pair, or set at the end), not yet exchanged
    /// ([`exchange_pair`] does that). None when nothing was left.
    pub(crate) fn next_pair(
        &mut self,
        tp: &mut crate::trans::Trans<'_>,
        ip1: &mut Inode,
        ip2: &mut Inode,
    ) -> Result<Option<Pair>> {
        let block_log = tp.geo().block_log;
        self.choose(tp, ip1, ip2, block_log)
    }

    /// Blocks still to exchange.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// The intent for what is left, under id `id`: the request's
    /// inodes, the offsets and count still to do, its flags, and the
    /// sizes to set (the kernel logs the same fields when it relogs a
    /// continuing XMI).
    pub(crate) fn intent(&self, id: u64) -> Xmi {
        Xmi {
            id,
            rec_blk: 0,
            startoff1: self.off1,
            startoff2: self.off2,
            blockcount: self.left,
            flags: self.flags,
            isize1: self.isize1,
            isize2: self.isize2,
            ..self.xmi.clone()
        }
    }

    /// The number of pairs of mappings a new exchange will exchange,
    /// with nothing changed.
    pub(crate) fn plan(
        &self,
        tp: &mut crate::trans::Trans<'_>,
        ip1: &Inode,
        ip2: &Inode,
    ) -> Result<u64> {
        let block_log = tp.geo().block_log;
        let mut ex = self.clone();
        let (mut a, mut b) = (ip1.clone(), ip2.clone());
        let mut pairs = 0;
        while ex.left > 0 {
            if ex.choose(tp, &mut a, &mut b, block_log)?.is_some() {
                pairs += 1;
            }
        }
        Ok(pairs)
    }

    /// The intent this exchange was started from (`xmi_id`).
    pub fn id(&self) -> u64 {
        self.xmi.id
    }

    /// The request's two inodes (`xmi_inode1`, `xmi_inode2`).
    pub fn inodes(&self) -> (Ino, Ino) {
        (Ino(self.xmi.inode1), Ino(self.xmi.inode2))
    }

    /// One step but for the exchange itself: skips what needs no
    /// exchange, chooses the next pair of different mappings (and raises
    /// the sizes for it), and sets the sizes when nothing is left.
    fn choose(
        &mut self,
        tp: &mut crate::trans::Trans<'_>,
        ip1: &mut Inode,
        ip2: &mut Inode,
        block_log: u8,
    ) -> Result<Option<Pair>> {
        let mut found = None;
        while self.left > 0 {
            let (m1, len1) = mapping_at(tp, ip1, self.off1, self.left)?;
            if self.flags & XFS_EXCHMAPS_INO1_WRITTEN != 0 && !matches!(m1, Some((_, false))) {
                self.advance(len1);
                continue;
            }
            let (m2, len) = mapping_at(tp, ip2, self.off2, len1)?;
            let same = match (m1, m2) {
                (None, None) => true,
                (Some((a, ua)), Some((b, ub))) if a == b => {
                    if ua != ub {
                        return Err(self.xmi.corrupt(format!(
                            "blocks {} mapped written and unwritten by the two files",
                            a.0
                        )));
                    }
                    true
                }
                _ => false,
            };
            if !same {
                found = Some((self.off1, self.off2, m1, m2, len));
                break;
            }
            self.advance(len);
        }
        if let Some((off1, off2, _, _, len)) = found {
            raise_size(ip1, block_log, off1 + len, self.isize1);
            raise_size(ip2, block_log, off2 + len, self.isize2);
            self.advance(len);
            self.pairs += 1;
        }
        if self.left == 0 && self.flags & XFS_EXCHMAPS_SET_SIZES != 0 {
            ip1.size = self.isize1 as u64;
            ip2.size = self.isize2 as u64;
        }
        Ok(found)
    }

    fn advance(&mut self, len: u64) {
        self.off1 += len;
        self.off2 += len;
        self.left -= len;
    }
}

/// Exchanges one pair of mappings of `len` blocks: each file's mapping at
/// its offset (None: a hole) goes to the other file at its offset, with
/// its reverse mapping.
#[allow(clippy::too_many_arguments)]
pub(crate) fn exchange_pair(
    tp: &mut crate::trans::Trans<'_>,
    ip1: &mut Inode,
    off1: u64,
    m1: Option<(FsBlock, bool)>,
    ip2: &mut Inode,
    off2: u64,
    m2: Option<(FsBlock, bool)>,
    len: u64,
) -> Result<()> {
    if m1.is_some() {
        super::unmap_only(tp, ip1, Fork::Data, off1, len)?;
    }
    if m2.is_some() {
        super::unmap_only(tp, ip2, Fork::Data, off2, len)?;
    }
    for (ip, off, m) in [(ip1, off1, m2), (ip2, off2, m1)] {
        let Some((start, unwritten)) = m else {
            continue;
        };
        super::map_given_as(tp, ip, Fork::Data, off, start, len, unwritten)?;
        let flags = if unwritten {
            xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN
        } else {
            0
        };
        crate::alloc::rmap_apply(tp, start, len as u32, ip.ino.0, off, flags, true)?;
    }
    Ok(())
}

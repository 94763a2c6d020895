//! Realtime extent allocation on a classic realtime section (no realtime
//! groups): the bitmap file (one bit per realtime extent, set = free, in
//! little-endian 32-bit words) and the summary file (32-bit counts of free
//! extents by log2 of their length and by the bitmap block where they
//! start, `summary[log * rbmblocks + bbno]`), both ordinary data blocks of
//! their inodes that a transaction changes and logs as buffers of type
//! RTBITMAP / RTSUMMARY, and `sb_frextents`, kept in the superblock
//! buffer that the transaction logs (it is not a lazy counter without
//! realtime groups). Frees happen in the unmapping transaction itself, as
//! the kernel frees realtime extents there (no extent-free intent).
//!
//! With realtime groups (metadir filesystems) each group has a bitmap
//! and a summary file of its own (`/rtgroups/N.bitmap`, `N.summary`
//! under the metadata directory), indexed by the extent's number inside
//! the group; every block of them starts with a self-describing header
//! (magic, CRC, owner, block number, LSN, UUID) and its words are
//! big-endian. A realtime block number there is `group << rgblklog |
//! block in group`. Allocation starts in the goal's group and tries the
//! others in turn. `sb_frextents` is still changed in the logged
//! superblock buffer, so the count on disk always agrees with the
//! bitmaps, whatever a crash interrupts.
//!
//! The bitmap inode's lock (the group's, with realtime groups) serialises
//! every change to them.

use crate::bytes::{be32, be64};
use crate::error::{Error, Location, Result};
use crate::geometry::{Daddr, FsBlock};
use crate::inode::Fork;
use crate::log::buftype::{blft, BufKind};
use crate::trans::{BufId, Trans};

/// Where the bitmap and summary blocks live and the section's shape.
struct Rt {
    rbm: Vec<crate::inode::Extent>,
    rsum: Vec<crate::inode::Extent>,
    rbmblocks: u64,
    /// Extents of the section (classic) or of the group.
    rextents: u64,
    bits_per_block: u64,
    bs: u64,
    /// The realtime group (None: a classic section).
    rg: Option<u32>,
    /// Bytes of header before the words of each block (0 classic).
    hdr: usize,
    rbm_ino: u64,
    rsum_ino: u64,
    /// Section-wide extent count, for sb_frextents' bound.
    total_extents: u64,
}

const RTBITMAP: BufKind = BufKind {
    blft: blft::RTBITMAP,
    lsn_off: None,
};
const RTSUMMARY: BufKind = BufKind {
    blft: blft::RTSUMMARY,
    lsn_off: None,
};
const RG_RTBITMAP: BufKind = BufKind {
    blft: blft::RTBITMAP,
    lsn_off: Some(rtg::XFS_RTBUF_LSN_OFF),
};
const RG_RTSUMMARY: BufKind = BufKind {
    blft: blft::RTSUMMARY,
    lsn_off: Some(rtg::XFS_RTBUF_LSN_OFF),
};
use xfs_format::rtgroup as rtg;
const SB: BufKind = BufKind {
    blft: blft::SB,
    lsn_off: Some(xfs_format::sb::XFS_SB_LSN_OFF),
};
const SB_FREXTENTS_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_frextents);

fn corrupt(detail: String) -> Error {
    Error::corrupt("realtime bitmap", Location::Sb(0), detail)
}

fn group_corrupt(what: &'static str, rgno: u32, detail: String) -> Error {
    Error::corrupt(
        what,
        Location::Other(format!("realtime group {rgno}")),
        detail,
    )
}

/// The inode of `name` in the metadata directory's `rtgroups` directory.
pub(crate) fn rtgroup_file(tp: &Trans<'_>, rgno: u32, name: &str) -> Result<crate::geometry::Ino> {
    let fs = tp.fs();
    let geo = fs.geometry();
    let what = "metadata directory";
    let mdir = fs.inode(geo.metadir_ino)?;
    let dir = crate::dir::lookup(fs, &mdir, b"rtgroups")?.ok_or_else(|| {
        group_corrupt(what, rgno, "the metadata directory has no rtgroups".into())
    })?;
    let dir = fs.inode(dir)?;
    let file = format!("{rgno}.{name}");
    crate::dir::lookup(fs, &dir, file.as_bytes())?
        .ok_or_else(|| group_corrupt(what, rgno, format!("/rtgroups/{file} is missing")))
}

/// log2 of `n` rounded down (n > 0).
fn log2(n: u64) -> u64 {
    u64::from(63 - n.leading_zeros())
}

impl Rt {
    fn open(tp: &mut Trans<'_>) -> Result<Rt> {
        let geo = tp.geo();
        if geo.rt_extents == 0 || geo.features.metadir {
            return Err(Error::Unsupported(
                "realtime allocation needs a classic realtime section".into(),
            ));
        }
        tp.lock_inode(geo.rbm_ino);
        let rbm_ip = tp.read_inode(geo.rbm_ino)?;
        let rsum_ip = tp.read_inode(geo.rsum_ino)?;
        let rbm = crate::bmap::extents(tp, &rbm_ip, Fork::Data)?;
        let rsum = crate::bmap::extents(tp, &rsum_ip, Fork::Data)?;
        let bs = u64::from(geo.block_size);
        Ok(Rt {
            rbm,
            rsum,
            rbmblocks: u64::from(geo.rt_bmblocks),
            rextents: geo.rt_extents,
            bits_per_block: bs * 8,
            bs,
            rg: None,
            hdr: 0,
            rbm_ino: geo.rbm_ino.0,
            rsum_ino: geo.rsum_ino.0,
            total_extents: geo.rt_extents,
        })
    }

    /// The bitmap and summary of realtime group `rgno`.
    fn open_group(tp: &mut Trans<'_>, rgno: u32) -> Result<Rt> {
        let geo = tp.geo();
        if !geo.has_rtgroups() || geo.zoned || rgno >= geo.rg_count {
            return Err(Error::Unsupported(format!(
                "realtime allocation in realtime group {rgno}: not a realtime group of a bitmap-allocated section"
            )));
        }
        let rbm_ino = rtgroup_file(tp, rgno, "bitmap")?;
        let rsum_ino = rtgroup_file(tp, rgno, "summary")?;
        tp.lock_inode(rbm_ino);
        let rbm_ip = tp.read_inode(rbm_ino)?;
        let rsum_ip = tp.read_inode(rsum_ino)?;
        let rbm = crate::bmap::extents(tp, &rbm_ip, Fork::Data)?;
        let rsum = crate::bmap::extents(tp, &rsum_ip, Fork::Data)?;
        let geo = tp.geo();
        let bs = u64::from(geo.block_size);
        let hdr = rtg::XFS_RTBUF_HDR_SIZE;
        Ok(Rt {
            rbm,
            rsum,
            rbmblocks: u64::from(geo.rt_bmblocks),
            rextents: geo.rg_len(rgno) / u64::from(geo.rt_extsize.max(1)),
            bits_per_block: (bs - hdr as u64) * 8,
            bs,
            rg: Some(rgno),
            hdr,
            rbm_ino: rbm_ino.0,
            rsum_ino: rsum_ino.0,
            total_extents: geo.rt_extents,
        })
    }

    fn get(&self, b: &[u8], off: usize) -> u32 {
        let w = [b[off], b[off + 1], b[off + 2], b[off + 3]];
        if self.rg.is_some() {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    }

    fn put(&self, b: &mut [u8], off: usize, v: u32) {
        let w = if self.rg.is_some() {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        b[off..off + 4].copy_from_slice(&w);
    }

    /// Checks a group file block's header (magic, owner, block number,
    /// UUID): a damaged one is reported, never changed.
    fn check_header(
        &self,
        tp: &Trans<'_>,
        id: BufId,
        daddr: Daddr,
        fblk: u64,
        bitmap: bool,
    ) -> Result<()> {
        let Some(rgno) = self.rg else {
            return Ok(());
        };
        let b = tp.buf(id);
        let (what, magic, owner) = if bitmap {
            ("realtime bitmap", rtg::XFS_RTBITMAP_MAGIC, self.rbm_ino)
        } else {
            ("realtime summary", rtg::XFS_RTSUMMARY_MAGIC, self.rsum_ino)
        };
        let mut bad = Vec::new();
        if be32(b, 0) != magic {
            bad.push(format!("bad magic {:#010x}", be32(b, 0)));
        } else {
            if be64(b, 8) != owner {
                bad.push(format!("owner {}, want inode {owner}", be64(b, 8)));
            }
            if be64(b, 16) != daddr.0 {
                bad.push(format!("blkno {}, want {}", be64(b, 16), daddr.0));
            }
            if b[32..48] != tp.geo().meta_uuid {
                bad.push("uuid is not the filesystem's".into());
            }
        }
        if bad.is_empty() {
            return Ok(());
        }
        Err(Error::corrupt(
            what,
            Location::Other(format!(
                "realtime group {rgno}, file block {fblk} (daddr {})",
                daddr.0
            )),
            bad.join("; "),
        ))
    }

    /// The transaction's buffer of file block `fblk` of a metadata file.
    fn block(
        &self,
        tp: &mut Trans<'_>,
        map: &[crate::inode::Extent],
        fblk: u64,
        kind: BufKind,
    ) -> Result<BufId> {
        let e = map
            .iter()
            .find(|e| e.offset <= fblk && fblk < e.end() && !e.unwritten)
            .ok_or_else(|| {
                corrupt(format!(
                    "block {fblk} of the realtime {} file is not mapped",
                    if kind.blft == blft::RTBITMAP {
                        "bitmap"
                    } else {
                        "summary"
                    }
                ))
            })?;
        let fsb = FsBlock(e.start.0 + (fblk - e.offset));
        let daddr = tp.geo().fsb_to_daddr(fsb);
        if self.rg.is_none() {
            return tp.read_raw_buf(daddr, self.bs as u32, kind, None);
        }
        let bitmap = kind.blft == blft::RTBITMAP;
        let kind = if bitmap { RG_RTBITMAP } else { RG_RTSUMMARY };
        let id = tp.read_raw_buf(daddr, self.bs as u32, kind, Some(rtg::XFS_RTBUF_CRC_OFF))?;
        self.check_header(tp, id, daddr, fblk, bitmap)?;
        Ok(id)
    }

    fn word(&self, tp: &mut Trans<'_>, rtx: u64) -> Result<(BufId, usize)> {
        let bb = rtx / self.bits_per_block;
        let id = self.block(tp, &self.rbm, bb, RTBITMAP)?;
        Ok((
            id,
            self.hdr + ((rtx % self.bits_per_block) / 32 * 4) as usize,
        ))
    }

    fn is_free(&self, tp: &mut Trans<'_>, rtx: u64) -> Result<bool> {
        let (id, off) = self.word(tp, rtx)?;
        let w = self.get(tp.buf(id), off);
        Ok(w >> (rtx % 32) & 1 != 0)
    }

    /// Sets (free) or clears (in use) the bits of `start..start+len`.
    fn set_range(&self, tp: &mut Trans<'_>, start: u64, len: u64, free: bool) -> Result<()> {
        let mut x = start;
        let end = start + len;
        while x < end {
            let (id, off) = self.word(tp, x)?;
            let bit = x % 32;
            let n = (32 - bit).min(end - x);
            let mask = if n == 32 {
                u32::MAX
            } else {
                ((1u32 << n) - 1) << bit
            };
            let mut w = self.get(tp.buf(id), off);
            if free {
                w |= mask;
            } else {
                w &= !mask;
            }
            self.put(tp.buf_mut(id), off, w);
            x += n;
        }
        Ok(())
    }

    /// Length of the run of extents in state `free` from `start` going
    /// forward (at most `cap`).
    fn run_forward(&self, tp: &mut Trans<'_>, start: u64, free: bool, cap: u64) -> Result<u64> {
        let mut n = 0;
        let end = self.rextents.min(start.saturating_add(cap));
        let mut x = start;
        while x < end {
            let (id, off) = self.word(tp, x)?;
            let w = self.get(tp.buf(id), off);
            let w = if free { w } else { !w } >> (x % 32);
            let avail = (32 - x % 32).min(end - x);
            let ones = u64::from(w.trailing_ones()).min(avail);
            n += ones;
            x += ones;
            if ones < avail {
                break;
            }
        }
        Ok(n)
    }

    /// Length of the run of free extents ending just before `end`.
    fn run_back(&self, tp: &mut Trans<'_>, end: u64) -> Result<u64> {
        let mut n = 0;
        let mut x = end;
        while x > 0 {
            let last = x - 1;
            let (id, off) = self.word(tp, last)?;
            let w = self.get(tp.buf(id), off);
            let bit = last % 32;
            // Bits 0..=bit of the word, read from the top down.
            let w = w << (31 - bit);
            let ones = u64::from(w.leading_ones()).min(bit + 1);
            n += ones;
            x -= ones;
            if ones < bit + 1 {
                break;
            }
        }
        Ok(n)
    }

    fn sum_slot(&self, tp: &mut Trans<'_>, log: u64, bb: u64) -> Result<(BufId, usize)> {
        let per_block = (self.bs - self.hdr as u64) / 4;
        let idx = log * self.rbmblocks + bb;
        let id = self.block(tp, &self.rsum, idx / per_block, RTSUMMARY)?;
        Ok((id, self.hdr + (idx % per_block * 4) as usize))
    }

    fn sum_get(&self, tp: &mut Trans<'_>, log: u64, bb: u64) -> Result<u32> {
        let (id, off) = self.sum_slot(tp, log, bb)?;
        Ok(self.get(tp.buf(id), off))
    }

    /// Adds `delta` to the count of free extents of `len` starting at `start`.
    fn sum_add(&self, tp: &mut Trans<'_>, start: u64, len: u64, delta: i32) -> Result<()> {
        let (id, off) = self.sum_slot(tp, log2(len), start / self.bits_per_block)?;
        let v = self.get(tp.buf(id), off);
        let v = v.checked_add_signed(delta).ok_or_else(|| {
            let d = format!(
                "the realtime summary's count for {len} extents at {start} would go out of range"
            );
            match self.rg {
                Some(g) => group_corrupt("realtime summary", g, d),
                None => corrupt(d),
            }
        })?;
        self.put(tp.buf_mut(id), off, v);
        Ok(())
    }

    fn frextents_add(&self, tp: &mut Trans<'_>, delta: i64) -> Result<()> {
        let sect = tp.geo().sect_size;
        let id = tp.read_raw_buf(Daddr(0), sect, SB, Some(xfs_format::sb::XFS_SB_CRC_OFF))?;
        let b = tp.buf_mut(id);
        let o = SB_FREXTENTS_OFF;
        let v = u64::from_be_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let v = v
            .checked_add_signed(delta)
            .filter(|&v| v <= self.total_extents);
        let v = v.ok_or_else(|| {
            Error::corrupt(
                "superblock",
                Location::Sb(0),
                "the free realtime extent count would go out of range",
            )
        })?;
        b[o..o + 8].copy_from_slice(&v.to_be_bytes());
        Ok(())
    }
}

/// Allocates between `minlen` and `maxlen` realtime extents near
/// realtime block `goal` (the first free run the summary shows at least
/// `minlen` long, in bitmap order from the goal's bitmap block, wrapping;
/// with realtime groups, in the goal's group first, then each following
/// group in turn; without a goal, as the kernel does for a file's first
/// extents, from the next group of a rotor); returns (first realtime
/// block, extents).
pub(crate) fn rt_alloc_blocks(
    tp: &mut Trans<'_>,
    goal: Option<u64>,
    minlen: u64,
    maxlen: u64,
) -> Result<(u64, u64)> {
    // Extents freed since the last log force may still belong to their old
    // owner on disk: that free must be durable before new data lands.
    if tp.fs().write_state()?.take_rt_freed() {
        tp.fs().force_log()?;
    }
    let geo = tp.geo();
    let r = u64::from(geo.rt_extsize.max(1));
    if !geo.has_rtgroups() {
        let rt = Rt::open(tp)?;
        let (x, n) = rt
            .alloc_in(tp, goal.unwrap_or(0) / r, minlen, maxlen)?
            .ok_or_else(|| Error::NoSpace(format!("no run of {minlen} free realtime extents")))?;
        return Ok((x * r, n));
    }
    let count = geo.rg_count;
    let (g0, gb) = match goal {
        Some(g) => geo.rtb_split(g),
        None => {
            let ws = tp.fs().write_state()?;
            let n = ws
                .alloc
                .rtg_rotor
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (n % count.max(1), 0)
        }
    };
    let g0 = if g0 < count { g0 } else { 0 };
    for i in 0..count {
        let rgno = (g0 + i) % count;
        let rt = Rt::open_group(tp, rgno)?;
        let goal_x = if i == 0 { gb / r } else { 0 };
        if let Some((x, n)) = rt.alloc_in(tp, goal_x, minlen, maxlen)? {
            return Ok((tp.geo().rtb_make(rgno, x * r), n));
        }
    }
    Err(Error::NoSpace(format!(
        "no run of {minlen} free realtime extents in any of the {count} realtime groups"
    )))
}

/// Frees realtime blocks `rtb..rtb+len` (whole realtime extents, inside
/// one realtime group when the section has groups).
pub(crate) fn rt_free_blocks(tp: &mut Trans<'_>, rtb: u64, len: u64) -> Result<()> {
    let geo = tp.geo();
    let r = u64::from(geo.rt_extsize.max(1));
    if !geo.has_rtgroups() {
        return rt_free(tp, rtb / r, len / r);
    }
    if !geo.rtb_range_valid(rtb, len) {
        let (g, b) = geo.rtb_split(rtb);
        return Err(group_corrupt(
            "realtime bitmap",
            g,
            format!("freeing realtime blocks {b}+{len} of the group: past its end or not a group"),
        ));
    }
    let (rgno, b) = geo.rtb_split(rtb);
    let rt = Rt::open_group(tp, rgno)?;
    rt.free_in(tp, b / r, len / r)
}

impl Rt {
    /// The first suitable free run of this bitmap from `goal`'s block;
    /// None when there is none.
    fn alloc_in(
        &self,
        tp: &mut Trans<'_>,
        goal: u64,
        minlen: u64,
        maxlen: u64,
    ) -> Result<Option<(u64, u64)>> {
        let rt = self;
        if rt.rextents == 0 {
            return Ok(None);
        }
        let minlen = minlen.max(1);
        let maxlen = maxlen.max(minlen);
        let levels = u64::from(tp.geo().rt_extslog) + 1;
        let first_bb = (goal.min(rt.rextents - 1)) / rt.bits_per_block;
        for i in 0..rt.rbmblocks {
            let bb = (first_bb + i) % rt.rbmblocks;
            // Runs that start in this bitmap block, long enough for minlen.
            let mut any = false;
            for log in log2(minlen)..levels {
                if rt.sum_get(tp, log, bb)? > 0 {
                    any = true;
                    break;
                }
            }
            if !any {
                continue;
            }
            let lo = bb * rt.bits_per_block;
            let hi = (lo + rt.bits_per_block).min(rt.rextents);
            let mut x = lo;
            while x < hi {
                if !rt.is_free(tp, x)? {
                    x += rt.run_forward(tp, x, false, hi - x)?.max(1);
                    continue;
                }
                // A free run starts here only if the extent before is in use.
                let back = if x == lo { rt.run_back(tp, x)? } else { 0 };
                let start = x - back;
                let len = back + rt.run_forward(tp, x, true, u64::MAX)?;
                if len >= minlen && start == x {
                    let take = len.min(maxlen);
                    rt.sum_add(tp, start, len, -1)?;
                    if len > take {
                        rt.sum_add(tp, start + take, len - take, 1)?;
                    }
                    rt.set_range(tp, start, take, false)?;
                    rt.frextents_add(tp, -(take as i64))?;
                    return Ok(Some((start, take)));
                }
                x = start + len;
            }
        }
        Ok(None)
    }

    /// Frees extents `start..start+len` of this bitmap, merging the
    /// summary's counts with the free runs on either side.
    fn free_in(&self, tp: &mut Trans<'_>, start: u64, len: u64) -> Result<()> {
        let rt = self;
        let bad = |d: String| match rt.rg {
            Some(g) => group_corrupt("realtime bitmap", g, d),
            None => corrupt(d),
        };
        if len == 0 || start.checked_add(len).is_none_or(|e| e > rt.rextents) {
            return Err(bad(format!(
                "freeing realtime extents {start}+{len} past the {} of the bitmap",
                rt.rextents
            )));
        }
        if rt.run_forward(tp, start, false, len)? != len {
            return Err(bad(format!(
                "freeing realtime extents {start}+{len}, some of which are already free"
            )));
        }
        let left = rt.run_back(tp, start)?;
        let right = rt.run_forward(tp, start + len, true, u64::MAX)?;
        if left > 0 {
            rt.sum_add(tp, start - left, left, -1)?;
        }
        if right > 0 {
            rt.sum_add(tp, start + len, right, -1)?;
        }
        rt.sum_add(tp, start - left, left + len + right, 1)?;
        rt.set_range(tp, start, len, true)?;
        rt.frextents_add(tp, len as i64)?;
        if let Ok(ws) = tp.fs().write_state() {
            ws.note_rt_freed();
        }
        Ok(())
    }
}

/// Frees realtime extents `start..start+len` of a classic section.
pub(crate) fn rt_free(tp: &mut Trans<'_>, start: u64, len: u64) -> Result<()> {
    let rt = Rt::open(tp)?;
    rt.free_in(tp, start, len)
}

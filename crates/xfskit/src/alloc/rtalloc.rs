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
//! The bitmap inode's lock serialises every change to them.

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
    rextents: u64,
    bits_per_block: u64,
    bs: u64,
}

const RTBITMAP: BufKind = BufKind {
    blft: blft::RTBITMAP,
    lsn_off: None,
};
const RTSUMMARY: BufKind = BufKind {
    blft: blft::RTSUMMARY,
    lsn_off: None,
};
const SB: BufKind = BufKind {
    blft: blft::SB,
    lsn_off: Some(xfs_format::sb::XFS_SB_LSN_OFF),
};
const SB_FREXTENTS_OFF: usize = std::mem::offset_of!(xfs_format::sb::Dsb, sb_frextents);

fn corrupt(detail: String) -> Error {
    Error::corrupt("realtime bitmap", Location::Sb(0), detail)
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
        })
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
        tp.read_raw_buf(daddr, self.bs as u32, kind, None)
    }

    fn word(&self, tp: &mut Trans<'_>, rtx: u64) -> Result<(BufId, usize)> {
        let bb = rtx / self.bits_per_block;
        let id = self.block(tp, &self.rbm, bb, RTBITMAP)?;
        Ok((id, ((rtx % self.bits_per_block) / 32 * 4) as usize))
    }

    fn is_free(&self, tp: &mut Trans<'_>, rtx: u64) -> Result<bool> {
        let (id, off) = self.word(tp, rtx)?;
        let b = tp.buf(id);
        let w = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
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
            let b = tp.buf_mut(id);
            let mut w = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
            if free {
                w |= mask;
            } else {
                w &= !mask;
            }
            b[off..off + 4].copy_from_slice(&w.to_le_bytes());
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
            let b = tp.buf(id);
            let w = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
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
            let b = tp.buf(id);
            let w = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
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
        let byte = (log * self.rbmblocks + bb) * 4;
        let id = self.block(tp, &self.rsum, byte / self.bs, RTSUMMARY)?;
        Ok((id, (byte % self.bs) as usize))
    }

    fn sum_get(&self, tp: &mut Trans<'_>, log: u64, bb: u64) -> Result<u32> {
        let (id, off) = self.sum_slot(tp, log, bb)?;
        let b = tp.buf(id);
        Ok(u32::from_le_bytes([
            b[off],
            b[off + 1],
            b[off + 2],
            b[off + 3],
        ]))
    }

    /// Adds `delta` to the count of free extents of `len` starting at `start`.
    fn sum_add(&self, tp: &mut Trans<'_>, start: u64, len: u64, delta: i32) -> Result<()> {
        let (id, off) = self.sum_slot(tp, log2(len), start / self.bits_per_block)?;
        let b = tp.buf_mut(id);
        let v = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
        let v = v.checked_add_signed(delta).ok_or_else(|| {
            corrupt(format!(
                "the realtime summary's count for {len} extents at {start} would go out of range"
            ))
        })?;
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        Ok(())
    }

    fn frextents_add(&self, tp: &mut Trans<'_>, delta: i64) -> Result<()> {
        let sect = tp.geo().sect_size;
        let id = tp.read_raw_buf(Daddr(0), sect, SB, Some(xfs_format::sb::XFS_SB_CRC_OFF))?;
        let b = tp.buf_mut(id);
        let o = SB_FREXTENTS_OFF;
        let v = u64::from_be_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let v = v.checked_add_signed(delta).filter(|&v| v <= self.rextents);
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

/// Allocates between `minlen` and `maxlen` realtime extents, the first
/// free run (in bitmap order from the block of `goal`, wrapping) that the
/// summary shows at least `minlen` long; returns (first extent, count).
pub(crate) fn rt_alloc(
    tp: &mut Trans<'_>,
    goal: u64,
    minlen: u64,
    maxlen: u64,
) -> Result<(u64, u64)> {
    let rt = Rt::open(tp)?;
    // Extents freed since the last log force may still belong to their old
    // owner on disk: that free must be durable before new data lands.
    if tp.fs().write_state()?.take_rt_freed() {
        tp.fs().force_log()?;
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
                return Ok((start, take));
            }
            x = start + len;
        }
    }
    Err(Error::NoSpace(format!(
        "no run of {minlen} free realtime extents"
    )))
}

/// Frees realtime extents `start..start+len`, merging the summary's
/// counts with the free runs on either side.
pub(crate) fn rt_free(tp: &mut Trans<'_>, start: u64, len: u64) -> Result<()> {
    let rt = Rt::open(tp)?;
    if len == 0 || start.checked_add(len).is_none_or(|e| e > rt.rextents) {
        return Err(corrupt(format!(
            "freeing realtime extents {start}+{len} past the section's {}",
            rt.rextents
        )));
    }
    if rt.run_forward(tp, start, false, len)? != len {
        return Err(corrupt(format!(
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

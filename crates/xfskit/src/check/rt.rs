//! The classic realtime section: its bitmap and summary files against the
//! realtime files' extents.
//!
//! The inode pass hands every realtime file's data fork mapping to
//! [`RtClaims::add_file`], which keeps one record per mapped run of
//! realtime extents (memory follows the files' extent records). After it,
//! [`finish`] sorts them: a realtime extent mapped by two records of
//! different files (or twice by one file) is a problem; what no file maps
//! is free. From that it computes the bitmap (one bit a realtime extent, set
//! when free, in 32-bit words of host order, little-endian here), the free
//! count and the summary (for each bitmap block and each power of two, the
//! number of maximal free runs of that length class that start in that
//! block; index `log2(len) * rbmblocks + block`), and compares every block
//! of both files and `sb_frextents` with them, as `xfs_repair` does.
//!
//! The bitmap is read one block at a time and compared as it is made; the
//! expected summary is kept sparse (one entry per free run), so memory
//! follows the realtime files, not the size of the realtime device.

use super::Ctx;
use crate::error::Location;
use crate::inode::{self, Extent, Fork};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Realtime extents in the half-open range `start..end`, mapped by `ino`
/// at file block `off`.
#[derive(Debug, Clone, Copy)]
struct Claim {
    start: u64,
    end: u64,
    ino: u64,
    off: u64,
}

/// What the inode pass found of the realtime files.
#[derive(Default)]
pub(crate) struct RtClaims {
    claims: Mutex<Vec<Claim>>,
}

/// Most word ranges named in one block's problem.
const MAX_RANGES: usize = 8;

impl RtClaims {
    /// Notes the realtime extents of a realtime file's data fork mapping
    /// `ext` (sorted by file block, in realtime blocks). A mapping that
    /// starts inside a realtime extent continues the extent the file's
    /// previous mapping ended in; any other is a problem.
    pub(crate) fn add_file(&self, ctx: &Ctx<'_>, ino: u64, ext: &[Extent]) {
        let geo = ctx.fs.geometry();
        let rx = u64::from(geo.rt_extsize.max(1));
        let mut mine = Vec::with_capacity(ext.len());
        let mut prev_last: Option<u64> = None;
        for e in ext {
            // Realtime extents are counted across the groups end to end
            // (whatever gaps zones leave on the device).
            let (rgno, rgbno) = geo.rtb_split(e.start.0);
            let s = u64::from(rgno) * geo.rg_blocks() + rgbno;
            let mut first = s / rx;
            let last = (s + e.len - 1) / rx;
            if !s.is_multiple_of(rx) {
                if prev_last == Some(first) {
                    first += 1;
                } else {
                    ctx.sink.add(
                        "realtime extent",
                        Location::InodeBlock {
                            ino,
                            fork: "data",
                            offset: e.offset,
                        },
                        format!(
                            "the mapping at realtime block {s} starts inside realtime extent {first}, which the file does not map from its start"
                        ),
                    );
                }
            }
            if last >= geo.rt_extents {
                ctx.sink.add(
                    "realtime extent",
                    Location::InodeBlock {
                        ino,
                        fork: "data",
                        offset: e.offset,
                    },
                    format!(
                        "the mapping at realtime block {s} ({} blocks) reaches realtime extent {last}, past the last one ({})",
                        e.len,
                        geo.rt_extents.saturating_sub(1)
                    ),
                );
            }
            let end = (last + 1).min(geo.rt_extents);
            if first < end {
                mine.push(Claim {
                    start: first,
                    end,
                    ino,
                    off: e.offset,
                });
            }
            prev_last = Some(last);
        }
        if !mine.is_empty() {
            self.claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(mine);
        }
    }

    /// The used realtime extents as sorted, disjoint, merged ranges;
    /// extents claimed twice are reported.
    pub(crate) fn used(&self, ctx: &Ctx<'_>) -> Vec<(u64, u64)> {
        let mut claims =
            std::mem::take(&mut *self.claims.lock().unwrap_or_else(|p| p.into_inner()));
        claims.sort_unstable_by_key(|c| (c.start, c.ino, c.off));
        let mut used: Vec<(u64, u64)> = Vec::new();
        // The claim that reaches furthest so far.
        let mut reach: Option<Claim> = None;
        // Realtime groups with reflink share extents: their refcount
        // btrees say which (rtgroups.rs).
        let geo = ctx.fs.geometry();
        let shared_ok = geo.has_rtgroups() && geo.features.reflink;
        for c in claims {
            if let Some(r) = reach.filter(|r| c.start < r.end && !shared_ok) {
                ctx.sink.add(
                    "realtime extent",
                    Location::InodeBlock {
                        ino: c.ino,
                        fork: "data",
                        offset: c.off,
                    },
                    format!(
                        "realtime extents {}-{} are also mapped by inode {} (data fork block {})",
                        c.start,
                        c.end.min(r.end) - 1,
                        r.ino,
                        r.off
                    ),
                );
            }
            match used.last_mut() {
                Some(u) if c.start <= u.1 => u.1 = u.1.max(c.end),
                _ => used.push((c.start, c.end)),
            }
            if reach.is_none_or(|r| c.end > r.end) {
                reach = Some(c);
            }
        }
        used
    }
}

/// The free runs between the used ranges within `0..rextents`.
fn free_runs(used: &[(u64, u64)], rextents: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut at = 0u64;
    let mut i = 0usize;
    std::iter::from_fn(move || loop {
        if at >= rextents {
            return None;
        }
        match used.get(i) {
            Some(&(s, e)) if s <= at => {
                at = at.max(e);
                i += 1;
            }
            Some(&(s, e)) => {
                let run = (at, s.min(rextents));
                at = e;
                i += 1;
                return Some(run);
            }
            None => {
                let run = (at, rextents);
                at = rextents;
                return Some(run);
            }
        }
    })
}

/// The words of `got` that differ from `want`, as inclusive index ranges.
fn differing(got: &[u32], want: &[u32]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            match out.last_mut() {
                Some(r) if r.1 + 1 == i => r.1 = i,
                _ => out.push((i, i)),
            }
        }
    }
    out
}

fn words_of(block: &[u8]) -> Vec<u32> {
    block
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

fn ranges_text(r: &[(usize, usize)]) -> String {
    let mut t: Vec<String> = r
        .iter()
        .take(MAX_RANGES)
        .map(|&(a, b)| {
            if a == b {
                format!("{a}")
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    if r.len() > MAX_RANGES {
        t.push(format!("and {} more ranges", r.len() - MAX_RANGES));
    }
    t.join(", ")
}

/// One of the two realtime metadata files: its inode and data fork map,
/// checked to be `blocks` blocks long; None (reported) when unreadable.
fn rt_file(ctx: &Ctx<'_>, what: &'static str, ino: u64, blocks: u64) -> Option<Vec<Extent>> {
    let geo = ctx.fs.geometry();
    let ip = match ctx.fs.inode(crate::geometry::Ino(ino)) {
        Ok(i) => i,
        Err(e) => {
            ctx.sink
                .add(what, Location::Inode(ino), format!("cannot be read: {e}"));
            return None;
        }
    };
    let want = blocks * u64::from(geo.block_size);
    if ip.size != want {
        ctx.sink.add(
            what,
            Location::Inode(ino),
            format!("size {}, want {want} ({blocks} blocks)", ip.size),
        );
    }
    match inode::extents(ctx.fs, &ip, Fork::Data) {
        Ok(m) => Some(m),
        Err(e) => {
            ctx.sink.error_in(e, ino);
            None
        }
    }
}

/// Reads block `b` of a realtime metadata file mapped by `map`; a hole or
/// an unreadable block is reported and gives None.
fn read_block(
    ctx: &Ctx<'_>,
    what: &'static str,
    ino: u64,
    map: &[Extent],
    b: u64,
) -> Option<Vec<u8>> {
    let geo = ctx.fs.geometry();
    let at = Location::InodeBlock {
        ino,
        fork: "data",
        offset: b,
    };
    let e = match inode::lookup(map, b) {
        Ok(e) if !e.unwritten => e,
        _ => {
            ctx.sink
                .add(what, at, "block not mapped (a hole or unwritten)");
            return None;
        }
    };
    let bs = u64::from(geo.block_size);
    let mut buf = vec![0u8; geo.block_size as usize];
    let off = geo.fsb_to_daddr(e.start).bytes() + (b - e.offset) * bs;
    match ctx.fs.read_bytes(off, &mut buf) {
        Ok(()) => Some(buf),
        Err(e) => {
            ctx.sink.add(what, at, format!("cannot be read: {e}"));
            None
        }
    }
}

/// Checks the realtime bitmap, summary and free count against the
/// realtime files' extents the inode pass collected.
pub(crate) fn finish(ctx: &Ctx<'_>, claims: &RtClaims) {
    let geo = ctx.fs.geometry();
    let used = claims.used(ctx);
    let rextents = geo.rt_extents;
    let bs = u64::from(geo.block_size);
    let wpb = (bs / 4) as usize;
    let bits_per_block = bs * 8;
    let rbmblocks = u64::from(geo.rt_bmblocks);
    let levels = u64::from(geo.rt_extslog) + 1;

    // The free runs: the free count and the summary.
    let mut free = 0u64;
    let mut summary: BTreeMap<u64, u32> = BTreeMap::new();
    for (a, b) in free_runs(&used, rextents) {
        free += b - a;
        let level = u64::from(63 - (b - a).leading_zeros());
        let idx = level * rbmblocks + a / bits_per_block;
        let n = summary.entry(idx).or_default();
        *n = n.wrapping_add(1);
    }
    if geo.rt_frextents != free {
        ctx.sink.add(
            "superblock",
            Location::Sb(0),
            format!(
                "frextents {}, but the realtime files leave {free} realtime extents free",
                geo.rt_frextents
            ),
        );
    }
    // The files' sizes follow from the superblock: walk them only when
    // its fields agree, so a damaged field cannot make the walk huge.
    let want_bm = rextents.div_ceil(bits_per_block);
    if rbmblocks != want_bm {
        ctx.sink.add(
            "superblock",
            Location::Sb(0),
            format!("rbmblocks {rbmblocks}, but {rextents} realtime extents need {want_bm} bitmap blocks: the bitmap and summary were not compared"),
        );
        return;
    }
    let want_log = if rextents == 0 {
        0
    } else {
        63 - rextents.leading_zeros()
    };
    if u32::from(geo.rt_extslog) != want_log {
        ctx.sink.add(
            "superblock",
            Location::Sb(0),
            format!(
                "rextslog {}, but {rextents} realtime extents make it {want_log}: the bitmap and summary were not compared",
                geo.rt_extslog
            ),
        );
        return;
    }

    // The bitmap, block by block.
    let what = "realtime bitmap";
    let ino = geo.rbm_ino.0;
    if let Some(map) = rt_file(ctx, what, ino, rbmblocks) {
        let mut next_used = 0usize;
        let mut want = vec![0u32; wpb];
        for b in 0..rbmblocks {
            let Some(block) = read_block(ctx, what, ino, &map, b) else {
                continue;
            };
            // Free bits set up to the last realtime extent, then the used
            // ranges that meet this block cleared.
            let first = b * bits_per_block;
            let end = (first + bits_per_block).min(rextents);
            want.fill(0);
            set_bits(&mut want, 0, end.saturating_sub(first), true);
            while let Some(&(s, e)) = used.get(next_used) {
                if s >= end {
                    break;
                }
                if e > first {
                    set_bits(&mut want, s.max(first) - first, e.min(end) - first, false);
                }
                if e <= end {
                    next_used += 1;
                } else {
                    break;
                }
            }
            let bad = differing(&words_of(&block), &want);
            if !bad.is_empty() {
                ctx.sink.add(
                    what,
                    Location::InodeBlock {
                        ino,
                        fork: "data",
                        offset: b,
                    },
                    format!(
                        "words {} (of the block's {wpb}) differ from what the realtime files map (realtime extents {first}-{})",
                        ranges_text(&bad),
                        first + bits_per_block - 1
                    ),
                );
            }
        }
    }

    // The summary, block by block.
    let what = "realtime summary";
    let ino = geo.rsum_ino.0;
    let words = levels * rbmblocks;
    let rsumblocks = (words * 4).div_ceil(bs);
    if let Some(map) = rt_file(ctx, what, ino, rsumblocks) {
        let mut want = vec![0u32; wpb];
        for b in 0..rsumblocks {
            let Some(block) = read_block(ctx, what, ino, &map, b) else {
                continue;
            };
            want.fill(0);
            let first = b * wpb as u64;
            for (&idx, &n) in summary.range(first..first + wpb as u64) {
                want[(idx - first) as usize] = n;
            }
            let bad = differing(&words_of(&block), &want);
            if !bad.is_empty() {
                let (w, _) = bad[0];
                let idx = first + w as u64;
                ctx.sink.add(
                    what,
                    Location::InodeBlock {
                        ino,
                        fork: "data",
                        offset: b,
                    },
                    format!(
                        "words {} (of the block's {wpb}) differ from the free runs the realtime files leave (word {w}: {} free runs of 2^{} extents in bitmap block {}, want {})",
                        ranges_text(&bad),
                        u32::from_le_bytes(block[w * 4..w * 4 + 4].try_into().unwrap_or([0; 4])),
                        idx / rbmblocks.max(1),
                        idx % rbmblocks.max(1),
                        want[w]
                    ),
                );
            }
        }
    }
}

/// Sets (`on`) or clears the bits `a..b` of a block of 32-bit words.
pub(crate) fn set_bits(words: &mut [u32], a: u64, b: u64, on: bool) {
    let mut i = a;
    while i < b {
        let w = (i / 32) as usize;
        let bit = i % 32;
        let n = (32 - bit).min(b - i);
        let mask = if n == 32 {
            u32::MAX
        } else {
            ((1u32 << n) - 1) << bit
        };
        if on {
            words[w] |= mask;
        } else {
            words[w] &= !mask;
        }
        i += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_runs_between_used_ranges() {
        let used = [(0, 3), (5, 6), (6, 9), (20, 30)];
        let runs: Vec<_> = free_runs(&used, 25).collect();
        assert_eq!(runs, [(3, 5), (9, 20)]);
        let runs: Vec<_> = free_runs(&[], 7).collect();
        assert_eq!(runs, [(0, 7)]);
        let runs: Vec<_> = free_runs(&[(2, 4)], 10).collect();
        assert_eq!(runs, [(0, 2), (4, 10)]);
    }

    #[test]
    fn bits_set_and_cleared_across_words() {
        let mut w = vec![0u32; 3];
        set_bits(&mut w, 0, 70, true);
        assert_eq!(w, [u32::MAX, u32::MAX, 0b11_1111]);
        set_bits(&mut w, 30, 33, false);
        assert_eq!(w, [0x3fff_ffff, u32::MAX - 1, 0b11_1111]);
    }

    #[test]
    fn differing_words_as_ranges() {
        assert_eq!(
            differing(&[1, 2, 3, 4, 5], &[1, 0, 0, 4, 0]),
            [(1, 2), (4, 4)]
        );
        assert!(differing(&[1, 2], &[1, 2]).is_empty());
    }
}

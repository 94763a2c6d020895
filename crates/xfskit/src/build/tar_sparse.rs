//! Sparse members of tar archives: the maps of the old GNU sparse header
//! and of GNU pax sparse 1.0, read into [`TarEntry::sparse`] so that
//! [`TarReader::data`] can place each stored piece at its file offset.

use std::io::Read;

use super::tar_pax::Pending;
use super::tar_reader::{corrupt, number, TarEntry, TarReader, BLOCK};
use crate::error::Result;

impl<R: Read> TarReader<R> {
    /// The old GNU sparse header: 4 map entries in the header, 21 in each
    /// extension block that follows.
    pub(super) fn gnu_sparse(&mut self, h: &[u8; BLOCK], e: &mut TarEntry) -> Result<()> {
        let name = e.display();
        let bad = |pos| corrupt(pos, format!("{name}: bad GNU sparse header"));
        let mut map = Vec::new();
        let take = |raw: &[u8], n: usize, pos: u64, map: &mut Vec<(u64, u64)>| -> Result<()> {
            for i in 0..n {
                let f = &raw[i * 24..i * 24 + 24];
                if f[0] == 0 {
                    break;
                }
                let o = number(&f[..12]).ok_or_else(|| bad(pos))?;
                let l = number(&f[12..]).ok_or_else(|| bad(pos))?;
                map.push((o, l));
            }
            Ok(())
        };
        take(&h[386..482], 4, e.offset, &mut map)?;
        e.size = number(&h[483..495]).ok_or_else(|| bad(e.offset))?;
        let mut extended = h[482] != 0;
        let mut ext = [0u8; BLOCK];
        while extended {
            let pos = self.pos;
            self.block(&mut ext, &|| format!("the sparse map of {name}"))?;
            take(&ext[..504], 21, pos, &mut map)?;
            extended = ext[504] != 0;
        }
        map.retain(|&(_, l)| l > 0);
        e.sparse = Some(map);
        Ok(())
    }

    /// GNU pax sparse 1.0: the map opens the data area as decimal lines
    /// (count, then offset/length pairs), padded to a block.
    pub(super) fn pax_sparse_map(&mut self, e: &mut TarEntry, p: &Pending) -> Result<()> {
        e.size = p.sparse_size.ok_or_else(|| {
            corrupt(
                e.offset,
                format!("{}: sparse 1.0 entry without a real size", e.display()),
            )
        })?;
        let mut lines: Vec<u64> = Vec::new();
        let mut want: Option<u64> = None;
        let mut cur: Vec<u8> = Vec::new();
        let mut blk = [0u8; BLOCK];
        let name = e.display();
        while want.is_none_or(|w| (lines.len() as u64) < 1 + 2 * w) {
            if self.left < BLOCK as u64 {
                return Err(corrupt(
                    self.pos,
                    format!("{name}: sparse map runs past its data"),
                ));
            }
            self.block(&mut blk, &|| format!("the sparse map of {name}"))?;
            self.left -= BLOCK as u64;
            self.data_left = self.data_left.saturating_sub(BLOCK as u64);
            for &b in blk.iter() {
                if want.is_some_and(|w| lines.len() as u64 > 2 * w) {
                    break;
                }
                if b == b'\n' {
                    let v = std::str::from_utf8(&cur)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| corrupt(self.pos, format!("{name}: bad sparse map")))?;
                    if lines.is_empty() {
                        // Each pair takes at least 4 map bytes of the archive.
                        if v.saturating_mul(4) > self.left + BLOCK as u64 {
                            return Err(corrupt(self.pos, format!("{name}: sparse map too long")));
                        }
                        want = Some(v);
                    }
                    lines.push(v);
                    cur.clear();
                } else if cur.len() < 24 {
                    cur.push(b);
                } else {
                    return Err(corrupt(self.pos, format!("{name}: bad sparse map")));
                }
            }
        }
        // Data that follows the map is what is left of the member.
        self.data_left = self.left.min(self.data_left);
        let map: Vec<(u64, u64)> = lines[1..]
            .chunks_exact(2)
            .map(|c| (c[0], c[1]))
            .filter(|&(_, l)| l > 0)
            .collect();
        let total: u64 = map.iter().map(|m| m.1).sum();
        // The stored size counted the map; the real data is the map's total.
        if total > self.data_left {
            return Err(corrupt(
                self.pos,
                format!("{name}: sparse map covers more than the archive holds"),
            ));
        }
        self.data_left = total;
        e.sparse = Some(map);
        Ok(())
    }
}

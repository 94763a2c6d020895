//! Free space as `xfs_db -c freesp` reports it: the free extents of each
//! AG (its free list's blocks, one-block extents, then the records of the
//! by-block free space btree, or of the by-size one with `by_size`) put in
//! a histogram of size bins.
//!
//! Cost: the AGF, AGFL and the btree's blocks of each AG scanned, one block
//! per level held; the histogram has one bin per power of two (or per the
//! bins asked for).

use super::btree::{read_hdr, walk, Tree};
use crate::buf::verify::Verifier;
use crate::bytes::be32_or0;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber};
use xfs_format::ag::{XFS_AGFL_HDR_SIZE, XFS_AGFL_SECTOR, XFS_AGF_SECTOR};
use xfs_format::btree::{XFS_ABTB_CRC_MAGIC, XFS_ABTC_CRC_MAGIC};

/// How the bins are laid out (xfs_db's -b, -e, -h, -m).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bins {
    /// Bins starting at 1 and each power of `m` below the AG size (-m M;
    /// -b and the default are 2).
    Mult(u32),
    /// Bins of `e` blocks each (-e E).
    Equal(u32),
    /// Bins starting at each of these sizes (-h H...; 1 is added).
    Starts(Vec<u32>),
}

/// What to scan and how to report it.
#[derive(Debug, Clone)]
pub struct Options {
    /// The AGs to scan (every AG when empty), as xfs_db's -a.
    pub ags: Vec<u32>,
    /// Walk the by-size btree instead of the by-block one (-c).
    pub by_size: bool,
    /// Count only extents whose first block is a multiple of this (-A).
    pub alignment: u64,
    /// The bins.
    pub bins: Bins,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            ags: Vec::new(),
            by_size: false,
            alignment: 0,
            bins: Bins::Mult(2),
        }
    }
}

/// One bin: extents of `low` to `high` blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bin {
    pub low: u32,
    pub high: u32,
    pub extents: u64,
    pub blocks: u64,
}

/// The histogram and the totals.
#[derive(Debug, Clone)]
pub struct Report {
    pub bins: Vec<Bin>,
    pub extents: u64,
    pub blocks: u64,
}

fn make_bins(bins: &Bins, maxlen: u32) -> Result<Vec<Bin>> {
    let mut lows: Vec<u32> = Vec::new();
    match bins {
        Bins::Mult(m) => {
            if *m < 2 {
                return Err(Error::Invalid(format!(
                    "bin multiplier {m}: it must be 2 or more"
                )));
            }
            let mut i = 1u64;
            while i < u64::from(maxlen) {
                lows.push(i as u32);
                i *= u64::from(*m);
            }
        }
        Bins::Equal(e) => {
            if *e == 0 {
                return Err(Error::Invalid("bin size 0".into()));
            }
            let mut i = 1u64;
            while i < u64::from(maxlen) {
                lows.push(i as u32);
                i += u64::from(*e);
            }
        }
        Bins::Starts(s) => {
            lows = s.iter().map(|&h| h.max(1)).collect();
            if !lows.contains(&1) {
                lows.push(1);
            }
            lows.sort_unstable();
        }
    }
    let n = lows.len();
    Ok((0..n)
        .map(|i| Bin {
            low: lows[i],
            high: if i + 1 < n {
                lows[i + 1].wrapping_sub(1)
            } else {
                maxlen
            },
            extents: 0,
            blocks: 0,
        })
        .collect())
}

/// Scans the free space; `extent` sees every free extent counted (AG, AG
/// block, length), in the order they are found (xfs_db's -d).
pub fn scan(fs: &Fs, opts: &Options, extent: &mut dyn FnMut(u32, u32, u32)) -> Result<Report> {
    let geo = fs.geometry();
    for &a in &opts.ags {
        if a >= geo.ag_count {
            return Err(Error::Invalid(format!(
                "AG {a}: the filesystem has {} AGs",
                geo.ag_count
            )));
        }
    }
    let mut r = Report {
        bins: make_bins(&opts.bins, geo.ag_blocks)?,
        extents: 0,
        blocks: 0,
    };
    for agno in 0..geo.ag_count {
        if !opts.ags.is_empty() && !opts.ags.contains(&agno) {
            continue;
        }
        scan_ag(fs, opts, agno, &mut r, extent)?;
    }
    Ok(r)
}

fn add(
    fs: &Fs,
    opts: &Options,
    r: &mut Report,
    extent: &mut dyn FnMut(u32, u32, u32),
    agno: u32,
    agbno: u32,
    len: u32,
) {
    let geo = fs.geometry();
    if opts.alignment != 0
        && !geo
            .fsb_make(AgNumber(agno), AgBlock(agbno))
            .0
            .is_multiple_of(opts.alignment)
    {
        return;
    }
    extent(agno, agbno, len);
    r.extents += 1;
    r.blocks += u64::from(len);
    // The first bin whose upper end holds the length (bins are in order).
    if let Some(b) = r.bins.iter_mut().find(|b| b.high >= len) {
        b.extents += 1;
        b.blocks += u64::from(len);
    }
}

fn scan_ag(
    fs: &Fs,
    opts: &Options,
    agno: u32,
    r: &mut Report,
    extent: &mut dyn FnMut(u32, u32, u32),
) -> Result<()> {
    let geo = fs.geometry();
    let agf = read_hdr(fs, agno, XFS_AGF_SECTOR, &Verifier::Agf { agno })?;
    let flfirst = be32_or0(&agf, 40);
    let fllast = be32_or0(&agf, 44);
    let flcount = be32_or0(&agf, 48);
    if flcount != 0 {
        let start = if geo.v5 { XFS_AGFL_HDR_SIZE } else { 0 };
        let size = ((geo.sect_size as usize - start) / 4) as u32;
        if flfirst >= size || fllast >= size {
            return Err(Error::corrupt(
                "AGF",
                Location::Other(format!("AG {agno} AGF")),
                format!("free list slots {flfirst}..{fllast} outside the {size} the AGFL has"),
            ));
        }
        let agfl = read_hdr(fs, agno, XFS_AGFL_SECTOR, &Verifier::Agfl { agno })?;
        let mut i = flfirst;
        loop {
            add(
                fs,
                opts,
                r,
                extent,
                agno,
                be32_or0(&agfl, start + 4 * i as usize),
                1,
            );
            if i == fllast {
                break;
            }
            i = (i + 1) % size;
        }
    }
    let (what, root, levels, magic) = if opts.by_size {
        (
            "cntbt",
            be32_or0(&agf, 20),
            be32_or0(&agf, 32),
            XFS_ABTC_CRC_MAGIC,
        )
    } else {
        (
            "bnobt",
            be32_or0(&agf, 16),
            be32_or0(&agf, 28),
            XFS_ABTB_CRC_MAGIC,
        )
    };
    let t = Tree {
        what,
        agno,
        root,
        levels,
        magic,
        rec_len: 8,
        key_len: 8,
    };
    walk(fs, &t, &mut |rec| {
        add(
            fs,
            opts,
            r,
            extent,
            agno,
            be32_or0(rec, 0),
            be32_or0(rec, 4),
        );
        Ok(())
    })
}

/// C's `%g`: six significant digits, trailing zeros dropped, exponent form
/// below 1e-4 and from 1e6 on; NaN as glibc prints 0.0/0.0 ("-nan").
pub fn fmt_g(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let e = format!("{v:.5e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..6).contains(&x) {
        strip(&format!("{v:.*}", (5 - x) as usize))
    } else {
        let sign = if x < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mant), x.abs())
    }
}

/// The histogram as xfs_db prints it, then with `summary` the totals (-s).
/// The layout is xfsprogs 7.2's: columns as wide as their longest number
/// (at least the heading), and beside each bin's share of the free blocks
/// (pct) the share of blocks (blkcdf) and of extents (extcdf) in that bin
/// and every larger one. `classic` gives the five fixed columns of xfsprogs
/// 6.1 and older instead.
pub fn render(r: &Report, summary: bool, classic: bool) -> String {
    let used = || r.bins.iter().filter(|b| b.extents != 0);
    let pct = |n: u64, of: u64| n as f64 * 100.0 / of as f64;
    let mut s = String::new();
    if classic {
        s += &format!(
            "{:>7} {:>7} {:>7} {:>7} {:>6}\n",
            "from", "to", "extents", "blocks", "pct"
        );
        for b in used() {
            s += &format!(
                "{:>7} {:>7} {:>7} {:>7} {:>6.2}\n",
                b.low,
                b.high,
                b.extents,
                b.blocks,
                pct(b.blocks, r.blocks)
            );
        }
    } else {
        let w = |f: &dyn Fn(&Bin) -> u64, min: usize| {
            used().map(|b| f(b).to_string().len()).fold(min, usize::max)
        };
        let (fw, tw) = (w(&|b| u64::from(b.low), 7), w(&|b| u64::from(b.high), 7));
        let (ew, bw) = (w(&|b| b.extents, 7), w(&|b| b.blocks, 6));
        s += &format!(
            "{:>fw$} {:>tw$} {:>ew$} {:>bw$} {:>6} {:>6} {:>6}\n",
            "from", "to", "extents", "blocks", "pct", "blkcdf", "extcdf"
        );
        // What this bin and every larger one hold, from the top down.
        let mut above = vec![(0u64, 0u64); r.bins.len() + 1];
        for (i, b) in r.bins.iter().enumerate().rev() {
            above[i] = (above[i + 1].0 + b.blocks, above[i + 1].1 + b.extents);
        }
        for (i, b) in r.bins.iter().enumerate().filter(|(_, b)| b.extents != 0) {
            s += &format!(
                "{:>fw$} {:>tw$} {:>ew$} {:>bw$} {:>6.2} {:>6.2} {:>6.2}\n",
                b.low,
                b.high,
                b.extents,
                b.blocks,
                pct(b.blocks, r.blocks),
                pct(above[i].0, r.blocks),
                pct(above[i].1, r.extents)
            );
        }
    }
    if summary {
        s += &format!("total free extents {}\n", r.extents);
        s += &format!("total free blocks {}\n", r.blocks);
        s += &format!(
            "average free extent size {}\n",
            fmt_g(r.blocks as f64 / r.extents as f64)
        );
    }
    s
}

/// The report as JSON.
pub fn to_json(r: &Report) -> serde_json::Value {
    let bins: Vec<_> = r
        .bins
        .iter()
        .filter(|b| b.extents != 0)
        .map(|b| {
            serde_json::json!({
                "from": b.low, "to": b.high, "extents": b.extents, "blocks": b.blocks,
                "pct": b.blocks as f64 * 100.0 / r.blocks as f64,
            })
        })
        .collect();
    serde_json::json!({
        "bins": bins,
        "total_free_extents": r.extents,
        "total_free_blocks": r.blocks,
        "average_free_extent_size": (r.extents != 0).then(|| r.blocks as f64 / r.extents as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_g() {
        assert_eq!(fmt_g(8190.5), "8190.5");
        assert_eq!(fmt_g(65523.0), "65523");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.000123), "0.000123");
        assert_eq!(fmt_g(0.00001234), "1.234e-05");
        assert_eq!(fmt_g(2.0 / 3.0), "0.666667");
        assert_eq!(fmt_g(999999.5), "1e+06");
        assert_eq!(fmt_g(f64::NAN.copysign(-1.0)), "-nan");
    }

    #[test]
    fn power_of_two_bins() {
        let b = make_bins(&Bins::Mult(2), 65536).unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!((b[0].low, b[0].high), (1, 1));
        assert_eq!((b[15].low, b[15].high), (32768, 65536));
        let b = make_bins(&Bins::Starts(vec![10, 3]), 100).unwrap();
        let r: Vec<_> = b.iter().map(|b| (b.low, b.high)).collect();
        assert_eq!(r, vec![(1, 2), (3, 9), (10, 100)]);
    }
}

//! One fork of an inode as a sorted set of extent records, whatever its
//! format: reading records in order from a file block on, and replacing
//! a run of records by another. Switches the fork between the extents
//! format (records in the inode) and the btree format (records in bmbt
//! leaves under a root in the inode) as the record count crosses what
//! the fork holds.

use super::{bmbt, edit, node};
use crate::error::{Error, Location, Result};
use crate::geometry::{FsBlock, Geometry};
use crate::inode::bmap::{decode_rec, REC_SIZE};
use crate::inode::{Extent, Fork, ForkFormat, Inode, CORE_SIZE};
use crate::trans::Trans;
use xfs_format::types::BmbtIrec;

/// A corruption error located at a fork of `ip`.
pub(crate) fn corrupt(ip: &Inode, fork: Fork, detail: impl Into<String>) -> Error {
    Error::corrupt(
        "extent map",
        Location::InodeBlock {
            ino: ip.ino.0,
            fork: fork.name(),
            offset: 0,
        },
        detail,
    )
}

/// Bytes the fork occupies in the inode's literal area.
pub(crate) fn size(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<usize> {
    let lit = geo.inode_size as usize - CORE_SIZE;
    let split = usize::from(ip.forkoff) * 8;
    match fork {
        Fork::Data if ip.forkoff == 0 => Ok(lit),
        Fork::Data => Ok(split.min(lit)),
        Fork::Attr if ip.forkoff == 0 => Err(Error::Invalid(format!(
            "inode {} has no attr fork",
            ip.ino.0
        ))),
        Fork::Attr => Ok(lit.saturating_sub(split)),
    }
}

/// Extent records the fork holds in the extents format.
pub(crate) fn max_inline(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<usize> {
    Ok(size(geo, ip, fork)? / REC_SIZE)
}

/// The fork's format.
pub(crate) fn format(ip: &Inode, fork: Fork) -> ForkFormat {
    match fork {
        Fork::Data => ip.format,
        Fork::Attr => ip.aformat,
    }
}

fn set_format(ip: &mut Inode, fork: Fork, f: ForkFormat) {
    match fork {
        Fork::Data => ip.format = f,
        Fork::Attr => ip.aformat = f,
    }
}

/// The fork's extent record count.
pub(crate) fn count(ip: &Inode, fork: Fork) -> u64 {
    match fork {
        Fork::Data => ip.nextents,
        Fork::Attr => u64::from(ip.anextents),
    }
}

fn set_count(ip: &mut Inode, fork: Fork, n: u64) -> Result<()> {
    match fork {
        Fork::Data => ip.nextents = n,
        Fork::Attr => {
            ip.anextents =
                u32::try_from(n).map_err(|_| Error::Invalid("too many attr fork extents".into()))?
        }
    }
    Ok(())
}

/// The fork's bytes.
pub(crate) fn bytes(ip: &Inode, fork: Fork) -> &[u8] {
    match fork {
        Fork::Data => &ip.data_fork,
        Fork::Attr => &ip.attr_fork,
    }
}

/// The fork's bytes for rewriting: zeroed, exactly the fork's size.
pub(crate) fn bytes_reset<'i>(
    geo: &Geometry,
    ip: &'i mut Inode,
    fork: Fork,
) -> Result<&'i mut [u8]> {
    let n = size(geo, ip, fork)?;
    let v = match fork {
        Fork::Data => &mut ip.data_fork,
        Fork::Attr => &mut ip.attr_fork,
    };
    v.clear();
    v.resize(n, 0);
    Ok(v)
}

/// Fails unless the fork maps blocks (extents or btree format).
pub(crate) fn check_mapped(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<()> {
    size(geo, ip, fork)?;
    match format(ip, fork) {
        ForkFormat::Extents | ForkFormat::Btree => Ok(()),
        f => Err(Error::Invalid(format!(
            "inode {} {} fork is in {f:?} format, not extents or btree",
            ip.ino.0,
            fork.name()
        ))),
    }
}

fn to_extent(r: BmbtIrec) -> Extent {
    Extent {
        offset: r.startoff,
        start: FsBlock(r.startblock),
        len: r.blockcount,
        unwritten: r.unwritten,
    }
}

/// Packs an extent into its 16-byte record.
pub(crate) fn pack(e: &Extent, out: &mut [u8]) {
    let (l0, l1) = BmbtIrec {
        startoff: e.offset,
        startblock: e.start.0,
        blockcount: e.len,
        unwritten: e.unwritten,
    }
    .pack();
    out[..8].copy_from_slice(&l0.to_be_bytes());
    out[8..16].copy_from_slice(&l1.to_be_bytes());
}

/// Unpacks a 16-byte record.
pub(crate) fn unpack(b: &[u8]) -> Extent {
    to_extent(decode_rec(b))
}

/// The records of an extents-format fork.
fn inline_records(geo: &Geometry, ip: &Inode, fork: Fork) -> Result<Vec<Extent>> {
    let n = count(ip, fork);
    let b = bytes(ip, fork);
    if n > (b.len() / REC_SIZE) as u64 || n > max_inline(geo, ip, fork)? as u64 {
        return Err(corrupt(
            ip,
            fork,
            format!("{n} extents do not fit the fork"),
        ));
    }
    let v: Vec<Extent> = b
        .chunks_exact(REC_SIZE)
        .take(n as usize)
        .map(unpack)
        .collect();
    if !edit::well_formed(&v) {
        return Err(corrupt(
            ip,
            fork,
            "extent records overlap or are out of order",
        ));
    }
    Ok(v)
}

fn write_inline(geo: &Geometry, ip: &mut Inode, fork: Fork, recs: &[Extent]) -> Result<()> {
    let b = bytes_reset(geo, ip, fork)?;
    if recs.len() * REC_SIZE > b.len() {
        return Err(Error::Invalid("extent records do not fit the fork".into()));
    }
    for (e, out) in recs.iter().zip(b.chunks_exact_mut(REC_SIZE)) {
        pack(e, out);
    }
    set_format(ip, fork, ForkFormat::Extents);
    set_count(ip, fork, recs.len() as u64)
}

/// Calls `f` on the fork's records in order, starting with the last one
/// whose offset is at most `from` (or the first), until `f` returns false.
pub(crate) fn scan(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    from: u64,
    mut f: impl FnMut(&Extent) -> bool,
) -> Result<()> {
    match format(ip, fork) {
        ForkFormat::Extents => {
            let v = inline_records(tp.geo(), ip, fork)?;
            let p = v.partition_point(|e| e.offset <= from).saturating_sub(1);
            for e in &v[p..] {
                if !f(e) {
                    break;
                }
            }
            Ok(())
        }
        ForkFormat::Btree => bmbt::scan(tp, ip, fork, from, f),
        _ => Ok(()),
    }
}

/// Every record of the fork.
pub(crate) fn all(tp: &mut Trans<'_>, ip: &Inode, fork: Fork) -> Result<Vec<Extent>> {
    match format(ip, fork) {
        ForkFormat::Extents => inline_records(tp.geo(), ip, fork),
        ForkFormat::Btree => Ok(bmbt::collect(tp, ip, fork)?.0),
        _ => Ok(Vec::new()),
    }
}

/// The records touching file blocks `lo..=hi`, preceded by the last
/// record starting before `lo` (touching or not).
pub(crate) fn window(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    lo: u64,
    hi: u64,
) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    scan(tp, ip, fork, lo.saturating_sub(1), |e| {
        if e.offset > hi {
            return false;
        }
        out.push(*e);
        true
    })?;
    Ok(out)
}

/// The first record ending after file block `pos`.
pub(crate) fn seek(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, pos: u64) -> Result<Option<Extent>> {
    let mut found = None;
    scan(tp, ip, fork, pos, |e| {
        if e.end() > pos {
            found = Some(*e);
            return false;
        }
        true
    })?;
    Ok(found)
}

/// Replaces the records `old` (a run read from the fork) by `new`
/// (covering the same blocks or fewer), keeping counts and format right.
pub(crate) fn replace(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    old: &[Extent],
    new: &[Extent],
) -> Result<()> {
    let (o, n) = edit::diff(old, new);
    if o.is_empty() && n.is_empty() {
        return Ok(());
    }
    let total = (count(ip, fork) + n.len() as u64)
        .checked_sub(o.len() as u64)
        .ok_or_else(|| corrupt(ip, fork, "fork holds fewer records than were read"))?;
    let geo = tp.geo();
    match format(ip, fork) {
        ForkFormat::Extents => {
            let mut v = inline_records(geo, ip, fork)?;
            for x in o {
                let i = v.partition_point(|e| e.offset < x.offset);
                if v.get(i) != Some(x) {
                    return Err(Error::Invalid("replaced record is not in the fork".into()));
                }
                v.remove(i);
            }
            for x in n {
                let i = v.partition_point(|e| e.offset < x.offset);
                v.insert(i, *x);
            }
            if !edit::well_formed(&v) {
                return Err(Error::Invalid(
                    "edited extent records overlap or are out of order".into(),
                ));
            }
            if v.len() > max_inline(geo, ip, fork)? {
                bmbt::create(tp, ip, fork, &v)
            } else {
                write_inline(geo, ip, fork, &v)
            }
        }
        ForkFormat::Btree => {
            // As the kernel edits records: old records no new one
            // starts at go first (a lone old and a lone new record left
            // over each other, an extent trimmed or grown at its start,
            // are one record rewritten instead), then records with the
            // same start are rewritten in place, then new ones come.
            let same = |x: &Extent, ys: &[Extent]| ys.iter().any(|y| y.offset == x.offset);
            let gone: Vec<Extent> = o.iter().filter(|y| !same(y, n)).copied().collect();
            let came: Vec<Extent> = n.iter().filter(|x| !same(x, o)).copied().collect();
            let lone = match (&gone[..], &came[..]) {
                ([y], [x]) if x.offset < y.end() && y.offset < x.end() => Some((*y, *x)),
                _ => None,
            };
            if lone.is_none() {
                for y in &gone {
                    bmbt::delete(tp, ip, fork, y.offset)?;
                }
            }
            for x in n {
                if same(x, o) {
                    bmbt::update_at(tp, ip, fork, x.offset, x)?;
                }
            }
            if let Some((y, x)) = lone {
                bmbt::update_at(tp, ip, fork, y.offset, &x)?;
            } else {
                for x in &came {
                    bmbt::insert(tp, ip, fork, x)?;
                }
            }
            set_count(ip, fork, total)?;
            bmbt::shrink(tp, ip, fork)?;
            if total <= max_inline(geo, ip, fork)? as u64 {
                let (recs, blocks) = bmbt::collect(tp, ip, fork)?;
                if recs.len() as u64 != total {
                    return Err(corrupt(
                        ip,
                        fork,
                        format!("btree holds {} extents, expected {total}", recs.len()),
                    ));
                }
                node::free_blocks(tp, ip, fork, &blocks)?;
                write_inline(geo, ip, fork, &recs)?;
            }
            Ok(())
        }
        f => Err(Error::Invalid(format!("cannot map blocks in a {f:?} fork"))),
    }
}

/// Writes `ip`'s data fork again as a bmbt holding `recs` (more than fit
/// in the inode, sorted, not overlapping; their blocks already allocated
/// to it), for a fork rebuilt from the rmapbt: the old bmbt blocks `old`
/// (first block, length) are freed with their reverse mappings, the fork
/// starts empty with `nblocks` blocks counted (those of `recs`), and the
/// tree is built the way a growing file builds it (one leaf, then
/// inserts), each new block allocated with its reverse mapping and
/// counted in `ip.nblocks`. The caller logs the inode.
pub(crate) fn rebuild_data_btree(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    recs: &[Extent],
    nblocks: u64,
    old: &[(FsBlock, u32)],
) -> Result<()> {
    let geo = tp.geo();
    let fork = Fork::Data;
    if !edit::well_formed(recs) || recs.iter().any(|e| e.len == 0) {
        return Err(corrupt(
            ip,
            fork,
            "rebuilt extent records overlap, are empty or are out of order",
        ));
    }
    if recs.len() <= max_inline(geo, ip, fork)? {
        return Err(Error::Invalid(format!(
            "inode {}: {} extents fit in the inode, not rebuilt as a bmbt",
            ip.ino.0,
            recs.len()
        )));
    }
    let owner = node::owner(ip, fork);
    for &(start, len) in old {
        super::space::free_extent(tp, start, len, &owner)?;
    }
    bytes_reset(geo, ip, fork)?;
    ip.format = ForkFormat::Extents;
    ip.nextents = 0;
    ip.nblocks = nblocks;
    let first = recs.len().min(node::block_max(geo));
    bmbt::create(tp, ip, fork, &recs[..first])?;
    for e in &recs[first..] {
        bmbt::insert(tp, ip, fork, e)?;
    }
    set_count(ip, fork, recs.len() as u64)
}

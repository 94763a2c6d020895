//! Directory blocks to the entry: each data block's free space table
//! against its unused regions, and the hash index (the leaf entries of a
//! block, leaf or node directory) against the data entries: every entry
//! indexed once under its name's hash, hashes in order, stale counts, the
//! best-free tables of leaf tails and free-index blocks, node levels and
//! the hash of each child, sibling pointers.

use super::Ctx;
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32};
use crate::dir::data::{self, DirMap, FREE_TAG};
use crate::dir::lookup::{name_hash, DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC};
use crate::inode::Inode;
use xfs_format::layout::Layout;

/// XDF3: magic of a directory free-index block.
const XDF3_MAGIC: u32 = xfs_format::dir::XFS_DIR3_FREE_MAGIC;
/// A best-free entry for a data block that does not exist.
const NULL_BEST: u16 = 0xffff;
/// Deepest da-btree.
const MAX_DA_LEVELS: u16 = 5;

/// One leaf entry: (hash, address in 8-byte units of the data space).
type Leaf = (u32, u32);

struct Dir<'m, 'a> {
    ctx: &'m Ctx<'a>,
    map: &'m DirMap<'a>,
    /// Largest free region of each data block, by block (None: no block).
    best: Vec<Option<u16>>,
    /// (hash, address) of every live data entry.
    entries: Vec<Leaf>,
    /// Leaf entries found in the index (stale ones left out).
    indexed: Vec<Leaf>,
}

impl Dir<'_, '_> {
    /// Header sizes and magics of this filesystem's version.
    fn l(&self) -> &'static Layout {
        self.map.fs().geometry().layout()
    }

    fn bad(&self, db: u64, d: String) {
        let fix = super::dirs::reset_fix(self.ctx, self.map.ino());
        let ino = fix.as_ref().map(|_| self.map.ino());
        self.ctx.sink.error_with(self.map.corrupt(db, d), ino, fix);
    }
}

/// Checks the data blocks and the hash index of extents or btree format
/// directory `ino`.
pub(crate) fn check_index(ctx: &Ctx<'_>, ino: &Inode) {
    let map = match DirMap::new(ctx.fs, ino) {
        Ok(m) => m,
        Err(e) => return ctx.sink.error_in(e, ino.ino.0),
    };
    let leaf_db = map.leaf_first_db();
    let mut d = Dir {
        ctx,
        map: &map,
        best: Vec::new(),
        entries: Vec::new(),
        indexed: Vec::new(),
    };
    let mut block_leaf = None;
    for db in map.dbs_below(leaf_db) {
        let Ok(buf) = map.read_data(db) else {
            // Reading the entries reported it.
            return;
        };
        if let Some(l) = data_block(&mut d, db, &buf) {
            block_leaf = Some(l);
        }
    }
    if let Some(leaves) = block_leaf {
        d.indexed = leaves;
    } else if map.is_mapped(leaf_db) {
        let v = Verifier::Da3 {
            magics: &[DIR3_LEAF1_MAGIC, DA3_NODE_MAGIC],
            owner: ino.ino.0,
        };
        let Ok(root) = map.read(leaf_db, &v) else {
            return;
        };
        if be16(&root, 8) == d.l().dir_leaf1_magic {
            leaf_block(&mut d, leaf_db, &root, true, Some((0, 0)));
        } else {
            node_tree(&mut d, leaf_db, &root);
            free_blocks(&d, leaf_db * 2);
        }
    } else {
        return d.bad(
            leaf_db,
            "directory has data blocks but no leaf block".into(),
        );
    }
    compare_index(&mut d, leaf_db);
}

/// Checks one data block: entries, unused regions and the best-free table.
/// Returns the leaf entries of a single-block directory.
fn data_block(d: &mut Dir<'_, '_>, db: u64, buf: &[u8]) -> Option<Vec<Leaf>> {
    let fs = d.ctx.fs;
    let dbsize = u64::from(fs.geometry().dir_blk_size);
    let Ok((end, leaf)) = data::data_end(d.map.fs().geometry(), d.map.ino(), db, buf) else {
        return None;
    };
    // Unused regions in order; the walk checked their lengths and tags.
    let mut free: Vec<(u16, u16)> = Vec::new();
    let mut off = d.l().dir_data_hdr;
    while off + 4 <= end {
        if be16(buf, off) == FREE_TAG {
            let len = usize::from(be16(buf, off + 2));
            if len == 0 {
                break;
            }
            free.push((off as u16, len as u16));
            off += len;
            continue;
        }
        // Reading the entries validated each one: only find the name.
        let namelen = usize::from(buf[off + 8]);
        let size = data::entry_size(namelen, fs.geometry().features.ftype);
        if off + size > end {
            return None;
        }
        let addr = ((db * dbsize + off as u64) >> 3) as u32;
        d.entries
            .push((name_hash(&buf[off + 9..off + 9 + namelen]), addr));
        off += size;
    }
    if free.windows(2).any(|w| w[0].0 + w[0].1 == w[1].0) {
        d.bad(db, "two unused regions touch (they should be one)".into());
    }
    let table: Vec<(u16, u16)> = (0..3)
        .map(|i| {
            (
                be16(buf, d.l().dir_bestfree + 4 * i),
                be16(buf, d.l().dir_bestfree + 2 + 4 * i),
            )
        })
        .collect();
    let mut lens: Vec<u16> = free.iter().map(|f| f.1).collect();
    lens.sort_unstable_by(|a, b| b.cmp(a));
    lens.resize(3, 0);
    let table_lens: Vec<u16> = table.iter().map(|t| t.1).collect();
    let points_ok = table.iter().all(|&(o, l)| {
        if l == 0 {
            o == 0
        } else {
            free.contains(&(o, l))
        }
    });
    if table_lens != lens || !points_ok {
        d.bad(
            db,
            format!("best free table {table:?} does not list the largest unused regions (lengths {lens:?})"),
        );
    }
    let idx = db as usize;
    if d.best.len() <= idx {
        d.best.resize(idx + 1, None);
    }
    d.best[idx] = Some(table[0].1);
    let (start, count) = leaf?;
    if be32(buf, 0) != d.l().dir_block_magic {
        return None;
    }
    let stale = be32(buf, buf.len() - 4);
    let ents: Vec<Leaf> = (0..count)
        .map(|i| (be32(buf, start + 8 * i), be32(buf, start + 8 * i + 4)))
        .collect();
    Some(leaf_entries(d, db, &ents, stale))
}

/// Checks a run of leaf entries (hash order, stale count) and returns the
/// live ones.
fn leaf_entries(d: &Dir<'_, '_>, db: u64, ents: &[Leaf], stale: u32) -> Vec<Leaf> {
    if ents.windows(2).any(|w| w[0].0 > w[1].0) {
        d.bad(db, "leaf entries are not in hash order".into());
    }
    let live: Vec<Leaf> = ents.iter().copied().filter(|e| e.1 != 0).collect();
    let nstale = (ents.len() - live.len()) as u32;
    if nstale != stale {
        d.bad(
            db,
            format!("leaf counts {stale} stale entries, holds {nstale}"),
        );
    }
    live
}

/// Checks a leaf block (single-leaf form when `leaf1`); appends its live
/// entries. `sib`: the sibling pointers it must hold (back, forw).
fn leaf_block(d: &mut Dir<'_, '_>, db: u64, buf: &[u8], leaf1: bool, sib: Option<(u32, u32)>) {
    let count = usize::from(be16(buf, d.l().da_count()));
    let stale = u32::from(be16(buf, d.l().da_count() + 2));
    let mut end = buf.len();
    if leaf1 {
        let bestcount = be32(buf, buf.len() - 4) as usize;
        let bests_at = (buf.len() - 4).checked_sub(2 * bestcount);
        match bests_at {
            Some(at) if at >= d.l().da_hdr => {
                end = at;
                let want = d.best.len();
                if bestcount != want {
                    d.bad(
                        db,
                        format!(
                            "leaf tail counts {bestcount} data blocks, the directory has {want}"
                        ),
                    );
                }
                for i in 0..bestcount.min(want) {
                    let b = be16(buf, at + 2 * i);
                    let w = d.best[i].unwrap_or(NULL_BEST);
                    if b != w {
                        d.bad(
                            db,
                            format!("leaf best free of data block {i} is {b}, the block says {w}"),
                        );
                    }
                }
            }
            _ => return d.bad(db, format!("leaf tail counts {bestcount} data blocks")),
        }
    }
    if d.l().da_hdr + 8 * count > end {
        return d.bad(db, format!("leaf counts {count} entries, more than fit"));
    }
    if let Some((back, forw)) = sib {
        let (f, b) = (be32(buf, 0), be32(buf, 4));
        if (b, f) != (back, forw) {
            d.bad(
                db,
                format!("sibling pointers back {b}, forw {f}; want {back} and {forw}"),
            );
        }
    }
    let ents: Vec<Leaf> = (0..count)
        .map(|i| {
            (
                be32(buf, d.l().da_hdr + 8 * i),
                be32(buf, d.l().da_hdr + 8 * i + 4),
            )
        })
        .collect();
    if let (Some(first), Some(last)) = (ents.first(), d.indexed.last()) {
        if first.0 < last.0 {
            d.bad(db, "leaf hashes are below those of the leaf before".into());
        }
    }
    let live = leaf_entries(d, db, &ents, stale);
    d.indexed.extend(live);
}

/// Walks the da-btree of a node directory from its root (at `root_db`):
/// node levels and counts, hashes in order and equal to the last hash of
/// each child, sibling chains per level; leaves appended in order.
fn node_tree(d: &mut Dir<'_, '_>, root_db: u64, root: &[u8]) {
    let ino = d.map.ino();
    let level = be16(root, d.l().da_count() + 2);
    if level == 0 || level >= MAX_DA_LEVELS {
        return d.bad(root_db, format!("node level {level}"));
    }
    // One level at a time: (dablk, expected last hash or None for the root).
    let mut cur: Vec<(u32, Option<u32>)> =
        vec![((root_db << d.ctx.fs.geometry().dir_blk_log) as u32, None)];
    let mut lvl = level;
    let budget = d.map.mapped_blocks();
    let mut seen = 0u64;
    loop {
        let mut next = Vec::new();
        let n = cur.len();
        for (k, &(dablk, want_last)) in cur.iter().enumerate() {
            seen += 1;
            if seen > budget {
                return d.bad(
                    root_db,
                    "node tree visits more blocks than the directory maps".into(),
                );
            }
            let db = d.map.dablk_to_db(dablk);
            let back = if k == 0 { 0 } else { cur[k - 1].0 };
            let forw = if k + 1 == n { 0 } else { cur[k + 1].0 };
            let magic = if lvl == 0 {
                DIR3_LEAFN_MAGIC
            } else {
                DA3_NODE_MAGIC
            };
            let v = Verifier::Da3 {
                magics: &[magic],
                owner: ino,
            };
            let buf = match d.map.read(db, &v) {
                Ok(b) => b,
                Err(e) => return d.ctx.sink.error_in(e, ino),
            };
            if lvl == 0 {
                leaf_block(d, db, &buf, false, Some((back, forw)));
                let c = usize::from(be16(&buf, d.l().da_count()));
                let last = (c > 0 && d.l().da_hdr + 8 * c <= buf.len())
                    .then(|| be32(&buf, d.l().da_hdr + 8 * (c - 1)));
                if let (Some(w), Some(l)) = (want_last, last) {
                    if w != l {
                        d.bad(db, format!("last hash {l:#x}, its parent says {w:#x}"));
                    }
                }
                continue;
            }
            let count = usize::from(be16(&buf, d.l().da_count()));
            let l = be16(&buf, d.l().da_count() + 2);
            if l != lvl {
                return d.bad(db, format!("node level {l}, want {lvl}"));
            }
            if count == 0 || d.l().da_hdr + 8 * count > buf.len() {
                return d.bad(db, format!("node counts {count} entries"));
            }
            let (f, b) = (be32(&buf, 0), be32(&buf, 4));
            if (b, f) != (back, forw) {
                d.bad(
                    db,
                    format!("sibling pointers back {b}, forw {f}; want {back} and {forw}"),
                );
            }
            let ents: Vec<(u32, u32)> = (0..count)
                .map(|i| {
                    (
                        be32(&buf, d.l().da_hdr + 8 * i),
                        be32(&buf, d.l().da_hdr + 8 * i + 4),
                    )
                })
                .collect();
            if ents.windows(2).any(|w| w[0].0 > w[1].0) {
                d.bad(db, "node hashes are not in order".into());
            }
            if let Some(w) = want_last {
                if ents[count - 1].0 != w {
                    d.bad(
                        db,
                        format!("last hash {:#x}, its parent says {w:#x}", ents[count - 1].0),
                    );
                }
            }
            let leaf_db = d.map.leaf_first_db();
            for &(h, before) in &ents {
                let cdb = d.map.dablk_to_db(before);
                if cdb < leaf_db || cdb >= 2 * leaf_db || !d.map.is_mapped(cdb) {
                    return d.bad(
                        db,
                        format!("child pointer {before} is outside the leaf space"),
                    );
                }
                next.push((before, Some(h)));
            }
        }
        if lvl == 0 {
            return;
        }
        cur = next;
        lvl -= 1;
    }
}

/// Checks the free-index blocks of a node directory against the data
/// blocks' best-free values.
fn free_blocks(d: &Dir<'_, '_>, free_db: u64) {
    let geo = d.ctx.fs.geometry();
    let fhdr = d.l().dir_free_hdr;
    let per = (geo.dir_blk_size as usize - fhdr) / 2;
    let v = Verifier::Dir3 {
        magics: &[XDF3_MAGIC],
        owner: d.map.ino(),
    };
    let mut covered = 0usize;
    for db in d.map.dbs_below(u64::MAX).filter(|&x| x >= free_db) {
        let buf = match d.map.read(db, &v) {
            Ok(b) => b,
            Err(e) => return d.ctx.sink.error_in(e, d.map.ino()),
        };
        let k = (db - free_db) as usize;
        let (first, nvalid, nused) = (
            be32(&buf, d.l().dir_bestfree) as usize,
            be32(&buf, d.l().dir_bestfree + 4) as usize,
            be32(&buf, d.l().dir_bestfree + 8) as usize,
        );
        if first != k * per || nvalid > per {
            d.bad(
                db,
                format!(
                    "free index starts at data block {first} with {nvalid} entries; want {}",
                    k * per
                ),
            );
            continue;
        }
        let mut used = 0;
        for i in 0..nvalid {
            let b = be16(&buf, fhdr + 2 * i);
            let w = d
                .best
                .get(first + i)
                .copied()
                .flatten()
                .unwrap_or(NULL_BEST);
            if b != w {
                d.bad(
                    db,
                    format!(
                        "best free of data block {} is {b}, the block says {w}",
                        first + i
                    ),
                );
            }
            used += usize::from(b != NULL_BEST);
        }
        if used != nused {
            d.bad(
                db,
                format!("free index counts {nused} used entries, holds {used}"),
            );
        }
        covered = covered.max(first + nvalid);
    }
    let want = d.best.len();
    if covered < want {
        d.bad(
            free_db,
            format!("free index covers {covered} data blocks of {want}"),
        );
    }
}

/// Every live data entry must be in the index once, under its hash; no
/// two entries have the same name (only entries with the same hash can).
fn compare_index(d: &mut Dir<'_, '_>, leaf_db: u64) {
    d.entries.sort_unstable();
    let dbsize = u64::from(d.ctx.fs.geometry().dir_blk_size);
    let name_at = |addr: u32| -> Option<Vec<u8>> {
        let byte = u64::from(addr) << 3;
        let (db, off) = (byte / dbsize, (byte % dbsize) as usize);
        let buf = d.map.read_data(db).ok()?;
        let (end, _) = data::data_end(d.map.fs().geometry(), d.map.ino(), db, &buf).ok()?;
        let e = data::entry_at(d.ctx.fs, d.map.ino(), db, &buf, off, end).ok()?;
        Some(e.name.to_vec())
    };
    let mut i = 0;
    while i < d.entries.len() {
        let mut j = i + 1;
        while j < d.entries.len() && d.entries[j].0 == d.entries[i].0 {
            j += 1;
        }
        if j - i > 1 {
            let mut names: Vec<Vec<u8>> = d.entries[i..j]
                .iter()
                .filter_map(|e| name_at(e.1))
                .collect();
            names.sort_unstable();
            if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                d.bad(
                    0,
                    format!("two entries named '{}'", String::from_utf8_lossy(&w[0])),
                );
            }
        }
        i = j;
    }
    d.indexed.sort_unstable();
    if d.entries != d.indexed {
        let missing = d
            .entries
            .iter()
            .filter(|e| d.indexed.binary_search(e).is_err())
            .count();
        let wrong = d
            .indexed
            .iter()
            .filter(|e| d.entries.binary_search(e).is_err())
            .count();
        let dups = d.indexed.windows(2).filter(|w| w[0] == w[1]).count();
        d.bad(
            leaf_db,
            format!("hash index does not match the entries: {missing} entries not indexed, {wrong} index entries point at no entry with that hash, {dups} indexed twice"),
        );
    }
}

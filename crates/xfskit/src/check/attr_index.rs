//! Attribute leaf and node blocks to the entry: hashes in order and equal
//! to each name's hash, no incomplete entries, bytes used and the name area
//! holding every name, the free map inside the free space,
//! remote values inside the attr fork, node levels and the last hash of
//! each child, sibling pointers. (Reading the attributes, which the inode
//! pass also does, decodes each entry but checks none of this.)

use super::Ctx;
use crate::attr::node::AttrMap;
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32};
use crate::error::{Error, Location};
use crate::inode::{ForkFormat, Inode};

const LEAF_MAGIC: u16 = xfs_format::attr::XFS_ATTR3_LEAF_MAGIC;
const NODE_MAGIC: u16 = xfs_format::da::XFS_DA3_NODE_MAGIC;
/// Header sizes of v5 leaf and node blocks.
const FLAG_LOCAL: u8 = 0x01;
const FLAG_INCOMPLETE: u8 = 0x80;
const FLAG_PARENT: u8 = 0x08;

/// The hash an entry with these flags, name and local value must have.
fn want_hash(flags: u8, name: &[u8], value: &[u8]) -> u32 {
    if flags & FLAG_PARENT != 0 {
        crate::attr::parent_hash(name, value)
    } else {
        crate::attr::name_hash(name)
    }
}
/// Largest attribute value.
const MAX_VALUE: u32 = 64 * 1024;
/// Deepest attr btree.
const MAX_LEVELS: u16 = 5;

/// Checks the leaf and node blocks of `ino`'s attr fork when it is in
/// extents or btree format.
pub(crate) fn check_attr_blocks(ctx: &Ctx<'_>, ino: &Inode) {
    if !ino.has_attr_fork() || !matches!(ino.aformat, ForkFormat::Extents | ForkFormat::Btree) {
        return;
    }
    if ino.anextents == 0 {
        return;
    }
    let Ok(map) = AttrMap::load(ctx.fs, ino) else {
        return;
    };
    let w = Walk {
        ctx,
        map: &map,
        ino: ino.ino.0,
        last_hash: None,
    };
    // Level by level from block 0: (dablk, expected last hash).
    let mut cur: Vec<(u32, Option<u32>)> = vec![(0, None)];
    let mut want_level: Option<u16> = None;
    let mut seen = 0u64;
    let mut w = w;
    let l = ctx.fs.geometry().layout();
    loop {
        let mut next = Vec::new();
        let mut next_level = None;
        let n = cur.len();
        for (k, &(dablk, want_last)) in cur.iter().enumerate() {
            seen += 1;
            if seen > map.mapped + 1 {
                return w.bad(0, "attr btree visits more blocks than the fork maps".into());
            }
            let Some(buf) = w.read(dablk) else {
                return;
            };
            let back = if k == 0 { 0 } else { cur[k - 1].0 };
            let forw = if k + 1 == n { 0 } else { cur[k + 1].0 };
            let (f, b) = (be32(&buf, 0), be32(&buf, 4));
            if (b, f) != (back, forw) {
                w.bad(
                    dablk,
                    format!("sibling pointers back {b}, forw {f}; want {back} and {forw}"),
                );
            }
            let magic = be16(&buf, 8);
            let level = if magic == l.da_node_magic {
                be16(&buf, l.da_count() + 2)
            } else {
                0
            };
            if want_level.is_some_and(|l| l != level)
                || (magic == l.da_node_magic && (level == 0 || level >= MAX_LEVELS))
            {
                return w.bad(
                    dablk,
                    format!("block at level {level}, want {}", want_level.unwrap_or(1)),
                );
            }
            if magic == l.attr_leaf_magic {
                let last = w.leaf(dablk, &buf);
                if let (Some(want), Some(l)) = (want_last, last) {
                    if want != l {
                        w.bad(
                            dablk,
                            format!("last hash {l:#x}, its parent says {want:#x}"),
                        );
                    }
                }
                continue;
            }
            let count = usize::from(be16(&buf, l.da_count()));
            if count == 0 || l.da_hdr + 8 * count > buf.len() {
                return w.bad(dablk, format!("node counts {count} entries"));
            }
            let ents: Vec<(u32, u32)> = (0..count)
                .map(|i| {
                    (
                        be32(&buf, l.da_hdr + 8 * i),
                        be32(&buf, l.da_hdr + 8 * i + 4),
                    )
                })
                .collect();
            if ents.windows(2).any(|p| p[0].0 > p[1].0) {
                w.bad(dablk, "node hashes are not in order".into());
            }
            if let Some(want) = want_last {
                if ents[count - 1].0 != want {
                    w.bad(
                        dablk,
                        format!(
                            "last hash {:#x}, its parent says {want:#x}",
                            ents[count - 1].0
                        ),
                    );
                }
            }
            for &(h, before) in &ents {
                if map.daddr(ctx.fs, u64::from(before)).is_err() || before == 0 {
                    return w.bad(
                        dablk,
                        format!("child pointer {before} is not a mapped attr block"),
                    );
                }
                next.push((before, Some(h)));
            }
            next_level = Some(level - 1);
        }
        if next.is_empty() {
            return;
        }
        want_level = next_level;
        cur = next;
    }
}

struct Walk<'m, 'a> {
    ctx: &'m Ctx<'a>,
    map: &'m AttrMap,
    ino: u64,
    /// Last hash of the leaf before, for the order across leaves.
    last_hash: Option<u32>,
}

impl Walk<'_, '_> {
    fn bad(&self, dablk: u32, d: String) {
        let at = Location::InodeBlock {
            ino: self.ino,
            fork: "attr",
            offset: u64::from(dablk),
        };
        self.ctx.sink.add("attr block", at, d);
    }

    fn read(&self, dablk: u32) -> Option<std::sync::Arc<[u8]>> {
        let fs = self.ctx.fs;
        let daddr = match self.map.daddr(fs, u64::from(dablk)) {
            Ok(d) => d,
            Err(d) => {
                self.bad(dablk, d);
                return None;
            }
        };
        let v = Verifier::Da3 {
            magics: &[LEAF_MAGIC, NODE_MAGIC],
            owner: self.ino,
        };
        match fs.read_meta(daddr, fs.geometry().block_size, &v) {
            Ok(b) => Some(b),
            Err(e) => {
                // Reading the attributes reports the same block.
                if !matches!(e, Error::Corrupt { .. } | Error::BadCrc { .. }) {
                    self.ctx.sink.error_in(e, self.ino);
                }
                None
            }
        }
    }

    /// Checks one leaf; returns the hash of its last entry.
    fn leaf(&mut self, dablk: u32, buf: &[u8]) -> Option<u32> {
        let bsize = buf.len();
        let lay = self.ctx.fs.geometry().layout();
        // count, usedbytes, firstused, holes, pad, free map follow the block info.
        let c = lay.da_count();
        let leaf_hdr = lay.attr_leaf_hdr;
        let count = usize::from(be16(buf, c));
        let usedbytes = usize::from(be16(buf, c + 2));
        let firstused = match usize::from(be16(buf, c + 4)) {
            0 => bsize,
            f => f,
        };
        let ents_end = leaf_hdr + 8 * count;
        if ents_end > bsize || ents_end > firstused || firstused > bsize {
            self.bad(
                dablk,
                format!("{count} entries end at byte {ents_end}, names start at {firstused}"),
            );
            return None;
        }
        let mut used = 0usize;
        // The lowest name offset: where the name area must start.
        let mut first_name = bsize;
        // Byte ranges of the names and values, for the free map.
        let mut names: Vec<(usize, usize)> = Vec::with_capacity(count);
        let mut prev: Option<u32> = self.last_hash;
        for i in 0..count {
            let e = leaf_hdr + 8 * i;
            let (hash, nameidx, flags) = (be32(buf, e), usize::from(be16(buf, e + 4)), buf[e + 6]);
            if prev.is_some_and(|p| p > hash) {
                self.bad(dablk, format!("entry {i}: hash {hash:#x} is out of order"));
            }
            prev = Some(hash);
            if flags & FLAG_INCOMPLETE != 0 {
                self.bad(dablk, format!("entry {i} is marked incomplete"));
            }
            if nameidx < firstused || nameidx >= bsize {
                self.bad(
                    dablk,
                    format!("entry {i}: name at byte {nameidx} is outside the name area"),
                );
                continue;
            }
            let rest = &buf[nameidx..];
            // Parent pointers are filed under a hash mixing in the parent
            // (from the local value).
            let mut value: &[u8] = &[];
            let (name, size) = if flags & FLAG_LOCAL != 0 {
                if rest.len() < 3 {
                    continue;
                }
                let (vlen, nlen) = (usize::from(be16(rest, 0)), usize::from(rest[2]));
                if 3 + nlen + vlen > rest.len() {
                    self.bad(
                        dablk,
                        format!("entry {i}: name and value run past the block"),
                    );
                    continue;
                }
                value = &rest[3 + nlen..3 + nlen + vlen];
                (&rest[3..3 + nlen], (3 + nlen + vlen).div_ceil(4) * 4)
            } else {
                if rest.len() < 9 {
                    continue;
                }
                let (blk, vlen, nlen) = (be32(rest, 0), be32(rest, 4), usize::from(rest[8]));
                if 9 + nlen > rest.len() {
                    self.bad(dablk, format!("entry {i}: name runs past the block"));
                    continue;
                }
                if flags & FLAG_INCOMPLETE == 0
                    && (vlen == 0
                        || vlen > MAX_VALUE
                        || blk == 0
                        || self.map.daddr(self.ctx.fs, u64::from(blk)).is_err())
                {
                    self.bad(
                        dablk,
                        format!("entry {i}: remote value of {vlen} bytes at attr block {blk}"),
                    );
                }
                (&rest[9..9 + nlen], (11 + nlen).div_ceil(4) * 4)
            };
            if name.is_empty() {
                self.bad(dablk, format!("entry {i}: empty name"));
            } else if want_hash(flags, name, value) != hash {
                self.bad(
                    dablk,
                    format!("entry {i}: hash {hash:#x} is not the hash of its name"),
                );
            }
            used += size;
            first_name = first_name.min(nameidx);
            names.push((nameidx, nameidx + size));
        }
        self.last_hash = prev;
        // The name area starts at the first name; with holes in it (names
        // removed since the last compaction) it may start below it, never
        // above (xfs_repair's rule).
        let holes = buf[c + 6] != 0;
        if count > 0 && ((!holes && first_name != firstused) || firstused > first_name) {
            self.bad(
                dablk,
                format!("name area starts at byte {firstused}, the first name at {first_name}"),
            );
        }
        if used != usedbytes {
            self.bad(
                dablk,
                format!("counts {usedbytes} bytes of names, they take {used}"),
            );
        }
        for k in 0..3 {
            let (base, size) = (
                usize::from(be16(buf, c + 8 + 4 * k)),
                usize::from(be16(buf, c + 10 + 4 * k)),
            );
            let overlaps = names.iter().any(|&(s, e)| base < e && s < base + size);
            if base % 4 != 0 || size % 4 != 0 || base + size > bsize {
                self.bad(
                    dablk,
                    format!("free map {k} ({base}+{size}) is misaligned or past the block"),
                );
            } else if size > 0 && (base < ents_end || overlaps) {
                self.bad(
                    dablk,
                    format!("free map {k} ({base}+{size}) covers entries or names"),
                );
            }
        }
        (count > 0).then(|| be32(buf, leaf_hdr + 8 * (count - 1)))
    }
}

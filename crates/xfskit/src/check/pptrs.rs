//! Parent pointers against the directory tree (filesystems with the
//! PARENT feature), as xfs_repair 6.15 checks them: every directory entry
//! (other than "." and "..") must be mirrored by a parent pointer of the
//! inode it names, holding the entry's name, the directory's number and
//! the directory's generation; every parent pointer must name such an
//! entry.
//!
//! Memory follows the inodes, not the names: pass 2 folds each inode's
//! pointers into a count and a sum of 64-bit fingerprints; pass 3 folds
//! the entries naming each inode the same way. Only inodes whose two
//! sides differ are looked at again, name by name, to say what is wrong.

use super::dirs::DirTable;
use super::Ctx;
use crate::error::Location;
use crate::fs::Fs;
use crate::inode::Inode;
use std::collections::BTreeSet;

/// One inode's parent pointers, folded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PptrSum {
    /// The inode.
    pub ino: u64,
    /// Its generation (what pointers to it, as a directory, must hold).
    pub gen: u32,
    /// How many parent pointers it has.
    pub count: u32,
    /// Wrapping sum of their fingerprints.
    pub sum: u64,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fingerprint of the pointer (`name`, `parent`, `gen`) of inode `child`.
pub(crate) fn fingerprint(child: u64, parent: u64, gen: u32, name: &[u8]) -> u64 {
    let mut h = mix(child ^ 0x9e37_79b9_7f4a_7c15);
    h = mix(h ^ parent);
    h = mix(h ^ u64::from(gen) ^ ((name.len() as u64) << 32));
    for c in name.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    h
}

/// Pass 2: folds `ip`'s parent pointers (problems reading them go to the
/// sink, as the attribute checks report them).
pub(crate) fn fold(ctx: &Ctx<'_>, ip: &Inode) -> Option<PptrSum> {
    let mut s = PptrSum {
        ino: ip.ino.0,
        gen: ip.gen,
        count: 0,
        sum: 0,
    };
    let empty = ip.aformat == crate::inode::ForkFormat::Extents && ip.anextents == 0;
    if ip.has_attr_fork() && !empty {
        match crate::attr::parent_pointers(ctx.fs, ip) {
            Ok(v) => {
                for (name, p, g) in v {
                    s.count = s.count.saturating_add(1);
                    s.sum = s.sum.wrapping_add(fingerprint(ip.ino.0, p, g, &name));
                }
            }
            // A pointer that is no parent record (a flag bit set on
            // another attribute): reported, and this inode not compared.
            Err(e) => {
                ctx.sink.error_in(e, ip.ino.0);
                return None;
            }
        }
    }
    Some(s)
}

/// Pass 3: compares the folded pointers with the entries of `tables`.
/// `skip` tells inodes that live outside the tree (the root, metadata
/// inodes): they must have no pointers.
pub(crate) fn check(
    ctx: &Ctx<'_>,
    sums: &mut Vec<PptrSum>,
    tables: &[&DirTable],
    skip: &dyn Fn(u64) -> bool,
) {
    sums.sort_unstable_by_key(|s| s.ino);
    sums.dedup_by_key(|s| s.ino);
    let find = |ino: u64| sums.binary_search_by_key(&ino, |s| s.ino).ok();
    let mut count = vec![0u32; sums.len()];
    let mut sum = vec![0u64; sums.len()];
    for t in tables {
        for d in &t.dirs {
            let Some(dk) = find(d.ino) else { continue };
            let gen = sums[dk].gen;
            for k in d.entries.clone() {
                let target = t.entries[k].target;
                let Some(ck) = find(target) else { continue };
                count[ck] = count[ck].saturating_add(1);
                sum[ck] = sum[ck].wrapping_add(fingerprint(target, d.ino, gen, t.name(d, k)));
            }
        }
    }
    let bad: Vec<u64> = sums
        .iter()
        .enumerate()
        .filter(|&(k, s)| !skip(s.ino) && (s.count != count[k] || s.sum != sum[k]))
        .map(|(_, s)| s.ino)
        .collect();
    // The root and inodes outside the tree must have no pointers.
    for s in sums.iter().filter(|s| skip(s.ino) && s.count > 0) {
        ctx.sink.add(
            "parent pointer",
            Location::Inode(s.ino),
            format!(
                "{} parent pointer(s) on an inode no directory names",
                s.count
            ),
        );
    }
    if bad.is_empty() {
        return;
    }
    explain(ctx, &bad, sums, tables);
}

/// Says, for each inode of `bad`, which entries lack a pointer and which
/// pointers name no entry.
fn explain(ctx: &Ctx<'_>, bad: &[u64], sums: &[PptrSum], tables: &[&DirTable]) {
    let gen_of = |ino: u64| {
        sums.binary_search_by_key(&ino, |s| s.ino)
            .ok()
            .map(|k| sums[k].gen)
    };
    // (child, name, parent, gen) of every entry naming a bad inode.
    let mut want = BTreeSet::new();
    for t in tables {
        for d in &t.dirs {
            for k in d.entries.clone() {
                let target = t.entries[k].target;
                if bad.binary_search(&target).is_ok() {
                    let g = gen_of(d.ino).unwrap_or(0);
                    want.insert((target, t.name(d, k).to_vec(), d.ino, g));
                }
            }
        }
    }
    for &ino in bad {
        let have: BTreeSet<(u64, Vec<u8>, u64, u32)> = match pointers(ctx.fs, ino) {
            Some(v) => v.into_iter().map(|(n, p, g)| (ino, n, p, g)).collect(),
            None => continue,
        };
        let at = || Location::Inode(ino);
        let lo = (ino, Vec::new(), 0, 0);
        let hi = (ino + 1, Vec::new(), 0, 0);
        for (_, name, p, g) in want.range(lo.clone()..hi.clone()) {
            if !have.contains(&(ino, name.clone(), *p, *g)) {
                ctx.sink.add(
                    "parent pointer",
                    at(),
                    format!(
                        "missing for entry '{}' in directory {p} (generation {g})",
                        String::from_utf8_lossy(name)
                    ),
                );
            }
        }
        for (_, name, p, g) in &have {
            if !want.contains(&(ino, name.clone(), *p, *g)) {
                ctx.sink.add(
                    "parent pointer",
                    at(),
                    format!(
                        "'{}' -> directory {p} generation {g} names no directory entry",
                        String::from_utf8_lossy(name)
                    ),
                );
            }
        }
    }
}

fn pointers(fs: &Fs, ino: u64) -> Option<Vec<(Vec<u8>, u64, u32)>> {
    let ip = fs.inode(crate::Ino(ino)).ok()?;
    crate::attr::parent_pointers(fs, &ip).ok()
}

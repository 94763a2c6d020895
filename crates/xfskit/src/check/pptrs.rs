//! Parent pointers against the directory tree (filesystems with the
//! PARENT feature), as xfs_repair 6.15 checks them: every directory entry
//! (other than "." and "..") must be mirrored by a parent pointer of the
//! inode it names, holding the entry's name, the directory's number and
//! the directory's generation; every parent pointer must name such an
//! entry.
//!
//! No name is kept: pass 2 folds each inode's pointers into a count and a
//! sum of 64-bit fingerprints, and gives each directory entry the
//! fingerprint of the pointer it calls for; the namespace pass sums those
//! per inode as it joins the entries with the inodes. Only inodes whose
//! two sides differ are looked at again, name by name, to say what is
//! wrong.

use super::{Ctx, Fix};
use crate::error::Location;
use crate::fs::Fs;
use crate::inode::Inode;
use std::collections::BTreeSet;

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

/// Pass 2: folds `ip`'s parent pointers into (count, sum of fingerprints);
/// None when they cannot be read (reported to the sink, as the attribute
/// checks report it).
pub(crate) fn fold(ctx: &Ctx<'_>, ip: &Inode) -> Option<(u32, u64)> {
    let (mut count, mut sum) = (0u32, 0u64);
    let empty = ip.aformat == crate::inode::ForkFormat::Extents && ip.anextents == 0;
    if ip.has_attr_fork() && !empty {
        match crate::attr::parent_pointers(ctx.fs, ip) {
            Ok(v) => {
                for (name, p, g) in v {
                    count = count.saturating_add(1);
                    sum = sum.wrapping_add(fingerprint(ip.ino.0, p, g, &name));
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
    Some((count, sum))
}

/// An inode whose pointers differ from the entries naming it, with those
/// entries: (name, directory, the directory's generation).
pub(crate) struct Differs {
    pub ino: u64,
    pub entries: Vec<(Vec<u8>, u64, u32)>,
    /// `entries` holds every entry naming the inode (not cut short).
    pub complete: bool,
}

/// Says, for each inode of `bad`, which entries lack a pointer and which
/// pointers name no entry.
pub(crate) fn explain(ctx: &Ctx<'_>, bad: &[Differs]) {
    for d in bad {
        let ino = d.ino;
        let Some(have) = pointers(ctx.fs, ino) else {
            continue;
        };
        let have: BTreeSet<(Vec<u8>, u64, u32)> = have.into_iter().collect();
        let want: BTreeSet<(Vec<u8>, u64, u32)> = d.entries.iter().cloned().collect();
        let at = || Location::Inode(ino);
        for (name, p, g) in &want {
            if !have.contains(&(name.clone(), *p, *g)) {
                ctx.sink.add_maybe(
                    "parent pointer",
                    at(),
                    format!(
                        "missing for entry '{}' in directory {p} (generation {g})",
                        String::from_utf8_lossy(name)
                    ),
                    d.complete.then(|| Fix::AddParent {
                        ino,
                        name: name.clone(),
                        dir: *p,
                        gen: *g,
                    }),
                );
            }
        }
        for (name, p, g) in &have {
            if !want.contains(&(name.clone(), *p, *g)) {
                ctx.sink.add_maybe(
                    "parent pointer",
                    at(),
                    format!(
                        "'{}' -> directory {p} generation {g} names no directory entry",
                        String::from_utf8_lossy(name)
                    ),
                    d.complete.then(|| Fix::DropParent {
                        ino,
                        name: name.clone(),
                        dir: *p,
                        gen: *g,
                    }),
                );
            }
        }
    }
}

fn pointers(fs: &Fs, ino: u64) -> Option<Vec<(Vec<u8>, u64, u32)>> {
    let ip = fs.inode(crate::Ino(ino)).ok()?;
    crate::attr::parent_pointers(fs, &ip).ok()
}

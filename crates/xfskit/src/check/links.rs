//! Pass 3, serial: directory tree shape, link counts, superblock counters.

use super::ag::AgHeads;
use super::inodes::AgInodes;
use super::Ctx;
use crate::error::{Location, Result};
use crate::fs::Fs;
use crate::inode::FileType;
use std::collections::HashMap;
use xfs_format::sb::Dsb;
use zerocopy::FromBytes;

/// The superblock fields the counter and namespace checks need.
pub(crate) struct SbCounters {
    icount: u64,
    ifree: u64,
    fdblocks: u64,
    /// Inodes that live outside the directory tree (rt bitmap/summary, quota).
    pub(crate) meta_inodes: Vec<u64>,
    /// Root of the metadata directory tree, when the filesystem has one.
    pub(crate) metadir: Option<u64>,
}

/// Reads the primary superblock's counters (as on disk now).
pub(crate) fn read_sb_counters(fs: &Fs) -> Result<SbCounters> {
    let geo = fs.geometry();
    let mut sector = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(0, &mut sector)?;
    let (sb, _) = Dsb::read_from_prefix(&sector)
        .map_err(|_| crate::Error::corrupt("superblock", Location::Sb(0), "sector too short"))?;
    let meta_inodes = [
        geo.rbm_ino.0,
        geo.rsum_ino.0,
        sb.sb_uquotino.get(),
        sb.sb_gquotino.get(),
        sb.sb_pquotino.get(),
    ]
    .into_iter()
    .filter(|&i| i != 0 && i != u64::MAX)
    .collect();
    Ok(SbCounters {
        icount: sb.sb_icount.get(),
        ifree: sb.sb_ifree.get(),
        fdblocks: sb.sb_fdblocks.get(),
        meta_inodes,
        metadir: geo.features.metadir.then_some(geo.metadir_ino.0),
    })
}

/// Sums of the AG counters over all AGs, folded as each AG finishes pass 1.
#[derive(Debug, Default)]
pub(crate) struct AgTotals {
    /// Inodes in the inobts.
    pub icount: u64,
    /// Free inodes in the inobts.
    pub ifree: u64,
    /// Free blocks as the superblock counts them: free space, free list
    /// and non-root btree blocks.
    pub fdblocks: u64,
}

impl AgTotals {
    /// Adds one AG's counters.
    pub fn add(&mut self, h: &AgHeads) {
        let blocks = h
            .freeblks
            .saturating_add(h.flcount)
            .saturating_add(h.btreeblks);
        self.icount = self.icount.saturating_add(h.icount);
        self.ifree = self.ifree.saturating_add(h.ifree);
        self.fdblocks = self.fdblocks.saturating_add(blocks);
    }
}

/// Compares the superblock counters with the sums over the AGs, as
/// `xfs_repair -n` does even with lazy counters: a cleanly unmounted
/// filesystem has them written back.
pub(crate) fn check_counters(ctx: &Ctx<'_>, sb: &SbCounters, totals: &AgTotals) {
    let (icount, ifree, fdblocks) = (totals.icount, totals.ifree, totals.fdblocks);
    let loc = || Location::Sb(0);
    if sb.icount != icount {
        ctx.sink.add(
            "superblock",
            loc(),
            format!("sb_icount {}, counted {icount}", sb.icount),
        );
    }
    if sb.ifree != ifree {
        ctx.sink.add(
            "superblock",
            loc(),
            format!("sb_ifree {}, counted {ifree}", sb.ifree),
        );
    }
    if sb.fdblocks != fdblocks {
        ctx.sink.add(
            "superblock",
            loc(),
            format!("sb_fdblocks {}, counted {fdblocks}", sb.fdblocks),
        );
    }
}

/// Checks directory entries against the allocated inodes, ".." pointers,
/// and every link count.
pub(crate) fn check_namespace(ctx: &Ctx<'_>, sb: &SbCounters, found: &[AgInodes]) {
    let root = ctx.fs.geometry().root_ino.0;
    // Sorted arrays indexed by binary search: far cheaper than hash maps
    // for a million inodes, and each AG's list is already in order.
    let mut allocated: Vec<u64> = found
        .iter()
        .flat_map(|a| a.allocated.iter().copied())
        .collect();
    allocated.sort_unstable();
    allocated.dedup();
    let mut info: Vec<(u64, FileType, u32, bool)> = found
        .iter()
        .flat_map(|a| {
            a.inodes
                .iter()
                .map(|i| (i.ino, i.file_type, i.nlink, i.metadata))
        })
        .collect();
    info.sort_by_key(|e| e.0);
    info.dedup_by_key(|e| e.0);
    let find = |ino: u64| info.binary_search_by_key(&ino, |e| e.0).ok();
    let type_of = |ino: u64| find(ino).map(|k| info[k].1);
    // Entries pointing at each inode, and subdirectories of each directory.
    let mut refs = vec![0u32; info.len()];
    let mut subdirs = vec![0u32; info.len()];
    // For each directory, the directories holding an entry for it.
    let mut held_by: HashMap<u64, Vec<u64>> = HashMap::new();

    let is_meta = |ino: u64| find(ino).is_some_and(|k| info[k].3);
    if type_of(root) != Some(FileType::Dir) {
        ctx.sink.add(
            "root directory",
            Location::Inode(root),
            "is not an allocated directory",
        );
    }
    // The metadata directory tree hangs from its own root, which is its
    // own parent like the root directory.
    let metadir = sb.metadir;
    let is_root = |ino: u64| ino == root || Some(ino) == metadir;
    if let Some(m) = metadir {
        if type_of(m) != Some(FileType::Dir) {
            ctx.sink.add(
                "metadata directory",
                Location::Inode(m),
                "the superblock's metadata directory root is not an allocated directory",
            );
        }
    }
    let dirs = found
        .iter()
        .flat_map(|a| a.dirs.dirs.iter().map(move |d| (&a.dirs, d)));
    for (table, d) in dirs.clone() {
        for k in d.entries.clone() {
            let e = &table.entries[k];
            let (target, ftype) = (&e.target, e.file_type);
            let at = || Location::Inode(d.ino);
            let shown = || String::from_utf8_lossy(table.name(d, k));
            let Some(k) = find(*target) else {
                if allocated.binary_search(target).is_err() {
                    ctx.sink.add(
                        "directory entry",
                        at(),
                        format!(
                            "entry '{}' points at inode {target}, which is free or invalid",
                            shown()
                        ),
                    );
                }
                continue;
            };
            refs[k] += 1;
            let t = info[k].1;
            if metadir.is_some() && info[k].3 != is_meta(d.ino) {
                ctx.sink.add(
                    "directory entry",
                    at(),
                    if info[k].3 {
                        format!(
                            "entry '{}' of a user directory points at metadata inode {target}",
                            shown()
                        )
                    } else {
                        format!(
                            "entry '{}' of a metadata directory points at inode {target}, which is not metadata",
                            shown()
                        )
                    },
                );
            }
            if ftype.is_none() && ctx.fs.geometry().features.ftype {
                ctx.sink.add(
                    "directory entry",
                    at(),
                    format!("entry '{}' has no file type", shown()),
                );
            }
            if ftype.is_some_and(|f| f != t) {
                ctx.sink.add(
                    "directory entry",
                    at(),
                    format!(
                        "entry '{}' says {:?} but inode {target} is {t:?}",
                        shown(),
                        ftype.unwrap_or(t)
                    ),
                );
            }
            if t == FileType::Dir {
                if let Some(p) = find(d.ino) {
                    subdirs[p] += 1;
                }
                held_by.entry(*target).or_default().push(d.ino);
            }
        }
    }
    for (_, d) in dirs {
        let at = || Location::Inode(d.ino);
        let Some(p) = d.parent else { continue };
        if is_root(d.ino) {
            if p != d.ino {
                ctx.sink.add(
                    "directory",
                    at(),
                    format!("root directory's '..' points at {p}, not itself"),
                );
            }
            continue;
        }
        if type_of(p) != Some(FileType::Dir) {
            ctx.sink.add(
                "directory",
                at(),
                format!("'..' points at inode {p}, which is not an allocated directory"),
            );
        } else if !held_by.get(&d.ino).is_some_and(|v| v.contains(&p)) {
            ctx.sink.add(
                "directory",
                at(),
                format!("'..' points at directory {p}, which has no entry for it"),
            );
        }
        if let Some(v) = held_by.get(&d.ino) {
            if v.len() > 1 {
                ctx.sink.add(
                    "directory",
                    at(),
                    format!("has {} entries pointing at it (directories {v:?})", v.len()),
                );
            }
        }
    }
    if crate::namespace::pptr::enabled(ctx.fs.geometry()) {
        let mut sums: Vec<_> = found.iter().flat_map(|a| a.pptrs.iter().copied()).collect();
        let tables: Vec<_> = found.iter().map(|a| &a.dirs).collect();
        // Inodes without links (open files unlinked, on the unlinked
        // lists) are not compared.
        sums.retain(|s| find(s.ino).is_some_and(|k| info[k].2 != 0));
        let outside = |ino: u64| is_root(ino) || sb.meta_inodes.contains(&ino);
        super::pptrs::check(ctx, &mut sums, &tables, &outside);
    }
    for (k, &(ino, t, nlink, _)) in info.iter().enumerate() {
        if sb.meta_inodes.contains(&ino) {
            continue;
        }
        let r = refs[k];
        let at = || Location::Inode(ino);
        if r == 0 && !is_root(ino) {
            ctx.sink.add(
                "inode",
                at(),
                format!(
                    "allocated {t:?} with nlink {nlink} is not in any directory (disconnected)"
                ),
            );
            continue;
        }
        let want = if t == FileType::Dir {
            2 + subdirs[k]
        } else {
            r
        };
        if nlink != want {
            ctx.sink
                .add("inode", at(), format!("nlink {nlink}, counted {want}"));
        }
    }
}

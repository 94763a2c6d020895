//! Pass 3, serial: directory tree shape, link counts, superblock counters.

use super::ag::AgHeads;
use super::{Ctx, Fix};
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

/// Most inodes whose parent pointers differ from their entries that are
/// explained name by name (the rest are counted).
const MAX_EXPLAINED: usize = 1000;
/// Entries kept per inode to explain its parent pointers.
const MAX_ENTRIES_EXPLAINED: usize = 4096;
/// Directories listed in a "has N entries pointing at it" problem.
const MAX_HOLDERS_SHOWN: usize = 32;

/// A problem about a directory entry, whose name is read when the report
/// is written: `before` + name + `after`.
struct Pending {
    dir: u64,
    pos: u32,
    before: String,
    after: String,
    fix: Option<EntryFix>,
}

/// What fixes a [`Pending`] entry problem.
#[derive(Clone, Copy)]
enum EntryFix {
    /// Remove the entry.
    Drop,
    /// Set the entry's file type to that of `target`.
    Type { target: u64, ftype: u8 },
}

/// Checks directory entries against the allocated inodes, ".." pointers,
/// every link count and (parent-pointer filesystems) every inode's parent
/// pointers against the entries naming it: a merge of the sorted records
/// of pass 2 (inodes by number, entries by the inode they name,
/// directories by number), then a second merge of what the first left
/// for the directories (their link counts against their subdirectories,
/// each ".." against its target). Memory: the sorters' bound, whatever
/// the number of inodes.
pub(crate) fn check_namespace(ctx: &Ctx<'_>, sb: &SbCounters) -> std::io::Result<()> {
    use super::ns::{lock, type_of, DirLinks, Key, ParentRec, KIND_UNDECODED};
    use crate::spill::{lowest, Peek};
    let fs = ctx.fs;
    let root = fs.geometry().root_ino.0;
    let ftype_feature = fs.geometry().features.ftype;
    let pptr = fs.geometry().has_parent();
    fn take<R: crate::spill::Rec>(
        m: &std::sync::Mutex<crate::spill::Sorter<R>>,
        cfg: &crate::spill::SpillConfig,
    ) -> crate::spill::Sorter<R> {
        std::mem::replace(&mut *lock(m), crate::spill::Sorter::new(0, cfg.clone()))
    }
    let cfg = &ctx.ns.config;
    let mut inodes = Peek::new(take(&ctx.ns.inodes, cfg).into_sorted()?)?;
    let mut entries = Peek::new(take(&ctx.ns.entries, cfg).into_sorted()?)?;
    let mut dirs = Peek::new(take(&ctx.ns.dirs, cfg).into_sorted()?)?;
    let mut subdirs: crate::spill::Sorter<Key> = ctx.ns.second();
    let mut parents: crate::spill::Sorter<ParentRec> = ctx.ns.second();
    let mut dir_links: crate::spill::Sorter<DirLinks> = ctx.ns.second();
    let mut pending: Vec<Pending> = Vec::new();
    // (inode, the entries naming it as (directory, position), all of them).
    type Named = (u64, Vec<(u64, u32)>, bool);
    let mut bad: Vec<Named> = Vec::new();
    let mut unexplained = 0u64;
    let mut root_ok = false;
    let is_meta = |ino: u64| sb.meta_inodes.contains(&ino);
    // The metadata directory tree hangs from its own root, which is its
    // own parent like the root directory.
    let metadir = sb.metadir;
    let mut metadir_ok = false;
    let is_root = |ino: u64| ino == root || Some(ino) == metadir;

    while let Some(k) = lowest([
        inodes.peek().map(|r| r.ino),
        entries.peek().map(|r| r.target),
        dirs.peek().map(|r| r.ino),
    ]) {
        // The inode (the first record of a number listed twice).
        let inode = inodes.take_first(|r| r.ino == k)?;
        let t = inode.and_then(|r| type_of(r.kind));
        if k == root {
            root_ok = t == Some(FileType::Dir);
        }
        if Some(k) == metadir {
            metadir_ok = t == Some(FileType::Dir);
        }
        // Its directory record.
        let dir = dirs.take_first(|r| r.ino == k)?;
        // The entries naming it.
        let (mut refs, mut ecount, mut esum) = (0u32, 0u32, 0u64);
        let mut holders: Vec<u64> = Vec::new();
        let mut nholders = 0usize;
        let mut held = false;
        let parent = dir.map(|d| d.parent).filter(|&p| p != u64::MAX);
        let mut named: Vec<(u64, u32)> = Vec::new();
        // Entries naming a directory from outside the directory its '..'
        // names: second names, dropped when that one names it too.
        // What else they count for (their type, the parent's subdirectory,
        // the parent pointer) waits until it is known they stay.
        let mut extra: Vec<crate::check::ns::EntryRec> = Vec::new();
        while let Some(e) = entries.take_if(|r| r.target == k)? {
            let Some(inode) = inode else {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: format!("' points at inode {k}, which is free or invalid"),
                    fix: Some(EntryFix::Drop),
                });
                continue;
            };
            if inode.kind == KIND_UNDECODED {
                continue;
            }
            let t = type_of(inode.kind).expect("decoded");
            refs = refs.saturating_add(1);
            if t == FileType::Dir
                && parent.is_some_and(|p| p != e.dir)
                && extra.len() < MAX_ENTRIES_EXPLAINED
                && !is_root(k)
            {
                nholders += 1;
                if holders.len() < MAX_HOLDERS_SHOWN {
                    holders.push(e.dir);
                }
                extra.push(e);
                continue;
            }
            if metadir.is_some() && inode.meta != e.dir_meta {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: if inode.meta {
                        format!("' of a user directory points at metadata inode {k}")
                    } else {
                        format!(
                            "' of a metadata directory points at inode {k}, which is not metadata"
                        )
                    },
                    fix: None,
                });
            }
            if e.kind == 0 && ftype_feature {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: "' has no file type".into(),
                    fix: Some(EntryFix::Type {
                        target: k,
                        ftype: t.dirent_code(),
                    }),
                });
            }
            if let Some(et) = type_of(e.kind).filter(|&et| et != t) {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: format!("' says {et:?} but inode {k} is {t:?}"),
                    fix: Some(EntryFix::Type {
                        target: k,
                        ftype: t.dirent_code(),
                    }),
                });
            }
            if t == FileType::Dir {
                subdirs.push(Key(e.dir))?;
                nholders += 1;
                held |= Some(e.dir) == parent;
                if holders.len() < MAX_HOLDERS_SHOWN {
                    holders.push(e.dir);
                }
            }
            if pptr {
                ecount = ecount.saturating_add(1);
                esum = esum.wrapping_add(e.fp);
                if named.len() < MAX_ENTRIES_EXPLAINED {
                    named.push((e.dir, e.pos));
                }
            }
        }
        let drop_extra = held && !is_meta(k) && !extra.is_empty();
        for e in &extra {
            if drop_extra {
                let p = parent.expect("extra entries have a parent");
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: format!(
                        "' names directory {k}, which directory {p} (its '..') names: \
                         a second entry for a directory ({nholders} in all)"
                    ),
                    fix: Some(EntryFix::Drop),
                });
                continue;
            }
            // Kept: counted as any other entry.
            if let Some(et) = type_of(e.kind).filter(|&et| et != FileType::Dir) {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: format!("' says {et:?} but inode {k} is Dir"),
                    fix: Some(EntryFix::Type {
                        target: k,
                        ftype: FileType::Dir.dirent_code(),
                    }),
                });
            } else if e.kind == 0 && ftype_feature {
                pending.push(Pending {
                    dir: e.dir,
                    pos: e.pos,
                    before: "entry '".into(),
                    after: "' has no file type".into(),
                    fix: Some(EntryFix::Type {
                        target: k,
                        ftype: FileType::Dir.dirent_code(),
                    }),
                });
            }
            subdirs.push(Key(e.dir))?;
            if pptr {
                ecount = ecount.saturating_add(1);
                esum = esum.wrapping_add(e.fp);
                if named.len() < MAX_ENTRIES_EXPLAINED {
                    named.push((e.dir, e.pos));
                }
            }
        }
        if drop_extra {
            // The entries dropped do not name it.
            refs = refs.saturating_sub(extra.len() as u32);
        }
        let Some(inode) = inode.filter(|r| r.kind != KIND_UNDECODED) else {
            continue;
        };
        let t = t.expect("decoded");
        let at = || Location::Inode(k);
        if let Some(p) = parent {
            if is_root(k) {
                if p != k {
                    ctx.sink.add_fix(
                        "directory",
                        at(),
                        format!("root directory's '..' points at {p}, not itself"),
                        Fix::DotDot { dir: k, parent: k },
                    );
                }
            } else {
                parents.push(ParentRec {
                    parent: p,
                    child: k,
                    held,
                    holder: match holders.first() {
                        Some(&h) if !held => h,
                        _ => u64::MAX,
                    },
                })?;
                if nholders > 1 && !drop_extra {
                    let more = if nholders > holders.len() {
                        format!(" and {} more", nholders - holders.len())
                    } else {
                        String::new()
                    };
                    ctx.sink.add(
                        "directory",
                        at(),
                        format!(
                            "has {nholders} entries pointing at it (directories {holders:?}{more})"
                        ),
                    );
                }
            }
        }
        // Parent pointers (not of inodes without links: open files
        // unlinked, on the unlinked lists).
        if pptr && inode.pptr_ok && inode.nlink != 0 {
            if is_root(k) || is_meta(k) {
                if inode.pcount > 0 {
                    ctx.sink.add(
                        "parent pointer",
                        at(),
                        format!(
                            "{} parent pointer(s) on an inode no directory names",
                            inode.pcount
                        ),
                    );
                }
            } else if inode.pcount != ecount || inode.psum != esum {
                if bad.len() < MAX_EXPLAINED {
                    let complete = named.len() == ecount as usize;
                    bad.push((k, named, complete));
                } else {
                    unexplained += 1;
                }
            }
        }
        // Link counts (directories: in the second merge).
        if is_meta(k) {
            continue;
        }
        if refs == 0 && !is_root(k) {
            ctx.sink.add_fix(
                "inode",
                at(),
                format!(
                    "allocated {t:?} with nlink {} is not in any directory (disconnected)",
                    inode.nlink
                ),
                Fix::Disconnected { ino: k },
            );
            if t == FileType::Dir {
                dir_links.push(DirLinks {
                    ino: k,
                    nlink: inode.nlink,
                    check: false,
                })?;
            }
            continue;
        }
        if t == FileType::Dir {
            dir_links.push(DirLinks {
                ino: k,
                nlink: inode.nlink,
                check: true,
            })?;
        } else if inode.nlink != refs {
            ctx.sink.add_fix(
                "inode",
                at(),
                format!("nlink {}, counted {refs}", inode.nlink),
                Fix::Nlink {
                    ino: k,
                    nlink: refs,
                },
            );
        }
    }
    drop((inodes, entries, dirs));
    if !root_ok {
        ctx.sink.add(
            "root directory",
            Location::Inode(root),
            "is not an allocated directory",
        );
    }
    if let Some(m) = metadir.filter(|_| !metadir_ok) {
        ctx.sink.add(
            "metadata directory",
            Location::Inode(m),
            "the superblock's metadata directory root is not an allocated directory",
        );
    }

    // Directories: link counts against subdirectories, each ".." against
    // what it points at.
    let mut dir_links = Peek::new(dir_links.into_sorted()?)?;
    let mut subdirs = Peek::new(subdirs.into_sorted()?)?;
    let mut parents = Peek::new(parents.into_sorted()?)?;
    while let Some(k) = lowest([
        dir_links.peek().map(|r| r.ino),
        subdirs.peek().map(|r| r.0),
        parents.peek().map(|r| r.parent),
    ]) {
        let d = dir_links.take_first(|r| r.ino == k)?;
        let mut n = 0u32;
        while subdirs.take_if(|r| r.0 == k)?.is_some() {
            n = n.saturating_add(1);
        }
        while let Some(p) = parents.take_if(|r| r.parent == k)? {
            let at = Location::Inode(p.child);
            // The directory that names it is its parent (one that none
            // names is reconnected, '..' with it).
            let fix = Some(if p.holder != u64::MAX {
                Fix::DotDot {
                    dir: p.child,
                    parent: p.holder,
                }
            } else {
                Fix::Disconnected { ino: p.child }
            });
            if d.is_none() {
                ctx.sink.add_maybe(
                    "directory",
                    at,
                    format!("'..' points at inode {k}, which is not an allocated directory"),
                    fix,
                );
            } else if !p.held {
                ctx.sink.add_maybe(
                    "directory",
                    at,
                    format!("'..' points at directory {k}, which has no entry for it"),
                    fix,
                );
            }
        }
        if let Some(d) = d.filter(|d| d.check) {
            let want = n.saturating_add(2);
            if d.nlink != want {
                ctx.sink.add_fix(
                    "inode",
                    Location::Inode(k),
                    format!("nlink {}, counted {want}", d.nlink),
                    Fix::Nlink {
                        ino: k,
                        nlink: want,
                    },
                );
            }
        }
    }

    // Names, read again for the problems that show them.
    let mut wanted: Vec<(u64, u32)> = pending.iter().map(|p| (p.dir, p.pos)).collect();
    for (_, named, _) in &bad {
        wanted.extend(named.iter().copied());
    }
    let names = entry_names(fs, wanted);
    let name_of = |dir: u64, pos: u32| -> Vec<u8> {
        names
            .get(&(dir, pos))
            .cloned()
            .unwrap_or_else(|| format!("#{pos}").into_bytes())
    };
    for p in &pending {
        let name = name_of(p.dir, p.pos);
        let known = names.contains_key(&(p.dir, p.pos));
        let fix = p.fix.filter(|_| known).map(|f| match f {
            EntryFix::Drop => Fix::DropEntry {
                dir: p.dir,
                name: name.clone(),
            },
            EntryFix::Type { target, ftype } => Fix::EntryType {
                dir: p.dir,
                name: name.clone(),
                target,
                ftype,
            },
        });
        ctx.sink.add_maybe(
            "directory entry",
            Location::Inode(p.dir),
            format!("{}{}{}", p.before, String::from_utf8_lossy(&name), p.after),
            fix,
        );
    }
    if !bad.is_empty() {
        let mut gens: HashMap<u64, u32> = HashMap::new();
        let mut gen_of = |d: u64| {
            *gens
                .entry(d)
                .or_insert_with(|| fs.inode(crate::Ino(d)).map_or(0, |i| i.gen))
        };
        let differs: Vec<super::pptrs::Differs> = bad
            .iter()
            .map(|(ino, named, complete)| super::pptrs::Differs {
                ino: *ino,
                complete: *complete && named.iter().all(|k| names.contains_key(k)),
                entries: named
                    .iter()
                    .map(|&(d, pos)| (name_of(d, pos), d, gen_of(d)))
                    .collect(),
            })
            .collect();
        super::pptrs::explain(ctx, &differs);
    }
    if unexplained > 0 {
        ctx.sink.add(
            "parent pointer",
            Location::Other("namespace".into()),
            format!("{unexplained} more inodes whose parent pointers differ from their entries"),
        );
    }
    Ok(())
}

/// The names of entries given as (directory, position), each directory
/// read once. Entries that cannot be read again are left out.
fn entry_names(fs: &Fs, mut wanted: Vec<(u64, u32)>) -> HashMap<(u64, u32), Vec<u8>> {
    wanted.sort_unstable();
    wanted.dedup();
    let mut out = HashMap::new();
    let mut i = 0;
    while i < wanted.len() {
        let dir = wanted[i].0;
        let j = i + wanted[i..].iter().take_while(|w| w.0 == dir).count();
        let positions = &wanted[i..j];
        if let Ok(ip) = fs.inode(crate::Ino(dir)) {
            let mut pos = 0u32;
            let mut next = 0usize;
            let _ = crate::dir::for_each_entry(fs, &ip, 0, &mut |e| {
                while next < positions.len() && positions[next].1 < pos {
                    next += 1;
                }
                if next < positions.len() && positions[next].1 == pos {
                    out.insert((dir, pos), e.name);
                    next += 1;
                }
                pos += 1;
                next < positions.len()
            });
        }
        i = j;
    }
    out
}

//! The namespace fixes of a repair: link counts, directory entries, '..'
//! and disconnected inodes, each one journaled transaction of the engine
//! (the log is clean when they start, so a crash leaves a log that the
//! next repair, or a mount, replays).
//!
//! Disconnected inodes go back under their own name where the filesystem
//! still says it: a parent pointer whose directory is allocated, of the
//! generation recorded, and free of that name gets the entry back (the
//! file returns to its path); otherwise the inode goes to `lost+found`
//! (made as xfs_repair makes it, mode 0755, when missing) under the name
//! of a parent pointer, or under its inode number as xfs_repair names
//! them, with `.N` added when the name is taken. A directory moved so has
//! its '..' pointed at its new parent, and its parent pointers are made
//! to match the one entry that names it.

use crate::check::Fix;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};
use crate::namespace::pptr;
use crate::trans::Trans;

/// The name xfs_repair gives the directory of reconnected inodes.
pub(crate) const LOST_FOUND: &[u8] = b"lost+found";

/// The order fixes are made in: rebuilt AG btrees, then counts (they were counted before
/// any name changes), entries, '..', then reconnections (which add to the
/// counts of the directories they fill).
fn rank(f: &Fix) -> u8 {
    match f {
        Fix::AgField(_)
        | Fix::AgHeaderIdent { .. }
        | Fix::ResetAgfl { .. }
        | Fix::InodeCrc { .. }
        | Fix::InodeBits { .. }
        | Fix::ClearAttrFork { .. }
        | Fix::RebuildFork { .. }
        | Fix::RebuildFreeSpace { .. } => 0,
        // The AG btrees first: the frees and mappings after them (and
        // the intents they log, which a replay finishes) walk those trees.
        Fix::RebuildRefcount { .. } | Fix::RebuildInobt { .. } | Fix::RebuildFinobt { .. } => 1,
        // A file's data mapping before anything that reads or frees space.
        Fix::RebuildForkBtree { .. } => 2,
        Fix::ClearInode { .. } => 2,
        Fix::DropRmap { .. } => 2,
        Fix::FreeBlocks { .. } => 2,
        Fix::Nlink { .. } => 2,
        Fix::AddRmap { .. } => 3,
        Fix::ResetDir { .. } => 3,
        Fix::DropEntry { .. } => 4,
        Fix::EntryType { .. } => 4,
        Fix::DotDot { .. } => 5,
        Fix::DropParent { .. } => 6,
        Fix::AddParent { .. } => 7,
        Fix::Disconnected { .. } => 8,
        Fix::RecountQuota { .. } => 9,
    }
}

/// True for the fixes this module makes.
pub(crate) fn is_ns(f: &Fix) -> bool {
    !matches!(
        f,
        Fix::AgField(_)
            | Fix::AgHeaderIdent { .. }
            | Fix::ResetAgfl { .. }
            | Fix::InodeCrc { .. }
            | Fix::InodeBits { .. }
            | Fix::ClearAttrFork { .. }
            | Fix::RebuildFork { .. }
            | Fix::RebuildFreeSpace { .. }
            | Fix::RecountQuota { .. }
    )
}

/// Makes each namespace fix on `fs` (opened for writing) and returns what
/// was done, in words, and what could not be done.
/// `report` is the check's that found them (what rebuilt trees hold).
pub(crate) fn apply(
    fs: &Fs,
    fixes: &[Fix],
    report: &crate::check::CheckReport,
) -> Result<(Vec<String>, Vec<String>)> {
    let mut order: Vec<&Fix> = fixes.iter().filter(|f| is_ns(f)).collect();
    order.sort_by_key(|f| rank(f));
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for f in order {
        match apply_one(fs, f, report) {
            Ok(words) => done.push(words),
            Err(e @ Error::Io(_)) => return Err(e),
            Err(e) => failed.push(format!("{}: {e}", describe(f))),
        }
    }
    Ok((done, failed))
}

/// What a fix does, in words (for `--dry-run`).
pub(crate) fn describe(f: &Fix) -> String {
    let name = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
    match f {
        Fix::AgField(ff) => format!(
            "AG {} header field at offset {} set to {}",
            ff.agno, ff.offset, ff.value
        ),
        Fix::InodeCrc { ino, .. } => format!("inode {ino}: magic number and CRC written again"),
        Fix::ClearAttrFork { ino } => {
            format!("inode {ino}: attribute fork cleared (it cannot be read)")
        }
        Fix::RebuildFork {
            ino,
            extents,
            nblocks,
        } => format!(
            "inode {ino}: data fork rebuilt from the rmapbt ({} extent(s), {} block(s) mapped), nblocks {nblocks}",
            extents.len(),
            extents.iter().map(|e| e.2).sum::<u64>()
        ),
        Fix::RebuildForkBtree {
            ino,
            extents,
            nblocks,
            old_bmbt,
        } => format!(
            "inode {ino}: data fork rebuilt from the rmapbt as a bmbt ({} extent(s), {} block(s) mapped, {nblocks} in extents), its {} old bmbt block(s) freed",
            extents.len(),
            extents.iter().map(|e| e.2).sum::<u64>(),
            old_bmbt.iter().map(|b| u64::from(b.2)).sum::<u64>()
        ),
        Fix::ResetAgfl { agno, .. } => format!("AG {agno}: free list emptied"),
        Fix::AgHeaderIdent { agno, sector } => format!(
            "AG {agno} {}: magic number, version, AG number, length, UUID and CRC written again",
            ["", "AGF", "AGI", "AGFL"][(*sector as usize).min(3)]
        ),
        Fix::ResetDir { ino } => format!(
            "directory {ino}: emptied (it cannot be read whole), its entries put back from its children's parent pointers"
        ),
        Fix::InodeBits {
            ino,
            offset,
            clear,
            set,
            ..
        } => {
            let field = core_field(*offset);
            if *clear == u64::MAX || (*clear == 0xffff_ffff && field.ends_with("time")) {
                format!("inode {ino}: {field} set to {set}")
            } else if *set == 0 {
                format!("inode {ino}: bits {clear:#x} of {field} cleared")
            } else {
                format!("inode {ino}: {field} set to {set}")
            }
        }
        Fix::ClearInode { ino } => format!("inode {ino}: cleared (its core cannot be read)"),
        Fix::RecountQuota { kind } => format!(
            "{} quota: counted again into its records (one that is not a valid dquot made anew)",
            kind.name()
        ),
        Fix::DropRmap {
            agno,
            agbno,
            len,
            owner,
            ..
        } => format!(
            "AG {agno}: reverse mapping of {len} block(s) at {agbno} for {}, which no longer maps them, removed",
            owner_name(*owner)
        ),
        Fix::AddRmap {
            agno,
            agbno,
            len,
            owner,
            ..
        } => format!(
            "AG {agno}: reverse mapping of {len} block(s) at {agbno} for {} added",
            owner_name(*owner)
        ),
        Fix::RebuildFreeSpace { agno } => format!(
            "AG {agno}: free space btrees (bnobt, cntbt) rebuilt from what the AG uses"
        ),
        Fix::RebuildFinobt { agno } => {
            format!("AG {agno}: free inode btree rebuilt from the inode btree")
        }
        Fix::RebuildRefcount { agno } => {
            format!("AG {agno}: refcount btree rebuilt from the files' data mappings")
        }
        Fix::RebuildInobt { agno } => format!(
            "AG {agno}: inode btree rebuilt from the inode chunks the rmapbt records (and the free inode btree from it)"
        ),
        Fix::FreeBlocks { agno, agbno, len } => {
            format!("AG {agno}: {len} block(s) at {agbno} that nothing uses returned to free space")
        }
        Fix::Nlink { ino, nlink } => format!("inode {ino}: link count set to {nlink}"),
        Fix::DropEntry { dir, name: n } => {
            format!("directory {dir}: entry '{}' removed", name(n))
        }
        Fix::EntryType { dir, name: n, .. } => {
            format!("directory {dir}: entry '{}' given its inode's file type", name(n))
        }
        Fix::DotDot { dir, parent } => format!("directory {dir}: '..' set to {parent}"),
        Fix::AddParent { ino, name: n, dir, .. } => {
            format!("inode {ino}: parent pointer '{}' -> directory {dir} added", name(n))
        }
        Fix::DropParent { ino, name: n, dir, .. } => {
            format!("inode {ino}: parent pointer '{}' -> directory {dir} removed", name(n))
        }
        Fix::Disconnected { ino } => format!(
            "inode {ino}: named again (in its old directory where a parent pointer says it, else in lost+found)"
        ),
    }
}

/// A reverse mapping's owner in words.
fn owner_name(owner: u64) -> String {
    if owner == xfs_format::btree::XFS_RMAP_OWN_AG {
        "the AG's free space btrees and free list".into()
    } else {
        crate::check::rmap::owner_name(owner)
    }
}

/// The name of the inode core field at byte `offset` (xfs_db's).
fn core_field(offset: usize) -> &'static str {
    use std::mem::offset_of;
    use xfs_format::inode::Dinode;
    const FIELDS: &[(usize, &str)] = &[
        (offset_of!(Dinode, di_onlink), "core.onlink"),
        (
            offset_of!(Dinode, di_big_nextents),
            "core.nextents (large counter)",
        ),
        (offset_of!(Dinode, di_atime), "core.atime"),
        (offset_of!(Dinode, di_mtime), "core.mtime"),
        (offset_of!(Dinode, di_ctime), "core.ctime"),
        (offset_of!(Dinode, di_nblocks), "core.nblocks"),
        (offset_of!(Dinode, di_extsize), "core.extsize"),
        (offset_of!(Dinode, di_nextents), "core.nextents"),
        (offset_of!(Dinode, di_anextents), "core.naextents"),
        (offset_of!(Dinode, di_forkoff), "core.forkoff"),
        (offset_of!(Dinode, di_aformat), "core.aformat"),
        (offset_of!(Dinode, di_flags), "core.flags"),
        (offset_of!(Dinode, di_flags2), "v3.flags2"),
        (offset_of!(Dinode, di_cowextsize), "v3.cowextsize"),
        (offset_of!(Dinode, di_crtime), "v3.crtime"),
    ];
    FIELDS
        .iter()
        .find(|f| f.0 == offset)
        .map_or("a core field", |f| f.1)
}

fn apply_one(fs: &Fs, f: &Fix, report: &crate::check::CheckReport) -> Result<String> {
    let mut tp = fs.trans()?;
    let words = match f {
        Fix::AgField(_)
        | Fix::AgHeaderIdent { .. }
        | Fix::ResetAgfl { .. }
        | Fix::InodeCrc { .. }
        | Fix::InodeBits { .. }
        | Fix::ClearAttrFork { .. }
        | Fix::RebuildFork { .. }
        | Fix::RebuildFreeSpace { .. } => {
            unreachable!("written in place, not through the journal")
        }
        Fix::RecountQuota { .. } => unreachable!("made by quota::recount"),
        Fix::ClearInode { ino } => {
            let ino = Ino(*ino);
            tp.lock_inode(ino);
            // An empty file in its place, which the allocator then frees
            // as any other (a free core of the next generation).
            let gen = fs.write_state()?.next_gen();
            let stand_in = Inode::new(fs.geometry(), ino, 0o100000, gen)?;
            tp.log_inode(&stand_in)?;
            crate::ialloc::free_inode(&mut tp, ino)?;
            format!(
                "inode {}: cleared (its core could not be read) and freed",
                ino.0
            )
        }
        Fix::DropRmap {
            agno,
            agbno,
            len,
            owner,
            offset,
            flags,
        } => {
            let geo = fs.geometry();
            let start = geo.fsb_make(
                crate::geometry::AgNumber(*agno),
                crate::geometry::AgBlock(*agbno),
            );
            crate::alloc::rmap_apply(&mut tp, start, *len, *owner, *offset, *flags, false)?;
            format!(
                "AG {agno}: reverse mapping of {len} block(s) at {agbno} for {}, which no longer maps them, removed",
                owner_name(*owner)
            )
        }
        Fix::AddRmap {
            agno,
            agbno,
            len,
            owner,
            offset,
            flags,
        } => {
            let geo = fs.geometry();
            let start = geo.fsb_make(
                crate::geometry::AgNumber(*agno),
                crate::geometry::AgBlock(*agbno),
            );
            crate::alloc::rmap_apply(&mut tp, start, *len, *owner, *offset, *flags, true)?;
            format!(
                "AG {agno}: reverse mapping of {len} block(s) at {agbno} for {}, which maps them, added",
                owner_name(*owner)
            )
        }
        Fix::RebuildRefcount { agno } => {
            let recs = report
                .refcount_rebuild
                .iter()
                .find(|(a, _)| a == agno)
                .map(|(_, r)| r.as_slice())
                .unwrap_or_default();
            crate::alloc::rebuild_refcount(&mut tp, crate::geometry::AgNumber(*agno), recs)?;
            format!(
                "AG {agno}: refcount btree rebuilt from the files' data mappings: {} shared extent(s)",
                recs.len()
            )
        }
        Fix::RebuildInobt { agno } => {
            let recs: Vec<crate::ialloc::IRec> = report
                .inobt_rebuild
                .iter()
                .find(|(a, _)| a == agno)
                .map(|(_, r)| r.as_slice())
                .unwrap_or_default()
                .iter()
                .map(
                    |&(startino, holemask, count, freecount, free)| crate::ialloc::IRec {
                        startino,
                        holemask,
                        count,
                        freecount,
                        free,
                    },
                )
                .collect();
            crate::ialloc::rebuild_inobt(&mut tp, crate::geometry::AgNumber(*agno), &recs)?;
            let inodes: u32 = recs.iter().map(|r| u32::from(r.count)).sum();
            format!(
                "AG {agno}: inode btree rebuilt from the inode chunks the rmapbt records: {} chunk(s), {inodes} inodes (and the free inode btree from it)",
                recs.len()
            )
        }
        Fix::RebuildFinobt { agno } => {
            let n = crate::ialloc::rebuild_finobt(&mut tp, crate::geometry::AgNumber(*agno))?;
            format!("AG {agno}: free inode btree rebuilt from the inode btree: {n} chunk(s) with free inodes")
        }
        Fix::RebuildForkBtree {
            ino,
            extents,
            nblocks,
            old_bmbt,
        } => {
            let geo = fs.geometry();
            let ino = Ino(*ino);
            tp.lock_inode(ino);
            let mut ip = tp.read_inode(ino)?;
            let old: Vec<(crate::geometry::FsBlock, u32)> = old_bmbt
                .iter()
                .map(|&(agno, agbno, len)| {
                    (
                        geo.fsb_make(
                            crate::geometry::AgNumber(agno),
                            crate::geometry::AgBlock(agbno),
                        ),
                        len,
                    )
                })
                .collect();
            let ext: Vec<crate::inode::Extent> = extents
                .iter()
                .map(|&(offset, start, len, unwritten)| crate::inode::Extent {
                    offset,
                    start: crate::geometry::FsBlock(start),
                    len,
                    unwritten,
                })
                .collect();
            crate::bmap::rebuild_data_btree(&mut tp, &mut ip, &ext, *nblocks, &old)?;
            tp.log_inode(&ip)?;
            format!(
                "inode {}: data fork rebuilt from the rmapbt as a bmbt: {} extent(s), {} bmbt block(s), nblocks {}; {} old bmbt block(s) freed",
                ino.0,
                ext.len(),
                ip.nblocks - nblocks,
                ip.nblocks,
                old.iter().map(|o| u64::from(o.1)).sum::<u64>()
            )
        }
        Fix::FreeBlocks { agno, agbno, len } => {
            let geo = fs.geometry();
            let start = geo.fsb_make(
                crate::geometry::AgNumber(*agno),
                crate::geometry::AgBlock(*agbno),
            );
            crate::alloc::free_extent_no_rmap(&mut tp, start, *len)?;
            format!("AG {agno}: {len} block(s) at {agbno} that nothing used returned to free space")
        }
        Fix::Nlink { ino, nlink } => {
            tp.lock_inode(Ino(*ino));
            let mut ip = tp.read_inode(Ino(*ino))?;
            let old = ip.nlink;
            ip.nlink = *nlink;
            tp.log_inode(&ip)?;
            format!("inode {ino}: link count {old} set to {nlink}, as counted")
        }
        Fix::DropEntry { dir, name } => {
            tp.lock_inode(Ino(*dir));
            let mut dp = dir_inode(&mut tp, *dir)?;
            let was = crate::dir::write::remove(&mut tp, &mut dp, name)?;
            tp.log_inode(&dp)?;
            format!(
                "directory {dir}: entry '{}' (naming inode {}) removed",
                String::from_utf8_lossy(name),
                was.0
            )
        }
        Fix::EntryType {
            dir,
            name,
            target,
            ftype,
        } => {
            tp.lock_inode(Ino(*dir));
            let mut dp = dir_inode(&mut tp, *dir)?;
            crate::dir::write::replace(&mut tp, &mut dp, name, Ino(*target), *ftype)?;
            tp.log_inode(&dp)?;
            format!(
                "directory {dir}: entry '{}' given file type {ftype} (inode {target}'s)",
                String::from_utf8_lossy(name)
            )
        }
        Fix::DotDot { dir, parent } => {
            tp.lock_inode(Ino(*dir));
            let mut dp = dir_inode(&mut tp, *dir)?;
            let old = crate::dir::write::replace(
                &mut tp,
                &mut dp,
                b"..",
                Ino(*parent),
                FileType::Dir.dirent_code(),
            )?;
            tp.log_inode(&dp)?;
            format!("directory {dir}: '..' {} set to {parent}", old.0)
        }
        Fix::AddParent {
            ino,
            name,
            dir,
            gen,
        }
        | Fix::DropParent {
            ino,
            name,
            dir,
            gen,
        } => {
            let add = matches!(f, Fix::AddParent { .. });
            tp.lock_inode(Ino(*ino));
            let mut ip = tp.read_inode(Ino(*ino))?;
            let rec = pptr::rec_of(*dir, *gen);
            let name_s = String::from_utf8_lossy(name);
            if add {
                crate::attr::write::set_parent(&mut tp, &mut ip, name, &rec)?;
            } else {
                crate::attr::write::remove_parent(&mut tp, &mut ip, name, &rec)?;
            }
            tp.log_inode(&ip)?;
            if add {
                format!(
                    "inode {ino}: parent pointer '{name_s}' -> directory {dir} added for its entry"
                )
            } else {
                format!("inode {ino}: parent pointer '{name_s}' -> directory {dir}, which names no entry, removed")
            }
        }
        Fix::Disconnected { ino } => reconnect(fs, &mut tp, Ino(*ino))?,
        Fix::ResetDir { ino } => {
            let ino = Ino(*ino);
            tp.lock_inode(ino);
            let mut dp = dir_inode(&mut tp, ino.0)?;
            let root = fs.geometry().root_ino;
            // Its parent: the root's is itself; another's, the first of its
            // parent pointers naming a live directory (the root otherwise,
            // until a later round points '..' at whichever names it).
            let mut parent = root;
            if ino != root {
                for (_, p, g) in crate::attr::parent_pointers(fs, &dp).unwrap_or_default() {
                    if p != ino.0 && live_dir(&mut tp, p, Some(g)).is_some() {
                        parent = Ino(p);
                        break;
                    }
                }
            }
            if matches!(
                dp.format,
                crate::inode::ForkFormat::Extents | crate::inode::ForkFormat::Btree
            ) {
                crate::bmap::unmap_range(&mut tp, &mut dp, crate::inode::Fork::Data, 0, u64::MAX)?;
            }
            dp.format = crate::inode::ForkFormat::Local;
            dp.data_fork.clear();
            dp.size = 0;
            crate::dir::write::init(&mut tp, &mut dp, parent)?;
            dp.nlink = 2;
            let now = fs.now()?;
            fs.touch_dir(&mut dp, now)?;
            tp.log_inode(&dp)?;
            format!(
                "directory {}: emptied (it could not be read whole), '..' set to {}; its children return by their parent pointers",
                ino.0, parent.0
            )
        }
    };
    tp.commit()?;
    Ok(words)
}

fn dir_inode(tp: &mut Trans<'_>, ino: u64) -> Result<Inode> {
    let dp = tp.read_inode(Ino(ino))?;
    if dp.file_type != FileType::Dir {
        return Err(Error::NotDir(format!("inode {ino}")));
    }
    Ok(dp)
}

/// A directory that can take `name`: allocated, a directory, and (when
/// `gen` is given) of that generation, with no entry of the name.
fn takes(tp: &mut Trans<'_>, dir: u64, gen: Option<u32>, name: &[u8]) -> Result<Option<Inode>> {
    let Some(dp) = live_dir(tp, dir, gen) else {
        return Ok(None);
    };
    if crate::dir::write::lookup(tp, &dp, name)?.is_some() {
        return Ok(None);
    }
    Ok(Some(dp))
}

/// Directory `dir` when it is allocated (and of generation `gen`).
fn live_dir(tp: &mut Trans<'_>, dir: u64, gen: Option<u32>) -> Option<Inode> {
    let dp = tp.read_inode(Ino(dir)).ok()?;
    (dp.file_type == FileType::Dir && dp.nlink != 0 && gen.is_none_or(|g| g == dp.gen))
        .then_some(dp)
}

/// The lost+found directory under the root, made when missing.
fn lost_found(fs: &Fs, tp: &mut Trans<'_>) -> Result<Inode> {
    let root = fs.geometry().root_ino;
    let rp = tp.read_inode(root)?;
    if let Some((ino, _)) = crate::dir::write::lookup(tp, &rp, LOST_FOUND)? {
        let dp = tp.read_inode(ino)?;
        if dp.file_type != FileType::Dir {
            return Err(Error::Unsupported(format!(
                "the root's {} is inode {}, not a directory",
                String::from_utf8_lossy(LOST_FOUND),
                ino.0
            )));
        }
        return Ok(dp);
    }
    let now = fs.now()?;
    let meta = crate::namespace::Meta {
        mode: 0o755,
        uid: 0,
        gid: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
    };
    let gen = fs.write_state()?.next_gen();
    let (dp, rp) = fs.create_in(
        tp,
        root,
        LOST_FOUND,
        &crate::namespace::NodeKind::Dir,
        &meta,
        now,
        gen,
    )?;
    tp.log_inode(&rp)?;
    tp.log_inode(&dp)?;
    Ok(dp)
}

/// Names disconnected inode `ino` again (see the module's doc).
fn reconnect(fs: &Fs, tp: &mut Trans<'_>, ino: Ino) -> Result<String> {
    tp.lock_inode(ino);
    let mut ip = tp.read_inode(ino)?;
    let pointers = if pptr::enabled(fs.geometry()) {
        crate::attr::parent_pointers(fs, &ip).unwrap_or_default()
    } else {
        Vec::new()
    };
    // Back where a parent pointer says, when that directory can take it.
    let mut home = None;
    for (i, (name, dir, gen)) in pointers.iter().enumerate() {
        if *dir == ino.0 {
            continue;
        }
        tp.lock_inode(Ino(*dir));
        if let Some(dp) = takes(tp, *dir, Some(*gen), name)? {
            home = Some((dp, name.clone(), Some(i)));
            break;
        }
    }
    let back = home.is_some();
    let (mut dp, name, kept) = match home {
        Some(h) => h,
        None => {
            let lf = lost_found(fs, tp)?;
            tp.lock_inode(lf.ino);
            let base = pointers
                .first()
                .map(|p| p.0.clone())
                .unwrap_or_else(|| ino.0.to_string().into_bytes());
            let mut name = base.clone();
            let mut n = 0u32;
            while crate::dir::write::lookup(tp, &lf, &name)?.is_some() {
                n += 1;
                name = base.clone();
                name.extend_from_slice(format!(".{n}").as_bytes());
                if name.len() > 255 {
                    name = format!("{}.{n}", ino.0).into_bytes();
                }
            }
            (lf, name, None)
        }
    };
    crate::dir::write::add(tp, &mut dp, &name, ino, ip.file_type.dirent_code())?;
    // Parent pointers: the one entry that names it now.
    for (i, (pname, dir, gen)) in pointers.iter().enumerate() {
        if Some(i) != kept {
            pptr::remove_rec(tp, &mut ip, &pptr::rec_of(*dir, *gen), pname)?;
        }
    }
    if kept.is_none() {
        pptr::add(tp, &mut ip, &dp, &name)?;
    }
    if ip.file_type == FileType::Dir {
        crate::dir::write::replace(tp, &mut ip, b"..", dp.ino, FileType::Dir.dirent_code())?;
        dp.nlink = dp.nlink.saturating_add(1);
        ip.nlink = ip.nlink.max(2);
    } else {
        ip.nlink = ip.nlink.max(1);
    }
    let now = fs.now()?;
    fs.touch_dir(&mut dp, now)?;
    tp.log_inode(&ip)?;
    tp.log_inode(&dp)?;
    let shown = String::from_utf8_lossy(&name).into_owned();
    Ok(if back {
        format!(
            "inode {}: named '{shown}' in directory {} again, as its parent pointer says",
            ino.0, dp.ino.0
        )
    } else {
        format!(
            "inode {}: moved to {} as '{shown}'",
            ino.0,
            String::from_utf8_lossy(LOST_FOUND)
        )
    })
}

//! Pass 2, directories: read every entry of a directory once, keep what
//! the namespace pass needs as fixed-size records (no names), and
//! verify the hash index blocks that reading the entries does not touch.

use super::ns::{kind_of, DirRec, EntryRec, NsBatch};
use super::Ctx;
use crate::buf::verify::Verifier;
use crate::dir::data::DirMap;
use crate::error::Result;
use crate::inode::{FileType, ForkFormat, Inode};
use std::sync::atomic::Ordering;

/// Adds an entry of directory `dir` to the batch, at the next position.
fn push(
    ctx: &Ctx<'_>,
    dir: &Inode,
    out: &mut NsBatch,
    e0: usize,
    target: u64,
    name: &[u8],
    file_type: Option<FileType>,
) {
    let fp = if ctx.fs.geometry().has_parent() {
        super::pptrs::fingerprint(target, dir.ino.0, dir.gen, name)
    } else {
        0
    };
    out.entries.push(EntryRec {
        target,
        dir: dir.ino.0,
        pos: (out.entries.len() - e0) as u32,
        kind: file_type.map_or(0, kind_of),
        dir_meta: dir.flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0,
        fp,
    });
}

/// The fix of a damaged directory on a filesystem with parent pointers:
/// it is emptied and each of its children, named by its parent pointer,
/// is put back (none without parent pointers, where the names would be
/// lost).
pub(crate) fn reset_fix(ctx: &Ctx<'_>, dir: u64) -> Option<super::Fix> {
    ctx.fs
        .geometry()
        .has_parent()
        .then_some(super::Fix::ResetDir { ino: dir })
}

/// Reports damage of directory `dir`, with [`reset_fix`] (named with the
/// directory when the fix is there, as before fixes were known).
fn dir_error(ctx: &Ctx<'_>, dir: u64, e: crate::Error) {
    let fix = reset_fix(ctx, dir);
    ctx.sink.error_with(e, fix.as_ref().map(|_| dir), fix);
}

/// Reads directory `ino`'s entries into `out`; problems go to the sink.
pub(crate) fn check_dir(ctx: &Ctx<'_>, ino: &Inode, out: &mut NsBatch) {
    ctx.counters.directories.fetch_add(1, Ordering::Relaxed);
    let e0 = out.entries.len();
    let parent = match read_entries(ctx, ino, out, e0) {
        Ok(p) => p,
        Err(e) => {
            // Keep nothing of a directory that cannot be read whole.
            out.entries.truncate(e0);
            return ctx
                .sink
                .error_with(e, Some(ino.ino.0), reset_fix(ctx, ino.ino.0));
        }
    };
    if matches!(ino.format, ForkFormat::Extents | ForkFormat::Btree) {
        check_dir_index(ctx, ino);
        super::dir_index::check_index(ctx, ino);
    }
    ctx.counters
        .dir_entries
        .fetch_add((out.entries.len() - e0) as u64, Ordering::Relaxed);
    out.dirs.push(DirRec {
        ino: ino.ino.0,
        parent: parent.unwrap_or(u64::MAX),
    });
}

/// Appends the entries of `dir` to `out`; returns its ".." pointer, or
/// `None` after reporting why it is missing.
fn read_entries(ctx: &Ctx<'_>, dir: &Inode, out: &mut NsBatch, e0: usize) -> Result<Option<u64>> {
    match dir.format {
        ForkFormat::Extents | ForkFormat::Btree => {
            let map = DirMap::new(ctx.fs, dir)?;
            let mut parent = None;
            for db in map.dbs_below(map.leaf_first_db()) {
                let buf = map.read_data(db)?;
                crate::dir::data::walk(ctx.fs, dir.ino.0, db, &buf, &mut |e| {
                    let dots = e.name == b"." || e.name == b"..";
                    let ftype = ctx.fs.geometry().features.ftype;
                    if dots && ftype && e.file_type != Some(FileType::Dir) {
                        dir_error(
                            ctx,
                            dir.ino.0,
                            map.corrupt(
                                db,
                                format!(
                                    "'{}' entry has file type {:?}",
                                    String::from_utf8_lossy(e.name),
                                    e.file_type
                                ),
                            ),
                        );
                    }
                    if e.name == b"." && e.ino.0 != dir.ino.0 {
                        dir_error(
                            ctx,
                            dir.ino.0,
                            map.corrupt(db, format!("'.' points at inode {}", e.ino.0)),
                        );
                    }
                    if e.name == b".." {
                        if db == 0 {
                            parent = Some(e.ino.0);
                        }
                    } else if e.name != b"." {
                        push(ctx, dir, out, e0, e.ino.0, e.name, e.file_type);
                    }
                    true
                })?;
            }
            // A directory whose data fork ends after its first block is a
            // single-block directory, whose size must be the block size (the
            // kernel's and xfs_repair 6.15's rule for telling the formats).
            let bsize = u64::from(ctx.fs.geometry().dir_blk_size);
            let mut dbs = map.dbs_below(u64::MAX);
            let single = dbs.next() == Some(0) && dbs.next().is_none();
            if single && dir.size != bsize {
                ctx.sink.add_maybe(
                    "directory",
                    crate::error::Location::Inode(dir.ino.0),
                    format!(
                        "single-block directory of size {}, not its block size {bsize}",
                        dir.size
                    ),
                    reset_fix(ctx, dir.ino.0),
                );
            }
            if parent.is_none() {
                let why = if map.is_mapped(0) {
                    "no \"..\" entry in the first block"
                } else {
                    "first directory block is missing"
                };
                dir_error(ctx, dir.ino.0, map.corrupt(0, why));
            }
            Ok(parent)
        }
        ForkFormat::Dev | ForkFormat::MetaBtree => Err(crate::Error::corrupt(
            "directory",
            crate::error::Location::Inode(dir.ino.0),
            "directory with a device data fork",
        )),
        ForkFormat::Local => {
            let sf = crate::dir::shortform::parse(ctx.fs, dir)?;
            // The inode's size is exactly what the header and entries take.
            let ftype_len = usize::from(ctx.fs.geometry().features.ftype);
            let inosz = if dir.data_fork.get(1).is_some_and(|&n| n > 0) {
                8
            } else {
                4
            };
            let used: usize = 2
                + inosz
                + sf.entries
                    .iter()
                    .map(|e| 3 + e.name.len() + ftype_len + inosz)
                    .sum::<usize>();
            if dir.size != used as u64 {
                ctx.sink.add_maybe(
                    "directory",
                    crate::error::Location::Inode(dir.ino.0),
                    format!(
                        "short form size {}, its header and entries take {used}",
                        dir.size
                    ),
                    reset_fix(ctx, dir.ino.0),
                );
            }
            // Each entry keeps the offset it would have in a data block:
            // after the header, "." and "..", ascending, without overlap.
            let ftype = ctx.fs.geometry().features.ftype;
            let mut next = ctx.fs.geometry().layout().dir_data_hdr
                + crate::dir::data::entry_size(1, ftype)
                + crate::dir::data::entry_size(2, ftype);
            for e in &sf.entries {
                let off = usize::from(e.offset);
                if off < next || off >= ctx.fs.geometry().dir_blk_size as usize {
                    ctx.sink.add_maybe(
                        "directory",
                        crate::error::Location::Inode(dir.ino.0),
                        format!(
                            "short form entry '{}' has offset {off}, the entry before ends at {next}",
                            String::from_utf8_lossy(e.name)
                        ),
                    reset_fix(ctx, dir.ino.0),
                );
                }
                next = next.max(off) + crate::dir::data::entry_size(e.name.len(), ftype);
            }
            let mut names: Vec<&[u8]> = sf.entries.iter().map(|e| e.name).collect();
            names.sort_unstable();
            if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                ctx.sink.add_maybe(
                    "directory",
                    crate::error::Location::Inode(dir.ino.0),
                    format!("two entries named '{}'", String::from_utf8_lossy(w[0])),
                    reset_fix(ctx, dir.ino.0),
                );
            }
            for e in &sf.entries {
                push(ctx, dir, out, e0, e.ino.0, e.name, e.file_type);
            }
            Ok(Some(sf.parent.0))
        }
    }
}

/// XDF3: magic of a directory free-index block.
const XDF3_MAGIC: u32 = xfs_format::dir::XFS_DIR3_FREE_MAGIC;

/// Verifies the leaf, node and free-index blocks of a directory, which
/// reading the entries does not touch.
fn check_dir_index(ctx: &Ctx<'_>, ino: &Inode) {
    use crate::dir::lookup::{DA3_NODE_MAGIC, DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC};
    let map = match DirMap::new(ctx.fs, ino) {
        Ok(m) => m,
        Err(e) => return ctx.sink.error_in(e, ino.ino.0),
    };
    let leaf = map.leaf_first_db();
    let free = leaf.saturating_mul(2);
    let da = [DIR3_LEAF1_MAGIC, DIR3_LEAFN_MAGIC, DA3_NODE_MAGIC];
    let fr = [XDF3_MAGIC];
    for db in map.dbs_below(u64::MAX).filter(|&d| d >= leaf) {
        let v = if db < free {
            Verifier::Da3 {
                magics: &da,
                owner: ino.ino.0,
            }
        } else {
            Verifier::Dir3 {
                magics: &fr,
                owner: ino.ino.0,
            }
        };
        if let Err(e) = map.read(db, &v) {
            ctx.sink
                .error_with(e, Some(ino.ino.0), reset_fix(ctx, ino.ino.0));
        }
    }
}

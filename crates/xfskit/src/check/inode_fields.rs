//! Inode core fields against each other and the inode's type: size, flags,
//! extent size hints, fork offset and formats, extent counts, the obsolete
//! link count, unlinked list pointer. The rules are those xfs_repair applies
//! to an in-use inode (and the kernel's inode verifier, which refuses the
//! same inodes); each problem names the inode.

use super::Ctx;
use crate::error::Location;
use crate::inode::{FileType, ForkFormat, Inode};
use xfs_format::inode as di;

/// Longest extent (and extent size hint) in blocks.
const MAX_EXTLEN: u32 = (1 << 21) - 1;
/// The first byte offset of a directory's leaf section: no directory is
/// larger.
const DIR_LEAF_OFFSET: u64 = 32 << 30;
/// Longest symlink target.
const MAX_PATH: u64 = 1024;

/// Checks the fields of in-use inode `ino` decoded from `raw`.
pub(crate) fn check_fields(ctx: &Ctx<'_>, ino: &Inode, raw: &[u8]) {
    let geo = ctx.fs.geometry();
    let Ok(d) = crate::inode::core_of(geo, ino.ino.0, raw) else {
        return;
    };
    let at = || Location::Inode(ino.ino.0);
    let bad = |d: String| ctx.sink.add("inode", at(), d);
    // A problem mended by clearing `clear` and setting `set` in the field
    // at `offset` of `width` bytes.
    let fixed = |d: String, offset: usize, width: usize, clear: u64, set: u64| {
        ctx.sink.add_fix(
            "inode",
            at(),
            d,
            super::Fix::InodeBits {
                ino: ino.ino.0,
                offset,
                width,
                clear,
                set,
            },
        )
    };
    // A directory whose size or format is wrong is emptied and refilled
    // from its children's parent pointers (where there are some).
    let dir_bad = |d: String| {
        let fix = if ino.file_type == FileType::Dir {
            super::dirs::reset_fix(ctx, ino.ino.0)
        } else {
            None
        };
        ctx.sink.add_maybe("inode", at(), d, fix)
    };
    use std::mem::offset_of;
    let ((next_at, next_w), (anext_at, anext_w)) =
        super::inodes::extent_count_fields(ino.flags2 & di::XFS_DIFLAG2_NREXT64 != 0);
    let (flags_at, flags2_at) = (
        offset_of!(di::Dinode, di_flags),
        offset_of!(di::Dinode, di_flags2),
    );
    let t = ino.file_type;
    let (is_dir, is_reg) = (t == FileType::Dir, t == FileType::File);
    let special = matches!(
        t,
        FileType::CharDev | FileType::BlockDev | FileType::Fifo | FileType::Socket
    );

    if (ino.size as i64) < 0 {
        bad(format!("size {} is negative", ino.size as i64));
    }
    if ino.flags2 & di::XFS_DIFLAG2_METADATA != 0 {
        if let Some(why) = metadata_problem(geo.features.metadir, &d) {
            bad(format!("is incorrectly marked as metadata: {why}"));
        }
    } else {
        let onlink = d.di_onlink.get();
        if onlink != 0 {
            fixed(
                format!("obsolete 16-bit link count is {onlink}, must be 0"),
                offset_of!(di::Dinode, di_onlink),
                2,
                0xffff,
                0,
            );
        }
        if geo.features.metadir && ctx.meta_roots.contains(&ino.ino.0) {
            bad("should be marked as metadata".into());
        }
    }

    // Flags.
    let f = ino.flags;
    if f & !di::XFS_DIFLAG_ANY != 0 {
        let extra = f & !di::XFS_DIFLAG_ANY;
        fixed(
            format!("unknown flags {extra:#x}"),
            flags_at,
            2,
            extra.into(),
            0,
        );
    }
    if f & (di::XFS_DIFLAG_REALTIME | di::XFS_DIFLAG_RTINHERIT) != 0 && geo.rt_blocks == 0 {
        fixed(
            "realtime flag without a realtime section".into(),
            flags_at,
            2,
            (di::XFS_DIFLAG_REALTIME | di::XFS_DIFLAG_RTINHERIT).into(),
            0,
        );
    }
    if f & di::XFS_DIFLAG_NEWRTBM != 0 && ino.ino != geo.rbm_ino {
        fixed(
            "realtime bitmap flag on an inode that is not the realtime bitmap".into(),
            flags_at,
            2,
            di::XFS_DIFLAG_NEWRTBM.into(),
            0,
        );
    }
    let dir_only = di::XFS_DIFLAG_RTINHERIT
        | di::XFS_DIFLAG_EXTSZINHERIT
        | di::XFS_DIFLAG_PROJINHERIT
        | di::XFS_DIFLAG_NOSYMLINKS;
    if f & dir_only != 0 && !is_dir {
        fixed(
            format!("directory flags {:#x} on a {t:?}", f & dir_only),
            flags_at,
            2,
            (f & dir_only).into(),
            0,
        );
    }
    let file_only = di::XFS_DIFLAG_REALTIME | di::XFS_DIFLAG_EXTSIZE;
    if f & file_only != 0 && !is_reg {
        fixed(
            format!("file flags {:#x} on a {t:?}", f & file_only),
            flags_at,
            2,
            (f & file_only).into(),
            0,
        );
    }
    let f2 = ino.flags2;
    let realtime = f & (di::XFS_DIFLAG_REALTIME | di::XFS_DIFLAG_RTINHERIT) != 0;
    if f2 & !di::XFS_DIFLAG2_ANY != 0 {
        let extra = f2 & !di::XFS_DIFLAG2_ANY;
        fixed(format!("unknown flags2 {extra:#x}"), flags2_at, 8, extra, 0);
    }
    if f2 & di::XFS_DIFLAG2_DAX != 0 && !(is_reg || is_dir) {
        fixed(
            format!("DAX flag on a {t:?}"),
            flags2_at,
            8,
            di::XFS_DIFLAG2_DAX,
            0,
        );
    }
    if f2 & di::XFS_DIFLAG2_REFLINK != 0 {
        let why = if !geo.features.reflink {
            Some("reflink flag on a filesystem without reflink".to_string())
        } else if !is_reg {
            Some(format!("reflink flag on a {t:?}"))
        } else if realtime && !geo.has_rtgroups() {
            // Realtime groups have refcount btrees of their own.
            Some("reflink flag on a realtime file".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            fixed(why, flags2_at, 8, di::XFS_DIFLAG2_REFLINK, 0);
        }
    }
    let cow_flag = f2 & di::XFS_DIFLAG2_COWEXTSIZE != 0;
    if cow_flag {
        if !geo.features.reflink {
            bad("CoW extent size flag on a filesystem without reflink".into());
        } else if !(is_reg || is_dir) {
            bad(format!("CoW extent size flag on a {t:?}"));
        } else if realtime {
            bad("CoW extent size flag on a realtime inode".into());
        } else if ino.cowextsize == 0 {
            bad("CoW extent size flag with a zero CoW extent size".into());
        }
    }

    // Timestamps: without bigtime each is seconds and nanoseconds.
    if f2 & di::XFS_DIFLAG2_BIGTIME == 0 {
        let stamps = [
            ("access", d.di_atime.get()),
            ("modification", d.di_mtime.get()),
            ("change", d.di_ctime.get()),
            ("creation", d.di_crtime.get()),
        ];
        for (name, v) in stamps {
            let nsec = v & 0xffff_ffff;
            if nsec >= 1_000_000_000 {
                let off = match name {
                    "access" => offset_of!(di::Dinode, di_atime),
                    "modification" => offset_of!(di::Dinode, di_mtime),
                    "change" => offset_of!(di::Dinode, di_ctime),
                    _ => offset_of!(di::Dinode, di_crtime),
                };
                fixed(
                    format!("{name} time has {nsec} nanoseconds"),
                    off,
                    8,
                    0xffff_ffff,
                    0,
                );
            }
        }
    }

    // Extent size hints.
    let hint_flags = di::XFS_DIFLAG_EXTSIZE | di::XFS_DIFLAG_EXTSZINHERIT;
    if f & hint_flags != 0 && ino.extsize == 0 {
        fixed(
            format!(
                "extent size flags {:#x} with a zero extent size",
                f & hint_flags
            ),
            flags_at,
            2,
            (f & hint_flags).into(),
            0,
        );
    }
    if ino.extsize != 0 {
        let allowed = (is_reg && f & (di::XFS_DIFLAG_EXTSIZE | di::XFS_DIFLAG_REALTIME) != 0)
            || (is_dir && f & di::XFS_DIFLAG_EXTSZINHERIT != 0);
        if !allowed {
            fixed(
                format!("extent size {} without an extent size flag", ino.extsize),
                offset_of!(di::Dinode, di_extsize),
                4,
                0xffff_ffff,
                0,
            );
        } else if ino.extsize > MAX_EXTLEN || ino.extsize > geo.ag_blocks / 2 {
            bad(format!("extent size {} blocks is too large", ino.extsize));
        }
    }
    // A zoned group's rmap btree inode keeps its count of used blocks in
    // the CoW extent size field (xfs_repair leaves it alone).
    let zoned_rmap = geo.zoned
        && ino.format == crate::inode::ForkFormat::MetaBtree
        && d.di_onlink.get() == di::XFS_METAFILE_RTRMAP;
    if ino.cowextsize != 0 && !zoned_rmap {
        if !(cow_flag && (is_reg || is_dir)) {
            fixed(
                format!(
                    "CoW extent size {} without the CoW extent size flag",
                    ino.cowextsize
                ),
                offset_of!(di::Dinode, di_cowextsize),
                4,
                0xffff_ffff,
                0,
            );
        } else if ino.cowextsize > MAX_EXTLEN || ino.cowextsize > geo.ag_blocks / 2 {
            bad(format!(
                "CoW extent size {} blocks is too large",
                ino.cowextsize
            ));
        }
    }

    // Size against type and format.
    let lit = raw.len().saturating_sub(geo.layout().dinode_core);
    let dsize = if ino.forkoff != 0 {
        usize::from(ino.forkoff) * 8
    } else {
        lit
    };
    if is_dir {
        if ino.size <= dsize as u64 && ino.format != ForkFormat::Local {
            dir_bad(format!(
                "directory of {} bytes in {:?} format fits in the inode",
                ino.size, ino.format
            ));
        }
        if ino.size > DIR_LEAF_OFFSET && (ino.size as i64) >= 0 {
            dir_bad(format!(
                "directory size {} is past the data section",
                ino.size
            ));
        }
    }
    if (is_dir || t == FileType::Symlink) && ino.size == 0 {
        dir_bad(format!("{t:?} of size 0"));
    }
    if t == FileType::Symlink && ino.size > MAX_PATH {
        bad(format!(
            "symlink of {} bytes is longer than a path",
            ino.size
        ));
    }
    if ino.format == ForkFormat::Local && ino.size > dsize as u64 && (ino.size as i64) >= 0 {
        dir_bad(format!(
            "inline data of {} bytes does not fit the {dsize}-byte data fork",
            ino.size
        ));
    }
    if special {
        if ino.size != 0 {
            bad(format!("{t:?} has size {}", ino.size));
        }
        if ino.nblocks != 0 {
            bad(format!("{t:?} has {} blocks", ino.nblocks));
        }
    }

    // Fork offset and attr fork format.
    if ino.forkoff != 0 {
        let ok = match ino.format {
            ForkFormat::Dev => ino.forkoff == 1,
            _ => usize::from(ino.forkoff) < lit / 8,
        };
        if !ok {
            bad(format!(
                "attr fork offset {} for a {:?} data fork",
                ino.forkoff, ino.format
            ));
        }
    } else {
        let aformat = d.di_aformat;
        if aformat != 2 {
            fixed(
                format!("attr fork format {aformat} without an attr fork"),
                offset_of!(di::Dinode, di_aformat),
                1,
                0xff,
                2,
            );
        }
        if ino.anextents != 0 {
            fixed(
                format!("{} attr extents without an attr fork", ino.anextents),
                anext_at,
                anext_w,
                u64::MAX,
                0,
            );
        }
    }

    // Extent counts.
    if matches!(ino.format, ForkFormat::Local | ForkFormat::Dev) && ino.nextents != 0 {
        fixed(
            format!("{} data extents in a {:?} fork", ino.nextents, ino.format),
            next_at,
            next_w,
            u64::MAX,
            0,
        );
    }
    if ino.forkoff != 0 && ino.aformat == ForkFormat::Local && ino.anextents != 0 {
        fixed(
            format!("{} attr extents in a local attr fork", ino.anextents),
            anext_at,
            anext_w,
            u64::MAX,
            0,
        );
    }
    if ino.nblocks < ino.nextents.saturating_add(u64::from(ino.anextents)) {
        bad(format!(
            "{} blocks for {} data and {} attr extents",
            ino.nblocks, ino.nextents, ino.anextents
        ));
    }
    let fit = |bytes: usize| (bytes / 16) as u64;
    if ino.format == ForkFormat::Btree && ino.nextents <= fit(dsize) {
        bad(format!(
            "btree data fork with {} extents, which fit in the inode",
            ino.nextents
        ));
    }

    // A linked inode is on no unlinked list.
    if ino.next_unlinked != u32::MAX && ino.nlink > 0 {
        bad(format!(
            "next unlinked {} on an inode with {} links",
            ino.next_unlinked, ino.nlink
        ));
    }
}

/// Why an inode that carries the metadata flag may not be metadata, by the
/// rules the kernel's inode verifier and xfs_repair apply to a metadata
/// file: only on metadir filesystems, a known metadata type, a directory or
/// regular file without access bits, owned by user and group 0, with the
/// flags every metadata file (or directory) carries, and no DAX.
fn metadata_problem(metadir: bool, d: &di::Dinode) -> Option<String> {
    if !metadir {
        return Some("the filesystem has no metadata directory tree".into());
    }
    let metatype = d.di_onlink.get();
    if metatype == di::XFS_METAFILE_UNKNOWN || metatype >= di::XFS_METAFILE_MAX {
        return Some(format!("unknown metadata type {metatype}"));
    }
    let mode = d.di_mode.get();
    let fmt = mode & 0o170000;
    if fmt != 0o040000 && fmt != 0o100000 {
        return Some(format!("mode {mode:#o} is neither a directory nor a file"));
    }
    if (fmt == 0o040000) != (metatype == di::XFS_METAFILE_DIR) {
        return Some(format!(
            "metadata type {metatype} does not fit mode {mode:#o}"
        ));
    }
    if mode & 0o777 != 0 {
        return Some(format!("mode {mode:#o} has access bits"));
    }
    if d.di_dmevmask.get() != 0 || d.di_dmstate.get() != 0 {
        return Some("DMAPI fields are not zero".into());
    }
    if d.di_uid.get() != 0 || d.di_gid.get() != 0 {
        return Some(format!(
            "owned by uid {} gid {}",
            d.di_uid.get(),
            d.di_gid.get()
        ));
    }
    let need = if fmt == 0o040000 {
        di::XFS_METADIR_DIFLAGS
    } else {
        di::XFS_METAFILE_DIFLAGS
    };
    let flags = d.di_flags.get();
    if flags & need != need {
        return Some(format!(
            "flags {flags:#x} lack the metadata flags {:#x}",
            need & !flags
        ));
    }
    if d.di_flags2.get() & di::XFS_DIFLAG2_DAX != 0 {
        return Some("DAX flag".into());
    }
    None
}

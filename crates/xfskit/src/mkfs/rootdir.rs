//! The first inode chunk of a fresh filesystem: the root directory (empty,
//! short form), the realtime bitmap and summary inodes (empty regular files),
//! and every other slot of the chunk as a valid free inode.

use xfs_format::attr::{XFS_ATTR_PARENT, XFS_ATTR_ROOT};
use xfs_format::btree::XFS_RMAP_OWN_FS;
use xfs_format::crc::stamp;
use xfs_format::inode::{Dinode, XFS_DINODE_CRC_OFF, XFS_DINODE_MAGIC, XFS_DINODE_VERSION_3};
use xfs_format::inode::{
    XFS_DIFLAG2_BIGTIME, XFS_DIFLAG2_METADATA, XFS_DIFLAG2_NREXT64, XFS_DIFLAG_NEWRTBM,
    XFS_METADIR_DIFLAGS, XFS_METAFILE_DIFLAGS, XFS_METAFILE_DIR, XFS_METAFILE_RTBITMAP,
    XFS_METAFILE_RTREFCOUNT, XFS_METAFILE_RTRMAP, XFS_METAFILE_RTSUMMARY,
};
use xfs_format::types::{
    encode_timestamp, BmbtIrec, Uuid, NULLAGINO, XFS_DINODE_FMT_EXTENTS, XFS_DINODE_FMT_LOCAL,
};
use zerocopy::{FromZeros, IntoBytes};

use super::features::AUTOFSCK_NAME;
use super::geometry::MkfsGeometry;
use super::rtgroups::{RgFile, RgFileKind};
use xfs_format::types::{S_IFDIR, S_IFREG};

const IN_BIGTIME: u32 = 8;
const IN_NREXT64: u32 = 0x20;

/// A point in time: seconds since the Unix epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 UTC.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

fn free_inode(ino: u64, uuid: &Uuid) -> Dinode {
    let mut d = Dinode::new_zeroed();
    d.di_magic.set(XFS_DINODE_MAGIC);
    d.di_version = XFS_DINODE_VERSION_3;
    d.di_next_unlinked.set(NULLAGINO);
    d.di_ino.set(ino);
    d.di_uuid = *uuid;
    d
}

/// An in-use inode as mkfs creates it: owned by root, changed twice
/// (creation and the first log), atime at the epoch, other times `now`.
fn new_inode(
    g: &MkfsGeometry,
    ino: u64,
    mode: u16,
    nlink: u32,
    now: Timestamp,
    uuid: &Uuid,
) -> Dinode {
    let bigtime = g.features.incompat & IN_BIGTIME != 0;
    let mut d = free_inode(ino, uuid);
    d.di_mode.set(mode);
    d.di_nlink.set(nlink);
    d.di_atime.set(encode_timestamp(0, 0, bigtime));
    let t = encode_timestamp(now.secs, now.nsec, bigtime);
    d.di_mtime.set(t);
    d.di_ctime.set(t);
    d.di_crtime.set(t);
    d.di_aformat = XFS_DINODE_FMT_EXTENTS;
    d.di_changecount.set(2);
    let mut flags2 = 0;
    if bigtime {
        flags2 |= XFS_DIFLAG2_BIGTIME;
    }
    if g.features.incompat & IN_NREXT64 != 0 {
        flags2 |= XFS_DIFLAG2_NREXT64;
    }
    d.di_flags2.set(flags2);
    d
}

/// A directory of the metadata tree: no permissions, the flags the kernel
/// gives every metadata directory, its metadata file type in di_onlink.
fn metadir_dir(g: &MkfsGeometry, ino: u64, nlink: u32, now: Timestamp, uuid: &Uuid) -> Dinode {
    let mut d = new_inode(g, ino, S_IFDIR, nlink, now, uuid);
    d.di_format = XFS_DINODE_FMT_LOCAL;
    d.di_onlink.set(XFS_METAFILE_DIR);
    d.di_flags.set(XFS_METADIR_DIFLAGS);
    d.di_flags2.set(d.di_flags2.get() | XFS_DIFLAG2_METADATA);
    d
}

/// Write a short-form directory of `entries` (name, inode, file type) with
/// parent `parent` into the data fork of `slot`; returns its size.
fn short_dir(slot: &mut [u8], parent: u64, entries: &[(&[u8], u64, u8)]) -> u64 {
    // i8count counts the inode numbers (parent included) past 32 bits; any
    // makes every number in the directory 8 bytes.
    let big = |v: u64| v > u64::from(u32::MAX);
    let i8count = usize::from(big(parent)) + entries.iter().filter(|e| big(e.1)).count();
    let wide = i8count > 0;
    let isz = if wide { 8 } else { 4 };
    let fork = &mut slot[xfs_format::inode::LITERAL_OFFSET..];
    fork[0] = entries.len() as u8;
    fork[1] = i8count as u8;
    let put = |b: &mut [u8], v: u64| {
        if wide {
            b[..8].copy_from_slice(&v.to_be_bytes());
        } else {
            b[..4].copy_from_slice(&(v as u32).to_be_bytes());
        }
    };
    put(&mut fork[2..], parent);
    let mut pos = 2 + isz;
    // Offsets as in a block directory: after the header and "." and "..".
    let mut offset = 0x60u16;
    for (name, ino, ftype) in entries {
        fork[pos] = name.len() as u8;
        fork[pos + 1..pos + 3].copy_from_slice(&offset.to_be_bytes());
        fork[pos + 3..pos + 3 + name.len()].copy_from_slice(name);
        fork[pos + 3 + name.len()] = *ftype;
        put(&mut fork[pos + 4 + name.len()..], *ino);
        pos += 4 + name.len() + isz;
        offset += ((8 + 1 + name.len() + 1 + 2 + 7) & !7) as u16;
    }
    pos as u64
}

const FT_DIR: u8 = 2;
const FT_REG: u8 = 1;

/// A realtime group's metadata file: a regular file of the metadata tree,
/// its blocks mapped (bitmap, summary) or an empty btree rooted in the
/// inode (rmap, refcount; group 0's rmap holds the realtime superblock).
fn rtgroup_file(
    g: &MkfsGeometry,
    f: &RgFile,
    slot: &mut [u8],
    agno: u32,
    now: Timestamp,
    uuid: &Uuid,
) -> Dinode {
    let mut d = new_inode(g, f.ino, S_IFREG, 1, now, uuid);
    d.di_flags.set(XFS_METAFILE_DIFLAGS);
    d.di_flags2.set(d.di_flags2.get() | XFS_DIFLAG2_METADATA);
    let metatype = match f.kind {
        RgFileKind::Bitmap => XFS_METAFILE_RTBITMAP,
        RgFileKind::Summary => XFS_METAFILE_RTSUMMARY,
        RgFileKind::Rmap => XFS_METAFILE_RTRMAP,
        RgFileKind::Refcount => XFS_METAFILE_RTREFCOUNT,
    };
    d.di_onlink.set(metatype);
    // A group's files carry its number as their project id.
    d.di_projid_lo.set(f.rgno as u16);
    d.di_projid_hi.set((f.rgno >> 16) as u16);
    match f.kind {
        RgFileKind::Bitmap | RgFileKind::Summary => {
            d.di_format = XFS_DINODE_FMT_EXTENTS;
            d.di_changecount.set(3);
            map_blocks(g, &mut d, slot, agno, &f.extents);
        }
        RgFileKind::Rmap | RgFileKind::Refcount => {
            d.di_format = XFS_DINODE_FMT_META_BTREE;
            let fork = &mut slot[xfs_format::inode::LITERAL_OFFSET..];
            // Root header: level 0, then the record count and records.
            fork[..4].fill(0);
            if f.kind == RgFileKind::Rmap && f.rgno == 0 {
                // The realtime superblock's extent, owned by the filesystem;
                // the record's insertion logs the inode once more.
                d.di_changecount.set(3);
                fork[2..4].copy_from_slice(&1u16.to_be_bytes());
                let mut rec = [0u8; 24];
                rec[4..8].copy_from_slice(&g.rextsize.to_be_bytes());
                rec[8..16].copy_from_slice(&XFS_RMAP_OWN_FS.to_be_bytes());
                fork[4..28].copy_from_slice(&rec);
            }
        }
    }
    d
}

/// Give a realtime metadata file the AG 0 blocks `extents` (in file
/// order) as extent records, its size and block count.
fn map_blocks(
    g: &MkfsGeometry,
    d: &mut Dinode,
    slot: &mut [u8],
    agno: u32,
    extents: &[(u32, u32)],
) {
    let mut off = 0u64;
    let ag = u64::from(agno) << g.agblklog;
    let fork = &mut slot[xfs_format::inode::LITERAL_OFFSET..];
    for (i, &(start, len)) in extents.iter().enumerate() {
        let rec = BmbtIrec {
            startoff: off,
            startblock: ag | u64::from(start),
            blockcount: u64::from(len),
            unwritten: false,
        };
        let (l0, l1) = rec.pack();
        fork[i * 16..i * 16 + 8].copy_from_slice(&l0.to_be_bytes());
        fork[i * 16 + 8..i * 16 + 16].copy_from_slice(&l1.to_be_bytes());
        off += u64::from(len);
    }
    d.di_size.set(off << g.blocklog);
    d.di_nblocks.set(off);
    d.set_nextents(extents.len() as u64);
}
const IN_PARENT: u32 = 0x80;
/// Data fork format of a btree rooted in a metadata inode.
const XFS_DINODE_FMT_META_BTREE: u8 = 5;
/// The attribute fork offset (in 8-byte units) the kernel gives a new inode
/// of 512 bytes or more: past a data fork btree root of 12 pointers.
const PPTR_FORKOFF: u8 = 24;

/// Write a short-form attribute fork of one entry after the data fork.
fn short_attr(slot: &mut [u8], name: &[u8], value: &[u8], flags: u8) {
    short_attr_at(slot, PPTR_FORKOFF, name, value, flags);
}

/// Bytes of a short-form attribute fork holding one entry.
fn short_attr_size(name: &[u8], value: &[u8]) -> usize {
    4 + 3 + name.len() + value.len()
}

/// The attribute fork offset (in 8-byte units) the kernel's short-form
/// fit gives a first attribute of `bytes` bytes on an inode whose data
/// fork is local: as far back as the attribute allows, but leaving room
/// for an attribute btree root of two pointers.
fn first_attr_forkoff(inodesize: u16, bytes: usize) -> u8 {
    let litino = usize::from(inodesize) - xfs_format::inode::LITERAL_OFFSET;
    // xfs_bmdr_block header (4 bytes) and two keys and pointers.
    let max = (litino - (4 + 2 * 16)) >> 3;
    (litino.saturating_sub(bytes) >> 3).min(max) as u8
}

/// Write a short-form attribute fork of one entry at fork offset `forkoff`.
fn short_attr_at(slot: &mut [u8], forkoff: u8, name: &[u8], value: &[u8], flags: u8) {
    let off = xfs_format::inode::LITERAL_OFFSET + usize::from(forkoff) * 8;
    let a = &mut slot[off..];
    let total = short_attr_size(name, value);
    a[..2].copy_from_slice(&(total as u16).to_be_bytes());
    a[2] = 1;
    a[3] = 0;
    a[4] = name.len() as u8;
    a[5] = value.len() as u8;
    a[6] = flags;
    a[7..7 + name.len()].copy_from_slice(name);
    a[7 + name.len()..total].copy_from_slice(value);
}

/// Build the whole first inode chunk (`ialloc_blocks` blocks) of AG 0.
pub(crate) fn root_chunk(g: &MkfsGeometry, uuid: &Uuid, now: Timestamp) -> Vec<u8> {
    let isize = usize::from(g.inodesize);
    let count = g.chunk_inodes() as usize;
    let mut buf = vec![0u8; g.ialloc_blocks as usize * g.blocksize as usize];
    for i in 0..count {
        let ino = g.rootino + i as u64;
        let slot = &mut buf[i * isize..(i + 1) * isize];
        let core = if ino == g.rootino {
            let mut d = new_inode(g, ino, S_IFDIR | 0o755, 2, now, uuid);
            d.di_format = XFS_DINODE_FMT_LOCAL;
            d.di_size.set(short_dir(slot, ino, &[]));
            if g.root_atime {
                d.di_atime = d.di_mtime;
            }
            if let Some(policy) = g.autofsck {
                // mkfs.xfs 7.2 sets the attribute in a transaction of its
                // own, which logs the inode twice more.
                let value = policy.value();
                let forkoff =
                    first_attr_forkoff(g.inodesize, short_attr_size(AUTOFSCK_NAME, value));
                d.di_forkoff = forkoff;
                d.di_aformat = XFS_DINODE_FMT_LOCAL;
                d.di_changecount.set(4);
                short_attr_at(slot, forkoff, AUTOFSCK_NAME, value, XFS_ATTR_ROOT);
            }
            d
        } else if let Some(m) = g.metadir.filter(|m| m.metadirino == ino) {
            let mut d = metadir_dir(g, ino, 3, now, uuid);
            d.di_changecount.set(3);
            d.di_size
                .set(short_dir(slot, ino, &[(b"rtgroups", m.rtdir_ino, FT_DIR)]));
            d
        } else if g.metadir.is_none() && ino == g.rbmino {
            let mut d = new_inode(g, ino, S_IFREG, 1, now, uuid);
            d.di_format = XFS_DINODE_FMT_EXTENTS;
            d.di_flags.set(XFS_DIFLAG_NEWRTBM);
            if let Some(rt) = &g.rt {
                // Created, its blocks mapped, then its last free logged.
                d.di_changecount.set(4);
                map_blocks(g, &mut d, slot, 0, &rt.rbm_extents);
            }
            d
        } else if g.metadir.is_none() && ino == g.rsumino {
            let mut d = new_inode(g, ino, S_IFREG, 1, now, uuid);
            d.di_format = XFS_DINODE_FMT_EXTENTS;
            if let Some(rt) = &g.rt {
                d.di_changecount.set(3);
                map_blocks(g, &mut d, slot, 0, &rt.rsum_extents);
            }
            d
        } else {
            free_inode(ino, uuid)
        };
        slot[..xfs_format::inode::XFS_DINODE_SIZE].copy_from_slice(core.as_bytes());
        stamp(slot, XFS_DINODE_CRC_OFF);
    }
    buf
}

/// The inode chunk of the metadata directory's `rtgroups` directory (its
/// first inode; the others free), if the filesystem has a metadata tree.
pub(crate) fn rtdir_chunk(g: &MkfsGeometry, uuid: &Uuid, now: Timestamp) -> Option<Vec<u8>> {
    let m = g.metadir?;
    let isize = usize::from(g.inodesize);
    let mut buf = vec![0u8; g.ialloc_blocks as usize * g.blocksize as usize];
    let files =
        g.rt.as_ref()
            .and_then(|rt| rt.groups.as_ref())
            .map_or(&[][..], |gr| &gr.files[..]);
    let names: Vec<Vec<u8>> = files
        .iter()
        .map(|f| format!("{}.{}", f.rgno, f.kind.suffix()).into_bytes())
        .collect();
    let pptr = g.features.incompat & IN_PARENT != 0;
    for (i, slot) in buf.chunks_exact_mut(isize).enumerate() {
        let ino = m.rtdir_ino + i as u64;
        let core = if let Some(f) = i.checked_sub(1).and_then(|k| files.get(k)) {
            let mut d = rtgroup_file(g, f, slot, m.rtdir_agno, now, uuid);
            if pptr {
                d.di_forkoff = PPTR_FORKOFF;
                d.di_aformat = XFS_DINODE_FMT_LOCAL;
                let mut value = [0u8; 12];
                value[..8].copy_from_slice(&m.rtdir_ino.to_be_bytes());
                short_attr(slot, &names[i - 1], &value, XFS_ATTR_PARENT);
            }
            d
        } else if i == 0 {
            let mut d = metadir_dir(g, ino, 2, now, uuid);
            let entries: Vec<(&[u8], u64, u8)> = files
                .iter()
                .zip(&names)
                .map(|(f, n)| (&n[..], f.ino, FT_REG))
                .collect();
            d.di_changecount.set(2 + entries.len() as u64);
            d.di_size.set(short_dir(slot, m.metadirino, &entries));
            if g.features.incompat & IN_PARENT != 0 {
                // Its parent pointer (the metadata root's generation is 0).
                d.di_forkoff = PPTR_FORKOFF;
                d.di_aformat = XFS_DINODE_FMT_LOCAL;
                let mut value = [0u8; 12];
                value[..8].copy_from_slice(&m.metadirino.to_be_bytes());
                short_attr(slot, b"rtgroups", &value, XFS_ATTR_PARENT);
            }
            d
        } else {
            free_inode(ino, uuid)
        };
        slot[..xfs_format::inode::XFS_DINODE_SIZE].copy_from_slice(core.as_bytes());
        stamp(slot, XFS_DINODE_CRC_OFF);
    }
    Some(buf)
}

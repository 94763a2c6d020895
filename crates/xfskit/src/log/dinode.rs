//! Conversions between what an inode item logs and what the inode holds
//! on disk, both ways: the log inode core (host byte order) and the v3
//! on-disk core (big-endian), and the data/attr fork btree root as it is
//! logged (the in-core long-format block: a 72-byte bmbt block header, the
//! keys, then the pointers) and as the inode fork stores it (the 4-byte
//! bmdr header, then keys and pointers placed after the fork's maximum
//! number of keys).
//!
//! Recovery uses the log -> disk direction; the log writer the other.

use crate::bytes::be16;
use crate::error::{Error, Location, Result};
use xfs_format::btree::{XFS_BMAP_CRC_MAGIC, XFS_BTREE_LBLOCK_CRC_LEN};
use xfs_format::inode::{Dinode, XFS_DIFLAG2_BIGTIME, XFS_DIFLAG2_NREXT64};
use xfs_format::log_item::LogDinode;
use xfs_format::types::Uuid;
use zerocopy::FromZeros;

/// Size of a bmbt key and of a bmbt pointer.
const KEY_LEN: usize = 8;
const PTR_LEN: usize = 8;
/// Size of the on-disk fork root header (`bb_level`, `bb_numrecs`).
const BMDR_HDR: usize = 4;

fn ld_bigtime(ld: &LogDinode) -> bool {
    ld.di_version >= 3 && ld.di_flags2.get() & XFS_DIFLAG2_BIGTIME != 0
}

fn ld_nrext64(ld: &LogDinode) -> bool {
    ld.di_version >= 3 && ld.di_flags2.get() & XFS_DIFLAG2_NREXT64 != 0
}

/// A logged timestamp as the on-disk 64-bit value. Bigtime stamps are the
/// same number; legacy stamps are two 32-bit halves, seconds first in
/// memory (so the low half of the little-endian word), while on disk the
/// seconds are the high half of the big-endian word.
fn ts_log_to_disk(raw: u64, bigtime: bool) -> u64 {
    if bigtime {
        raw
    } else {
        let sec = raw & 0xffff_ffff;
        let nsec = raw >> 32;
        (sec << 32) | nsec
    }
}

/// The inverse of [`ts_log_to_disk`] (the swap is its own inverse).
fn ts_disk_to_log(raw: u64, bigtime: bool) -> u64 {
    ts_log_to_disk(raw, bigtime)
}

/// Checks a log inode core the way recovery does before copying it.
/// `ino` names the inode in the error.
pub fn check_log_dinode(ld: &LogDinode, ino: u64, has_nrext64: bool) -> Result<()> {
    let bad = |d: String| Error::corrupt("logged inode core", Location::Inode(ino), d);
    if ld.di_magic.get() != xfs_format::inode::XFS_DINODE_MAGIC {
        return Err(bad(format!("bad magic {:#x}", ld.di_magic.get())));
    }
    if ld.di_version != 3 {
        return Err(bad(format!("version {} is not 3", ld.di_version)));
    }
    let (next, anext) = if ld_nrext64(ld) {
        if !has_nrext64 || ld.di_anextents.get() != 0 {
            return Err(bad(
                "large extent counters where the filesystem has none".into()
            ));
        }
        (ld.di_big_nextents.get(), u64::from(ld.di_nextents.get()))
    } else {
        if ld.di_big_nextents.get() != 0 {
            return Err(bad(
                "nonzero padding where the large extent count would be".into()
            ));
        }
        (
            u64::from(ld.di_nextents.get()),
            u64::from(ld.di_anextents.get()),
        )
    };
    if next.saturating_add(anext) > ld.di_nblocks.get() {
        return Err(bad(format!(
            "{next} + {anext} extents but only {} blocks",
            ld.di_nblocks.get()
        )));
    }
    Ok(())
}

/// Copies a logged inode core over the on-disk core `to`, stamping `lsn`
/// as the inode's LSN. `di_next_unlinked` keeps its on-disk value and the
/// CRC is left for the caller to compute over the whole inode.
pub fn log_dinode_to_disk(from: &LogDinode, to: &mut Dinode, lsn: u64) {
    let big = ld_bigtime(from);
    to.di_magic.set(from.di_magic.get());
    to.di_mode.set(from.di_mode.get());
    to.di_version = from.di_version;
    to.di_format = from.di_format;
    to.di_onlink.set(from.di_metatype.get());
    to.di_uid.set(from.di_uid.get());
    to.di_gid.set(from.di_gid.get());
    to.di_nlink.set(from.di_nlink.get());
    to.di_projid_lo.set(from.di_projid_lo.get());
    to.di_projid_hi.set(from.di_projid_hi.get());
    to.di_atime.set(ts_log_to_disk(from.di_atime.get(), big));
    to.di_mtime.set(ts_log_to_disk(from.di_mtime.get(), big));
    to.di_ctime.set(ts_log_to_disk(from.di_ctime.get(), big));
    to.di_size.set(from.di_size.get());
    to.di_nblocks.set(from.di_nblocks.get());
    to.di_extsize.set(from.di_extsize.get());
    to.di_forkoff = from.di_forkoff;
    to.di_aformat = from.di_aformat;
    to.di_dmevmask.set(from.di_dmevmask.get());
    to.di_dmstate.set(from.di_dmstate.get());
    to.di_flags.set(from.di_flags.get());
    to.di_gen.set(from.di_gen.get());
    to.di_changecount.set(from.di_changecount.get());
    to.di_crtime.set(ts_log_to_disk(from.di_crtime.get(), big));
    to.di_flags2.set(from.di_flags2.get());
    to.di_cowextsize.set(from.di_cowextsize.get());
    to.di_ino.set(from.di_ino.get());
    to.di_lsn.set(lsn);
    to.di_pad2 = [0; 12];
    to.di_uuid = from.di_uuid;
    // The same bytes serve both counter layouts: copy them all, which
    // is what either layout's field-by-field copy amounts to.
    let big_next = if ld_nrext64(from) {
        from.di_big_nextents.get()
    } else {
        0
    };
    to.di_big_nextents.set(big_next);
    to.di_nextents.set(from.di_nextents.get());
    to.di_anextents.set(from.di_anextents.get());
}

/// The log inode core for an on-disk core, as an inode item logs it.
/// `lsn` goes into `di_lsn` (recovery ignores it; the kernel writes the
/// item's last LSN there).
pub fn disk_to_log_dinode(from: &Dinode, lsn: u64) -> LogDinode {
    let big = from.has_bigtime();
    let mut ld = LogDinode::new_zeroed();
    ld.di_magic.set(from.di_magic.get());
    ld.di_mode.set(from.di_mode.get());
    ld.di_version = from.di_version;
    ld.di_format = from.di_format;
    ld.di_metatype.set(from.di_onlink.get());
    ld.di_uid.set(from.di_uid.get());
    ld.di_gid.set(from.di_gid.get());
    ld.di_nlink.set(from.di_nlink.get());
    ld.di_projid_lo.set(from.di_projid_lo.get());
    ld.di_projid_hi.set(from.di_projid_hi.get());
    ld.di_big_nextents.set(from.di_big_nextents.get());
    ld.di_atime.set(ts_disk_to_log(from.di_atime.get(), big));
    ld.di_mtime.set(ts_disk_to_log(from.di_mtime.get(), big));
    ld.di_ctime.set(ts_disk_to_log(from.di_ctime.get(), big));
    ld.di_size.set(from.di_size.get());
    ld.di_nblocks.set(from.di_nblocks.get());
    ld.di_extsize.set(from.di_extsize.get());
    ld.di_nextents.set(from.di_nextents.get());
    ld.di_anextents.set(from.di_anextents.get());
    ld.di_forkoff = from.di_forkoff;
    ld.di_aformat = from.di_aformat;
    ld.di_dmevmask.set(from.di_dmevmask.get());
    ld.di_dmstate.set(from.di_dmstate.get());
    ld.di_flags.set(from.di_flags.get());
    ld.di_gen.set(from.di_gen.get());
    ld.di_next_unlinked.set(from.di_next_unlinked.get());
    ld.di_changecount.set(from.di_changecount.get());
    ld.di_lsn.set(lsn);
    ld.di_flags2.set(from.di_flags2.get());
    ld.di_cowextsize.set(from.di_cowextsize.get());
    ld.di_crtime.set(ts_disk_to_log(from.di_crtime.get(), big));
    ld.di_ino.set(from.di_ino.get());
    ld.di_uuid = from.di_uuid;
    ld
}

/// Keys that fit in an on-disk fork root of `len` bytes.
fn bmdr_maxrecs(len: usize) -> usize {
    len.saturating_sub(BMDR_HDR) / (KEY_LEN + PTR_LEN)
}

/// Converts a logged btree root (`src`, the whole logged region) into the
/// on-disk root of a fork of `dst.len()` bytes. Bytes of `dst` past the
/// root are zeroed. `ino` names the inode in errors.
pub fn bmbt_root_to_bmdr(src: &[u8], dst: &mut [u8], ino: u64) -> Result<()> {
    let bad = |d: String| Error::corrupt("logged fork btree root", Location::Inode(ino), d);
    let hdr = XFS_BTREE_LBLOCK_CRC_LEN;
    if src.len() < hdr {
        return Err(bad(format!(
            "{} bytes, shorter than a block header",
            src.len()
        )));
    }
    let magic = u32::from_be_bytes([src[0], src[1], src[2], src[3]]);
    if magic != XFS_BMAP_CRC_MAGIC {
        return Err(bad(format!("magic {magic:#x} is not a bmbt block's")));
    }
    let level = be16(src, 4);
    let numrecs = usize::from(be16(src, 6));
    if level == 0 {
        return Err(bad("level 0 root in the inode".into()));
    }
    // Pointers of the logged root follow as many keys as its length holds.
    let src_max = (src.len() - hdr) / (KEY_LEN + PTR_LEN);
    let dst_max = bmdr_maxrecs(dst.len());
    if numrecs > src_max || numrecs > dst_max {
        return Err(bad(format!(
            "{numrecs} records, more than the logged root ({src_max}) or the fork ({dst_max}) holds"
        )));
    }
    dst.fill(0);
    dst[0..2].copy_from_slice(&level.to_be_bytes());
    dst[2..4].copy_from_slice(&(numrecs as u16).to_be_bytes());
    let keys = numrecs * KEY_LEN;
    dst[BMDR_HDR..BMDR_HDR + keys].copy_from_slice(&src[hdr..hdr + keys]);
    let sp = hdr + src_max * KEY_LEN;
    let dp = BMDR_HDR + dst_max * KEY_LEN;
    let ptrs = numrecs * PTR_LEN;
    dst[dp..dp + ptrs].copy_from_slice(&src[sp..sp + ptrs]);
    Ok(())
}

/// The logged form of the on-disk fork root `bmdr` (a fork of
/// `bmdr.len()` bytes) for inode `ino`: a bmbt block header with null
/// siblings and block number, then `numrecs` keys and `numrecs`
/// pointers, `72 + numrecs * 16` bytes in all.
pub fn bmdr_to_bmbt_root(bmdr: &[u8], ino: u64, uuid: &Uuid) -> Result<Vec<u8>> {
    let bad = |d: String| Error::corrupt("inode fork btree root", Location::Inode(ino), d);
    if bmdr.len() < BMDR_HDR {
        return Err(bad("fork too small for a root".into()));
    }
    let level = be16(bmdr, 0);
    let numrecs = usize::from(be16(bmdr, 2));
    let dmax = bmdr_maxrecs(bmdr.len());
    if numrecs > dmax {
        return Err(bad(format!("{numrecs} records but the fork holds {dmax}")));
    }
    let hdr = XFS_BTREE_LBLOCK_CRC_LEN;
    let mut out = vec![0u8; hdr + numrecs * (KEY_LEN + PTR_LEN)];
    out[0..4].copy_from_slice(&XFS_BMAP_CRC_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&level.to_be_bytes());
    out[6..8].copy_from_slice(&(numrecs as u16).to_be_bytes());
    out[8..16].fill(0xff); // left sibling: null
    out[16..24].fill(0xff); // right sibling: null
    out[24..32].fill(0xff); // block number: none (the root lives in the inode)
    out[40..56].copy_from_slice(&uuid.0);
    out[56..64].copy_from_slice(&ino.to_be_bytes());
    let keys = numrecs * KEY_LEN;
    out[hdr..hdr + keys].copy_from_slice(&bmdr[BMDR_HDR..BMDR_HDR + keys]);
    let dp = BMDR_HDR + dmax * KEY_LEN;
    out[hdr + keys..].copy_from_slice(&bmdr[dp..dp + numrecs * PTR_LEN]);
    Ok(out)
}

/// The layout of a metadata btree root (fork format `META_BTREE`) of
/// metadata file type `metatype`: magic, record bytes, node key bytes (a
/// low and a high key in the overlapping rmap btree).
fn meta_tree(metatype: u16) -> Option<(u32, usize, usize)> {
    match metatype {
        xfs_format::inode::XFS_METAFILE_RTRMAP => {
            Some((xfs_format::rtgroup::XFS_RTRMAP_CRC_MAGIC, 24, 40))
        }
        xfs_format::inode::XFS_METAFILE_RTREFCOUNT => {
            Some((xfs_format::rtgroup::XFS_RTREFC_CRC_MAGIC, 12, 4))
        }
        _ => None,
    }
}

/// The logged form of the on-disk metadata btree root `root` (a fork of
/// `root.len()` bytes) of metadata file type `metatype`, inode `ino`: the
/// kernel logs its in-core root, a long btree block header (null
/// siblings and block number) followed by the records of a leaf root, or
/// by the keys and then the pointers of a node root, sized for what it
/// holds.
pub fn meta_root_to_log(root: &[u8], metatype: u16, ino: u64, uuid: &Uuid) -> Result<Vec<u8>> {
    let bad = |d: String| Error::corrupt("metadata btree root", Location::Inode(ino), d);
    let (magic, rec, key) =
        meta_tree(metatype).ok_or_else(|| bad(format!("metadata file type {metatype}")))?;
    if root.len() < BMDR_HDR {
        return Err(bad("fork too small for a root".into()));
    }
    let level = be16(root, 0);
    let n = usize::from(be16(root, 2));
    let hdr = XFS_BTREE_LBLOCK_CRC_LEN;
    let room = root.len() - BMDR_HDR;
    let body = if level == 0 {
        if n > room / rec {
            return Err(bad(format!(
                "{n} records but the fork holds {}",
                room / rec
            )));
        }
        root[BMDR_HDR..BMDR_HDR + n * rec].to_vec()
    } else {
        let max = room / (key + PTR_LEN);
        if n > max {
            return Err(bad(format!("{n} pointers but the fork holds {max}")));
        }
        let mut b = root[BMDR_HDR..BMDR_HDR + n * key].to_vec();
        let p = BMDR_HDR + max * key;
        b.extend_from_slice(&root[p..p + n * PTR_LEN]);
        b
    };
    let mut out = vec![0u8; hdr];
    out[0..4].copy_from_slice(&magic.to_be_bytes());
    out[4..6].copy_from_slice(&level.to_be_bytes());
    out[6..8].copy_from_slice(&(n as u16).to_be_bytes());
    out[8..32].fill(0xff); // siblings and block number: none
    out[40..56].copy_from_slice(&uuid.0);
    out[56..64].copy_from_slice(&ino.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Converts a logged metadata btree root (`src`, see [`meta_root_to_log`])
/// into the on-disk root of a fork of `dst.len()` bytes; the rest of
/// `dst` is zeroed.
pub fn meta_root_to_disk(src: &[u8], dst: &mut [u8], metatype: u16, ino: u64) -> Result<()> {
    let bad = |d: String| Error::corrupt("logged metadata btree root", Location::Inode(ino), d);
    let (_, rec, key) =
        meta_tree(metatype).ok_or_else(|| bad(format!("metadata file type {metatype}")))?;
    let hdr = XFS_BTREE_LBLOCK_CRC_LEN;
    if src.len() < hdr || dst.len() < BMDR_HDR {
        return Err(bad(format!(
            "{} bytes, shorter than a block header",
            src.len()
        )));
    }
    let level = be16(src, 4);
    let n = usize::from(be16(src, 6));
    let room = dst.len() - BMDR_HDR;
    let mut out = vec![0u8; dst.len()];
    out[0..2].copy_from_slice(&level.to_be_bytes());
    out[2..4].copy_from_slice(&(n as u16).to_be_bytes());
    if level == 0 {
        if n * rec > src.len() - hdr || n > room / rec {
            return Err(bad(format!("{n} records do not fit")));
        }
        out[BMDR_HDR..BMDR_HDR + n * rec].copy_from_slice(&src[hdr..hdr + n * rec]);
    } else {
        // Pointers of the logged root follow as many keys as it holds room for.
        let src_max = (src.len() - hdr) / (key + PTR_LEN);
        let max = room / (key + PTR_LEN);
        if n > src_max || n > max {
            return Err(bad(format!(
                "{n} pointers, more than the logged root ({src_max}) or the fork ({max}) holds"
            )));
        }
        out[BMDR_HDR..BMDR_HDR + n * key].copy_from_slice(&src[hdr..hdr + n * key]);
        let sp = hdr + src_max * key;
        let dp = BMDR_HDR + max * key;
        out[dp..dp + n * PTR_LEN].copy_from_slice(&src[sp..sp + n * PTR_LEN]);
    }
    dst.copy_from_slice(&out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfs_format::inode::XFS_DINODE_MAGIC;
    use zerocopy::IntoBytes;

    fn sample(flags2: u64) -> Dinode {
        let mut d = Dinode::new_zeroed();
        d.di_magic.set(XFS_DINODE_MAGIC);
        d.di_mode.set(0o100644);
        d.di_version = 3;
        d.di_format = 2;
        d.di_uid.set(1000);
        d.di_gid.set(100);
        d.di_nlink.set(2);
        d.di_projid_lo.set(7);
        d.di_atime.set(0x1234_5678_0000_0009);
        d.di_mtime.set(0x0000_0001_0000_0002);
        d.di_ctime.set(42);
        d.di_crtime.set(0xdead_beef_1000_0001);
        d.di_size.set(1 << 40);
        d.di_nblocks.set(100);
        d.di_nextents.set(3);
        d.di_anextents.set(1);
        d.di_forkoff = 15;
        d.di_aformat = 1;
        d.di_flags.set(0x8000);
        d.di_gen.set(77);
        d.di_next_unlinked.set(u32::MAX);
        d.di_changecount.set(9);
        d.di_lsn.set(0x5_0000_0010);
        d.di_flags2.set(flags2);
        d.di_cowextsize.set(32);
        d.di_ino.set(131);
        d.di_uuid = Uuid([3; 16]);
        d
    }

    #[test]
    fn core_round_trip_legacy_and_bigtime() {
        for flags2 in [0, XFS_DIFLAG2_BIGTIME] {
            let d = sample(flags2);
            let ld = disk_to_log_dinode(&d, 0x5_0000_0010);
            let mut back = Dinode::new_zeroed();
            back.di_next_unlinked.set(u32::MAX);
            log_dinode_to_disk(&ld, &mut back, 0x5_0000_0010);
            assert_eq!(back.as_bytes(), d.as_bytes(), "flags2 {flags2}");
            check_log_dinode(&ld, 131, false).unwrap();
        }
    }

    #[test]
    fn legacy_timestamp_halves() {
        let d = sample(0);
        let ld = disk_to_log_dinode(&d, 0);
        // Seconds first in memory: the low half of the little-endian word.
        assert_eq!(&ld.as_bytes()[32..36], &0x1234_5678u32.to_le_bytes());
        assert_eq!(&ld.as_bytes()[36..40], &9u32.to_le_bytes());
    }

    #[test]
    fn nrext64_counters() {
        let mut d = sample(XFS_DIFLAG2_NREXT64);
        d.di_big_nextents.set(5);
        d.di_nextents.set(2); // attr fork count
        d.di_anextents.set(0);
        let ld = disk_to_log_dinode(&d, 0);
        assert!(check_log_dinode(&ld, 131, false).is_err());
        check_log_dinode(&ld, 131, true).unwrap();
        let mut back = Dinode::new_zeroed();
        back.di_next_unlinked.set(u32::MAX);
        log_dinode_to_disk(&ld, &mut back, 0x5_0000_0010);
        assert_eq!(back.nextents(), 5);
        assert_eq!(back.anextents(), 2);
    }

    #[test]
    fn rtrmap_root_round_trip() {
        use xfs_format::inode::XFS_METAFILE_RTRMAP;
        let uuid = Uuid([7; 16]);
        // A leaf root of 2 records in a 336-byte fork (room for 13).
        let mut leaf = vec![0u8; 336];
        leaf[2..4].copy_from_slice(&2u16.to_be_bytes());
        for (i, b) in leaf[4..52].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let logged = meta_root_to_log(&leaf, XFS_METAFILE_RTRMAP, 131, &uuid).unwrap();
        assert_eq!(logged.len(), 72 + 48);
        assert_eq!(&logged[0..4], b"MAPR");
        assert_eq!(&logged[56..64], &131u64.to_be_bytes());
        assert_eq!(&logged[72..], &leaf[4..52]);
        let mut back = vec![0xaau8; 336];
        meta_root_to_disk(&logged, &mut back, XFS_METAFILE_RTRMAP, 131).unwrap();
        assert_eq!(back, leaf);
        // A node root of 2 entries: 40-byte key pairs, pointers after the
        // fork's room of 6 pairs.
        let mut node = vec![0u8; 336];
        node[0..2].copy_from_slice(&1u16.to_be_bytes());
        node[2..4].copy_from_slice(&2u16.to_be_bytes());
        node[4..84].fill(3);
        let p = 4 + 6 * 40;
        node[p..p + 8].copy_from_slice(&900u64.to_be_bytes());
        node[p + 8..p + 16].copy_from_slice(&901u64.to_be_bytes());
        let logged = meta_root_to_log(&node, XFS_METAFILE_RTRMAP, 131, &uuid).unwrap();
        assert_eq!(logged.len(), 72 + 2 * 48);
        assert_eq!(&logged[152..160], &900u64.to_be_bytes());
        let mut back = vec![0x55u8; 336];
        meta_root_to_disk(&logged, &mut back, XFS_METAFILE_RTRMAP, 131).unwrap();
        assert_eq!(back, node);
        // Another metadata type, or more entries than the fork holds.
        assert!(meta_root_to_log(&node, 99, 131, &uuid).is_err());
        let mut small = vec![0u8; 60];
        assert!(meta_root_to_disk(&logged, &mut small, XFS_METAFILE_RTRMAP, 131).is_err());
    }

    #[test]
    fn broot_round_trip() {
        // A 2-record root in a 72-byte data fork (maxrecs 4).
        let mut bmdr = vec![0u8; 72];
        bmdr[0..2].copy_from_slice(&1u16.to_be_bytes());
        bmdr[2..4].copy_from_slice(&2u16.to_be_bytes());
        bmdr[4..12].copy_from_slice(&0u64.to_be_bytes());
        bmdr[12..20].copy_from_slice(&100u64.to_be_bytes());
        bmdr[36..44].copy_from_slice(&5000u64.to_be_bytes());
        bmdr[44..52].copy_from_slice(&6000u64.to_be_bytes());
        let uuid = Uuid([9; 16]);
        let logged = bmdr_to_bmbt_root(&bmdr, 131, &uuid).unwrap();
        assert_eq!(logged.len(), 72 + 32);
        assert_eq!(&logged[72..80], &0u64.to_be_bytes());
        assert_eq!(&logged[88..96], &5000u64.to_be_bytes());
        let mut back = vec![0xaau8; 72];
        bmbt_root_to_bmdr(&logged, &mut back, 131).unwrap();
        assert_eq!(back, bmdr);
        // Too many records for a smaller fork.
        let mut small = vec![0u8; 20];
        assert!(bmbt_root_to_bmdr(&logged, &mut small, 131).is_err());
        assert!(bmbt_root_to_bmdr(&logged[..40], &mut back, 131).is_err());
    }
}

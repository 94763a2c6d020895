//! Decoding a raw on-disk inode straight into a [`Bstat`], without building
//! an [`Inode`](crate::inode::Inode) (which copies both forks to the heap).
//!
//! The checks are the same as [`decode_checked`](crate::inode::decode_checked)
//! makes, in the same order, so that a scan accepts and rejects exactly the
//! inodes the rest of the engine does; a test below holds the two together.

use super::bstat::{reported_rdev, xflags, Bstat, DEV_BLKSIZE};
use crate::error::{Error, Location, Result};
use crate::geometry::Geometry;
use crate::inode::FileType;
#[cfg(test)]
use crate::inode::{CORE_SIZE, INODE_CRC_OFF};
use xfs_format::inode as di;
use xfs_format::types::decode_timestamp;

/// Data fork formats (`XFS_DINODE_FMT_*`).
const FMT_DEV: u8 = 0;
const FMT_LOCAL: u8 = 1;
const FMT_BTREE: u8 = 3;
/// A metadata btree rooted in the inode (realtime rmap and refcount).
const FMT_META_BTREE: u8 = 5;

/// Checks the CRC and the core of raw inode `ino` (inode-size bytes) and
/// returns its bulkstat record.
pub(crate) fn decode_bstat(geo: &Geometry, ino: u64, raw: &[u8]) -> Result<Bstat> {
    if !crate::inode::crc_ok(geo, raw) {
        return Err(Error::BadCrc {
            what: "inode",
            location: Location::Inode(ino),
        });
    }
    let corrupt = |d: String| Error::corrupt("inode", Location::Inode(ino), d);
    let d = &*crate::inode::core_of(geo, ino, raw)?;
    let crate::inode::CoreFacts {
        file_type: ftype,
        mode,
        flags2,
        bigtime,
        nextents: extents,
        anextents: aextents,
    } = crate::inode::check_core(geo, ino, d)?;
    let format = d.di_format;
    let meta_btree = format == FMT_META_BTREE
        && flags2 & di::XFS_DIFLAG2_METADATA != 0
        && matches!(
            d.di_onlink.get(),
            di::XFS_METAFILE_RTRMAP | di::XFS_METAFILE_RTREFCOUNT
        );
    if format > FMT_BTREE && !meta_btree {
        return Err(corrupt(format!("unknown data fork format {format}")));
    }
    let forkoff = d.di_forkoff;
    if forkoff != 0 && d.di_aformat > FMT_BTREE {
        return Err(corrupt(format!(
            "unknown attr fork format {}",
            d.di_aformat
        )));
    }
    let core = geo.layout().dinode_core;
    let lit = raw.len() - core;
    let data_len = if forkoff != 0 {
        usize::from(forkoff) * 8
    } else {
        lit
    };
    if data_len > lit {
        return Err(corrupt(format!(
            "attr fork offset {forkoff} is past the end of the inode"
        )));
    }
    let device = matches!(
        ftype,
        FileType::CharDev | FileType::BlockDev | FileType::Fifo | FileType::Socket
    );
    let format_ok = match format {
        FMT_DEV => device,
        FMT_LOCAL => matches!(ftype, FileType::Dir | FileType::Symlink),
        FMT_META_BTREE => ftype == FileType::File,
        _ => matches!(ftype, FileType::File | FileType::Dir | FileType::Symlink),
    };
    if !format_ok {
        let name = ["Dev", "Local", "Extents", "Btree", "", "MetaBtree"][usize::from(format)];
        return Err(corrupt(format!(
            "data fork format {name} is invalid for a {ftype:?}"
        )));
    }
    let (rdev, blksize, blocks) = match format {
        FMT_DEV => {
            let disk = match raw.get(core..core + 4) {
                Some(b) if data_len >= 4 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                _ => 0,
            };
            (reported_rdev(disk), DEV_BLKSIZE, 0)
        }
        FMT_LOCAL => (0, geo.block_size, 0),
        _ => (0, geo.block_size, d.di_nblocks.get()),
    };
    let cowextsize_blks = if flags2 & di::XFS_DIFLAG2_COWEXTSIZE != 0 {
        d.di_cowextsize.get()
    } else {
        0
    };
    let nanos = |raw: u64| {
        let (s, ns) = decode_timestamp(raw, bigtime);
        i128::from(s) * 1_000_000_000 + i128::from(ns)
    };
    Ok(Bstat {
        ino,
        mode,
        nlink: d.di_nlink.get(),
        uid: d.di_uid.get(),
        gid: d.di_gid.get(),
        rdev,
        blksize,
        size: d.di_size.get(),
        blocks,
        xflags: xflags(d.di_flags.get(), flags2, forkoff != 0),
        extents,
        aextents,
        forkoff: u32::from(forkoff) << 3,
        gen: d.di_gen.get(),
        projectid: u32::from(d.di_projid_lo.get()) | (u32::from(d.di_projid_hi.get()) << 16),
        extsize_blks: d.di_extsize.get(),
        cowextsize_blks,
        atime: nanos(d.di_atime.get()),
        mtime: nanos(d.di_mtime.get()),
        ctime: nanos(d.di_ctime.get()),
        btime: nanos(d.di_crtime.get()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::fs::{Fs, OpenOptions};
    use crate::inode::Inode;
    use crate::mkfs::{mkfs_device, parse_mkfs_args, WriteOptions};

    /// A fresh in-memory filesystem and the raw bytes of its root inode.
    fn root_inode() -> (Fs, Vec<u8>) {
        let dev = MemDevice::new(320 << 20);
        let o = parse_mkfs_args(&[]).expect("default options");
        let w = WriteOptions {
            timestamp: None,
            progress: None,
        };
        mkfs_device(&dev, &o, &w).expect("mkfs");
        let fs = Fs::from_device(Box::new(dev), &OpenOptions::default()).expect("open");
        let geo = fs.geometry();
        let mut raw = vec![0u8; geo.inode_size as usize];
        fs.read_bytes(geo.ino_to_bytes(geo.root_ino), &mut raw)
            .expect("read root inode");
        (fs, raw)
    }

    /// The reference path: full decode, then the record.
    fn reference(fs: &Fs, ino: u64, raw: &[u8]) -> Result<Bstat> {
        if !xfs_format::crc::verify(raw, INODE_CRC_OFF) {
            return Err(Error::BadCrc {
                what: "inode",
                location: Location::Inode(ino),
            });
        }
        let ip = Inode::decode(fs.geometry(), crate::geometry::Ino(ino), raw)?;
        Ok(Bstat::from_inode(fs.geometry(), &ip))
    }

    #[test]
    fn same_as_full_decode_under_mutation() {
        let (fs, root) = root_inode();
        let geo = fs.geometry();
        let ino = geo.root_ino.0;
        let ok = decode_bstat(geo, ino, &root).expect("root decodes");
        assert_eq!(ok, reference(&fs, ino, &root).expect("reference"));
        // Deterministic pseudo-random single and double byte changes over
        // the core and the start of the literal area, CRC fixed up.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut step = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut oks, mut errs) = (0, 0);
        for round in 0..20_000 {
            let mut raw = root.clone();
            for _ in 0..1 + round % 2 {
                let r = step();
                let at = (r % (CORE_SIZE as u64 + 16)) as usize;
                raw[at] = match (r >> 32) % 4 {
                    0 => 0,
                    1 => 0xff,
                    _ => (r >> 40) as u8,
                };
            }
            if round % 7 != 0 {
                xfs_format::crc::stamp(&mut raw, INODE_CRC_OFF);
            }
            let a = decode_bstat(geo, ino, &raw);
            let b = reference(&fs, ino, &raw);
            match (&a, &b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "round {round}");
                    oks += 1;
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string(), "round {round}");
                    errs += 1;
                }
                _ => panic!("round {round}: scan decode {a:?}, full decode {b:?}"),
            }
        }
        assert!(oks > 1000 && errs > 1000, "{oks} accepted, {errs} rejected");
    }
}

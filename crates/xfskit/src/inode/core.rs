//! Decoded inode core: the fields of `xfs_dinode` as native values.

use crate::error::{Error, Location, Result};
use crate::geometry::{Geometry, Ino};
use std::borrow::Cow;
use xfs_format::inode::{self as di, Dinode};
use xfs_format::types::{decode_timestamp, encode_timestamp, Uuid};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// A point in time: seconds since the Unix epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 UTC (negative before it).
    pub sec: i64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

impl Timestamp {
    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> i128 {
        i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec)
    }
}

/// The format of a data or attribute fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkFormat {
    /// Device number (data fork of device inodes).
    Dev,
    /// Contents stored inline in the inode.
    Local,
    /// An array of extent records in the inode.
    Extents,
    /// A bmbt btree rooted in the inode.
    Btree,
    /// A metadata btree rooted in the inode (`XFS_DINODE_FMT_META_BTREE`):
    /// the realtime rmap and refcount btrees of a realtime group, in
    /// metadata files only. It maps no file data.
    MetaBtree,
}

impl ForkFormat {
    fn from_raw(v: u8, ino: Ino, which: &str) -> Result<ForkFormat> {
        Ok(match v {
            0 => ForkFormat::Dev,
            1 => ForkFormat::Local,
            2 => ForkFormat::Extents,
            3 => ForkFormat::Btree,
            5 if which == "data" => ForkFormat::MetaBtree,
            _ => {
                return Err(Error::corrupt(
                    "inode",
                    Location::Inode(ino.0),
                    format!("unknown {which} fork format {v}"),
                ))
            }
        })
    }
}

/// The type of a file, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

impl FileType {
    /// The type encoded in the `S_IFMT` bits of `mode`.
    pub fn from_mode(mode: u16) -> Option<FileType> {
        Some(match u32::from(mode) & libc::S_IFMT {
            libc::S_IFREG => FileType::File,
            libc::S_IFDIR => FileType::Dir,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDev,
            libc::S_IFBLK => FileType::BlockDev,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The directory-entry file type code (XFS_DIR3_FT_*).
    pub fn dirent_code(self) -> u8 {
        match self {
            FileType::File => 1,
            FileType::Dir => 2,
            FileType::CharDev => 3,
            FileType::BlockDev => 4,
            FileType::Fifo => 5,
            FileType::Socket => 6,
            FileType::Symlink => 7,
        }
    }
}

/// A decoded, checked inode with its fork bytes.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Inode number.
    pub ino: Ino,
    /// Type and permission bits.
    pub mode: u16,
    /// File type from `mode`.
    pub file_type: FileType,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Project id.
    pub projid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Blocks used by both forks, btree blocks included.
    pub nblocks: u64,
    /// Extent size hint in blocks.
    pub extsize: u32,
    /// CoW extent size hint in blocks.
    pub cowextsize: u32,
    /// Data fork extent count.
    pub nextents: u64,
    /// Attr fork extent count.
    pub anextents: u32,
    /// Attr fork offset in 8-byte units from the literal area (0: no attr fork).
    pub forkoff: u8,
    /// Data fork format.
    pub format: ForkFormat,
    /// Attr fork format (meaningful only when `forkoff` is nonzero).
    pub aformat: ForkFormat,
    /// XFS_DIFLAG_* bits.
    pub flags: u16,
    /// XFS_DIFLAG2_* bits.
    pub flags2: u64,
    /// Generation number.
    pub gen: u32,
    /// Next inode on the AGI unlinked list.
    pub next_unlinked: u32,
    /// Change counter (statx change cookie).
    pub changecount: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last data change.
    pub mtime: Timestamp,
    /// Last inode change.
    pub ctime: Timestamp,
    /// Creation.
    pub crtime: Timestamp,
    /// LSN of the last write.
    pub lsn: u64,
    /// Device number for device inodes (Linux encoding from the data fork).
    pub rdev: u32,
    /// Data fork bytes (the literal area up to the attr fork).
    pub data_fork: Vec<u8>,
    /// Attr fork bytes (empty without an attr fork).
    pub attr_fork: Vec<u8>,
    /// Metadata file type (`di_metatype`, kept in the `di_onlink` slot)
    /// of a metadata directory inode ([`di::XFS_DIFLAG2_METADATA`]); 0
    /// for every other inode.
    pub metatype: u16,
}

/// What the checks every inode reader makes establish about a core.
pub(crate) struct CoreFacts {
    /// File type from the mode.
    pub file_type: FileType,
    /// The mode.
    pub mode: u16,
    /// XFS_DIFLAG2_* bits.
    pub flags2: u64,
    /// Timestamps are bigtime-encoded.
    pub bigtime: bool,
    /// Data fork extent count.
    pub nextents: u64,
    /// Attr fork extent count.
    pub anextents: u32,
}

/// Checks the identity of inode core `d` read for inode `ino` (magic,
/// version, number, UUID, file type, feature flags against the
/// filesystem) and reads its extent counts. Shared by the full decode and
/// bulkstat's allocation-free decode, so both accept the same inodes.
pub(crate) fn check_core(geo: &Geometry, ino: u64, d: &Dinode) -> Result<CoreFacts> {
    let corrupt = |m: String| Error::corrupt("inode", Location::Inode(ino), m);
    if d.di_magic.get() != di::XFS_DINODE_MAGIC {
        return Err(corrupt(format!("bad magic {:#06x}", d.di_magic.get())));
    }
    if geo.v5 {
        if d.di_version != 3 {
            return Err(corrupt(format!(
                "inode version {} on a v5 filesystem",
                d.di_version
            )));
        }
        if d.di_ino.get() != ino {
            return Err(corrupt(format!("inode records number {}", d.di_ino.get())));
        }
        if d.di_uuid.0 != geo.meta_uuid {
            return Err(corrupt("uuid does not match the filesystem".into()));
        }
    } else if d.di_version != 1 && d.di_version != 2 {
        return Err(corrupt(format!(
            "inode version {} on a v4 filesystem",
            d.di_version
        )));
    }
    // The kernel's largest file is 2^63 - 1 bytes: a size with the top
    // bit set is damage, and reading up to it would never end.
    if d.di_size.get() > i64::MAX as u64 {
        return Err(corrupt(format!(
            "size {} is past the largest file size",
            d.di_size.get()
        )));
    }
    let mode = d.di_mode.get();
    let file_type = FileType::from_mode(mode)
        .ok_or_else(|| corrupt(format!("mode {mode:#o} has no file type")))?;
    let flags2 = d.di_flags2.get();
    let bigtime = flags2 & di::XFS_DIFLAG2_BIGTIME != 0;
    if bigtime && !geo.features.bigtime {
        return Err(corrupt(
            "bigtime inode on a filesystem without bigtime".into(),
        ));
    }
    let nrext64 = flags2 & di::XFS_DIFLAG2_NREXT64 != 0;
    if nrext64 && !geo.features.nrext64 {
        return Err(corrupt(
            "large extent counters on a filesystem without nrext64".into(),
        ));
    }
    let (nextents, anextents) = if nrext64 {
        (d.di_big_nextents.get(), d.di_nextents.get())
    } else {
        (
            u64::from(d.di_nextents.get()),
            u32::from(d.di_anextents.get()),
        )
    };
    Ok(CoreFacts {
        file_type,
        mode,
        flags2,
        bigtime,
        nextents,
        anextents,
    })
}

/// Size of the v3 inode core; the literal area follows it.
pub const CORE_SIZE: usize = 176;

/// True when raw inode `raw` has a good CRC, or its filesystem has none (v4).
pub fn crc_ok(geo: &Geometry, raw: &[u8]) -> bool {
    !geo.v5 || xfs_format::crc::verify(raw, super::INODE_CRC_OFF)
}

/// The inode core of raw inode `raw` as a v3 core: itself on v5; on v4 the
/// 100-byte v1/v2 core with the v3-only fields zero (a v1 core's 16-bit
/// link count moved to `di_nlink`, its project id zero), since those bytes
/// belong to the literal area there.
pub(crate) fn core_of<'a>(geo: &Geometry, ino: u64, raw: &'a [u8]) -> Result<Cow<'a, Dinode>> {
    let short = || Error::corrupt("inode", Location::Inode(ino), "short inode buffer");
    if geo.v5 {
        return Ok(Cow::Borrowed(
            Dinode::ref_from_prefix(raw).map_err(|_| short())?.0,
        ));
    }
    let v2 = xfs_format::layout::XFS_DINODE_V2_SIZE;
    let mut d = Dinode::new_zeroed();
    d.as_mut_bytes()[..v2].copy_from_slice(raw.get(..v2).ok_or_else(short)?);
    // The v2 pad and flush counter share bytes with di_big_nextents.
    d.di_big_nextents.set(0);
    if d.di_version == 1 {
        d.di_nlink.set(u32::from(d.di_onlink.get()));
        d.di_projid_lo.set(0);
        d.di_projid_hi.set(0);
    }
    d.di_onlink.set(0);
    Ok(Cow::Owned(d))
}

impl Inode {
    /// Decodes and checks the on-disk inode `raw` (exactly inode-size bytes),
    /// which was read for inode number `ino`. The CRC must already be checked.
    pub fn decode(geo: &Geometry, ino: Ino, raw: &[u8]) -> Result<Inode> {
        let loc = || Location::Inode(ino.0);
        let corrupt = |d: String| Error::corrupt("inode", loc(), d);
        let d = &*core_of(geo, ino.0, raw)?;
        let CoreFacts {
            file_type,
            mode,
            flags2,
            bigtime,
            nextents,
            anextents,
        } = check_core(geo, ino.0, d)?;
        let ts = |raw: u64| {
            let (sec, nsec) = decode_timestamp(raw, bigtime);
            Timestamp { sec, nsec }
        };
        let format = ForkFormat::from_raw(d.di_format, ino, "data")?;
        let forkoff = d.di_forkoff;
        let aformat = if forkoff != 0 {
            ForkFormat::from_raw(d.di_aformat, ino, "attr")?
        } else {
            ForkFormat::Extents
        };
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
        let data_fork = raw[core..core + data_len].to_vec();
        let attr_fork = if forkoff != 0 {
            raw[core + data_len..].to_vec()
        } else {
            Vec::new()
        };
        let (format_ok, rdev) = match (file_type, format) {
            (
                FileType::CharDev | FileType::BlockDev | FileType::Fifo | FileType::Socket,
                ForkFormat::Dev,
            ) => {
                let rdev = data_fork
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0);
                (true, rdev)
            }
            (FileType::File, ForkFormat::Extents | ForkFormat::Btree) => (true, 0),
            // Only the realtime groups' rmap and refcount btree inodes.
            (FileType::File, ForkFormat::MetaBtree) => (
                flags2 & di::XFS_DIFLAG2_METADATA != 0
                    && matches!(
                        d.di_onlink.get(),
                        di::XFS_METAFILE_RTRMAP | di::XFS_METAFILE_RTREFCOUNT
                    ),
                0,
            ),
            (
                FileType::Dir | FileType::Symlink,
                ForkFormat::Local | ForkFormat::Extents | ForkFormat::Btree,
            ) => (true, 0),
            _ => (false, 0),
        };
        if !format_ok {
            return Err(corrupt(format!(
                "data fork format {format:?} is invalid for a {file_type:?}"
            )));
        }
        let projid = u32::from(d.di_projid_lo.get()) | (u32::from(d.di_projid_hi.get()) << 16);
        Ok(Inode {
            ino,
            mode,
            file_type,
            uid: d.di_uid.get(),
            gid: d.di_gid.get(),
            nlink: d.di_nlink.get(),
            projid,
            size: d.di_size.get(),
            nblocks: d.di_nblocks.get(),
            extsize: d.di_extsize.get(),
            cowextsize: d.di_cowextsize.get(),
            nextents,
            anextents,
            forkoff,
            format,
            aformat,
            flags: d.di_flags.get(),
            flags2,
            gen: d.di_gen.get(),
            next_unlinked: d.di_next_unlinked.get(),
            changecount: d.di_changecount.get(),
            atime: ts(d.di_atime.get()),
            mtime: ts(d.di_mtime.get()),
            ctime: ts(d.di_ctime.get()),
            crtime: ts(d.di_crtime.get()),
            lsn: d.di_lsn.get(),
            rdev,
            data_fork,
            attr_fork,
            metatype: if flags2 & di::XFS_DIFLAG2_METADATA != 0 {
                d.di_onlink.get()
            } else {
                0
            },
        })
    }

    /// A fresh in-use inode: empty forks in the usual format for its type
    /// (local for directories and symlinks, extents for files, device for
    /// the rest), no attr fork, bigtime and large extent counters when the
    /// filesystem has them.
    pub fn new(geo: &Geometry, ino: Ino, mode: u16, gen: u32) -> Result<Inode> {
        let file_type = FileType::from_mode(mode)
            .ok_or_else(|| Error::Invalid(format!("mode {mode:#o} has no file type")))?;
        let format = match file_type {
            FileType::Dir | FileType::Symlink => ForkFormat::Local,
            FileType::File => ForkFormat::Extents,
            _ => ForkFormat::Dev,
        };
        let mut flags2 = 0;
        if geo.features.bigtime {
            flags2 |= di::XFS_DIFLAG2_BIGTIME;
        }
        if geo.features.nrext64 {
            flags2 |= di::XFS_DIFLAG2_NREXT64;
        }
        let lit = geo.inode_size as usize - CORE_SIZE;
        Ok(Inode {
            ino,
            mode,
            file_type,
            uid: 0,
            gid: 0,
            nlink: 1,
            projid: 0,
            size: 0,
            nblocks: 0,
            extsize: 0,
            cowextsize: 0,
            nextents: 0,
            anextents: 0,
            forkoff: 0,
            format,
            aformat: ForkFormat::Extents,
            flags: 0,
            flags2,
            gen,
            next_unlinked: xfs_format::types::NULLAGINO,
            changecount: 1,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            lsn: 0,
            rdev: 0,
            data_fork: vec![0u8; lit],
            attr_fork: Vec::new(),
            metatype: 0,
        })
    }

    /// Bytes of the literal area (both forks) of an inode of this geometry.
    pub fn literal_size(geo: &Geometry) -> usize {
        geo.inode_size as usize - geo.layout().dinode_core
    }

    /// Encodes the inode into `raw` (exactly inode-size bytes) and stamps
    /// its CRC. Fork byte vectors shorter than their area are zero-padded;
    /// longer ones are an error.
    pub fn encode(&self, geo: &Geometry, raw: &mut [u8]) -> Result<()> {
        let bad = |d: String| Error::Invalid(format!("inode {}: {d}", self.ino.0));
        if raw.len() != geo.inode_size as usize {
            return Err(bad(format!("buffer of {} bytes", raw.len())));
        }
        let lit = raw.len() - CORE_SIZE;
        let data_len = if self.forkoff != 0 {
            usize::from(self.forkoff) * 8
        } else {
            lit
        };
        // Bytes past the data fork's area may only be zero padding.
        let data_used = if self.data_fork.len() > data_len
            && self.data_fork[data_len..].iter().all(|&b| b == 0)
        {
            data_len
        } else {
            self.data_fork.len()
        };
        if data_len > lit || data_used > data_len {
            return Err(bad(format!(
                "data fork of {} bytes does not fit {data_len}",
                self.data_fork.len()
            )));
        }
        if self.forkoff == 0 && !self.attr_fork.is_empty() {
            return Err(bad("attr fork bytes without a fork offset".into()));
        }
        if self.attr_fork.len() > lit - data_len {
            return Err(bad(format!(
                "attr fork of {} bytes does not fit {}",
                self.attr_fork.len(),
                lit - data_len
            )));
        }
        let bigtime = self.flags2 & di::XFS_DIFLAG2_BIGTIME != 0;
        let nrext64 = self.flags2 & di::XFS_DIFLAG2_NREXT64 != 0;
        let ts = |t: Timestamp| encode_timestamp(t.sec, t.nsec, bigtime);
        let mut d = Dinode::new_zeroed();
        d.di_magic.set(di::XFS_DINODE_MAGIC);
        d.di_mode.set(self.mode);
        d.di_version = di::XFS_DINODE_VERSION_3;
        d.di_format = fork_code(self.format);
        d.di_uid.set(self.uid);
        d.di_gid.set(self.gid);
        d.di_nlink.set(self.nlink);
        d.di_projid_lo.set(self.projid as u16);
        d.di_projid_hi.set((self.projid >> 16) as u16);
        d.di_atime.set(ts(self.atime));
        d.di_mtime.set(ts(self.mtime));
        d.di_ctime.set(ts(self.ctime));
        d.di_crtime.set(ts(self.crtime));
        d.di_size.set(self.size);
        d.di_nblocks.set(self.nblocks);
        d.di_extsize.set(self.extsize);
        d.di_cowextsize.set(self.cowextsize);
        if nrext64 {
            d.di_big_nextents.set(self.nextents);
            d.di_nextents.set(self.anextents);
        } else {
            let n = u32::try_from(self.nextents)
                .map_err(|_| bad("too many extents without nrext64".into()))?;
            let a = u16::try_from(self.anextents)
                .map_err(|_| bad("too many attr extents without nrext64".into()))?;
            d.di_nextents.set(n);
            d.di_anextents.set(a);
        }
        d.di_forkoff = self.forkoff;
        d.di_aformat = if self.forkoff != 0 {
            fork_code(self.aformat)
        } else {
            // Without an attr fork the kernel records "extents".
            fork_code(ForkFormat::Extents)
        };
        d.di_flags.set(self.flags);
        d.di_gen.set(self.gen);
        d.di_next_unlinked.set(self.next_unlinked);
        d.di_changecount.set(self.changecount);
        d.di_lsn.set(self.lsn);
        d.di_flags2.set(self.flags2);
        d.di_ino.set(self.ino.0);
        if self.flags2 & di::XFS_DIFLAG2_METADATA != 0 {
            d.di_onlink.set(self.metatype);
        }
        d.di_uuid = Uuid(geo.meta_uuid);
        raw.fill(0);
        raw[..CORE_SIZE].copy_from_slice(d.as_bytes());
        raw[CORE_SIZE..CORE_SIZE + data_used].copy_from_slice(&self.data_fork[..data_used]);
        let a = CORE_SIZE + data_len;
        raw[a..a + self.attr_fork.len()].copy_from_slice(&self.attr_fork);
        xfs_format::crc::stamp(raw, super::INODE_CRC_OFF);
        Ok(())
    }

    /// Permission bits (with setuid, setgid and sticky).
    pub fn perm(&self) -> u16 {
        self.mode & 0o7777
    }

    /// Linux major/minor of a device inode, decoded from XFS's 32-bit form
    /// (major in the top 14 bits, minor in the low 18).
    pub fn rdev_major_minor(&self) -> (u32, u32) {
        (self.rdev >> 18, self.rdev & 0x3ffff)
    }

    /// Stores a Linux major/minor in a device inode's data fork.
    pub fn set_rdev(&mut self, major: u32, minor: u32) {
        self.rdev = (major << 18) | (minor & 0x3ffff);
        if self.data_fork.len() >= 4 {
            self.data_fork[..4].copy_from_slice(&self.rdev.to_be_bytes());
        }
    }

    /// True when the inode has an attribute fork.
    pub fn has_attr_fork(&self) -> bool {
        self.forkoff != 0
    }

    /// True when the data fork may map blocks other files map too (the
    /// reflink flag): writes must copy shared blocks and frees must count
    /// owners.
    pub fn may_share(&self) -> bool {
        self.flags2 & xfs_format::inode::XFS_DIFLAG2_REFLINK != 0
    }

    /// True when the file's data lives on the realtime device.
    pub fn is_realtime(&self) -> bool {
        self.file_type == FileType::File && self.flags & xfs_format::inode::XFS_DIFLAG_REALTIME != 0
    }
}

fn fork_code(f: ForkFormat) -> u8 {
    match f {
        ForkFormat::Dev => 0,
        ForkFormat::Local => 1,
        ForkFormat::Extents => 2,
        ForkFormat::Btree => 3,
        ForkFormat::MetaBtree => 5,
    }
}

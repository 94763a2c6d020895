//! Small on-disk building blocks shared by many structures: UUIDs,
//! timestamps, packed extent records, fork formats and directory file types.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A 16-byte filesystem UUID, stored as raw bytes in on-disk order.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
)]
#[repr(C)]
pub struct Uuid(pub [u8; 16]);

const _: () = assert!(core::mem::size_of::<Uuid>() == 16);

impl Uuid {
    /// The all-zero UUID.
    pub const NIL: Uuid = Uuid([0; 16]);

    /// Returns true when every byte is zero.
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl core::fmt::Debug for Uuid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

impl core::fmt::Display for Uuid {
    /// Formats in the usual 8-4-4-4-12 lowercase hex form.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Timestamps
// ---------------------------------------------------------------------------

/// Nanoseconds in one second.
pub const NSEC_PER_SEC: u64 = 1_000_000_000;

/// Seconds added to a Unix time to get a bigtime seconds count (2^31).
pub const XFS_BIGTIME_EPOCH_OFFSET: i64 = 1 << 31;

/// Earliest Unix second a legacy timestamp can hold (1901-12-13).
pub const XFS_LEGACY_TIME_MIN: i64 = i32::MIN as i64;

/// Latest Unix second a legacy timestamp can hold (2038-01-19).
pub const XFS_LEGACY_TIME_MAX: i64 = i32::MAX as i64;

/// Latest on-disk bigtime seconds value the format allows (a multiple of 4).
pub const XFS_BIGTIME_TIME_MAX: i64 = ((u64::MAX / NSEC_PER_SEC) & !3) as i64;

/// Earliest Unix second a bigtime timestamp can hold (same as legacy min).
pub const XFS_BIGTIME_UNIX_MIN: i64 = -XFS_BIGTIME_EPOCH_OFFSET;

/// Latest Unix second a bigtime timestamp can hold (2486-07-02).
pub const XFS_BIGTIME_UNIX_MAX: i64 = XFS_BIGTIME_TIME_MAX - XFS_BIGTIME_EPOCH_OFFSET;

/// Decodes a raw 64-bit on-disk timestamp (already converted from big-endian)
/// into Unix seconds and nanoseconds.
///
/// Legacy format: upper 32 bits are signed seconds, lower 32 bits nanoseconds.
/// Bigtime format: one unsigned count of nanoseconds since 1901-12-13T20:45:52Z.
/// The nanosecond part is returned as stored for legacy stamps and may be out
/// of range on a corrupt image; callers decide whether to reject it.
pub fn decode_timestamp(raw: u64, bigtime: bool) -> (i64, u32) {
    if bigtime {
        let secs = (raw / NSEC_PER_SEC) as i64 - XFS_BIGTIME_EPOCH_OFFSET;
        (secs, (raw % NSEC_PER_SEC) as u32)
    } else {
        let secs = (raw >> 32) as u32 as i32 as i64;
        (secs, raw as u32)
    }
}

/// Encodes Unix seconds and nanoseconds as a raw 64-bit on-disk timestamp
/// (to be stored big-endian).
///
/// Values outside the representable range are clamped to its ends, and
/// `nsec` is clamped below one second, matching how the kernel limits times.
pub fn encode_timestamp(secs: i64, nsec: u32, bigtime: bool) -> u64 {
    let nsec = (nsec as u64).min(NSEC_PER_SEC - 1);
    if bigtime {
        let s = secs.clamp(XFS_BIGTIME_UNIX_MIN, XFS_BIGTIME_UNIX_MAX);
        (s + XFS_BIGTIME_EPOCH_OFFSET) as u64 * NSEC_PER_SEC + nsec
    } else {
        let s = secs.clamp(XFS_LEGACY_TIME_MIN, XFS_LEGACY_TIME_MAX) as i32;
        ((s as u32 as u64) << 32) | nsec
    }
}

// ---------------------------------------------------------------------------
// Packed bmbt extent records
// ---------------------------------------------------------------------------

/// Bits used by the file offset in a packed extent record.
pub const BMBT_STARTOFF_BITLEN: u32 = 54;
/// Bits used by the filesystem block number in a packed extent record.
pub const BMBT_STARTBLOCK_BITLEN: u32 = 52;
/// Bits used by the length in a packed extent record.
pub const BMBT_BLOCKCOUNT_BITLEN: u32 = 21;
/// Largest file offset (in blocks) a record can start at.
pub const BMBT_STARTOFF_MASK: u64 = (1 << BMBT_STARTOFF_BITLEN) - 1;
/// Largest filesystem block number a record can name.
pub const BMBT_STARTBLOCK_MASK: u64 = (1 << BMBT_STARTBLOCK_BITLEN) - 1;
/// Largest length (in blocks) of one extent record.
pub const BMBT_BLOCKCOUNT_MASK: u64 = (1 << BMBT_BLOCKCOUNT_BITLEN) - 1;
/// Largest extent length one record can describe.
pub const XFS_MAX_BMBT_EXTLEN: u64 = BMBT_BLOCKCOUNT_MASK;

/// An unpacked data/attr fork extent mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BmbtIrec {
    /// First file block covered by the extent.
    pub startoff: u64,
    /// First filesystem block (AG-encoded) backing the extent.
    pub startblock: u64,
    /// Length of the extent in filesystem blocks.
    pub blockcount: u64,
    /// True for preallocated space whose contents read as zeros.
    pub unwritten: bool,
}

impl BmbtIrec {
    /// Unpacks the two host-order words of an on-disk extent record.
    ///
    /// Word 0: bit 63 unwritten flag, bits 9..=62 startoff, bits 0..=8 the top
    /// of startblock. Word 1: bits 21..=63 the rest of startblock, bits 0..=20
    /// blockcount.
    pub fn unpack(l0: u64, l1: u64) -> BmbtIrec {
        BmbtIrec {
            unwritten: l0 >> 63 != 0,
            startoff: (l0 >> 9) & BMBT_STARTOFF_MASK,
            startblock: ((l0 & 0x1ff) << 43) | (l1 >> 21),
            blockcount: l1 & BMBT_BLOCKCOUNT_MASK,
        }
    }

    /// Packs into the two host-order words of an on-disk extent record.
    ///
    /// Fields wider than their bit budget are truncated; use [`Self::fits`]
    /// first when the values are not known to be in range.
    pub fn pack(&self) -> (u64, u64) {
        let sb = self.startblock & BMBT_STARTBLOCK_MASK;
        let l0 = ((self.unwritten as u64) << 63)
            | ((self.startoff & BMBT_STARTOFF_MASK) << 9)
            | (sb >> 43);
        let l1 = (sb << 21) | (self.blockcount & BMBT_BLOCKCOUNT_MASK);
        (l0, l1)
    }

    /// Returns true when every field fits its packed width.
    pub fn fits(&self) -> bool {
        self.startoff <= BMBT_STARTOFF_MASK
            && self.startblock <= BMBT_STARTBLOCK_MASK
            && self.blockcount <= BMBT_BLOCKCOUNT_MASK
    }
}

// ---------------------------------------------------------------------------
// Fork formats and directory entry file types
// ---------------------------------------------------------------------------

/// Fork holds a device number (character/block special files).
pub const XFS_DINODE_FMT_DEV: u8 = 0;
/// Fork holds its data inline (short directories, symlinks, attrs).
pub const XFS_DINODE_FMT_LOCAL: u8 = 1;
/// Fork holds an array of packed extent records.
pub const XFS_DINODE_FMT_EXTENTS: u8 = 2;
/// Fork holds the root of a bmap btree.
pub const XFS_DINODE_FMT_BTREE: u8 = 3;
/// Reserved value never used by any released format.
pub const XFS_DINODE_FMT_UUID: u8 = 4;

/// Directory entry file type: not recorded.
pub const XFS_DIR3_FT_UNKNOWN: u8 = 0;
/// Directory entry file type: regular file.
pub const XFS_DIR3_FT_REG_FILE: u8 = 1;
/// Directory entry file type: directory.
pub const XFS_DIR3_FT_DIR: u8 = 2;
/// Directory entry file type: character device.
pub const XFS_DIR3_FT_CHRDEV: u8 = 3;
/// Directory entry file type: block device.
pub const XFS_DIR3_FT_BLKDEV: u8 = 4;
/// Directory entry file type: named pipe.
pub const XFS_DIR3_FT_FIFO: u8 = 5;
/// Directory entry file type: socket.
pub const XFS_DIR3_FT_SOCK: u8 = 6;
/// Directory entry file type: symbolic link.
pub const XFS_DIR3_FT_SYMLINK: u8 = 7;
/// Directory entry file type: whiteout.
pub const XFS_DIR3_FT_WHT: u8 = 8;
/// One past the largest valid directory entry file type.
pub const XFS_DIR3_FT_MAX: u8 = 9;

/// The file type bits of an inode's `di_mode`.
pub const S_IFMT: u16 = 0o170000;
/// File type (in [`S_IFMT`]): named pipe.
pub const S_IFIFO: u16 = 0o010000;
/// File type (in [`S_IFMT`]): character device.
pub const S_IFCHR: u16 = 0o020000;
/// File type (in [`S_IFMT`]): directory.
pub const S_IFDIR: u16 = 0o040000;
/// File type (in [`S_IFMT`]): block device.
pub const S_IFBLK: u16 = 0o060000;
/// File type (in [`S_IFMT`]): regular file.
pub const S_IFREG: u16 = 0o100000;
/// File type (in [`S_IFMT`]): symbolic link.
pub const S_IFLNK: u16 = 0o120000;
/// File type (in [`S_IFMT`]): socket.
pub const S_IFSOCK: u16 = 0o140000;

/// Maps the [`S_IFMT`] bits of an inode mode to a directory entry file
/// type.
pub fn ftype_from_mode(mode: u16) -> u8 {
    match mode & S_IFMT {
        S_IFREG => XFS_DIR3_FT_REG_FILE,
        S_IFDIR => XFS_DIR3_FT_DIR,
        S_IFCHR => XFS_DIR3_FT_CHRDEV,
        S_IFBLK => XFS_DIR3_FT_BLKDEV,
        S_IFIFO => XFS_DIR3_FT_FIFO,
        S_IFSOCK => XFS_DIR3_FT_SOCK,
        S_IFLNK => XFS_DIR3_FT_SYMLINK,
        _ => XFS_DIR3_FT_UNKNOWN,
    }
}

/// Size in bytes of a "basic block", the unit of disk addresses (daddr).
pub const BBSIZE: u64 = 512;
/// log2 of [`BBSIZE`].
pub const BBSHIFT: u32 = 9;
/// The null value for 32-bit AG block numbers / AG inode numbers.
pub const NULLAGBLOCK: u32 = u32::MAX;
/// The null value for 32-bit AG-relative inode numbers (unlinked lists).
pub const NULLAGINO: u32 = u32::MAX;
/// The null value for 64-bit filesystem block numbers.
pub const NULLFSBLOCK: u64 = u64::MAX;
/// The null value for 64-bit inode numbers.
pub const NULLFSINO: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_timestamps() {
        for (s, ns) in [
            (0i64, 0u32),
            (1_700_000_000, 123_456_789),
            (-1, 999_999_999),
            (-86_400 * 365 * 50, 5),
        ] {
            let raw = encode_timestamp(s, ns, false);
            assert_eq!(decode_timestamp(raw, false), (s, ns));
        }
        // -1 seconds is 0xffffffff in the upper word.
        assert_eq!(encode_timestamp(-1, 7, false), 0xffff_ffff_0000_0007);
        // Post-2038 times clamp to the legacy maximum.
        assert_eq!(
            decode_timestamp(encode_timestamp(3_000_000_000, 0, false), false).0,
            XFS_LEGACY_TIME_MAX
        );
        assert_eq!(
            decode_timestamp(encode_timestamp(i64::MIN, 0, false), false).0,
            XFS_LEGACY_TIME_MIN
        );
    }

    #[test]
    fn bigtime_timestamps() {
        for (s, ns) in [
            (0i64, 0u32),
            (-1, 500),
            (-2_000_000_000, 1),
            (XFS_BIGTIME_UNIX_MIN, 0),
            (4_102_444_800, 999_999_999), // 2100-01-01
            (XFS_BIGTIME_UNIX_MAX, 0),
        ] {
            let raw = encode_timestamp(s, ns, true);
            assert_eq!(decode_timestamp(raw, true), (s, ns), "{s}");
        }
        // Unix epoch is 2^31 seconds into the bigtime range.
        assert_eq!(encode_timestamp(0, 0, true), (1u64 << 31) * NSEC_PER_SEC);
        assert_eq!(encode_timestamp(XFS_BIGTIME_UNIX_MIN, 0, true), 0);
        // The maximum matches the documented 2486-07-02T20:20:24Z.
        assert_eq!(XFS_BIGTIME_UNIX_MAX, 16_299_260_424);
        assert_eq!(
            decode_timestamp(encode_timestamp(i64::MAX, 0, true), true).0,
            XFS_BIGTIME_UNIX_MAX
        );
    }

    #[test]
    fn bmbt_round_trip() {
        let cases = [
            BmbtIrec {
                startoff: 0,
                startblock: 0,
                blockcount: 1,
                unwritten: false,
            },
            BmbtIrec {
                startoff: BMBT_STARTOFF_MASK,
                startblock: BMBT_STARTBLOCK_MASK,
                blockcount: BMBT_BLOCKCOUNT_MASK,
                unwritten: true,
            },
            BmbtIrec {
                startoff: 0x0012_3456_789a,
                startblock: 0xf_edcb_a987_6543,
                blockcount: 0x15555,
                unwritten: false,
            },
            BmbtIrec {
                startoff: 1,
                startblock: 1 << 43,
                blockcount: 0,
                unwritten: true,
            },
        ];
        for c in cases {
            assert!(c.fits());
            let (l0, l1) = c.pack();
            assert_eq!(BmbtIrec::unpack(l0, l1), c);
        }
    }

    #[test]
    fn bmbt_bit_positions() {
        let r = BmbtIrec {
            startoff: 1,
            startblock: 1,
            blockcount: 1,
            unwritten: true,
        };
        assert_eq!(r.pack(), ((1 << 63) | (1 << 9), (1 << 21) | 1));
        let big = BmbtIrec {
            startoff: 0,
            startblock: 1 << 51,
            blockcount: 0,
            unwritten: false,
        };
        assert_eq!(big.pack(), (1 << 8, 0));
        assert!(!BmbtIrec {
            startoff: 1 << 54,
            ..r
        }
        .fits());
    }

    #[test]
    fn uuid_display() {
        let u = Uuid([
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 1, 2, 3, 4, 5, 6, 7,
        ]);
        assert_eq!(u.to_string(), "01234567-89ab-cdef-0001-020304050607");
        assert!(Uuid::NIL.is_nil() && !u.is_nil());
    }

    #[test]
    fn ftype_mapping() {
        assert_eq!(ftype_from_mode(0o100644), XFS_DIR3_FT_REG_FILE);
        assert_eq!(ftype_from_mode(0o040755), XFS_DIR3_FT_DIR);
        assert_eq!(ftype_from_mode(0o120777), XFS_DIR3_FT_SYMLINK);
        assert_eq!(ftype_from_mode(0), XFS_DIR3_FT_UNKNOWN);
    }
}

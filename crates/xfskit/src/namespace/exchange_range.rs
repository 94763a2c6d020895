//! Exchanging ranges of two files (`XFS_IOC_EXCHANGE_RANGE`): after the
//! call, each file maps at its range what the other mapped at its own, so
//! their contents change places without a byte of file data moving.
//!
//! The ioctl runs on file2's descriptor and names file1 inside; so does
//! [`Fs::exchange_range`] (`ino1`, `off1` are file1's). The checks are the
//! kernel's (`xfs_exchange_range`, `xfs_exchange_range_checks`,
//! `xfs_exchrange_prep`): only on filesystems with the EXCHRANGE
//! incompat feature, only regular files, neither immutable nor
//! append-only, ranges that start inside both files, offsets aligned to
//! the block size, and a length that is too unless the range ends at the
//! end of one of the files (a partial last block is exchanged only where
//! it is the last block of both, or past the end of the other file).
//! With [`ExchangeFlags::TO_EOF`] the length is from the offsets to the end
//! of the longer remainder and the sizes are exchanged too; with
//! [`ExchangeFlags::FILE1_WRITTEN`] only the blocks file1 has written
//! there are exchanged. Both files get new change and modification
//! times. Set-id bits are left to the caller (the kernel clears them for
//! callers without CAP_FSETID; the FUSE layer does that for writes).
//!
//! The steps are the bmap layer's ([`crate::bmap::exchmaps`]), which
//! recovery's continuation of a logged intent ([`crate::log::exchange`])
//! runs too: the kernel's `xfs_exchmaps_finish_one`, pair of mappings by
//! pair of mappings in order, with reverse mappings, sizes, reflink and
//! large extent count flags.
//!
//! Logging, as the kernel logs it: the first transaction changes the
//! times and flags of both inodes and logs a mapping-exchange intent
//! (XMI: both inodes with their generations, the block offsets, the
//! count, the flags, the sizes to set); then one transaction per pair of
//! mappings, each logging the done item (XMD) of the last intent, the
//! pair's mapping and reverse-mapping changes, and a new XMI for what is
//! left, until nothing is. The transactions are chained with
//! [`Trans::roll`], so both inodes stay locked from the first to the
//! last. A crash leaves the last XMI without its done item, and recovery
//! (the kernel's, or ours in [`crate::log::exchange`]) finishes the
//! exchange from there; the log keeps its tail behind an unfinished
//! intent and writes no unmount record while one is left, and since
//! every step logs the intent again the tail follows the exchange: an
//! exchange of any size runs in a log of any size. The reflink flag is
//! set on both files when either has it and stays on both afterwards,
//! even after an exchange of the whole of both files: Linux 6.18.44 no
//! longer moves it from one file to the other (its intents carry no
//! CLEAR_INO*_REFLINK flag), and `exchanges_match_the_kernel` compares.
//! Before it locks anything the file data still pending is written and
//! flushed, as the kernel flushes both ranges; the free blocks the fork
//! btrees may need are checked first (as the kernel reserves them), so
//! only an I/O error or damage found part way stops an exchange between
//! steps: the error is returned, the intent stays in the log, and
//! recovery finishes the exchange when the image is next opened.
//!
//! Not supported (refused, nothing changed): two ranges of one file
//! (the kernel allows ranges that do not overlap), realtime files.

use super::guard;
use crate::bmap::exchmaps::{exchange_pair, Exchange};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};
use crate::log::exchange::Xmi;
use crate::log::intents::done_item;
use crate::trans::Trans;
use xfs_format::inode::XFS_DIFLAG_REALTIME;
use xfs_format::log_intent::{XFS_EXCHMAPS_INO1_WRITTEN, XFS_EXCHMAPS_SET_SIZES};
use xfs_format::log_item::XFS_LI_XMD;
use xfs_format::sb::XFS_SB_FEAT_INCOMPAT_EXCHRANGE;

/// Flags of [`Fs::exchange_range`], with the values of Linux's
/// `XFS_EXCHANGE_RANGE_*` (struct xfs_exchange_range's `flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExchangeFlags(u64);

impl ExchangeFlags {
    /// No flag.
    pub const NONE: ExchangeFlags = ExchangeFlags(0);
    /// Exchange to the end of both files (the length is ignored) and
    /// exchange their sizes too.
    pub const TO_EOF: ExchangeFlags = ExchangeFlags(1 << 0);
    /// Write the change to the log before returning.
    pub const DSYNC: ExchangeFlags = ExchangeFlags(1 << 1);
    /// Check everything, change nothing.
    pub const DRY_RUN: ExchangeFlags = ExchangeFlags(1 << 2);
    /// Exchange only where file1's range has written blocks.
    pub const FILE1_WRITTEN: ExchangeFlags = ExchangeFlags(1 << 3);
    /// Every flag the kernel knows.
    pub const ALL: ExchangeFlags = ExchangeFlags(0xf);

    /// The flags from their bits (unknown bits kept, and refused by
    /// [`Fs::exchange_range`]).
    pub const fn from_bits(bits: u64) -> ExchangeFlags {
        ExchangeFlags(bits)
    }

    /// The bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// True when every flag of `other` is set.
    pub const fn contains(self, other: ExchangeFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ExchangeFlags {
    type Output = ExchangeFlags;
    fn bitor(self, o: ExchangeFlags) -> ExchangeFlags {
        ExchangeFlags(self.0 | o.0)
    }
}

fn invalid(what: &str) -> Error {
    Error::Invalid(format!("exchange range: {what}"))
}

/// The VFS's `remap_verify_area`: an offset and a length that are file
/// positions (signed 64-bit) and do not overflow one.
fn verify_area(off: u64, len: u64) -> Result<()> {
    let ok = i64::try_from(off)
        .ok()
        .zip(i64::try_from(len).ok())
        .is_some_and(|(o, l)| o.checked_add(l).is_some());
    if ok {
        Ok(())
    } else {
        Err(invalid("range past the largest file offset"))
    }
}

fn regular(tp: &mut Trans<'_>, ino: Ino) -> Result<Inode> {
    let ip = tp.read_inode(ino)?;
    match ip.file_type {
        FileType::File => Ok(ip),
        FileType::Dir => Err(Error::IsDir(format!("inode {}", ino.0))),
        _ => Err(invalid(&format!("inode {} is not a regular file", ino.0))),
    }
}

/// The kernel's `xfs_exchange_range_checks` on sizes and alignment, for
/// an allocation unit of `unit` bytes; returns the length (set from the
/// sizes with `to_eof`).
fn check_range(
    off1: u64,
    size1: u64,
    off2: u64,
    size2: u64,
    len: u64,
    to_eof: bool,
    unit: u64,
) -> Result<u64> {
    if off1 > size1 || off2 > size2 {
        return Err(invalid("a range starts past the end of its file"));
    }
    let len = if to_eof {
        let len = (size1 - off1).max(size2 - off2);
        verify_area(off1, len)?;
        verify_area(off2, len)?;
        len
    } else {
        len
    };
    if !off1.is_multiple_of(unit) || !off2.is_multiple_of(unit) {
        return Err(invalid("offsets must be multiples of the block size"));
    }
    // Both ends are file positions (checked by verify_area).
    let (end1, end2) = (off1 + len, off2 + len);
    if !to_eof && (end1 > size1 || end2 > size2) {
        return Err(invalid("a range ends past the end of its file"));
    }
    if end1 != size1 && end2 != size2 && !len.is_multiple_of(unit) {
        return Err(invalid(
            "the length must be a multiple of the block size unless a range ends at its file's end",
        ));
    }
    // A partial last block may only go where it stays a last block.
    if len.is_multiple_of(unit) {
        return Ok(len);
    }
    let mut blen = len;
    if off2 + blen < size2 {
        blen &= !(unit - 1);
    }
    if off1 + blen < size1 {
        blen &= !(unit - 1);
    }
    if blen == len {
        Ok(len)
    } else {
        Err(invalid(
            "a partial last block would land inside the other file",
        ))
    }
}

impl Fs {
    /// Exchanges bytes `off1..off1+len` of regular file `ino1` (the
    /// ioctl's file1) with bytes `off2..off2+len` of `ino2` (file2, the
    /// file the ioctl is called on), as Linux's `XFS_IOC_EXCHANGE_RANGE`
    /// does (see the module docs for the rules and flags), atomically:
    /// after a crash the files hold the old contents or the new.
    ///
    /// Errors: [`Error::Unsupported`] without the EXCHRANGE feature (and
    /// for two ranges of one file or realtime files), [`Error::Invalid`]
    /// for the kernel's EINVAL cases, [`Error::IsDir`],
    /// [`Error::NotPermitted`] for immutable or append-only files,
    /// [`Error::NoSpace`] when the fork btrees may need more blocks than
    /// are free.
    pub fn exchange_range(
        &self,
        ino1: Ino,
        off1: u64,
        ino2: Ino,
        off2: u64,
        len: u64,
        flags: ExchangeFlags,
    ) -> Result<()> {
        let geo = self.geometry();
        if geo.features_incompat & XFS_SB_FEAT_INCOMPAT_EXCHRANGE == 0 {
            return Err(Error::Unsupported(
                "exchanging ranges on a filesystem without the exchange-range feature".into(),
            ));
        }
        if flags.bits() & !ExchangeFlags::ALL.bits() != 0 {
            return Err(invalid(&format!("unknown flags {:#x}", flags.bits())));
        }
        let to_eof = flags.contains(ExchangeFlags::TO_EOF);
        if !to_eof {
            verify_area(off1, len)?;
            verify_area(off2, len)?;
        }
        // As the kernel writes both ranges' dirty pages before it remaps.
        self.write_state()?.flush_data(self.device())?;
        self.device().flush().map_err(Error::Io)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.without_quota_limits();
        tp.lock_inode(ino1.min(ino2));
        tp.lock_inode(ino1.max(ino2));
        let mut ip1 = regular(&mut tp, ino1)?;
        let mut ip2 = regular(&mut tp, ino2)?;
        let rt1 = ip1.flags & XFS_DIFLAG_REALTIME != 0;
        let rt2 = ip2.flags & XFS_DIFLAG_REALTIME != 0;
        if rt1 != rt2 {
            return Err(invalid("one file is realtime and the other is not"));
        }
        guard::may_change(&ip1, "exchanging ranges")?;
        guard::may_change(&ip2, "exchanging ranges")?;
        let bs = u64::from(geo.block_size);
        let len = check_range(off1, ip1.size, off2, ip2.size, len, to_eof, bs)?;
        if ino1 == ino2 {
            let blen = len.div_ceil(bs) * bs;
            if off2 + blen > off1 && off1 + blen > off2 {
                return Err(invalid("the ranges of one file overlap"));
            }
            return Err(Error::Unsupported(
                "exchanging two ranges of one file".into(),
            ));
        }
        if rt1 {
            return Err(Error::Unsupported(
                "exchanging ranges of realtime files".into(),
            ));
        }
        if len == 0 || flags.contains(ExchangeFlags::DRY_RUN) {
            return Ok(());
        }
        let mut xflags = 0;
        if to_eof {
            xflags |= XFS_EXCHMAPS_SET_SIZES;
        }
        if flags.contains(ExchangeFlags::FILE1_WRITTEN) {
            xflags |= XFS_EXCHMAPS_INO1_WRITTEN;
        }
        let req = Xmi {
            id: 0,
            rec_blk: 0,
            inode1: ino1.0,
            inode2: ino2.0,
            igen1: ip1.gen,
            igen2: ip2.gen,
            startoff1: off1 >> geo.block_log,
            startoff2: off2 >> geo.block_log,
            blockcount: len.div_ceil(bs),
            flags: xflags,
            // As the kernel's xfs_exchmaps_init_intent: each file gets the
            // other's size at the end.
            isize1: if to_eof { ip2.size as i64 } else { -1 },
            isize2: if to_eof { ip1.size as i64 } else { -1 },
        };
        self.touch_modify(&mut ip1, now)?;
        self.touch_modify(&mut ip2, now)?;
        let mut ex = Exchange::prepare(self, &req, &mut ip1, &mut ip2);
        // As the kernel reserves blocks for the fork btrees up front: in
        // the worst case every pair adds a record to each file's btree.
        let pairs = ex.plan(&mut tp, &ip1, &ip2)?;
        let need = bmbt_blocks_for(pairs, geo.block_size);
        if self.free_blocks() < need {
            return Err(Error::NoSpace(format!(
                "exchanging {pairs} pairs of mappings may need {need} blocks for the fork \
                 btrees, {} are free",
                self.free_blocks()
            )));
        }
        // The first transaction: times, flags and the intent.
        let mut id = tp.intent_id();
        tp.log_intent(ex.intent(id).region());
        tp.log_inode(&ip1)?;
        tp.log_inode(&ip2)?;
        let mut tp = tp.roll()?;
        // Then a pair per transaction, each finishing the last intent and
        // logging the next.
        loop {
            let mut ip1 = tp.read_inode(ino1)?;
            let mut ip2 = tp.read_inode(ino2)?;
            if let Some(pair) = ex.next_pair(&mut tp, &mut ip1, &mut ip2)? {
                let (off1, off2, m1, m2, len) = pair;
                // The AGs whose reverse mappings change, in order.
                let mut ags: Vec<u32> = m1
                    .iter()
                    .chain(m2.iter())
                    .map(|m| geo.fsb_split(m.0).0 .0)
                    .collect();
                ags.sort_unstable();
                ags.dedup();
                for a in ags {
                    tp.lock_ag(crate::geometry::AgNumber(a));
                }
                exchange_pair(&mut tp, &mut ip1, off1, m1, &mut ip2, off2, m2, len)?;
            }
            tp.log_done(done_item(XFS_LI_XMD, id));
            let more = ex.left() > 0;
            if more {
                id = tp.intent_id();
                tp.log_intent(ex.intent(id).region());
            }
            tp.log_inode(&ip1)?;
            tp.log_inode(&ip2)?;
            if !more {
                tp.commit()?;
                break;
            }
            tp = tp.roll()?;
        }
        if flags.contains(ExchangeFlags::DSYNC) {
            self.force_log()?;
        }
        Ok(())
    }
}

/// Blocks the two files' fork btrees may take for `pairs` exchanged
/// pairs of mappings in the worst case (each pair a new record in both;
/// a new leaf per half-full leaf of records, and a new block at each of
/// at most five levels above it each time).
fn bmbt_blocks_for(pairs: u64, block_size: u32) -> u64 {
    let per_leaf = (u64::from(block_size).saturating_sub(72) / 16 / 2).max(1);
    2 * (pairs.div_ceil(per_leaf) + 1) * 5
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;

    #[test]
    fn ranges_are_checked_as_the_kernel_does() {
        // Aligned, inside both files.
        assert_eq!(
            check_range(0, 8 * B, B, 8 * B, 4 * B, false, B).unwrap(),
            4 * B
        );
        // Unaligned offsets, past EOF, unaligned length in the middle.
        assert!(check_range(1, 8 * B, 0, 8 * B, B, false, B).is_err());
        assert!(check_range(0, 8 * B, 9 * B, 8 * B, B, false, B).is_err());
        assert!(check_range(0, 8 * B, 0, 8 * B, 9 * B, false, B).is_err());
        assert!(check_range(0, 8 * B, 0, 8 * B, B + 1, false, B).is_err());
        // A partial block ending both files, or one file past the other's end.
        assert!(check_range(0, 2 * B + 5, 0, 2 * B + 5, 2 * B + 5, false, B).is_ok());
        assert!(check_range(0, 2 * B + 5, 0, 9 * B, 2 * B + 5, false, B).is_err());
        assert!(check_range(0, 9 * B, 0, 2 * B + 5, 2 * B + 5, false, B).is_err());
        // To EOF: the longer remainder.
        assert_eq!(
            check_range(B, 3 * B + 7, 0, B, 0, true, B).unwrap(),
            2 * B + 7
        );
        assert_eq!(
            check_range(0, 3 * B, 0, 5 * B + 1, 0, true, B).unwrap(),
            5 * B + 1
        );
        assert!(verify_area(u64::MAX, 1).is_err());
        assert!(verify_area(i64::MAX as u64, 1).is_err());
        assert!(verify_area(4096, 4096).is_ok());
    }
}

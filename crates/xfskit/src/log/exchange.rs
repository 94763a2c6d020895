//! After replay: mapping-exchange intents (XMIs) without their done item.
//!
//! `XFS_IOC_EXCHANGE_RANGE` exchanges the mappings of a range of one file
//! with those of a range of another, one pair of mappings per step. The
//! operation is logged as an XMI naming both inodes (with their
//! generations), the block offsets still to do in each, the blocks left,
//! and flags; each step logs the XMI's done item (XMD) and a new XMI for
//! what is left, in the transaction that logs the step's block-mapping
//! intents (BUIs). So a crash leaves the last XMI, whose offsets are
//! where the exchange stopped, and perhaps unfinished BUIs of the last
//! step, which the BUI code finishes.
//!
//! Recovery continues the exchange as the kernel's does, from the logged
//! offsets and count and from the inodes as replay left them:
//!
//! - the request's parameters are taken from the log (attribute fork,
//!   set sizes, first file written only), and with "set sizes" so are the
//!   sizes to set at the end (`xmi_isize1`, `xmi_isize2`: each file gets
//!   the size the other had when the exchange began, even when earlier
//!   steps raised one of them). Linux 6.18.44, which the tests compare
//!   with, does so (`recover_exchange_to_eof_with_raised_sizes`: the big
//!   file ends at the small file's logged size, not at the size the small
//!   file had been raised to); upstream's `xfs_exchmaps_init_intent`
//!   takes the inodes' sizes at recovery instead. The reflink flags are
//!   never cleared: Linux 6.18.44 no longer moves them from one file to
//!   the other (its intents carry no CLEAR_INO*_REFLINK flag, and both
//!   files keep the flag either had); logged clear flags are ignored, as
//!   upstream's recovery ignores every logged flag but the request's;
//! - the steps are the bmap layer's ([`crate::bmap::exchmaps`], the
//!   ones [`Fs::exchange_range`] runs): before the first, the reflink
//!   flags made alike and the wide extent counters set; then a pair of
//!   different mappings per step, exchanged with their reverse mappings,
//!   sizes raised with "set sizes", and the logged sizes set at the end.
//!
//! The kernel's recovery of an XMI takes one step (with the first two
//! points) when it meets the intent in log order, queueing that pair's
//! block-mapping updates behind the continuing intent; after every intent
//! of the log had its turn it runs the rest of the exchange, and that
//! first pair last. So do we, so that the fork btrees see the kernel's
//! order of changes (and take its shape, and use as many blocks).
//!
//! This module holds what is about the log: the XMI as logged ([`Xmi`]:
//! decoded, encoded, checked), the inodes it names read and checked, and
//! recovery's order of transactions. Only data forks of regular files are
//! finished here; the kernel uses the attribute-fork variant and
//! directories only for online repair.

use crate::bmap::exchmaps::{exchange_pair, Exchange, Pair};
use crate::bytes::{le32, le64};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};
use xfs_format::log_intent::*;
use xfs_format::types::{BMBT_BLOCKCOUNT_MASK, BMBT_STARTOFF_MASK};

/// A mapping-exchange intent as logged (`xfs_xmi_log_format`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xmi {
    /// `xmi_id`.
    pub id: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// The two inodes.
    pub inode1: u64,
    /// Second inode.
    pub inode2: u64,
    /// Their generations.
    pub igen1: u32,
    /// Second generation.
    pub igen2: u32,
    /// Block offset where the exchange goes on in the first file.
    pub startoff1: u64,
    /// Block offset where it goes on in the second file.
    pub startoff2: u64,
    /// Blocks left to exchange.
    pub blockcount: u64,
    /// `XFS_EXCHMAPS_*` flags.
    pub flags: u64,
    /// Sizes to set at the end with "set sizes" (-1 otherwise): the
    /// first file gets `isize1`, the second `isize2`; recovery sets them,
    /// as Linux 6.18.44's does.
    pub isize1: i64,
    /// Second size.
    pub isize2: i64,
}

/// The largest block offset a file may map (the kernel's `XFS_MAX_FILEOFF`).
const MAX_FILEOFF: u64 = BMBT_STARTOFF_MASK + BMBT_BLOCKCOUNT_MASK;

impl Xmi {
    /// Decodes an XMI format region; the kernel refuses any other length
    /// and a nonzero pad.
    pub fn parse(r: &[u8], rec_blk: u64) -> std::result::Result<Xmi, String> {
        if r.len() != XFS_XMI_LOG_FORMAT_SIZE {
            return Err(format!("XMI format region of {} bytes", r.len()));
        }
        if le32(r, 4) != 0 {
            return Err(format!("XMI {:#x}: nonzero pad", le64(r, 8)));
        }
        Ok(Xmi {
            id: le64(r, 8),
            rec_blk,
            inode1: le64(r, 16),
            inode2: le64(r, 24),
            igen1: le32(r, 32),
            igen2: le32(r, 36),
            startoff1: le64(r, 40),
            startoff2: le64(r, 48),
            blockcount: le64(r, 56),
            flags: le64(r, 64),
            isize1: le64(r, 72) as i64,
            isize2: le64(r, 80) as i64,
        })
    }

    /// The item's format region, as the log holds it.
    pub fn region(&self) -> Vec<u8> {
        use zerocopy::IntoBytes;
        let f = XmiLogFormat {
            xmi_type: xfs_format::log_item::XFS_LI_XMI.into(),
            xmi_size: 1.into(),
            pad: 0.into(),
            xmi_id: self.id.into(),
            xmi_inode1: self.inode1.into(),
            xmi_inode2: self.inode2.into(),
            xmi_igen1: self.igen1.into(),
            xmi_igen2: self.igen2.into(),
            xmi_startoff1: self.startoff1.into(),
            xmi_startoff2: self.startoff2.into(),
            xmi_blockcount: self.blockcount.into(),
            xmi_flags: self.flags.into(),
            xmi_isize1: (self.isize1 as u64).into(),
            xmi_isize2: (self.isize2 as u64).into(),
        };
        f.as_bytes().to_vec()
    }

    pub(crate) fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(
            "mapping-exchange intent",
            Location::Log {
                block: self.rec_blk,
            },
            format!("intent {:#x}: {}", self.id, detail.into()),
        )
    }

    /// The kernel's checks of a recovered XMI that need no inode: known
    /// flags, file ranges a file can have (a count of zero included:
    /// the kernel refuses it too). The attribute-fork variant is
    /// refused as unsupported.
    pub fn check(&self) -> Result<()> {
        if self.flags & !XFS_EXCHMAPS_LOGGED_FLAGS != 0 {
            return Err(self.corrupt(format!("unknown flags {:#x}", self.flags)));
        }
        // The sizes to set are the logged ones: a negative one would be
        // set as a size past any file's end.
        if self.flags & XFS_EXCHMAPS_SET_SIZES != 0 && (self.isize1 < 0 || self.isize2 < 0) {
            return Err(self.corrupt(format!("sizes {} and {} to set", self.isize1, self.isize2)));
        }
        for (off, which) in [(self.startoff1, "first"), (self.startoff2, "second")] {
            let ok = off
                .checked_add(self.blockcount)
                .is_some_and(|end| end > off && end - 1 <= MAX_FILEOFF);
            if !ok {
                return Err(self.corrupt(format!(
                    "{} blocks at block {off} of the {which} file: past the largest file offset",
                    self.blockcount
                )));
            }
        }
        if self.flags & XFS_EXCHMAPS_ATTR_FORK != 0 {
            return Err(Error::Unsupported(format!(
                "mapping-exchange intent {:#x} (log block {}) exchanges attribute forks",
                self.id, self.rec_blk
            )));
        }
        if self.inode1 == self.inode2 {
            return Err(Error::Unsupported(format!(
                "mapping-exchange intent {:#x} (log block {}) exchanges ranges of one file",
                self.id, self.rec_blk
            )));
        }
        Ok(())
    }
}

/// Reads one of the intent's inodes, with the kernel's checks: in use,
/// of the logged generation; and a regular file.
fn read_checked(tp: &mut crate::trans::Trans<'_>, x: &Xmi, ino: u64, gen: u32) -> Result<Inode> {
    if !tp.geo().ino_valid(Ino(ino)) {
        return Err(x.corrupt(format!("inode {ino} is not a valid inode number")));
    }
    let ip = tp
        .read_inode(Ino(ino))
        .map_err(|e| x.corrupt(format!("inode {ino}: {e}")))?;
    if ip.mode == 0 {
        return Err(x.corrupt(format!("inode {ino} is free")));
    }
    if ip.gen != gen {
        return Err(x.corrupt(format!(
            "inode {ino} has generation {}, the intent names {gen}",
            ip.gen
        )));
    }
    if ip.file_type != FileType::File {
        return Err(x.corrupt(format!("inode {ino} is not a regular file")));
    }
    Ok(ip)
}

/// An exchange recovery started: the exchange, and the pair of mappings
/// its first step chose, exchanged only at the end.
#[derive(Debug, Clone)]
pub struct Recovering {
    ex: Exchange,
    /// The pair the first step chose, to be exchanged in the second phase
    /// (the kernel queues its block-mapping updates then).
    pending: Option<Pair>,
}

impl Recovering {
    /// The intent being finished (`xmi_id`).
    pub fn id(&self) -> u64 {
        self.ex.id()
    }

    /// Pairs of mappings exchanged so far.
    pub fn pairs(&self) -> usize {
        self.ex.pairs
    }
}

/// Starts finishing the exchange `x` names, as the kernel's recovery of
/// the intent does in one transaction: the request rebuilt from the
/// logged offsets, count, flags and sizes, the reflink flags made alike
/// and the wide extent counters set, and the first pair of mappings
/// chosen (sizes raised, or set at the end); the kernel only queues that
/// pair's block-mapping updates, and runs them and the rest of the
/// exchange after every other intent of the log ([`continue_exchange`]).
/// The steps are the bmap layer's ([`crate::bmap::exchmaps`]).
pub fn start_exchange(fs: &Fs, x: &Xmi) -> Result<Recovering> {
    x.check()?;
    let mut tp = fs.trans()?;
    tp.without_quota_limits();
    lock(&mut tp, (Ino(x.inode1), Ino(x.inode2)));
    let mut ip1 = read_checked(&mut tp, x, x.inode1, x.igen1)?;
    let mut ip2 = read_checked(&mut tp, x, x.inode2, x.igen2)?;
    let mut ex = Exchange::prepare(fs, x, &mut ip1, &mut ip2);
    let pending = ex.next_pair(&mut tp, &mut ip1, &mut ip2)?;
    tp.log_inode(&ip1)?;
    tp.log_inode(&ip2)?;
    tp.commit()?;
    Ok(Recovering { ex, pending })
}

/// Finishes what [`start_exchange`] left, one transaction per pair of
/// mappings, and only then exchanges the pair the first step chose: the
/// kernel's recovery puts the continuing intent ahead of that step's
/// block-mapping updates.
pub fn continue_exchange(fs: &Fs, r: &mut Recovering) -> Result<()> {
    let ex = &mut r.ex;
    let (i1, i2) = ex.inodes();
    while ex.left() > 0 {
        let mut tp = fs.trans()?;
        tp.without_quota_limits();
        lock(&mut tp, (i1, i2));
        let mut ip1 = tp.read_inode(i1)?;
        let mut ip2 = tp.read_inode(i2)?;
        if let Some((off1, off2, m1, m2, len)) = ex.next_pair(&mut tp, &mut ip1, &mut ip2)? {
            exchange_pair(&mut tp, &mut ip1, off1, m1, &mut ip2, off2, m2, len)?;
        }
        tp.log_inode(&ip1)?;
        tp.log_inode(&ip2)?;
        tp.commit()?;
    }
    // The kernel queues the first pair's block-mapping updates behind the
    // intent itself, so they run once the rest of the exchange is done.
    if let Some((off1, off2, m1, m2, len)) = r.pending.take() {
        let mut tp = fs.trans()?;
        tp.without_quota_limits();
        lock(&mut tp, (i1, i2));
        let mut ip1 = tp.read_inode(i1)?;
        let mut ip2 = tp.read_inode(i2)?;
        exchange_pair(&mut tp, &mut ip1, off1, m1, &mut ip2, off2, m2, len)?;
        tp.log_inode(&ip1)?;
        tp.log_inode(&ip2)?;
        tp.commit()?;
    }
    Ok(())
}

fn lock(tp: &mut crate::trans::Trans<'_>, (i1, i2): (Ino, Ino)) {
    tp.lock_inode(i1.min(i2));
    tp.lock_inode(i1.max(i2));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::Timestamp;
    use crate::namespace::{Meta, NodeKind};
    use crate::OpenOptions;

    fn xmi(inode1: u64, inode2: u64, blockcount: u64, flags: u64) -> Xmi {
        Xmi {
            id: 0x51,
            rec_blk: 77,
            inode1,
            inode2,
            igen1: 0,
            igen2: 0,
            startoff1: 0,
            startoff2: 0,
            blockcount,
            flags,
            isize1: -1,
            isize2: -1,
        }
    }

    fn names_record(e: &Error) -> bool {
        matches!(
            e,
            Error::Corrupt {
                location: Location::Log { block: 77 },
                ..
            }
        )
    }

    #[test]
    fn malformed_regions_are_refused() {
        assert!(Xmi::parse(&[0u8; 80], 3).is_err());
        let mut r = vec![0u8; XFS_XMI_LOG_FORMAT_SIZE];
        r[4] = 1;
        assert!(Xmi::parse(&r, 3).is_err());
        r[4] = 0;
        r[56] = 9;
        let x = Xmi::parse(&r, 3).expect("a well-formed XMI");
        assert_eq!((x.blockcount, x.rec_blk), (9, 3));
    }

    #[test]
    fn bad_ranges_and_flags_name_the_record() {
        for x in [
            xmi(131, 132, 0, 0),
            xmi(131, 132, u64::MAX, 0),
            Xmi {
                startoff1: MAX_FILEOFF,
                ..xmi(131, 132, 2, 0)
            },
            Xmi {
                startoff2: u64::MAX - 1,
                ..xmi(131, 132, 4, 0)
            },
            xmi(131, 132, 1, 1 << 5),
        ] {
            let e = x.check().expect_err("refused");
            assert!(names_record(&e), "{x:?}: {e}");
        }
        assert!(matches!(
            xmi(131, 132, 1, XFS_EXCHMAPS_ATTR_FORK).check(),
            Err(Error::Unsupported(_))
        ));
        let sized = |isize1, isize2| Xmi {
            isize1,
            isize2,
            ..xmi(131, 132, 1, XFS_EXCHMAPS_LOGGED_FLAGS & !1)
        };
        assert!(sized(0, 4096).check().is_ok());
        for (a, b) in [(-1, 4096), (0, -1), (-1, -1)] {
            let e = sized(a, b).check().expect_err("no size to set");
            assert!(names_record(&e), "{e}");
        }
    }

    fn meta(mode: u16) -> Meta {
        let t = Timestamp {
            sec: 1_700_000_000,
            nsec: 0,
        };
        Meta {
            mode,
            uid: 0,
            gid: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        }
    }

    /// A fresh filesystem from mkfs.xfs, opened for writing (None when
    /// mkfs.xfs cannot run).
    fn image(tag: &str) -> Option<(std::path::PathBuf, Fs)> {
        let path =
            std::env::temp_dir().join(format!("xfskit-xmi-{}-{tag}.img", std::process::id()));
        std::fs::File::create(&path).ok()?.set_len(320 << 20).ok()?;
        match std::process::Command::new("mkfs.xfs")
            .args(["-q", "-f", &path.display().to_string()])
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("mkfs.xfs failed: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                eprintln!("SKIP: cannot run mkfs.xfs: {e}");
                return None;
            }
        }
        let fs = Fs::open_rw(&path, &OpenOptions::default()).expect("open");
        Some((path, fs))
    }

    fn read(fs: &Fs, ino: Ino) -> Vec<u8> {
        let ip = fs.inode(ino).expect("inode");
        let mut buf = vec![0u8; ip.size as usize];
        let n = crate::inode::read_at(fs, &ip, 0, &mut buf).expect("read");
        buf.truncate(n);
        buf
    }

    fn finish(fs: &Fs, x: &Xmi) -> Result<usize> {
        let mut ex = start_exchange(fs, x)?;
        continue_exchange(fs, &mut ex)?;
        Ok(ex.pairs())
    }

    #[test]
    fn inodes_are_checked_and_files_exchanged() {
        let Some((path, fs)) = image("files") else {
            return;
        };
        let root = fs.geometry().root_ino;
        let d = fs.create(root, b"d", &NodeKind::Dir, &meta(0o755)).unwrap();
        let f1 = fs
            .create(root, b"f1", &NodeKind::File { size: 0 }, &meta(0o644))
            .unwrap();
        let f2 = fs
            .create(root, b"f2", &NodeKind::File { size: 0 }, &meta(0o644))
            .unwrap();
        let a = vec![b'a'; 5 * 4096];
        let b = vec![b'b'; 2 * 4096 + 100];
        fs.write_at(f1, 0, &a).unwrap();
        fs.write_at(f2, 8192, &b).unwrap();
        fs.sync().unwrap();
        let gen = |ino: Ino| fs.inode(ino).unwrap().gen;

        // A directory, a wrong generation, a free inode, a bad number.
        let mut x = xmi(f1.0, d.0, 5, 0);
        x.igen1 = gen(f1);
        x.igen2 = gen(d);
        let e = finish(&fs, &x).expect_err("a directory");
        assert!(
            names_record(&e) && e.to_string().contains("not a regular file"),
            "{e}"
        );
        let mut x = xmi(f1.0, f2.0, 5, 0);
        x.igen1 = gen(f1);
        x.igen2 = gen(f2) ^ 1;
        let e = finish(&fs, &x).expect_err("a generation");
        assert!(
            names_record(&e) && e.to_string().contains("generation"),
            "{e}"
        );
        let x = Xmi {
            inode2: f2.0 + 40,
            ..xmi(f1.0, f2.0, 5, 0)
        };
        assert!(names_record(&finish(&fs, &x).expect_err("a free inode")));
        let x = Xmi {
            inode2: u64::MAX >> 1,
            ..xmi(f1.0, f2.0, 5, 0)
        };
        assert!(names_record(&finish(&fs, &x).expect_err("a bad number")));

        // Whole files with their sizes: the contents and sizes change
        // places (f2 has a hole where f1 had data).
        let mut x = xmi(f1.0, f2.0, 5, XFS_EXCHMAPS_SET_SIZES);
        x.igen1 = gen(f1);
        x.igen2 = gen(f2);
        x.isize1 = (8192 + b.len()) as i64;
        x.isize2 = a.len() as i64;
        assert!(finish(&fs, &x).unwrap() > 0);
        fs.sync().unwrap();
        let mut want2 = vec![0u8; 8192];
        want2.extend_from_slice(&b);
        assert_eq!(read(&fs, f1), want2);
        assert_eq!(read(&fs, f2), a);
        drop(fs);
        let fs = Fs::open(&path, &OpenOptions::default()).unwrap();
        assert_eq!(read(&fs, f1), want2);
        let _ = std::fs::remove_file(&path);
    }

    /// An exchange to EOF cut short after its first steps: the small
    /// file's size was raised to the end of what it maps now, and the
    /// intent logs the sizes the exchange began with. Recovery sets the
    /// logged sizes, as Linux 6.18.44 does (the big file ends at the small
    /// file's first size, not at the raised one).
    #[test]
    fn logged_sizes_are_set() {
        let Some((path, fs)) = image("sizes") else {
            return;
        };
        let root = fs.geometry().root_ino;
        let big = fs
            .create(root, b"big", &NodeKind::File { size: 0 }, &meta(0o644))
            .unwrap();
        let small = fs
            .create(root, b"small", &NodeKind::File { size: 0 }, &meta(0o644))
            .unwrap();
        let a = vec![b'a'; 8 * 4096];
        fs.write_at(big, 0, &a).unwrap();
        fs.write_at(small, 0, &[b'b'; 4096]).unwrap();
        fs.sync().unwrap();
        // As if the first three blocks had been exchanged already.
        let (g1, g2) = (fs.inode(big).unwrap().gen, fs.inode(small).unwrap().gen);
        let mut x = xmi(big.0, small.0, 5, XFS_EXCHMAPS_SET_SIZES);
        x.startoff1 = 3;
        x.startoff2 = 3;
        x.igen1 = g1;
        x.igen2 = g2;
        x.isize1 = 4096;
        x.isize2 = a.len() as i64;
        let mut tp = fs.trans().unwrap();
        tp.lock_inode(small);
        let mut ip = tp.read_inode(small).unwrap();
        ip.size = 3 * 4096;
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        assert!(finish(&fs, &x).unwrap() > 0);
        assert_eq!(fs.inode(big).unwrap().size, 4096);
        assert_eq!(fs.inode(small).unwrap().size, a.len() as u64);
        drop(fs);
        let _ = std::fs::remove_file(&path);
    }
}

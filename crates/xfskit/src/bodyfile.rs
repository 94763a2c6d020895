//! Timelines: the body file of The Sleuth Kit's `mactime` (format 3.x),
//! one line per name of an inode:
//!
//! ```text
//! MD5|name|inode|mode_as_string|UID|GID|size|atime|mtime|ctime|crtime
//! ```
//!
//! [`write_line`] formats one [`Record`], whatever produced it: the
//! allocated inodes of a scan ([`allocated`]), or deleted ones found
//! elsewhere ([`Status::Deleted`] marks the name as fls does, with
//! ` (deleted)` after it). The fields follow what `fls -m` writes:
//!
//! - MD5: `0`, or the content's MD5 in lower-case hex when computed;
//! - name: the full path (a prefix may stand before it), a symlink's
//!   target after ` -> `, then ` (deleted)` or ` (deleted-realloc)`;
//!   an inode no directory names is `/$OrphanFiles/OrphanFile-INO`, as
//!   fls names orphans. mactime splits on every `|` and decodes `%XX`, so
//!   `|`, `%` and control bytes are written as `%7C`, `%25`, `%0A`...
//!   ([`Escape::Percent`]); [`Escape::Backslash`] writes plaso's and
//!   dfImageTools' form instead (`\|`, `\\`, `\x0a`);
//! - mode_as_string: the type from the directory entry, `/`, then the
//!   `ls -l` string of the inode with TSK's type letters (`r/rrw-r--r--`,
//!   `d/drwxr-xr-x`, `l/lrwxrwxrwx`; TSK writes a socket's as
//!   `s/hrwxr-xr-x`);
//! - times in seconds since the epoch, with the nanoseconds as a decimal
//!   fraction when they are not zero (`1700000000.123456789`): mactime
//!   reads the whole seconds of such a number, plaso keeps the fraction.
//!   [`Format::seconds`] writes whole seconds only (rounded down), as fls.
//!   crtime is the v3 inode's creation time, 0 on v4 inodes.

use crate::error::{Error, Result};
use crate::geometry::Ino;
use crate::inode::{FileReader, FileType, Inode};
use crate::paths::{self, PathCache};
use crate::scan::{self, Bstat, BulkstatOptions, ScanStats};
use crate::symlink;
use crate::Fs;
use md5::{Digest, Md5};

/// Whether the name of a record is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    /// An allocated inode under a name in use (or no name: an orphan).
    #[default]
    Allocated,
    /// A deleted name (or a freed inode): ` (deleted)` after the name.
    Deleted,
    /// A deleted name whose inode has been allocated again since:
    /// ` (deleted-realloc)`, as fls marks it.
    DeletedRealloc,
}

/// What one body line says about one name of an inode. Fields that are not
/// known are 0 (fls writes unknown metadata as zeros too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The content's MD5, when computed.
    pub md5: Option<[u8; 16]>,
    /// The absolute path ("/" for the root); None when no name is known,
    /// written as fls names orphans (`/$OrphanFiles/OrphanFile-INO`).
    pub path: Option<Vec<u8>>,
    /// A symlink's target, written after the name as ` -> TARGET`.
    pub link_target: Option<Vec<u8>>,
    /// Allocated or deleted.
    pub status: Status,
    /// Inode number.
    pub ino: u64,
    /// The type the directory entry gives (`-` when None); for names in
    /// use it is the inode's own.
    pub name_type: Option<FileType>,
    /// Type and permission bits of the inode (0: unknown).
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Last access, nanoseconds since the epoch.
    pub atime: i128,
    /// Last data change, nanoseconds since the epoch.
    pub mtime: i128,
    /// Last inode change, nanoseconds since the epoch.
    pub ctime: i128,
    /// Creation (v3 inodes' di_crtime), nanoseconds since the epoch.
    pub crtime: i128,
}

/// How bytes that would break a body line are written in names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Escape {
    /// `%XX` (upper-case hex) for `|`, `%` and control bytes (0x00-0x1f,
    /// 0x7f): what mactime decodes.
    #[default]
    Percent,
    /// `\|`, `\\` and `\xNN` for control bytes: what plaso's bodyfile
    /// parser and dfImageTools read and write.
    Backslash,
}

/// How records are written.
#[derive(Debug, Clone, Default)]
pub struct Format {
    /// Put before every path, as `fls -m PREFIX` (a trailing `/` is
    /// dropped: paths start with one).
    pub prefix: Vec<u8>,
    /// Whole seconds only (rounded down), as fls writes; otherwise the
    /// nanoseconds follow as a fraction when they are not zero.
    pub seconds: bool,
    /// The escaping of names.
    pub escape: Escape,
}

/// TSK's letter for a type: `meta` for the inode's (`tsk_fs_meta_type_str`),
/// otherwise for a directory entry's (`tsk_fs_name_type_str`); they differ
/// only for sockets.
fn type_letter(t: Option<FileType>, meta: bool) -> u8 {
    match t {
        None => b'-',
        Some(FileType::File) => b'r',
        Some(FileType::Dir) => b'd',
        Some(FileType::Symlink) => b'l',
        Some(FileType::CharDev) => b'c',
        Some(FileType::BlockDev) => b'b',
        Some(FileType::Fifo) => b'p',
        Some(FileType::Socket) if meta => b'h',
        Some(FileType::Socket) => b's',
    }
}

/// The mode_as_string field: the name's type, `/`, and the inode's
/// `ls -l` string with TSK's type letter (`r/rrw-r--r--`).
pub fn mode_string(name_type: Option<FileType>, mode: u16) -> [u8; 12] {
    let mut s = *b"-/----------";
    s[0] = type_letter(name_type, false);
    s[2] = type_letter(FileType::from_mode(mode), true);
    let m = u32::from(mode);
    let bit = |b: u32| m & b != 0;
    // (read, write, execute, special bit, its letter) per class.
    let classes = [
        (0o400, 0o200, 0o100, 0o4000, b's'),
        (0o040, 0o020, 0o010, 0o2000, b's'),
        (0o004, 0o002, 0o001, 0o1000, b't'),
    ];
    for (k, (r, w, x, special, letter)) in classes.into_iter().enumerate() {
        let at = 3 + 3 * k;
        if bit(r) {
            s[at] = b'r';
        }
        if bit(w) {
            s[at + 1] = b'w';
        }
        s[at + 2] = match (bit(special), bit(x)) {
            (true, true) => letter,
            (true, false) => letter.to_ascii_uppercase(),
            (false, true) => b'x',
            (false, false) => b'-',
        };
    }
    s
}

fn hex_digit(v: u8, upper: bool) -> u8 {
    let digits = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    digits[usize::from(v & 0xf)]
}

/// Appends `name` with the bytes that would break the line escaped.
fn push_escaped(out: &mut Vec<u8>, name: &[u8], escape: Escape) {
    for &c in name {
        let control = c < 0x20 || c == 0x7f;
        match escape {
            Escape::Percent if control || c == b'|' || c == b'%' => {
                out.extend_from_slice(&[b'%', hex_digit(c >> 4, true), hex_digit(c, true)]);
            }
            Escape::Backslash if c == b'|' || c == b'\\' => out.extend_from_slice(&[b'\\', c]),
            Escape::Backslash if control => {
                out.extend_from_slice(&[
                    b'\\',
                    b'x',
                    hex_digit(c >> 4, false),
                    hex_digit(c, false),
                ]);
            }
            _ => out.push(c),
        }
    }
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    let mut v = v;
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

/// Appends a time given in nanoseconds since the epoch.
fn push_time(out: &mut Vec<u8>, ns: i128, seconds: bool) {
    const NS: i128 = 1_000_000_000;
    if seconds {
        let s = ns.div_euclid(NS);
        if s < 0 {
            out.push(b'-');
        }
        match u64::try_from(s.unsigned_abs()) {
            Ok(v) => push_u64(out, v),
            Err(_) => out.extend_from_slice(s.unsigned_abs().to_string().as_bytes()),
        }
        return;
    }
    // A decimal number: sign, whole seconds, the fraction when not zero.
    let mag = ns.unsigned_abs();
    if ns < 0 {
        out.push(b'-');
    }
    let (whole, frac) = (mag / NS as u128, (mag % NS as u128) as u64);
    match u64::try_from(whole) {
        Ok(v) => push_u64(out, v),
        Err(_) => out.extend_from_slice(whole.to_string().as_bytes()),
    }
    if frac != 0 {
        out.push(b'.');
        let at = out.len();
        push_u64(out, frac);
        let n = out.len() - at;
        out.splice(at..at, std::iter::repeat_n(b'0', 9 - n));
    }
}

/// Appends the body line of `rec` (with its newline) to `out`.
pub fn write_line(out: &mut Vec<u8>, rec: &Record, fmt: &Format) {
    match rec.md5 {
        Some(d) => {
            for b in d {
                out.extend_from_slice(&[hex_digit(b >> 4, false), hex_digit(b, false)]);
            }
        }
        None => out.push(b'0'),
    }
    out.push(b'|');
    let prefix = fmt.prefix.strip_suffix(b"/").unwrap_or(&fmt.prefix);
    push_escaped(out, prefix, fmt.escape);
    match &rec.path {
        Some(p) => push_escaped(out, p, fmt.escape),
        None => {
            out.extend_from_slice(b"/$OrphanFiles/OrphanFile-");
            push_u64(out, rec.ino);
        }
    }
    if let Some(t) = &rec.link_target {
        out.extend_from_slice(b" -> ");
        push_escaped(out, t, fmt.escape);
    }
    match rec.status {
        Status::Allocated => {}
        Status::Deleted => out.extend_from_slice(b" (deleted)"),
        Status::DeletedRealloc => out.extend_from_slice(b" (deleted-realloc)"),
    }
    out.push(b'|');
    push_u64(out, rec.ino);
    out.push(b'|');
    out.extend_from_slice(&mode_string(rec.name_type, rec.mode));
    for v in [u64::from(rec.uid), u64::from(rec.gid), rec.size] {
        out.push(b'|');
        push_u64(out, v);
    }
    for t in [rec.atime, rec.mtime, rec.ctime, rec.crtime] {
        out.push(b'|');
        push_time(out, t, fmt.seconds);
    }
    out.push(b'\n');
}

/// What [`allocated`] does besides the names.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Which inodes, and how many threads scan them.
    pub scan: BulkstatOptions,
    /// Compute the MD5 of every regular file's content (read whole).
    pub md5: bool,
}

/// Something of one inode that could not be read: its line is written
/// without it (no path: an orphan's name; no MD5: `0`).
#[derive(Debug)]
pub struct Problem {
    /// The inode.
    pub ino: u64,
    /// What was being read: "paths", "symlink target" or "content".
    pub what: &'static str,
    /// Why it failed.
    pub error: Error,
}

/// The records of one batch of inodes (in inode order, each inode's paths
/// sorted), and what could not be read of them.
#[derive(Debug, Default)]
pub struct Batch {
    /// One record per path of every inode (one without a path for an
    /// inode no directory names).
    pub records: Vec<Record>,
    /// What could not be read.
    pub problems: Vec<Problem>,
}

/// The record of `b` without a path, MD5 or link target.
fn base_record(b: &Bstat) -> Record {
    let t = FileType::from_mode(b.mode);
    Record {
        ino: b.ino,
        name_type: t,
        mode: b.mode,
        uid: b.uid,
        gid: b.gid,
        size: b.size,
        atime: b.atime,
        mtime: b.mtime,
        ctime: b.ctime,
        crtime: b.btime,
        ..Default::default()
    }
}

/// The MD5 of a regular file's content.
fn content_md5(fs: &Fs, inode: &Inode, buf: &mut Vec<u8>) -> Result<[u8; 16]> {
    let reader = FileReader::new(fs, inode)?;
    let mut h = Md5::new();
    buf.resize((reader.size().min(1 << 20) as usize).max(1), 0);
    let mut off = 0u64;
    loop {
        let n = reader.read_at(off, buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(h.finalize().into())
}

/// The records of one batch of scanned inodes.
fn batch_records(fs: &Fs, opts: &Options, cache: &PathCache, batch: &[Bstat]) -> Batch {
    let mut out = Batch::default();
    let mut buf = Vec::new();
    let pptr = paths::has_parent_pointers(fs);
    for b in batch {
        let base = base_record(b);
        let t = base.name_type;
        let is_dir = t == Some(FileType::Dir);
        // With parent pointers, an inode without an attribute fork has no
        // names (unless a directory: the root has no pointer).
        let wants_paths = !pptr || is_dir || b.forkoff != 0;
        let wants_inode =
            wants_paths || t == Some(FileType::Symlink) || (opts.md5 && t == Some(FileType::File));
        let mut problem = |what, error| {
            out.problems.push(Problem {
                ino: b.ino,
                what,
                error,
            })
        };
        let inode = if wants_inode {
            match fs.inode(Ino(b.ino)) {
                Ok(i) => Some(i),
                Err(e) => {
                    problem("paths", e);
                    None
                }
            }
        } else {
            None
        };
        let mut names = Vec::new();
        let mut rec = base;
        if let Some(inode) = &inode {
            if wants_paths {
                match cache.paths(fs, inode) {
                    Ok(p) => names = p,
                    Err(e) => problem("paths", e),
                }
            }
            if t == Some(FileType::Symlink) {
                match symlink::read_link(fs, inode) {
                    Ok(l) => rec.link_target = Some(l),
                    Err(e) => problem("symlink target", e),
                }
            }
            if opts.md5 && t == Some(FileType::File) {
                match content_md5(fs, inode, &mut buf) {
                    Ok(d) => rec.md5 = Some(d),
                    Err(e) => problem("content", e),
                }
            }
        }
        if names.is_empty() {
            out.records.push(rec);
        } else {
            let last = names.len() - 1;
            for (k, p) in names.into_iter().enumerate() {
                let mut r = if k == last {
                    std::mem::take(&mut rec)
                } else {
                    rec.clone()
                };
                r.path = Some(p);
                out.records.push(r);
            }
        }
    }
    out
}

/// Every allocated inode of `fs` as body records: one per path (from
/// `cache`: parent pointers, or its index of every directory entry), an
/// orphan's record for an inode no directory names. Each batch of inodes
/// becomes a [`Batch`], turned into a `T` by `map` on the scanning thread
/// that read it (format it there), and `sink` receives the `T`s on the
/// calling thread in inode order. An error of `sink` stops the scan.
/// Metadata inodes are not reported (as bulkstat).
pub fn allocated<T: Send>(
    fs: &Fs,
    opts: &Options,
    cache: &PathCache,
    map: impl Fn(Batch) -> T + Sync,
    sink: impl FnMut(T) -> Result<()>,
) -> Result<ScanStats> {
    scan::for_each_mapped(
        fs,
        &opts.scan,
        |batch| map(batch_records(fs, opts, cache, batch)),
        sink,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rec: &Record, fmt: &Format) -> String {
        let mut out = Vec::new();
        write_line(&mut out, rec, fmt);
        String::from_utf8(out).expect("utf-8")
    }

    fn file() -> Record {
        Record {
            path: Some(b"/a/b".to_vec()),
            ino: 131,
            name_type: Some(FileType::File),
            mode: 0o100644,
            uid: 1000,
            gid: 100,
            size: 3,
            atime: 1_700_000_000_123_456_789,
            mtime: 981_173_106_000_000_000,
            ctime: 5,
            crtime: 0,
            ..Default::default()
        }
    }

    #[test]
    fn a_regular_file_as_fls_writes_it() {
        assert_eq!(
            line(&file(), &Format::default()),
            "0|/a/b|131|r/rrw-r--r--|1000|100|3|1700000000.123456789|981173106|0.000000005|0\n"
        );
        let fmt = Format {
            seconds: true,
            ..Default::default()
        };
        assert_eq!(
            line(&file(), &fmt),
            "0|/a/b|131|r/rrw-r--r--|1000|100|3|1700000000|981173106|0|0\n"
        );
    }

    #[test]
    fn mode_strings_match_tsk() {
        let m = |t, mode| String::from_utf8(mode_string(t, mode).to_vec()).unwrap();
        assert_eq!(m(Some(FileType::Dir), 0o40755), "d/drwxr-xr-x");
        assert_eq!(m(Some(FileType::Dir), 0o41777), "d/drwxrwxrwt");
        assert_eq!(m(Some(FileType::Dir), 0o44755), "d/drwsr-xr-x");
        assert_eq!(m(Some(FileType::Symlink), 0o120777), "l/lrwxrwxrwx");
        assert_eq!(m(Some(FileType::CharDev), 0o20644), "c/crw-r--r--");
        assert_eq!(m(Some(FileType::BlockDev), 0o60644), "b/brw-r--r--");
        assert_eq!(m(Some(FileType::Fifo), 0o10644), "p/prw-r--r--");
        assert_eq!(m(Some(FileType::Socket), 0o140755), "s/hrwxr-xr-x");
        assert_eq!(m(Some(FileType::File), 0o106644), "r/rrwSr-Sr--");
        assert_eq!(m(Some(FileType::File), 0o101644), "r/rrw-r--r-T");
        assert_eq!(m(None, 0), "-/----------");
    }

    #[test]
    fn names_are_escaped_for_mactime_or_plaso() {
        let mut r = file();
        r.path = Some(b"/x|y z%41\n".to_vec());
        assert!(line(&r, &Format::default()).starts_with("0|/x%7Cy z%2541%0A|131|"));
        let fmt = Format {
            escape: Escape::Backslash,
            ..Default::default()
        };
        r.path = Some(b"/x|y\\z\x01".to_vec());
        assert!(line(&r, &fmt).starts_with("0|/x\\|y\\\\z\\x01|131|"));
    }

    #[test]
    fn links_orphans_deleted_and_prefixes() {
        let mut r = file();
        r.name_type = Some(FileType::Symlink);
        r.mode = 0o120777;
        r.path = Some(b"/sl".to_vec());
        r.link_target = Some(b"a|b".to_vec());
        assert!(line(&r, &Format::default()).starts_with("0|/sl -> a%7Cb|131|l/lrwxrwxrwx|"));
        let fmt = Format {
            prefix: b"/mnt/".to_vec(),
            ..Default::default()
        };
        assert!(line(&r, &fmt).starts_with("0|/mnt/sl -> a%7Cb|"));
        // A deleted record with no name and little metadata.
        let d = Record {
            ino: 77,
            status: Status::Deleted,
            mode: 0o100600,
            ctime: 1_000_000_000_500_000_000,
            ..Default::default()
        };
        assert_eq!(
            line(&d, &Format::default()),
            "0|/$OrphanFiles/OrphanFile-77 (deleted)|77|-/rrw-------|0|0|0|0|0|1000000000.500000000|0\n"
        );
        let d = Record {
            path: Some(b"/old".to_vec()),
            status: Status::DeletedRealloc,
            name_type: Some(FileType::File),
            md5: Some([0xab; 16]),
            ..d
        };
        assert_eq!(
            line(&d, &Format::default()),
            format!(
                "{}|/old (deleted-realloc)|77|r/rrw-------|0|0|0|0|0|1000000000.500000000|0\n",
                "ab".repeat(16)
            )
        );
    }

    #[test]
    fn times_before_the_epoch_and_past_2038() {
        let mut out = Vec::new();
        push_time(&mut out, -1_500_000_000, false);
        out.push(b' ');
        push_time(&mut out, -1_500_000_000, true);
        out.push(b' ');
        // bigtime's last second.
        push_time(&mut out, 16_299_260_425_999_999_999, false);
        assert_eq!(out, b"-1.500000000 -2 16299260425.999999999");
    }
}

//! A streaming reader of tar archives: POSIX ustar, pax extended headers
//! (local and global), GNU long names, and sparse files in the GNU header
//! format and the three GNU pax forms (0.0, 0.1, 1.0).
//!
//! Memory per entry is its header, its names, its xattrs and its sparse map;
//! each is bounded by the archive bytes that hold it and by [`MAX_META`].
//! File data is never buffered: [`TarReader::data`] streams it. An archive
//! that ends before its end-of-archive marker is an error naming the entry.

use std::io::Read;

use super::tar_pax::{apply_record, pax_records, Pending};
use crate::error::{Error, Location, Result};
use crate::inode::Timestamp;

/// Largest pax header or GNU long name accepted.
pub const MAX_META: u64 = 16 << 20;
pub(super) const BLOCK: usize = 512;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TarKind {
    /// A regular file.
    File,
    /// A hard link to an earlier entry's path.
    HardLink(Vec<u8>),
    /// A symbolic link.
    Symlink(Vec<u8>),
    /// A character device (major, minor).
    CharDev(u32, u32),
    /// A block device (major, minor).
    BlockDev(u32, u32),
    /// A directory.
    Dir,
    /// A named pipe.
    Fifo,
}

/// One archive member, its data not yet read.
#[derive(Debug, Clone)]
pub struct TarEntry {
    /// Path as stored (not yet normalised).
    pub path: Vec<u8>,
    /// Kind and link target or device numbers.
    pub kind: TarKind,
    /// Permission bits (no file type).
    pub mode: u16,
    /// Owner (numeric).
    pub uid: u32,
    /// Group (numeric).
    pub gid: u32,
    /// Modification time.
    pub mtime: Timestamp,
    /// Access time, when recorded.
    pub atime: Option<Timestamp>,
    /// Change time, when recorded.
    pub ctime: Option<Timestamp>,
    /// Creation time, when recorded (`LIBARCHIVE.creationtime`).
    pub crtime: Option<Timestamp>,
    /// Logical file size (holes included).
    pub size: u64,
    /// Extended attributes with their namespace prefix.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Data segments (offset, length) of a sparse file; `None`: all of it.
    pub sparse: Option<Vec<(u64, u64)>>,
    /// Byte offset of the entry's header in the (decompressed) stream.
    pub offset: u64,
}

impl TarEntry {
    /// Data segments in order: the sparse map, or the whole file.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        match &self.sparse {
            Some(m) => m.clone(),
            None if self.size > 0 => vec![(0, self.size)],
            None => Vec::new(),
        }
    }

    /// The path, printable.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

/// Reads entries one at a time from `R`.
pub struct TarReader<R: Read> {
    pub(super) r: R,
    pub(super) pos: u64,
    /// Archive bytes of the current entry's data still unread (padding included).
    pub(super) left: u64,
    /// Bytes of real data among them.
    pub(super) data_left: u64,
    globals: Vec<(Vec<u8>, Vec<u8>)>,
    last: String,
    done: bool,
    /// Kept for skipping data (allocated once).
    skip_buf: Vec<u8>,
}

pub(super) fn corrupt(at: u64, what: impl Into<String>) -> Error {
    Error::corrupt("tar archive", Location::Other(format!("byte {at}")), what)
}

/// Parses an octal or GNU base-256 numeric field.
pub fn number(field: &[u8]) -> Option<u64> {
    if let Some(&first) = field.first() {
        if first & 0x80 != 0 {
            if first == 0xff {
                return None; // negative: not a size, id or device number
            }
            let mut v: u128 = u128::from(first & 0x7f);
            for &b in &field[1..] {
                v = (v << 8) | u128::from(b);
                if v > u128::from(u64::MAX) {
                    return None;
                }
            }
            return Some(v as u64);
        }
    }
    // Octal digits, optionally surrounded by spaces and NULs; parsed in
    // place (this runs several times per header).
    let start = field.iter().position(|&b| b != b' ' && b != 0);
    let Some(start) = start else {
        return Some(0);
    };
    let mut v: u64 = 0;
    for &b in &field[start..] {
        if b == b' ' || b == 0 {
            break;
        }
        if !(b'0'..=b'7').contains(&b) {
            return None;
        }
        v = v.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// A numeric time field (octal or base-256, possibly negative).
fn time_field(field: &[u8]) -> Option<i64> {
    if field.first() == Some(&0xff) {
        let mut v: i64 = -1;
        for &b in &field[field.len().saturating_sub(8)..] {
            v = (v << 8) | i64::from(b);
        }
        return Some(v);
    }
    number(field).and_then(|v| i64::try_from(v).ok())
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

fn checksum_ok(h: &[u8; BLOCK]) -> bool {
    let Some(want) = number(&h[148..156]) else {
        return false;
    };
    // The checksum field itself counts as eight spaces. Branch-free sums
    // over the whole block, then the field swapped for the spaces.
    // 512 bytes never overflow 32-bit sums, which vectorise well.
    let unsigned_all: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let signed_all: i32 = h.iter().map(|&b| i32::from(b as i8)).sum();
    let field = &h[148..156];
    let unsigned = unsigned_all - field.iter().map(|&b| u32::from(b)).sum::<u32>() + 8 * 32;
    let signed = signed_all - field.iter().map(|&b| i32::from(b as i8)).sum::<i32>() + 8 * 32;
    want == u64::from(unsigned) || i64::try_from(want).is_ok_and(|w| w == i64::from(signed))
}

impl<R: Read> TarReader<R> {
    /// A reader at the start of an archive.
    pub fn new(r: R) -> TarReader<R> {
        TarReader {
            r,
            pos: 0,
            left: 0,
            data_left: 0,
            globals: Vec::new(),
            last: "the start of the archive".into(),
            done: false,
            skip_buf: Vec::new(),
        }
    }

    /// Fills `buf` completely; `Ok(false)` on a clean end of stream before
    /// the first byte.
    fn fill(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => {
                    return Err(corrupt(
                        self.pos + got as u64,
                        format!("archive ends inside {} (truncated?)", what()),
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                    ) =>
                {
                    // The decompressor found a damaged or cut stream.
                    return Err(corrupt(
                        self.pos + got as u64,
                        format!("{e} inside {} (truncated or damaged?)", what()),
                    ));
                }
                Err(e) => {
                    return Err(Error::Io(std::io::Error::new(
                        e.kind(),
                        format!("reading the archive inside {}: {e}", what()),
                    )))
                }
            }
        }
        self.pos += buf.len() as u64;
        Ok(true)
    }

    pub(super) fn block(&mut self, buf: &mut [u8; BLOCK], what: &dyn Fn() -> String) -> Result<()> {
        if !self.fill(buf, what)? {
            return Err(corrupt(
                self.pos,
                format!("archive ends inside {} (truncated?)", what()),
            ));
        }
        Ok(())
    }

    /// Skips whatever is left of the current entry's data, in reads of up
    /// to 64 KiB (the error names the entry only when one happens).
    fn skip_rest(&mut self) -> Result<()> {
        // Usually only the padding (under one block) is left: a small stack
        // buffer for that; skipped data goes through one kept heap buffer.
        let mut small = [0u8; BLOCK];
        let mut big = std::mem::take(&mut self.skip_buf);
        let buf: &mut [u8] = if self.left <= BLOCK as u64 {
            &mut small
        } else {
            big.resize(64 << 10, 0);
            &mut big
        };
        while self.left > 0 {
            let n = self.left.min(buf.len() as u64) as usize;
            let last = std::mem::take(&mut self.last);
            let r = self.fill(&mut buf[..n], &|| format!("the data of {last}"));
            self.last = last;
            if !r? {
                return Err(corrupt(
                    self.pos,
                    format!("archive ends inside the data of {} (truncated?)", self.last),
                ));
            }
            self.left -= n as u64;
        }
        self.skip_buf = big;
        self.data_left = 0;
        Ok(())
    }

    /// Reads a whole small member body (pax header, long name).
    fn body(&mut self, size: u64, what: &str) -> Result<Vec<u8>> {
        if size > MAX_META {
            return Err(corrupt(
                self.pos,
                format!("{what} of {size} bytes is too large"),
            ));
        }
        let mut out = vec![0u8; (size as usize).next_multiple_of(BLOCK)];
        let last = self.last.clone();
        let desc = || format!("the {what} after {last}");
        if !out.is_empty() && !self.fill(&mut out, &desc)? {
            return Err(corrupt(self.pos, format!("archive ends inside {}", desc())));
        }
        out.truncate(size as usize);
        Ok(out)
    }

    /// The next entry, or `None` after the end-of-archive marker.
    pub fn next_entry(&mut self) -> Result<Option<TarEntry>> {
        self.skip_rest()?;
        if self.done {
            return Ok(None);
        }
        let mut p = Pending::default();
        for (k, v) in &self.globals {
            apply_record(&mut p, k, v).map_err(|e| corrupt(self.pos, e))?;
        }
        let mut h = [0u8; BLOCK];
        loop {
            let offset = self.pos;
            let last = self.last.clone();
            if !self.fill(&mut h, &|| format!("the header after {last}"))? {
                return Err(corrupt(
                    offset,
                    format!(
                        "archive ends after {last} without an end-of-archive marker (truncated?)"
                    ),
                ));
            }
            if h.iter().all(|&b| b == 0) {
                // End of archive: a second zero block should follow; a lone
                // one at the very end is accepted, as GNU tar does.
                let mut second = [0u8; BLOCK];
                let _ = self.fill(&mut second, &|| "the end-of-archive marker".into())?;
                self.done = true;
                return Ok(None);
            }
            if !checksum_ok(&h) {
                return Err(corrupt(
                    offset,
                    format!("bad header checksum after {last} (not a tar archive, or corrupt)"),
                ));
            }
            let size = number(&h[124..136]).ok_or_else(|| corrupt(offset, "bad size field"))?;
            let flag = h[156];
            match flag {
                b'x' | b'g' => {
                    let body = self.body(size, "pax header")?;
                    let recs = pax_records(&body).map_err(|e| corrupt(offset, e))?;
                    for (k, v) in recs {
                        if flag == b'g' {
                            apply_record(&mut p, &k, &v).map_err(|e| corrupt(offset, e))?;
                            self.globals.push((k, v));
                        } else {
                            apply_record(&mut p, &k, &v).map_err(|e| corrupt(offset, e))?;
                        }
                    }
                    continue;
                }
                b'L' | b'K' => {
                    let body = self.body(size, "GNU long name")?;
                    let name = cstr(&body).to_vec();
                    if flag == b'L' {
                        p.long_name = Some(name);
                    } else {
                        p.long_link = Some(name);
                    }
                    continue;
                }
                b'V' => {
                    self.body(size.min(MAX_META), "volume label")?;
                    continue;
                }
                b'M' | b'N' => {
                    return Err(Error::Unsupported(format!(
                        "tar entry type '{}' (multi-volume or old GNU names) after {last}",
                        flag as char
                    )))
                }
                _ => {}
            }
            return self.entry(&h, p, offset, size).map(Some);
        }
    }

    fn entry(&mut self, h: &[u8; BLOCK], p: Pending, offset: u64, size: u64) -> Result<TarEntry> {
        let gnu = &h[257..265] == b"ustar  \0";
        let ustar = &h[257..263] == b"ustar\0";
        let mut path = cstr(&h[0..100]).to_vec();
        if ustar && h[345] != 0 {
            let mut full = cstr(&h[345..500]).to_vec();
            full.push(b'/');
            full.extend_from_slice(&path);
            path = full;
        }
        if let Some(n) = p.long_name.clone() {
            path = n;
        }
        if let Some(n) = p.path.clone() {
            path = n;
        }
        if let Some(n) = p.sparse_name.clone() {
            path = n;
        }
        let link = p
            .linkpath
            .clone()
            .or(p.long_link.clone())
            .unwrap_or_else(|| cstr(&h[157..257]).to_vec());
        let field = |r: std::ops::Range<usize>, what: &str| {
            number(&h[r]).ok_or_else(|| corrupt(offset, format!("bad {what} field")))
        };
        let dev = |major: Option<u64>, minor: Option<u64>| -> Result<(u32, u32)> {
            let ma = major.map_or_else(|| field(329..337, "devmajor"), Ok)?;
            let mi = minor.map_or_else(|| field(337..345, "devminor"), Ok)?;
            Ok((ma as u32, mi as u32))
        };
        let flag = h[156];
        let kind = match flag {
            b'1' => TarKind::HardLink(link),
            b'2' => TarKind::Symlink(link),
            b'3' => {
                let (a, b) = dev(p.devmajor, p.devminor)?;
                TarKind::CharDev(a, b)
            }
            b'4' => {
                let (a, b) = dev(p.devmajor, p.devminor)?;
                TarKind::BlockDev(a, b)
            }
            b'5' | b'D' => TarKind::Dir,
            b'6' => TarKind::Fifo,
            b'0' | 0 if path.ends_with(b"/") => TarKind::Dir,
            _ => TarKind::File,
        };
        let mode = (field(100..108, "mode")? & 0o7777) as u16;
        let uid = p.uid.map_or_else(|| field(108..116, "uid"), Ok)?;
        let gid = p.gid.map_or_else(|| field(116..124, "gid"), Ok)?;
        let header_time =
            |r: std::ops::Range<usize>| time_field(&h[r]).map(|sec| Timestamp { sec, nsec: 0 });
        let mtime = match p.mtime {
            Some(t) => t,
            None => header_time(136..148).ok_or_else(|| corrupt(offset, "bad mtime field"))?,
        };
        let gnu_time = |r: std::ops::Range<usize>| {
            if gnu && h[r.start] != 0 {
                header_time(r)
            } else {
                None
            }
        };
        let stored = p.size.unwrap_or(size);
        let mut e = TarEntry {
            path,
            kind,
            mode,
            uid: u32::try_from(uid).map_err(|_| corrupt(offset, "uid out of range"))?,
            gid: u32::try_from(gid).map_err(|_| corrupt(offset, "gid out of range"))?,
            mtime,
            atime: p.atime.or_else(|| gnu_time(345..357)),
            ctime: p.ctime.or_else(|| gnu_time(357..369)),
            crtime: p.crtime,
            size: stored,
            xattrs: p.xattrs.clone(),
            sparse: None,
            offset,
        };
        self.last = e.display();
        // Hard links, symlinks, devices and directories carry no data we use.
        self.left = stored.next_multiple_of(BLOCK as u64);
        self.data_left = if e.kind == TarKind::File { stored } else { 0 };
        if e.kind != TarKind::File {
            e.size = 0;
            return Ok(e);
        }
        if flag == b'S' {
            self.gnu_sparse(h, &mut e)?;
        } else if p.sparse_major == Some(1) {
            self.pax_sparse_map(&mut e, &p)?;
        } else if let Some(map) = p.sparse_map.clone() {
            e.size = p.sparse_size.unwrap_or(stored);
            e.sparse = Some(map);
        }
        if let Some(map) = &e.sparse {
            let mut end = 0u64;
            let mut total = 0u64;
            for &(o, n) in map {
                if o < end || o.checked_add(n).is_none_or(|x| x > e.size) {
                    return Err(corrupt(offset, format!("{}: bad sparse map", e.display())));
                }
                end = o + n;
                total += n;
            }
            if total != self.data_left {
                return Err(corrupt(
                    offset,
                    format!(
                        "{}: sparse map covers {total} bytes, archive holds {}",
                        e.display(),
                        self.data_left
                    ),
                ));
            }
        }
        Ok(e)
    }

    /// Streams the current entry's data: `each(file_offset, bytes)` per chunk,
    /// at most `buf.len()` bytes at a time, in increasing offset order.
    pub fn data(
        &mut self,
        e: &TarEntry,
        buf: &mut [u8],
        mut each: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for (start, len) in e.segments() {
            let mut off = start;
            while off < start + len {
                let n = ((start + len - off) as usize).min(buf.len());
                if !self.fill(&mut buf[..n], &|| format!("the data of {}", e.display()))? {
                    return Err(corrupt(
                        self.pos,
                        format!(
                            "archive ends inside the data of {} (truncated?)",
                            e.display()
                        ),
                    ));
                }
                self.left -= n as u64;
                self.data_left -= n as u64;
                each(off, &buf[..n])?;
                off += n as u64;
            }
        }
        // Padding to the block.
        let pad = (self.left % BLOCK as u64) as usize;
        if pad > 0 {
            let mut z = [0u8; BLOCK];
            let _ = self.fill(&mut z[..pad], &|| format!("the padding of {}", e.display()))?;
            self.left -= pad as u64;
        }
        Ok(())
    }
}

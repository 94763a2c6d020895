//! The VHDX metadata log ([MS-VHDX] 2.3): finding the active sequence of
//! entries, the writes they describe (replayed in memory for a read-only
//! open, onto the file for a writable one), and encoding new entries.
//!
//! The log is a circular buffer of 4 KiB sectors. An entry is a header
//! sector (64-byte header and the first 126 descriptors), more descriptor
//! sectors if needed, then one data sector per data descriptor; its
//! CRC-32C covers the whole entry. The active sequence ends at the valid
//! entry with the highest sequence number and starts at the entry its
//! `tail` names; each entry in it has the next sequence number.

use super::header::{crc_ok, set_crc, Region};
use super::MIB;
use crate::bytes::{le32, le64};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

pub(super) const SECTOR: u64 = 4096;
/// Largest log read into memory.
const LOG_MAX: u64 = 1 << 30;

/// One write a log entry describes.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// A 4 KiB sector at this file offset.
    Data(u64, Box<[u8]>),
    /// Zeros over this many bytes at this file offset.
    Zero(u64, u64),
}

/// The active sequence, as writes to apply in order.
#[derive(Debug, Default)]
pub(super) struct Replay {
    pub ops: Vec<Op>,
    /// The file must be at least this long (what was flushed when the last
    /// entry was written).
    pub flushed: u64,
    /// The file holds its structures up to here.
    pub last: u64,
    /// Entries in the sequence.
    pub entries: usize,
    /// Sequence number of the last entry.
    pub seq: u64,
}

struct Entry {
    seq: u64,
    len: u64,
    tail: u64,
    flushed: u64,
    last: u64,
    ops: Vec<Op>,
}

/// Reads and checks the log of the file `file` (the region `log`) whose
/// current header has the log GUID `guid`; the active sequence, if any.
pub(super) fn read(
    file: &dyn Device,
    log: Region,
    guid: [u8; 16],
    what: &str,
) -> Result<Option<Replay>> {
    let flen = file.len();
    let bad = |d: String| {
        crate::disk::corrupt(
            "VHDX log",
            format!("{what}: log at byte {:#x}", log.offset),
            d,
        )
    };
    if log.offset < MIB
        || !log.offset.is_multiple_of(MIB)
        || log.length == 0
        || !log.length.is_multiple_of(MIB)
    {
        return Err(bad(format!(
            "{} bytes at byte {:#x}: not whole MiB past the header section",
            log.length, log.offset
        )));
    }
    if log.offset.checked_add(log.length).is_none_or(|e| e > flen) {
        return Err(bad(format!(
            "{} bytes past the end of the {flen}-byte file",
            log.length
        )));
    }
    if log.length > LOG_MAX {
        return Err(Error::Unsupported(format!(
            "{what}: a VHDX log of {} bytes (at most {LOG_MAX} are read)",
            log.length
        )));
    }
    let mut buf = vec![0u8; log.length as usize];
    file.read_at(&mut buf, log.offset)?;
    let l = log.length;
    // Every position that holds a valid entry. Checksums are budgeted so
    // that a log of forged headers cannot take quadratic time.
    let mut found: BTreeMap<u64, Entry> = BTreeMap::new();
    let mut budget = 16 * l;
    let mut pos = 0u64;
    while pos < l {
        match parse_entry(&buf, pos, guid, log, &mut budget) {
            Some(e) => {
                let next = pos + e.len;
                found.insert(pos, e);
                pos = next;
            }
            None => pos += SECTOR,
        }
        if budget == 0 {
            return Err(bad("too many damaged entries to search".into()));
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    // Heads by falling sequence number: the first whose chain from its
    // tail is whole is the active sequence.
    let mut heads: Vec<(u64, u64)> = found.iter().map(|(p, e)| (e.seq, *p)).collect();
    heads.sort_unstable_by(|a, b| b.cmp(a));
    let mut why = String::new();
    for &(_, head) in &heads {
        let h = &found[&head];
        let mut chain = Vec::new();
        let mut p = h.tail;
        let mut prev: Option<u64> = None;
        let ok = loop {
            let Some(e) = found.get(&p) else {
                why = format!("the entry at log offset {p:#x} (the tail of the entry at {head:#x}) is not valid");
                break false;
            };
            if prev.is_some_and(|s| s.checked_add(1) != Some(e.seq)) {
                why = format!("sequence numbers do not follow each other at log offset {p:#x}");
                break false;
            }
            chain.push(p);
            if p == head {
                break true;
            }
            if chain.len() > found.len() {
                why = "the chain of entries loops".into();
                break false;
            }
            prev = Some(e.seq);
            p = (p + e.len) % l;
        };
        if ok {
            let mut r = Replay {
                entries: chain.len(),
                seq: h.seq,
                flushed: h.flushed,
                last: h.last,
                ops: Vec::new(),
            };
            for p in chain {
                if let Some(e) = found.remove(&p) {
                    r.ops.extend(e.ops);
                }
            }
            if r.flushed > flen {
                return Err(bad(format!(
                    "the log says the file was flushed at {} bytes; it is {flen} bytes (truncated)",
                    r.flushed
                )));
            }
            return Ok(Some(r));
        }
    }
    Err(bad(format!("no whole sequence of entries: {why}")))
}

/// The 4 KiB sector of the circular log at `pos`.
fn sector(buf: &[u8], pos: u64) -> &[u8] {
    let p = (pos % buf.len() as u64) as usize;
    &buf[p..p + SECTOR as usize]
}

fn parse_entry(
    buf: &[u8],
    pos: u64,
    guid: [u8; 16],
    log: Region,
    budget: &mut u64,
) -> Option<Entry> {
    let l = buf.len() as u64;
    let h = sector(buf, pos);
    if &h[..4] != b"loge" || h[32..48] != guid {
        return None;
    }
    let len = u64::from(le32(h, 8));
    let tail = u64::from(le32(h, 12));
    let seq = le64(h, 16);
    let count = u64::from(le32(h, 24));
    if len == 0
        || !len.is_multiple_of(SECTOR)
        || len > l
        || seq == 0
        || !tail.is_multiple_of(SECTOR)
        || tail >= l
    {
        return None;
    }
    let desc_sectors = (count + 2).div_ceil(128);
    if desc_sectors * SECTOR > len {
        return None;
    }
    // The entry, gathered across the end of the buffer.
    *budget = budget.saturating_sub(len.max(SECTOR));
    let mut e = Vec::with_capacity(len as usize);
    let mut p = pos;
    while (e.len() as u64) < len {
        e.extend_from_slice(sector(buf, p));
        p += SECTOR;
    }
    if !crc_ok(&e, 4) {
        return None;
    }
    let mut ops = Vec::with_capacity(count as usize);
    let mut data_k = 0u64;
    for i in 0..count as usize {
        let d = &e[64 + 32 * i..96 + 32 * i];
        let off = le64(d, 16);
        if le64(d, 24) != seq || !off.is_multiple_of(SECTOR) {
            return None;
        }
        let (op, n) = match &d[..4] {
            b"desc" => {
                let at = (desc_sectors + data_k) * SECTOR;
                if at + SECTOR > len {
                    return None;
                }
                let s = &e[at as usize..(at + SECTOR) as usize];
                let sseq = (u64::from(le32(s, 4)) << 32) | u64::from(le32(s, 4092));
                if &s[..4] != b"data" || sseq != seq {
                    return None;
                }
                data_k += 1;
                let mut sec = vec![0u8; SECTOR as usize].into_boxed_slice();
                sec[..8].copy_from_slice(&d[8..16]);
                sec[8..4092].copy_from_slice(&s[8..4092]);
                sec[4092..].copy_from_slice(&d[4..8]);
                (Op::Data(off, sec), SECTOR)
            }
            b"zero" => {
                let n = le64(d, 8);
                if !n.is_multiple_of(SECTOR) {
                    return None;
                }
                (Op::Zero(off, n), n)
            }
            _ => return None,
        };
        // A write into the header section or the log itself is never
        // valid (and would let a log rewrite what is being trusted).
        let end = off.checked_add(n)?;
        if off < MIB || (off < log.offset + log.length && log.offset < end) {
            return None;
        }
        ops.push(op);
    }
    Some(Entry {
        seq,
        len,
        tail,
        flushed: le64(h, 48),
        last: le64(h, 56),
        ops,
    })
}

/// The file as the log's writes leave it, in memory: what a read-only open
/// reads through.
pub(super) struct Overlay {
    base: Arc<dyn Device>,
    ops: Vec<Op>,
    len: u64,
}

impl Overlay {
    pub fn new(base: Arc<dyn Device>, r: &Replay) -> Overlay {
        let mut len = base.len().max(r.last);
        for op in &r.ops {
            let end = match op {
                Op::Data(o, _) => o + SECTOR,
                Op::Zero(o, n) => o + n,
            };
            len = len.max(end);
        }
        Overlay {
            base,
            ops: r.ops.clone(),
            len,
        }
    }
}

impl Device for Overlay {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of the VHDX file",
                )
            })?;
        let blen = self.base.len();
        if off < blen {
            let n = (blen.min(end) - off) as usize;
            self.base.read_at(&mut buf[..n], off)?;
            buf[n..].fill(0);
        } else {
            buf.fill(0);
        }
        for op in &self.ops {
            let (o, n) = match op {
                Op::Data(o, _) => (*o, SECTOR),
                Op::Zero(o, n) => (*o, *n),
            };
            let lo = o.max(off);
            let hi = (o + n).min(end);
            if lo >= hi {
                continue;
            }
            let dst = &mut buf[(lo - off) as usize..(hi - off) as usize];
            match op {
                Op::Data(_, d) => dst.copy_from_slice(&d[(lo - o) as usize..(hi - o) as usize]),
                Op::Zero(..) => dst.fill(0),
            }
        }
        Ok(())
    }

    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the VHDX file is open read-only",
        ))
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// A log entry of sequence number `seq` writing the 4 KiB `sectors` (file
/// offset, bytes) under `guid`; `tail` is the log offset of the first entry
/// of its sequence, `file_len` the file's (flushed) length.
pub(super) fn encode_entry(
    guid: [u8; 16],
    seq: u64,
    tail: u64,
    file_len: u64,
    sectors: &[(u64, &[u8])],
) -> Vec<u8> {
    let count = sectors.len() as u64;
    let desc_sectors = (count + 2).div_ceil(128);
    let len = (desc_sectors + count) * SECTOR;
    let mut e = vec![0u8; len as usize];
    e[..4].copy_from_slice(b"loge");
    e[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    e[12..16].copy_from_slice(&(tail as u32).to_le_bytes());
    e[16..24].copy_from_slice(&seq.to_le_bytes());
    e[24..28].copy_from_slice(&(count as u32).to_le_bytes());
    e[32..48].copy_from_slice(&guid);
    e[48..56].copy_from_slice(&file_len.to_le_bytes());
    e[56..64].copy_from_slice(&file_len.to_le_bytes());
    for (i, (off, data)) in sectors.iter().enumerate() {
        let d = 64 + 32 * i;
        e[d..d + 4].copy_from_slice(b"desc");
        e[d + 4..d + 8].copy_from_slice(&data[4092..4096]);
        e[d + 8..d + 16].copy_from_slice(&data[..8]);
        e[d + 16..d + 24].copy_from_slice(&off.to_le_bytes());
        e[d + 24..d + 32].copy_from_slice(&seq.to_le_bytes());
        let s = ((desc_sectors + i as u64) * SECTOR) as usize;
        e[s..s + 4].copy_from_slice(b"data");
        e[s + 4..s + 8].copy_from_slice(&((seq >> 32) as u32).to_le_bytes());
        e[s + 8..s + 4092].copy_from_slice(&data[8..4092]);
        e[s + 4092..s + 4096].copy_from_slice(&(seq as u32).to_le_bytes());
    }
    set_crc(&mut e, 4);
    e
}

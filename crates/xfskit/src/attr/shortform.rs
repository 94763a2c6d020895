//! Shortform attributes: a list packed into the inode's attr fork.
//!
//! Layout: a 4-byte header (total size be16, entry count u8, pad u8), then
//! entries of (name length u8, value length u8, flags u8, name, value).

use super::{loc, namespace_of, RawEntry, ValueRef};
use crate::error::{Error, Result};

/// Size of the shortform header.
pub(crate) const SF_HDR: usize = 4;
/// Offset of the total size (be16, header included).
const SF_TOTSIZE: usize = 0;
/// Offset of the entry count (u8).
pub(crate) const SF_COUNT: usize = 2;
/// Size of an entry's fixed part (namelen, valuelen, flags).
pub(crate) const SF_ENTRY_HDR: usize = 3;

fn corrupt(ino: u64, detail: String) -> Error {
    Error::corrupt("shortform attributes", loc(ino, 0), detail)
}

/// Decodes a shortform attr fork.
pub(crate) fn parse(ino: u64, fork: &[u8]) -> Result<Vec<RawEntry>> {
    if fork.len() < SF_HDR {
        return Err(corrupt(
            ino,
            format!("fork of {} bytes cannot hold the header", fork.len()),
        ));
    }
    let totsize = usize::from(u16::from_be_bytes([fork[SF_TOTSIZE], fork[SF_TOTSIZE + 1]]));
    let count = usize::from(fork[SF_COUNT]);
    if totsize < SF_HDR || totsize > fork.len() {
        return Err(corrupt(
            ino,
            format!("total size {totsize} outside 4..={}", fork.len()),
        ));
    }
    let body = &fork[..totsize];
    let mut off = SF_HDR;
    // count is a u8, so this reservation is bounded by 255.
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let Some(h) = body.get(off..off + SF_ENTRY_HDR) else {
            return Err(corrupt(
                ino,
                format!("entry {i} at byte {off} runs past the total size {totsize}"),
            ));
        };
        let (namelen, valuelen, flags) = (usize::from(h[0]), usize::from(h[1]), h[2]);
        let name_at = off + SF_ENTRY_HDR;
        let end = name_at + namelen + valuelen;
        if end > totsize {
            return Err(corrupt(
                ino,
                format!("entry {i} at byte {off} ends at {end}, past the total size {totsize}"),
            ));
        }
        if namelen == 0 {
            return Err(corrupt(
                ino,
                format!("entry {i} at byte {off} has an empty name"),
            ));
        }
        let ns = namespace_of(flags).map_err(|d| corrupt(ino, format!("entry {i}: {d}")))?;
        if let Some(ns) = ns {
            out.push(RawEntry {
                ns,
                name: body[name_at..name_at + namelen].to_vec(),
                value: ValueRef::Local(body[name_at + namelen..end].to_vec()),
                dablk: 0,
                hash: 0,
            });
        }
        off = end;
    }
    if off != totsize {
        return Err(corrupt(
            ino,
            format!("{count} entries end at byte {off}, the header says {totsize}"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::Namespace;

    fn fork(entries: &[(&[u8], &[u8], u8)]) -> Vec<u8> {
        let mut v = vec![0, 0, entries.len() as u8, 0];
        for (n, val, f) in entries {
            v.extend_from_slice(&[n.len() as u8, val.len() as u8, *f]);
            v.extend_from_slice(n);
            v.extend_from_slice(val);
        }
        let t = v.len() as u16;
        v[0..2].copy_from_slice(&t.to_be_bytes());
        v.resize(v.len() + 13, 0);
        v
    }

    #[test]
    fn decodes_namespaces_and_skips_incomplete() {
        let f = fork(&[
            (b"a", b"1", 0),
            (b"b", b"22", 2),
            (b"c", b"", 4),
            (b"d", b"x", 0x80),
        ]);
        let e = parse(1, &f).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].ns, &e[0].name[..]), (Namespace::User, &b"a"[..]));
        assert_eq!(e[1].ns, Namespace::Trusted);
        assert_eq!(e[2].ns, Namespace::Security);
        assert!(matches!(&e[1].value, ValueRef::Local(v) if v == b"22"));
    }

    #[test]
    fn rejects_bad_sizes_without_panicking() {
        let good = fork(&[(b"abc", b"value", 0), (b"x", b"y", 0)]);
        for i in 0..good.len() {
            for b in [0u8, 1, 0x7f, 0xff] {
                let mut f = good.clone();
                f[i] = b;
                let _ = parse(1, &f);
            }
        }
        for n in 0..good.len() {
            let _ = parse(1, &good[..n]);
        }
        let mut f = good.clone();
        f[2] = 3;
        assert!(matches!(
            parse(1, &f),
            Err(Error::Corrupt {
                what: "shortform attributes",
                ..
            })
        ));
    }
}

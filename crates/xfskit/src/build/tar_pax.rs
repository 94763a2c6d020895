//! Pax extended header records (POSIX.1-2001) and the vendor keys xfskit
//! reads: GNU sparse maps, `SCHILY.xattr.*`, `LIBARCHIVE.xattr.*` (base64
//! values, %-escaped names), `SCHILY.acl.access`/`default` (text ACLs turned
//! into the Linux xattr form) and `LIBARCHIVE.creationtime`.

use crate::inode::Timestamp;

/// Header values collected from pax records and GNU long-name members,
/// waiting for the entry they describe.
#[derive(Debug, Default, Clone)]
pub struct Pending {
    /// `path`.
    pub path: Option<Vec<u8>>,
    /// `linkpath`.
    pub linkpath: Option<Vec<u8>>,
    /// GNU `L` member.
    pub long_name: Option<Vec<u8>>,
    /// GNU `K` member.
    pub long_link: Option<Vec<u8>>,
    /// `size`.
    pub size: Option<u64>,
    /// `uid`.
    pub uid: Option<u64>,
    /// `gid`.
    pub gid: Option<u64>,
    /// `mtime`.
    pub mtime: Option<Timestamp>,
    /// `atime`.
    pub atime: Option<Timestamp>,
    /// `ctime`.
    pub ctime: Option<Timestamp>,
    /// `LIBARCHIVE.creationtime`.
    pub crtime: Option<Timestamp>,
    /// `SCHILY.devmajor`.
    pub devmajor: Option<u64>,
    /// `SCHILY.devminor`.
    pub devminor: Option<u64>,
    /// Extended attributes, in record order, one per name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// `GNU.sparse.major`.
    pub sparse_major: Option<u64>,
    /// `GNU.sparse.name`.
    pub sparse_name: Option<Vec<u8>>,
    /// `GNU.sparse.size` / `GNU.sparse.realsize`.
    pub sparse_size: Option<u64>,
    /// `GNU.sparse.map` (0.1) or offset/numbytes pairs (0.0).
    pub sparse_map: Option<Vec<(u64, u64)>>,
}

/// One pax record: key and value bytes.
pub type Record = (Vec<u8>, Vec<u8>);

/// Splits a pax header body into (key, value) records.
pub fn pax_records(body: &[u8]) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or("pax record without a length")?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("bad pax record length")?;
        if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err("bad pax record length".into());
        }
        let rec = &rest[sp + 1..len - 1];
        let eq = rec
            .iter()
            .position(|&b| b == b'=')
            .ok_or("pax record without '='")?;
        out.push((rec[..eq].to_vec(), rec[eq + 1..].to_vec()));
        rest = &rest[len..];
    }
    Ok(out)
}

fn text(v: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(v).map_err(|_| "non-text pax value".to_string())
}

fn uint(v: &[u8]) -> Result<u64, String> {
    text(v)?
        .trim()
        .parse()
        .map_err(|_| format!("bad pax number {:?}", String::from_utf8_lossy(v)))
}

/// Parses a pax time: decimal seconds with an optional fraction, maybe negative.
pub fn pax_time(v: &[u8]) -> Result<Timestamp, String> {
    let s = text(v)?.trim();
    let bad = || format!("bad pax time {s:?}");
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: i64 = int.parse().map_err(|_| bad())?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut nsec: u32 = 0;
    for (i, b) in frac.bytes().take(9).enumerate() {
        nsec += u32::from(b - b'0') * 10u32.pow(8 - i as u32);
    }
    Ok(if !neg {
        Timestamp { sec, nsec }
    } else if nsec == 0 {
        Timestamp { sec: -sec, nsec: 0 }
    } else {
        Timestamp {
            sec: -sec - 1,
            nsec: 1_000_000_000 - nsec,
        }
    })
}

/// Decodes standard base64 (padding optional).
pub fn base64(v: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(v.len() / 4 * 3 + 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in v {
        let d = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => return Err("bad base64 in LIBARCHIVE.xattr value".into()),
        };
        acc = (acc << 6) | u32::from(d);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// Undoes %XX escapes (libarchive escapes xattr names this way).
fn unescape(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if v[i] == b'%' && i + 2 < v.len() {
            if let (Some(a), Some(b)) = (hex(v[i + 1]), hex(v[i + 2])) {
                out.push((a * 16 + b) as u8);
                i += 3;
                continue;
            }
        }
        out.push(v[i]);
        i += 1;
    }
    out
}

fn put_xattr(p: &mut Pending, name: Vec<u8>, value: Vec<u8>) {
    match p.xattrs.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => p.xattrs.push((name, value)),
    }
}

/// ACL entry tags of the Linux xattr format.
const TAGS: &[(&str, &str, u16)] = &[
    ("user", "u", 0x01),
    ("group", "g", 0x04),
    ("mask", "m", 0x10),
    ("other", "o", 0x20),
];

/// Turns a text ACL (`user::rw-,user:1000:r--,group::r-x,mask::r-x,other::---`,
/// abbreviated or not, with star's optional numeric fourth field) into the
/// Linux `system.posix_acl_*` value. Named entries must use numeric ids.
pub fn acl_from_text(v: &[u8]) -> Result<Vec<u8>, String> {
    let s = text(v)?;
    let bad = |e: &str| format!("cannot read ACL entry {e:?} (names must be numeric ids)");
    let mut entries: Vec<(u16, u32, u16)> = Vec::new();
    for e in s
        .split([',', '\n'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let e = e.split('#').next().unwrap_or("").trim();
        let f: Vec<&str> = e.split(':').collect();
        if f.len() < 3 {
            return Err(bad(e));
        }
        let &(_, _, base) = TAGS
            .iter()
            .find(|t| t.0 == f[0] || t.1 == f[0])
            .ok_or_else(|| bad(e))?;
        let qualifier = f.get(3).copied().filter(|q| !q.is_empty()).unwrap_or(f[1]);
        let (tag, id) = if f[1].is_empty() {
            (base, u32::MAX)
        } else if base == 0x01 || base == 0x04 {
            (base << 1, qualifier.parse().map_err(|_| bad(e))?)
        } else {
            return Err(bad(e));
        };
        let mut perm = 0u16;
        for c in f[2].chars() {
            perm |= match c {
                'r' => 4,
                'w' => 2,
                'x' => 1,
                '-' => 0,
                _ => return Err(bad(e)),
            };
        }
        entries.push((tag, id, perm));
    }
    entries.sort_unstable();
    let mut out = 2u32.to_le_bytes().to_vec();
    for (tag, id, perm) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

/// Applies one record to `p`. Unknown keys are ignored, as POSIX asks.
pub fn apply_record(p: &mut Pending, k: &[u8], v: &[u8]) -> Result<(), String> {
    match k {
        b"path" => p.path = Some(v.to_vec()),
        b"linkpath" => p.linkpath = Some(v.to_vec()),
        b"size" => p.size = Some(uint(v)?),
        b"uid" => p.uid = Some(uint(v)?),
        b"gid" => p.gid = Some(uint(v)?),
        b"mtime" => p.mtime = Some(pax_time(v)?),
        b"atime" => p.atime = Some(pax_time(v)?),
        b"ctime" => p.ctime = Some(pax_time(v)?),
        b"LIBARCHIVE.creationtime" => p.crtime = Some(pax_time(v)?),
        b"SCHILY.devmajor" => p.devmajor = Some(uint(v)?),
        b"SCHILY.devminor" => p.devminor = Some(uint(v)?),
        b"SCHILY.acl.access" => {
            put_xattr(p, b"system.posix_acl_access".to_vec(), acl_from_text(v)?)
        }
        b"SCHILY.acl.default" => {
            put_xattr(p, b"system.posix_acl_default".to_vec(), acl_from_text(v)?)
        }
        b"GNU.sparse.major" => p.sparse_major = Some(uint(v)?),
        b"GNU.sparse.name" => p.sparse_name = Some(v.to_vec()),
        b"GNU.sparse.size" | b"GNU.sparse.realsize" => p.sparse_size = Some(uint(v)?),
        b"GNU.sparse.map" => {
            let nums: Vec<u64> = text(v)?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| uint(s.as_bytes()))
                .collect::<Result<_, _>>()?;
            if !nums.len().is_multiple_of(2) {
                return Err("odd GNU.sparse.map".into());
            }
            p.sparse_map = Some(nums.chunks_exact(2).map(|c| (c[0], c[1])).collect());
        }
        b"GNU.sparse.offset" => p
            .sparse_map
            .get_or_insert_with(Vec::new)
            .push((uint(v)?, 0)),
        b"GNU.sparse.numbytes" => {
            let n = uint(v)?;
            match p.sparse_map.as_mut().and_then(|m| m.last_mut()) {
                Some(last) => last.1 = n,
                None => return Err("GNU.sparse.numbytes without an offset".into()),
            }
        }
        _ => {
            if let Some(name) = k.strip_prefix(b"SCHILY.xattr.") {
                put_xattr(p, name.to_vec(), v.to_vec());
            } else if let Some(name) = k.strip_prefix(b"LIBARCHIVE.xattr.") {
                put_xattr(p, unescape(name), base64(v)?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_times() {
        let body = b"30 mtime=1700000000.123456789\n18 path=a/b/c.txt\n";
        let r = pax_records(body).unwrap();
        assert_eq!(r.len(), 2);
        let t = pax_time(&r[0].1).unwrap();
        assert_eq!((t.sec, t.nsec), (1_700_000_000, 123_456_789));
        let t = pax_time(b"-1.25").unwrap();
        assert_eq!((t.sec, t.nsec), (-2, 750_000_000));
        assert!(pax_records(b"99 x=y\n").is_err());
    }

    #[test]
    fn base64_and_names() {
        assert_eq!(base64(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64(b"aGk").unwrap(), b"hi");
        assert_eq!(unescape(b"user.a%3Db"), b"user.a=b");
        assert_eq!(unescape(b"user.50%"), b"user.50%");
    }

    #[test]
    fn acl_text() {
        let v = acl_from_text(b"user::rw-,user:1000:r--,group::r--,mask::r--,other::---").unwrap();
        assert_eq!(v.len(), 4 + 5 * 8);
        assert_eq!(&v[12..14], &0x02u16.to_le_bytes());
        assert_eq!(&v[16..20], &1000u32.to_le_bytes());
        assert!(acl_from_text(b"user:alice:rw-").is_err());
    }
}

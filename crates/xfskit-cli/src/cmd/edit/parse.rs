//! Parsing what the editing commands take: modes (octal or symbolic, as
//! chmod), owners (numbers, or names from the image's own /etc/passwd and
//! /etc/group), times (touch -d and -t, in UTC), sizes (truncate -s) and
//! xattr values (setfattr's text, 0x hex and 0s base64 encodings).

use xfskit::inode::{FileReader, Timestamp};
use xfskit::{Error, Fs};

fn bad(what: &str, text: &str) -> Error {
    Error::Invalid(format!("invalid {what}: {text:?}"))
}

/// The new permission bits for a file whose bits are `old`: `spec` is
/// octal (`644`, `4755`) or symbolic (`u+x,go-w`, `a=r`, `+X`, `u+s`).
pub fn apply_mode(spec: &str, old: u16, is_dir: bool) -> Result<u16, Error> {
    if !spec.is_empty() && spec.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return u16::from_str_radix(spec, 8)
            .ok()
            .filter(|&m| m <= 0o7777)
            .ok_or_else(|| bad("mode", spec));
    }
    let mut mode = old & 0o7777;
    for clause in spec.split(',') {
        let b = clause.as_bytes();
        let mut i = 0;
        let mut who = 0u16;
        while i < b.len() && b"ugoa".contains(&b[i]) {
            who |= match b[i] {
                b'u' => 0o4700,
                b'g' => 0o2070,
                b'o' => 0o1007,
                _ => 0o7777,
            };
            i += 1;
        }
        if who == 0 {
            who = 0o7777;
        }
        if i == b.len() {
            return Err(bad("mode", spec));
        }
        while i < b.len() {
            let op = b[i];
            if !b"+-=".contains(&op) {
                return Err(bad("mode", spec));
            }
            i += 1;
            let mut bits = 0u16;
            while i < b.len() && !b"+-=".contains(&b[i]) {
                bits |= match b[i] {
                    b'r' => 0o444,
                    b'w' => 0o222,
                    b'x' => 0o111,
                    b'X' if is_dir || mode & 0o111 != 0 => 0o111,
                    b'X' => 0,
                    b's' => 0o6000,
                    b't' => 0o1000,
                    _ => return Err(bad("mode", spec)),
                };
                i += 1;
            }
            let bits = bits & who;
            match op {
                b'+' => mode |= bits,
                b'-' => mode &= !bits,
                _ => mode = (mode & !(who & 0o7777)) | bits,
            }
        }
    }
    Ok(mode)
}

/// Reads a small file of the image (for /etc/passwd and /etc/group).
fn read_small(fs: &Fs, path: &str) -> Option<Vec<u8>> {
    let ino = fs.lookup_path(path.as_bytes()).ok()?;
    if ino.size > 16 << 20 {
        return None;
    }
    let r = FileReader::new(fs, &ino).ok()?;
    let mut buf = vec![0u8; ino.size as usize];
    let n = r.read_at(0, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A user or group id: a number, or a name looked up in the image's
/// `table` (/etc/passwd or /etc/group).
fn id_of(fs: &Fs, text: &str, table: &str) -> Result<u32, Error> {
    if let Ok(n) = text.parse::<u32>() {
        return Ok(n);
    }
    let data = read_small(fs, table).unwrap_or_default();
    for line in data.split(|&b| b == b'\n') {
        let mut f = line.split(|&b| b == b':');
        let (Some(name), _, Some(id)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if name == text.as_bytes() {
            if let Some(n) = std::str::from_utf8(id).ok().and_then(|s| s.parse().ok()) {
                return Ok(n);
            }
        }
    }
    Err(Error::Invalid(format!(
        "no {} named {text:?} in the image's {table}",
        if table.ends_with("passwd") {
            "user"
        } else {
            "group"
        }
    )))
}

/// `OWNER[:GROUP]`, `:GROUP` or `OWNER:` (group = the owner's number).
pub fn owner(fs: &Fs, spec: &str) -> Result<(Option<u32>, Option<u32>), Error> {
    let (u, g) = match spec.split_once([':', '.']) {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let uid = (!u.is_empty())
        .then(|| id_of(fs, u, "/etc/passwd"))
        .transpose()?;
    let gid = match g {
        Some("") => uid,
        Some(g) => Some(id_of(fs, g, "/etc/group")?),
        None => None,
    };
    if uid.is_none() && gid.is_none() {
        return Err(bad("owner", spec));
    }
    Ok((uid, gid))
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, text: &str) -> Result<i64, Error> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad("time", text));
    }
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

fn num(s: &str, text: &str) -> Result<i64, Error> {
    s.parse::<i64>().map_err(|_| bad("time", text))
}

/// Nanoseconds from the digits after a decimal point.
fn frac(s: &str, text: &str) -> Result<u32, Error> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("time", text));
    }
    Ok(s.parse::<u32>().map_err(|_| bad("time", text))? * 10u32.pow(9 - s.len() as u32))
}

/// `touch -d`: `@SECONDS[.FRACTION]`, `now`, or
/// `YYYY-MM-DD[ T]HH:MM[:SS[.FRACTION]]` (UTC; a trailing `Z` is allowed).
pub fn date(text: &str) -> Result<Timestamp, Error> {
    let t = text.trim();
    if t == "now" {
        return Ok(super::now());
    }
    if let Some(rest) = t.strip_prefix('@') {
        let (s, f) = rest.split_once('.').unwrap_or((rest, ""));
        let nsec = if f.is_empty() { 0 } else { frac(f, text)? };
        return Ok(Timestamp {
            sec: num(s, text)?,
            nsec,
        });
    }
    let t = t.trim_end_matches('Z');
    let (day, time) = t.split_once([' ', 'T']).unwrap_or((t, "00:00"));
    let d: Vec<&str> = day.split('-').collect();
    let [y, mo, dd] = d[..] else {
        return Err(bad("time", text));
    };
    let (hms, f) = time.split_once('.').unwrap_or((time, ""));
    let c: Vec<&str> = hms.split(':').collect();
    let (h, mi, s) = match c[..] {
        [h, m] => (num(h, text)?, num(m, text)?, 0),
        [h, m, s] => (num(h, text)?, num(m, text)?, num(s, text)?),
        _ => return Err(bad("time", text)),
    };
    let sec = civil(
        num(y, text)?,
        num(mo, text)?,
        num(dd, text)?,
        h,
        mi,
        s,
        text,
    )?;
    let nsec = if f.is_empty() { 0 } else { frac(f, text)? };
    Ok(Timestamp { sec, nsec })
}

/// `touch -t`: `[[CC]YY]MMDDhhmm[.ss]` in UTC (a two-digit year is 1969
/// to 2068, as POSIX says).
pub fn stamp(text: &str) -> Result<Timestamp, Error> {
    let (main, secs) = text.split_once('.').unwrap_or((text, "00"));
    if !main.bytes().all(|b| b.is_ascii_digit()) || secs.len() != 2 {
        return Err(bad("time", text));
    }
    let n = |s: &str| num(s, text);
    let this_year = 1970 + super::now().sec.div_euclid(31_556_952);
    let (y, rest) = match main.len() {
        8 => (this_year, main),
        10 => {
            let yy = n(&main[..2])?;
            (if yy < 69 { 2000 + yy } else { 1900 + yy }, &main[2..])
        }
        12 => (n(&main[..4])?, &main[4..]),
        _ => return Err(bad("time", text)),
    };
    let sec = civil(
        y,
        n(&rest[..2])?,
        n(&rest[2..4])?,
        n(&rest[4..6])?,
        n(&rest[6..8])?,
        n(secs)?,
        text,
    )?;
    Ok(Timestamp { sec, nsec: 0 })
}

/// `truncate -s`: `[+-]N[K|M|G|T|P|E][B|iB]` (powers of 1024; `KB` etc.
/// powers of 1000). Returns the sign (`+`, `-` or none) and bytes.
pub fn size(text: &str) -> Result<(Option<char>, u64), Error> {
    let t = text.trim();
    let (sign, t) = match t.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &t[1..]),
        _ => (None, t),
    };
    let digits = t.bytes().take_while(|b| b.is_ascii_digit()).count();
    let n: u64 = t[..digits].parse().map_err(|_| bad("size", text))?;
    let unit = &t[digits..];
    let (letter, rest) = unit.split_at(unit.len().min(1));
    let pow = match letter {
        "" => 0,
        "K" | "k" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        "E" => 6,
        _ => return Err(bad("size", text)),
    };
    let base: u64 = match rest {
        "" | "iB" => 1024,
        "B" if pow > 0 => 1000,
        _ => return Err(bad("size", text)),
    };
    let mult = base.checked_pow(pow).ok_or_else(|| bad("size", text))?;
    let bytes = n.checked_mul(mult).ok_or_else(|| bad("size", text))?;
    Ok((sign, bytes))
}

/// A setfattr value: `0x` hex, `0s` base64, `"quoted text"` (with `\n`,
/// `\\`, `\"` and octal `\NNN` escapes) or plain text.
pub fn xattr_value(text: &str) -> Result<Vec<u8>, Error> {
    if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let h: Vec<u8> = h.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !h.len().is_multiple_of(2) {
            return Err(bad("hex value", text));
        }
        return h
            .chunks(2)
            .map(|p| {
                std::str::from_utf8(p)
                    .ok()
                    .and_then(|s| u8::from_str_radix(s, 16).ok())
                    .ok_or_else(|| bad("hex value", text))
            })
            .collect();
    }
    if let Some(b) = text.strip_prefix("0s").or_else(|| text.strip_prefix("0S")) {
        return base64_decode(b).ok_or_else(|| bad("base64 value", text));
    }
    let Some(q) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) else {
        return Ok(text.as_bytes().to_vec());
    };
    let b = q.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let oct = b[i + 1..]
            .iter()
            .take(3)
            .take_while(|c| (b'0'..=b'7').contains(c))
            .count();
        if oct > 0 {
            let s = std::str::from_utf8(&b[i + 1..i + 1 + oct]).unwrap_or("0");
            out.push(u8::from_str_radix(s, 8).map_err(|_| bad("value", text))?);
            i += 1 + oct;
            continue;
        }
        out.push(match b[i + 1] {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            c => c,
        });
        i += 2;
    }
    Ok(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Base64 of `b`, as getfattr -e base64 prints it.
pub fn base64_encode(b: &[u8]) -> String {
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                s.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_like_chmod() {
        assert_eq!(apply_mode("644", 0o777, false).unwrap(), 0o644);
        assert_eq!(apply_mode("u+x", 0o644, false).unwrap(), 0o744);
        assert_eq!(apply_mode("go-w,u=rw", 0o777, false).unwrap(), 0o655);
        assert_eq!(apply_mode("+X", 0o644, true).unwrap(), 0o755);
        assert_eq!(apply_mode("+X", 0o644, false).unwrap(), 0o644);
        assert_eq!(apply_mode("u+s,+t", 0o755, false).unwrap(), 0o5755);
        assert!(apply_mode("q+x", 0o644, false).is_err());
        assert!(apply_mode("99", 0o644, false).is_err());
    }

    #[test]
    fn times_parse_in_utc() {
        assert_eq!(
            date("@1700000000.5").unwrap(),
            Timestamp {
                sec: 1_700_000_000,
                nsec: 500_000_000
            }
        );
        assert_eq!(date("2001-02-03 04:05:06").unwrap().sec, 981_173_106);
        assert_eq!(date("1969-12-31T23:59:59Z").unwrap().sec, -1);
        assert_eq!(stamp("200102030405.06").unwrap().sec, 981_173_106);
        assert!(date("2001-13-01").is_err());
    }

    #[test]
    fn sizes_and_values_parse() {
        assert_eq!(size("1M").unwrap(), (None, 1 << 20));
        assert_eq!(size("+2KB").unwrap(), (Some('+'), 2000));
        assert!(size("1Q").is_err());
        assert_eq!(xattr_value("0x0aff").unwrap(), vec![10, 255]);
        assert_eq!(xattr_value("\"a\\nb\"").unwrap(), b"a\nb".to_vec());
        assert_eq!(
            xattr_value(&format!("0s{}", base64_encode(b"hello!x"))).unwrap(),
            b"hello!x".to_vec()
        );
    }
}

//! OVA packages: a tar archive whose first member is the OVF descriptor
//! (`*.ovf`), the disks following it as members. The first `*.vmdk`
//! member is read in place, through a window over its bytes in the
//! archive (a streamOptimized or monolithicSparse VMDK: one file).

use crate::dev::{Device, Window};
use crate::disk::corrupt;
use crate::error::Result;
use std::sync::Arc;

/// Tar headers looked at before giving up (an OVA has a few members).
const MEMBERS_MAX: usize = 4096;

/// True when `head` is a tar header (ustar or GNU) of a member named
/// `*.ovf`.
pub(super) fn probe(head: &[u8]) -> bool {
    head.len() >= 512
        && &head[257..262] == b"ustar"
        && member_name(head).to_ascii_lowercase().ends_with(".ovf")
        && checksum_ok(head)
}

fn member_name(h: &[u8]) -> String {
    let field = |a: usize, b: usize| {
        let f = &h[a..b];
        let n = f.iter().position(|&c| c == 0).unwrap_or(f.len());
        String::from_utf8_lossy(&f[..n]).into_owned()
    };
    let name = field(0, 100);
    let prefix = if &h[257..263] == b"ustar\0" {
        field(345, 500)
    } else {
        String::new()
    };
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    }
}

fn checksum_ok(h: &[u8]) -> bool {
    let want = octal(&h[148..156]);
    let sum: u64 = h[..512]
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(b)
            }
        })
        .sum();
    want == Some(sum)
}

fn octal(f: &[u8]) -> Option<u64> {
    if f.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256.
        let mut v: u64 = u64::from(f[0] & 0x7f);
        for &b in &f[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s: String = f
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

/// The first `*.vmdk` member of the OVA `file`: its name and its bytes.
pub(super) fn vmdk_member(name: &str, file: Arc<dyn Device>) -> Result<(String, Window)> {
    let flen = file.len();
    let mut at = 0u64;
    let mut long_name: Option<String> = None;
    for _ in 0..MEMBERS_MAX {
        if at + 512 > flen {
            break;
        }
        let mut h = [0u8; 512];
        file.read_at(&mut h, at)?;
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let bad = |why: String| corrupt("OVA tar header", format!("{name}, byte {at:#x}"), why);
        if !checksum_ok(&h) {
            return Err(bad("bad checksum".into()));
        }
        let size = octal(&h[124..136]).ok_or_else(|| bad("bad member size".into()))?;
        let data = at + 512;
        let end = size
            .checked_add(511)
            .map(|s| s / 512 * 512)
            .and_then(|s| data.checked_add(s))
            .filter(|&e| data + size <= flen && e <= flen.div_ceil(512) * 512)
            .ok_or_else(|| {
                bad(format!(
                    "a member of {size} bytes runs past the end of the {flen}-byte file"
                ))
            })?;
        let kind = h[156];
        let mname = long_name.take().unwrap_or_else(|| member_name(&h));
        match kind {
            b'L' => {
                let n = size.min(4096) as usize;
                let mut b = vec![0u8; n];
                file.read_at(&mut b, data)?;
                let z = b.iter().position(|&c| c == 0).unwrap_or(n);
                long_name = Some(String::from_utf8_lossy(&b[..z]).into_owned());
            }
            b'0' | 0 if mname.to_ascii_lowercase().ends_with(".vmdk") => {
                let w = Window::new(file.clone(), data, size)?;
                return Ok((format!("{name}:{mname}"), w));
            }
            _ => {}
        }
        at = end;
    }
    Err(crate::error::Error::NotFound(format!(
        "{name}: the OVA package holds no .vmdk disk"
    )))
}

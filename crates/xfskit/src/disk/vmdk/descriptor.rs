//! The descriptor: text naming the disk's type, its parent, and its
//! extents, in a file of its own (monolithicFlat, twoGbMaxExtent*) or
//! embedded in a sparse extent (monolithicSparse, streamOptimized).

use crate::disk::corrupt;
use crate::error::{Error, Result};

/// The longest descriptor read (QEMU reads at most 1 MiB too).
pub(super) const DESC_MAX: u64 = 1 << 20;
/// The parentCID of a disk without a parent.
pub(super) const NO_PARENT: u32 = 0xffff_ffff;

/// The kind of one extent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// A hosted sparse extent file ("KDMV").
    Sparse,
    /// Raw bytes of a file from a sector offset ("FLAT", "VMFS").
    Flat,
    /// Reads as zeros, stored nowhere.
    Zero,
}

/// One extent line: `ACCESS SECTORS TYPE ["NAME" [OFFSET]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExtentLine {
    pub sectors: u64,
    pub kind: Kind,
    pub name: String,
    /// Sectors into the file (flat extents).
    pub offset: u64,
    /// RDONLY rather than RW.
    pub read_only: bool,
}

/// What a descriptor says.
#[derive(Debug, Clone, Default)]
pub(super) struct Descriptor {
    pub create_type: String,
    pub parent_cid: Option<u32>,
    pub extents: Vec<ExtentLine>,
}

/// True when `head` (the first bytes of a file) looks like a descriptor:
/// comment and blank lines, then a `version=N` line (as QEMU probes).
pub(super) fn looks_like(head: &[u8]) -> bool {
    let mut rest = head;
    while !rest.is_empty() {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let t = trim(line);
        if t.is_empty() || t[0] == b'#' {
            if next.is_empty() && line.len() == rest.len() {
                // A comment line cut by the end of the head.
                return false;
            }
            rest = next;
            continue;
        }
        let t: Vec<u8> = t.iter().copied().filter(|b| *b != b' ').collect();
        return matches!(&t[..], b"version=1" | b"version=2" | b"version=3");
    }
    false
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |i| i + 1);
    &b[s..e.max(s)]
}

/// Parses the descriptor `text` (`what` names it in errors).
pub(super) fn parse(text: &[u8], what: &str) -> Result<Descriptor> {
    let text = match text.iter().position(|&b| b == 0) {
        Some(i) => &text[..i],
        None => text,
    };
    let text = String::from_utf8_lossy(text);
    let mut d = Descriptor::default();
    let bad =
        |n: usize, why: String| corrupt("VMDK descriptor", format!("{what}, line {}", n + 1), why);
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if matches!(first, "RW" | "RDONLY" | "NOACCESS") {
            if first == "NOACCESS" {
                return Err(Error::Unsupported(format!(
                    "{what}: line {}: a NOACCESS extent",
                    n + 1
                )));
            }
            let sectors: u64 = words
                .next()
                .and_then(|w| w.parse().ok())
                .filter(|&s| s > 0)
                .ok_or_else(|| bad(n, format!("no positive sector count in {line:?}")))?;
            let ty = words.next().unwrap_or("");
            let kind = match ty {
                "SPARSE" => Kind::Sparse,
                "FLAT" | "VMFS" => Kind::Flat,
                "ZERO" => Kind::Zero,
                "" => return Err(bad(n, format!("no extent type in {line:?}"))),
                other => {
                    return Err(Error::Unsupported(format!(
                        "{what}: line {}: VMDK extents of type {other}",
                        n + 1
                    )))
                }
            };
            let after_type = line
                .find(ty)
                .map(|i| &line[i + ty.len()..])
                .unwrap_or("")
                .trim();
            let (name, tail) = if kind == Kind::Zero && !after_type.starts_with('"') {
                (String::new(), after_type)
            } else {
                let body = after_type
                    .strip_prefix('"')
                    .ok_or_else(|| bad(n, format!("no quoted file name in {line:?}")))?;
                let end = body
                    .find('"')
                    .ok_or_else(|| bad(n, format!("an unclosed file name in {line:?}")))?;
                (body[..end].to_string(), body[end + 1..].trim())
            };
            if kind != Kind::Zero && name.is_empty() {
                return Err(bad(n, format!("an empty file name in {line:?}")));
            }
            let offset = match tail.split_whitespace().next() {
                None => 0,
                Some(w) => w
                    .parse()
                    .map_err(|_| bad(n, format!("a bad offset {w:?} in {line:?}")))?,
            };
            if kind == Kind::Flat && ty == "FLAT" && tail.is_empty() {
                return Err(bad(n, format!("a FLAT extent without an offset: {line:?}")));
            }
            d.extents.push(ExtentLine {
                sectors,
                kind,
                name,
                offset,
                read_only: first == "RDONLY",
            });
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"');
            match k.trim() {
                "createType" => d.create_type = v.to_string(),
                "parentCID" => {
                    d.parent_cid = Some(
                        u32::from_str_radix(v, 16)
                            .map_err(|_| bad(n, format!("a bad parentCID {v:?}")))?,
                    )
                }
                _ => {}
            }
        }
    }
    Ok(d)
}

/// A descriptor for a disk of `sectors` in one extent `name` of `kind`
/// ("SPARSE"), of `create_type`, with the content identifier `cid`.
pub(super) fn render(create_type: &str, cid: u32, sectors: u64, name: &str) -> String {
    let cylinders = (sectors / (16 * 63)).clamp(1, 16383);
    format!(
        "# Disk DescriptorFile\n\
         version=1\n\
         CID={cid:08x}\n\
         parentCID=ffffffff\n\
         createType=\"{create_type}\"\n\
         \n\
         # Extent description\n\
         RW {sectors} SPARSE \"{name}\"\n\
         \n\
         # The Disk Data Base\n\
         #DDB\n\
         \n\
         ddb.virtualHWVersion = \"4\"\n\
         ddb.geometry.cylinders = \"{cylinders}\"\n\
         ddb.geometry.heads = \"16\"\n\
         ddb.geometry.sectors = \"63\"\n\
         ddb.adapterType = \"ide\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_descriptors_parse() {
        let t = b"# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"twoGbMaxExtentFlat\"\n\n# Extent description\nRW 4194304 FLAT \"d-f001.vmdk\" 0\nRW 2097152 FLAT \"d-f002.vmdk\" 0\nRDONLY 100 ZERO\n\nddb.adapterType = \"ide\"\n";
        assert!(looks_like(t));
        let d = parse(t, "d.vmdk").unwrap();
        assert_eq!(d.create_type, "twoGbMaxExtentFlat");
        assert_eq!(d.parent_cid, Some(NO_PARENT));
        assert_eq!(d.extents.len(), 3);
        assert_eq!(d.extents[1].name, "d-f002.vmdk");
        assert_eq!(d.extents[1].sectors, 2097152);
        assert_eq!(d.extents[2].kind, Kind::Zero);
        let r = render("monolithicSparse", 1, 2048, "a b.vmdk");
        let d = parse(r.as_bytes(), "x").unwrap();
        assert_eq!(d.extents[0].name, "a b.vmdk");
        assert!(looks_like(r.as_bytes()));
    }

    #[test]
    fn malformed_descriptors_are_errors() {
        for t in [
            &b"version=1\nRW x SPARSE \"a\"\n"[..],
            b"version=1\nRW 10 SPARSE a\n",
            b"version=1\nRW 10 SPARSE \"a\n",
            b"version=1\nRW 10 FLAT \"a\"\n",
            b"version=1\nRW 10 FLAT \"a\" -5\n",
            b"version=1\nRW 10\n",
            b"version=1\nparentCID=zz\n",
            b"version=1\nRW 0 SPARSE \"a\"\n",
        ] {
            assert!(parse(t, "t").is_err(), "{}", String::from_utf8_lossy(t));
        }
        assert!(matches!(
            parse(b"RW 10 VMFSSPARSE \"a\"\n", "t"),
            Err(Error::Unsupported(_))
        ));
        assert!(!looks_like(b"XFSB"));
        assert!(!looks_like(b"# only a comment"));
        assert!(!looks_like(b""));
    }
}

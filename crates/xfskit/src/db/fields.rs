//! The superblock and AG headers field by field, with the names and value
//! formats of `xfs_db`'s `print` (xfsprogs 6.1 to 7.2): each sector is read
//! raw, as xfs_db reads it, so a damaged header still prints; its CRC is
//! checked and reported beside the value ("correct", "bad", or "unchecked"
//! on a v4 filesystem).

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber};
use xfs_format::ag::{
    XFS_AGFL_CRC_OFF, XFS_AGFL_HDR_SIZE, XFS_AGFL_SECTOR, XFS_AGF_CRC_OFF, XFS_AGF_SECTOR,
    XFS_AGI_CRC_OFF, XFS_AGI_SECTOR, XFS_AGI_UNLINKED_BUCKETS, XFS_SB_SECTOR,
};
use xfs_format::sb::{
    XFS_DSB_METADIR_SIZE, XFS_SB_CRC_OFF, XFS_SB_FEAT_INCOMPAT_METADIR, XFS_SB_FEAT_INCOMPAT_ZONED,
    XFS_SB_METADIR_OFF,
};

/// Which header to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The superblock copy of an AG (`sb N`).
    Sb,
    /// The free space header (`agf N`).
    Agf,
    /// The inode header (`agi N`).
    Agi,
    /// The free list (`agfl N`).
    Agfl,
}

impl Header {
    /// The xfs_db command name.
    pub fn name(self) -> &'static str {
        match self {
            Header::Sb => "sb",
            Header::Agf => "agf",
            Header::Agi => "agi",
            Header::Agfl => "agfl",
        }
    }

    fn sector(self) -> u64 {
        match self {
            Header::Sb => XFS_SB_SECTOR,
            Header::Agf => XFS_AGF_SECTOR,
            Header::Agi => XFS_AGI_SECTOR,
            Header::Agfl => XFS_AGFL_SECTOR,
        }
    }
}

/// What the CRC check of a header found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcState {
    /// The stored CRC matches the sector.
    Correct,
    /// It does not.
    Bad,
    /// A v4 filesystem: no CRCs.
    Unchecked,
}

impl CrcState {
    /// The word xfs_db prints.
    pub fn word(self) -> &'static str {
        match self {
            CrcState::Correct => "correct",
            CrcState::Bad => "bad",
            CrcState::Unchecked => "unchecked",
        }
    }
}

/// One field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number xfs_db prints in decimal.
    Dec(u64),
    /// A number xfs_db prints as `%#x` (0 as "0").
    Hex(u64),
    /// The all-ones value of a field xfs_db prints as "null".
    Null,
    /// A field printed with no value (xfs_db skips a zero block pointer).
    Empty,
    /// A UUID.
    Uuid([u8; 16]),
    /// A fixed-length byte string (the label), printed quoted and escaped.
    Chars(Vec<u8>),
    /// The CRC and what its check found.
    Crc(u32, CrcState),
    /// An array of `len` slots: the slots printed, each with its index
    /// (`None` for a slot printed as "null"); the others are skipped.
    Array {
        len: u32,
        slots: Vec<(u32, Option<u64>)>,
    },
}

/// One field: its xfs_db name and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The name xfs_db gives it.
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

/// A header read from an AG, field by field.
#[derive(Debug, Clone)]
pub struct Fields {
    /// Which header.
    pub header: Header,
    /// Its AG.
    pub agno: u32,
    /// The fields in xfs_db's order.
    pub fields: Vec<Field>,
}

/// How xfs_db formats a number field.
#[derive(Clone, Copy)]
enum Kind {
    /// Decimal.
    D,
    /// `%#x`.
    X,
    /// Decimal, "null" when all ones.
    N,
    /// Nothing when zero, else as [`Kind::N`].
    Nz,
}

fn be(raw: &[u8], off: usize, size: usize) -> u64 {
    raw.get(off..off + size)
        .map_or(0, |b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
}

fn num(raw: &[u8], off: usize, size: usize, kind: Kind) -> Value {
    let v = be(raw, off, size);
    let ones = if size == 8 {
        u64::MAX
    } else {
        (1u64 << (size * 8)) - 1
    };
    match kind {
        Kind::D => Value::Dec(v),
        Kind::X => Value::Hex(v),
        Kind::Nz if v == 0 => Value::Empty,
        Kind::N | Kind::Nz if v == ones => Value::Null,
        Kind::N | Kind::Nz => Value::Dec(v),
    }
}

fn uuid(raw: &[u8], off: usize) -> Value {
    let mut u = [0u8; 16];
    if let Some(b) = raw.get(off..off + 16) {
        u.copy_from_slice(b);
    }
    Value::Uuid(u)
}

struct Builder<'a> {
    raw: &'a [u8],
    v5: bool,
    out: Vec<Field>,
}

impl Builder<'_> {
    fn n(&mut self, name: &'static str, off: usize, size: usize, kind: Kind) {
        let value = num(self.raw, off, size, kind);
        self.out.push(Field { name, value });
    }

    fn uuid(&mut self, name: &'static str, off: usize) {
        let value = uuid(self.raw, off);
        self.out.push(Field { name, value });
    }

    fn crc(&mut self, off: usize) {
        let stored = be(self.raw, off, 4) as u32;
        // The CRC is kept little-endian; xfs_db prints the value as read
        // into a big-endian field, byte-swapped.
        let state = if !self.v5 {
            CrcState::Unchecked
        } else if xfs_format::crc::verify(self.raw, off) {
            CrcState::Correct
        } else {
            CrcState::Bad
        };
        self.out.push(Field {
            name: "crc",
            value: Value::Crc(stored, state),
        });
    }
}

/// Reads `header` of AG `agno` raw and returns its fields.
pub fn read(fs: &Fs, header: Header, agno: u32) -> Result<Fields> {
    let geo = fs.geometry();
    if agno >= geo.ag_count {
        return Err(Error::Invalid(format!(
            "bad allocation group number {agno}: the filesystem has {} AGs",
            geo.ag_count
        )));
    }
    let sect = u64::from(geo.sect_size);
    let off = geo.agb_to_daddr(AgNumber(agno), AgBlock(0)).bytes() + header.sector() * sect;
    let mut raw = vec![0u8; geo.sect_size as usize];
    fs.read_bytes(off, &mut raw)?;
    Ok(Fields {
        header,
        agno,
        fields: decode(&raw, header, geo.v5),
    })
}

/// The fields of a raw header sector `raw` of a v5 (`v5`) or v4
/// filesystem, in xfs_db's order and formats.
pub fn decode(raw: &[u8], header: Header, v5: bool) -> Vec<Field> {
    let mut b = Builder {
        raw,
        v5,
        out: Vec::new(),
    };
    match header {
        Header::Sb => sb(&mut b),
        Header::Agf => agf(&mut b),
        Header::Agi => agi(&mut b),
        Header::Agfl => agfl(&mut b),
    }
    b.out
}

fn sb(b: &mut Builder<'_>) {
    use Kind::*;
    b.n("magicnum", 0, 4, X);
    b.n("blocksize", 4, 4, D);
    b.n("dblocks", 8, 8, N);
    b.n("rblocks", 16, 8, N);
    b.n("rextents", 24, 8, N);
    b.uuid("uuid", 32);
    b.n("logstart", 48, 8, N);
    b.n("rootino", 56, 8, N);
    b.n("rbmino", 64, 8, N);
    b.n("rsumino", 72, 8, N);
    b.n("rextsize", 80, 4, N);
    b.n("agblocks", 84, 4, N);
    b.n("agcount", 88, 4, N);
    b.n("rbmblocks", 92, 4, D);
    b.n("logblocks", 96, 4, D);
    b.n("versionnum", 100, 2, X);
    b.n("sectsize", 102, 2, D);
    b.n("inodesize", 104, 2, D);
    b.n("inopblock", 106, 2, D);
    b.out.push(Field {
        name: "fname",
        value: Value::Chars(b.raw.get(108..120).unwrap_or(&[]).to_vec()),
    });
    for (i, name) in [
        "blocklog",
        "sectlog",
        "inodelog",
        "inopblog",
        "agblklog",
        "rextslog",
        "inprogress",
        "imax_pct",
    ]
    .into_iter()
    .enumerate()
    {
        b.n(name, 120 + i, 1, D);
    }
    b.n("icount", 128, 8, D);
    b.n("ifree", 136, 8, D);
    b.n("fdblocks", 144, 8, D);
    b.n("frextents", 152, 8, D);
    b.n("uquotino", 160, 8, N);
    b.n("gquotino", 168, 8, N);
    b.n("qflags", 176, 2, X);
    b.n("flags", 178, 1, X);
    b.n("shared_vn", 179, 1, D);
    b.n("inoalignmt", 180, 4, D);
    b.n("unit", 184, 4, D);
    b.n("width", 188, 4, D);
    b.n("dirblklog", 192, 1, D);
    b.n("logsectlog", 193, 1, D);
    b.n("logsectsize", 194, 2, D);
    b.n("logsunit", 196, 4, D);
    b.n("features2", 200, 4, X);
    b.n("bad_features2", 204, 4, X);
    b.n("features_compat", 208, 4, X);
    b.n("features_ro_compat", 212, 4, X);
    b.n("features_incompat", 216, 4, X);
    b.n("features_log_incompat", 220, 4, X);
    b.crc(XFS_SB_CRC_OFF);
    b.n("spino_align", 228, 4, D);
    b.n("pquotino", 232, 8, N);
    b.n("lsn", 240, 8, X);
    b.uuid("meta_uuid", 248);
    let incompat = be(b.raw, 216, 4) as u32;
    if incompat & XFS_SB_FEAT_INCOMPAT_METADIR != 0 {
        let m = XFS_SB_METADIR_OFF;
        b.n("metadirino", m, 8, N);
        b.n("rgcount", m + 8, 4, N);
        b.n("rgextents", m + 12, 4, N);
        b.n("rgblklog", m + 16, 1, D);
        // xfs_db prints the first byte of the padding.
        b.n("pad", m + 17, 1, X);
    }
    if incompat & XFS_SB_FEAT_INCOMPAT_ZONED != 0 {
        b.n("rtstart", XFS_DSB_METADIR_SIZE, 8, N);
        b.n("rtreserved", XFS_DSB_METADIR_SIZE + 8, 8, D);
    }
}

fn agf(b: &mut Builder<'_>) {
    use Kind::*;
    b.n("magicnum", 0, 4, X);
    b.n("versionnum", 4, 4, D);
    b.n("seqno", 8, 4, N);
    b.n("length", 12, 4, N);
    b.n("bnoroot", 16, 4, N);
    b.n("cntroot", 20, 4, N);
    b.n("rmaproot", 24, 4, Nz);
    b.n("refcntroot", 88, 4, Nz);
    b.n("bnolevel", 28, 4, D);
    b.n("cntlevel", 32, 4, D);
    b.n("rmaplevel", 36, 4, D);
    b.n("refcntlevel", 92, 4, D);
    b.n("rmapblocks", 80, 4, D);
    b.n("refcntblocks", 84, 4, D);
    b.n("flfirst", 40, 4, D);
    b.n("fllast", 44, 4, D);
    b.n("flcount", 48, 4, D);
    b.n("freeblks", 52, 4, D);
    b.n("longest", 56, 4, D);
    b.n("btreeblks", 60, 4, D);
    b.uuid("uuid", 64);
    b.n("lsn", 208, 8, X);
    b.crc(XFS_AGF_CRC_OFF);
}

fn agi(b: &mut Builder<'_>) {
    use Kind::*;
    b.n("magicnum", 0, 4, X);
    b.n("versionnum", 4, 4, D);
    b.n("seqno", 8, 4, N);
    b.n("length", 12, 4, N);
    b.n("count", 16, 4, N);
    b.n("root", 20, 4, N);
    b.n("level", 24, 4, D);
    b.n("freecount", 28, 4, N);
    b.n("newino", 32, 4, N);
    b.n("dirino", 36, 4, N);
    // Only the buckets that hold a list are printed.
    let slots = (0..XFS_AGI_UNLINKED_BUCKETS as u32)
        .filter_map(|i| {
            let v = be(b.raw, 40 + 4 * i as usize, 4);
            (v != u64::from(u32::MAX)).then_some((i, Some(v)))
        })
        .collect();
    b.out.push(Field {
        name: "unlinked",
        value: Value::Array {
            len: XFS_AGI_UNLINKED_BUCKETS as u32,
            slots,
        },
    });
    b.uuid("uuid", 296);
    b.crc(XFS_AGI_CRC_OFF);
    b.n("lsn", 320, 8, X);
    b.n("free_root", 328, 4, N);
    b.n("free_level", 332, 4, D);
    b.n("ino_blocks", 336, 4, D);
    b.n("fino_blocks", 340, 4, D);
}

fn agfl(b: &mut Builder<'_>) {
    use Kind::*;
    // A v4 AGFL has no header: the whole sector is the block array.
    let start = if b.v5 {
        b.n("magicnum", 0, 4, X);
        b.n("seqno", 4, 4, N);
        b.uuid("uuid", 8);
        b.n("lsn", 24, 8, X);
        b.crc(XFS_AGFL_CRC_OFF);
        XFS_AGFL_HDR_SIZE
    } else {
        0
    };
    let len = (b.raw.len().saturating_sub(start) / 4) as u32;
    // Zero slots are skipped; unused ones (all ones) print as null.
    let slots = (0..len)
        .filter_map(|i| match be(b.raw, start + 4 * i as usize, 4) {
            0 => None,
            v if v == u64::from(u32::MAX) => Some((i, None)),
            v => Some((i, Some(v))),
        })
        .collect();
    b.out.push(Field {
        name: "bno",
        value: Value::Array { len, slots },
    });
}

/// The escaped form xfs_db gives a byte string: `\\`, `\'`, `\"` and `\?`
/// escaped, printable ASCII and space as they are, the control characters
/// 7 to 13 as a backslash and the letter 7 to 13 past 'a', octal for the rest.
fn escape(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &c in bytes {
        match c {
            b'\\' | b'\'' | b'"' | b'?' => {
                s.push('\\');
                s.push(c as char);
            }
            0x21..=0x7e | b' ' => s.push(c as char),
            // xfs_db adds 'a' - '\a' to each of the C escape characters,
            // which names \a and \b right but turns \t into \c, \n into
            // \d, \v into \e, \f into \f and \r into \g.
            0x07..=0x0d => {
                s.push('\\');
                s.push((c + (b'a' - 0x07)) as char);
            }
            _ => s.push_str(&format!("\\{c:03o}")),
        }
    }
    s.push('"');
    s
}

fn hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// A UUID in its usual text form.
pub fn uuid_text(u: &[u8; 16]) -> String {
    crate::bytes::uuid_string(u)
}

/// One field as xfs_db prints it (`name = value`, no newline).
pub fn render_field(f: &Field) -> String {
    let v = match &f.value {
        Value::Dec(v) => v.to_string(),
        Value::Hex(v) => hex(*v),
        Value::Null => "null".into(),
        Value::Empty => String::new(),
        Value::Uuid(u) => uuid_text(u),
        Value::Chars(c) => escape(c),
        // The stored CRC is little-endian on disk, read as big-endian.
        Value::Crc(v, st) => format!("{} ({})", hex(u64::from(*v)), st.word()),
        Value::Array { len, slots } => {
            let mut s = String::new();
            for (i, v) in slots {
                s += &format!("{i}:");
                match v {
                    Some(v) => s += &v.to_string(),
                    None => s += "null",
                }
                // xfs_db puts a space after every slot it prints but the
                // array's last.
                if i + 1 < *len {
                    s.push(' ');
                }
            }
            return format!("{}[0-{}] = {s}", f.name, len.saturating_sub(1));
        }
    };
    format!("{} = {v}", f.name)
}

/// The whole header as `xfs_db -c 'HEADER N' -c print` prints it.
pub fn render(fields: &Fields) -> String {
    let mut s = String::new();
    for f in &fields.fields {
        s += &render_field(f);
        s.push('\n');
    }
    s
}

/// The header as JSON: `{"header", "agno", "fields": {name: value}}`;
/// numbers as numbers (null for xfs_db's "null" and for a skipped value),
/// UUIDs and the label as strings, the CRC as `{"value", "state"}`,
/// arrays as `{"INDEX": value}` of the slots xfs_db prints.
pub fn to_json(fields: &Fields) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for f in &fields.fields {
        let v = match &f.value {
            Value::Dec(v) | Value::Hex(v) => serde_json::json!(v),
            Value::Null | Value::Empty => serde_json::Value::Null,
            Value::Uuid(u) => serde_json::json!(uuid_text(u)),
            Value::Chars(c) => {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                serde_json::json!(String::from_utf8_lossy(&c[..end]))
            }
            Value::Crc(v, st) => serde_json::json!({"value": v, "state": st.word()}),
            Value::Array { slots, .. } => {
                let mut a = serde_json::Map::new();
                for (i, v) in slots {
                    a.insert(i.to_string(), serde_json::json!(v));
                }
                serde_json::Value::Object(a)
            }
        };
        m.insert(f.name.to_string(), v);
    }
    serde_json::json!({
        "header": fields.header.name(),
        "agno": fields.agno,
        "fields": m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_xfs_db() {
        assert_eq!(
            escape(b"a\\b\"c ?\t\n\x07\0\xff"),
            r#""a\\b\"c \?\c\d\a\000\377""#
        );
    }

    #[test]
    fn array_spacing() {
        let f = Field {
            name: "unlinked",
            value: Value::Array {
                len: 64,
                slots: vec![(3, Some(7)), (63, Some(9))],
            },
        };
        assert_eq!(render_field(&f), "unlinked[0-63] = 3:7 63:9");
        let f = Field {
            name: "unlinked",
            value: Value::Array {
                len: 64,
                slots: vec![(3, Some(7))],
            },
        };
        assert_eq!(render_field(&f), "unlinked[0-63] = 3:7 ");
    }

    #[test]
    fn null_and_empty() {
        let raw = [0xffu8; 8];
        assert_eq!(num(&raw, 0, 4, Kind::N), Value::Null);
        assert_eq!(num(&raw, 0, 8, Kind::N), Value::Null);
        assert_eq!(num(&[0; 4], 0, 4, Kind::Nz), Value::Empty);
        assert_eq!(num(&raw, 0, 4, Kind::X), Value::Hex(0xffff_ffff));
    }
}

//! LVM2 physical volumes and their linear logical volumes.
//!
//! A PV starts with a label in one of its first four sectors: "LABELONE",
//! the sector's own number (u64), a CRC (u32) of bytes 20..512, the offset
//! of the PV header (u32) and "LVM2 001"; all little-endian. The PV header
//! holds the PV's UUID (32 characters), its size, then two lists of
//! (offset, size) pairs ended by zeros: data areas, then metadata areas.
//! A metadata area starts with a 512-byte header (CRC, magic, version,
//! start, size, then the location, size and CRC of the current metadata
//! text, which may wrap around the area's end to just after the header).
//! The text (see `text`) describes the volume group: extent size, PVs by
//! UUID with their first extent, LVs as segments of extents on PVs. Only
//! linear segments (striped with one stripe) are mapped.

pub mod grow;
pub mod text;

use crate::bytes::{le32, le64};
use crate::dev::Device;
use text::{Section, Value};

/// LVM's CRC: CRC-32 (reflected, polynomial 0xEDB88320) from this initial
/// value, with no final inversion.
const CRC_INIT: u32 = 0xf597_a6cf;
const MDA_MAGIC: &[u8; 16] = b" LVM2 x[5A%r0N*>";
/// Metadata text larger than this is refused (real text is a few KiB).
const TEXT_MAX: u64 = 16 << 20;

pub(crate) fn crc(b: &[u8]) -> u32 {
    let mut c = CRC_INIT;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = (c >> 1) ^ (0xEDB8_8320 & (c & 1).wrapping_neg());
        }
    }
    c
}

/// A physical volume and the volume group text found on it.
pub struct Pv {
    /// The PV's UUID as the metadata writes it (with dashes).
    pub uuid: String,
    /// The parsed metadata text.
    pub meta: Section,
}

/// One linear piece of a logical volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Where it starts in the LV.
    pub lv_bytes: u64,
    /// Its length.
    pub len_bytes: u64,
    /// Where it lies on the PV.
    pub pv_bytes: u64,
}

/// A logical volume seen from one PV.
#[derive(Debug, Clone)]
pub struct Lv {
    pub vg: String,
    pub name: String,
    pub size_bytes: u64,
    /// The pieces, in LV order, when every one is linear on this PV.
    pub segments: Vec<Segment>,
    /// Why the LV cannot be read from this PV (another segment type, or
    /// extents on another PV), if it cannot.
    pub unsupported: Option<String>,
}

/// The label of a PV: where it is and what its PV header lists.
pub(crate) struct Label {
    /// The sector holding it (0 to 3).
    pub sector_no: u64,
    /// That sector.
    pub sector: [u8; 512],
    /// Where the PV header starts in the sector.
    pub header_at: usize,
    /// The PV's UUID, 32 characters without dashes.
    pub uuid_raw: String,
    /// The metadata areas: (offset, size) in bytes.
    pub mdas: Vec<(u64, u64)>,
}

/// Byte of the PV header's device size (u64 LE), after the UUID.
pub(crate) const PVH_DEV_SIZE: usize = 32;

/// Finds and checks the label of `dev`: None when there is none.
pub(crate) fn read_label(dev: &dyn Device) -> Result<Option<Label>, String> {
    let mut sector = [0u8; 512];
    let mut found = None;
    for n in 0..4u64 {
        if dev.read_at(&mut sector, n * 512).is_err() {
            return Ok(None);
        }
        if &sector[0..8] == b"LABELONE" && &sector[24..32] == b"LVM2 001" {
            found = Some(n);
            break;
        }
    }
    let Some(n) = found else {
        return Ok(None);
    };
    if le64(&sector, 8) != n {
        return Err(format!(
            "LVM label in sector {n} says it lies in sector {}",
            le64(&sector, 8)
        ));
    }
    let (stored, computed) = (le32(&sector, 16), crc(&sector[20..]));
    if stored != computed {
        return Err(format!(
            "LVM label in sector {n}: bad CRC (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    let h = le32(&sector, 20) as usize;
    if h < 32 || h + 40 > 512 {
        return Err(format!("LVM label in sector {n}: PV header at byte {h}"));
    }
    let uuid_raw = String::from_utf8_lossy(&sector[h..h + 32]).into_owned();
    // Data areas, then metadata areas, each list ended by a zero pair.
    let mut at = h + 40;
    let mut lists: [Vec<(u64, u64)>; 2] = [Vec::new(), Vec::new()];
    for list in &mut lists {
        loop {
            if at + 16 > 512 {
                return Err(format!(
                    "LVM PV header in sector {n}: area lists run past the sector"
                ));
            }
            let (off, size) = (le64(&sector, at), le64(&sector, at + 8));
            at += 16;
            if off == 0 {
                break;
            }
            list.push((off, size));
        }
    }
    let [_, mdas] = lists;
    Ok(Some(Label {
        sector_no: n,
        sector,
        header_at: h,
        uuid_raw,
        mdas,
    }))
}

/// Reads the PV label and metadata of `dev` (a partition or whole disk):
/// None when it holds no LVM2 label; an error message when it holds a
/// damaged one.
pub fn read_pv(dev: &dyn Device) -> Result<Option<Pv>, String> {
    let Some(label) = read_label(dev)? else {
        return Ok(None);
    };
    let Some(&(mda, mda_size)) = label.mdas.first() else {
        return Err(format!("LVM PV {} has no metadata area", label.uuid_raw));
    };
    let text = metadata_text(dev, mda, mda_size)?.text;
    let meta = text::parse(&text).map_err(|e| format!("LVM metadata at byte {mda}: {e}"))?;
    Ok(Some(Pv {
        uuid: dashed(&label.uuid_raw),
        meta,
    }))
}

/// A metadata area's current text, and where it lies in the area.
pub(crate) struct AreaText {
    /// The area's 512-byte header.
    pub header: [u8; 512],
    /// The area's size.
    pub area: u64,
    /// The text's offset in the area.
    pub offset: u64,
    /// The text (its size is the header's).
    pub text: Vec<u8>,
}

/// Bytes of the metadata area header: the CRC, then the first location
/// (offset, size, checksum, flags) of the text.
pub(crate) const MDAH_CRC: usize = 0;
pub(crate) const MDAH_LOCN: usize = 40;

/// The current metadata text of the area at `mda` (`size` bytes).
pub(crate) fn metadata_text(dev: &dyn Device, mda: u64, size: u64) -> Result<AreaText, String> {
    let whr = format!("LVM metadata area header at byte {mda}");
    let mut hdr = [0u8; 512];
    dev.read_at(&mut hdr, mda)
        .map_err(|e| format!("{whr}: cannot read it: {e}"))?;
    let (stored, computed) = (le32(&hdr, 0), crc(&hdr[4..]));
    if stored != computed {
        return Err(format!(
            "{whr}: bad CRC (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    if &hdr[4..20] != MDA_MAGIC || le32(&hdr, 20) != 1 {
        return Err(format!("{whr}: no magic, or a version other than 1"));
    }
    let (start, area) = (le64(&hdr, 24), le64(&hdr, 32));
    let (off, len, sum) = (le64(&hdr, 40), le64(&hdr, 48), le32(&hdr, 56));
    if start != mda
        || area != size
        || area <= 512
        || len > TEXT_MAX
        || off < 512
        || off >= area
        || len > area - 512
    {
        return Err(format!(
            "{whr}: text of {len} bytes at {off} does not fit the {area}-byte area at {start}"
        ));
    }
    let mut text = vec![0u8; len as usize];
    // The text may wrap from the area's end to just after the header.
    let first = (area - off).min(len) as usize;
    let read = |buf: &mut [u8], at: u64| {
        dev.read_at(buf, mda + at)
            .map_err(|e| format!("{whr}: cannot read the text: {e}"))
    };
    read(&mut text[..first], off)?;
    if first < text.len() {
        read(&mut text[first..], 512)?;
    }
    let computed = crc(&text);
    if computed != sum {
        return Err(format!(
            "{whr}: bad text CRC (stored {sum:#010x}, computed {computed:#010x})"
        ));
    }
    Ok(AreaText {
        header: hdr,
        area,
        offset: off,
        text,
    })
}

/// "AbCdEf...": 32 characters as 6-4-4-4-4-4-6.
pub(crate) fn dashed(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    for n in [6, 4, 4, 4, 4, 4, 6] {
        let (a, b) = rest.split_at(n.min(rest.len()));
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(a);
        rest = b;
    }
    out
}

/// The logical volumes of the volume group on `pv` that are visible.
pub fn volumes(pv: &Pv) -> Result<Vec<Lv>, String> {
    let Some((vg_name, vg)) = pv
        .meta
        .sections()
        .find(|(_, s)| s.section("physical_volumes").is_some())
    else {
        return Err("LVM metadata without a volume group".into());
    };
    let bad = |what: &str| format!("LVM metadata of volume group {vg_name}: {what}");
    let ext = vg
        .int("extent_size")
        .filter(|&e| e > 0)
        .and_then(|e| (e as u64).checked_mul(512))
        .ok_or_else(|| bad("no extent size"))?;
    let pvs = vg
        .section("physical_volumes")
        .ok_or_else(|| bad("no PVs"))?;
    let (pv_name, this) = pvs
        .sections()
        .find(|(_, s)| s.str("id") == Some(pv.uuid.as_str()))
        .ok_or_else(|| bad(&format!("this PV ({}) is not listed", pv.uuid)))?;
    let pe_start = this
        .int("pe_start")
        .filter(|&p| p >= 0)
        .and_then(|p| (p as u64).checked_mul(512))
        .ok_or_else(|| bad("no pe_start"))?;
    let mut out = Vec::new();
    let Some(lvs) = vg.section("logical_volumes") else {
        return Ok(out);
    };
    for (name, lv) in lvs.sections() {
        let visible = matches!(lv.get("status"), Some(Value::List(l)) if l.contains(&Value::Str("VISIBLE".into())));
        if !visible {
            continue;
        }
        let mut v = Lv {
            vg: vg_name.to_string(),
            name: name.to_string(),
            size_bytes: 0,
            segments: Vec::new(),
            unsupported: None,
        };
        let mut segs: Vec<&Section> = lv
            .sections()
            .filter(|(k, _)| k.starts_with("segment"))
            .map(|(_, s)| s)
            .collect();
        segs.sort_by_key(|s| s.int("start_extent").unwrap_or(i64::MAX));
        for s in segs {
            match segment(s, ext, pe_start, pv_name, v.size_bytes) {
                Ok(seg) => {
                    v.size_bytes = seg.lv_bytes + seg.len_bytes;
                    v.segments.push(seg);
                }
                Err(why) => {
                    v.unsupported = Some(why);
                    break;
                }
            }
        }
        if v.unsupported.is_some() {
            v.segments.clear();
        }
        out.push(v);
    }
    Ok(out)
}

/// One segment as a piece of this PV; `next` is where it must start.
fn segment(
    s: &Section,
    ext: u64,
    pe_start: u64,
    pv_name: &str,
    next: u64,
) -> Result<Segment, String> {
    let kind = s.str("type").unwrap_or("?");
    if kind != "striped" || s.int("stripe_count") != Some(1) {
        return Err(format!("a {kind} segment (only linear ones are read)"));
    }
    let num = |k: &str| s.int(k).filter(|&n| n >= 0).map(|n| n as u64);
    let (Some(start), Some(count)) = (num("start_extent"), num("extent_count")) else {
        return Err("a segment without start_extent or extent_count".into());
    };
    let Some(Value::List(stripes)) = s.get("stripes") else {
        return Err("a segment without stripes".into());
    };
    let [Value::Str(pv), Value::Int(pe)] = stripes.as_slice() else {
        return Err("a segment whose stripes are not [\"pvN\", extent]".into());
    };
    if pv != pv_name {
        return Err(format!(
            "extents on {pv}, another PV than this disk's {pv_name}"
        ));
    }
    let to_bytes = |n: u64| {
        n.checked_mul(ext)
            .ok_or_else(|| "extents overflow".to_string())
    };
    let lv_bytes = to_bytes(start)?;
    if lv_bytes != next {
        return Err(format!("segments leave a gap before extent {start}"));
    }
    let pe = u64::try_from(*pe).map_err(|_| "a negative extent".to_string())?;
    Ok(Segment {
        lv_bytes,
        len_bytes: to_bytes(count)?,
        pv_bytes: to_bytes(pe)?
            .checked_add(pe_start)
            .ok_or_else(|| "extents overflow".to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvm_crc_of_nothing_is_its_initial_value() {
        assert_eq!(crc(b""), CRC_INIT);
        assert_ne!(crc(b"a"), crc(b"b"));
    }

    #[test]
    fn uuids_are_grouped_six_four_six() {
        assert_eq!(
            dashed("ABCDEFghijklmnopqrstuvwxyz012345"),
            "ABCDEF-ghij-klmn-opqr-stuv-wxyz-012345"
        );
    }
}

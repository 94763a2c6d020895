//! Growing a linear logical volume offline, for `xfskit grow`: what
//! `pvresize` and then `lvextend` do to a volume group of one PV.
//!
//! The PV first takes the whole of its device (its `dev_size` and
//! `pe_count` in the metadata, the device size in its label), then the
//! volume takes free extents: its last segment grows when the extents
//! after it are free, and new linear segments take the free runs after
//! that, lowest first. The new metadata text (sequence number one
//! higher) is written into the metadata area after the current text, and
//! then the area's header is pointed at it: one sector write commits the
//! change, and a crash before it leaves the old metadata in force.

use super::text::{self, Section, Value};
use super::{crc, dashed, metadata_text, read_label, MDAH_CRC, MDAH_LOCN, PVH_DEV_SIZE};
use crate::bytes::{put_le32, put_le64};
use crate::dev::Device;
use crate::error::{Error, Result};

const SECTOR: u64 = 512;

fn unsupported(what: String) -> Error {
    Error::Unsupported(format!("grow: LVM: {what}"))
}

fn nonneg(s: &Section, key: &str) -> Option<u64> {
    s.int(key).and_then(|v| u64::try_from(v).ok())
}

/// The extents `[pe, pe + n)` of this PV that a segment uses, when it is a
/// striped (linear) one; an error for any other kind.
fn used_by(seg: &Section, pv_name: &str) -> Result<Vec<(u64, u64)>> {
    let kind = seg.str("type").unwrap_or("?");
    if kind != "striped" {
        return Err(unsupported(format!(
            "a {kind} segment in the volume group (only linear and striped ones are understood)"
        )));
    }
    let count = nonneg(seg, "extent_count").unwrap_or(0);
    let stripes = nonneg(seg, "stripe_count").unwrap_or(1).max(1);
    let Some(Value::List(list)) = seg.get("stripes") else {
        return Err(unsupported("a segment without stripes".into()));
    };
    let mut out = Vec::new();
    for pair in list.chunks(2) {
        if let [Value::Str(pv), Value::Int(pe)] = pair {
            if pv == pv_name {
                let pe = u64::try_from(*pe)
                    .map_err(|_| unsupported("a negative extent number".into()))?;
                out.push((pe, count / stripes));
            }
        }
    }
    Ok(out)
}

/// Grows the PV on `pv` (the device of the partition or disk holding it,
/// already as large as it should become) to the whole device, and the
/// logical volume `vg`/`lv` on it to `want` bytes, or by every free
/// extent when `want` is None (as far as free extents allow). Returns
/// the volume's size in bytes afterwards.
pub fn extend(pv: &dyn Device, vg_name: &str, lv_name: &str, want: Option<u64>) -> Result<u64> {
    let bad = unsupported;
    let label = read_label(pv)
        .map_err(bad)?
        .ok_or_else(|| bad("no PV label".into()))?;
    let &[(mda, mda_size)] = label.mdas.as_slice() else {
        return Err(bad(format!(
            "the PV has {} metadata areas (one is grown here)",
            label.mdas.len()
        )));
    };
    let at = metadata_text(pv, mda, mda_size).map_err(bad)?;
    let mut top = text::parse(&at.text).map_err(bad)?;
    let uuid = dashed(&label.uuid_raw);
    let vg = top
        .section_mut(vg_name)
        .ok_or_else(|| bad(format!("no volume group {vg_name} on this PV")))?;
    let ext = nonneg(vg, "extent_size")
        .filter(|&e| e > 0)
        .ok_or_else(|| bad("no extent size".into()))?;
    let seqno = nonneg(vg, "seqno").ok_or_else(|| bad("no seqno".into()))?;
    // The PV: the only one of the group.
    let pvs = vg
        .section_mut("physical_volumes")
        .ok_or_else(|| bad("no physical_volumes".into()))?;
    if pvs.sections().count() != 1 {
        return Err(bad(format!(
            "volume group {vg_name} has {} PVs (a group of one is grown here)",
            pvs.sections().count()
        )));
    }
    let pv_name = pvs
        .sections()
        .find(|(_, s)| s.str("id") == Some(uuid.as_str()))
        .map(|(n, _)| n.to_string())
        .ok_or_else(|| bad(format!("this PV ({uuid}) is not in {vg_name}")))?;
    let this = pvs.section_mut(&pv_name).expect("found above");
    if this.get("ba_start").is_some_and(|v| v != &Value::Int(0)) {
        return Err(bad("the PV has a bootloader area".into()));
    }
    let (Some(dev_size), Some(pe_start), Some(pe_count)) = (
        nonneg(this, "dev_size"),
        nonneg(this, "pe_start"),
        nonneg(this, "pe_count"),
    ) else {
        return Err(bad(format!(
            "{pv_name} lacks dev_size, pe_start or pe_count"
        )));
    };
    if mda >= pe_start * SECTOR {
        return Err(bad("the metadata area lies after the extents".into()));
    }
    let new_dev = (pv.len() / SECTOR).max(dev_size);
    let new_pe_count = ((new_dev - pe_start.min(new_dev)) / ext).max(pe_count);
    if new_dev != dev_size {
        this.set("dev_size", Value::Int(new_dev as i64));
        this.set("pe_count", Value::Int(new_pe_count as i64));
    }
    // Every extent in use, and the volume's segments.
    let lvs = vg
        .section_mut("logical_volumes")
        .ok_or_else(|| bad("no logical_volumes".into()))?;
    let mut used = Vec::new();
    for (_, l) in lvs.sections() {
        for (k, seg) in l.sections() {
            if k.starts_with("segment") {
                used.extend(used_by(seg, &pv_name)?);
            }
        }
    }
    used.sort_unstable();
    let mut free = Vec::new();
    let mut next = 0u64;
    for &(pe, n) in &used {
        if pe > next {
            free.push((next, pe - next));
        }
        next = next.max(pe + n);
    }
    if new_pe_count > next {
        free.push((next, new_pe_count - next));
    }
    let lv = lvs
        .section_mut(lv_name)
        .ok_or_else(|| bad(format!("no logical volume {lv_name} in {vg_name}")))?;
    let mut cur = 0u64;
    let mut last: Option<String> = None;
    for (k, seg) in lv.sections() {
        if !k.starts_with("segment") {
            continue;
        }
        let end =
            nonneg(seg, "start_extent").unwrap_or(0) + nonneg(seg, "extent_count").unwrap_or(0);
        if end > cur {
            cur = end;
            last = Some(k.to_string());
        }
    }
    let total_free: u64 = free.iter().map(|f| f.1).sum();
    let target = match want {
        Some(b) => (b / (ext * SECTOR)).min(cur + total_free),
        None => cur + total_free,
    };
    if target <= cur && new_dev == dev_size {
        return Ok(cur * ext * SECTOR);
    }
    let mut need = target.saturating_sub(cur);
    // The last segment grows into the free run right after it.
    if let Some(name) = &last {
        let seg = lv.section_mut(name).expect("found above");
        let linear = seg.str("type") == Some("striped") && nonneg(seg, "stripe_count") == Some(1);
        let at_pe = match seg.get("stripes") {
            Some(Value::List(l)) => match l.as_slice() {
                [Value::Str(p), Value::Int(pe)] if *p == pv_name => u64::try_from(*pe).ok(),
                _ => None,
            },
            _ => None,
        };
        if let (true, Some(pe)) = (linear, at_pe) {
            let count = nonneg(seg, "extent_count").unwrap_or(0);
            if let Some(run) = free.iter_mut().find(|r| r.0 == pe + count) {
                let take = need.min(run.1);
                seg.set("extent_count", Value::Int((count + take) as i64));
                run.0 += take;
                run.1 -= take;
                need -= take;
            }
        }
    }
    let mut seg_count = lv
        .sections()
        .filter(|(k, _)| k.starts_with("segment"))
        .count() as u64;
    let mut lv_end = target - need;
    for run in &free {
        if need == 0 {
            break;
        }
        if run.1 == 0 {
            continue;
        }
        let take = need.min(run.1);
        seg_count += 1;
        let seg = Section {
            entries: vec![
                ("start_extent".into(), Value::Int(lv_end as i64)),
                ("extent_count".into(), Value::Int(take as i64)),
                ("type".into(), Value::Str("striped".into())),
                ("stripe_count".into(), Value::Int(1)),
                (
                    "stripes".into(),
                    Value::List(vec![Value::Str(pv_name.clone()), Value::Int(run.0 as i64)]),
                ),
            ],
        };
        lv.entries
            .push((format!("segment{seg_count}"), Value::Section(seg)));
        lv_end += take;
        need -= take;
    }
    lv.set("segment_count", Value::Int(seg_count as i64));
    vg.set("seqno", Value::Int(seqno as i64 + 1));
    // The new text after the current one (wrapping to the area's start),
    // never over it.
    let mut new_text = text::write(&top);
    new_text.push(0);
    let len = new_text.len() as u64;
    let old_end = at.offset + at.text.len() as u64;
    let mut off = old_end.div_ceil(SECTOR) * SECTOR;
    if off + len > at.area {
        off = SECTOR;
    }
    let overlaps = off < old_end && at.offset < off + len;
    if off + len > at.area || overlaps {
        return Err(bad(format!(
            "the new metadata ({len} bytes) does not fit the {}-byte metadata area beside the current text",
            at.area
        )));
    }
    pv.write_at(&new_text, mda + off).map_err(Error::Io)?;
    pv.flush().map_err(Error::Io)?;
    if new_dev != dev_size {
        let mut s = label.sector;
        put_le64(&mut s, label.header_at + PVH_DEV_SIZE, new_dev * SECTOR);
        let c = crc(&s[20..]);
        put_le32(&mut s, 16, c);
        pv.write_at(&s, label.sector_no * SECTOR)
            .map_err(Error::Io)?;
        pv.flush().map_err(Error::Io)?;
    }
    let mut h = at.header;
    put_le64(&mut h, MDAH_LOCN, off);
    put_le64(&mut h, MDAH_LOCN + 8, len);
    put_le32(&mut h, MDAH_LOCN + 16, crc(&new_text));
    put_le32(&mut h, MDAH_LOCN + 20, 0);
    let c = crc(&h[4..]);
    put_le32(&mut h, MDAH_CRC, c);
    pv.write_at(&h, mda).map_err(Error::Io)?;
    pv.flush().map_err(Error::Io)?;
    Ok(target * ext * SECTOR)
}

//! What a disk holds ([`list_device`]) and which of it is the filesystem
//! to open ([`open_device`]): a bare filesystem, the one XFS partition or
//! LVM2 logical volume, or the one named by `--partition` / `--lv`.

use super::{
    corrupt, is_corruption, lvm, open_disk, probe, read_table, Format, Found, FoundLv, Image,
    ImageOptions, Listing,
};
use crate::dev::{Concat, Device, Window};
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// What the `len` bytes at `start` of `disk` hold (reads stay inside them).
fn probe_at(disk: &dyn Device, start: u64, len: u64) -> Option<&'static str> {
    probe::probe(|off, n| {
        let end = off.checked_add(n as u64)?;
        if end > len {
            return None;
        }
        let mut b = vec![0u8; n];
        disk.read_at(&mut b, start.checked_add(off)?).ok()?;
        Some(b)
    })
}

/// Describes what the disk in `path` holds.
pub fn list(path: &Path) -> Result<Listing> {
    let (disk, format) = open_disk(path, false)?;
    list_device(&disk, format)
}

/// Describes what `disk` holds.
pub fn list_device(disk: &Arc<dyn Device>, format: Format) -> Result<Listing> {
    // A damaged qcow2 mapping of the first sector is reported as it is, not
    // as a disk without a partition table.
    let mut s0 = [0u8; 512];
    if let Err(e) = disk.read_at(&mut s0, 0) {
        if is_corruption(&e) {
            return Err(e.into());
        }
    }
    let bare = probe_at(disk.as_ref(), 0, disk.len());
    let table = if bare == Some("xfs") {
        None
    } else {
        read_table(disk.as_ref())?
    };
    let partitions: Vec<Found> = table
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            let fits = p.end_bytes().is_some_and(|e| e <= disk.len());
            let content = if p.is_extended_container() {
                None
            } else {
                probe_at(disk.as_ref(), p.start_bytes, p.size_bytes)
            };
            Found {
                partition: p.clone(),
                content,
                fits,
            }
        })
        .collect();
    let whole_disk = if table.is_none() { bare } else { None };
    let mut pvs: Vec<(Option<u32>, u64, u64)> = partitions
        .iter()
        .filter(|f| f.fits && f.content == Some("LVM2 member"))
        .map(|f| {
            (
                Some(f.partition.number),
                f.partition.start_bytes,
                f.partition.size_bytes,
            )
        })
        .collect();
    if whole_disk == Some("LVM2 member") {
        pvs.push((None, 0, disk.len()));
    }
    let mut volumes = Vec::new();
    let mut notes = Vec::new();
    for (number, start, len) in pvs {
        let whr = match number {
            Some(n) => format!("partition {n}"),
            None => "the whole disk".into(),
        };
        let lvs = Window::new(disk.clone(), start, len)
            .map_err(|e| e.to_string())
            .and_then(|pv| lvm::read_pv(&pv))
            .and_then(|pv| pv.map(|pv| lvm::volumes(&pv)).transpose());
        match lvs {
            Ok(lvs) => {
                for lv in lvs.into_iter().flatten() {
                    let content = lv_device(disk, start, len, &lv)
                        .ok()
                        .and_then(|d| probe_at(d.as_ref(), 0, d.len()));
                    volumes.push(FoundLv {
                        partition: number,
                        lv,
                        pv_start_bytes: start,
                        content,
                    });
                }
            }
            Err(e) => notes.push(format!("{whr}: {e}")),
        }
    }
    Ok(Listing {
        format,
        disk_bytes: disk.len(),
        whole_disk,
        table,
        partitions,
        volumes,
        notes,
    })
}

/// The device of logical volume `lv` on the PV at `pv_start` (`pv_len`
/// bytes) of `disk`.
fn lv_device(
    disk: &Arc<dyn Device>,
    pv_start: u64,
    pv_len: u64,
    lv: &lvm::Lv,
) -> Result<Box<dyn Device>> {
    if let Some(why) = &lv.unsupported {
        return Err(Error::Unsupported(format!(
            "logical volume {}/{}: {why}",
            lv.vg, lv.name
        )));
    }
    let mut pieces = Vec::new();
    for s in &lv.segments {
        if s.pv_bytes
            .checked_add(s.len_bytes)
            .is_none_or(|e| e > pv_len)
        {
            return Err(corrupt(
                "LVM segment",
                format!(
                    "logical volume {}/{} at byte {}",
                    lv.vg, lv.name, s.lv_bytes
                ),
                format!(
                    "{} bytes at byte {} of the PV run past its end ({pv_len} bytes)",
                    s.len_bytes, s.pv_bytes
                ),
            ));
        }
        pieces.push(Window::new(
            disk.clone(),
            pv_start + s.pv_bytes,
            s.len_bytes,
        )?);
    }
    Ok(match pieces.len() {
        1 => Box::new(pieces.remove(0)),
        _ => Box::new(Concat::new(pieces)),
    })
}

/// Opens the XFS filesystem in the image at `path`: see the module doc.
pub fn open(path: &Path, opts: &ImageOptions) -> Result<Image> {
    let (disk, format) = open_disk(path, opts.writable)?;
    open_device(disk, format, opts, &path.display().to_string())
}

/// What the filesystem to open is.
enum Target<'a> {
    Part(&'a Found),
    Lv(&'a FoundLv),
}

/// Finds the XFS filesystem on `disk` (a whole disk, qcow2 already
/// decoded); `name` names it in errors.
pub fn open_device(
    disk: Arc<dyn Device>,
    format: Format,
    opts: &ImageOptions,
    name: &str,
) -> Result<Image> {
    let l = list_device(&disk, format)?;
    let mut notes: Vec<String> = l.table.iter().flat_map(|t| t.notes.clone()).collect();
    notes.extend(l.notes.iter().cloned());
    if opts.partition.is_some() && opts.lv.is_some() {
        return Err(Error::Invalid("give --partition or --lv, not both".into()));
    }
    if l.table.is_none() && l.volumes.is_empty() {
        if let Some(n) = opts.partition {
            return Err(Error::Invalid(format!(
                "{name} has no partition table, so no partition {n}{}",
                match l.whole_disk {
                    Some(c) => format!(" (the whole image is {c})"),
                    None => String::new(),
                }
            )));
        }
        if let Some(v) = &opts.lv {
            return Err(Error::Invalid(format!(
                "{name} holds no LVM2 volumes, so no {v}"
            )));
        }
        // A bare filesystem, or something the superblock check will name.
        return Ok(Image {
            device: Box::new(Window::new(disk.clone(), 0, disk.len())?),
            format,
            partition: None,
            volume: None,
            notes,
        });
    }
    let target = if let Some(n) = opts.partition {
        let Some(f) = l.partitions.iter().find(|f| f.partition.number == n) else {
            return Err(Error::Invalid(format!(
                "{name} has no partition {n}; it has: {}",
                describe(&l)
            )));
        };
        if f.content == Some("LVM2 member") {
            let lvs: Vec<String> = l
                .volumes
                .iter()
                .filter(|v| v.partition == Some(n))
                .map(|v| v.path())
                .collect();
            return Err(Error::Invalid(format!(
                "partition {n} of {name} is an LVM2 physical volume: name one of its logical volumes with --lv VG/LV ({})",
                if lvs.is_empty() { "none readable".into() } else { lvs.join(", ") }
            )));
        }
        if f.content != Some("xfs") && f.fits {
            return Err(Error::Unsupported(format!(
                "partition {n} of {name} holds {}, not XFS",
                f.content.unwrap_or("no filesystem xfskit recognises")
            )));
        }
        Target::Part(f)
    } else if let Some(v) = &opts.lv {
        let Some(f) = l.volumes.iter().find(|f| &f.path() == v) else {
            return Err(Error::Invalid(format!(
                "{name} has no logical volume {v}; it has: {}",
                describe(&l)
            )));
        };
        if let Some(why) = &f.lv.unsupported {
            return Err(Error::Unsupported(format!("logical volume {v}: {why}")));
        }
        if f.content != Some("xfs") {
            return Err(Error::Unsupported(format!(
                "logical volume {v} of {name} holds {}, not XFS",
                f.content.unwrap_or("no filesystem xfskit recognises")
            )));
        }
        Target::Lv(f)
    } else {
        let mut xfs: Vec<Target> = l
            .partitions
            .iter()
            .filter(|f| f.content == Some("xfs"))
            .map(Target::Part)
            .collect();
        xfs.extend(
            l.volumes
                .iter()
                .filter(|f| f.content == Some("xfs"))
                .map(Target::Lv),
        );
        match xfs.len() {
            1 => xfs.remove(0),
            0 if !l.notes.is_empty() => {
                return Err(corrupt(
                    "LVM metadata",
                    l.notes.join("; "),
                    "no XFS outside LVM, and the LVM metadata cannot be read",
                ))
            }
            0 => {
                return Err(Error::Unsupported(format!(
                    "no XFS filesystem on the {} disk {name}; it has: {}",
                    l.table
                        .as_ref()
                        .map_or("LVM".into(), |t| t.scheme.to_string()),
                    describe(&l)
                )))
            }
            _ => {
                let names: Vec<String> = xfs
                    .iter()
                    .map(|t| match t {
                        Target::Part(f) => format!("partition {}", f.partition.number),
                        Target::Lv(f) => format!("logical volume {}", f.path()),
                    })
                    .collect();
                return Err(Error::Invalid(format!(
                    "{} of {name} all hold XFS: choose one with --partition N or --lv VG/LV",
                    names.join(", ")
                )));
            }
        }
    };
    match target {
        Target::Part(f) => {
            let p = &f.partition;
            if !f.fits {
                let scheme = l
                    .table
                    .as_ref()
                    .map_or("MBR".into(), |t| t.scheme.to_string());
                return Err(corrupt(
                    "partition table entry",
                    format!("partition {} ({scheme} entry {})", p.number, p.number),
                    format!(
                        "the partition runs from byte {} for {} bytes, past the end of the {}-byte disk",
                        p.start_bytes,
                        p.size_bytes,
                        disk.len()
                    ),
                ));
            }
            let device = Window::new(disk.clone(), p.start_bytes, p.size_bytes)?;
            Ok(Image {
                device: Box::new(device),
                format,
                partition: Some(p.clone()),
                volume: None,
                notes,
            })
        }
        Target::Lv(f) => {
            let pv_len = match f.partition {
                Some(n) => l
                    .partitions
                    .iter()
                    .find(|p| p.partition.number == n)
                    .map_or(0, |p| p.partition.size_bytes),
                None => disk.len(),
            };
            let device = lv_device(&disk, f.pv_start_bytes, pv_len, &f.lv)?;
            Ok(Image {
                device,
                format,
                partition: f.partition.and_then(|n| {
                    l.partitions
                        .iter()
                        .find(|p| p.partition.number == n)
                        .map(|p| p.partition.clone())
                }),
                volume: Some(f.path()),
                notes,
            })
        }
    }
}

/// "1 (EFI System, vfat), 2 (Linux LVM, LVM2 member), LV rhel/root (xfs)".
fn describe(l: &Listing) -> String {
    let mut items: Vec<String> = l
        .partitions
        .iter()
        .map(|f| {
            format!(
                "partition {} ({}, {})",
                f.partition.number,
                f.partition.type_name,
                f.content.unwrap_or("no known filesystem")
            )
        })
        .collect();
    items.extend(l.volumes.iter().map(|f| {
        format!(
            "logical volume {} ({})",
            f.path(),
            match (&f.lv.unsupported, f.content) {
                (Some(why), _) => why.as_str(),
                (None, c) => c.unwrap_or("no known filesystem"),
            }
        )
    }));
    if items.is_empty() {
        return "nothing".into();
    }
    items.join(", ")
}

/// Partition `n` of the disk in `path` as a device, whatever it holds (for
/// making a filesystem in it); the disk may be raw or qcow2.
pub fn open_partition(
    path: &Path,
    n: u32,
    writable: bool,
) -> Result<(Box<dyn Device>, super::Partition)> {
    let (disk, format) = open_disk(path, writable)?;
    let l = list_device(&disk, format)?;
    let name = path.display();
    if l.table.is_none() {
        return Err(Error::Invalid(format!(
            "{name} has no partition table, so no partition {n}"
        )));
    }
    let Some(f) = l.partitions.iter().find(|f| f.partition.number == n) else {
        return Err(Error::Invalid(format!(
            "{name} has no partition {n}; it has: {}",
            describe(&l)
        )));
    };
    let p = &f.partition;
    if p.is_extended_container() {
        return Err(Error::Invalid(format!(
            "partition {n} of {name} is an extended partition: it holds the logical ones"
        )));
    }
    if !f.fits {
        return Err(corrupt(
            "partition table entry",
            format!("partition {n}"),
            format!(
                "the partition runs from byte {} for {} bytes, past the end of the {}-byte disk",
                p.start_bytes,
                p.size_bytes,
                disk.len()
            ),
        ));
    }
    let w = Window::new(disk, p.start_bytes, p.size_bytes)?;
    Ok((Box::new(w), p.clone()))
}

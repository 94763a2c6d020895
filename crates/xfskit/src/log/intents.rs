//! After replay: extent-free intents (EFIs) the log shows started but
//! not finished.
//!
//! A transaction that unmaps blocks logs an EFI naming the extents, and a
//! later transaction frees them and logs the matching EFD. When the crash
//! falls between the two, the blocks belong to nobody but are still
//! allocated; the kernel frees them at the end of recovery, and so do we,
//! one transaction per intent, in log order. With an rmapbt the kernel
//! frees them with an unknown owner: a reverse mapping covering the
//! extent is removed, and none need exist (a mapping-update intent may have
//! removed it already). We free only when none overlaps; an extent still
//! mapped is reported instead. Other intent types are not finished here.

use super::trans::Trans as LogTrans;
use crate::alloc::{ag_rmap_records, free_extent_no_rmap};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::FsBlock;
use std::collections::BTreeMap;
use xfs_format::log_item::{XFS_LI_EFD, XFS_LI_EFI};

/// An extent-free intent without its done item.
#[derive(Debug, Clone)]
pub struct Efi {
    /// `efi_id`.
    pub id: u64,
    /// LSN of the transaction that logged it.
    pub lsn: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// Extents to free: (AG-encoded start block, length).
    pub extents: Vec<(u64, u32)>,
}

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// The EFIs of `transactions` whose EFD is not among them, in log order.
pub fn unfinished_efis(transactions: &[LogTrans]) -> Result<Vec<Efi>> {
    let mut open: BTreeMap<u64, Efi> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    for t in transactions {
        for it in &t.items {
            let r = &it.regions[0];
            let bad = |d: String| {
                Error::corrupt(
                    "extent-free intent",
                    Location::Log {
                        block: t.commit_blk,
                    },
                    d,
                )
            };
            match it.item_type() {
                XFS_LI_EFI => {
                    if r.len() < 16 {
                        return Err(bad(format!("format region of {} bytes", r.len())));
                    }
                    let n = le32(r, 4) as usize;
                    let id = le64(r, 8);
                    // 16-byte extents from 64-bit hosts, 12-byte packed ones
                    // from 32-bit hosts: the region length tells.
                    let size = if r.len() == 16 + n * 16 {
                        16
                    } else if r.len() == 16 + n * 12 {
                        12
                    } else {
                        return Err(bad(format!("{n} extents in {} bytes", r.len())));
                    };
                    let extents = (0..n)
                        .map(|i| {
                            let o = 16 + i * size;
                            (le64(r, o), le32(r, o + 8))
                        })
                        .collect();
                    let efi = Efi {
                        id,
                        lsn: t.lsn,
                        rec_blk: t.commit_blk,
                        extents,
                    };
                    if open.insert(id, efi).is_none() {
                        order.push(id);
                    }
                }
                XFS_LI_EFD => {
                    if let Some(b) = r.get(8..16) {
                        open.remove(&u64::from_le_bytes(b.try_into().expect("8 bytes")));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|id| open.remove(&id))
        .collect())
}

/// Frees the extents of `efis` on a filesystem opened for writing; then
/// writes everything back. Returns the extents freed.
pub fn finish_efis(fs: &Fs, efis: &[Efi]) -> Result<usize> {
    let geo = fs.geometry().clone();
    let mut freed = 0;
    // Check every intent before freeing anything.
    let mut tp = fs.trans()?;
    for efi in efis {
        let bad = |d: String| {
            Error::corrupt(
                "extent-free intent",
                Location::Log { block: efi.rec_blk },
                format!("intent {:#x}: {d}", efi.id),
            )
        };
        for &(start, len) in &efi.extents {
            if len == 0 || !geo.fsb_range_valid(FsBlock(start), u64::from(len)) {
                return Err(bad(format!("extent of {len} blocks at {start} is invalid")));
            }
            if geo.features.rmapbt {
                let (agno, agbno) = geo.fsb_split(FsBlock(start));
                let end = agbno.0 + len;
                let mapped = ag_rmap_records(&mut tp, agno)?
                    .into_iter()
                    .any(|(s, l, _, _)| s < end && agbno.0 < s + l);
                if mapped {
                    return Err(Error::Unsupported(format!(
                        "intent {:#x}: blocks {start}+{len} to free still have a reverse mapping",
                        efi.id
                    )));
                }
            }
        }
    }
    drop(tp);
    for efi in efis {
        let mut tp = fs.trans()?;
        for &(start, len) in &efi.extents {
            free_extent_no_rmap(&mut tp, FsBlock(start), len)?;
            freed += 1;
        }
        tp.commit()?;
    }
    fs.sync()?;
    Ok(freed)
}

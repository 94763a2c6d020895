//! After replay: extent-free intents (EFIs) and reverse-mapping update
//! intents (RUIs) the log shows started but not finished.
//!
//! A transaction that unmaps blocks logs an EFI naming the extents, and a
//! later transaction frees them and logs the matching EFD. When the crash
//! falls between the two, the blocks belong to nobody but are still
//! allocated; the kernel frees them at the end of recovery, and so do we,
//! one transaction per intent, in log order. With an rmapbt the kernel
//! frees them with an unknown owner: a reverse mapping covering the
//! extent is removed, and none need exist (a mapping-update intent may have
//! removed it already). We free only when none overlaps; an extent still
//! mapped is reported instead. An RUI's mappings are added, removed or
//! converted between written and unwritten (plain and shared-extent
//! variants alike). Intents are finished in log order, as
//! the kernel does: the RUI that removes a mapping comes before the EFI
//! that frees its blocks.
//!
//! On reflink filesystems, reference count intents (CUIs: increase,
//! decrease, with blocks left without owner freed, and copy-on-write
//! staging records added or removed) and block-mapping intents (BUIs:
//! an extent mapped into or unmapped from a file fork, without freeing,
//! with its reverse mapping when there is an rmapbt) are finished too.
//! Mapping-exchange intents (XMIs, `log/exchange.rs`) are finished from
//! the logged state as the kernel continues them. Attribute intents
//! (ATTRIs, `log/attr.rs`) set, replace or remove one attribute; those of
//! parent pointers are refused.

use super::trans::Trans as LogTrans;
use crate::alloc::{ag_rmap_overlapping, free_extent_no_rmap, rmap_apply};
use crate::bytes::{le32, le64};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::FsBlock;
use std::collections::BTreeMap;
use xfs_format::log_intent::*;
use xfs_format::log_item::*;

/// The kinds of intent recovery finishes (as `xfskit log` names them).
pub fn can_finish(kind: &str) -> bool {
    matches!(
        kind,
        "EFI" | "EFI_RT" | "RUI" | "RUI_RT" | "CUI" | "BUI" | "XMI" | "ATTRI"
    )
}

/// An intent without its done item that recovery can finish.
#[derive(Debug, Clone)]
pub enum Intent {
    /// Extent free.
    Efi(Efi),
    /// Reverse-mapping updates.
    Rui(Rui),
    /// Reference count updates.
    Cui(Cui),
    /// Block-mapping updates.
    Bui(Bui),
    /// A mapping exchange between two files.
    Xmi(super::exchange::Xmi),
    /// An attribute update.
    Attri(super::attr::Attri),
}

/// A reference count update intent without its done item.
#[derive(Debug, Clone)]
pub struct Cui {
    /// `cui_id`.
    pub id: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// (start block, length, flags) of each change.
    pub changes: Vec<(u64, u32, u32)>,
}

/// A block-mapping update intent without its done item.
#[derive(Debug, Clone)]
pub struct Bui {
    /// `bui_id`.
    pub id: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// (inode, start block, file offset, length, flags) of each mapping.
    pub maps: Vec<(u64, u64, u64, u32, u32)>,
}

/// A reverse-mapping update intent without its done item.
#[derive(Debug, Clone)]
pub struct Rui {
    /// `rui_id`.
    pub id: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// (owner, start block, file offset, length, flags) of each update.
    pub maps: Vec<(u64, u64, u64, u32, u32)>,
    /// Updates a realtime group's rmap btree (`XFS_LI_RUI_RT`: start
    /// blocks are group-encoded realtime blocks).
    pub realtime: bool,
}

/// An extent-free intent without its done item.
#[derive(Debug, Clone)]
pub struct Efi {
    /// `efi_id`.
    pub id: u64,
    /// LSN of the transaction that logged it.
    pub lsn: u64,
    /// Log block of the record that committed it (for errors).
    pub rec_blk: u64,
    /// Extents to free: (AG-encoded start block, length), or with
    /// `realtime` (an EFI_RT) realtime blocks (group-encoded).
    pub extents: Vec<(u64, u32)>,
    /// Frees realtime extents (`XFS_LI_EFI_RT`, realtime groups).
    pub realtime: bool,
}

/// The EFIs and RUIs of `transactions` whose done item is not among
/// them, in log order.
pub fn unfinished(transactions: &[LogTrans]) -> Result<Vec<Intent>> {
    let mut open: BTreeMap<(u16, u64), Intent> = BTreeMap::new();
    let mut order: Vec<(u16, u64)> = Vec::new();
    for t in transactions {
        for it in &t.items {
            let r = &it.regions[0];
            let bad = |d: String| {
                Error::corrupt(
                    "intent log item",
                    Location::Log {
                        block: t.commit_blk,
                    },
                    d,
                )
            };
            let ty = it.item_type();
            match ty {
                XFS_LI_CUI | XFS_LI_BUI => {
                    if r.len() < 16 {
                        return Err(bad(format!("format region of {} bytes", r.len())));
                    }
                    let n = le32(r, 4) as usize;
                    let id = le64(r, 8);
                    let intent = if ty == XFS_LI_CUI {
                        if r.len() != 16 + n * 16 {
                            return Err(bad(format!("CUI: {n} extents in {} bytes", r.len())));
                        }
                        Intent::Cui(Cui {
                            id,
                            rec_blk: t.commit_blk,
                            changes: (0..n)
                                .map(|i| {
                                    let o = 16 + i * 16;
                                    (le64(r, o), le32(r, o + 8), le32(r, o + 12))
                                })
                                .collect(),
                        })
                    } else {
                        if r.len() != 16 + n * 32 {
                            return Err(bad(format!("BUI: {n} extents in {} bytes", r.len())));
                        }
                        Intent::Bui(Bui {
                            id,
                            rec_blk: t.commit_blk,
                            maps: map_extents(r, n),
                        })
                    };
                    if open.insert((ty, id), intent).is_none() {
                        order.push((ty, id));
                    }
                }
                XFS_LI_EFI | XFS_LI_EFI_RT | XFS_LI_RUI | XFS_LI_RUI_RT => {
                    if r.len() < 16 {
                        return Err(bad(format!("format region of {} bytes", r.len())));
                    }
                    let n = le32(r, 4) as usize;
                    let id = le64(r, 8);
                    let intent = if ty == XFS_LI_EFI || ty == XFS_LI_EFI_RT {
                        // 16-byte extents from 64-bit hosts, 12-byte packed
                        // ones from 32-bit hosts: the region length tells.
                        let size = if r.len() == 16 + n * 16 {
                            16
                        } else if r.len() == 16 + n * 12 {
                            12
                        } else {
                            return Err(bad(format!("EFI: {n} extents in {} bytes", r.len())));
                        };
                        let extents = (0..n)
                            .map(|i| {
                                let o = 16 + i * size;
                                (le64(r, o), le32(r, o + 8))
                            })
                            .collect();
                        Intent::Efi(Efi {
                            id,
                            lsn: t.lsn,
                            rec_blk: t.commit_blk,
                            extents,
                            realtime: ty == XFS_LI_EFI_RT,
                        })
                    } else {
                        if r.len() != 16 + n * 32 {
                            return Err(bad(format!("RUI: {n} extents in {} bytes", r.len())));
                        }
                        let maps = map_extents(r, n);
                        Intent::Rui(Rui {
                            id,
                            rec_blk: t.commit_blk,
                            maps,
                            realtime: ty == XFS_LI_RUI_RT,
                        })
                    };
                    if open.insert((ty, id), intent).is_none() {
                        order.push((ty, id));
                    }
                }
                XFS_LI_XMI => {
                    let x = super::exchange::Xmi::parse(r, t.commit_blk).map_err(bad)?;
                    if open.insert((ty, x.id), Intent::Xmi(x.clone())).is_none() {
                        order.push((ty, x.id));
                    }
                }
                XFS_LI_ATTRI => {
                    // Checked whether or not its done item follows, as
                    // the kernel checks every ATTRI it reads.
                    let a = super::attr::Attri::parse(&it.regions, t.commit_blk).map_err(bad)?;
                    if open.insert((ty, a.id), Intent::Attri(a.clone())).is_none() {
                        order.push((ty, a.id));
                    }
                }
                XFS_LI_ATTRD => {
                    if r.len() != XFS_DONE_LOG_FORMAT_SIZE {
                        return Err(bad(format!("ATTRD format region of {} bytes", r.len())));
                    }
                    open.remove(&(XFS_LI_ATTRI, le64(r, 8)));
                }
                XFS_LI_XMD => {
                    // The kernel refuses a done item of another size.
                    if r.len() != XFS_DONE_LOG_FORMAT_SIZE {
                        return Err(bad(format!("XMD format region of {} bytes", r.len())));
                    }
                    open.remove(&(XFS_LI_XMI, le64(r, 8)));
                }
                XFS_LI_EFD | XFS_LI_EFD_RT | XFS_LI_RUD | XFS_LI_RUD_RT | XFS_LI_CUD
                | XFS_LI_BUD => {
                    if let Some(b) = r.get(8..16) {
                        open.remove(&(ty - 1, u64::from_le_bytes(b.try_into().expect("8 bytes"))));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(order.into_iter().filter_map(|k| open.remove(&k)).collect())
}

/// The 32-byte mapping extents of an RUI or BUI format region.
fn map_extents(r: &[u8], n: usize) -> Vec<(u64, u64, u64, u32, u32)> {
    (0..n)
        .map(|i| {
            let o = 16 + i * 32;
            (
                le64(r, o),
                le64(r, o + 8),
                le64(r, o + 16),
                le32(r, o + 24),
                le32(r, o + 28),
            )
        })
        .collect()
}

/// The EFIs among [`unfinished`] intents.
pub fn unfinished_efis(transactions: &[LogTrans]) -> Result<Vec<Efi>> {
    Ok(unfinished(transactions)?
        .into_iter()
        .filter_map(|i| match i {
            Intent::Efi(e) => Some(e),
            _ => None,
        })
        .collect())
}

/// The kernel's checks of every ATTRI in the log (finished or not)
/// against the filesystem as it was before replay: the feature the
/// operation needs and the inode number (see `log/attr.rs`). Run after
/// [`unfinished`], which checks the items themselves.
pub fn check_attris(transactions: &[LogTrans], geo: &crate::geometry::Geometry) -> Result<()> {
    for t in transactions {
        for it in &t.items {
            if it.item_type() == XFS_LI_ATTRI {
                let a = super::attr::Attri::parse(&it.regions, t.commit_blk).map_err(|d| {
                    Error::corrupt(
                        "intent log item",
                        Location::Log {
                            block: t.commit_blk,
                        },
                        d,
                    )
                })?;
                a.check_fs(geo)?;
            }
        }
    }
    Ok(())
}

/// Checks that recovery can finish every intent's operation (RUI, BUI,
/// XMI, ATTRI).
pub fn check_ruis(intents: &[Intent]) -> Result<()> {
    for i in intents {
        if let Intent::Rui(r) = i {
            for &(_, _, _, _, flags) in &r.maps {
                let op = flags & XFS_RMAP_EXTENT_TYPE_MASK;
                if !matches!(op, XFS_RMAP_EXTENT_MAP..=XFS_RMAP_EXTENT_FREE) {
                    return Err(Error::Unsupported(format!(
                        "reverse-mapping intent {:#x}: unknown operation {op}",
                        r.id
                    )));
                }
            }
        }
        if let Intent::Xmi(x) = i {
            x.check()?;
        }
        if let Intent::Attri(a) = i {
            a.check_supported()?;
        }
        if let Intent::Bui(b) = i {
            for &(_, _, _, _, flags) in &b.maps {
                let op = flags & XFS_BMAP_EXTENT_TYPE_MASK;
                if !matches!(op, XFS_BMAP_MAP | XFS_BMAP_UNMAP)
                    || flags & XFS_BMAP_EXTENT_REALTIME != 0
                {
                    return Err(Error::Unsupported(format!(
                        "block-mapping intent {:#x}: flags {flags:#x} cannot be finished",
                        b.id
                    )));
                }
            }
        }
    }
    Ok(())
}

fn finish_cui(tp: &mut crate::trans::Trans<'_>, c: &Cui) -> Result<()> {
    for &(start, len, flags) in &c.changes {
        let op = flags & XFS_REFCOUNT_EXTENT_TYPE_MASK;
        crate::alloc::refcount_apply(tp, FsBlock(start), len, op).map_err(|e| match e {
            Error::Invalid(d) => Error::corrupt(
                "reference count intent",
                Location::Log { block: c.rec_blk },
                format!("intent {:#x}: {d}", c.id),
            ),
            e => e,
        })?;
    }
    Ok(())
}

fn finish_bui(tp: &mut crate::trans::Trans<'_>, b: &Bui) -> Result<()> {
    use crate::inode::Fork;
    for &(ino, start, off, len, flags) in &b.maps {
        let geo = tp.geo();
        if len == 0 || !geo.fsb_range_valid(FsBlock(start), u64::from(len)) {
            return Err(Error::corrupt(
                "block-mapping intent",
                Location::Log { block: b.rec_blk },
                format!("intent {:#x}: {len} blocks at {start}", b.id),
            ));
        }
        let ino = crate::geometry::Ino(ino);
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        let fork = if flags & XFS_BMAP_EXTENT_ATTR_FORK != 0 {
            Fork::Attr
        } else {
            Fork::Data
        };
        let unwritten = flags & XFS_BMAP_EXTENT_UNWRITTEN != 0;
        if flags & XFS_BMAP_EXTENT_TYPE_MASK == XFS_BMAP_MAP {
            crate::bmap::map_given_as(
                tp,
                &mut ip,
                fork,
                off,
                FsBlock(start),
                u64::from(len),
                unwritten,
            )?;
            let mut f = 0u64;
            if fork == Fork::Attr {
                f |= xfs_format::btree::XFS_RMAP_OFF_ATTR_FORK;
            }
            if unwritten {
                f |= xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN;
            }
            rmap_apply(tp, FsBlock(start), len, ino.0, off, f, true)?;
        } else {
            crate::bmap::unmap_only(tp, &mut ip, fork, off, u64::from(len))?;
        }
        tp.log_inode(&ip)?;
    }
    Ok(())
}

/// Finishes a realtime rmap intent: each update of a realtime file's
/// mapping applied to its group's realtime rmap btree.
fn finish_rui_rt(tp: &mut crate::trans::Trans<'_>, r: &Rui) -> Result<()> {
    use crate::alloc::rtrmap::{self, RtMapping};
    for &(owner, start, off, len, flags) in &r.maps {
        let op = flags & XFS_RMAP_EXTENT_TYPE_MASK;
        if owner & (1 << 63) != 0
            || flags & (XFS_RMAP_EXTENT_ATTR_FORK | XFS_RMAP_EXTENT_BMBT_BLOCK) != 0
        {
            return Err(Error::corrupt(
                "realtime rmap intent",
                Location::Other(format!("log block {}", r.rec_blk)),
                format!(
                    "update of owner {owner:#x} with flags {flags:#x}: not a realtime file's data"
                ),
            ));
        }
        let m = RtMapping {
            rtb: start,
            len: u64::from(len),
            ino: crate::geometry::Ino(owner),
            offset: off,
            unwritten: flags & XFS_RMAP_EXTENT_UNWRITTEN != 0,
        };
        match op {
            XFS_RMAP_EXTENT_CONVERT | XFS_RMAP_EXTENT_CONVERT_SHARED => {
                // The intent carries the state before the conversion.
                rtrmap::convert(
                    tp,
                    RtMapping {
                        unwritten: !m.unwritten,
                        ..m
                    },
                )?
            }
            XFS_RMAP_EXTENT_MAP | XFS_RMAP_EXTENT_MAP_SHARED | XFS_RMAP_EXTENT_ALLOC => {
                rtrmap::map(tp, m)?
            }
            _ => rtrmap::unmap(tp, m)?,
        }
    }
    Ok(())
}

fn finish_rui(tp: &mut crate::trans::Trans<'_>, r: &Rui) -> Result<()> {
    for &(owner, start, off, len, flags) in &r.maps {
        let op = flags & XFS_RMAP_EXTENT_TYPE_MASK;
        let mut f = 0u64;
        if flags & XFS_RMAP_EXTENT_ATTR_FORK != 0 {
            f |= xfs_format::btree::XFS_RMAP_OFF_ATTR_FORK;
        }
        if flags & XFS_RMAP_EXTENT_BMBT_BLOCK != 0 {
            f |= xfs_format::btree::XFS_RMAP_OFF_BMBT_BLOCK;
        }
        if flags & XFS_RMAP_EXTENT_UNWRITTEN != 0 {
            f |= xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN;
        }
        let inode_owner = owner & (1 << 63) == 0;
        let offset = if inode_owner && flags & XFS_RMAP_EXTENT_BMBT_BLOCK == 0 {
            off
        } else {
            0
        };
        if matches!(op, XFS_RMAP_EXTENT_CONVERT | XFS_RMAP_EXTENT_CONVERT_SHARED) {
            // The intent carries the state before the conversion.
            rmap_apply(tp, FsBlock(start), len, owner, offset, f, false)?;
            f ^= xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN;
            rmap_apply(tp, FsBlock(start), len, owner, offset, f, true)?;
            continue;
        }
        // The shared variants: the rmapbt functions find owners' records
        // by range queries whenever the filesystem has reflink.
        let map = matches!(
            op,
            XFS_RMAP_EXTENT_MAP | XFS_RMAP_EXTENT_MAP_SHARED | XFS_RMAP_EXTENT_ALLOC
        );
        rmap_apply(tp, FsBlock(start), len, owner, offset, f, map)?;
    }
    Ok(())
}

/// Before an EFI's blocks are freed on a filesystem with reverse
/// mappings: the mapping that still covers them goes with them. An EFI
/// does not say whose the blocks were (a bmap btree block, a CoW staging
/// extent: their frees remove the mapping themselves), so, as the
/// kernel's recovery does (an unknown owner), the range must lie within
/// one record or none; anything else is refused.
fn unmap_freed(tp: &mut crate::trans::Trans<'_>, id: u64, start: u64, len: u32) -> Result<()> {
    use xfs_format::btree::{XFS_RMAP_OFF_BMBT_BLOCK, XFS_RMAP_OFF_MASK};
    let (agno, agbno) = tp.geo().fsb_split(FsBlock(start));
    let lo = agbno.0;
    let hi = match lo.checked_add(len) {
        Some(hi) if agno.0 < tp.geo().ag_count && hi <= tp.geo().ag_len(agno) => hi,
        _ => {
            return Err(Error::corrupt(
                "log",
                Location::Other(format!("intent {id:#x}")),
                format!("blocks {start}+{len} to free are not inside one AG"),
            ))
        }
    };
    let hits = ag_rmap_overlapping(tp, agno, lo, hi)?;
    match hits[..] {
        [] => Ok(()),
        [(s, l, owner, off)] if s <= lo && hi <= s + l => {
            let flags = off & !XFS_RMAP_OFF_MASK;
            let file_data = owner & (1 << 63) == 0 && flags & XFS_RMAP_OFF_BMBT_BLOCK == 0;
            let offset = if file_data {
                (off & XFS_RMAP_OFF_MASK) + u64::from(lo - s)
            } else {
                0
            };
            rmap_apply(tp, FsBlock(start), len, owner, offset, flags, false)
        }
        _ => Err(Error::Unsupported(format!(
            "intent {id:#x}: blocks {start}+{len} to free still have reverse mappings \
             that do not cover them as one"
        ))),
    }
}

/// The format region of a done item of type `ty` naming intent `id`
/// (RUD, CUD, BUD, XMD, ATTRD: `xfs_*d_log_format`).
pub(crate) fn done_item(ty: u16, id: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(XFS_DONE_LOG_FORMAT_SIZE);
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&id.to_le_bytes());
    v
}

/// An EFD for `efi`: the header, then its extents in the 16-byte form of
/// 64-bit hosts (the kernel checks the length against the count).
fn efd_item(efi: &Efi) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + 16 * efi.extents.len());
    let ty = if efi.realtime {
        XFS_LI_EFD_RT
    } else {
        XFS_LI_EFD
    };
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&(efi.extents.len() as u32).to_le_bytes());
    v.extend_from_slice(&efi.id.to_le_bytes());
    for &(start, len) in &efi.extents {
        v.extend_from_slice(&start.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
    }
    v
}

/// What [`finish_intents`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Finished {
    /// Extents of extent-free intents freed.
    pub efi_extents: usize,
    /// Reverse-mapping, reference count, block-mapping and attribute
    /// updates done.
    pub updates: usize,
    /// Pairs of mappings exchanged for mapping-exchange intents.
    pub exchanged: usize,
}

/// Finishes `intents` in order on a filesystem opened for writing, one
/// transaction each (a mapping exchange: one per pair of mappings, as the
/// kernel steps it); then writes everything back.
///
/// Each transaction logs the done item of the intent it finishes, so a
/// crash leaves every intent either whole in the log with its work or
/// not done at all. A mapping exchange takes several transactions, which
/// the kernel chains by logging a new intent at each step; here they are
/// held back from the log until the last one (with the exchange's done
/// item) commits, and reach it in one checkpoint.
pub fn finish_intents(fs: &Fs, intents: &[Intent]) -> Result<Finished> {
    let ws = fs.write_state()?;
    let exchanges = intents.iter().any(|i| matches!(i, Intent::Xmi(_)));
    if exchanges {
        ws.hold_log();
    }
    let r = finish_all(fs, intents);
    if exchanges {
        ws.release_log();
    }
    let done = r?;
    fs.sync()?;
    Ok(done)
}

fn finish_all(fs: &Fs, intents: &[Intent]) -> Result<Finished> {
    check_ruis(intents)?;
    let efis: Vec<Efi> = intents
        .iter()
        .filter_map(|i| match i {
            Intent::Efi(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let mut freed = 0;
    let mut rmaps = 0;
    let mut started = Vec::new();
    let geo = fs.geometry().clone();
    for efi in &efis {
        for &(start, len) in &efi.extents {
            let valid = if efi.realtime {
                let r = u64::from(geo.rt_extsize.max(1));
                geo.has_rtgroups()
                    && !geo.zoned
                    && geo.rtb_range_valid(start, u64::from(len))
                    && start % r == 0
                    && u64::from(len) % r == 0
            } else {
                geo.fsb_range_valid(FsBlock(start), u64::from(len))
            };
            if len == 0 || !valid {
                return Err(Error::corrupt(
                    "extent-free intent",
                    Location::Log { block: efi.rec_blk },
                    format!(
                        "intent {:#x}: extent of {len} blocks at {start} is invalid",
                        efi.id
                    ),
                ));
            }
        }
    }
    for i in intents {
        if let Intent::Xmi(x) = i {
            started.push(super::exchange::start_exchange(fs, x)?);
            continue;
        }
        let mut tp = fs.trans()?;
        match i {
            Intent::Xmi(_) => {}
            Intent::Rui(r) => {
                if r.realtime {
                    finish_rui_rt(&mut tp, r)?;
                    tp.log_done(done_item(XFS_LI_RUD_RT, r.id));
                } else {
                    finish_rui(&mut tp, r)?;
                    tp.log_done(done_item(XFS_LI_RUD, r.id));
                }
                rmaps += r.maps.len();
            }
            Intent::Cui(c) => {
                finish_cui(&mut tp, c)?;
                tp.log_done(done_item(XFS_LI_CUD, c.id));
                rmaps += c.changes.len();
            }
            Intent::Attri(a) => {
                super::attr::finish_attri(&mut tp, a)?;
                tp.log_done(done_item(XFS_LI_ATTRD, a.id));
                rmaps += 1;
            }
            Intent::Bui(b) => {
                finish_bui(&mut tp, b)?;
                tp.log_done(done_item(XFS_LI_BUD, b.id));
                rmaps += b.maps.len();
            }
            Intent::Efi(efi) => {
                for &(start, len) in &efi.extents {
                    if efi.realtime {
                        // Its reverse mapping went in an RUI_RT of its
                        // own, as the kernel logs them.
                        crate::alloc::rtalloc::rt_free_blocks(&mut tp, start, u64::from(len))?;
                        freed += 1;
                        continue;
                    }
                    if geo.features.rmapbt {
                        unmap_freed(&mut tp, efi.id, start, len)?;
                    }
                    free_extent_no_rmap(&mut tp, FsBlock(start), len)?;
                    freed += 1;
                }
                tp.log_done(efd_item(efi));
            }
        }
        tp.commit()?;
    }
    // The kernel finishes the rest of each exchange after every intent
    // had its turn, in log order.
    let mut exchanged = 0;
    for ex in &mut started {
        super::exchange::continue_exchange(fs, ex)?;
        exchanged += ex.pairs();
        let mut tp = fs.trans()?;
        tp.log_done(done_item(XFS_LI_XMD, ex.id()));
        tp.commit()?;
    }
    Ok(Finished {
        efi_extents: freed,
        updates: rmaps,
        exchanged,
    })
}

//! Replaying committed transactions into an overlay, never the device.
//!
//! Pass 1 counts the cancelled buffers (buffer items with the CANCEL
//! flag: the block was freed, so older changes to it must not be
//! replayed). Pass 2 takes each transaction in commit order and applies its
//! items under the transaction's LSN, ordered as the kernel orders them:
//! buffers and inode chunk creations, then inodes and intents, then inode
//! cluster buffers (unlinked pointers), then cancellations.
//!
//! A buffer whose block already carries an LSN at or past the
//! transaction's is newer than the change and is skipped; an inode whose
//! `di_lsn` is past it likewise. Changes made under one LSN are compared
//! against the block's LSN from before that LSN's changes, as the kernel
//! only writes its buffers back when the LSN moves on.

use super::replay_inode::{replay_icreate, replay_inode};
use super::stamp::{buf_lsn, stamp_buf};
use super::trans::{Item, Trans};
use crate::dev::overlay::Overlay;
use crate::dev::Device;
use crate::error::{Error, Location, Result};
use crate::geometry::Geometry;
use std::collections::{BTreeMap, HashMap};
use xfs_format::log_item::*;

/// What replay did.
#[derive(Debug, Clone, Default)]
pub struct ReplayStats {
    /// Transactions replayed.
    pub transactions: usize,
    /// Buffer items copied into their blocks.
    pub bufs_replayed: usize,
    /// Buffer items skipped because the block was newer.
    pub bufs_newer: usize,
    /// Buffer items skipped because the block was freed later.
    pub bufs_cancelled: usize,
    /// Quota items and dquot buffers not replayed: the superblock has no
    /// quota accounting on.
    pub bufs_quota: usize,
    /// Dquot items copied into their records.
    pub dquots_replayed: usize,
    /// Dquot items skipped because the record was newer.
    pub dquots_newer: usize,
    /// Dquot items and dquot buffers skipped because a quota-off item in
    /// the log turned their kind off.
    pub dquots_off: usize,
    /// Inode items copied into their inodes.
    pub inodes_replayed: usize,
    /// Inode items skipped because the inode was newer.
    pub inodes_newer: usize,
    /// Inode items skipped because their cluster was freed later.
    pub inodes_cancelled: usize,
    /// Inode chunks initialised.
    pub icreates: usize,
    /// Intents without their done item: (type name, id, LSN).
    pub unfinished_intents: Vec<(&'static str, u64, u64)>,
    /// Things replay could not do, in words.
    pub warnings: Vec<String>,
}

/// Where an item came from, for error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemAt {
    pub(crate) rec_blk: u64,
    pub(crate) index: usize,
}

impl ItemAt {
    pub(crate) fn err(&self, what: &'static str, detail: impl Into<String>) -> Error {
        Error::corrupt(
            what,
            Location::Other(format!(
                "log item {} of the transaction committed in the record at log block {}",
                self.index, self.rec_blk
            )),
            detail,
        )
    }
}

/// Replay state: the overlay being built over the device.
pub struct Replayer<'a> {
    pub(crate) dev: &'a dyn Device,
    pub(crate) geo: &'a Geometry,
    /// The replayed blocks.
    pub overlay: Overlay,
    cancel: HashMap<(i64, u32), u32>,
    /// LSN of the transactions being replayed now, and the LSN each block
    /// they touched had before them.
    group_lsn: u64,
    group_prior: HashMap<u64, Option<u64>>,
    /// Dquot kinds a quota-off item of the log turned off.
    pub(crate) quota_off: u8,
    /// The superblock has quota accounting on: dquots are replayed.
    quota_on: bool,
    /// Counters and notes.
    pub stats: ReplayStats,
}

impl<'a> Replayer<'a> {
    /// A replayer over `dev` with geometry `geo`.
    pub fn new(dev: &'a dyn Device, geo: &'a Geometry) -> Replayer<'a> {
        Replayer {
            dev,
            geo,
            overlay: Overlay::new(),
            cancel: HashMap::new(),
            group_lsn: 0,
            group_prior: HashMap::new(),
            quota_off: 0,
            quota_on: false,
            stats: ReplayStats::default(),
        }
    }

    /// Replays all of `transactions` (committed, in commit order).
    pub fn run(&mut self, transactions: &[Trans]) -> Result<()> {
        let ss = u64::from(self.geo.sect_size);
        self.quota_on = super::replay_dquot::accounting_on(&self.read(0, ss / 512)?);
        for t in transactions {
            for (i, it) in t.items.iter().enumerate() {
                if it.item_type() == XFS_LI_QUOTAOFF {
                    self.quota_off |= super::replay_dquot::quotaoff_kinds(it);
                }
                if it.item_type() == XFS_LI_BUF {
                    let at = ItemAt {
                        rec_blk: t.commit_blk,
                        index: i,
                    };
                    let f = BufFmt::parse(it, at)?;
                    if f.flags & XFS_BLF_CANCEL != 0 {
                        *self.cancel.entry((f.blkno, f.len_bb)).or_insert(0) += 1;
                    }
                }
            }
        }
        for t in transactions {
            self.replay_trans(t)?;
        }
        self.stats.unfinished_intents = unfinished_intents(transactions);
        Ok(())
    }

    pub(crate) fn is_cancelled(&self, blkno: i64, len_bb: u32) -> bool {
        self.cancel.contains_key(&(blkno, len_bb))
    }

    fn replay_trans(&mut self, t: &Trans) -> Result<()> {
        if t.lsn != self.group_lsn {
            self.group_lsn = t.lsn;
            self.group_prior.clear();
        }
        self.stats.transactions += 1;
        // The kernel's order: plain buffers and icreates, other items,
        // inode cluster buffers, cancellations.
        let mut order: Vec<(u8, usize)> = Vec::with_capacity(t.items.len());
        for (i, it) in t.items.iter().enumerate() {
            let rank = match it.item_type() {
                XFS_LI_ICREATE => 0,
                XFS_LI_BUF => {
                    let flags = it
                        .regions
                        .first()
                        .filter(|r| r.len() >= 6)
                        .map(|r| u16::from_le_bytes([r[4], r[5]]))
                        .unwrap_or(0);
                    if flags & XFS_BLF_CANCEL != 0 {
                        3
                    } else if flags & XFS_BLF_INODE_BUF != 0 {
                        2
                    } else {
                        0
                    }
                }
                _ => 1,
            };
            order.push((rank, i));
        }
        order.sort_by_key(|&(r, i)| (r, i));
        for (_, i) in order {
            let it = &t.items[i];
            let at = ItemAt {
                rec_blk: t.commit_blk,
                index: i,
            };
            match it.item_type() {
                XFS_LI_BUF => self.replay_buf(it, t.lsn, at)?,
                XFS_LI_INODE => replay_inode(self, it, t.lsn, at)?,
                XFS_LI_ICREATE => replay_icreate(self, it, at)?,
                XFS_LI_EFI | XFS_LI_RUI | XFS_LI_CUI | XFS_LI_BUI | XFS_LI_ATTRI | XFS_LI_XMI
                | XFS_LI_EFI_RT | XFS_LI_RUI_RT | XFS_LI_EFD | XFS_LI_RUD | XFS_LI_CUD
                | XFS_LI_BUD | XFS_LI_ATTRD | XFS_LI_XMD | XFS_LI_EFD_RT | XFS_LI_RUD_RT => {
                    intent_id(it, at)?;
                }
                XFS_LI_DQUOT if self.quota_on => {
                    super::replay_dquot::replay_dquot(self, it, t.lsn, at)?
                }
                XFS_LI_DQUOT => self.stats.bufs_quota += 1,
                // Read in the first pass.
                XFS_LI_QUOTAOFF => {}
                ty => return Err(at.err("log item", format!("unknown item type {ty:#x}"))),
            }
        }
        Ok(())
    }

    /// Checks that `len_bb` blocks at `blkno` lie in the data section.
    pub(crate) fn check_range(&self, blkno: i64, len_bb: u64, at: ItemAt) -> Result<u64> {
        let dev_bb = self.geo.data_blocks * u64::from(self.geo.block_size) / 512;
        match u64::try_from(blkno) {
            Ok(b) if len_bb > 0 && b.checked_add(len_bb).is_some_and(|e| e <= dev_bb) => Ok(b),
            _ => Err(at.err(
                "log item",
                format!("{len_bb} blocks at daddr {blkno} lie outside the filesystem"),
            )),
        }
    }

    /// Reads `len_bb` sectors at `daddr` as replay sees them.
    pub(crate) fn read(&self, daddr: u64, len_bb: u64) -> Result<Vec<u8>> {
        if let Some(b) = self.overlay.get_all(daddr, len_bb) {
            return Ok(b);
        }
        let mut b = vec![0u8; (len_bb * 512) as usize];
        self.dev.read_at(&mut b, daddr * 512).map_err(Error::Io)?;
        self.overlay.patch(&mut b, daddr * 512);
        Ok(b)
    }

    /// Stores replayed bytes, remembering the block's LSN from before this
    /// LSN's changes.
    pub(crate) fn write(&mut self, daddr: u64, b: &[u8], prior_lsn: Option<u64>) {
        self.group_prior.entry(daddr).or_insert(prior_lsn);
        self.overlay.put(daddr, b);
    }

    /// Stores replayed bytes at `daddr`, part of the buffer at `group`
    /// (an inode in its cluster), whose LSN is not the buffer's.
    pub(crate) fn write_part(&mut self, group: u64, daddr: u64, b: &[u8]) {
        self.group_prior.entry(group).or_insert(None);
        self.overlay.put(daddr, b);
    }

    fn replay_buf(&mut self, it: &Item, lsn: u64, at: ItemAt) -> Result<()> {
        let f = BufFmt::parse(it, at)?;
        if f.flags & XFS_BLF_CANCEL != 0 {
            if let Some(n) = self.cancel.get_mut(&(f.blkno, f.len_bb)) {
                *n -= 1;
                if *n == 0 {
                    self.cancel.remove(&(f.blkno, f.len_bb));
                }
            }
            self.stats.bufs_cancelled += 1;
            return Ok(());
        }
        if self.is_cancelled(f.blkno, f.len_bb) {
            self.stats.bufs_cancelled += 1;
            return Ok(());
        }
        let dquots = super::replay_dquot::buf_kinds(f.flags);
        if dquots != 0 && !self.quota_on {
            self.stats.bufs_quota += 1;
            return Ok(());
        }
        if dquots & self.quota_off != 0 {
            self.stats.dquots_off += 1;
            return Ok(());
        }
        let daddr = self.check_range(f.blkno, u64::from(f.len_bb), at)?;
        let mut b = self.read(daddr, u64::from(f.len_bb))?;
        let blft = blft_from_flags(f.flags);
        let on_disk = match self.group_prior.get(&daddr) {
            Some(prior) => *prior,
            None if dquots != 0 => dquot_buf_lsn(&b, self.geo),
            None => buf_lsn(&b, blft, &self.geo.meta_uuid, self.geo.features.meta_uuid),
        };
        if let Some(l) = on_disk {
            if l != 0 && l != u64::MAX && l >= lsn {
                self.stats.bufs_newer += 1;
                return Ok(());
            }
        }
        if f.flags & XFS_BLF_INODE_BUF != 0 {
            self.replay_inode_buf(&f, it, &mut b, at)?;
        } else {
            for (region, (bit, mut nbits)) in (1..).zip(f.runs()) {
                let src = it.regions.get(region).ok_or_else(|| {
                    at.err(
                        "buffer log item",
                        format!("no region for dirty chunk {bit}"),
                    )
                })?;
                if src.len() < nbits * XFS_BLF_CHUNK {
                    nbits = src.len() / XFS_BLF_CHUNK;
                }
                // A dquot buffer's region that starts with an invalid
                // dquot is left out, as the kernel leaves it.
                if dquots != 0 && !super::replay_dquot::region_ok(src, self.geo.features.bigtime) {
                    continue;
                }
                let (off, n) = (bit * XFS_BLF_CHUNK, nbits * XFS_BLF_CHUNK);
                if off + n > b.len() {
                    return Err(at.err(
                        "buffer log item",
                        format!(
                            "dirty bytes {off}..{} past the {}-byte buffer",
                            off + n,
                            b.len()
                        ),
                    ));
                }
                b[off..off + n].copy_from_slice(&src[..n]);
            }
            stamp_buf(&mut b, blft, lsn, self.geo.block_size as usize);
        }
        self.write(daddr, &b, on_disk);
        self.stats.bufs_replayed += 1;
        Ok(())
    }

    /// An inode cluster buffer: only the `di_next_unlinked` fields are
    /// taken from the logged chunks; each changed inode gets a new CRC.
    fn replay_inode_buf(&self, f: &BufFmt, it: &Item, b: &mut [u8], at: ItemAt) -> Result<()> {
        let isize = self.geo.inode_size as usize;
        let runs = f.runs();
        for (i, ioff) in (0..b.len() / isize).map(|i| (i, i * isize)) {
            let field = ioff + xfs_format::inode::XFS_DINODE_NEXT_UNLINKED_OFF;
            let Some((r, &(bit, nbits))) = runs
                .iter()
                .enumerate()
                .find(|(_, &(bit, n))| field >= bit * 128 && field + 4 <= (bit + n) * 128)
            else {
                continue;
            };
            let src = it.regions.get(r + 1).ok_or_else(|| {
                at.err(
                    "inode buffer log item",
                    format!("no region for dirty chunk {bit}"),
                )
            })?;
            let so = field - bit * XFS_BLF_CHUNK;
            if so + 4 > src.len() || nbits == 0 {
                return Err(at.err("inode buffer log item", "logged region too short"));
            }
            let v = &src[so..so + 4];
            if v == [0, 0, 0, 0] {
                return Err(at.err(
                    "inode buffer log item",
                    format!("inode {i} of the buffer gets a zero unlinked pointer"),
                ));
            }
            b[field..field + 4].copy_from_slice(v);
            xfs_format::crc::stamp(
                &mut b[ioff..ioff + isize],
                xfs_format::inode::XFS_DINODE_CRC_OFF,
            );
        }
        Ok(())
    }
}

/// The LSN a dquot buffer carries in its first record (v5, of this
/// filesystem), as the kernel reads it to decide whether to replay.
fn dquot_buf_lsn(b: &[u8], geo: &Geometry) -> Option<u64> {
    if !geo.v5
        || b.len() < 136
        || u16::from_be_bytes([b[0], b[1]]) != xfs_format::quota::XFS_DQUOT_MAGIC
    {
        return None;
    }
    (b[120..136] == geo.meta_uuid[..])
        .then(|| u64::from_be_bytes(b[112..120].try_into().expect("8")))
}

/// The decoded format region of a buffer item.
pub(crate) struct BufFmt {
    pub(crate) flags: u16,
    pub(crate) len_bb: u32,
    pub(crate) blkno: i64,
    pub(crate) map: Vec<u32>,
}

impl BufFmt {
    pub(crate) fn parse(it: &Item, at: ItemAt) -> Result<BufFmt> {
        let r = &it.regions[0];
        let bad = |d: String| at.err("buffer log item", d);
        if r.len() < XFS_BUF_LOG_FORMAT_MAP_OFF || r.len() > XFS_BUF_LOG_FORMAT_SIZE {
            return Err(bad(format!("format region of {} bytes", r.len())));
        }
        let map_size = u32::from_le_bytes([r[16], r[17], r[18], r[19]]) as usize;
        if map_size > XFS_BLF_DATAMAP_SIZE || 20 + map_size * 4 > r.len() {
            return Err(bad(format!("dirty map of {map_size} words")));
        }
        let map = (0..map_size)
            .map(|i| {
                let o = 20 + i * 4;
                u32::from_le_bytes([r[o], r[o + 1], r[o + 2], r[o + 3]])
            })
            .collect();
        Ok(BufFmt {
            flags: u16::from_le_bytes([r[4], r[5]]),
            len_bb: u32::from(u16::from_le_bytes([r[6], r[7]])),
            blkno: i64::from_le_bytes(r[8..16].try_into().expect("8 bytes")),
            map,
        })
    }

    /// Runs of set bits: (first bit, number of bits).
    pub(crate) fn runs(&self) -> Vec<(usize, usize)> {
        let nbits = self.map.len() * 32;
        let set = |i: usize| self.map[i / 32] & (1 << (i % 32)) != 0;
        let mut out = Vec::new();
        let mut i = 0;
        while i < nbits {
            if set(i) {
                let s = i;
                while i < nbits && set(i) {
                    i += 1;
                }
                out.push((s, i - s));
            } else {
                i += 1;
            }
        }
        out
    }
}

pub(crate) fn intent_id(it: &Item, at: ItemAt) -> Result<u64> {
    let r = &it.regions[0];
    // Every intent and done format keeps the intent's id at byte 8.
    r.get(8..16)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| {
            at.err(
                "intent log item",
                format!("format region of {} bytes", r.len()),
            )
        })
}

/// Intents (EFI, RUI, CUI, BUI, ATTRI, XMI) whose done item is not in
/// the log, in log order: (type name, id, LSN of the transaction that
/// logged it).
pub fn unfinished_intents(transactions: &[Trans]) -> Vec<(&'static str, u64, u64)> {
    let mut open: BTreeMap<(u16, u64), (usize, u64)> = BTreeMap::new();
    let mut seq = 0;
    for t in transactions {
        for it in &t.items {
            let ty = it.item_type();
            let Some(id) = it.regions[0].get(8..16) else {
                continue;
            };
            let id = u64::from_le_bytes(id.try_into().expect("8 bytes"));
            match ty {
                XFS_LI_EFI | XFS_LI_RUI | XFS_LI_CUI | XFS_LI_BUI | XFS_LI_ATTRI | XFS_LI_XMI
                | XFS_LI_EFI_RT | XFS_LI_RUI_RT => {
                    open.insert((ty, id), (seq, t.lsn));
                    seq += 1;
                }
                XFS_LI_EFD | XFS_LI_RUD | XFS_LI_CUD | XFS_LI_BUD | XFS_LI_ATTRD | XFS_LI_XMD
                | XFS_LI_EFD_RT | XFS_LI_RUD_RT => {
                    open.remove(&(ty - 1, id));
                }
                _ => {}
            }
        }
    }
    let mut v: Vec<_> = open.into_iter().collect();
    v.sort_by_key(|(_, (seq, _))| *seq);
    v.into_iter()
        .map(|((ty, id), (_, lsn))| (item_type_name(ty), id, lsn))
        .collect()
}

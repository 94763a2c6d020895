//! Evidence from the log: what its items still hold of the deleted inodes
//! and of the directories that named them, the old passes' items too (a
//! clean log keeps them until their space is written again).
//!
//! - An inode item logs the whole core and, when they changed, the forks.
//!   Applied one after another over an inode of zeros, the items of one
//!   life of an inode rebuild it as it was: its size at the unlink (the
//!   unlink logs the core with the size still in it; freeing resets it),
//!   and its extents or mapping btree root when the transaction that
//!   allocated them is still in the log.
//! - A short-form directory's item logs the whole directory: every name
//!   it held, with the inode number whole.
//! - A directory block's buffer item logs the chunks that changed, the
//!   header (which names the directory, v5) and the entries added; an
//!   entry is recognised by its tag, which holds its own offset.
//!
//! v5 filesystems only: the v4 inode core is shorter and v4 directory
//! blocks do not name their directory.

use super::raw::{self, DeadEntry, Time};
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Geometry;
use std::collections::{HashMap, HashSet};
use xfs_format::dir::{XFS_DIR3_BLOCK_MAGIC, XFS_DIR3_DATA_MAGIC};
use xfs_format::inode::{Dinode, InodeTime, XFS_DINODE_MAGIC, XFS_DINODE_SIZE};
use xfs_format::log_item::{
    XFS_BLF_CANCEL, XFS_BLF_CHUNK, XFS_BLF_INODE_BUF, XFS_ILOG_DDATA, XFS_ILOG_DFORK, XFS_LI_BUF,
    XFS_LI_INODE,
};
use zerocopy::FromBytes;

const S_IFMT: u16 = 0o170000;
const S_IFDIR: u16 = 0o040000;
/// `di_format` of a local (short-form) fork.
const FMT_LOCAL: u8 = 1;

/// One life of an inode: the generation it had in use, its creation time.
pub(super) type Life = (u32, Time);

/// What the log shows of one inode.
#[derive(Default)]
pub(super) struct LogInode {
    /// Its lives, in log order.
    pub lives: Vec<Life>,
    /// In its last life: the inode as it was logged at its unlink (its
    /// size still whole), else as last logged in use. `fork` tells
    /// whether its data fork was logged in that life (else it is zeros).
    pub last: Option<Snapshot>,
}

/// An inode rebuilt from the log.
pub(super) struct Snapshot {
    pub raw: Vec<u8>,
    pub fork: bool,
}

/// Per inode being rebuilt.
struct Building {
    slot: Vec<u8>,
    fork: bool,
    unlinked: bool,
}

/// Everything the log gave.
#[derive(Default)]
pub(super) struct Evidence {
    pub inodes: HashMap<u64, LogInode>,
    /// Entries that named a wanted inode: (directory, entry).
    pub entries: Vec<(u64, DeadEntry)>,
    /// Transactions read.
    pub transactions: u64,
    /// The lives the log shows of every other inode (a directory named
    /// in `entries` may have been freed and its number used again).
    pub other_lives: HashMap<u64, Vec<Life>>,
}

impl Evidence {
    /// The lives the log shows of inode `ino`.
    pub fn lives(&self, ino: u64) -> &[Life] {
        match self.inodes.get(&ino) {
            Some(li) => &li.lives,
            None => self.other_lives.get(&ino).map_or(&[], |v| v.as_slice()),
        }
    }
}

fn life_of(d: &Dinode) -> Life {
    // Freeing bumps the generation: the life is the one before.
    let gen = if d.di_mode.get() == 0 {
        d.di_gen.get().wrapping_sub(1)
    } else {
        d.di_gen.get()
    };
    (gen, d.time(InodeTime::Crtime))
}

/// Reads the whole log of `fs` for the inodes in `wanted` and the names
/// that pointed at them.
pub(super) fn read(fs: &Fs, wanted: &HashSet<u64>) -> Result<Evidence> {
    let geo = fs.geometry();
    let mut ev = Evidence::default();
    if !geo.v5 || wanted.is_empty() || crate::log::log_missing(fs.device(), geo) {
        return Ok(ev);
    }
    let transactions = crate::log::read_whole_log(fs.device(), geo)?;
    ev.transactions = transactions.len() as u64;
    let isize = geo.inode_size as usize;
    let fresh = || {
        let mut v = vec![0u8; isize];
        v[..2].copy_from_slice(&XFS_DINODE_MAGIC.to_be_bytes());
        v
    };
    let mut building: HashMap<u64, Building> = HashMap::new();
    let mut scratch = fresh();
    let mut seen: HashSet<(u64, u64, Vec<u8>)> = HashSet::new();
    let mut push = |ev: &mut Evidence, dir: u64, e: DeadEntry| {
        if wanted.contains(&e.ino) && e.ino != dir && seen.insert((dir, e.ino, e.name.clone())) {
            ev.entries.push((dir, e));
        }
    };
    for t in &transactions {
        for it in &t.items {
            match it.item_type() {
                XFS_LI_INODE => {
                    let Some((ino, fields)) = crate::log::inode_item_fields(it) else {
                        continue;
                    };
                    let slot = if wanted.contains(&ino) {
                        let b = building.entry(ino).or_insert_with(|| Building {
                            slot: fresh(),
                            fork: false,
                            unlinked: false,
                        });
                        // A new life starts over zeros.
                        let before = b.slot.clone();
                        if !crate::log::apply_inode_item(geo, it, t.lsn, &mut b.slot) {
                            b.slot = before;
                            continue;
                        }
                        let d = Dinode::ref_from_prefix(&b.slot[..]).expect("an inode").0;
                        let life = life_of(d);
                        let li = ev.inodes.entry(ino).or_default();
                        if li.lives.last() != Some(&life) {
                            li.lives.push(life);
                            li.last = None;
                            b.slot = fresh();
                            b.fork = false;
                            b.unlinked = false;
                            crate::log::apply_inode_item(geo, it, t.lsn, &mut b.slot);
                        }
                        b.fork |= fields & XFS_ILOG_DFORK != 0;
                        let d = Dinode::ref_from_prefix(&b.slot[..]).expect("an inode").0;
                        if d.di_mode.get() != 0 && !b.unlinked {
                            b.unlinked = d.di_nlink.get() == 0;
                            li.last = Some(Snapshot {
                                raw: b.slot.clone(),
                                fork: b.fork,
                            });
                        }
                        &b.slot
                    } else {
                        scratch.fill(0);
                        scratch[..2].copy_from_slice(&XFS_DINODE_MAGIC.to_be_bytes());
                        if !crate::log::apply_inode_item(geo, it, t.lsn, &mut scratch) {
                            continue;
                        }
                        let d = Dinode::ref_from_prefix(&scratch[..]).expect("an inode").0;
                        let life = life_of(d);
                        let lives = ev.other_lives.entry(ino).or_default();
                        if lives.last() != Some(&life) {
                            lives.push(life);
                        }
                        &scratch
                    };
                    // A short-form directory logs every name it holds.
                    let d = Dinode::ref_from_prefix(&slot[..]).expect("an inode").0;
                    if d.di_mode.get() & S_IFMT == S_IFDIR
                        && d.di_format == FMT_LOCAL
                        && fields & XFS_ILOG_DDATA != 0
                    {
                        for e in sf_entries(geo, &slot[XFS_DINODE_SIZE..]) {
                            push(&mut ev, ino, e);
                        }
                    }
                }
                XFS_LI_BUF => {
                    if let Some((dir, ents)) = dir_buffer(geo, it) {
                        for e in ents {
                            push(&mut ev, dir, e);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(ev)
}

/// The entries of a short-form directory's fork.
fn sf_entries(geo: &Geometry, fork: &[u8]) -> Vec<DeadEntry> {
    let Some(h) = xfs_format::dir::sf::parse_sf_hdr(fork) else {
        return Vec::new();
    };
    xfs_format::dir::sf::SfIter::new(fork, &h, geo.features.ftype)
        .map_while(|e| e.ok())
        .filter(|e| raw::valid_name(e.name) && geo.ino_valid(crate::geometry::Ino(e.inumber)))
        .map(|e| DeadEntry {
            ino: e.inumber,
            low32_only: false,
            name: e.name.to_vec(),
            ftype: e.ftype,
            live: true,
        })
        .collect()
}

/// A logged directory data block: the directory its header names and
/// the entries in its logged chunks.
fn dir_buffer(geo: &Geometry, it: &crate::log::trans::Item) -> Option<(u64, Vec<DeadEntry>)> {
    let at = crate::log::replay::ItemAt {
        rec_blk: 0,
        index: 0,
    };
    let f = crate::log::replay::BufFmt::parse(it, at).ok()?;
    if f.flags & (XFS_BLF_CANCEL | XFS_BLF_INODE_BUF) != 0 {
        return None;
    }
    let len = f.len_bb as usize * 512;
    if len == 0 || len > 1 << 16 {
        return None;
    }
    let mut buf = vec![0u8; len];
    let mut runs = Vec::new();
    for (region, (bit, nbits)) in (1..).zip(f.runs()) {
        let src = it.regions.get(region)?;
        let (off, n) = (bit * XFS_BLF_CHUNK, (nbits * XFS_BLF_CHUNK).min(src.len()));
        if off + n > len {
            return None;
        }
        buf[off..off + n].copy_from_slice(&src[..n]);
        runs.push((off, off + n));
    }
    // The header must be logged: it names the directory.
    let hdr = geo.layout().dir_data_hdr;
    if runs.first().is_none_or(|&(s, e)| s != 0 || e < hdr) {
        return None;
    }
    let magic = u32::from_be_bytes(buf[..4].try_into().ok()?);
    if magic != XFS_DIR3_BLOCK_MAGIC && magic != XFS_DIR3_DATA_MAGIC {
        return None;
    }
    let h = <xfs_format::dir::block::Dir3BlkHdr as FromBytes>::ref_from_prefix(&buf[..])
        .ok()?
        .0;
    let uuid = if geo.features.meta_uuid {
        geo.meta_uuid
    } else {
        geo.uuid
    };
    let owner = h.owner.get();
    if h.blkno.get() as i64 != f.blkno
        || h.uuid.0 != uuid
        || !geo.ino_valid(crate::geometry::Ino(owner))
    {
        return None;
    }
    let mut out = Vec::new();
    for (s, e) in runs {
        out.extend(raw::entries_in(geo, &buf, s.max(hdr), e));
    }
    Some((owner, out))
}

//! Changing inode attributes the way setattr(2)-like callers ask for it
//! (several fields in one transaction, "now" resolved by the engine's
//! clock), and the filesystem-wide space and inode counters as the AG
//! headers hold them right now (committed changes included).

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{Inode, Timestamp};
use xfs_format::ag::{Agf, Agi, XFS_AGF_MAGIC, XFS_AGI_MAGIC};
use zerocopy::FromBytes;

/// A time to set: the engine's "now", or a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The time of the change.
    Now,
    /// Exactly this time.
    At(Timestamp),
}

/// Which attributes to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttrChange {
    /// Permission, set-id and sticky bits (the type bits are kept).
    pub mode: Option<u16>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Last access.
    pub atime: Option<SetTime>,
    /// Last modification.
    pub mtime: Option<SetTime>,
    /// Last change: when `None` and anything else changes, the time of the
    /// change (as the kernel stamps ctime on every setattr).
    pub ctime: Option<Timestamp>,
}

impl AttrChange {
    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        *self == AttrChange::default()
    }
}

/// Free space and inode counts of one AG, from its AGF and AGI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgCounters {
    /// Blocks in the AG (`agf_length`).
    pub length: u32,
    /// Free blocks in the free-space btrees.
    pub free_blocks: u64,
    /// Blocks on the AG free list.
    pub freelist_blocks: u64,
    /// Blocks of the free-space (and rmap) btrees beyond their roots
    /// (`agf_btreeblks`).
    pub btree_blocks: u64,
    /// Blocks of the reverse-mapping btree (`agf_rmap_blocks`).
    pub rmap_blocks: u64,
    /// Blocks of the refcount btree (`agf_refcount_blocks`).
    pub refcount_blocks: u64,
    /// Allocated inodes (in inode chunks).
    pub inodes: u64,
    /// Free inodes in allocated chunks.
    pub free_inodes: u64,
    /// Blocks of the free-inode btree (`agi_fblocks`, kept only with the
    /// inobtcount feature).
    pub finobt_blocks: u64,
}

impl Fs {
    /// Applies `change` to `ino` in one transaction and returns the inode
    /// as it is afterwards. An empty change returns the inode unchanged.
    pub fn change_attrs(&self, ino: Ino, change: &AttrChange) -> Result<Inode> {
        self.change_attrs_as(ino, change, false)
    }

    /// Drops privileges as a write or truncate by a caller without
    /// CAP_FSETID does: `change` clears set-id bits. The kernel's VFS
    /// drops them on append-only inodes too (it is not a mode change
    /// the flag forbids); only immutability refuses it.
    pub fn drop_privileges(&self, ino: Ino, change: &AttrChange) -> Result<Inode> {
        self.change_attrs_as(ino, change, true)
    }

    fn change_attrs_as(&self, ino: Ino, change: &AttrChange, privs: bool) -> Result<Inode> {
        if change.is_empty() {
            return self.inode(ino);
        }
        self.quota_prepare_owner(ino, change.uid, change.gid, None)?;
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        // Both times "now" is a touch, which only immutability forbids;
        // any other time, or mode or owners, is a change.
        let touch = change.atime == Some(SetTime::Now) && change.mtime == Some(SetTime::Now);
        if privs {
            super::guard::may_write(&ip, "dropping set-id bits")?;
        } else if change.mode.is_some() || change.uid.is_some() || change.gid.is_some() {
            super::guard::may_change(&ip, "changing attributes")?;
        } else if touch {
            super::guard::may_write(&ip, "changing times")?;
        } else if change.atime.is_some() || change.mtime.is_some() {
            super::guard::may_change(&ip, "changing times")?;
        }
        if let Some(m) = change.mode {
            ip.mode = (ip.mode & !0o7777) | (m & 0o7777);
        }
        if let Some(u) = change.uid {
            ip.uid = u;
        }
        if let Some(g) = change.gid {
            ip.gid = g;
        }
        let at = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        if let Some(t) = change.atime {
            ip.atime = at(t);
        }
        if let Some(t) = change.mtime {
            ip.mtime = at(t);
        }
        self.touch_change(&mut ip, change.ctime.unwrap_or(now))?;
        tp.log_inode(&ip)?;
        tp.commit()?;
        Ok(ip)
    }

    /// The free-space and inode counters of every AG header, reading
    /// committed but unwritten headers from memory.
    pub fn space_counters(&self) -> Result<Vec<AgCounters>> {
        let geo = self.geometry();
        let sect = geo.sect_size as usize;
        let mut out = Vec::with_capacity(geo.ag_count as usize);
        for agno in 0..geo.ag_count {
            let ag_start = u64::from(agno) * u64::from(geo.ag_blocks) * u64::from(geo.block_size);
            let agf = self.header(ag_start + sect as u64, sect)?;
            let (f, _) = Agf::ref_from_prefix(&agf[..])
                .map_err(|_| Error::corrupt("AGF", Location::Sb(agno), "short"))?;
            if f.agf_magicnum.get() != XFS_AGF_MAGIC {
                return Err(Error::corrupt("AGF", Location::Sb(agno), "bad magic"));
            }
            let agi = self.header(ag_start + 2 * sect as u64, sect)?;
            let (i, _) = Agi::ref_from_prefix(&agi[..])
                .map_err(|_| Error::corrupt("AGI", Location::Sb(agno), "short"))?;
            if i.agi_magicnum.get() != XFS_AGI_MAGIC {
                return Err(Error::corrupt("AGI", Location::Sb(agno), "bad magic"));
            }
            out.push(AgCounters {
                length: f.agf_length.get(),
                free_blocks: u64::from(f.agf_freeblks.get()),
                freelist_blocks: u64::from(f.agf_flcount.get()),
                btree_blocks: u64::from(f.agf_btreeblks.get()),
                rmap_blocks: u64::from(f.agf_rmap_blocks.get()),
                refcount_blocks: u64::from(f.agf_refcount_blocks.get()),
                inodes: u64::from(i.agi_count.get()),
                free_inodes: u64::from(i.agi_freecount.get()),
                finobt_blocks: u64::from(i.agi_fblocks.get()),
            });
        }
        Ok(out)
    }

    /// The bytes of a sector-sized AG header: committed ones if pending.
    fn header(&self, off: u64, len: usize) -> Result<std::sync::Arc<[u8]>> {
        if let Some(b) = crate::fs::pending_inode(self, off, len) {
            return Ok(b);
        }
        let mut v = vec![0u8; len];
        self.read_bytes(off, &mut v)?;
        Ok(v.into())
    }
}

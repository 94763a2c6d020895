//! Orphans: inodes whose last name went away while something still uses
//! them (an open file). As on kernel XFS, such an inode keeps its
//! contents with a link count of 0 and sits on its AG's unlinked list
//! (the AGI's 64 hash buckets, chained through `di_next_unlinked`) until
//! the user lets go; then [`Fs::free_orphan`] frees it. The list is what
//! lets log recovery free orphans left by a crash.
//!
//! New orphans go at the head of their bucket. Taking one off needs the
//! inode before it in the chain; that one is found without the AG lock
//! and locked before the AGI (inodes before AGs, as every transaction
//! locks), then checked again under the locks.

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgNumber, Ino};
use crate::inode::Inode;
use crate::trans::Trans;
use std::mem::offset_of;
use xfs_format::ag::{Agi, XFS_AGI_UNLINKED_BUCKETS};
use xfs_format::types::NULLAGINO;
use zerocopy::FromBytes;

/// Longest chain walked before calling the list corrupt.
const MAX_CHAIN: u32 = 1 << 20;

fn bucket_off(agino: u32) -> usize {
    offset_of!(Agi, agi_unlinked) + (agino as usize % XFS_AGI_UNLINKED_BUCKETS) * 4
}

/// Puts `ip` (link count 0, locked, logged by the caller afterwards) at
/// the head of its unlinked bucket.
pub(crate) fn add(tp: &mut Trans<'_>, ip: &mut Inode) -> Result<()> {
    let geo = tp.geo();
    let agno = geo.ino_agno(ip.ino);
    let agino = geo.ino_agino(ip.ino);
    let agi = crate::ialloc::agi::read_agi(tp, agno)?;
    let at = bucket_off(agino);
    ip.next_unlinked = crate::ialloc::agi::get(tp, agi, at);
    tp.log_unlinked(ip.ino);
    crate::ialloc::agi::set(tp, agi, at, agino);
    Ok(())
}

fn list_corrupt(agno: AgNumber, detail: String) -> Error {
    Error::corrupt("AGI unlinked list", Location::Sb(agno.0), detail)
}

impl Fs {
    /// The inode before `ino` on its unlinked chain (None: `ino` is the
    /// bucket's head), read without locks.
    fn orphan_prev(&self, ino: Ino) -> Result<Option<Ino>> {
        let geo = self.geometry();
        let agno = geo.ino_agno(ino);
        let agino = geo.ino_agino(ino);
        let ags = self.agi_bucket_head(agno, bucket_off(agino))?;
        let mut cur = ags;
        let mut prev = None;
        for _ in 0..MAX_CHAIN {
            if cur == agino {
                return Ok(prev);
            }
            if cur == NULLAGINO {
                return Err(list_corrupt(
                    agno,
                    format!("inode {} is not on its unlinked chain", ino.0),
                ));
            }
            let c = geo.ino_make(agno, cur);
            prev = Some(c);
            cur = self.inode(c)?.next_unlinked;
        }
        Err(list_corrupt(agno, "unlinked chain does not end".into()))
    }

    fn agi_bucket_head(&self, agno: AgNumber, at: usize) -> Result<u32> {
        let geo = self.geometry();
        let sect = geo.sect_size as usize;
        let ag_start = geo.agb_to_daddr(agno, crate::geometry::AgBlock(0)).bytes();
        let off = ag_start + 2 * sect as u64;
        let raw = match crate::fs::pending_inode(self, off, sect) {
            Some(b) => b,
            None => {
                let mut v = vec![0u8; sect];
                self.read_bytes(off, &mut v)?;
                v.into()
            }
        };
        Ok(crate::bytes::be32(&raw, at))
    }

    /// Inode `ino` if it is in use; None when it is a free inode (its
    /// CRC and magic intact, its mode 0), as a name's inode is after its
    /// last link went, or when the inode btree says it is not in use (its
    /// whole chunk was freed with it: the blocks are free space, zeros
    /// where the chunk never reached the disk, the inode's last written
    /// state where it did), so a caller that still knew the number can
    /// tell "gone" from "corrupt". Committed bytes not yet written are
    /// the truth (a chunk's are dropped in the commit that frees it);
    /// bytes read from the disk are believed once the btree agrees.
    pub fn live_inode(&self, ino: Ino) -> Result<Option<Inode>> {
        self.live_inode_as(ino, true)
    }

    /// [`Fs::live_inode`]; the inode btree is asked about bytes read from
    /// the disk only when `ask_btree`.
    fn live_inode_as(&self, ino: Ino, ask_btree: bool) -> Result<Option<Inode>> {
        let geo = self.geometry();
        if !geo.ino_valid(ino) {
            return Err(Error::corrupt(
                "inode number",
                Location::Inode(ino.0),
                "outside the filesystem",
            ));
        }
        let off = geo.ino_to_bytes(ino);
        let len = geo.inode_size as usize;
        let (raw, on_disk) = match crate::fs::pending_inode(self, off, len) {
            Some(r) => (r, false),
            None => {
                let mut v = vec![0u8; len];
                self.read_bytes(off, &mut v)?;
                (v.into(), true)
            }
        };
        let d = xfs_format::inode::Dinode::ref_from_prefix(&raw[..])
            .map_err(|_| Error::corrupt("inode", Location::Inode(ino.0), "short"))?
            .0;
        if d.di_magic.get() == xfs_format::inode::XFS_DINODE_MAGIC
            && d.di_mode.get() == 0
            && xfs_format::crc::verify(&raw, crate::inode::INODE_CRC_OFF)
        {
            return Ok(None);
        }
        if on_disk && ask_btree && self.is_writable() && !crate::ialloc::in_use(self, ino)? {
            return Ok(None);
        }
        crate::inode::decode_checked(self, ino, &raw).map(Some)
    }

    /// Runs `f` on inode `ino` as committed (None when it is gone, as
    /// [`Fs::live_inode`] tells), with the inode locked on a writable
    /// filesystem: no transaction changes the inode or the blocks of its
    /// forks until `f` returns, so a reader of its attribute fork sees it
    /// whole in one format, never halfway through a conversion between
    /// short form and leaf (the kernel holds the ILOCK shared for the
    /// same). `f` must not start a transaction on `ino`.
    pub fn with_inode<T>(&self, ino: Ino, f: impl FnOnce(&Inode) -> T) -> Result<Option<T>> {
        let Ok(ws) = self.write_state() else {
            return Ok(self.live_inode(ino)?.map(|ip| f(&ip)));
        };
        // The inode btree is asked before the inode is locked: the
        // allocator locks a free inode while it holds the AG, so asking
        // under the inode's lock could wait for it forever.
        if self.live_inode(ino)?.is_none() {
            return Ok(None);
        }
        ws.inodes.lock(ino.0);
        struct Unlock<'a>(&'a crate::trans::LockSet, u64);
        impl Drop for Unlock<'_> {
            fn drop(&mut self) {
                self.0.unlock(self.1);
            }
        }
        let _held = Unlock(&ws.inodes, ino.0);
        Ok(self.live_inode_as(ino, false)?.map(|ip| f(&ip)))
    }

    /// Frees orphan `ino` (link count 0, on its unlinked list): takes it
    /// off the list and frees its blocks and the inode. Callers must not
    /// free two orphans at once.
    pub fn free_orphan(&self, ino: Ino) -> Result<()> {
        loop {
            let prev = self.orphan_prev(ino)?;
            let mut tp = self.trans()?;
            let mut locks = vec![ino];
            locks.extend(prev);
            locks.sort();
            for &l in &locks {
                tp.lock_inode(l);
            }
            let mut ip = tp.read_inode(ino)?;
            if ip.nlink != 0 {
                return Err(Error::Invalid(format!(
                    "inode {} has {} links; it is no orphan",
                    ino.0, ip.nlink
                )));
            }
            let geo = self.geometry();
            let agno = geo.ino_agno(ino);
            let agino = geo.ino_agino(ino);
            let agi = crate::ialloc::agi::read_agi(&mut tp, agno)?;
            let at = bucket_off(agino);
            match prev {
                None => {
                    if crate::ialloc::agi::get(&tp, agi, at) != agino {
                        continue; // a new orphan went in front: look again
                    }
                    crate::ialloc::agi::set(&mut tp, agi, at, ip.next_unlinked);
                }
                Some(p) => {
                    let mut pp = tp.read_inode(p)?;
                    if pp.next_unlinked != agino {
                        continue;
                    }
                    pp.next_unlinked = ip.next_unlinked;
                    tp.log_inode(&pp)?;
                    tp.log_unlinked(p);
                }
            }
            ip.next_unlinked = NULLAGINO;
            tp.log_unlinked(ino);
            super::remove::destroy(&mut tp, ip)?;
            return tp.commit();
        }
    }
}

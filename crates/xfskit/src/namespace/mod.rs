//! The namespace layer: what a writer of files sees (create, link,
//! unlink, rename, write, truncate, xattrs, attributes), each call one
//! transaction built from the engine's modules: inode allocation
//! ([`crate::ialloc`]), directories ([`crate::dir::write`]), fork mappings
//! ([`crate::bmap`]), xattrs ([`crate::attr::write`]).
//!
//! Locking: a call locks the inodes it changes (in increasing inode
//! order) for the length of its transaction; allocation locks AGs.
//!
//! The change counter (`di_changecount`, the statx change cookie) is kept
//! the lazy way: a change increments it only if someone queried it
//! ([`Fs::change_cookie`]) since the last increment.

mod atime;
mod batch;
mod build;
mod create;
mod data;
mod exchange;
mod exchange_range;
mod fileattr;
pub(crate) mod guard;
mod meta;
mod orphan;
pub(crate) mod pptr;
mod reflink;
pub(crate) mod remove;
mod rtdata;
mod setattr;
mod xattr;

pub use atime::AtimePolicy;
pub use batch::{NewFile, NewFileOwned, BATCH_BYTES, BATCH_FILES};
pub use exchange_range::ExchangeFlags;
pub use fileattr::{
    fl, flags_of_xflags, fsxattr_of, xflags_of_flags, FileAttrSet, FsxAttr, XFLAGS_COMMON,
};
pub use meta::{Meta, NodeKind};
pub use remove::InUse;
pub use setattr::{AgCounters, AttrChange, SetTime};

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{Inode, Timestamp};
use zerocopy::FromBytes;

/// Longest name in a directory.
pub const NAME_MAX: usize = 255;

/// Checks a directory entry name.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::Invalid(format!(
            "name of {} bytes (1 to {NAME_MAX} allowed): {}",
            name.len(),
            String::from_utf8_lossy(&name[..name.len().min(64)])
        )));
    }
    if name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!(
            "invalid name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

impl Fs {
    /// The time to stamp on a change now.
    pub(crate) fn now(&self) -> Result<Timestamp> {
        let (sec, nsec) = self.write_state()?.now();
        Ok(Timestamp { sec, nsec })
    }

    /// The time changes made now are stamped with (the clock, or the
    /// fixed time of [`Fs::set_fixed_time`]).
    pub fn clock(&self) -> Result<Timestamp> {
        self.now()
    }

    /// Stamps every change from now on with `t` instead of the clock
    /// (reproducible images); `None` returns to the clock.
    pub fn set_fixed_time(&self, t: Option<Timestamp>) -> Result<()> {
        self.write_state()?
            .set_fixed_time(t.map(|t| (t.sec, t.nsec)));
        Ok(())
    }

    /// From now on, adding entries to a directory (create, mkdir, link)
    /// leaves the directory's times as they are: a build that gives every
    /// directory its final times when it makes it need not set them again
    /// after its last entry. Removing and renaming still stamp them.
    pub fn keep_dir_times(&self, on: bool) -> Result<()> {
        self.write_state()?
            .clock
            .keep_dir_times
            .store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// True when [`Fs::keep_dir_times`] is on.
    pub fn keeps_dir_times(&self) -> bool {
        self.write_state().is_ok_and(|w| {
            w.clock
                .keep_dir_times
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Seeds the inode generation numbers (reproducible images).
    pub fn seed_generations(&self, seed: u64) -> Result<()> {
        self.write_state()?.seed_generations(seed);
        Ok(())
    }

    /// The change cookie of inode `ino` (what statx and NFS see). Querying
    /// it makes the next change increment it.
    pub fn change_cookie(&self, ino: Ino) -> Result<u64> {
        let count = self.read_changecount(ino)?;
        if let Ok(ws) = self.write_state() {
            ws.mark_queried(ino.0);
        }
        Ok(count)
    }

    /// Reads just the change counter of `ino` (CRC and identity checked,
    /// nothing decoded or allocated beyond the raw inode).
    fn read_changecount(&self, ino: Ino) -> Result<u64> {
        let geo = self.geometry();
        if !geo.ino_valid(ino) {
            return Err(Error::corrupt(
                "inode number",
                crate::error::Location::Inode(ino.0),
                "outside the filesystem",
            ));
        }
        let off = geo.ino_to_bytes(ino);
        let len = geo.inode_size as usize;
        let raw: std::sync::Arc<[u8]> = match crate::fs::pending_inode(self, off, len) {
            Some(r) => r,
            None => {
                let mut v = vec![0u8; len];
                self.read_bytes(off, &mut v)?;
                v.into()
            }
        };
        let d = xfs_format::inode::Dinode::ref_from_prefix(&raw[..])
            .map_err(|_| Error::corrupt("inode", crate::error::Location::Inode(ino.0), "short"))?
            .0;
        if d.di_magic.get() != xfs_format::inode::XFS_DINODE_MAGIC
            || d.di_ino.get() != ino.0
            || !xfs_format::crc::verify(&raw, crate::inode::INODE_CRC_OFF)
        {
            // The full decode names the exact problem.
            return self.inode(ino).map(|ip| ip.changecount);
        }
        Ok(d.di_changecount.get())
    }

    /// Records a change to `ip` (ctime, and the counter if it was queried).
    pub(crate) fn touch_change(&self, ip: &mut Inode, now: Timestamp) -> Result<()> {
        ip.ctime = now;
        if self.write_state()?.take_queried(ip.ino.0) {
            ip.changecount = ip.changecount.wrapping_add(1);
        }
        Ok(())
    }

    /// Records a new entry in directory `dp` (as [`Fs::touch_modify`],
    /// unless [`Fs::keep_dir_times`] is on).
    pub(crate) fn touch_dir(&self, dp: &mut Inode, now: Timestamp) -> Result<()> {
        if self.keeps_dir_times() {
            return Ok(());
        }
        self.touch_modify(dp, now)
    }

    /// Records a change of contents (mtime too).
    pub(crate) fn touch_modify(&self, ip: &mut Inode, now: Timestamp) -> Result<()> {
        ip.mtime = now;
        self.touch_change(ip, now)
    }
}

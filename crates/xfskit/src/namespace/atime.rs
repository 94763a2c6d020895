//! Access times as the kernel keeps them on a read (`touch_atime`): the
//! mount's policy (`noatime`, `relatime`, `strictatime`) decides whether
//! a read stamps the inode's atime, and an inode flagged noatime
//! (`chattr +A`) is never stamped.

use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{Inode, Timestamp};

/// When a read stamps an inode's access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    /// Never (`noatime`).
    Never,
    /// When the atime is not after the mtime or ctime, or is a day old
    /// (`relatime`, Linux's default).
    #[default]
    Relative,
    /// On every read (`strictatime`).
    Strict,
}

/// A day, the longest `relatime` lets an atime go unstamped.
const DAY_NS: i128 = 24 * 3600 * 1_000_000_000;

impl AtimePolicy {
    /// Whether a read at `now` stamps `ip`'s atime under this policy.
    pub fn needs_update(self, ip: &Inode, now: Timestamp) -> bool {
        self.stamps(ip.flags, [ip.atime, ip.mtime, ip.ctime], now)
    }

    /// The rule on an inode's flags and its `[atime, mtime, ctime]`.
    fn stamps(self, flags: u16, [atime, mtime, ctime]: [Timestamp; 3], now: Timestamp) -> bool {
        if flags & xfs_format::inode::XFS_DIFLAG_NOATIME != 0 || atime == now {
            return false;
        }
        match self {
            AtimePolicy::Never => false,
            AtimePolicy::Strict => true,
            AtimePolicy::Relative => {
                atime <= mtime || atime <= ctime || now.as_nanos() - atime.as_nanos() >= DAY_NS
            }
        }
    }
}

impl Fs {
    /// Records a read of `ino` as the kernel does: stamps its atime with
    /// the clock when `policy` asks for it (one transaction; ctime is not
    /// touched), and returns the inode as it is then; `None` when the
    /// atime stays.
    pub fn mark_access(&self, ino: Ino, policy: AtimePolicy) -> Result<Option<Inode>> {
        if policy == AtimePolicy::Never {
            return Ok(None);
        }
        let now = self.now()?;
        if !policy.needs_update(&self.inode(ino)?, now) {
            return Ok(None);
        }
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        if !policy.needs_update(&ip, now) {
            return Ok(None);
        }
        ip.atime = now;
        tp.log_inode(&ip)?;
        tp.commit()?;
        Ok(Some(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sec: i64) -> Timestamp {
        Timestamp { sec, nsec: 0 }
    }

    fn stamps(p: AtimePolicy, a: i64, m: i64, c: i64, now: i64) -> bool {
        p.stamps(0, [at(a), at(m), at(c)], at(now))
    }

    #[test]
    fn relatime_stamps_after_a_change_or_a_day() {
        let r = AtimePolicy::Relative;
        assert!(stamps(r, 100, 100, 100, 200));
        assert!(stamps(r, 100, 150, 90, 200));
        assert!(stamps(r, 100, 50, 150, 200));
        assert!(!stamps(r, 150, 100, 100, 200));
        assert!(stamps(r, 150, 100, 100, 150 + 86_400));
        assert!(stamps(AtimePolicy::Strict, 150, 100, 100, 200));
        assert!(!stamps(AtimePolicy::Strict, 200, 100, 100, 200));
        assert!(!stamps(AtimePolicy::Never, 100, 100, 100, 200));
        let noatime = xfs_format::inode::XFS_DIFLAG_NOATIME;
        assert!(!AtimePolicy::Strict.stamps(noatime, [at(1), at(1), at(1)], at(200)));
    }
}

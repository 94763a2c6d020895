//! Quota state kept between transactions: the superblock's quota
//! "checked" bits until the first transaction clears them, and the
//! accounting of the quotas the superblock keeps.

use std::sync::atomic::AtomicU16;
use std::sync::Mutex;

/// The write side's quota state.
#[derive(Default)]
pub(crate) struct QuotaState {
    /// The superblock's quota "checked" bits, until the first transaction
    /// clears them (writes do not keep dquots: see `Fs::trans`).
    pub(crate) chkd: AtomicU16,
    /// Held while they are cleared.
    pub(crate) lock: Mutex<()>,
    /// Quota accounting (None: the superblock accounts no quota).
    pub(crate) acct: Option<crate::quota::acct::Acct>,
}

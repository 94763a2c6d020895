//! The time stamped on changes: the system clock, or a fixed time
//! (reproducible builds), and whether directories keep their times when
//! entries are added.

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

/// The clock of an open filesystem.
#[derive(Default)]
pub struct Clock {
    /// The time stamped on changes (None: the system clock).
    fixed: Mutex<Option<(i64, u32)>>,
    /// Directories keep their times when entries are added (a build sets
    /// each directory's times itself, once).
    pub keep_dir_times: AtomicBool,
}

impl Clock {
    /// Fixes the time stamped on changes, or returns to the system clock
    /// with `None`.
    pub(super) fn set_fixed(&self, t: Option<(i64, u32)>) {
        *super::state::lock(&self.fixed) = t;
    }

    /// The time to stamp on a change.
    pub(super) fn now(&self) -> (i64, u32) {
        if let Some(t) = *super::state::lock(&self.fixed) {
            return t;
        }
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (d.as_secs() as i64, d.subsec_nanos())
    }
}

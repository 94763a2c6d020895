//! The write side's handle on the journal: none when changes go in place
//! at writeback only (a build of a new image), otherwise the log writer,
//! behind its lock.

use super::state::lock;
use crate::log::journal::{Journal, LogStats};
use std::sync::Mutex;

/// The log writer, if changes go through the log.
#[derive(Default)]
pub(super) struct LogHandle(Option<Mutex<Journal>>);

impl LogHandle {
    /// Turns on the journal.
    pub(super) fn set(&mut self, j: Journal) {
        self.0 = Some(Mutex::new(j));
    }

    /// The journal, if changes go through the log.
    pub(super) fn get(&self) -> Option<&Mutex<Journal>> {
        self.0.as_ref()
    }

    /// True when changes go through the log.
    pub(super) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// What the log writer wrote so far.
    pub(super) fn stats(&self) -> LogStats {
        self.get().map(|j| lock(j).stats()).unwrap_or_default()
    }

    /// True when bytes `lo..hi` were freed since the last checkpoint.
    pub(super) fn busy(&self, lo: u64, hi: u64) -> bool {
        self.get().is_some_and(|j| lock(j).overlaps_freed(lo, hi))
    }

    /// Holds checkpoints back until [`Self::release`].
    pub(super) fn hold(&self) {
        if let Some(jm) = self.get() {
            lock(jm).hold();
        }
    }

    /// Ends [`Self::hold`].
    pub(super) fn release(&self) {
        if let Some(jm) = self.get() {
            lock(jm).release();
        }
    }

    /// A new intent id (0 without a journal).
    pub(super) fn intent_id(&self) -> u64 {
        self.get().map_or(0, |j| lock(j).intent_id())
    }

    /// Lets the tail of a resumed log move.
    pub(super) fn unpin(&self) {
        if let Some(jm) = self.get() {
            lock(jm).unpin();
        }
    }
}

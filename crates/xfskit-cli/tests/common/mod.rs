//! Support code shared by the xfskit-cli integration tests.
//!
//! Uses std, libc and xfskit-testkit only (never the xfskit library), so that it can serve as
//! an independent reference: `hostwalk` describes a tree as the Linux kernel
//! shows it, `fixtures` unpacks and loop-mounts the golden images.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

pub mod disks;
pub mod editimg;
pub mod fixtures;
pub mod hostwalk;
pub mod vm;

pub use fixtures::{
    assert_kernel_sees, expected_counts, fixture_names, fixtures_dir, is_root, repair_check,
    require_root, testdata_dir, unpack_fixture, LoopMount, TempDir,
};
pub use hostwalk::{count_kinds, diff_walks, digest_bytes, walk_host, Entry, Fnv64, Kind};
pub use xfskit_testkit::{missing_tool, skip};
pub mod rangeserver;
pub mod rtimg;
pub mod rwmount;
pub use fixtures::output_text as output_text_of;

/// Unmounting that waits out a busy mount: `umount_retrying` says whether
/// it worked, `must_umount` panics unless it did (or the thread is already
/// unwinding).
pub use xfskit_testkit::{must_umount, umount_retrying};

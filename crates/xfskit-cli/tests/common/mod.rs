//! Support code shared by the xfskit-cli integration tests.
//!
//! Uses std and libc only (never the xfskit library), so that it can serve as
//! an independent reference: `hostwalk` describes a tree as the Linux kernel
//! shows it, `fixtures` unpacks and loop-mounts the golden images.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

pub mod disks;
pub mod editimg;
pub mod fixtures;
pub mod hostwalk;
pub mod skip;
pub mod vm;

pub use fixtures::{
    assert_kernel_sees, expected_counts, fixture_names, fixtures_dir, is_root, repair_check,
    require_root, testdata_dir, unpack_fixture, LoopMount, TempDir,
};
pub use hostwalk::{count_kinds, diff_walks, digest_bytes, walk_host, Entry, Fnv64, Kind};
pub use skip::{missing_tool, skip};
pub mod rangeserver;
pub mod rtimg;
pub mod rwmount;
pub use fixtures::output_text as output_text_of;

/// Unmounts `mnt`; true when it worked. A mount is busy while any process
/// has a file or its working directory in it. Two such holders go away by
/// themselves: a walk of /tmp by another program beside the tests (find,
/// du), and a child that another test thread of the same binary is
/// starting, which holds copies of every file this thread has open until it
/// execs (on a loaded machine it may wait for a CPU between the two). So a
/// busy unmount is tried again, up to 50 times 200 ms apart.
pub fn umount_retrying(mnt: &std::path::Path) -> bool {
    for _ in 0..50 {
        match std::process::Command::new("umount").arg(mnt).output() {
            Ok(o) if o.status.success() => return true,
            Ok(o) if String::from_utf8_lossy(&o.stderr).contains("busy") => {
                std::thread::sleep(std::time::Duration::from_millis(200))
            }
            _ => return false,
        }
    }
    false
}

/// Unmounts `mnt` (see [`umount_retrying`]) or panics, unless the thread is
/// already unwinding (a guard's `drop` calls it then, and a second panic
/// would abort). A caller that ignored a failed unmount would let the test
/// go on to read an image the kernel still has mounted, whose superblock
/// counters it has not written yet.
#[allow(dead_code)]
pub fn must_umount(mnt: &std::path::Path) {
    if !umount_retrying(mnt) && !std::thread::panicking() {
        panic!("umount {} failed", mnt.display());
    }
}

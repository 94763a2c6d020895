//! System calls that neither `rustix` nor `libc` wraps yet, and the one
//! slice conversion the standard library has not stabilized.
//!
//! `cachestat` (Linux 6.5) tells how much of a file range is in the page
//! cache without touching it. The alternative, a read with `RWF_NOWAIT`,
//! starts a read-ahead of the page it asks about when the page is absent;
//! on a fast disk that read can finish before the question returns, and
//! the answer is then "cached" for data that was not.

use std::fs::File;
use std::os::fd::AsRawFd;

/// The system call's number: the same on every architecture (it was
/// added after the tables were unified).
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct Range {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct Stat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Bytes of `file`'s range `off..off + len` that are in the page cache
/// (whole pages, so it may exceed `len`), or None when the kernel cannot say (before 6.5, a seccomp filter, a
/// filesystem without a page cache).
pub(crate) fn cached_bytes(file: &File, off: u64, len: u64) -> Option<u64> {
    if len == 0 {
        // Zero means "to the end of the file" to the kernel.
        return Some(0);
    }
    let range = Range { off, len };
    let mut st = Stat::default();
    // SAFETY: the descriptor is open for the call's duration (borrowed
    // from `file`); `range` and `st` are live, properly laid out
    // (`repr(C)`, the kernel's field order and sizes) and `st` is
    // writable; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut st as *mut Stat,
            0u32,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).ok().filter(|&p| p > 0)?;
    Some(st.nr_cache.saturating_mul(page))
}

/// `buf` with every byte set to zero, as initialized bytes (what
/// `<[MaybeUninit<u8>]>::write_filled(0)` does once it is stable).
pub fn zeroed(buf: &mut [std::mem::MaybeUninit<u8>]) -> &mut [u8] {
    buf.fill(std::mem::MaybeUninit::new(0));
    // SAFETY: every element was just initialized, and MaybeUninit<u8> has
    // the size, alignment and validity of u8 once initialized.
    unsafe { &mut *(buf as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn cachestat_sees_reads_and_evictions() {
        let dir = std::env::temp_dir().join(format!("xfskit-cachestat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![7u8; 256 << 10]).unwrap();
        f.sync_all().unwrap();
        drop(f);
        let mut f = File::open(&p).unwrap();
        let Some(_) = cached_bytes(&f, 0, 256 << 10) else {
            println!("NOTE: cachestat unavailable here (kernel before 6.5?): not tested");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        };
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let cold = cached_bytes(&f, 0, 256 << 10).unwrap();
        let mut all = Vec::new();
        f.read_to_end(&mut all).unwrap();
        let warm = cached_bytes(&f, 0, 256 << 10).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // tmpfs cannot drop its pages: only a real disk shows the drop.
        if cold != 0 {
            println!(
                "NOTE: {} keeps evicted pages (tmpfs?): drop not tested",
                dir.display()
            );
        }
        assert!(
            warm >= 256 << 10,
            "{warm} bytes cached after reading 256 KiB"
        );
    }
}

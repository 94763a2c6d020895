//! copy_file_range(2) and the link-count limit through a read-write
//! `xfskit mount`.
//!
//! copy_file_range: ranges within one chunk and across several, unaligned
//! offsets, over existing data, past the source's end (a short count), at
//! its end (0), into a hole past the destination's end, within one file;
//! every result read back against the bytes expected.
//!
//! EMLINK: no test can make two billion links in time, so an image is
//! crafted with xfs_db (a file's and a directory's link count set to XFS's
//! limit, 2^31 - 1); link, mkdir, renames of a directory into the full one
//! and an exchange that would give it one more link must fail as the
//! kernel's own mount of the same image fails them (asked of the kernel in
//! the test). The counts are then put back with xfs_db and the image must
//! be `xfs_repair -n` clean. Needs root, /dev/fuse and xfsprogs; prints
//! SKIP otherwise.

mod common;

use common::rwmount::{c, err_of, errno, skip_rw as skip, RwMount};
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// copy_file_range(2) of `len` bytes from `src` at `soff` to `dst` at
/// `doff`: the count, or the negated errno.
fn copy(src: &File, soff: i64, dst: &File, doff: i64, len: usize) -> i64 {
    let (mut so, mut d) = (soff, doff);
    // SAFETY: two open descriptors and offsets that live across the call.
    let r =
        unsafe { libc::copy_file_range(src.as_raw_fd(), &mut so, dst.as_raw_fd(), &mut d, len, 0) };
    if r < 0 {
        -i64::from(errno(-1))
    } else {
        r as i64
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn copy_file_range_copies_inside_the_server() {
    if skip("copy_file_range_copies_inside_the_server") {
        return;
    }
    let m = RwMount::new("copy", 300, &[]);
    let p = |s: &str| m.p(s);
    let src_bytes = pattern(3_000_000, 7);
    fs::write(p("src"), &src_bytes).unwrap();
    let src = File::open(p("src")).unwrap();
    let rw = |n: &str| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(p(n))
            .unwrap()
    };
    // Across several 1 MiB steps, unaligned on both sides, into a hole past
    // the destination's end.
    let dst = rw("dst");
    assert_eq!(copy(&src, 1000, &dst, 4097, 2_500_000), 2_500_000);
    let mut want = vec![0u8; 4097];
    want.extend_from_slice(&src_bytes[1000..2_501_000]);
    assert!(
        fs::read(p("dst")).unwrap() == want,
        "dst after the first copy"
    );
    // Over existing data in the middle: the file keeps its size.
    assert_eq!(copy(&src, 5, &dst, 70_000, 12_345), 12_345);
    want[70_000..82_345].copy_from_slice(&src_bytes[5..12_350]);
    assert!(
        fs::read(p("dst")).unwrap() == want,
        "dst after the overwrite"
    );
    // Past the source's end: a short count; at its end: nothing.
    assert_eq!(copy(&src, 2_999_990, &dst, 0, 100), 10);
    want[..10].copy_from_slice(&src_bytes[2_999_990..]);
    assert_eq!(copy(&src, 3_000_000, &dst, 0, 100), 0);
    assert!(
        fs::read(p("dst")).unwrap() == want,
        "dst after the short copy"
    );
    // Within one file, ranges apart; overlapping ones are EINVAL.
    let same = rw("same");
    same.set_len(0).unwrap();
    std::io::Write::write_all(&mut &same, &src_bytes[..200_000]).unwrap();
    assert_eq!(copy(&same, 0, &same, 300_001, 100_000), 100_000);
    let mut want_same = src_bytes[..200_000].to_vec();
    want_same.resize(300_001, 0);
    want_same.extend_from_slice(&src_bytes[..100_000]);
    assert!(
        fs::read(p("same")).unwrap() == want_same,
        "copy within a file"
    );
    assert_eq!(
        copy(&same, 0, &same, 50_000, 100_000),
        -i64::from(libc::EINVAL)
    );
    // Block-aligned on both sides, to the source's end: the blocks are
    // shared (reflink), not copied: free space hardly moves. Writes to
    // either file then go to blocks of their own.
    let free = || {
        let st = nix_statvfs(&m.p(""));
        st.0 * st.1
    };
    let before = free();
    let clone = rw("clone");
    assert_eq!(copy(&src, 0, &clone, 0, 3_000_000), 3_000_000);
    drop(clone);
    let used = before.saturating_sub(free());
    assert!(
        used < 200_000,
        "a 3 MB aligned copy took {used} bytes: it was copied, not cloned"
    );
    let mut clone_want = src_bytes.clone();
    let clone = rw("clone");
    std::os::unix::fs::FileExt::write_all_at(&clone, b"changed", 4090).unwrap();
    clone_want[4090..4097].copy_from_slice(b"changed");
    drop(clone);
    assert!(
        fs::read(p("clone")).unwrap() == clone_want,
        "the clone after a write"
    );
    assert!(
        fs::read(p("src")).unwrap() == src_bytes,
        "the source after its clone's write"
    );
    // A directory is refused.
    let dir = File::open(m.p("")).unwrap();
    assert_eq!(copy(&dir, 0, &dst, 0, 10), -i64::from(libc::EISDIR));
    drop((src, dst, same, dir));
    m.finish();
}

/// Runs xfs_db in expert mode with `cmds` on `image`.
fn xfs_db(image: &Path, cmds: &[&str]) {
    // Parent pointers are corruption to Debian's xfs_db 6.1.
    let mut cmd = common::fixtures::xfs_tool("xfs_db", image);
    cmd.arg("-x");
    for c in cmds {
        cmd.args(["-c", c]);
    }
    let out = cmd.arg(image).output().unwrap();
    assert!(out.status.success(), "xfs_db {cmds:?}: {out:?}");
}

fn set_nlink(image: &Path, path: &str, n: u32) {
    xfs_db(
        image,
        &[&format!("path {path}"), &format!("write core.nlinkv2 {n}")],
    );
}

/// The errnos of the calls that meet the link limit, under `root`.
fn limit_errnos(root: &Path) -> Vec<(&'static str, i32)> {
    let p = |s: &str| root.join(s);
    let rename2 = |a: &str, b: &str, flags: u32| {
        // SAFETY: valid path strings.
        errno(unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c(&p(a)).as_ptr(),
                libc::AT_FDCWD,
                c(&p(b)).as_ptr(),
                flags,
            )
        } as i64)
    };
    vec![
        ("link", err_of(fs::hard_link(p("f"), p("f2")))),
        ("mkdir", err_of(fs::create_dir(p("d/sub")))),
        ("rename dir in", rename2("d2", "d/d2", 0)),
        ("rename dir over dir", rename2("d3", "d/e", 0)),
        ("rename file in", rename2("g", "d/g", 0)),
        ("exchange", rename2("d/x", "d4", libc::RENAME_EXCHANGE)),
        ("rename file back", rename2("d/g", "g", 0)),
    ]
}

#[test]
fn link_counts_at_the_limit_are_emlink() {
    if skip("link_counts_at_the_limit_are_emlink") {
        return;
    }
    const MAXLINK: u32 = (1 << 31) - 1;
    let mut m = RwMount::new("emlink", 300, &[]);
    for d in ["d", "d2", "d3", "d4", "d/e"] {
        fs::create_dir(m.p(d)).unwrap();
    }
    for f in ["f", "g", "d/x"] {
        fs::write(m.p(f), b"x").unwrap();
    }
    m.unmount();
    set_nlink(&m.image, "/f", MAXLINK);
    set_nlink(&m.image, "/d", MAXLINK);
    // What the kernel answers, on a copy of the crafted image.
    let kimg = m.dir.join("kernel.img");
    fs::copy(&m.image, &kimg).unwrap();
    let kdir = m.dir.join("kernel");
    fs::create_dir_all(&kdir).unwrap();
    let st = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&kimg)
        .arg(&kdir)
        .status()
        .unwrap();
    assert!(st.success(), "the kernel cannot mount the crafted image");
    let kernel = limit_errnos(&kdir);
    println!("the kernel's answers: {kernel:?}");
    common::must_umount(&kdir);
    let _ = fs::remove_file(&kimg);
    assert!(
        kernel.iter().filter(|(_, e)| *e == libc::EMLINK).count() >= 3,
        "the kernel's answers are not what this test expects: {kernel:?}"
    );
    m.mount(&[]);
    let ours = limit_errnos(&m.mnt);
    assert_eq!(ours, kernel, "errnos at the link limit (ours, kernel's)");
    assert_eq!(
        fs::symlink_metadata(m.p("d")).unwrap().nlink(),
        u64::from(MAXLINK),
        "the full directory's count"
    );
    m.unmount();
    // Back to the true counts: /f has one name; /d holds e (and no more
    // directories, since every call that would add one failed).
    set_nlink(&m.image, "/f", 1);
    set_nlink(&m.image, "/d", 3);
    m.mount(&[]);
    m.finish();
}

/// (free blocks, fragment size) of the filesystem holding `p`.
fn nix_statvfs(p: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(r, 0, "statvfs {}", p.display());
    (st.f_bfree, st.f_frsize)
}

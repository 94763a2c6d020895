//! Many threads reading one file through the FUSE mount at once, so that
//! READs overlap and go to the worker pool: every byte must still be right.
//! The file is written by the kernel's XFS on a loop mount; reads use
//! O_DIRECT so each one is a FUSE request, not a page cache hit.
//! Needs root, /dev/fuse and mkfs.xfs; prints SKIP otherwise.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

#[path = "support/mounts.rs"]
mod mounts;

use mounts::{is_mounted, run, skip_reason, Scratch};

const FILE_LEN: u64 = 16 << 20;

/// The byte at `off` of the test file.
fn pattern(off: u64) -> u8 {
    let x = (off / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> ((off % 8) * 8)) as u8
}

/// A 4 KiB-aligned buffer inside `v` (O_DIRECT needs aligned memory).
fn aligned(v: &mut [u8]) -> &mut [u8] {
    let skip = (4096 - v.as_ptr() as usize % 4096) % 4096;
    &mut v[skip..skip + 4096 * 4]
}

#[test]
fn overlapping_reads_return_the_right_bytes() {
    if let Some(why) = skip_reason() {
        xfskit_testkit::skip("overlapping_reads_return_the_right_bytes", &why);
        return;
    }
    let scratch = Scratch::new("fuse-par");
    let dir = scratch.dir.clone();
    let img = dir.join("img");
    fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    run("mkfs.xfs", &["-q", "-f", img.to_str().unwrap()]);
    let kmnt = dir.join("kernel");
    run(
        "mount",
        &["-o", "loop", img.to_str().unwrap(), kmnt.to_str().unwrap()],
    );
    {
        let mut f = fs::File::create(kmnt.join("data")).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        for base in (0..FILE_LEN).step_by(1 << 20) {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern(base + i as u64);
            }
            f.write_all(&buf).unwrap();
        }
    }
    mounts::must_umount(&kmnt);

    let fs_ = xfskit::Fs::open(&img, &xfskit::OpenOptions::default()).unwrap();
    let fmnt = dir.join("fuse");
    let opts = xfskit_fuse::MountOptions {
        threads: 1,
        read_threads: 4,
        ..Default::default()
    };
    let mut m = xfskit_fuse::mount(fs_, &fmnt, &opts).unwrap();
    let mut unmounter = m.unmounter();
    let server = std::thread::spawn(move || m.serve());
    let t0 = Instant::now();
    while !is_mounted(&fmnt) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "mount did not appear"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let path = fmnt.join("data");
    let readers: Vec<_> = (0..8u64)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let f = fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                    .unwrap();
                let mut store = vec![0u8; 4096 * 5];
                let buf = aligned(&mut store);
                let mut x = 0x2545_f491_4f6c_dd1d ^ (t + 1);
                for _ in 0..300 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let pages = 1 + (x % 4) as usize;
                    let off = (x >> 8) % (FILE_LEN / 4096) * 4096;
                    let want = buf.len().min(pages * 4096);
                    let n = f.read_at(&mut buf[..want], off).unwrap();
                    let expect = want.min((FILE_LEN - off) as usize);
                    assert_eq!(n, expect, "short read at {off}");
                    for (i, b) in buf[..n].iter().enumerate() {
                        assert_eq!(*b, pattern(off + i as u64), "byte {} wrong", off + i as u64);
                    }
                }
            })
        })
        .collect();
    let results: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
    // Buffered reads of the whole file too (readahead keeps several READs
    // in flight).
    let whole = fs::read(&path).unwrap();
    unmounter.unmount().unwrap();
    server.join().unwrap().unwrap();
    drop(scratch);
    for r in results {
        r.expect("a reader failed");
    }
    assert_eq!(whole.len() as u64, FILE_LEN);
    for (i, b) in whole.iter().enumerate() {
        assert_eq!(*b, pattern(i as u64), "byte {i} of the buffered read");
    }
}

//! File contents and attributes through a read-write `xfskit mount`:
//! times (UTIME_NOW, UTIME_OMIT, before 1970, nanoseconds) and the ctime
//! rules, truncate, O_APPEND and O_TRUNC, xattrs in every namespace with
//! their errnos, fallocate modes, SEEK_DATA/SEEK_HOLE answered as the
//! kernel answers for the same file, shared writable mmap and O_DIRECT.
//! Ends like every read-write test: `xfs_repair -n` clean and the kernel
//! shows the same tree. Needs root, /dev/fuse and xfsprogs; prints SKIP
//! otherwise.

mod common;

use common::rwmount::{c, errno, skip_rw as skip, RwMount};
use common::LoopMount;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

fn ctime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

fn mtime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

fn utimens(p: &Path, a: libc::timespec, m: libc::timespec) -> i32 {
    let ts = [a, m];
    // SAFETY: a valid path and two timespecs.
    errno(unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), ts.as_ptr(), 0) } as i64)
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

fn setxattr(p: &Path, name: &str, v: &[u8], flags: i32) -> i32 {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid strings and a live buffer.
    errno(
        unsafe { libc::lsetxattr(c(p).as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) }
            as i64,
    )
}

fn removexattr(p: &Path, name: &str) -> i32 {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid strings.
    errno(unsafe { libc::lremovexattr(c(p).as_ptr(), n.as_ptr()) } as i64)
}

fn fallocate(f: &fs::File, mode: i32, off: i64, len: i64) -> i32 {
    // SAFETY: an open descriptor.
    errno(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } as i64)
}

/// Every SEEK_DATA and SEEK_HOLE answer (or errno) from each offset in `offs`.
fn seeks(p: &Path, offs: &[i64]) -> Vec<(i64, i64, i64)> {
    let f = fs::File::open(p).unwrap();
    offs.iter()
        .map(|&o| {
            // SAFETY: an open descriptor.
            let d = unsafe { libc::lseek(f.as_raw_fd(), o, libc::SEEK_DATA) };
            let d = if d < 0 { -i64::from(errno(-1)) } else { d };
            // SAFETY: an open descriptor.
            let h = unsafe { libc::lseek(f.as_raw_fd(), o, libc::SEEK_HOLE) };
            let h = if h < 0 { -i64::from(errno(-1)) } else { h };
            (o, d, h)
        })
        .collect()
}

#[test]
fn times_and_ctime_rules() {
    if skip("times_and_ctime_rules") {
        return;
    }
    let m = RwMount::new("times", 320, &[]);
    let base = m.mnt.clone();
    let p = move |s: &str| base.join(s);
    fs::write(p("f"), b"x").unwrap();
    fs::create_dir(p("d")).unwrap();
    let tick = || sleep(Duration::from_millis(20));
    // Explicit times, before 1970 and with nanoseconds; UTIME_OMIT keeps one.
    assert_eq!(
        utimens(&p("f"), ts(-86_400, 5), ts(1_000_000_000, 123_456_789)),
        0
    );
    let md = fs::metadata(p("f")).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (-86_400, 5));
    assert_eq!(mtime(&p("f")), (1_000_000_000, 123_456_789));
    assert_eq!(utimens(&p("f"), ts(7, 0), ts(0, libc::UTIME_OMIT)), 0);
    assert_eq!(fs::metadata(p("f")).unwrap().atime(), 7);
    assert_eq!(mtime(&p("f")), (1_000_000_000, 123_456_789));
    let before = ctime(&p("f"));
    tick();
    assert_eq!(
        utimens(&p("f"), ts(0, libc::UTIME_OMIT), ts(0, libc::UTIME_NOW)),
        0
    );
    assert!(mtime(&p("f")).0 > 1_000_000_000, "UTIME_NOW");
    assert!(ctime(&p("f")) > before, "utimensat changes ctime");
    // chmod, chown, link, unlink of another link, rename, setxattr: ctime.
    type Step<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let steps: [Step; 7] = [
        (
            "chmod",
            Box::new(|| fs::set_permissions(p("f"), fs::Permissions::from_mode(0o600)).unwrap()),
        ),
        (
            "chown",
            Box::new(|| std::os::unix::fs::chown(p("f"), Some(5), Some(6)).unwrap()),
        ),
        ("link", Box::new(|| fs::hard_link(p("f"), p("f2")).unwrap())),
        ("unlink", Box::new(|| fs::remove_file(p("f2")).unwrap())),
        ("rename", Box::new(|| fs::rename(p("f"), p("d/f")).unwrap())),
        (
            "setxattr",
            Box::new(|| assert_eq!(setxattr(&p("d/f"), "user.a", b"1", 0), 0)),
        ),
        (
            "chown(-1, -1)",
            // SAFETY: a valid path; -1 leaves owner and group alone.
            Box::new(|| {
                assert_eq!(
                    unsafe { libc::chown(c(&p("d/f")).as_ptr(), u32::MAX, u32::MAX) },
                    0
                )
            }),
        ),
    ];
    for (what, step) in steps.iter() {
        let f = if p("f").exists() { p("f") } else { p("d/f") };
        let before = ctime(&f);
        tick();
        step();
        let f = if p("f").exists() { p("f") } else { p("d/f") };
        assert!(ctime(&f) > before, "{what} changes ctime");
    }
    // Entries change their directory's mtime and ctime.
    for (what, step) in [
        (
            "create",
            Box::new(|| fs::write(p("d/new"), b"").unwrap()) as Box<dyn Fn()>,
        ),
        ("unlink", Box::new(|| fs::remove_file(p("d/new")).unwrap())),
        ("mkdir", Box::new(|| fs::create_dir(p("d/sub")).unwrap())),
        ("rmdir", Box::new(|| fs::remove_dir(p("d/sub")).unwrap())),
    ] {
        let (bm, bc) = (mtime(&p("d")), ctime(&p("d")));
        tick();
        step();
        assert!(
            mtime(&p("d")) > bm && ctime(&p("d")) > bc,
            "{what} stamps the directory"
        );
    }
    // Writes and truncation stamp mtime; truncate to the same size does not.
    let (bm, bc) = (mtime(&p("d/f")), ctime(&p("d/f")));
    tick();
    fs::write(p("d/f"), b"contents").unwrap();
    assert!(mtime(&p("d/f")) > bm && ctime(&p("d/f")) > bc, "write");
    let bm = mtime(&p("d/f"));
    tick();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::truncate(c(&p("d/f")).as_ptr(), 8) }, 0);
    assert_eq!(mtime(&p("d/f")), bm, "truncate(2) to the same size");
    m.finish();
}

use std::os::unix::fs::PermissionsExt;

#[test]
fn contents_xattrs_fallocate_and_seek() {
    if skip("contents_xattrs_fallocate_and_seek") {
        return;
    }
    let mut m = RwMount::new("data", 320, &[]);
    let base = m.mnt.clone();
    let p = move |s: &str| base.join(s);
    // O_APPEND appends; O_TRUNC empties; truncate grows with zeros.
    fs::write(p("log"), b"one\n").unwrap();
    for line in ["two\n", "three\n"] {
        let mut f = fs::OpenOptions::new().append(true).open(p("log")).unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }
    assert_eq!(fs::read(p("log")).unwrap(), b"one\ntwo\nthree\n");
    fs::write(p("t"), vec![7u8; 10_000]).unwrap();
    let f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p("t"))
        .unwrap();
    assert_eq!(f.metadata().unwrap().len(), 0);
    f.write_at(b"abc", 5000).unwrap();
    f.set_len(3).unwrap();
    f.set_len(9000).unwrap();
    drop(f);
    let mut want = vec![0u8; 9000];
    want[..3].copy_from_slice(&[0, 0, 0]);
    assert_eq!(
        fs::read(p("t")).unwrap(),
        want,
        "a shrunk then grown file reads zeros"
    );
    // Writes across block edges and far out.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(p("big"))
        .unwrap();
    f.write_all_at(&big, 1).unwrap();
    f.write_all_at(b"tail", 100 << 20).unwrap();
    drop(f);
    let got = fs::read(p("big")).unwrap();
    assert_eq!(got.len(), (100 << 20) + 4);
    assert!(got[1..3_000_001] == big[..], "contents of big");
    assert!(
        got[3_000_001..100 << 20].iter().all(|&b| b == 0),
        "hole in big"
    );
    // xattrs in every namespace, with their flags and errnos.
    let x = p("log");
    for name in ["user.u", "trusted.t", "security.s"] {
        assert_eq!(setxattr(&x, name, b"v1", 0), 0, "{name}");
        assert_eq!(
            setxattr(&x, name, b"v2", libc::XATTR_CREATE),
            libc::EEXIST,
            "{name}"
        );
        assert_eq!(setxattr(&x, name, b"v3", libc::XATTR_REPLACE), 0, "{name}");
    }
    assert_eq!(
        setxattr(&x, "user.none", b"", libc::XATTR_REPLACE),
        libc::ENODATA
    );
    assert_eq!(removexattr(&x, "user.none"), libc::ENODATA);
    assert_eq!(setxattr(&x, "user.big", &vec![9u8; 65536], 0), 0);
    assert_eq!(setxattr(&x, "user.gone", b"x", 0), 0);
    assert_eq!(removexattr(&x, "user.gone"), 0);
    assert_eq!(setxattr(&x, "bogus.name", b"x", 0), libc::EOPNOTSUPP);
    std::os::unix::fs::symlink("log", p("sym")).unwrap();
    assert_eq!(setxattr(&p("sym"), "user.x", b"x", 0), libc::EPERM);
    assert_eq!(setxattr(&p("sym"), "trusted.x", b"on a link", 0), 0);
    for i in 0..40 {
        assert_eq!(
            setxattr(&p("t"), &format!("user.n{i}"), &[i as u8; 300], 0),
            0
        );
    }
    // fallocate: default grows the size, KEEP_SIZE does not, PUNCH_HOLE
    // and ZERO_RANGE read as zeros.
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(p("fa"))
        .unwrap();
    assert_eq!(fallocate(&f, 0, 0, 1 << 20), 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20),
        0
    );
    let md = f.metadata().unwrap();
    assert_eq!(md.len(), 1 << 20);
    assert!(
        md.blocks() >= 4096,
        "KEEP_SIZE allocates: {} blocks",
        md.blocks()
    );
    f.write_all_at(&vec![0xaa; 1 << 20], 0).unwrap();
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 4096, 8192),
        libc::EOPNOTSUPP
    );
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(fallocate(&f, punch, 4096, 8192), 0);
    assert_eq!(fallocate(&f, punch, 100_000, 10), 0);
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 500_000, 70_000),
        0
    );
    let mut b = vec![0u8; 1 << 20];
    f.read_exact_at(&mut b, 0).unwrap();
    for (i, &v) in b.iter().enumerate() {
        let zero = (4096..12288).contains(&i)
            || (100_000..100_010).contains(&i)
            || (500_000..570_000).contains(&i);
        assert_eq!(v, if zero { 0 } else { 0xaa }, "byte {i} after punch/zero");
    }
    drop(f);
    // A sparse file for SEEK_DATA/SEEK_HOLE.
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(p("sparse"))
        .unwrap();
    f.write_all_at(b"a", 0).unwrap();
    f.write_all_at(b"b", 1 << 20).unwrap();
    f.write_all_at(&vec![1u8; 20_000], 3 << 20).unwrap();
    f.set_len(5 << 20).unwrap();
    assert_eq!(fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 4 << 20, 4096), 0);
    drop(f);
    let offs: Vec<i64> = vec![
        0,
        1,
        4095,
        4096,
        500_000,
        1 << 20,
        (1 << 20) + 5000,
        3 << 20,
        (3 << 20) + 20_000,
        4 << 20,
        (5 << 20) - 1,
        5 << 20,
        6 << 20,
    ];
    let mut fuse_seeks = Vec::new();
    for f in ["sparse", "fa", "big", "log", "t"] {
        fuse_seeks.push(seeks(&p(f), &offs));
    }
    // The kernel answers the same for the same files.
    m.unmount();
    let kdir = m.dir.join("kernel-seek");
    fs::create_dir_all(&kdir).unwrap();
    {
        let k = LoopMount::new(&m.image, &kdir).unwrap();
        for (i, f) in ["sparse", "fa", "big", "log", "t"].iter().enumerate() {
            assert_eq!(
                seeks(&k.path().join(f), &offs),
                fuse_seeks[i],
                "seeks in {f}"
            );
        }
    }
    m.mount(&[]);
    let mut f = fs::File::open(m.p("sparse")).unwrap();
    assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), 5 << 20);
    drop(f);
    m.finish();
}

#[test]
fn mmap_and_o_direct() {
    if skip("mmap_and_o_direct") {
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let m = RwMount::new("mmap", 320, &[]);
    // Shared writable mapping: stores reach the file through writeback.
    let len = 1 << 20;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(m.p("mapped"))
        .unwrap();
    f.set_len(len as u64).unwrap();
    // SAFETY: a fresh shared mapping of an open file of `len` bytes, used
    // only inside this block and unmapped before the file is closed.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED);
        let b = std::slice::from_raw_parts_mut(at.cast::<u8>(), len);
        b[4096..4101].copy_from_slice(b"hello");
        b[len - 3..].copy_from_slice(b"end");
        assert_eq!(libc::msync(at, len, libc::MS_SYNC), 0);
        assert_eq!(libc::munmap(at, len), 0);
    }
    drop(f);
    let got = fs::read(m.p("mapped")).unwrap();
    assert_eq!(&got[4096..4101], b"hello");
    assert_eq!(&got[len - 3..], b"end");
    assert!(got[..4096].iter().all(|&b| b == 0));
    // O_DIRECT writes and reads of aligned buffers.
    let layout = std::alloc::Layout::from_size_align(1 << 20, 4096).unwrap();
    // SAFETY: a non-zero-sized layout; freed below.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buf.is_null());
    // SAFETY: `buf` holds `layout.size()` initialised bytes.
    let data = unsafe { std::slice::from_raw_parts_mut(buf, layout.size()) };
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let d = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.p("direct"))
        .unwrap();
    for i in 0..4u64 {
        d.write_all_at(data, i << 20).unwrap();
    }
    let want: Vec<u8> = data.to_vec();
    data.fill(0);
    d.read_exact_at(data, 3 << 20).unwrap();
    assert!(data[..] == want[..], "O_DIRECT read back");
    drop(d);
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    assert_eq!(fs::metadata(m.p("direct")).unwrap().len(), 4 << 20);
    m.finish();
}

/// generic/403: getxattr of one attribute never fails, and always gives
/// its value, while another thread sets and removes a second attribute
/// big enough to turn the attribute fork from short form into a leaf
/// block and back each time (the reader must never see the fork between
/// the two). Several serving threads, so that the requests overlap.
#[test]
fn getxattr_while_the_fork_changes_format() {
    if skip("getxattr_while_the_fork_changes_format") {
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let mut m = RwMount::new("xattr-race", 320, &[]);
    m.unmount();
    m.mount(&["--threads", "4"]);
    let f = m.p("f");
    fs::write(&f, b"").unwrap();
    let want = b"the value that stays".to_vec();
    assert_eq!(setxattr(&f, "trusted.stays", &want, 0), 0);
    let big = vec![b'x'; 1000];
    let done = AtomicBool::new(false);
    let (reads, bad) = (AtomicU64::new(0), AtomicU64::new(0));
    let first_bad = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let path = c(&f);
                let name = c(Path::new("trusted.stays"));
                let mut buf = vec![0u8; 256];
                while !done.load(Relaxed) {
                    // SAFETY: valid strings and a buffer of buf.len() bytes.
                    let n = unsafe {
                        libc::getxattr(
                            path.as_ptr(),
                            name.as_ptr(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                        )
                    };
                    reads.fetch_add(1, Relaxed);
                    let what = if n < 0 {
                        Some(format!("errno {}", errno(-1)))
                    } else if buf[..n as usize] != want[..] {
                        Some(format!(
                            "value {:?}",
                            String::from_utf8_lossy(&buf[..n as usize])
                        ))
                    } else {
                        None
                    };
                    if let Some(w) = what {
                        bad.fetch_add(1, Relaxed);
                        first_bad.lock().unwrap().get_or_insert(w);
                    }
                }
            });
        }
        for _ in 0..1500 {
            assert_eq!(setxattr(&f, "trusted.big", &big, 0), 0);
            assert_eq!(removexattr(&f, "trusted.big"), 0);
        }
        done.store(true, Relaxed);
    });
    let (reads, bad) = (reads.into_inner(), bad.into_inner());
    eprintln!("{reads} getxattr calls, {bad} bad");
    assert!(reads > 0, "no getxattr ran");
    assert_eq!(
        bad,
        0,
        "{bad} of {reads} getxattr calls failed or read a wrong value, first: {}",
        first_bad.into_inner().unwrap().unwrap_or_default()
    );
    m.finish();
}

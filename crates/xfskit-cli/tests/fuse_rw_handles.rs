//! Exportable file handles through a read-write `xfskit mount`: what NFS
//! export and backup tools rely on (fstests generic/426, 467, 477, 756,
//! 777). A handle taken with name_to_handle_at must open with
//! open_by_handle_at after the kernel dropped the inode from its caches
//! and after a remount, as on kernel XFS; a handle of a file that was
//! removed must give ESTALE, also when its inode number went to a new
//! file (the generation differs), never the new file. Needs root,
//! /dev/fuse and xfsprogs; prints SKIP otherwise.

mod common;

use common::rwmount::{c, errno, skip_rw as skip, RwMount};
use std::fs;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The largest handle the kernel makes (MAX_HANDLE_SZ).
const MAX_HANDLE: usize = 128;

/// A file handle: `struct file_handle` with room for the largest handle,
/// kept in u64s for its alignment.
struct FileHandle(Vec<u64>);

impl FileHandle {
    fn as_mut_ptr(&mut self) -> *mut libc::file_handle {
        self.0.as_mut_ptr().cast()
    }
}

/// name_to_handle_at of `p` (not following a final symlink).
fn handle_of(p: &Path) -> FileHandle {
    let mut h = FileHandle(vec![0u64; (8 + MAX_HANDLE) / 8]);
    // SAFETY: the buffer holds a file_handle header and MAX_HANDLE bytes.
    unsafe { (*h.as_mut_ptr()).handle_bytes = MAX_HANDLE as u32 };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: valid path string, handle buffer and mount id.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c(p).as_ptr(),
            h.as_mut_ptr(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(errno(i64::from(r)), 0, "name_to_handle_at {}", p.display());
    h
}

/// open_by_handle_at through the mount `mnt`: the open file or the errno.
fn open_by(mnt: &Path, h: &mut FileHandle) -> Result<OwnedFd, i32> {
    let m = fs::File::open(mnt).unwrap();
    // SAFETY: an open directory fd and a handle filled by name_to_handle_at.
    let fd = unsafe {
        libc::open_by_handle_at(
            std::os::fd::AsRawFd::as_raw_fd(&m),
            h.as_mut_ptr(),
            libc::O_RDONLY,
        )
    };
    if fd < 0 {
        return Err(errno(-1));
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Lets the kernel drop every unused dentry and inode: those of the mount
/// are forgotten (FUSE FORGET) and must be looked up by number again.
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// The contents of the open file `fd`.
fn contents(fd: OwnedFd) -> Vec<u8> {
    let mut v = Vec::new();
    fs::File::from(fd).read_to_end(&mut v).unwrap();
    v
}

/// The path the kernel gives the open file `fd` (a directory's is its
/// full path once the kernel reconnected it through "..").
fn path_of(fd: &OwnedFd) -> PathBuf {
    let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
    fs::read_link(format!("/proc/self/fd/{raw}")).unwrap()
}

fn ino_of(fd: &OwnedFd) -> u64 {
    let f = fs::File::from(fd.try_clone().unwrap());
    f.metadata().unwrap().ino()
}

/// Files and directories reopened by handle after the kernel forgot
/// them, and after an unmount and a new mount: the right inode, the right
/// contents, directories under their real path.
#[test]
fn handles_open_after_drop_caches_and_remount() {
    if skip("handles_open_after_drop_caches_and_remount") {
        return;
    }
    let mut m = RwMount::new("handles", 320, &[]);
    let mnt = fs::canonicalize(&m.mnt).unwrap();
    fs::create_dir_all(m.p("d/e")).unwrap();
    fs::write(m.p("top"), b"top file").unwrap();
    fs::write(m.p("d/f"), b"in d").unwrap();
    fs::write(m.p("d/e/g"), vec![7u8; 70_000]).unwrap();
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("top", b"top file".to_vec()),
        ("d/f", b"in d".to_vec()),
        ("d/e/g", vec![7u8; 70_000]),
    ];
    let dirs = ["", "d", "d/e"];
    let ino = |rel: &str| fs::metadata(m.p(rel)).unwrap().ino();
    let mut fh: Vec<_> = files
        .iter()
        .map(|(rel, _)| (handle_of(&m.p(rel)), ino(rel)))
        .collect();
    let mut dh: Vec<_> = dirs
        .iter()
        .map(|rel| (handle_of(&m.p(rel)), ino(rel)))
        .collect();
    let check = |fh: &mut Vec<(FileHandle, u64)>, dh: &mut Vec<(FileHandle, u64)>, when: &str| {
        for ((rel, want), (h, ino)) in files.iter().zip(fh.iter_mut()) {
            let fd = open_by(&mnt, h)
                .unwrap_or_else(|e| panic!("{when}: open_by_handle_at {rel}: errno {e}"));
            assert_eq!(ino_of(&fd), *ino, "{when}: {rel}");
            assert!(contents(fd) == *want, "{when}: contents of {rel}");
        }
        for (rel, (h, ino)) in dirs.iter().zip(dh.iter_mut()) {
            let fd = open_by(&mnt, h)
                .unwrap_or_else(|e| panic!("{when}: open_by_handle_at dir {rel:?}: errno {e}"));
            assert_eq!(ino_of(&fd), *ino, "{when}: dir {rel:?}");
            let want = if rel.is_empty() {
                mnt.clone()
            } else {
                mnt.join(rel)
            };
            assert_eq!(path_of(&fd), want, "{when}: dir {rel:?}");
        }
    };
    drop_caches();
    check(&mut fh, &mut dh, "after drop_caches");
    // Twice: the first round's lookups were counted and forgotten.
    drop_caches();
    check(&mut fh, &mut dh, "after a second drop_caches");
    m.unmount();
    m.mount(&[]);
    check(&mut fh, &mut dh, "after a remount");
    m.unmount();
    m.mount(&["--read-only"]);
    check(&mut fh, &mut dh, "on a read-only mount");
    drop_caches();
    check(&mut fh, &mut dh, "on a read-only mount after drop_caches");
    m.unmount();
    m.mount(&[]);
    m.finish();
}

/// Used inodes of the filesystem mounted at `mnt`, as statfs counts them.
fn used_inodes(mnt: &Path) -> u64 {
    // SAFETY: a valid path and a statvfs to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        errno(i64::from(unsafe {
            libc::statvfs(c(mnt).as_ptr(), &mut st)
        })),
        0
    );
    st.f_files - st.f_ffree
}

/// A file opened by handle (a LOOKUP of "." the server counts as the
/// kernel's reference, as any lookup) and then unlinked stays readable
/// until closed, and is freed once the kernel lets go of it.
#[test]
fn file_opened_by_handle_outlives_its_unlink() {
    if skip("file_opened_by_handle_outlives_its_unlink") {
        return;
    }
    let m = RwMount::new("handles-orphan", 320, &[]);
    let mnt = fs::canonicalize(&m.mnt).unwrap();
    let before = used_inodes(&mnt);
    let body = vec![0x5au8; 200_000];
    fs::write(m.p("f"), &body).unwrap();
    let mut h = handle_of(&m.p("f"));
    drop_caches();
    let fd = open_by(&mnt, &mut h).expect("open_by_handle_at of a linked file");
    fs::remove_file(m.p("f")).unwrap();
    // Still held by the kernel: the same handle opens it again, as on
    // kernel XFS, and both read it whole.
    let again = open_by(&mnt, &mut h).expect("open_by_handle_at of an open unlinked file");
    assert!(contents(again) == body, "second open of the unlinked file");
    assert!(
        contents(fd) == body,
        "the unlinked file read through its handle"
    );
    // The kernel lets go of the inode once its RELEASEs are answered,
    // which FUSE sends after close returns: until then drop_caches cannot
    // evict it and the handle still finds it in the kernel's cache. Once
    // evicted, the handle is stale. (Waiting for that event, bounded.)
    let t0 = std::time::Instant::now();
    loop {
        // Time for the last close's RELEASE to be answered, then evict.
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop_caches();
        match open_by(&mnt, &mut h) {
            Err(e) => {
                assert_eq!(e, libc::ESTALE, "the freed file's handle");
                break;
            }
            Ok(f) => {
                assert!(
                    contents(f) == body,
                    "the file while the kernel still holds it"
                );
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(60),
                    "the kernel still holds the unlinked file a minute after its close"
                );
            }
        }
    }
    // The FORGET that frees it comes after the close; statfs shows it
    // back once the server has done it.
    let t0 = std::time::Instant::now();
    while used_inodes(&mnt) != before {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "the unlinked file's inode was not freed: {} inodes used, {before} before",
            used_inodes(&mnt)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    m.finish();
}

/// Handles of 32 files that were removed, and whose inode numbers went
/// (in part) to 32 new files: every old handle gives ESTALE, every new
/// file opens by its own handle. With `remount`, the old files were made
/// in an earlier mount of the image than the new ones, as the first
/// files of that mount, as the new ones are the first of theirs: a
/// generation sequence that started anew with each mount would give the
/// k-th new file the k-th old one's generation.
fn reused_numbers_give_estale(tag: &str, remount: bool) {
    let mut m = RwMount::new(tag, 320, &[]);
    let mnt = fs::canonicalize(&m.mnt).unwrap();
    let mut old = Vec::new();
    for k in 0..32 {
        let p = m.p(&format!("old{k}"));
        fs::write(&p, format!("old {k}")).unwrap();
        old.push((handle_of(&p), fs::metadata(&p).unwrap().ino()));
    }
    fs::write(m.p("keep"), b"still here").unwrap();
    let mut keep = handle_of(&m.p("keep"));
    if remount {
        m.unmount();
        m.mount(&[]);
    }
    for k in 0..32 {
        fs::remove_file(m.p(&format!("old{k}"))).unwrap();
    }
    drop_caches();
    // A removed file's handle: ESTALE while a linked file's opens.
    assert_eq!(
        open_by(&mnt, &mut old[0].0).err(),
        Some(libc::ESTALE),
        "handle of a removed file"
    );
    let fd = open_by(&mnt, &mut keep).expect("handle of a linked file");
    assert_eq!(contents(fd), b"still here");
    let mut new = Vec::new();
    for k in 0..32 {
        let p = m.p(&format!("new{k}"));
        fs::write(&p, format!("new {k}")).unwrap();
        new.push((k, handle_of(&p), fs::metadata(&p).unwrap().ino()));
    }
    let reused = new
        .iter()
        .filter(|(_, _, ino)| old.iter().any(|(_, o)| o == ino))
        .count();
    assert!(reused > 0, "no new file took a removed file's inode number");
    drop_caches();
    for (k, (h, ino)) in old.iter_mut().enumerate() {
        match open_by(&mnt, h) {
            Err(e) => assert_eq!(e, libc::ESTALE, "old{k} (inode {ino})"),
            Ok(fd) => panic!(
                "handle of removed old{k} (inode {ino}) opened inode {} holding {:?}",
                ino_of(&fd),
                String::from_utf8_lossy(&contents(fd))
            ),
        }
    }
    for (k, h, ino) in new.iter_mut() {
        let fd = open_by(&mnt, h).unwrap_or_else(|e| panic!("new{k}: errno {e}"));
        assert_eq!(ino_of(&fd), *ino);
        assert_eq!(contents(fd), format!("new {k}").into_bytes());
    }
    eprintln!("{tag}: {reused} of 32 inode numbers reused");
    m.finish();
}

#[test]
fn reused_inode_numbers_give_estale() {
    if skip("reused_inode_numbers_give_estale") {
        return;
    }
    reused_numbers_give_estale("handles-reuse", false);
}

#[test]
fn reused_inode_numbers_give_estale_across_mounts() {
    if skip("reused_inode_numbers_give_estale_across_mounts") {
        return;
    }
    reused_numbers_give_estale("handles-reuse-mounts", true);
}

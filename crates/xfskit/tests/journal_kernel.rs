//! The kernel replays the log xfskit writes: changes made through the
//! library and forced to the log (never written in place) come back when
//! Linux mounts the image, and `xfs_repair -n` is clean afterwards.

mod namespace_common;
mod write_common;

use namespace_common::*;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::log::LogState;
use xfskit::{Fs, Ino, OpenOptions};

/// A workload touching every kind of metadata: directories grown past
/// their short form, files with data, xattrs small and remote, links,
/// renames and removals.
fn workload(fs: &Fs, rng: &mut Rng, files: usize) {
    let root = fs.geometry().root_ino;
    let mut dirs: Vec<Ino> = Vec::new();
    for d in 0..3 {
        let name = format!("dir{d}");
        dirs.push(
            fs.create(root, name.as_bytes(), &NodeKind::Dir, &meta(0o755, d))
                .unwrap(),
        );
    }
    let mut made: Vec<(Ino, Ino, String)> = Vec::new();
    for i in 0..files {
        let dir = dirs[i % dirs.len()];
        let name = format!("f{i:05}-{}", rng.below(1000));
        let ino = fs
            .create(
                dir,
                name.as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644, 1000),
            )
            .unwrap();
        let len = rng.below(9000) as usize;
        let data = rng.bytes(len);
        fs.write_at(ino, 0, &data).unwrap();
        if i % 7 == 0 {
            fs.set_xattr(ino, b"user.small", b"v").unwrap();
        }
        if i % 29 == 0 {
            fs.set_xattr(ino, b"user.big", &rng.bytes(3000)).unwrap();
        }
        made.push((dir, ino, name));
    }
    for (k, (dir, ino, name)) in made.iter().enumerate() {
        match k % 11 {
            0 => fs.unlink(*dir, name.as_bytes()).unwrap(),
            1 => {
                let to = dirs[(k + 1) % dirs.len()];
                fs.rename(*dir, name.as_bytes(), to, format!("r{k}").as_bytes())
                    .unwrap()
            }
            2 => fs.link(root, format!("l{k}").as_bytes(), *ino).unwrap(),
            3 => fs.truncate(*ino, 100).unwrap(),
            _ => {}
        }
    }
}

fn check_replay(tag: &str, mkfs_opts: &str, files: usize, limits: Option<(usize, usize)>) {
    if !is_root() {
        xfskit_testkit::skip(tag, "the kernel's log replay needs root (loop mount)");
        return;
    }
    let s = Scratch::new(tag);
    let img = s.0.join("img");
    mkfs_xfs(&img, 320 << 20, mkfs_opts);
    let want = {
        let fs = Fs::open_rw(
            &img,
            &OpenOptions {
                pending_limits: limits,
                ..Default::default()
            },
        )
        .unwrap();
        let mut rng = Rng(0x5eed ^ files as u64);
        workload(&fs, &mut rng, files);
        fs.force_log().unwrap();
        let st = fs.log_stats();
        assert!(st.checkpoints >= 1, "{st:?}");
        walk_lib(&fs)
        // Dropped without sync: what is not in place is only in the log.
    };
    let fs = Fs::open(
        &img,
        &OpenOptions {
            norecovery: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        matches!(fs.log_state(), LogState::Dirty(_)),
        "{:?}",
        fs.log_state()
    );
    drop(fs);
    kernel_replay(&img).unwrap();
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "after the kernel replayed our log");
}

#[test]
fn kernel_replays_a_checkpoint_never_written_in_place() {
    check_replay("jk-small", "", 200, None);
}

#[test]
fn kernel_replays_after_writebacks_moved_the_tail() {
    // Small pending limits: many writebacks while the workload runs, so
    // records name later tails and LSNs are stamped in place.
    check_replay("jk-wb", "", 600, Some((256 << 10, 256 << 10)));
}

#[test]
fn kernel_replays_1k_blocks_rmapbt() {
    check_replay(
        "jk-1k",
        "-b size=1024 -m rmapbt=1",
        300,
        Some((1 << 20, 1 << 20)),
    );
}

#[test]
fn synced_image_has_a_clean_log_and_reopens_for_writing() {
    let s = Scratch::new("jk-sync");
    let img = s.0.join("img");
    mkfs_xfs(&img, 320 << 20, "");
    for round in 0..3u64 {
        let fs = open_rw(&img);
        let mut rng = Rng(round + 1);
        let root = fs.geometry().root_ino;
        let d = fs
            .create(
                root,
                format!("round{round}").as_bytes(),
                &NodeKind::Dir,
                &meta(0o755, 0),
            )
            .unwrap();
        for i in 0..50 {
            let ino = fs
                .create(
                    d,
                    format!("f{i}").as_bytes(),
                    &NodeKind::File { size: 0 },
                    &meta(0o644, 0),
                )
                .unwrap();
            fs.write_at(ino, 0, &rng.bytes(100)).unwrap();
        }
        fs.sync().unwrap();
        let st = fs.log_stats();
        assert_eq!(st.unmounts, 1, "{st:?}");
        drop(fs);
        let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
        assert_eq!(fs.log_state(), &LogState::Clean);
        assert_repair_clean(&img);
    }
    if let Some(n) = with_kernel_mount(&img, |m| std::fs::read_dir(m).unwrap().count()) {
        assert_eq!(n, 3);
    }
}

/// An image file without flushes: a test that only needs the bytes fast.
struct NoFlush(std::fs::File, u64);

impl xfskit::dev::Device for NoFlush {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, off)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.1
    }
}

#[test]
fn kernel_replays_a_log_that_wrapped() {
    if !is_root() {
        xfskit_testkit::skip(
            "kernel_replays_a_log_that_wrapped",
            "the kernel's log replay needs root",
        );
        return;
    }
    let s = Scratch::new("jk-wrap");
    let img = s.0.join("img");
    mkfs_xfs(&img, 320 << 20, "");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    let len = f.metadata().unwrap().len();
    let fs = Fs::from_device_rw(Box::new(NoFlush(f, len)), &OpenOptions::default()).unwrap();
    let log_bytes = u64::from(fs.geometry().log_blocks) * u64::from(fs.geometry().block_size);
    let root = fs.geometry().root_ino;
    let mut rng = Rng(77);
    let mut files = Vec::new();
    for k in 0..8 {
        let ino = fs
            .create(
                root,
                format!("f{k}").as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644, 1),
            )
            .unwrap();
        fs.write_at(ino, 0, &rng.bytes(5000)).unwrap();
        files.push(ino);
    }
    // Large remote values replaced over and over: every checkpoint logs
    // their blocks whole, frees the old ones (cancels) and reuses space.
    let mut n = 0u64;
    while fs.log_stats().bytes < 2 * log_bytes + log_bytes / 3 {
        let ino = files[(n % 8) as usize];
        let v = rng.bytes(60_000);
        fs.set_xattr(ino, b"user.big", &v).unwrap();
        if n.is_multiple_of(3) {
            fs.force_log().unwrap();
        }
        n += 1;
    }
    fs.force_log().unwrap();
    let st = fs.log_stats();
    assert!(st.bytes > 2 * log_bytes, "{st:?}");
    let want = walk_lib(&fs);
    drop(fs);
    let ours = s.0.join("ours");
    std::fs::copy(&img, &ours).unwrap();
    kernel_replay(&img).unwrap();
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_tree_eq(
        &want,
        &walk_lib(&fs),
        "after the kernel replayed a wrapped log",
    );
    let fs = open_rw(&ours);
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&ours);
    let fs = Fs::open(&ours, &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "after xfskit replayed a wrapped log");
}

/// fsync forces the log only when the inode's last change is not in a
/// checkpoint yet: a second fsync with nothing changed writes no log, a
/// change to another file does not make this one's fsync write it either,
/// and a change to this file does.
#[test]
fn fsync_forces_only_what_the_inode_needs() {
    let s = Scratch::new("fsync-needs");
    let img = s.0.join("f.img");
    mkfs_xfs(&img, 300 << 20, "");
    let fs = open_rw(&img);
    let root = fs.geometry().root_ino;
    let a = fs
        .create(root, b"a", &NodeKind::File { size: 0 }, &meta(0o644, 1))
        .unwrap();
    let b = fs
        .create(root, b"b", &NodeKind::File { size: 0 }, &meta(0o644, 1))
        .unwrap();
    fs.write_at(a, 0, b"hello").unwrap();
    let c0 = fs.log_stats().checkpoints;
    fs.fsync(a).unwrap();
    let c1 = fs.log_stats().checkpoints;
    assert_eq!(
        c1,
        c0 + 1,
        "the first fsync of a changed file writes a checkpoint"
    );
    fs.fsync(a).unwrap();
    assert_eq!(
        fs.log_stats().checkpoints,
        c1,
        "nothing changed: no checkpoint"
    );
    fs.write_at(b, 0, b"other").unwrap();
    fs.fsync(a).unwrap();
    assert_eq!(
        fs.log_stats().checkpoints,
        c1,
        "only another file changed: no checkpoint"
    );
    fs.fsync(b).unwrap();
    let c2 = fs.log_stats().checkpoints;
    assert_eq!(c2, c1 + 1, "b's change is forced by b's fsync");
    fs.write_at(a, 5, b" again").unwrap();
    fs.fsync(a).unwrap();
    assert_eq!(fs.log_stats().checkpoints, c2 + 1, "a changed again");
    // What the fsyncs made durable is there after a crash (the image as
    // it is now, never synced) when the kernel replays it.
    std::mem::forget(fs);
    if !is_root() {
        xfskit_testkit::skip(
            "fsync_forces_only_what_the_inode_needs",
            "kernel replay needs root",
        );
        return;
    }
    kernel_replay(&img).unwrap();
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    for (name, want) in [("a", &b"hello again"[..]), ("b", &b"other"[..])] {
        let ip = fs.lookup_path(format!("/{name}").as_bytes()).unwrap();
        let mut buf = vec![0u8; ip.size as usize];
        xfskit::inode::read_at(&fs, &ip, 0, &mut buf).unwrap();
        assert_eq!(buf, want, "/{name} after the kernel's replay");
    }
}

/// Bytes 0xa5 in the blocks of the data fork of `dir` (its directory
/// blocks, read from the image as they are on disk).
fn stale_bytes_in(fs: &Fs, dir: Ino) -> usize {
    let inode = fs.inode(dir).unwrap();
    let geo = fs.geometry();
    let mut n = 0;
    for e in xfskit::inode::extents(fs, &inode, xfskit::inode::Fork::Data).unwrap() {
        let mut buf = vec![0u8; (e.len * u64::from(geo.block_size)) as usize];
        fs.read_bytes(geo.fsb_to_daddr(e.start).bytes(), &mut buf)
            .unwrap();
        n += buf.iter().filter(|&&b| b == 0xa5).count();
    }
    n
}

/// New directory blocks are logged as the kernel logs them, without their
/// unused space, so recovery leaves there whatever the disk held before.
/// Blocks freed by a file of 0xa5 bytes make that garbage: directories in
/// block, leaf and node form grown (and shrunk) over them in one checkpoint
/// must come back whole from the kernel's replay and from ours, with
/// `xfs_repair -n` clean after each, and the garbage must really be there.
#[test]
fn replay_of_new_directory_blocks_over_stale_bytes() {
    if skip_unless_root("replay_of_new_directory_blocks_over_stale_bytes") {
        return;
    }
    let s = Scratch::new("jk-stale");
    let img = s.0.join("img");
    mkfs_xfs(&img, 320 << 20, "");
    let root = {
        let fs = open_rw(&img);
        let root = fs.geometry().root_ino;
        let fill = fs
            .create(root, b"fill", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        let chunk = vec![0xa5u8; 1 << 20];
        for i in 0..240u64 {
            fs.write_at(fill, i << 20, &chunk).unwrap();
        }
        fs.sync().unwrap();
        fs.unlink(root, b"fill").unwrap();
        fs.sync().unwrap();
        root
    };
    let mut dirs = Vec::new();
    let want = {
        let fs = open_rw(&img);
        // Each directory stops at the create that gave it its n-th block,
        // so its last transaction made a new block (a data block, the
        // LEAF1 of the block-to-leaf conversion, LEAFN and free-index
        // blocks of the node form) and nothing rewrote it since. Every
        // third name goes again before that, leaving stale entries.
        for (d, n) in [1u64, 2, 3, 5, 8, 13, 21, 34].into_iter().enumerate() {
            let dir = fs
                .create(
                    root,
                    format!("d{d}").as_bytes(),
                    &NodeKind::Dir,
                    &meta(0o755, 0),
                )
                .unwrap();
            dirs.push(dir);
            let name = |i: usize| format!("{}{i}", "n".repeat(1 + i * 7 % 90));
            let mut grew = 0;
            let mut blocks = fs.inode(dir).unwrap().nblocks;
            for i in 0.. {
                fs.create(
                    dir,
                    name(i).as_bytes(),
                    &NodeKind::File { size: 0 },
                    &meta(0o644, 0),
                )
                .unwrap();
                if i % 3 == 2 {
                    fs.unlink(dir, name(i - 2).as_bytes()).unwrap();
                }
                let now = fs.inode(dir).unwrap().nblocks;
                if now != blocks {
                    blocks = now;
                    grew += 1;
                    if grew == n {
                        break;
                    }
                }
            }
        }
        fs.force_log().unwrap();
        walk_lib(&fs)
        // Dropped without sync: the directories are only in the log.
    };
    let ours = s.0.join("ours");
    std::fs::copy(&img, &ours).unwrap();
    kernel_replay(&img).unwrap();
    assert_repair_clean(&img);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "after the kernel replayed our log");
    let stale: usize = dirs.iter().map(|&d| stale_bytes_in(&fs, d)).sum();
    assert!(
        stale > 0,
        "no stale bytes left in the directories' unused space: the test proves nothing"
    );
    drop(fs);
    xfskit::Fs::recover(&ours, &xfskit::log::recover::RecoverOptions::default()).unwrap();
    assert_repair_clean(&ours);
    let fs = Fs::open(&ours, &OpenOptions::default()).unwrap();
    assert_tree_eq(&want, &walk_lib(&fs), "after xfskit replayed its log");
}

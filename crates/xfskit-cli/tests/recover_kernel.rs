//! Log recovery against the kernel's: images the kernel leaves dirty (a
//! workload on a loop mount, then `xfs_io -x -c 'shutdown -f'`), for
//! several mkfs feature sets. For each, one copy is recovered by the kernel
//! (mount, umount), one by `xfskit recover`, and the dirty image itself is
//! read by xfskit with the log replayed in memory (`xfskit extract`):
//!
//! - `xfskit recover` leaves an image `xfs_repair -n` finds clean, whose
//!   log the kernel finds clean, and whose tree (names, types, modes,
//!   owners, sizes, times to the nanosecond, link counts, xattrs, contents,
//!   inode numbers) equals the kernel-recovered one;
//! - the in-memory replay extracts the same tree, and the dirty image's
//!   bytes do not change.
//!
//! Needs root (loop mounts); without it each test prints SKIP.

mod common;

use common::{diff_walks, repair_check, require_root, walk_host, Entry, LoopMount, TempDir};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn xfskit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .expect("run xfskit")
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The workload: a first phase made durable with sync (its metadata is
/// then still only in the log until the kernel writes it back), a second
/// phase of changes left in the log by the shutdown.
const WORKLOAD: &str = r#"
set -e
cd "$1"
mkdir -p d/small d/big d/shrink d/attrs
for i in $(seq 1 40); do echo "file $i" > d/small/f$i; done
for i in $(seq 1 2500); do : > d/big/entry_with_a_rather_long_name_$i; done
for i in $(seq 1 700); do : > d/shrink/n$i; done
head -c 3000000 /dev/urandom > d/data
seq 1 200000 > d/text
ln d/text d/text.link
ln -s ../text d/small/sym
mkfifo d/fifo
setfattr -n user.a -v 1 d/text
setfattr -n user.big -v "$(head -c 20000 /dev/zero | tr '\0' y)" d/data
for i in $(seq 1 60); do setfattr -n user.key$i -v value$i d/attrs; done
if [ -n "$REFLINK" ]; then cp --reflink=always d/data d/clone; fi
sync
mv d/small/f2 d/big/renamed
rm d/small/f3 d/small/f8
for i in $(seq 1 690); do rm d/shrink/n$i; done
for i in $(seq 1 1200); do rm d/big/entry_with_a_rather_long_name_$i; done
truncate -s 100000 d/data
fallocate -p -o 4096 -l 65536 d/text
fallocate -o 0 -l 1048576 d/prealloc
setfattr -x user.key5 d/attrs
setfattr -n user.new -v x d/text.link
chmod 600 d/small/f4
chown 12:34 d/small/f5
touch -d '2001-02-03 04:05:06.123456789' d/small/f6
mkdir d/newdir
echo hi > d/newdir/x
ln d/newdir/x d/small/x.link
if [ -n "$REFLINK" ]; then cp --reflink=always d/text d/clone2; fi
sync
mv d/newdir d/small/moved
rm d/small/f9
if [ -n "$CHURN" ]; then
  mkdir -p d/churn
  for r in $(seq 1 26); do
    for i in $(seq 1 1500); do : > d/churn/c$i; done
    rm -f d/churn/c*
  done
  for i in $(seq 1 300); do echo $i > d/churn/keep$i; done
fi
"#;

/// Makes `name` (300 MiB) with `mkfs_args`, runs the workload on a loop
/// mount, shuts the filesystem down and unmounts it: the log is dirty.
fn dirty_image(dir: &Path, name: &str, mkfs_args: &[&str], reflink: bool, churn: bool) -> PathBuf {
    let img = dir.join(name);
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(300 << 20))
        .expect("image");
    let mut args = vec!["-q", "-f"];
    args.extend_from_slice(mkfs_args);
    args.push(s(&img));
    // fstests' variables let mkfs make a log smaller than 64 MiB.
    let out = Command::new("mkfs.xfs")
        .args(&args)
        .env("TEST_DIR", "/tmp")
        .env("TEST_DEV", "/dev/null")
        .env("QA_CHECK_FS", "1")
        .output()
        .expect("mkfs.xfs");
    assert!(
        out.status.success(),
        "mkfs.xfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mnt = dir.join(format!("{name}.mnt"));
    std::fs::create_dir_all(&mnt).expect("mkdir");
    run("mount", &["-o", "loop", s(&img), s(&mnt)]);
    let w = Command::new("bash")
        .args(["-c", WORKLOAD, "workload", s(&mnt)])
        .env("REFLINK", if reflink { "1" } else { "" })
        .env("CHURN", if churn { "1" } else { "" })
        .output()
        .expect("bash");
    let shut = Command::new("xfs_io")
        .args(["-x", "-c", "shutdown -f", s(&mnt)])
        .output()
        .expect("xfs_io");
    run("umount", &[s(&mnt)]);
    assert!(
        w.status.success(),
        "workload: {}",
        String::from_utf8_lossy(&w.stderr)
    );
    assert!(
        shut.status.success(),
        "shutdown: {}",
        String::from_utf8_lossy(&shut.stderr)
    );
    img
}

fn copy(from: &Path, to: &Path) {
    run("cp", &["--sparse=always", s(from), s(to)]);
}

fn sha(p: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Times (ctime, atime, crtime-less) and inode numbers the host walk does
/// not compare, by path.
fn extra(root: &Path, walk: &[Entry]) -> BTreeMap<String, (i64, i64, i64, i64, u64)> {
    walk.iter()
        .map(|e| {
            let md = std::fs::symlink_metadata(root.join(&e.path)).expect("stat");
            let v = (
                md.ctime(),
                md.ctime_nsec(),
                md.atime(),
                md.atime_nsec(),
                md.ino(),
            );
            (e.path.clone(), v)
        })
        .collect()
}

/// A scratch XFS filesystem to extract into; unmounted on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: &Path) -> Scratch {
        let img = dir.join("scratch.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(1 << 30))
            .expect("scratch");
        run("mkfs.xfs", &["-q", "-f", s(&img)]);
        let mnt = dir.join("scratch");
        std::fs::create_dir_all(&mnt).expect("mkdir");
        run("mount", &["-o", "loop", s(&img), s(&mnt)]);
        Scratch(mnt)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn check_config(test: &str, mkfs_args: &[&str], reflink: bool) {
    check_sized(test, mkfs_args, reflink, false)
}

fn check_sized(test: &str, mkfs_args: &[&str], reflink: bool, churn: bool) {
    if !require_root(test) {
        return;
    }
    let tmp = TempDir::new(test);
    let dir = tmp.path();
    let dirty = dirty_image(dir, "dirty.img", mkfs_args, reflink, churn);
    let log = xfskit(&["log", "--json", s(&dirty)]);
    assert!(
        log.status.success(),
        "xfskit log: {}",
        String::from_utf8_lossy(&log.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&log.stdout).expect("json");
    assert_eq!(
        v["state"], "dirty",
        "{test}: the workload must leave the log dirty"
    );
    if churn {
        assert!(
            v["head"]["cycle"].as_u64() >= Some(2),
            "{test}: the log did not wrap: {v}"
        );
    }
    let before = sha(&dirty);

    // The kernel's recovery.
    let kimg = dir.join("kernel.img");
    copy(&dirty, &kimg);
    let kmnt = dir.join("kmnt");
    std::fs::create_dir_all(&kmnt).expect("mkdir");
    run("mount", &["-o", "loop,nouuid", s(&kimg), s(&kmnt)]);
    run("umount", &[s(&kmnt)]);
    let km = LoopMount::new(&kimg, &kmnt).expect("mount kernel-recovered");
    let want = walk_host(km.path());
    let want_extra = extra(km.path(), &want);

    // xfskit recover.
    let ximg = dir.join("xfskit.img");
    copy(&dirty, &ximg);
    let r = xfskit(&["recover", s(&ximg)]);
    assert!(
        r.status.success(),
        "{test}: xfskit recover: {}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    let (code, text) = repair_check(&ximg);
    assert_eq!(
        code, 0,
        "{test}: xfs_repair -n after xfskit recover:\n{text}"
    );
    let l2 = xfskit(&["log", "--json", s(&ximg)]);
    let v2: serde_json::Value = serde_json::from_slice(&l2.stdout).expect("json");
    assert_eq!(v2["state"], "clean", "{test}: log after recover");
    let xmnt = dir.join("xmnt");
    std::fs::create_dir_all(&xmnt).expect("mkdir");
    {
        let xm = LoopMount::new(&ximg, &xmnt).expect("mount xfskit-recovered");
        let got = walk_host(xm.path());
        let d = diff_walks(&want, &got);
        assert!(
            d.is_empty(),
            "{test}: recovered trees differ:\n{}",
            d.join("\n")
        );
        let got_extra = extra(xm.path(), &got);
        for (p, w) in &want_extra {
            assert_eq!(Some(w), got_extra.get(p), "{test}: {p:?}: ctime/atime/ino");
        }
    }
    drop(km);

    // In memory: extract from the dirty image itself.
    let scratch = Scratch::new(dir);
    let dest = scratch.0.join("out");
    let e = xfskit(&["extract", s(&dirty), s(&dest)]);
    assert!(
        e.status.success(),
        "{test}: extract from the dirty image: {}",
        String::from_utf8_lossy(&e.stderr)
    );
    let got: Vec<Entry> = walk_host(&dest)
        .into_iter()
        .filter(|e| !e.path.is_empty())
        .collect();
    let want_noroot: Vec<Entry> = want.into_iter().filter(|e| !e.path.is_empty()).collect();
    let d = diff_walks(&want_noroot, &got);
    assert!(
        d.is_empty(),
        "{test}: in-memory replay differs:\n{}",
        d.join("\n")
    );
    let c = xfskit(&["check", s(&dirty)]);
    assert!(
        c.status.success(),
        "{test}: check of the dirty image (replayed in memory): {}",
        String::from_utf8_lossy(&c.stdout)
    );
    assert_eq!(
        before,
        sha(&dirty),
        "{test}: reading the dirty image changed it"
    );
}

#[test]
fn recover_default_features() {
    check_config("recover_default_features", &[], false);
}

#[test]
fn recover_rmapbt() {
    check_config("recover_rmapbt", &["-m", "rmapbt=1"], false);
}

#[test]
fn recover_reflink() {
    check_config("recover_reflink", &["-m", "reflink=1"], true);
}

#[test]
fn recover_1k_blocks() {
    check_config("recover_1k_blocks", &["-b", "size=1024"], false);
}

#[test]
fn recover_4k_sectors() {
    check_config("recover_4k_sectors", &["-s", "size=4096"], false);
}

#[test]
fn recover_small_log_wraps() {
    // A 6 MiB log that the workload's churn wraps: the live part runs
    // from the end of the log in one cycle to its start in the next.
    check_sized("recover_small_log_wraps", &["-l", "size=6m"], false, true);
}

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
use xfskit_testkit::Mounted;

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
fn dirty_image(dir: &Path, name: &str, mkfs_args: &[&str], opts: &Opts) -> PathBuf {
    let img = dir.join(name);
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(300 << 20))
        .expect("image");
    let mut args = vec!["-q", "-f"];
    args.extend_from_slice(mkfs_args);
    args.push(s(&img));
    // fstests' variables let mkfs make a log smaller than 64 MiB. Options
    // of a newer format (a metadata directory tree, asked for directly or
    // by a config file named for it) need mkfs.xfs 6.15.
    let newer = mkfs_args.iter().any(|a| a.contains("metadir"));
    let mut mkfs = match common::fixtures::xfsprogs_615().filter(|_| newer) {
        Some(d) => {
            let mut c = Command::new(d.join("libexec/mkfs.xfs"));
            c.env("LD_LIBRARY_PATH", d.join("lib"));
            c
        }
        None => Command::new("mkfs.xfs"),
    };
    let out = mkfs
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
    run("mount", &["-o", opts.mount, s(&img), s(&mnt)]);
    let w = Command::new("bash")
        .args(["-c", WORKLOAD, "workload", s(&mnt)])
        .env("REFLINK", if opts.reflink { "1" } else { "" })
        .env("CHURN", if opts.churn { "1" } else { "" })
        .output()
        .expect("bash");
    let shut = shutdown(&mnt);
    common::must_umount(&mnt);
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

/// How the workload runs.
struct Opts {
    /// Also clone files with `cp --reflink`.
    reflink: bool,
    /// Also create and remove files until a small log wraps.
    churn: bool,
    /// Mount options of the workload's mount.
    mount: &'static str,
}

fn check_config(test: &str, mkfs_args: &[&str], reflink: bool) {
    let opts = Opts {
        reflink,
        churn: false,
        mount: "loop",
    };
    check_with(test, mkfs_args, &opts)
}

fn check_with(test: &str, mkfs_args: &[&str], opts: &Opts) {
    if !require_root(test) {
        return;
    }
    let tmp = TempDir::new(test);
    let dir = tmp.path();
    let dirty = dirty_image(dir, "dirty.img", mkfs_args, opts);
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
    if opts.churn {
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
    common::must_umount(&kmnt);
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
    let again = xfskit(&["recover", s(&ximg)]);
    assert!(
        again.status.success() && String::from_utf8_lossy(&again.stdout).contains("clean"),
        "{test}: a second recover finds the log clean"
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
    let scratch = common::fixtures::scratch_xfs(dir, 1 << 30);
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

    // A bad CRC in the first record of the live log (more than 8 records
    // before the head, so not a torn write): recover fails naming that
    // log block and writes nothing. The flipped byte is in the record's
    // body: its extended headers are covered by the CRC only as far as
    // the record's length needs them (a record under 64 KiB leaves the
    // third header block out, and the kernel accepts a change there too).
    if v["records"].as_u64().unwrap_or(0) > 9 {
        let cimg = dir.join("crc.img");
        copy(&dirty, &cimg);
        let tail = v["tail"]["block"].as_u64().expect("tail");
        let start = v["log_start_daddr"].as_u64().expect("log start");
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&cimg)
                .expect("open");
            // Header blocks: one per 32 KiB of the record size (h_size).
            let mut h = [0u8; 512];
            f.read_exact_at(&mut h, (start + tail) * 512).expect("read");
            let h_size = u64::from(u32::from_be_bytes(h[320..324].try_into().unwrap()));
            let hblks = h_size.div_ceil(32768).max(1);
            let off = (start + tail + hblks) * 512 + 100;
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, off).expect("read");
            b[0] ^= 0x10;
            f.write_all_at(&b, off).expect("write");
        }
        let h = sha(&cimg);
        let r = xfskit(&["recover", s(&cimg)]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(
            r.status.code(),
            Some(5),
            "{test}: recover of a log with a bad CRC: {err}"
        );
        assert!(err.contains(&format!("log block {tail}")), "{test}: {err}");
        assert_eq!(h, sha(&cimg), "{test}: a failed recover wrote to the image");
    }
}

#[test]
fn recover_default_features() {
    check_config("recover_default_features", &[], false);
}

/// A metadata directory filesystem with the xfsprogs 6.18 defaults
/// (parent pointers, rmapbt, reflink): the kernel's log of it, replayed by
/// the kernel and by xfskit, gives the same tree, xfs_repair -n 6.15 clean.
#[test]
fn recover_metadir_618_defaults() {
    const TEST: &str = "recover_metadir_618_defaults";
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        common::skip(TEST, "xfsprogs 6.15 is missing (mkfs.xfs -m metadir=1)");
        return;
    };
    let conf = std::fs::read_to_string(x615.join("conf/lts_6.18.conf")).expect("conf");
    let tmp = TempDir::new("metadir-conf");
    let mine = tmp.path().join("metadir.conf");
    std::fs::write(&mine, conf.replace("metadir=0", "metadir=1")).expect("conf");
    let opt = format!("options={}", mine.display());
    check_config(TEST, &["-c", &opt], true);
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
    let opts = Opts {
        reflink: false,
        churn: true,
        mount: "loop",
    };
    check_with("recover_small_log_wraps", &["-l", "size=6m"], &opts);
}

#[test]
fn recover_256k_log_buffers() {
    // Records up to 256 KiB: seven extended headers carry their cycle data.
    let opts = Opts {
        reflink: false,
        churn: false,
        mount: "loop,logbsize=256k",
    };
    check_with("recover_256k_log_buffers", &[], &opts);
}

#[test]
fn fresh_logs_are_clean() {
    // mkfs.xfs and xfskit mkfs leave an unmount record whose CRC is zero:
    // the log is clean, and recover changes nothing.
    let tmp = TempDir::new("fresh_logs_are_clean");
    for tool in ["mkfs.xfs", "xfskit"] {
        let img = tmp.path().join(format!("{tool}.img"));
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(300 << 20))
            .expect("image");
        if tool == "xfskit" {
            let o = xfskit(&["mkfs", s(&img)]);
            assert!(o.status.success(), "xfskit mkfs");
        } else if !Command::new("mkfs.xfs")
            .args(["-q", "-f", s(&img)])
            .status()
            .is_ok_and(|st| st.success())
        {
            common::skip("fresh_logs_are_clean", "mkfs.xfs failed or is missing");
            continue;
        }
        let l = xfskit(&["log", "--json", s(&img)]);
        assert!(
            l.status.success(),
            "{tool}: xfskit log: {}",
            String::from_utf8_lossy(&l.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
        assert_eq!(v["state"], "clean", "{tool}: {v}");
        let before = sha(&img);
        let r = xfskit(&["recover", s(&img)]);
        assert!(
            r.status.success() && String::from_utf8_lossy(&r.stdout).contains("clean"),
            "{tool}"
        );
        assert_eq!(before, sha(&img), "{tool}: recover of a clean log wrote");
    }
}

/// Free-space and inode counters as xfs_db reads them.
fn counters(img: &Path) -> String {
    let mut args = vec!["-r", "-c", "sb 0", "-c", "p fdblocks icount ifree"];
    let agfs: Vec<String> = (0..4).map(|i| format!("agf {i}")).collect();
    for a in &agfs {
        // Blocks each AG does not hold for data or inodes: the free
        // extents, the AGFL and the free-space and rmap btree blocks past
        // their roots. How they split among the three may differ (the write
        // engine refills the AGFL and splits btree blocks at other points
        // than the kernel does), so the sum is compared.
        args.extend_from_slice(&["-c", a, "-c", "p freeblks flcount btreeblks"]);
    }
    args.push(s(img));
    let out = Command::new("xfs_db").args(&args).output().expect("xfs_db");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut res = String::new();
    let mut ag_sum = 0u64;
    for line in text.lines() {
        match line.split_once(" = ") {
            Some((key @ ("freeblks" | "flcount" | "btreeblks"), val)) => {
                ag_sum += val.trim().parse::<u64>().expect("xfs_db number");
                // btreeblks is the last of an AG's three fields.
                if key == "btreeblks" {
                    res.push_str(&format!("ag unused = {ag_sum}\n"));
                    ag_sum = 0;
                }
            }
            _ => {
                res.push_str(line);
                res.push('\n');
            }
        }
    }
    res
}

#[test]
fn recover_unfinished_extent_frees() {
    unfinished_intents("recover_unfinished_extent_frees", &[]);
}

#[test]
fn recover_unfinished_rmap_and_extent_frees() {
    unfinished_intents(
        "recover_unfinished_rmap_and_extent_frees",
        &["-m", "rmapbt=1"],
    );
}

/// Makes a fresh 300 MiB filesystem at `img` with `mkfs_args` and
/// loop-mounts it at `mnt`.
fn fresh_mount(img: &Path, mnt: &Path, mkfs_args: &[&str]) {
    fresh_mount_with(img, mnt, mkfs_args, 0);
}

/// The same with the incompatible feature bits `incompat` set in every
/// superblock before the mount (features mkfs.xfs 6.1 cannot make).
fn fresh_mount_with(img: &Path, mnt: &Path, mkfs_args: &[&str], incompat: u32) {
    std::fs::File::create(img)
        .and_then(|f| f.set_len(300 << 20))
        .expect("image");
    let mut a = vec!["-q", "-f"];
    a.extend_from_slice(mkfs_args);
    a.push(s(img));
    run("mkfs.xfs", &a);
    if incompat != 0 {
        set_incompat(img, incompat, true);
    }
    run("mount", &["-o", "loop", s(img), s(mnt)]);
}

/// Shuts the filesystem mounted at `mnt` down as a crash would leave it
/// (`xfs_io -x -c 'shutdown -f'`: the log forced first).
fn shutdown(mnt: &Path) -> std::process::Output {
    Command::new("xfs_io")
        .args(["-x", "-c", "shutdown -f", s(mnt)])
        .output()
        .expect("xfs_io")
}

/// `path` opened for reading and writing.
fn open_rw(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open")
}

/// Writes `n` 4 KiB blocks every other block of `path` (as many extents),
/// then fsyncs it.
fn write_fragmented(path: &Path, n: u64) {
    let mut args = vec!["-f".to_string()];
    for i in 0..n {
        args.push("-c".into());
        args.push(format!("pwrite -q {} 4096", i * 8192));
    }
    args.extend(["-c".into(), "fsync".into(), s(path).to_string()]);
    run(
        "xfs_io",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
}

/// Fragmented files removed in the background and a shutdown soon after:
/// the crash sometimes falls between an intent (extent free; with an
/// rmapbt also reverse-mapping update) and its done item. Recovery must
/// finish them as the kernel does.
fn unfinished_intents(test: &str, mkfs_args: &[&str]) {
    if !require_root(test) {
        return;
    }
    let tmp = TempDir::new(test);
    let dir = tmp.path();
    let img = dir.join("efi.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mut found = false;
    const TRIES: u32 = 10;
    for attempt in 0..TRIES {
        fresh_mount(&img, &mnt, mkfs_args);
        for f in 0..8 {
            write_fragmented(&mnt.join(format!("f{f}")), 3000);
        }
        run("sync", &[]);
        // The shutdown waits for the first names to go (the rm has
        // started, however busy the machine), then a little more: the
        // kernel frees the unlinked files' extents in the background
        // after that, so the shutdown lands among its intents.
        let script = format!(
            "rm -f {m}/f* & while [ $(ls {m} | wc -l) -gt 6 ]; do sleep 0.005; done; \
             sleep 0.0{d}; xfs_io -x -c 'shutdown -f' {m}; wait",
            m = s(&mnt),
            d = attempt % 10
        );
        let _ = Command::new("bash").args(["-c", &script]).status();
        common::must_umount(&mnt);
        let l = xfskit(&["log", "--json", s(&img)]);
        let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
        let efis = v["unfinished_intents"]
            .as_array()
            .map(|a| a.iter().filter(|i| i["type"] == "EFI").count())
            .unwrap_or(0);
        if efis > 0 {
            // `xfskit log` names what each intent still asks for.
            for i in v["unfinished_intents"].as_array().expect("intents") {
                let key = match i["type"].as_str() {
                    Some("EFI") => "extents",
                    Some("RUI") => "updates",
                    Some("BUI") => "mappings",
                    Some("CUI") => "changes",
                    _ => continue,
                };
                let parts = i[key].as_array().map_or(0, Vec::len);
                assert!(
                    parts > 0 && i[key][0]["blocks"].as_u64() > Some(0),
                    "{test}: xfskit log gives no {key} for {i}"
                );
            }
            found = true;
            break;
        }
    }
    if !found {
        common::skip(
            test,
            &format!("no crash fell between an intent and its done item in {TRIES} tries"),
        );
        return;
    }
    let before = sha(&img);
    let kimg = dir.join("k.img");
    let ximg = dir.join("x.img");
    copy(&img, &kimg);
    copy(&img, &ximg);
    run("mount", &["-o", "loop,nouuid", s(&kimg), s(&mnt)]);
    common::must_umount(&mnt);
    let r = xfskit(&["recover", "--json", s(&ximg)]);
    assert!(
        r.status.success(),
        "{test}: recover: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("json");
    assert!(
        v["efi_extents_freed"].as_u64().unwrap_or(0) > 0,
        "{test}: {v}"
    );
    let (code, text) = repair_check(&ximg);
    assert_eq!(code, 0, "{test}: xfs_repair -n:\n{text}");
    assert_eq!(
        counters(&kimg),
        counters(&ximg),
        "{test}: free space differs from the kernel's"
    );
    // In memory: the dirty image checks clean and is not changed.
    let c = xfskit(&["check", s(&img)]);
    assert!(
        c.status.success(),
        "{test}: check: {}",
        String::from_utf8_lossy(&c.stdout)
    );
    assert_eq!(before, sha(&img), "{test}: the dirty image changed");
}

/// The sha256 of every regular file under `root`, by path.
fn file_hashes(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            let m = std::fs::symlink_metadata(&p).expect("stat");
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                let rel = p.strip_prefix(root).expect("prefix").display().to_string();
                out.insert(rel, sha(&p));
            }
        }
    }
    out
}

/// Files cloned with `cp --reflink`, then their clones overwritten (the
/// kernel's copy-on-write) while the originals are removed, and a
/// shutdown soon after: the crash falls among reference count (CUI) and
/// block-mapping (BUI) intents and their done items. xfskit's recovery
/// must finish them as the kernel's does: the same free space and
/// inode counts, the same file contents, `xfs_repair -n` clean.
#[test]
fn recover_unfinished_refcount_and_bmap_intents() {
    refcount_and_bmap_intents("recover_unfinished_refcount_and_bmap_intents", &[]);
}

/// The same with a reverse mapping btree: shared-extent reverse-mapping
/// intents too, on records that overlap.
#[test]
fn recover_unfinished_shared_rmap_intents() {
    refcount_and_bmap_intents(
        "recover_unfinished_shared_rmap_intents",
        &["-m", "rmapbt=1"],
    );
}

fn refcount_and_bmap_intents(test: &str, mkfs_args: &[&str]) {
    if !require_root(test) {
        return;
    }
    let tmp = TempDir::new(test);
    let dir = tmp.path();
    let img = dir.join("cui.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mut found = 0;
    for attempt in 0..8 {
        fresh_mount(&img, &mnt, mkfs_args);
        for f in 0..4 {
            let p = format!("{}/f{f}", s(&mnt));
            write_fragmented(Path::new(&p), 1500);
            run(
                "cp",
                &["--reflink=always", &p, &format!("{}/c{f}", s(&mnt))],
            );
        }
        run("sync", &[]);
        let script = format!(
            "(for f in 0 1 2 3; do xfs_io -c 'pwrite -q -S 0x55 0 12000000' -c fsync {m}/c$f 2>/dev/null & done; rm -f {m}/f* & wait) & \
             sleep 0.{d}; xfs_io -x -c 'shutdown -f' {m}; wait",
            m = s(&mnt),
            d = 1 + attempt % 5
        );
        let _ = Command::new("bash").args(["-c", &script]).status();
        common::must_umount(&mnt);
        let l = xfskit(&["log", "--json", s(&img)]);
        let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
        let n = v["unfinished_intents"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|i| i["type"] == "CUI" || i["type"] == "BUI" || i["type"] == "RUI")
                    .count()
            })
            .unwrap_or(0);
        if n == 0 {
            continue;
        }
        found += 1;
        // Read in memory first: the recovered state checks clean and the
        // dirty image is not changed.
        let before = sha(&img);
        let c = xfskit(&["check", s(&img)]);
        assert!(
            c.status.success(),
            "{test}: check of the dirty image: {}{}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        );
        assert_eq!(before, sha(&img), "{test}: the dirty image changed");
        let kimg = dir.join("k.img");
        let ximg = dir.join("x.img");
        copy(&img, &kimg);
        copy(&img, &ximg);
        let r = xfskit(&["recover", "--json", s(&ximg)]);
        assert!(
            r.status.success(),
            "{test}: recover: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let (code, text) = repair_check(&ximg);
        assert_eq!(code, 0, "{test}: xfs_repair -n:\n{text}");
        run("mount", &["-o", "loop,nouuid", s(&kimg), s(&mnt)]);
        let kernel = file_hashes(&mnt);
        common::must_umount(&mnt);
        // The superblock's totals; how an AG's free blocks split between
        // its free list and its free space btrees may differ.
        let sb = |p: &Path| counters(p).lines().take(3).collect::<Vec<_>>().join("\n");
        assert_eq!(
            sb(&kimg),
            sb(&ximg),
            "{test}: free space or inode counts differ from the kernel's"
        );
        run("mount", &["-o", "loop,ro,nouuid", s(&ximg), s(&mnt)]);
        let ours = file_hashes(&mnt);
        common::must_umount(&mnt);
        assert_eq!(
            kernel, ours,
            "{test}: contents differ from the kernel's recovery"
        );
        if found == 2 {
            break;
        }
    }
    assert!(
        found > 0,
        "{test}: no crash fell between a reference count or block-mapping intent and its done item in 8 tries"
    );
}

/// Sets (`on`) or clears incompatible feature bits in every AG's
/// superblock of `img` (as a mkfs that knew the feature would have
/// written them) and stamps each CRC again, as the kernel checks it
/// (CRC-32C over the sector with the field zeroed).
fn set_incompat(img: &Path, bits: u32, on: bool) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .expect("open image");
    let mut sb = vec![0u8; 512];
    f.read_exact_at(&mut sb, 0).expect("read superblock");
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let sect = usize::from(u16::from_be_bytes([sb[102], sb[103]]));
    let ag_bytes = u64::from(be32(&sb, 4)) * u64::from(be32(&sb, 84));
    for ag in 0..u64::from(be32(&sb, 88)) {
        let mut sb = vec![0u8; sect];
        f.read_exact_at(&mut sb, ag * ag_bytes)
            .expect("read superblock");
        let mut inc = be32(&sb, 216);
        if on {
            inc |= bits;
        } else {
            inc &= !bits;
        }
        sb[216..220].copy_from_slice(&inc.to_be_bytes());
        xfs_format::crc::stamp(&mut sb, xfs_format::sb::XFS_SB_CRC_OFF);
        f.write_all_at(&sb, ag * ag_bytes)
            .expect("write superblock");
    }
    f.sync_all().expect("fsync image");
}

/// `struct xfs_exchange_range` of the kernel's uapi `xfs_fs.h`.
#[repr(C)]
struct ExchangeRange {
    file1_fd: i32,
    pad: u32,
    file1_offset: u64,
    file2_offset: u64,
    length: u64,
    flags: u64,
}

/// `_IOW('X', 129, struct xfs_exchange_range)`.
const XFS_IOC_EXCHANGE_RANGE: libc::c_ulong =
    (1 << 30) | ((std::mem::size_of::<ExchangeRange>() as libc::c_ulong) << 16) | (0x58 << 8) | 129;
/// Exchange to the ends of both files, then exchange the sizes.
const XFS_EXCHANGE_RANGE_TO_EOF: u64 = 1 << 0;
/// Make the exchange durable before returning.
const XFS_EXCHANGE_RANGE_DSYNC: u64 = 1 << 1;
/// Only where the first file has written blocks.
const XFS_EXCHANGE_RANGE_FILE1_WRITTEN: u64 = 1 << 3;

/// Exchanges `len` bytes of `f1` at `off1` with `f2` at `off2`.
fn exchange(
    f1: &std::fs::File,
    f2: &std::fs::File,
    off1: u64,
    off2: u64,
    len: u64,
    flags: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let arg = ExchangeRange {
        file1_fd: f1.as_raw_fd(),
        pad: 0,
        file1_offset: off1,
        file2_offset: off2,
        length: len,
        flags,
    };
    // SAFETY: the kernel reads a struct of the size the request encodes,
    // which `arg` is, for the duration of the call.
    let r = unsafe { libc::ioctl(f2.as_raw_fd(), XFS_IOC_EXCHANGE_RANGE, &arg) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes `n` 4 KiB blocks of byte `pat` every other block of `path`
/// from block `first`, with unwritten (preallocated) blocks in some of
/// the gaps when `falloc`, then truncates the file to its own size (which
/// frees the speculative preallocation past its end) and fsyncs it.
///
/// Blocks past the end of a file make the kernel's recovery racy: it
/// evicts the inodes it used before it clears its recovery state, and
/// inode inactivation, run by a background worker, trims the blocks past
/// the end of a file without the preallocated flag only if it runs
/// before that. An exchange to the ends of two files moves one file's
/// preallocation past the other's new end; so no file starts with any.
fn write_pattern(path: &Path, n: u64, first: u64, pat: u8, falloc: bool) {
    let mut args = vec!["-f".to_string()];
    let mut end = 0;
    for i in 0..n {
        let b = first + 2 * i;
        args.push("-c".into());
        args.push(format!("pwrite -q -S {pat:#x} {} 4096", b * 4096));
        end = end.max(b + 1);
        if falloc && i % 5 == 2 {
            args.push("-c".into());
            args.push(format!("falloc {} 4096", (b + 1) * 4096));
            end = end.max(b + 2);
        }
    }
    args.extend([
        "-c".into(),
        format!("truncate {}", end * 4096),
        "-c".into(),
        "fsync".into(),
        s(path).to_string(),
    ]);
    run(
        "xfs_io",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
}

/// Bytes of `path` mapped past its end: the end of its last extent
/// (FIEMAP, through `xfs_io`) less its size, or 0.
fn mapped_past_eof(path: &Path) -> u64 {
    let out = Command::new("xfs_io")
        .args(["-r", "-c", "fiemap", s(path)])
        .output()
        .expect("xfs_io fiemap");
    let text = String::from_utf8_lossy(&out.stdout);
    // Lines like "12: [96..103]: 5000..5007" (512-byte units) or holes.
    let last_end = text
        .lines()
        .filter(|l| !l.ends_with("hole"))
        .filter_map(|l| {
            let r = l.split('[').nth(1)?.split(']').next()?;
            r.split("..").nth(1)?.trim().parse::<u64>().ok()
        })
        .max()
        .map_or(0, |e| (e + 1) * 512);
    let size = std::fs::metadata(path).expect("stat").len();
    last_end.saturating_sub(size.div_ceil(4096) * 4096)
}

/// Contents (sha256), size and extent map (FIEMAP, as `xfs_io` prints it)
/// of every regular file under `root`, by path.
fn file_facts(root: &Path) -> BTreeMap<String, (String, u64, String)> {
    file_hashes(root)
        .into_iter()
        .map(|(p, h)| {
            let path = root.join(&p);
            let size = std::fs::metadata(&path).expect("stat").len();
            let out = Command::new("xfs_io")
                .args(["-r", "-c", "fiemap -v", s(&path)])
                .output()
                .expect("xfs_io fiemap");
            let map = String::from_utf8_lossy(&out.stdout)
                .lines()
                .skip(1)
                .collect::<Vec<_>>()
                .join("\n");
            (p, (h, size, map))
        })
        .collect()
}

/// Pairs of fragmented files exchanged with `XFS_IOC_EXCHANGE_RANGE` in
/// a loop (whole files to their ends, ranges, only where the first file
/// is written, durable or not) on a filesystem with the exchange-range
/// feature, and a shutdown while they run, retried until the log holds
/// an unfinished mapping-exchange intent (XMI). xfskit's recovery must
/// then give what the kernel's gives: file contents, sizes and extent
/// maps, superblock counters; `xfskit check` clean, and `xfs_repair -n`
/// clean once the feature bit is cleared again (xfsprogs 6.1 does not
/// know it; nothing else on disk depends on it).
#[test]
fn recover_unfinished_exchange_intents() {
    exchange_intents("recover_unfinished_exchange_intents", &[], false);
}

/// The same with reflink: some of the exchanged extents are shared with
/// clones, so the exchange sets the reflink flag on the other file.
#[test]
fn recover_unfinished_exchange_intents_reflink() {
    exchange_intents(
        "recover_unfinished_exchange_intents_reflink",
        &["-m", "reflink=1"],
        true,
    );
}

/// The same with a reverse-mapping btree (and reflink): every exchanged
/// mapping moves its reverse mapping to the other owner.
#[test]
fn recover_unfinished_exchange_intents_rmapbt() {
    exchange_intents(
        "recover_unfinished_exchange_intents_rmapbt",
        &["-m", "rmapbt=1,reflink=1"],
        true,
    );
}

/// An exchange to the ends of a large fragmented file and a one-block
/// file, shut down part way: each step has raised the small file's size
/// to the end of what it now maps, so at recovery that size is no longer
/// the one the exchange will give the other file (the intent logs that
/// one). xfskit's recovery must give the sizes, contents and maps the
/// kernel's gives.
#[test]
fn recover_exchange_to_eof_with_raised_sizes() {
    let test = "recover_exchange_to_eof_with_raised_sizes";
    if !require_root(test) {
        return;
    }
    let (_tmp, dir, img, mnt) = exchange_scratch(test);
    let dir = dir.as_path();
    let mut found = None;
    for attempt in 0..16u64 {
        fresh_mount_with(&img, &mnt, &[], INCOMPAT_EXCHRANGE);
        let guard = Mounted(mnt.clone());
        let (a, b) = (mnt.join("a"), mnt.join("b"));
        write_pattern(&a, 6000, 0, 0x41, false);
        write_pattern(&b, 1, 0, 0x62, false);
        run("sync", &[]);
        let (fa, fb) = (open_rw(&a), open_rw(&b));
        let worker = std::thread::spawn(move || {
            exchange(&fa, &fb, 0, 0, 0, XFS_EXCHANGE_RANGE_TO_EOF).map_err(|e| e.raw_os_error())
        });
        // From 2 ms to 64 ms, until one falls part way.
        std::thread::sleep(std::time::Duration::from_millis(2 << (attempt % 6)));
        let shut = shutdown(&mnt);
        let r = worker.join().expect("worker");
        drop(guard);
        assert!(shut.status.success(), "{test}: shutdown");
        assert!(
            matches!(r, Ok(()) | Err(Some(libc::EIO))),
            "{test}: XFS_IOC_EXCHANGE_RANGE: {r:?}"
        );
        let l = xfskit(&["log", "--json", s(&img)]);
        let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
        let raised = v["unfinished_intents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| {
                i["type"] == "XMI"
                    && i["exchange"]["flags"].as_u64().unwrap_or(0) & 2 != 0
                    && i["exchange"]["startoff1"].as_u64() >= Some(4)
            })
            .cloned();
        println!("{test}: try {}: {raised:?}", attempt + 1);
        if raised.is_some() {
            found = raised;
            break;
        }
    }
    let Some(x) = found else {
        panic!("{test}: no shutdown fell part way through the exchange in 16 tries");
    };
    // The sizes the exchange set out to give: a gets b's one block.
    assert_eq!(x["exchange"]["isize1"], 4096, "{test}: {x}");
    recoveries_agree(test, dir, &img, &mnt);
}

/// A scratch directory for `test`, the path of its image `xmi.img` and
/// its mount point `mnt` (made). XFSKIT_KEEP_IMAGES=1 keeps it (the
/// images dirty, kernel-recovered, xfskit-recovered) for a look
/// afterwards: then no guard is returned.
fn exchange_scratch(test: &str) -> (Option<TempDir>, PathBuf, PathBuf, PathBuf) {
    let tmp = TempDir::new(test);
    let dir = tmp.path().to_path_buf();
    let tmp = if std::env::var_os("XFSKIT_KEEP_IMAGES").is_some() {
        std::mem::forget(tmp);
        None
    } else {
        Some(tmp)
    };
    let img = dir.join("xmi.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    (tmp, dir, img, mnt)
}

/// Incompat feature bit of the exchange-range feature.
const INCOMPAT_EXCHRANGE: u32 = 1 << 6;

fn exchange_intents(test: &str, mkfs_args: &[&str], clones: bool) {
    if !require_root(test) {
        return;
    }
    let (_tmp, dir, img, mnt) = exchange_scratch(test);
    let dir = dir.as_path();
    const PAIRS: usize = 3;
    let mut tries = 0;
    let mut found = None;
    for attempt in 0..12u64 {
        tries += 1;
        fresh_mount_with(&img, &mnt, mkfs_args, INCOMPAT_EXCHRANGE);
        let guard = Mounted(mnt.clone());
        for p in 0..PAIRS {
            let a = mnt.join(format!("a{p}"));
            let b = mnt.join(format!("b{p}"));
            write_pattern(&a, 1500 + 200 * p as u64, 0, 0x31 + p as u8, false);
            write_pattern(&b, 1300, 1, 0x61 + p as u8, true);
            if clones {
                run(
                    "cp",
                    &["--reflink=always", s(&a), s(&mnt.join(format!("c{p}")))],
                );
            }
        }
        run("sync", &[]);
        for f in std::fs::read_dir(&mnt).expect("readdir") {
            let f = f.expect("entry").path();
            assert_eq!(
                mapped_past_eof(&f),
                0,
                "{test}: {} has blocks past its end before the exchanges",
                f.display()
            );
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..PAIRS)
            .map(|p| {
                let fa = open_rw(&mnt.join(format!("a{p}")));
                let fb = open_rw(&mnt.join(format!("b{p}")));
                let stop = stop.clone();
                std::thread::spawn(move || -> (usize, Option<String>) {
                    let mut done = 0;
                    for k in 0u64.. {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                        let size = |f: &std::fs::File| f.metadata().map(|m| m.len()).unwrap_or(0);
                        let min = size(&fa).min(size(&fb)) / 4096;
                        let (off1, off2, len, flags) = match (k + p as u64) % 4 {
                            0 => (0, 0, 0, XFS_EXCHANGE_RANGE_TO_EOF),
                            1 => {
                                let o = (k * 37) % 64;
                                let len = min.saturating_sub(70).max(1);
                                (o * 4096, (o + 3) * 4096, len * 4096, 0)
                            }
                            2 => (
                                4096,
                                4096,
                                min.saturating_sub(2).max(1) * 4096,
                                XFS_EXCHANGE_RANGE_FILE1_WRITTEN,
                            ),
                            _ => (
                                0,
                                0,
                                0,
                                XFS_EXCHANGE_RANGE_TO_EOF | XFS_EXCHANGE_RANGE_DSYNC,
                            ),
                        };
                        let (x, y) = if k % 2 == 0 { (&fa, &fb) } else { (&fb, &fa) };
                        match exchange(x, y, off1, off2, len, flags) {
                            Ok(()) => done += 1,
                            Err(e) => {
                                // The shutdown: EIO from then on.
                                let shut = e.raw_os_error() == Some(libc::EIO);
                                return (done, (!shut).then(|| e.to_string()));
                            }
                        }
                    }
                    (done, None)
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(150 + 130 * (attempt % 6)));
        let shut = shutdown(&mnt);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let results: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        drop(guard);
        assert!(
            shut.status.success(),
            "{test}: shutdown: {}",
            String::from_utf8_lossy(&shut.stderr)
        );
        for (done, err) in &results {
            assert!(
                err.is_none(),
                "{test}: XFS_IOC_EXCHANGE_RANGE failed after {done} exchanges: {err:?}"
            );
        }
        let l = xfskit(&["log", "--json", s(&img)]);
        assert!(
            l.status.success(),
            "{test}: xfskit log: {}",
            String::from_utf8_lossy(&l.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
        let xmis: Vec<serde_json::Value> = v["unfinished_intents"]
            .as_array()
            .map(|a| a.iter().filter(|i| i["type"] == "XMI").cloned().collect())
            .unwrap_or_default();
        println!(
            "{test}: try {tries}: {} exchanges before the shutdown, {} unfinished XMI",
            results.iter().map(|r| r.0).sum::<usize>(),
            xmis.len()
        );
        if !xmis.is_empty() {
            found = Some((xmis, v["unfinished_intents"].clone()));
            break;
        }
    }
    let Some((xmis, all)) = found else {
        panic!("{test}: no shutdown left an unfinished mapping exchange in {tries} tries");
    };
    for x in &xmis {
        assert!(
            x["exchange"]["blockcount"].as_u64().is_some(),
            "{test}: xfskit log names the exchange: {x}"
        );
    }
    for b in all.as_array().expect("intents") {
        if b["type"] == "BUI" {
            assert!(
                b["mappings"][0]["inode"].as_u64().is_some()
                    && ["map", "unmap"].contains(&b["mappings"][0]["op"].as_str().unwrap_or("")),
                "{test}: xfskit log names the block mapping: {b}"
            );
        }
    }
    println!(
        "{test}: unfinished intents after {tries} tries, in log order:\n{}",
        serde_json::to_string_pretty(&all).expect("json")
    );

    recoveries_agree(test, dir, &img, &mnt);
}

/// The dirty image `img` (a filesystem with the exchange-range feature,
/// its log holding unfinished mapping exchanges) recovered by xfskit and
/// by the kernel, in copies beside it, with `mnt` free to mount on: both
/// must give the same file contents, sizes and extent maps and the same
/// superblock counters; `xfskit check` is clean before and after, the
/// dirty image is not changed by reading it, and `xfs_repair -n` is clean
/// once the feature bit is cleared (xfsprogs 6.1 does not know it).
///
/// The kernel's recovery is run again on a fresh copy (up to three runs)
/// when it differs, because it is not always the same. On a loaded
/// machine it has, now and then, freed the blocks a file still mapped past
/// its new size (the blocks the exchange was to give the other file, which
/// was left with a hole there), as trimming past the end of a file does;
/// the same dirty image recovered again gave the whole exchange, as xfskit
/// does every time. xfskit's recovery must equal one of the kernel's runs;
/// the runs that differ are printed.
fn recoveries_agree(test: &str, dir: &Path, img: &Path, mnt: &Path) {
    let (img, mnt) = (img.to_path_buf(), mnt.to_path_buf());
    // In memory: the dirty image, with the exchange finished in the
    // overlay, checks clean, and is not changed.
    let before = sha(&img);
    let c = xfskit(&["check", s(&img)]);
    assert!(
        c.status.success(),
        "{test}: check of the dirty image: {}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    assert_eq!(before, sha(&img), "{test}: the dirty image changed");

    let kimg = dir.join("k.img");
    let ximg = dir.join("x.img");
    copy(&img, &ximg);
    let r = xfskit(&["recover", "--json", s(&ximg)]);
    assert!(
        r.status.success(),
        "{test}: recover: {}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    println!("{test}: {}", String::from_utf8_lossy(&r.stdout));
    let c = xfskit(&["check", s(&ximg)]);
    assert!(
        c.status.success(),
        "{test}: check after recover: {}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    let facts = |img: &Path| {
        run("mount", &["-o", "loop,ro,nouuid", s(img), s(&mnt)]);
        let _g = Mounted(mnt.clone());
        file_facts(&mnt)
    };
    // Without the feature bit (the log is clean: no log item needs it
    // now) the filesystems are ones xfsprogs 6.1 knows.
    let sb = |p: &Path| {
        set_incompat(p, INCOMPAT_EXCHRANGE, false);
        counters(p).lines().take(3).collect::<Vec<_>>().join("\n")
    };
    let ours = facts(&ximg);
    let ours_sb = sb(&ximg);
    let mut differed = Vec::new();
    for run_no in 1..=3 {
        copy(&img, &kimg);
        kernel_recovery(test, &kimg, &mnt);
        let kernel = facts(&kimg);
        match compare_recoveries(&kernel, &ours, &sb(&kimg), &ours_sb) {
            Ok(()) => break,
            Err(e) => {
                println!("{test}: the kernel's recovery, run {run_no}, differs from xfskit's: {e}");
                differed.push(format!("run {run_no}: {e}"));
            }
        }
    }
    assert!(
        differed.len() < 3,
        "{test}: xfskit's recovery differs from each of three of the kernel's:\n{}",
        differed.join("\n")
    );
    let (code, text) = repair_check(&ximg);
    assert_eq!(code, 0, "{test}: xfs_repair -n:\n{text}");
}

/// The kernel's recovery of `img`, on a read-only mount of a writable
/// loop device: a read-write mount would also trim the blocks past the end
/// of the files it evicts, which is not recovery.
fn kernel_recovery(test: &str, img: &Path, mnt: &Path) {
    let out = Command::new("losetup")
        .args(["-f", "--show", s(img)])
        .output()
        .expect("losetup");
    assert!(out.status.success(), "{test}: losetup");
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let m = Command::new("mount")
        .args(["-o", "ro,nouuid", &dev, s(mnt)])
        .output()
        .expect("mount");
    let unmounted = !m.status.success() || common::umount_retrying(mnt);
    let _ = Command::new("losetup").args(["-d", &dev]).output();
    assert!(unmounted, "{test}: umount {} failed", s(mnt));
    assert!(
        m.status.success(),
        "{test}: the kernel's recovery: {}",
        String::from_utf8_lossy(&m.stderr)
    );
}

/// Where two recoveries differ (file names, then each file's size,
/// contents and extent map, then the superblock counters `ksb` and `osb`),
/// the first difference; the kernel's are `kernel`, xfskit's `ours`.
fn compare_recoveries(
    kernel: &BTreeMap<String, (String, u64, String)>,
    ours: &BTreeMap<String, (String, u64, String)>,
    ksb: &str,
    osb: &str,
) -> Result<(), String> {
    if kernel.keys().ne(ours.keys()) {
        return Err(format!(
            "files {:?} and {:?}",
            kernel.keys().collect::<Vec<_>>(),
            ours.keys().collect::<Vec<_>>()
        ));
    }
    for (p, k) in kernel {
        let o = &ours[p];
        if k.1 != o.1 {
            return Err(format!("{p}: size {} and xfskit's {}", k.1, o.1));
        }
        let diff: Vec<String> =
            k.2.lines()
                .zip(o.2.lines())
                .filter(|(a, b)| a != b)
                .take(4)
                .map(|(a, b)| format!("kernel {a}\n xfskit {b}"))
                .collect();
        let tail = |m: &str| {
            let l: Vec<&str> = m.lines().collect();
            l[l.len().saturating_sub(3)..].join("\n")
        };
        if !diff.is_empty() || k.2.lines().count() != o.2.lines().count() {
            return Err(format!(
                "{p}: extent map differs ({} and {} lines; contents {}):\n{}\n\
                 the kernel's ends with\n{}\nxfskit's ends with\n{}",
                k.2.lines().count(),
                o.2.lines().count(),
                if k.0 == o.0 { "equal" } else { "differ" },
                diff.join("\n"),
                tail(&k.2),
                tail(&o.2)
            ));
        }
        if k.0 != o.0 {
            return Err(format!("{p}: contents differ (sha256 {} and {})", k.0, o.0));
        }
    }
    if ksb != osb {
        return Err(format!(
            "free space or inode counts differ:\n{ksb}\nand xfskit's\n{osb}"
        ));
    }
    Ok(())
}

/// Incompat feature bit of parent pointers.
const INCOMPAT_PARENT: u32 = 1 << 7;

/// A filesystem with parent pointers (the feature bit set in every
/// superblock of a fresh mkfs.xfs 6.1 image; the kernel then keeps a
/// parent pointer for every name) left dirty by creates and a shutdown.
/// This kernel (no XFS debug knobs) updates parent pointers without
/// logging attribute intents, so the log holds buffers and inodes only:
/// `xfskit recover` must give the kernel's tree and counters, and
/// `xfskit check` must find the recovered image clean (unfinished parent
/// pointer intents, if one is ever logged, are finished too: see
/// `crates/xfskit/tests/recover_pptr.rs`). Offline edits after the
/// recovery keep the parent pointers (xfs_repair -n 6.15 clean).
#[test]
fn parent_pointer_filesystems_recover_and_take_writes() {
    let test = "parent_pointer_filesystems_recover_and_take_writes";
    if !require_root(test) {
        return;
    }
    let tmp = TempDir::new(test);
    let dir = tmp.path();
    let img = dir.join("pptr.img");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    fresh_mount_with(&img, &mnt, &[], INCOMPAT_PARENT);
    {
        let _g = Mounted(mnt.clone());
        let script = format!(
            "set -e; cd {m}; mkdir -p d/e; for i in $(seq 1 300); do echo $i > d/f$i; done; \
             sync; for i in $(seq 1 200); do mv d/f$i d/e/g$i; ln d/e/g$i d/h$i; done; \
             rm d/f250 d/f251; mkdir d/new; touch d/new/x; xfs_io -x -c 'shutdown -f' {m}",
            m = s(&mnt)
        );
        run("bash", &["-c", &script]);
    }
    let l = xfskit(&["log", "--json", s(&img)]);
    let v: serde_json::Value = serde_json::from_slice(&l.stdout).expect("json");
    assert_eq!(v["state"], "dirty", "{test}: {v}");
    let attri = v["unfinished_intents"]
        .as_array()
        .map(|a| a.iter().filter(|i| i["type"] == "ATTRI").count())
        .unwrap_or(0);
    println!("{test}: log items {}, unfinished ATTRI {attri}", v["items"]);
    let ximg = dir.join("x.img");
    let kimg = dir.join("k.img");
    copy(&img, &ximg);
    copy(&img, &kimg);
    let r = xfskit(&["recover", s(&ximg)]);
    assert!(
        r.status.success(),
        "{test}: recover: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    run("mount", &["-o", "loop,nouuid", s(&kimg), s(&mnt)]);
    let want = {
        let _g = Mounted(mnt.clone());
        walk_host(&mnt)
    };
    run("mount", &["-o", "loop,ro,nouuid", s(&ximg), s(&mnt)]);
    let got = {
        let _g = Mounted(mnt.clone());
        walk_host(&mnt)
    };
    let d = diff_walks(&want, &got);
    assert!(d.is_empty(), "{test}: trees differ:\n{}", d.join("\n"));
    let c = xfskit(&["check", s(&ximg)]);
    assert!(
        c.status.success(),
        "{test}: check: {}",
        String::from_utf8_lossy(&c.stdout)
    );
    // Writing after recovery keeps the parent pointers: xfs_repair -n
    // (6.15, which checks them) and check find the result clean.
    let wimg = dir.join("w.img");
    copy(&ximg, &wimg);
    for args in [
        vec!["mkdir", s(&wimg), "/after"],
        vec!["mv", s(&wimg), "/d/h1", "/after/moved"],
        vec!["ln", s(&wimg), "/d/e/g2", "/after/g2-link"],
        vec!["rm", s(&wimg), "/d/h3"],
    ] {
        let o = xfskit(&args);
        assert!(
            o.status.success(),
            "{test}: xfskit {args:?} on a parent-pointer filesystem: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    if common::fixtures::xfsprogs_615().is_some() {
        let (code, out) = repair_check(&wimg);
        assert_eq!(
            code, 0,
            "{test}: xfs_repair -n 6.15 after the edits:\n{out}"
        );
    }
    let c = xfskit(&["check", s(&wimg)]);
    assert!(
        c.status.success(),
        "{test}: check after the edits: {}",
        String::from_utf8_lossy(&c.stdout)
    );
    set_incompat(&kimg, INCOMPAT_PARENT, false);
    set_incompat(&ximg, INCOMPAT_PARENT, false);
    let sb = |p: &Path| counters(p).lines().take(3).collect::<Vec<_>>().join("\n");
    assert_eq!(
        sb(&kimg),
        sb(&ximg),
        "{test}: counters differ from the kernel's"
    );
}

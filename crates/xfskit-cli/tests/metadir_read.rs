//! Metadata directory trees (`mkfs.xfs -m metadir=1`, xfsprogs 6.15): on
//! images the kernel filled through a loop mount, every read command gives
//! the kernel's view. The tree the kernel shows equals the library walk's,
//! `extract`'s and the read-only FUSE mount's; `bulkstat` lists exactly the
//! inodes the kernel's BULKSTAT lists (`xfs_io -c bulkstat` 6.15 on the
//! mount: the metadata directory tree's inodes are hidden); `info` prints
//! what `xfs_db -c info` 6.15 prints; `check` finds nothing, as
//! `xfs_repair -n` 6.15 finds nothing. Both with the plain defaults and with
//! the xfsprogs 6.18 defaults (parent pointers, also on the metadata
//! directories).

mod common;

use common::fixtures::xfskit_output as xfskit;
use common::{diff_walks, is_root, skip, walk_host, Entry, TempDir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn tool(x615: &Path, name: &str) -> Command {
    let mut c = Command::new(x615.join("libexec").join(name));
    c.env("LD_LIBRARY_PATH", x615.join("lib"));
    c
}

fn run_ok(c: &mut Command, what: &str) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what}: {text}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A metadir image made by mkfs.xfs 6.15: the 6.15 defaults, or the 6.18
/// defaults (a copy of lts_6.18.conf with metadir=1; mkfs.xfs refuses an
/// option given both in a file and on the command line).
fn make_image(x615: &Path, dir: &Path, defaults_618: bool) -> PathBuf {
    let img = dir.join(if defaults_618 { "md618.img" } else { "md.img" });
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(512 << 20))
        .expect("create image");
    let mut c = tool(x615, "mkfs.xfs");
    c.args(["-q", "-f"]);
    if defaults_618 {
        let conf = std::fs::read_to_string(x615.join("conf/lts_6.18.conf")).expect("conf");
        assert!(conf.contains("metadir=0"), "lts_6.18.conf: {conf}");
        let mine = dir.join("lts_6.18_metadir.conf");
        std::fs::write(&mine, conf.replace("metadir=0", "metadir=1")).expect("write conf");
        c.arg("-c").arg(format!("options={}", mine.display()));
    } else {
        c.args(["-m", "metadir=1"]);
    }
    run_ok(c.arg(&img), "mkfs.xfs 6.15 -m metadir=1");
    img
}

/// Fills the mounted filesystem through the kernel: every file type,
/// directories in several formats, data, hard links, xattrs.
fn fill(m: &Path) {
    use std::fs;
    let p = |r: &str| m.join(r);
    for d in ["a/b/c", "big", "x"] {
        fs::create_dir_all(p(d)).expect("mkdir");
    }
    fs::write(p("a/one"), b"one").expect("write");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(p("a/b/data"), &data).expect("write");
    for i in 0..300 {
        fs::write(p(&format!("big/f{i:04}")), format!("{i}")).expect("write");
    }
    for i in 0..20 {
        fs::hard_link(p("a/one"), p(&format!("x/link{i}"))).expect("link");
    }
    std::os::unix::fs::symlink("../a/one", p("x/sym")).expect("symlink");
    std::os::unix::fs::symlink("t".repeat(600), p("x/longsym")).expect("symlink");
    run_ok(Command::new("mkfifo").arg(p("x/fifo")), "mkfifo");
    run_ok(
        Command::new("mknod").arg(p("x/chr")).args(["c", "1", "3"]),
        "mknod",
    );
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.note", "-v", "metadir"])
            .arg(p("a/one")),
        "setfattr",
    );
    fs::remove_file(p("big/f0100")).expect("unlink");
}

/// A read-write loop mount, unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn new(img: &Path, at: &Path) -> Mounted {
        // Loop devices are shared with the tests running beside this one:
        // a lost race for one is tried again.
        for _ in 0..3 {
            let ok = Command::new("mount")
                .args(["-t", "xfs", "-o", "loop"])
                .arg(img)
                .arg(at)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Mounted(at.to_path_buf());
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        run_ok(
            Command::new("mount")
                .args(["-t", "xfs", "-o", "loop"])
                .arg(img)
                .arg(at),
            "kernel mount of the metadir image",
        );
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy after a failed step: detach it rather than leave it.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn without_root(v: Vec<Entry>) -> Vec<Entry> {
    v.into_iter().filter(|e| !e.path.is_empty()).collect()
}

/// Inode numbers the kernel's BULKSTAT returns (`xfs_io -c bulkstat`).
fn kernel_bulkstat(x615: &Path, mnt: &Path) -> BTreeSet<u64> {
    let out = run_ok(
        tool(x615, "xfs_io").args(["-c", "bulkstat"]).arg(mnt),
        "xfs_io bulkstat",
    );
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("bs_ino = "))
        .map(|v| v.trim().parse().expect("bs_ino"))
        .collect()
}

fn xfskit_bulkstat(img: &Path) -> BTreeSet<u64> {
    let o = xfskit(&["bulkstat", "--json", s(img)]);
    assert!(
        o.status.success(),
        "bulkstat: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            v["ino"].as_u64().expect("ino")
        })
        .collect()
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

/// The tree `xfskit mount --read-only` shows.
fn fuse_walk(img: &Path, dir: &Path) -> Vec<Entry> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["mount", "--read-only"])
        .arg(img)
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("xfskit mount");
    let t0 = std::time::Instant::now();
    while !is_mounted(dir) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("xfskit mount exited early: {st}");
        }
        if t0.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the FUSE mount did not appear within 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let walked = walk_host(dir);
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let st = child.wait().expect("wait");
    assert!(st.success(), "xfskit mount exited with {st}");
    walked
}

fn read_commands_match_kernel(test: &str, defaults_618: bool) {
    if !is_root() {
        skip(test, "needs root for loop mounts");
        return;
    }
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(test, "xfsprogs 6.15 is missing (mkfs.xfs -m metadir=1)");
        return;
    };
    let tmp = TempDir::new("xfskit-metadir");
    let img = make_image(&x615, tmp.path(), defaults_618);
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let (kernel, kernel_inos) = {
        let m = Mounted::new(&img, &mnt);
        fill(&m.0);
        run_ok(&mut Command::new("sync"), "sync");
        (walk_host(&m.0), kernel_bulkstat(&x615, &m.0))
    };
    assert!(kernel.len() > 300, "kernel walk: {} entries", kernel.len());

    // check and xfs_repair -n agree: nothing to report.
    let r = run_ok(
        tool(&x615, "xfs_repair").arg("-n").arg(&img),
        "xfs_repair -n 6.15",
    );
    let o = xfskit(&["check", s(&img)]);
    assert!(
        o.status.success(),
        "check (xfs_repair -n was clean: {r}):\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // info against xfs_db.
    let want = run_ok(
        tool(&x615, "xfs_db").args(["-r", "-c", "info"]).arg(&img),
        "xfs_db info",
    );
    let o = xfskit(&["info", s(&img)]);
    assert!(o.status.success(), "info");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        want,
        "info vs xfs_db -c info"
    );
    assert!(want.contains("metadir=1"), "{want}");

    // bulkstat hides the metadata inodes as the kernel does.
    let got = xfskit_bulkstat(&img);
    assert_eq!(got, kernel_inos, "bulkstat vs the kernel's BULKSTAT");
    let o = xfskit(&["info", "--json", s(&img)]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("info json");
    let metadir_ino = j["inodes"]["metadir"]
        .as_u64()
        .expect("metadir inode in info --json");
    assert!(
        !got.contains(&metadir_ino),
        "bulkstat lists the metadir root {metadir_ino}"
    );

    // ls of the root.
    let o = xfskit(&["ls", s(&img), "/"]);
    assert!(o.status.success(), "ls");
    let names: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let want: BTreeSet<String> = kernel
        .iter()
        .filter(|e| !e.path.is_empty() && !e.path.contains('/'))
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(names, want, "ls /");

    // extract and the read-only mount: the kernel's tree.
    let dest = tmp.path().join("out");
    let o = xfskit(&["extract", "-q", s(&img), s(&dest)]);
    assert!(
        o.status.success(),
        "extract: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d = diff_walks(
        &without_root(walk_host(&dest)),
        &without_root(kernel.clone()),
    );
    assert!(d.is_empty(), "extract vs kernel:\n{}", d.join("\n"));
    let fused = fuse_walk(&img, &tmp.path().join("fuse"));
    let d = diff_walks(&fused, &kernel);
    assert!(d.is_empty(), "FUSE mount vs kernel:\n{}", d.join("\n"));
    println!(
        "{test}: {} entries, {} inodes compared",
        kernel.len(),
        got.len()
    );
}

#[test]
fn metadir_read_commands_match_kernel() {
    read_commands_match_kernel("metadir_read_commands_match_kernel", false);
}

#[test]
fn metadir_618_defaults_read_commands_match_kernel() {
    read_commands_match_kernel("metadir_618_defaults_read_commands_match_kernel", true);
}

/// Written through xfskit's read-write mount: xfs_repair -n 6.15 and check
/// are clean after, and the kernel reads the tree the mount showed.
#[test]
fn metadir_read_write_mount() {
    const TEST: &str = "metadir_read_write_mount";
    if !is_root() {
        skip(TEST, "needs root for FUSE and loop mounts");
        return;
    }
    let Some(x615) = common::fixtures::xfsprogs_615() else {
        skip(TEST, "xfsprogs 6.15 is missing (mkfs.xfs -m metadir=1)");
        return;
    };
    let tmp = TempDir::new("xfskit-metadir-rw");
    let img = make_image(&x615, tmp.path(), true);
    let dir = tmp.path().join("fuse");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .arg("mount")
        .arg(&img)
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("xfskit mount");
    let t0 = std::time::Instant::now();
    while !is_mounted(&dir) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("xfskit mount exited early: {st}");
        }
        assert!(t0.elapsed().as_secs() < 20, "the FUSE mount did not appear");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fill(&dir);
    let through_fuse = walk_host(&dir);
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let st = child.wait().expect("wait");
    assert!(st.success(), "xfskit mount exited with {st}");
    run_ok(
        tool(&x615, "xfs_repair").arg("-n").arg(&img),
        "xfs_repair -n 6.15 after the read-write mount",
    );
    let o = xfskit(&["check", s(&img)]);
    assert!(
        o.status.success(),
        "check: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let kernel = {
        let m = Mounted::new(&img, &mnt);
        walk_host(&m.0)
    };
    let d = diff_walks(&without_root(kernel), &without_root(through_fuse));
    assert!(
        d.is_empty(),
        "kernel vs what the mount wrote:\n{}",
        d.join("\n")
    );
}

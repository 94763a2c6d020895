//! Quota images: what xfskit's writes and recovery leave of the counts.
//!
//! The images get their quota files and counts from a kernel with quota
//! support (Debian's, booted under QEMU: see common/vm.rs; this machine's
//! own kernel has none), mounted with `-o uquota,gquota,pquota` and
//! written by several owners and a project. xfskit's writes (offline
//! edits and the read-write mount) keep the counts exact: they stay marked
//! checked, `xfs_repair -n` (7.2), which compares counts where they are
//! marked checked, stays clean, and the kernel's next quota mount reports
//! them as they are. The format is the one that kernel (6.1) mounts:
//! Debian's mkfs.xfs 6.1 defaults.

mod common;

use common::fixtures::xfskit_ok as xfskit;

use common::fixtures::{xfskit_output, xfsprogs_72_or_skip};
use common::vm::Vm;
use common::{skip, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// xfs_repair -n 7.2: exit code and output.
fn repair_n(bin: &Path, img: &Path) -> (i32, String) {
    let o = Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// A copy of `img` in `dir` damaged by xfs_db 7.2's `cmds`, which
/// xfs_repair -n 7.2 must flag (case `name`), and what xfs_repair -n said.
fn damaged_copy(
    bin: &Path,
    img: &Path,
    dir: &Path,
    name: &str,
    cmds: &[&str],
) -> (PathBuf, String) {
    let copy = dir.join("c.img");
    std::fs::copy(img, &copy).unwrap();
    let mut db = Command::new(bin.join("xfs_db"));
    db.arg("-x");
    for c in cmds {
        db.args(["-c", c]);
    }
    let o = db.arg(&copy).output().unwrap();
    assert!(o.status.success(), "xfs_db {cmds:?}: {o:?}");
    let (rc, rep) = repair_n(bin, &copy);
    assert_ne!(rc, 0, "{name}: xfs_repair -n does not flag it:\n{rep}");
    (copy, rep)
}

/// A 512 MiB image in `dir` made by mkfs.xfs 7.2 (options `mkfs`),
/// populated, its quotas turned on by `xfskit quotacheck`.
fn quota_image_72(bin: &Path, dir: &Path, mkfs: &[&str]) -> PathBuf {
    let img = dir.join("q.img");
    Command::new("truncate")
        .args(["-s", "512M", s(&img)])
        .status()
        .unwrap();
    let o = Command::new(bin.join("mkfs.xfs"))
        .args(["-q", "-f"])
        .args(mkfs)
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfs.xfs 7.2 {mkfs:?}: {o:?}");
    populate(&img, dir);
    xfskit(&["quotacheck", s(&img)]);
    assert_eq!(qflags(bin, &img) & CHKD, CHKD);
    img
}

/// `sb_qflags` as xfs_db 7.2 prints it.
fn qflags(bin: &Path, img: &Path) -> u16 {
    let o = Command::new(bin.join("xfs_db"))
        .args(["-r", "-c", "sb 0", "-c", "print qflags", s(img)])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    let v = t.trim().trim_start_matches("qflags = ");
    u16::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("qflags: {t}"))
}

/// User, group and project "checked" bits.
const CHKD: u16 = 0x0004 | 0x0100 | 0x0400;

/// What is needed, or why the test cannot run.
fn ready(test: &str) -> Option<(Vm, PathBuf)> {
    let bin = xfsprogs_72_or_skip(test)?;
    match Vm::find() {
        Ok(vm) => Some((vm, bin)),
        Err(why) => {
            skip(
                test,
                &format!("no kernel with XFS quota support to boot: {why}"),
            );
            None
        }
    }
}

/// A quota image written by the kernel: files of two users and groups, a
/// project directory, counts checked. Also returns the inode number of
/// /a/one (user 1000).
fn quota_image(vm: &Vm, bin: &Path, dir: &Path) -> (PathBuf, u64) {
    let img = dir.join("q.img");
    Command::new("truncate")
        .args(["-s", "512M", s(&img)])
        .status()
        .unwrap();
    let o = Command::new("/usr/sbin/mkfs.xfs")
        .args(["-q", "-f", s(&img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfs.xfs: {o:?}");
    let out = vm.run(
        &[&img],
        r#"
mount -o uquota,gquota,pquota /dev/vda /mnt
mkdir /mnt/a /mnt/b /mnt/proj
dd if=/dev/urandom of=/mnt/a/one bs=4k count=300 2>/dev/null
dd if=/dev/urandom of=/mnt/b/two bs=4k count=120 2>/dev/null
for i in 1 2 3 4 5; do echo $i > /mnt/b/small$i; done
chown -R 1000:2000 /mnt/a; chown -R 1001:2001 /mnt/b
xfs_quota -x -c 'project -s -p /mnt/proj 42' /mnt >/dev/null
dd if=/dev/urandom of=/mnt/proj/p bs=4k count=50 2>/dev/null
xfs_quota -x -c 'limit -u bsoft=100m bhard=200m isoft=10 ihard=20 1000' /mnt
xfs_quota -x -c 'limit -g bsoft=50m bhard=60m 2001' /mnt
xfs_quota -x -c 'limit -p bsoft=20m bhard=30m ihard=1000 42' /mnt
stat -c 'INO %i' /mnt/a/one
umount /mnt
"#,
    );
    let ino = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("INO "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no inode number in:\n{out}"));
    let (rc, out) = repair_n(bin, &img);
    assert_eq!(rc, 0, "the kernel's quota image:\n{out}");
    assert_eq!(
        qflags(bin, &img) & CHKD,
        CHKD,
        "the kernel left the counts checked"
    );
    (img, ino)
}

/// After the kernel's quota mount recounts, xfs_repair -n compares the
/// counts again: they must be right.
fn kernel_recounts(vm: &Vm, bin: &Path, img: &Path) {
    let report = vm.run(
        &[img],
        "mount -o uquota,gquota,pquota /dev/vda /mnt\n\
         for k in u g p; do echo KIND $k; xfs_quota -x -c \"report -$k -bi -nN\" /mnt; done\n\
         umount /mnt\n",
    );
    // What the kernel reports is what `xfskit quota` reads.
    let ours: Vec<serde_json::Value> =
        serde_json::from_str(&xfskit(&["quota", "--json", s(img)])).unwrap();
    let mut kind = "";
    let mut lines = 0;
    for l in report.lines() {
        if let Some(k) = l.trim().strip_prefix("KIND ") {
            kind = match k {
                "u" => "user",
                "g" => "group",
                _ => "project",
            };
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(id) = f.first().and_then(|i| i.strip_prefix('#')) else {
            continue;
        };
        // #ID used soft hard warn/grace [grace] used soft hard warn/grace [grace]
        let nums: Vec<u64> = f[1..].iter().filter_map(|v| v.parse().ok()).collect();
        let id: u64 = id.parse().unwrap();
        let r = ours
            .iter()
            .find(|r| r["kind"] == kind && r["id"] == id)
            .unwrap_or_else(|| panic!("{kind} {id} is not in xfskit quota:\n{report}"));
        let want = [
            r["blocks_kib"].as_u64().unwrap(),
            r["blocks_soft_kib"].as_u64().unwrap(),
            r["blocks_hard_kib"].as_u64().unwrap(),
            r["inodes"].as_u64().unwrap(),
            r["inodes_soft"].as_u64().unwrap(),
            r["inodes_hard"].as_u64().unwrap(),
        ];
        let have = [nums[0], nums[1], nums[2], nums[4], nums[5], nums[6]];
        assert_eq!(have, want, "{kind} {id}: the kernel's report line {l:?}");
        lines += 1;
    }
    assert!(lines >= 7, "the kernel reported {lines} ids:\n{report}");
    assert_eq!(
        qflags(bin, img) & CHKD,
        CHKD,
        "the quota mount did not recount:\n{report}"
    );
    let (rc, out) = repair_n(bin, img);
    assert_eq!(rc, 0, "after the kernel's recount:\n{out}\n{report}");
    assert!(xfskit(&["check", s(img)]).contains("no problems"));
}

#[test]
fn edits_of_a_quota_image_keep_its_counts_exact() {
    let test = "edits_of_a_quota_image_keep_its_counts_exact";
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    let dir = TempDir::new("quota");
    let (img, _) = quota_image(&vm, &bin, dir.path());
    // check compares the kernel's counts: right.
    assert!(xfskit(&["check", s(&img)]).contains("no problems"));
    let info = |img: &Path| -> serde_json::Value {
        serde_json::from_str(&xfskit(&["info", "--json", s(img)])).unwrap()
    };
    let q = &info(&img)["quota"];
    for k in ["user", "group", "project"] {
        assert_eq!(q[k]["accounting"], true, "{q}");
        assert_eq!(q[k]["checked"], true, "{q}");
        assert!(q[k]["inode"].as_u64().is_some(), "{q}");
    }
    let blob = dir.path().join("blob");
    std::fs::write(&blob, vec![7u8; 900_000]).unwrap();
    let i = s(&img);
    // Each command changes usage: blocks and inodes of owners, groups and
    // the project.
    let pre = xfskit(&["quota", "--json", i]);
    xfskit(&["cp", s(&blob), &format!("{i}:/a/copied")]);
    xfskit(&["chown", i, "1001:2001", "/a/copied"]);
    // Ids with no record yet: a record block of their own.
    xfskit(&["chown", i, "7000:7000", "/b/small2"]);
    xfskit(&["mkdir", i, "/proj/sub"]);
    xfskit(&["rm", i, "/b/two", "/b/small1"]);
    xfskit(&["truncate", i, "-s", "4096", "/a/one"]);
    xfskit(&["chproj", i, "7", "/proj/p"]);
    // The counts were kept: still marked checked, and right.
    assert_eq!(
        qflags(&bin, &img) & CHKD,
        CHKD,
        "the edits cleared the checked marks"
    );
    assert_eq!(info(&img)["quota"]["user"]["checked"], true);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n after the edits:\n{out}");
    assert!(xfskit(&["check", i]).contains("no problems"));
    let before = xfskit(&["quota", "--json", i]);
    assert_ne!(pre, before, "the edits changed no count");
    let q: Vec<serde_json::Value> = serde_json::from_str(&before).unwrap();
    for kind in ["user", "group"] {
        assert!(
            q.iter()
                .any(|r| r["kind"] == kind && r["id"] == 7000 && r["inodes"] == 1),
            "{kind} 7000: {before}"
        );
    }
    // The kernel mounts it without a quotacheck and reports those counts.
    kernel_recounts(&vm, &bin, &img);
    assert_eq!(xfskit(&["quota", "--json", i]), before);
}

/// The dquot fields of each id, as xfs_db 7.2 prints them.
fn dquots(bin: &Path, img: &Path) -> String {
    let mut db = Command::new(bin.join("xfs_db"));
    db.arg("-r");
    for q in [
        "-u 0", "-u 1000", "-u 1001", "-g 0", "-g 2000", "-g 2001", "-p 0", "-p 42",
    ] {
        db.args(["-c", &format!("dquot {q}")]).args([
            "-c",
            "print diskdq.id diskdq.type diskdq.bcount diskdq.icount diskdq.rtbcount",
        ]);
    }
    let o = db.arg(img).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn recovery_of_a_quota_log_replays_its_dquots_as_the_kernel_does() {
    let test = "recovery_of_a_quota_log_replays_its_dquots_as_the_kernel_does";
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    let dir = TempDir::new("quota");
    let (img, _) = quota_image(&vm, &bin, dir.path());
    // Usage changed with its dquots only in the log: blocks moved between
    // owners, new files, new blocks.
    vm.run(
        &[&img],
        r#"
mount -o uquota,gquota,pquota /dev/vda /mnt
dd if=/dev/urandom of=/mnt/a/late bs=4k count=200 2>/dev/null
sync
chown 1001:2001 /mnt/a/late
for i in 1 2 3; do echo $i > /mnt/a/new$i; done
xfs_io -c 'pwrite 0 64k' -c fsync /mnt/proj/p >/dev/null
xfs_io -x -c 'shutdown -f' /mnt
umount /mnt
"#,
    );
    let log = xfskit(&["log", s(&img)]);
    assert!(log.contains("DQUOT"), "no dquot items in the log:\n{log}");
    let i = s(&img);
    // In memory: the image is not changed; the replayed counts are right.
    let before = std::fs::read(&img).unwrap();
    assert!(xfskit(&["check", i]).contains("no problems"));
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a read changed the image"
    );
    // The kernel's recovery of a copy is the reference.
    let kernel = dir.path().join("k.img");
    std::fs::copy(&img, &kernel).unwrap();
    vm.run(
        &[&kernel],
        "mount -o uquota,gquota,pquota /dev/vda /mnt\numount /mnt\n",
    );
    let o = xfskit_output(&["recover", i]);
    assert!(
        o.status.success(),
        "recover: {}",
        common::output_text_of(&o)
    );
    assert_eq!(
        qflags(&bin, &img) & CHKD,
        CHKD,
        "recovery left the counts unchecked: {}",
        common::output_text_of(&o)
    );
    assert_eq!(
        dquots(&bin, &img),
        dquots(&bin, &kernel),
        "the dquots differ from the kernel's recovery"
    );
    let (rc, rep) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n after xfskit recover:\n{rep}");
    assert!(xfskit(&["check", i]).contains("no problems"));
}

/// Damages to a dquot's counts (the case's name, xfs_db 7.2's commands):
/// the first cases of the check and of the repair tests.
fn wrong_counts<'a>() -> Vec<(&'a str, Vec<&'a str>)> {
    vec![
        (
            "user bcount",
            vec!["dquot -u 1000", "write diskdq.bcount 5"],
        ),
        (
            "group icount",
            vec!["dquot -g 2001", "write diskdq.icount 99"],
        ),
        (
            "project rtbcount",
            vec!["dquot -p 42", "write diskdq.rtbcount 3"],
        ),
        ("root's counts", vec!["dquot -u 0", "write diskdq.bcount 0"]),
    ]
}

/// Damage to dquots and to what they count, each made with xfs_db 7.2:
/// xfs_repair -n flags every one, and so must check.
#[test]
fn check_compares_quota_counts_as_xfs_repair_does() {
    let test = "check_compares_quota_counts_as_xfs_repair_does";
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    let dir = TempDir::new("quota");
    let (img, one) = quota_image(&vm, &bin, dir.path());
    let inode = format!("inode {one}");
    let mut cases = wrong_counts();
    cases.extend([
        ("id", vec!["dquot -u 1001", "write -d diskdq.id 7"]),
        (
            "magic",
            vec!["dquot -u 1000", "write -d diskdq.magic 0x1234"],
        ),
        (
            "version",
            vec!["dquot -g 2000", "write -d diskdq.version 2"],
        ),
        ("type", vec!["dquot -u 0", "write -d diskdq.type 2"]),
        ("CRC", vec!["dquot -p 42", "write -c crc 0"]),
        (
            "UUID",
            vec![
                "dquot -u 1000",
                "write -d uuid 01234567-89ab-cdef-0123-456789abcdef",
            ],
        ),
        (
            "soft limit without timer",
            vec!["dquot -u 1001", "write -d diskdq.blk_softlimit 1"],
        ),
        (
            "an owner without a record",
            vec![&inode, "write core.uid 5000"],
        ),
    ]);
    for (name, cmds) in cases {
        let (copy, rep) = damaged_copy(&bin, &img, dir.path(), name, &cmds);
        let o = xfskit_output(&["check", s(&copy)]);
        let out = common::output_text_of(&o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{name}: check does not flag it:\n{out}\nxfs_repair -n:\n{rep}"
        );
        assert!(
            out.contains("quota"),
            "{name}: check flags something else:\n{out}\nxfs_repair -n:\n{rep}"
        );
    }
}

/// `xfs_db -r -c COMMAND -c print` of xfsprogs 7.2.
fn db_print(bin: &Path, img: &Path, what: &str) -> String {
    let o = Command::new(bin.join("xfs_db"))
        .args(["-r", "-c", what, "-c", "print", s(img)])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// mkfs's quota options make what mkfs.xfs 7.2 makes: the persistent
/// quota flags, with a metadata directory they turn on (no quota files:
/// the first quota mount makes them and counts).
#[test]
fn mkfs_quota_options_as_mkfs_xfs_72() {
    let Some(bin) = xfsprogs_72_or_skip("mkfs_quota_options_as_mkfs_xfs_72") else {
        return;
    };
    let dir = TempDir::new("quota-mkfs");
    let (theirs, ours) = (dir.path().join("a.img"), dir.path().join("b.img"));
    let uuid = "11111111-2222-3333-4444-555555555555";
    for opts in [
        "uquota,gquota,pquota",
        "uqnoenforce",
        "gqnoenforce,pquota",
        "pquota",
        "gquota,uquota=0",
        "metadir=1,uquota",
    ] {
        let m = format!("uuid={uuid},{opts}");
        for img in [&theirs, &ours] {
            let _ = std::fs::remove_file(img);
            Command::new("truncate")
                .args(["-s", "512M", s(img)])
                .status()
                .unwrap();
        }
        let o = Command::new(bin.join("mkfs.xfs"))
            .args(["-q", "-f", "-m", &m, s(&theirs)])
            .output()
            .unwrap();
        assert!(o.status.success(), "mkfs.xfs -m {m}: {o:?}");
        xfskit(&["mkfs", "-q", "-f", "-m", &m, s(&ours)]);
        for what in ["sb 0", "sb 1", "agf 0", "agi 0", "agf 3", "agi 3"] {
            assert_eq!(
                db_print(&bin, &ours, what),
                db_print(&bin, &theirs, what),
                "-m {m}: {what}"
            );
        }
        assert_ne!(qflags(&bin, &ours), 0, "-m {m}");
        let (rc, rep) = repair_n(&bin, &ours);
        assert_eq!(rc, 0, "-m {m}: {rep}");
    }
    // Without a metadata directory there are no persistent quota flags.
    let o = xfskit_output(&["mkfs", "-q", "-f", "-m", "metadir=0,uquota", s(&ours)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(common::output_text_of(&o)
        .contains("persistent quota flags not supported without metadir support"));
}

/// Runs `args` as user `uid` and group `gid` (no other groups): (success,
/// stderr).
fn as_owner(uid: u32, gid: u32, args: &[&str]) -> (bool, String) {
    let o = Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &gid.to_string()])
        .args(["--clear-groups", "--"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `dd` of `count` blocks of `bs` zeros to `path`, as `uid:gid`.
fn dd_as(uid: u32, gid: u32, path: &str, bs: &str, count: u32) -> (bool, String) {
    let of = format!("of={path}");
    let bs = format!("bs={bs}");
    let count = format!("count={count}");
    as_owner(uid, gid, &["dd", "if=/dev/zero", &of, &bs, &count])
}

#[test]
fn the_mount_keeps_quota_counts_and_enforces_the_limits() {
    let test = "the_mount_keeps_quota_counts_and_enforces_the_limits";
    if common::rwmount::skip_rw(test) {
        return;
    }
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    let dir = TempDir::new("quota-mount");
    let (img, _) = quota_image(&vm, &bin, dir.path());
    let m = common::rwmount::RwMount::of_image("quota", &img);
    let p = |rel: &str| m.p(rel).to_str().unwrap().to_string();
    // User 1000: blocks past its 200 MiB hard limit are refused.
    let (ok, err) = dd_as(1000, 2000, &p("a/big"), "1M", 250);
    assert!(!ok && err.contains("Disk quota exceeded"), "dd: {err}");
    let size = std::fs::metadata(m.p("a/big")).unwrap().len();
    assert!(
        (150 << 20..=200 << 20).contains(&size),
        "a/big holds {size} bytes"
    );
    // Its inodes: /a, /a/one and /a/big count; the hard limit is 20.
    let mut made = 0;
    let mut refused = String::new();
    for i in 0..30 {
        let (ok, err) = as_owner(1000, 2000, &["touch", &p(&format!("a/f{i}"))]);
        if !ok {
            refused = err;
            break;
        }
        made += 1;
    }
    assert_eq!(made, 17, "files made before the inode limit: {refused}");
    assert!(refused.contains("Disk quota exceeded"), "{refused}");
    // Group 2001: its 60 MiB hard limit, whoever writes.
    let (ok, err) = dd_as(1001, 2001, &p("b/g"), "1M", 100);
    assert!(!ok && err.contains("Disk quota exceeded"), "dd: {err}");
    // Root is never refused; a new user's file gets records of its own.
    std::fs::write(m.p("rootfile"), vec![1u8; 3 << 20]).unwrap();
    std::fs::create_dir(m.p("proj/open")).unwrap();
    Command::new("chmod")
        .args(["1777", &p("proj/open")])
        .status()
        .unwrap();
    let (ok, err) = dd_as(5000, 5000, &p("proj/open/new"), "64k", 3);
    assert!(ok, "user 5000 in /proj: {err}");
    // statfs inside the project: its limits, as the kernel reports them
    // (checked against the kernel below).
    let statfs = |path: &str| -> Vec<u64> {
        let o = Command::new("stat")
            .args(["-f", "-c", "%b %f %a %c %d", path])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let ours = statfs(&p("proj"));
    let whole = statfs(&p(""));
    drop(m);
    let p42: serde_json::Value = serde_json::from_str::<Vec<serde_json::Value>>(&xfskit(&[
        "quota",
        "--json",
        "-p",
        s(&img),
    ]))
    .unwrap()
    .into_iter()
    .find(|r| r["id"] == 42)
    .unwrap();
    let (limit, used) = (5120, p42["blocks"].as_u64().unwrap());
    let inodes = p42["inodes"].as_u64().unwrap();
    assert_eq!(
        ours,
        vec![limit, limit - used, limit - used, 1000, 1000 - inodes],
        "statfs of /proj (the whole filesystem: {whole:?})"
    );
    let out = vm.run(
        &[&img],
        "mount -o uquota,gquota,pquota /dev/vda /mnt\n\
         echo STATFS $(stat -f -c '%b %f %a %c %d' /mnt/proj)\n\
         umount /mnt\n",
    );
    let kernel: Vec<u64> = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("STATFS "))
        .unwrap_or_else(|| panic!("no statfs from the kernel:\n{out}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(
        ours, kernel,
        "statfs of /proj: xfskit's mount and the kernel's"
    );
    // Past the soft limits (100 MiB, 10 inodes) the grace timers run.
    let q: Vec<serde_json::Value> =
        serde_json::from_str(&xfskit(&["quota", "--json", s(&img)])).unwrap();
    let u1000 = q
        .iter()
        .find(|r| r["kind"] == "user" && r["id"] == 1000)
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for t in ["blocks_timer", "inodes_timer"] {
        let v = u1000[t].as_i64().unwrap_or(0);
        assert!(
            (now + 6 * 86400..=now + 7 * 86400 + 8).contains(&v),
            "user 1000 {t} = {v} (now {now}): {u1000}"
        );
    }
    assert!(q
        .iter()
        .any(|r| r["kind"] == "user" && r["id"] == 5000 && r["inodes"] == 1));
    // The counts stayed exact: marked checked, xfs_repair -n compares
    // them, and the kernel reports them without a quotacheck.
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n after the mount's writes:\n{out}");
    let before = xfskit(&["quota", "--json", s(&img)]);
    kernel_recounts(&vm, &bin, &img);
    assert_eq!(xfskit(&["quota", "--json", s(&img)]), before);
}

#[path = "../../xfskit/tests/crash_common/mod.rs"]
mod crash_common;

/// The writes of the crash test: a new file of user 1000 and group 2000,
/// given to ids with no records yet, grown, another file removed, an
/// fsync between (a checkpoint mid-way), then a sync.
fn quota_workload(fs: &xfskit::Fs) -> xfskit::Result<()> {
    let t = xfskit::inode::Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let meta = xfskit::build::Meta {
        mode: 0o644,
        uid: 1000,
        gid: 2000,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    };
    let a = fs.lookup_path(b"/a")?.ino;
    let b = fs.lookup_path(b"/b")?.ino;
    let f = fs.create_file(a, b"new", &meta, &vec![5u8; 300_000], &[])?;
    fs.fsync(f)?;
    fs.chown(f, 7000, 7001)?;
    fs.write_at(f, 300_000, &vec![6u8; 200_000])?;
    fs.unlink(b, b"small3")?;
    fs.fsync(f)?;
    fs.unlink(b, b"two")?;
    fs.sync()
}

#[test]
fn a_crash_at_every_write_leaves_exact_counts_in_both_recoveries() {
    let test = "a_crash_at_every_write_leaves_exact_counts_in_both_recoveries";
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    use crash_common::{CrashDevice, Shared};
    use std::sync::Arc;
    let dir = TempDir::new("quota-crash");
    let (img, _) = quota_image(&vm, &bin, dir.path());
    let open = |dev: &Arc<CrashDevice>| {
        xfskit::Fs::from_device_rw(
            Box::new(Shared(dev.clone())),
            &xfskit::OpenOptions::default(),
        )
    };
    // The run without a crash: its writes counted, its result checked.
    let dev = Arc::new(CrashDevice::new(&img, None, false));
    quota_workload(&open(&dev).unwrap()).unwrap();
    let total = dev.writes();
    assert!(total > 5, "{total} writes");
    let whole = dir.path().join("whole.img");
    dev.save(&img, &whole);
    let (rc, out) = repair_n(&bin, &whole);
    assert_eq!(rc, 0, "after the whole run:\n{out}");
    assert_eq!(qflags(&bin, &whole) & CHKD, CHKD);
    // Every cut: xfskit's recovery leaves counts xfs_repair -n finds
    // right, still marked checked. Some cuts go to the kernel too.
    let mut for_kernel = Vec::new();
    let mut dquots_replayed = 0;
    for k in 1..=total {
        let dev = Arc::new(CrashDevice::new(&img, Some(k), false));
        let r = open(&dev).and_then(|fs| quota_workload(&fs));
        assert!(r.is_err(), "cut at write {k} of {total} did not fail");
        let cut = dir.path().join(format!("cut{k}.img"));
        dev.save(&img, &cut);
        if k % (total / 4).max(1) == 0 && for_kernel.len() < 4 {
            let copy = dir.path().join(format!("kernel{k}.img"));
            Command::new("cp")
                .args(["--sparse=always", s(&cut), s(&copy)])
                .status()
                .unwrap();
            for_kernel.push((k, cut.clone(), copy));
        }
        let r: serde_json::Value =
            serde_json::from_str(&xfskit(&["recover", "--json", s(&cut)])).unwrap();
        dquots_replayed += r["dquots_replayed"].as_u64().unwrap();
        let (rc, out) = repair_n(&bin, &cut);
        assert_eq!(
            rc, 0,
            "cut at write {k} of {total}, after xfskit recover:\n{out}"
        );
        assert_eq!(qflags(&bin, &cut) & CHKD, CHKD, "cut at write {k}");
        if !for_kernel.iter().any(|(j, _, _)| *j == k) {
            std::fs::remove_file(&cut).unwrap();
        }
    }
    eprintln!("{total} writes cut, {dquots_replayed} dquot items replayed");
    assert!(dquots_replayed > 0, "no cut left a dquot item to replay");
    // The kernel's recovery (a quota mount replays dquots) gives the
    // same records as xfskit's.
    assert!(!for_kernel.is_empty());
    let imgs: Vec<&Path> = for_kernel.iter().map(|(_, _, c)| c.as_path()).collect();
    let mut script = String::new();
    for (i, _) in imgs.iter().enumerate() {
        let d = (b'a' + i as u8) as char;
        script.push_str(&format!(
            "mount -o uquota,gquota,pquota /dev/vd{d} /mnt && umount /mnt && echo MOUNTED {i}\n"
        ));
    }
    let out = vm.run(&imgs, &script);
    for (i, (k, ours, theirs)) in for_kernel.iter().enumerate() {
        assert!(out.contains(&format!("MOUNTED {i}")), "cut {k}:\n{out}");
        assert_eq!(
            xfskit(&["quota", "--json", "--all", s(theirs)]),
            xfskit(&["quota", "--json", "--all", s(ours)]),
            "cut at write {k}: the kernel's recovery and xfskit's"
        );
    }
}

/// Files of three owners and a project, written by xfskit into `img`.
fn populate(img: &Path, dir: &Path) {
    let i = s(img);
    let blob = dir.join("blob");
    std::fs::write(&blob, vec![9u8; 700_000]).unwrap();
    let small = dir.join("small");
    std::fs::write(&small, b"small\n").unwrap();
    xfskit(&["mkdir", i, "/a", "/b", "/p"]);
    xfskit(&["cp", s(&blob), &format!("{i}:/a/big")]);
    xfskit(&["cp", s(&small), &format!("{i}:/a/small")]);
    xfskit(&["chown", "-R", i, "1000:2000", "/a"]);
    xfskit(&["cp", s(&blob), &format!("{i}:/b/other")]);
    xfskit(&["chown", "-R", i, "1001:2001", "/b"]);
    xfskit(&["chproj", "-R", "--inherit", i, "42", "/p"]);
    xfskit(&["cp", s(&blob), &format!("{i}:/p/in")]);
    xfskit(&["mkdir", i, "/p/sub"]);
}

#[test]
fn quotacheck_turns_quotas_on_as_the_kernels_first_quota_mount() {
    let test = "quotacheck_turns_quotas_on_as_the_kernels_first_quota_mount";
    let Some((vm, bin)) = ready(test) else {
        return;
    };
    let dir = TempDir::new("quotacheck");
    // Debian's mkfs.xfs 6.1 defaults: the kernel under QEMU mounts it.
    let img = dir.path().join("q.img");
    Command::new("truncate")
        .args(["-s", "512M", s(&img)])
        .status()
        .unwrap();
    let o = Command::new("/usr/sbin/mkfs.xfs")
        .args(["-q", "-f", s(&img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfs.xfs: {o:?}");
    populate(&img, dir.path());
    assert_eq!(qflags(&bin, &img), 0);
    let done: Vec<serde_json::Value> =
        serde_json::from_str(&xfskit(&["quotacheck", "--json", s(&img)])).unwrap();
    assert_eq!(done.len(), 3, "{done:?}");
    assert!(done.iter().all(|k| k["made"] == true), "{done:?}");
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n after quotacheck:\n{out}");
    assert!(xfskit(&["check", s(&img)]).contains("no problems"));
    // Twice is refused (exit 1), changing nothing.
    let again = xfskit_output(&["quotacheck", s(&img)]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    // Writes keep the counts, and the kernel agrees with them.
    xfskit(&["rm", s(&img), "/b/other"]);
    let before = xfskit(&["quota", "--json", s(&img)]);
    kernel_recounts(&vm, &bin, &img);
    assert_eq!(xfskit(&["quota", "--json", s(&img)]), before);
}

/// mkfs.xfs 7.2 (options `mkfs`), files by xfskit, quotas turned on by
/// `xfskit quotacheck`, then edits: after each step xfs_repair -n 7.2,
/// which compares the counts, is clean. No kernel here mounts these
/// formats with quotas (the one under QEMU is 6.1), so xfs_repair 7.2 is
/// the judge; a count damaged by xfs_db 7.2 shows that it compares them,
/// and that `xfskit check` does too.
fn quotas_stay_exact_on(test: &str, mkfs: &[&str]) {
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("quota72");
    let img = quota_image_72(&bin, dir.path(), mkfs);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n 7.2 after quotacheck:\n{out}");
    let i = s(&img);
    let pre = xfskit(&["quota", "--json", i]);
    let blob = dir.path().join("blob2");
    std::fs::write(&blob, vec![3u8; 2_000_000]).unwrap();
    xfskit(&["cp", s(&blob), &format!("{i}:/p/sub/more")]);
    xfskit(&["chown", i, "3000:3000", "/a/big"]);
    xfskit(&["mv", i, "/b/other", "/p/moved"]);
    xfskit(&["chproj", i, "43", "/p/in"]);
    xfskit(&["truncate", i, "-s", "100", "/p/sub/more"]);
    xfskit(&["rm", i, "/a/small"]);
    // Through the engine: a clone (the shared blocks count for the new
    // owner too, as the kernel counts them) and a mapping exchange with a
    // sparse file of another owner (blocks change hands).
    {
        let fs = xfskit::Fs::open_rw(&img, &xfskit::OpenOptions::default()).unwrap();
        let t = xfskit::inode::Timestamp {
            sec: 1_700_000_000,
            nsec: 0,
        };
        let meta = |uid: u32| xfskit::build::Meta {
            mode: 0o644,
            uid,
            gid: uid,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        };
        let big = fs.lookup_path(b"/a/big").unwrap().ino;
        let p = fs.lookup_path(b"/p").unwrap().ino;
        let c = fs.create_file(p, b"clone", &meta(4000), &[], &[]).unwrap();
        fs.clone_range(big, 0, c, 0, 0).unwrap();
        let sp = fs.create_file(p, b"sparse", &meta(4001), &[], &[]).unwrap();
        fs.truncate(sp, 1 << 20).unwrap();
        fs.exchange_range(big, 0, sp, 0, 65536, xfskit::namespace::ExchangeFlags::NONE)
            .unwrap();
        fs.sync().unwrap();
    }
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n 7.2 after the edits:\n{out}");
    let q: Vec<serde_json::Value> =
        serde_json::from_str(&xfskit(&["quota", "--json", "-u", i])).unwrap();
    let blocks = |id: u64| {
        q.iter()
            .find(|r| r["id"] == id)
            .map_or(0, |r| r["blocks"].as_u64().unwrap())
    };
    assert!(blocks(4000) >= 700_000 / 4096, "the clone's owner: {q:?}");
    assert_eq!(blocks(4001), 16, "the exchange's receiver: {q:?}");
    assert_ne!(pre, xfskit(&["quota", "--json", i]));
    let report = xfskit(&["check", i]);
    assert!(
        report.contains("no problems") && !report.contains("quota"),
        "{report}"
    );
    // A count made wrong: both see it.
    let bad = dir.path().join("bad.img");
    Command::new("cp")
        .args(["--sparse=always", i, s(&bad)])
        .status()
        .unwrap();
    let o = Command::new(bin.join("xfs_db"))
        .args([
            "-x",
            "-c",
            "dquot -u 3000",
            "-c",
            "write diskdq.bcount 5",
            s(&bad),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "xfs_db: {o:?}");
    let (rc, out) = repair_n(&bin, &bad);
    assert_ne!(rc, 0, "xfs_repair -n missed the damaged count:\n{out}");
    assert!(out.contains("user quota id 3000 has bcount 5"), "{out}");
    let o = xfskit_output(&["check", s(&bad)]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("id 3000 has bcount 5"),
        "{o:?}"
    );
}

#[test]
fn quotas_on_the_72_defaults_stay_exact_through_edits() {
    // mkfs.xfs 7.2's defaults: parent pointers, exchange-range, no
    // metadata directory.
    quotas_stay_exact_on("quotas_on_the_72_defaults_stay_exact_through_edits", &[]);
}

#[test]
fn quotas_in_a_metadata_directory_stay_exact_through_edits() {
    quotas_stay_exact_on(
        "quotas_in_a_metadata_directory_stay_exact_through_edits",
        &["-m", "metadir=1"],
    );
}

#[test]
fn build_with_quota_options_makes_the_counts() {
    let test = "build_with_quota_options_makes_the_counts";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if !common::is_root() {
        skip(test, "not root: the source tree's owners need chown");
        return;
    }
    let dir = TempDir::new("quota-build");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("u")).unwrap();
    std::fs::write(src.join("u/a"), vec![1u8; 300_000]).unwrap();
    std::fs::write(src.join("u/b"), b"b\n").unwrap();
    std::fs::write(src.join("top"), vec![2u8; 50_000]).unwrap();
    for (p, o) in [
        ("u", "1500:2500"),
        ("u/a", "1500:2500"),
        ("u/b", "1501:2500"),
    ] {
        let st = Command::new("chown")
            .args([o, s(&src.join(p))])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let img = dir.path().join("q.img");
    xfskit(&[
        "build",
        s(&src),
        s(&img),
        "--size",
        "512M",
        "-m",
        "uquota,gquota,pquota",
    ]);
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD);
    let (rc, out) = repair_n(&bin, &img);
    assert_eq!(rc, 0, "xfs_repair -n 7.2 after build:\n{out}");
    let q: Vec<serde_json::Value> =
        serde_json::from_str(&xfskit(&["quota", "--json", s(&img)])).unwrap();
    let find = |kind: &str, id: u64| {
        q.iter()
            .find(|r| r["kind"] == kind && r["id"] == id)
            .unwrap_or_else(|| panic!("{kind} {id}: {q:?}"))
            .clone()
    };
    assert_eq!(find("user", 1500)["inodes"], 2);
    assert_eq!(find("user", 1501)["inodes"], 1);
    assert_eq!(find("group", 2500)["inodes"], 3);
    assert!(find("user", 1500)["blocks"].as_u64().unwrap() >= 300_000 / 4096);
}

#[test]
fn realtime_blocks_are_counted_apart() {
    // No kernel here keeps quotas on a realtime filesystem (Linux 6.1
    // turns them off there), so xfskit quotacheck makes the counts and
    // xfs_repair -n 7.2 (with the realtime device) compares them.
    let test = "realtime_blocks_are_counted_apart";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("quota-rt");
    let img = dir.path().join("d.img");
    let rt = dir.path().join("rt.img");
    for (f, size) in [(&img, "320M"), (&rt, "64M")] {
        Command::new("truncate")
            .args(["-s", size, s(f)])
            .status()
            .unwrap();
    }
    let o = Command::new("/usr/sbin/mkfs.xfs")
        .args(["-q", "-f", "-r", &format!("rtdev={}", s(&rt)), s(&img)])
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfs.xfs: {o:?}");
    let repair = |img: &Path| -> (i32, String) {
        let o = Command::new(bin.join("xfs_repair"))
            .args(["-n", "-r", s(&rt), s(img)])
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let (i, r) = (s(&img), s(&rt));
    let blob = dir.path().join("blob");
    std::fs::write(&blob, vec![4u8; 409_600]).unwrap();
    let small = dir.path().join("small");
    std::fs::write(&small, vec![5u8; 122_880]).unwrap();
    xfskit(&["mkdir", "--rtdev", r, i, "/rt"]);
    xfskit(&["chattr", "--rtdev", r, i, "+t", "/rt"]);
    xfskit(&["cp", "--rtdev", r, s(&blob), &format!("{i}:/rt/f")]);
    xfskit(&["cp", "--rtdev", r, s(&small), &format!("{i}:/rt/g")]);
    xfskit(&["cp", "--rtdev", r, s(&small), &format!("{i}:/plain")]);
    xfskit(&["chown", "--rtdev", r, "-R", i, "1000:2000", "/rt", "/plain"]);
    xfskit(&["quotacheck", "--rtdev", r, i]);
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD);
    let (rc, out) = repair(&img);
    assert_eq!(rc, 0, "after quotacheck:\n{out}");
    let rtq = |img: &Path| -> (u64, u64) {
        let q: Vec<serde_json::Value> =
            serde_json::from_str(&xfskit(&["quota", "--json", "-u", s(img)])).unwrap();
        q.iter().find(|r| r["id"] == 1000).map_or((0, 0), |r| {
            (
                r["blocks"].as_u64().unwrap(),
                r["rtblocks"].as_u64().unwrap(),
            )
        })
    };
    assert_eq!(
        rtq(&img),
        (30, 130),
        "user 1000: /plain's 30 blocks, 100 + 30 realtime"
    );
    // Realtime blocks freed, allocated and removed: counted exactly.
    xfskit(&["truncate", "--rtdev", r, i, "-s", "40960", "/rt/f"]);
    xfskit(&["cp", "--rtdev", r, s(&blob), &format!("{i}:/rt/new")]);
    xfskit(&["rm", "--rtdev", r, i, "/rt/g"]);
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD, "the counts were not kept");
    let (rc, out) = repair(&img);
    assert_eq!(rc, 0, "after the realtime edits:\n{out}");
    assert_eq!(rtq(&img).1, 10, "after the edits");
    // A realtime file given to another owner: its realtime blocks go with it.
    xfskit(&["chown", "--rtdev", r, i, "1000:2000", "/rt/new"]);
    assert_eq!(qflags(&bin, &img) & CHKD, CHKD, "the counts were not kept");
    let (rc, out) = repair(&img);
    assert_eq!(rc, 0, "after the chown:\n{out}");
    assert_eq!(rtq(&img).1, 10 + 100, "after the chown");
}

/// `xfskit repair` of quota counts made wrong by xfs_db 7.2 on a
/// mkfs.xfs 7.2 image whose quotas `xfskit quotacheck` turned on: the
/// records are counted again (the quota report is the undamaged one's,
/// xfs_repair -n 7.2 and check clean after, a second repair finds
/// nothing); a record that is not a valid dquot of its slot is made anew,
/// as xfs_repair makes it.
#[test]
fn repair_counts_quotas_again() {
    let test = "repair_counts_quotas_again";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("quota-repair");
    let img = quota_image_72(&bin, dir.path(), &[]);
    let report = |img: &Path| {
        ["-u", "-g", "-p"]
            .map(|k| xfskit(&["quota", "--json", k, s(img)]))
            .join("\n")
    };
    let want = report(&img);
    let small = xfskit(&["stat", s(&img), "/a/small"]);
    let small_ino = small
        .lines()
        .find_map(|l| l.trim().strip_prefix("ino:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no ino in {small}"));
    let owner = format!("inode {small_ino}");
    let mut cases = wrong_counts();
    cases.extend([
        // An owner without a record: its record is made.
        (
            "owner without a record",
            vec![&owner, "write core.uid 5000"],
        ),
        // A record that is not a dquot: made anew (without limits, which
        // this image sets none of), as xfs_repair makes it.
        (
            "magic",
            vec!["dquot -u 1001", "write -d diskdq.magic 0x1234"],
        ),
        ("id", vec!["dquot -g 2000", "write -d diskdq.id 7"]),
    ]);
    for (name, cmds) in cases {
        let (copy, _) = damaged_copy(&bin, &img, dir.path(), name, &cmds);
        let o = xfskit_output(&["repair", s(&copy)]);
        let out = common::output_text_of(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: repair:\n{out}");
        let c = xfskit_output(&["check", s(&copy)]);
        assert!(
            c.status.success(),
            "{name}: check after repair:\n{}",
            common::output_text_of(&c)
        );
        let (rc, rep) = repair_n(&bin, &copy);
        assert_eq!(
            rc, 0,
            "{name}: xfs_repair -n after repair:\n{rep}\nrepair said:\n{out}"
        );
        {
            assert!(
                out.contains("counted again into the records"),
                "{name}: {out}"
            );
            if name == "magic" || name == "id" {
                assert!(
                    out.contains("1 records that were not valid dquots made anew"),
                    "{name}: {out}"
                );
            }
            assert_eq!(qflags(&bin, &copy) & CHKD, CHKD, "{name}: {out}");
            if name == "owner without a record" {
                assert!(
                    xfskit(&["quota", "--json", "-u", s(&copy)]).contains("\"id\":5000")
                        || xfskit(&["quota", "--json", "-u", s(&copy)]).contains("\"id\": 5000"),
                    "{name}: no record for uid 5000"
                );
            } else {
                assert_eq!(
                    report(&copy),
                    want,
                    "{name}: the counts differ from the undamaged ones"
                );
            }
        }
        let again = xfskit(&["repair", s(&copy)]);
        assert!(again.contains("nothing to repair"), "{name}: {again}");
    }
}

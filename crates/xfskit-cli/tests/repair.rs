//! `xfskit repair`, its first steps, against xfs_repair 7.2: superblock
//! damage made with xfs_db 7.2 (counters, secondary copies, needsrepair
//! left by an interrupted repair) is flagged by check, described by
//! `repair --dry-run` (which writes nothing), repaired, after which check
//! and `xfs_repair -n` are clean, a second repair writes nothing, and the
//! undo file puts the damaged image back byte for byte; damage repair
//! does not fix yet is listed as not repaired and nothing is written; a
//! dirty log left by the kernel (root: loop mount and shutdown) is
//! replayed, not destroyed: xfs_repair refuses it, xfskit keeps every file
//! the kernel had synced. `--zero-log` clears such a log as `xfs_repair -L`
//! 7.2 does (the log area the same block for block), after which both
//! images are clean for `xfs_repair -n` and check, and the kernel mounts
//! xfskit's without complaining of metadata LSNs ahead of the log; a
//! corrupt dirty log is refused (naming the log) unless --zero-log is
//! given; --dry-run --zero-log writes nothing; and a log formatted behind
//! the metadata's LSNs (xfs_db logformat -c 1) is formatted past them, as
//! xfs_repair formats it.

mod common;

use common::disks::sh;
use common::fixtures::{output_text, xfskit_ok, xfskit_output};
use common::{is_root, missing_tool, skip, TempDir};
use std::path::{Path, PathBuf};

fn bin72() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    d.join("xfs_repair").exists().then_some(d)
}

fn repair_n(bin: &Path, img: &Path) -> (bool, String) {
    let o = std::process::Command::new(bin.join("xfs_repair"))
        .args(["-n", img.to_str().unwrap()])
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

fn sha(p: &Path) -> String {
    sh(&format!("cksum '{}' | cut -d' ' -f1,2", p.display()))
}

/// A populated image made by mkfs.xfs 7.2 (its defaults) and xfskit cp.
fn image(bin: &Path, dir: &Path, name: &str) -> PathBuf {
    let img = dir.join(name);
    sh(&format!(
        "truncate -s 320m '{0}' && '{1}/mkfs.xfs' -q -f '{0}' && mkdir -p '{2}/s/t' && seq 1 20000 > '{2}/s/t/n'",
        img.display(),
        bin.display(),
        dir.display()
    ));
    xfskit_ok(&[
        "cp",
        "-r",
        &format!("{}/s", dir.display()),
        &format!("{}:/s", img.display()),
    ]);
    img
}

#[test]
fn superblock_damage_is_repaired_as_xfs_repair_would() {
    let Some(bin) = bin72() else {
        skip(
            "superblock_damage_is_repaired_as_xfs_repair_would",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-sb");
    let d = t.path();
    let base = image(&bin, d, "base.img");
    let cases: [(&str, &str); 22] = [
        // AG headers whose identity alone is damaged.
        ("ag-ident", "-c 'agf 1' -c 'fuzz -d magicnum zeroes' -c 'agi 2' -c 'fuzz -d seqno ones' -c 'agfl 3' -c 'fuzz -d uuid zeroes'"),
        ("fdblocks", "-c 'sb 0' -c 'write -d fdblocks 1234'"),
        ("icount-ifree", "-c 'sb 0' -c 'write -d icount 999' -c 'write -d ifree 7'"),
        ("secondary-dblocks", "-c 'sb 2' -c 'write -d dblocks 77'"),
        ("ag-counters", "-c 'agf 1' -c 'write -d freeblks 17' -c 'write -d longest 3' -c 'agi 2' -c 'write -d freecount 9' -c 'sb 0' -c 'write -d fdblocks 3'"),
        ("secondaries", "-c 'sb 1' -c 'write -d agcount 9' -c 'sb 3' -c 'write uuid 11111111-2222-3333-4444-555555555555'"),
        // An interrupted repair: the feature word with needsrepair (1 << 4).
        ("needsrepair", "-c 'sb 0' -c 'write -d fdblocks 5' -c 'print features_incompat'"),
        // A primary that cannot be read as one: found again from the
        // secondaries, as xfs_repair finds it.
        ("primary-magic", "-c 'sb 0' -c 'write -d magicnum 0'"),
        ("primary-crc", "-c 'sb 0' -c 'write -c dblocks 1'"),
        ("primary-agcount", "-c 'sb 0' -c 'write -d agcount 0'"),
        ("primary-blocksize", "-c 'sb 0' -c 'write -d blocksize 1000' -c 'write -d fdblocks 9'"),
        // A primary that reads as one but whose geometry the secondaries
        // outvote: its geometry taken from them, its own fields kept.
        ("primary-logstart", "-c 'sb 0' -c 'write -d logstart 0'"),
        ("primary-versionnum", "-c 'sb 0' -c 'write -d versionnum 0x34b5'"),
        ("primary-uuid", "-c 'sb 0' -c 'write -d uuid 11111111-2222-3333-4444-555555555555'"),
        // A primary xfskit does not support (a version, unknown
        // incompatible features) that its secondaries contradict.
        ("primary-version0", "-c 'sb 0' -c 'write -d versionnum 0'"),
        ("primary-incompat", "-c 'sb 0' -c 'write -d features_incompat 0xffffffff'"),
        // Fields of the primary that xfs_repair resets on their own.
        ("field-flags", "-c 'sb 0' -c 'write -d flags 1' -c 'write -d shared_vn 3' -c 'write -d inprogress 1'"),
        ("field-quota", "-c 'sb 0' -c 'write -d uquotino 1234' -c 'write -d gquotino 77' -c 'write -d qflags 0x7'"),
        ("field-rt", "-c 'sb 0' -c 'write -d frextents 99' -c 'write -d rbmino 7' -c 'write -d rsumino 0'"),
        ("field-root", "-c 'sb 0' -c 'write -d rootino 0'"),
        ("field-stripe", "-c 'sb 0' -c 'write -d unit 3' -c 'write -d width 7'"),
        ("field-log-incompat", "-c 'sb 0' -c 'write -d features_log_incompat 0x80000000'"),
    ];
    let print_sb0 = |img: &Path| {
        sh(&format!(
            "'{}/xfs_db' -r -c 'sb 0' -c print '{}'",
            bin.display(),
            img.display()
        ))
    };
    let sb0 = print_sb0(&base);
    for (name, cmds) in cases {
        let img = d.join(format!("{name}.img"));
        sh(&format!(
            "cp --sparse=always '{}' '{}' && '{}/xfs_db' -x {cmds} '{}' >/dev/null",
            base.display(),
            img.display(),
            bin.display(),
            img.display()
        ));
        if name == "needsrepair" {
            let v = sh(&format!(
                "'{}/xfs_db' -r -c 'sb 0' -c 'print features_incompat' '{}'",
                bin.display(),
                img.display()
            ));
            let val =
                u32::from_str_radix(v.trim().trim_start_matches("features_incompat = 0x"), 16)
                    .unwrap_or_else(|_| panic!("features_incompat: {v}"));
            sh(&format!(
                "'{}/xfs_db' -x -c 'sb 0' -c 'write features_incompat {:#x}' '{}' >/dev/null",
                bin.display(),
                val | 0x10,
                img.display()
            ));
        }
        let i = img.to_str().unwrap();
        let (ok, out) = repair_n(&bin, &img);
        if name == "field-quota" || name == "field-log-incompat" {
            // xfs_repair -n 7.2 passes quota inodes and flags that the
            // quota feature bit does not cover (a later quota mount would
            // take inode 1234 as its quota file), and log-incompatible
            // feature bits no kernel knows (which the kernel refuses when
            // the log needs replaying); xfskit flags and clears them.
            assert!(ok, "{name}: xfs_repair -n now flags it:\n{out}");
            let c = xfskit_output(&["check", i]);
            assert_eq!(c.status.code(), Some(1), "{name}: check passes it");
        } else {
            assert!(!ok, "{name}: xfs_repair -n finds nothing:\n{out}");
        }
        let before = sha(&img);
        let o = xfskit_output(&["repair", "--dry-run", i]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{name}: repair -n: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(text.contains("would fix: "), "{name}: {text}");
        assert!(!text.contains("would remain"), "{name}: {text}");
        assert_eq!(sha(&img), before, "{name}: --dry-run wrote");
        let undo = d.join(format!("{name}.undo"));
        let out = xfskit_ok(&["repair", "--undo", undo.to_str().unwrap(), i]);
        assert!(out.contains("fixed: "), "{name}: {out}");
        assert!(out.contains("the filesystem is clean"), "{name}: {out}");
        let c = xfskit_output(&["check", i]);
        assert!(
            c.status.success(),
            "{name}: check after repair: {}",
            String::from_utf8_lossy(&c.stdout)
        );
        let (ok, rn) = repair_n(&bin, &img);
        assert!(ok, "{name}: xfs_repair -n after xfskit repair:\n{rn}");
        assert!(
            xfskit_ok(&["cat", i, "/s/t/n"]).starts_with("1\n2\n3\n"),
            "{name}: the file is gone"
        );
        if name.starts_with("primary-") {
            assert!(
                out.contains("primary superblock written from the secondary of AG 1"),
                "{name}: {out}"
            );
        }
        if name.starts_with("field-") {
            assert!(out.contains("fixed: primary superblock: "), "{name}: {out}");
        }
        if name == "field-quota" {
            // Quota inodes without quotas become null, as xfs_repair
            // leaves them (mkfs.xfs 7.2 writes 0); the rest is as it was.
            let now = print_sb0(&img);
            for q in ["uquotino = null", "gquotino = null"] {
                assert!(now.lines().any(|l| l == q), "{name}: no '{q}' in\n{now}");
            }
            let rest = |t: &str| {
                t.lines()
                    .filter(|l| {
                        !["uquotino", "gquotino", "crc"]
                            .iter()
                            .any(|f| l.starts_with(f))
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            assert_eq!(rest(&now), rest(&sb0), "{name}: the primary differs");
        } else if name.starts_with("primary-") || name.starts_with("field-") {
            assert_eq!(
                print_sb0(&img),
                sb0,
                "{name}: the primary differs from the undamaged one"
            );
        }
        // Again: nothing to do, nothing written.
        let after = sha(&img);
        let again = xfskit_ok(&["repair", i]);
        assert!(again.contains("nothing to repair"), "{name}: {again}");
        assert_eq!(sha(&img), after, "{name}: a second repair wrote");
        // The undo file brings the damage back, byte for byte (past the
        // UUID check when the repair gave the primary its UUID back).
        let mut args = vec!["undo", undo.to_str().unwrap(), i];
        if name == "primary-uuid" {
            args.insert(1, "--force");
        }
        xfskit_ok(&args);
        assert_eq!(sha(&img), before, "{name}: undo");
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn damage_not_handled_yet_is_left_as_it_is() {
    let Some(bin) = bin72() else {
        skip(
            "damage_not_handled_yet_is_left_as_it_is",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-left");
    let d = t.path();
    let img = image(&bin, d, "agf.img");
    sh(&format!(
        // An inobt whose chunks would come from an rmapbt that cannot be
        // read either.
        "'{}/xfs_db' -x -c 'agi 1' -c 'write -d root 0' -c 'agf 1' -c 'write -d rmaproot 0' -c 'sb 0' -c 'write -d fdblocks 3' '{}' >/dev/null",
        bin.display(),
        img.display()
    ));
    let before = sha(&img);
    let o = xfskit_output(&["repair", "--json", img.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clean"], false);
    let remaining = v["remaining"].as_array().unwrap();
    assert!(
        remaining.iter().any(|p| p["what"] != "superblock"),
        "the btree problem is not listed: {v}"
    );
    // The counters are not set from AG headers that are wrong themselves.
    assert!(
        remaining.iter().any(|p| p["detail"]
            .as_str()
            .unwrap_or("")
            .starts_with("sb_fdblocks")),
        "{v}"
    );
    assert_eq!(sha(&img), before, "repair wrote with nothing it could fix");
}

/// An image of 2,000 files of 4 KiB of which every other one is removed:
/// AG 0's free space btrees hold about 1,000 extents, two levels.
fn fragmented(bin: &Path, dir: &Path, rmapbt: bool) -> PathBuf {
    let img = dir.join(format!("frag-{rmapbt}.img"));
    sh(&format!(
        "rm -rf '{2}/f' && mkdir -p '{2}/f' && for i in $(seq 1000 2999); do head -c 4096 /dev/urandom > '{2}/f/'$i; done && truncate -s 320m '{0}' && '{1}/mkfs.xfs' -q -f -m rmapbt={3} '{0}'",
        img.display(),
        bin.display(),
        dir.display(),
        u8::from(rmapbt)
    ));
    let i = img.to_str().unwrap();
    xfskit_ok(&[
        "cp",
        "-r",
        &format!("{}/f", dir.display()),
        &format!("{i}:/f"),
    ]);
    xfskit_ok(&["rm", i, "/f/*[13579]"]);
    let levels = sh(&format!(
        "'{}/xfs_db' -r -c 'agf 0' -c 'print bnolevel' '{i}'",
        bin.display()
    ));
    assert_eq!(
        levels.trim(),
        "bnolevel = 2",
        "the test needs a two-level bnobt"
    );
    img
}

/// Free space, rmap, inode, free inode and refcount btrees damaged in AG 0 of a fragmented image
/// (two-level trees), with and without the rmapbt, are rebuilt: check and
/// xfs_repair -n 7.2 are clean after, the files' data is kept, a second
/// repair writes nothing and (root) the kernel allocates from the
/// rebuilt trees, xfs_repair -n clean again.
#[test]
fn ag_btrees_are_rebuilt() {
    let Some(bin) = bin72() else {
        skip(
            "ag_btrees_are_rebuilt",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-space");
    let d = t.path();
    for rmapbt in [true, false] {
        let base = fragmented(&bin, d, rmapbt);
        let kept = sh(&format!(
            "cd '{}/f' && ls | sort | sed -n '1~2p' | xargs cat | cksum",
            d.display()
        ));
        // (name, damage, an rmapbt's, xfs_repair -n sees it)
        const SPACE: &str = "free space btrees (bnobt, cntbt) rebuilt";
        const FINO: &str = "free inode btree rebuilt from the inode btree";
        const INO: &str = "inode btree rebuilt from the inode chunks the rmapbt records";
        const REFC: &str = "refcount btree rebuilt from the files' data mappings";
        for (name, damage, rmap, theirs, words) in [
            (
                "bnobt leaf",
                "-c 'agf 0' -c 'addr bnoroot' -c 'addr ptrs[2]' -c 'write -d magic 0'",
                false,
                true,
                SPACE,
            ),
            (
                "cntbt root",
                "-c 'agf 0' -c 'write -d cntroot 0' -c 'sb 0' -c 'write -d fdblocks 3'",
                false,
                true,
                SPACE,
            ),
            (
                "bnobt level",
                "-c 'agf 0' -c 'write -d bnolevel 1'",
                false,
                true,
                SPACE,
            ),
            (
                "rmapbt leaf",
                "-c 'agf 0' -c 'addr rmaproot' -c 'addr ptrs[3]' -c 'write -d magic 0'",
                true,
                true,
                SPACE,
            ),
            (
                "rmapbt root",
                "-c 'agf 0' -c 'write -d rmaproot 0' -c 'sb 0' -c 'write -d fdblocks 3'",
                true,
                true,
                SPACE,
            ),
            // A node's low key that is not its child's first: xfs_repair
            // 7.2 -n does not look; a lookup would go astray.
            (
                "rmapbt key",
                "-c 'agf 0' -c 'addr rmaproot' -c 'write -d keys[2].startblock 7'",
                true,
                false,
                SPACE,
            ),
            (
                "finobt root",
                "-c 'agi 0' -c 'write -d free_root 0'",
                false,
                true,
                FINO,
            ),
            (
                "finobt record",
                "-c 'agi 0' -c 'addr free_root' -c 'write -d recs[3].freecount 9'",
                false,
                true,
                FINO,
            ),
            (
                "inobt root",
                "-c 'agi 0' -c 'write -d root 0' -c 'sb 0' -c 'write -d icount 9'",
                true,
                true,
                INO,
            ),
            (
                "inobt block",
                "-c 'agi 0' -c 'addr root' -c 'write -d magic 0'",
                true,
                true,
                INO,
            ),
            (
                "refcountbt root",
                "-c 'agf 0' -c 'write -d refcntroot 0'",
                true,
                true,
                REFC,
            ),
        ] {
            if rmap && !rmapbt {
                continue;
            }
            let rebuilt_rmap = name.starts_with("rmapbt");
            let name = format!("{name} (rmapbt={rmapbt})");
            let img = copy(&base, &d.join("case.img"));
            let i = img.to_str().unwrap();
            sh(&format!(
                "'{}/xfs_db' -x {damage} '{i}' >/dev/null",
                bin.display()
            ));
            let (ok, _) = repair_n(&bin, &img);
            assert_eq!(!ok, theirs, "{name}: xfs_repair -n");
            assert!(!xfskit_output(&["check", i]).status.success(), "{name}");
            let before = sha(&img);
            let dry = xfskit_output(&["repair", "--dry-run", i]);
            let dry = String::from_utf8_lossy(&dry.stdout).into_owned();
            assert!(
                dry.contains(&format!("would fix: AG 0: {words}")),
                "{name}: {dry}"
            );
            assert_eq!(
                dry.contains("and its rmapbt"),
                rebuilt_rmap,
                "{name}: {dry}"
            );
            assert_eq!(sha(&img), before, "{name}: --dry-run wrote");
            let out = xfskit_ok(&["repair", i]);
            assert!(
                out.contains(if words == SPACE {
                    "free space btrees rebuilt"
                } else {
                    words
                }),
                "{name}: {out}"
            );
            assert_eq!(
                out.contains("rmapbt rebuilt"),
                rebuilt_rmap,
                "{name}: {out}"
            );
            assert!(out.contains("the filesystem is clean"), "{name}: {out}");
            let c = xfskit_output(&["check", i]);
            assert!(
                c.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&c.stdout)
            );
            let (ok, out) = repair_n(&bin, &img);
            assert!(ok, "{name}: xfs_repair -n after xfskit repair:\n{out}");
            let got = sh(&format!(
                "for f in $('{0}' ls '{i}' /f | sort); do '{0}' cat '{i}' /f/$f; done | cksum",
                env!("CARGO_BIN_EXE_xfskit")
            ));
            assert_eq!(got, kept, "{name}: the files' data changed");
            let after = sha(&img);
            let again = xfskit_ok(&["repair", i]);
            assert!(again.contains("nothing to repair"), "{name}: {again}");
            assert_eq!(sha(&img), after, "{name}: a second repair wrote");
            // The kernel allocates from the rebuilt trees: a file filling
            // most of the free space, then xfs_repair -n again.
            if is_root() {
                let mnt = d.join("mnt");
                sh(&format!(
                    "mkdir -p '{1}' && mount -o loop '{0}' '{1}' && head -c 200m /dev/zero > '{1}/fill' && rm '{1}/f/1000' && umount '{1}'",
                    img.display(),
                    mnt.display()
                ));
                let (ok, out) = repair_n(&bin, &img);
                assert!(ok, "{name}: xfs_repair -n after the kernel wrote:\n{out}");
            } else {
                eprintln!(
                    "{name}: not root: the kernel's writes into the rebuilt trees are not tried"
                );
            }
        }
    }
}

/// Shared extents the kernel made (cp --reflink of 300 files) survive a
/// refcount btree whose root is lost: the rebuilt tree holds the records
/// the kernel's did, and xfs_repair -n 7.2 counts the same owners.
#[test]
fn refcount_btree_of_reflinked_files_is_rebuilt() {
    let name = "refcount_btree_of_reflinked_files_is_rebuilt";
    if !is_root() {
        skip(name, "needs root (a loop mount to reflink files)");
        return;
    }
    let Some(bin) = bin72() else {
        skip(name, "no xfsprogs 7.2 at ../shared/xfsprogs-7.2");
        return;
    };
    let t = TempDir::new("repair-refc");
    let d = t.path();
    let img = d.join("rl.img");
    let i = img.to_str().unwrap();
    let mnt = d.join("mnt");
    sh(&format!(
        "truncate -s 320m '{i}' && '{0}/mkfs.xfs' -q -f '{i}' && mkdir -p '{1}' && mount -o loop '{i}' '{1}' && mkdir '{1}/d' && for n in $(seq 1 300); do head -c 20000 /dev/urandom > '{1}/d/a'$n && cp --reflink=always '{1}/d/a'$n '{1}/d/b'$n; done && umount '{1}'",
        bin.display(),
        mnt.display()
    ));
    let recs = || {
        sh(&format!(
            "'{}/xfs_db' -r -c 'agf 0' -c 'addr refcntroot' -c 'print recs' '{i}'",
            bin.display()
        ))
    };
    let before = recs();
    assert!(before.contains(",2,0]"), "no shared extents: {before}");
    sh(&format!(
        "'{}/xfs_db' -x -c 'agf 0' -c 'write -d refcntroot 0' '{i}' >/dev/null",
        bin.display()
    ));
    let (ok, _) = repair_n(&bin, &img);
    assert!(!ok, "xfs_repair -n sees no damage");
    let out = xfskit_ok(&["repair", i]);
    assert!(
        out.contains("refcount btree rebuilt from the files' data mappings"),
        "{out}"
    );
    assert!(out.contains("the filesystem is clean"), "{out}");
    let (ok, out) = repair_n(&bin, &img);
    assert!(ok, "xfs_repair -n after xfskit repair:\n{out}");
    assert_eq!(
        recs(),
        before,
        "the shared extents differ from the kernel's"
    );
}

/// A data fork that cannot be read (extent count zeroed or out of range,
/// format set to btree) is rebuilt from the inode's reverse mappings:
/// the file keeps its five extents and its contents, a block directory
/// its entries, where xfs_repair 7.2 clears the inode or drops its
/// blocks; check and xfs_repair -n are clean after, and a second repair
/// writes nothing. Without an rmapbt, repair does what xfs_repair does
/// (the block count follows the fork, the blocks are freed).
#[test]
fn data_forks_are_rebuilt_from_the_rmapbt() {
    let Some(bin) = bin72() else {
        skip(
            "data_forks_are_rebuilt_from_the_rmapbt",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-fork");
    let d = t.path();
    let sparse = d.join("sp");
    // Five 64 KiB pieces 1 MiB apart: five extents.
    sh(&format!(
        "for i in 0 2 4 6 8; do head -c 65536 /dev/urandom | dd of='{0}' bs=64k seek=$((i*16)) conv=notrunc status=none; done && mkdir -p '{1}/big' && for i in $(seq 1 40); do echo $i > '{1}/big/file'$i; done",
        sparse.display(),
        d.display()
    ));
    let want = sha(&sparse);
    for rmapbt in [true, false] {
        let base = d.join(format!("base-{rmapbt}.img"));
        let b = base.to_str().unwrap();
        sh(&format!(
            "truncate -s 320m '{b}' && '{}/mkfs.xfs' -q -f -m rmapbt={} '{b}'",
            bin.display(),
            u8::from(rmapbt)
        ));
        xfskit_ok(&["cp", sparse.to_str().unwrap(), &format!("{b}:/sp")]);
        xfskit_ok(&[
            "cp",
            "-r",
            &format!("{}/big", d.display()),
            &format!("{b}:/big"),
        ]);
        let map = xfskit_ok(&["stat", b, "/sp"]);
        assert_eq!(
            map.lines().filter(|l| l.contains(" 000000")).count(),
            5,
            "the test needs five extents:\n{map}"
        );
        let (sp, big) = (ino_of(&base, "/sp"), ino_of(&base, "/big"));
        let listing = xfskit_ok(&["ls", b, "/big"]);
        let cases: &[(&str, u64, &str)] = if rmapbt {
            &[
                ("nextents zeroed", sp, "write -d core.nextents 0"),
                ("nextents out of range", sp, "write -d core.nextents 2018"),
                ("format btree", sp, "write -d core.format 3"),
                ("directory nextents zeroed", big, "write -d core.nextents 0"),
            ]
        } else {
            &[("nextents zeroed, no rmapbt", sp, "write -d core.nextents 0")]
        };
        for &(name, ino, damage) in cases {
            let img = copy(&base, &d.join("case.img"));
            let i = img.to_str().unwrap();
            sh(&format!(
                "'{}/xfs_db' -x -c 'inode {ino}' -c '{damage}' '{i}' >/dev/null",
                bin.display()
            ));
            let (ok, _) = repair_n(&bin, &img);
            assert!(!ok, "{name}: xfs_repair -n sees no damage");
            let out = output_text(&xfskit_output(&["repair", i]));
            assert!(out.contains("the filesystem is clean"), "{name}:\n{out}");
            let rebuilt = out.contains("data fork rebuilt from the rmapbt");
            assert_eq!(rebuilt, rmapbt, "{name}:\n{out}");
            let (ok, theirs) = repair_n(&bin, &img);
            assert!(ok, "{name}: xfs_repair -n after xfskit repair:\n{theirs}");
            let check = xfskit_output(&["check", i]);
            assert!(
                check.status.success(),
                "{name}: check after repair:\n{}",
                output_text(&check)
            );
            let before = sha(&img);
            let again = output_text(&xfskit_output(&["repair", i]));
            assert!(
                again.contains("nothing to repair"),
                "{name}: second repair:\n{again}"
            );
            assert_eq!(sha(&img), before, "{name}: a second repair wrote");
            if rmapbt {
                let out_file = d.join("out");
                let _ = std::fs::remove_file(&out_file);
                xfskit_ok(&["cp", &format!("{i}:/sp"), out_file.to_str().unwrap()]);
                assert_eq!(sha(&out_file), want, "{name}: /sp's contents changed");
                assert_eq!(
                    xfskit_ok(&["ls", i, "/big"]),
                    listing,
                    "{name}: /big's entries"
                );
            } else {
                // As xfs_repair: the blocks the fork no longer maps freed.
                assert!(out.contains("core.nblocks set to 0"), "{name}:\n{out}");
            }
        }
    }
}

/// A file of `n` 4 KiB pieces 8 KiB apart (`n` extents once copied in),
/// of bytes made from a seed.
fn holey_file(path: &Path, n: u64, seed: u64) -> Vec<u8> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::File::create(path).unwrap();
    let mut x = seed;
    for i in 0..n {
        let piece: Vec<u8> = (0..4096)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        f.seek(SeekFrom::Start(i * 8192)).unwrap();
        f.write_all(&piece).unwrap();
    }
    drop(f);
    std::fs::read(path).unwrap()
}

/// A data fork whose extents do not fit in the inode, its bmbt damaged
/// with xfs_db 7.2 (a leaf's or node's magic, the root in the inode,
/// records out of order), is rebuilt from the rmapbt as a bmbt through
/// the journal: the file keeps every extent and its contents (read back
/// by xfskit and, as root, by the kernel), the new tree is a btree of
/// the same extent count, xfs_repair -n and check are clean after, and a
/// second repair writes nothing. xfs_repair 7.2 would clear such inodes
/// or drop their blocks.
#[test]
fn data_forks_too_big_for_the_inode_are_rebuilt_as_a_bmbt() {
    let Some(bin) = bin72() else {
        skip(
            "data_forks_too_big_for_the_inode_are_rebuilt_as_a_bmbt",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-bmbt");
    let d = t.path();
    // 600 extents: a one-level tree of three leaves; 4000: two levels.
    for (n, cases) in [
        (
            600u64,
            &[
                (
                    "leaf magic",
                    &["addr u3.bmbt.ptrs[2]", "write -d magic 0"][..],
                ),
                (
                    "leaf owner",
                    &["addr u3.bmbt.ptrs[3]", "write -d owner 5"][..],
                ),
                (
                    "leaf records out of order",
                    &["addr u3.bmbt.ptrs[1]", "write -d recs[5].startoff 0"][..],
                ),
                ("root level", &["write -d u3.bmbt.level 0"][..]),
                ("root pointer", &["write -d u3.bmbt.ptrs[2] 99999"][..]),
                ("root numrecs", &["write -d u3.bmbt.numrecs 1"][..]),
            ][..],
        ),
        (
            4000,
            &[
                (
                    "node magic",
                    &["addr u3.bmbt.ptrs[1]", "write -d magic 0"][..],
                ),
                (
                    "leaf under a node",
                    &["addr u3.bmbt.ptrs[1]", "addr ptrs[3]", "write -d magic 0"][..],
                ),
            ][..],
        ),
    ] {
        let src = d.join(format!("src{n}"));
        let want = holey_file(&src, n, n);
        let base = d.join(format!("base{n}.img"));
        let b = base.to_str().unwrap();
        sh(&format!(
            "truncate -s 320m '{b}' && '{}/mkfs.xfs' -q -f '{b}'",
            bin.display()
        ));
        xfskit_ok(&["cp", src.to_str().unwrap(), &format!("{b}:/f")]);
        let stat = xfskit_ok(&["stat", b, "/f"]);
        assert!(
            stat.contains("format: Btree") && stat.contains(&format!("nextents: {n}")),
            "the test needs a btree fork of {n} extents:\n{stat}"
        );
        let ino = ino_of(&base, "/f");
        for &(name, damage) in cases {
            let name = format!("{name} ({n} extents)");
            let img = copy(&base, &d.join("case.img"));
            let i = img.to_str().unwrap();
            let cmds: String = damage.iter().map(|c| format!(" -c '{c}'")).collect();
            sh(&format!(
                "'{}/xfs_db' -x -c 'inode {ino}'{cmds} '{i}' >/dev/null",
                bin.display()
            ));
            let (ok, _) = repair_n(&bin, &img);
            assert!(!ok, "{name}: xfs_repair -n sees no damage");
            let out = output_text(&xfskit_output(&["repair", i]));
            assert!(
                out.contains(&format!(
                    "inode {ino}: data fork rebuilt from the rmapbt as a bmbt: {n} extent(s)"
                )),
                "{name}:\n{out}"
            );
            assert!(out.contains("the filesystem is clean"), "{name}:\n{out}");
            let (ok, theirs) = repair_n(&bin, &img);
            assert!(ok, "{name}: xfs_repair -n after xfskit repair:\n{theirs}");
            let check = xfskit_output(&["check", i]);
            assert!(
                check.status.success(),
                "{name}: check after repair:\n{}",
                output_text(&check)
            );
            let stat = xfskit_ok(&["stat", i, "/f"]);
            assert!(
                stat.contains("format: Btree") && stat.contains(&format!("nextents: {n}")),
                "{name}: not a btree of {n} extents after repair:\n{stat}"
            );
            let out_file = d.join("out");
            let _ = std::fs::remove_file(&out_file);
            xfskit_ok(&["cp", &format!("{i}:/f"), out_file.to_str().unwrap()]);
            assert!(
                std::fs::read(&out_file).unwrap() == want,
                "{name}: /f's contents changed"
            );
            let before = sha(&img);
            let again = output_text(&xfskit_output(&["repair", i]));
            assert!(
                again.contains("nothing to repair"),
                "{name}: second repair:\n{again}"
            );
            assert_eq!(sha(&img), before, "{name}: a second repair wrote");
            if is_root() {
                let mnt = d.join("mnt");
                let kernel = d.join("kernel");
                sh(&format!(
                    "mkdir -p '{1}' && mount -o ro,loop '{0}' '{1}' && {{ cp '{1}/f' '{2}' || true; }} && umount '{1}'",
                    img.display(),
                    mnt.display(),
                    kernel.display()
                ));
                assert!(
                    std::fs::read(&kernel).unwrap() == want,
                    "{name}: the kernel reads other contents"
                );
            }
        }
    }
}

#[test]
fn a_dirty_kernel_log_is_replayed_not_destroyed() {
    if !is_root() {
        skip(
            "a_dirty_kernel_log_is_replayed_not_destroyed",
            "needs root (loop mount, shutdown)",
        );
        return;
    }
    if let Some(m) = missing_tool(&["xfs_io", "mkfs.xfs"]) {
        skip("a_dirty_kernel_log_is_replayed_not_destroyed", &m);
        return;
    }
    let Some(bin) = bin72() else {
        skip(
            "a_dirty_kernel_log_is_replayed_not_destroyed",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-log");
    let d = t.path();
    let img = d.join("k.img");
    let mnt = d.join("mnt");
    sh(&format!(
        "truncate -s 1g '{0}' && mkfs.xfs -q -f '{0}' && mkdir -p '{1}' && mount -o loop '{0}' '{1}' \
         && mkdir '{1}/d' && for i in $(seq 1 300); do echo file $i > '{1}/d/f'$i; done && sync \
         && for i in $(seq 301 400); do echo file $i > '{1}/d/f'$i; done && xfs_io -c fsync '{1}/d/f400' \
         && xfs_io -x -c 'shutdown -f' '{1}' && umount '{1}'",
        img.display(),
        mnt.display()
    ));
    let copy = d.join("copy.img");
    sh(&format!(
        "cp --sparse=always '{}' '{}'",
        img.display(),
        copy.display()
    ));
    // xfs_repair refuses a dirty log (exit 2) until -L destroys it.
    let o = std::process::Command::new(bin.join("xfs_repair"))
        .arg(&copy)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "xfs_repair on a dirty log: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let i = img.to_str().unwrap();
    let out = xfskit_ok(&["repair", i]);
    assert!(out.contains("log: replayed the log"), "{out}");
    let (ok, rep) = repair_n(&bin, &img);
    assert!(ok, "xfs_repair -n after xfskit repair:\n{rep}");
    let ls = xfskit_ok(&["ls", i, "/d"]);
    assert_eq!(
        ls.lines().count(),
        400,
        "files the kernel synced are gone:\n{ls}"
    );
    assert_eq!(xfskit_ok(&["cat", i, "/d/f400"]), "file 400\n");
    // xfs_repair -L on the copy loses what only the log held.
    let o = std::process::Command::new(bin.join("xfs_repair"))
        .args(["-L", copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "xfs_repair -L: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let kept = xfskit_output(&["ls", copy.to_str().unwrap(), "/d"]);
    let n = String::from_utf8_lossy(&kept.stdout).lines().count();
    eprintln!("files kept: xfskit repair 400, xfs_repair -L {n}");
    assert!(n <= 400);
}

/// The inode number of `path` in `img`.
fn ino_of(img: &Path, path: &str) -> u64 {
    let out = xfskit_ok(&["stat", img.to_str().unwrap(), path]);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("ino:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ino for {path}: {out}"))
}

/// The index of entry `name` of a short-form directory (`list`) or of a
/// directory block (`bu`), as xfs_db prints it.
fn entry_index(bin: &Path, img: &Path, dir: u64, block: bool, name: &str) -> usize {
    let cmds = if block {
        format!("-c 'inode {dir}' -c 'dblock 0' -c print")
    } else {
        format!("-c 'inode {dir}' -c 'print u3'")
    };
    let out = sh(&format!(
        "'{}/xfs_db' -r {cmds} '{}'",
        bin.display(),
        img.display()
    ));
    let key = if block { "bu[" } else { "list[" };
    out.lines()
        .find_map(|l| {
            let l = l.trim();
            let at = l.find(key)?;
            let rest = &l[at + key.len()..];
            let (idx, tail) = rest.split_once(']')?;
            (tail.trim() == format!(".name = \"{name}\"")).then(|| idx.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no entry {name} in {dir}:\n{out}"))
}

/// Names, kinds and link counts of everything under `/`, one per line.
fn tree(img: &Path) -> String {
    let out = xfskit_ok(&["ls", "-lR", img.to_str().unwrap(), "/"]);
    // Keep the kind and mode, the link count, the size and the name.
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 7 {
                format!("{} {} {} {}", f[0], f[1], f[4], f[7..].join(" "))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn namespace_damage_is_repaired_keeping_names() {
    let Some(bin) = bin72() else {
        skip(
            "namespace_damage_is_repaired_keeping_names",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-ns");
    let d = t.path();
    // A tree with short-form directories and a block directory, on
    // mkfs.xfs 7.2's defaults (parent pointers) and without them.
    sh(&format!(
        "mkdir -p '{0}/s/d1/d2' '{0}/s/big' && echo hi > '{0}/s/d1/f1' && echo yo > '{0}/s/d1/d2/f2' \
         && echo z > '{0}/s/top' && for i in $(seq 1 40); do echo $i > '{0}/s/big/file'$i; done",
        d.display()
    ));
    let make = |name: &str, opts: &str| {
        let img = d.join(name);
        sh(&format!(
            "truncate -s 320m '{0}' && '{1}/mkfs.xfs' -q -f {opts} '{0}'",
            img.display(),
            bin.display()
        ));
        xfskit_ok(&[
            "cp",
            "-r",
            &format!("{}/s", d.display()),
            &format!("{}:/s", img.display()),
        ]);
        img
    };
    let pptr = make("pptr.img", "");
    let plain = make("plain.img", "-n parent=0");
    for base in [&pptr, &plain] {
        let with_pptr = base == &pptr;
        let d1 = ino_of(base, "/s/d1");
        let d2 = ino_of(base, "/s/d1/d2");
        let f1 = ino_of(base, "/s/d1/f1");
        let big = ino_of(base, "/s/big");
        let s = ino_of(base, "/s");
        // Free inodes of d1's and big's chunks (64 inodes, far fewer used).
        let free1 = d1 + 50;
        let free2 = big + 60;
        let i_f1 = entry_index(&bin, base, d1, false, "f1");
        let i_d2 = entry_index(&bin, base, d1, false, "d2");
        let i_b = entry_index(&bin, base, big, true, "file10");
        let f2 = ino_of(base, "/s/d1/d2/f2");
        let cases: Vec<(&str, String)> = vec![
            // Inode cores: rewritten in place, the file kept.
            ("crc", format!("-c 'inode {f1}' -c 'write -c core.gen 5'")),
            (
                "magic",
                format!("-c 'inode {f1}' -c 'write -d core.magic 0'"),
            ),
            (
                "onlink",
                format!("-c 'inode {f2}' -c 'write -d core.onlink 7'"),
            ),
            (
                "attr-fork",
                format!("-c 'inode {f2}' -c 'fuzz -d core.aformat add'"),
            ),
            // An inode that cannot be decoded: cleared, as xfs_repair does.
            ("cleared", format!("-c 'inode {f1}' -c 'write core.mode 0'")),
            // A directory block that cannot be read: emptied and refilled
            // from the parent pointers (left alone without them).
            (
                "dir-block",
                format!("-c 'inode {big}' -c 'dblock 0' -c 'fuzz -d bu[3].namelen zeroes'"),
            ),
            (
                "nlink",
                format!("-c 'inode {f1}' -c 'write core.nlinkv2 3'"),
            ),
            (
                "ftype",
                format!("-c 'inode {d1}' -c 'write u3.sfdir3.list[{i_f1}].filetype 2'"),
            ),
            (
                "dotdot",
                format!("-c 'inode {d2}' -c 'write u3.sfdir3.hdr.parent.i4 {s}'"),
            ),
            (
                "lost-file",
                format!("-c 'inode {d1}' -c 'write u3.sfdir3.list[{i_f1}].inumber.i4 {free1}'"),
            ),
            (
                "lost-dir",
                format!("-c 'inode {d1}' -c 'write u3.sfdir3.list[{i_d2}].inumber.i4 {free1}'"),
            ),
            (
                "block-dir",
                format!("-c 'inode {big}' -c 'dblock 0' -c 'write bu[{i_b}].inumber {free2}'"),
            ),
            // A second entry for a directory (one pointing at its own
            // directory, one elsewhere): dropped, the file it named
            // put back by its parent pointer.
            (
                "dir-twice",
                format!("-c 'inode {d1}' -c 'write u3.sfdir3.list[{i_f1}].inumber.i4 {d1}'"),
            ),
            (
                "dir-twice-block",
                format!("-c 'inode {big}' -c 'dblock 0' -c 'write bu[{i_b}].inumber {d1}'"),
            ),
        ];
        let whole = tree(base);
        for (name, cmds) in cases {
            if name == "dir-block" && !with_pptr {
                continue;
            }
            let tag = format!("{}-{name}", if with_pptr { "pptr" } else { "plain" });
            let img = d.join(format!("{tag}.img"));
            let theirs = d.join(format!("{tag}.theirs.img"));
            sh(&format!(
                "cp --sparse=always '{0}' '{1}' && '{2}/xfs_db' -x {cmds} '{1}' >/dev/null && cp --sparse=always '{1}' '{3}'",
                base.display(),
                img.display(),
                bin.display(),
                theirs.display()
            ));
            let i = img.to_str().unwrap();
            let (ok, out) = repair_n(&bin, &img);
            assert!(!ok, "{tag}: xfs_repair -n finds nothing:\n{out}");
            let before = sha(&img);
            let o = xfskit_output(&["repair", "--dry-run", i]);
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            assert_eq!(o.status.code(), Some(1), "{tag}: {text}");
            assert!(text.contains("would fix: "), "{tag}: {text}");
            assert!(!text.contains("would remain"), "{tag}: {text}");
            assert_eq!(sha(&img), before, "{tag}: --dry-run wrote");
            let undo = d.join(format!("{tag}.undo"));
            let out = xfskit_ok(&["repair", "--undo", undo.to_str().unwrap(), i]);
            assert!(out.contains("the filesystem is clean"), "{tag}: {out}");
            let c = xfskit_output(&["check", i]);
            assert!(
                c.status.success(),
                "{tag}: check after repair: {}",
                String::from_utf8_lossy(&c.stdout)
            );
            let (ok, rn) = repair_n(&bin, &img);
            assert!(
                ok,
                "{tag}: xfs_repair -n after xfskit repair:\n{rn}\nrepair said:\n{out}"
            );
            // xfs_repair on the same damage.
            sh(&format!(
                "'{}/xfs_repair' '{}' >/dev/null 2>&1",
                bin.display(),
                theirs.display()
            ));
            let ours = tree(&img);
            let them = tree(&theirs);
            let lost = matches!(
                name,
                "lost-file"
                    | "lost-dir"
                    | "block-dir"
                    | "dir-block"
                    | "dir-twice"
                    | "dir-twice-block"
            );
            if name == "cleared" {
                // The file whose inode was cleared is gone, as with
                // xfs_repair.
                assert_eq!(ours, them, "{tag}: differs from xfs_repair's result\n{out}");
                assert!(!ours.contains(" f1"), "{tag}: {ours}");
            } else if with_pptr || !lost {
                // Every name back where it was: the parent pointers say
                // where a lost name was.
                assert_eq!(
                    ours, whole,
                    "{tag}: the tree differs from the undamaged one\n{out}"
                );
                if lost {
                    assert!(
                        them.contains("lost+found"),
                        "{tag}: xfs_repair kept the path too:\n{them}"
                    );
                }
            } else {
                // Without parent pointers, lost+found by inode number, as
                // xfs_repair does.
                assert_eq!(ours, them, "{tag}: differs from xfs_repair's result\n{out}");
            }
            for (path, want) in [("/s/top", "z\n"), ("/s/big/file40", "40\n")] {
                assert_eq!(xfskit_ok(&["cat", i, path]), want, "{tag}: {path}");
            }
            // Again: nothing to do, nothing written.
            let after = sha(&img);
            let again = xfskit_ok(&["repair", i]);
            assert!(again.contains("nothing to repair"), "{tag}: {again}");
            assert_eq!(sha(&img), after, "{tag}: a second repair wrote");
            // The undo file brings the damage back, byte for byte.
            let repaired = d.join(format!("{tag}.repaired.img"));
            sh(&format!(
                "cp --sparse=always '{}' '{}'",
                img.display(),
                repaired.display()
            ));
            xfskit_ok(&["undo", undo.to_str().unwrap(), i]);
            assert_eq!(sha(&img), before, "{tag}: undo");
            if is_root() {
                // The kernel mounts the repaired image, reads and writes it.
                let mnt = d.join("mnt");
                sh(&format!(
                    "mkdir -p '{1}' && mount -o loop '{0}' '{1}' && ls -R '{1}' >/dev/null \
                     && cat '{1}/s/top' >/dev/null && echo new > '{1}/s/new' && umount '{1}'",
                    repaired.display(),
                    mnt.display()
                ));
                let (ok, rn) = repair_n(&bin, &repaired);
                assert!(ok, "{tag}: xfs_repair -n after the kernel wrote:\n{rn}");
            } else {
                eprintln!("{tag}: not root: the kernel's mount of the repaired image is not tried");
            }
            std::fs::remove_file(&img).unwrap();
            std::fs::remove_file(&repaired).unwrap();
            std::fs::remove_file(&theirs).unwrap();
        }
    }
}

/// The log area of `img`: its first byte and its length in bytes (from
/// `xfskit log --json` and xfs_db's block size).
fn log_area(bin: &Path, img: &Path) -> (u64, u64) {
    let v: serde_json::Value =
        serde_json::from_str(&xfskit_ok(&["log", "--json", img.to_str().unwrap()])).unwrap();
    let bs = sh(&format!(
        "'{}/xfs_db' -r -c 'sb 0' -c 'p blocksize' '{}'",
        bin.display(),
        img.display()
    ));
    let bs: u64 = bs
        .trim()
        .trim_start_matches("blocksize = ")
        .parse()
        .unwrap();
    (
        v["log_start_daddr"].as_u64().unwrap() * 512,
        v["log_blocks"].as_u64().unwrap() * bs,
    )
}

fn log_bytes(bin: &Path, img: &Path) -> Vec<u8> {
    use std::io::{Read, Seek};
    let (start, len) = log_area(bin, img);
    let mut f = std::fs::File::open(img).unwrap();
    f.seek(std::io::SeekFrom::Start(start)).unwrap();
    let mut b = vec![0u8; len as usize];
    f.read_exact(&mut b).unwrap();
    b
}

/// The cycle stamped on each 512-byte block of a log (a record header's
/// second word, any other block's first).
fn cycles(log: &[u8]) -> Vec<u32> {
    log.chunks(512)
        .map(|b| {
            let w = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
            if w(0) == 0xfeed_babe {
                w(4)
            } else {
                w(0)
            }
        })
        .collect()
}

/// A dirty log left by the kernel (root): 300 files written and frozen
/// (metadata written back, its LSNs past block 2 of cycle 1), then 100
/// more, each fsynced (a record each), then a shutdown.
fn kernel_dirty_log(dir: &Path) -> PathBuf {
    let img = dir.join("k.img");
    let mnt = dir.join("mnt");
    sh(&format!(
        "truncate -s 1g '{0}' && mkfs.xfs -q -f '{0}' && mkdir -p '{1}' && mount -o loop '{0}' '{1}' \
         && mkdir '{1}/d' && for i in $(seq 1 300); do echo file $i > '{1}/d/f'$i; done \
         && xfs_freeze -f '{1}' && xfs_freeze -u '{1}' \
         && for i in $(seq 301 400); do echo file $i > '{1}/d/f'$i; xfs_io -c fsync '{1}/d/f'$i; done \
         && xfs_io -x -c 'shutdown -f' '{1}' && umount '{1}'",
        img.display(),
        mnt.display()
    ));
    img
}

fn copy(from: &Path, to: &Path) -> PathBuf {
    sh(&format!(
        "cp --sparse=always '{}' '{}'",
        from.display(),
        to.display()
    ));
    to.to_path_buf()
}

fn run72(bin: &Path, tool: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin.join(tool))
        .args(args)
        .output()
        .unwrap()
}

/// Mounts `img` (root), writes a file, unmounts; returns the kernel's
/// messages meanwhile (those after a marker written to /dev/kmsg).
fn mount_write_umount(img: &Path, mnt: &Path) -> String {
    let marker = format!(
        "xfskit-repair-test-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    );
    sh(&format!(
        "echo '{marker}' > /dev/kmsg && mkdir -p '{1}' && mount -o loop '{0}' '{1}' && echo new > '{1}/new' && umount '{1}'",
        img.display(),
        mnt.display()
    ));
    let all = sh("dmesg");
    let at = all
        .find(&marker)
        .unwrap_or_else(|| panic!("marker not in dmesg"));
    all[at..].to_string()
}

fn log_test_prereqs(name: &str) -> Option<PathBuf> {
    if !is_root() {
        skip(name, "needs root (loop mount, shutdown)");
        return None;
    }
    if let Some(m) = missing_tool(&["xfs_io", "mkfs.xfs", "xfs_freeze", "dmesg"]) {
        skip(name, &m);
        return None;
    }
    let Some(bin) = bin72() else {
        skip(name, "no xfsprogs 7.2 at ../shared/xfsprogs-7.2");
        return None;
    };
    Some(bin)
}

#[test]
fn zero_log_clears_a_dirty_kernel_log_as_xfs_repair_l_does() {
    let Some(bin) = log_test_prereqs("zero_log_clears_a_dirty_kernel_log_as_xfs_repair_l_does")
    else {
        return;
    };
    let t = TempDir::new("repair-zerolog");
    let d = t.path();
    let dirty = kernel_dirty_log(d);
    let ours = copy(&dirty, &d.join("ours.img"));
    let theirs = copy(&dirty, &d.join("theirs.img"));
    let i = ours.to_str().unwrap();
    let before = sha(&ours);

    // --dry-run says what would be lost and writes nothing.
    let o = xfskit_output(&["repair", "--dry-run", "--zero-log", "--json", i]);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["log"].as_str().unwrap().contains("would clear it"), "{v}");
    assert!(
        v["log_lost"]["transactions"].as_u64().unwrap() >= 100,
        "{v}"
    );
    assert!(v["log_lost"]["items"]["INODE"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(sha(&ours), before, "--dry-run --zero-log wrote");

    // Cleared, with an undo file that puts the dirty log back.
    let undo = d.join("zero.undo");
    let o = xfskit_output(&[
        "repair",
        "-L",
        "--undo",
        undo.to_str().unwrap(),
        "--json",
        i,
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["log"].as_str().unwrap().starts_with("cleared the log"),
        "{v}"
    );
    assert!(v["log_lost"]["records"].as_u64().unwrap() >= 100, "{v}");
    assert_eq!(v["clean"], true, "{v}");
    let o = run72(&bin, "xfs_repair", &["-L", theirs.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "xfs_repair -L: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Both clean for xfs_repair -n and check.
    for img in [&ours, &theirs] {
        let (ok, out) = repair_n(&bin, img);
        assert!(ok, "{}: xfs_repair -n:\n{out}", img.display());
        let c = xfskit_output(&["check", img.to_str().unwrap()]);
        assert!(
            c.status.success(),
            "{}: check: {}",
            img.display(),
            String::from_utf8_lossy(&c.stdout)
        );
        let log = xfskit_ok(&["log", img.to_str().unwrap()]);
        assert!(log.contains(", clean"), "{}: {log}", img.display());
        assert!(
            log.contains("head: block 0 cycle 4"),
            "{}: {log}",
            img.display()
        );
        let lp = run72(&bin, "xfs_logprint", &["-t", img.to_str().unwrap()]);
        let lp = String::from_utf8_lossy(&lp.stdout).into_owned();
        assert!(
            lp.contains("state: <CLEAN>"),
            "{}: xfs_logprint:\n{lp}",
            img.display()
        );
    }
    // The same log, block for block: the record of cycle 4 at block 0, zeros
    // to block 512, then records of cycle 3 to the end.
    let (a, b) = (log_bytes(&bin, &ours), log_bytes(&bin, &theirs));
    let (ca, cb) = (cycles(&a), cycles(&b));
    assert_eq!(&ca[..2], &[4, 4]);
    assert!(ca[2..512].iter().all(|&c| c == 0));
    assert!(ca[512..].iter().all(|&c| c == 3));
    assert_eq!(ca, cb, "the cycles differ from xfs_repair -L's");
    let differ = a.chunks(512).zip(b.chunks(512)).position(|(x, y)| x != y);
    assert_eq!(
        differ, None,
        "the log differs from xfs_repair -L's at block {differ:?}"
    );
    // What only the log held is gone from both alike.
    let n = |img: &Path| {
        xfskit_ok(&["ls", img.to_str().unwrap(), "/d"])
            .lines()
            .count()
    };
    assert_eq!(n(&ours), n(&theirs));

    // The undo file brings the dirty log back.
    let back = copy(&ours, &d.join("back.img"));
    xfskit_ok(&["undo", undo.to_str().unwrap(), back.to_str().unwrap()]);
    assert_eq!(sha(&back), before, "undo");
    std::fs::remove_file(&back).unwrap();

    // The kernel mounts it without finding metadata ahead of the log.
    let msgs = mount_write_umount(&ours, &d.join("mnt"));
    assert!(msgs.contains("Ending clean mount"), "{msgs}");
    assert!(!msgs.contains("ahead of current LSN"), "{msgs}");
    assert!(!msgs.contains("Corruption"), "{msgs}");
    let (ok, out) = repair_n(&bin, &ours);
    assert!(ok, "xfs_repair -n after a kernel mount:\n{out}");
}

#[test]
fn a_corrupt_dirty_log_is_refused_unless_zero_log() {
    let Some(bin) = log_test_prereqs("a_corrupt_dirty_log_is_refused_unless_zero_log") else {
        return;
    };
    let t = TempDir::new("repair-badlog");
    let d = t.path();
    let img = kernel_dirty_log(d);
    let i = img.to_str().unwrap();
    // Garbage in the data of the oldest record (a bad CRC well behind the
    // head: no torn write, a corrupt log).
    let v: serde_json::Value = serde_json::from_str(&xfskit_ok(&["log", "--json", i])).unwrap();
    assert!(v["records"].as_u64().unwrap() > 20, "{v}");
    let tail = v["tail"]["block"].as_u64().unwrap();
    let (start, _) = log_area(&bin, &img);
    sh(&format!(
        "printf 'GARBAGEGARBAGE' | dd of='{i}' bs=1 seek={} conv=notrunc status=none",
        start + (tail + 1) * 512 + 100
    ));
    let before = sha(&img);
    for dry in [false, true] {
        let mut args = vec!["repair", i];
        if dry {
            args.insert(1, "--dry-run");
        }
        let o = xfskit_output(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(5), "repair {args:?}: {err}");
        assert!(err.contains("corrupt log at log block"), "{err}");
        assert!(err.contains("--zero-log"), "{err}");
        assert_eq!(sha(&img), before, "a refused repair wrote");
    }
    // Exit 1: the check finds the superblock counters the log would have
    // brought up to date.
    let o = xfskit_output(&["repair", "--dry-run", "-L", i]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    assert!(out.contains("it cannot be read"), "{out}");
    assert_eq!(sha(&img), before, "--dry-run --zero-log wrote");
    let out = xfskit_ok(&["repair", "-L", i]);
    assert!(out.contains("cleared the log"), "{out}");
    let (ok, rep) = repair_n(&bin, &img);
    assert!(ok, "xfs_repair -n after repair -L:\n{rep}");
    let c = xfskit_output(&["check", i]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stdout));
    assert!(xfskit_ok(&["log", i]).contains(", clean"));
    // A clean log: --zero-log writes nothing.
    let after = sha(&img);
    let out = xfskit_ok(&["repair", "-L", i]);
    assert!(out.contains("the log is clean"), "{out}");
    assert_eq!(sha(&img), after, "--zero-log on a clean log wrote");
}

#[test]
fn a_log_behind_the_metadata_lsns_is_formatted_past_them() {
    let Some(bin) = bin72() else {
        skip(
            "a_log_behind_the_metadata_lsns_is_formatted_past_them",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-lsn");
    let d = t.path();
    let ours = image(&bin, d, "ours.img");
    // Cycle 1 again: the metadata xfskit wrote is stamped at or past the
    // new head (1:2), which the kernel refuses.
    let o = run72(
        &bin,
        "xfs_db",
        &["-x", "-c", "logformat -c 1", ours.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs = copy(&ours, &d.join("theirs.img"));
    let (ok, out) = repair_n(&bin, &ours);
    assert!(
        !ok && out.contains("is ahead of log"),
        "xfs_repair -n:\n{out}"
    );
    let i = ours.to_str().unwrap();
    let c = xfskit_output(&["check", i]);
    assert!(
        String::from_utf8_lossy(&c.stdout).contains("the log must be reformatted past it"),
        "{}",
        String::from_utf8_lossy(&c.stdout)
    );
    let before = sha(&ours);
    let out = String::from_utf8_lossy(&xfskit_output(&["repair", "-n", i]).stdout).into_owned();
    assert!(out.contains("would fix: the log formatted anew"), "{out}");
    assert_eq!(sha(&ours), before, "--dry-run wrote");
    let out = xfskit_ok(&["repair", i]);
    assert!(
        out.contains("fixed: the log formatted anew, its head at 4:0"),
        "{out}"
    );
    assert!(out.contains("the filesystem is clean"), "{out}");
    let (ok, out) = repair_n(&bin, &ours);
    assert!(ok, "xfs_repair -n after xfskit repair:\n{out}");
    let o = run72(&bin, "xfs_repair", &[theirs.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        log_bytes(&bin, &ours) == log_bytes(&bin, &theirs),
        "the log differs from xfs_repair's"
    );
    let again = xfskit_ok(&["repair", i]);
    assert!(again.contains("nothing to repair"), "{again}");
}

/// CI's sample of scripts/repair-sweep.sh (fstests' offline fuzz-repair
/// method): the first three fields of each target structure (inode cores
/// of a file and a directory, a short-form and a block directory, AGF,
/// AGI), fuzzed with zeroes and ones by xfs_db 7.2: every case check
/// flags is repaired to an image that check and xfs_repair -n 7.2 call
/// clean, keeping at least the files xfs_repair keeps.
#[test]
fn fuzz_repair_sample_is_repaired_clean() {
    let Some(bin) = bin72() else {
        skip(
            "fuzz_repair_sample_is_repaired_clean",
            "no xfsprogs 7.2 at ../shared/xfsprogs-7.2",
        );
        return;
    };
    let t = TempDir::new("repair-sweep");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/repair-sweep.sh");
    let o = std::process::Command::new("bash")
        .arg(&script)
        .env("XFSPROGS", &bin)
        .env("XFSKIT", env!("CARGO_BIN_EXE_xfskit"))
        .env("OUT", t.path())
        .env("MAXFIELDS", "3")
        .env("VERBS", "zeroes ones")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let summary = out
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary:\n{out}\n{}", String::from_utf8_lossy(&o.stderr)));
    let n = |what: &str| -> u64 {
        summary
            .split(", ")
            .find_map(|p| p.trim_start_matches("summary: ").strip_prefix(what))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{what}' in {summary}"))
    };
    eprintln!("{summary}");
    assert!(o.status.success(), "{out}");
    assert_eq!(n("not clean "), 0, "{out}");
    assert_eq!(n("kept fewer files than xfs_repair "), 0, "{out}");
    assert_eq!(n("not detected by check "), 0, "{out}");
    // Six structures, three fields, two verbs: most cases change something.
    assert!(n("repaired clean ") >= 20, "{out}");
}

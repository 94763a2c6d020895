//! `xfskit mkfs --partition N` into a GPT disk made by sgdisk, raw and
//! qcow2: the new filesystem passes xfs_repair -n, the neighbouring
//! partitions and the table are untouched, `qemu-img check` finds the qcow2
//! clean, and xfskit reads the disk. No root; SKIP without the tools.

mod common;

use common::disks::{sh, sparse_file, xfskit};
use common::{missing_tool, skip, TempDir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;
/// Partitions 1, 2, 3 of the test disk (start, size in MiB).
const PARTS: [(u64, u64); 3] = [(1, 8), (9, 320), (329, 16)];

/// md5 of partition `i` (0-based) of the raw disk `disk`.
fn md5_of(disk: &Path, i: usize) -> String {
    let (start, size) = PARTS[i];
    sh(&format!(
        "dd if='{}' bs=1M skip={start} count={size} status=none | md5sum",
        disk.display()
    ))
}

/// xfs_repair -n of partition 2 of the raw disk `disk`.
fn repair_clean(disk: &Path, tmp: &Path) {
    let fs = tmp.join("p2.fs");
    let (start, size) = PARTS[1];
    let out = sh(&format!(
        "dd if='{}' of='{}' bs=1M skip={start} count={size} status=none
{} -n '{}' 2>&1 && echo REPAIR-CLEAN; rm -f '{1}'",
        disk.display(),
        fs.display(),
        common::fixtures::repair_sh(),
        fs.display()
    ));
    assert!(out.contains("REPAIR-CLEAN"), "xfs_repair -n:\n{out}");
}

#[test]
fn mkfs_into_a_partition_of_raw_and_qcow2_disks() {
    let name = "mkfs_into_a_partition_of_raw_and_qcow2_disks";
    if let Some(t) = missing_tool(&["sgdisk", "qemu-img", "xfs_repair", "md5sum"]) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let tmp = TempDir::new("xfskit-disk-mkfs");
    let t = tmp.path();
    let raw = t.join("disk.img");
    sparse_file(&raw, 346 * MIB);
    let mut cmd = String::from("sgdisk");
    for (i, (start, size)) in PARTS.iter().enumerate() {
        let n = i + 1;
        cmd += &format!(" -n{n}:{}:+{size}M", start * 2048);
    }
    sh(&format!("{cmd} '{}' >/dev/null", raw.display()));
    // Neighbours hold data that must survive.
    for (start, size) in [PARTS[0], PARTS[2]] {
        sh(&format!(
            "head -c {} /dev/urandom | dd of='{}' bs=1M seek={start} conv=notrunc status=none",
            size * MIB,
            raw.display()
        ));
    }
    let before = [md5_of(&raw, 0), md5_of(&raw, 2)];
    let q = t.join("disk.qcow2");
    sh(&format!(
        "qemu-img convert -O qcow2 '{}' '{}'",
        raw.display(),
        q.display()
    ));
    let (r, qs) = (raw.to_str().expect("utf-8"), q.to_str().expect("utf-8"));

    let m = xfskit(&["mkfs", "-q", "--partition", "2", r], LIMIT);
    assert_eq!(m.code, 0, "mkfs raw: {}", m.stderr);
    repair_clean(&raw, t);
    assert_eq!(
        [md5_of(&raw, 0), md5_of(&raw, 2)],
        before,
        "a neighbour changed"
    );
    assert!(sh(&format!("sgdisk -v '{r}'")).contains("No problems found"));
    assert_eq!(xfskit(&["ls", r, "/"], LIMIT).code, 0);

    let m = xfskit(&["mkfs", "-q", "--partition", "2", qs], LIMIT);
    assert_eq!(m.code, 0, "mkfs qcow2: {}", m.stderr);
    let check = sh(&format!("qemu-img check '{qs}' 2>&1 || true"));
    assert!(
        check.contains("No errors were found"),
        "qemu-img check:\n{check}"
    );
    assert!(!check.contains("leaked"), "qemu-img check:\n{check}");
    let back = t.join("back.img");
    sh(&format!(
        "qemu-img convert -O raw '{qs}' '{}'",
        back.display()
    ));
    repair_clean(&back, t);
    assert_eq!(
        [md5_of(&back, 0), md5_of(&back, 2)],
        before,
        "a neighbour changed (qcow2)"
    );
    let r2 = xfskit(&["check", qs], LIMIT);
    assert_eq!(r2.code, 0, "check: {}{}", r2.stdout, r2.stderr);

    // A second mkfs needs -f; a partition the disk lacks is refused.
    let again = xfskit(&["mkfs", "-q", "--partition", "2", qs], LIMIT);
    assert!(
        again.code != 0 && again.stderr.contains("-f"),
        "{}",
        again.stderr
    );
    let none = xfskit(&["mkfs", "-q", "--partition", "7", r], LIMIT);
    assert!(
        none.code != 0 && none.stderr.contains("no partition 7"),
        "{}",
        none.stderr
    );
}

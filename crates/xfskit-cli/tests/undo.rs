//! `--undo FILE` and `xfskit undo`: edits, admin changes and a quotacheck
//! (label, UUID: the metadata UUID names the filesystem after) with an
//! undo file, on a bare image made by mkfs.xfs and on a qcow2 GPT
//! disk, are put back by `xfskit undo` byte for byte (the bare image
//! compared with `cmp`, the disk with `qemu-img compare`); an undo file is
//! refused on another filesystem and by commands that do not write.

mod common;

use common::disks::sh;
use common::fixtures::{xfskit_ok, xfskit_output};
use common::{missing_tool, skip, TempDir};

#[test]
fn edits_are_undone_byte_for_byte() {
    if let Some(m) = missing_tool(&["mkfs.xfs", "xfs_repair", "qemu-img", "sgdisk"]) {
        skip("edits_are_undone_byte_for_byte", &m);
        return;
    }
    let t = TempDir::new("undo");
    let d = t.path();
    let img = d.join("a.img");
    let orig = d.join("orig.img");
    let f = d.join("payload");
    sh(&format!(
        "truncate -s 400M '{0}' && mkfs.xfs -q '{0}' && cp --sparse=always '{0}' '{1}' && seq 1 200000 > '{2}'",
        img.display(),
        orig.display(),
        f.display()
    ));
    let i = img.to_str().unwrap();
    let u = |n: &str| d.join(n).to_str().unwrap().to_string();
    xfskit_ok(&["mkdir", "--undo", &u("u1"), i, "/d"]);
    xfskit_ok(&[
        "cp",
        "--undo",
        &u("u2"),
        f.to_str().unwrap(),
        &format!("{i}:/d/f"),
    ]);
    xfskit_ok(&["admin", "--undo", &u("u3"), "-L", "changed", i]);
    xfskit_ok(&["admin", "--undo", &u("u3b"), "-U", "generate", i]);
    xfskit_ok(&["quotacheck", "--undo", &u("u4"), i]);
    assert!(xfskit_ok(&["ls", i, "/d"]).contains('f'));
    // An existing undo file is never overwritten.
    let o = xfskit_output(&["rm", "--undo", &u("u1"), i, "/d/f"]);
    assert!(!o.status.success(), "an existing undo file was reused");
    // Commands that do not write refuse --undo.
    let o = xfskit_output(&["ls", "--undo", &u("u9"), i, "/"]);
    assert_eq!(o.status.code(), Some(2));
    // Undone newest first: the image is the one mkfs.xfs made.
    for n in ["u4", "u3b", "u3", "u2", "u1"] {
        let out = xfskit_ok(&["undo", &u(n), i]);
        assert!(out.contains("put back"), "{out}");
    }
    sh(&format!("cmp '{}' '{}'", img.display(), orig.display()));
    // Another filesystem (a new UUID, the superblock not in the file): refused.
    let other = d.join("other.img");
    sh(&format!(
        "truncate -s 400M '{0}' && mkfs.xfs -q '{0}'",
        other.display()
    ));
    xfskit_ok(&["mkdir", "--undo", &u("u5"), i, "/x"]);
    let o = xfskit_output(&["undo", &u("u5"), other.to_str().unwrap()]);
    assert!(
        !o.status.success(),
        "undo on another filesystem was accepted"
    );

    // A qcow2 GPT disk: the disk it holds comes back.
    let src = d.join("src");
    sh(&format!(
        "mkdir -p '{0}/s' && seq 1 5000 > '{0}/s/n'",
        src.display()
    ));
    let q = d.join("disk.qcow2");
    let qs = q.to_str().unwrap();
    xfskit_ok(&[
        "build",
        "--gpt",
        "--format",
        "qcow2",
        src.to_str().unwrap(),
        qs,
    ]);
    let qorig = d.join("disk-orig.qcow2");
    sh(&format!("cp '{}' '{}'", q.display(), qorig.display()));
    xfskit_ok(&["rm", "--undo", &u("q1"), qs, "/s/n"]);
    xfskit_ok(&[
        "cp",
        "--undo",
        &u("q2"),
        f.to_str().unwrap(),
        &format!("{qs}:/s/big"),
    ]);
    xfskit_ok(&["undo", &u("q2"), qs]);
    xfskit_ok(&["undo", &u("q1"), qs]);
    sh(&format!(
        "qemu-img check -q '{0}' && qemu-img compare -q '{0}' '{1}'",
        q.display(),
        qorig.display()
    ));
    assert!(xfskit_ok(&["cat", qs, "/s/n"]).starts_with("1\n2\n"));
}

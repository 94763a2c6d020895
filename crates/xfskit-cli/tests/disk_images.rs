//! Disk images made with the real tools, read by xfskit as the kernel reads
//! them: a GPT disk (sgdisk) and an MBR disk with the filesystem in a
//! logical partition (sfdisk), XFS made by mkfs.xfs through a loop device
//! over the partition's byte range and filled through a kernel mount; then
//! qcow2 copies (plain, v2, zlib and zstd compressed, and overlays on a
//! qcow2 and a raw backing file). Every `xfskit extract` of them must equal
//! the kernel's walk of the partition, and `xfskit parts` must agree with
//! partx. Needs root (loop devices, mounts); otherwise SKIP.

mod common;

use common::disks::{
    lvm_layout, lvm_make, partx_range, sh, sparse_file, xfskit, DevMount, LoopRange, LVM, LVM_CONF,
};
use common::{diff_walks, is_root, missing_tool, skip, walk_host, Entry, TempDir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

/// Fills a fresh filesystem: every kind of file, a directory large enough
/// for a node-form directory, xattrs, owners, a sparse file.
fn populate(root: &Path, repo: &Path) {
    sh(&format!(
        r#"cd '{}'
mkdir -p etc usr/src many
for i in $(seq 1 700); do echo "entry $i" > many/file-with-a-longer-name-$i; done
cp -a '{}/crates/xfs-format' usr/src/
head -c 3000000 /dev/urandom > usr/blob
printf 'first\n' > etc/a
ln etc/a etc/a.hard
ln -s ../etc/a usr/link
mkfifo usr/fifo
mknod usr/null c 1 3
truncate -s 40M usr/sparse
printf 'tail' | dd of=usr/sparse bs=1 seek=20971520 conv=notrunc status=none
setfattr -n user.colour -v blue etc/a
setfattr -n trusted.big -v "$(head -c 2000 /dev/zero | tr '\0' x)" usr/blob
printf 'owned\n' > etc/b; chown 1234:5678 etc/b; chmod 4755 etc/b
"#,
        root.display(),
        repo.display()
    ));
}

/// Changes made after the backing file of the overlays was taken.
fn change(root: &Path) {
    sh(&format!(
        r#"cd '{}'
printf 'second version\n' > etc/a
rm -f many/file-with-a-longer-name-1*
mkdir -p later && cp -a usr/src later/
head -c 1000000 /dev/urandom >> usr/blob
"#,
        root.display()
    ));
}

/// The kernel's walk of the XFS in bytes `start..start+size` of `disk`.
fn kernel_walk(disk: &Path, start: u64, size: u64, mnt: &Path) -> Vec<Entry> {
    let l = LoopRange::new(disk, start, size);
    let m = DevMount::new(&l.dev, mnt, true);
    let w = walk_host(&m.dir);
    drop(m);
    w
}

/// `xfskit extract` with `args` before IMAGE DEST; the extracted tree must
/// equal `want`.
fn extract_matches(tmp: &Path, image: &Path, args: &[&str], want: &[Entry], what: &str) {
    let dest = tmp.join(format!("out-{what}"));
    let img = image.to_str().expect("utf-8 path");
    let d = dest.to_str().expect("utf-8 path");
    let mut a = vec!["extract", "-q"];
    a.extend_from_slice(args);
    a.extend_from_slice(&[img, d]);
    let r = xfskit(&a, LIMIT);
    assert_eq!(r.code, 0, "{what}: xfskit {a:?}: {}", r.stderr);
    let got = walk_host(&dest);
    let diffs = diff_walks(&got, want);
    assert!(
        diffs.is_empty(),
        "{what}: xfskit's tree differs from the kernel's:\n{}",
        diffs.join("\n")
    );
    std::fs::remove_dir_all(&dest).ok();
    println!("{what}: {} entries equal", want.len());
}

/// `xfskit parts --json` agrees with partx on every partition's range, and
/// names `xfs` where it is.
fn parts_match_partx(disk: &Path, numbers: &[u32], xfs: u32) {
    let r = xfskit(&["parts", "--json", disk.to_str().expect("utf-8")], LIMIT);
    assert_eq!(r.code, 0, "parts: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("parts prints JSON");
    let parts = v["partitions"].as_array().expect("partitions");
    for &n in numbers {
        let (start, size) = partx_range(disk, n);
        let p = parts
            .iter()
            .find(|p| p["number"] == n)
            .unwrap_or_else(|| panic!("parts lists no partition {n}: {}", r.stdout));
        assert_eq!(p["start_bytes"], start, "partition {n} start");
        assert_eq!(p["size_bytes"], size, "partition {n} size");
        assert_eq!(p["content"] == "xfs", n == xfs, "partition {n}: {p}");
    }
}

#[test]
fn disks_and_qcow2_match_the_kernel() {
    let name = "disks_and_qcow2_match_the_kernel";
    if !is_root() {
        return skip(name, "needs root for loop devices and mounts");
    }
    let tools = [
        "sgdisk", "sfdisk", "partx", "losetup", "qemu-img", "mkfs.xfs", "mkswap", "setfattr",
    ];
    if let Some(t) = missing_tool(&tools) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = TempDir::new("xfskit-disks");
    let t = tmp.path();
    let mnt = t.join("mnt");

    // A GPT disk: EFI system, XFS root, swap.
    let gpt = t.join("gpt.img");
    sparse_file(&gpt, 400 * MIB);
    sh(&format!(
        "sgdisk -n1:2048:+16M -t1:ef00 -c1:esp -n2:0:+330M -t2:8300 -c2:root -n3:0:0 -t3:8200 '{}' >/dev/null",
        gpt.display()
    ));
    let (s2, n2) = partx_range(&gpt, 2);
    {
        let l = LoopRange::new(&gpt, s2, n2);
        sh(&format!("mkfs.xfs -q {}", l.dev));
        let m = DevMount::new(&l.dev, &mnt, false);
        populate(&m.dir, &repo);
    }
    {
        let (s3, n3) = partx_range(&gpt, 3);
        let l = LoopRange::new(&gpt, s3, n3);
        sh(&format!("mkswap {} >/dev/null", l.dev));
    }
    let before = t.join("gpt-before.img");
    sh(&format!(
        "cp --sparse=always '{}' '{}'",
        gpt.display(),
        before.display()
    ));
    {
        let l = LoopRange::new(&gpt, s2, n2);
        let m = DevMount::new(&l.dev, &mnt, false);
        change(&m.dir);
    }
    let kernel = kernel_walk(&gpt, s2, n2, &mnt);
    assert!(kernel.len() > 500, "kernel walk: {} entries", kernel.len());
    parts_match_partx(&gpt, &[1, 2, 3], 2);
    extract_matches(t, &gpt, &[], &kernel, "gpt-found");
    extract_matches(t, &gpt, &["--partition", "2"], &kernel, "gpt-partition-2");

    // An MBR disk holding the same filesystem in logical partition 5.
    let mbr = t.join("mbr.img");
    sparse_file(&mbr, 400 * MIB);
    sh(&format!(
        "printf 'label: dos\\nstart=2048, size=16384, type=83\\nstart=20480, type=5\\nstart=22528, size={}, type=83\\n' | sfdisk -q '{}'",
        n2 / 512,
        mbr.display()
    ));
    let (s5, n5) = partx_range(&mbr, 5);
    assert_eq!(n5, n2);
    sh(&format!(
        "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes skip={s2} count={n2} seek={s5} conv=notrunc,sparse status=none",
        gpt.display(),
        mbr.display()
    ));
    let kernel_mbr = kernel_walk(&mbr, s5, n5, &mnt);
    assert!(diff_walks(&kernel_mbr, &kernel).is_empty());
    parts_match_partx(&mbr, &[1, 2, 5], 5);
    extract_matches(t, &mbr, &[], &kernel_mbr, "mbr-logical");

    // qcow2 copies of the GPT disk. The overlays are made on the disk
    // itself, then rebased (safe mode) on its copy from before the change:
    // they keep just the clusters that differ.
    let q = |f: &str| t.join(f).to_str().expect("utf-8").to_string();
    let (g, b) = (q("gpt.img"), q("gpt-before.img"));
    sh(&format!(
        r#"qemu-img convert -O qcow2 '{g}' '{plain}'
qemu-img convert -O qcow2 -o compat=0.10 '{g}' '{v2}'
qemu-img convert -c -O qcow2 '{g}' '{zlib}'
qemu-img convert -c -O qcow2 -o compression_type=zstd '{g}' '{zstd}'
qemu-img convert -O qcow2 '{b}' '{base}'
qemu-img create -q -f qcow2 -b '{g}' -F raw '{over}'
qemu-img rebase -b '{base}' -F qcow2 '{over}'
qemu-img create -q -f qcow2 -b '{g}' -F raw '{over_raw}'
qemu-img rebase -b '{b}' -F raw '{over_raw}'
"#,
        plain = q("plain.qcow2"),
        v2 = q("v2.qcow2"),
        zlib = q("zlib.qcow2"),
        zstd = q("zstd.qcow2"),
        base = q("base.qcow2"),
        over = q("over.qcow2"),
        over_raw = q("over-raw.qcow2"),
    ));
    let size = |f: &str| std::fs::metadata(t.join(f)).expect("stat").len();
    println!(
        "sizes: plain {}, over {}, zstd {}",
        size("plain.qcow2"),
        size("over.qcow2"),
        size("zstd.qcow2")
    );
    assert!(
        size("over.qcow2") < size("plain.qcow2") / 2,
        "the overlay should hold only the changed clusters"
    );
    for f in [
        "plain.qcow2",
        "v2.qcow2",
        "zlib.qcow2",
        "zstd.qcow2",
        "over.qcow2",
        "over-raw.qcow2",
    ] {
        extract_matches(t, &t.join(f), &[], &kernel, f);
    }
    // The base alone still shows the tree before the change.
    let kernel_before = kernel_walk(&before, s2, n2, &mnt);
    extract_matches(t, &t.join("base.qcow2"), &[], &kernel_before, "base.qcow2");
    let r = xfskit(&["cat", &q("zstd.qcow2"), "/etc/a"], LIMIT);
    assert_eq!((r.code, r.stdout.as_str()), (0, "second version\n"));
}

/// Linear LVs made by the lvm2 tools (one of two segments), XFS placed at
/// the extents LVM reports (`lvs --segments`, `pvs`), compared with the
/// kernel's walk of the same filesystem; then damaged metadata.
#[test]
fn lvm_volumes_match_the_kernel() {
    let name = "lvm_volumes_match_the_kernel";
    if !is_root() {
        return skip(name, "needs root for loop devices and mounts");
    }
    let tools = [
        "sgdisk", "partx", "losetup", "pvcreate", "lvcreate", "mkfs.xfs", "setfattr",
    ];
    if let Some(t) = missing_tool(&tools) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = TempDir::new("xfskit-lvm");
    let t = tmp.path();
    let disk = t.join("lvm.img");
    let vg = format!("xfskit_test_{}", std::process::id());
    sparse_file(&disk, 800 * MIB);
    sh(&format!(
        "sgdisk -n1:2048:+8M -t1:ef00 -n2:0:0 -t2:8e00 '{}' >/dev/null",
        disk.display()
    ));
    let (s2, n2) = partx_range(&disk, 2);
    // root: 80 extents, then swap: 16, then root grows by 25 more.
    let (pe_start, ext, segs) = {
        let l = LoopRange::new(&disk, s2, n2);
        let d = &l.dev;
        lvm_make(d, &vg, &[("root", "320M"), ("swap", "64M")]);
        sh(&format!(
            "export {LVM}; lvextend -q {LVM_CONF} -L +100M {vg}/root 2>/dev/null"
        ));
        lvm_layout(d, &vg, "root")
    };
    assert_eq!(segs.len(), 2, "root should have two segments: {segs:?}");
    let lv_bytes: u64 = segs.iter().map(|s| s.1 * ext).sum();

    // The filesystem, made and filled in a file, then laid onto the extents.
    let fs = t.join("root.img");
    sparse_file(&fs, lv_bytes);
    sh(&format!("mkfs.xfs -q '{}'", fs.display()));
    let mnt = t.join("mnt");
    {
        let l = LoopRange::new(&fs, 0, lv_bytes);
        let m = DevMount::new(&l.dev, &mnt, false);
        populate(&m.dir, &repo);
    }
    let kernel = kernel_walk(&fs, 0, lv_bytes, &mnt);
    for (start, size, pe) in &segs {
        sh(&format!(
            "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes skip={} count={} seek={} conv=notrunc,sparse status=none",
            fs.display(),
            disk.display(),
            start * ext,
            size * ext,
            s2 + pe_start + pe * ext
        ));
    }
    let r = xfskit(&["parts", "--json", disk.to_str().expect("utf-8")], LIMIT);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("parts prints JSON");
    let root = v["volumes"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["lv"] == "root"))
        .unwrap_or_else(|| panic!("no root volume: {}", r.stdout));
    assert_eq!(
        (root["size_bytes"].as_u64(), root["content"].as_str()),
        (Some(lv_bytes), Some("xfs"))
    );
    extract_matches(t, &disk, &[], &kernel, "lvm-found");
    let lv = format!("{vg}/root");
    extract_matches(t, &disk, &["--lv", &lv], &kernel, "lvm-named");
    let q = t.join("lvm.qcow2");
    sh(&format!(
        "qemu-img convert -c -O qcow2 -o compression_type=zstd '{}' '{}'",
        disk.display(),
        q.display()
    ));
    extract_matches(t, &q, &[], &kernel, "lvm-zstd.qcow2");
    let r = xfskit(
        &[
            "ls",
            "--lv",
            &format!("{vg}/swap"),
            disk.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert!(
        r.code == 3 && r.stderr.contains("not XFS"),
        "swap: {}",
        r.stderr
    );
    let r = xfskit(
        &["ls", "--partition", "2", disk.to_str().expect("utf-8"), "/"],
        LIMIT,
    );
    assert!(
        r.code == 2 && r.stderr.contains("--lv VG/LV") && r.stderr.contains(&lv),
        "--partition on the PV: {}",
        r.stderr
    );

    // Offline edits through the LV (two segments): the filesystem laid
    // back out of the extents is repair-clean and holds the edits.
    let d = disk.to_str().expect("utf-8");
    let host = t.join("edit-src.txt");
    std::fs::write(&host, b"through the volume\n").expect("write");
    for args in [
        vec!["mkdir", "--lv", &lv, d, "/edited"],
        vec![
            "cp",
            "--lv",
            &lv,
            host.to_str().expect("utf-8"),
            &format!("{d}:/edited/f"),
        ],
        vec!["chmod", "--lv", &lv, d, "600", "/edited/f"],
    ] {
        let r = xfskit(&args, LIMIT);
        assert_eq!(r.code, 0, "xfskit {args:?}: {}", r.stderr);
    }
    let back = t.join("root-back.img");
    sparse_file(&back, lv_bytes);
    for (start, size, pe) in &segs {
        sh(&format!(
            "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes skip={} count={} seek={} conv=notrunc,sparse status=none",
            disk.display(),
            back.display(),
            s2 + pe_start + pe * ext,
            size * ext,
            start * ext
        ));
    }
    // sh fails the test on a nonzero exit: xfs_repair -n finding anything.
    sh(&format!(
        "xfs_repair -n '{}' >/dev/null 2>&1",
        back.display()
    ));
    let r = xfskit(&["cat", back.to_str().expect("utf-8"), "/edited/f"], LIMIT);
    assert_eq!(
        r.stdout, "through the volume\n",
        "edited file: {}",
        r.stderr
    );
    let r = xfskit(
        &["stat", "--json", back.to_str().expect("utf-8"), "/edited/f"],
        LIMIT,
    );
    assert!(
        r.stdout.contains("\"mode\": \"100600\""),
        "mode after chmod: {}",
        r.stdout
    );

    // One byte of the metadata text changed: its CRC fails, and the disk
    // holds no other XFS: corrupt (5), naming the metadata area.
    let text = sh(&format!(
        "grep -abo 'contents = \"Text Format Volume Group\"' '{}' | tail -1 | cut -d: -f1",
        disk.display()
    ));
    let at: u64 = text.trim().parse().expect("metadata text offset");
    sh(&format!(
        "printf X | dd of='{}' bs=1 seek={} conv=notrunc status=none",
        disk.display(),
        at + 12
    ));
    let r = xfskit(&["ls", disk.to_str().expect("utf-8"), "/"], LIMIT);
    assert!(
        r.code == 5 && r.stderr.contains("LVM metadata") && r.stderr.contains("bad text CRC"),
        "damaged metadata: exit {}: {}",
        r.code,
        r.stderr
    );
}

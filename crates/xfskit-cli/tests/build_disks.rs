//! `xfskit build` into disk images: a new GPT disk (raw and qcow2), a bare
//! qcow2 file, and an existing partition of a qcow2 disk made by sgdisk
//! and qemu-img. Each must pass `sgdisk -v` (GPT), `qemu-img check`
//! (qcow2) and `xfs_repair -n`, and the kernel's mount must show exactly
//! the source tree. A partition too small is refused before anything is
//! written. Needs root (loop devices, mounts, owners); otherwise SKIP.

mod common;

use common::disks::{partx_range, sh, sparse_file, xfskit, DevMount, LoopRange};
use common::{diff_walks, is_root, missing_tool, skip, walk_host, Entry, TempDir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;
const LINUX_FS: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

fn make_source(src: &Path) {
    sh(&format!(
        r#"mkdir -p '{0}' && cd '{0}'
mkdir -p sub many
for i in $(seq 1 200); do echo "entry $i" > many/f$i; done
printf 'first\n' > a.txt
setfattr -n user.colour -v blue a.txt
ln a.txt sub/hard
ln -s a.txt link
head -c 2000000 /dev/urandom > big
truncate -s 20M sparse
printf 'tail' | dd of=sparse bs=1 seek=10485760 conv=notrunc status=none
printf 'owned\n' > suid; chown 1234:5678 suid; chmod 4755 suid
"#,
        src.display()
    ));
}

/// A raw copy of `img` (itself when raw).
fn raw_of(img: &Path, tmp: &Path) -> std::path::PathBuf {
    if img.extension().is_some_and(|e| e == "qcow2") {
        let out = sh(&format!(
            "qemu-img check '{}' 2>&1 && echo QCOW2-CLEAN || true",
            img.display()
        ));
        assert!(
            out.contains("QCOW2-CLEAN"),
            "{}: qemu-img check:\n{out}",
            img.display()
        );
        let r = tmp.join("as-raw.img");
        sh(&format!(
            "rm -f '{1}'; qemu-img convert -O raw '{}' '{}'",
            img.display(),
            r.display()
        ));
        r
    } else {
        img.to_path_buf()
    }
}

/// xfs_repair -n of the filesystem at `start`/`size` of `raw` is clean and
/// the kernel's mount of it shows `want`.
fn fs_matches(raw: &Path, start: u64, size: u64, want: &[Entry], tmp: &Path, what: &str) {
    let l = LoopRange::new(raw, start, size);
    let out = sh(&format!(
        "{} -n {} 2>&1 && echo REPAIR-CLEAN || true",
        common::fixtures::repair_sh(),
        l.dev
    ));
    assert!(
        out.contains("REPAIR-CLEAN"),
        "{what}: xfs_repair -n:\n{out}"
    );
    let m = DevMount::new(&l.dev, &tmp.join("mnt"), true);
    let got = walk_host(&m.dir);
    drop(m);
    let diffs = diff_walks(&got, want);
    assert!(
        diffs.is_empty(),
        "{what}: the kernel's tree differs from the source:\n{}",
        diffs.join("\n")
    );
    println!("{what}: clean, {} entries equal to the source", want.len());
}

/// A new GPT disk (raw or qcow2) from `build --gpt`.
fn gpt_disk(src: &Path, want: &[Entry], tmp: &Path, qcow2: bool) {
    let img = tmp.join(if qcow2 { "gpt.qcow2" } else { "gpt.img" });
    let mut args = vec!["build", "-q", "--gpt"];
    if qcow2 {
        args.extend(["--format", "qcow2"]);
    }
    args.extend([src.to_str().expect("utf-8"), img.to_str().expect("utf-8")]);
    let r = xfskit(&args, LIMIT);
    assert_eq!(r.code, 0, "xfskit {args:?}: {}", r.stderr);
    let raw = raw_of(&img, tmp);
    let v = sh(&format!("sgdisk -v '{}' 2>&1", raw.display()));
    assert!(v.contains("No problems found"), "sgdisk -v:\n{v}");
    let info = sh(&format!("sgdisk -i 1 '{}'", raw.display()));
    assert!(info.contains(LINUX_FS), "partition 1 type:\n{info}");
    let (start, size) = partx_range(&raw, 1);
    assert_eq!(start, MIB, "the partition starts at 1 MiB");
    assert_eq!(size % MIB, 0, "the partition is a whole number of MiB");
    let disk = std::fs::metadata(&raw).expect("stat").len();
    assert_eq!(
        disk,
        start + size + MIB,
        "1 MiB before and after the partition"
    );
    fs_matches(
        &raw,
        start,
        size,
        want,
        tmp,
        &format!("build --gpt{}", if qcow2 { " --format qcow2" } else { "" }),
    );
}

#[test]
fn build_writes_gpt_disks_qcow2_files_and_partitions() {
    let name = "build_writes_gpt_disks_qcow2_files_and_partitions";
    if !is_root() {
        return skip(name, "needs root for loop devices, mounts and owners");
    }
    let tools = [
        "sgdisk",
        "partx",
        "losetup",
        "qemu-img",
        "xfs_repair",
        "setfattr",
        "md5sum",
    ];
    if let Some(t) = missing_tool(&tools) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let tmp = TempDir::new("xfskit-build-disks");
    let t = tmp.path();
    let src = t.join("src");
    make_source(&src);
    let want = walk_host(&src);
    let s = src.to_str().expect("utf-8");

    gpt_disk(&src, &want, t, false);
    gpt_disk(&src, &want, t, true);

    // A bare filesystem in a qcow2 file.
    let q = t.join("bare.qcow2");
    let r = xfskit(
        &[
            "build",
            "-q",
            "--format",
            "qcow2",
            s,
            q.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build --format qcow2: {}", r.stderr);
    let raw = raw_of(&q, t);
    let len = std::fs::metadata(&raw).expect("stat").len();
    fs_matches(&raw, 0, len, &want, t, "build --format qcow2");

    // Partition 2 of a qcow2 disk made by sgdisk and qemu-img; its
    // neighbours hold data that must survive.
    let disk = t.join("parts.img");
    sparse_file(&disk, 460 * MIB);
    sh(&format!(
        "sgdisk -n1:2048:+8M -n2:0:+320M -n3:0:+100M '{0}' >/dev/null
head -c 8M /dev/urandom | dd of='{0}' bs=1M seek=1 conv=notrunc status=none
head -c 100M /dev/urandom | dd of='{0}' bs=1M seek=329 conv=notrunc status=none",
        disk.display()
    ));
    let md5 = |raw: &Path, n: u32| {
        let (st, sz) = partx_range(raw, n);
        sh(&format!(
            "dd if='{}' bs=1M skip={} count={} status=none | md5sum",
            raw.display(),
            st / MIB,
            sz / MIB
        ))
    };
    let before = [md5(&disk, 1), md5(&disk, 3)];
    let dq = t.join("parts.qcow2");
    sh(&format!(
        "qemu-img convert -O qcow2 '{}' '{}'",
        disk.display(),
        dq.display()
    ));
    let d = dq.to_str().expect("utf-8");
    // Partition 3 (100 MiB) cannot hold a filesystem: refused, untouched.
    let r = xfskit(&["build", "-q", "--partition", "3", s, d], LIMIT);
    assert_ne!(r.code, 0, "build into a 100 MiB partition");
    assert!(
        r.stderr.contains("partition 3"),
        "the error names the partition: {}",
        r.stderr
    );
    let r = xfskit(&["build", "-q", "--partition", "2", s, d], LIMIT);
    assert_eq!(r.code, 0, "build --partition 2: {}", r.stderr);
    let raw = raw_of(&dq, t);
    assert_eq!(
        [md5(&raw, 1), md5(&raw, 3)],
        before,
        "the other partitions changed"
    );
    let (st, sz) = partx_range(&raw, 2);
    fs_matches(
        &raw,
        st,
        sz,
        &want,
        t,
        "build --partition 2 of a qcow2 disk",
    );
    // Again without -f: the filesystem there now is not overwritten.
    let r = xfskit(&["build", "-q", "--partition", "2", s, d], LIMIT);
    assert_eq!(r.code, 2, "a second build without -f: {}", r.stderr);
}

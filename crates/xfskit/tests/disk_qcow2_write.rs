//! Writing a filesystem inside qcow2 images: a GPT disk holding XFS (made
//! by sgdisk and mkfs.xfs) converted by qemu-img to a plain qcow2, a
//! zstd-compressed one, one of 4 KiB clusters, a v2 one and an overlay on
//! the raw disk, and the raw disk itself; files written
//! through `disk::open` (writable) and `Fs::from_device_rw`. Then
//! `qemu-img check` must find no errors and no leaks, the backing file must
//! be unchanged, xfs_repair -n must find the filesystem clean, and xfskit
//! must read the files back. No root needed; SKIP without the tools.

use std::path::{Path, PathBuf};
use std::process::Command;
use xfskit::build::{Meta, NodeKind};
use xfskit::disk::{self, ImageOptions};
use xfskit::inode::{FileReader, Timestamp};
use xfskit::{Fs, OpenOptions};

const MIB: u64 = 1 << 20;
const P1: u64 = MIB;
const FS_BYTES: u64 = 300 * MIB;

use xfskit_testkit::{have_tool as have, skip};

/// Runs a script; returns (success, output).
fn sh(script: &str) -> (bool, String) {
    let o = Command::new("bash")
        .args(["-c", &format!("set -e\n{script}")])
        .output()
        .expect("bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

fn must(script: &str) -> String {
    let (ok, out) = sh(script);
    assert!(ok, "failed: {script}\n{out}");
    out
}

fn meta(mode: u16) -> Meta {
    let t = Timestamp {
        sec: 1_700_000_000,
        nsec: 0,
    };
    Meta {
        mode,
        uid: 0,
        gid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
    }
}

fn content(i: usize) -> Vec<u8> {
    let n = [0, 1, 4095, 4096, 70_000, 1_000_000, 3_000_000][i % 7];
    (0..n).map(|k| (k * 31 + i * 7 + k / 4096) as u8).collect()
}

/// Writes `/new/file-N` for N in 0..30 into the XFS of `image`.
fn write_files(image: &Path) {
    let opts = ImageOptions {
        writable: true,
        ..Default::default()
    };
    let img = disk::open(image, &opts).expect("open the image for writing");
    let fs = Fs::from_device_rw(img.device, &OpenOptions::default()).expect("open rw");
    let root = fs.geometry().root_ino;
    let dir = fs
        .create(root, b"new", &NodeKind::Dir, &meta(0o40755))
        .expect("mkdir");
    for i in 0..30 {
        let name = format!("file-{i}");
        fs.create_file(dir, name.as_bytes(), &meta(0o100644), &content(i), &[])
            .expect("create file");
    }
    fs.sync().expect("sync");
}

/// Reads every file back with xfskit.
fn read_back(image: &Path) {
    let img = disk::open(image, &ImageOptions::default()).expect("open");
    let fs = Fs::from_device(img.device, &OpenOptions::default()).expect("open fs");
    for i in 0..30 {
        let path = format!("/new/file-{i}");
        let inode = fs.lookup_path(path.as_bytes()).expect("lookup");
        let r = FileReader::new(&fs, &inode).expect("reader");
        let mut got = vec![0u8; inode.size as usize];
        let mut off = 0;
        while off < got.len() {
            let n = r.read_at(off as u64, &mut got[off..]).expect("read");
            assert!(n > 0, "{path}: short read");
            off += n;
        }
        assert_eq!(got, content(i), "{path} differs");
    }
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-qcow2-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn files_written_into_qcow2_leave_it_clean() {
    let name = "files_written_into_qcow2_leave_it_clean";
    for t in ["sgdisk", "qemu-img", "mkfs.xfs", "xfs_repair"] {
        if !have(t) {
            return skip(name, &format!("{t} is not installed"));
        }
    }
    let d = tmpdir();
    let p = |f: &str| d.join(f).to_str().expect("utf-8").to_string();
    must(&format!(
        "truncate -s {FS_BYTES} '{fs}'
mkfs.xfs -q '{fs}'
truncate -s {} '{raw}'
sgdisk -n1:2048:+{}M -t1:8300 '{raw}' >/dev/null
dd if='{fs}' of='{raw}' bs=1M oflag=seek_bytes seek={P1} conv=notrunc,sparse status=none
qemu-img convert -O qcow2 '{raw}' '{plain}'
qemu-img convert -c -O qcow2 -o compression_type=zstd '{raw}' '{zstd}'
qemu-img convert -O qcow2 -o cluster_size=4096 '{raw}' '{small}'
qemu-img convert -O qcow2 -o compat=0.10 '{raw}' '{v2}'
qemu-img create -q -f qcow2 -b '{raw}' -F raw '{over}'",
        FS_BYTES + 2 * MIB,
        FS_BYTES / MIB,
        fs = p("fs.img"),
        raw = p("disk.raw"),
        plain = p("plain.qcow2"),
        zstd = p("zstd.qcow2"),
        over = p("over.qcow2"),
        small = p("small.qcow2"),
        v2 = p("v2.qcow2"),
    ));
    let raw_before = must(&format!("md5sum < '{}'", p("disk.raw")));
    // 4 KiB clusters: a refcount block covers 8 MiB, so the writes
    // allocate new ones.
    for f in [
        "plain.qcow2",
        "zstd.qcow2",
        "over.qcow2",
        "small.qcow2",
        "v2.qcow2",
    ] {
        let q = d.join(f);
        write_files(&q);
        let (ok, out) = sh(&format!("qemu-img check '{}'", q.display()));
        assert!(
            ok && out.contains("No errors were found"),
            "{f}: qemu-img check:\n{out}"
        );
        assert!(!out.contains("leaked"), "{f}: qemu-img check:\n{out}");
        read_back(&q);
        let out = must(&format!(
            "qemu-img convert -O raw '{q}' '{r}'
dd if='{r}' of='{x}' bs=1M iflag=skip_bytes,count_bytes skip={P1} count={FS_BYTES} status=none
xfs_repair -n '{x}' 2>&1 && echo REPAIR-CLEAN
rm -f '{r}' '{x}'",
            q = q.display(),
            r = p("out.raw"),
            x = p("out.fs"),
        ));
        assert!(out.contains("REPAIR-CLEAN"), "{f}: xfs_repair -n:\n{out}");
        println!(
            "{f}: clean, {} bytes",
            std::fs::metadata(&q).expect("stat").len()
        );
    }
    assert_eq!(
        raw_before,
        must(&format!("md5sum < '{}'", p("disk.raw"))),
        "the backing file changed"
    );
    // The raw disk itself, written through a window over its partition.
    let raw = d.join("disk.raw");
    write_files(&raw);
    read_back(&raw);
    let out = must(&format!(
        "dd if='{r}' of='{x}' bs=1M iflag=skip_bytes,count_bytes skip={P1} count={FS_BYTES} status=none
xfs_repair -n '{x}' 2>&1 && echo REPAIR-CLEAN",
        r = raw.display(),
        x = p("out.fs"),
    ));
    assert!(out.contains("REPAIR-CLEAN"), "raw: xfs_repair -n:\n{out}");
    let v = must(&format!("sgdisk -v '{}'", raw.display()));
    assert!(v.contains("No problems found"), "sgdisk -v:\n{v}");
    std::fs::remove_dir_all(&d).ok();
}

//! Damaged and ambiguous disk images: each gives a clear error that names
//! the structure and where, with the documented exit code, and never a
//! panic or a hang. Disks are made with sgdisk and qemu-img around an XFS
//! image made by mkfs.xfs in a file, then damaged byte by byte. No root.

mod common;

use common::disks::{sh, sparse_file, xfskit, Run};
use common::{missing_tool, skip, TempDir};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;
/// The XFS partition of the test disks: 310 MiB from 9 MiB.
const P2_START: u64 = 9 * MIB;
const FS_BYTES: u64 = 310 * MIB;

fn tools_or_skip(test: &str) -> bool {
    match missing_tool(&["sgdisk", "qemu-img", "mkfs.xfs", "dd"]) {
        Some(t) => {
            skip(
                test,
                &format!("{t} is not installed (scripts/test.sh installs it)"),
            );
            false
        }
        None => true,
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn run(args: &[&str]) -> Run {
    xfskit(args, LIMIT)
}

/// Expects exit `code` and every one of `words` in the error.
fn expect(r: &Run, code: i32, words: &[&str], what: &str) {
    println!("{what}: exit {}: {}", r.code, r.stderr.trim());
    assert_eq!(
        r.code, code,
        "{what}: exit {}; stderr: {}",
        r.code, r.stderr
    );
    for w in words {
        assert!(
            r.stderr.contains(w),
            "{what}: {w:?} not in the error: {}",
            r.stderr
        );
    }
}

/// A bare XFS filesystem made by mkfs.xfs.
fn bare_xfs(dir: &Path) -> PathBuf {
    let img = dir.join("bare.img");
    sparse_file(&img, FS_BYTES);
    sh(&format!("mkfs.xfs -q '{}'", img.display()));
    img
}

/// A GPT disk: 1 empty (8 MiB), 2 and more holding copies of `fs`.
fn gpt_disk(dir: &Path, name: &str, fs: &Path, xfs_parts: u32) -> PathBuf {
    let disk = dir.join(name);
    sparse_file(
        &disk,
        2 * MIB + (1 + u64::from(xfs_parts)) * (FS_BYTES + MIB),
    );
    let mut cmd = String::from("sgdisk -n1:2048:+8M -t1:ef00 ");
    for n in 2..2 + xfs_parts {
        cmd += &format!("-n{n}:0:+{}M -t{n}:8300 ", FS_BYTES / MIB);
    }
    sh(&format!("{cmd} '{}' >/dev/null", disk.display()));
    for n in 0..u64::from(xfs_parts) {
        let at = P2_START + n * FS_BYTES;
        sh(&format!(
            "dd if='{}' of='{}' bs=1M oflag=seek_bytes seek={at} conv=notrunc,sparse status=none",
            fs.display(),
            disk.display()
        ));
    }
    disk
}

fn read(p: &Path, off: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    std::fs::File::open(p)
        .and_then(|f| f.read_exact_at(&mut b, off))
        .expect("read image");
    b
}

fn write(p: &Path, off: u64, b: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(p)
        .and_then(|f| f.write_all_at(b, off))
        .expect("write image");
}

fn flip(p: &Path, off: u64) {
    let b = read(p, off, 1);
    write(p, off, &[!b[0]]);
}

fn be64(p: &Path, off: u64) -> u64 {
    u64::from_be_bytes(read(p, off, 8).try_into().expect("8 bytes"))
}

#[test]
fn partition_tables_damaged_or_ambiguous() {
    let name = "partition_tables_damaged_or_ambiguous";
    if !tools_or_skip(name) {
        return;
    }
    let tmp = TempDir::new("xfskit-disk-bad");
    let t = tmp.path();
    let fs = bare_xfs(t);
    let disk = gpt_disk(t, "gpt.img", &fs, 1);
    let r = run(&["ls", s(&disk), "/"]);
    expect(&r, 0, &[], "a sound disk");

    // The primary header's CRC fails: the backup serves, with a warning.
    let primary = t.join("primary.img");
    std::fs::copy(&disk, &primary).expect("copy");
    flip(&primary, 512 + 40);
    let r = run(&["info", s(&primary)]);
    expect(
        &r,
        0,
        &["warning", "bad header CRC", "using the backup"],
        "primary header",
    );
    let r = run(&["parts", s(&primary)]);
    assert!(r.stdout.contains("using the backup"), "{}", r.stdout);

    // The primary entry array's CRC fails: the backup serves too.
    let array = t.join("array.img");
    std::fs::copy(&disk, &array).expect("copy");
    flip(&array, 1024 + 32);
    expect(
        &run(&["ls", s(&array), "/"]),
        0,
        &["entry array CRC"],
        "primary array",
    );

    // Both headers damaged: corrupt (5), naming both.
    let len = std::fs::metadata(&primary).expect("stat").len();
    flip(&primary, len - 512 + 40);
    let r = run(&["ls", s(&primary), "/"]);
    expect(
        &r,
        5,
        &["GPT header", "LBA 1", "backup at LBA"],
        "both headers",
    );
    expect(
        &run(&["parts", s(&primary)]),
        5,
        &["GPT header"],
        "parts, both headers",
    );

    // A partition past the end of the disk (a truncated download).
    let short = t.join("short.img");
    std::fs::copy(&disk, &short).expect("copy");
    std::fs::File::options()
        .write(true)
        .open(&short)
        .and_then(|f| f.set_len(P2_START + FS_BYTES / 2))
        .expect("truncate");
    let r = run(&["ls", s(&short), "/"]);
    expect(
        &r,
        5,
        &["partition 2", "past the end of the"],
        "truncated disk",
    );
    let r = run(&["parts", s(&short)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("PAST END") && r.stdout.contains("truncated?"),
        "{}",
        r.stdout
    );

    // Two XFS partitions: --partition is needed (2), and then works.
    let two = gpt_disk(t, "two.img", &fs, 2);
    expect(
        &run(&["ls", s(&two), "/"]),
        2,
        &["partition 2, partition 3", "--partition N"],
        "two XFS",
    );
    expect(
        &run(&["ls", "--partition", "3", s(&two), "/"]),
        0,
        &[],
        "--partition 3",
    );
    let r = run(&["info", "--partition", "1", s(&two)]);
    expect(
        &r,
        3,
        &["partition 1", "not XFS"],
        "a partition without XFS",
    );
    let r = run(&["check", "--partition", "9", s(&two)]);
    expect(
        &r,
        2,
        &["no partition 9", "2 (Linux filesystem, xfs)"],
        "no such partition",
    );
    let r = run(&["stat", "--partition", "2", s(&fs), "/"]);
    expect(
        &r,
        2,
        &["no partition table"],
        "--partition on a bare filesystem",
    );

    // A disk without XFS (3, unsupported).
    let none = t.join("none.img");
    sparse_file(&none, 64 * MIB);
    sh(&format!(
        "sgdisk -n1:2048:+8M -t1:8200 '{}' >/dev/null",
        none.display()
    ));
    expect(
        &run(&["bulkstat", s(&none)]),
        3,
        &["no XFS filesystem", "1 (Linux swap"],
        "no XFS",
    );
}

/// qcow2 of the bare filesystem; returns (path, cluster bits, L1 offset).
fn qcow2_of(fs: &Path, dir: &Path, name: &str, opts: &str) -> (PathBuf, u32, u64) {
    let q = dir.join(name);
    sh(&format!(
        "qemu-img convert {opts} -O qcow2 '{}' '{}'",
        fs.display(),
        q.display()
    ));
    let cb = u32::from_be_bytes(read(&q, 20, 4).try_into().expect("4"));
    (q.clone(), cb, be64(&q, 40))
}

const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;

#[test]
fn qcow2_damaged() {
    let name = "qcow2_damaged";
    if !tools_or_skip(name) {
        return;
    }
    let tmp = TempDir::new("xfskit-qcow2-bad");
    let t = tmp.path();
    let fs = bare_xfs(t);
    let (q, _, l1) = qcow2_of(&fs, t, "plain.qcow2", "");
    expect(&run(&["ls", s(&q), "/"]), 0, &[], "a sound qcow2");
    let l2 = be64(&q, l1) & OFFSET_MASK;
    let file_len = std::fs::metadata(&q).expect("stat").len();

    // Guest cluster 0 (the superblock) points past the end of the file.
    let past = t.join("past.qcow2");
    std::fs::copy(&q, &past).expect("copy");
    write(
        &past,
        l2,
        &((1u64 << 63) | (file_len + (64 << 20))).to_be_bytes(),
    );
    let r = run(&["info", s(&past)]);
    expect(
        &r,
        5,
        &["guest cluster 0", "past the end"],
        "cluster past EOF",
    );

    // The L2 table lies outside the file.
    let l2_out = t.join("l2.qcow2");
    std::fs::copy(&q, &l2_out).expect("copy");
    write(
        &l2_out,
        l1,
        &((1u64 << 63) | (file_len + (1 << 30))).to_be_bytes(),
    );
    let r = run(&["ls", s(&l2_out), "/"]);
    expect(
        &r,
        5,
        &["L1 entry", "L2 table at offset"],
        "L2 table past EOF",
    );

    // Truncated: the L1 table is gone.
    let cut = t.join("cut.qcow2");
    std::fs::copy(&q, &cut).expect("copy");
    std::fs::File::options()
        .write(true)
        .open(&cut)
        .and_then(|f| f.set_len(l1))
        .expect("truncate");
    expect(
        &run(&["info", s(&cut)]),
        5,
        &["qcow2 L1 table"],
        "L1 past EOF",
    );

    // Compressed clusters that do not inflate, zlib and zstd.
    for (file, opts) in [
        ("zlib.qcow2", "-c"),
        ("zstd.qcow2", "-c -o compression_type=zstd"),
    ] {
        let (c, cb, l1) = qcow2_of(&fs, t, file, opts);
        let l2 = be64(&c, l1) & OFFSET_MASK;
        let e = be64(&c, l2);
        assert!(e & (1 << 62) != 0, "{file}: cluster 0 is not compressed");
        let host = e & ((1u64 << (62 - (cb - 8))) - 1);
        write(&c, host, &[0xFF; 64]);
        let r = run(&["ls", s(&c), "/"]);
        expect(&r, 5, &["compressed cluster 0", "does not inflate"], file);
    }

    // Backing chains that loop: a on b on a, and a on itself.
    let a = t.join("a.qcow2");
    let b = t.join("b.qcow2");
    sh(&format!(
        "cd '{}' && qemu-img create -q -f qcow2 a.qcow2 1G && qemu-img create -q -f qcow2 -b a.qcow2 -F qcow2 b.qcow2 && qemu-img rebase -u -b b.qcow2 -F qcow2 a.qcow2",
        t.display()
    ));
    expect(
        &run(&["ls", s(&b), "/"]),
        5,
        &["backing chain", "loops"],
        "a loop of two",
    );
    sh(&format!(
        "cd '{}' && qemu-img rebase -u -b a.qcow2 -F qcow2 a.qcow2",
        t.display()
    ));
    expect(
        &run(&["parts", s(&a)]),
        5,
        &["backing chain", "loops"],
        "a loop of one",
    );
    // A missing backing file is an I/O error (4) naming it.
    let lone = t.join("lone.qcow2");
    sh(&format!(
        "cd '{}' && qemu-img create -q -f qcow2 -b gone.img -F raw -u lone.qcow2 1G",
        t.display()
    ));
    expect(
        &run(&["info", s(&lone)]),
        4,
        &["backing file", "gone.img"],
        "missing backing",
    );
}

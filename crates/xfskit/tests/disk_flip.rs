//! Every single-byte change of a partition table or of qcow2 metadata is
//! read without a panic: a GPT disk still opens its XFS partition through
//! the intact copy of the table (primary or backup), and a qcow2 file either
//! reads or fails with an error. Images are made by sgdisk and qemu-img
//! (tests print SKIP without them), then changed in memory.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use xfskit::dev::{Device, MemDevice};
use xfskit::disk::{self, qcow2::Qcow2, Format, ImageOptions};

const MIB: u64 = 1 << 20;
/// Partition 2 of the test disk starts here.
const P2: u64 = 9 * MIB;

use xfskit_testkit::{have_tool as have, skip};

fn sh(script: &str) {
    let ok = Command::new("bash")
        .args(["-c", &format!("set -e\n{script}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "failed: {script}");
}

/// A 40 MiB GPT disk (sgdisk): partition 1 empty, partition 2 starting
/// with an XFS superblock magic (all that finding it needs).
fn gpt_disk(dir: &Path) -> Vec<u8> {
    let p = dir.join("gpt.img");
    sh(&format!(
        "truncate -s 40M '{0}' && sgdisk -n1:2048:+8M -t1:ef00 -n2:0:+16M -t2:8300 '{0}' >/dev/null",
        p.display()
    ));
    let mut d = std::fs::read(&p).expect("read disk");
    d[P2 as usize..P2 as usize + 4].copy_from_slice(b"XFSB");
    d
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("xfskit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn every_byte_of_a_gpt_changed_alone_still_opens_partition_2() {
    if !have("sgdisk") {
        return skip("every_byte_of_a_gpt", "sgdisk is not installed");
    }
    let dir = tempdir("gpt-flip");
    let disk = gpt_disk(&dir);
    let len = disk.len();
    let dev = Arc::new(MemDevice::from_bytes(disk));
    // Sector 0 (MBR), the primary header and entries, the backup entries
    // and header.
    let ranges = [0..34 * 512, len - 33 * 512..len];
    let mut via_backup = 0;
    for r in ranges {
        for off in r {
            let mut b = [0u8; 1];
            dev.read_at(&mut b, off as u64).expect("read");
            dev.write_at(&[!b[0]], off as u64).expect("write");
            let img = disk::open_device(dev.clone(), Format::Raw, &ImageOptions::default(), "mem")
                .unwrap_or_else(|e| panic!("byte {off} changed: {e}"));
            let p = img.partition.expect("a partition");
            assert_eq!((p.number, p.start_bytes), (2, P2), "byte {off} changed");
            via_backup += usize::from(!img.notes.is_empty());
            dev.write_at(&b, off as u64).expect("write");
        }
    }
    // The header (92 bytes) and the 16 KiB entry array of the primary.
    assert!(
        via_backup >= 92 + 16384 - 32,
        "{via_backup} opens went to the backup"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Opens `bytes` as a qcow2 file and reads the places a filesystem would;
/// an error is fine, a panic is not.
fn try_qcow2(bytes: &Arc<MemDevice>) -> Result<(), String> {
    struct Shared(Arc<MemDevice>);
    impl Device for Shared {
        fn read_at(&self, b: &mut [u8], off: u64) -> std::io::Result<()> {
            self.0.read_at(b, off)
        }
        fn write_at(&self, b: &[u8], off: u64) -> std::io::Result<()> {
            self.0.write_at(b, off)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            self.0.len()
        }
    }
    let q = Qcow2::open(
        Path::new("/nonexistent/mem.qcow2"),
        Box::new(Shared(bytes.clone())),
    )
    .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 256 << 10];
    for off in [0, P2, q.len() - buf.len() as u64] {
        q.read_at(&mut buf, off).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn every_byte_of_qcow2_metadata_changed_alone_reads_or_fails_cleanly() {
    if !have("sgdisk") || !have("qemu-img") {
        return skip(
            "every_byte_of_qcow2_metadata",
            "sgdisk or qemu-img is not installed",
        );
    }
    let dir = tempdir("qcow2-flip");
    std::fs::write(dir.join("gpt.img"), gpt_disk(&dir)).expect("write disk");
    for (name, opts) in [
        ("plain.qcow2", ""),
        ("zlib.qcow2", "-c"),
        ("zstd.qcow2", "-c -o compression_type=zstd"),
    ] {
        let q = dir.join(name);
        sh(&format!(
            "qemu-img convert {opts} -O qcow2 '{}' '{}'",
            dir.join("gpt.img").display(),
            q.display()
        ));
        let bytes = std::fs::read(&q).expect("read qcow2");
        let be = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8"));
        let l1 = be(40) as usize;
        let l2 = (be(l1) & 0x00ff_ffff_ffff_fe00) as usize;
        let first = be(l2);
        let dev = Arc::new(MemDevice::from_bytes(bytes.clone()));
        try_qcow2(&dev).unwrap_or_else(|e| panic!("{name} unchanged: {e}"));
        // Header, L1 entries, the first L2 entries, and the data of guest
        // cluster 0 (compressed in the -c images).
        let data = (first & 0x00ff_ffff_ffff_fe00 & ((1 << 54) - 1)) as usize;
        let mut offs: Vec<usize> = (0..512).chain(l1..l1 + 64).chain(l2..l2 + 512).collect();
        offs.extend(data..(data + 1024).min(bytes.len()));
        let (mut ok, mut failed) = (0, 0);
        for off in offs {
            dev.write_at(&[!bytes[off]], off as u64).expect("write");
            match try_qcow2(&dev) {
                Ok(()) => ok += 1,
                Err(_) => failed += 1,
            }
            dev.write_at(&bytes[off..off + 1], off as u64)
                .expect("write");
        }
        println!("{name}: {ok} changes read, {failed} refused");
        assert!(failed > 0);
    }
    std::fs::remove_dir_all(&dir).ok();
}

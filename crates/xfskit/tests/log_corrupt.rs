//! Log recovery on damaged logs: a log the kernel left dirty, then
//! changed byte by byte through a patching device. Recovery must stop
//! where the kernel would (a torn record at the head is dropped) or fail
//! with an error naming the record and its log block (a bad CRC in the
//! middle, garbage instead of a header, a tail beyond the head, an item
//! naming blocks outside the filesystem), and never panic or hang.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;
use support::{can_mount, make_image, PatchedDevice, Scratch};
use xfskit::error::{Error, Location};
use xfskit::log::trans::RecInfo;
use xfskit::{Fs, OpenOptions};

/// A dirty log of a few dozen records.
fn dirty_image(s: &Scratch) -> std::path::PathBuf {
    make_image(s, &[], |mnt: &Path| {
        let script = r#"
set -e
cd "$1"
mkdir d e
for i in $(seq 1 1500); do echo $i > d/f$i; done
setfattr -n user.x -v 1 d/f1
sync
for i in $(seq 1 800); do : > e/g$i; done
for i in $(seq 1 400); do rm d/f$i; done
xfs_io -x -c 'shutdown -f' "$1"
"#;
        let st = Command::new("bash")
            .args(["-c", script, "w"])
            .arg(mnt)
            .status()
            .expect("bash");
        assert!(st.success(), "workload");
    })
}

struct Log {
    start: u64,
    nbb: u64,
    records: Vec<RecInfo>,
    head: u64,
    geo: xfskit::Geometry,
}

fn survey(img: &Path) -> Log {
    let fs = Fs::open(
        img,
        &OpenOptions {
            norecovery: true,
            ..Default::default()
        },
    )
    .expect("open");
    let geo = fs.geometry().clone();
    let c = xfskit::log::read_log(fs.device(), &geo).expect("the undamaged log reads");
    let ld = xfskit::log::log_dev(fs.device(), &geo).expect("log");
    Log {
        start: ld.start,
        nbb: ld.nbb,
        records: c.records.clone(),
        head: c.ends.head_blk,
        geo,
    }
}

/// Replays through `dev` on a thread; panics if it panics or takes more
/// than 20 s.
fn replay(dev: PatchedDevice, geo: &xfskit::Geometry) -> xfskit::Result<xfskit::log::Recovery> {
    let geo = geo.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = xfskit::log::replay(&dev, &geo);
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("replay hangs"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("replay panicked"),
    }
}

fn rec_bytes(l: &Log, r: &RecInfo) -> (u64, u64) {
    // Byte offset of the header, and blocks of header + data (no extended
    // headers at the default 32 KiB buffer size).
    (l.start + r.blk * 512, 1 + u64::from(r.len).div_ceil(512))
}

/// Recomputes the CRC of the record at `r` after patches.
fn restamp(dev: &mut PatchedDevice, l: &Log, r: &RecInfo) {
    let (off, n) = rec_bytes(l, r);
    let v = dev.read_vec(off, (n * 512) as usize);
    let crc = xfs_format::log::xlog_rec_crc(&v[..512], &[], &v[512..512 + r.len as usize]);
    dev.write(off + 32, &crc.to_le_bytes());
}

fn log_block_of(e: &Error) -> Option<u64> {
    match e {
        Error::BadCrc {
            location: Location::Log { block },
            ..
        }
        | Error::Corrupt {
            location: Location::Log { block },
            ..
        } => Some(*block),
        _ => None,
    }
}

#[test]
fn damaged_logs() {
    if !can_mount("damaged_logs") {
        return;
    }
    let s = Scratch::new("logcorrupt");
    let img = dirty_image(&s);
    let l = survey(&img);
    let n = l.records.len();
    assert!(n > 12, "the workload wrote only {n} records");
    assert!(l
        .records
        .iter()
        .all(|r| r.blk + 1 + u64::from(r.len).div_ceil(512) <= l.nbb));

    // 1. A bad CRC in the middle of the live log: an error naming it.
    let mid = &l.records[n / 3];
    let mut dev = PatchedDevice::new(&img);
    dev.flip(l.start + (mid.blk + 2) * 512 + 100, 0x40);
    let e = replay(dev, &l.geo)
        .err()
        .expect("a bad CRC mid-log is an error");
    assert!(matches!(e, Error::BadCrc { .. }), "{e}");
    assert_eq!(log_block_of(&e), Some(mid.blk), "{e}");

    // 2. A torn record at the head: dropped, the rest replays.
    let last = &l.records[n - 1];
    let mut dev = PatchedDevice::new(&img);
    dev.flip(l.start + (last.blk + 1) * 512 + 200, 0x01);
    let r = replay(dev, &l.geo).expect("a torn last record is not an error");
    assert_eq!(r.contents.ends.torn, vec![last.blk]);
    assert_eq!(r.contents.ends.head_blk, last.blk);
    assert_eq!(r.contents.records.len(), n - 1);

    // 3. Garbage where a header should be.
    let g = &l.records[n / 2];
    let mut dev = PatchedDevice::new(&img);
    dev.write(l.start + g.blk * 512, &[0x5a; 512]);
    let e = replay(dev, &l.geo).err().expect("garbage is an error");
    assert_eq!(log_block_of(&e), Some(g.blk), "{e}");

    // 4. A tail beyond the head (the last record's tail LSN, CRC redone).
    let mut dev = PatchedDevice::new(&img);
    let (off, _) = rec_bytes(&l, last);
    let bad_tail = (u64::from((last.lsn >> 32) as u32) << 32) | (l.head + 10);
    dev.write(off + 24, &bad_tail.to_be_bytes());
    restamp(&mut dev, &l, last);
    let e = replay(dev, &l.geo)
        .err()
        .expect("a tail beyond the head is an error");
    assert_eq!(log_block_of(&e), Some(last.blk), "{e}");
    assert!(e.to_string().contains("tail"), "{e}");

    // 5. A buffer item naming blocks outside the filesystem.
    let (rec, at) = find_buf_item(&img, &l).expect("a buffer item");
    let mut dev = PatchedDevice::new(&img);
    dev.write(at + 8, &(1u64 << 40).to_le_bytes());
    restamp(&mut dev, &l, &rec);
    let e = replay(dev, &l.geo)
        .err()
        .expect("an item outside the filesystem is an error");
    let msg = e.to_string();
    assert!(
        msg.contains("outside the filesystem") && msg.contains("log block"),
        "{msg}"
    );

    // 6. Random damage anywhere in the live log: an answer, never a panic
    // or a hang.
    let span = l.records[n - 1].blk + 1 + u64::from(l.records[n - 1].len).div_ceil(512);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..150 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let blk = l.records[0].blk + x % (span - l.records[0].blk);
        let off = l.start + blk * 512 + (x >> 20) % 512;
        let mut dev = PatchedDevice::new(&img);
        dev.flip(off, 1 << ((x >> 40) % 8));
        let _ = replay(dev, &l.geo);
    }
}

/// Finds a buffer item's format region in a record's data on disk: the
/// byte offset of its `blf_type`, with the record. The region must not
/// cross a 512-byte block boundary (block first words hold the cycle).
fn find_buf_item(img: &Path, l: &Log) -> Option<(RecInfo, u64)> {
    let dev = PatchedDevice::new(img);
    for r in &l.records {
        let (off, nblk) = rec_bytes(l, r);
        let v = dev.read_vec(off + 512, ((nblk - 1) * 512) as usize);
        for i in (12..v.len().saturating_sub(24)).step_by(4) {
            let op = &v[i - 12..i];
            let len = u32::from_be_bytes([op[4], op[5], op[6], op[7]]);
            if op[8] == 0x69 && (20..=88).contains(&len) && v[i] == 0x3c && v[i + 1] == 0x12 {
                // Op header and the first 16 bytes of the region inside one
                // block, past its first word; not a cancel or quota item.
                let b = i % 512;
                let flags = u16::from_le_bytes([v[i + 4], v[i + 5]]);
                if b >= 16 && b + 16 <= 512 && flags & 0x1e == 0 {
                    return Some((r.clone(), off + 512 + i as u64));
                }
            }
        }
    }
    None
}

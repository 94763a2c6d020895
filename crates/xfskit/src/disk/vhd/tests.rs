//! VHD unit tests: round trips, QEMU's sizing, and hostile input.

use super::*;
use crate::dev::MemDevice;

fn tmp(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("xfskit-vhd-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn no_parent(_: &Path, name: &str) -> Result<(PathBuf, Box<dyn Device>)> {
    Err(Error::NotFound(name.to_string()))
}

fn open_mem(bytes: Vec<u8>) -> Result<Vhd> {
    Vhd::open_with(
        Path::new("mem.vhd"),
        Arc::new(MemDevice::from_bytes(bytes)),
        &no_parent,
    )
}

/// A small dynamic VHD with some blocks written, as bytes.
fn small_dynamic() -> Vec<u8> {
    let p = tmp("small");
    let d = create(&p, 3 * BLOCK + 4096, false).unwrap();
    d.device.write_at(&[7u8; 4096], BLOCK + 512).unwrap();
    d.device.write_at(&[9u8; 512], 3 * BLOCK).unwrap();
    d.finish().unwrap();
    let b = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    b
}

#[test]
fn dynamic_and_fixed_round_trip() {
    for fixed in [false, true] {
        let p = tmp(&format!("rt-{fixed}"));
        let size = disk_size(5 << 20, fixed);
        let d = create(&p, size, fixed).unwrap();
        assert_eq!(d.device.len(), size);
        d.device.write_at(&[1u8; 8192], 4096).unwrap();
        d.device.write_at(&[2u8; 100], (2 << 20) - 50).unwrap();
        d.device.write_at(&[0u8; 4096], 3 << 20).unwrap();
        d.finish().unwrap();
        let dev = open_rw(&p).unwrap();
        dev.write_at(&[3u8; 10], size - 10).unwrap();
        dev.flush().unwrap();
        drop(dev);
        let (dev, fmt) = crate::disk::container::open_local(&p, false).unwrap();
        assert_eq!(fmt, crate::disk::Format::Vhd);
        assert_eq!(dev.len(), size);
        let mut b = vec![0u8; size as usize];
        dev.read_at(&mut b, 0).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 0));
        assert!(b[4096..12288].iter().all(|&x| x == 1));
        assert!(b[(2 << 20) - 50..(2 << 20) + 50].iter().all(|&x| x == 2));
        assert!(b[(3 << 20)..(3 << 20) + 4096].iter().all(|&x| x == 0));
        assert!(b[size as usize - 10..].iter().all(|&x| x == 3));
        let flen = std::fs::metadata(&p).unwrap().len();
        if fixed {
            assert_eq!(flen, size + 512);
            assert_eq!(size % (1 << 20), 0);
        }
        std::fs::remove_file(&p).unwrap();
    }
}

#[test]
fn sizes_follow_qemu() {
    // qemu-img create -f vpc 10M gives a disk of 10514432 bytes (CHS
    // 604 x 4 x 17 rounded up).
    assert_eq!(disk_size(10 << 20, false), 10_514_432);
    assert_eq!(disk_size(10_514_432, false), 10_514_432);
    assert_eq!(disk_size(10 << 20, true), 10 << 20);
    assert_eq!(disk_size((10 << 20) + 1, true), 11 << 20);
    let mut f = parse_footer(&new_footer(10 << 20, TYPE_FIXED), 0, Path::new("x")).unwrap();
    assert_eq!(f.virtual_size(), 10 << 20);
    f.creator = *b"qemu";
    assert_eq!(f.virtual_size(), chs_sectors(f.chs) * 512);
}

#[test]
fn damaged_footers_and_headers_are_errors() {
    let good = small_dynamic();
    assert!(open_mem(good.clone()).is_ok());
    // Both footers garbled: the checksum fails.
    let mut b = good.clone();
    let n = b.len();
    b[40] ^= 1;
    b[n - 512 + 40] ^= 1;
    let e = open_mem(b).err().expect("bad checksum");
    assert!(e.to_string().contains("checksum"), "{e}");
    // The copy at 0 garbled, the trailing footer good: still opens.
    let mut b = good.clone();
    b[40] ^= 1;
    assert!(open_mem(b).is_ok());
    // Too short for anything.
    assert!(open_mem(good[..100].to_vec()).is_err());
    assert!(open_mem(Vec::new()).is_err());
    // Truncated: blocks past the end.
    let e = open_mem(good[..good.len() - 4096].to_vec())
        .err()
        .expect("cut");
    assert!(e.to_string().contains("BAT entry"), "{e}");
    // A BAT entry pointing far past the end.
    let mut b = good.clone();
    b[1536..1540].copy_from_slice(&0x7fff_0000u32.to_be_bytes());
    let e = open_mem(b).err().expect("bad entry");
    assert!(e.to_string().contains("BAT entry 0"), "{e}");
    // A huge table: bounded by the file, no allocation.
    let mut b = good.clone();
    b[512 + 28..512 + 32].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(open_mem(b).is_err());
    // A block size that is no power of two, and zero.
    for bs in [3000u32, 0, 256] {
        let mut b = good.clone();
        b[512 + 32..512 + 36].copy_from_slice(&bs.to_be_bytes());
        assert!(open_mem(b).is_err());
    }
    // The dynamic header pointed past the end.
    let mut b = good.clone();
    b[16..24].copy_from_slice(&u64::MAX.to_be_bytes());
    let c = checksum(&b[..512], 64);
    b[64..68].copy_from_slice(&c.to_be_bytes());
    let n = b.len();
    let head = b[..512].to_vec();
    b[n - 512..n].copy_from_slice(&head);
    assert!(open_mem(b).is_err());
    // A differencing disk whose parent cannot be found.
    let mut b = good.clone();
    b[60..64].copy_from_slice(&TYPE_DIFF.to_be_bytes());
    let c = checksum(&b[..512], 64);
    b[64..68].copy_from_slice(&c.to_be_bytes());
    assert!(open_mem(b).is_err());
}

#[test]
fn garbled_bytes_never_panic() {
    let good = small_dynamic();
    let mut seed: u64 = 0x1234_5678;
    for _ in 0..400 {
        let mut b = good.clone();
        for _ in 0..4 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (seed >> 33) as usize % 4096.min(b.len());
            b[at] = (seed >> 20) as u8;
        }
        // Keep the checksum right so the mutation reaches the header.
        let c = checksum(&b[..512], 64);
        b[64..68].copy_from_slice(&c.to_be_bytes());
        if let Ok(v) = open_mem(b) {
            let mut buf = vec![0u8; 65536];
            let len = v.len();
            for off in [0, len / 2, len.saturating_sub(65536)] {
                let n = (len - off).min(65536) as usize;
                let _ = v.read_at(&mut buf[..n], off);
            }
        }
    }
}

#[test]
fn a_511_byte_footer_is_read() {
    let p = tmp("511");
    let d = create(&p, 1 << 20, true).unwrap();
    d.device.write_at(&[5u8; 512], 0).unwrap();
    d.finish().unwrap();
    let mut b = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    b.pop();
    let v = open_mem(b).unwrap();
    assert_eq!(v.len(), 1 << 20);
    let mut s = [0u8; 512];
    v.read_at(&mut s, 0).unwrap();
    assert_eq!(s, [5u8; 512]);
}

#[test]
fn a_block_allocated_over_stale_bytes_reads_zeros_around_the_write() {
    // A crash can leave an unreferenced block (and a footer) past the
    // BAT's last block: the next allocation goes there and must not show
    // the old bytes.
    let p = tmp("stale");
    let d = create(&p, 4 * BLOCK, false).unwrap();
    d.device.write_at(&[1u8; 512], 0).unwrap();
    d.finish().unwrap();
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    let footer = b[n - 512..].to_vec();
    b.truncate(n - 512);
    b.extend(std::iter::repeat_n(0xAAu8, 3 << 20));
    b.extend_from_slice(&footer);
    std::fs::write(&p, &b).unwrap();
    let dev = open_rw(&p).unwrap();
    dev.write_at(&[2u8; 512], 2 * BLOCK + 4096).unwrap();
    dev.flush().unwrap();
    drop(dev);
    let v = Vhd::open_with(&p, Arc::new(HostFile::open(&p).unwrap()), &no_parent).unwrap();
    let mut blk = vec![0u8; BLOCK as usize];
    v.read_at(&mut blk, 2 * BLOCK).unwrap();
    assert!(blk[..4096].iter().all(|&x| x == 0));
    assert!(blk[4096..4608].iter().all(|&x| x == 2));
    assert!(blk[4608..].iter().all(|&x| x == 0));
    v.read_at(&mut blk[..512], 0).unwrap();
    assert!(blk[..512].iter().all(|&x| x == 1));
    // The footer is at the new end, the copy at 0 unchanged.
    let b = std::fs::read(&p).unwrap();
    assert_eq!(&b[b.len() - 512..], &footer[..]);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn differencing_disks_are_not_written() {
    let mut b = small_dynamic();
    b[60..64].copy_from_slice(&TYPE_DIFF.to_be_bytes());
    let c = checksum(&b[..512], 64);
    b[64..68].copy_from_slice(&c.to_be_bytes());
    let p = tmp("diff");
    std::fs::write(&p, &b).unwrap();
    // Without a parent it does not open at all; with none named, neither.
    assert!(open_rw(&p).is_err());
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_block_over_the_headers_is_an_error() {
    let mut b = small_dynamic();
    // Entry 0 pointed at sector 1: the block would overlap the dynamic
    // header and the BAT, which writes would then damage.
    b[1536..1540].copy_from_slice(&1u32.to_be_bytes());
    let e = open_mem(b).err().expect("overlap");
    assert!(e.to_string().contains("overlaps"), "{e}");
}

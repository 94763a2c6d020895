//! VDI unit tests: round trips and hostile input.

use super::*;
use crate::dev::MemDevice;

fn tmp(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("xfskit-vdi-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn open_mem(bytes: Vec<u8>) -> Result<Vdi> {
    Vdi::open(Path::new("mem.vdi"), Arc::new(MemDevice::from_bytes(bytes)))
}

fn small() -> Vec<u8> {
    let p = tmp("small");
    let d = create(&p, 4 * BLOCK).unwrap();
    d.device.write_at(&[7u8; 4096], BLOCK + 512).unwrap();
    d.device.write_at(&[9u8; 512], 3 * BLOCK).unwrap();
    d.finish().unwrap();
    let b = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    b
}

#[test]
fn round_trip_in_place() {
    let p = tmp("rt");
    let size = disk_size(5 << 20);
    let d = create(&p, size).unwrap();
    d.device.write_at(&[1u8; 8192], 4096).unwrap();
    d.device.write_at(&[2u8; 100], (2 << 20) - 50).unwrap();
    d.device.write_at(&[0u8; 4096], 3 << 20).unwrap();
    d.finish().unwrap();
    let dev = open_rw(&p).unwrap();
    dev.write_at(&[3u8; 10], size - 10).unwrap();
    dev.flush().unwrap();
    drop(dev);
    let (dev, fmt) = crate::disk::container::open_local(&p, false).unwrap();
    assert_eq!(fmt, crate::disk::Format::Vdi);
    let mut b = vec![0u8; size as usize];
    dev.read_at(&mut b, 0).unwrap();
    assert!(b[..4096].iter().all(|&x| x == 0));
    assert!(b[4096..12288].iter().all(|&x| x == 1));
    assert!(b[(2 << 20) - 50..(2 << 20) + 50].iter().all(|&x| x == 2));
    assert!(b[size as usize - 10..].iter().all(|&x| x == 3));
    let raw = std::fs::read(&p).unwrap();
    // Blocks 0, 1 (the write across 2 MiB) , 2, and the last: 4 allocated.
    assert_eq!(le32(&raw, 0x184), 4);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn damaged_headers_are_errors() {
    let good = small();
    assert!(open_mem(good.clone()).is_ok());
    assert!(open_mem(good[..300].to_vec()).is_err());
    let set = |at: usize, v: u32| {
        let mut b = good.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        open_mem(b)
    };
    assert!(set(0x40, 0).is_err());
    assert!(matches!(set(0x44, 0x10000), Err(Error::Unsupported(_))));
    assert!(set(0x178, 3000).is_err());
    assert!(set(0x178, 0).is_err());
    assert!(set(0x180, u32::MAX).is_err()); // a map larger than the file
    assert!(set(0x154, 0x201).is_err());
    let e = set(0x200, 0x7fff_ffff).err().expect("entry past the end");
    assert!(e.to_string().contains("entry 0"), "{e}");
    assert!(set(0x1b8, 1).is_err()); // a parent UUID
                                     // The disk larger than its blocks.
    let mut b = good.clone();
    b[0x170..0x178].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(open_mem(b).is_err());
}

#[test]
fn garbled_bytes_never_panic() {
    let good = small();
    let mut seed: u64 = 0x9876_5432;
    for _ in 0..400 {
        let mut b = good.clone();
        for _ in 0..4 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = 0x140 + (seed >> 33) as usize % 0x100;
            b[at] = (seed >> 20) as u8;
        }
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
fn a_block_allocated_over_stale_bytes_reads_zeros_around_the_write() {
    let p = tmp("stale");
    let d = create(&p, 4 * BLOCK).unwrap();
    d.device.write_at(&[1u8; 512], 0).unwrap();
    d.finish().unwrap();
    // A block a crash left written but unreferenced, and the count one
    // ahead of the map (the crash fell between the two).
    let mut b = std::fs::read(&p).unwrap();
    b.extend(std::iter::repeat_n(0xAAu8, BLOCK as usize));
    b[0x184..0x188].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let dev = open_rw(&p).unwrap();
    dev.write_at(&[2u8; 512], 2 * BLOCK + 4096).unwrap();
    dev.flush().unwrap();
    drop(dev);
    let raw = std::fs::read(&p).unwrap();
    assert_eq!(le32(&raw, 0x184), 2, "the count follows the map");
    assert_eq!(raw.len() as u64, le32(&raw, 0x158) as u64 + 2 * BLOCK);
    let v = Vdi::open(&p, Arc::new(MemDevice::from_bytes(raw))).unwrap();
    let mut blk = vec![0u8; BLOCK as usize];
    v.read_at(&mut blk, 2 * BLOCK).unwrap();
    assert!(blk[..4096].iter().all(|&x| x == 0));
    assert!(blk[4096..4608].iter().all(|&x| x == 2));
    assert!(blk[4608..].iter().all(|&x| x == 0));
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_map_over_the_header_or_the_data_is_an_error() {
    let good = small();
    let mut b = good.clone();
    b[0x154..0x158].copy_from_slice(&0u32.to_le_bytes());
    assert!(open_mem(b).is_err());
    let mut b = good.clone();
    b[0x158..0x15c].copy_from_slice(&0x200u32.to_le_bytes());
    let e = open_mem(b).err().expect("overlap");
    assert!(e.to_string().contains("overlaps"), "{e}");
}

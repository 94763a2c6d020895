//! Large aligned writes of a writable image file go around the page cache
//! (`O_DIRECT`), small or unaligned ones through it. Whatever the mix and
//! order, reads through the device (buffered) and a fresh open of the file
//! must see the last bytes written everywhere.

use std::path::PathBuf;
use xfskit::dev::{Device, FileDevice};

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn mixed_direct_and_buffered_writes_read_back() {
    let t = TempFile(std::env::temp_dir().join(format!("xfskit-direct-{}", std::process::id())));
    let size = 8 << 20;
    std::fs::File::create(&t.0).unwrap().set_len(size).unwrap();
    let dev = FileDevice::open_read_write(&t.0).unwrap();
    let mut model = vec![0u8; size as usize];
    let mut apply = |off: usize, parts: &[Vec<u8>], dev: &FileDevice| {
        let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        dev.write_vectored_at(&slices, off as u64).unwrap();
        let mut at = off;
        for p in parts {
            model[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        // Read back through the device right away.
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut got = vec![0u8; total];
        dev.read_at(&mut got, off as u64).unwrap();
        assert!(
            got == model[off..off + total],
            "read-back after write at {off} differs"
        );
    };
    // A small buffered write, then a large aligned (direct) write over it.
    apply(4096 + 512, &[pattern(1, 512)], &dev);
    apply(0, &[pattern(2, 1 << 20)], &dev);
    // Many pieces, some short (gathered), aligned overall.
    let pieces: Vec<Vec<u8>> = (0..64)
        .map(|i| pattern(i as u8, if i % 2 == 0 { 512 } else { 7680 }))
        .collect();
    apply(2 << 20, &pieces, &dev);
    // Unaligned large write (buffered), overlapping the direct one.
    apply((2 << 20) + 1000, &[pattern(9, 300_000)], &dev);
    // Direct again over the buffered bytes just written.
    apply(2 << 20, &[pattern(10, 256 << 10)], &dev);
    // A short write into the middle of directly written bytes.
    apply(100_000, &[pattern(11, 4096)], &dev);
    dev.flush().unwrap();
    drop(dev);
    let on_disk = std::fs::read(&t.0).unwrap();
    assert_eq!(on_disk.len(), model.len());
    let first_diff = on_disk.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "the file differs from what was written");
}

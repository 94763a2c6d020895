//! Making a new, empty qcow2 v3 file: 64 KiB clusters, 16-bit refcounts,
//! no backing file. Cluster 0 holds the header, cluster 1 the refcount
//! table (one cluster: room for 8192 refcount blocks, 16 TiB of clusters),
//! cluster 2 the first refcount block, then the L1 table. Everything the
//! guest writes later is allocated by [`super::Qcow2::open_rw`]'s writer.

use super::header::MAGIC;
use crate::bytes::{put_be32, put_be64};
use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

const CLUSTER_BITS: u32 = 16;
const CLUSTER: u64 = 1 << CLUSTER_BITS;
/// Version 3 header length with the compression type byte (and padding).
const HEADER_LEN: u32 = 112;

/// Creates `path` (which must not exist) as an empty qcow2 disk of
/// `size_bytes` (a multiple of 512).
pub fn create(path: &Path, size_bytes: u64) -> Result<()> {
    if size_bytes == 0 || !size_bytes.is_multiple_of(512) {
        return Err(Error::Invalid(format!(
            "a qcow2 disk of {size_bytes} bytes (a positive multiple of 512 is needed)"
        )));
    }
    // Each L2 table maps CLUSTER / 8 clusters.
    let per_l1 = CLUSTER * (CLUSTER / 8);
    let l1_entries = size_bytes.div_ceil(per_l1);
    let l1_clusters = (l1_entries * 8).div_ceil(CLUSTER);
    if l1_entries > u64::from(u32::MAX) || l1_clusters * CLUSTER > 32 << 20 {
        return Err(Error::Invalid(format!(
            "a qcow2 disk of {size_bytes} bytes is too large"
        )));
    }
    let (rt_off, rb_off, l1_off) = (CLUSTER, 2 * CLUSTER, 3 * CLUSTER);
    let used = 3 + l1_clusters;
    let mut img = vec![0u8; (used * CLUSTER) as usize];
    let h = &mut img[..CLUSTER as usize];
    h[0..4].copy_from_slice(MAGIC);
    put_be32(h, 4, 3); // version
    put_be32(h, 20, CLUSTER_BITS);
    put_be64(h, 24, size_bytes);
    put_be32(h, 36, l1_entries as u32);
    put_be64(h, 40, l1_off);
    put_be64(h, 48, rt_off);
    put_be32(h, 56, 1); // refcount table clusters
    put_be32(h, 96, 4); // refcount order: 16 bits
    put_be32(h, 100, HEADER_LEN);
    // Byte 104 (compression type 0, deflate) and the end-of-extensions
    // marker after the header are zeros already.
    put_be64(&mut img, rt_off as usize, rb_off);
    for c in 0..used {
        let at = (rb_off + 2 * c) as usize;
        img[at..at + 2].copy_from_slice(&1u16.to_be_bytes());
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ))
        })?;
    f.write_all(&img)?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dev::Device;

    #[test]
    fn a_new_file_opens_reads_zeros_and_takes_writes() {
        let dir = std::env::temp_dir().join(format!("xfskit-qcreate-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        super::create(&dir, 3 << 30).unwrap();
        let q = super::super::Qcow2::open_rw(&dir).unwrap();
        assert_eq!(q.len(), 3 << 30);
        let mut b = vec![1u8; 4096];
        q.read_at(&mut b, 2 << 30).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        q.write_at(&[9u8; 4096], (2 << 30) + 8192).unwrap();
        q.flush().unwrap();
        drop(q);
        let q = super::super::Qcow2::open_rw(&dir).unwrap();
        q.read_at(&mut b, (2 << 30) + 8192).unwrap();
        assert!(b.iter().all(|&x| x == 9));
        std::fs::remove_file(&dir).unwrap();
    }
}

//! Scanning the inodes of one allocation group.
//!
//! The inobt walk yields the chunks; each chunk is cut into inode clusters
//! (the unit XFS reads and writes inodes in) and only the clusters holding
//! at least one allocated inode are read. Clusters that follow each other
//! on disk are merged into one large read of at most `batch` clusters, and
//! reads up to 16 MiB ahead are announced to the device (readahead), so
//! that the disk works while earlier clusters are decoded. Inodes are
//! decoded straight from the read buffer into a reused batch. Results come
//! out in inode number order.

use super::decode::decode_bstat;
use super::inobt;
use super::{Bstat, ScanStats};
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::AgNumber;
use std::sync::atomic::{AtomicBool, Ordering};
use xfs_format::btree::XFS_INODES_PER_CHUNK;

/// Bytes of inode clusters announced to the device ahead of the read.
const RA_BYTES: u64 = 16 << 20;

/// A run of inodes contiguous on disk, with the allocated ones marked.
#[derive(Debug, Clone, Copy)]
struct Group {
    /// AG inode number of the first inode of the group.
    agino: u32,
    /// Bit i set: inode `agino + i` is allocated and wanted.
    mask: u64,
}

/// One merged read: consecutive groups that touch on disk.
#[derive(Debug, Clone)]
struct Run {
    /// Byte offset on the device.
    off: u64,
    /// Index of its first group and number of groups.
    first: usize,
    groups: usize,
}

/// What one AG scan needs besides the filesystem.
pub(crate) struct AgJob<'a> {
    /// The AG.
    pub agno: u32,
    /// Skip inodes below this AG inode number.
    pub start_agino: u32,
    /// Clusters per merged read (at least 1).
    pub batch: usize,
    /// Inodes the kernel never reports (realtime and quota metadata).
    pub hidden: &'a [u64],
    /// Set by anyone to stop the scan early.
    pub stop: &'a AtomicBool,
}

/// Scans one AG, calling `emit` with each decoded batch in inode order.
/// `emit` returns `false` to stop.
pub(crate) fn scan_ag(
    fs: &Fs,
    job: &AgJob<'_>,
    emit: &mut dyn FnMut(&[Bstat]) -> bool,
) -> Result<ScanStats> {
    let geo = fs.geometry();
    let agno = job.agno;
    let ag_len = u64::from(geo.ag_len(AgNumber(agno)));
    let isize = u64::from(geo.inode_size);
    // Inodes per group: one cluster, but never more than a chunk.
    let gsize = geo.inodes_per_cluster().clamp(1, XFS_INODES_PER_CHUNK);
    let gmask = if gsize == 64 {
        u64::MAX
    } else {
        (1u64 << gsize) - 1
    };
    let mut stats = ScanStats {
        ags: 1,
        ..ScanStats::default()
    };

    let mut groups: Vec<Group> = Vec::new();
    stats.inobt_blocks = inobt::walk(fs, agno, job.start_agino, |rec| {
        stats.chunks += 1;
        // The whole chunk must lie inside the AG.
        let last_agbno =
            (u64::from(rec.startino) + u64::from(XFS_INODES_PER_CHUNK) - 1) >> geo.inopb_log;
        if last_agbno >= ag_len {
            return Err(Error::corrupt(
                "inobt record",
                Location::Other(format!("AG {agno} chunk {}", rec.startino)),
                "chunk lies past the end of the AG",
            ));
        }
        let alloc = rec.allocated();
        for g in 0..XFS_INODES_PER_CHUNK / gsize {
            let mut mask = (alloc >> (g * gsize)) & gmask;
            let agino = rec.startino + g * gsize;
            if agino + gsize <= job.start_agino {
                continue;
            }
            if agino < job.start_agino {
                mask &= !((1u64 << (job.start_agino - agino)) - 1);
            }
            if mask != 0 {
                groups.push(Group { agino, mask });
            }
        }
        Ok(!job.stop.load(Ordering::Relaxed))
    })?;

    let off_of = |agino: u32| geo.ino_to_bytes(geo.ino_make(AgNumber(agno), agino));
    let glen = u64::from(gsize) * isize;
    let mut runs: Vec<Run> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let off = off_of(g.agino);
        match runs.last_mut() {
            Some(r) if r.groups < job.batch && r.off + r.groups as u64 * glen == off => {
                r.groups += 1
            }
            _ => runs.push(Run {
                off,
                first: i,
                groups: 1,
            }),
        }
    }

    let dev = fs.device();
    // Readahead: keep up to RA_BYTES announced beyond the run being read.
    let mut ra_next = 0usize;
    let mut ra_end = 0u64; // bytes of runs announced so far
    let mut done = 0u64; // bytes of runs read so far
    let mut buf: Vec<u8> = Vec::new();
    let mut out: Vec<Bstat> = Vec::with_capacity(job.batch * gsize as usize);
    for run in &runs {
        if job.stop.load(Ordering::Relaxed) {
            break;
        }
        let len = run.groups as u64 * glen;
        while ra_next < runs.len() && ra_end < done + len + RA_BYTES {
            let r = &runs[ra_next];
            let rl = r.groups as u64 * glen;
            dev.will_need(r.off, rl);
            ra_end += rl;
            ra_next += 1;
        }
        buf.resize(len as usize, 0);
        fs.read_bytes(run.off, &mut buf)?;
        done += len;
        stats.reads += 1;
        stats.bytes_read += len;
        stats.clusters_read += run.groups as u64;
        out.clear();
        for (gi, g) in groups[run.first..run.first + run.groups].iter().enumerate() {
            let base = gi as u64 * glen;
            let ino0 = geo.ino_make(AgNumber(agno), g.agino).0;
            let mut m = g.mask;
            while m != 0 {
                let i = m.trailing_zeros();
                m &= m - 1;
                let ino = ino0 + u64::from(i);
                let at = (base + u64::from(i) * isize) as usize;
                let raw = &buf[at..at + isize as usize];
                if (raw_mode(raw) == 0 && raw.starts_with(b"IN"))
                    || job.hidden.contains(&ino)
                    || (geo.features.metadir && raw_is_metadata(raw))
                {
                    // Metadata inodes are private (the quota and realtime
                    // inodes the superblock names, every inode of a metadata
                    // directory tree); an allocated inode with mode 0 is
                    // treated as free, as the kernel does.
                    stats.skipped += 1;
                    continue;
                }
                out.push(decode_bstat(geo, ino, raw)?);
            }
        }
        stats.inodes += out.len() as u64;
        if !out.is_empty() && !emit(&out) {
            break;
        }
    }
    Ok(stats)
}

/// True when a raw v3 inode carries the metadata flag (di_flags2).
fn raw_is_metadata(raw: &[u8]) -> bool {
    let Some(f2) = raw.get(120..128) else {
        return false;
    };
    let f2 = u64::from_be_bytes(f2.try_into().unwrap_or([0; 8]));
    raw[4] >= 3 && f2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0
}

/// The mode field of a raw inode (bytes 2..4).
fn raw_mode(raw: &[u8]) -> u16 {
    u16::from_be_bytes([raw[2], raw[3]])
}

//! Writing into a qcow2 image so that `qemu-img check` finds it clean.
//!
//! A write into a plain cluster whose refcount is one (the COPIED bit of
//! its L2 entry) goes in place. Any other cluster (unallocated, zero,
//! compressed, or read from the backing file) is copied on write: the whole
//! cluster is read through the map, the new bytes laid over it, and it is
//! written to a new cluster at the end of the file. Then its refcount is
//! set, the old cluster's refcount dropped (a compressed one's host
//! clusters), and last the L2 entry is pointed at it, so that a crash in
//! between leaks a cluster rather than losing data. A missing L2 table is
//! allocated the same way, a missing refcount block too (in the existing
//! refcount table; a full table is refused). Zeros written over a cluster
//! that reads as zeros allocate nothing. Images with internal
//! snapshots, refcounts other than 16 bits, a dirty flag or autoclear
//! features (bitmaps) are refused for writing.

use super::{corrupt_io, Qcow2, L2_COMPRESSED, L2_ZERO, OFFSET_MASK};
use crate::dev::Device;
use crate::error::{Error, Result};
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Bit 63 of L1 and L2 entries: the refcount is exactly one.
const COPIED: u64 = 1 << 63;
/// Largest refcount table read (8 MiB covers petabytes of clusters).
const RT_MAX_BYTES: u64 = 8 << 20;

/// Allocation state, under one lock.
pub(super) struct Writer {
    /// The refcount table: host offsets of refcount blocks.
    rt: Vec<u64>,
    rt_offset: u64,
    /// 16-bit refcounts per refcount block.
    per_block: u64,
    /// The next free host cluster (the end of the file).
    end: u64,
}

use crate::dev::GrowFile as HostFile;

impl Qcow2 {
    /// Opens the qcow2 file at `path` for reading and writing (its backing
    /// chain read-only).
    pub fn open_rw(path: &Path) -> Result<Qcow2> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        crate::dev::lock_for_writing(&file, path)?;
        let host = HostFile::from_file(file)?;
        let mut q = Qcow2::open(path, Box::new(host))?;
        let h = &q.header;
        let refuse = |why: &str| {
            Err(Error::Unsupported(format!(
                "writing to {}: {why}",
                path.display()
            )))
        };
        if h.snapshots != 0 {
            return refuse("the image has internal snapshots");
        }
        if h.refcount_order != 4 {
            return refuse("refcounts are not 16 bits wide");
        }
        if h.dirty {
            return refuse("the image was not closed cleanly (run qemu-img check -r all)");
        }
        if h.autoclear != 0 {
            return refuse("the image has autoclear features (persistent bitmaps)");
        }
        let cluster = q.cluster();
        let rt_bytes = u64::from(h.refcount_table_clusters) * cluster;
        let flen = q.file.len();
        if rt_bytes == 0
            || rt_bytes > RT_MAX_BYTES
            || !h.refcount_table_offset.is_multiple_of(cluster)
            || h.refcount_table_offset
                .checked_add(rt_bytes)
                .is_none_or(|e| e > flen)
        {
            return Err(crate::disk::corrupt(
                "qcow2 refcount table",
                format!("offset {}", h.refcount_table_offset),
                format!("{rt_bytes} bytes do not lie inside the {flen}-byte file"),
            ));
        }
        let mut raw = vec![0u8; rt_bytes as usize];
        q.file.read_at(&mut raw, h.refcount_table_offset)?;
        let rt: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        for (i, &b) in rt.iter().enumerate() {
            let off = b & OFFSET_MASK;
            if off != 0 && (!off.is_multiple_of(cluster) || off + cluster > flen) {
                return Err(crate::disk::corrupt(
                    "qcow2 refcount table entry",
                    format!(
                        "entry {i} of the table at offset {}",
                        h.refcount_table_offset
                    ),
                    format!("the refcount block at offset {off} lies outside the {flen}-byte file"),
                ));
            }
        }
        q.writer = Some(Mutex::new(Writer {
            rt,
            rt_offset: h.refcount_table_offset,
            per_block: cluster / 2,
            end: flen.div_ceil(cluster) * cluster,
        }));
        Ok(q)
    }

    /// Writes guest bytes (the Device's write_at).
    pub(super) fn write_guest(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the qcow2 image is open read-only",
            ));
        };
        crate::disk::inside("write", "qcow2", self.header.size, off, buf.len())?;
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let cluster = self.cluster();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let within = pos & (cluster - 1);
            let n = ((cluster - within) as usize).min(buf.len() - done);
            self.write_cluster(
                &mut w,
                pos >> self.header.cluster_bits,
                within,
                &buf[done..done + n],
            )?;
            done += n;
        }
        Ok(())
    }

    fn write_cluster(&self, w: &mut Writer, gc: u64, within: u64, piece: &[u8]) -> io::Result<()> {
        let cb = self.header.cluster_bits;
        let cluster = self.cluster();
        let l2_bits = cb - 3;
        let l1_index = (gc >> l2_bits) as usize;
        let index = (gc & ((1 << l2_bits) - 1)) as usize;
        let l1e = self.l1.read().unwrap_or_else(|p| p.into_inner())[l1_index];
        let mut l2_off = l1e & OFFSET_MASK;
        let mut old = 0u64;
        if l2_off != 0 {
            if l1e & COPIED == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("qcow2: the L2 table at offset {l2_off} is shared (snapshots)"),
                ));
            }
            old = self.l2_table(l2_off)?[index];
            let plain_own = old & (L2_COMPRESSED | COPIED) == COPIED
                && old & OFFSET_MASK != 0
                && !(self.header.version >= 3 && old & L2_ZERO != 0);
            if plain_own {
                return self.file.write_at(piece, (old & OFFSET_MASK) + within);
            }
        }
        // Zeros over a cluster that already reads as zeros (unallocated
        // without a backing file, or a zero cluster) change nothing: no
        // cluster is allocated for them (mkfs zeroing the log, say).
        let reads_zero = (old & OFFSET_MASK == 0 && old & L2_COMPRESSED == 0)
            && (self.backing.is_none() || (self.header.version >= 3 && old & L2_ZERO != 0));
        if reads_zero && piece.iter().all(|&b| b == 0) {
            return Ok(());
        }
        // Copy on write: the cluster as it reads now, with the new bytes.
        let guest = gc << cb;
        let avail = (self.header.size - guest).min(cluster) as usize;
        let mut data = vec![0u8; cluster as usize];
        if within != 0 || piece.len() < avail {
            self.read_at(&mut data[..avail], guest)?;
        }
        data[within as usize..within as usize + piece.len()].copy_from_slice(piece);
        if l2_off == 0 {
            l2_off = self.new_l2(w, l1_index)?;
        }
        let host = self.alloc(w)?;
        self.file.write_at(&data, host)?;
        if old & L2_COMPRESSED != 0 {
            let x = 62 - (cb - 8);
            let start = (old & ((1 << x) - 1)) & !511;
            let sectors = ((old >> x) & ((1 << (cb - 8)) - 1)) + 1;
            let last = start + sectors * 512 - 1;
            for c in start / cluster..=last / cluster {
                self.add_ref(w, c * cluster, -1)?;
            }
            self.inflated
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(h, _)| *h != old & ((1 << x) - 1));
        } else if old & OFFSET_MASK != 0 {
            self.add_ref(w, old & OFFSET_MASK, -1)?;
        }
        self.set_l2(l2_off, index, host | COPIED)
    }

    /// Points entry `index` of the L2 table at `l2_off` to `entry`.
    fn set_l2(&self, l2_off: u64, index: usize, entry: u64) -> io::Result<()> {
        self.file
            .write_at(&entry.to_be_bytes(), l2_off + 8 * index as u64)?;
        let t = self.l2_table(l2_off)?;
        let mut v = t.to_vec();
        v[index] = entry;
        let mut cache = self.l2_cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(l2_off, Arc::from(v));
        Ok(())
    }

    /// A zeroed L2 table for L1 entry `l1_index`.
    fn new_l2(&self, w: &mut Writer, l1_index: usize) -> io::Result<u64> {
        let off = self.alloc(w)?;
        self.file
            .write_at(&vec![0u8; self.cluster() as usize], off)?;
        let e = off | COPIED;
        self.file.write_at(
            &e.to_be_bytes(),
            self.header.l1_offset + 8 * l1_index as u64,
        )?;
        self.l1.write().unwrap_or_else(|p| p.into_inner())[l1_index] = e;
        Ok(off)
    }

    /// A new cluster at the end of the file, its refcount one.
    fn alloc(&self, w: &mut Writer) -> io::Result<u64> {
        let host = w.end;
        w.end += self.cluster();
        self.add_ref(w, host, 1)?;
        Ok(host)
    }

    /// Adds `delta` to the refcount of the host cluster at `host`.
    fn add_ref(&self, w: &mut Writer, host: u64, delta: i64) -> io::Result<()> {
        let cluster = self.cluster();
        let idx = host / cluster;
        let rt_i = (idx / w.per_block) as usize;
        if rt_i >= w.rt.len() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "qcow2: the refcount table is full (growing it is not supported)",
            ));
        }
        let mut block = w.rt[rt_i] & OFFSET_MASK;
        if block == 0 {
            block = w.end;
            w.end += cluster;
            self.file.write_at(&vec![0u8; cluster as usize], block)?;
            w.rt[rt_i] = block;
            self.file
                .write_at(&block.to_be_bytes(), w.rt_offset + 8 * rt_i as u64)?;
            self.add_ref(w, block, 1)?;
        }
        let at = block + 2 * (idx % w.per_block);
        let mut b = [0u8; 2];
        self.file.read_at(&mut b, at)?;
        let old = i64::from(u16::from_be_bytes(b));
        let new = old + delta;
        if !(0..=i64::from(u16::MAX)).contains(&new) {
            return Err(corrupt_io(format!(
                "qcow2 {}: refcount of the cluster at offset {host} (block at offset {block}) would go from {old} to {new}",
                self.path.display()
            )));
        }
        self.file.write_at(&(new as u16).to_be_bytes(), at)
    }
}

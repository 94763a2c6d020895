//! Writing into a VHD in place.
//!
//! A fixed disk is written where its bytes are. A dynamic disk's write
//! into an allocated block goes in place (its bitmap set whole first, as
//! QEMU does, so that readers that honour bitmaps see every sector). A
//! write into an unallocated block allocates one where the next free
//! block begins (where the trailing footer is): its bitmap and the new
//! data (zeros around it, where the file already has bytes there; a hole
//! past the file's end reads as zeros) are written first, then the footer
//! after the block, then, after a flush when editing an existing image,
//! the BAT entry. A crash before the BAT entry leaves an unreferenced
//! block (reused by the next allocation); the copy of the footer at
//! offset 0 keeps the image readable even while the trailing footer is
//! being moved. Zeros written over an unallocated block allocate nothing.
//! Differencing disks are refused (their unallocated sectors would have to
//! be copied up from the parent).

use super::{Layout, Vhd, BITMAP_CACHE, FOOTER, TYPE_DIFF, TYPE_FIXED, UNALLOCATED};
use crate::dev::Device;
use crate::disk::corrupt_io;
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Allocation state, under one lock (writes are serialized).
pub(super) struct Writer {
    /// Where the next block goes (QEMU's free data block offset).
    end: u64,
    /// Sync the data of a new block before its BAT entry points at it
    /// (an existing image edited; a new one being built has nothing to
    /// lose).
    sync: bool,
    /// Blocks (by BAT entry) whose bitmap is known to be all ones.
    full: HashSet<u32>,
    /// A new fixed disk: one bit per MiB written so far. Zeros written
    /// where nothing was are skipped (the file is a hole there), so that
    /// a new disk stays sparse as a raw one does.
    fresh: Option<Vec<u64>>,
}

impl Writer {
    /// True when the MiBs `off..off+len` have been written to (marking
    /// them written when `mark`).
    fn touched(&mut self, off: u64, len: u64, mark: bool) -> bool {
        let Some(bits) = &mut self.fresh else {
            return true;
        };
        let mut any = false;
        for m in off >> 20..=(off + len - 1) >> 20 {
            let (w, b) = ((m / 64) as usize, m % 64);
            if let Some(x) = bits.get_mut(w) {
                any |= *x & (1 << b) != 0;
                if mark {
                    *x |= 1 << b;
                }
            }
        }
        any
    }
}

impl Vhd {
    /// Opens the VHD on `host` for writing; `sync`: order the writes of
    /// each allocation with a flush.
    pub(super) fn open_rw_on(path: &Path, host: Arc<dyn Device>, sync: bool) -> Result<Vhd> {
        let mut v = Vhd::open_with(path, host, &|p: &Path, name: &str| {
            super::super::container::local_opener(p, name)
        })?;
        let refuse = |why: &str| {
            Err(Error::Unsupported(format!(
                "writing to {}: {why}",
                path.display()
            )))
        };
        if v.footer.disk_type == TYPE_DIFF {
            return refuse("a differencing VHD is written only by its own tools (write a copy: qemu-img convert -O vpc)");
        }
        let end = match &v.layout {
            Layout::Fixed { data_len } => {
                if *data_len < v.size {
                    return Err(crate::disk::corrupt(
                        "VHD footer",
                        path.display().to_string(),
                        format!(
                            "the fixed disk of {} bytes is cut short: the file holds {data_len}",
                            v.size
                        ),
                    ));
                }
                0
            }
            Layout::Sparse {
                block,
                bitmap,
                bat_offset,
                bat,
                ..
            } => {
                let bat = bat.read().unwrap_or_else(|p| p.into_inner());
                let mut end = (bat_offset + 4 * bat.len() as u64).div_ceil(512) * 512;
                for &e in bat.iter() {
                    if e != UNALLOCATED {
                        end = end.max(u64::from(e) * 512 + bitmap + block);
                    }
                }
                end
            }
        };
        if v.footer.disk_type != TYPE_FIXED && v.footer.data_offset != 512 {
            // Our footer copy at 0 is what keeps a half-moved footer
            // harmless; a header elsewhere is unusual enough to refuse.
            return refuse("the dynamic disk header is not right after the footer copy");
        }
        let fresh = (!sync && v.footer.disk_type == TYPE_FIXED)
            .then(|| vec![0u64; (v.size >> 20).div_ceil(64) as usize + 1]);
        v.writer = Some(Mutex::new(Writer {
            end,
            sync,
            full: HashSet::new(),
            fresh,
        }));
        Ok(v)
    }

    /// Writes guest bytes (the Device's write_at).
    pub(super) fn write_guest(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(w) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the VHD image is open read-only",
            ));
        };
        crate::disk::inside("write", "VHD", self.size, off, buf.len())?;
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let (block, bitmap, bat_offset) = match &self.layout {
            Layout::Fixed { .. } => {
                if buf.is_empty() {
                    return Ok(());
                }
                let zeros = w.fresh.is_some() && buf.iter().all(|&b| b == 0);
                if zeros && !w.touched(off, buf.len() as u64, false) {
                    return Ok(());
                }
                w.touched(off, buf.len() as u64, true);
                return self.file.write_at(buf, off);
            }
            Layout::Sparse {
                block,
                bitmap,
                bat_offset,
                ..
            } => (*block, *bitmap, *bat_offset),
        };
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let idx = pos / block;
            let within = pos % block;
            let n = ((block - within) as usize).min(buf.len() - done);
            let piece = &buf[done..done + n];
            let e = self.bat_entry(idx);
            if e != UNALLOCATED {
                self.fill_bitmap(&mut w, e, bitmap)?;
                self.file
                    .write_at(piece, u64::from(e) * 512 + bitmap + within)?;
            } else if piece.iter().any(|&b| b != 0) {
                self.allocate(&mut w, idx, within, piece, (block, bitmap, bat_offset))?;
            }
            done += n;
        }
        Ok(())
    }

    /// Makes the bitmap of the block at BAT entry `e` all ones.
    fn fill_bitmap(&self, w: &mut Writer, e: u32, bitmap: u64) -> io::Result<()> {
        if w.full.contains(&e) {
            return Ok(());
        }
        let mut b = vec![0u8; bitmap as usize];
        self.file.read_at(&mut b, u64::from(e) * 512)?;
        if b.iter().any(|&x| x != 0xFF) {
            b.fill(0xFF);
            self.file.write_at(&b, u64::from(e) * 512)?;
            self.bitmaps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&e);
        }
        if w.full.len() >= BITMAP_CACHE * 16 {
            w.full.clear();
        }
        w.full.insert(e);
        Ok(())
    }

    /// A new block for guest block `idx`, holding `piece` at `within`.
    fn allocate(
        &self,
        w: &mut Writer,
        idx: u64,
        within: u64,
        piece: &[u8],
        (block, bitmap, bat_offset): (u64, u64, u64),
    ) -> io::Result<()> {
        let start = w.end;
        let sector = start / 512;
        let Ok(entry) = u32::try_from(sector) else {
            return Err(corrupt_io(format!(
                "VHD {}: no room for another block (the file would pass 2 TiB)",
                self.path.display()
            )));
        };
        if entry == UNALLOCATED {
            return Err(corrupt_io(format!(
                "VHD {}: no room for another block",
                self.path.display()
            )));
        }
        let data = start + bitmap;
        let end = data + block;
        // Bytes the file already has in the block (an old footer, a block
        // a crash left unreferenced) are overwritten with zeros; past the
        // file's end the block is a hole, zeros already.
        let have = self.file.len().clamp(data, end);
        let ones = vec![0xFFu8; bitmap as usize];
        self.file.write_at(&ones, start)?;
        zero_fill(&*self.file, data, have)?;
        self.file.write_at(piece, data + within)?;
        self.file.write_at(&self.footer.raw[..FOOTER], end)?;
        if w.sync {
            self.file.flush()?;
        }
        self.file
            .write_at(&entry.to_be_bytes(), bat_offset + 4 * idx)?;
        if let Layout::Sparse { bat, .. } = &self.layout {
            bat.write().unwrap_or_else(|p| p.into_inner())[idx as usize] = entry;
        }
        w.end = end;
        w.full.insert(entry);
        Ok(())
    }
}

/// Writes zeros over bytes `lo..hi` of `file`, a MiB at a time.
pub(crate) fn zero_fill(file: &dyn Device, lo: u64, hi: u64) -> io::Result<()> {
    let zeros = vec![0u8; (hi.saturating_sub(lo)).min(1 << 20) as usize];
    let mut at = lo;
    while at < hi {
        let n = (hi - at).min(zeros.len() as u64) as usize;
        file.write_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

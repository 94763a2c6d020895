//! File contents: writes (allocating blocks for holes), truncation, hole
//! punching and preallocation (unwritten extents).

use crate::dev::aligned::{self, AlignedBuf};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::Ino;
use crate::inode::{Extent, FileType, Fork, Inode, Timestamp};
use crate::trans::Trans;

/// Bytes of data handled per transaction (bounds each transaction's
/// allocation work).
const WRITE_CHUNK: u64 = 16 << 20;

fn read_file_inode(tp: &mut Trans<'_>, ino: Ino) -> Result<Inode> {
    let ip = tp.read_inode(ino)?;
    file_only(&ip)?;
    Ok(ip)
}

fn file_only(ip: &Inode) -> Result<()> {
    match ip.file_type {
        FileType::File => Ok(()),
        FileType::Dir => Err(Error::IsDir(format!("inode {}", ip.ino.0))),
        _ => Err(Error::Invalid(format!(
            "inode {} is not a regular file",
            ip.ino.0
        ))),
    }
}

/// What a write to `ip` is refused for by the inode itself: not a
/// regular file, or its flags (without O_APPEND, `appending` false, an
/// append-only file refuses it too).
fn may_write_data(ip: &Inode, appending: bool) -> Result<()> {
    file_only(ip)?;
    if appending {
        super::guard::may_write(ip, "writing")
    } else {
        super::guard::may_change(ip, "writing without O_APPEND")
    }
}

/// The bytes of one write: borrowed from the caller, or in an aligned
/// buffer the write may queue as it is.
enum Src<'a> {
    Slice(&'a [u8]),
    Owned(AlignedBuf),
}

impl Src<'_> {
    fn len(&self) -> usize {
        self.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Src::Slice(s) => s,
            Src::Owned(b) => b.as_slice(),
        }
    }
}

/// The disk block of file block `lo` when `map` maps all of `lo..hi`
/// with one extent.
fn one_extent(map: &[Extent], lo: u64, hi: u64) -> Option<u64> {
    map.iter()
        .find(|e| e.offset <= lo && e.end() >= hi)
        .map(|e| e.start.0 + (lo - e.offset))
}

impl Fs {
    /// Writes `data` at byte `offset` of regular file `ino`, allocating
    /// blocks for holes and growing the size if needed.
    pub fn write_at(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        self.write_at_opt(ino, offset, data, true)
    }

    /// [`Fs::write_at`] that leaves the times alone when `touch` is false
    /// (building an image whose times come from the source).
    pub fn write_at_opt(&self, ino: Ino, offset: u64, data: &[u8], touch: bool) -> Result<()> {
        self.write_at_mode(ino, offset, data, touch, true)
    }

    /// [`Fs::write_at_opt`] for a caller that knows how the file was
    /// opened: without O_APPEND (`appending` false) an append-only file
    /// refuses the write, as the kernel refuses such an open. The other
    /// writers of the engine count as appending: they cannot tell.
    pub fn write_at_mode(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        touch: bool,
        appending: bool,
    ) -> Result<()> {
        let stamp = if touch { Some(self.now()?) } else { None };
        self.write_at_stamped(ino, offset, data, stamp, appending)
    }

    /// Whether a write to `ino` as [`Fs::write_at_mode`] would be refused
    /// by the inode (not a regular file, its immutable or append-only
    /// flag), checked without writing: for a caller that answers the write
    /// before doing it.
    pub fn check_write(&self, ino: Ino, appending: bool) -> Result<()> {
        let ip = self
            .live_inode(ino)?
            .ok_or_else(|| Error::NotFound(format!("inode {}", ino.0)))?;
        may_write_data(&ip, appending)
    }

    /// [`Fs::write_at_mode`] with the time the write happened given
    /// (`stamp`, the new mtime and ctime; None leaves the times alone): for
    /// a caller that does the write later than it was asked for.
    pub fn write_at_stamped(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        stamp: Option<Timestamp>,
        appending: bool,
    ) -> Result<()> {
        let mut done = 0u64;
        while done < data.len() as u64 {
            let n = (data.len() as u64 - done).min(WRITE_CHUNK);
            let part = &data[done as usize..(done + n) as usize];
            self.write_chunk(ino, offset + done, Src::Slice(part), stamp, appending)?;
            done += n;
        }
        Ok(())
    }

    /// [`Fs::write_at_opt`] for data in an aligned buffer, which is
    /// queued for the device as it is (no copy) when the write starts on
    /// a block boundary, lands in new or unwritten blocks of one extent
    /// and the buffer has room to zero-fill its last block; otherwise its
    /// bytes are copied like any write. Either way the buffer ends up back
    /// in the pool.
    pub fn write_owned(&self, ino: Ino, offset: u64, buf: AlignedBuf, touch: bool) -> Result<()> {
        if buf.len() as u64 > WRITE_CHUNK {
            let r = self.write_at_opt(ino, offset, buf.as_slice(), touch);
            aligned::give(buf);
            return r;
        }
        let stamp = if touch { Some(self.now()?) } else { None };
        self.write_chunk(ino, offset, Src::Owned(buf), stamp, true)
    }

    fn write_chunk(
        &self,
        ino: Ino,
        offset: u64,
        src: Src<'_>,
        stamp: Option<Timestamp>,
        appending: bool,
    ) -> Result<()> {
        if src.len() == 0 {
            return Ok(());
        }
        let geo = self.geometry();
        let bs = u64::from(geo.block_size);
        let end = offset
            .checked_add(src.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid("write past the largest file size".into()))?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = tp.read_inode(ino)?;
        may_write_data(&ip, appending)?;
        if ip.is_realtime() {
            let r = super::rtdata::write(self, &mut tp, &mut ip, offset, src.bytes());
            if let Src::Owned(buf) = src {
                aligned::give(buf);
            }
            r?;
            if end > ip.size {
                ip.size = end;
            }
            if let Some(now) = stamp {
                self.touch_modify(&mut ip, now)?;
            }
            tp.log_inode(&ip)?;
            return tp.commit();
        }
        let first = offset / bs;
        let last = (end - 1) / bs;
        // Partial first/last blocks that already hold data must be read
        // back and merged; new blocks are zero-filled around the data.
        let head_partial = !offset.is_multiple_of(bs);
        let tail_partial = end % bs != 0;
        let old_first = if head_partial {
            crate::bmap::lookup(&mut tp, &ip, Fork::Data, first)?
        } else {
            None
        };
        let old_last = if tail_partial {
            crate::bmap::lookup(&mut tp, &ip, Fork::Data, last)?
        } else {
            None
        };
        let mut map = crate::bmap::alloc_range(
            &mut tp,
            &mut ip,
            Fork::Data,
            first,
            last - first + 1,
            false,
            None,
        )?;
        // Shared blocks are never written in place: the range gets blocks
        // of its own, with copies of the partial edge blocks' old data.
        let keep = [head_partial.then_some(first), tail_partial.then_some(last)];
        if self.unshare(&mut tp, &mut ip, first, last - first + 1, &keep)? {
            map = crate::bmap::alloc_range(
                &mut tp,
                &mut ip,
                Fork::Data,
                first,
                last - first + 1,
                false,
                None,
            )?;
        }
        // Blocks that were unwritten become written.
        if map.iter().any(|e| e.unwritten) {
            crate::bmap::convert_unwritten(&mut tp, &mut ip, Fork::Data, first, last - first + 1)?;
        }
        let ws = self.write_state()?;
        let src = match src {
            Src::Owned(mut buf)
                if !head_partial
                    && old_last.is_none_or(|x| x.unwritten)
                    && (last + 1 - first) * bs <= buf.capacity() as u64 =>
            {
                match one_extent(&map, first, last + 1) {
                    Some(fsb) => {
                        let n = buf.len();
                        buf.set_len(((last + 1 - first) * bs) as usize);
                        buf.zero_from(n);
                        let disk = geo.fsb_to_daddr(crate::geometry::FsBlock(fsb));
                        self.write_data_owned(disk.bytes(), buf)?;
                        Src::Slice(&[])
                    }
                    None => Src::Owned(buf),
                }
            }
            other => other,
        };
        let data = src.bytes();
        for e in map.iter().filter(|_| !data.is_empty()) {
            let lo = e.offset.max(first);
            let hi = e.end().min(last + 1);
            if lo >= hi {
                continue;
            }
            let mut buf_start = lo * bs; // file byte offset of the first block
            let buf_end = hi * bs;
            let disk = geo.fsb_to_daddr(crate::geometry::FsBlock(e.start.0 + (lo - e.offset)));
            if buf_start >= offset && buf_end <= end {
                // Whole blocks only: queue straight from the caller's bytes.
                let s = (buf_start - offset) as usize;
                self.write_data(disk.bytes(), &data[s..s + (buf_end - buf_start) as usize])?;
                continue;
            }
            let mut out = Vec::with_capacity((buf_end - buf_start) as usize);
            while buf_start < buf_end {
                let blk = buf_start / bs;
                let blk_lo = buf_start;
                let blk_hi = buf_start + bs;
                let d_lo = offset.max(blk_lo);
                let d_hi = end.min(blk_hi);
                if d_lo == blk_lo && d_hi == blk_hi {
                    // Whole blocks: copy as many as are contiguous in the data.
                    let whole_end = (end / bs * bs).min(buf_end);
                    let s = (blk_lo - offset) as usize;
                    let t = (whole_end - offset) as usize;
                    out.extend_from_slice(&data[s..t]);
                    buf_start = whole_end;
                    continue;
                }
                let mut block = vec![0u8; bs as usize];
                let had_data = (blk == first && old_first.is_some_and(|x| !x.unwritten))
                    || (blk == last && old_last.is_some_and(|x| !x.unwritten));
                if had_data {
                    let fsb = e.start.0 + (blk - e.offset);
                    let daddr = geo.fsb_to_daddr(crate::geometry::FsBlock(fsb));
                    // The block written moments ago (an unaligned append)
                    // is still in the write combiner: no device I/O, no
                    // checkpoint. Otherwise read_bytes writes what is
                    // pending first.
                    if !ws.read_pending(daddr.bytes(), &mut block) {
                        self.read_bytes(daddr.bytes(), &mut block)?;
                    }
                }
                block[(d_lo - blk_lo) as usize..(d_hi - blk_lo) as usize]
                    .copy_from_slice(&data[(d_lo - offset) as usize..(d_hi - offset) as usize]);
                out.extend_from_slice(&block);
                buf_start = blk_hi;
            }
            self.write_data(disk.bytes(), &out)?;
        }
        if let Src::Owned(buf) = src {
            aligned::give(buf);
        }
        if end > ip.size {
            ip.size = end;
        }
        if let Some(now) = stamp {
            self.touch_modify(&mut ip, now)?;
        }
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Sets the size of regular file `ino`, freeing blocks past the new end.
    pub fn truncate(&self, ino: Ino, size: u64) -> Result<()> {
        let geo = self.geometry();
        let bs = u64::from(geo.block_size);
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = read_file_inode(&mut tp, ino)?;
        super::guard::may_change(&ip, "truncating")?;
        let mut keep = size.div_ceil(bs);
        if ip.is_realtime() {
            // Whole realtime extents stay mapped: zero what they hold past
            // the new size.
            let r = u64::from(geo.rt_extsize.max(1));
            keep = keep.div_ceil(r) * r;
            if size < ip.size {
                super::rtdata::zero(self, &mut tp, &ip, size, (keep * bs).min(ip.size.max(size)))?;
            }
            crate::bmap::unmap_range(&mut tp, &mut ip, Fork::Data, keep, u64::MAX)?;
            ip.size = size;
            self.touch_modify(&mut ip, now)?;
            tp.log_inode(&ip)?;
            return tp.commit();
        }
        let zero = !size.is_multiple_of(bs) && size < ip.size;
        if zero {
            // The last kept block gets zeroed past the size: a shared one
            // is copied first, before the blocks past it are freed (new
            // file data never goes to blocks freed in its transaction).
            self.unshare(&mut tp, &mut ip, size / bs, 1, &[Some(size / bs)])?;
        }
        crate::bmap::unmap_range(&mut tp, &mut ip, Fork::Data, keep, u64::MAX)?;
        if zero {
            // Zero the tail of the last kept block so a later extension reads zeros.
            if let Some(e) = crate::bmap::lookup(&mut tp, &ip, Fork::Data, size / bs)? {
                if !e.unwritten {
                    zero_tail(self, &e, size, bs)?;
                }
            }
        }
        ip.size = size;
        self.touch_modify(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }

    /// Punches a hole: frees the whole blocks inside `offset..offset+len`
    /// and zeroes the partial blocks at its edges. The size is unchanged.
    pub fn punch_hole(&self, ino: Ino, offset: u64, len: u64) -> Result<()> {
        let bs = u64::from(self.geometry().block_size);
        let end = offset.saturating_add(len);
        let first_whole = offset.div_ceil(bs);
        let end_whole = end / bs;
        // Zero partial edges by writing zeros where data exists, never
        // past the end of the file (a punch keeps the size).
        let size = {
            let mut tp = self.trans()?;
            let ip = read_file_inode(&mut tp, ino)?;
            super::guard::may_change(&ip, "punching a hole")?;
            ip.size
        };
        for (lo, hi) in [
            (offset, (first_whole * bs).min(end)),
            ((end_whole * bs).max(offset), end),
        ] {
            let hi = hi.min(size);
            if lo < hi && self.maps_data(ino, lo / bs)? {
                self.write_at(ino, lo, &vec![0u8; (hi - lo) as usize])?;
            }
        }
        let (first_whole, end_whole) = if self.is_realtime_file(ino)? {
            // Only whole realtime extents are freed; the blocks of the
            // others inside the hole are zeroed.
            let r = u64::from(self.geometry().rt_extsize.max(1));
            let (a, b) = (first_whole.div_ceil(r) * r, end_whole / r * r);
            let (a, b) = if a < b {
                (a, b)
            } else {
                (end_whole, end_whole)
            };
            for (lo, hi) in [(first_whole, a), (b, end_whole)] {
                let (lo, hi) = (lo * bs, (hi * bs).min(size));
                if lo < hi {
                    let mut tp = self.trans()?;
                    tp.lock_inode(ino);
                    let ip = read_file_inode(&mut tp, ino)?;
                    super::rtdata::zero(self, &mut tp, &ip, lo, hi)?;
                }
            }
            (a, b)
        } else {
            (first_whole, end_whole)
        };
        if end_whole > first_whole {
            let now = self.now()?;
            let mut tp = self.trans()?;
            tp.lock_inode(ino);
            let mut ip = read_file_inode(&mut tp, ino)?;
            crate::bmap::unmap_range(
                &mut tp,
                &mut ip,
                Fork::Data,
                first_whole,
                end_whole - first_whole,
            )?;
            self.touch_modify(&mut ip, now)?;
            tp.log_inode(&ip)?;
            tp.commit()?;
        }
        Ok(())
    }

    /// Preallocates `offset..offset+len` as unwritten extents (reads as
    /// zeros); grows the size unless `keep_size`.
    pub fn fallocate(&self, ino: Ino, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bs = u64::from(self.geometry().block_size);
        let end = offset.saturating_add(len);
        let now = self.now()?;
        let mut tp = self.trans()?;
        tp.lock_inode(ino);
        let mut ip = read_file_inode(&mut tp, ino)?;
        super::guard::may_write(&ip, "preallocating")?;
        let first = offset / bs;
        let last = end.div_ceil(bs);
        crate::bmap::alloc_range(
            &mut tp,
            &mut ip,
            Fork::Data,
            first,
            last - first,
            true,
            None,
        )?;
        if !keep_size && end > ip.size {
            ip.size = end;
        }
        self.touch_change(&mut ip, now)?;
        tp.log_inode(&ip)?;
        tp.commit()
    }

    fn is_realtime_file(&self, ino: Ino) -> Result<bool> {
        let mut tp = self.trans()?;
        Ok(read_file_inode(&mut tp, ino)?.is_realtime())
    }

    fn maps_data(&self, ino: Ino, lblk: u64) -> Result<bool> {
        let mut tp = self.trans()?;
        let ip = read_file_inode(&mut tp, ino)?;
        Ok(crate::bmap::lookup(&mut tp, &ip, Fork::Data, lblk)?.is_some_and(|e| !e.unwritten))
    }
}

fn zero_tail(fs: &Fs, e: &Extent, size: u64, bs: u64) -> Result<()> {
    let geo = fs.geometry();
    let blk = size / bs;
    let fsb = crate::geometry::FsBlock(e.start.0 + (blk - e.offset));
    let daddr = geo.fsb_to_daddr(fsb);
    fs.write_state()?.flush_data(fs.device())?;
    let mut block = vec![0u8; bs as usize];
    fs.read_bytes(daddr.bytes(), &mut block)?;
    block[(size % bs) as usize..].fill(0);
    fs.write_data(daddr.bytes(), &block)
}

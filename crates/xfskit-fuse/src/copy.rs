//! copy_file_range(2): bytes copied inside the server, from the source
//! file's blocks to the destination's, without passing through the
//! kernel's page cache or the caller's memory.
//!
//! On reflink filesystems, when both offsets sit at the same place in
//! their blocks, the block-aligned middle of the request shares the
//! source's extents ([`xfskit::Fs::clone_range`], through the refcount
//! btree: no data is copied and later writes to either file copy on
//! write); the unaligned head and tail, and everything on other
//! filesystems, are copied through the engine's read and write calls,
//! chunk by chunk, into new blocks of the destination.

use crate::errno::to_errno;
use crate::ops::XfsFuse;
use fuser::{Errno, INodeNo};
use xfskit::inode::{FileReader, FileType};

/// Bytes read and written per step.
const COPY_CHUNK: usize = 1 << 20;

/// The most one request may copy: the reply counts bytes in 32 bits (kept
/// page aligned, as the kernel's own cap is).
const COPY_MAX: u64 = u32::MAX as u64 & !4095;

impl XfsFuse {
    /// Copies up to `len` bytes from `src` at `soff` to `dst` at `doff`;
    /// returns how many were copied (fewer when the source ends first,
    /// 0 at or past its end). The kernel has already refused overlapping
    /// ranges of one file, directories and files not open as needed.
    pub(crate) fn do_copy_file_range(
        &self,
        src: INodeNo,
        soff: u64,
        dst: INodeNo,
        doff: u64,
        len: u64,
    ) -> Result<u32, Errno> {
        self.check_writable()?;
        let sip = self.inode(src)?;
        let dip = self.inode(dst)?;
        if sip.file_type == FileType::Dir || dip.file_type == FileType::Dir {
            return Err(Errno::EISDIR);
        }
        if sip.file_type != FileType::File || dip.file_type != FileType::File {
            return Err(Errno::EINVAL);
        }
        let len = len.min(COPY_MAX).min(sip.size.saturating_sub(soff));
        if len == 0 {
            return Ok(0);
        }
        if doff.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
            return Err(Errno::EFBIG);
        }
        let n = copy_range(self, &sip, soff, self.ino(dst), doff, len)?;
        u32::try_from(n).map_err(|_| Errno::EOVERFLOW)
    }
}

/// Copies `len` bytes (all within the source's size) and returns the count.
fn copy_range(
    x: &XfsFuse,
    src: &xfskit::inode::Inode,
    soff: u64,
    dst: xfskit::Ino,
    doff: u64,
    len: u64,
) -> Result<u64, Errno> {
    let bs = u64::from(x.fs.geometry().block_size);
    if x.fs.geometry().features.reflink && soff % bs == doff % bs && src.ino != dst {
        let head = ((bs - soff % bs) % bs).min(len);
        let rest = len - head;
        // A clone may end inside a block only at the source's end, and
        // only where that is also past the destination's end.
        let dst_size = x.fs.inode(dst).map_err(|e| to_errno(&e))?.size;
        let to_eof = soff + len == src.size && doff + len >= dst_size;
        let mid = if to_eof { rest } else { rest / bs * bs };
        if mid > 0 {
            let mut done = copy_bytes(x, src, soff, dst, doff, head)?;
            if done < head {
                return Ok(done);
            }
            x.fs.clone_range(src.ino, soff + head, dst, doff + head, mid)
                .map_err(|e| to_errno(&e))?;
            done += mid;
            done += copy_bytes(x, src, soff + done, dst, doff + done, len - done)?;
            return Ok(done);
        }
    }
    copy_bytes(x, src, soff, dst, doff, len)
}

/// Copies `len` bytes through the engine's read and write calls.
fn copy_bytes(
    x: &XfsFuse,
    src: &xfskit::inode::Inode,
    soff: u64,
    dst: xfskit::Ino,
    doff: u64,
    len: u64,
) -> Result<u64, Errno> {
    if len == 0 {
        return Ok(0);
    }
    let reader = FileReader::new(x.fs, src).map_err(|e| to_errno(&e))?;
    let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let want = ((len - done) as usize).min(buf.len());
        let got = reader
            .read_at(soff + done, &mut buf[..want])
            .map_err(|e| to_errno(&e))?;
        if got == 0 {
            break;
        }
        // With the writeback cache the kernel stamps the destination's
        // times itself (as for WRITE).
        x.fs.write_at_opt(dst, doff + done, &buf[..got], !x.writeback_cache)
            .map_err(|e| to_errno(&e))?;
        done += got as u64;
    }
    Ok(done)
}

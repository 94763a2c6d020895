//! Reading file contents through the data fork mapping.

use super::{bmap, Extent, Fork, Inode};
use crate::error::Result;
use crate::fs::Fs;

/// Reads regular-file contents with a cached extent map.
pub struct FileReader<'a> {
    fs: &'a Fs,
    size: u64,
    map: Vec<Extent>,
}

impl<'a> FileReader<'a> {
    /// Loads the data fork mapping of `inode`.
    pub fn new(fs: &'a Fs, inode: &Inode) -> Result<FileReader<'a>> {
        let map = bmap::extents(fs, inode, Fork::Data)?;
        if inode.is_realtime() && map.iter().any(|e| !e.unwritten) {
            return Err(needs_rtdev(inode.ino.0));
        }
        Ok(FileReader {
            fs,
            size: inode.size,
            map,
        })
    }

    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The data fork mapping.
    pub fn extents(&self) -> &[Extent] {
        &self.map
    }

    /// Reads up to `buf.len()` bytes at `off`; returns the count (0 at EOF).
    /// Holes and unwritten extents read as zeros.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        read_mapped(self.fs, &self.map, self.size, off, buf)
    }
}

/// Reads `inode`'s contents at `off` (loads the mapping each call).
pub fn read_at(fs: &Fs, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
    FileReader::new(fs, inode)?.read_at(off, buf)
}

/// Reads through a mapping (from [`FileReader::extents`] or [`super::extents`])
/// of a file of `size` bytes: the core of every file and block read.
pub fn read_mapped(
    fs: &Fs,
    map: &[Extent],
    size: u64,
    off: u64,
    buf: &mut [u8],
) -> Result<usize> {
    if off >= size {
        return Ok(0);
    }
    let want = (buf.len() as u64).min(size - off) as usize;
    let geo = fs.geometry();
    let bs = u64::from(geo.block_size);
    let mut done = 0usize;
    while done < want {
        let pos = off + done as u64;
        let fblock = pos / bs;
        let within = pos % bs;
        let n = match bmap::lookup(map, fblock) {
            Ok(e) => {
                let ext_bytes_left = (e.end() - fblock) * bs - within;
                let n = ext_bytes_left.min((want - done) as u64) as usize;
                if e.unwritten {
                    buf[done..done + n].fill(0);
                } else {
                    let dev_off =
                        geo.fsb_to_daddr(e.start).bytes() + (fblock - e.offset) * bs + within;
                    fs.read_bytes(dev_off, &mut buf[done..done + n])?;
                }
                n
            }
            Err(next) => {
                let hole_end = next.map(|o| o * bs).unwrap_or(u64::MAX);
                let n = (hole_end - pos).min((want - done) as u64) as usize;
                buf[done..done + n].fill(0);
                n
            }
        };
        done += n;
    }
    Ok(want)
}

/// The error for a realtime file's data: it lives on the realtime device,
/// which this filesystem was opened without.
pub fn needs_rtdev(ino: u64) -> crate::Error {
    crate::Error::Unsupported(format!(
        "inode {ino} is a realtime file whose data is on the realtime device: needs the realtime device: --rtdev"
    ))
}

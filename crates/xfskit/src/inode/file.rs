//! Reading file contents through the data fork mapping.

use super::{bmap, Extent, Fork, Inode};
use crate::error::Result;
use crate::fs::Fs;
use crate::geometry::FsBlock;
use std::mem::MaybeUninit;
use std::ops::Range;

/// The device a data fork's extents address: the data device (AG-encoded
/// filesystem blocks) or, for a realtime file, the realtime device
/// (realtime blocks numbered from its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDev {
    /// The data section.
    Data,
    /// The realtime section; `ino` is the realtime file, named in errors.
    Realtime {
        /// The file whose data this is.
        ino: u64,
    },
}

impl DataDev {
    /// Where the data fork of `inode` points.
    pub fn of(inode: &Inode) -> DataDev {
        if inode.is_realtime() {
            DataDev::Realtime { ino: inode.ino.0 }
        } else {
            DataDev::Data
        }
    }

    /// Byte offset of byte `within` of the block at `start` on its device.
    pub fn byte_offset(self, fs: &Fs, start: FsBlock, within: u64) -> u64 {
        let geo = fs.geometry();
        match self {
            DataDev::Data => geo.fsb_to_daddr(start).bytes() + within,
            DataDev::Realtime { .. } => geo.rtb_to_bytes(start.0) + within,
        }
    }

    /// Reads `buf.len()` bytes of file data at byte `within` of the block
    /// at `start` (an extent's start block plus an offset into it).
    pub fn read(self, fs: &Fs, start: FsBlock, within: u64, buf: &mut [u8]) -> Result<()> {
        let off = self.byte_offset(fs, start, within);
        match self {
            DataDev::Data => fs.read_bytes(off, buf),
            DataDev::Realtime { ino } => fs.read_rt_bytes(ino, off, buf),
        }
    }

    /// Hints that `len` bytes at byte `off` of this device will be read.
    pub fn will_need(self, fs: &Fs, off: u64, len: u64) {
        match self {
            DataDev::Data => fs.device().will_need(off, len),
            DataDev::Realtime { .. } => match fs.rt_device() {
                Some(rt) => rt.will_need(off, len),
                None if fs.geometry().rt_internal() => fs.device().will_need(off, len),
                None => {}
            },
        }
    }
}

/// Refuses a realtime file with written data on a filesystem opened
/// without its realtime device.
pub fn require_data_dev(fs: &Fs, inode: &Inode, map: &[Extent]) -> Result<()> {
    if inode.is_realtime() && !fs.rt_readable() && map.iter().any(|e| !e.unwritten) {
        return Err(needs_rtdev(inode.ino.0));
    }
    Ok(())
}

/// Reads regular-file contents with a cached extent map.
pub struct FileReader<'a> {
    fs: &'a Fs,
    size: u64,
    map: Vec<Extent>,
    dev: DataDev,
}

impl<'a> FileReader<'a> {
    /// Loads the data fork mapping of `inode`.
    pub fn new(fs: &'a Fs, inode: &Inode) -> Result<FileReader<'a>> {
        let map = bmap::extents(fs, inode, Fork::Data)?;
        require_data_dev(fs, inode, &map)?;
        Ok(FileReader {
            fs,
            size: inode.size,
            map,
            dev: DataDev::of(inode),
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
        read_mapped(self.fs, &self.map, self.dev, self.size, off, buf)
    }

    /// The device the mapping addresses.
    pub fn data_dev(&self) -> DataDev {
        self.dev
    }
}

/// Reads `inode`'s contents at `off` (loads the mapping each call).
pub fn read_at(fs: &Fs, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
    FileReader::new(fs, inode)?.read_at(off, buf)
}

/// Reads through a mapping (from [`FileReader::extents`] or [`super::extents`])
/// of a file of `size` bytes whose extents address `dev`: the core of every
/// file and block read.
pub fn read_mapped(
    fs: &Fs,
    map: &[Extent],
    dev: DataDev,
    size: u64,
    off: u64,
    buf: &mut [u8],
) -> Result<usize> {
    read_mapped_into(fs, map, dev, size, off, buf)
}

/// As [`read_mapped`] into memory that may not be initialized yet (a new
/// buffer the data goes to directly, without zeroing it first). The
/// first `n` bytes are initialized when it returns `Ok(n)`.
pub fn read_mapped_uninit(
    fs: &Fs,
    map: &[Extent],
    dev: DataDev,
    size: u64,
    off: u64,
    buf: &mut [MaybeUninit<u8>],
) -> Result<usize> {
    read_mapped_into(fs, map, dev, size, off, buf)
}

/// What a mapped read fills: initialized bytes, or new memory.
trait Target {
    fn len(&self) -> usize;
    fn zero(&mut self, r: Range<usize>);
    fn read(
        &mut self,
        fs: &Fs,
        dev: DataDev,
        start: FsBlock,
        within: u64,
        r: Range<usize>,
    ) -> Result<()>;
}

impl Target for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn zero(&mut self, r: Range<usize>) {
        self[r].fill(0);
    }
    fn read(
        &mut self,
        fs: &Fs,
        dev: DataDev,
        start: FsBlock,
        within: u64,
        r: Range<usize>,
    ) -> Result<()> {
        dev.read(fs, start, within, &mut self[r])
    }
}

impl Target for [MaybeUninit<u8>] {
    fn len(&self) -> usize {
        <[MaybeUninit<u8>]>::len(self)
    }
    fn zero(&mut self, r: Range<usize>) {
        self[r].fill(MaybeUninit::new(0));
    }
    fn read(
        &mut self,
        fs: &Fs,
        dev: DataDev,
        start: FsBlock,
        within: u64,
        r: Range<usize>,
    ) -> Result<()> {
        let buf = &mut self[r];
        match dev {
            DataDev::Data => fs.read_bytes_uninit(dev.byte_offset(fs, start, within), buf),
            DataDev::Realtime { .. } => dev.read(fs, start, within, crate::dev::zeroed(buf)),
        }
    }
}

fn read_mapped_into<B: Target + ?Sized>(
    fs: &Fs,
    map: &[Extent],
    dev: DataDev,
    size: u64,
    off: u64,
    buf: &mut B,
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
                    buf.zero(done..done + n);
                } else {
                    let within = (fblock - e.offset) * bs + within;
                    buf.read(fs, dev, e.start, within, done..done + n)?;
                }
                n
            }
            Err(next) => {
                let hole_end = next.map(|o| o * bs).unwrap_or(u64::MAX);
                let n = (hole_end - pos).min((want - done) as u64) as usize;
                buf.zero(done..done + n);
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

//! Inodes: reading, decoding, fork mappings and file contents.

pub(crate) mod bmap;
mod core;
mod file;

pub use self::core::crc_ok;
pub(crate) use self::core::{check_core, core_of, CoreFacts};
pub use self::core::{FileType, ForkFormat, Inode, Timestamp, CORE_SIZE};
pub use bmap::{extents, for_each_extent, lookup, Extent, Fork};
pub use file::{
    needs_rtdev, read_at, read_mapped, read_mapped_uninit, require_data_dev, DataDev, FileReader,
};

use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::Ino;

/// Offset of the CRC in an inode.
pub const INODE_CRC_OFF: usize = 100;

/// Reads inode `ino` from disk, checks its CRC and decodes it.
pub fn read_inode(fs: &Fs, ino: Ino) -> Result<Inode> {
    let geo = fs.geometry();
    if !geo.ino_valid(ino) {
        return Err(Error::corrupt(
            "inode number",
            Location::Inode(ino.0),
            "outside the filesystem",
        ));
    }
    let off = geo.ino_to_bytes(ino);
    if let Some(raw) = crate::fs::pending_inode(fs, off, geo.inode_size as usize) {
        return decode_checked(fs, ino, &raw);
    }
    let mut raw = vec![0u8; geo.inode_size as usize];
    fs.read_bytes(off, &mut raw)?;
    decode_checked(fs, ino, &raw)
}

/// Checks the CRC of a raw inode and decodes it.
pub fn decode_checked(fs: &Fs, ino: Ino, raw: &[u8]) -> Result<Inode> {
    if !crc_ok(fs.geometry(), raw) {
        return Err(Error::BadCrc {
            what: "inode",
            location: Location::Inode(ino.0),
        });
    }
    Inode::decode(fs.geometry(), ino, raw)
}

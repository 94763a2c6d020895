//! XFS v5 on-disk structures: declarations only, no I/O.
//!
//! Every structure is a `#[repr(C)]` zerocopy type made of big-endian fields
//! (checksums are little-endian), named after the kernel's C fields, with
//! compile-time checks of its size and key offsets.
#![forbid(unsafe_code)]

pub mod ag;
pub mod btree;
pub mod crc;
pub mod da;
pub mod dir;
pub mod inode;
pub mod sb;
pub mod types;

pub use ag::{Agf, AgflHdr, Agi};
pub use btree::{
    AllocRec, BmbtKey, BmbtRec, BmdrBlock, BtreeBlockLong, BtreeBlockShort, InobtKey, InobtRec,
    RefcountKey, RefcountRec, RmapKey, RmapRec,
};
pub use inode::Dinode;
pub use sb::Dsb;
pub use types::{decode_timestamp, encode_timestamp, BmbtIrec, Uuid};
pub use zerocopy;

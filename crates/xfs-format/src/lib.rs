//! XFS v5 on-disk structures: declarations only, no I/O.
//!
//! Every structure is a `#[repr(C)]` zerocopy type made of big-endian fields
//! (checksums are little-endian), named after the kernel's C fields, with
//! compile-time checks of its size and key offsets.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ag;
pub mod attr;
pub mod btree;
pub mod crc;
pub mod da;
pub mod dir;
pub mod inode;
pub mod layout;
pub mod log;
pub mod log_intent;
pub mod log_item;
pub mod quota;
pub mod rtgroup;
pub mod sb;
pub mod symlink;
pub mod types;

pub use ag::{Agf, AgflHdr, Agi};
pub use attr::{Attr3LeafHdr, Attr3RmtHdr, AttrLeafEntry, AttrSfHdr};
pub use btree::{
    AllocRec, BmbtKey, BmbtRec, BmdrBlock, BtreeBlockLong, BtreeBlockShort, InobtKey, InobtRec,
    RefcountKey, RefcountRec, RmapKey, RmapRec,
};
pub use da::{da_hashname, Da3Blkinfo, Da3NodeHdr, DaBlkinfo, DaNodeEntry};
pub use dir::{
    Dir2BlockTail, Dir2DataFree, Dir2LeafEntry, Dir2LeafTail, Dir3BlkHdr, Dir3DataHdr, Dir3FreeHdr,
    Dir3LeafHdr,
};
pub use inode::Dinode;
pub use log::{XlogOpHeader, XlogRecHeader};
pub use sb::Dsb;
pub use symlink::Dsymlink3Hdr;
pub use types::{decode_timestamp, encode_timestamp, BmbtIrec, Uuid};
pub use zerocopy;

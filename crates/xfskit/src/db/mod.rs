//! `xfs_db`-style inspection: the superblock and AG headers field by field
//! ([`fields`]), with xfs_db's names and value formats, and the free space
//! histogram ([`freesp`]), file fragmentation ([`frag`]) and the reverse
//! mappings ([`fsmap`]), each with xfs_db's output.

mod btree;
pub mod fields;
pub mod frag;
pub mod freesp;
pub mod fsmap;

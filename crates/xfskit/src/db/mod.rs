//! `xfs_db`-style inspection: the superblock and AG headers field by field
//! ([`fields`]), with xfs_db's names and value formats.

pub mod fields;

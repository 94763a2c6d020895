//! xfskit: a userspace engine for the XFS filesystem.
#![forbid(unsafe_code)]
pub mod mkfs;

//! xfskit: a userspace engine for the XFS filesystem.
//!
//! Layers, bottom up: [`dev`] (positional devices), [`buf`] (verified,
//! cached metadata buffers), [`geometry`] (the validated superblock),
//! [`inode`] (inodes, fork maps, file contents), [`dir`], [`attr`] and
//! [`symlink`] (namespace), [`log`] (log state), [`fs`] (an open
//! filesystem tying them together).
//!
//! Unsafe code is denied everywhere but in `sys`, which wraps the one
//! system call that libc and rustix do not (yet) wrap and one slice
//! conversion (zeroed `MaybeUninit` bytes as bytes) not yet in std.
#![deny(unsafe_code)]

pub mod admin;
pub mod alloc;
pub mod attr;
pub mod bmap;
pub mod bodyfile;
pub mod btree;
pub mod buf;
pub mod build;
mod bytes;
pub mod check;
pub mod db;
pub mod dev;
pub mod dir;
pub mod disk;
pub mod error;
pub mod extract;
pub mod forensic;
pub mod fs;
pub mod geometry;
pub mod grow;
pub mod ialloc;
pub mod info;
pub mod inode;
pub mod log;
pub mod metadump;
pub mod mkfs;
mod namei;
pub mod namespace;
pub mod paths;
pub mod quota;
pub mod repair;
pub mod rtgroup;
pub mod scan;
mod spill;
pub mod symlink;
#[allow(unsafe_code)]
mod sys;
pub mod trans;
pub mod walk;

pub use error::{Error, Location, Result};
pub use fs::{Fs, OpenOptions};
pub use geometry::{Geometry, Ino};

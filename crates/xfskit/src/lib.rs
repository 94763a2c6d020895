//! xfskit: a userspace engine for the XFS filesystem.
//!
//! Layers, lowest first; a module uses only modules of lower layers (or,
//! in the core, of its own), and `tests/layers.rs` fails when an edge
//! points up (a remaining exception would be listed there with its reason):
//! 1. leaves: `bytes`, [`error`], `sys`
//! 2. [`dev`] (positional devices), then [`disk`] (disk images)
//! 3. [`geometry`] (the validated superblock)
//! 4. [`buf`] (verified, cached metadata buffers), [`rtgroup`]
//! 5. the core, one circle as libxfs's is: [`fs`] (an open filesystem),
//!    [`trans`], [`log`] (journal and recovery), [`inode`], [`bmap`],
//!    [`btree`], [`alloc`], [`ialloc`], [`dir`], [`attr`], [`symlink`],
//!    [`quota`] (records and accounting; not `quota::enable`)
//! 6. reads over the core: [`scan`], `namei`, [`walk`],
//!    `spill`, [`info`]; then [`paths`], [`db`], [`extract`]
//! 7. [`check`] (read-only verification)
//! 8. [`mkfs`]
//! 9. [`namespace`] (the write API: create, link, write, xattrs...)
//! 10. [`build`] (images from directories and tars)
//! 11. tools: [`admin`], [`grow`], `quota::enable`, [`bodyfile`],
//!     [`forensic`], [`metadump`]; then [`repair`]
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

//! Building populated images: sources (directory, tar) feeding a
//! [`BuildTarget`].

pub mod feed;
pub mod idmap;
pub mod size;
pub mod source_dir;
pub mod source_tar;
mod tar_pax;
pub mod tar_reader;
pub mod target;

pub use target::{BuildTarget, Meta, NodeKind};

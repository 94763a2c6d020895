//! Building populated images: sources (directory, tar) feeding a
//! [`BuildTarget`].

pub mod engine;
pub mod target;

pub use engine::FsTarget;
pub use target::{BuildTarget, Meta, NodeKind};

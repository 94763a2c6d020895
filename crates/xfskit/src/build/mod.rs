//! Building populated images: sources (directory, tar) feeding a
//! [`BuildTarget`].

pub mod target;

pub use target::{BuildTarget, Meta, NodeKind};

//! Metadata buffers: verified reads and a cache.

pub mod cache;
pub mod verify;

pub use verify::Verifier;

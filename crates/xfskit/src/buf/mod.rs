//! Metadata buffers: verified reads and a cache.

pub mod cache;
pub mod fasthash;
pub mod verify;

pub use verify::Verifier;

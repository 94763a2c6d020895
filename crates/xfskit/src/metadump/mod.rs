//! xfs_metadump files: their formats (format.rs), restoring one into an
//! image (restore.rs, `xfskit mdrestore`).

pub mod format;
pub mod restore;

pub use format::Header;
pub use restore::{read_header, restore, RestoreReport, Targets};

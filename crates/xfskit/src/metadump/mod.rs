//! xfs_metadump files: their formats (format.rs), restoring one into an
//! image (restore.rs, `xfskit mdrestore`), writing one (dump.rs, `xfskit metadump`).

pub mod dump;
pub mod format;
pub mod obfuscate;
pub mod restore;
pub mod zero;

pub use dump::{dump, DumpOptions, DumpReport};
pub use format::Header;
pub use restore::{read_header, restore, RestoreReport, Targets};

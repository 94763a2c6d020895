//! `xfskit mkfs`: choose the geometry of a fresh XFS v5 filesystem exactly as
//! mkfs.xfs (xfsprogs 6.1) does, from mkfs.xfs-style options.

mod features;
mod geometry;
mod layout;
mod log;
mod options;
mod stripe;
mod summary;

pub use features::{FeatureSet, Features};
pub use geometry::{compute_geometry, DeviceTopology, MkfsGeometry, TargetKind};
pub use options::{convert_size, parse_mkfs_args, MkfsError, MkfsOptions};
pub use summary::geometry_summary;

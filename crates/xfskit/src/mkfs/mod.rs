//! `xfskit mkfs`: choose the geometry of a fresh XFS v5 filesystem exactly as
//! mkfs.xfs (xfsprogs 6.1) does, from mkfs.xfs-style options, and write it.

mod agwrite;
mod features;
mod format;
mod freesp;
mod geometry;
mod io;
mod layout;
mod log;
mod options;
mod profiles;
mod realtime;
mod rootdir;
mod rtgroups;
mod stripe;
mod summary;
mod wipe;
mod writer;

pub use features::{Autofsck, FeatureSet, Features};
pub(crate) use format::random_uuid;
pub use format::{
    default_timestamp, mkfs, mkfs_device, mkfs_with, plan, MkfsReport, Progress, WriteOptions,
};
pub use geometry::{compute_geometry, DeviceTopology, MkfsGeometry, TargetKind};
pub use io::IoStats;
pub use options::{convert_size, parse_mkfs_args, MkfsError, MkfsOptions};
pub use profiles::Defaults;
pub use realtime::RtLayout;
pub use rootdir::Timestamp;
pub use rtgroups::{RgFile, RgFileKind, RtgLayout};
pub use summary::geometry_summary;
pub use wipe::Signature;

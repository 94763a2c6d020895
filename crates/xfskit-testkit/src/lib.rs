//! Support code shared by the integration tests of the xfskit crates.
//!
//! It depends on std only (never on xfskit), so that every crate can use
//! it as a dev-dependency and it serves as an independent reference:
//!
//! - [`skip`]: a test that cannot run here says why, and the skip is
//!   counted (`scripts/test.sh` reads `$XFSKIT_SKIP_LOG`), not passed.
//! - [`umount`], [`umount_retrying`], [`must_umount`]: unmounting that
//!   waits out a mount busy for a moment.
//! - [`Scratch`]: a temporary directory removed on drop, after whatever
//!   is still mounted in it is unmounted; [`Mounted`]: a mount point
//!   unmounted on drop; [`LoopImage`]: an image made by mkfs.xfs with a
//!   mount point, for the tests that fill it through the kernel.

mod image;
mod mount;
mod scratch;
mod skip;

pub use image::LoopImage;
pub use mount::{is_mounted, must_umount, umount, umount_all_in, umount_retrying, Mounted};
pub use scratch::Scratch;
pub use skip::{can_mount, have_tool, is_root, missing_tool, skip};

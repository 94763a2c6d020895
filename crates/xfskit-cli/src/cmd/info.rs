//! `xfskit info`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `xfskit info`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file or block device.
    pub image: PathBuf,
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
}

/// Runs the command.
pub fn run(_args: Args) -> Result<ExitCode, xfskit::Error> {
    Err(xfskit::Error::Unsupported("`xfskit info` is not implemented yet".into()))
}

//! Subcommands. Each module has `Args` (clap) and `run(Args) -> Result<ExitCode>`.

pub mod build;
pub mod bulkstat;
pub mod cat;
pub mod check;
pub mod extract;
pub mod info;
pub mod log;
pub mod ls;
pub mod mkfs;
pub mod mount;
pub mod recover;
pub mod stat;

use std::path::Path;
use std::process::ExitCode;
use xfskit::{Error, Fs, OpenOptions};

/// Maps an engine error to the documented exit code.
pub fn exit_code(e: &Error) -> ExitCode {
    ExitCode::from(match e {
        Error::NotFound(_) | Error::NotDir(_) | Error::IsDir(_) | Error::NoAttr(_) => 1,
        Error::Exists(_) | Error::NotEmpty(_) => 1,
        Error::Invalid(_) => 2,
        Error::Unsupported(_) | Error::DirtyLog(_) => 3,
        Error::Io(_) => 4,
        Error::BadCrc { .. } | Error::Corrupt { .. } => 5,
        Error::NoSpace(_) | Error::ReadOnly => 4,
    })
}

/// Opens an image read-only with the common options.
pub fn open(image: &Path, norecovery: bool) -> Result<Fs, Error> {
    Fs::open(
        image,
        &OpenOptions {
            norecovery,
            ..Default::default()
        },
    )
}

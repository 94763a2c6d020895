//! `xfskit cat`: write a file's contents to standard output.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use xfskit::inode::{FileReader, FileType};
use xfskit::Error;

/// Bytes read from the image per request.
const CHUNK: usize = 4 << 20;

/// The long help (`--help`, the man page).
pub const LONG_ABOUT: &str =
    "Write the contents of a regular file in an XFS image to standard output.

Holes and unwritten (preallocated) extents read as zeros, as through the
kernel. The file is streamed in large chunks, so any size works. Symlinks
are not followed: name the target instead.

Exit status: 0 on success, 1 if PATH does not exist or is a directory,
2 if PATH is not a regular file, 3 if the filesystem is unsupported or its
log needs replay, 4 on I/O errors, 5 if the image is corrupt.

Examples:
  xfskit cat disk.img /etc/hostname
  xfskit cat disk.img /var/lib/big.db > big.db";

/// Arguments of `xfskit cat`.
#[derive(clap::Args)]
pub struct Args {
    /// Read even if the log needs replay (like the kernel's norecovery).
    #[arg(long)]
    pub norecovery: bool,
    /// The image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub disk: super::DiskArgs,
    /// The file to print.
    pub path: String,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode, Error> {
    let fs = super::open_in(&args.image, &args.disk, args.norecovery)?;
    let inode = fs.lookup_path(args.path.as_bytes())?;
    match inode.file_type {
        FileType::File => {}
        FileType::Dir => return Err(Error::IsDir(args.path)),
        other => {
            return Err(Error::Invalid(format!(
                "{} is a {other:?}, not a regular file",
                args.path
            )))
        }
    }
    let reader = FileReader::new(&fs, &inode)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf = vec![0u8; CHUNK.min(reader.size().max(1) as usize)];
    let mut off = 0u64;
    loop {
        let n = reader.read_at(off, &mut buf)?;
        if n == 0 {
            break;
        }
        if let Err(e) = out.write_all(&buf[..n]) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(Error::Io(e));
        }
        off += n as u64;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

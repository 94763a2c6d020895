//! Engine errors as FUSE errnos (the mapping itself is `Error::errno`).
//!
//! Corruption and device errors are logged to stderr the first time each
//! distinct message is seen, so a damaged image does not flood the log when
//! the kernel retries.

use fuser::Errno;
use std::collections::HashSet;
use std::sync::Mutex;
use xfskit::Error;

/// Most distinct messages remembered for de-duplication; later ones are
/// still logged, just without the memory of having been logged.
const MAX_REMEMBERED: usize = 4096;

static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The errno a FUSE reply carries for `e`: the engine's kernel errno
/// ([`Error::errno`]), except that damage and a log needing replay are
/// answered `EIO` (and logged once), as the mount always has.
pub fn to_errno(e: &Error) -> Errno {
    match e {
        Error::Corrupt { .. } | Error::BadCrc { .. } | Error::DirtyLog(_) | Error::Io(_) => {
            log_once(e);
            Errno::EIO
        }
        _ => Errno::from_i32(e.errno()),
    }
}

/// Prints `e` to stderr unless the same message was printed before.
fn log_once(e: &Error) {
    let msg = e.to_string();
    let first = match LOGGED.lock() {
        Ok(mut g) => {
            let set = g.get_or_insert_with(HashSet::new);
            if set.contains(&msg) {
                false
            } else {
                if set.len() < MAX_REMEMBERED {
                    set.insert(msg.clone());
                }
                true
            }
        }
        Err(_) => true,
    };
    if first {
        eprintln!("xfskit-fuse: {msg} (reported as EIO)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfskit::Location;

    #[test]
    fn mapping() {
        assert_eq!(to_errno(&Error::NotFound("x".into())), Errno::ENOENT);
        assert_eq!(to_errno(&Error::NotDir("x".into())), Errno::ENOTDIR);
        assert_eq!(to_errno(&Error::NoAttr("x".into())), Errno::ENODATA);
        assert_eq!(to_errno(&Error::Unsupported("x".into())), Errno::EOPNOTSUPP);
        let c = Error::corrupt("dir block", Location::Daddr(8), "bad magic");
        assert_eq!(to_errno(&c), Errno::EIO);
        assert_eq!(to_errno(&c), Errno::EIO);
        let crc = Error::BadCrc {
            what: "inode",
            location: Location::Inode(131),
        };
        assert_eq!(to_errno(&crc), Errno::EIO);
        assert_eq!(
            to_errno(&Error::Io(std::io::Error::other("disk"))),
            Errno::EIO
        );
    }
}

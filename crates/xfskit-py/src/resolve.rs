//! Paths inside the image as the `os` functions take them: relative paths
//! start at the root, symbolic links are followed inside the image (an
//! absolute target starts again at the image's root), at most 40 of them
//! per lookup as the kernel allows (then ELOOP).

use xfskit::inode::{FileType, Inode};
use xfskit::{Error, Fs};

/// Symbolic links followed in one lookup before ELOOP (the kernel's limit).
pub const MAX_LINKS: usize = 40;

/// Why a lookup failed: an engine error, or too many symbolic links.
pub enum LookupError {
    Engine(Error),
    Loop,
    /// A component longer than a name can be (ENAMETOOLONG).
    NameTooLong,
}

/// The longest name a directory entry holds.
const NAME_MAX: usize = 255;

impl From<Error> for LookupError {
    fn from(e: Error) -> Self {
        LookupError::Engine(e)
    }
}

fn comps(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

/// The inode `path` names; the last component's symbolic link is followed
/// when `follow_last` (stat) and not otherwise (lstat).
pub fn resolve(fs: &Fs, path: &[u8], follow_last: bool) -> Result<Inode, LookupError> {
    let root = fs.root()?;
    // Components still to walk, last first; symlink targets are pushed on.
    let mut todo: Vec<Vec<u8>> = comps(path).rev().map(<[u8]>::to_vec).collect();
    let mut links = 0usize;
    let mut cur = root.clone();
    let mut walked: Vec<u8> = Vec::new();
    while let Some(comp) = todo.pop() {
        walked.push(b'/');
        walked.extend_from_slice(&comp);
        let shown = || String::from_utf8_lossy(&walked).into_owned();
        if comp.len() > NAME_MAX {
            return Err(LookupError::NameTooLong);
        }
        if cur.file_type != FileType::Dir {
            return Err(Error::NotDir(shown()).into());
        }
        if comp == b".." {
            if cur.ino != root.ino {
                let p = xfskit::dir::parent(fs, &cur)?;
                cur = fs.inode(p)?;
            }
            continue;
        }
        let Some(ino) = xfskit::dir::lookup(fs, &cur, &comp)? else {
            return Err(Error::NotFound(shown()).into());
        };
        let next = fs.inode(ino)?;
        if next.file_type == FileType::Symlink && (!todo.is_empty() || follow_last) {
            links += 1;
            if links > MAX_LINKS {
                return Err(LookupError::Loop);
            }
            let target = xfskit::symlink::read_link(fs, &next)?;
            if target.first() == Some(&b'/') {
                cur = root.clone();
            }
            todo.extend(comps(&target).rev().map(<[u8]>::to_vec));
            continue;
        }
        cur = next;
    }
    Ok(cur)
}

/// The directory that holds `path` (its symbolic links followed) and the
/// last name of `path`, for calls that change a name.
pub fn parent_of(fs: &Fs, path: &[u8]) -> Result<(Inode, Vec<u8>), LookupError> {
    let mut parts: Vec<&[u8]> = comps(path).collect();
    let Some(last) = parts.pop() else {
        return Err(Error::Exists("/".into()).into());
    };
    if last == b".." {
        return Err(Error::Invalid("a path ending in '..' names no entry".into()).into());
    }
    let dir_path = parts.join(&b'/');
    let dir = resolve(fs, &dir_path, true)?;
    if dir.file_type != FileType::Dir {
        return Err(Error::NotDir(String::from_utf8_lossy(&dir_path).into_owned()).into());
    }
    Ok((dir, last.to_vec()))
}

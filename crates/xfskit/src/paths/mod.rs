//! The paths of an inode, from its parent pointers (PARENT filesystems):
//! each pointer names a directory and the entry's name in it, and the
//! directory's own pointer leads on up to the root. Nothing walks the tree,
//! so the cost follows the inodes asked about and their ancestors.
//! Without parent pointers, a [`NameIndex`] of every directory entry (one
//! pass over every directory, sorted by the inode named, bounded in
//! memory) stands in for them.
//!
//! Every step checks the pointer's generation against the directory it
//! names and that the directory is one; a chain that comes back to a
//! directory already on it is a loop, and chains are bounded by
//! [`MAX_DEPTH`]. [`PathCache`] keeps directories' paths (bounded in
//! bytes, least recently used out first) for callers that ask about many
//! inodes, as bulkstat does.

mod index;

pub use index::NameIndex;

use crate::attr;
use crate::error::{Error, Location, Result};
use crate::geometry::Ino;
use crate::inode::{FileType, Inode};
use crate::Fs;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most directories between an inode and the root.
pub const MAX_DEPTH: usize = 4096;

/// The default byte budget of a [`PathCache`].
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

/// True when the filesystem keeps parent pointers.
pub fn has_parent_pointers(fs: &Fs) -> bool {
    fs.geometry().features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0
}

/// The error for a filesystem without parent pointers.
pub fn unsupported() -> Error {
    Error::Unsupported(
        "paths from parent pointers: this filesystem has no parent pointers (mkfs.xfs -n parent=1)"
            .into(),
    )
}

/// Every path of inode `ino` (absolute, "/" for the root), sorted; none
/// for an inode no directory names (unlinked, or metadata).
pub fn paths_of(fs: &Fs, ino: Ino) -> Result<Vec<Vec<u8>>> {
    let inode = fs.inode(ino)?;
    PathCache::new(DEFAULT_CACHE_BYTES).paths(fs, &inode)
}

/// A directory's paths, shared between the cache and its callers.
type Shared = Arc<[Vec<u8>]>;

struct Cached {
    gen: u32,
    paths: Shared,
    bytes: usize,
    used: u64,
}

#[derive(Default)]
struct Lru {
    map: HashMap<u64, Cached>,
    bytes: usize,
    tick: u64,
}

/// Directory inode -> its paths, bounded in bytes; safe to share between
/// threads.
pub struct PathCache {
    lru: Mutex<Lru>,
    max_bytes: usize,
    /// Where names come from on a filesystem without parent pointers.
    index: Option<NameIndex>,
}

/// One directory whose paths are being put together: its pointers, the
/// next one to follow, and the paths found so far.
struct Frame {
    ino: u64,
    gen: u32,
    ptrs: Vec<(Vec<u8>, u64, u32)>,
    next: usize,
    acc: Vec<Vec<u8>>,
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if dir != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn pointers(fs: &Fs, index: Option<&NameIndex>, inode: &Inode) -> Result<Vec<(Vec<u8>, u64, u32)>> {
    if let Some(index) = index {
        index.parents(inode.ino.0)
    } else if inode.has_attr_fork() {
        attr::parent_pointers(fs, inode)
    } else {
        Ok(Vec::new())
    }
}

fn bad(child: u64, detail: String) -> Error {
    Error::corrupt("parent pointer", Location::Inode(child), detail)
}

impl PathCache {
    /// An empty cache holding at most about `max_bytes` of paths.
    pub fn new(max_bytes: usize) -> PathCache {
        PathCache {
            lru: Mutex::new(Lru::default()),
            max_bytes,
            index: None,
        }
    }

    /// An empty cache whose names come from `index` (a filesystem without
    /// parent pointers) instead of parent pointers.
    pub fn with_index(max_bytes: usize, index: NameIndex) -> PathCache {
        PathCache {
            index: Some(index),
            ..PathCache::new(max_bytes)
        }
    }

    fn get(&self, ino: u64, gen: u32) -> Option<Shared> {
        let mut l = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        l.tick += 1;
        let tick = l.tick;
        let c = l.map.get_mut(&ino).filter(|c| c.gen == gen)?;
        c.used = tick;
        Some(c.paths.clone())
    }

    fn put(&self, ino: u64, gen: u32, paths: Shared) {
        let bytes = 64 + paths.iter().map(|p| p.len() + 32).sum::<usize>();
        if bytes > self.max_bytes / 4 {
            return;
        }
        let mut l = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        l.tick += 1;
        let used = l.tick;
        if let Some(old) = l.map.insert(
            ino,
            Cached {
                gen,
                paths,
                bytes,
                used,
            },
        ) {
            l.bytes -= old.bytes;
        }
        l.bytes += bytes;
        if l.bytes > self.max_bytes {
            // Drop the least recently used half: a sort per many inserts.
            let mut ages: Vec<u64> = l.map.values().map(|c| c.used).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            l.map.retain(|_, c| c.used > cut);
            l.bytes = l.map.values().map(|c| c.bytes).sum();
        }
    }

    /// Entries and bytes held now.
    pub fn usage(&self) -> (usize, usize) {
        let l = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        (l.map.len(), l.bytes)
    }

    /// Every path of `inode`, sorted (see [`paths_of`]).
    pub fn paths(&self, fs: &Fs, inode: &Inode) -> Result<Vec<Vec<u8>>> {
        if self.index.is_none() && !has_parent_pointers(fs) {
            return Err(unsupported());
        }
        let ino = inode.ino.0;
        if inode.file_type == FileType::Dir {
            return Ok(self.dir_paths(fs, ino, inode.gen, ino)?.to_vec());
        }
        let mut out = Vec::new();
        for (name, pino, pgen) in pointers(fs, self.index.as_ref(), inode)? {
            for d in self.dir_paths(fs, pino, pgen, ino)?.iter() {
                out.push(join(d, &name));
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// The paths of directory `dino`, named with generation `dgen` by a
    /// pointer of `child` (`child == dino` for the directory itself).
    fn dir_paths(&self, fs: &Fs, dino: u64, dgen: u32, child: u64) -> Result<Shared> {
        let root = fs.geometry().root_ino.0;
        let mut stack: Vec<Frame> = Vec::new();
        let mut want = (dino, dgen, child);
        loop {
            let (ino, gen, child) = want;
            // The paths of `want` when known now; else a frame was pushed.
            let mut found: Option<Shared> = self.get(ino, gen);
            if found.is_none() {
                if let Some(at) = stack.iter().position(|f| f.ino == ino) {
                    let chain: Vec<String> =
                        stack[at..].iter().map(|f| f.ino.to_string()).collect();
                    return Err(bad(
                        child,
                        format!(
                            "the parent pointers of inode {dino} loop: directories {} lead back to {ino}",
                            chain.join(" -> ")
                        ),
                    ));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(Error::Unsupported(format!(
                        "inode {dino}: more than {MAX_DEPTH} directories above it"
                    )));
                }
                let d = fs.inode(Ino(ino))?;
                if d.gen != gen {
                    return Err(bad(
                        child,
                        format!(
                            "a parent pointer names inode {ino} generation {gen}, but that inode has generation {}",
                            d.gen
                        ),
                    ));
                }
                if d.file_type != FileType::Dir || d.mode == 0 {
                    return Err(bad(
                        child,
                        format!("a parent pointer names inode {ino}, which is not a directory"),
                    ));
                }
                if ino == root {
                    let r: Shared = vec![b"/".to_vec()].into();
                    self.put(ino, gen, r.clone());
                    found = Some(r);
                } else {
                    stack.push(Frame {
                        ino,
                        gen,
                        ptrs: pointers(fs, self.index.as_ref(), &d)?,
                        next: 0,
                        acc: Vec::new(),
                    });
                }
            }
            // Hand what is known down the stack until a frame has a
            // pointer left to follow.
            loop {
                if let Some(v) = found.take() {
                    let Some(top) = stack.last_mut() else {
                        return Ok(v);
                    };
                    let name = &top.ptrs[top.next].0;
                    for d in v.iter() {
                        top.acc.push(join(d, name));
                    }
                    top.next += 1;
                }
                let top = stack.last_mut().expect("a frame is waiting");
                if let Some((_, pino, pgen)) = top.ptrs.get(top.next) {
                    want = (*pino, *pgen, top.ino);
                    break;
                }
                let mut f = stack.pop().expect("the frame just seen");
                f.acc.sort_unstable();
                f.acc.dedup();
                let v: Shared = f.acc.into();
                self.put(f.ino, f.gen, v.clone());
                found = Some(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_under_root_and_deeper() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
    }

    #[test]
    fn cache_stays_within_its_budget() {
        let c = PathCache::new(4096);
        for i in 0..1000u64 {
            let p: Shared = vec![vec![b'x'; 40]].into();
            c.put(i, 1, p);
            assert!(c.usage().1 <= 4096);
        }
        assert!(c.usage().0 > 0);
        // A generation that differs is not the cached directory.
        c.put(5000, 7, vec![b"/d".to_vec()].into());
        assert!(c.get(5000, 8).is_none());
        assert_eq!(c.get(5000, 7).expect("cached")[0], b"/d");
    }
}

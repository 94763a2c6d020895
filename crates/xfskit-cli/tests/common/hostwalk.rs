//! Walk a directory tree through the host kernel and describe every entry.
//!
//! The walk is the reference side of differential tests: a tree read by the
//! Linux XFS driver (a loop mount) is compared with the same tree read by
//! xfskit. Everything here uses std and libc only, never the xfskit library.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The type of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Character device node.
    CharDev,
    /// Block device node.
    BlockDev,
    /// Named pipe.
    Fifo,
    /// Unix domain socket.
    Socket,
}

impl Kind {
    /// Every kind, in a fixed order (for counting and reports).
    pub const ALL: [Kind; 7] = [
        Kind::File,
        Kind::Dir,
        Kind::Symlink,
        Kind::CharDev,
        Kind::BlockDev,
        Kind::Fifo,
        Kind::Socket,
    ];

    /// Lower-case name used in fixture `.counts` files.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::CharDev => "chardev",
            Kind::BlockDev => "blockdev",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
        }
    }
}

/// Everything a differential test compares about one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the walk root, components joined by '/'; the root is "".
    pub path: String,
    /// Entry type.
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky (mode & 0o7777).
    pub mode: u32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Byte size for files and symlinks; 0 for every other kind.
    pub size: u64,
    /// Link count (directories included).
    pub nlink: u32,
    /// Modification time, whole seconds since the epoch (may be negative).
    pub mtime_sec: i64,
    /// Modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Device number (major, minor) for device nodes; (0, 0) otherwise.
    pub rdev: (u32, u32),
    /// Symlink target bytes, for symlinks only.
    pub symlink_target: Option<Vec<u8>>,
    /// Extended attributes: full name with namespace prefix ("user.x") to value.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// FNV-1a 64-bit digest of the file contents, for regular files only.
    pub content_digest: Option<u64>,
    /// For non-directories with nlink > 1: index (in the sorted walk) of the
    /// first path that shares this inode.
    pub link_group: Option<usize>,
}

/// 64-bit FNV-1a offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// 64-bit FNV-1a prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental 64-bit FNV-1a digest of a byte stream.
#[derive(Debug, Clone, Copy)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(FNV_OFFSET)
    }
}

impl Fnv64 {
    /// Feed more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// The digest of everything fed so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a 64 digest of a whole byte slice.
pub fn digest_bytes(bytes: &[u8]) -> u64 {
    let mut h = Fnv64::default();
    h.update(bytes);
    h.finish()
}

fn digest_file(path: &Path) -> io::Result<u64> {
    let mut f = File::open(path)?;
    let mut h = Fnv64::default();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finish());
        }
        h.update(&buf[..n]);
    }
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

/// Run a libc xattr call that fills a buffer, growing the buffer until it fits.
fn sized_call(mut call: impl FnMut(*mut libc::c_char, usize) -> isize) -> io::Result<Vec<u8>> {
    loop {
        let need = call(std::ptr::null_mut(), 0);
        if need < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; need as usize];
        let got = call(buf.as_mut_ptr().cast(), buf.len());
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ERANGE) {
            return Err(err);
        }
    }
}

/// Read every extended attribute of `path` without following a final symlink.
pub fn read_xattrs(path: &Path) -> io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let c = cpath(path);
    // SAFETY: `c` is a valid NUL-terminated path; the buffer pointer and length
    // come from a live Vec (or are null/0 for the size query).
    let names = sized_call(|buf, len| unsafe { libc::llistxattr(c.as_ptr(), buf, len) })?;
    let mut out = BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name).expect("xattr name without NUL");
        // SAFETY: as above; `cname` is NUL-terminated.
        let value = sized_call(|buf, len| unsafe {
            libc::lgetxattr(c.as_ptr(), cname.as_ptr(), buf.cast(), len)
        })?;
        out.insert(name.to_vec(), value);
    }
    Ok(out)
}

fn describe(root: &Path, rel: &str) -> io::Result<(Entry, u64)> {
    let full = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let md = fs::symlink_metadata(&full)?;
    let ft = md.file_type();
    let kind = if ft.is_file() {
        Kind::File
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else if ft.is_fifo() {
        Kind::Fifo
    } else {
        Kind::Socket
    };
    let rdev = match kind {
        Kind::CharDev | Kind::BlockDev => (libc::major(md.rdev()), libc::minor(md.rdev())),
        _ => (0, 0),
    };
    let symlink_target = match kind {
        Kind::Symlink => Some(fs::read_link(&full)?.as_os_str().as_bytes().to_vec()),
        _ => None,
    };
    let content_digest = match kind {
        Kind::File => Some(digest_file(&full)?),
        _ => None,
    };
    let entry = Entry {
        path: rel.to_string(),
        kind,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: if matches!(kind, Kind::File | Kind::Symlink) {
            md.size()
        } else {
            0
        },
        nlink: md.nlink() as u32,
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec() as u32,
        rdev,
        symlink_target,
        xattrs: read_xattrs(&full)?,
        content_digest,
        link_group: None,
    };
    Ok((entry, md.ino()))
}

/// Walk the tree under `root` (not following symlinks) and describe every
/// entry, the root included, sorted by path. Panics on I/O errors: a test that
/// cannot read its reference tree has nothing to compare against.
pub fn walk_host(root: &Path) -> Vec<Entry> {
    let mut found: Vec<(Entry, u64)> = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(rel) = pending.pop() {
        let (entry, ino) =
            describe(root, &rel).unwrap_or_else(|e| panic!("walk_host: {rel:?}: {e}"));
        if entry.kind == Kind::Dir {
            let dir = if rel.is_empty() {
                root.to_path_buf()
            } else {
                root.join(&rel)
            };
            let rd = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {rel:?}: {e}"));
            for child in rd {
                let child = child.unwrap_or_else(|e| panic!("read_dir {rel:?}: {e}"));
                let name = child.file_name();
                pending.push(join(&rel, &name));
            }
        }
        found.push((entry, ino));
    }
    found.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let mut first_of_inode: HashMap<u64, usize> = HashMap::new();
    let mut out = Vec::with_capacity(found.len());
    for (i, (mut entry, ino)) in found.into_iter().enumerate() {
        if entry.kind != Kind::Dir && entry.nlink > 1 {
            entry.link_group = Some(*first_of_inode.entry(ino).or_insert(i));
        }
        out.push(entry);
    }
    out
}

fn join(parent: &str, name: &OsStr) -> String {
    // Non-UTF-8 names are kept lossily; fixtures use UTF-8 names only.
    let name = name.to_string_lossy();
    if parent.is_empty() {
        name.into_owned()
    } else {
        format!("{parent}/{name}")
    }
}

/// Count entries of each kind.
pub fn count_kinds(entries: &[Entry]) -> BTreeMap<Kind, usize> {
    let mut counts: BTreeMap<Kind, usize> = Kind::ALL.iter().map(|&k| (k, 0)).collect();
    for e in entries {
        *counts.entry(e.kind).or_insert(0) += 1;
    }
    counts
}

/// Most differences reported by [`diff_walks`].
pub const MAX_DIFFS: usize = 50;

/// Human-readable differences between two sorted walks (at most [`MAX_DIFFS`]).
/// An empty result means the walks are equal.
pub fn diff_walks(a: &[Entry], b: &[Entry]) -> Vec<String> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while (i < a.len() || j < b.len()) && out.len() < MAX_DIFFS {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.path.cmp(&y.path),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                out.push(format!("only in a: {:?} ({:?})", a[i].path, a[i].kind));
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(format!("only in b: {:?} ({:?})", b[j].path, b[j].kind));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                diff_entry(&a[i], &b[j], &mut out);
                i += 1;
                j += 1;
            }
        }
    }
    out.truncate(MAX_DIFFS);
    out
}

fn diff_entry(x: &Entry, y: &Entry, out: &mut Vec<String>) {
    let p = &x.path;
    macro_rules! field {
        ($f:ident) => {
            if x.$f != y.$f {
                out.push(format!(
                    "{p:?}: {}: a={:?} b={:?}",
                    stringify!($f),
                    x.$f,
                    y.$f
                ));
            }
        };
    }
    field!(kind);
    if x.mode != y.mode {
        out.push(format!("{p:?}: mode: a={:o} b={:o}", x.mode, y.mode));
    }
    field!(uid);
    field!(gid);
    field!(size);
    field!(nlink);
    field!(mtime_sec);
    field!(mtime_nsec);
    field!(rdev);
    if x.symlink_target != y.symlink_target {
        out.push(format!(
            "{p:?}: symlink_target: a={:?} b={:?}",
            x.symlink_target.as_deref().map(String::from_utf8_lossy),
            y.symlink_target.as_deref().map(String::from_utf8_lossy)
        ));
    }
    if x.xattrs != y.xattrs {
        let (xa, ya) = (
            without_policy(p, &x.xattrs, &y.xattrs),
            without_policy(p, &y.xattrs, &x.xattrs),
        );
        if xa != ya {
            diff_xattrs(p, &xa, &ya, out);
        }
    }
    if x.content_digest != y.content_digest {
        out.push(format!(
            "{p:?}: content_digest: a={:x?} b={:x?}",
            x.content_digest, y.content_digest
        ));
    }
    field!(link_group);
}

/// The root's online fsck policy (`trusted.xfs:autofsck`, which mkfs.xfs
/// 7.2 and xfskit's mkfs and build give a new filesystem's root) is not
/// part of a source tree: `xattrs` without it when it is on the root, the
/// `other` side lacks it, and it holds one of the policies.
fn without_policy(
    p: &str,
    xattrs: &BTreeMap<Vec<u8>, Vec<u8>>,
    other: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    const NAME: &[u8] = b"trusted.xfs:autofsck";
    let mut x = xattrs.clone();
    let policy = |v: &Vec<u8>| [&b"none"[..], b"check", b"optimize", b"repair"].contains(&&v[..]);
    if p.is_empty() && !other.contains_key(NAME) && x.get(NAME).is_some_and(policy) {
        x.remove(NAME);
    }
    x
}

fn diff_xattrs(
    p: &str,
    a: &BTreeMap<Vec<u8>, Vec<u8>>,
    b: &BTreeMap<Vec<u8>, Vec<u8>>,
    out: &mut Vec<String>,
) {
    let show = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
    for (name, va) in a {
        match b.get(name) {
            None => out.push(format!("{p:?}: xattr {} only in a", show(name))),
            Some(vb) if vb != va => out.push(format!(
                "{p:?}: xattr {}: a has {} bytes (digest {:x}), b has {} bytes (digest {:x})",
                show(name),
                va.len(),
                digest_bytes(va),
                vb.len(),
                digest_bytes(vb)
            )),
            Some(_) => {}
        }
    }
    for name in b.keys().filter(|n| !a.contains_key(*n)) {
        out.push(format!("{p:?}: xattr {} only in b", show(name)));
    }
}

//! attr::write against real filesystems: inodes made by the kernel get
//! attributes set, replaced and removed across every format boundary
//! (short form, leaf, node, remote values); at each boundary the image
//! must pass `xfs_repair -n`, xfskit's reader must return exactly the
//! model, and (as root) the kernel must show the same.

mod write_common;

use std::collections::BTreeMap;
use std::path::Path;
use write_common::*;
use xfskit::attr::{self, Namespace};
use xfskit::inode::ForkFormat;
use xfskit::{Fs, Ino};

type Model = BTreeMap<(Namespace, Vec<u8>), Vec<u8>>;

/// One test filesystem: the image, and the files the kernel made in it
/// with their expected attributes.
struct Img {
    _dir: Scratch,
    path: std::path::PathBuf,
    files: Vec<(String, Ino, Model)>,
    fs: Option<Fs>,
    /// Compare with the kernel's view too.
    kernel: bool,
}

/// Makes an image with `opts`, lets the kernel create `names` (a trailing
/// '/' makes a directory, a leading '@' a symlink), opens it for writing.
fn image(tag: &str, opts: &str, names: &[&str]) -> Option<Img> {
    if !is_root() {
        eprintln!("SKIP {tag}: needs root to let the kernel create the inodes");
        return None;
    }
    let dir = Scratch::new(tag);
    let path = dir.0.join("img");
    mkfs_xfs(&path, 320 << 20, opts);
    let mnt = dir.0.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ok, out) = run(
        "mount",
        &["-o", "loop", path.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    assert!(ok, "mount: {out}");
    for n in names {
        if *n == "." {
            continue;
        }
        if let Some(f) = n.strip_prefix('%') {
            // Every other 4 KiB block written: one data extent each.
            let count: u64 = f
                .trim_start_matches(|c: char| c.is_alphabetic())
                .parse()
                .unwrap();
            let file = std::fs::File::create(mnt.join(f)).unwrap();
            for i in 0..count {
                std::os::unix::fs::FileExt::write_all_at(&file, &[1u8; 4096], i * 8192).unwrap();
            }
            file.sync_all().unwrap();
        } else if let Some(f) = n.strip_prefix('|') {
            let (ok, out) = run("mkfifo", &[mnt.join(f).to_str().unwrap()]);
            assert!(ok, "mkfifo: {out}");
        } else if let Some(d) = n.strip_suffix('/') {
            std::fs::create_dir(mnt.join(d)).unwrap();
        } else if let Some(s) = n.strip_prefix('@') {
            std::os::unix::fs::symlink("some/target/path", mnt.join(s)).unwrap();
        } else {
            std::fs::write(mnt.join(n), b"data").unwrap();
        }
    }
    let (ok, out) = run("umount", &[mnt.to_str().unwrap()]);
    assert!(ok, "umount: {out}");
    let fs = open_rw(&path);
    let files = names
        .iter()
        .map(|n| {
            let n = n
                .trim_end_matches('/')
                .trim_start_matches(['@', '%', '|'])
                .to_string();
            let ip = fs.lookup_path(n.as_bytes()).unwrap();
            let model = attr::list(&fs, &ip)
                .unwrap()
                .into_iter()
                .map(|x| ((x.ns, x.name), x.value))
                .collect();
            (n, ip.ino, model)
        })
        .collect();
    Some(Img {
        _dir: dir,
        path,
        files,
        fs: Some(fs),
        kernel: true,
    })
}

impl Img {
    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    fn set(&mut self, f: usize, ns: Namespace, name: &[u8], value: &[u8]) {
        let ino = self.files[f].1;
        let fs = self.fs.as_ref().unwrap();
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(ino).unwrap();
        attr::write::set(&mut tp, &mut ip, ns, name, value).unwrap_or_else(|e| {
            panic!(
                "set {:?} ({} bytes) on {}: {e}",
                String::from_utf8_lossy(name),
                value.len(),
                self.files[f].0
            )
        });
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        self.files[f].2.insert((ns, name.to_vec()), value.to_vec());
    }

    fn remove(&mut self, f: usize, ns: Namespace, name: &[u8]) {
        let ino = self.files[f].1;
        let fs = self.fs.as_ref().unwrap();
        let mut tp = fs.trans().unwrap();
        let mut ip = tp.read_inode(ino).unwrap();
        attr::write::remove(&mut tp, &mut ip, ns, name).unwrap_or_else(|e| {
            panic!(
                "remove {:?} on {}: {e}",
                String::from_utf8_lossy(name),
                self.files[f].0
            )
        });
        tp.log_inode(&ip).unwrap();
        tp.commit().unwrap();
        assert!(self.files[f].2.remove(&(ns, name.to_vec())).is_some());
    }

    fn aformat(&self, f: usize) -> Option<ForkFormat> {
        let ip = self.fs().inode(self.files[f].1).unwrap();
        ip.has_attr_fork().then_some(ip.aformat)
    }

    /// Syncs, runs xfs_repair -n, compares our reader and the kernel
    /// with the model, reopens for writing.
    fn check(&mut self, what: &str) {
        self.fs.as_ref().unwrap().sync().unwrap();
        self.fs = None;
        assert_repair_clean(&self.path);
        let fs = Fs::open(&self.path, &Default::default()).unwrap();
        for (name, ino, model) in &self.files {
            let ip = fs.inode(*ino).unwrap();
            let got: Model = attr::list(&fs, &ip)
                .unwrap()
                .into_iter()
                .map(|x| ((x.ns, x.name), x.value))
                .collect();
            assert_eq!(got.len(), model.len(), "{what}: {name}: attribute count");
            assert!(
                got == *model,
                "{what}: {name}: attributes differ from the model"
            );
            for ((ns, n), v) in model.iter().take(50) {
                let g = attr::get(&fs, &ip, *ns, n).unwrap();
                assert_eq!(g.as_deref(), Some(&v[..]), "{what}: {name}: get");
            }
        }
        drop(fs);
        let files = &self.files;
        if !self.kernel {
            self.fs = Some(open_rw(&self.path));
            return;
        }
        with_kernel_mount(&self.path, |mnt| {
            for (name, _, model) in files {
                let path = mnt.join(name);
                let ft = std::fs::symlink_metadata(&path).unwrap().file_type();
                // Linux hides user.* attributes of everything but files and directories.
                let link = !ft.is_file() && !ft.is_dir();
                let mut got = kernel_xattrs(&path);
                if let (true, Some(g)) = (link, got.as_mut()) {
                    g.retain(|k, _| !k.starts_with(b"user."));
                }
                let want: BTreeMap<Vec<u8>, Vec<u8>> = model
                    .iter()
                    .filter(|((ns, _), _)| !(link && *ns == Namespace::User))
                    .map(|((ns, n), v)| (attr::full_name(*ns, n), v.clone()))
                    .collect();
                match got {
                    Some(got) => assert!(
                        got == want,
                        "{what}: kernel sees other attributes on {name}: {:?}",
                        got.keys()
                            .map(|k| String::from_utf8_lossy(k))
                            .collect::<Vec<_>>()
                    ),
                    // Too many names for one listxattr: ask for each value.
                    None => {
                        for (k, v) in &want {
                            assert_eq!(
                                kernel_get(&path, k).as_ref(),
                                Some(v),
                                "{what}: kernel value of {}",
                                String::from_utf8_lossy(k)
                            );
                        }
                    }
                }
            }
        });
        self.fs = Some(open_rw(&self.path));
    }
}

/// One attribute's value as the kernel shows it.
fn kernel_get(p: &Path, name: &[u8]) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: both strings are NUL-terminated and buf is writable for its length.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Every attribute of `p` as the kernel shows it; None when the names
/// do not fit one listxattr (64 KiB).
fn kernel_xattrs(p: &Path) -> Option<BTreeMap<Vec<u8>, Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut list = vec![0u8; 65536];
    // SAFETY: path is NUL-terminated and list is writable for its length.
    let n = unsafe { libc::llistxattr(path.as_ptr(), list.as_mut_ptr().cast(), list.len()) };
    if n < 0 {
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::E2BIG),
            "listxattr {}",
            p.display()
        );
        return None;
    }
    let mut m = BTreeMap::new();
    for name in list[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        if let Some(v) = kernel_get(p, name) {
            m.insert(name.to_vec(), v);
        }
    }
    Some(m)
}

const NS: [Namespace; 3] = [Namespace::User, Namespace::Trusted, Namespace::Security];

/// Short form only: a few small attributes on a file, a directory, a
/// symlink and the root directory (made by mkfs: no attr fork yet);
/// replace; remove all (the fork goes).
fn short_form(tag: &str, opts: &str) {
    let Some(mut img) = image(tag, opts, &["f", "d/", "@l", "."]) else {
        return;
    };
    assert_eq!(img.fs().inode(img.files[3].1).unwrap().forkoff, 0);
    let mut rng = Rng(7);
    for f in 0..4 {
        for (i, ns) in NS.iter().enumerate() {
            let v = rng.bytes(5 + i * 7);
            img.set(f, *ns, format!("a{i}").as_bytes(), &v);
        }
        img.set(f, Namespace::User, b"empty", b"");
        assert_eq!(
            img.aformat(f),
            Some(ForkFormat::Local),
            "{}",
            img.files[f].0
        );
    }
    img.check("short form");
    for f in 0..4 {
        img.set(f, Namespace::User, b"a0", b"replaced");
        img.set(f, Namespace::Trusted, b"a1", &[1; 60]);
    }
    img.check("short form replace");
    for f in 0..4 {
        let keys: Vec<_> = img.files[f].2.keys().cloned().collect();
        for (ns, n) in keys {
            img.remove(f, ns, &n);
        }
        let ip = img.fs().inode(img.files[f].1).unwrap();
        assert_eq!(
            ip.forkoff, 0,
            "{}: fork removed with the last attribute",
            img.files[f].0
        );
    }
    img.check("short form emptied");
}

#[test]
fn short_form_4k() {
    short_form("sf4k", "");
}

#[test]
fn short_form_inode512() {
    short_form("sf512", "-i size=512");
}

#[test]
fn short_form_inode2048() {
    short_form("sf2048", "-i size=2048");
}

/// Every format: sf -> leaf -> node with remote values, replaces that
/// move values between local and remote, then removal of everything in
/// random order, checked at each boundary.
fn all_formats(tag: &str, opts: &str, many: usize) {
    let Some(mut img) = image(tag, opts, &["sf", "leaf", "node", "remote", "d/", "@l"]) else {
        return;
    };
    let mut rng = Rng(0x9e3779b97f4a7c15);
    // Short form.
    for f in 0..6 {
        img.set(f, Namespace::User, b"first", b"1");
    }
    // Leaf: dozens of attributes.
    for f in [1usize, 4, 5] {
        for i in 0..80 {
            let n = rng.below(40) as usize;
            let v = rng.bytes(n);
            img.set(f, NS[i % 3], format!("leaf.attr.{i}").as_bytes(), &v);
        }
        assert_eq!(img.aformat(f), Some(ForkFormat::Extents));
    }
    // Node: hundreds.
    for i in 0..many {
        let n = rng.below(60) as usize;
        let v = rng.bytes(n);
        img.set(2, NS[i % 3], format!("node-{i:05}-name").as_bytes(), &v);
    }
    // Remote: 64 KiB values, and values just around the local limit.
    let bsize = img.fs().geometry().block_size as usize;
    for (i, len) in [65536usize, 65536, bsize * 3 / 4, bsize, 1, 70, 5000]
        .iter()
        .enumerate()
    {
        let v = rng.bytes(*len);
        img.set(3, NS[i % 3], format!("remote{i}").as_bytes(), &v);
    }
    // The node file needs several leaves under a node; the remote file
    // two 64 KiB values in blocks of their own.
    let nb = |img: &Img, f: usize| img.fs().inode(img.files[f].1).unwrap().nblocks;
    assert!(nb(&img, 2) >= 4, "node file has {} blocks", nb(&img, 2));
    assert!(
        nb(&img, 3) as usize >= 2 * 65536 / bsize,
        "remote file has {} blocks",
        nb(&img, 3)
    );
    eprintln!(
        "{tag}: node file {} blocks, remote file {}",
        nb(&img, 2),
        nb(&img, 3)
    );
    img.check("grown");
    // Replace: sizes cross local <-> remote.
    for (f, key) in [(3usize, "remote0"), (3, "remote5"), (1, "leaf.attr.3")] {
        let ns = img.files[f]
            .2
            .keys()
            .find(|(_, n)| n == key.as_bytes())
            .unwrap()
            .0;
        let len = if img.files[f].2[&(ns, key.as_bytes().to_vec())].len() > 1000 {
            10
        } else {
            20000
        };
        let v = rng.bytes(len);
        img.set(f, ns, key.as_bytes(), &v);
    }
    let keys: Vec<_> = img.files[2].2.keys().cloned().collect();
    for (ns, n) in keys.iter().step_by(7) {
        let len = [0usize, 5, 100, 3000, 9000][rng.below(5) as usize];
        let v = rng.bytes(len);
        img.set(2, *ns, n, &v);
    }
    img.check("replaced");
    // Remove everything in random order, checking halfway.
    for f in 0..6 {
        let mut keys: Vec<_> = img.files[f].2.keys().cloned().collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let half = keys.len() / 2;
        for (j, (ns, n)) in keys.iter().enumerate() {
            img.remove(f, *ns, n);
            if f == 2 && j == half {
                img.check("node half removed");
            }
        }
        let ip = img.fs().inode(img.files[f].1).unwrap();
        assert_eq!(
            ip.forkoff, 0,
            "{}: fork removed with the last attribute",
            img.files[f].0
        );
        assert_eq!(ip.anextents, 0);
    }
    img.check("all removed");
}

#[test]
fn all_formats_4k() {
    all_formats("all4k", "", 700);
}

#[test]
fn all_formats_1k() {
    all_formats("all1k", "-b size=1024", 400);
}

#[test]
fn all_formats_inode512() {
    all_formats("all512", "-i size=512", 300);
}

#[test]
fn all_formats_inode2048() {
    all_formats("all2048", "-i size=2048", 300);
}

/// Removing what is not there.
#[test]
fn remove_missing_is_noattr() {
    let Some(mut img) = image("noattr", "", &["f"]) else {
        return;
    };
    img.set(0, Namespace::User, b"x", b"y");
    let fs = img.fs();
    let mut tp = fs.trans().unwrap();
    let mut ip = tp.read_inode(img.files[0].1).unwrap();
    let r = attr::write::remove(&mut tp, &mut ip, Namespace::Trusted, b"x");
    assert!(matches!(r, Err(xfskit::Error::NoAttr(_))), "{r:?}");
}

/// A two-level da btree on 1 KiB blocks: thousands of attributes make
/// nodes split (and the root split again); removing them all in random
/// order empties leaves and nodes until the root collapses back to one
/// leaf, short form and no fork.
#[test]
fn deep_tree_1k() {
    let Some(mut img) = image("deep1k", "-b size=1024", &["f"]) else {
        return;
    };
    let mut rng = Rng(42);
    let n = 6000;
    for i in 0..n {
        let len = rng.below(12) as usize;
        let v = rng.bytes(len);
        img.set(0, NS[i % 3], format!("k{i}").as_bytes(), &v);
    }
    // More leaves than one 1 KiB node can index: the root split.
    let blocks = img.fs().inode(img.files[0].1).unwrap().nblocks;
    assert!(blocks > 1 + 121 + 2, "only {blocks} blocks");
    img.check("deep tree grown");
    let mut keys: Vec<_> = img.files[0].2.keys().cloned().collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (j, (ns, k)) in keys.iter().enumerate() {
        img.remove(0, *ns, k);
        if j == n * 3 / 4 {
            img.check("deep tree three quarters removed");
        }
    }
    assert_eq!(img.fs().inode(img.files[0].1).unwrap().forkoff, 0);
    img.check("deep tree emptied");
}

/// Names that all hash alike: 12-byte names where toggling bit 0 of one
/// byte and bit 7 of the next leaves the hash alone (512 names per
/// hash), so one hash spans several leaves.
#[test]
fn hash_collisions_1k() {
    let Some(mut img) = image("coll1k", "-b size=1024", &["f"]) else {
        return;
    };
    let base = *b"abcdefghijkl";
    let mut names = Vec::new();
    for bits in 0u32..512 {
        let mut n = base;
        for t in 0..9 {
            if bits & (1 << t) != 0 {
                // pairs (0,1) (1,2) (2,3) in each 4-byte chunk
                let (chunk, k) = (t / 3, t % 3);
                let i = chunk * 4 + k;
                n[i] ^= 1;
                n[i + 1] ^= 0x80;
            }
        }
        names.push(n);
    }
    let h0 = attr::name_hash(&names[0]);
    assert!(names.iter().all(|n| attr::name_hash(n) == h0));
    let mut rng = Rng(5);
    for (i, n) in names.iter().enumerate() {
        let len = rng.below(30) as usize;
        let v = rng.bytes(len);
        img.set(0, NS[i % 3], n, &v);
        if i % 5 == 0 {
            img.set(0, Namespace::User, format!("other{i}").as_bytes(), b"x");
        }
    }
    img.check("same-hash names");
    for (i, n) in names.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        let v = rng.bytes(100);
        img.set(0, NS[i % 3], n, &v);
    }
    img.check("same-hash names replaced");
    for (i, n) in names.iter().enumerate().rev() {
        img.remove(0, NS[i % 3], n);
    }
    img.check("same-hash names removed");
}

/// Inodes whose data fork limits the attr fork: data extents in the
/// inode (the fork offset may not cut them), a data btree root (the
/// fork offset stays put; the empty short-form list stays when the last
/// attribute goes, as the kernel leaves it), a fifo (device format).
fn data_forks(tag: &str, opts: &str) {
    let Some(mut img) = image(tag, opts, &["%frag9", "%btree300", "|fifo"]) else {
        return;
    };
    assert_eq!(
        img.fs().inode(img.files[1].1).unwrap().format,
        ForkFormat::Btree
    );
    let mut rng = Rng(99);
    for round in 0..2 {
        for f in 0..3 {
            for i in 0..60 {
                let len = rng.below(20) as usize;
                let v = rng.bytes(len);
                img.set(f, NS[i % 3], format!("r{round}-{i}").as_bytes(), &v);
                let ip = img.fs().inode(img.files[f].1).unwrap();
                if ip.format == ForkFormat::Extents {
                    assert!(ip.nextents * 16 <= u64::from(ip.forkoff) * 8);
                }
            }
        }
        img.check("data forks grown");
        for f in 0..3 {
            let keys: Vec<_> = img.files[f].2.keys().cloned().collect();
            for (ns, n) in keys {
                img.remove(f, ns, &n);
            }
        }
        img.check("data forks emptied");
        assert_eq!(img.fs().inode(img.files[0].1).unwrap().forkoff, 0);
        assert_eq!(img.fs().inode(img.files[2].1).unwrap().forkoff, 0);
        assert_eq!(img.aformat(1), Some(ForkFormat::Local));
    }
    // A first attribute too big for short form on inodes without a fork.
    for f in [0usize, 2] {
        let v = rng.bytes(65536);
        img.set(f, Namespace::Trusted, b"big", &v);
        assert_eq!(img.aformat(f), Some(ForkFormat::Extents));
    }
    img.check("big first attribute");
    for f in [0usize, 2] {
        img.remove(f, Namespace::Trusted, b"big");
        assert_eq!(img.fs().inode(img.files[f].1).unwrap().forkoff, 0);
    }
    img.check("big first attribute removed");
    // 20 data extents fill a fork-less 512-byte inode past where the
    // attr fork goes: the data extents move to a btree, as the kernel does.
    assert_eq!(img.fs().geometry().inode_size, 512);
    let ino = img.files[0].1;
    for i in 9..20u64 {
        img.fs().write_at(ino, i * 8192, &[2u8; 4096]).unwrap();
    }
    let ip = img.fs().inode(ino).unwrap();
    assert_eq!(
        (ip.forkoff, ip.format, ip.nextents),
        (0, ForkFormat::Extents, 20)
    );
    img.set(0, Namespace::User, b"after", b"extents");
    let ip = img.fs().inode(ino).unwrap();
    assert_eq!(ip.format, ForkFormat::Btree);
    img.check("data extents pushed into a btree");
}

#[test]
fn data_forks_4k() {
    data_forks("df4k", "");
}

#[test]
fn data_forks_inode512() {
    data_forks("df512", "-i size=512");
}

/// The mkfs root directory (no attr fork) with a short-form directory
/// larger than the default data area gets a first attribute too big for
/// short form: the fork starts just past the directory entries.
#[test]
fn big_local_dir_first_big_attr() {
    let names: Vec<String> = (0..15).map(|i| format!("entry{i:03}")).collect();
    let mut all: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    all.push(".");
    let Some(mut img) = image("bigdir", "", &all) else {
        return;
    };
    let root = img.files.len() - 1;
    let ip = img.fs().inode(img.files[root].1).unwrap();
    assert_eq!((ip.forkoff, ip.format), (0, ForkFormat::Local));
    assert!(ip.size > 196, "root directory of {} bytes", ip.size);
    let mut rng = Rng(3);
    let v = rng.bytes(300);
    img.set(root, Namespace::Security, b"label", &v);
    img.check("big local dir, first attribute in a leaf");
    img.remove(root, Namespace::Security, b"label");
    assert_eq!(img.fs().inode(img.files[root].1).unwrap().forkoff, 0);
    img.check("big local dir, attribute removed");
}

//! Helpers shared by the xattr write tests: an image whose files the
//! kernel made, a model of each file's attributes, and the checks that
//! xfs_repair, xfskit's reader and the kernel agree with the model.
#![allow(dead_code)]

use crate::write_common::*;
use std::collections::BTreeMap;
use std::path::Path;
use xfskit::attr::{self, Namespace};
use xfskit::inode::ForkFormat;
use xfskit::{Fs, Ino};

pub type Model = BTreeMap<(Namespace, Vec<u8>), Vec<u8>>;

/// One test filesystem: the image, and the files the kernel made in it
/// with their expected attributes.
pub struct Img {
    pub _dir: Scratch,
    pub path: std::path::PathBuf,
    pub files: Vec<(String, Ino, Model)>,
    pub fs: Option<Fs>,
    /// Compare with the kernel's view too.
    pub kernel: bool,
}

/// Makes an image with `opts`, lets the kernel create `names` (a trailing
/// '/' makes a directory, a leading '@' a symlink), opens it for writing.
pub fn image(tag: &str, opts: &str, names: &[&str]) -> Option<Img> {
    if !is_root() {
        xfskit_testkit::skip(tag, "needs root to let the kernel create the inodes");
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
    let (ok, out) = xfskit_testkit::umount(&mnt);
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
    pub fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    pub fn set(&mut self, f: usize, ns: Namespace, name: &[u8], value: &[u8]) {
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

    pub fn remove(&mut self, f: usize, ns: Namespace, name: &[u8]) {
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

    pub fn aformat(&self, f: usize) -> Option<ForkFormat> {
        let ip = self.fs().inode(self.files[f].1).unwrap();
        ip.has_attr_fork().then_some(ip.aformat)
    }

    /// Syncs, runs xfs_repair -n, compares our reader and the kernel
    /// with the model, reopens for writing.
    pub fn check(&mut self, what: &str) {
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
pub fn kernel_get(p: &Path, name: &[u8]) -> Option<Vec<u8>> {
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
pub fn kernel_xattrs(p: &Path) -> Option<BTreeMap<Vec<u8>, Vec<u8>>> {
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

pub const NS: [Namespace; 3] = [Namespace::User, Namespace::Trusted, Namespace::Security];

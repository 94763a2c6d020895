//! Differential tests: the tree as xfskit reads it must equal the tree as
//! the Linux kernel reads it, for every golden fixture.
//!
//! 1. The library walk (`xfskit::walk`) against a read-only loop mount.
//! 2. `xfskit extract` into a scratch XFS filesystem, walked by the host,
//!    against the same loop mount (access times are not compared).
//! 3. `xfskit mount --read-only`, walked by the host, against the same loop
//!    mount; then SIGTERM must unmount it and exit 0.
//!
//! Both need root for the loop mounts; without root they print SKIP, and
//! only the check that needs no mount runs: the library walk's per-kind
//! counts against the counts recorded when the fixture was made.

mod common;

use common::{
    count_kinds, diff_walks, expected_counts, fixture_names, require_root, unpack_fixture,
    walk_host, Entry, Fnv64, Kind, LoopMount, TempDir,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use xfskit::inode::{FileReader, FileType};
use xfskit::walk::{self, Control};
use xfskit::{Fs, OpenOptions};

fn kind_of(t: FileType) -> Kind {
    match t {
        FileType::File => Kind::File,
        FileType::Dir => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        FileType::CharDev => Kind::CharDev,
        FileType::BlockDev => Kind::BlockDev,
        FileType::Fifo => Kind::Fifo,
        FileType::Socket => Kind::Socket,
    }
}

fn digest_file(fs: &Fs, inode: &xfskit::inode::Inode) -> u64 {
    let r = FileReader::new(fs, inode).expect("file mapping");
    let mut h = Fnv64::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = r.read_at(off, &mut buf).expect("file read");
        if n == 0 {
            return h.finish();
        }
        h.update(&buf[..n]);
        off += n as u64;
    }
}

/// Walks an image with the library and describes it like `walk_host`.
fn walk_library(image: &Path) -> Vec<Entry> {
    let fs = Fs::open(image, &OpenOptions::default()).expect("open image");
    let mut found: Vec<(Entry, u64)> = Vec::new();
    let mut v = walk::FnVisitor(|e: &walk::Entry<'_>| -> xfskit::Result<Control> {
        let i = e.inode;
        let kind = kind_of(i.file_type);
        let xattrs: BTreeMap<Vec<u8>, Vec<u8>> = if xfskit::extract::has_attrs(i) {
            xfskit::attr::list(&fs, i)?
                .into_iter()
                .map(|x| (x.full_name(), x.value))
                .collect()
        } else {
            BTreeMap::new()
        };
        let symlink_target = if kind == Kind::Symlink {
            Some(xfskit::symlink::read_link(&fs, i)?)
        } else {
            None
        };
        let entry = Entry {
            path: String::from_utf8_lossy(e.path).into_owned(),
            kind,
            mode: u32::from(i.perm()),
            uid: i.uid,
            gid: i.gid,
            size: if matches!(kind, Kind::File | Kind::Symlink) {
                i.size
            } else {
                0
            },
            nlink: i.nlink,
            mtime_sec: i.mtime.sec,
            mtime_nsec: i.mtime.nsec,
            rdev: if matches!(kind, Kind::CharDev | Kind::BlockDev) {
                i.rdev_major_minor()
            } else {
                (0, 0)
            },
            symlink_target,
            xattrs,
            content_digest: if kind == Kind::File {
                Some(digest_file(&fs, i))
            } else {
                None
            },
            link_group: None,
        };
        found.push((entry, i.ino.0));
        Ok(Control::Continue)
    });
    walk::walk(&fs, &mut v).expect("library walk");
    found.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let mut first: HashMap<u64, usize> = HashMap::new();
    found
        .into_iter()
        .enumerate()
        .map(|(idx, (mut e, ino))| {
            if e.kind != Kind::Dir && e.nlink > 1 {
                e.link_group = Some(*first.entry(ino).or_insert(idx));
            }
            e
        })
        .collect()
}

fn report(name: &str, what: &str, diffs: &[String], failures: &mut Vec<String>) {
    if !diffs.is_empty() {
        failures.push(format!("{name}: {what}:\n  {}", diffs.join("\n  ")));
    }
}

#[test]
fn library_walk_counts_match_fixture_records() {
    let tmp = TempDir::new("xfskit-diff-counts");
    let mut failures = Vec::new();
    for name in fixture_names() {
        let img = unpack_fixture(&name, tmp.path());
        let walked = walk_library(&img);
        let got: BTreeMap<String, usize> = count_kinds(&walked)
            .into_iter()
            .map(|(k, n)| (k.name().to_string(), n))
            .collect();
        // The recorded counts include the root directory, as the walk does.
        let want = expected_counts(&name);
        if got != want {
            failures.push(format!("{name}: counts {got:?}, recorded {want:?}"));
        }
        std::fs::remove_file(&img).ok();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn library_walk_extract_and_fuse_match_kernel() {
    if !require_root("library_walk_extract_and_fuse_match_kernel") {
        return;
    }
    let tmp = TempDir::new("xfskit-diff");
    // An extract destination that holds large xattrs of every namespace.
    let scratch = common::fixtures::scratch_xfs(tmp.path(), 2 << 30);
    let mut failures = Vec::new();
    for name in fixture_names() {
        let img = unpack_fixture(&name, tmp.path());
        let mnt = tmp.path().join(format!("{name}.mnt"));
        std::fs::create_dir_all(&mnt).expect("mkdir");
        let kernel = {
            let m = LoopMount::new(&img, &mnt).expect("loop mount");
            walk_host(m.path())
        };
        assert!(
            kernel.len() > 10,
            "{name}: kernel walk found only {} entries",
            kernel.len()
        );
        let lib = walk_library(&img);
        report(
            &name,
            "library walk vs kernel",
            &diff_walks(&lib, &kernel),
            &mut failures,
        );

        let dest = scratch.0.join(&name);
        let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["extract", "-q"])
            .arg(&img)
            .arg(&dest)
            .output()
            .expect("run xfskit extract");
        if !out.status.success() {
            failures.push(format!(
                "{name}: extract failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        } else {
            let extracted = walk_host(&dest);
            report(
                &name,
                "extract vs kernel",
                &diff_walks(&extracted, &kernel),
                &mut failures,
            );
        }
        let _ = std::fs::remove_dir_all(&dest);

        let fmnt = tmp.path().join(format!("{name}.fuse"));
        match FuseMount::new(&img, &fmnt) {
            Ok(f) => {
                let fused = walk_host(&fmnt);
                report(
                    &name,
                    "FUSE mount vs kernel",
                    &diff_walks(&fused, &kernel),
                    &mut failures,
                );
                if let Err(e) = f.stop() {
                    failures.push(format!("{name}: FUSE unmount: {e}"));
                }
            }
            Err(e) => failures.push(format!("{name}: xfskit mount: {e}")),
        }
        std::fs::remove_file(&img).ok();
        println!("{name}: {} entries compared", kernel.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

/// `xfskit mount --read-only` running in the background.
struct FuseMount {
    child: Option<std::process::Child>,
    dir: std::path::PathBuf,
}

impl FuseMount {
    fn new(img: &Path, dir: &Path) -> Result<FuseMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["mount", "--read-only"])
            .arg(img)
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut m = FuseMount {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        let t0 = std::time::Instant::now();
        while !is_mounted(dir) {
            if t0.elapsed() > std::time::Duration::from_secs(20) {
                return Err("the FUSE mount did not appear within 20 s".into());
            }
            if let Some(st) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("xfskit mount exited early: {st}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(m)
    }

    /// SIGTERM, then expect a clean exit and the mount gone.
    fn stop(mut self) -> Result<(), String> {
        let mut child = self.child.take().ok_or("no child")?;
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .map_err(|e| e.to_string())?;
        let st = child.wait().map_err(|e| e.to_string())?;
        if !st.success() {
            return Err(format!("xfskit mount exited with {st}"));
        }
        if is_mounted(&self.dir) {
            return Err("still mounted after SIGTERM".into());
        }
        Ok(())
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

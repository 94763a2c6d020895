//! A read-write `xfskit mount` of a fresh mkfs.xfs image for the tests of
//! the POSIX surface, and the checks every such test ends with: unmount,
//! `xfs_repair -n` clean, and a kernel loop mount that shows exactly the
//! tree the FUSE mount showed. Also small libc wrappers that return the
//! errno, and running a command as another user.

use super::{assert_kernel_sees, repair_check, walk_host};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a read-write mount test cannot run here (not root, no /dev/fuse,
/// no mkfs.xfs or xfs_repair), or None.
pub fn rw_skip_reason() -> Option<String> {
    if !super::is_root() {
        return Some("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    for tool in ["mkfs.xfs", "xfs_repair"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// True (after printing why and recording the skip, so that it is not
/// counted as passed) when read-write mount test `test` cannot run here.
pub fn skip_rw(test: &str) -> bool {
    match rw_skip_reason() {
        Some(why) => {
            super::skip(test, &why);
            true
        }
        None => false,
    }
}

/// A fresh image served read-write by `xfskit mount` at `dir/fuse`.
pub struct RwMount {
    pub dir: PathBuf,
    pub image: PathBuf,
    pub mnt: PathBuf,
    child: Option<Child>,
    /// Environment given to every `xfskit mount` of this image.
    env: Vec<(String, String)>,
}

fn is_mounted(dir: &Path) -> bool {
    let want = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

/// Whether process `pid` runs io_uring queue threads (crate xfskit-fuse's
/// `uring` names them "xfskit-uringN").
fn serves_io_uring(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks.flatten().any(|t| {
                fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("xfskit-uring"))
            })
        })
        .unwrap_or(false)
}

impl RwMount {
    /// How many of the mount's serving threads (fuser's "fuser-N" on
    /// /dev/fuse, "xfskit-uringN" through io_uring) run SCHED_IDLE now.
    pub fn serving_threads_idle(&self) -> usize {
        let Some(pid) = self.child.as_ref().map(|c| c.id()) else {
            return 0;
        };
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return 0;
        };
        tasks
            .flatten()
            .filter(|t| {
                let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                let serving = comm.starts_with("xfskit-uring")
                    || comm
                        .strip_prefix("fuser-")
                        .is_some_and(|n| n.trim().parse::<u32>().is_ok());
                // The policy is field 41 of stat, the 39th after the
                // parenthesised command name.
                let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                let policy = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(38).map(str::to_owned));
                serving && policy.as_deref() == Some("5")
            })
            .count()
    }

    /// Makes a `size_mib` image with mkfs.xfs (extra options `mkfs`) and
    /// mounts it read-write.
    pub fn new(tag: &str, size_mib: u64, mkfs: &[&str]) -> RwMount {
        RwMount::with_env(tag, size_mib, mkfs, &[])
    }

    /// [`RwMount::new`] with `env` set for the mount process.
    pub fn with_env(tag: &str, size_mib: u64, mkfs: &[&str], env: &[(&str, &str)]) -> RwMount {
        let dir = std::env::temp_dir().join(format!("xfskit-rw-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("fuse")).unwrap();
        let image = dir.join("img");
        fs::File::create(&image)
            .unwrap()
            .set_len(size_mib << 20)
            .unwrap();
        let st = super::fixtures::test_mkfs(mkfs)
            .args(["-q", "-f"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "mkfs.xfs {mkfs:?} failed: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        if std::env::var("XFSKIT_TEST_MKFS").as_deref() == Ok("6.18") {
            assert!(
                super::fixtures::needs_615(&image),
                "XFSKIT_TEST_MKFS=6.18 made no parent-pointer filesystem"
            );
        }
        let mut m = RwMount {
            mnt: dir.join("fuse"),
            dir,
            image,
            child: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        m.mount(&[]);
        m
    }

    /// Mounts the existing image `image` read-write (at a mount point
    /// of its own, removed on drop; the image is left where it is).
    pub fn of_image(tag: &str, image: &Path) -> RwMount {
        let dir = std::env::temp_dir().join(format!("xfskit-rw-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("fuse")).unwrap();
        let mut m = RwMount {
            mnt: dir.join("fuse"),
            dir,
            image: image.to_path_buf(),
            child: None,
            env: Vec::new(),
        };
        m.mount(&[]);
        m
    }

    /// Mounts the image again (after [`RwMount::unmount`]) with `args`.
    pub fn mount(&mut self, args: &[&str]) {
        // The io_uring pass of scripts/test.sh asks for it on every mount,
        // read-only ones too (`auto` leaves those on /dev/fuse).
        let uring = std::env::var_os("XFSKIT_TEST_IO_URING").is_some();
        let child = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .arg("mount")
            .args(if uring {
                &["--io-uring", "on"][..]
            } else {
                &[]
            })
            .args(args)
            .arg(&self.image)
            .arg(&self.mnt)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t0 = Instant::now();
        while !is_mounted(&self.mnt) {
            assert!(t0.elapsed() < Duration::from_secs(20), "no FUSE mount");
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("xfskit mount exited early: {st}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if uring {
            // The io_uring pass of scripts/test.sh: the mount must really
            // take its requests through io_uring, or the pass proves nothing.
            let pid = self.child.as_ref().unwrap().id();
            let t0 = Instant::now();
            while !serves_io_uring(pid) {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "XFSKIT_TEST_IO_URING is set but the mount serves no io_uring queue"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// A path inside the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts and waits for the server to exit successfully.
    pub fn unmount(&mut self) {
        super::must_umount(&self.mnt);
        let mut child = self.child.take().unwrap();
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "server did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(st.success(), "xfskit mount exited with {st}");
    }

    /// Kills the server with SIGKILL (nothing written back, the journal
    /// left as it is) and detaches the dead mount.
    pub fn kill(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        assert!(!is_mounted(&self.mnt), "still mounted after SIGKILL");
    }

    /// Stops the server with SIGTERM (it unmounts and writes the image
    /// back) and waits for it to exit successfully.
    pub fn terminate(&mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "server did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(st.success(), "xfskit mount exited with {st} after SIGTERM");
        assert!(!is_mounted(&self.mnt), "still mounted after SIGTERM");
    }

    /// Walks the mount, unmounts, checks the image with `xfs_repair -n`
    /// and checks that the kernel sees the same tree.
    pub fn finish(mut self) {
        let want = walk_host(&self.mnt);
        self.unmount();
        let (code, out) = repair_check(&self.image);
        assert_eq!(code, 0, "xfs_repair -n found problems:\n{out}");
        assert_kernel_sees(
            &self.image,
            &self.dir.join("kernel"),
            &want,
            true,
            "after the read-write mount",
        );
    }
}

impl Drop for RwMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let k = self.dir.join("kernel");
        if is_mounted(&k) {
            let _ = Command::new("umount").arg(&k).status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A path as a C string.
pub fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of a libc call's result (0 when it succeeded).
pub fn errno(r: i64) -> i32 {
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// The errno of an `io::Result` (0 on success).
pub fn err_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Runs `args` as user and group `id` with no supplementary groups;
/// returns (success, stderr).
pub fn as_user(id: u32, args: &[&str]) -> (bool, String) {
    let ids = id.to_string();
    let out = Command::new("setpriv")
        .args(["--reuid", &ids, "--regid", &ids, "--clear-groups", "--"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

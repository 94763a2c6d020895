//! Golden fixture images (testdata/fixtures/*.img.zst): listing, unpacking,
//! read-only loop mounts and scratch directories.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Suffix of a compressed fixture image.
const IMAGE_SUFFIX: &str = ".img.zst";

/// The repository's testdata directory.
pub fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The directory that holds the compressed fixture images.
pub fn fixtures_dir() -> PathBuf {
    testdata_dir().join("fixtures")
}

/// Names of every fixture (file name without `.img.zst`), sorted.
pub fn fixture_names() -> Vec<String> {
    let dir = fixtures_dir();
    let rd = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter_map(|n| n.strip_suffix(IMAGE_SUFFIX).map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Decompress fixture `name` into `dest_dir/name.img` and return that path.
pub fn unpack_fixture(name: &str, dest_dir: &Path) -> PathBuf {
    let src = fixtures_dir().join(format!("{name}{IMAGE_SUFFIX}"));
    let dest = dest_dir.join(format!("{name}.img"));
    let status = Command::new("zstd")
        .args(["-d", "-q", "-f", "--long=27"])
        .arg(&src)
        .arg("-o")
        .arg(&dest)
        .status()
        .unwrap_or_else(|e| panic!("cannot run zstd: {e}"));
    assert!(
        status.success(),
        "zstd -d {} failed: {status}",
        src.display()
    );
    dest
}

/// Per-kind counts recorded by the fixture script (`NAME.counts`, lines of
/// "kind count"), counted by the populating program while the image was mounted.
pub fn expected_counts(name: &str) -> BTreeMap<String, usize> {
    let path = fixtures_dir().join(format!("{name}.counts"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.trim().parse().expect("count is a number")))
        .collect()
}

/// Whether the test process runs as root.
pub use xfskit_testkit::is_root;

/// True when running as root; otherwise prints why `test` cannot run.
pub fn require_root(test: &str) -> bool {
    if is_root() {
        true
    } else {
        crate::common::skip(test, "needs root for loop mount");
        false
    }
}

/// A scratch directory under the system temp dir, removed on drop (after
/// what is still mounted in it is unmounted).
pub use xfskit_testkit::Scratch as TempDir;

/// A fresh XFS filesystem of `size` bytes (mkfs.xfs defaults) in
/// `dir/scratch.img`, loop-mounted read-write at `dir/scratch`: a scratch
/// destination for extracts; unmounted on drop.
pub fn scratch_xfs(dir: &Path, size: u64) -> xfskit_testkit::Mounted {
    let img = dir.join("scratch.img");
    fs::File::create(&img)
        .and_then(|f| f.set_len(size))
        .expect("scratch image");
    let ok = Command::new("mkfs.xfs")
        .args(["-q", "-f"])
        .arg(&img)
        .status()
        .expect("mkfs.xfs")
        .success();
    assert!(ok, "mkfs.xfs failed");
    let img = img.to_str().expect("utf-8 path");
    xfskit_testkit::Mounted::new(&["-o", "loop", img], &dir.join("scratch"))
}

/// An image loop-mounted read-only by the kernel (`mount -o loop,ro`);
/// unmounted when dropped.
#[derive(Debug)]
pub struct LoopMount {
    mountpoint: PathBuf,
}

impl LoopMount {
    /// Mount `image` read-only at `mountpoint` (which must exist).
    pub fn new(image: &Path, mountpoint: &Path) -> io::Result<LoopMount> {
        let out = Command::new("mount")
            .args(["-t", "xfs", "-o", "loop,ro,nouuid"])
            .arg(image)
            .arg(mountpoint)
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "mount {}: {}",
                image.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(LoopMount {
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    /// Mount `image` read-write at `mountpoint` (created); panics when the
    /// mount fails.
    pub fn rw(image: &Path, mountpoint: &Path) -> LoopMount {
        std::fs::create_dir_all(mountpoint).expect("mkdir mountpoint");
        let out = Command::new("mount")
            .args(["-t", "xfs", "-o", "loop"])
            .arg(image)
            .arg(mountpoint)
            .output()
            .unwrap_or_else(|e| panic!("mount: {e}"));
        assert!(
            out.status.success(),
            "mount {}: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        LoopMount {
            mountpoint: mountpoint.to_path_buf(),
        }
    }

    /// Where the filesystem is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let ok = super::umount_retrying(&self.mountpoint);
        if !ok {
            eprintln!("warning: umount {} failed", self.mountpoint.display());
        }
    }
}

/// Run `xfs_repair -n` on an image; returns (exit code, combined output).
pub fn repair_check(image: &Path) -> (i32, String) {
    let out = xfs_tool("xfs_repair", image)
        .arg("-n")
        .arg(image)
        .output()
        .unwrap_or_else(|e| panic!("cannot run xfs_repair: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Mounts `image` read-only at `mountpoint` (created), walks it as the
/// kernel shows it (without the root entry unless `root`), unmounts, and
/// panics with the differences when the walk is not `want`.
pub fn assert_kernel_sees(
    image: &Path,
    mountpoint: &Path,
    want: &[crate::common::Entry],
    root: bool,
    what: &str,
) {
    fs::create_dir_all(mountpoint)
        .unwrap_or_else(|e| panic!("mkdir {}: {e}", mountpoint.display()));
    let m = LoopMount::new(image, mountpoint).unwrap_or_else(|e| panic!("{what}: {e}"));
    let got: Vec<crate::common::Entry> = crate::common::walk_host(m.path())
        .into_iter()
        .filter(|e| root || !e.path.is_empty())
        .collect();
    drop(m);
    let d = crate::common::diff_walks(want, &got);
    assert!(
        d.is_empty(),
        "{what}: the kernel sees a different tree:\n{}",
        d.join("\n")
    );
}

/// The xfsprogs 6.15 build beside the project (`../shared/xfsprogs-6.15`),
/// when it is there.
pub fn xfsprogs_615() -> Option<std::path::PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-6.15");
    d.join("libexec/xfs_repair").exists().then_some(d)
}

/// xfsprogs tool `name` for `image`: xfsprogs 6.15's when the image has
/// features Debian's 6.1 does not know (parent pointers, exchange-range)
/// and 6.15 is beside the project, else the installed one.
pub fn xfs_tool(name: &str, image: &Path) -> Command {
    match xfsprogs_615().filter(|_| needs_615(image)) {
        Some(d) => {
            let mut c = Command::new(d.join("libexec").join(name));
            c.env("LD_LIBRARY_PATH", d.join("lib"));
            c
        }
        None => Command::new(name),
    }
}

/// True when `image` is a bare XFS whose superblock has incompatible
/// features xfsprogs 6.1 does not know (parent pointers, exchange-range).
pub fn needs_615(image: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let mut sb = [0u8; 224];
    let Ok(f) = fs::File::open(image) else {
        return false;
    };
    if f.read_exact_at(&mut sb, 0).is_err() || &sb[..4] != b"XFSB" {
        return false;
    }
    let incompat = u32::from_be_bytes(sb[216..220].try_into().unwrap());
    incompat & !0x3f != 0
}

/// mkfs.xfs for a fresh test image with the test's options `opts`:
/// mkfs.xfs 6.15 with the xfsprogs 6.18 defaults when
/// `XFSKIT_TEST_MKFS=6.18` (and the tools are beside the project), else
/// Debian's mkfs.xfs. The 6.18 defaults are given as options (mkfs.xfs
/// refuses one named both in a config file and on the command line), each
/// unless the test sets it.
pub fn test_mkfs(opts: &[&str]) -> Command {
    let want = std::env::var("XFSKIT_TEST_MKFS").unwrap_or_default();
    match xfsprogs_615().filter(|_| want == "6.18") {
        Some(d) => {
            let mut c = Command::new(d.join("libexec/mkfs.xfs"));
            c.env("LD_LIBRARY_PATH", d.join("lib"));
            // fstests' variables: mkfs.xfs 6.15 then makes filesystems
            // under 300 MiB, as the tests' small images are.
            c.env("TEST_DIR", "/tmp")
                .env("TEST_DEV", "/dev/null")
                .env("QA_CHECK_FS", "1");
            let given = opts.join(" ");
            for (group, sub) in [
                ("-m", "rmapbt=1"),
                ("-m", "reflink=1"),
                ("-i", "nrext64=1"),
                ("-i", "exchange=1"),
                ("-n", "parent=1"),
            ] {
                let name = sub.split('=').next().unwrap();
                if !given.contains(&format!("{name}=")) {
                    c.arg(group).arg(sub);
                }
            }
            c.args(opts);
            c
        }
        None => {
            assert!(
                want.is_empty() || want == "6.1",
                "XFSKIT_TEST_MKFS={want}: xfsprogs 6.15 is not beside the project"
            );
            let mut c = Command::new("mkfs.xfs");
            c.args(opts);
            c
        }
    }
}

/// `xfs_repair` as a shell command: xfsprogs 6.15's when it is beside the
/// project (it knows every feature xfskit writes, parent pointers
/// included), else the installed one.
pub fn repair_sh() -> String {
    match xfsprogs_615() {
        Some(d) => format!(
            "LD_LIBRARY_PATH='{}' '{}'",
            d.join("lib").display(),
            d.join("libexec/xfs_repair").display()
        ),
        None => "xfs_repair".to_string(),
    }
}

/// Runs the `xfskit` binary under test with `args`.
/// Runs xfskit with `args`, which must succeed; returns its stdout.
pub fn xfskit_ok(args: &[&str]) -> String {
    let o = xfskit_output(args);
    assert!(o.status.success(), "xfskit {args:?}: {}", output_text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn xfskit_output(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .output()
        .expect("run xfskit")
}

/// Exit status, stdout and stderr of `o`, for assertion messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// xfsprogs 7.2's commands beside the project (`../shared/xfsprogs-7.2/bin`,
/// each of which runs its binary with the libraries it needs), when there.
#[allow(dead_code)]
pub fn xfsprogs_72_bin() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/xfsprogs-7.2/bin");
    d.join("mkfs.xfs").exists().then_some(d)
}

/// [`xfsprogs_72_bin`], or None after recording that `test` is skipped
/// without it.
pub fn xfsprogs_72_or_skip(test: &str) -> Option<PathBuf> {
    let bin = xfsprogs_72_bin();
    if bin.is_none() {
        super::skip(test, "xfsprogs 7.2 not found at ../shared/xfsprogs-7.2");
    }
    bin
}

/// Runs xfsprogs 7.2's `name` from `bin` (see [`xfsprogs_72_bin`]) with
/// `args`; panics with its output on failure, else returns it (stdout,
/// then stderr).
#[allow(dead_code)]
pub fn tool_72(bin: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(bin.join(name)).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
    text
}

/// Loop devices attached for a test, detached when dropped.
pub struct Loops(pub Vec<String>);

impl Loops {
    /// Attaches `p` to a free loop device; returns the device's path.
    pub fn attach(p: &Path) -> String {
        let o = Command::new("losetup")
            .arg("-f")
            .arg("--show")
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success(), "losetup: {}", output_text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = Command::new("losetup").args(["-d", d]).status();
        }
    }
}

/// Mounts `img` with its external log `log` at `mnt` (both on loop
/// devices, as the kernel needs them), runs `f`, unmounts.
pub fn with_logdev_mount(img: &Path, log: &Path, mnt: &Path, f: impl FnOnce(&Path)) {
    let loops = Loops(vec![Loops::attach(img), Loops::attach(log)]);
    let st = Command::new("mount")
        .args(["-t", "xfs", "-o", &format!("logdev={}", loops.0[1])])
        .arg(&loops.0[0])
        .arg(mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount -o logdev");
    f(mnt);
    super::must_umount(mnt);
}

//! Images read in place over HTTP and S3: `xfskit info/ls -R/cat/stat/
//! bulkstat/check/parts` on a URL print what they print for the local file
//! (a raw image, and a qcow2 disk with a GPT partition inside), and reading
//! one small file of a multi-GiB sparse image fetches a few MiB at most,
//! counted both by the server and by xfskit (XFSKIT_REMOTE_STATS). HTTP is
//! served by a Range-capable server in this test; S3 by moto's server mode
//! when Python has moto (`XFSKIT_TEST_PYTHON`, else python3), otherwise
//! that test records its skip. Root is not needed: images come from
//! `xfskit build`. As root with /dev/fuse: `xfskit mount` of a URL (HTTP and
//! S3) shows the tree a mount of the local file shows, and a qcow2 overlay
//! (qemu-img) whose backing file is named relative to it is read in place
//! with its base, both served.

mod common;

use common::rangeserver::RangeServer;
use common::{diff_walks, output_text_of as text, skip, umount_retrying, walk_host, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn xfskit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xfskit"));
    c.args(args).env("XFSKIT_REMOTE_STATS", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run xfskit")
}

/// Makes the tree the images hold: small files, a directory big enough
/// for a node-form directory, a 3 MB file, a symlink.
fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("many")).unwrap();
    std::fs::write(root.join("etc/hostname"), b"remote-test\n").unwrap();
    for i in 0..600 {
        std::fs::write(
            root.join(format!("many/file-with-a-longer-name-{i}")),
            format!("entry {i}\n"),
        )
        .unwrap();
    }
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 7 + i / 1000) as u8)
        .collect();
    std::fs::write(root.join("big"), big).unwrap();
    std::os::unix::fs::symlink("etc/hostname", root.join("link")).unwrap();
}

/// Builds `name` in `dir` from `src` with extra build options.
fn build(dir: &Path, src: &Path, name: &str, opts: &[&str]) {
    let img = dir.join(name);
    let mut args = vec!["build"];
    args.extend_from_slice(opts);
    let (s, i) = (src.to_str().unwrap(), img.to_str().unwrap());
    args.extend_from_slice(&[s, i]);
    let o = xfskit(&args, &[]);
    assert!(o.status.success(), "build {name}: {}", text(&o));
}

/// The commands compared between the local file and the URL.
const COMMANDS: &[&[&str]] = &[
    &["info"],
    &["ls", "-R"],
    &["cat", "/big"],
    &["cat", "/etc/hostname"],
    &["stat", "/many"],
    &["bulkstat"],
    &["check"],
    &["parts"],
];

/// Runs every command on `local` and on `url`; their exit status and
/// standard output must be equal (the image's name aside).
fn same_as_local(local: &Path, url: &str, env: &[(&str, &str)]) {
    let l = local.to_str().unwrap();
    for cmd in COMMANDS {
        let mut la: Vec<&str> = vec![cmd[0], l];
        la.extend_from_slice(&cmd[1..]);
        let mut ra: Vec<&str> = vec![cmd[0], url];
        ra.extend_from_slice(&cmd[1..]);
        let lo = xfskit(&la, env);
        let ro = xfskit(&ra, env);
        assert!(lo.status.success(), "{cmd:?} on {l}: {}", text(&lo));
        assert_eq!(
            lo.status.code(),
            ro.status.code(),
            "{cmd:?} on {url}: {}",
            text(&ro)
        );
        let ls = untimed(&String::from_utf8_lossy(&lo.stdout).replace(l, "IMAGE"));
        let rs = untimed(&String::from_utf8_lossy(&ro.stdout).replace(url, "IMAGE"));
        assert!(!ls.is_empty(), "{cmd:?} printed nothing");
        assert!(ls == rs, "{cmd:?}: {url} differs from {l}:\n{}", text(&ro));
        let stats = fetched(&ro);
        assert!(stats.0 > 0, "{cmd:?} on {url}: no stats: {}", text(&ro));
    }
}

/// `text` without the time check's summary line gives ("in 0.02s").
fn untimed(text: &str) -> String {
    text.lines()
        .map(|l| match (l.starts_with("checked "), l.rfind(" in ")) {
            (true, Some(i)) => {
                let rest = &l[i + 4..];
                let after = rest.find(':').map_or("", |j| &rest[j..]);
                format!("{}{after}\n", &l[..i])
            }
            _ => format!("{l}\n"),
        })
        .collect()
}

/// (requests, bytes) that xfskit reports it fetched.
fn fetched(o: &Output) -> (u64, u64) {
    let e = String::from_utf8_lossy(&o.stderr);
    let line = e
        .lines()
        .find_map(|l| l.strip_prefix("xfskit: remote: "))
        .unwrap_or_else(|| panic!("no remote stats in: {}", text(o)));
    let w: Vec<&str> = line.split_whitespace().collect();
    (w[0].parse().unwrap(), w[2].parse().unwrap())
}

/// A raw image and a qcow2 GPT disk, with a multi-GiB sparse image of each.
fn images(tmp: &TempDir) -> std::path::PathBuf {
    let src = tmp.path().join("src");
    tree(&src);
    let srv = tmp.path().join("srv");
    std::fs::create_dir_all(&srv).unwrap();
    build(&srv, &src, "fs.img", &[]);
    build(&srv, &src, "disk.qcow2", &["--gpt", "--format", "qcow2"]);
    build(&srv, &src, "large.img", &["--size", "6g"]);
    build(
        &srv,
        &src,
        "large.qcow2",
        &["--size", "6g", "--gpt", "--format", "qcow2"],
    );
    srv
}

#[test]
fn http_reads_equal_the_local_file() {
    let tmp = TempDir::new("remote-http");
    let srv = images(&tmp);
    let server = RangeServer::start(&srv);
    for name in ["fs.img", "disk.qcow2"] {
        same_as_local(&srv.join(name), &server.url(name), &[]);
    }
    // A missing object and a read-write open are clear errors.
    let o = xfskit(&["ls", &server.url("nothing.img"), "/"], &[]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing.img"),
        "{}",
        text(&o)
    );
    let o = xfskit(&["mkdir", &server.url("fs.img"), "/x"], &[]);
    assert!(!o.status.success(), "{}", text(&o));
}

#[test]
fn one_small_file_of_a_large_image_fetches_little() {
    let tmp = TempDir::new("remote-bound");
    let srv = images(&tmp);
    let server = RangeServer::start(&srv);
    for name in ["large.img", "large.qcow2"] {
        let size = std::fs::metadata(srv.join(name)).unwrap().len();
        let before = server.sent();
        let o = xfskit(&["cat", &server.url(name), "/etc/hostname"], &[]);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(o.stdout, b"remote-test\n");
        let after = server.sent();
        let (req, bytes) = (after.0 - before.0, after.1 - before.1);
        // What xfskit counted is what the server sent.
        assert_eq!(fetched(&o), (req, bytes), "{name}");
        eprintln!("{name} ({size} bytes): cat of one file: {req} requests, {bytes} bytes");
        let virt = if name.ends_with(".img") {
            size
        } else {
            6 << 30
        };
        assert!(virt >= 6 << 30, "{name} is {virt} bytes");
        assert!(bytes <= 4 << 20, "{name}: {bytes} bytes fetched");
        assert!(req <= 40, "{name}: {req} requests");
    }
}

/// A Python with moto and boto3, or None.
fn python_with_moto() -> Option<String> {
    let py = std::env::var("XFSKIT_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import moto, boto3, flask"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn s3_reads_equal_the_local_file() {
    let Some(py) = python_with_moto() else {
        skip(
            "s3_reads_equal_the_local_file",
            "no Python with moto[server] and boto3 (set XFSKIT_TEST_PYTHON)",
        );
        return;
    };
    let tmp = TempDir::new("remote-s3");
    let srv = images(&tmp);
    let (_moto, endpoint) = start_moto(&py);
    upload(&py, &endpoint, &srv, &["disk.qcow2", "large.qcow2"]);
    let env = s3_env(&endpoint);
    // qcow2 files only: moto keeps objects in memory, and a raw image is
    // hundreds of MB even when sparse (HTTP covers raw images above).
    same_as_local(
        &srv.join("disk.qcow2"),
        "s3://images/disks/disk.qcow2",
        &env,
    );
    let o = xfskit(
        &["cat", "s3://images/disks/large.qcow2", "/etc/hostname"],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(o.stdout, b"remote-test\n");
    let (req, bytes) = fetched(&o);
    assert!(
        bytes <= 4 << 20 && req <= 40,
        "{req} requests, {bytes} bytes"
    );
    let o = xfskit(&["ls", "s3://images/disks/missing.img", "/"], &env);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
}

/// moto's S3 server on a free port of 127.0.0.1, and its endpoint.
fn start_moto(py: &str) -> (Moto, String) {
    let port = free_port();
    let child = Command::new(py)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto");
    let moto = Moto(child);
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not start on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (moto, endpoint)
}

/// Uploads `names` from `dir` to s3://images/disks/ (the bucket made once).
fn upload(py: &str, endpoint: &str, dir: &Path, names: &[&str]) {
    let script = format!(
        r#"
import boto3, sys
s3 = boto3.client("s3", endpoint_url="{endpoint}", region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing")
if "images" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket="images")
for name in sys.argv[2:]:
    s3.upload_file(sys.argv[1] + "/" + name, "images", "disks/" + name)
"#
    );
    let mut args = vec!["-c", &script, dir.to_str().unwrap()];
    args.extend_from_slice(names);
    let o = Command::new(py).args(&args).output().unwrap();
    assert!(o.status.success(), "upload: {}", text(&o));
}

/// The environment that points xfskit at moto.
fn s3_env(endpoint: &str) -> [(&'static str, &str); 5] {
    [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
    ]
}

/// `xfskit mount --read-only IMAGE MNT` (a path or a URL) until dropped.
struct Mounted {
    child: Child,
    mnt: PathBuf,
}

fn is_mounted(dir: &Path) -> bool {
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(want.as_path()))
}

impl Mounted {
    fn new(image: &str, mnt: &Path, env: &[(&str, &str)], read_only: bool) -> Mounted {
        std::fs::create_dir_all(mnt).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_xfskit"));
        c.arg("mount");
        if read_only {
            c.arg("--read-only");
        }
        c.arg(image).arg(mnt).stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("run xfskit mount");
        let t0 = Instant::now();
        while !is_mounted(mnt) {
            if let Some(st) = child.try_wait().unwrap() {
                panic!("xfskit mount {image} exited early: {st}");
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("xfskit mount {image}: no mount after 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Mounted {
            child,
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !umount_retrying(&self.mnt) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Why the FUSE mounts of URLs cannot be tested here, or None.
fn mount_skip_reason() -> Option<String> {
    if !common::is_root() {
        return Some("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if Command::new("qemu-img").arg("--version").output().is_err() {
        return Some("qemu-img is not installed (qemu-utils)".into());
    }
    None
}

/// A qcow2 overlay made by qemu-img in `dir` over `base` (named as given:
/// relative to the overlay, or absolute), then changed by xfskit's edits
/// (copy-on-write into the overlay): a new file, a removed one.
fn overlay(dir: &Path, name: &str, base: &str, fmt: &str) -> PathBuf {
    let o = Command::new("qemu-img")
        .current_dir(dir)
        .args(["create", "-q", "-f", "qcow2", "-b", base, "-F", fmt, name])
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-img create: {}", text(&o));
    let img = dir.join(name);
    let new = dir.join("new.txt");
    std::fs::write(&new, b"only in the overlay\n").unwrap();
    let dest = format!("{}:/etc/new.txt", img.display());
    let o = xfskit(&["cp", new.to_str().unwrap(), &dest], &[]);
    assert!(o.status.success(), "cp into {name}: {}", text(&o));
    std::fs::remove_file(&new).unwrap();
    let o = xfskit(
        &[
            "rm",
            img.to_str().unwrap(),
            "/many/file-with-a-longer-name-7",
        ],
        &[],
    );
    assert!(o.status.success(), "rm in {name}: {}", text(&o));
    img
}

/// Mounts `local` and `url` read-only and compares what the kernel shows
/// of both (every path, type, mode, owner, size, times, link, xattr and
/// content digest).
fn mounts_equal(tmp: &Path, local: &Path, url: &str, env: &[(&str, &str)]) -> usize {
    let ml = tmp.join("mnt-local");
    let mr = tmp.join("mnt-url");
    let a = Mounted::new(local.to_str().unwrap(), &ml, &[], true);
    // A URL is mounted read-only even unasked.
    let b = Mounted::new(url, &mr, env, false);
    let (wl, wr) = (walk_host(&a.mnt), walk_host(&b.mnt));
    drop((a, b));
    let diffs = diff_walks(&wl, &wr);
    assert!(
        diffs.is_empty(),
        "{url} mounted differs from {}: {diffs:#?}",
        local.display()
    );
    wl.len()
}

#[test]
fn mounts_and_qcow2_overlays_of_urls() {
    if let Some(why) = mount_skip_reason() {
        skip("mounts_and_qcow2_overlays_of_urls", &why);
        return;
    }
    let tmp = TempDir::new("remote-mount");
    let src = tmp.path().join("src");
    tree(&src);
    let srv = tmp.path().join("srv");
    std::fs::create_dir_all(srv.join("vms")).unwrap();
    build(&srv, &src, "base.img", &[]);
    let base_before = std::fs::read(srv.join("base.img")).unwrap();
    // Overlays in a subdirectory: the backing name climbs out of it.
    let top = overlay(&srv.join("vms"), "top.qcow2", "../base.img", "raw");
    let abs = srv.join("base.img");
    overlay(&srv.join("vms"), "abs.qcow2", abs.to_str().unwrap(), "raw");
    assert!(
        std::fs::read(srv.join("base.img")).unwrap() == base_before,
        "the base changed"
    );
    let server = RangeServer::start(&srv);

    // Read in place: the overlay's commands print what the local file's do,
    // its base fetched from the server too.
    let url = server.url("vms/top.qcow2");
    same_as_local(&top, &url, &[]);
    let o = xfskit(&["cat", &url, "/etc/new.txt"], &[]);
    assert_eq!(o.stdout, b"only in the overlay\n", "{}", text(&o));
    let o = xfskit(&["cat", &url, "/etc/hostname"], &[]);
    assert_eq!(o.stdout, b"remote-test\n", "{}", text(&o));
    let o = xfskit(&["ls", &url, "/many"], &[]);
    let listing = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && listing.contains("file-with-a-longer-name-8"),
        "{}",
        text(&o)
    );
    assert!(
        !listing.contains("file-with-a-longer-name-7\n"),
        "{listing}"
    );
    // An absolute local path as the backing name is refused, named.
    let o = xfskit(&["ls", &server.url("vms/abs.qcow2"), "/"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("absolute path"),
        "{}",
        text(&o)
    );

    // FUSE mounts of URLs: the raw image and the overlay.
    let before = server.sent();
    let n = mounts_equal(
        tmp.path(),
        &srv.join("base.img"),
        &server.url("base.img"),
        &[],
    );
    assert!(n > 600, "{n} entries");
    mounts_equal(tmp.path(), &top, &url, &[]);
    assert!(server.sent().1 > before.1, "the mounts fetched nothing");

    // The same from S3, with a qcow2 base.
    let Some(py) = python_with_moto() else {
        skip(
            "mounts_and_qcow2_overlays_of_urls (S3 part)",
            "no Python with moto[server] and boto3 (set XFSKIT_TEST_PYTHON)",
        );
        return;
    };
    build(&srv, &src, "base.qcow2", &["--format", "qcow2"]);
    let top2 = overlay(&srv, "top2.qcow2", "base.qcow2", "qcow2");
    let (_moto, endpoint) = start_moto(&py);
    upload(&py, &endpoint, &srv, &["base.qcow2", "top2.qcow2"]);
    let env = s3_env(&endpoint);
    let s3url = "s3://images/disks/top2.qcow2";
    let o = xfskit(&["cat", s3url, "/etc/new.txt"], &env);
    assert_eq!(o.stdout, b"only in the overlay\n", "{}", text(&o));
    mounts_equal(tmp.path(), &top2, s3url, &env);
}

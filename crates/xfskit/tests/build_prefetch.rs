//! The read-ahead pipeline of directory sources: the target sees the same
//! calls in the same order whatever the number of reader threads and the
//! window; errors name the source path and stop the build; large files are
//! streamed with bounded memory; the bare pipeline keeps order and never
//! stalls on steps larger than its byte window.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use xfskit::build::feed::{FeedOptions, FeedStats};
use xfskit::build::idmap::IdMap;
use xfskit::build::prefetch::{self, Window};
use xfskit::build::size::Layout;
use xfskit::build::{source_dir, BuildTarget, Meta, NodeKind};
use xfskit::geometry::Ino;
use xfskit::inode::Timestamp;

/// Tests here measure the process's peak memory: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn opts(ids: &IdMap) -> FeedOptions<'_> {
    FeedOptions {
        ids,
        default_time: Timestamp { sec: 0, nsec: 0 },
        one_file_system: false,
        progress: None,
        jobs: 1,
    }
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "command failed: {cmd}");
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A target that logs every call (data as length and hash) and can run a
/// hook when a given name is created.
#[derive(Default)]
struct Log {
    calls: Vec<String>,
    names: BTreeMap<u64, String>,
    next: u64,
    max_write: usize,
    data_bytes: u64,
    hook: Option<Hook>,
}

/// A name and what to run when the target is handed that entry.
type Hook = (Vec<u8>, Box<dyn FnMut()>);

impl Log {
    fn new() -> Log {
        Log {
            next: 1000,
            ..Default::default()
        }
    }
}

impl BuildTarget for Log {
    fn root(&self) -> Ino {
        Ino(1)
    }

    fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: &NodeKind,
        meta: &Meta,
    ) -> xfskit::Result<Ino> {
        if let Some((n, f)) = &mut self.hook {
            if n.as_slice() == name {
                f();
            }
        }
        self.next += 1;
        let n = String::from_utf8_lossy(name).into_owned();
        self.calls
            .push(format!("create {parent:?} {n} {kind:?} {meta:?}"));
        self.names.insert(self.next, n);
        Ok(Ino(self.next))
    }

    fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> xfskit::Result<()> {
        self.max_write = self.max_write.max(data.len());
        self.data_bytes += data.len() as u64;
        self.calls.push(format!(
            "write {ino:?} {offset} {} {:x}",
            data.len(),
            fnv(data)
        ));
        Ok(())
    }

    fn link(&mut self, parent: Ino, name: &[u8], target: Ino) -> xfskit::Result<()> {
        self.calls.push(format!(
            "link {parent:?} {} {target:?}",
            String::from_utf8_lossy(name)
        ));
        Ok(())
    }

    fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> xfskit::Result<()> {
        self.calls.push(format!(
            "xattr {ino:?} {} {:x}",
            String::from_utf8_lossy(name),
            fnv(value)
        ));
        Ok(())
    }

    fn set_meta(&mut self, ino: Ino, meta: &Meta) -> xfskit::Result<()> {
        self.calls.push(format!("meta {ino:?} {meta:?}"));
        Ok(())
    }
}

/// A tree of nested directories with empty, small, chunk-crossing and
/// sparse files, symlinks, hard links and xattrs.
fn make_tree(root: &Path) {
    let r = root.display();
    sh(&format!(
        "set -e; cd {r}
         for d in 0 1 2 3 4 5 6 7; do mkdir -p d$d/sub/deeper
           for i in $(seq 1 60); do head -c $(( (i * 997 + d * 13) % 9000 )) /dev/urandom > d$d/f$i; done
           for i in 1 2 3; do head -c 100 /dev/urandom > d$d/sub/deeper/g$i; done
           : > d$d/sub/empty; ln -s ../f1 d$d/sub/link; ln d$d/f2 d$d/sub/hard
         done
         head -c 3500000 /dev/urandom > d3/big
         truncate -s 5M d5/sparse; printf data | dd of=d5/sparse bs=1 seek=2097152 conv=notrunc 2>/dev/null
         setfattr -n user.a -v 1 d1/f7; setfattr -n user.big -v $(head -c 3000 /dev/zero | tr '\\0' x) d2/f9
         setfattr -n user.dir -v yes d4/sub"
    ));
}

fn trace(root: &Path, win: Window) -> (Vec<String>, FeedStats) {
    let ids = IdMap::default();
    let mut log = Log::new();
    let s = source_dir::feed_with(root, &mut log, &opts(&ids), win).expect("feed");
    (log.calls, s)
}

#[test]
fn order_is_the_same_for_any_window() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir(&root).unwrap();
    make_tree(&root);
    let one = Window {
        readers: 1,
        max_bytes: 1 << 20,
        max_entries: 1,
    };
    // Reading symlinks sets their access time once (relatime): warm up.
    trace(&root, one);
    let (base, stats) = trace(&root, one);
    assert_eq!(stats.files, 8 * 64 + 2);
    assert_eq!(stats.hardlinks, 8);
    assert!(base
        .iter()
        .any(|c| c.starts_with("xattr") && c.contains("user.big")));
    for win in [
        Window {
            readers: 16,
            max_bytes: 1 << 20,
            max_entries: 7,
        },
        Window {
            readers: 16,
            max_bytes: 64 << 20,
            max_entries: 4096,
        },
        Window {
            readers: 3,
            max_bytes: 2 << 20,
            max_entries: 100,
        },
    ] {
        for _ in 0..3 {
            let (t, s) = trace(&root, win);
            assert_eq!(s, stats, "{win:?}");
            if let Some(i) = (0..t.len().min(base.len())).find(|&i| t[i] != base[i]) {
                panic!("{win:?}: call {i} differs:\n{}\n{}", base[i], t[i]);
            }
            assert_eq!(t.len(), base.len(), "{win:?}");
        }
    }
    // The scan counts the same whatever the window.
    let l = Layout {
        block_size: 4096,
        dir_block_size: 4096,
        inode_size: 512,
    };
    let c1 = source_dir::scan_with(&root, &l, false, one).unwrap();
    let c2 = source_dir::scan_with(&root, &l, false, Window::default()).unwrap();
    assert_eq!(c1, c2);
    assert_eq!(c1.files, stats.files);
    // The sparse file wrote its data segment only.
    let sparse: Vec<&String> = base
        .iter()
        .filter(|c| c.contains(" 2097152 4096 "))
        .collect();
    assert_eq!(sparse.len(), 1, "{sparse:?}");
}

#[test]
fn file_vanishing_mid_build_is_an_error_naming_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir_all(root.join("d")).unwrap();
    for i in 0..40 {
        std::fs::write(root.join(format!("d/f{i:02}")), b"x").unwrap();
    }
    let victim = root.join("d/f30");
    let ids = IdMap::default();
    let mut log = Log::new();
    let v = victim.clone();
    log.hook = Some((
        b"f01".to_vec(),
        Box::new(move || std::fs::remove_file(&v).unwrap()),
    ));
    // One entry in flight: f30 is listed but not yet opened when f01 is
    // created.
    let win = Window {
        readers: 4,
        max_bytes: 1 << 20,
        max_entries: 1,
    };
    let err = source_dir::feed_with(&root, &mut log, &opts(&ids), win)
        .expect_err("a vanished file must fail the build")
        .to_string();
    assert!(err.contains("d/f30"), "{err}");
    // Nothing after the failing entry was created.
    assert!(log.names.values().all(|n| n.as_str() < "f30" || n == "d"));
}

#[test]
fn failing_source_leaves_no_image() {
    use xfskit::build::{build, BuildOptions, Source};
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir_all(root.join("d")).unwrap();
    for i in 0..10 {
        std::fs::write(root.join(format!("d/f{i}")), b"x").unwrap();
    }
    let image = dir.path().join("img");
    let src = Source::open(&root).unwrap();
    for existing in [false, true] {
        if existing {
            std::fs::write(&image, b"old").unwrap();
        }
        std::fs::write(root.join("d/f9"), b"x").unwrap();
        let opts = BuildOptions {
            mkfs: xfskit::mkfs::MkfsOptions {
                force: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let victim = root.join("d/f9");
        // One entry in flight: f9 is listed but not yet opened when f1 is
        // created, and vanishes then.
        std::env::set_var("XFSKIT_BUILD_WINDOW_ENTRIES", "1");
        let r = build(&src, &image, &opts, |_, _, populate| {
            let mut log = Log::new();
            let v = victim.clone();
            log.hook = Some((
                b"f1".to_vec(),
                Box::new(move || std::fs::remove_file(&v).unwrap()),
            ));
            populate(&mut log).map(|_| ())
        });
        std::env::remove_var("XFSKIT_BUILD_WINDOW_ENTRIES");
        let err = r.expect_err("build over a vanished file").to_string();
        assert!(err.contains("d/f9"), "{err}");
        if existing {
            assert_eq!(std::fs::metadata(&image).unwrap().len(), 0);
        } else {
            assert!(!image.exists(), "a failed build left an image");
        }
    }
}

#[test]
fn unreadable_file_is_named() {
    let _g = serial();
    if rustix::process::geteuid().is_root() {
        // Root reads files whatever their mode: run this test again in a
        // child process as user and group nobody, and require it to pass.
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["unreadable_file_is_named", "--exact", "--test-threads=1"])
            .uid(65534)
            .gid(65534)
            .env("TMPDIR", "/tmp")
            .output()
            .expect("run the test as nobody");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "as nobody: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir(&root).unwrap();
    let f = root.join("secret");
    std::fs::write(&f, b"x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
    let ids = IdMap::default();
    let err = source_dir::feed(&root, &mut Log::new(), &opts(&ids))
        .expect_err("unreadable file")
        .to_string();
    assert!(err.contains("secret"), "{err}");
}

fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn huge_file_is_streamed_with_bounded_memory() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir(&root).unwrap();
    let size: u64 = 160 << 20;
    sh(&format!(
        "head -c {size} /dev/urandom > {}/huge; head -c 5000 /dev/urandom > {}/small",
        root.display(),
        root.display()
    ));
    let before = peak_rss_kib();
    let ids = IdMap::default();
    let mut log = Log::new();
    let win = Window {
        readers: 8,
        max_bytes: 8 << 20,
        max_entries: 64,
    };
    let s = source_dir::feed_with(&root, &mut log, &opts(&ids), win).unwrap();
    assert_eq!(s.bytes, size + 5000);
    assert_eq!(log.data_bytes, size + 5000);
    assert!(log.max_write <= 1 << 20, "write of {} bytes", log.max_write);
    let writes: Vec<&String> = log
        .calls
        .iter()
        .filter(|c| c.starts_with("write"))
        .collect();
    // In order and contiguous.
    let mut off = 0u64;
    for w in &writes[..writes.len() - 1] {
        let f: Vec<&str> = w.split(' ').collect();
        assert_eq!(f[2].parse::<u64>().unwrap(), off);
        off += f[3].parse::<u64>().unwrap();
    }
    assert_eq!(off, size);
    let grown = peak_rss_kib().saturating_sub(before);
    assert!(
        grown < 48 << 10,
        "peak memory grew by {grown} KiB for a {size}-byte file"
    );
}

#[test]
fn pipeline_keeps_order_and_passes_large_steps() {
    let _g = serial();
    let n = 20_000u64;
    let win = Window {
        readers: 12,
        max_bytes: 1000,
        max_entries: 33,
    };
    let got = prefetch::run(
        win,
        |p| {
            for i in 0..n {
                if i % 10 == 0 {
                    p.ready(i)?;
                } else {
                    p.job(i)?;
                }
            }
            Ok(())
        },
        |i, b| {
            // Some steps want more than the whole window.
            b.reserve(if i % 7 == 0 { 5000 } else { 100 })?;
            if i % 97 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            if i == n - 3 {
                return Err(xfskit::Error::Invalid(format!("step {i}")));
            }
            Ok(i)
        },
        |c| {
            let mut v = Vec::new();
            loop {
                match c.next() {
                    Ok(Some(i)) => v.push(i),
                    Ok(None) => return Ok((v, None)),
                    Err(e) => return Ok((v, Some(e.to_string()))),
                }
            }
        },
    )
    .unwrap();
    assert_eq!(got.0, (0..n - 3).collect::<Vec<_>>());
    assert!(got.1.unwrap().contains(&format!("step {}", n - 3)));
}

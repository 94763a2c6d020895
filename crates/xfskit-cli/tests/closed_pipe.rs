//! Every command whose reader closed standard output (`xfskit log IMAGE |
//! head -1`) ends as it would with its output read: the same exit code, no
//! panic, and its work done. The pipe's read end is closed before the
//! command starts, so its first write already fails: no timing decides it.

mod common;

use common::{unpack_fixture, TempDir};
use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The write end of a pipe whose read end is already closed.
fn closed_pipe() -> OwnedFd {
    let mut fds = [0i32; 2];
    // SAFETY: a fresh pair of descriptors; each is owned once below.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fds[0] and fds[1] are open and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    w
}

/// Runs xfskit with `args`, standard output to `out`.
fn run(args: &[&str], out: Stdio, err: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(args)
        .stdout(out)
        .stderr(err)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `args` run twice, standard output read (to /dev/null) and closed; the
/// exit codes must match and the closed run must not panic or complain.
fn same_with_closed_stdout(args: &[&str]) {
    let read = run(args, Stdio::null(), Stdio::piped());
    let closed = run(args, Stdio::from(closed_pipe()), Stdio::piped());
    let err = String::from_utf8_lossy(&closed.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "xfskit {args:?} with its output closed:\n{err}"
    );
    assert_eq!(
        closed.status.code(),
        read.status.code(),
        "xfskit {args:?}: exit code with its output closed, then read; stderr:\n{err}"
    );
}

#[test]
fn reading_commands_end_quietly_on_a_closed_pipe() {
    let tmp = TempDir::new("xfskit-pipe");
    let img = unpack_fixture("a_default", tmp.path());
    let i = s(&img);
    for args in [
        &["info", i][..],
        &["info", "--json", i],
        &["parts", i],
        &["ls", "-l", i, "/"],
        &["stat", i, "/files"],
        &["cat", i, "/files/small"],
        &["bulkstat", i],
        &["timeline", i],
        &["bulkstat", "--bodyfile", "--md5", i],
        &["log", i],
        &["log", "--json", "--transactions", i],
        &["check", i],
        &["check", "--json", i],
        &["getfattr", "-d", i, "/xattrs/many"],
        &["--help"],
        &["log", "--help"],
        &["completions", "bash"],
    ] {
        same_with_closed_stdout(args);
    }
}

/// Commands that write: their work is done whole although nobody reads
/// their report.
#[test]
fn writing_commands_finish_their_work_on_a_closed_pipe() {
    let tmp = TempDir::new("xfskit-pipe-w");
    // mkfs prints its geometry, then writes: the filesystem must be whole.
    let img = tmp.path().join("m.img");
    fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    let o = run(
        &["mkfs", "-f", s(&img)],
        Stdio::from(closed_pipe()),
        Stdio::piped(),
    );
    assert!(
        o.status.success(),
        "mkfs with its output closed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (code, text) = common::repair_check(&img);
    assert_eq!(
        code, 0,
        "xfs_repair -n after mkfs with its output closed:\n{text}"
    );
    // An edit, then recover (which reports what it did) on the clean log.
    let o = run(
        &["mkdir", s(&img), "/d"],
        Stdio::from(closed_pipe()),
        Stdio::piped(),
    );
    assert!(o.status.success());
    same_with_closed_stdout(&["recover", s(&img)]);
    let o = run(&["ls", s(&img), "/"], Stdio::piped(), Stdio::piped());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "d");
    // Both standard output and standard error closed (`2>&1 | head`).
    let o = run(
        &["check", s(&img)],
        Stdio::from(closed_pipe()),
        Stdio::from(closed_pipe()),
    );
    assert_eq!(o.status.code(), Some(0), "check with both outputs closed");
}

/// Standard output that cannot be written for another reason than a
/// closed pipe (a full disk) is an I/O error: exit 4, said on stderr.
#[test]
fn a_full_standard_output_is_an_io_error() {
    let tmp = TempDir::new("xfskit-pipe-full");
    let img = unpack_fixture("a_default", tmp.path());
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = run(&["info", s(&img)], Stdio::from(full), Stdio::piped());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "stderr:\n{err}");
    assert!(err.contains("writing standard output"), "{err}");
}

/// The report that panicked: `log --transactions` of a log the kernel left
/// dirty (a shutdown after thousands of creates), then `recover` of it,
/// which must replay the whole log although its report goes nowhere.
#[test]
fn dirty_log_reports_end_quietly_on_a_closed_pipe() {
    if !common::require_root("dirty_log_reports_end_quietly_on_a_closed_pipe") {
        return;
    }
    let tmp = TempDir::new("xfskit-pipe-log");
    let img = tmp.path().join("d.img");
    fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    let st = Command::new("mkfs.xfs")
        .args(["-q", "-f", s(&img)])
        .status()
        .unwrap();
    assert!(st.success());
    let mnt = tmp.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-o", "loop", s(&img), s(&mnt)])
        .status()
        .unwrap();
    assert!(st.success(), "mount");
    let script = format!(
        "cd {m} && for i in $(seq 1 2000); do : > f$i; [ $((i % 50)) = 0 ] && xfs_io -c fsync f$i; done; \
         xfs_io -x -c 'shutdown -f' {m}",
        m = s(&mnt)
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    common::must_umount(&mnt);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        &["log", "--transactions", s(&img)],
        Stdio::piped(),
        Stdio::piped(),
    );
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.lines().filter(|l| l.starts_with("trans ")).count() >= 10
            && report.lines().next().unwrap().ends_with("dirty"),
        "the kernel left no long dirty log:\n{report}"
    );
    same_with_closed_stdout(&["log", "--transactions", s(&img)]);
    same_with_closed_stdout(&["log", "--json", "--transactions", s(&img)]);
    let o = run(
        &["recover", s(&img)],
        Stdio::from(closed_pipe()),
        Stdio::piped(),
    );
    assert!(
        o.status.success(),
        "recover: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&["log", s(&img)], Stdio::piped(), Stdio::piped());
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap()
            .ends_with("clean"),
        "recover with its output closed left the log dirty"
    );
    let (code, text) = common::repair_check(&img);
    assert_eq!(code, 0, "xfs_repair -n after recover:\n{text}");
}

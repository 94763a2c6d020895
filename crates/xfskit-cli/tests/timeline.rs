//! `xfskit timeline` (and `bulkstat --bodyfile`): on images the kernel
//! filled (mkfs.xfs 7.2, parent pointers; Debian's mkfs.xfs 6.1, none),
//! the body file has one line per path the kernel's walk finds and each
//! field is what the kernel's stat(1) showed on the mount (inode, type and
//! mode, owner, group, size, the four times to the nanosecond, the MD5 of
//! the content with --md5); The Sleuth Kit's mactime reads it and lists
//! every path; the image is byte-identical afterwards (sha256), and a
//! qcow2 copy gives the same lines.

mod common;

use common::fixtures::{output_text, xfskit_output as xfskit, LoopMount};
use common::{is_root, skip, TempDir};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn run_ok(c: &mut Command, what: &str) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(o.status.success(), "{what}: {}", output_text(&o));
    o
}

/// Files of every kind: nested directories, a name with "|" and spaces,
/// one with "%" (which mactime would decode), hard links, symlinks (one
/// to a name with "|"), devices, a fifo, a socket, set-id and sticky
/// bits, owners, times set with touch -d (with nanoseconds, before the
/// epoch, past 2038).
fn fill(m: &Path) {
    use std::fs;
    let p = |r: &str| m.join(r);
    for d in ["a/b/c/d", "sp ace/in ner", "sticky"] {
        fs::create_dir_all(p(d)).expect("mkdir");
    }
    fs::write(p("a/b/c/d/deep.txt"), b"deep content\n").expect("write");
    fs::write(p("a|pipe name with spaces"), b"piped").expect("write");
    fs::write(p("sp ace/%41 percent"), vec![7u8; 70_000]).expect("write");
    fs::write(p("empty"), b"").expect("write");
    fs::hard_link(p("a/b/c/d/deep.txt"), p("a/hard link")).expect("link");
    fs::hard_link(p("a/b/c/d/deep.txt"), p("sp ace/in ner/second|link")).expect("link");
    std::os::unix::fs::symlink("a/b/c/d/deep.txt", p("sym")).expect("symlink");
    std::os::unix::fs::symlink("../a|pipe name with spaces", p("a/b/sym|pipe")).expect("symlink");
    std::os::unix::fs::symlink("x".repeat(600), p("long-target")).expect("symlink");
    let sh = |c: &str| {
        run_ok(Command::new("sh").arg("-c").arg(c).current_dir(m), c);
    };
    sh("mknod cdev c 1 3 && mknod 'b dev' b 7 200 && mkfifo fifo");
    std::os::unix::net::UnixListener::bind(p("sock")).expect("bind a socket");
    sh("chmod 4755 a/b/c/d/deep.txt && chmod 2750 'sp ace' && chmod 1777 sticky");
    sh("chown 1000:100 'a|pipe name with spaces' && chown -h 4242:4343 sym");
    sh("touch -d '2001-02-03 04:05:06.123456789 UTC' 'a|pipe name with spaces'");
    sh("touch -a -d '1969-12-31 23:59:58.5 UTC' empty");
    sh("touch -m -d '2300-06-07 08:09:10.987654321 UTC' 'sp ace/%41 percent'");
    sh("touch -h -d '2010-10-10 10:10:10 UTC' sym");
    sh("touch -d '1999-01-01 00:00:00.000000001 UTC' a/b");
}

/// What the kernel's stat showed of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    ino: u64,
    /// `%A`: ls -l's mode string.
    ls: String,
    uid: u32,
    gid: u32,
    size: u64,
    /// atime, mtime, ctime, btime in nanoseconds.
    times: [i128; 4],
    link: Option<Vec<u8>>,
    md5: Option<String>,
}

/// A decimal number of seconds ("-1.500000000", "981173106") in ns.
fn nanos(t: &str) -> i128 {
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    assert!(frac.len() <= 9, "{t}");
    let v = whole.parse::<i128>().unwrap_or_else(|e| panic!("{t}: {e}")) * 1_000_000_000
        + format!("{frac:0<9}").parse::<i128>().expect("fraction");
    if neg {
        -v
    } else {
        v
    }
}

/// Path below the mount ("/" for its root) -> what stat(1) said, taken
/// while mounted; also written to `save`.
fn kernel_stats(m: &Path, save: &Path) -> BTreeMap<Vec<u8>, Stat> {
    let pre = s(m).len();
    let rel = |p: &[u8]| -> Vec<u8> {
        let r = p[pre..].to_vec();
        if r.is_empty() {
            b"/".to_vec()
        } else {
            r
        }
    };
    let fields = "%i|%u|%g|%s|%.9X|%.9Y|%.9Z|%.9W|%A|%n\\0";
    let o = run_ok(
        Command::new("find")
            .arg(m)
            .args(["-exec", "stat", "--printf", fields, "{}", "+"]),
        "find -exec stat",
    );
    std::fs::write(save, &o.stdout).expect("save the kernel's stat");
    let links = run_ok(
        Command::new("find")
            .arg(m)
            .args(["-type", "l", "-printf", "%p\\0%l\\0"]),
        "find -printf %l",
    );
    let sums = run_ok(
        Command::new("find")
            .arg(m)
            .args(["-type", "f", "-exec", "md5sum", "-z", "{}", "+"]),
        "md5sum",
    );
    let mut out = BTreeMap::new();
    for rec in o.stdout.split(|&c| c == 0).filter(|r| !r.is_empty()) {
        let f: Vec<&[u8]> = rec.splitn(10, |&c| c == b'|').collect();
        let t = |i: usize| std::str::from_utf8(f[i]).expect("ascii field");
        let st = Stat {
            ino: t(0).parse().expect("ino"),
            uid: t(1).parse().expect("uid"),
            gid: t(2).parse().expect("gid"),
            size: t(3).parse().expect("size"),
            times: [nanos(t(4)), nanos(t(5)), nanos(t(6)), nanos(t(7))],
            ls: t(8).to_owned(),
            link: None,
            md5: None,
        };
        out.insert(rel(f[9]), st);
    }
    let mut l = links.stdout.split(|&c| c == 0);
    while let (Some(p), Some(target)) = (l.next(), l.next()) {
        if p.is_empty() {
            break;
        }
        out.get_mut(&rel(p)).expect("a link stat saw").link = Some(target.to_vec());
    }
    for line in sums.stdout.split(|&c| c == 0).filter(|r| !r.is_empty()) {
        let (sum, path) = (&line[..32], &line[34..]);
        out.get_mut(&rel(path)).expect("a file stat saw").md5 =
            Some(String::from_utf8(sum.to_vec()).expect("hex"));
    }
    out
}

/// What mactime's `%XX` decoding makes of a field.
fn unpercent(f: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < f.len() {
        if f[i] == b'%' && i + 3 <= f.len() && f[i + 1..i + 3].iter().all(u8::is_ascii_hexdigit) {
            let h = std::str::from_utf8(&f[i + 1..i + 3]).expect("hex");
            out.push(u8::from_str_radix(h, 16).expect("hex"));
            i += 3;
        } else {
            out.push(f[i]);
            i += 1;
        }
    }
    out
}

/// The body line TSK's conventions give a path the kernel showed: the
/// directory entry's type letter, "/", the ls string with TSK's letter.
fn want_mode(ls: &str) -> String {
    let (name, meta) = match ls.as_bytes()[0] {
        b'-' => ('r', 'r'),
        b's' => ('s', 'h'),
        c => (c as char, c as char),
    };
    format!("{name}/{meta}{}", &ls[1..])
}

/// The lines of a body file by name (decoded), each split in its fields.
fn parse_body(text: &[u8]) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for line in text.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        let f: Vec<Vec<u8>> = line.split(|&c| c == b'|').map(unpercent).collect();
        assert_eq!(
            f.len(),
            11,
            "eleven fields: {}",
            String::from_utf8_lossy(line)
        );
        let name = f[1].clone();
        assert!(
            out.insert(name, f).is_none(),
            "a name twice: {}",
            String::from_utf8_lossy(line)
        );
    }
    out
}

/// The name a body line gives a path (a symlink's with its target).
fn body_name(path: &[u8], st: &Stat) -> Vec<u8> {
    let mut n = path.to_vec();
    if let Some(t) = &st.link {
        n.extend_from_slice(b" -> ");
        n.extend_from_slice(t);
    }
    n
}

fn sha256(p: &Path) -> String {
    let o = run_ok(Command::new("sha256sum").arg(p), "sha256sum");
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .expect("a hash")
        .to_owned()
}

/// How the kernel leaves the filled image.
#[derive(Clone, Copy)]
enum Log {
    /// Unmounted cleanly.
    Clean,
    /// Shut down with the log flushed: the changes are only in the log.
    Dirty,
}

/// Makes an image with `mkfs`, fills it on a kernel mount, then checks
/// every line of `xfskit timeline` against what the kernel showed.
fn timeline_matches_the_kernel(test: &str, mkfs: &Path, log: Log) {
    if !is_root() {
        skip(test, "needs root for a read-write loop mount");
        return;
    }
    if let Some(t) = common::missing_tool(&["mactime", "sha256sum", "md5sum", "stat", "find"]) {
        panic!("`{t}` is missing: scripts/test.sh installs sleuthkit (mactime) and coreutils");
    }
    let tmp = TempDir::new("xfskit-timeline");
    let img = tmp.path().join("fs.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(320 << 20))
        .expect("create image");
    run_ok(Command::new(mkfs).args(["-q", "-f"]).arg(&img), "mkfs.xfs");
    let mnt = tmp.path().join("mnt");
    let saved = tmp.path().join("kernel-stat.txt");
    let want = {
        let m = LoopMount::rw(&img, &mnt);
        fill(m.path());
        // Nothing the snapshot reads may move an atime.
        run_ok(
            Command::new("mount")
                .args(["-o", "remount,noatime"])
                .arg(m.path()),
            "remount noatime",
        );
        match log {
            Log::Clean => Some(kernel_stats(m.path(), &saved)),
            Log::Dirty => {
                // The log flushed, nothing else written back: what the
                // files are now is only in the log.
                run_ok(
                    Command::new("xfs_io")
                        .args(["-x", "-c", "shutdown -f"])
                        .arg(m.path()),
                    "xfs_io shutdown -f",
                );
                None
            }
        }
    };
    let want = want.unwrap_or_else(|| {
        // The kernel replays a copy of the dirty image at mount: what it
        // shows then is what xfskit must show of the image as it is.
        let o = xfskit(&["log", "--json", s(&img)]);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("\"state\": \"dirty\""),
            "the log is dirty: {}",
            output_text(&o)
        );
        let copy = tmp.path().join("replayed.img");
        std::fs::copy(&img, &copy).expect("copy the dirty image");
        let m = LoopMount::rw(&copy, &mnt);
        run_ok(
            Command::new("mount")
                .args(["-o", "remount,noatime"])
                .arg(m.path()),
            "remount noatime",
        );
        kernel_stats(m.path(), &saved)
    });
    assert!(want.len() >= 20, "{want:?}");
    let before = sha256(&img);

    let o = xfskit(&["timeline", s(&img)]);
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        output_text(&o)
    );
    let body_path = tmp.path().join("body.txt");
    std::fs::write(&body_path, &o.stdout).expect("save the body file");
    let got = parse_body(&o.stdout);
    let names: BTreeSet<Vec<u8>> = want.iter().map(|(p, st)| body_name(p, st)).collect();
    let got_names: BTreeSet<Vec<u8>> = got.keys().cloned().collect();
    let show = |set: &BTreeSet<Vec<u8>>| {
        set.iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        show(&got_names),
        show(&names),
        "the names of the body file and the kernel's walk"
    );
    let mut diffs = Vec::new();
    for (path, st) in &want {
        let name = body_name(path, st);
        let f = &got[&name];
        let text = |i: usize| String::from_utf8_lossy(&f[i]).into_owned();
        let want_fields = [
            ("MD5", "0".to_string(), text(0)),
            ("inode", st.ino.to_string(), text(2)),
            ("mode", want_mode(&st.ls), text(3)),
            ("UID", st.uid.to_string(), text(4)),
            ("GID", st.gid.to_string(), text(5)),
            ("size", st.size.to_string(), text(6)),
        ];
        for (what, w, g) in want_fields {
            if w != g {
                diffs.push(format!("{}: {what}: kernel {w}, body {g}", text(1)));
            }
        }
        for (k, what) in ["atime", "mtime", "ctime", "crtime"].iter().enumerate() {
            let g = nanos(&text(7 + k));
            if g != st.times[k] {
                diffs.push(format!(
                    "{}: {what}: kernel {} ns, body {} ({g} ns)",
                    text(1),
                    st.times[k],
                    text(7 + k)
                ));
            }
        }
    }
    assert!(diffs.is_empty(), "timeline vs stat:\n{}", diffs.join("\n"));
    // The odd values made it through: nanoseconds, before 1970, past 2038.
    let body = String::from_utf8_lossy(&o.stdout);
    for t in [
        "|981173106.123456789|",
        "|-1.500000000|",
        "|10427386150.987654321|",
    ] {
        assert!(body.contains(t), "{t} in\n{body}");
    }

    // --md5: each regular file's md5sum; others 0.
    let o = xfskit(&["timeline", "--md5", s(&img)]);
    assert!(o.status.success(), "{}", output_text(&o));
    for (path, st) in &want {
        let f = &parse_body(&o.stdout)[&body_name(path, st)];
        let w = st.md5.clone().unwrap_or_else(|| "0".into());
        assert_eq!(
            String::from_utf8_lossy(&f[0]),
            w,
            "{}",
            String::from_utf8_lossy(path)
        );
    }

    // --seconds: whole seconds, rounded down.
    let o = xfskit(&["timeline", "--seconds", s(&img)]);
    assert!(o.status.success(), "{}", output_text(&o));
    for f in parse_body(&o.stdout).values() {
        for t in &f[7..] {
            assert!(!t.contains(&b'.'), "{}", String::from_utf8_lossy(t));
        }
    }
    assert!(String::from_utf8_lossy(&o.stdout).contains("|-2|"));

    // bulkstat --bodyfile prints the same.
    let b = xfskit(&["bulkstat", "--bodyfile", s(&img)]);
    assert!(b.status.success(), "{}", output_text(&b));
    assert_eq!(b.stdout, std::fs::read(&body_path).expect("body"));
    let bad = xfskit(&["bulkstat", "--md5", s(&img)]);
    assert_eq!(bad.status.code(), Some(2), "{}", output_text(&bad));

    // mactime takes it: every path is in its timeline.
    let o = run_ok(
        Command::new("mactime").args(["-b", s(&body_path), "-d", "-y", "-z", "UTC"]),
        "mactime",
    );
    let listed: BTreeSet<Vec<u8>> = o
        .stdout
        .split(|&c| c == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let name = l.splitn(8, |&c| c == b',').nth(7).expect("8 columns");
            let name = name
                .strip_prefix(b"\"")
                .and_then(|n| n.strip_suffix(b"\""))
                .expect("quoted");
            String::from_utf8_lossy(name)
                .replace("\"\"", "\"")
                .into_bytes()
        })
        .collect();
    assert_eq!(show(&listed), show(&names), "the names mactime lists");

    // A qcow2 copy of the image: the same lines.
    if common::missing_tool(&["qemu-img"]).is_none() {
        let q = tmp.path().join("fs.qcow2");
        run_ok(
            Command::new("qemu-img")
                .args(["convert", "-O", "qcow2"])
                .arg(&img)
                .arg(&q),
            "qemu-img convert",
        );
        let o = xfskit(&["timeline", s(&q)]);
        assert!(o.status.success(), "{}", output_text(&o));
        assert_eq!(o.stdout, std::fs::read(&body_path).expect("body"));
    }
    assert_eq!(sha256(&img), before, "the image changed");
}

#[test]
fn timeline_of_an_image_with_parent_pointers_matches_stat_and_mactime() {
    const TEST: &str = "timeline_of_an_image_with_parent_pointers_matches_stat_and_mactime";
    let Some(bin) = common::fixtures::xfsprogs_72_or_skip(TEST) else {
        return;
    };
    timeline_matches_the_kernel(TEST, &bin.join("mkfs.xfs"), Log::Clean);
}

#[test]
fn timeline_without_parent_pointers_matches_stat_and_mactime() {
    const TEST: &str = "timeline_without_parent_pointers_matches_stat_and_mactime";
    let mkfs = Path::new("/usr/sbin/mkfs.xfs");
    if !mkfs.exists() {
        skip(TEST, "Debian's mkfs.xfs (xfsprogs 6.1) is missing");
        return;
    }
    timeline_matches_the_kernel(TEST, mkfs, Log::Clean);
}

/// A log left dirty (the kernel shut down after the log was flushed, no
/// file data or inodes written back): the body file of the image as it is
/// matches what the kernel shows after replaying a copy at mount, and the
/// image is left as it was (the replay is xfskit's, in memory).
#[test]
fn timeline_of_a_dirty_log_matches_the_kernels_replay() {
    const TEST: &str = "timeline_of_a_dirty_log_matches_the_kernels_replay";
    let Some(bin) = common::fixtures::xfsprogs_72_or_skip(TEST) else {
        return;
    };
    timeline_matches_the_kernel(TEST, &bin.join("mkfs.xfs"), Log::Dirty);
}

/// A v4 filesystem (Debian's mkfs.xfs 6.1 -m crc=0, filled from a
/// protofile, so no root is needed): its inodes keep no creation time, so
/// crtime is 0 on every line; the other fields are what the protofile and
/// xfs_db say, and mactime lists every name.
#[test]
fn timeline_of_a_v4_image_has_no_creation_times() {
    const TEST: &str = "timeline_of_a_v4_image_has_no_creation_times";
    let mkfs = Path::new("/usr/sbin/mkfs.xfs");
    if !mkfs.exists() {
        skip(TEST, "Debian's mkfs.xfs (xfsprogs 6.1) is missing");
        return;
    }
    let tmp = TempDir::new("xfskit-timeline-v4");
    let src = tmp.path().join("src");
    std::fs::write(&src, b"hello v4\n").expect("write");
    let proto = tmp.path().join("proto");
    let f = s(&src);
    std::fs::write(
        &proto,
        format!(
            "/dev/null\n0 0\nd--755 0 0\na|b ---644 1000 100 {f}\ndir d--750 7 8\n \
             inner ---600 0 0 {f}\n $\nlnk l--777 0 0 a|b\nfifo p--644 0 0\n\
             cdev c--644 0 0 1 3\n$\n"
        ),
    )
    .expect("write the protofile");
    let img = tmp.path().join("v4.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(320 << 20))
        .expect("create image");
    run_ok(
        Command::new(mkfs)
            .args(["-q", "-f", "-m", "crc=0", "-p"])
            .arg(&proto)
            .arg(&img),
        "mkfs.xfs -m crc=0 -p",
    );
    let before = sha256(&img);
    let o = xfskit(&["timeline", "--md5", s(&img)]);
    assert!(o.status.success(), "{}", output_text(&o));
    let got = parse_body(&o.stdout);
    let names: Vec<String> = got
        .keys()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "/",
            "/a|b",
            "/cdev",
            "/dir",
            "/dir/inner",
            "/fifo",
            "/lnk -> a|b"
        ],
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    for f in got.values() {
        assert_eq!(f[10], b"0", "crtime of {}", String::from_utf8_lossy(&f[1]));
    }
    let field =
        |name: &str, i: usize| String::from_utf8_lossy(&got[name.as_bytes()][i]).into_owned();
    let sum = run_ok(Command::new("md5sum").arg(&src), "md5sum");
    let sum = String::from_utf8_lossy(&sum.stdout)[..32].to_owned();
    for (name, fields) in [
        ("/a|b", [sum.as_str(), "r/rrw-r--r--", "1000", "100", "9"]),
        ("/dir/inner", [sum.as_str(), "r/rrw-------", "0", "0", "9"]),
        ("/dir", ["0", "d/drwxr-x---", "7", "8", "19"]),
        ("/lnk -> a|b", ["0", "l/lrwxrwxrwx", "0", "0", "3"]),
        ("/cdev", ["0", "c/crw-r--r--", "0", "0", "0"]),
        ("/fifo", ["0", "p/prw-r--r--", "0", "0", "0"]),
    ] {
        let got: Vec<String> = [0, 3, 4, 5, 6].iter().map(|&i| field(name, i)).collect();
        assert_eq!(got, fields, "{name}");
    }
    // The nanoseconds of the mtime xfs_db prints.
    let ino = field("/a|b", 2);
    let db = run_ok(
        Command::new("xfs_db")
            .args([
                "-r",
                "-c",
                &format!("inode {ino}"),
                "-c",
                "p core.mtime.nsec",
            ])
            .arg(&img),
        "xfs_db",
    );
    let nsec: i128 = String::from_utf8_lossy(&db.stdout)
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("core.mtime.nsec");
    assert_eq!(nanos(&field("/a|b", 8)).rem_euclid(1_000_000_000), nsec);
    if common::missing_tool(&["mactime"]).is_some() {
        skip(
            TEST,
            "mactime (Debian's sleuthkit) is missing: the body file was not run through it",
        );
    } else {
        let body = tmp.path().join("body.txt");
        std::fs::write(&body, &o.stdout).expect("save");
        let m = run_ok(
            Command::new("mactime").args(["-b", s(&body), "-d", "-y", "-z", "UTC"]),
            "mactime",
        );
        let text = String::from_utf8_lossy(&m.stdout);
        for n in &names {
            assert!(
                text.contains(&format!(",\"{n}\"")),
                "{n} in mactime's\n{text}"
            );
        }
    }
    assert_eq!(sha256(&img), before, "the image changed");
}

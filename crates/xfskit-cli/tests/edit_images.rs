//! The offline edit commands (cp in and out, mkdir, rm, mv, ln, chmod,
//! chown, touch, truncate, setfattr, getfattr) on a bare filesystem, a GPT
//! disk and a qcow2 GPT disk, all made with the real tools. The same edits
//! are made with coreutils and the attr tools to a host directory (the
//! model); after every edit xfs_repair -n (and qemu-img check) must find
//! the image clean, and at the end the kernel's mount of the filesystem
//! must show exactly the model's tree (times where they were set on
//! purpose). Also: a `cp -r` killed part way leaves an image the kernel
//! mounts and xfs_repair -n then finds clean. Needs root (loop devices,
//! mounts, device nodes, owners); otherwise SKIP.

mod common;

use common::disks::{sh, xfskit};
use common::editimg::{walk_times, Image, Kind};
use common::{diff_walks, is_root, missing_tool, skip, walk_host, TempDir};
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);
const TOOLS: [&str; 8] = [
    "sgdisk",
    "partx",
    "losetup",
    "qemu-img",
    "mkfs.xfs",
    "xfs_repair",
    "setfattr",
    "getfattr",
];

/// The source tree copied in: every kind of file, a hard link, a symlink,
/// xattrs, an owner, set-id bits, nanosecond times, a sparse file.
fn make_source(src: &Path) {
    sh(&format!(
        r#"mkdir -p '{0}' && cd '{0}'
mkdir -p sub many
for i in $(seq 1 300); do echo "entry $i" > many/f$i; done
printf 'first\n' > a.txt
setfattr -n user.colour -v blue a.txt
ln a.txt sub/hard
ln -s a.txt link
head -c 3000000 /dev/urandom > big
truncate -s 40M sparse
printf 'tail' | dd of=sparse bs=1 seek=20971520 conv=notrunc status=none
mkfifo fifo
mknod null c 1 3
printf 'owned\n' > suid; chown 1234:5678 suid; chmod 4755 suid
touch -d '2001-02-03 04:05:06.123456789' a.txt big suid many/f1
"#,
        src.display()
    ));
}

/// Runs one edit on the image (`xfskit ARGS`, the image path put in for
/// `IMG`) and the same edit on the model (a bash script run in it), then
/// checks the image.
fn edit(img: &Image, model: &Path, args: &[&str], script: &str) {
    let a: Vec<&str> = args
        .iter()
        .map(|&x| if x == "IMG" { img.s() } else { x })
        .collect();
    let joined: Vec<String> = a
        .iter()
        .map(|x| x.replacen("IMG:", &format!("{}:", img.s()), 1))
        .collect();
    let a: Vec<&str> = joined.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let r = xfskit(&a, LIMIT);
    assert_eq!(r.code, 0, "{:?}: xfskit {a:?}: {}", img.kind, r.stderr);
    let took = t0.elapsed();
    if !script.is_empty() {
        sh(&format!("cd '{}'\n{script}", model.display()));
    }
    img.assert_clean(&format!("xfskit {}", args.join(" ")));
    println!(
        "{:?}: xfskit {} ({took:.2?}): clean",
        img.kind,
        args.join(" ")
    );
}

/// Paths whose modification time was set on purpose (copied with -a and
/// not changed since, or set with touch -d).
fn time_kept(p: &str) -> bool {
    (p.starts_with("keep") && p != "keep/big") || p == "a/new"
}

fn edits_on(kind: Kind, src: &Path, tmp: &Path) {
    let dir = tmp.join(format!("{kind:?}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let img = Image::make(kind, &dir);
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("mkdir model");
    let s = src.to_str().expect("utf-8");
    let a_txt = format!("{s}/a.txt");
    let big = format!("{s}/big");
    edit(
        &img,
        &model,
        &["mkdir", "-p", "IMG", "/a/b/c"],
        "mkdir -p a/b/c",
    );
    edit(
        &img,
        &model,
        &["cp", "-a", s, "IMG:/keep"],
        &format!("cp -a '{s}' keep"),
    );
    edit(
        &img,
        &model,
        &["cp", "-r", s, "IMG:/plain"],
        &format!(
            "cp -a '{s}' plain && chown -hR 0:0 plain && chmod 755 plain/suid && \
             setfattr -x user.colour plain/a.txt"
        ),
    );
    edit(
        &img,
        &model,
        &["cp", &a_txt, &big, "IMG:/a/"],
        &format!("cp '{a_txt}' '{big}' a/"),
    );
    // SRC/. merges what the directory holds into an existing one.
    edit(
        &img,
        &model,
        &["cp", "-a", &format!("{s}/."), "IMG:/a/b/c"],
        &format!("cp -a '{s}/.' a/b/c"),
    );
    edit(&img, &model, &["rm", "IMG", "/a/*.txt"], "rm a/*.txt");
    edit(
        &img,
        &model,
        &["mv", "IMG", "/a/b", "/moved"],
        "mv a/b moved",
    );
    edit(
        &img,
        &model,
        &["ln", "-s", "IMG", "../keep/a.txt", "/a/sl"],
        "ln -s ../keep/a.txt a/sl",
    );
    edit(
        &img,
        &model,
        &["ln", "IMG", "/a/big", "/a/big2"],
        "ln a/big a/big2",
    );
    edit(
        &img,
        &model,
        &["chmod", "IMG", "600", "/a/big"],
        "chmod 600 a/big",
    );
    edit(
        &img,
        &model,
        &["chmod", "-R", "IMG", "go-rx", "/moved"],
        "chmod -R go-rx moved",
    );
    edit(
        &img,
        &model,
        &["chown", "IMG", "42:43", "/a/big"],
        "chown 42:43 a/big",
    );
    edit(
        &img,
        &model,
        &[
            "touch",
            "-d",
            "@1700000000.123456789",
            "IMG",
            "/a/new",
            "/keep/a.txt",
        ],
        "touch -d @1700000000.123456789 a/new keep/a.txt",
    );
    edit(
        &img,
        &model,
        &["truncate", "-s", "10000", "IMG", "/keep/big"],
        "truncate -s 10000 keep/big",
    );
    edit(
        &img,
        &model,
        &["truncate", "-s", "50M", "IMG", "/a/grown"],
        "truncate -s 50M a/grown",
    );
    edit(
        &img,
        &model,
        &[
            "setfattr",
            "-n",
            "user.new",
            "-v",
            "hello",
            "IMG",
            "/keep/sub/hard",
        ],
        "setfattr -n user.new -v hello keep/sub/hard",
    );
    edit(
        &img,
        &model,
        &["setfattr", "-x", "user.colour", "IMG", "/keep/a.txt"],
        "setfattr -x user.colour keep/a.txt",
    );
    edit(
        &img,
        &model,
        &[
            "setfattr",
            "-n",
            "trusted.t",
            "-v",
            "0x0102",
            "IMG",
            "/a/big",
        ],
        "setfattr -n trusted.t -v 0x0102 a/big",
    );
    edit(
        &img,
        &model,
        &["rm", "-r", "IMG", "/plain/many"],
        "rm -r plain/many",
    );
    let g = xfskit(&["getfattr", "-d", img.s(), "/keep/a.txt"], LIMIT);
    assert_eq!(g.code, 0, "getfattr: {}", g.stderr);
    assert_eq!(
        g.stdout, "# file: keep/a.txt\nuser.new=\"hello\"\n\n",
        "getfattr output"
    );
    // Errors name the path and give exit code 1; nothing changes.
    let r = xfskit(&["rm", img.s(), "/no/such", "/a/nothing*"], LIMIT);
    assert_eq!(r.code, 1, "rm of missing paths: {}", r.stderr);
    assert!(
        r.stderr.contains("/no/such") && r.stderr.contains("/a/nothing*"),
        "{}",
        r.stderr
    );

    let want = walk_times(&model, time_kept);
    let got = img.with_mount(&dir.join("mnt"), |m| walk_times(m, time_kept));
    let diffs = diff_walks(&got, &want);
    assert!(
        diffs.is_empty(),
        "{kind:?}: the kernel's tree differs from the model:\n{}",
        diffs.join("\n")
    );
    println!(
        "{kind:?}: kernel mount equals the model ({} entries)",
        want.len()
    );

    // Out again: the tree with every time, owner and xattr.
    let out = dir.join("out");
    std::fs::create_dir_all(&out).expect("mkdir out");
    let o = out.to_str().expect("utf-8");
    let r = xfskit(&["cp", "-a", &format!("{}:/keep", img.s()), o], LIMIT);
    assert_eq!(r.code, 0, "cp out: {}", r.stderr);
    // Every time is compared but big's, which truncate set to "now".
    let kept = |p: &str| p != "big";
    let diffs = diff_walks(
        &walk_times(&out.join("keep"), kept),
        &walk_times(&model.join("keep"), kept),
    );
    assert!(
        diffs.is_empty(),
        "{kind:?}: cp -a out differs:\n{}",
        diffs.join("\n")
    );
    let r = xfskit(&["cp", &format!("{}:/a/big*", img.s()), o], LIMIT);
    assert_eq!(r.code, 0, "cp out with a glob: {}", r.stderr);
    sh(&format!(
        "cmp '{o}/big' '{0}/a/big' && cmp '{o}/big2' '{0}/a/big'",
        model.display()
    ));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn edits_on_bare_gpt_and_qcow2_images_match_the_model() {
    let name = "edits_on_bare_gpt_and_qcow2_images_match_the_model";
    if !is_root() {
        return skip(
            name,
            "needs root for loop devices, mounts, device nodes and owners",
        );
    }
    if let Some(t) = missing_tool(&TOOLS) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let tmp = TempDir::new("xfskit-edit");
    let src = tmp.path().join("src");
    make_source(&src);
    for kind in [Kind::Bare, Kind::Gpt, Kind::Qcow2] {
        edits_on(kind, &src, tmp.path());
    }
}

#[test]
fn a_copy_killed_part_way_leaves_a_clean_image() {
    let name = "a_copy_killed_part_way_leaves_a_clean_image";
    if !is_root() {
        return skip(name, "needs root for loop devices and mounts");
    }
    if let Some(t) = missing_tool(&TOOLS) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    let tmp = TempDir::new("xfskit-edit-kill");
    let t = tmp.path();
    let src = t.join("src");
    sh(&format!(
        r#"mkdir -p '{0}' && cd '{0}'
for d in $(seq 1 30); do mkdir d$d; for i in $(seq 1 200); do echo "file $d $i" > d$d/f$i; done
  head -c 4000000 /dev/urandom > d$d/big; done
"#,
        src.display()
    ));
    let img = Image::make(Kind::Gpt, t);
    let s = src.to_str().expect("utf-8");
    if let Some(t) = missing_tool(&["strace"]) {
        return skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
    }
    // Kill copies at several points of their run, at the N-th write they
    // issue (strace sends SIGKILL as that pwritev is entered, whatever the
    // machine's speed): before anything reached the log, while the log is
    // written, while it is written back in place.
    let trace = t.join("trace");
    let bin = env!("CARGO_BIN_EXE_xfskit");
    sh(&format!(
        "strace -f -qq -o '{}' -e trace=pwritev {bin} cp -a '{s}' '{}:/full' >/dev/null",
        trace.display(),
        img.s()
    ));
    let writes = std::fs::read_to_string(&trace)
        .expect("strace output")
        .lines()
        .filter(|l| l.contains("pwritev("))
        .count() as u64;
    println!("a whole copy issues {writes} pwritev calls");
    assert!(writes >= 8, "only {writes} writes in a whole copy");
    for n in [1, writes / 4, writes / 2, writes * 3 / 4, writes - 1] {
        let st = std::process::Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=pwritev", "-e"])
            .arg(format!("inject=pwritev:signal=KILL:when={n}"))
            .args([bin, "cp", "-a", s, &format!("{}:/copy{n}", img.s())])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run strace");
        assert!(
            !st.success(),
            "the copy killed at write {n} of {writes} finished"
        );
        // xfs_repair -n refuses a filesystem whose log needs replay: say
        // whether the kill left one.
        let l = img.loop_dev();
        let dirty = sh(&format!(
            "xfs_repair -n {} >/dev/null 2>&1 || echo DIRTY",
            l.dev
        ));
        drop(l);
        // The kernel replays the log at mount and shows a tree it can walk.
        let entries = img.with_mount(&t.join("mnt"), |m| walk_host(m).len());
        println!(
            "killed at write {n}: log {}, then the kernel mounted {entries} entries",
            if dirty.contains("DIRTY") {
                "needed replay"
            } else {
                "clean"
            }
        );
        img.assert_clean(&format!(
            "a cp killed at write {n} of {writes}, then a kernel mount"
        ));
        // Room for the next copy: what this one left is removed.
        let r = xfskit(&["rm", "-rf", img.s(), &format!("/copy{n}")], LIMIT);
        assert_eq!(r.code, 0, "rm after the kill at write {n}: {}", r.stderr);
    }
    // xfskit's next edit recovers the log itself, too.
    let r = xfskit(&["mkdir", img.s(), "/after"], LIMIT);
    assert_eq!(r.code, 0, "an edit after the kill: {}", r.stderr);
    img.assert_clean("an edit after the kill");
}

/// Each opening for writing starts the inode generations at a random
/// point: a file that a later edit makes in an inode number an earlier
/// edit freed gets another generation than the old file had (each edit
/// started the same sequence, so it got the old one's, and a file handle
/// of the old file, as NFS keeps them, opened the new file).
#[test]
fn a_reused_inode_number_gets_a_new_generation_in_each_edit() {
    let tmp = TempDir::new("xfskit-edit-gen");
    let img = Image::make(Kind::Bare, tmp.path());
    let field = |out: &str, name: &str| -> u64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
            .parse()
            .unwrap()
    };
    let mut seen = Vec::new();
    for _ in 0..4 {
        let dest = format!("{}:/f", img.s());
        assert_eq!(xfskit(&["cp", "/etc/hostname", &dest], LIMIT).code, 0);
        let st = xfskit(&["stat", img.s(), "/f"], LIMIT);
        assert_eq!(st.code, 0, "stat: {}", st.stderr);
        seen.push((field(&st.stdout, "ino"), field(&st.stdout, "gen")));
        assert_eq!(xfskit(&["rm", img.s(), "/f"], LIMIT).code, 0);
    }
    // The point of the test: the same inode number each time.
    assert!(
        seen.iter().all(|s| s.0 == seen[0].0),
        "the inode number was not reused: {seen:?}"
    );
    let mut gens: Vec<u64> = seen.iter().map(|s| s.1).collect();
    gens.sort_unstable();
    gens.dedup();
    assert_eq!(gens.len(), seen.len(), "a generation came back: {seen:?}");
    img.assert_clean("four edits that reuse one inode");
}

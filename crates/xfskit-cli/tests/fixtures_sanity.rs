//! Sanity checks of the golden fixture images and of the host tree walker.
//!
//! For every fixture: unpack it, require a clean `xfs_repair -n`, loop-mount
//! it read-only and check that the kernel shows the tree the fixture README
//! promises (kind counts, directory sizes, xattrs, links, devices, modes,
//! timestamps).

mod common;

use common::{
    count_kinds, diff_walks, expected_counts, fixture_names, repair_check, require_root,
    unpack_fixture, walk_host, Entry, Kind, LoopMount, TempDir,
};
use std::fs;

/// The fixtures testdata/fixtures/README.md describes.
const FIXTURES: [&str; 6] = [
    "a_default",
    "b_1k_plain",
    "c_64k",
    "d_sect4k_ino2k",
    "e_nrext64",
    "f_nofinobt_ino1k",
];

/// Fixtures made with the "full" content set (which adds dirs/btree).
const FULL: [&str; 2] = ["a_default", "b_1k_plain"];

#[test]
fn fixture_set_is_complete() {
    let names = fixture_names();
    assert_eq!(names, FIXTURES.map(String::from).to_vec(), "fixture images present");
}

#[test]
fn every_fixture_repairs_clean_and_mounts() {
    if !require_root("every_fixture_repairs_clean_and_mounts") {
        return;
    }
    let mut failures = Vec::new();
    for name in fixture_names() {
        let problems = check_fixture(&name);
        if problems.is_empty() {
            println!("{name}: ok");
        }
        failures.extend(problems.into_iter().map(|p| format!("{name}: {p}")));
    }
    assert!(failures.is_empty(), "fixture problems:\n{}", failures.join("\n"));
}

fn check_fixture(name: &str) -> Vec<String> {
    let tmp = TempDir::new(&format!("xfskit-fixture-{name}"));
    let image = unpack_fixture(name, tmp.path());
    let (code, text) = repair_check(&image);
    if code != 0 {
        return vec![format!("xfs_repair -n exited {code}:\n{text}")];
    }
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir mountpoint");
    let mount = match LoopMount::new(&image, &mnt) {
        Ok(m) => m,
        Err(e) => return vec![format!("mount failed: {e}")],
    };
    let walk = walk_host(mount.path());
    let again = walk_host(mount.path());
    let mut problems = diff_walks(&walk, &again);
    check_counts(name, &walk, &mut problems);
    check_content(name, &walk, &mut problems);
    problems
}

fn check_counts(name: &str, walk: &[Entry], problems: &mut Vec<String>) {
    let counts = count_kinds(walk);
    let expected = expected_counts(name);
    for kind in Kind::ALL {
        let want = expected.get(kind.name()).copied().unwrap_or(usize::MAX);
        if counts[&kind] != want {
            problems.push(format!("{} count {} != recorded {want}", kind.name(), counts[&kind]));
        }
    }
    // What the README promises for every fixture, whatever the .counts say.
    let minimum = [
        (Kind::File, 5500),
        (Kind::Dir, 18),
        (Kind::Symlink, 4),
        (Kind::CharDev, 2),
        (Kind::BlockDev, 1),
        (Kind::Fifo, 1),
        (Kind::Socket, 1),
    ];
    for (kind, least) in minimum {
        if counts[&kind] < least {
            problems.push(format!("only {} {:?} entries, want >= {least}", counts[&kind], kind));
        }
    }
}

fn find<'a>(walk: &'a [Entry], path: &str) -> Option<&'a Entry> {
    walk.binary_search_by(|e| e.path.as_str().cmp(path)).ok().map(|i| &walk[i])
}

fn children(walk: &[Entry], dir: &str) -> usize {
    let prefix = format!("{dir}/");
    walk.iter()
        .filter(|e| e.path.strip_prefix(&prefix).is_some_and(|rest| !rest.contains('/')))
        .count()
}

fn check_content(name: &str, walk: &[Entry], problems: &mut Vec<String>) {
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    let mut dirs = vec![
        ("dirs/shortform", 3),
        ("dirs/block", 50),
        ("dirs/leaf", 500),
        ("dirs/node_small", 1200),
        ("dirs/node", if name == "c_64k" { 12000 } else { 5000 }),
    ];
    if FULL.contains(&name) {
        dirs.push(("dirs/btree", 3000));
    }
    for (dir, n) in dirs {
        let got = children(walk, dir);
        check(got == n, format!("{dir} has {got} entries, want {n}"));
        let nlink = find(walk, dir).map(|e| e.nlink);
        check(nlink == Some(2), format!("{dir} nlink {nlink:?}, want 2"));
    }

    let get = |p: &str| find(walk, p).cloned();
    match (get("links/h1/hard"), get("links/h2/hard_b"), get("links/h3/hard_c")) {
        (Some(a), Some(b), Some(c)) => {
            let first = walk.iter().position(|e| e.path == "links/h1/hard");
            check(a.nlink == 3, format!("hard link nlink {}", a.nlink));
            check(
                a.link_group == first && b.link_group == first && c.link_group == first,
                format!("link groups {:?} {:?} {:?}", a.link_group, b.link_group, c.link_group),
            );
            check(a.content_digest == c.content_digest, "hard link contents differ".into());
        }
        other => check(false, format!("hard link group incomplete: {other:?}")),
    }
    let single = walk.iter().filter(|e| e.link_group.is_some()).count();
    check(single == 3, format!("{single} entries in link groups, want 3"));

    let xattr_len = |p: &str, n: &str| get(p).and_then(|e| e.xattrs.get(n.as_bytes()).map(Vec::len));
    check(xattr_len("xattrs/shortform", "security.c") == Some(5), "security.c".into());
    check(xattr_len("xattrs/shortform", "trusted.b") == Some(3), "trusted.b".into());
    check(get("xattrs/leaf").map(|e| e.xattrs.len()) == Some(30), "30 leaf xattrs".into());
    check(get("xattrs/node").map(|e| e.xattrs.len()) == Some(4500), "4500 node xattrs".into());
    check(xattr_len("xattrs/remote", "user.r4k") == Some(4113), "user.r4k value".into());
    check(xattr_len("xattrs/remote", "trusted.r64k") == Some(65536), "trusted.r64k".into());
    check(xattr_len("xattrs/remote", "user.empty") == Some(0), "user.empty".into());
    check(xattr_len("xattrs/dir_with_attrs", "user.on_dir") == Some(3), "dir xattr".into());
    check(xattr_len("xattrs/link_with_attrs", "trusted.on_link") == Some(3), "link xattr".into());

    for (p, len) in [
        ("links/short_symlink", 5),
        ("links/long_symlink", 999),
        ("links/max_symlink", 1023),
    ] {
        let e = get(p);
        let target = e.as_ref().and_then(|e| e.symlink_target.as_ref()).map(Vec::len);
        check(target == Some(len), format!("{p} target length {target:?}, want {len}"));
        check(e.map(|e| e.size) == Some(len as u64), format!("{p} size"));
    }

    let rdev = |p: &str| get(p).map(|e| (e.kind, e.rdev));
    check(rdev("special/null_chr") == Some((Kind::CharDev, (1, 3))), "null_chr".into());
    check(rdev("special/big_chr") == Some((Kind::CharDev, (300, 70000))), "big_chr".into());
    check(rdev("special/loop_blk") == Some((Kind::BlockDev, (7, 0))), "loop_blk".into());

    let owner = |p: &str| get(p).map(|e| (e.mode, e.uid, e.gid));
    check(owner("modes/suid") == Some((0o4755, 0, 0)), "modes/suid".into());
    check(owner("modes/sgid") == Some((0o2755, 1000, 1000)), "modes/sgid".into());
    check(owner("modes/none") == Some((0, 65534, 65534)), "modes/none".into());
    check(owner("modes/all") == Some((0o777, 4_000_000_000, 4_000_000_000)), "modes/all".into());
    check(owner("modes/sticky_dir") == Some((0o1777, 1000, 1000)), "sticky_dir".into());

    let mtime = |p: &str| get(p).map(|e| (e.mtime_sec, e.mtime_nsec));
    check(mtime("times/pre_1970") == Some((-315_619_200, 123_456_789)), "pre_1970".into());
    check(mtime("times/epoch") == Some((0, 0)), "epoch".into());
    check(mtime("times/after_2038") == Some((4_115_318_400, 987_654_321)), "after_2038".into());
    check(mtime("files/empty") == Some((1_577_836_800, 0)), "fixed mtime".into());

    let long_name = format!("names/{}", "a".repeat(255));
    check(get(&long_name).is_some(), "255-byte name missing".into());
    check(get("names/ünïcødé-名前-🙂").is_some(), "UTF-8 name missing".into());
    check(get("names/with space").is_some(), "name with space missing".into());

    let size = |p: &str| get(p).map(|e| e.size);
    check(size("files/empty") == Some(0), "files/empty size".into());
    check(size("files/sparse") == Some(100 << 20), "files/sparse size".into());
    check(size("files/falloc_only") == Some(2 << 20), "files/falloc_only size".into());
    check(size("files/falloc_partial") == Some(1 << 20), "files/falloc_partial size".into());
    // An all-zero 2 MiB file: its digest must differ from the empty file's.
    let digest = |p: &str| get(p).and_then(|e| e.content_digest);
    check(digest("files/falloc_only") != digest("files/empty"), "falloc digest".into());
}

/// The walker and differ work on any tree, so this runs without root.
#[test]
fn host_walk_sees_changes() {
    let tmp = TempDir::new("xfskit-hostwalk");
    let root = tmp.path().join("tree");
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::write(root.join("d/f"), b"contents").unwrap();
    fs::hard_link(root.join("d/f"), root.join("d/e/g")).unwrap();
    std::os::unix::fs::symlink("f", root.join("d/s")).unwrap();
    let before = walk_host(&root);
    let paths: Vec<&str> = before.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["", "d", "d/e", "d/e/g", "d/f", "d/s"]);
    assert_eq!(before[3].link_group, Some(3));
    assert_eq!(before[4].link_group, Some(3));
    assert_eq!(before[5].symlink_target.as_deref(), Some(&b"f"[..]));
    assert_eq!(before[4].content_digest, Some(common::digest_bytes(b"contents")));
    assert!(diff_walks(&before, &walk_host(&root)).is_empty());

    fs::write(root.join("d/f"), b"changed!").unwrap();
    fs::remove_file(root.join("d/s")).unwrap();
    fs::create_dir(root.join("new")).unwrap();
    let diffs = diff_walks(&before, &walk_host(&root));
    let text = diffs.join("\n");
    assert!(text.contains("\"d/f\": content_digest"), "{text}");
    assert!(text.contains("\"d/e/g\": content_digest"), "{text}");
    assert!(text.contains("only in a: \"d/s\""), "{text}");
    assert!(text.contains("only in b: \"new\""), "{text}");
}

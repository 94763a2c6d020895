//! `xfskit metadump` against xfs_metadump 7.2: the dump of an image,
//! restored by xfs_mdrestore 7.2, is byte-identical to xfs_metadump's dump
//! restored, with whole blocks (-a -o) and with stale bytes zeroed (-o, the
//! default without -a) (v1 and v2 files; images from mkfs.xfs 7.2, `xfskit
//! build`, mkfs.xfs 6.1 v4, a metadata directory, and as root a kernel-made
//! tree, clean and with a dirty log); the restored image passes
//! `xfs_repair -n` 7.2 and `xfskit check`; a qcow2 GPT disk is dumped
//! through the shared disk opening, its restored image listing the same
//! tree. Obfuscated dumps (the default), which are random, are tested by
//! their properties: `xfs_repair -n` 7.2 clean, the same tree shape (entries
//! per directory, inode numbers, name lengths, sizes, modes, xattr name and
//! value lengths), no original name or label in the dump's bytes, parent
//! pointers naming the obfuscated entries, the same seed giving the same
//! dump; xfs_metadump's own obfuscated dump of the same image restores to
//! the same shape, repair-clean too.

mod common;

use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_bin, xfsprogs_72_or_skip};
use common::{is_root, skip, TempDir};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn same_file(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .args(["-s", s(a), s(b)])
        .status()
        .unwrap()
        .success()
}

fn xfskit_ok(args: &[&str]) -> String {
    let out = xfskit_output(args);
    assert!(
        out.status.success(),
        "xfskit {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repair_clean(bin: &Path, img: &Path, what: &str) {
    let out = Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    let text = output_text(&out);
    let end = text.char_indices().nth(4000).map_or(text.len(), |(i, _)| i);
    assert!(
        out.status.success(),
        "xfs_repair -n of {what}: {}",
        &text[..end]
    );
}

/// Dumps `img` with xfskit (v1, v2) and xfs_metadump, with whole blocks
/// (-a -o) and with stale bytes zeroed (-o), restores all with
/// xfs_mdrestore 7.2 and compares the restored images. The last one left
/// in got.img is the zeroed v2 dump's. `stale`: the image has bytes to
/// zero (or a log that a zeroed dump clears to a new cycle), so the two
/// restore differently.
fn compare(bin: &Path, dir: &Path, img: &Path, label: &str, stale: bool) {
    let (want_md, got_md) = (dir.join("want.md"), dir.join("got.md"));
    let (want, got) = (dir.join("want.img"), dir.join("got.img"));
    let whole = dir.join("whole.img");
    for (opts, v) in [
        (&["-a", "-o"][..], "1"),
        (&["-a", "-o"], "2"),
        (&["-o"], "1"),
        (&["-o"], "2"),
    ] {
        let mut a: Vec<&str> = opts.to_vec();
        a.extend(["-v", v, s(img), s(&want_md)]);
        tool_72(bin, "xfs_metadump", &a);
        tool_72(bin, "xfs_mdrestore", &[s(&want_md), s(&want)]);
        let mut a = vec!["metadump"];
        a.extend(opts);
        a.extend(["-v", v, s(img), s(&got_md)]);
        xfskit_ok(&a);
        let i = tool_72(bin, "xfs_mdrestore", &["-i", s(&got_md)]);
        let wi = tool_72(bin, "xfs_mdrestore", &["-i", s(&want_md)]);
        assert_eq!(
            i.split_once(':').unwrap().1,
            wi.split_once(':').unwrap().1,
            "{label}: -i of v{v}"
        );
        tool_72(bin, "xfs_mdrestore", &[s(&got_md), s(&got)]);
        assert!(
            same_file(&want, &got),
            "{label}: xfskit metadump {opts:?} -v {v} restored differs from xfs_metadump's restored"
        );
        if v == "2" && opts.len() == 2 {
            std::fs::rename(&got, &whole).unwrap();
        }
    }
    // The zeroing changed something (stale bytes, the clean log cleared):
    // without it the comparison above would prove nothing about it.
    assert!(
        !stale || !same_file(&whole, &got),
        "{label}: the zeroed dump restores to the whole-block dump's image"
    );
    std::fs::remove_file(&whole).unwrap();
    if i_dirty(bin, &got_md) {
        // The restored dirty log replays (as a kernel mount would), then repair is clean.
        xfskit_ok(&["recover", s(&got)]);
    }
    repair_clean(bin, &got, label);
}

/// One inode as an obfuscated dump must keep it: where it is linked
/// (directory, name length), its number, mode, size, links, and its
/// xattrs' namespaces and name and value lengths (parent pointers aside).
type Shape = Vec<(u64, usize, u64, u16, u64, u32, Vec<(String, usize, u32)>)>;

/// The tree of `img` as [`Shape`] rows, sorted; and every (directory,
/// name, inode) entry, for the parent pointer check.
fn shape(img: &Path) -> (Shape, Vec<(u64, Vec<u8>, u64)>) {
    let fs = xfskit::Fs::open(img, &xfskit::OpenOptions::default())
        .unwrap_or_else(|e| panic!("open {}: {e}", img.display()));
    let root = fs.root().unwrap();
    let mut rows = Vec::new();
    let mut entries = Vec::new();
    let mut todo = vec![root.ino.0];
    let mut seen = std::collections::HashSet::new();
    let stat = |ino: u64| {
        let i = fs.inode(xfskit::geometry::Ino(ino)).unwrap();
        let mut x: Vec<(String, usize, u32)> = xfskit::attr::list_names(&fs, &i)
            .unwrap()
            .into_iter()
            .filter(|n| n.ns != xfskit::attr::Namespace::Parent)
            .map(|n| (format!("{:?}", n.ns), n.name.len(), n.value_len))
            .collect();
        x.sort();
        (i, x)
    };
    let (ri, rx) = stat(root.ino.0);
    rows.push((0, 0, ri.ino.0, ri.mode, ri.size, ri.nlink, rx));
    while let Some(d) = todo.pop() {
        let di = fs.inode(xfskit::geometry::Ino(d)).unwrap();
        for e in xfskit::dir::read_dir(&fs, &di).unwrap() {
            let (i, x) = stat(e.ino.0);
            rows.push((d, e.name.len(), e.ino.0, i.mode, i.size, i.nlink, x));
            entries.push((d, e.name.clone(), e.ino.0));
            if i.mode & 0o170000 == 0o040000 && seen.insert(e.ino.0) {
                todo.push(e.ino.0);
            }
        }
    }
    rows.sort();
    entries.sort();
    (rows, entries)
}

/// Whether `hay` holds `needle`.
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// An obfuscated dump of `img` (clean log) by xfskit and by xfs_metadump
/// 7.2: both restore repair-clean to the tree shape of `img`; xfskit's
/// dump holds none of `secrets` (substrings of the image's names, link
/// targets, xattr names and values, its label) and none of its names of 5
/// bytes or more but lost+found and orphans named by their inode; its parent pointers name the obfuscated
/// entries; the same seed gives the same dump, another seed another.
fn obfuscated(bin: &Path, dir: &Path, img: &Path, label: &str, secrets: &[&str]) {
    let (md, md2) = (dir.join("ob.md"), dir.join("ob2.md"));
    let got = dir.join("ob.img");
    let (want_shape, want_entries) = shape(img);
    xfskit_ok(&["metadump", "--seed", "7", s(img), s(&md)]);
    let info = tool_72(bin, "xfs_mdrestore", &["-i", s(&md)]);
    assert!(
        info.contains("obfuscated") && !info.contains("not obfuscated"),
        "{label}: {info}"
    );
    tool_72(bin, "xfs_mdrestore", &[s(&md), s(&got)]);
    repair_clean(bin, &got, &format!("{label}, obfuscated by xfskit"));
    let (got_shape, got_entries) = shape(&got);
    assert_eq!(got_shape, want_shape, "{label}: obfuscated tree shape");
    // Names of 5 bytes or more are all changed (lost+found kept).
    let bytes = std::fs::read(&md).unwrap();
    let mut changed = 0;
    let by_ino = |v: &[(u64, Vec<u8>, u64)]| {
        let mut v = v.to_vec();
        v.sort_by_key(|e| (e.0, e.2, e.1.len()));
        v
    };
    for (w, g) in by_ino(&want_entries).iter().zip(&by_ino(&got_entries)) {
        assert_eq!((w.0, w.2, w.1.len()), (g.0, g.2, g.1.len()), "{label}");
        if w.1.len() >= 5 && w.1 != b"lost+found" && w.1 != w.2.to_string().as_bytes() {
            assert_ne!(w.1, g.1, "{label}: a name kept");
            changed += 1;
        }
    }
    assert!(changed > 10, "{label}: only {changed} long names");
    // No two entries of a directory got the same new name.
    let mut names: Vec<(u64, &[u8])> = got_entries.iter().map(|e| (e.0, &e.1[..])).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(
        names.len(),
        n,
        "{label}: two entries of a directory share a name"
    );
    for secret in secrets {
        assert!(
            !holds(&bytes, secret.as_bytes()),
            "{label}: {secret:?} is in the obfuscated dump"
        );
    }
    let mut long: Vec<&[u8]> = want_entries
        .iter()
        .filter(|e| e.1 != e.2.to_string().as_bytes())
        .map(|e| &e.1[..])
        .filter(|n| n.len() >= 5 && *n != b"lost+found")
        .collect();
    long.sort();
    long.dedup();
    let lens: std::collections::BTreeSet<usize> = long.iter().map(|n| n.len()).collect();
    let set: std::collections::HashSet<&[u8]> = long.iter().copied().collect();
    let mut first = [false; 256];
    for n in &long {
        first[usize::from(n[0])] = true;
    }
    for l in lens {
        if let Some(w) = bytes
            .windows(l)
            .find(|w| first[usize::from(w[0])] && set.contains(w))
        {
            panic!(
                "{label}: the name {:?} is in the obfuscated dump",
                String::from_utf8_lossy(w)
            );
        }
    }
    // Parent pointers (when the filesystem has them) name the new entries.
    let fs = xfskit::Fs::open(&got, &xfskit::OpenOptions::default()).unwrap();
    if fs.geometry().features_incompat & xfs_format::sb::XFS_SB_FEAT_INCOMPAT_PARENT != 0 {
        for (d, name, ino) in &got_entries {
            let i = fs.inode(xfskit::geometry::Ino(*ino)).unwrap();
            let pp = xfskit::attr::parent_pointers(&fs, &i).unwrap();
            assert!(
                pp.iter().any(|(n, p, _)| n == name && p == d),
                "{label}: inode {ino} has no parent pointer to {d} named as its entry"
            );
        }
    }
    drop(fs);
    // Reproducible with a seed.
    xfskit_ok(&["metadump", "--seed", "7", s(img), s(&md2)]);
    assert!(same_file(&md, &md2), "{label}: --seed 7 twice");
    xfskit_ok(&["metadump", "--seed", "8", s(img), s(&md2)]);
    assert!(!same_file(&md, &md2), "{label}: --seed 7 and 8");
    // xfs_metadump 7.2's own obfuscated dump: the same shape, repair-clean.
    tool_72(bin, "xfs_metadump", &[s(img), s(&md2)]);
    tool_72(bin, "xfs_mdrestore", &[s(&md2), s(&got)]);
    repair_clean(bin, &got, &format!("{label}, obfuscated by xfs_metadump"));
    assert_eq!(
        shape(&got).0,
        want_shape,
        "{label}: xfs_metadump's obfuscated tree shape"
    );
    for p in [md, md2, got] {
        std::fs::remove_file(p).unwrap();
    }
}

fn i_dirty(bin: &Path, md: &Path) -> bool {
    tool_72(bin, "xfs_mdrestore", &["-i", s(md)]).contains("dirty log")
}

#[test]
fn dumps_restore_as_xfs_metadump_s() {
    let Some(bin) = xfsprogs_72_or_skip("dumps_restore_as_xfs_metadump_s") else {
        return;
    };
    let dir = TempDir::new("metadump");
    let d = dir.path();
    let plain = d.join("plain.img");
    File::create(&plain).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", s(&plain)]);
    compare(&bin, d, &plain, "mkfs 7.2", true);
    std::fs::remove_file(&plain).unwrap();

    let src = d.join("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    for i in 0..2000 {
        std::fs::write(
            src.join(format!("big/a-rather-long-file-name-{i:05}")),
            b"x",
        )
        .unwrap();
    }
    std::fs::write(src.join("a/b/data"), vec![3u8; 200_000]).unwrap();
    std::os::unix::fs::symlink("t/".repeat(400), src.join("a/longlink")).unwrap();
    let built = d.join("built.img");
    xfskit_ok(&[
        "build",
        "-q",
        "-f",
        "--size",
        "1g",
        "-L",
        "secretlbl",
        s(&src),
        s(&built),
    ]);
    for i in 0..30 {
        xfskit_ok(&[
            "setfattr",
            "-n",
            &format!("user.attr{i}"),
            "-v",
            &"v".repeat(200),
            s(&built),
            "/a/b/data",
        ]);
    }
    xfskit_ok(&[
        "setfattr",
        "-n",
        "user.remote",
        "-v",
        &"r".repeat(5000),
        s(&built),
        "/a",
    ]);
    compare(&bin, d, &built, "xfskit build", true);
    obfuscated(
        &bin,
        d,
        &built,
        "xfskit build",
        &[
            "a-rather-long-file-name",
            "longlink",
            "rrrrrrrr",
            "secretlbl",
        ],
    );
    // The restored image holds the same tree (sizes, modes, xattrs are metadata).
    let got = d.join("got.img");
    let check = xfskit_output(&["check", s(&got)]);
    assert!(
        check.status.success(),
        "xfskit check of the restored image: {}",
        output_text(&check)
    );
    assert_eq!(
        xfskit_ok(&["ls", "-lR", s(&built), "/"]),
        xfskit_ok(&["ls", "-lR", s(&got), "/"]),
        "the restored tree"
    );
    assert_eq!(
        xfskit_ok(&["getfattr", "-d", s(&built), "/a/b/data"]),
        xfskit_ok(&["getfattr", "-d", s(&got), "/a/b/data"])
    );
    std::fs::remove_file(&built).unwrap();

    if Path::new("/usr/sbin/mkfs.xfs").exists() {
        let v4 = d.join("v4.img");
        File::create(&v4).unwrap().set_len(512 << 20).unwrap();
        let out = Command::new("/usr/sbin/mkfs.xfs")
            .args(["-q", "-m", "crc=0", s(&v4)])
            .output()
            .unwrap();
        assert!(out.status.success(), "mkfs.xfs 6.1 -m crc=0: {out:?}");
        compare(&bin, d, &v4, "v4", false);
        std::fs::remove_file(&v4).unwrap();
    }
    let mdir = d.join("metadir.img");
    File::create(&mdir).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", "-m", "metadir=1", s(&mdir)]);
    compare(&bin, d, &mdir, "metadir", true);
}

#[test]
fn kernel_tree_and_dirty_log() {
    let Some(bin) = xfsprogs_72_or_skip("kernel_tree_and_dirty_log") else {
        return;
    };
    if !is_root() {
        skip(
            "kernel_tree_and_dirty_log",
            "the tree is made by a kernel loop mount: needs root",
        );
        return;
    }
    let dir = TempDir::new("metadump-kernel");
    let d = dir.path();
    let img = d.join("k.img");
    File::create(&img).unwrap().set_len(1 << 30).unwrap();
    tool_72(&bin, "mkfs.xfs", &["-q", "-L", "secretlbl", s(&img)]);
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = || {
        Command::new("mount")
            .args(["-o", "loop", s(&img), s(&mnt)])
            .status()
            .unwrap()
            .success()
    };
    if !mount() {
        skip("kernel_tree_and_dirty_log", "loop mount failed");
        return;
    }
    let setfattr_ok = Command::new("setfattr").arg("--version").output().is_ok();
    let xattr = |p: &Path, n: &str, v: &str| {
        let st = Command::new("setfattr")
            .args(["-n", n, "-v", v, s(p)])
            .status()
            .unwrap();
        assert!(st.success(), "setfattr {n} {}", p.display());
    };
    // Block, leaf and node directories with deletions (stale entries).
    std::fs::create_dir(mnt.join("big")).unwrap();
    for i in 0..3000 {
        std::fs::write(mnt.join(format!("big/entry-with-name-{i}")), b"").unwrap();
    }
    for i in (0..3000).step_by(7) {
        std::fs::remove_file(mnt.join(format!("big/entry-with-name-{i}"))).unwrap();
    }
    std::fs::create_dir(mnt.join("small")).unwrap();
    for i in 0..40 {
        std::fs::write(mnt.join(format!("small/shortform-{i}")), b"x").unwrap();
    }
    for i in (0..40).step_by(3) {
        std::fs::remove_file(mnt.join(format!("small/shortform-{i}"))).unwrap();
    }
    std::fs::create_dir_all(mnt.join("deep/nested/tree")).unwrap();
    for i in 0..300 {
        std::fs::create_dir(mnt.join(format!("deep/nested/tree/subdirectory-{i}"))).unwrap();
    }
    for i in (0..300).step_by(4) {
        std::fs::remove_dir(mnt.join(format!("deep/nested/tree/subdirectory-{i}"))).unwrap();
    }
    // Five-byte names with the same hash in one directory: their
    // obfuscated names (no random part at that length) need alternates,
    // which the parent pointers must follow.
    std::fs::create_dir(mnt.join("colliding")).unwrap();
    let hash = |n: &[u8]| n.iter().fold(0u32, |h, &b| h.rotate_left(7) ^ u32::from(b));
    for base in [b"abcde", b"fghij", b"klmno", b"pqrst", b"uvwxy"] {
        let mut alt1 = *base;
        alt1[4] ^= 0x80;
        alt1[3] ^= 1;
        let mut alt2 = *base;
        alt2[3] ^= 0x80;
        alt2[2] ^= 1;
        for n in [*base, alt1, alt2] {
            assert_eq!(hash(&n), hash(base));
            let name = std::ffi::OsStr::from_bytes(&n);
            std::fs::write(mnt.join("colliding").join(name), b"c").unwrap();
        }
    }
    // Hard links, devices, fifos, symlinks inline and remote.
    std::fs::write(mnt.join("small/linked-file"), b"l").unwrap();
    std::fs::hard_link(
        mnt.join("small/linked-file"),
        mnt.join("big/second-link-name"),
    )
    .unwrap();
    let st = Command::new("mknod")
        .args([s(&mnt.join("chardevice")), "c", "1", "3"])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("mkfifo")
        .arg(mnt.join("fifo-node"))
        .status()
        .unwrap();
    assert!(st.success());
    std::os::unix::fs::symlink("inline-target-name", mnt.join("short-symlink")).unwrap();
    let long: String = (0..60).map(|i| format!("component{i}/")).collect();
    std::os::unix::fs::symlink(&long, mnt.join("remote-link")).unwrap();
    // A file of many extents: a bmbt.
    {
        use std::os::unix::fs::FileExt;
        let f = File::create(mnt.join("fragmented")).unwrap();
        for i in 0..600u64 {
            f.write_all_at(&[1u8; 4096], i * 8192).unwrap();
        }
        f.sync_all().unwrap();
    }
    // lost+found with an orphan named by its inode number (kept) and a stray.
    std::fs::create_dir(mnt.join("lost+found")).unwrap();
    std::fs::write(mnt.join("lost+found/stray-file"), b"s").unwrap();
    std::fs::write(mnt.join("lost+found/x"), b"o").unwrap();
    let orphan_ino = std::fs::metadata(mnt.join("lost+found/x")).unwrap().ino();
    std::fs::rename(
        mnt.join("lost+found/x"),
        mnt.join(format!("lost+found/{orphan_ino}")),
    )
    .unwrap();
    if setfattr_ok {
        // Short-form, leaf and node attribute forks, a remote value.
        std::fs::create_dir(mnt.join("attrs")).unwrap();
        for i in 0..60 {
            let f = mnt.join(format!("attrs/file-with-xattrs-{i}"));
            std::fs::write(&f, b"").unwrap();
            xattr(
                &f,
                &format!("user.attribute-name-{i}"),
                &format!("secret-value-{i}"),
            );
        }
        let many = mnt.join("attrs/file-with-xattrs-0");
        for i in 0..400 {
            xattr(&many, &format!("user.many-attributes-{i}"), &"q".repeat(60));
        }
        xattr(
            &mnt.join("fragmented"),
            "user.remote-value",
            &"z".repeat(3000),
        );
        xattr(&mnt.join("big"), "trusted.directory-attr", "dirvalue");
    } else {
        skip(
            "kernel_tree_and_dirty_log (xattrs)",
            "setfattr not available",
        );
    }
    common::must_umount(&mnt);
    compare(&bin, d, &img, "kernel tree", true);
    let (shape_rows, entries) = shape(&img);
    assert!(
        entries
            .iter()
            .any(|e| e.1 == orphan_ino.to_string().as_bytes()),
        "the orphan"
    );
    drop(shape_rows);
    obfuscated(
        &bin,
        d,
        &img,
        "kernel tree",
        &[
            "entry-with-name",
            "shortform-",
            "subdirectory-",
            "second-link",
            "chardevice",
            "fifo-node",
            "inline-target",
            "component",
            "fragmented",
            "attribute-name",
            "secret-value",
            "many-attributes",
            "qqqqqqqq",
            "remote-value",
            "zzzzzzzz",
            "directory-attr",
            "dirvalue",
            "stray-file",
            "secretlbl",
        ],
    );
    // The orphan named by its inode number and lost+found keep their names.
    let md = d.join("ob.md");
    xfskit_ok(&["metadump", s(&img), s(&md)]);
    let ob = d.join("ob.img");
    tool_72(&bin, "xfs_mdrestore", &[s(&md), s(&ob)]);
    assert!(xfskit_ok(&["ls", s(&ob), "/lost+found"]).contains(&orphan_ino.to_string()));
    std::fs::remove_file(&ob).unwrap();

    // Then a dirty log: changes after a sync, the filesystem shut down.
    assert!(mount(), "second mount");
    Command::new("sync").status().unwrap();
    std::fs::write(mnt.join("late-file"), b"late").unwrap();
    std::fs::create_dir(mnt.join("late-directory")).unwrap();
    tool_72(&bin, "xfs_io", &["-x", "-c", "shutdown -f", s(&mnt)]);
    common::must_umount(&mnt);
    compare(&bin, d, &img, "kernel tree, dirty log", true);
    let i = tool_72(&bin, "xfs_mdrestore", &["-i", s(&d.join("got.md"))]);
    assert!(i.contains("dirty log"), "{i}");
    // Obfuscating keeps a dirty log as it is, as xfs_metadump does, and says so.
    let out = xfskit_output(&["metadump", s(&img), s(&md)]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the log is dirty"),
        "{}",
        output_text(&out)
    );
}

/// 1 KiB blocks with 8 KiB directory blocks (a directory block is several
/// fs blocks), many files, half of them deleted: zeroed and obfuscated as
/// xfs_metadump does. The first record, the superblock, is one of its own:
/// xfs_mdrestore refuses a longer one, which AG 0's contiguous headers and
/// btrees made here before.
#[test]
fn small_blocks_large_directory_blocks() {
    let Some(bin) = xfsprogs_72_or_skip("small_blocks_large_directory_blocks") else {
        return;
    };
    if !is_root() {
        skip(
            "small_blocks_large_directory_blocks",
            "the tree is made by a kernel loop mount: needs root",
        );
        return;
    }
    let dir = TempDir::new("metadump-small-blocks");
    let d = dir.path();
    let img = d.join("m.img");
    File::create(&img).unwrap().set_len(320 << 20).unwrap();
    tool_72(
        &bin,
        "mkfs.xfs",
        &["-q", "-b", "size=1024", "-n", "size=8192", s(&img)],
    );
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if !Command::new("mount")
        .args(["-o", "loop", s(&img), s(&mnt)])
        .status()
        .unwrap()
        .success()
    {
        skip("small_blocks_large_directory_blocks", "loop mount failed");
        return;
    }
    std::fs::create_dir(mnt.join("fill")).unwrap();
    for i in 0..6000 {
        std::fs::write(mnt.join(format!("fill/f{i}")), [b'a'; 1024]).unwrap();
    }
    for i in (0..6000).step_by(2) {
        std::fs::remove_file(mnt.join(format!("fill/f{i}"))).unwrap();
    }
    Command::new("sync").status().unwrap();
    std::fs::create_dir(mnt.join("big")).unwrap();
    for k in 0..1500 {
        std::fs::write(mnt.join(format!("big/entry-with-a-long-name-{k}")), b"").unwrap();
    }
    for k in (0..1500).step_by(5) {
        std::fs::remove_file(mnt.join(format!("big/entry-with-a-long-name-{k}"))).unwrap();
    }
    common::must_umount(&mnt);
    compare(&bin, d, &img, "1 KiB blocks, 8 KiB directory blocks", true);
    obfuscated(
        &bin,
        d,
        &img,
        "1 KiB blocks, 8 KiB directory blocks",
        &["entry-with-a-long-name"],
    );
}

#[test]
fn qcow2_gpt_disk_is_dumped() {
    let Some(bin) = xfsprogs_72_or_skip("qcow2_gpt_disk_is_dumped") else {
        return;
    };
    let dir = TempDir::new("metadump-qcow2");
    let d = dir.path();
    let src = d.join("src");
    std::fs::create_dir_all(src.join("x/y")).unwrap();
    for i in 0..100 {
        std::fs::write(src.join(format!("x/y/f{i}")), b"abc").unwrap();
    }
    let disk: PathBuf = d.join("disk.qcow2");
    xfskit_ok(&[
        "build",
        "-q",
        "-f",
        "--gpt",
        "--format",
        "qcow2",
        "--size",
        "600m",
        s(&src),
        s(&disk),
    ]);
    let md = d.join("disk.md");
    xfskit_ok(&["metadump", "-o", "-a", s(&disk), s(&md)]);
    let got = d.join("got.img");
    tool_72(&bin, "xfs_mdrestore", &[s(&md), s(&got)]);
    repair_clean(&bin, &got, "the qcow2 disk's restored dump");
    assert_eq!(
        xfskit_ok(&["ls", "-lR", s(&disk), "/"]),
        xfskit_ok(&["ls", "-lR", s(&got), "/"])
    );
}

#[test]
fn bad_input_and_unsupported_modes_are_refused() {
    let dir = TempDir::new("metadump-refused");
    let img = dir.path().join("fs.img");
    File::create(&img).unwrap().set_len(300 << 20).unwrap();
    xfskit_ok(&["mkfs", "-q", s(&img)]);
    // Bad input: a clear error, never a panic.
    let out_md = dir.path().join("x.md");
    let out = xfskit_output(&["metadump", "--seed", "x", s(&img), s(&out_md)]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
        .args(["metadump", "--reproducible", s(&img), s(&out_md)])
        .env("SOURCE_DATE_EPOCH", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SOURCE_DATE_EPOCH"));
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0x5a; 1 << 20]).unwrap();
    let out = xfskit_output(&["metadump", s(&junk), s(&dir.path().join("y.md"))]);
    assert!(
        matches!(out.status.code(), Some(c) if c != 0 && c != 101),
        "{}",
        output_text(&out)
    );
    // --reproducible: SOURCE_DATE_EPOCH seeds it; the same value, the same dump.
    let (a, b) = (dir.path().join("a.md"), dir.path().join("b.md"));
    for (p, e) in [(&a, "1700000000"), (&b, "1700000000")] {
        let out = Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["metadump", "--reproducible", s(&img), s(p)])
            .env("SOURCE_DATE_EPOCH", e)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
    }
    assert!(same_file(&a, &b), "--reproducible twice");
    // Realtime groups: not dumped yet.
    let Some(bin) = xfsprogs_72_bin() else {
        skip(
            "bad_input_and_unsupported_modes_are_refused (realtime groups)",
            "xfsprogs 7.2 not found",
        );
        return;
    };
    let (rg, rt) = (dir.path().join("rg.img"), dir.path().join("rt.img"));
    File::create(&rg).unwrap().set_len(512 << 20).unwrap();
    File::create(&rt).unwrap().set_len(256 << 20).unwrap();
    tool_72(
        &bin,
        "mkfs.xfs",
        &[
            "-q",
            "-m",
            "metadir=1",
            "-r",
            &format!("rtdev={},rgcount=2", s(&rt)),
            s(&rg),
        ],
    );
    let md = dir.path().join("rg.md");
    let out = xfskit_output(&["metadump", "-o", "-a", "--rtdev", s(&rt), s(&rg), s(&md)]);
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("realtime groups"));
}

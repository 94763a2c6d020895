//! VHDX images, with qemu-img as the oracle. Reading: a bare XFS disk and
//! a GPT disk holding one (made and filled by mkfs.xfs and the kernel when
//! root, by `xfskit build` otherwise), converted by qemu-img to dynamic and
//! fixed VHDX, with 1 MiB and 8 MiB blocks and a bigger log, must extract
//! to the same tree as the raw disk. Writing: `xfskit build --format vhdx`
//! (bare and `--gpt`) must pass `qemu-img check`, have the expected virtual
//! size, compare equal to the raw build, and hold a filesystem xfs_repair
//! finds clean. In place: edits on a VHDX xfskit made and on one qemu-img
//! made leave files qemu-img checks clean and reads back as the edited
//! tree. (The log, differencing disks and damaged files are unit tests in
//! crates/xfskit/src/disk/vhdx/tests.rs; cut writes at every point of an
//! edit are crates/xfskit/tests/disk_vhdx_crash.rs.)

mod common;

use common::disks::{partx_range, sh, sparse_file, xfskit, DevMount, LoopRange};
use common::{diff_walks, is_root, missing_tool, skip, walk_host, Entry, TempDir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;
const DISK: u64 = 320 * MIB;

/// The source tree: every kind of file, a directory with many entries,
/// xattrs, owners, a sparse file, a file of random bytes.
fn make_source(src: &Path) {
    sh(&format!(
        r#"mkdir -p '{0}' && cd '{0}'
mkdir -p etc usr many
for i in $(seq 1 300); do echo "entry $i" > many/file-$i; done
head -c 3000000 /dev/urandom > usr/blob
printf 'first\n' > etc/a
ln etc/a etc/a.hard
ln -s ../etc/a usr/link
mkfifo usr/fifo
truncate -s 40M usr/sparse
printf 'tail' | dd of=usr/sparse bs=1 seek=20971520 conv=notrunc status=none
setfattr -n user.colour -v blue etc/a 2>/dev/null || true
printf 'owned\n' > etc/b; chown 1234:5678 etc/b; chmod 4755 etc/b
"#,
        src.display()
    ));
}

/// A raw disk holding an XFS of `src`: bare, or in partition 1 of a GPT.
/// The kernel makes and fills it when root; `xfskit build` otherwise.
fn raw_disk(src: &Path, img: &Path, gpt: bool, mnt: &Path) {
    let s = src.display();
    if is_root() {
        sparse_file(img, DISK);
        let (start, size) = if gpt {
            sh(&format!(
                "sgdisk -n1:2048:0 -t1:8300 -c1:root '{}' >/dev/null",
                img.display()
            ));
            partx_range(img, 1)
        } else {
            (0, DISK)
        };
        let l = LoopRange::new(img, start, size);
        sh(&format!("mkfs.xfs -q {}", l.dev));
        let m = DevMount::new(&l.dev, mnt, false);
        sh(&format!("cp -a '{s}/.' '{}/'", m.dir.display()));
    } else {
        let mut a = vec!["build", "-q"];
        if gpt {
            a.push("--gpt");
        }
        let (ss, is) = (s.to_string(), img.display().to_string());
        a.extend([ss.as_str(), "--size", "300m", is.as_str()]);
        let r = xfskit(&a, LIMIT);
        assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
    }
}

/// The tree `xfskit extract` gives of `image`.
fn extract(tmp: &Path, image: &Path, what: &str) -> Vec<Entry> {
    let dest = tmp.join(format!("out-{what}"));
    let _ = std::fs::remove_dir_all(&dest);
    let r = xfskit(
        &[
            "extract",
            "-q",
            image.to_str().expect("utf-8"),
            dest.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "{what}: xfskit extract: {}", r.stderr);
    let w = walk_host(&dest);
    std::fs::remove_dir_all(&dest).ok();
    w
}

fn same(got: &[Entry], want: &[Entry], what: &str) {
    let d = diff_walks(got, want);
    assert!(d.is_empty(), "{what}: trees differ:\n{}", d.join("\n"));
    println!("{what}: {} entries equal", want.len());
}

fn tools_missing(name: &str, extra: &[&str]) -> bool {
    let mut tools = vec!["qemu-img", "mkfs.xfs", "xfs_repair", "sgdisk", "setfattr"];
    tools.extend_from_slice(extra);
    if let Some(t) = missing_tool(&tools) {
        skip(
            name,
            &format!("{t} is not installed (scripts/test.sh installs it)"),
        );
        return true;
    }
    false
}

fn qemu_check(img: &Path, what: &str) {
    let out = sh(&format!("qemu-img check -f vhdx '{}' 2>&1", img.display()));
    assert!(
        out.contains("No errors were found"),
        "{what}: qemu-img check:\n{out}"
    );
}

#[test]
fn qemu_made_vhdx_reads_as_the_raw_disk() {
    let name = "qemu_made_vhdx_reads_as_the_raw_disk";
    if tools_missing(name, &["partx", "losetup"]) {
        return;
    }
    let tmp = TempDir::new("xfskit-vhdx-read");
    let t = tmp.path();
    let src = t.join("src");
    make_source(&src);
    for gpt in [false, true] {
        let kind = if gpt { "gpt" } else { "bare" };
        let raw = t.join(format!("{kind}.img"));
        raw_disk(&src, &raw, gpt, &t.join("mnt"));
        let want = extract(t, &raw, kind);
        assert!(want.len() > 300, "{kind}: {} entries", want.len());
        for (i, opts) in [
            "subformat=dynamic",
            "subformat=fixed",
            "block_size=1M",
            "block_size=8M,log_size=8M",
        ]
        .iter()
        .enumerate()
        {
            // Only the first two for the GPT disk: the layout of the
            // container does not depend on what the disk holds.
            if gpt && i > 1 {
                continue;
            }
            let v = t.join(format!("{kind}-{i}.vhdx"));
            sh(&format!(
                "qemu-img convert -O vhdx -o {opts} '{}' '{}'",
                raw.display(),
                v.display()
            ));
            same(
                &extract(t, &v, &format!("{kind}-{i}")),
                &want,
                &format!("{kind} {opts}"),
            );
            if gpt {
                let r = xfskit(&["parts", "--json", v.to_str().expect("utf-8")], LIMIT);
                assert_eq!(r.code, 0, "parts: {}", r.stderr);
                let j: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
                let parts = j["partitions"].as_array().expect("partitions");
                assert!(
                    parts
                        .iter()
                        .any(|p| p["number"] == 1 && p["content"] == "xfs"),
                    "parts of {opts}: {}",
                    r.stdout
                );
            }
            let r = xfskit(&["cat", v.to_str().expect("utf-8"), "/etc/a"], LIMIT);
            assert_eq!((r.code, r.stdout.as_str()), (0, "first\n"), "{}", r.stderr);
            std::fs::remove_file(&v).ok();
        }
        std::fs::remove_file(&raw).ok();
    }
    // QEMU does not make differencing VHDX files; the unit test
    // differencing_by_hand reads one built by hand.
    let base = t.join("base.vhdx");
    sh(&format!(
        "qemu-img create -q -f vhdx '{}' 64M",
        base.display()
    ));
    let made = sh(&format!(
        "qemu-img create -q -f vhdx -b '{}' -F vhdx '{}' 2>&1 && echo MADE || true",
        base.display(),
        t.join("child.vhdx").display()
    ));
    if !made.contains("MADE") {
        println!(
            "differencing VHDX: qemu-img cannot make one ({}); covered by the unit test differencing_by_hand",
            made.trim()
        );
    }
}

/// `xfskit build -q --size 300m src out`, which must succeed.
fn build_300m(src: &str, out: &Path) {
    let r = xfskit(
        &[
            "build",
            "-q",
            "--size",
            "300m",
            src,
            out.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build: {}", r.stderr);
}

#[test]
fn build_format_vhdx_equals_the_raw_build() {
    let name = "build_format_vhdx_equals_the_raw_build";
    if tools_missing(name, &[]) {
        return;
    }
    let tmp = TempDir::new("xfskit-vhdx-build");
    let t = tmp.path();
    let src = t.join("src");
    make_source(&src);
    let s = src.to_str().expect("utf-8");
    // A first build reads the source and so moves its atimes (relatime):
    // the builds compared come after it and see the same times.
    let warm = t.join("warm.img");
    build_300m(s, &warm);
    std::fs::remove_file(&warm).ok();
    for gpt in [false, true] {
        let kind = if gpt { "gpt" } else { "bare" };
        let raw = t.join(format!("{kind}.img"));
        let v = t.join(format!("{kind}.vhdx"));
        for (out, fmt) in [(&raw, None), (&v, Some("vhdx"))] {
            let mut a = vec!["build", "-q", "--reproducible", "--size", "300m"];
            if gpt {
                a.push("--gpt");
            }
            if let Some(f) = fmt {
                a.extend(["--format", f]);
            }
            a.extend([s, out.to_str().expect("utf-8")]);
            let r = xfskit(&a, LIMIT);
            assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
        }
        qemu_check(&v, kind);
        let info = sh(&format!("qemu-img info --output=json '{}'", v.display()));
        let j: serde_json::Value = serde_json::from_str(&info).expect("JSON");
        let rawlen = std::fs::metadata(&raw).expect("stat").len();
        assert_eq!(j["format"], "vhdx", "{kind}: {info}");
        assert_eq!(j["virtual-size"], rawlen, "{kind}: {info}");
        let cmp = sh(&format!(
            "qemu-img compare -f vhdx -F raw '{}' '{}' 2>&1",
            v.display(),
            raw.display()
        ));
        assert!(cmp.contains("Images are identical"), "{kind}: {cmp}");
        let back = t.join(format!("{kind}-back.img"));
        sh(&format!(
            "qemu-img convert -O raw '{}' '{}'",
            v.display(),
            back.display()
        ));
        if gpt {
            // The filesystem in partition 1: xfs_repair on its bytes.
            let (start, size) = gpt_part1(&back);
            let fs = t.join("part1.img");
            sh(&format!(
                "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes skip={start} count={size} conv=sparse status=none",
                back.display(),
                fs.display()
            ));
            repair_clean(&fs, kind);
            std::fs::remove_file(&fs).ok();
        } else {
            repair_clean(&back, kind);
        }
        let want = walk_host(&src);
        same(
            &extract(t, &v, kind),
            &want,
            &format!("build --format vhdx {kind}"),
        );
        for f in [&raw, &back] {
            std::fs::remove_file(f).ok();
        }
    }
}

/// `xfs_repair -n` (xfsprogs 6.15's when it is beside the project: it
/// knows every feature xfskit writes) finds the filesystem image clean.
fn repair_clean(fs: &Path, what: &str) {
    let out = sh(&format!(
        "{} -n -f '{}' 2>&1 && echo REPAIR-CLEAN || true",
        common::fixtures::repair_sh(),
        fs.display()
    ));
    assert!(
        out.contains("REPAIR-CLEAN"),
        "{what}: xfs_repair -n:\n{out}"
    );
}

/// Byte range of partition 1 of a GPT disk (sgdisk, which needs no root).
fn gpt_part1(disk: &Path) -> (u64, u64) {
    let out = sh(&format!("sgdisk -i 1 '{}'", disk.display()));
    let num = |key: &str| -> u64 {
        let l = out
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {out}"));
        l[key.len()..]
            .split_whitespace()
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{l}"))
    };
    let first = num("First sector:");
    let last = num("Last sector:");
    (first * 512, (last + 1 - first) * 512)
}

/// Runs `xfskit ARGS` with `IMG` replaced by the image.
fn edit(img: &Path, args: &[&str]) {
    let i = img.to_str().expect("utf-8");
    let a: Vec<String> = args.iter().map(|x| x.replace("IMG", i)).collect();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let r = xfskit(&a, LIMIT);
    assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
}

#[test]
fn edits_in_place_leave_vhdx_clean() {
    let name = "edits_in_place_leave_vhdx_clean";
    if tools_missing(name, &[]) {
        return;
    }
    let tmp = TempDir::new("xfskit-vhdx-edit");
    let t = tmp.path();
    let src = t.join("src");
    make_source(&src);
    let s = src.to_str().expect("utf-8");
    let raw = t.join("bare.img");
    build_300m(s, &raw);
    let ours = t.join("ours.vhdx");
    let r = xfskit(
        &[
            "build",
            "-q",
            "--size",
            "300m",
            "--format",
            "vhdx",
            s,
            ours.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build: {}", r.stderr);
    let theirs = t.join("qemu.vhdx");
    sh(&format!(
        "qemu-img convert -O vhdx -o subformat=dynamic,block_size=1M '{}' '{}'",
        raw.display(),
        theirs.display()
    ));
    // What the edits make of the source tree.
    let model = t.join("model");
    sh(&format!(
        r#"cp -a '{s}' '{m}' && cd '{m}'
mkdir -p new/deep/er
head -c 5000000 /dev/urandom > ../payload
cp ../payload new/deep/payload
rm -f many/file-1*
printf 'first\n' > new/a-copy
"#,
        m = model.display()
    ));
    let payload = t.join("payload");
    let p = payload.to_str().expect("utf-8");
    let a_copy = model.join("new/a-copy");
    let ac = a_copy.to_str().expect("utf-8");
    let want = walk_host(&model);
    for img in [&ours, &theirs] {
        let what = img
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let before = std::fs::metadata(img).expect("stat").len();
        edit(img, &["mkdir", "-p", "IMG", "/new/deep/er"]);
        edit(img, &["cp", p, "IMG:/new/deep/payload"]);
        edit(img, &["rm", "IMG", "/many/file-1*"]);
        edit(img, &["cp", ac, "IMG:/new/a-copy"]);
        qemu_check(img, &what);
        let after = std::fs::metadata(img).expect("stat").len();
        println!("{what}: {before} -> {after} bytes");
        let back = t.join(format!("{what}.raw"));
        sh(&format!(
            "qemu-img convert -O raw '{}' '{}'",
            img.display(),
            back.display()
        ));
        repair_clean(&back, &what);
        let mut got = extract(t, &back, &what);
        // The new files' and the changed directories' times are when the
        // edits ran.
        let mut w = want.clone();
        for e in got.iter_mut().chain(w.iter_mut()) {
            if e.path.starts_with("new") || e.kind == common::Kind::Dir {
                e.mtime_sec = 0;
                e.mtime_nsec = 0;
            }
        }
        same(&got, &w, &format!("{what} edited, read by qemu-img"));
        std::fs::remove_file(&back).ok();
    }
}

/// `xfskit mount` read-write on a dynamic VHDX qemu-img made: files
/// written through FUSE are in the file after the unmount (qemu-img check
/// clean, read back by xfskit from qemu-img's raw conversion); then a
/// server killed with SIGKILL after more writes leaves a file that xfskit
/// still reads (any VHDX or XFS log left behind replayed in memory, the file not
/// changed by reading) and that `qemu-img check -r all` accepts.
#[test]
fn fuse_mount_writes_into_vhdx() {
    let name = "fuse_mount_writes_into_vhdx";
    if common::rwmount::skip_rw(name) || tools_missing(name, &[]) {
        return;
    }
    let tmp = TempDir::new("xfskit-vhdx-fuse");
    let t = tmp.path();
    let src = t.join("src");
    make_source(&src);
    let raw = t.join("bare.img");
    let r = xfskit(
        &[
            "build",
            "-q",
            "--size",
            "300m",
            src.to_str().expect("utf-8"),
            raw.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build: {}", r.stderr);
    let v = t.join("fuse.vhdx");
    sh(&format!(
        "qemu-img convert -O vhdx -o subformat=dynamic '{}' '{}'",
        raw.display(),
        v.display()
    ));
    let payload: Vec<u8> = (0..6_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut m = common::rwmount::RwMount::of_image("vhdx", &v);
    std::fs::create_dir(m.p("fdir")).expect("mkdir");
    std::fs::write(m.p("fdir/payload"), &payload).expect("write");
    std::fs::write(m.p("fdir/small"), b"hello\n").expect("write");
    m.unmount();
    qemu_check(&v, "after the FUSE mount");
    let back = t.join("fuse.raw");
    sh(&format!(
        "qemu-img convert -O raw '{}' '{}'",
        v.display(),
        back.display()
    ));
    repair_clean(&back, "after the FUSE mount");
    let r = xfskit(
        &["cat", back.to_str().expect("utf-8"), "/fdir/small"],
        LIMIT,
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\n"), "{}", r.stderr);
    let out = t.join("payload.out");
    let r = xfskit(
        &[
            "cp",
            &format!("{}:/fdir/payload", v.display()),
            out.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "cp out: {}", r.stderr);
    assert!(
        std::fs::read(&out).expect("read") == payload,
        "payload differs"
    );
    // Killed after writes that allocate new VHDX blocks.
    m.mount(&[]);
    std::fs::write(m.p("fdir/late"), &payload[..3_000_000]).expect("write");
    let f = std::fs::File::open(m.p("fdir/late")).expect("open");
    f.sync_all().expect("fsync");
    drop(f);
    m.kill();
    let before = std::fs::read(&v).expect("read");
    let late = t.join("late.out");
    let r = xfskit(
        &[
            "cp",
            &format!("{}:/fdir/late", v.display()),
            late.to_str().expect("utf-8"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "cp out after SIGKILL: {}", r.stderr);
    assert!(
        std::fs::read(&late).expect("read") == payload[..3_000_000],
        "the fsynced file after SIGKILL"
    );
    assert!(
        std::fs::read(&v).expect("read") == before,
        "reading changed the file"
    );
    let out = sh(&format!("qemu-img check -r all '{}' 2>&1", v.display()));
    assert!(
        out.contains("No errors were found"),
        "qemu-img check -r all:\n{out}"
    );
}

//! VMDK images, with qemu-img as the oracle.
//!
//! Reading: an XFS disk, bare and GPT-partitioned (3 GiB, so that the
//! twoGbMaxExtent forms really split), filled by the kernel (as root) or
//! by `xfskit build`, converted by qemu-img to every VMDK subformat it
//! makes (monolithicSparse, streamOptimized, monolithicFlat,
//! twoGbMaxExtentSparse, twoGbMaxExtentFlat, and compat6): `xfskit
//! extract` of each equals that of the raw disk (and, as root, the
//! kernel's walk); `xfskit parts` sees the partitions.
//!
//! Writing: `xfskit build --format vmdk|vmdk-stream`, bare and `--gpt`:
//! qemu-img check clean, info gives the subformat and size, compare equals
//! the raw build, and the raw conversion is xfs_repair-clean.
//!
//! An OVA package (tar) of a streamOptimized build reads the same.
//!
//! In place: edits into a monolithicSparse VMDK (ours and qemu-img's) and
//! a split sparse one, then qemu-img check and read back through qemu-img
//! convert; streamOptimized refused. SKIP without qemu-img.

mod common;

use common::disks::{sh, sparse_file, xfskit, DevMount, LoopRange};
use common::{diff_walks, is_root, missing_tool, skip, walk_host, Entry, TempDir};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;
const SUBFORMATS: [&str; 5] = [
    "monolithicSparse",
    "streamOptimized",
    "monolithicFlat",
    "twoGbMaxExtentSparse",
    "twoGbMaxExtentFlat",
];

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A small tree of every kind of file.
fn populate(root: &Path) {
    sh(&format!(
        r#"cd '{}'
mkdir -p etc many deep/a/b/c
for i in $(seq 1 300); do echo "entry $i" > many/file-with-a-longer-name-$i; done
head -c 3000000 /dev/urandom > blob
printf 'first\n' > etc/a
ln etc/a etc/a.hard
ln -s ../etc/a deep/link
truncate -s 20M sparse
printf 'tail' | dd of=sparse bs=1 seek=10485760 conv=notrunc status=none
printf 'owned\n' > etc/b; chmod 4755 etc/b
"#,
        root.display()
    ));
}

/// `xfskit extract` of `image` (args before it), walked.
fn extract(tmp: &Path, image: &Path, args: &[&str], what: &str) -> Vec<Entry> {
    let dest = tmp.join(format!("out-{what}"));
    let mut a = vec!["extract", "-q"];
    a.extend_from_slice(args);
    a.extend_from_slice(&[s(image), s(&dest)]);
    let r = xfskit(&a, LIMIT);
    assert_eq!(r.code, 0, "{what}: xfskit {a:?}: {}", r.stderr);
    let w = walk_host(&dest);
    std::fs::remove_dir_all(&dest).ok();
    w
}

fn same(got: &[Entry], want: &[Entry], what: &str) {
    let d = diff_walks(got, want);
    assert!(d.is_empty(), "{what}: differs:\n{}", d.join("\n"));
}

/// Makes the raw disk `disk` of `size` with XFS at `start`..`start+fs`,
/// filled; returns the kernel's walk when root.
fn make_disk(disk: &Path, size: u64, start: u64, fs: u64, tmp: &Path) -> Option<Vec<Entry>> {
    if is_root() {
        let l = LoopRange::new(disk, start, fs);
        sh(&format!("mkfs.xfs -q -f {}", l.dev));
        let mnt = tmp.join("mnt");
        {
            let m = DevMount::new(&l.dev, &mnt, false);
            populate(&m.dir);
        }
        let m = DevMount::new(&l.dev, &mnt, true);
        let w = walk_host(&m.dir);
        drop(m);
        Some(w)
    } else {
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).expect("mkdir");
        populate(&src);
        let fsimg = tmp.join("fs-build.img");
        let sz = format!("{}m", fs / MIB);
        let r = xfskit(&["build", "-q", "--size", &sz, s(&src), s(&fsimg)], LIMIT);
        assert_eq!(r.code, 0, "build: {}", r.stderr);
        sh(&format!(
            "dd if='{}' of='{}' bs=1M oflag=seek_bytes seek={start} conv=notrunc,sparse status=none",
            fsimg.display(),
            disk.display()
        ));
        let _ = size;
        None
    }
}

#[test]
fn qemu_vmdks_read_like_the_raw_disk() {
    let name = "qemu_vmdks_read_like_the_raw_disk";
    let mut tools = vec!["qemu-img", "sgdisk", "partx"];
    if is_root() {
        tools.extend(["mkfs.xfs", "losetup"]);
    }
    if let Some(t) = missing_tool(&tools) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vmdk-read");
    let t = tmp.path();
    let size = 3 << 30;
    // Bare: the whole 3 GiB disk is the filesystem.
    let bare = t.join("bare.raw");
    sparse_file(&bare, size);
    let kernel_bare = make_disk(&bare, size, 0, size, t);
    // GPT: an EFI partition, then XFS in partition 2 to the end.
    let gpt = t.join("gpt.raw");
    sparse_file(&gpt, size);
    sh(&format!(
        "sgdisk -n1:2048:+16M -t1:ef00 -n2:0:0 -t2:8300 '{}' >/dev/null",
        gpt.display()
    ));
    let (s2, n2) = common::disks::partx_range(&gpt, 2);
    let kernel_gpt = make_disk(&gpt, size, s2, n2, t);
    let want_bare = extract(t, &bare, &[], "bare-raw");
    let want_gpt = extract(t, &gpt, &[], "gpt-raw");
    if let (Some(kb), Some(kg)) = (&kernel_bare, &kernel_gpt) {
        same(&want_bare, kb, "bare raw vs the kernel");
        same(&want_gpt, kg, "gpt raw vs the kernel");
    }
    assert!(want_bare.len() > 300, "{} entries", want_bare.len());
    for (raw, want, tag) in [(&bare, &want_bare, "bare"), (&gpt, &want_gpt, "gpt")] {
        let mut made: Vec<(String, std::path::PathBuf)> = Vec::new();
        for sf in SUBFORMATS {
            let dir = t.join(format!("{tag}-{sf}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let v = dir.join("disk.vmdk");
            sh(&format!(
                "qemu-img convert -O vmdk -o subformat={sf} '{}' '{}'",
                raw.display(),
                v.display()
            ));
            made.push((sf.to_string(), v));
        }
        let c6 = t.join(format!("{tag}-compat6.vmdk"));
        sh(&format!(
            "qemu-img convert -O vmdk -o compat6 '{}' '{}'",
            raw.display(),
            c6.display()
        ));
        made.push(("compat6".into(), c6));
        for (sf, v) in &made {
            let what = format!("{tag} {sf}");
            if sf.starts_with("twoGb") {
                let n = std::fs::read_dir(v.parent().expect("dir"))
                    .expect("ls")
                    .count();
                assert!(n >= 3, "{what}: {n} files: the disk was not split");
            }
            let got = extract(t, v, &[], &format!("{tag}-{sf}"));
            same(&got, want, &what);
            println!("{what}: {} entries equal", got.len());
            if tag == "gpt" {
                let r = xfskit(&["parts", "--json", s(v)], LIMIT);
                assert_eq!(r.code, 0, "{what}: parts: {}", r.stderr);
                let j: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
                let p = j["partitions"].as_array().expect("partitions");
                assert_eq!(p.len(), 2, "{what}: {}", r.stdout);
                assert_eq!(p[1]["start_bytes"], s2, "{what}");
                assert_eq!(p[1]["size_bytes"], n2, "{what}");
                assert_eq!(p[1]["content"], "xfs", "{what}");
            }
        }
        let r = xfskit(&["cat", s(&made[1].1), "/etc/a"], LIMIT);
        assert_eq!((r.code, r.stdout.as_str()), (0, "first\n"), "{}", r.stderr);
    }
}

/// `qemu-img info --output=json` of `img`.
fn info(img: &Path) -> serde_json::Value {
    let out = sh(&format!("qemu-img info --output=json '{}'", img.display()));
    serde_json::from_str(&out).expect("qemu-img info prints JSON")
}

fn qemu_check_clean(img: &Path, what: &str) {
    let out = sh(&format!("qemu-img check '{}' 2>&1 || true", img.display()));
    assert!(
        out.contains("No errors were found"),
        "{what}: qemu-img check:\n{out}"
    );
}

/// xfs_repair -n of the filesystem at `start`..`start+len` of `raw`.
fn repair_clean(raw: &Path, start: u64, len: u64, tmp: &Path, what: &str) {
    let whole = start == 0 && len == std::fs::metadata(raw).expect("stat").len();
    let fsimg = if whole {
        raw.to_path_buf()
    } else {
        tmp.join("repair.fs")
    };
    if !whole {
        sh(&format!(
        "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes skip={start} count={len} conv=sparse status=none",
        raw.display(),
        fsimg.display()
    ));
    }
    let out = sh(&format!(
        "{} -n '{}' 2>&1 && echo REPAIR-CLEAN || true",
        common::fixtures::repair_sh(),
        fsimg.display()
    ));
    if !whole {
        std::fs::remove_file(&fsimg).ok();
    }
    assert!(
        out.contains("REPAIR-CLEAN"),
        "{what}: xfs_repair -n:\n{out}"
    );
}

/// Where the filesystem is in the raw disk `raw`: the whole of it, or
/// partition 1 of a GPT disk.
fn fs_range(raw: &Path, gpt: bool) -> (u64, u64) {
    if gpt {
        common::disks::partx_range(raw, 1)
    } else {
        (0, std::fs::metadata(raw).expect("stat").len())
    }
}

#[test]
fn build_writes_vmdks_qemu_accepts() {
    let name = "build_writes_vmdks_qemu_accepts";
    if let Some(t) = missing_tool(&["qemu-img", "partx"]) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vmdk-build");
    let t = tmp.path();
    let src = t.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    populate(&src);
    // More data than the stream writer buffers (32 MiB): grains go out
    // before the build ends, and the superblock's grain is written again.
    sh(&format!(
        "head -c 40000000 /dev/urandom > '{}/big'",
        src.display()
    ));
    let want = extract_src(t, &src);
    for gpt in [false, true] {
        let g: &[&str] = if gpt { &["--gpt"] } else { &[] };
        let tag = if gpt { "gpt" } else { "bare" };
        let raw = t.join(format!("{tag}.raw"));
        let mut a = vec!["build", "-q", "--reproducible"];
        a.extend_from_slice(g);
        a.extend_from_slice(&[s(&src), s(&raw)]);
        let r = xfskit(&a, LIMIT);
        assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
        let raw_len = std::fs::metadata(&raw).expect("stat").len();
        for (fmt, ct) in [
            ("vmdk", "monolithicSparse"),
            ("vmdk-stream", "streamOptimized"),
        ] {
            let what = format!("build {tag} --format {fmt}");
            let v = t.join(format!("{tag}-{fmt}.vmdk"));
            let mut a = vec!["build", "-q", "--reproducible", "--format", fmt];
            a.extend_from_slice(g);
            a.extend_from_slice(&[s(&src), s(&v)]);
            let r = xfskit(&a, LIMIT);
            assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
            qemu_check_clean(&v, &what);
            let i = info(&v);
            assert_eq!(i["format"], "vmdk", "{what}: {i}");
            assert_eq!(
                i["format-specific"]["data"]["create-type"], ct,
                "{what}: {i}"
            );
            let vsize = i["virtual-size"].as_u64().expect("virtual-size");
            assert_eq!(vsize, raw_len.div_ceil(65536) * 65536, "{what}: {i}");
            let cmp = sh(&format!(
                "qemu-img compare -f raw -F vmdk '{}' '{}' 2>&1",
                raw.display(),
                v.display()
            ));
            assert!(cmp.contains("Images are identical"), "{what}: {cmp}");
            let back = t.join("back.raw");
            sh(&format!(
                "qemu-img convert -O raw '{}' '{}'",
                v.display(),
                back.display()
            ));
            let (start, len) = fs_range(&raw, gpt);
            repair_clean(&back, start, len, t, &what);
            same(&extract(t, &v, &[], &format!("{tag}-{fmt}")), &want, &what);
            std::fs::remove_file(&back).ok();
            println!(
                "{what}: clean, equal to the raw build, {} bytes for {vsize}",
                std::fs::metadata(&v).expect("stat").len()
            );
            if fmt == "vmdk-stream" && !gpt {
                // Reproducible: the same bytes again (under the same
                // name, which the descriptor holds).
                let again = t.join("again");
                std::fs::create_dir_all(&again).expect("mkdir");
                let v2 = again.join(v.file_name().expect("name"));
                let r = xfskit(
                    &[
                        "build",
                        "-q",
                        "--reproducible",
                        "--format",
                        fmt,
                        s(&src),
                        s(&v2),
                    ],
                    LIMIT,
                );
                assert_eq!(r.code, 0, "again: {}", r.stderr);
                sh(&format!("cmp '{}' '{}'", v.display(), v2.display()));
                // An OVA package of it (the .ovf first), read in place.
                let ova = t.join("pkg.ova");
                std::fs::write(
                    again.join("pkg.ovf"),
                    "<?xml version=\"1.0\"?>\n<Envelope/>\n",
                )
                .expect("write");
                sh(&format!(
                    "tar -cf '{}' -C '{}' pkg.ovf '{}'",
                    ova.display(),
                    again.display(),
                    v.file_name().and_then(|n| n.to_str()).expect("name")
                ));
                same(&extract(t, &ova, &[], "ova"), &want, "the OVA package");
                println!("{what}: an OVA package of it reads the same");
                std::fs::remove_file(&ova).ok();
                std::fs::remove_file(&v2).ok();
            }
        }
    }
}

/// The source tree as `xfskit build` + `extract` sees it (a raw build).
fn extract_src(t: &Path, src: &Path) -> Vec<Entry> {
    let img = t.join("ref.img");
    let r = xfskit(&["build", "-q", s(src), s(&img)], LIMIT);
    assert_eq!(r.code, 0, "build: {}", r.stderr);
    let w = extract(t, &img, &[], "ref");
    std::fs::remove_file(&img).ok();
    w
}

#[test]
fn edits_in_place_leave_vmdks_clean() {
    let name = "edits_in_place_leave_vmdks_clean";
    if let Some(t) = missing_tool(&["qemu-img"]) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vmdk-edit");
    let t = tmp.path();
    let src = t.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    populate(&src);
    let raw = t.join("fs.raw");
    // Larger than 2 GiB, so that twoGbMaxExtentSparse splits.
    let r = xfskit(&["build", "-q", "--size", "2200m", s(&src), s(&raw)], LIMIT);
    assert_eq!(r.code, 0, "build: {}", r.stderr);
    let ours = t.join("ours.vmdk");
    let r = xfskit(
        &["build", "-q", "--format", "vmdk", s(&src), s(&ours)],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build vmdk: {}", r.stderr);
    let qemu = t.join("qemu.vmdk");
    let split_dir = t.join("split");
    std::fs::create_dir_all(&split_dir).expect("mkdir");
    let split = split_dir.join("split.vmdk");
    let flat_dir = t.join("flat");
    std::fs::create_dir_all(&flat_dir).expect("mkdir");
    let flat = flat_dir.join("flat.vmdk");
    sh(&format!(
        "qemu-img convert -O vmdk '{r}' '{qemu}'
qemu-img convert -O vmdk -o subformat=twoGbMaxExtentSparse '{r}' '{split}'
qemu-img convert -O vmdk -o subformat=monolithicFlat '{r}' '{flat}'",
        r = raw.display(),
        qemu = qemu.display(),
        split = split.display(),
        flat = flat.display(),
    ));
    let blob = t.join("blob.bin");
    sh(&format!(
        "head -c 5000000 /dev/urandom > '{}'",
        blob.display()
    ));
    let blob_bytes = std::fs::read(&blob).expect("read");
    for (img, tag) in [
        (&ours, "ours"),
        (&qemu, "qemu monolithicSparse"),
        (&split, "twoGbMaxExtentSparse"),
        (&flat, "monolithicFlat"),
    ] {
        let i = s(img);
        for args in [
            vec!["mkdir", i, "/edited"],
            vec!["cp", s(&blob), &format!("{i}:/edited/blob")],
            vec!["rm", i, "/etc/a.hard"],
            vec!["mv", i, "/many", "/moved"],
        ] {
            let r = xfskit(&args, LIMIT);
            assert_eq!(r.code, 0, "{tag}: xfskit {args:?}: {}", r.stderr);
        }
        qemu_check_clean(img, tag);
        let back = t.join("back.raw");
        sh(&format!(
            "qemu-img convert -O raw '{}' '{}'",
            img.display(),
            back.display()
        ));
        let r = xfskit(&["cat", s(&back), "/edited/blob"], LIMIT);
        assert_eq!(r.code, 0, "{tag}: cat: {}", r.stderr);
        let got = std::process::Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["cat", s(&back), "/edited/blob"])
            .output()
            .expect("run");
        assert!(got.stdout == blob_bytes, "{tag}: /edited/blob differs");
        let r = xfskit(&["ls", s(&back), "/moved"], LIMIT);
        assert!(
            r.code == 0 && r.stdout.contains("file-with-a-longer-name-7"),
            "{tag}: {}",
            r.stderr
        );
        let r = xfskit(&["ls", s(&back), "/etc"], LIMIT);
        assert!(!r.stdout.contains("a.hard"), "{tag}: {}", r.stdout);
        let len = std::fs::metadata(&back).expect("stat").len();
        repair_clean(&back, 0, len, t, tag);
        std::fs::remove_file(&back).ok();
        println!("{tag}: edited in place, qemu-img check clean, repair clean");
    }
    // streamOptimized is written once.
    let st = t.join("stream.vmdk");
    let r = xfskit(
        &["build", "-q", "--format", "vmdk-stream", s(&src), s(&st)],
        LIMIT,
    );
    assert_eq!(r.code, 0, "build stream: {}", r.stderr);
    let before = std::fs::read(&st).expect("read");
    let r = xfskit(&["mkdir", s(&st), "/x"], LIMIT);
    assert!(
        r.code != 0 && r.stderr.contains("written once"),
        "stream edit: {} {}",
        r.code,
        r.stderr
    );
    assert!(
        std::fs::read(&st).expect("read") == before,
        "the refused edit changed the file"
    );
}

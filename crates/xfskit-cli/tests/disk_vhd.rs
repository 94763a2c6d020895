//! VHD and VDI images, with qemu-img as the oracle.
//!
//! Reading: a bare XFS disk and a GPT disk holding XFS (made by mkfs.xfs
//! and filled by the kernel when root, else by `xfskit build`), converted
//! by qemu-img to dynamic, fixed and force_size VHDs and to dynamic and
//! static VDIs: `xfskit extract` of each equals that of the raw disk,
//! `xfskit parts` sees the same partitions and the virtual size qemu-img
//! reports. A differencing VHD (qemu-img cannot make one: its vpc driver
//! takes no backing file) is laid out here by the specification over a
//! qemu-made parent, holding only the sectors an edit changed: it reads
//! as the edited disk, its parent as the old one.
//!
//! Writing: `xfskit build --reproducible --format vhd|vhd-fixed|vdi`, with
//! and without --gpt: qemu-img reads the expected virtual size (fixed:
//! whole MiB, file = size + 512), `qemu-img check` is clean (VDI; QEMU
//! has no check for VHD), the disk equals the raw build's (the filesystem
//! bytes where the container rounds the disk up), and xfs_repair -n finds
//! the filesystem of `qemu-img convert -O raw` clean.
//!
//! In place: xfskit edits (mkdir, cp of a file that needs new container
//! blocks, rm) on qemu-made and xfskit-made dynamic VHDs, a fixed VHD and
//! VDIs, then qemu-img check (VDI), and the converted raw disk is
//! repair-clean and holds the edits; a differencing VHD is refused.

mod common;

use common::disks::{partx_range, sh, sparse_file, xfskit, DevMount, LoopRange};
use common::fixtures::repair_sh;
use common::{diff_walks, is_root, missing_tool, skip, walk_host, Entry, TempDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;
const FS_BYTES: u64 = 300 * MIB;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Fills `root` with a small tree: many small files, a 3 MB file, links,
/// a sparse file; `special` adds a FIFO and a device (root only).
fn populate(root: &Path, special: bool) {
    sh(&format!(
        r#"cd '{}'
mkdir -p etc usr/lib many
for i in $(seq 1 300); do echo "entry $i" > many/file-with-a-longer-name-$i; done
head -c 3000000 /dev/urandom > usr/blob
printf 'first\n' > etc/a
ln etc/a etc/a.hard
ln -s ../etc/a usr/link
truncate -s 40M usr/sparse
printf 'tail' | dd of=usr/sparse bs=1 seek=20971520 conv=notrunc status=none
{}
"#,
        root.display(),
        if special {
            "mkfifo usr/fifo; mknod usr/null c 1 3; chown 1234:5678 etc/a"
        } else {
            ""
        }
    ));
}

/// The tree `xfskit extract` writes out of `image` (with `args`).
fn extracted(tmp: &Path, image: &Path, args: &[&str]) -> Vec<Entry> {
    let dest = tmp.join("extract-out");
    let _ = std::fs::remove_dir_all(&dest);
    let mut a = vec!["extract", "-q"];
    a.extend_from_slice(args);
    a.extend_from_slice(&[s(image), s(&dest)]);
    let r = xfskit(&a, LIMIT);
    assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
    let w = walk_host(&dest);
    std::fs::remove_dir_all(&dest).ok();
    w
}

fn same_tree(got: &[Entry], want: &[Entry], what: &str) {
    let d = diff_walks(got, want);
    assert!(
        d.is_empty(),
        "{what}: the tree differs from the raw disk's:\n{}",
        d.join("\n")
    );
}

/// `qemu-img info`'s virtual size of `image` read as `fmt`.
fn qemu_size(image: &Path, fmt: &str) -> u64 {
    let out = sh(&format!(
        "qemu-img info -f {fmt} --output=json '{}'",
        image.display()
    ));
    let v: serde_json::Value = serde_json::from_str(&out).expect("qemu-img info JSON");
    v["virtual-size"].as_u64().expect("virtual-size")
}

/// (disk size, [(number, start, size, content)]) as `xfskit parts` sees.
fn parts(image: &Path) -> (u64, Vec<(u64, u64, u64, String)>) {
    let r = xfskit(&["parts", "--json", s(image)], LIMIT);
    assert_eq!(r.code, 0, "parts {}: {}", image.display(), r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("parts JSON");
    let list = v["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["number"].as_u64().unwrap_or(0),
                p["start_bytes"].as_u64().unwrap_or(0),
                p["size_bytes"].as_u64().unwrap_or(0),
                p["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (v["disk_bytes"].as_u64().expect("disk_bytes"), list)
}

/// The two disks of the reading test: bare XFS and GPT with XFS in
/// partition 1, filled by the kernel (root) or by `xfskit build`.
fn make_disks(t: &Path) -> (PathBuf, PathBuf) {
    let bare = t.join("bare.img");
    let gpt = t.join("gpt.img");
    if is_root() {
        sparse_file(&bare, FS_BYTES);
        sh(&format!("mkfs.xfs -q '{}'", bare.display()));
        {
            let l = LoopRange::new(&bare, 0, FS_BYTES);
            let m = DevMount::new(&l.dev, &t.join("mnt"), false);
            populate(&m.dir, true);
        }
        sparse_file(&gpt, FS_BYTES + 2 * MIB);
        sh(&format!(
            "sgdisk -n1:2048:+{}M -t1:8300 '{}' >/dev/null",
            FS_BYTES / MIB,
            gpt.display()
        ));
        let (st, n) = partx_range(&gpt, 1);
        let l = LoopRange::new(&gpt, st, n);
        sh(&format!("mkfs.xfs -q {}", l.dev));
        let m = DevMount::new(&l.dev, &t.join("mnt"), false);
        populate(&m.dir, true);
    } else {
        let src = t.join("src");
        std::fs::create_dir_all(&src).expect("mkdir");
        populate(&src, false);
        for (img, gpt_opt) in [(&bare, false), (&gpt, true)] {
            let mut a = vec!["build", "-q", "--reproducible"];
            if gpt_opt {
                a.push("--gpt");
            }
            a.extend([s(&src), s(img)]);
            let r = xfskit(&a, LIMIT);
            assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
        }
    }
    (bare, gpt)
}

/// qemu-img's conversions that are read: (name, -O, -o).
const CONVERSIONS: [(&str, &str, &str); 5] = [
    ("dynamic.vhd", "vpc", "subformat=dynamic"),
    ("fixed.vhd", "vpc", "subformat=fixed"),
    ("forced.vhd", "vpc", "force_size=on"),
    ("dynamic.vdi", "vdi", "static=off"),
    ("static.vdi", "vdi", "static=on"),
];

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The VHD checksum of `b`, its field at `at` counted as zeros.
fn vhd_checksum(b: &mut [u8], at: usize) {
    b[at..at + 4].fill(0);
    let sum: u32 = b.iter().fold(0u32, |a, &x| a.wrapping_add(u32::from(x)));
    b[at..at + 4].copy_from_slice(&(!sum).to_be_bytes());
}

fn utf16(s: &str, big: bool) -> Vec<u8> {
    s.encode_utf16()
        .flat_map(|u| {
            if big {
                u.to_be_bytes()
            } else {
                u.to_le_bytes()
            }
        })
        .collect()
}

/// Writes `out`, a differencing VHD over the VHD `parent` (which holds the
/// raw disk `before`) that reads as the raw disk `after`, laid out as the
/// VHD specification gives: the parent's footer made type 4, a dynamic
/// header naming the parent by UUID, Unicode name and two locators (an
/// absolute W2ku path that does not exist here, then a relative W2ru one),
/// and a block only where `after` differs, its bitmap marking just the
/// changed sectors (the others are zeros in the file: they must come from
/// the parent).
fn make_differencing(parent: &Path, before: &Path, after: &Path, out: &Path) -> usize {
    let p = std::fs::read(parent).expect("read parent");
    let mut footer = p[p.len() - 512..].to_vec();
    let parent_uuid = footer[68..84].to_vec();
    footer[60..64].copy_from_slice(&4u32.to_be_bytes());
    footer[16..24].copy_from_slice(&512u64.to_be_bytes());
    for (i, b) in footer[68..84].iter_mut().enumerate() {
        *b ^= 0x5a ^ i as u8;
    }
    vhd_checksum(&mut footer, 64);
    // The size the parent's footer gives (its CHS: made by "qemu").
    let chs = u64::from(u16::from_be_bytes([footer[56], footer[57]]))
        * u64::from(footer[58])
        * u64::from(footer[59]);
    let size = chs * 512;
    let block = 2 * MIB as usize;
    let entries = (size as usize).div_ceil(block);
    let bat_bytes = (entries * 4).div_ceil(512) * 512;
    let loc_w2ku = 1536 + bat_bytes;
    let loc_w2ru = loc_w2ku + 512;
    let first_block = loc_w2ru + 512;
    let mut h = vec![0u8; 1024];
    h[..8].copy_from_slice(b"cxsparse");
    h[8..16].fill(0xFF);
    h[16..24].copy_from_slice(&1536u64.to_be_bytes());
    h[24..28].copy_from_slice(&0x0001_0000u32.to_be_bytes());
    h[28..32].copy_from_slice(&(entries as u32).to_be_bytes());
    h[32..36].copy_from_slice(&(block as u32).to_be_bytes());
    h[40..56].copy_from_slice(&parent_uuid);
    let name = utf16("base.vhd", true);
    h[64..64 + name.len()].copy_from_slice(&name);
    let w2ku = utf16("C:\\nowhere\\base.vhd", false);
    let w2ru = utf16(".\\base.vhd", false);
    for (i, (code, data, at)) in [(b"W2ku", &w2ku, loc_w2ku), (b"W2ru", &w2ru, loc_w2ru)]
        .into_iter()
        .enumerate()
    {
        let l = 576 + 24 * i;
        h[l..l + 4].copy_from_slice(code);
        h[l + 4..l + 8].copy_from_slice(&512u32.to_be_bytes());
        h[l + 8..l + 12].copy_from_slice(&(data.len() as u32).to_be_bytes());
        h[l + 16..l + 24].copy_from_slice(&(at as u64).to_be_bytes());
    }
    vhd_checksum(&mut h, 36);
    let mut img = vec![0u8; first_block];
    img[..512].copy_from_slice(&footer);
    img[512..1536].copy_from_slice(&h);
    img[1536..1536 + bat_bytes].fill(0xFF);
    img[loc_w2ku..loc_w2ku + w2ku.len()].copy_from_slice(&w2ku);
    img[loc_w2ru..loc_w2ru + w2ru.len()].copy_from_slice(&w2ru);
    let old = std::fs::read(before).expect("read before");
    let new = std::fs::read(after).expect("read after");
    let get = |d: &[u8], i: usize| -> Vec<u8> {
        let mut b = vec![0u8; block];
        let lo = (i * block).min(d.len());
        let hi = ((i + 1) * block).min(d.len());
        b[..hi - lo].copy_from_slice(&d[lo..hi]);
        b
    };
    let mut allocated = 0;
    for i in 0..entries {
        let (o, n) = (get(&old, i), get(&new, i));
        if o == n {
            continue;
        }
        let at = img.len();
        let mut bitmap = vec![0u8; 512];
        let mut data = vec![0u8; block];
        for sct in 0..block / 512 {
            let r = sct * 512..(sct + 1) * 512;
            if o[r.clone()] != n[r.clone()] {
                bitmap[sct / 8] |= 0x80 >> (sct % 8);
                data[r.clone()].copy_from_slice(&n[r]);
            }
        }
        img.extend_from_slice(&bitmap);
        img.extend_from_slice(&data);
        let e = (at / 512) as u32;
        img[1536 + 4 * i..1536 + 4 * i + 4].copy_from_slice(&e.to_be_bytes());
        allocated += 1;
    }
    img.extend_from_slice(&footer);
    assert_eq!(be32(&img, 60), 4);
    std::fs::write(out, &img).expect("write the differencing VHD");
    allocated
}

#[test]
fn qemu_made_vhd_and_vdi_read_like_the_raw_disk() {
    let name = "qemu_made_vhd_and_vdi_read_like_the_raw_disk";
    let mut tools = vec!["qemu-img", "mkfs.xfs"];
    if is_root() {
        tools.extend(["sgdisk", "partx", "losetup"]);
    }
    if let Some(t) = missing_tool(&tools) {
        return skip(name, &format!("{t} is not installed"));
    }
    if !is_root() {
        println!("not root: the disks are filled by xfskit build, not by the kernel");
    }
    let tmp = TempDir::new("xfskit-vhd-read");
    let t = tmp.path();
    let (bare, gpt) = make_disks(t);
    for disk in [&bare, &gpt] {
        let want = extracted(t, disk, &[]);
        assert!(want.len() > 300, "{} entries", want.len());
        let (_, want_parts) = parts(disk);
        for (file, fmt, opts) in CONVERSIONS {
            let img = t.join(file);
            sh(&format!(
                "qemu-img convert -O {fmt} -o {opts} '{}' '{}'",
                disk.display(),
                img.display()
            ));
            let what = format!("{} as {file}", disk.display());
            same_tree(&extracted(t, &img, &[]), &want, &what);
            let (size, got_parts) = parts(&img);
            assert_eq!(size, qemu_size(&img, fmt), "{what}: virtual size");
            assert_eq!(got_parts, want_parts, "{what}: partitions");
            if disk == &gpt {
                assert!(
                    got_parts.iter().any(|p| p.0 == 1 && p.3 == "xfs"),
                    "{what}: {got_parts:?}"
                );
                same_tree(
                    &extracted(t, &img, &["--partition", "1"]),
                    &want,
                    &format!("{what}, --partition 1"),
                );
            }
            std::fs::remove_file(&img).ok();
            println!(
                "{what}: equal, {size} bytes, {} partitions",
                got_parts.len()
            );
        }
    }

    // A differencing VHD over the bare disk as it was, holding an edit.
    let before = t.join("before.img");
    sh(&format!(
        "cp --sparse=always '{}' '{}'",
        bare.display(),
        before.display()
    ));
    let host = t.join("new.txt");
    std::fs::write(&host, b"in the child only\n").expect("write");
    for args in [
        vec!["mkdir", s(&bare), "/later"],
        vec!["cp", s(&host), &format!("{}:/later/new", s(&bare))],
        vec!["rm", "-r", s(&bare), "/many"],
    ] {
        let r = xfskit(&args, LIMIT);
        assert_eq!(r.code, 0, "xfskit {args:?}: {}", r.stderr);
    }
    let base = t.join("base.vhd");
    sh(&format!(
        "qemu-img convert -O vpc '{}' '{}'",
        before.display(),
        base.display()
    ));
    let child = t.join("child.vhd");
    let blocks = make_differencing(&base, &before, &bare, &child);
    assert!(blocks > 0, "the edit changed no block");
    same_tree(
        &extracted(t, &child, &[]),
        &extracted(t, &bare, &[]),
        "differencing VHD",
    );
    same_tree(
        &extracted(t, &base, &[]),
        &extracted(t, &before, &[]),
        "its parent",
    );
    let r = xfskit(&["cat", s(&child), "/later/new"], LIMIT);
    assert_eq!(r.stdout, "in the child only\n", "{}", r.stderr);
    // Writing into it is refused; the parent's UUID is checked.
    let r = xfskit(&["mkdir", s(&child), "/x"], LIMIT);
    assert!(
        r.code != 0 && r.stderr.contains("differencing"),
        "mkdir in a differencing VHD: {} {}",
        r.code,
        r.stderr
    );
    let mut c = std::fs::read(&child).expect("read");
    c[512 + 40] ^= 0xff;
    let mut h = c[512..1536].to_vec();
    vhd_checksum(&mut h, 36);
    c[512..1536].copy_from_slice(&h);
    std::fs::write(&child, &c).expect("write");
    let r = xfskit(&["ls", s(&child), "/"], LIMIT);
    assert!(
        r.code != 0 && r.stderr.contains("UUID"),
        "a parent of another UUID: {} {}",
        r.code,
        r.stderr
    );
    println!("differencing VHD: {blocks} blocks of its own, reads as the edited disk");
}

/// The filesystem bytes of the raw disk `raw` (the partition `part`, or
/// the whole disk) written to `out`, for xfs_repair and comparison.
fn fs_of(raw: &Path, gpt: bool, out: &Path) -> (u64, u64) {
    let (start, size) = if gpt {
        partx_range(raw, 1)
    } else {
        (0, std::fs::metadata(raw).expect("stat").len())
    };
    sh(&format!(
        "dd if='{}' of='{}' bs=1M iflag=skip_bytes,count_bytes skip={start} count={size} conv=sparse status=none",
        raw.display(),
        out.display()
    ));
    (start, size)
}

fn repair_clean(fs: &Path, what: &str) {
    let out = sh(&format!(
        "{} -n '{}' 2>&1 && echo REPAIR-CLEAN || true",
        repair_sh(),
        fs.display()
    ));
    assert!(
        out.contains("REPAIR-CLEAN"),
        "{what}: xfs_repair -n:\n{out}"
    );
}

#[test]
fn built_vhd_and_vdi_are_what_qemu_expects() {
    let name = "built_vhd_and_vdi_are_what_qemu_expects";
    if let Some(t) = missing_tool(&["qemu-img", "xfs_repair", "partx", "cmp"]) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vhd-build");
    let t = tmp.path();
    let src = t.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    populate(&src, false);
    for gpt in [false, true] {
        let build = |fmt: &str, out: &Path| {
            let mut a = vec!["build", "-q", "--reproducible", "--format", fmt];
            if gpt {
                a.push("--gpt");
            }
            a.extend([s(&src), s(out)]);
            let r = xfskit(&a, LIMIT);
            assert_eq!(r.code, 0, "xfskit {a:?}: {}", r.stderr);
        };
        let raw = t.join(format!("raw-{gpt}.img"));
        build("raw", &raw);
        let raw_fs = t.join(format!("raw-fs-{gpt}.img"));
        let (_, raw_fs_size) = fs_of(&raw, gpt, &raw_fs);
        let raw_len = std::fs::metadata(&raw).expect("stat").len();
        let want = extracted(t, &raw, &[]);
        for (fmt, qfmt) in [("vhd", "vpc"), ("vhd-fixed", "vpc"), ("vdi", "vdi")] {
            let what = format!("build --format {fmt}{}", if gpt { " --gpt" } else { "" });
            let img = t.join(format!("out.{fmt}"));
            build(fmt, &img);
            let size = qemu_size(&img, qfmt);
            let flen = std::fs::metadata(&img).expect("stat").len();
            assert!(size >= raw_len, "{what}: {size} < the raw {raw_len}");
            match fmt {
                "vhd-fixed" => {
                    assert_eq!(size % MIB, 0, "{what}: not whole MiB");
                    assert_eq!(flen, size + 512, "{what}: file size");
                }
                "vdi" => {
                    assert_eq!(size % MIB, 0, "{what}: not whole MiB");
                    let out = sh(&format!("qemu-img check -f vdi '{}' 2>&1", img.display()));
                    assert!(out.contains("No errors"), "{what}: qemu-img check:\n{out}");
                }
                _ => assert!(flen < raw_len / 4, "{what}: {flen} bytes, not sparse"),
            }
            assert_eq!(parts(&img).0, size, "{what}: xfskit's disk size");
            let conv = t.join("conv.img");
            sh(&format!(
                "qemu-img convert -f {qfmt} -O raw '{}' '{}'",
                img.display(),
                conv.display()
            ));
            if size == raw_len {
                let out = sh(&format!(
                    "qemu-img compare -f raw -F {qfmt} '{}' '{}'",
                    raw.display(),
                    img.display()
                ));
                assert!(out.contains("identical"), "{what}: {out}");
            }
            let conv_fs = t.join("conv-fs.img");
            let (_, conv_fs_size) = fs_of(&conv, gpt, &conv_fs);
            // The disk may be rounded up, the partition with it; the
            // filesystem is the raw build's.
            let n = raw_fs_size.min(conv_fs_size);
            sh(&format!(
                "cmp -n {n} '{}' '{}'",
                raw_fs.display(),
                conv_fs.display()
            ));
            repair_clean(&conv_fs, &what);
            same_tree(&extracted(t, &img, &[]), &want, &what);
            for f in [&img, &conv, &conv_fs] {
                std::fs::remove_file(f).ok();
            }
            println!("{what}: {size} bytes, equal to the raw build, repair-clean");
        }
    }
}

#[test]
fn edits_in_place_keep_vhd_and_vdi_clean() {
    let name = "edits_in_place_keep_vhd_and_vdi_clean";
    if let Some(t) = missing_tool(&["qemu-img", "xfs_repair"]) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vhd-edit");
    let t = tmp.path();
    let src = t.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    populate(&src, false);
    let raw = t.join("raw.img");
    let r = xfskit(&["build", "-q", s(&src), s(&raw)], LIMIT);
    assert_eq!(r.code, 0, "build: {}", r.stderr);
    let big = t.join("big.bin");
    sh(&format!(
        "head -c 5000000 /dev/urandom > '{}'",
        big.display()
    ));
    let big_bytes = std::fs::read(&big).expect("read");
    let mut images: Vec<(PathBuf, &str)> = Vec::new();
    for (file, fmt, opts) in [
        ("q-dynamic.vhd", "vpc", "subformat=dynamic"),
        ("q-fixed.vhd", "vpc", "subformat=fixed"),
        ("q-dynamic.vdi", "vdi", "static=off"),
        ("q-static.vdi", "vdi", "static=on"),
    ] {
        let img = t.join(file);
        sh(&format!(
            "qemu-img convert -O {fmt} -o {opts} '{}' '{}'",
            raw.display(),
            img.display()
        ));
        images.push((img, fmt));
    }
    for (fmt, qfmt) in [("vhd", "vpc"), ("vdi", "vdi")] {
        let img = t.join(format!("x.{fmt}"));
        let r = xfskit(&["build", "-q", "--format", fmt, s(&src), s(&img)], LIMIT);
        assert_eq!(r.code, 0, "build --format {fmt}: {}", r.stderr);
        images.push((img, qfmt));
    }
    for (img, qfmt) in &images {
        let what = img
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let before = std::fs::metadata(img).expect("stat").len();
        for args in [
            vec!["mkdir", s(img), "/new"],
            vec!["cp", s(&big), &format!("{}:/new/big", s(img))],
            vec!["rm", "-r", s(img), "/many"],
            vec!["chmod", s(img), "600", "/etc/a"],
        ] {
            let r = xfskit(&args, LIMIT);
            assert_eq!(r.code, 0, "{what}: xfskit {args:?}: {}", r.stderr);
        }
        let after = std::fs::metadata(img).expect("stat").len();
        if !what.contains("fixed") && !what.contains("static") {
            assert!(
                after > before,
                "{what}: no block was allocated ({before} bytes)"
            );
        }
        if *qfmt == "vdi" {
            let out = sh(&format!("qemu-img check -f vdi '{}' 2>&1", img.display()));
            assert!(out.contains("No errors"), "{what}: qemu-img check:\n{out}");
        }
        let r = xfskit(&["check", s(img)], LIMIT);
        assert_eq!(r.code, 0, "{what}: xfskit check: {}{}", r.stdout, r.stderr);
        let conv = t.join("conv.img");
        sh(&format!(
            "qemu-img convert -f {qfmt} -O raw '{}' '{}'",
            img.display(),
            conv.display()
        ));
        repair_clean(&conv, &what);
        let r = xfskit(&["cat", s(&conv), "/new/big"], LIMIT);
        assert!(r.code == 0, "{what}: cat: {}", r.stderr);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_xfskit"))
            .args(["cat", s(&conv), "/new/big"])
            .output()
            .expect("run xfskit");
        assert!(
            out.stdout == big_bytes,
            "{what}: /new/big differs after qemu-img convert"
        );
        let r = xfskit(&["ls", s(&conv), "/"], LIMIT);
        assert!(!r.stdout.contains("many"), "{what}: /many is still there");
        let r = xfskit(&["stat", "--json", s(&conv), "/etc/a"], LIMIT);
        assert!(
            r.stdout.contains("\"mode\": \"100600\""),
            "{what}: {}",
            r.stdout
        );
        std::fs::remove_file(&conv).ok();
        println!("{what}: edited in place ({before} -> {after} bytes), clean");
    }
}

/// The read-write FUSE mount of a dynamic VHD and a VDI (built by xfskit):
/// files written through the mount land in the container, whose raw
/// conversion is repair-clean and shows the kernel the mount's tree.
#[test]
fn the_read_write_mount_writes_into_vhd_and_vdi() {
    let name = "the_read_write_mount_writes_into_vhd_and_vdi";
    if common::rwmount::skip_rw(name) {
        return;
    }
    if let Some(t) = missing_tool(&["qemu-img"]) {
        return skip(name, &format!("{t} is not installed"));
    }
    let tmp = TempDir::new("xfskit-vhd-mount");
    let t = tmp.path();
    let src = t.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    populate(&src, false);
    for (fmt, qfmt) in [("vhd", "vpc"), ("vdi", "vdi")] {
        let img = t.join(format!("m.{fmt}"));
        let r = xfskit(&["build", "-q", "--format", fmt, s(&src), s(&img)], LIMIT);
        assert_eq!(r.code, 0, "build --format {fmt}: {}", r.stderr);
        let mut m = common::rwmount::RwMount::of_image(&format!("vhd-{fmt}"), &img);
        sh(&format!(
            "cd '{}' && mkdir -p through/the/mount && cp -r etc usr/lib through/ && head -c 4000000 /dev/urandom > through/new.bin && rm -rf many && sync",
            m.mnt.display()
        ));
        let want = walk_host(&m.mnt);
        m.unmount();
        drop(m);
        let conv = t.join("conv.img");
        sh(&format!(
            "qemu-img convert -f {qfmt} -O raw '{}' '{}'",
            img.display(),
            conv.display()
        ));
        repair_clean(&conv, fmt);
        common::assert_kernel_sees(&conv, &t.join("kernel"), &want, true, fmt);
        std::fs::remove_file(&conv).ok();
        println!("{fmt}: the mount's writes are in the container, clean");
    }
}

//! `xfskit grow`, against the kernel's xfs_growfs: an image is grown with
//! xfskit and a copy with xfs_growfs on a loop mount (as root), to the same
//! size; the primary superblock, and the AGF, AGI, AGFL, free-space
//! histogram and reverse mappings of the old last AG and of every new AG
//! must print the same in xfs_db 7.2 (UUIDs, CRCs and LSNs aside; the
//! secondary superblocks' counters hold the kernel's in-core reservations,
//! so only their geometry is compared). `xfs_repair -n` 7.2 is clean, the
//! kernel mounts the result, shows the space in df, and a file larger than
//! the old filesystem written there reads back. Refusals: shrink, v4, a
//! bad SIZE, a partition that is not the last one.

mod common;

use common::disks::{lvm_layout, lvm_make, partx_range, sh, LoopRange, LVM, LVM_CONF};
use common::fixtures::{output_text, tool_72, xfskit_output, xfsprogs_72_or_skip};
use common::{require_root, skip, TempDir};
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mkfs(mk: &Path, img: &Path, size: &str, extra: &[&str]) {
    sh(&format!("rm -f {0}; truncate -s {size} {0}", s(img)));
    let mut args = vec!["-q", "-f"];
    args.extend_from_slice(extra);
    args.push(s(img));
    let o = std::process::Command::new(mk).args(&args).output().unwrap();
    assert!(o.status.success(), "mkfs: {}", output_text(&o));
}

fn field(bin: &Path, img: &Path, cmds: &[&str], name: &str) -> u64 {
    let mut a = vec!["-r"];
    for c in cmds {
        a.extend(["-c", c]);
    }
    a.push(s(img));
    let out = tool_72(bin, "xfs_db", &a);
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {out}"))
}

/// What is compared: xfs_db's prints of the primary superblock, the old
/// last AG and the new AGs, with the fields that differ by nature left out.
fn headers(bin: &Path, img: &Path, from_ag: u64, rmap: bool) -> String {
    let agcount = field(bin, img, &["sb 0", "p agcount"], "agcount");
    let mut a: Vec<String> = vec![
        "-r".into(),
        "-c".into(),
        "sb 0".into(),
        "-c".into(),
        "p".into(),
    ];
    let mut c = |x: String| {
        a.push("-c".into());
        a.push(x);
    };
    c("freesp".into());
    for ag in from_ag..agcount {
        for x in ["agf", "agi", "agfl"] {
            c(format!("{x} {ag}"));
            c("p".into());
        }
        c(format!("freesp -a {ag}"));
        c(format!("sb {ag}"));
        c("p dblocks agcount agblocks".into());
        if rmap {
            c(format!("agf {ag}"));
            c("addr rmaproot".into());
            c("p".into());
        }
    }
    a.push(s(img).into());
    let args: Vec<&str> = a.iter().map(|x| x.as_str()).collect();
    tool_72(bin, "xfs_db", &args)
        .lines()
        .filter(|l| !l.contains("uuid") && !l.contains("crc") && !l.contains("lsn"))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn xfskit_grow(args: &[&str]) -> std::process::Output {
    let mut a = vec!["grow"];
    a.extend_from_slice(args);
    xfskit_output(&a)
}

fn repair_clean(bin: &Path, img: &Path, what: &str) {
    let o = std::process::Command::new(bin.join("xfs_repair"))
        .args(["-n", s(img)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{what}: xfs_repair -n: {}",
        output_text(&o)
    );
}

fn against_kernel(test: &str, mk: &Path, extra: &[&str], size0: &str, size1: &str, rmap: bool) {
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if !require_root(test) {
        return;
    }
    let t = TempDir::new(test);
    let (o, k, x) = (t.path().join("o"), t.path().join("k"), t.path().join("x"));
    mkfs(mk, &o, size0, extra);
    let old_ag = field(&bin, &o, &["sb 0", "p agcount"], "agcount");
    sh(&format!(
        "cp --sparse=always {0} {1}; cp --sparse=always {0} {2}",
        s(&o),
        s(&k),
        s(&x)
    ));
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    sh(&format!(
        "truncate -s {size1} {k}; mount -o loop {k} {m}; xfs_growfs {m} >/dev/null; umount {m}",
        k = s(&k),
        m = s(&mnt)
    ));
    let out = xfskit_grow(&[s(&x), size1]);
    assert!(out.status.success(), "{test}: {}", output_text(&out));
    let (hk, hx) = (
        headers(&bin, &k, old_ag - 1, rmap),
        headers(&bin, &x, old_ag - 1, rmap),
    );
    if hk != hx {
        let diff = sh(&format!(
            "diff <(printf %s '{}') <(printf %s '{}') || true",
            hk.replace('\'', ""),
            hx.replace('\'', "")
        ));
        panic!("{test}: xfskit grow differs from xfs_growfs:\n{diff}");
    }
    assert_eq!(
        std::fs::metadata(&k).unwrap().len(),
        std::fs::metadata(&x).unwrap().len()
    );
    repair_clean(&bin, &x, test);
    // The kernel mounts it; the space is there and usable.
    let dblocks = field(&bin, &x, &["sb 0", "p dblocks"], "dblocks");
    let bs = field(&bin, &x, &["sb 0", "p blocksize"], "blocksize");
    let old = field(&bin, &o, &["sb 0", "p dblocks"], "dblocks") * bs;
    let df = sh(&format!(
        "mount -o loop {x} {m}; df -B1 --output=size {m} | tail -1; \
         head -c {n} /dev/urandom > {m}/big; md5sum {m}/big | cut -d' ' -f1 > {t}/sum; umount {m}; \
         mount -o loop {x} {m}; md5sum {m}/big | cut -d' ' -f1 | cmp - {t}/sum; umount {m}",
        x = s(&x),
        m = s(&mnt),
        n = old + (old / 4),
        t = s(t.path())
    ));
    let size: u64 = df.trim().parse().unwrap();
    assert!(
        size > old && size <= dblocks * bs,
        "{test}: df {size}, old {old}"
    );
    repair_clean(&bin, &x, &format!("{test} after the kernel wrote"));
}

#[test]
fn grow_72_defaults_like_xfs_growfs() {
    // The last AG short (agcount=3): it is extended, then new AGs added.
    let Some(bin) = xfsprogs_72_or_skip("grow_72") else {
        return;
    };
    against_kernel(
        "grow_72",
        &bin.join("mkfs.xfs"),
        &["-d", "agcount=3"],
        "300M",
        "1000M",
        true,
    );
}

#[test]
fn grow_72_fill_the_file_like_xfs_growfs() {
    // Whole AGs before, a short new last AG after.
    let Some(bin) = xfsprogs_72_or_skip("grow_72_fill") else {
        return;
    };
    against_kernel(
        "grow_72_fill",
        &bin.join("mkfs.xfs"),
        &[],
        "320M",
        "1111M",
        true,
    );
}

#[test]
fn grow_61_defaults_like_xfs_growfs() {
    against_kernel(
        "grow_61",
        Path::new("/usr/sbin/mkfs.xfs"),
        &[],
        "300M",
        "+700M",
        false,
    );
}

#[test]
fn grow_refusals_and_noop() {
    let Some(bin) = xfsprogs_72_or_skip("grow_refusals") else {
        return;
    };
    let t = TempDir::new("grow_refusals");
    let img = t.path().join("img");
    mkfs(&bin.join("mkfs.xfs"), &img, "300M", &[]);
    let code = |args: &[&str]| xfskit_grow(args).status.code();
    assert_eq!(code(&[s(&img), "200M"]), Some(3), "shrink");
    assert_eq!(code(&[s(&img), "12Q"]), Some(2), "bad size");
    assert_eq!(code(&[s(&img), "+x"]), Some(2), "bad size");
    let o = xfskit_grow(&[s(&img)]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("unchanged"),
        "{}",
        output_text(&o)
    );
    // A piece under 64 blocks after the last whole AG is left out.
    let agblocks = field(&bin, &img, &["sb 0", "p agblocks"], "agblocks");
    let agcount = field(&bin, &img, &["sb 0", "p agcount"], "agcount");
    let want = (agcount + 2) * agblocks * 4096 + 40 * 4096;
    let o = xfskit_grow(&[s(&img), &want.to_string()]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("too few for an AG"),
        "{}",
        output_text(&o)
    );
    assert_eq!(
        field(&bin, &img, &["sb 0", "p dblocks"], "dblocks"),
        (agcount + 2) * agblocks
    );
    repair_clean(&bin, &img, "grown with a piece left out");
    // v4.
    let v4 = t.path().join("v4");
    mkfs(
        Path::new("/usr/sbin/mkfs.xfs"),
        &v4,
        "300M",
        &["-m", "crc=0"],
    );
    let o = xfskit_grow(&[s(&v4), "1G"]);
    assert_eq!(o.status.code(), Some(3), "v4: {}", output_text(&o));
    // An MBR disk whose XFS partition is not the last one.
    let disk = t.path().join("disk");
    sh(&format!(
        "truncate -s 800M {0}; printf 'start=2048, size=320M, type=83\\nsize=320M, type=83\\n' | sfdisk -q {0} >/dev/null",
        s(&disk)
    ));
    let o = xfskit_output(&["mkfs", "--partition", "1", s(&disk)]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = xfskit_grow(&["--partition", "1", s(&disk), "2G"]);
    assert_eq!(o.status.code(), Some(3), "mbr: {}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not the last one"),
        "{}",
        output_text(&o)
    );
}

/// An MBR disk of 400 MiB grown to 1 GiB: the partition fills the disk
/// (sfdisk reads the new size and verifies the table), the filesystem
/// fills the partition, xfs_repair -n 7.2 is clean on the partition and
/// its file reads back.
#[test]
fn grow_mbr_disk() {
    let test = "grow_mbr_disk";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if let Some(t) = common::missing_tool(&["sfdisk"]) {
        return skip(test, &format!("no {t}"));
    }
    let t = TempDir::new(test);
    let (disk, part, file) = (
        t.path().join("disk"),
        t.path().join("part"),
        t.path().join("file"),
    );
    sh(&format!(
        "truncate -s 400M {0}; echo 'start=2048, type=83' | sfdisk -q {0} >/dev/null",
        s(&disk)
    ));
    let o = xfskit_output(&["mkfs", "--partition", "1", s(&disk)]);
    assert!(o.status.success(), "{}", output_text(&o));
    std::fs::write(&file, b"before the grow\n").unwrap();
    let o = xfskit_output(&["cp", s(&file), &format!("{}:/hello", s(&disk))]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = xfskit_grow(&[s(&disk), "1G"]);
    assert!(o.status.success(), "{}", output_text(&o));
    let sectors = (1u64 << 30) / 512 - 2048;
    let dump = sh(&format!("sfdisk -d {0}; sfdisk -V {0}", s(&disk)));
    assert!(
        dump.contains(&format!("start=        2048, size=     {sectors}")),
        "{dump}"
    );
    let info = String::from_utf8_lossy(&xfskit_output(&["info", s(&disk)]).stdout).into_owned();
    assert!(
        info.contains(&format!("blocks={},", sectors * 512 / 4096)),
        "{info}"
    );
    let o = xfskit_output(&["cat", s(&disk), "/hello"]);
    assert_eq!(o.stdout, b"before the grow\n", "{}", output_text(&o));
    sh(&format!(
        "dd if={} of={} bs=1M skip=1 status=none",
        s(&disk),
        s(&part)
    ));
    repair_clean(&bin, &part, "the grown MBR partition");
}

/// The issue's case: a qcow2 GPT disk of 2 GiB grown to 20 GiB; the
/// kernel mounts the partition (qemu-img convert to raw, a loop device at
/// its offset), df shows the space, 3 GiB can be allocated there, the old
/// files read back; qemu-img check and sgdisk -v are clean.
#[test]
fn grow_qcow2_gpt_2g_to_20g() {
    let test = "grow_qcow2_gpt";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if let Some(t) = common::missing_tool(&["qemu-img", "sgdisk"]) {
        return skip(test, &format!("no {t}"));
    }
    let t = TempDir::new(test);
    let (src, img, raw) = (
        t.path().join("src"),
        t.path().join("d.qcow2"),
        t.path().join("d.raw"),
    );
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("hello"), b"before the grow\n").unwrap();
    let o = xfskit_output(&[
        "build",
        s(&src),
        s(&img),
        "--gpt",
        "--format",
        "qcow2",
        "--size",
        "2046m",
        "-q",
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = xfskit_grow(&[s(&img), "20G"]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("warning: growing"),
        "{}",
        output_text(&o)
    );
    let info = sh(&format!(
        "qemu-img info {0} | grep 'virtual size'; qemu-img check {0} >/dev/null",
        s(&img)
    ));
    assert!(info.contains("21474836480 bytes"), "{info}");
    sh(&format!("qemu-img convert -O raw {} {}", s(&img), s(&raw)));
    let v = sh(&format!("sgdisk -v {}", s(&raw)));
    assert!(v.contains("No problems found"), "{v}");
    let parts = String::from_utf8_lossy(&xfskit_output(&["parts", s(&img)]).stdout).into_owned();
    assert!(parts.contains("21473771008"), "{parts}");
    let info = String::from_utf8_lossy(&xfskit_output(&["info", s(&img)]).stdout).into_owned();
    assert!(
        info.contains(&format!("blocks={},", 21473771008u64 / 4096)),
        "{info}"
    );
    let o = xfskit_output(&["cat", s(&img), "/hello"]);
    assert_eq!(o.stdout, b"before the grow\n", "{}", output_text(&o));
    if !require_root(test) {
        return;
    }
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = sh(&format!(
        "lo=$(losetup -f --show -o 1048576 --sizelimit 21473771008 {raw}); \
         {b}/xfs_repair -n $lo >/dev/null 2>&1 || {{ losetup -d $lo; echo REPAIR; exit 1; }}; \
         mount $lo {m}; df -B1 --output=size {m} | tail -1; cat {m}/hello; \
         fallocate -l 3G {m}/big; echo new > {m}/new; umount {m}; \
         mount $lo {m}; stat -c %s {m}/big; cat {m}/new; umount {m}; \
         {b}/xfs_repair -n $lo >/dev/null 2>&1 || echo REPAIR-AFTER; losetup -d $lo",
        raw = s(&raw),
        m = s(&mnt),
        b = s(&bin)
    ));
    let lines: Vec<&str> = out.lines().collect();
    let size: u64 = lines[0].trim().parse().unwrap();
    assert!(size > 20_000_000_000, "{out}");
    assert_eq!(
        &lines[1..],
        ["before the grow", "3221225472", "new"],
        "{out}"
    );
}

/// An LVM volume in the last GPT partition of a raw disk, grown from 800
/// MiB to 1200 MiB: the partition, then the PV, then the volume (root,
/// 320 MiB with swap after it, so the new extents come as a second
/// segment, as lvextend gives them), then XFS. The lvm2 tools read the new
/// metadata (vgck, pvs, lvs), sgdisk -v is clean, xfs_repair -n 7.2 is
/// clean on the volume laid end to end as lvs reports its segments, and
/// the file reads back.
#[test]
fn grow_lvm_volume() {
    let test = "grow_lvm_volume";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if !require_root(test) {
        return;
    }
    let tools = ["sgdisk", "partx", "losetup", "pvcreate", "lvcreate"];
    if let Some(t) = common::missing_tool(&tools) {
        return skip(test, &format!("no {t}"));
    }
    let t = TempDir::new(test);
    let (disk, fsimg, file, vol) = (
        t.path().join("disk"),
        t.path().join("fs"),
        t.path().join("file"),
        t.path().join("vol"),
    );
    let vg = format!("xfskit_grow_{}", std::process::id());
    let lv = format!("{vg}/root");
    sh(&format!(
        "truncate -s 800M {0}; sgdisk -n1:2048:+8M -t1:ef00 -n2:0:0 -t2:8e00 {0} >/dev/null",
        s(&disk)
    ));
    let (s2, n2) = partx_range(&disk, 2);
    let (pe_start, ext, segs) = {
        let l = LoopRange::new(&disk, s2, n2);
        let d = &l.dev;
        lvm_make(d, &vg, &[("root", "320M"), ("swap", "64M")]);
        lvm_layout(d, &vg, "root")
    };
    assert_eq!(segs, [(0, 80, 0)], "root before the grow");
    mkfs(&bin.join("mkfs.xfs"), &fsimg, "320M", &[]);
    sh(&format!(
        "dd if={} of={} bs=1M oflag=seek_bytes seek={} conv=notrunc status=none",
        s(&fsimg),
        s(&disk),
        s2 + pe_start
    ));
    std::fs::write(&file, b"before the grow\n").unwrap();
    let o = xfskit_output(&["cp", "--lv", &lv, s(&file), &format!("{}:/hello", s(&disk))]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = xfskit_grow(&["--lv", &lv, s(&disk), "1200M"]);
    assert!(o.status.success(), "{}", output_text(&o));
    let v = sh(&format!("sgdisk -v {}", s(&disk)));
    assert!(v.contains("No problems found"), "{v}");
    let (s2b, n2b) = partx_range(&disk, 2);
    assert_eq!(s2b, s2);
    assert!(
        n2b > n2 + 390 * 1024 * 1024,
        "partition 2: {n2} -> {n2b} bytes"
    );
    let (pv_size, segs) = {
        let l = LoopRange::new(&disk, s2, n2b);
        let d = &l.dev;
        let pv_size = sh(&format!(
            "export {LVM}; vgck {LVM_CONF} {vg} 2>/dev/null; pvs {LVM_CONF} --noheadings --units b --nosuffix -o pv_size {d} 2>/dev/null"
        ));
        (pv_size, lvm_layout(d, &vg, "root").2)
    };
    let pe_count = (n2b - pe_start) / ext;
    assert_eq!(pv_size.trim(), (pe_count * ext).to_string(), "pv_size");
    // root's old extents, swap's 16 after them, then the rest for root.
    assert_eq!(
        segs,
        [(0, 80, 0), (80, pe_count - 96, 96)],
        "root after the grow"
    );
    let lv_bytes = (pe_count - 16) * ext;
    for (start, size, pe) in &segs {
        sh(&format!(
            "dd if={} of={} bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes skip={} count={} seek={} conv=notrunc status=none",
            s(&disk),
            s(&vol),
            s2 + pe_start + pe * ext,
            size * ext,
            start * ext
        ));
    }
    repair_clean(&bin, &vol, "the grown volume");
    // The kernel mounts the volume (laid end to end in a file: this
    // kernel has no device-mapper) and writes past the old size.
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = sh(&format!(
        "mount -o loop {v} {m}; cat {m}/hello; fallocate -l 600M {m}/big; stat -c %s {m}/big; umount {m}",
        v = s(&vol),
        m = s(&mnt)
    ));
    assert_eq!(out, "before the grow\n629145600\n", "{out}");
    repair_clean(&bin, &vol, "the grown volume after the kernel wrote");
    let info = String::from_utf8_lossy(&xfskit_output(&["info", "--lv", &lv, s(&disk)]).stdout)
        .into_owned();
    assert!(
        info.contains(&format!("blocks={},", lv_bytes / 4096)),
        "{info}"
    );
    let o = xfskit_output(&["cat", "--lv", &lv, s(&disk), "/hello"]);
    assert_eq!(o.stdout, b"before the grow\n", "{}", output_text(&o));
}

/// An LVM volume whose PV is the whole disk (no partition table), grown
/// from 600 MiB to 1 GiB: the disk file, the PV and the volume (its one
/// segment extended), then XFS; the lvm2 tools read it and xfs_repair -n
/// 7.2 is clean on the volume.
#[test]
fn grow_lvm_volume_on_a_whole_disk_pv() {
    let test = "grow_lvm_volume_on_a_whole_disk_pv";
    let Some(bin) = xfsprogs_72_or_skip(test) else {
        return;
    };
    if !require_root(test) {
        return;
    }
    if let Some(t) = common::missing_tool(&["losetup", "pvcreate", "lvcreate"]) {
        return skip(test, &format!("no {t}"));
    }
    let t = TempDir::new(test);
    let (disk, fsimg, vol) = (
        t.path().join("disk"),
        t.path().join("fs"),
        t.path().join("vol"),
    );
    let vg = format!("xfskit_whole_{}", std::process::id());
    let lv = format!("{vg}/data");
    sh(&format!("truncate -s 600M {}", s(&disk)));
    let (pe_start, _, segs) = {
        let l = LoopRange::new(&disk, 0, 600 << 20);
        let d = &l.dev;
        lvm_make(d, &vg, &[("data", "320M")]);
        lvm_layout(d, &vg, "data")
    };
    assert_eq!(segs, [(0, 80, 0)]);
    mkfs(&bin.join("mkfs.xfs"), &fsimg, "320M", &[]);
    sh(&format!(
        "dd if={} of={} bs=1M oflag=seek_bytes seek={pe_start} conv=notrunc status=none",
        s(&fsimg),
        s(&disk)
    ));
    let o = xfskit_grow(&[s(&disk), "1G"]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 1 << 30);
    let segs = {
        let l = LoopRange::new(&disk, 0, 1 << 30);
        sh(&format!("export {LVM}; vgck {LVM_CONF} {vg} 2>/dev/null"));
        lvm_layout(&l.dev, &vg, "data").2
    };
    let extents = ((1u64 << 30) - pe_start) / (4 << 20);
    assert_eq!(segs, [(0, extents, 0)], "data after the grow");
    sh(&format!(
        "dd if={} of={} bs=1M iflag=skip_bytes,count_bytes skip={pe_start} count={} status=none",
        s(&disk),
        s(&vol),
        extents * (4 << 20)
    ));
    repair_clean(&bin, &vol, "the grown whole-disk volume");
    let info = String::from_utf8_lossy(&xfskit_output(&["info", "--lv", &lv, s(&disk)]).stdout)
        .into_owned();
    assert!(
        info.contains(&format!("blocks={},", extents * (4 << 20) / 4096)),
        "{info}"
    );
}

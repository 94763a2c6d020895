//! Writing realtime files on classic realtime sections and on realtime
//! groups (mkfs.xfs 6.15's `-m metadir=1,rmapbt=0,reflink=0`, and with
//! Linux 6.18's defaults their realtime rmap and refcount btrees; one
//! group and several, a file that spans groups): a directory with
//! RTINHERIT, files made in it (realtime) and outside (data device), data
//! written, overwritten, appended, preallocated, punched, truncated and
//! removed, with realtime extents of one block and of several. Every
//! workload is checked against a model of the files' bytes (read back
//! with the realtime device), by xfskit's check and by xfs_repair -n -r
//! 6.15 (the kernel here has no realtime support).

mod namespace_common;
mod write_common;

use std::collections::BTreeMap;
use std::path::Path;

use namespace_common::{meta, rt_dir_and_file};
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::{Fs, Ino, OpenOptions};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..len).map(|_| r.next() as u8).collect()
}

/// Files and what they must hold.
type Model = BTreeMap<String, (Ino, Vec<u8>)>;

fn write(fs: &Fs, m: &mut Model, name: &str, off: usize, data: &[u8]) {
    let (ino, v) = m.get_mut(name).unwrap();
    fs.write_at(*ino, off as u64, data).unwrap();
    if v.len() < off + data.len() {
        v.resize(off + data.len(), 0);
    }
    v[off..off + data.len()].copy_from_slice(data);
}

fn truncate(fs: &Fs, m: &mut Model, name: &str, size: usize) {
    let (ino, v) = m.get_mut(name).unwrap();
    fs.truncate(*ino, size as u64).unwrap();
    v.resize(size, 0);
}

fn punch(fs: &Fs, m: &mut Model, name: &str, off: usize, len: usize) {
    let (ino, v) = m.get_mut(name).unwrap();
    fs.punch_hole(*ino, off as u64, len as u64).unwrap();
    let end = (off + len).min(v.len());
    if off < end {
        v[off..end].fill(0);
    }
}

/// The workload: returns the model of every file left.
fn workload(fs: &Fs, seed: u64) -> Model {
    let root = fs.geometry().root_ino;
    let bs = fs.geometry().block_size as usize;
    let rtdir = fs
        .create(root, b"rt", &NodeKind::Dir, &meta(0o755, 0))
        .unwrap();
    fs.set_realtime(rtdir, true).unwrap();
    let mut m = Model::new();
    for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let ino = fs
            .create(
                rtdir,
                name.as_bytes(),
                &NodeKind::File { size: 0 },
                &meta(0o644, 0),
            )
            .unwrap();
        assert!(
            fs.inode(ino).unwrap().is_realtime(),
            "{name} is not realtime"
        );
        m.insert(name.to_string(), (ino, Vec::new()));
        let n = [1, bs - 7, 3 * bs + 100, 40 * bs, 300_000][i];
        write(fs, &mut m, name, 0, &pattern(seed + i as u64, n));
    }
    // A file outside keeps its data on the data device.
    let plain = fs
        .create(root, b"plain", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    assert!(!fs.inode(plain).unwrap().is_realtime());
    m.insert("/plain".into(), (plain, Vec::new()));
    write(fs, &mut m, "/plain", 0, &pattern(seed + 9, 5 * bs));
    // An empty file made realtime by hand; one with data refuses.
    let own = fs
        .create(root, b"own", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    fs.set_realtime(own, true).unwrap();
    assert!(fs.inode(own).unwrap().is_realtime());
    m.insert("/own".into(), (own, Vec::new()));
    write(fs, &mut m, "/own", 2 * bs + 3, &pattern(seed + 10, 5000));
    assert!(fs.set_realtime(plain, true).is_err());
    // Overwrites (partial blocks), appends, a write past the end.
    write(fs, &mut m, "c", 100, &pattern(seed + 11, bs));
    write(fs, &mut m, "d", 5 * bs + 1, &pattern(seed + 12, 7 * bs));
    write(fs, &mut m, "a", 1, &pattern(seed + 13, 2 * bs));
    write(fs, &mut m, "b", 50 * bs + 9, &pattern(seed + 14, 33));
    // Preallocation reads as zeros, then written in part.
    let (e, _) = m["e"].clone();
    fs.fallocate(e, 400_000, 64 * 1024, false).unwrap();
    m.get_mut("e").unwrap().1.resize(400_000 + 64 * 1024, 0);
    write(fs, &mut m, "e", 410_000, &pattern(seed + 15, 3000));
    // Punches (whole and partial realtime extents), truncations.
    punch(fs, &mut m, "d", 3 * bs + 5, 20 * bs);
    punch(fs, &mut m, "e", 10, 100);
    truncate(fs, &mut m, "d", 30 * bs + 17);
    truncate(fs, &mut m, "c", 2 * bs - 1);
    truncate(fs, &mut m, "c", 6 * bs);
    truncate(fs, &mut m, "b", 0);
    // Removal frees everything.
    fs.unlink(rtdir, b"a").unwrap();
    m.remove("a");
    if fs.geometry().has_rtgroups() {
        // A file larger than a group takes extents in several groups,
        // never one that crosses a group's end.
        let g = fs.geometry();
        let group = (g.rg_blocks() * u64::from(g.block_size)) as usize;
        let n = if g.rg_count > 1 {
            group + 3 * bs + 5
        } else {
            group / 2
        };
        let ino = fs
            .create(rtdir, b"f", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        m.insert("f".into(), (ino, Vec::new()));
        write(fs, &mut m, "f", 0, &pattern(seed + 20, n));
        punch(fs, &mut m, "f", 5 * bs, 9 * bs);
        truncate(fs, &mut m, "f", n - 2 * bs);
        if g.rg_count > 1 {
            let ip = fs.inode(ino).unwrap();
            let ext = xfskit::inode::extents(fs, &ip, xfskit::inode::Fork::Data).unwrap();
            let groups: std::collections::BTreeSet<u32> =
                ext.iter().map(|e| g.rtb_split(e.start.0).0).collect();
            assert!(groups.len() > 1, "f stays in one group: {ext:?}");
            for e in &ext {
                assert!(g.rtb_range_valid(e.start.0, e.len), "{e:?} crosses a group");
            }
            // New files start in the groups in turn (the kernel's rotor).
            let first: std::collections::BTreeSet<u32> = ["c", "d", "e"]
                .iter()
                .filter_map(|n| {
                    let ip = fs.inode(m[*n].0).unwrap();
                    let ext = xfskit::inode::extents(fs, &ip, xfskit::inode::Fork::Data).unwrap();
                    ext.first().map(|e| g.rtb_split(e.start.0).0)
                })
                .collect();
            assert!(first.len() > 1, "every new file starts in group {first:?}");
        }
    }
    m
}

fn verify(img: &Path, rt: &Path, m: &Model, what: &str) {
    let fs = Fs::open(
        img,
        &OpenOptions {
            rtdev: Some(rt.to_path_buf()),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    for (name, (ino, want)) in m {
        let ip = fs.inode(*ino).unwrap();
        assert_eq!(ip.size, want.len() as u64, "{what}: size of {name}");
        let mut got = vec![0xeeu8; want.len()];
        let n = xfskit::inode::read_at(&fs, &ip, 0, &mut got).unwrap();
        assert_eq!(n, want.len(), "{what}: {name} short read");
        assert!(got == *want, "{what}: {name} differs");
    }
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    assert!(
        report.problems.is_empty() && report.unchecked.is_empty(),
        "{what}: xfskit check: {:#?} unchecked {:?}",
        report.problems,
        report.unchecked
    );
}

fn run_case(tag: &str, opts: &str, seed: u64) {
    run_case_with(tag, opts, seed, mkfs_rt);
}

type Mkfs = fn(&Path, u64, &Path, u64, &str);

fn run_case_with(tag: &str, opts: &str, seed: u64, mkfs: Mkfs) {
    if skip_without_615(&format!("write_realtime {tag}")) {
        return;
    }
    let s = Scratch::new(&format!("rtw-{tag}"));
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    mkfs(&img, 512 << 20, &rt, 64 << 20, opts);
    let fresh = Fs::open(&img, &OpenOptions::default())
        .unwrap()
        .geometry()
        .rt_frextents;
    let m = {
        let fs = open_rw_rt(&img, &rt);
        let m = workload(&fs, seed);
        fs.sync().unwrap();
        m
    };
    verify(&img, &rt, &m, tag);
    assert_repair_615_rt_clean(&img, &rt);
    // Everything freed: the section is whole again.
    {
        let fs = open_rw_rt(&img, &rt);
        for (name, (ino, _)) in &m {
            let _ = name;
            fs.truncate(*ino, 0).unwrap();
        }
        fs.sync().unwrap();
    }
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    let g = fs.geometry();
    assert_eq!(
        g.rt_frextents, fresh,
        "{tag}: not every extent is free again"
    );
    if !g.has_rtgroups() {
        assert_eq!(g.rt_frextents, g.rt_extents, "{tag}");
    }
    drop(fs);
    assert_repair_615_rt_clean(&img, &rt);
}

#[test]
fn realtime_files_written_with_one_block_extents() {
    run_case("rext1", "", 1);
}

#[test]
fn realtime_files_written_with_four_block_extents() {
    run_case("rext4", "-r extsize=16k", 2);
}

#[test]
fn realtime_files_written_with_1k_blocks() {
    run_case("1k", "-b size=1024 -r extsize=12k", 3);
}

#[test]
fn realtime_group_files_written_in_one_group() {
    let o = "-m metadir=1,rmapbt=0,reflink=0 -r rgcount=1";
    run_case_with("rg1", o, 4, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_in_four_groups_of_four_block_extents() {
    // 20 MiB groups: the last of the 64 MiB is short.
    let o = "-m metadir=1,rmapbt=0,reflink=0 -r rgsize=20m -r extsize=16k";
    run_case_with("rg3", o, 5, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_with_1k_blocks_in_six_groups() {
    let o = "-b size=1024 -m metadir=1,rmapbt=0,reflink=0 -r rgsize=12m -r extsize=8k";
    run_case_with("rg5-1k", o, 6, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_with_rmap_in_one_group() {
    // Linux 6.18's defaults with a metadata directory: a realtime rmap
    // btree per group.
    let o = format!("{} -r rgcount=1", conf_618_metadir(false));
    run_case_with("rg1-rmap", &o, 7, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_with_rmap_in_four_groups_of_four_block_extents() {
    // mkfs.xfs refuses reflink with a realtime extent size of its own.
    let o = format!("{} -r rgsize=20m -r extsize=16k", conf_618_metadir(false));
    run_case_with("rg3-rmap", &o, 8, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_with_rmap_and_1k_blocks_in_six_groups() {
    let o = format!(
        "{} -b size=1024 -r rgsize=12m -r extsize=8k",
        conf_618_metadir(false)
    );
    run_case_with("rg5-1k-rmap", &o, 9, mkfs_615_rtg);
}

#[test]
fn realtime_group_files_written_with_rmap_and_reflink_in_six_groups() {
    // Realtime reflink wants 4 KiB blocks and one-block realtime extents.
    let o = format!("{} -r rgsize=12m", conf_618_metadir(true));
    run_case_with("rg6-rmap-reflink", &o, 10, mkfs_615_rtg);
}

/// Writing needs the realtime device; without it the open is refused.
#[test]
fn writing_needs_the_realtime_device() {
    let s = Scratch::new("rtw-nodev");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    mkfs_rt(&img, 512 << 20, &rt, 16 << 20, "");
    let e = Fs::open_rw(&img, &OpenOptions::default()).err().unwrap();
    assert!(e.to_string().contains("--rtdev"), "{e}");
}

/// An extent-free intent for realtime blocks (EFI_RT, as the kernel logs
/// one when it frees realtime extents on realtime groups) without its
/// done item: recovery frees the extents in their group's bitmap and
/// summary and logs an EFD_RT; xfs_repair -n -r 6.15 then finds the image
/// clean and every extent but the realtime superblock's free. An EFI_RT
/// past its group's end is refused, naming the intent.
#[test]
fn unfinished_realtime_extent_free_is_recovered() {
    if skip_without_615("write_realtime efi_rt") {
        return;
    }
    let s = Scratch::new("rtw-efi-rt");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let opts = "-m metadir=1,rmapbt=0,reflink=0 -r rgcount=2 -r extsize=8k";
    mkfs_615_rtg(&img, 512 << 20, &rt, 16 << 20, opts);
    let fresh = Fs::open(&img, &OpenOptions::default())
        .unwrap()
        .geometry()
        .rt_frextents;
    let (ino, ext) = {
        let fs = open_rw_rt(&img, &rt);
        let (_, ino) = rt_dir_and_file(&fs, b"v");
        fs.write_at(ino, 0, &pattern(77, 40 << 10)).unwrap();
        fs.sync().unwrap();
        let ip = fs.inode(ino).unwrap();
        let ext = xfskit::inode::extents(&fs, &ip, xfskit::inode::Fork::Data).unwrap();
        assert_eq!(ext.len(), 1, "{ext:?}");
        (ino, ext[0])
    };
    // The file lets go of its extent behind the filesystem's back: the
    // extents stay allocated in the bitmap, owned by nobody.
    drop_data_fork_615(&img, &rt, ino.0);
    let bad = s.0.join("bad.img");
    for (path, start, len) in [
        (&img, ext.start.0, ext.len as u32),
        // Past the end of group 1.
        (&bad, ext.start.0 | (1 << 20), 1 << 14),
    ] {
        if path == &bad {
            std::fs::copy(s.0.join("clean.img"), &bad).unwrap();
        } else {
            std::fs::copy(&img, s.0.join("clean.img")).unwrap();
        }
        let fs = Fs::open_rw(
            path,
            &OpenOptions {
                rtdev: Some(rt.clone()),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let mut tp = fs.trans().unwrap();
        tp.log_raw_item(vec![efi_rt_item(0xef12, start, len)]);
        tp.commit().unwrap();
        fs.force_log().unwrap();
        // Dropped without sync: the EFI_RT is only in the log.
    }
    let report = Fs::recover(&img, &xfskit::log::recover::RecoverOptions::default()).unwrap();
    assert_eq!(report.efi_extents_freed, 1, "{report:?}");
    assert_repair_615_rt_clean(&img, &rt);
    let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
    assert_eq!(
        fs.geometry().rt_frextents,
        fresh,
        "the extent is not free again"
    );
    drop(fs);
    let e = Fs::recover(&bad, &xfskit::log::recover::RecoverOptions::default())
        .expect_err("an EFI_RT past its group is refused");
    assert!(e.to_string().contains("extent-free intent"), "{e}");
}

/// Bad input on realtime groups: a bitmap block whose header lies gives
/// an error naming the group and the file block (never a panic), and a
/// section with no free extent left refuses the write with ENOSPC and
/// leaves a filesystem xfs_repair -n -r 6.15 accepts.
#[test]
fn realtime_group_damage_and_full_groups_are_errors() {
    if skip_without_615("write_realtime rg-bad") {
        return;
    }
    let s = Scratch::new("rtw-rg-bad");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let opts = "-m metadir=1,rmapbt=0,reflink=0 -r rgcount=2";
    mkfs_615_rtg(&img, 512 << 20, &rt, 8 << 20, opts);
    let (dir, file) = {
        let fs = open_rw_rt(&img, &rt);
        let (dir, file) = rt_dir_and_file(&fs, b"f");
        fs.sync().unwrap();
        (dir, file)
    };
    // More than the section holds: what fits is written, then ENOSPC.
    {
        let fs = open_rw_rt(&img, &rt);
        let e = fs.write_at(file, 0, &pattern(5, 9 << 20)).unwrap_err();
        assert!(matches!(e, xfskit::Error::NoSpace(_)), "{e}");
        assert!(e.to_string().contains("realtime groups"), "{e}");
        fs.unlink(dir, b"f").unwrap();
        fs.sync().unwrap();
    }
    assert_repair_615_rt_clean(&img, &rt);
    // Group 0's first bitmap block loses its magic.
    let daddr = {
        let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
        let g = fs.geometry().clone();
        let look = |d: Ino, name: &[u8]| {
            let ip = fs.inode(d).unwrap();
            xfskit::dir::lookup(&fs, &ip, name).unwrap().unwrap()
        };
        let groups = look(g.metadir_ino, b"rtgroups");
        let bm = fs.inode(look(groups, b"0.bitmap")).unwrap();
        let ext = xfskit::inode::extents(&fs, &bm, xfskit::inode::Fork::Data).unwrap();
        g.fsb_to_daddr(ext[0].start).0
    };
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(b"XXXX", daddr * 512).unwrap();
    }
    let fs = open_rw_rt(&img, &rt);
    let f = fs
        .create(dir, b"g", &NodeKind::File { size: 0 }, &meta(0o644, 0))
        .unwrap();
    let e = fs.write_at(f, 0, &pattern(6, 10_000)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("realtime group 0")
            && text.contains("file block 0")
            && text.contains("magic"),
        "{text}"
    );
}

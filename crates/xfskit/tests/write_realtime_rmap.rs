//! The realtime rmap btree of realtime groups (mkfs.xfs 6.15 with Linux
//! 6.18's defaults, 1 KiB blocks so its blocks fill fast): a file with
//! hundreds of separate realtime extents grows the group's tree out of
//! its inode into blocks (two levels below the root), its records equal
//! the file's mappings one for one, and removing the file brings the tree
//! back to an empty leaf root in the inode with no blocks; xfskit's check
//! and xfs_repair -n -r 6.15 find every state clean, and xfs_db 6.15
//! dumps the records we wrote. With reflink, a realtime extent that the
//! group's refcount btree says is shared (as the kernel leaves it after a
//! clone) is not freed: the error names the group and the block.

mod namespace_common;
mod write_common;

use std::path::Path;

use namespace_common::{meta, rt_dir_and_file};
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::inode::Fork;
use xfskit::{Fs, Ino, OpenOptions};

fn look(fs: &Fs, dir: Ino, name: &str) -> Ino {
    let ip = fs.inode(dir).unwrap();
    xfskit::dir::lookup(fs, &ip, name.as_bytes())
        .unwrap()
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// The inode of `/rtgroups/0.<name>`.
fn group_file(fs: &Fs, name: &str) -> Ino {
    let g = look(fs, fs.geometry().metadir_ino, "rtgroups");
    look(fs, g, &format!("0.{name}"))
}

/// (root level, root entries, blocks) of group 0's rmap btree.
fn rmap_shape(fs: &Fs) -> (u16, u16, u64) {
    let ip = fs.inode(group_file(fs, "rmap")).unwrap();
    let r = &ip.data_fork;
    (
        u16::from_be_bytes([r[0], r[1]]),
        u16::from_be_bytes([r[2], r[3]]),
        ip.nblocks,
    )
}

fn rt_open(img: &Path, rt: &Path) -> Fs {
    Fs::open(
        img,
        &OpenOptions {
            rtdev: Some(rt.to_path_buf()),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

fn assert_check_clean(img: &Path, rt: &Path, what: &str) {
    let fs = rt_open(img, rt);
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    assert!(
        report.problems.is_empty() && report.unchecked.is_empty(),
        "{what}: xfskit check: {:#?} unchecked {:?}",
        report.problems,
        report.unchecked
    );
    drop(fs);
    assert_repair_615_rt_clean(img, rt);
}

#[test]
fn rtrmap_grows_into_blocks_and_back_into_the_inode() {
    if skip_without_615("write_realtime_rmap grow") {
        return;
    }
    let s = Scratch::new("rtw-rmap-grow");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let o = format!(
        "{} -b size=1024 -r rgcount=1 -r extsize=4k",
        conf_618_metadir(false)
    );
    mkfs_615_rtg(&img, 512 << 20, &rt, 16 << 20, &o);
    // 600 realtime extents of 4 blocks kept, 600 punched between them.
    let n = 1200u64;
    let rx = 4u64;
    let (dir, file) = {
        let fs = open_rw_rt(&img, &rt);
        // Only the realtime superblock's record: a leaf root in the inode.
        assert_eq!(rmap_shape(&fs), (0, 1, 0), "a fresh tree");
        let bs = u64::from(fs.geometry().block_size);
        let (dir, file) = rt_dir_and_file(&fs, b"f");
        let data: Vec<u8> = (0..n * rx * bs).map(|i| (i % 251) as u8).collect();
        fs.write_at(file, 0, &data).unwrap();
        // Every other realtime extent goes: one record per extent left.
        for x in (1..n).step_by(2) {
            fs.punch_hole(file, x * rx * bs, rx * bs).unwrap();
        }
        fs.sync().unwrap();
        (dir, file)
    };
    {
        let fs = open_rw_rt(&img, &rt);
        let (level, _, blocks) = rmap_shape(&fs);
        assert!(
            level >= 2 && blocks > 10,
            "tree level {level}, {blocks} blocks"
        );
        // One record per extent of the file, as the kernel keeps them.
        let ip = fs.inode(file).unwrap();
        let ext = xfskit::inode::extents(&fs, &ip, Fork::Data).unwrap();
        assert_eq!(ext.len() as u64, n / 2);
        let g = fs.geometry().clone();
        // The realtime superblock's extent (owner "fs"), then the file's.
        let mut want: Vec<(u32, u32, u64, u64)> = vec![(0, g.rt_extsize, (-3i64) as u64, 0)];
        want.extend(ext.iter().map(|e| {
            let (_, b) = g.rtb_split(e.start.0);
            (b as u32, e.len as u32, file.0, e.offset)
        }));
        let mut tp = fs.trans().unwrap();
        let got = xfskit::alloc::rt_rmap_records(&mut tp, 0).unwrap();
        drop(tp);
        assert_eq!(got.len(), want.len());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!("record {i}: {:?}, want {:?}", got[i], want[i]);
        }
        fs.sync().unwrap();
    }
    assert_check_clean(&img, &rt, "grown");
    // xfs_db 6.15 reads the tree we wrote: every record of the file.
    let (ok, out) = run_615(
        "xfs_db",
        &[
            "-R",
            &rt.display().to_string(),
            "-c",
            "path -m /rtgroups/0.rmap",
            "-c",
            "btdump",
            &img.display().to_string(),
        ],
    );
    assert!(ok, "xfs_db btdump: {out}");
    // Records print as [startblock,blockcount,owner,offset,flags...].
    let owners = out.matches(&format!(",{rx},{},", file.0)).count();
    assert!(
        owners as u64 == n / 2,
        "xfs_db shows {owners} records of inode {}:\n{}",
        file.0,
        out.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    // Half the extents go, then the rest: the tree shrinks back.
    {
        let fs = open_rw_rt(&img, &rt);
        let bs = u64::from(fs.geometry().block_size);
        fs.truncate(file, n / 3 * rx * bs).unwrap();
        fs.sync().unwrap();
    }
    assert_check_clean(&img, &rt, "truncated");
    {
        let fs = open_rw_rt(&img, &rt);
        fs.unlink(dir, b"f").unwrap();
        fs.sync().unwrap();
        assert_eq!(rmap_shape(&fs), (0, 1, 0), "the tree is a leaf root again");
    }
    assert_check_clean(&img, &rt, "emptied");
}

#[test]
fn freeing_a_shared_realtime_extent_is_refused() {
    if skip_without_615("write_realtime_rmap shared") {
        return;
    }
    let s = Scratch::new("rtw-rmap-shared");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let o = format!("{} -r rgcount=1", conf_618_metadir(true));
    mkfs_615_rtg(&img, 512 << 20, &rt, 16 << 20, &o);
    let (dir, file, rgbno, refc) = {
        let fs = open_rw_rt(&img, &rt);
        let (dir, file) = rt_dir_and_file(&fs, b"f");
        fs.write_at(file, 0, &[7u8; 40 << 10]).unwrap();
        let other = fs
            .create(dir, b"g", &NodeKind::File { size: 0 }, &meta(0o644, 0))
            .unwrap();
        fs.write_at(other, 0, &[8u8; 12 << 10]).unwrap();
        fs.unlink(dir, b"g").unwrap();
        fs.sync().unwrap();
        let ip = fs.inode(file).unwrap();
        let ext = xfskit::inode::extents(&fs, &ip, Fork::Data).unwrap();
        let (_, b) = fs.geometry().rtb_split(ext[0].start.0);
        (dir, file, b as u32, group_file(&fs, "refcount"))
    };
    assert_check_clean(&img, &rt, "written and freed with reflink");
    // The refcount btree's leaf root gets one record: the file's 4th and
    // 5th blocks are shared by 2 owners (what a clone would leave).
    {
        use std::os::unix::fs::FileExt;
        let fs = Fs::open(&img, &OpenOptions::default()).unwrap();
        let g = fs.geometry().clone();
        drop(fs);
        let at = g.ino_to_bytes(refc);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&img)
            .unwrap();
        let mut raw = vec![0u8; g.inode_size as usize];
        f.read_exact_at(&mut raw, at).unwrap();
        assert_eq!(
            &raw[176..180],
            &[0, 0, 0, 0],
            "the refcount tree is not empty"
        );
        raw[178..180].copy_from_slice(&1u16.to_be_bytes());
        raw[180..184].copy_from_slice(&(rgbno + 3).to_be_bytes());
        raw[184..188].copy_from_slice(&2u32.to_be_bytes());
        raw[188..192].copy_from_slice(&2u32.to_be_bytes());
        xfs_format::crc::stamp(&mut raw, 100);
        f.write_all_at(&raw, at).unwrap();
    }
    let fs = open_rw_rt(&img, &rt);
    // Blocks past the shared ones are freed as usual.
    let bs = u64::from(fs.geometry().block_size);
    fs.truncate(file, 9 * bs).unwrap();
    let e = fs.truncate(file, 0).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("realtime group 0")
            && text.contains(&format!("block {}", rgbno + 3))
            && text.contains("shared"),
        "{text}"
    );
    let e = fs.unlink(dir, b"f").and_then(|_| fs.sync()).unwrap_err();
    assert!(e.to_string().contains("shared"), "{e}");
}

/// Files written, their realtime rmap btree grown into blocks, the log
/// forced and the filesystem dropped without writeback: recovery replays
/// the rmap inode's logged root (the kernel's in-core form) and the
/// tree's blocks, and the result is the written one.
#[test]
fn rtrmap_changes_come_back_from_the_log() {
    if skip_without_615("write_realtime_rmap replay") {
        return;
    }
    let s = Scratch::new("rtw-rmap-replay");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let o = format!("{} -b size=1024 -r rgcount=2", conf_618_metadir(false));
    mkfs_615_rtg(&img, 512 << 20, &rt, 16 << 20, &o);
    let want = {
        let fs = open_rw_rt(&img, &rt);
        let bs = u64::from(fs.geometry().block_size);
        let (_, file) = rt_dir_and_file(&fs, b"f");
        fs.write_at(file, 0, &vec![5u8; (300 * 4 * bs) as usize])
            .unwrap();
        for x in (1..300).step_by(2) {
            fs.punch_hole(file, x * 4 * bs, 4 * bs).unwrap();
        }
        fs.force_log().unwrap();
        let mut tp = fs.trans().unwrap();
        let want = xfskit::alloc::rt_rmap_records(&mut tp, 0).unwrap();
        drop(tp);
        assert!(rmap_shape(&fs).0 >= 1, "the tree stayed in the inode");
        want
        // Dropped without sync: the changes are only in the log.
    };
    let report = Fs::recover(&img, &xfskit::log::recover::RecoverOptions::default()).unwrap();
    assert!(report.stats.inodes_replayed > 0, "{report:?}");
    {
        let fs = open_rw_rt(&img, &rt);
        let mut tp = fs.trans().unwrap();
        assert_eq!(xfskit::alloc::rt_rmap_records(&mut tp, 0).unwrap(), want);
    }
    assert_check_clean(&img, &rt, "replayed");
}

/// A realtime rmap intent (RUI_RT) and a realtime extent-free intent
/// without their done items, as the kernel leaves them when it crashes
/// while freeing a realtime file's extent: recovery removes the reverse
/// mapping from the group's tree and frees the extent, and xfs_repair
/// -n -r 6.15 finds the result clean.
#[test]
fn unfinished_realtime_rmap_intent_is_recovered() {
    if skip_without_615("write_realtime_rmap rui_rt") {
        return;
    }
    use xfs_format::log_intent::XFS_RMAP_EXTENT_UNMAP;
    let s = Scratch::new("rtw-rmap-rui");
    let (img, rt) = (s.0.join("d.img"), s.0.join("rt.img"));
    let o = format!("{} -r rgcount=2", conf_618_metadir(false));
    mkfs_615_rtg(&img, 512 << 20, &rt, 16 << 20, &o);
    let (ino, ext) = {
        let fs = open_rw_rt(&img, &rt);
        let (_, ino) = rt_dir_and_file(&fs, b"v");
        fs.write_at(ino, 0, &[3u8; 40 << 10]).unwrap();
        fs.sync().unwrap();
        let ip = fs.inode(ino).unwrap();
        let ext = xfskit::inode::extents(&fs, &ip, Fork::Data).unwrap();
        assert_eq!(ext.len(), 1, "{ext:?}");
        (ino, ext[0])
    };
    // The file lets go of its extent behind the filesystem's back; the
    // group's tree and bitmap still give it to the file.
    drop_data_fork_615(&img, &rt, ino.0);
    {
        let fs = open_rw_rt(&img, &rt);
        let rui = rui_rt_item(
            0x5a01,
            ino.0,
            ext.start.0,
            0,
            ext.len as u32,
            XFS_RMAP_EXTENT_UNMAP,
        );
        let efi = efi_rt_item(0x5a02, ext.start.0, ext.len as u32);
        let mut tp = fs.trans().unwrap();
        tp.log_raw_item(vec![rui]);
        tp.log_raw_item(vec![efi]);
        tp.commit().unwrap();
        fs.force_log().unwrap();
        // Dropped without sync: the intents are only in the log.
    }
    let report = Fs::recover(&img, &xfskit::log::recover::RecoverOptions::default()).unwrap();
    assert_eq!(
        (report.rui_updates, report.efi_extents_freed),
        (1, 1),
        "{report:?}"
    );
    {
        let fs = open_rw_rt(&img, &rt);
        let mut tp = fs.trans().unwrap();
        let (g, _) = fs.geometry().rtb_split(ext.start.0);
        let left = xfskit::alloc::rt_rmap_records(&mut tp, g).unwrap();
        assert!(
            left.iter().all(|r| r.2 != ino.0),
            "the file's mapping is still there: {left:?}"
        );
    }
    assert_check_clean(&img, &rt, "recovered");
}

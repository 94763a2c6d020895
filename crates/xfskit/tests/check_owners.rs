//! The check's block ownership map (claimed extents): blocks that nobody
//! claims and file data claimed by an inode chunk are both found, on
//! images made by mkfs.xfs and the kernel. Needs root (loop mounts);
//! otherwise prints SKIP.

mod support;

use std::os::unix::fs::FileExt;
use std::path::Path;
use support::{be32, can_mount, make_image, rd, run_check, Scratch};
use xfskit::check::CheckReport;
use xfskit::geometry::AgBlock;
use xfskit::inode::{self, Fork};
use xfskit::{Fs, OpenOptions};

fn populate(mnt: &Path) {
    std::fs::write(mnt.join("data"), vec![1u8; 64 << 10]).expect("write");
    for i in 0..100 {
        std::fs::write(mnt.join(format!("f{i}")), b"").expect("write");
    }
}

fn shows(r: &CheckReport, what: &str) -> bool {
    r.problems
        .iter()
        .any(|p| p.what.contains(what) || p.detail.contains(what))
}

#[test]
fn lost_and_cross_linked_blocks_are_found() {
    if !can_mount("lost_and_cross_linked_blocks_are_found") {
        return;
    }
    let s = Scratch::new("check-owners");
    let img = make_image(&s, &[], populate);
    let clean = run_check(&img);
    assert!(clean.is_clean(), "fresh image: {:?}", clean.problems);

    let fs = Fs::open(&img, &OpenOptions::default()).expect("open");
    let geo = fs.geometry().clone();
    let ss = geo.sect_size as usize;
    let bs = geo.block_size as usize;
    let root = fs.root().expect("root");
    let data_ino = xfskit::dir::lookup(&fs, &root, b"data")
        .expect("lookup")
        .expect("exists");
    let data = fs.inode(data_ino).expect("inode");
    let ext = inode::extents(&fs, &data, Fork::Data).expect("extents");
    let (agno, _) = geo.fsb_split(ext[0].start);
    drop(fs);

    // Lost blocks: the AG's first free extent one block shorter in the
    // bnobt leaf (CRC restamped) leaves its last block unclaimed.
    let lost = s.0.join("lost.img");
    std::fs::copy(&img, &lost).expect("copy");
    let agf_off = geo.agb_to_daddr(agno, AgBlock(0)).bytes() + ss as u64;
    let agf = rd(&lost, agf_off, ss);
    assert_eq!(be32(&agf, 28), 1, "bnobt is a single leaf");
    let leaf = geo.agb_to_daddr(agno, AgBlock(be32(&agf, 16))).bytes();
    let mut b = rd(&lost, leaf, bs);
    let (start, len) = (be32(&b, 56), be32(&b, 60));
    assert!(len > 1, "first free extent is one block");
    b[60..64].copy_from_slice(&(len - 1).to_be_bytes());
    xfs_format::crc::stamp(&mut b, 52);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&lost)
        .expect("rw");
    f.write_all_at(&b, leaf).expect("write");
    drop(f);
    let r = run_check(&lost);
    let want = format!("1 block(s) {}..{}", start + len - 1, start + len);
    assert!(
        r.problems
            .iter()
            .any(|p| p.detail.contains(&want) && p.detail.contains("neither free nor in use")),
        "no unclaimed block {want}: {:?}",
        r.problems
    );

    // Cross-link: the file's first extent pointed at the AG's first inode
    // chunk block.
    let cross = s.0.join("cross.img");
    std::fs::copy(&img, &cross).expect("copy");
    let fs = Fs::open(&cross, &OpenOptions::default()).expect("open");
    let first_chunk = geo.ino_to_bytes(geo.root_ino) / geo.block_size as u64;
    let at = geo.ino_to_bytes(data_ino);
    let mut raw = rd(&cross, at, geo.inode_size as usize);
    // The first extent record starts the data fork (offset 176 in v3
    // inodes): rewrite its start block, keep offset and length.
    let rec = &mut raw[176..192];
    let hi = u64::from_be_bytes(rec[0..8].try_into().expect("8"));
    let lo = u64::from_be_bytes(rec[8..16].try_into().expect("8"));
    let old_start = ((hi & 0x1ff) << 43) | (lo >> 21);
    assert_eq!(old_start, ext[0].start.0, "extent record read back");
    let new_start = first_chunk;
    let hi2 = (hi & !0x1ff) | (new_start >> 43);
    let lo2 = (lo & ((1 << 21) - 1)) | (new_start << 21);
    rec[0..8].copy_from_slice(&hi2.to_be_bytes());
    rec[8..16].copy_from_slice(&lo2.to_be_bytes());
    drop(fs);
    xfs_format::crc::stamp(&mut raw, 100);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&cross)
        .expect("rw");
    f.write_all_at(&raw, at).expect("write");
    drop(f);
    let r = run_check(&cross);
    assert!(
        shows(&r, "cross-linked") && shows(&r, "inode chunk"),
        "no cross-link with the inode chunk: {:?}",
        r.problems
    );
}

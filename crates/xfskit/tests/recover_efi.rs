//! An unfinished extent-free intent (EFI) whose blocks still have their
//! reverse mapping: the kernel logs one when it takes a bmap btree block
//! out of its tree (or frees a CoW staging extent), and the free that
//! finishes it removes the mapping too. Recovery does not know the owner,
//! so it frees with an unknown owner, which removes the one rmap record
//! covering the range; xfskit's recovery must do the same, and refuse what
//! the kernel would fail on.
//!
//! The state is made deterministic: a file's blocks are taken from it
//! behind the filesystem's back with `xfs_db` (still allocated, still
//! mapped in the rmap btree, as such a block is after the transaction that
//! logged its EFI), then xfskit's journaled engine logs the EFI alone and
//! is dropped without writing back. One copy is recovered by the kernel,
//! the other by `Fs::recover`: both must be clean for `xfs_repair -n` and
//! have the blocks free again.

mod namespace_common;
mod write_common;

use namespace_common::*;
use std::path::Path;
use write_common::*;
use xfskit::build::NodeKind;
use xfskit::log::recover::RecoverOptions;
use xfskit::{Fs, OpenOptions};

fn free_blocks(img: &Path) -> u64 {
    let fs = Fs::open(img, &OpenOptions::default()).unwrap();
    let report = xfskit::check::check(&fs, &xfskit::check::CheckOptions::default()).unwrap();
    assert!(
        report.is_clean(),
        "xfskit check: {:?}",
        &report.problems[..report.problems.len().min(5)]
    );
    fs.free_blocks()
}

/// An image whose file "victim" let go of its one extent behind the
/// filesystem's back, and a log holding an EFI for `len` blocks from that
/// extent's start (`efi_len` of the extent's length); returns the extent
/// (start, blocks).
fn dirty_image(img: &Path, efi_len: impl Fn(u32) -> u32) -> (u64, u32) {
    mkfs_xfs(img, 320 << 20, "-m rmapbt=1");
    let (ino, start, len) = {
        let fs = open_rw(img);
        let root = fs.geometry().root_ino;
        let mut rng = Rng(0xef1);
        for name in ["before", "victim", "after"] {
            let ino = fs
                .create(
                    root,
                    name.as_bytes(),
                    &NodeKind::File { size: 0 },
                    &meta(0o644, 0),
                )
                .unwrap();
            fs.write_at(ino, 0, &rng.bytes(64 << 10)).unwrap();
        }
        fs.sync().unwrap();
        let inode = fs.lookup_path(b"/victim").unwrap();
        let ino = inode.ino;
        let ext = xfskit::inode::extents(&fs, &inode, xfskit::inode::Fork::Data).unwrap();
        assert_eq!(ext.len(), 1, "{ext:?}");
        (ino, ext[0].start.0, ext[0].len as u32)
    };
    let (ok, out) = run(
        "xfs_db",
        &[
            "-x",
            "-c",
            &format!("inode {}", ino.0),
            "-c",
            "write core.nextents 0",
            "-c",
            "write core.size 0",
            "-c",
            "write core.nblocks 0",
            &img.display().to_string(),
        ],
    );
    assert!(ok, "xfs_db: {out}");
    // The blocks are now allocated, reverse-mapped and owned by nobody.
    let (ok, _) = run("xfs_repair", &["-n", &img.display().to_string()]);
    assert!(
        !ok,
        "xfs_repair -n does not see the blocks the file let go of"
    );
    let fs = open_rw(img);
    let mut tp = fs.trans().unwrap();
    tp.log_raw_item(vec![efi_item(0xef1, start, efi_len(len))]);
    tp.commit().unwrap();
    fs.force_log().unwrap();
    // Dropped without sync: the EFI is only in the log.
    (start, len)
}

#[test]
fn unfinished_free_of_reverse_mapped_blocks_is_finished_as_the_kernel_does() {
    if skip_unless_root("unfinished_free_of_reverse_mapped_blocks_is_finished_as_the_kernel_does") {
        return;
    }
    let s = Scratch::new("recover-efi");
    let img = s.0.join("img");
    let (_, len) = dirty_image(&img, |l| l);
    let kimg = s.0.join("kimg");
    std::fs::copy(&img, &kimg).unwrap();

    let report = Fs::recover(&img, &RecoverOptions::default()).unwrap();
    assert_eq!(report.efi_extents_freed, 1, "{report:?}");
    assert_repair_clean(&img);
    let ours = free_blocks(&img);

    kernel_replay(&kimg).unwrap();
    assert_repair_clean(&kimg);
    let kernel = free_blocks(&kimg);
    assert_eq!(
        ours, kernel,
        "free blocks after xfskit's and the kernel's recovery"
    );
    // Both gave the blocks back (the file's 64 KiB).
    assert_eq!(len, 16, "the victim's extent");
}

#[test]
fn unfinished_free_past_its_reverse_mapping_is_refused_with_nothing_written() {
    if skip_unless_root("unfinished_free_past_its_reverse_mapping_is_refused_with_nothing_written")
    {
        return;
    }
    let s = Scratch::new("recover-efi-bad");
    let img = s.0.join("img");
    // One block more than the extent: the mapping no longer covers the
    // range as one (the kernel's free would find the block already free);
    // then a length past the end of the AG, as a hostile log may have.
    for (what, efi_len) in [
        ("one block past the mapping", (|l| l + 1) as fn(u32) -> u32),
        ("past the AG", |_| u32::MAX - 3),
    ] {
        dirty_image(&img, efi_len);
        let before = std::fs::read(&img).unwrap();
        let err = Fs::recover(&img, &RecoverOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                xfskit::Error::Unsupported(_) | xfskit::Error::Corrupt { .. }
            ) && err.to_string().contains("0xef1"),
            "{what}: {err}"
        );
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{what}: a refused recovery wrote to the image"
        );
    }
}

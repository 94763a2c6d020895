//! The check on a filesystem with thousands of (nearly all empty) AGs, made
//! by the library's mkfs into a sparse file: it comes out clean, the
//! superblock counters are compared with totals folded over every AG (a
//! wrong counter is reported with the sum this test computes from all the
//! AGFs and AGIs), and a bad counter in the last AG's AGF or AGI is found.

mod support;
mod write_common;

use std::mem::offset_of;
use std::path::{Path, PathBuf};
use support::{be32, rd, wr, Scratch};
use xfs_format::ag::{Agf, Agi, XFS_AGF_CRC_OFF, XFS_AGI_CRC_OFF};
use xfs_format::sb::{Dsb, XFS_SB_CRC_OFF};
use xfskit::check::{check, CheckOptions, CheckReport};
use xfskit::geometry::{AgBlock, AgNumber};
use xfskit::{Fs, OpenOptions};

const AGS: u32 = 2048;

/// Makes the sparse image of [`AGS`] AGs.
fn make(s: &Scratch) -> PathBuf {
    let img = s.0.join("many.img");
    write_common::mkfs_many_ags(&img, AGS);
    img
}

fn run_check(img: &Path) -> CheckReport {
    let fs = Fs::open(img, &OpenOptions::default()).expect("open");
    check(
        &fs,
        &CheckOptions {
            threads: 2,
            progress: None,
            ..Default::default()
        },
    )
    .expect("check runs")
}

/// Adds `delta` to the big-endian u32 at `field` of the sector at `off`
/// and restamps the CRC at `crc_off`.
fn bump32(img: &Path, off: u64, len: usize, field: usize, crc_off: usize, delta: u32) {
    let mut b = rd(img, off, len);
    let v = be32(&b, field).wrapping_add(delta);
    b[field..field + 4].copy_from_slice(&v.to_be_bytes());
    xfs_format::crc::stamp(&mut b, crc_off);
    wr(img, off, &b);
}

fn shows(r: &CheckReport, what: &str, detail: &str) -> bool {
    r.problems
        .iter()
        .any(|p| p.what == what && p.detail.contains(detail))
}

#[test]
fn thousands_of_ags_check_clean_and_counters_are_folded() {
    let s = Scratch::new("many-ags");
    let t = std::time::Instant::now();
    let img = make(&s);
    eprintln!("mkfs of {AGS} AGs: {:?}", t.elapsed());

    let t = std::time::Instant::now();
    let clean = run_check(&img);
    eprintln!("check of {AGS} AGs: {:?}", t.elapsed());
    assert!(clean.is_clean(), "fresh image: {:?}", clean.problems);
    assert_eq!(clean.stats.ags, AGS);

    let t = std::time::Instant::now();
    // What the superblock counters must add up to, from every AG's headers.
    let fs = Fs::open(&img, &OpenOptions::default()).expect("open");
    let geo = fs.geometry().clone();
    drop(fs);
    let ss = geo.sect_size as usize;
    let hdr = |agno: u32, sector: u64| {
        geo.agb_to_daddr(AgNumber(agno), AgBlock(0)).bytes() + sector * ss as u64
    };
    let (mut icount, mut fdblocks) = (0u64, 0u64);
    for agno in 0..AGS {
        let agf = rd(&img, hdr(agno, 1), ss);
        let agi = rd(&img, hdr(agno, 2), ss);
        icount += u64::from(be32(&agi, offset_of!(Agi, agi_count)));
        fdblocks += u64::from(be32(&agf, offset_of!(Agf, agf_freeblks)))
            + u64::from(be32(&agf, offset_of!(Agf, agf_flcount)))
            + u64::from(be32(&agf, offset_of!(Agf, agf_btreeblks)));
    }
    let last_free = be32(
        &rd(&img, hdr(AGS - 1, 1), ss),
        offset_of!(Agf, agf_freeblks),
    );
    assert!(last_free > 0, "the last AG has free space");
    assert_eq!(
        clean.stats.free_blocks,
        fdblocks
            - (0..AGS)
                .map(|a| {
                    let agf = rd(&img, hdr(a, 1), ss);
                    u64::from(be32(&agf, offset_of!(Agf, agf_flcount)))
                        + u64::from(be32(&agf, offset_of!(Agf, agf_btreeblks)))
                })
                .sum::<u64>()
    );

    eprintln!("sums from the headers: {:?}", t.elapsed());
    // A superblock off by the last AG's free space: the folded total is
    // the one computed here, so every AG (the last one too) counted.
    // (The image is changed in place and put back: copies of a sparse
    // file may not stay sparse.)
    let bad_sb = &img;
    let sb_orig = rd(bad_sb, 0, ss);
    let fd_off = offset_of!(Dsb, sb_fdblocks);
    let ic_off = offset_of!(Dsb, sb_icount);
    let mut sb = sb_orig.clone();
    let fd = u64::from_be_bytes(sb[fd_off..fd_off + 8].try_into().expect("8"));
    assert_eq!(fd, fdblocks, "mkfs wrote the summed counter");
    sb[fd_off..fd_off + 8].copy_from_slice(&(fd - u64::from(last_free)).to_be_bytes());
    sb[ic_off..ic_off + 8].copy_from_slice(&(icount + 64).to_be_bytes());
    xfs_format::crc::stamp(&mut sb, XFS_SB_CRC_OFF);
    wr(bad_sb, 0, &sb);
    let t = std::time::Instant::now();
    let r = run_check(bad_sb);
    eprintln!("check with bad superblock counters: {:?}", t.elapsed());
    assert!(
        shows(&r, "superblock", &format!("counted {fdblocks}")),
        "sb_fdblocks: {:?}",
        r.problems
    );
    assert!(
        shows(
            &r,
            "superblock",
            &format!("sb_icount {}, counted {icount}", icount + 64)
        ),
        "sb_icount: {:?}",
        r.problems
    );
    assert_eq!(r.stats.problems_total, 2, "{:?}", r.problems);
    drop(r);
    wr(bad_sb, 0, &sb_orig);

    // Bad counters in the last AG's AGF and AGI are found there.
    let bad_ag = &img;
    let last = AGS - 1;
    bump32(
        bad_ag,
        hdr(last, 1),
        ss,
        offset_of!(Agf, agf_freeblks),
        XFS_AGF_CRC_OFF,
        1,
    );
    bump32(
        bad_ag,
        hdr(last, 2),
        ss,
        offset_of!(Agi, agi_count),
        XFS_AGI_CRC_OFF,
        64,
    );
    let t = std::time::Instant::now();
    let r = run_check(bad_ag);
    eprintln!("check with bad AG counters: {:?}", t.elapsed());
    assert!(
        shows(&r, "AGF", &format!("agf_freeblks {}", last_free + 1)),
        "AGF: {:?}",
        r.problems
    );
    assert!(shows(&r, "AGI", "agi_count 64"), "AGI: {:?}", r.problems);
    assert!(
        r.problems
            .iter()
            .all(|p| format!("{}", p.location).contains(&last.to_string())),
        "only the last AG is at fault: {:?}",
        r.problems
    );
}

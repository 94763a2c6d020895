//! `check` on the reverse mappings, block LSNs and attr leaf headers of
//! kernel-made images (rmapbt + reflink): a clean image has no problems;
//! an rmapbt record given the wrong file offset, or another owner, is
//! found and named with its AG block and inode; an AGF stamped with an
//! LSN past the log head is found; an attr leaf whose name area starts
//! below its first name (and no holes) is found; a shared extent's
//! reference count that is not the number of files mapping it is found.
//! Needs root (loop mounts); otherwise prints SKIP.

mod support;

use std::path::Path;
use std::process::Command;
use support::{be32, be64, can_mount, make_image, rd, run_check, wr, Scratch};
use xfskit::check::CheckReport;
use xfskit::geometry::{AgBlock, AgNumber};
use xfskit::inode::{self, Fork};
use xfskit::{Fs, OpenOptions};

fn populate(mnt: &Path) {
    std::fs::write(mnt.join("data"), vec![3u8; 256 << 10]).expect("write");
    std::fs::write(mnt.join("attrs"), b"x").expect("write");
    std::fs::write(mnt.join("shared"), vec![5u8; 64 << 10]).expect("write");
    let st = Command::new("cp")
        .arg("--reflink=always")
        .arg(mnt.join("shared"))
        .arg(mnt.join("shared_copy"))
        .status()
        .expect("cp");
    assert!(st.success());
    for i in 0..30 {
        let st = Command::new("setfattr")
            .args(["-n", &format!("user.attr_{i}"), "-v", &"v".repeat(60)])
            .arg(mnt.join("attrs"))
            .status()
            .expect("setfattr");
        assert!(st.success());
    }
}

fn show(r: &CheckReport) -> String {
    r.problems
        .iter()
        .map(|p| format!("{p}\n"))
        .collect::<String>()
}

#[test]
fn reverse_mappings_lsns_and_attr_name_areas_are_checked() {
    let test = "reverse_mappings_lsns_and_attr_name_areas_are_checked";
    if !can_mount(test) {
        return;
    }
    let s = Scratch::new("check-rmap");
    let img = make_image(&s, &["-m", "rmapbt=1,reflink=1"], populate);
    let clean = run_check(&img);
    assert!(clean.is_clean(), "fresh image: {}", show(&clean));

    let fs = Fs::open(&img, &OpenOptions::default()).expect("open");
    let geo = fs.geometry().clone();
    let (ss, bs) = (geo.sect_size as usize, geo.block_size as usize);
    let root = fs.root().expect("root");
    let lookup = |name: &[u8]| {
        xfskit::dir::lookup(&fs, &root, name)
            .expect("lookup")
            .expect("exists")
    };
    let data_ino = lookup(b"data");
    let attrs_ino = lookup(b"attrs");
    let data = fs.inode(data_ino).expect("inode");
    let ext = inode::extents(&fs, &data, Fork::Data).expect("extents");
    let (agno, agbno) = geo.fsb_split(ext[0].start);
    let attrs = fs.inode(attrs_ino).expect("inode");
    let aext = inode::extents(&fs, &attrs, Fork::Attr).expect("attr extents");
    assert_eq!(aext.len(), 1, "one attr leaf block");
    let attr_leaf = geo.fsb_to_daddr(aext[0].start).bytes();
    let shared = fs.inode(lookup(b"shared")).expect("inode");
    let sext = inode::extents(&fs, &shared, Fork::Data).expect("extents");
    let (sag, sbno) = geo.fsb_split(sext[0].start);
    drop(fs);

    // The data file's record in its AG's rmapbt (a single leaf).
    let agf_off = geo.agb_to_daddr(agno, AgBlock(0)).bytes() + ss as u64;
    let agf = rd(&img, agf_off, ss);
    assert_eq!(be32(&agf, 36), 1, "rmapbt is a single leaf");
    let leaf_off = geo.agb_to_daddr(agno, AgBlock(be32(&agf, 24))).bytes();
    let leaf = rd(&img, leaf_off, bs);
    let n = usize::from(u16::from_be_bytes([leaf[6], leaf[7]]));
    let rec = (0..n)
        .map(|i| 56 + 24 * i)
        .find(|&o| be64(&leaf, o + 8) == data_ino.0 && be32(&leaf, o) == agbno.0)
        .expect("the data file's rmap record");
    assert!(rec > 56, "not the leaf's first record (no key to change)");

    // A wrong file offset: the mapping the bmbt gives is not there.
    let bad = s.0.join("offset.img");
    std::fs::copy(&img, &bad).expect("copy");
    let mut b = leaf.clone();
    let off = be64(&b, rec + 16);
    b[rec + 16..rec + 24].copy_from_slice(&(off + 1).to_be_bytes());
    xfs_format::crc::stamp(&mut b, 52);
    wr(&bad, leaf_off, &b);
    let r = run_check(&bad);
    let at = format!("AG {} block {}", agno.0, agbno.0);
    let owner = format!("inode {}", data_ino.0);
    assert!(
        r.problems.iter().any(|p| p.what == "rmapbt"
            && p.location.to_string() == at
            && p.detail.contains(&owner)
            && p.detail.contains("does not match")),
        "wrong offset not found at {at}: {}",
        show(&r)
    );

    // Another owner: the data file's mapping is missing, and the record
    // maps blocks its new owner does not use.
    let bad = s.0.join("owner.img");
    std::fs::copy(&img, &bad).expect("copy");
    let mut b = leaf.clone();
    b[rec + 8..rec + 16].copy_from_slice(&attrs_ino.0.to_be_bytes());
    xfs_format::crc::stamp(&mut b, 52);
    wr(&bad, leaf_off, &b);
    let r = run_check(&bad);
    assert!(
        r.problems
            .iter()
            .any(|p| p.detail.contains("no reverse mapping") && p.detail.contains(&owner)),
        "missing mapping of {owner} not found: {}",
        show(&r)
    );
    let other = format!("inode {}", attrs_ino.0);
    assert!(
        r.problems
            .iter()
            .any(|p| p.detail.contains(&other) && p.detail.contains("not mapped so")),
        "record of {other} over blocks it does not map not found: {}",
        show(&r)
    );

    // An AGF stamped with an LSN far past the log head.
    let bad = s.0.join("lsn.img");
    std::fs::copy(&img, &bad).expect("copy");
    let agf1_off = geo.agb_to_daddr(AgNumber(1), AgBlock(0)).bytes() + ss as u64;
    let mut b = rd(&bad, agf1_off, ss);
    b[208..216].copy_from_slice(&((1000u64 << 32) | 5).to_be_bytes());
    xfs_format::crc::stamp(&mut b, 216);
    wr(&bad, agf1_off, &b);
    let r = run_check(&bad);
    assert!(
        r.problems.iter().any(|p| p.what == "AGF"
            && p.location.to_string().contains("AG 1")
            && p.detail.contains("LSN 1000:5")
            && p.detail.contains("log head")),
        "LSN past the head not found: {}",
        show(&r)
    );

    // The shared extent's reference count raised from 2 to 3.
    let bad = s.0.join("refcount.img");
    std::fs::copy(&img, &bad).expect("copy");
    let sagf = rd(
        &bad,
        geo.agb_to_daddr(sag, AgBlock(0)).bytes() + ss as u64,
        ss,
    );
    assert_eq!(be32(&sagf, 92), 1, "refcountbt is a single leaf");
    let rleaf_off = geo.agb_to_daddr(sag, AgBlock(be32(&sagf, 88))).bytes();
    let mut b = rd(&bad, rleaf_off, bs);
    let n = usize::from(u16::from_be_bytes([b[6], b[7]]));
    let rec = (0..n)
        .map(|i| 56 + 12 * i)
        .find(|&o| be32(&b, o) == sbno.0)
        .expect("the shared extent's refcount record");
    assert_eq!(be32(&b, rec + 8), 2, "two files share it");
    b[rec + 8..rec + 12].copy_from_slice(&3u32.to_be_bytes());
    xfs_format::crc::stamp(&mut b, 52);
    wr(&bad, rleaf_off, &b);
    let r = run_check(&bad);
    assert!(
        r.problems.iter().any(|p| p.what == "refcountbt record"
            && p.location.to_string() == format!("AG {} block {}", sag.0, sbno.0)
            && p.detail.contains("has refcount 3, but 2 file mapping(s)")),
        "wrong reference count not found: {}",
        show(&r)
    );

    // The attr leaf's name area made to start 4 bytes below its first
    // name, with no holes recorded.
    let bad = s.0.join("firstused.img");
    std::fs::copy(&img, &bad).expect("copy");
    let mut b = rd(&bad, attr_leaf, bs);
    assert_eq!(b[62], 0, "no holes in a fresh leaf");
    let first = u16::from_be_bytes([b[60], b[61]]);
    b[60..62].copy_from_slice(&(first - 4).to_be_bytes());
    xfs_format::crc::stamp(&mut b, 12);
    wr(&bad, attr_leaf, &b);
    let r = run_check(&bad);
    assert!(
        r.problems.iter().any(|p| p.what == "attr block"
            && p.location
                .to_string()
                .contains(&format!("inode {}", attrs_ino.0))
            && p.detail
                .contains(&format!("name area starts at byte {}", first - 4))),
        "name area start not found: {}",
        show(&r)
    );
}

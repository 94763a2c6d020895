//! Helpers shared by the allocator tests: allocation requests, the free
//! space as the btrees and the superblock see it, checks of newly
//! allocated extents and of the rmapbt, and a way to fragment free space.
#![allow(dead_code)]

use crate::write_common::*;
use std::collections::BTreeMap;
use std::path::Path;
use xfskit::alloc::{ag_free_extents, alloc_extent, free_extent, AllocReq, Owner};
use xfskit::geometry::{AgBlock, AgNumber, FsBlock};
use xfskit::{Fs, OpenOptions};

pub const OWNER: Owner = Owner::Inode {
    ino: xfskit::Ino(128),
    attr_fork: false,
    offset: 0,
    bmbt: false,
};

pub fn req(target: FsBlock, minlen: u32, maxlen: u32, alignment: u32, ag_only: bool) -> AllocReq {
    AllocReq {
        target,
        minlen,
        maxlen,
        alignment,
        ag_only,
        owner: OWNER,
    }
}

/// The free extents of every AG (as (agno, start, len)), with the
/// blocks on the free lists (they may become free space).
pub fn all_free(fs: &Fs) -> Vec<(u32, u32, u32)> {
    let mut tp = fs.trans().unwrap();
    let mut out = Vec::new();
    let geo = fs.geometry();
    for a in 0..geo.ag_count {
        for (s, l) in ag_free_extents(&mut tp, AgNumber(a)).unwrap() {
            out.push((a, s, l));
        }
        let ag0 = geo.agb_to_daddr(AgNumber(a), AgBlock(0)).0;
        let spd = u64::from(geo.sect_size >> 9);
        let rd = |sector: u64, v: &xfskit::buf::Verifier<'_>| {
            fs.read_meta(
                xfskit::geometry::Daddr(ag0 + sector * spd),
                geo.sect_size,
                v,
            )
            .unwrap()
        };
        let agf = rd(1, &xfskit::buf::Verifier::Agf { agno: a });
        let agfl = rd(3, &xfskit::buf::Verifier::Agfl { agno: a });
        let be = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        let (first, count) = (be(&agf, 40), be(&agf, 48));
        let size = (geo.sect_size - 36) / 4;
        for i in 0..count {
            let slot = ((first + i) % size) as usize;
            out.push((a, be(&agfl, 36 + 4 * slot), 1));
        }
    }
    out
}

/// Free blocks as the superblock sees them after sync.
pub fn sb_fdblocks(img: &Path) -> u64 {
    Fs::open(img, &OpenOptions::default())
        .unwrap()
        .geometry()
        .fdblocks
}

/// Allocated extents by filesystem block: (len, agno).
pub type Model = BTreeMap<u64, u32>;

pub fn check_new(fs: &Fs, m: &Model, fsb: FsBlock, len: u32, r: &AllocReq) {
    let geo = fs.geometry();
    assert!(len >= r.minlen && len <= r.maxlen, "length {len} for {r:?}");
    assert!(geo.fsb_range_valid(fsb, u64::from(len)), "{fsb:?}+{len}");
    let (_, agbno) = geo.fsb_split(fsb);
    assert_eq!(agbno.0 % r.alignment, 0, "alignment of {agbno:?} for {r:?}");
    if let Some((s, l)) = m.range(..=fsb.0).next_back() {
        assert!(s + u64::from(*l) <= fsb.0, "overlaps {s}+{l}");
    }
    if let Some((s, _)) = m.range(fsb.0..).next() {
        assert!(fsb.0 + u64::from(len) <= *s, "overlaps {s}");
    }
}

/// The rmapbt against the model: records in order without overlaps,
/// none on free space, every allocated extent inside a record of its
/// owner at the right file offset, touching records of one owner merged.
pub fn check_rmap(fs: &Fs, m: &Model, owners: &BTreeMap<u64, Owner>) {
    let geo = fs.geometry();
    let mut tp = fs.trans().unwrap();
    let mut n = 0;
    for a in 0..geo.ag_count {
        let recs = xfskit::alloc::ag_rmap_records(&mut tp, AgNumber(a)).unwrap();
        let free = ag_free_extents(&mut tp, AgNumber(a)).unwrap();
        n += recs.len();
        for w in recs.windows(2) {
            let (p, q) = (w[0], w[1]);
            assert!(p.0 + p.1 <= q.0, "AG {a}: {p:?} overlaps {q:?}");
            let inode_data = p.2 >> 63 == 0 && p.3 & (1 << 62) == 0;
            let contiguous =
                !inode_data || (p.3 & ((1 << 54) - 1)) + u64::from(p.1) == (q.3 & ((1 << 54) - 1));
            let same = p.2 == q.2 && p.3 >> 61 == q.3 >> 61;
            assert!(
                !(p.0 + p.1 == q.0 && same && contiguous),
                "AG {a}: {p:?} and {q:?} not merged"
            );
        }
        for (s, l) in free {
            let i = recs.partition_point(|r| r.0 + r.1 <= s);
            if let Some(r) = recs.get(i) {
                assert!(r.0 >= s + l, "AG {a}: free {s}+{l} is mapped by {r:?}");
            }
        }
        for (&fsb, &len) in m.range(
            geo.fsb_make(AgNumber(a), AgBlock(0)).0..geo.fsb_make(AgNumber(a + 1), AgBlock(0)).0,
        ) {
            let b = geo.fsb_split(FsBlock(fsb)).1 .0;
            let i = recs.partition_point(|r| r.0 + r.1 <= b);
            let r = recs
                .get(i)
                .copied()
                .unwrap_or_else(|| panic!("{fsb}+{len} unmapped"));
            assert!(
                r.0 <= b && b + len <= r.0 + r.1,
                "{fsb}+{len} not inside {r:?}"
            );
            match owners[&fsb] {
                Owner::Inode {
                    ino,
                    attr_fork,
                    offset,
                    bmbt,
                } => {
                    assert_eq!(r.2, ino.0);
                    assert_eq!(r.3 >> 63 == 1, attr_fork);
                    assert_eq!((r.3 >> 62) & 1 == 1, bmbt);
                    if !bmbt {
                        assert_eq!((r.3 & ((1 << 54) - 1)) + u64::from(b - r.0), offset);
                    }
                }
                Owner::Inobt => assert_eq!(r.2, (-6i64) as u64),
                o => panic!("unexpected owner {o:?}"),
            }
        }
    }
    eprintln!("rmapbt: {n} records checked");
}

/// Owner of block `i` of the fragmentation test's file.
pub fn frag_owner(i: u64) -> Owner {
    Owner::Inode {
        ino: xfskit::Ino(3000),
        attr_fork: false,
        offset: i,
        bmbt: false,
    }
}

pub fn fragment(opts: &str, tag: &str) {
    let dir = Scratch::new(tag);
    let img = dir.0.join("g.img");
    mkfs_xfs(&img, 320 << 20, opts);
    let before = sb_fdblocks(&img);
    let fs = open_rw(&img);
    let geo = fs.geometry().clone();
    let ag = AgNumber(1);
    // Take 24000 blocks of AG 1 in big pieces.
    let mut pieces = Vec::new();
    let mut want = 24000u32;
    let mut off = 0u64;
    while want > 0 {
        let mut tp = fs.trans().unwrap();
        let t = geo.fsb_make(ag, AgBlock(0));
        let mut r = req(t, 1, want.min(4000), 1, true);
        r.owner = frag_owner(off);
        let (f, l) = alloc_extent(&mut tp, &r).unwrap();
        off += u64::from(l);
        tp.commit().unwrap();
        pieces.push((f, l));
        want -= l;
    }
    // Free every other block: ~12000 one-block free extents.
    let mut kept = Vec::new();
    let mut n = 0;
    let mut off = 0u64;
    for &(f, l) in &pieces {
        let mut tp = fs.trans().unwrap();
        for i in 0..l {
            let b = FsBlock(f.0 + u64::from(i));
            if i % 2 == 0 {
                free_extent(&mut tp, b, 1, &frag_owner(off)).unwrap();
                n += 1;
            } else {
                kept.push((b, off));
            }
            off += 1;
            if tp.dirty_count() > 40 {
                tp.commit().unwrap();
                tp = fs.trans().unwrap();
            }
        }
        tp.commit().unwrap();
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("freed {n} single blocks; bno/cnt/rmap levels {levels:?}");
    assert!(levels.0 >= 3 && levels.1 >= 3, "levels {levels:?}");
    let rmapbt = geo.features.rmapbt;
    if rmapbt {
        assert!(levels.2 >= 3, "rmapbt levels {levels:?}");
    }
    fs.sync().unwrap();
    drop(fs);
    if !rmapbt {
        // (With an rmapbt, repair objects to the made-up owner inode.)
        assert_repair_clean(&img);
    }
    kernel_rw_churn(&img);
    if !rmapbt {
        assert_repair_clean(&img);
    }
    let fs = open_rw(&img);
    // Free the rest: the extents merge back and the trees shrink.
    for (i, (b, off)) in kept.iter().enumerate() {
        let mut tp = fs.trans().unwrap();
        free_extent(&mut tp, *b, 1, &frag_owner(*off)).unwrap();
        tp.commit().unwrap();
        if i % 1000 == 0 {
            fs.writeback().unwrap();
        }
    }
    let levels = agf_levels(&fs, ag);
    eprintln!("after merging: levels {levels:?}");
    assert_eq!((levels.0, levels.1), (1, 1));
    fs.sync().unwrap();
    drop(fs);
    assert_repair_clean(&img);
    assert_eq!(sb_fdblocks(&img), before);
}

/// bnobt, cntbt and rmapbt levels of an AG, read from its AGF.
pub fn agf_levels(fs: &Fs, ag: AgNumber) -> (u32, u32, u32) {
    let geo = fs.geometry();
    let d = geo.agb_to_daddr(ag, AgBlock(0)).0 + u64::from(geo.sect_size >> 9);
    let b = fs
        .read_meta(
            xfskit::geometry::Daddr(d),
            geo.sect_size,
            &xfskit::buf::Verifier::Agf { agno: ag.0 },
        )
        .unwrap();
    let be = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    (be(28), be(32), be(36))
}

/// As root: mounts the image read-write with the kernel, writes and
/// removes files (the kernel allocates from and frees into our free space
/// btrees), unmounts. Prints why when it cannot run.
pub fn kernel_rw_churn(img: &Path) {
    if !is_root() {
        eprintln!("SKIP kernel read-write mount: needs root");
        return;
    }
    let mnt = img.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display().to_string();
    let (ok, out) = run(
        "mount",
        &["-o", "loop,nouuid", &img.display().to_string(), &m],
    );
    assert!(ok, "kernel mount: {out}");
    let r = std::panic::catch_unwind(|| {
        for i in 0..40 {
            let data = vec![i as u8; 1024 * (1 + 37 * i)];
            std::fs::write(mnt.join(format!("f{i}")), &data).unwrap();
        }
        let (ok, out) = run("sync", &[]);
        assert!(ok, "{out}");
        for i in 0..40 {
            if i % 3 != 0 {
                std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
            }
        }
        for i in (0..40).step_by(3) {
            let got = std::fs::read(mnt.join(format!("f{i}"))).unwrap();
            assert_eq!(got.len(), 1024 * (1 + 37 * i));
            std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
        }
    });
    let (ok, out) = xfskit_testkit::umount(&mnt);
    assert!(ok, "umount: {out}");
    let _ = std::fs::remove_dir(&mnt);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

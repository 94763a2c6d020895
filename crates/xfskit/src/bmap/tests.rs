//! Randomised tests of the mapping code on a real filesystem image with
//! a private block pool standing in for the allocator; every step is
//! compared with a per-block model and the btree's shape is checked.

use super::space::pool::{self, Pool};
use super::{edit, fork, node};
use crate::geometry::{FsBlock, Ino};
use crate::inode::{Extent, Fork, ForkFormat, Inode};
use crate::trans::Trans;
use crate::{Fs, OpenOptions};
use std::collections::{BTreeMap, BTreeSet};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn image(tag: &str, opts: &str) -> Option<(std::path::PathBuf, Fs)> {
    let path = std::env::temp_dir().join(format!("xfskit-bmapu-{}-{tag}.img", std::process::id()));
    let f = std::fs::File::create(&path).ok()?;
    f.set_len(512 << 20).ok()?;
    let mut args: Vec<&str> = opts.split_whitespace().collect();
    let p = path.display().to_string();
    args.extend(["-q", "-f", "-m", "rmapbt=0", &p]);
    match std::process::Command::new("mkfs.xfs").args(&args).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("mkfs.xfs failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("SKIP: cannot run mkfs.xfs: {e}");
            return None;
        }
    }
    let fs = Fs::open_rw(&path, &OpenOptions::default()).unwrap();
    Some((path, fs))
}

type Model = BTreeMap<u64, (u64, bool)>;

fn expand(v: &[Extent]) -> Model {
    let mut m = Model::new();
    for e in v {
        for i in 0..e.len {
            m.insert(e.offset + i, (e.start.0 + i, e.unwritten));
        }
    }
    m
}

fn verify(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, model: &Model, ag_log: u8) {
    let all = super::extents(tp, ip, fork).unwrap();
    assert!(edit::well_formed(&all));
    for w in all.windows(2) {
        assert!(
            !edit::can_merge(&w[0], &w[1], ag_log),
            "unmerged neighbours {w:?}"
        );
    }
    assert_eq!(fork::count(ip, fork), all.len() as u64);
    assert_eq!(&expand(&all), model);
    let inline = fork::max_inline(tp.geo(), ip, fork).unwrap() as u64;
    let bmbt_blocks = match fork::format(ip, fork) {
        ForkFormat::Extents => {
            assert!(all.len() as u64 <= inline);
            0
        }
        ForkFormat::Btree => {
            assert!(
                all.len() as u64 > inline,
                "{} records in btree format",
                all.len()
            );
            node::check(tp, ip, fork).unwrap()
        }
        f => panic!("format {f:?}"),
    };
    assert_eq!(ip.nblocks, model.len() as u64 + bmbt_blocks);
    for (lb, _) in model.iter().take(3) {
        let e = super::lookup(tp, ip, fork, *lb).unwrap().unwrap();
        assert!(e.offset <= *lb && e.end() > *lb);
    }
}

fn run(tag: &str, opts: &str, fork: Fork, steps: usize, seed: u64, min_level: u16) {
    let Some((path, fs)) = image(tag, opts) else {
        return;
    };
    let geo = fs.geometry().clone();
    // A pool in AG 1, far from the AG headers.
    let base = geo
        .fsb_make(crate::geometry::AgNumber(1), crate::geometry::AgBlock(1000))
        .0;
    let free: BTreeSet<u64> = (base..base + 20_000).collect();
    let total = free.len();
    pool::set(Some(Pool { free, cap: 4 }));
    let mut ip = Inode::new(&geo, Ino(geo.root_ino.0 + 10), 0o100644, 1).unwrap();
    if fork == Fork::Attr {
        ip.forkoff = 15; // data fork 120 bytes, attr fork the rest
        ip.data_fork.truncate(120);
        ip.attr_fork = vec![0u8; Inode::literal_size(&geo) - 120];
        ip.aformat = ForkFormat::Extents;
    }
    let mut rng = Rng(seed);
    let mut model = Model::new();
    let span = 6000u64;
    // Many separate extents first: every other block.
    let mut tp = fs.trans().unwrap();
    for i in 0..1500u64 {
        let got = super::alloc_range(&mut tp, &mut ip, fork, 2 * i * 2, 1, false, None).unwrap();
        assert_eq!(got.len(), 1);
        model.insert(4 * i, (got[0].start.0, false));
        if i % 100 == 0 {
            verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
            tp.commit().unwrap();
            tp = fs.trans().unwrap();
        }
    }
    verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
    if fork == Fork::Data {
        // Squeeze the data fork to its root and back: the root moves.
        let need = super::data_fork_min_bytes(&ip);
        let off = need.div_ceil(8) as u8;
        assert!(
            super::set_forkoff(&geo, &mut ip, off.saturating_sub(1).max(1)).is_err() || need <= 8
        );
        super::set_forkoff(&geo, &mut ip, off).unwrap();
        verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
        super::set_forkoff(&geo, &mut ip, 0).unwrap();
        verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
    }
    let mut max_level = 0;
    for step in 0..steps {
        let a = rng.below(span);
        let big = rng.below(10) == 0;
        let len = 1 + rng.below(if big { 400 } else { 12 });
        match rng.below(4) {
            0 | 1 => {
                let unw = rng.below(3) == 0;
                let got = super::alloc_range(&mut tp, &mut ip, fork, a, len, unw, None).unwrap();
                assert_eq!(got.iter().map(|e| e.len).sum::<u64>(), len);
                for e in &got {
                    for i in 0..e.len {
                        let old = model.insert(e.offset + i, (e.start.0 + i, e.unwritten));
                        if let Some(o) = old {
                            assert_eq!(o, (e.start.0 + i, e.unwritten));
                        } else {
                            assert_eq!(e.unwritten, unw);
                        }
                    }
                }
            }
            2 => {
                super::unmap_range(&mut tp, &mut ip, fork, a, len).unwrap();
                for b in a..a + len {
                    model.remove(&b);
                }
            }
            _ => {
                super::convert_unwritten(&mut tp, &mut ip, fork, a, len).unwrap();
                for b in a..a + len {
                    if let Some(v) = model.get_mut(&b) {
                        v.1 = false;
                    }
                }
            }
        }
        verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
        if fork::format(&ip, fork) == ForkFormat::Btree {
            let root = fork::bytes(&ip, fork);
            max_level = max_level.max(u16::from_be_bytes([root[0], root[1]]));
        }
        if step % 7 == 0 {
            tp.commit().unwrap();
            tp = fs.trans().unwrap();
        }
    }
    eprintln!("{tag}: deepest root level {max_level}");
    assert!(
        max_level >= min_level,
        "the tree never reached root level {min_level}"
    );
    // Punch most of it in pieces: the tree shrinks back.
    let mut b = 0;
    while b < span {
        super::unmap_range(&mut tp, &mut ip, fork, b, 37).unwrap();
        for x in b..b + 37 {
            model.remove(&x);
        }
        b += 41;
        verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
    }
    super::unmap_range(&mut tp, &mut ip, fork, 0, u64::MAX).unwrap();
    model.clear();
    verify(&mut tp, &ip, fork, &model, geo.ag_blk_log);
    assert_eq!(fork::format(&ip, fork), ForkFormat::Extents);
    assert_eq!(ip.nblocks, 0);
    tp.commit().unwrap();
    let left = pool::with(|p| p.free.len()).unwrap();
    assert_eq!(left, total, "blocks leaked");
    pool::set(None);
    let _ = std::fs::remove_file(&path);
    let _ = FsBlock(0);
}

#[test]
fn random_data_fork_1k_blocks() {
    run(
        "d1k",
        "-b size=1024",
        Fork::Data,
        3000,
        0x9e37_79b9_7f4a_7c15,
        2,
    );
}

#[test]
fn random_data_fork_4k_blocks_2k_inodes() {
    run("d4k", "-i size=2048", Fork::Data, 2000, 12345, 1);
}

#[test]
fn random_attr_fork_1k_blocks() {
    run("a1k", "-b size=1024", Fork::Attr, 2000, 777, 2);
}

//! Realtime groups: every group's bitmap and summary files, the realtime
//! superblock, the free count and, where the filesystem has them, each
//! group's realtime rmap and refcount btrees, against the realtime files.
//!
//! The inode pass hands over what it meets: the realtime files' mappings
//! ([`RtgState::add_file`], one reverse mapping each, memory following the
//! files' extent records) and the records of the inode-rooted btrees of
//! the metadata files whose data fork is a metadata btree
//! ([`RtgState::meta_btree`], which also claims their blocks on the data
//! device as the files' own btree blocks). [`finish`] then goes group by
//! group: the used realtime extents (the classic pass's, counted across
//! the groups end to end, plus the realtime superblock's first extent)
//! give each group's bitmap (free bits set, big-endian words after a
//! self-describing header) and summary (for each power of two and bitmap
//! block of the group, the free runs of that class starting there), which
//! are compared block by block with the files `/rtgroups/N.bitmap` and
//! `N.summary` of the metadata directory tree; the rmap btree `N.rmap`
//! holds exactly the files' mappings in the group, and the refcount btree
//! `N.refcount` exactly the blocks more than one mapping shares. Memory
//! follows one group's bitmap block and the realtime files, not the size
//! of the realtime device.

use super::rmap::{self, Rmap};
use super::rt::set_bits;
use super::Ctx;
use crate::bytes::{be16, be32, be64};
use crate::error::Location;
use crate::geometry::FsBlock;
use crate::inode::{self, Extent, FileType, Fork, ForkFormat, Inode};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use xfs_format::btree as xbt;
use xfs_format::inode as di;
use xfs_format::rtgroup as rtg;

/// Size of the header of realtime bitmap and summary blocks.
const HDR: usize = rtg::XFS_RTBUF_HDR_SIZE;
/// Size of a realtime rmap record and of one (low or high) key.
const RMAP_REC: usize = 24;
const RMAP_KEY: usize = 20;
/// Size of a realtime refcount record and key.
const REFC_REC: usize = 12;
const REFC_KEY: usize = 4;
/// Deepest btree walked.
const MAX_LEVELS: u16 = 9;
/// Most problems reported for one group's file before the rest are counted.
const MAX_PER_FILE: usize = 8;

/// The two kinds of inode-rooted realtime group btrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Rmap,
    Refcount,
}

impl Tree {
    fn what(self) -> &'static str {
        match self {
            Tree::Rmap => "realtime rmap btree",
            Tree::Refcount => "realtime refcount btree",
        }
    }
    fn magic(self) -> u32 {
        match self {
            Tree::Rmap => rtg::XFS_RTRMAP_CRC_MAGIC,
            Tree::Refcount => rtg::XFS_RTREFC_CRC_MAGIC,
        }
    }
    fn rec_len(self) -> usize {
        match self {
            Tree::Rmap => RMAP_REC,
            Tree::Refcount => REFC_REC,
        }
    }
    /// A node's key: the rmap btree keeps a low and a high key.
    fn key_len(self) -> usize {
        match self {
            Tree::Rmap => 2 * RMAP_KEY,
            Tree::Refcount => REFC_KEY,
        }
    }
    /// The low key of a node key, comparable with [`Tree::rec_key`]
    /// (an rmap key's offset without the unwritten flag, which keys leave out).
    fn low_key(self, k: &[u8]) -> Vec<u8> {
        match self {
            Tree::Rmap => {
                let mut v = k[..RMAP_KEY].to_vec();
                v[12] &= !0x20;
                v
            }
            Tree::Refcount => k[..REFC_KEY].to_vec(),
        }
    }
    /// The key of a leaf record.
    fn rec_key(self, r: &[u8]) -> Vec<u8> {
        match self {
            Tree::Rmap => {
                let mut v = Vec::with_capacity(RMAP_KEY);
                v.extend_from_slice(&r[0..4]);
                v.extend_from_slice(&r[8..24]);
                v[12] &= !0x20;
                v
            }
            Tree::Refcount => r[..REFC_KEY].to_vec(),
        }
    }
}

/// What the inode pass collected for the realtime groups.
#[derive(Default)]
pub(crate) struct RtgState {
    /// (group, reverse mapping) of every realtime file mapping.
    maps: Mutex<Vec<(u32, Rmap)>>,
    /// Leaf records of each metadata btree inode, raw, in tree order.
    trees: Mutex<HashMap<u64, (Tree, Vec<u8>)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RtgState {
    /// Notes a realtime file's data fork mapping (valid extents only:
    /// the mapping was read through the checks of `inode::extents`).
    pub(crate) fn add_file(&self, ctx: &Ctx<'_>, ino: u64, ext: &[Extent]) {
        let geo = ctx.fs.geometry();
        if !geo.has_rtgroups() || !geo.features.rmapbt && !geo.features.reflink {
            return;
        }
        let mine: Vec<(u32, Rmap)> = ext
            .iter()
            .map(|e| {
                let (rgno, rgbno) = geo.rtb_split(e.start.0);
                (
                    rgno,
                    Rmap::file(
                        rgbno as u32,
                        e.len as u32,
                        ino,
                        e.offset,
                        false,
                        e.unwritten,
                    ),
                )
            })
            .collect();
        lock(&self.maps).extend(mine);
    }

    /// Walks the metadata btree rooted in `ip`'s data fork: its blocks are
    /// checked, claimed and expected in the AG rmapbt as `ip`'s btree
    /// blocks, and its leaf records kept for [`finish`]. Returns the
    /// number of blocks (for the inode's block count).
    pub(crate) fn meta_btree(&self, ctx: &Ctx<'_>, ip: &Inode) -> u64 {
        let ino = ip.ino.0;
        let geo = ctx.fs.geometry();
        let at = Location::Inode(ino);
        let metatype = {
            let mut raw = [0u8; 8];
            match ctx.fs.read_bytes(geo.ino_to_bytes(ip.ino), &mut raw) {
                Ok(()) => be16(&raw, 6),
                Err(e) => {
                    ctx.sink.error_in(e, ino);
                    return 0;
                }
            }
        };
        let tree = match metatype {
            di::XFS_METAFILE_RTRMAP => Tree::Rmap,
            di::XFS_METAFILE_RTREFCOUNT => Tree::Refcount,
            _ => {
                ctx.sink.add(
                    "inode",
                    at,
                    format!("metadata btree fork in a metadata file of type {metatype}"),
                );
                return 0;
            }
        };
        let root = &ip.data_fork;
        if root.len() < 4 {
            ctx.sink.add(tree.what(), at, "no room for the btree root");
            return 0;
        }
        let (level, numrecs) = (be16(root, 0), usize::from(be16(root, 2)));
        let mut recs = Vec::new();
        let mut blocks = 0u64;
        if level == 0 {
            let max = (root.len() - 4) / tree.rec_len();
            if numrecs > max {
                ctx.sink.add(
                    tree.what(),
                    at,
                    format!("root holds {numrecs} records, room for {max}"),
                );
                return 0;
            }
            recs.extend_from_slice(&root[4..4 + numrecs * tree.rec_len()]);
        } else if level > MAX_LEVELS {
            ctx.sink
                .add(tree.what(), at, format!("root at level {level}"));
            return 0;
        } else {
            let max = (root.len() - 4) / (tree.key_len() + 8);
            if numrecs == 0 || numrecs > max {
                ctx.sink.add(
                    tree.what(),
                    at,
                    format!("root holds {numrecs} pointers, room for {max}"),
                );
                return 0;
            }
            let ptrs: Vec<(u64, Vec<u8>)> = (0..numrecs)
                .map(|i| {
                    let k = 4 + i * tree.key_len();
                    (
                        be64(root, 4 + max * tree.key_len() + i * 8),
                        tree.low_key(&root[k..k + tree.key_len()]),
                    )
                })
                .collect();
            blocks = self.walk(ctx, ip, tree, level - 1, ptrs, &mut recs);
        }
        lock(&self.trees).insert(ino, (tree, recs));
        blocks
    }

    /// Walks the btree's blocks below the root, level by level, from the
    /// root's pointers `cur` at `level`; returns how many were claimed.
    fn walk(
        &self,
        ctx: &Ctx<'_>,
        ip: &Inode,
        tree: Tree,
        mut level: u16,
        mut cur: Vec<(u64, Vec<u8>)>,
        recs: &mut Vec<u8>,
    ) -> u64 {
        let geo = ctx.fs.geometry();
        let ino = ip.ino.0;
        let bs = geo.block_size as usize;
        let hdr = xbt::XFS_BTREE_LBLOCK_CRC_LEN;
        let limit = ip.nblocks.saturating_add(1);
        let mut n = 0u64;
        // A block met twice (a pointer loop or a shared child) is walked once.
        let mut seen = std::collections::HashSet::new();
        loop {
            let mut next = Vec::new();
            for (k, (fsb, key)) in cur.iter().enumerate() {
                let fsb = *fsb;
                if !seen.insert(fsb) {
                    ctx.sink.add(
                        tree.what(),
                        Location::Inode(ino),
                        format!("block {fsb} is pointed to twice"),
                    );
                    continue;
                }
                let (agno, agbno) = geo.fsb_split(FsBlock(fsb));
                let at = Location::AgBlock {
                    agno: agno.0,
                    agbno: agbno.0,
                };
                if n >= limit || !geo.fsb_valid(FsBlock(fsb)) {
                    ctx.sink.add(
                        tree.what(),
                        Location::Inode(ino),
                        format!("pointer to block {fsb} outside the data section or past the inode's {} blocks", ip.nblocks),
                    );
                    return n;
                }
                n += 1;
                ctx.map.claim(
                    &ctx.sink,
                    agno.0,
                    agbno.0,
                    1,
                    super::owners::Use::Bmbt,
                    tree.what(),
                    &|| Location::InodeBlock {
                        ino,
                        fork: "data",
                        offset: 0,
                    },
                );
                ctx.rmaps.expect(agno.0, Rmap::bmbt(agbno.0, ino, false));
                let daddr = geo.fsb_to_daddr(FsBlock(fsb));
                let mut blk = vec![0u8; bs];
                if let Err(e) = ctx.fs.read_bytes(daddr.bytes(), &mut blk) {
                    ctx.sink
                        .add(tree.what(), at, format!("cannot be read: {e}"));
                    continue;
                }
                let mut bad = Vec::new();
                if be32(&blk, 0) != tree.magic() {
                    bad.push(format!("bad magic {:#010x}", be32(&blk, 0)));
                } else if !xfs_format::crc::verify(&blk, xbt::XFS_BTREE_LBLOCK_CRC_OFF) {
                    bad.push("bad CRC".into());
                }
                if bad.is_empty() {
                    if be16(&blk, 4) != level {
                        bad.push(format!("level {}, want {level}", be16(&blk, 4)));
                    }
                    if be64(&blk, 56) != ino {
                        bad.push(format!("owner {}, want inode {ino}", be64(&blk, 56)));
                    }
                    if be64(&blk, 24) != daddr.0 {
                        bad.push(format!("blkno {}, want {}", be64(&blk, 24), daddr.0));
                    }
                    if blk[40..56] != geo.meta_uuid {
                        bad.push("uuid is not the filesystem's".into());
                    }
                }
                let nr = usize::from(be16(&blk, 6));
                let unit = if level == 0 {
                    tree.rec_len()
                } else {
                    tree.key_len() + 8
                };
                let max = (bs - hdr) / unit;
                if bad.is_empty() && (nr == 0 || nr > max) {
                    bad.push(format!("{nr} records, room for {max}"));
                }
                // Siblings chain the level in order; the parent's key is
                // the block's first (low) key. Reported; the records are
                // still used.
                let mut soft = Vec::new();
                if bad.is_empty() && nr > 0 && nr <= max {
                    let want_left = if k == 0 { u64::MAX } else { cur[k - 1].0 };
                    let want_right = cur.get(k + 1).map_or(u64::MAX, |c| c.0);
                    let (left, right) = (be64(&blk, 8), be64(&blk, 16));
                    if (left, right) != (want_left, want_right) {
                        soft.push(format!(
                            "siblings {left:#x} and {right:#x}, want {want_left:#x} and {want_right:#x}"
                        ));
                    }
                    let first = if level == 0 {
                        tree.rec_key(&blk[hdr..hdr + tree.rec_len()])
                    } else {
                        tree.low_key(&blk[hdr..hdr + tree.key_len()])
                    };
                    if first != *key {
                        soft.push(
                            "the parent's key differs from the block's first key".to_string(),
                        );
                    }
                }
                if !soft.is_empty() {
                    ctx.sink.add(tree.what(), at.clone(), soft.join("; "));
                }
                if !bad.is_empty() {
                    ctx.sink.add(tree.what(), at, bad.join("; "));
                    continue;
                }
                if level == 0 {
                    recs.extend_from_slice(&blk[hdr..hdr + nr * tree.rec_len()]);
                } else {
                    let p0 = hdr + max * tree.key_len();
                    next.extend((0..nr).map(|i| {
                        let k = hdr + i * tree.key_len();
                        (
                            be64(&blk, p0 + i * 8),
                            tree.low_key(&blk[k..k + tree.key_len()]),
                        )
                    }));
                }
            }
            if level == 0 || next.is_empty() {
                return n;
            }
            level -= 1;
            cur = next;
        }
    }
}

/// Decodes realtime rmap leaf records (in tree order); records out of
/// order or of an impossible shape are reported.
fn rmap_records(ctx: &Ctx<'_>, rgno: u32, raw: &[u8]) -> Vec<Rmap> {
    let what = Tree::Rmap.what();
    let mut out = Vec::with_capacity(raw.len() / RMAP_REC);
    let mut last: Option<(u32, u64, u64)> = None;
    for r in raw.chunks_exact(RMAP_REC) {
        let (start, len, owner, off) = (be32(r, 0), be32(r, 4), be64(r, 8), be64(r, 16));
        let key = (start, owner, off);
        if last.is_some_and(|l| l > key) {
            ctx.sink.add(
                what,
                group_at(rgno, start),
                format!("record at block {start} out of order"),
            );
        }
        last = Some(key);
        let mut flags = 0;
        if off & xbt::XFS_RMAP_OFF_UNWRITTEN != 0 {
            flags |= rmap::UNWRITTEN;
        }
        if off & (xbt::XFS_RMAP_OFF_ATTR_FORK | xbt::XFS_RMAP_OFF_BMBT_BLOCK) != 0 || len == 0 {
            ctx.sink.add(
                what,
                group_at(rgno, start),
                format!("record of {len} blocks at {start} for owner {owner:#x} with attr fork or bmbt flags"),
            );
            continue;
        }
        out.push(Rmap {
            start,
            len,
            owner,
            offset: off & xbt::XFS_RMAP_OFF_MASK,
            flags,
        });
    }
    out
}

fn group_at(rgno: u32, rgbno: u32) -> Location {
    Location::Other(format!("realtime group {rgno} block {rgbno}"))
}

fn group_file(rgno: u32, name: &str) -> Location {
    Location::Other(format!("realtime group {rgno} /rtgroups/{rgno}.{name}"))
}

/// The blocks that more than one mapping of the group shares, as maximal
/// runs of one count: (start, len, count).
fn shared_runs(maps: &[Rmap]) -> Vec<(u64, u64, u32)> {
    let mut edges: BTreeMap<u64, i64> = BTreeMap::new();
    for m in maps {
        *edges.entry(u64::from(m.start)).or_default() += 1;
        *edges
            .entry(u64::from(m.start) + u64::from(m.len))
            .or_default() -= 1;
    }
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    let mut count = 0i64;
    let mut prev = 0u64;
    for (&at, &d) in &edges {
        if count > 1 && at > prev {
            let c = count as u32;
            match out.last_mut() {
                Some(l) if l.0 + l.1 == prev && l.2 == c => l.1 += at - prev,
                _ => out.push((prev, at - prev, c)),
            }
        }
        count += d;
        prev = at;
    }
    out
}

/// Looks up `name` in directory `dir`, reporting what is wrong.
fn child(ctx: &Ctx<'_>, dir: &Inode, name: &str, at: &dyn Fn() -> Location) -> Option<Inode> {
    match crate::dir::lookup(ctx.fs, dir, name.as_bytes()) {
        Ok(Some(ino)) => match ctx.fs.inode(ino) {
            Ok(ip) => Some(ip),
            Err(e) => {
                ctx.sink
                    .add("metadata directory", at(), format!("{name}: {e}"));
                None
            }
        },
        Ok(None) => {
            ctx.sink
                .add("metadata directory", at(), format!("{name} is missing"));
            None
        }
        Err(e) => {
            ctx.sink
                .add("metadata directory", at(), format!("{name}: {e}"));
            None
        }
    }
}

/// One group's bitmap or summary file: a regular metadata file of
/// `blocks` blocks whose blocks each carry the header of `magic`. Yields
/// block `b`'s words (after the header) or None (reported).
struct RtFile<'a> {
    ctx: &'a Ctx<'a>,
    what: &'static str,
    magic: u32,
    ino: u64,
    map: Vec<Extent>,
    reported: usize,
}

impl<'a> RtFile<'a> {
    fn open(
        ctx: &'a Ctx<'a>,
        ip: Inode,
        what: &'static str,
        magic: u32,
        blocks: u64,
        rgno: u32,
    ) -> Option<RtFile<'a>> {
        let geo = ctx.fs.geometry();
        let ino = ip.ino.0;
        let at = || Location::Inode(ino);
        if ip.file_type != FileType::File
            || !matches!(ip.format, ForkFormat::Extents | ForkFormat::Btree)
        {
            ctx.sink.add(
                what,
                at(),
                format!(
                    "realtime group {rgno}'s file is a {:?} of format {:?}, not a regular file of extents",
                    ip.file_type, ip.format
                ),
            );
            return None;
        }
        if ip.flags2 & di::XFS_DIFLAG2_METADATA == 0 {
            ctx.sink.add(
                what,
                at(),
                format!("realtime group {rgno}'s file is not a metadata file"),
            );
        }
        let want = blocks * u64::from(geo.block_size);
        if ip.size != want {
            ctx.sink.add(
                what,
                at(),
                format!(
                    "realtime group {rgno}: size {}, want {want} ({blocks} blocks)",
                    ip.size
                ),
            );
        }
        let map = match inode::extents(ctx.fs, &ip, Fork::Data) {
            Ok(m) => m,
            Err(e) => {
                ctx.sink.error_in(e, ino);
                return None;
            }
        };
        Some(RtFile {
            ctx,
            what,
            magic,
            ino,
            map,
            reported: 0,
        })
    }

    fn problem(&mut self, b: u64, detail: String) {
        self.reported += 1;
        if self.reported <= MAX_PER_FILE {
            self.ctx.sink.add(
                self.what,
                Location::InodeBlock {
                    ino: self.ino,
                    fork: "data",
                    offset: b,
                },
                detail,
            );
        }
    }

    fn words(&mut self, b: u64) -> Option<Vec<u32>> {
        let geo = self.ctx.fs.geometry();
        let e = match inode::lookup(&self.map, b) {
            Ok(e) if !e.unwritten => *e,
            _ => {
                self.problem(b, "block not mapped (a hole or unwritten)".into());
                return None;
            }
        };
        let bs = u64::from(geo.block_size);
        let daddr = geo.fsb_to_daddr(e.start).0 + (b - e.offset) * (bs >> 9);
        let mut buf = vec![0u8; geo.block_size as usize];
        if let Err(err) = self.ctx.fs.read_bytes(daddr << 9, &mut buf) {
            self.problem(b, format!("cannot be read: {err}"));
            return None;
        }
        let mut bad = Vec::new();
        if be32(&buf, 0) != self.magic {
            bad.push(format!("bad magic {:#010x}", be32(&buf, 0)));
        } else {
            if !xfs_format::crc::verify(&buf, rtg::XFS_RTBUF_CRC_OFF) {
                bad.push("bad CRC".into());
            }
            if be64(&buf, 8) != self.ino {
                bad.push(format!("owner {}, want inode {}", be64(&buf, 8), self.ino));
            }
            if be64(&buf, 16) != daddr {
                bad.push(format!("blkno {}, want {daddr}", be64(&buf, 16)));
            }
            if buf[32..48] != geo.meta_uuid {
                bad.push("uuid is not the filesystem's".into());
            }
        }
        if !bad.is_empty() {
            self.problem(b, format!("header: {}", bad.join("; ")));
            if be32(&buf, 0) != self.magic {
                return None;
            }
        }
        Some(buf[HDR..].chunks_exact(4).map(|w| be32(w, 0)).collect())
    }
}

/// Checks every realtime group against the realtime files (see the module
/// documentation).
pub(crate) fn finish(ctx: &Ctx<'_>, used_linear: Vec<(u64, u64)>) {
    let geo = ctx.fs.geometry();
    // Zoned groups have no realtime superblock, bitmap or summary: their
    // free space is what lies past each zone's write pointer and what the
    // rmap btree does not map, which the kernel counts at mount.
    let zoned = geo.zoned;
    let mut used = Vec::with_capacity(used_linear.len() + 1);
    if !zoned {
        let Some(rt) = ctx.fs.rt_device() else {
            return;
        };
        match crate::rtgroup::read_rtsb(geo, rt) {
            Ok(block) => {
                for p in crate::rtgroup::rtsb_problems(geo, &block) {
                    ctx.sink.add("realtime superblock", group_at(0, 0), p);
                }
            }
            Err(e) => ctx.sink.add(
                "realtime superblock",
                group_at(0, 0),
                format!("cannot be read: {e}"),
            ),
        }
        // Its extent is in use, as the files' extents are.
        used.push((0u64, 1u64));
    }
    for (s, e) in used_linear {
        match used.last_mut() {
            Some(u) if s <= u.1 => u.1 = u.1.max(e),
            _ => used.push((s, e)),
        }
    }

    let bs = u64::from(geo.block_size);
    let wpb = ((bs as usize) - HDR) / 4;
    let bits = wpb as u64 * 32;
    let rbmblocks = u64::from(geo.rt_bmblocks);
    let rx = u64::from(geo.rt_extsize.max(1));
    let want_bm = if zoned {
        0
    } else {
        u64::from(geo.rg_extents).div_ceil(bits)
    };
    if rbmblocks != want_bm {
        ctx.sink.add(
            "superblock",
            Location::Sb(0),
            format!("rbmblocks {rbmblocks}, but realtime groups of {} extents need {want_bm} bitmap blocks: the bitmaps and summaries were not compared", geo.rg_extents),
        );
        return;
    }
    let levels = u64::from(geo.rt_extslog) + 1;
    let rsumblocks = (levels * rbmblocks).div_ceil(wpb as u64);

    let Ok(mdir) = ctx.fs.inode(geo.metadir_ino) else {
        return; // reported by the namespace pass
    };
    let Some(dir) = child(ctx, &mdir, "rtgroups", &|| {
        Location::Inode(geo.metadir_ino.0)
    }) else {
        return;
    };
    let dir_at = || Location::Inode(dir.ino.0);

    let mut maps: Vec<(u32, Rmap)> = std::mem::take(&mut *lock(&ctx.rtg.maps));
    maps.sort_unstable_by_key(|(g, r)| (*g, r.start));
    let mut trees = std::mem::take(&mut *lock(&ctx.rtg.trees));
    let mut next_map = 0usize;
    let mut next_used = 0usize;
    let mut free_total = 0u64;
    for rgno in 0..geo.rg_count {
        let first = u64::from(rgno) * u64::from(geo.rg_extents);
        let gext = geo.rg_len(rgno) / rx;
        let end = first + gext;
        // This group's used extents, relative to the group.
        let mut gused: Vec<(u64, u64)> = Vec::new();
        while let Some(&(s, e)) = used.get(next_used) {
            if s >= end {
                break;
            }
            if e > first {
                gused.push((s.max(first) - first, e.min(end) - first));
            }
            if e <= end {
                next_used += 1;
            } else {
                break;
            }
        }
        // Free runs: the free count and the summary.
        let mut summary: BTreeMap<u64, u32> = BTreeMap::new();
        let mut at = 0u64;
        let mut runs = Vec::new();
        for &(s, e) in &gused {
            if s > at {
                runs.push((at, s));
            }
            at = at.max(e);
        }
        if at < gext {
            runs.push((at, gext));
        }
        for &(a, b) in &runs {
            free_total += b - a;
            let level = u64::from(63 - (b - a).leading_zeros());
            let n = summary.entry(level * rbmblocks + a / bits).or_default();
            *n = n.wrapping_add(1);
        }

        // The bitmap.
        let what = "realtime bitmap";
        if zoned {
            // No bitmap or summary.
        } else if let Some(ip) = child(ctx, &dir, &format!("{rgno}.bitmap"), &dir_at) {
            if let Some(mut f) =
                RtFile::open(ctx, ip, what, rtg::XFS_RTBITMAP_MAGIC, rbmblocks, rgno)
            {
                let mut k = 0usize;
                let mut want = vec![0u32; wpb];
                for b in 0..rbmblocks {
                    let Some(got) = f.words(b) else { continue };
                    let lo = b * bits;
                    let hi = (lo + bits).min(gext);
                    want.fill(0);
                    set_bits(&mut want, 0, hi.saturating_sub(lo), true);
                    while let Some(&(s, e)) = gused.get(k) {
                        if s >= hi {
                            break;
                        }
                        if e > lo {
                            set_bits(&mut want, s.max(lo) - lo, e.min(hi) - lo, false);
                        }
                        if e <= hi {
                            k += 1;
                        } else {
                            break;
                        }
                    }
                    if let Some(w) = (0..wpb).find(|&w| got[w] != want[w]) {
                        let n = (0..wpb).filter(|&w| got[w] != want[w]).count();
                        f.problem(
                            b,
                            format!(
                                "realtime group {rgno}: {n} word(s) differ from what the realtime files map, first word {w} ({:#010x}, want {:#010x}: realtime extents {}-{} of the group)",
                                got[w],
                                want[w],
                                lo + w as u64 * 32,
                                lo + w as u64 * 32 + 31
                            ),
                        );
                    }
                }
            }
        }

        // The summary.
        let what = "realtime summary";
        if zoned {
            // As above.
        } else if let Some(ip) = child(ctx, &dir, &format!("{rgno}.summary"), &dir_at) {
            if let Some(mut f) =
                RtFile::open(ctx, ip, what, rtg::XFS_RTSUMMARY_MAGIC, rsumblocks, rgno)
            {
                let mut want = vec![0u32; wpb];
                for b in 0..rsumblocks {
                    let Some(got) = f.words(b) else { continue };
                    want.fill(0);
                    let lo = b * wpb as u64;
                    for (&idx, &n) in summary.range(lo..lo + wpb as u64) {
                        want[(idx - lo) as usize] = n;
                    }
                    if let Some(w) = (0..wpb).find(|&w| got[w] != want[w]) {
                        let idx = lo + w as u64;
                        f.problem(
                            b,
                            format!(
                                "realtime group {rgno}: word {w}: {} free runs of 2^{} extents in bitmap block {}, the realtime files leave {}",
                                got[w],
                                idx / rbmblocks.max(1),
                                idx % rbmblocks.max(1),
                                want[w]
                            ),
                        );
                    }
                }
            }
        }

        // This group's file mappings.
        let start = next_map;
        while maps.get(next_map).is_some_and(|(g, _)| *g == rgno) {
            next_map += 1;
        }
        let gmaps: Vec<Rmap> = maps[start..next_map].iter().map(|(_, r)| *r).collect();

        if geo.features.rmapbt {
            if let Some(ip) = child(ctx, &dir, &format!("{rgno}.rmap"), &dir_at) {
                match trees.remove(&ip.ino.0) {
                    Some((Tree::Rmap, raw)) => {
                        let found = rmap_records(ctx, rgno, &raw);
                        let mut want = gmaps.clone();
                        if rgno == 0 && !zoned {
                            // The realtime superblock takes group 0's whole
                            // first realtime extent.
                            let len = geo.rt_extsize.max(1);
                            want.push(Rmap::ag(0, len, xbt::XFS_RMAP_OWN_FS));
                        }
                        rmap::compare_in(
                            ctx,
                            Tree::Rmap.what(),
                            &|b| group_at(rgno, b),
                            &format!("realtime group {rgno} rmap btree"),
                            want,
                            found,
                        );
                    }
                    _ => ctx.sink.add(
                        Tree::Rmap.what(),
                        group_file(rgno, "rmap"),
                        format!("inode {} is not a realtime rmap btree", ip.ino.0),
                    ),
                }
            }
        }
        if geo.features.reflink {
            if let Some(ip) = child(ctx, &dir, &format!("{rgno}.refcount"), &dir_at) {
                match trees.remove(&ip.ino.0) {
                    Some((Tree::Refcount, raw)) => check_refcounts(ctx, rgno, &raw, &gmaps),
                    _ => ctx.sink.add(
                        Tree::Refcount.what(),
                        group_file(rgno, "refcount"),
                        format!("inode {} is not a realtime refcount btree", ip.ino.0),
                    ),
                }
            }
        }
    }
    if !zoned && geo.rt_frextents != free_total {
        ctx.sink.add(
            "superblock",
            Location::Sb(0),
            format!(
                "frextents {}, but the realtime files leave {free_total} realtime extents free",
                geo.rt_frextents
            ),
        );
    }
}

/// The refcount btree of group `rgno` against the blocks its mappings
/// share (no copy-on-write staging extents on a clean filesystem).
fn check_refcounts(ctx: &Ctx<'_>, rgno: u32, raw: &[u8], maps: &[Rmap]) {
    let what = Tree::Refcount.what();
    let want = shared_runs(maps);
    let mut found = Vec::with_capacity(raw.len() / REFC_REC);
    for r in raw.chunks_exact(REFC_REC) {
        let (start, len, count) = (be32(r, 0), be32(r, 4), be32(r, 8));
        if start & (1 << 31) != 0 {
            ctx.sink.add(
                what,
                group_at(rgno, start & !(1 << 31)),
                format!("copy-on-write staging extent of {len} blocks left over"),
            );
            continue;
        }
        found.push((u64::from(start), u64::from(len), count));
    }
    let mut shown = 0;
    // A record of the right blocks with the wrong count is reported once,
    // below.
    let same_blocks = |w: &(u64, u64, u32)| found.iter().any(|f| (f.0, f.1) == (w.0, w.1));
    for w in want
        .iter()
        .filter(|w| !found.contains(w) && !same_blocks(w))
    {
        shown += 1;
        if shown <= MAX_PER_FILE {
            ctx.sink.add(
                what,
                group_at(rgno, w.0 as u32),
                format!(
                    "no record for blocks {}..{} shared by {} mappings",
                    w.0,
                    w.0 + w.1,
                    w.2
                ),
            );
        }
    }
    for f in found.iter().filter(|f| !want.contains(f)) {
        shown += 1;
        if shown <= MAX_PER_FILE {
            ctx.sink.add(
                what,
                group_at(rgno, f.0 as u32),
                format!(
                    "record for blocks {}..{} with count {}, but the files share them {} time(s)",
                    f.0,
                    f.0 + f.1,
                    f.2,
                    maps.iter()
                        .filter(|m| u64::from(m.start) <= f.0
                            && u64::from(m.start) + u64::from(m.len) > f.0)
                        .count()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u32, len: u32, ino: u64) -> Rmap {
        Rmap::file(start, len, ino, 0, false, false)
    }

    #[test]
    fn shared_runs_of_overlapping_mappings() {
        assert!(shared_runs(&[m(0, 4, 1), m(4, 4, 2)]).is_empty());
        assert_eq!(
            shared_runs(&[m(0, 10, 1), m(5, 10, 2), m(8, 1, 3)]),
            [(5, 3, 2), (8, 1, 3), (9, 1, 2)]
        );
        assert_eq!(
            shared_runs(&[m(0, 4, 1), m(0, 2, 2), m(2, 2, 3)]),
            [(0, 4, 2)]
        );
    }
}

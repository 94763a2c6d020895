//! Pass 1, per AG: headers, free list, free space btrees, refcount and
//! rmap btrees, inode btrees.

use super::rmap::{self, Rmap};
use super::space::{walk_short, walk_short_whole, Use};
use super::Ctx;
use crate::buf::verify::Verifier;
use crate::bytes::{be16, be32};
use crate::error::Location;
use crate::geometry::{AgNumber, Daddr, Geometry};
use std::sync::atomic::Ordering;
use xfs_format::ag::{self as xag, Agf, Agi};
use xfs_format::btree as xbt;
use zerocopy::FromBytes;

/// One inode btree record, decoded for either layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// AG inode number of the first inode.
    pub startino: u32,
    /// One bit per 4 inodes not backed by disk space.
    pub holemask: u16,
    /// Inodes present.
    pub count: u32,
    /// Free inodes.
    pub freecount: u32,
    /// One bit per free inode.
    pub free: u64,
}

impl Chunk {
    /// True when inode `i` of the chunk lies in a hole.
    pub fn is_hole(&self, i: u32) -> bool {
        self.holemask & (1 << (i / xbt::XFS_INODES_PER_HOLEMASK_BIT)) != 0
    }
}

/// What pass 1 learned about an AG.
#[derive(Debug, Default)]
pub(crate) struct AgHeads {
    /// Inode chunks from the inobt, in order (only plausible ones).
    pub chunks: Vec<Chunk>,
    /// Free blocks counted in the cntbt.
    pub freeblks: u64,
    /// Blocks on the free list.
    pub flcount: u64,
    /// Non-root free space and rmap btree blocks.
    pub btreeblks: u64,
    /// Inodes in the inobt.
    pub icount: u64,
    /// Free inodes in the inobt.
    pub ifree: u64,
    /// The rmapbt's records of owners other than inodes, when the whole
    /// tree could be read.
    pub rmap_ag: Option<Vec<Rmap>>,
}

fn read_hdr(
    ctx: &Ctx<'_>,
    agno: u32,
    sector: u64,
    v: &Verifier<'_>,
) -> Option<std::sync::Arc<[u8]>> {
    let geo = ctx.fs.geometry();
    let ag0 = geo.agb_to_daddr(AgNumber(agno), crate::geometry::AgBlock(0));
    let spd = u64::from(geo.sect_size >> 9);
    match ctx
        .fs
        .read_meta(Daddr(ag0.0 + sector * spd), geo.sect_size, v)
    {
        Ok(b) => Some(b),
        Err(e) => {
            // A header that is sound once its identity is written again
            // is read so, with that fix.
            let at = Daddr(ag0.0 + sector * spd);
            let mut raw = vec![0u8; geo.sect_size as usize];
            if ctx.fs.read_bytes(at.bytes(), &mut raw).is_ok() {
                set_ident(geo, agno, sector, &mut raw);
                if v.check_structure(geo, at, &raw).is_ok() {
                    ctx.sink
                        .error_with(e, None, Some(super::Fix::AgHeaderIdent { agno, sector }));
                    return Some(raw.into());
                }
            }
            ctx.sink.error(e);
            None
        }
    }
}

/// Writes the identity of AG header `sector` (1 AGF, 2 AGI, 3 AGFL) of AG
/// `agno` into `raw`: magic number, version, AG number, AG length and (v5)
/// UUID, and stamps its CRC.
pub(crate) fn set_ident(geo: &crate::geometry::Geometry, agno: u32, sector: u64, raw: &mut [u8]) {
    use std::mem::offset_of;
    use xfs_format::ag::{AgflHdr, Agi};
    let put = |raw: &mut [u8], at: usize, v: u32| raw[at..at + 4].copy_from_slice(&v.to_be_bytes());
    let len = geo.ag_len(AgNumber(agno));
    let (uuid, crc) = match sector {
        1 => {
            put(raw, offset_of!(Agf, agf_magicnum), xag::XFS_AGF_MAGIC);
            put(raw, offset_of!(Agf, agf_versionnum), 1);
            put(raw, offset_of!(Agf, agf_seqno), agno);
            put(raw, offset_of!(Agf, agf_length), len);
            (offset_of!(Agf, agf_uuid), xag::XFS_AGF_CRC_OFF)
        }
        2 => {
            put(raw, offset_of!(Agi, agi_magicnum), xag::XFS_AGI_MAGIC);
            put(raw, offset_of!(Agi, agi_versionnum), 1);
            put(raw, offset_of!(Agi, agi_seqno), agno);
            put(raw, offset_of!(Agi, agi_length), len);
            (offset_of!(Agi, agi_uuid), xag::XFS_AGI_CRC_OFF)
        }
        _ => {
            if !geo.v5 {
                return;
            }
            put(raw, offset_of!(AgflHdr, agfl_magicnum), xag::XFS_AGFL_MAGIC);
            put(raw, offset_of!(AgflHdr, agfl_seqno), agno);
            (offset_of!(AgflHdr, agfl_uuid), xag::XFS_AGFL_CRC_OFF)
        }
    };
    if geo.v5 {
        raw[uuid..uuid + 16].copy_from_slice(&geo.meta_uuid);
        xfs_format::crc::stamp(raw, crc);
    }
}

/// Pass 1 for AG `agno`. Problems go to the sink.
pub(crate) fn check_ag(ctx: &Ctx<'_>, agno: u32) -> AgHeads {
    let geo = ctx.fs.geometry();
    let mut heads = AgHeads::default();
    // AG headers: the sectors of sb, AGF, AGI, AGFL, in whole blocks.
    let hdr_blocks = ((4 * u64::from(geo.sect_size)).div_ceil(u64::from(geo.block_size))) as u32;
    let at = |agbno: u32| move || Location::AgBlock { agno, agbno };
    super::sb::check_sb(ctx, agno, &ctx.sb0);
    ctx.map.claim(
        &ctx.sink,
        agno,
        0,
        u64::from(hdr_blocks),
        Use::Header,
        "AG headers",
        &at(0),
    );
    ctx.rmaps
        .expect(agno, Rmap::ag(0, hdr_blocks, xbt::XFS_RMAP_OWN_FS));
    if geo.log_start.0 != 0 {
        let (lag, lbno) = geo.fsb_split(geo.log_start);
        if lag.0 == agno {
            ctx.map.claim(
                &ctx.sink,
                agno,
                lbno.0,
                u64::from(geo.log_blocks),
                Use::Log,
                "log",
                &at(lbno.0),
            );
            ctx.rmaps.expect(
                agno,
                Rmap::ag(lbno.0, geo.log_blocks, xbt::XFS_RMAP_OWN_LOG),
            );
        }
    }
    if let Some(b) = read_hdr(ctx, agno, xag::XFS_AGF_SECTOR, &Verifier::Agf { agno }) {
        if let Ok((agf, _)) = Agf::read_from_prefix(&b) {
            check_agf(ctx, agno, &agf, &mut heads);
        }
    }
    if let Some(b) = read_hdr(ctx, agno, xag::XFS_AGI_SECTOR, &Verifier::Agi { agno }) {
        if let Ok((agi, _)) = Agi::read_from_prefix(&b) {
            check_agi(ctx, agno, &agi, &mut heads);
        }
    }
    // Everything but the files' mappings is known: compare those now.
    if ctx.rmaps.on() {
        let want = ctx.rmaps.take_expected(agno);
        match heads.rmap_ag.take() {
            Some(found) => rmap::compare(ctx, agno, want, found),
            None => ctx.rmaps.skip(agno, want),
        }
    }
    heads
}

fn check_agf(ctx: &Ctx<'_>, agno: u32, agf: &Agf, heads: &mut AgHeads) {
    let geo = ctx.fs.geometry();
    let loc = || Location::Other(format!("AG {agno} AGF"));
    check_agfl(ctx, agno, agf, heads);

    // bnobt: records by start block, no overlap.
    let mut bno: Vec<(u32, u32)> = Vec::new();
    let aglen = geo.ag_len(AgNumber(agno));
    let mut last_end = 0u64;
    let bno_blocks = walk_short(
        ctx,
        agno,
        xbt::XFS_ABTB_CRC_MAGIC,
        agf.agf_bno_root.get(),
        agf.agf_bno_level.get(),
        &mut |r, blk| {
            let (s, l) = (be32(r, 0), be32(r, 4));
            let bad = |d: String| {
                ctx.sink
                    .add("bnobt block", Location::AgBlock { agno, agbno: blk }, d)
            };
            if l == 0 || u64::from(s) + u64::from(l) > u64::from(aglen) {
                return bad(format!("free extent {s}+{l} is outside the AG"));
            }
            if u64::from(s) < last_end {
                bad(format!(
                    "free extent {s}+{l} is out of order or overlaps the one ending at {last_end}"
                ));
            }
            last_end = last_end.max(u64::from(s) + u64::from(l));
            bno.push((s, l));
        },
    );
    // cntbt: records by (length, start).
    let mut cnt: Vec<(u32, u32)> = Vec::new();
    let mut last: Option<(u32, u32)> = None;
    let cnt_blocks = walk_short(
        ctx,
        agno,
        xbt::XFS_ABTC_CRC_MAGIC,
        agf.agf_cnt_root.get(),
        agf.agf_cnt_level.get(),
        &mut |r, blk| {
            let (s, l) = (be32(r, 0), be32(r, 4));
            let bad = |d: String| {
                ctx.sink
                    .add("cntbt block", Location::AgBlock { agno, agbno: blk }, d)
            };
            if l == 0 || u64::from(s) + u64::from(l) > u64::from(aglen) {
                return bad(format!("free extent {s}+{l} is outside the AG"));
            }
            if last.is_some_and(|p| p >= (l, s)) {
                bad(format!("free extent {s}+{l} is out of order"));
            }
            last = Some((l, s));
            cnt.push((s, l));
        },
    );
    for &(s, l) in &bno {
        ctx.map.claim(
            &ctx.sink,
            agno,
            s,
            u64::from(l),
            Use::Free,
            "bnobt record",
            &|| Location::AgBlock { agno, agbno: s },
        );
    }
    let free: u64 = cnt.iter().map(|&(_, l)| u64::from(l)).sum();
    let longest = cnt.iter().map(|&(_, l)| l).max().unwrap_or(0);
    ctx.counters.free_blocks.fetch_add(free, Ordering::Relaxed);
    cnt.sort_unstable();
    if cnt != bno {
        let only_bno = bno.iter().filter(|e| cnt.binary_search(e).is_err()).count();
        let only_cnt = cnt.iter().filter(|e| bno.binary_search(e).is_err()).count();
        ctx.sink.add(
            "free space btrees",
            loc(),
            format!("bnobt and cntbt disagree: {only_bno} extent(s) only in the bnobt, {only_cnt} only in the cntbt"),
        );
    }
    if u64::from(agf.agf_freeblks.get()) != free {
        ctx.sink.add_fix(
            "AGF",
            loc(),
            format!("agf_freeblks {}, counted {free}", agf.agf_freeblks.get()),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agf,
                agno,
                offset: std::mem::offset_of!(Agf, agf_freeblks),
                value: u32::try_from(free).unwrap_or(u32::MAX),
            }),
        );
    }
    if agf.agf_longest.get() != longest {
        ctx.sink.add_fix(
            "AGF",
            loc(),
            format!("agf_longest {}, counted {longest}", agf.agf_longest.get()),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agf,
                agno,
                offset: std::mem::offset_of!(Agf, agf_longest),
                value: longest,
            }),
        );
    }
    heads.freeblks = free;
    let mut btreeblks = bno_blocks.saturating_sub(1) + cnt_blocks.saturating_sub(1);

    if geo.features.rmapbt {
        let mut rc = rmap::RecordCheck::new(ctx, agno);
        let (n, whole) = walk_short_whole(
            ctx,
            agno,
            xbt::XFS_RMAP_CRC_MAGIC,
            agf.agf_rmap_root.get(),
            agf.agf_rmap_level.get(),
            &mut |r, blk| rc.record(ctx, r, blk),
        );
        if whole {
            ctx.rmaps.found_files(agno, std::mem::take(&mut rc.files));
            heads.rmap_ag = Some(std::mem::take(&mut rc.ag));
        }
        btreeblks += n.saturating_sub(1);
        if u64::from(agf.agf_rmap_blocks.get()) != n {
            ctx.sink.add_fix(
                "AGF",
                loc(),
                format!("agf_rmap_blocks {}, counted {n}", agf.agf_rmap_blocks.get()),
                super::Fix::AgField(super::FieldFix {
                    header: super::AgHeader::Agf,
                    agno,
                    offset: std::mem::offset_of!(Agf, agf_rmap_blocks),
                    value: u32::try_from(n).unwrap_or(u32::MAX),
                }),
            );
        }
    }
    if geo.features.reflink {
        let mut last_rc: Option<((bool, u64), u64)> = None;
        let mut shared = Vec::new();
        let mut cow = Vec::new();
        let (n, whole) = walk_short_whole(
            ctx,
            agno,
            xbt::XFS_REFC_CRC_MAGIC,
            agf.agf_refcount_root.get(),
            agf.agf_refcount_level.get(),
            &mut |r, blk| {
                let (s, l, rc) = (be32(r, 0), be32(r, 4), be32(r, 8));
                let cow_rec = s & (1 << 31) != 0;
                let start = u64::from(s & !(1 << 31));
                let bad = |d: String| {
                    ctx.sink.add(
                        "refcountbt block",
                        Location::AgBlock { agno, agbno: blk },
                        d,
                    )
                };
                let key = (cow_rec, start);
                if l == 0 || start + u64::from(l) > u64::from(aglen) {
                    return bad(format!("record {start}+{l} is outside the AG"));
                }
                if cow_rec && rc != 1 {
                    bad(format!("CoW staging record {start}+{l} has refcount {rc}"));
                } else if !cow_rec && rc < 2 {
                    bad(format!("shared record {start}+{l} has refcount {rc}"));
                }
                if let Some((pk, pend)) = last_rc {
                    if key < pk || (key.0 == pk.0 && start < pend) {
                        bad(format!("record {start}+{l} is out of order or overlaps"));
                    }
                }
                last_rc = Some((key, start + u64::from(l)));
                if cow_rec {
                    cow.push((s & !(1 << 31), l));
                } else if rc > 1 {
                    shared.push((s, l, rc));
                }
            },
        );
        for (s, l) in cow {
            ctx.map.claim(
                &ctx.sink,
                agno,
                s,
                u64::from(l),
                Use::Cow,
                "refcountbt record",
                &|| Location::AgBlock { agno, agbno: s },
            );
            ctx.rmaps
                .expect(agno, Rmap::ag(s, l, xbt::XFS_RMAP_OWN_COW));
        }
        // A tree that cannot be read is rebuilt from the files' mappings
        // (the rmapbt's expected records): until then any block may be
        // shared.
        if !whole && geo.v5 && ctx.rmaps.on() {
            ctx.map.set_shared_unknown(agno);
            ctx.rmaps.keep_files(agno);
        } else {
            ctx.map.set_shared(agno, shared);
        }
        if u64::from(agf.agf_refcount_blocks.get()) != n {
            ctx.sink.add_fix(
                "AGF",
                loc(),
                format!(
                    "agf_refcount_blocks {}, counted {n}",
                    agf.agf_refcount_blocks.get()
                ),
                super::Fix::AgField(super::FieldFix {
                    header: super::AgHeader::Agf,
                    agno,
                    offset: std::mem::offset_of!(Agf, agf_refcount_blocks),
                    value: u32::try_from(n).unwrap_or(u32::MAX),
                }),
            );
        }
    }
    if u64::from(agf.agf_btreeblks.get()) != btreeblks {
        ctx.sink.add_fix(
            "AGF",
            loc(),
            format!(
                "agf_btreeblks {}, counted {btreeblks}",
                agf.agf_btreeblks.get()
            ),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agf,
                agno,
                offset: std::mem::offset_of!(Agf, agf_btreeblks),
                value: u32::try_from(btreeblks).unwrap_or(u32::MAX),
            }),
        );
    }
    heads.btreeblks = btreeblks;
}

fn check_agfl(ctx: &Ctx<'_>, agno: u32, agf: &Agf, heads: &mut AgHeads) {
    let geo = ctx.fs.geometry();
    // v5: a header, then the array; v4: the bare array.
    let agfl_hdr = geo.layout().agfl_hdr;
    let size = ((geo.sect_size as usize - agfl_hdr) / 4) as u32;
    let (first, last, count) = (
        agf.agf_flfirst.get(),
        agf.agf_fllast.get(),
        agf.agf_flcount.get(),
    );
    let loc = || Location::Other(format!("AG {agno} AGF"));
    let reset = super::Fix::ResetAgfl { agno, size };
    if first >= size || last >= size || count > size {
        ctx.sink.add_fix(
            "AGF",
            loc(),
            format!("free list first {first}, last {last}, count {count} (list size {size})"),
            reset,
        );
        return;
    }
    // An empty list has its first entry just past its last (as the kernel
    // leaves it as the list drains, and resets it): otherwise the next
    // block put on it would make first, last and count disagree.
    let empty_ok = count > 0 || (last + 1) % size == first;
    if !empty_ok || (count > 0 && (last + size - first) % size + 1 != count) {
        ctx.sink.add_fix(
            "AGF",
            loc(),
            format!("free list from {first} to {last} does not hold {count} entries"),
            reset.clone(),
        );
    }
    let Some(b) = read_hdr(ctx, agno, xag::XFS_AGFL_SECTOR, &Verifier::Agfl { agno }) else {
        return;
    };
    let aglen = geo.ag_len(AgNumber(agno));
    for k in 0..count {
        let idx = ((first + k) % size) as usize;
        let Some(bno) = b
            .get(agfl_hdr + idx * 4..agfl_hdr + idx * 4 + 4)
            .map(|e| u32::from_be_bytes([e[0], e[1], e[2], e[3]]))
        else {
            break;
        };
        let at = move || Location::Other(format!("AG {agno} AGFL entry {idx}"));
        if bno >= aglen {
            ctx.sink.add_fix(
                "AGFL",
                at(),
                format!("block {bno} is outside the AG"),
                reset.clone(),
            );
            continue;
        }
        ctx.map
            .claim(&ctx.sink, agno, bno, 1, Use::Agfl, "AGFL", &at);
        ctx.rmaps
            .expect(agno, Rmap::ag(bno, 1, xbt::XFS_RMAP_OWN_AG));
    }
    heads.flcount = u64::from(count);
}

fn decode_inobt(geo: &Geometry, r: &[u8]) -> Chunk {
    let startino = be32(r, 0);
    let free = u64::from_be_bytes(r[8..16].try_into().unwrap_or([0; 8]));
    if geo.features.sparse_inodes {
        let holemask = u16::from_be_bytes([r[4], r[5]]);
        Chunk {
            startino,
            holemask,
            count: u32::from(r[6]),
            freecount: u32::from(r[7]),
            free,
        }
    } else {
        Chunk {
            startino,
            holemask: 0,
            count: 64,
            freecount: be32(r, 4),
            free,
        }
    }
}

/// Walks an inode btree, checking each record; returns (records, blocks,
/// whether every block could be read).
fn walk_inobt(
    ctx: &Ctx<'_>,
    agno: u32,
    magic: u32,
    root: u32,
    levels: u32,
) -> (Vec<Chunk>, u64, bool) {
    let geo = ctx.fs.geometry();
    let what = if magic == xbt::XFS_FIBT_CRC_MAGIC {
        "finobt block"
    } else {
        "inobt block"
    };
    let aglen = u64::from(geo.ag_len(AgNumber(agno)));
    let mut out: Vec<Chunk> = Vec::new();
    let (blocks, whole) = walk_short_whole(ctx, agno, magic, root, levels, &mut |r, blk| {
        let c = decode_inobt(geo, r);
        let bad = |d: String| {
            ctx.sink
                .add(what, Location::AgBlock { agno, agbno: blk }, d)
        };
        let first_blk = u64::from(c.startino) >> geo.inopb_log;
        let last_blk = (u64::from(c.startino) + 63) >> geo.inopb_log;
        if !c.startino.is_multiple_of(geo.inodes_per_block.min(64))
            || last_blk >= aglen
            || first_blk == 0
        {
            return bad(format!(
                "inode chunk at AG inode {} is misaligned or outside the AG",
                c.startino
            ));
        }
        if let Some(p) = out.last() {
            if c.startino < p.startino + 64 {
                bad(format!(
                    "record for AG inode {} is out of order or overlaps {}",
                    c.startino, p.startino
                ));
            }
        }
        let holes: u64 = (0..64u32)
            .filter(|&i| c.is_hole(i))
            .fold(0, |m, i| m | (1 << i));
        let want_count = 64 - holes.count_ones();
        let want_free = (c.free & !holes).count_ones();
        if c.count != want_count {
            bad(format!(
                "chunk {} counts {} inodes, its hole mask leaves {want_count}",
                c.startino, c.count
            ));
        } else if c.freecount != want_free {
            bad(format!(
                "chunk {} free count {}, its free mask has {want_free}",
                c.startino, c.freecount
            ));
        } else if c.free & holes != holes {
            bad(format!("chunk {} has holes not marked free", c.startino));
        } else {
            out.push(c);
        }
    });
    (out, blocks, whole)
}

/// The inode chunks of AG `agno` as its rmapbt's inode chunk records
/// (`rm`) place them, for an inobt that cannot be read: each 64-inode
/// chunk those records reach, its holes where they do not, and its free
/// inodes those whose core has no mode (read here). Chunks that are not
/// whole on a filesystem without sparse inodes are left out.
fn chunks_from_rmap(ctx: &Ctx<'_>, agno: u32, rm: &[Rmap]) -> Vec<Chunk> {
    let geo = ctx.fs.geometry();
    let log = u32::from(geo.inopb_log);
    let mut present: std::collections::BTreeMap<u64, u64> = Default::default();
    for r in rm.iter().filter(|r| r.owner == xbt::XFS_RMAP_OWN_INODES) {
        let lo = u64::from(r.start) << log;
        let hi = (u64::from(r.start) + u64::from(r.len)) << log;
        let mut c = lo & !63;
        while c < hi && c <= u64::from(u32::MAX) {
            let from = lo.max(c) - c;
            let to = hi.min(c + 64) - c;
            let mask = if to - from == 64 {
                u64::MAX
            } else {
                ((1u64 << (to - from)) - 1) << from
            };
            *present.entry(c).or_default() |= mask;
            c += 64;
        }
    }
    let isize = geo.inode_size as usize;
    let mut out = Vec::new();
    for (startino, mask) in present {
        let mut holemask = 0u16;
        for g in 0..16 {
            if (mask >> (4 * g)) & 0xf == 0 {
                holemask |= 1 << g;
            }
        }
        if holemask != 0 && !geo.features.sparse_inodes {
            continue;
        }
        let first = geo.ino_make(AgNumber(agno), startino as u32);
        let mut raw = vec![0u8; 64 * isize];
        if ctx
            .fs
            .read_bytes(geo.ino_to_bytes(first), &mut raw)
            .is_err()
        {
            continue;
        }
        let mut free = !mask;
        for i in 0..64usize {
            if mask & (1 << i) != 0 && be16(&raw, i * isize + 2) == 0 {
                free |= 1 << i;
            }
        }
        out.push(Chunk {
            startino: startino as u32,
            holemask,
            count: mask.count_ones(),
            freecount: (free & mask).count_ones(),
            free,
        });
    }
    out
}

fn check_agi(ctx: &Ctx<'_>, agno: u32, agi: &Agi, heads: &mut AgHeads) {
    let geo = ctx.fs.geometry();
    let loc = || Location::Other(format!("AG {agno} AGI"));
    let (mut chunks, iblocks, whole) = walk_inobt(
        ctx,
        agno,
        xbt::XFS_IBT_CRC_MAGIC,
        agi.agi_root.get(),
        agi.agi_level.get(),
    );
    // An inobt that cannot be read is rebuilt from the chunks the rmapbt
    // records, when it could be read whole: those are checked instead.
    if !whole && geo.v5 {
        if let Some(rm) = &heads.rmap_ag {
            chunks = chunks_from_rmap(ctx, agno, rm);
            super::lock_map(&ctx.inobt_rebuild).insert(agno, chunks.clone());
        }
    }
    let icount: u64 = chunks.iter().map(|c| u64::from(c.count)).sum();
    let ifree: u64 = chunks.iter().map(|c| u64::from(c.freecount)).sum();
    ctx.counters
        .inode_chunks
        .fetch_add(chunks.len() as u64, Ordering::Relaxed);
    if u64::from(agi.agi_count.get()) != icount {
        ctx.sink.add_fix(
            "AGI",
            loc(),
            format!("agi_count {}, counted {icount}", agi.agi_count.get()),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agi,
                agno,
                offset: std::mem::offset_of!(Agi, agi_count),
                value: u32::try_from(icount).unwrap_or(u32::MAX),
            }),
        );
    }
    if u64::from(agi.agi_freecount.get()) != ifree {
        ctx.sink.add_fix(
            "AGI",
            loc(),
            format!("agi_freecount {}, counted {ifree}", agi.agi_freecount.get()),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agi,
                agno,
                offset: std::mem::offset_of!(Agi, agi_freecount),
                value: u32::try_from(ifree).unwrap_or(u32::MAX),
            }),
        );
    }
    if geo.features.finobt {
        let (fchunks, fblocks, _) = walk_inobt(
            ctx,
            agno,
            xbt::XFS_FIBT_CRC_MAGIC,
            agi.agi_free_root.get(),
            agi.agi_free_level.get(),
        );
        let want: Vec<Chunk> = chunks.iter().copied().filter(|c| c.freecount > 0).collect();
        if fchunks != want {
            let missing = want.iter().filter(|c| !fchunks.contains(c)).count();
            let extra = fchunks.iter().filter(|c| !want.contains(c)).count();
            ctx.sink.add(
                "finobt",
                loc(),
                format!("finobt does not match the inobt: {missing} record(s) with free inodes missing, {extra} wrong"),
            );
        }
        if geo.features.inobtcnt && u64::from(agi.agi_fblocks.get()) != fblocks {
            ctx.sink.add_fix(
                "AGI",
                loc(),
                format!("agi_fblocks {}, counted {fblocks}", agi.agi_fblocks.get()),
                super::Fix::AgField(super::FieldFix {
                    header: super::AgHeader::Agi,
                    agno,
                    offset: std::mem::offset_of!(Agi, agi_fblocks),
                    value: u32::try_from(fblocks).unwrap_or(u32::MAX),
                }),
            );
        }
    }
    if geo.features.inobtcnt && u64::from(agi.agi_iblocks.get()) != iblocks {
        ctx.sink.add_fix(
            "AGI",
            loc(),
            format!("agi_iblocks {}, counted {iblocks}", agi.agi_iblocks.get()),
            super::Fix::AgField(super::FieldFix {
                header: super::AgHeader::Agi,
                agno,
                offset: std::mem::offset_of!(Agi, agi_iblocks),
                value: u32::try_from(iblocks).unwrap_or(u32::MAX),
            }),
        );
    }
    // A bucket is emptied as xfs_repair empties it: the inodes on its
    // list are then found by the namespace check (named nowhere, they go
    // to lost+found).
    for (i, b) in agi.agi_unlinked.iter().enumerate() {
        if b.get() != u32::MAX {
            ctx.sink.add_fix(
                "AGI",
                loc(),
                format!(
                    "unlinked bucket {i} is not empty (inode {}): unlinked inodes remain",
                    b.get()
                ),
                super::Fix::AgField(super::FieldFix {
                    header: super::AgHeader::Agi,
                    agno,
                    offset: std::mem::offset_of!(Agi, agi_unlinked) + 4 * i,
                    value: u32::MAX,
                }),
            );
        }
    }
    // Claim the chunks' blocks (only blocks holding non-hole inodes), each
    // run of touching blocks at once.
    let claim = |b: u32, n: u32| {
        ctx.map.claim(
            &ctx.sink,
            agno,
            b,
            u64::from(n),
            Use::Inodes,
            "inode chunk",
            &|| Location::AgBlock { agno, agbno: b },
        );
        ctx.rmaps
            .expect(agno, Rmap::ag(b, n, xbt::XFS_RMAP_OWN_INODES));
    };
    for c in &chunks {
        let ipb = geo.inodes_per_block;
        if ipb > 64 && c.startino % ipb != 0 {
            // Two chunks share a block; the first one claims it.
            continue;
        }
        let first = c.startino >> geo.inopb_log;
        let nblk = (64 / ipb).max(1);
        let mut run: Option<(u32, u32)> = None;
        for k in 0..nblk {
            let lo = k * ipb;
            let hi = ((k + 1) * ipb).min(64);
            if (lo..hi).all(|i| c.is_hole(i)) {
                if let Some((b, n)) = run.take() {
                    claim(b, n);
                }
                continue;
            }
            match &mut run {
                Some((_, n)) => *n += 1,
                None => run = Some((first + k, 1)),
            }
        }
        if let Some((b, n)) = run {
            claim(b, n);
        }
    }
    heads.icount = icount;
    heads.ifree = ifree;
    heads.chunks = chunks;
}

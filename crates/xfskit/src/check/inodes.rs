//! Pass 2, per AG: read every inode chunk by clusters, decode allocated
//! inodes, check free slots, walk forks, directories and attributes.

use super::ag::Chunk;
use super::dirs::check_dir;
use super::ns::{kind_of, InodeRec, NsBatch, KIND_UNDECODED};
use super::space::Use;
use super::Ctx;
use crate::buf::verify::Verifier;
use crate::bytes::be64;
use crate::error::Location;
use crate::geometry::{FsBlock, Ino};
use crate::inode::{self, FileType, Fork, ForkFormat, Inode};
use std::sync::atomic::Ordering;

/// Largest merged read of inode clusters.
const MAX_READ: u64 = 1 << 20;
/// Bytes of inode clusters announced to the device ahead of the read.
const RA_BYTES: u64 = 16 << 20;

/// Gaps between runs up to this size are read ahead with them: they
/// usually hold the directory blocks of the inodes just before them, read
/// moments later, and a short gap costs less than one more request.
const RA_GAP: u64 = 256 << 10;

/// The device ranges `(start, end)` to read ahead: the runs, joined across
/// gaps of at most [`RA_GAP`] bytes, cut into pieces of at most
/// about [`MAX_READ`] bytes so the window advances smoothly.
fn ra_spans(runs: &[Run], clen: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for r in runs {
        let end = r.off + r.n as u64 * clen;
        match spans.last_mut() {
            Some(s) if r.off >= s.1 && r.off - s.1 <= RA_GAP => {
                if end - s.0 <= MAX_READ {
                    s.1 = end;
                } else {
                    // A new piece, starting where the last one ends so the
                    // gap is read ahead too.
                    let start = s.1;
                    spans.push((start, end));
                }
            }
            _ => spans.push((r.off, end)),
        }
    }
    spans
}

/// Consecutive inode clusters read at once.
struct Run {
    /// Byte offset on the device.
    off: u64,
    /// Index of its first cluster and number of clusters.
    first: usize,
    n: usize,
}

/// Pass 2 for AG `agno` over the chunks found in pass 1. Clusters that
/// touch on disk are read together (up to [`MAX_READ`] bytes), with
/// readahead of the following runs.
pub(crate) fn check_inodes(ctx: &Ctx<'_>, agno: u32, chunks: &[Chunk]) {
    let geo = ctx.fs.geometry();
    let mut out = NsBatch::default();
    let ipc = geo.inodes_per_cluster().clamp(1, 64);
    let isz = geo.inode_size as usize;
    let clen = u64::from(ipc) * isz as u64;
    // Clusters with disk space: (chunk, first inode in the chunk, first inode number).
    let mut clusters: Vec<(&Chunk, u32, Ino)> = Vec::new();
    for c in chunks {
        for first in (0..64u32).step_by(ipc as usize) {
            if (first..first + ipc).all(|i| c.is_hole(i)) {
                continue;
            }
            let ino0 = geo.ino_make(crate::geometry::AgNumber(agno), c.startino + first);
            clusters.push((c, first, ino0));
        }
    }
    let per_run = (MAX_READ / clen).max(1) as usize;
    let mut runs: Vec<Run> = Vec::new();
    for (i, &(_, _, ino0)) in clusters.iter().enumerate() {
        let off = geo.ino_to_bytes(ino0);
        match runs.last_mut() {
            Some(r) if r.n < per_run && r.off + r.n as u64 * clen == off => r.n += 1,
            _ => runs.push(Run {
                off,
                first: i,
                n: 1,
            }),
        }
    }
    let spans = ra_spans(&runs, clen);
    let dev = ctx.fs.device();
    let mut ra_next = 0usize;
    let mut buf: Vec<u8> = Vec::new();
    for run in &runs {
        let len = run.n as u64 * clen;
        // Keep RA_BYTES of disk beyond this run announced.
        while ra_next < spans.len() && spans[ra_next].0 < run.off + len + RA_BYTES {
            let (s, e) = spans[ra_next];
            dev.will_need(s, e - s);
            ra_next += 1;
        }
        buf.resize(len as usize, 0);
        let whole = ctx.fs.read_bytes(run.off, &mut buf).is_ok();
        for k in 0..run.n {
            let (c, first, ino0) = clusters[run.first + k];
            let at = k * clen as usize;
            let raw = &mut buf[at..at + clen as usize];
            if !whole {
                // Read cluster by cluster to report exactly which fail.
                if let Err(e) = ctx.fs.read_bytes(geo.ino_to_bytes(ino0), raw) {
                    ctx.sink.add(
                        "inode cluster",
                        Location::Inode(ino0.0),
                        format!("cannot read: {e}"),
                    );
                    continue;
                }
            }
            check_cluster(ctx, c, first, ino0, raw, &mut out);
            if out.full() {
                ctx.ns.flush(&mut out);
            }
        }
    }
    ctx.ns.flush(&mut out);
}

/// Checks the inodes of one cluster (`raw`), the first being inode
/// `first` of chunk `c` with number `ino0`.
fn check_cluster(ctx: &Ctx<'_>, c: &Chunk, first: u32, ino0: Ino, raw: &[u8], out: &mut NsBatch) {
    let geo = ctx.fs.geometry();
    let ipc = geo.inodes_per_cluster().clamp(1, 64);
    let isz = geo.inode_size as usize;
    for i in first..first + ipc {
        if c.is_hole(i) {
            continue;
        }
        let ino = Ino(ino0.0 + u64::from(i - first));
        let at = (i - first) as usize * isz;
        let raw = &raw[at..at + isz];
        if c.free & (1 << i) != 0 {
            check_free(ctx, ino, raw);
            continue;
        }
        match inode::decode_checked(ctx.fs, ino, raw) {
            Ok(inode) => {
                super::inode_fields::check_fields(ctx, &inode, raw);
                check_one(ctx, &inode, out)
            }
            Err(e) if header_only(geo, ino, raw).is_some() => {
                // Sound but for its CRC or magic number: checked as it
                // is, those to be written again.
                let (inode, magic) = header_only(geo, ino, raw).expect("decoded above");
                let detail = if magic {
                    format!(
                        "bad magic number {:#06x} or version {} (the rest is a sound inode)",
                        u16::from_be_bytes([raw[0], raw[1]]),
                        raw[4]
                    )
                } else {
                    let _ = e;
                    "bad CRC".to_string()
                };
                ctx.sink.add_fix(
                    "inode",
                    Location::Inode(ino.0),
                    detail,
                    super::Fix::InodeCrc { ino: ino.0, magic },
                );
                super::inode_fields::check_fields(ctx, &inode, raw);
                check_one(ctx, &inode, out)
            }
            Err(e) if without_attr_fork(geo, ino, raw).is_some() => {
                // Sound but for its attribute fork: checked without it,
                // the fork to be cleared (xfs_repair clears it too).
                let inode = without_attr_fork(geo, ino, raw).expect("decoded above");
                ctx.sink.error_with(
                    e,
                    Some(ino.0),
                    Some(super::Fix::ClearAttrFork { ino: ino.0 }),
                );
                super::inode_fields::check_fields(ctx, &inode, raw);
                check_one(ctx, &inode, out)
            }
            Err(e) => {
                // Allocated: entries naming it are not "free" ones.
                out.inodes.push(InodeRec {
                    ino: ino.0,
                    kind: KIND_UNDECODED,
                    nlink: 0,
                    gen: 0,
                    pptr_ok: false,
                    pcount: 0,
                    psum: 0,
                    meta: false,
                });
                ctx.sink
                    .error_with(e, Some(ino.0), Some(super::Fix::ClearInode { ino: ino.0 }))
            }
        }
    }
}

/// An inode that fails only its CRC or its magic number: decoded with
/// both set right, and whether the magic number was wrong.
fn header_only(geo: &crate::geometry::Geometry, ino: Ino, raw: &[u8]) -> Option<(Inode, bool)> {
    let version = std::mem::offset_of!(xfs_format::inode::Dinode, di_version);
    let magic = u16::from_be_bytes([raw[0], raw[1]]) != xfs_format::inode::XFS_DINODE_MAGIC
        || (geo.v5 && raw[version] != 3);
    if !magic && inode::crc_ok(geo, raw) {
        return None;
    }
    let mut fixed = raw.to_vec();
    set_header(geo, &mut fixed);
    Inode::decode(geo, ino, &fixed).ok().map(|i| (i, magic))
}

/// An inode whose attribute fork alone keeps it from being decoded (its
/// format or offset), decoded without it.
fn without_attr_fork(geo: &crate::geometry::Geometry, ino: Ino, raw: &[u8]) -> Option<Inode> {
    let forkoff = std::mem::offset_of!(xfs_format::inode::Dinode, di_forkoff);
    let magic = u16::from_be_bytes([raw[0], raw[1]]) == xfs_format::inode::XFS_DINODE_MAGIC;
    if !magic || !inode::crc_ok(geo, raw) || raw[forkoff] == 0 {
        return None;
    }
    let mut fixed = raw.to_vec();
    clear_attr_fork(geo, &mut fixed);
    Inode::decode(geo, ino, &fixed).ok()
}

/// Stamps a raw inode's CRC (v5).
fn stamp(geo: &crate::geometry::Geometry, raw: &mut [u8]) {
    if geo.v5 {
        xfs_format::crc::stamp(raw, xfs_format::inode::XFS_DINODE_CRC_OFF);
    }
}

/// Writes a raw inode's magic number and (v5) version again, and its CRC
/// ([`crate::check::Fix::InodeCrc`]).
pub(crate) fn set_header(geo: &crate::geometry::Geometry, raw: &mut [u8]) {
    raw[..2].copy_from_slice(&xfs_format::inode::XFS_DINODE_MAGIC.to_be_bytes());
    if geo.v5 {
        raw[std::mem::offset_of!(xfs_format::inode::Dinode, di_version)] = 3;
    }
    stamp(geo, raw);
}

/// Where a raw inode keeps its (data, attr) extent counts: (offset,
/// width) each; large extent counters move them.
pub(crate) fn extent_count_fields(nrext64: bool) -> ((usize, usize), (usize, usize)) {
    use std::mem::offset_of;
    use xfs_format::inode::Dinode;
    if nrext64 {
        (
            (offset_of!(Dinode, di_big_nextents), 8),
            (offset_of!(Dinode, di_nextents), 4),
        )
    } else {
        (
            (offset_of!(Dinode, di_nextents), 4),
            (offset_of!(Dinode, di_anextents), 2),
        )
    }
}

/// Sets bits of a raw inode's core field of `width` bytes at `offset`
/// ([`crate::check::Fix::InodeBits`]), and its CRC.
pub(crate) fn set_bits(
    geo: &crate::geometry::Geometry,
    raw: &mut [u8],
    offset: usize,
    width: usize,
    clear: u64,
    set: u64,
) {
    let field = &mut raw[offset..offset + width];
    let mut v = [0u8; 8];
    v[8 - width..].copy_from_slice(field);
    let new = (u64::from_be_bytes(v) & !clear) | set;
    field.copy_from_slice(&new.to_be_bytes()[8 - width..]);
    stamp(geo, raw);
}

/// Clears a raw inode's attribute fork: no fork offset, an empty extents
/// fork ([`crate::check::Fix::ClearAttrFork`]), and stamps its CRC.
pub(crate) fn clear_attr_fork(geo: &crate::geometry::Geometry, raw: &mut [u8]) {
    use std::mem::offset_of;
    use xfs_format::inode::Dinode;
    let f2 = offset_of!(Dinode, di_flags2);
    let nrext64 = raw[offset_of!(Dinode, di_version)] >= 3
        && u64::from_be_bytes(raw[f2..f2 + 8].try_into().expect("8 bytes"))
            & xfs_format::inode::XFS_DIFLAG2_NREXT64
            != 0;
    let (_, (at, w)) = extent_count_fields(nrext64);
    raw[offset_of!(Dinode, di_forkoff)] = 0;
    raw[offset_of!(Dinode, di_aformat)] = 2;
    raw[at..at + w].fill(0);
    stamp(geo, raw);
}

/// Notes that `ino`'s data fork may be rebuilt from its reverse mappings
/// (it cannot be read, or maps fewer blocks than the inode counts).
fn suspect_fork(ctx: &Ctx<'_>, ino: &Inode) {
    let size = match ino.forkoff {
        0 => (ctx.fs.geometry().inode_size as usize)
            .saturating_sub(xfs_format::inode::LITERAL_OFFSET),
        f => usize::from(f) * 8,
    };
    ctx.rmaps.suspect(
        ino.ino.0,
        super::rmap::Suspect {
            nblocks: ino.nblocks,
            capacity: (size / std::mem::size_of::<xfs_format::btree::BmbtRec>()) as u64,
        },
    );
}

/// Writes a raw inode's data fork as the extents `extents` (file block,
/// filesystem block, length, unwritten) in the inode, with the block
/// count `nblocks` ([`crate::check::Fix::RebuildFork`]), and stamps its CRC.
pub(crate) fn set_data_extents(
    geo: &crate::geometry::Geometry,
    raw: &mut [u8],
    extents: &[(u64, u64, u64, bool)],
    nblocks: u64,
) {
    use std::mem::offset_of;
    use xfs_format::btree::BmbtRec;
    use xfs_format::inode::{Dinode, LITERAL_OFFSET};
    let f2 = offset_of!(Dinode, di_flags2);
    let nrext64 = u64::from_be_bytes(raw[f2..f2 + 8].try_into().expect("8 bytes"))
        & xfs_format::inode::XFS_DIFLAG2_NREXT64
        != 0;
    let ((at, w), _) = extent_count_fields(nrext64);
    let n = extents.len() as u64;
    raw[at..at + w].copy_from_slice(&n.to_be_bytes()[8 - w..]);
    raw[offset_of!(Dinode, di_format)] = 2;
    let nb = offset_of!(Dinode, di_nblocks);
    raw[nb..nb + 8].copy_from_slice(&nblocks.to_be_bytes());
    let end = match raw[offset_of!(Dinode, di_forkoff)] {
        0 => raw.len(),
        f => LITERAL_OFFSET + usize::from(f) * 8,
    };
    raw[LITERAL_OFFSET..end].fill(0);
    for (i, &(startoff, startblock, blockcount, unwritten)) in extents.iter().enumerate() {
        let rec = BmbtRec::pack(&xfs_format::types::BmbtIrec {
            startoff,
            startblock,
            blockcount,
            unwritten,
        });
        let o = LITERAL_OFFSET + i * 16;
        raw[o..o + 16].copy_from_slice(zerocopy::IntoBytes::as_bytes(&rec));
    }
    stamp(geo, raw);
}

/// A free inode slot must still be a valid, initialised inode (magic and
/// CRC, as `xfs_repair` expects) with mode 0.
fn check_free(ctx: &Ctx<'_>, ino: Ino, raw: &[u8]) {
    let at = || Location::Inode(ino.0);
    let magic = u16::from_be_bytes([raw[0], raw[1]]);
    if magic != xfs_format::inode::XFS_DINODE_MAGIC {
        ctx.sink
            .add("free inode", at(), format!("bad magic {magic:#06x}"));
        return;
    }
    if !inode::crc_ok(ctx.fs.geometry(), raw) {
        ctx.sink.add("free inode", at(), "bad CRC");
        return;
    }
    let mode = u16::from_be_bytes([raw[2], raw[3]]);
    if mode != 0 {
        ctx.sink.add(
            "free inode",
            at(),
            format!("free in the inobt but mode is {mode:#o}"),
        );
    }
}

fn check_one(ctx: &Ctx<'_>, ino: &Inode, out: &mut NsBatch) {
    ctx.counters.inodes.fetch_add(1, Ordering::Relaxed);
    let realtime = ino.flags & xfs_format::inode::XFS_DIFLAG_REALTIME != 0;
    let mut mapped = 0u64;
    let mut rtblocks = 0u64;
    let mut ok = true;
    let forks: &[Fork] = if ino.has_attr_fork() {
        &[Fork::Data, Fork::Attr]
    } else {
        &[Fork::Data]
    };
    for &fork in forks {
        let format = if fork == Fork::Data {
            ino.format
        } else {
            ino.aformat
        };
        if format == ForkFormat::MetaBtree {
            mapped += ctx.rtg.meta_btree(ctx, ino);
            continue;
        }
        if !matches!(format, ForkFormat::Extents | ForkFormat::Btree) {
            continue;
        }
        match inode::extents(ctx.fs, ino, fork) {
            Ok(ext) => {
                // No file is longer than 2^63 - 1 bytes.
                let max_off = (i64::MAX as u64) >> ctx.fs.geometry().block_log;
                if let Some(e) = ext
                    .iter()
                    .find(|e| e.offset.saturating_add(e.len) > max_off + 1)
                {
                    ctx.sink.add(
                        "inode",
                        Location::Inode(ino.ino.0),
                        format!(
                            "{} fork extent at file block {} is past the largest file",
                            fork.name(),
                            e.offset
                        ),
                    );
                }
                if realtime && fork == Fork::Data {
                    ctx.rt.add_file(ctx, ino.ino.0, &ext);
                    ctx.rtg.add_file(ctx, ino.ino.0, &ext);
                }
                for e in &ext {
                    mapped += e.len;
                    if realtime && fork == Fork::Data {
                        rtblocks += e.len;
                        continue;
                    }
                    claim_fsb(ctx, ino.ino.0, e.start, e.len, Use::Data, fork, e.offset);
                    expect_rmap(ctx, ino.ino.0, e, fork);
                }
            }
            Err(e) if fork == Fork::Attr => {
                ok = false;
                ctx.sink.error_with(
                    e,
                    Some(ino.ino.0),
                    Some(super::Fix::ClearAttrFork { ino: ino.ino.0 }),
                );
            }
            Err(e) => {
                ok = false;
                ctx.sink.error_in(e, ino.ino.0);
                if !realtime {
                    suspect_fork(ctx, ino);
                }
            }
        }
        if format == ForkFormat::Btree {
            mapped += bmbt_blocks(ctx, ino, fork);
        }
    }
    ctx.quota.add(ino, rtblocks);
    if ok && mapped != ino.nblocks {
        if !realtime {
            suspect_fork(ctx, ino);
        }
        ctx.sink.add_fix(
            "inode",
            Location::Inode(ino.ino.0),
            format!("nblocks {}, its forks map {mapped}", ino.nblocks),
            super::Fix::InodeBits {
                ino: ino.ino.0,
                offset: std::mem::offset_of!(xfs_format::inode::Dinode, di_nblocks),
                width: 8,
                clear: u64::MAX,
                set: mapped,
            },
        );
    }
    let pptrs = if ctx.fs.geometry().has_parent() {
        super::pptrs::fold(ctx, ino)
    } else {
        None
    };
    out.inodes.push(InodeRec {
        ino: ino.ino.0,
        kind: kind_of(ino.file_type),
        nlink: ino.nlink,
        gen: ino.gen,
        pptr_ok: pptrs.is_some(),
        pcount: pptrs.map_or(0, |p| p.0),
        psum: pptrs.map_or(0, |p| p.1),
        meta: ino.flags2 & xfs_format::inode::XFS_DIFLAG2_METADATA != 0,
    });
    if ino.file_type == FileType::Dir {
        check_dir(ctx, ino, out);
    }
    if ino.file_type == FileType::Symlink {
        if let Err(e) = crate::symlink::read_link(ctx.fs, ino) {
            ctx.sink.error_in(e, ino.ino.0);
        }
    }
    // An extents-format attr fork with no extents is an empty attr fork
    // (the kernel leaves it after the last attribute goes).
    let empty_attr = ino.aformat == ForkFormat::Extents && ino.anextents == 0;
    if ino.has_attr_fork() && !empty_attr {
        match crate::attr::list(ctx.fs, ino) {
            // Names are bytes without NUL (libxfs's name check).
            Ok(attrs) => {
                if let Some(a) = attrs.iter().find(|a| a.name.contains(&0)) {
                    ctx.sink.add(
                        "attr",
                        Location::Inode(ino.ino.0),
                        format!(
                            "attribute name {:?} holds a NUL byte",
                            String::from_utf8_lossy(&a.name)
                        ),
                    );
                }
            }
            Err(e) => ctx.sink.error_with(
                e,
                Some(ino.ino.0),
                Some(super::Fix::ClearAttrFork { ino: ino.ino.0 }),
            ),
        }
        super::attr_index::check_attr_blocks(ctx, ino);
    }
}

/// The reverse mapping extent `e` of `ino`'s `fork` must have.
fn expect_rmap(ctx: &Ctx<'_>, ino: u64, e: &inode::Extent, fork: Fork) {
    if !ctx.rmaps.on() {
        return;
    }
    let geo = ctx.fs.geometry();
    let (agno, agbno) = geo.fsb_split(e.start);
    if u64::from(agbno.0) + e.len > u64::from(geo.ag_len(agno)) {
        return;
    }
    ctx.rmaps.expect(
        agno.0,
        super::rmap::Rmap::file(
            agbno.0,
            e.len as u32,
            ino,
            e.offset,
            fork == Fork::Attr,
            e.unwritten,
        ),
    );
}

fn claim_fsb(ctx: &Ctx<'_>, ino: u64, start: FsBlock, len: u64, who: Use, fork: Fork, offset: u64) {
    let (agno, agbno) = ctx.fs.geometry().fsb_split(start);
    let what = if who == Use::Bmbt {
        "bmbt block"
    } else {
        "extent map"
    };
    ctx.map
        .claim(&ctx.sink, agno.0, agbno.0, len, who, what, &|| {
            Location::InodeBlock {
                ino,
                fork: fork.name(),
                offset,
            }
        });
}

/// Claims the bmbt blocks of a btree-format fork; returns how many.
/// The blocks were verified by `extents`; errors there are reported
/// already. Walks level by level to check what reading the extents does
/// not: each key equals the first key of its child, and the sibling
/// pointers chain the blocks of each level in order.
fn bmbt_blocks(ctx: &Ctx<'_>, ino: &Inode, fork: Fork) -> u64 {
    const NULL: u64 = u64::MAX;
    let geo = ctx.fs.geometry();
    let bytes = if fork == Fork::Data {
        &ino.data_fork
    } else {
        &ino.attr_fork
    };
    if bytes.len() < 4 {
        return 0;
    }
    let level = u16::from_be_bytes([bytes[0], bytes[1]]);
    let numrecs = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
    let maxrecs = (bytes.len() - 4) / 16;
    if level == 0 || level > 9 || numrecs > maxrecs {
        return 0;
    }
    let bad = |d: String| {
        ctx.sink.add(
            "bmbt block",
            Location::InodeBlock {
                ino: ino.ino.0,
                fork: fork.name(),
                offset: 0,
            },
            d,
        )
    };
    // (block, key its parent holds for it), one level at a time.
    let mut cur: Vec<(u64, u64)> = (0..numrecs)
        .map(|i| (be64(bytes, 4 + maxrecs * 8 + i * 8), be64(bytes, 4 + i * 8)))
        .collect();
    let mut lvl = level - 1;
    let mut n = 0u64;
    let limit = ino.nblocks.saturating_add(1);
    loop {
        let mut next = Vec::new();
        for (k, &(fsb, key)) in cur.iter().enumerate() {
            if n >= limit || !geo.fsb_valid(FsBlock(fsb)) {
                return n;
            }
            n += 1;
            claim_fsb(ctx, ino.ino.0, FsBlock(fsb), 1, Use::Bmbt, fork, 0);
            let (agno, agbno) = geo.fsb_split(FsBlock(fsb));
            ctx.rmaps.expect(
                agno.0,
                super::rmap::Rmap::bmbt(agbno.0, ino.ino.0, fork == Fork::Attr),
            );
            let v = Verifier::Bmbt {
                owner: ino.ino.0,
                level: Some(lvl),
            };
            let Ok(blk) = ctx
                .fs
                .read_meta(geo.fsb_to_daddr(FsBlock(fsb)), geo.block_size, &v)
            else {
                return n;
            };
            let (left, right) = (be64(&blk, 8), be64(&blk, 16));
            let want_left = if k == 0 { NULL } else { cur[k - 1].0 };
            let want_right = cur.get(k + 1).map_or(NULL, |c| c.0);
            if (left, right) != (want_left, want_right) {
                bad(format!(
                    "block {fsb}: siblings {left:#x} and {right:#x}, want {want_left:#x} and {want_right:#x}"
                ));
            }
            let nr = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
            let h = ctx.fs.geometry().layout().lblock_hdr;
            if nr == 0 || blk.len() < h + 8 {
                continue;
            }
            let first = if lvl == 0 {
                (be64(&blk, h) >> 9) & ((1 << 54) - 1)
            } else {
                be64(&blk, h)
            };
            if first != key {
                bad(format!(
                    "block {fsb}: first key {first}, its parent says {key}"
                ));
            }
            if lvl == 0 {
                continue;
            }
            let max = (blk.len() - h) / 16;
            for i in 0..nr.min(max) {
                next.push((be64(&blk, h + max * 8 + i * 8), be64(&blk, h + i * 8)));
            }
        }
        if lvl == 0 || next.is_empty() {
            return n;
        }
        cur = next;
        lvl -= 1;
    }
}

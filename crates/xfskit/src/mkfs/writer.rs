//! Images of the per-AG metadata of a fresh filesystem: superblock copy, AGF,
//! AGI, AGFL and the root block of every per-AG btree.
//!
//! Each AG's headers and btree roots are contiguous at the start of the AG,
//! so one AG becomes one buffer of `prealloc_blocks` blocks, written with a
//! single call.  The contents follow what mkfs.xfs leaves behind after it has
//! initialised the headers, filled every free list and allocated the root
//! inode chunk in AG 0.

use xfs_format::ag::{
    agfl_size, set_agfl_entry, Agf, AgflHdr, Agi, XFS_AGFL_CRC_OFF, XFS_AGFL_MAGIC,
    XFS_AGF_CRC_OFF, XFS_AGF_MAGIC, XFS_AGF_VERSION, XFS_AGI_CRC_OFF, XFS_AGI_MAGIC,
    XFS_AGI_VERSION,
};
use xfs_format::btree::*;
use xfs_format::crc::stamp;
use xfs_format::sb::{
    Dsb, DsbMetadir, XFS_SB_CRC_OFF, XFS_SB_FEAT_INCOMPAT_PARENT, XFS_SB_MAGIC, XFS_SB_METADIR_OFF,
    XFS_SB_VERSION_ATTRBIT,
};
use xfs_format::types::{Uuid, NULLAGBLOCK, NULLAGINO, NULLFSINO};
use zerocopy::{FromZeros, IntoBytes};

use super::freesp::FreeTrees;
use super::geometry::MkfsGeometry;

/// Where each fixed metadata block of an AG lives (AG block numbers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedBlocks {
    /// bnobt root.
    pub bno: u32,
    /// cntbt root.
    pub cnt: u32,
    /// inobt root.
    pub ino: u32,
    /// finobt root, if enabled.
    pub fino: Option<u32>,
    /// rmapbt root, if enabled.
    pub rmap: Option<u32>,
    /// refcountbt root, if enabled.
    pub refc: Option<u32>,
}

impl FixedBlocks {
    /// Lay out the fixed blocks for this geometry.
    pub fn new(g: &MkfsGeometry) -> FixedBlocks {
        let agfl = (3 * u32::from(g.sectsize)) >> g.blocklog;
        let f = &g.features;
        let finobt = f.ro_compat & 1 != 0;
        let rmapbt = f.ro_compat & 2 != 0;
        let reflink = f.ro_compat & 4 != 0;
        let bno = agfl + 1;
        let ino = bno + 2;
        let mut next = ino + 1;
        let mut take = |on: bool| {
            on.then(|| {
                next += 1;
                next - 1
            })
        };
        let fino = take(finobt);
        let rmap = take(rmapbt);
        let refc = take(reflink);
        FixedBlocks {
            bno,
            cnt: bno + 1,
            ino,
            fino,
            rmap,
            refc,
        }
    }
}

/// Everything about one AG's fresh contents that the header images need.
#[derive(Debug, Clone)]
pub(crate) struct AgState {
    /// Blocks in this AG.
    pub length: u32,
    /// Free extents `(start, len)` sorted by start.
    pub free: Vec<(u32, u32)>,
    /// The free-space btree leaves, stale slots included.
    pub trees: FreeTrees,
    /// AGFL blocks in slot order (slots 1..).
    pub agfl: Vec<u32>,
    /// The log extent inside this AG, if any.
    pub log: Option<(u32, u32)>,
    /// The inode chunk allocated here: (first AG block, blocks, inodes in use).
    pub chunk: Option<(u32, u32, u32)>,
    /// Blocks of metadata files here: (first AG block, blocks, inode, file offset).
    pub files: Vec<(u32, u32, u64, u64)>,
}

/// Remove `[start, start+len)` from a sorted free-extent list.
pub(crate) fn carve(free: &mut Vec<(u32, u32)>, start: u32, len: u32) {
    let end = start + len;
    let mut out = Vec::with_capacity(free.len() + 1);
    for &(s, l) in free.iter() {
        let e = s + l;
        if e <= start || s >= end {
            out.push((s, l));
            continue;
        }
        if s < start {
            out.push((s, start - s));
        }
        if e > end {
            out.push((end, e - end));
        }
    }
    *free = out;
}

/// The free extents of AG `agno` and its free list once mkfs has filled
/// it, before any inode chunk is allocated there.
pub(crate) fn free_after_agfl(g: &MkfsGeometry, agno: u32) -> (Vec<(u32, u32)>, Vec<u32>) {
    let (trees, agfl) = agfl_fill(g, agno);
    (trees.free(), agfl)
}

/// The free-space leaves of AG `agno` once mkfs has filled its free list,
/// and the list.
fn agfl_fill(g: &MkfsGeometry, agno: u32) -> (FreeTrees, Vec<u32>) {
    let length = g.ag_size(agno) as u32;
    let prealloc = g.prealloc_blocks;
    let mut free = vec![(prealloc, length - prealloc)];
    if let Some((start, len)) = log_extent(g, agno) {
        carve(&mut free, start, len);
    }
    free.retain(|&(_, l)| l != 0);
    let mut trees = FreeTrees::new(&free);
    // The free list is filled by a by-size allocation: the smallest extent
    // that holds everything still needed (lowest block on ties), taken from
    // its start; failing that the largest extent, and repeat.
    let mut agfl = Vec::new();
    while (agfl.len() as u32) < g.agfl_min && trees.bno.n > 0 {
        let free = trees.free();
        let need = g.agfl_min - agfl.len() as u32;
        let pick = free
            .iter()
            .filter(|&&(_, l)| l >= need)
            .min_by_key(|&&(s, l)| (l, s))
            .or_else(|| free.iter().max_by_key(|&&(s, l)| (l, std::cmp::Reverse(s))))
            .copied();
        let Some((s, l)) = pick else { break };
        let take = need.min(l);
        agfl.extend(s..s + take);
        trees.alloc(s, take);
    }
    (trees, agfl)
}

fn log_extent(g: &MkfsGeometry, agno: u32) -> Option<(u32, u32)> {
    (g.logdev.is_none() && g.logblocks != 0 && g.log_agno == agno).then(|| {
        let start = (g.logstart & ((1u64 << g.agblklog) - 1)) as u32;
        (start, g.logblocks)
    })
}

/// Compute the state of AG `agno` after mkfs has filled its free list.
pub(crate) fn ag_state(g: &MkfsGeometry, agno: u32) -> AgState {
    let length = g.ag_size(agno) as u32;
    let (mut trees, agfl) = agfl_fill(g, agno);
    let log = log_extent(g, agno);
    let chunk = g.chunk_in(agno);
    if let Some((start, len, _)) = chunk {
        trees.alloc(start, len);
    }
    if let (0, Some(rt)) = (agno, &g.rt) {
        for &(start, len) in rt.rbm_extents.iter().chain(&rt.rsum_extents) {
            trees.alloc(start, len);
        }
    }
    let mut files = Vec::new();
    if let (Some(m), Some(gr)) = (g.metadir, g.rt.as_ref().and_then(|rt| rt.groups.as_ref())) {
        if m.rtdir_agno == agno {
            for f in &gr.files {
                let mut off = 0u64;
                for &(start, len) in &f.extents {
                    trees.alloc(start, len);
                    files.push((start, len, f.ino, off));
                    off += u64::from(len);
                }
            }
        }
    }
    AgState {
        length,
        free: trees.free(),
        trees,
        agfl,
        log,
        chunk,
        files,
    }
}

/// Disk address (512-byte units) of AG block `agbno` of AG `agno`.
pub(crate) fn daddr(g: &MkfsGeometry, agno: u32, agbno: u32) -> u64 {
    (u64::from(agno) * u64::from(g.agblocks) + u64::from(agbno)) << (g.blocklog - 9)
}

/// The superblock of the finished filesystem (as in AG 0).
pub(crate) fn primary_sb(g: &MkfsGeometry, uuid: &Uuid) -> Dsb {
    let mut sb = Dsb::new_zeroed();
    sb.sb_magicnum.set(XFS_SB_MAGIC);
    sb.sb_blocksize.set(g.blocksize);
    sb.sb_dblocks.set(g.dblocks);
    sb.sb_rblocks.set(g.rblocks);
    sb.sb_rextents.set(g.rextents);
    sb.sb_uuid = *uuid;
    sb.sb_logstart.set(g.logstart);
    sb.sb_rootino.set(g.rootino);
    sb.sb_rbmino.set(g.rbmino);
    sb.sb_rsumino.set(g.rsumino);
    sb.sb_rextsize.set(g.rextsize);
    sb.sb_agblocks.set(g.agblocks);
    sb.sb_agcount.set(g.agcount);
    sb.sb_logblocks.set(g.logblocks);
    sb.sb_versionnum.set(g.features.versionnum);
    sb.sb_qflags.set(g.features.qflags);
    sb.sb_sectsize.set(g.sectsize);
    sb.sb_inodesize.set(g.inodesize);
    sb.sb_inopblock.set(g.inopblock);
    sb.sb_fname = g.label;
    sb.sb_blocklog = g.blocklog;
    sb.sb_sectlog = g.sectlog;
    sb.sb_inodelog = g.inodelog;
    sb.sb_inopblog = g.inopblog;
    sb.sb_agblklog = g.agblklog;
    sb.sb_imax_pct = g.imax_pct;
    sb.sb_icount.set(g.icount);
    sb.sb_ifree.set(g.ifree);
    sb.sb_fdblocks.set(g.fdblocks);
    sb.sb_inoalignmt.set(g.inoalignmt);
    sb.sb_unit.set(g.unit);
    sb.sb_width.set(g.width);
    sb.sb_dirblklog = g.dirblklog;
    sb.sb_logsectlog = g.logsectlog;
    sb.sb_logsectsize.set(g.logsectsize);
    sb.sb_logsunit.set(g.logsunit);
    sb.sb_features2.set(g.features.features2);
    sb.sb_bad_features2.set(g.features.features2);
    sb.sb_features_compat.set(g.features.compat);
    sb.sb_features_ro_compat.set(g.features.ro_compat);
    sb.sb_features_incompat.set(g.features.incompat);
    sb.sb_features_log_incompat.set(g.features.log_incompat);
    sb.sb_spino_align.set(g.spino_align);
    if let Some(rt) = &g.rt {
        sb.sb_rbmblocks.set(rt.rbmblocks);
        sb.sb_rextslog = rt.rextslog;
        // With realtime groups the realtime superblock takes the first extent.
        let used = u64::from(rt.groups.is_some());
        sb.sb_frextents.set(g.rextents - used);
    }
    sb
}

/// The metadata directory fields after the superblock in AG `agno`'s copy
/// (the root of the tree only where the copy names the root directory).
pub(crate) fn metadir_sb(g: &MkfsGeometry, agno: u32) -> Option<DsbMetadir> {
    let m = g.metadir?;
    let mut t = DsbMetadir::new_zeroed();
    t.sb_metadirino.set(if sb_keeps_root(g, agno) {
        m.metadirino
    } else {
        NULLFSINO
    });
    t.sb_rgcount.set(m.rgcount);
    t.sb_rgextents.set(m.rgextents);
    t.sb_rgblklog = m.rgblklog;
    Some(t)
}

/// Does AG `agno`'s superblock copy name the root inode (the primary, the
/// middle and the last AG's)?
fn sb_keeps_root(g: &MkfsGeometry, agno: u32) -> bool {
    agno == 0 || agno == g.agcount - 1 || (g.agcount > 2 && agno == (g.agcount - 1) / 2)
}

/// The superblock copy mkfs leaves in AG `agno`: the primary's values in AG
/// 0; elsewhere the values from before the root inode existed, marked as in
/// progress, with the root inode number only in the middle and last AGs.
pub(crate) fn sb_for_ag(primary: &Dsb, g: &MkfsGeometry, agno: u32) -> Dsb {
    let mut sb = *primary;
    if agno == 0 {
        return sb;
    }
    sb.sb_inprogress = 1;
    sb.sb_icount.set(0);
    sb.sb_ifree.set(0);
    // The realtime section is freed after the copies are written.
    sb.sb_frextents.set(0);
    let pre = u64::from(g.agcount) * u64::from(g.prealloc_blocks);
    let internal_log = if g.logdev.is_some() { 0 } else { g.logblocks };
    sb.sb_fdblocks
        .set(g.dblocks - pre - u64::from(internal_log));
    if g.metadir.is_none() {
        sb.sb_rbmino.set(NULLFSINO);
        sb.sb_rsumino.set(NULLFSINO);
    }
    if !sb_keeps_root(g, agno) {
        sb.sb_rootino.set(NULLFSINO);
    }
    // The root's autofsck attribute turns the attribute bit on after the
    // copies are written; parent pointers turn it on from the start.
    if g.autofsck.is_some() && g.features.incompat & XFS_SB_FEAT_INCOMPAT_PARENT == 0 {
        let v = sb.sb_versionnum.get() & !XFS_SB_VERSION_ATTRBIT;
        sb.sb_versionnum.set(v);
    }
    sb
}

fn short_block(
    buf: &mut [u8],
    magic: u32,
    numrecs: usize,
    g: &MkfsGeometry,
    agno: u32,
    agbno: u32,
    uuid: &Uuid,
) {
    let mut h = BtreeBlockShort::new_zeroed();
    h.bb_magic.set(magic);
    h.bb_numrecs.set(numrecs as u16);
    h.bb_leftsib.set(NULLAGBLOCK);
    h.bb_rightsib.set(NULLAGBLOCK);
    h.bb_blkno.set(daddr(g, agno, agbno));
    h.bb_uuid = *uuid;
    h.bb_owner.set(agno);
    buf[..XFS_BTREE_SBLOCK_CRC_LEN].copy_from_slice(h.as_bytes());
}

fn put_recs<T: IntoBytes + zerocopy::Immutable>(buf: &mut [u8], recs: &[T]) {
    let mut off = XFS_BTREE_SBLOCK_CRC_LEN;
    for r in recs {
        let b = r.as_bytes();
        buf[off..off + b.len()].copy_from_slice(b);
        off += b.len();
    }
}

fn alloc_recs(ext: &[(u32, u32)]) -> Vec<AllocRec> {
    ext.iter()
        .map(|&(s, l)| {
            let mut r = AllocRec::new_zeroed();
            r.ar_startblock.set(s);
            r.ar_blockcount.set(l);
            r
        })
        .collect()
}

/// Inode btree records for the chunk at AG block `start` whose first
/// `used` inodes are in use.
fn inobt_recs(g: &MkfsGeometry, start: u32, used: u32) -> Vec<InobtRec> {
    let first = start << g.inopblog;
    let total = g.chunk_inodes() as u32;
    let mut used_left = used;
    let sparse = g.features.incompat & 2 != 0;
    (0..total / XFS_INODES_PER_CHUNK)
        .map(|i| {
            let used = used_left.min(XFS_INODES_PER_CHUNK);
            used_left -= used;
            let mut r = InobtRec::new_zeroed();
            r.ir_startino.set(first + i * XFS_INODES_PER_CHUNK);
            if sparse {
                r.ir_count = XFS_INODES_PER_CHUNK as u8;
                r.ir_freecount = (XFS_INODES_PER_CHUNK - used) as u8;
            } else {
                // Without sparse chunks the count bytes are part of a 32-bit free count.
                r.set_freecount_full(XFS_INODES_PER_CHUNK - used);
            }
            let mask = if used == 0 { 0 } else { (1u64 << used) - 1 };
            r.ir_free.set(!mask);
            r
        })
        .collect()
}

/// Reverse-mapping records of a fresh AG, merged like the kernel's rmap code.
fn rmap_recs(fb: &FixedBlocks, st: &AgState) -> Vec<RmapRec> {
    let mut raw: Vec<(u32, u32, u64)> =
        vec![(0, fb.bno, XFS_RMAP_OWN_FS), (fb.bno, 2, XFS_RMAP_OWN_AG)];
    let rmap = fb.rmap.unwrap_or(fb.ino + 1);
    raw.push((fb.ino, rmap - fb.ino, XFS_RMAP_OWN_INOBT));
    raw.push((rmap, 1, XFS_RMAP_OWN_AG));
    if let Some(r) = fb.refc {
        raw.push((r, 1, XFS_RMAP_OWN_REFC));
    }
    if let Some((s, l)) = st.log {
        raw.push((s, l, XFS_RMAP_OWN_LOG));
    }
    for &b in &st.agfl {
        raw.push((b, 1, XFS_RMAP_OWN_AG));
    }
    if let Some((s, l, _)) = st.chunk {
        raw.push((s, l, XFS_RMAP_OWN_INODES));
    }
    raw.sort_by_key(|r| r.0);
    let mut merged: Vec<(u32, u32, u64, u64)> = Vec::with_capacity(raw.len());
    for r in raw {
        match merged.last_mut() {
            Some(last) if last.2 == r.2 && last.0 + last.1 == r.0 => last.1 += r.1,
            _ => merged.push((r.0, r.1, r.2, 0)),
        }
    }
    // Metadata files' blocks: owned by their inode at their file offset.
    merged.extend(st.files.iter().copied());
    merged.sort_by_key(|r| (r.0, r.2, r.3));
    merged
        .into_iter()
        .map(|(s, l, o, off)| {
            let mut r = RmapRec::new_zeroed();
            r.rm_startblock.set(s);
            r.rm_blockcount.set(l);
            r.rm_owner.set(o);
            r.rm_offset.set(off);
            r
        })
        .collect()
}

/// Bytes of one AG's header image (its first `prealloc_blocks` blocks).
pub(crate) fn ag_image_len(g: &MkfsGeometry) -> usize {
    g.prealloc_blocks as usize * g.blocksize as usize
}

/// Build the image of AG `agno`'s first `prealloc_blocks` blocks into `img`
/// (exactly [`ag_image_len`] bytes; whatever it held is overwritten), so
/// that one buffer can be reused for every AG.
pub(crate) fn ag_image_into(
    g: &MkfsGeometry,
    primary: &Dsb,
    fb: &FixedBlocks,
    agno: u32,
    img: &mut [u8],
) {
    let st = ag_state(g, agno);
    let bs = g.blocksize as usize;
    let ss = usize::from(g.sectsize);
    debug_assert_eq!(img.len(), ag_image_len(g));
    img.fill(0);
    let uuid = primary.sb_uuid;

    // Superblock copy.
    let sb = sb_for_ag(primary, g, agno);
    img[..size_of_val(&sb)].copy_from_slice(sb.as_bytes());
    if let Some(t) = metadir_sb(g, agno) {
        img[XFS_SB_METADIR_OFF..XFS_SB_METADIR_OFF + size_of_val(&t)].copy_from_slice(t.as_bytes());
    }
    stamp(&mut img[..ss], XFS_SB_CRC_OFF);

    // AGF.
    let freeblks: u32 = st.free.iter().map(|e| e.1).sum();
    let longest = st.free.iter().map(|e| e.1).max().unwrap_or(0);
    let mut agf = Agf::new_zeroed();
    agf.agf_magicnum.set(XFS_AGF_MAGIC);
    agf.agf_versionnum.set(XFS_AGF_VERSION);
    agf.agf_seqno.set(agno);
    agf.agf_length.set(st.length);
    agf.agf_bno_root.set(fb.bno);
    agf.agf_cnt_root.set(fb.cnt);
    agf.agf_bno_level.set(1);
    agf.agf_cnt_level.set(1);
    if let Some(r) = fb.rmap {
        agf.agf_rmap_root.set(r);
        agf.agf_rmap_level.set(1);
        agf.agf_rmap_blocks.set(1);
    }
    agf.agf_flfirst.set(1);
    agf.agf_fllast.set(st.agfl.len() as u32);
    agf.agf_flcount.set(st.agfl.len() as u32);
    agf.agf_freeblks.set(freeblks);
    agf.agf_longest.set(longest);
    agf.agf_uuid = uuid;
    if let Some(r) = fb.refc {
        agf.agf_refcount_root.set(r);
        agf.agf_refcount_level.set(1);
        agf.agf_refcount_blocks.set(1);
    }
    let s = &mut img[ss..2 * ss];
    s[..size_of_val(&agf)].copy_from_slice(agf.as_bytes());
    stamp(s, XFS_AGF_CRC_OFF);

    // AGI.
    let finobt = fb.fino.is_some();
    let inobtcount = g.features.ro_compat & 8 != 0;
    let mut agi = Agi::new_zeroed();
    agi.agi_magicnum.set(XFS_AGI_MAGIC);
    agi.agi_versionnum.set(XFS_AGI_VERSION);
    agi.agi_seqno.set(agno);
    agi.agi_length.set(st.length);
    agi.agi_root.set(fb.ino);
    agi.agi_level.set(1);
    agi.agi_newino.set(NULLAGINO);
    agi.agi_dirino.set(NULLAGINO);
    for u in agi.agi_unlinked.iter_mut() {
        u.set(NULLAGINO);
    }
    let recs = match st.chunk {
        Some((start, _, used)) => inobt_recs(g, start, used),
        None => Vec::new(),
    };
    if let Some((start, _, used)) = st.chunk {
        let n = g.chunk_inodes() as u32;
        agi.agi_count.set(n);
        agi.agi_freecount.set(n - used);
        agi.agi_newino.set(start << g.inopblog);
    }
    agi.agi_uuid = uuid;
    if let Some(f) = fb.fino {
        agi.agi_free_root.set(f);
        agi.agi_free_level.set(1);
    }
    if inobtcount {
        agi.agi_iblocks.set(1);
        agi.agi_fblocks.set(u32::from(finobt));
    }
    let s = &mut img[2 * ss..3 * ss];
    s[..size_of_val(&agi)].copy_from_slice(agi.as_bytes());
    stamp(s, XFS_AGI_CRC_OFF);

    // AGFL.
    let s = &mut img[3 * ss..4 * ss];
    let mut hdr = AgflHdr::new_zeroed();
    hdr.agfl_magicnum.set(XFS_AGFL_MAGIC);
    hdr.agfl_seqno.set(agno);
    hdr.agfl_uuid = uuid;
    s[..size_of_val(&hdr)].copy_from_slice(hdr.as_bytes());
    for i in 0..agfl_size(ss) {
        set_agfl_entry(s, i, NULLAGBLOCK);
    }
    for (i, &b) in st.agfl.iter().enumerate() {
        set_agfl_entry(s, i + 1, b);
    }
    stamp(s, XFS_AGFL_CRC_OFF);

    // Btree roots.
    let mut block = |agbno: u32, magic: u32, fill: &dyn Fn(&mut [u8]) -> usize| {
        let off = agbno as usize * bs;
        let b = &mut img[off..off + bs];
        let n = fill(b);
        short_block(b, magic, n, g, agno, agbno, &uuid);
        stamp(b, XFS_BTREE_SBLOCK_CRC_OFF);
    };
    // Every slot written (stale ones past the count keep their bytes).
    let by_bno = alloc_recs(&st.trees.bno.slots);
    let by_cnt = alloc_recs(&st.trees.cnt.slots);
    block(fb.bno, XFS_ABTB_CRC_MAGIC, &|b| {
        put_recs(b, &by_bno);
        st.trees.bno.n
    });
    block(fb.cnt, XFS_ABTC_CRC_MAGIC, &|b| {
        put_recs(b, &by_cnt);
        st.trees.cnt.n
    });
    block(fb.ino, XFS_IBT_CRC_MAGIC, &|b| {
        put_recs(b, &recs);
        recs.len()
    });
    if let Some(f) = fb.fino {
        let frecs: Vec<InobtRec> = recs
            .iter()
            .filter(|r| r.freecount_full() > 0)
            .copied()
            .collect();
        block(f, XFS_FIBT_CRC_MAGIC, &|b| {
            put_recs(b, &frecs);
            frecs.len()
        });
    }
    if let Some(r) = fb.rmap {
        let rrecs = rmap_recs(fb, &st);
        block(r, XFS_RMAP_CRC_MAGIC, &|b| {
            put_recs(b, &rrecs);
            rrecs.len()
        });
    }
    if let Some(r) = fb.refc {
        block(r, XFS_REFC_CRC_MAGIC, &|_| 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_splits() {
        let mut f = vec![(6, 100)];
        carve(&mut f, 10, 5);
        assert_eq!(f, vec![(6, 4), (15, 91)]);
        carve(&mut f, 6, 4);
        assert_eq!(f, vec![(15, 91)]);
    }
}

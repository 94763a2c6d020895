//! What a freed inode and a directory block still hold, decoded from raw
//! bytes that no verifier vouches for any more: every field is checked
//! against the filesystem's geometry before it is believed.

use crate::bytes::{be16, be32, be64};
use crate::geometry::{AgBlock, AgNumber, Geometry, Ino};
use crate::inode::Extent;
use xfs_format::attr::{parse_attr_sf_entry, XFS_ATTR_PARENT};
use xfs_format::btree::XFS_BMAP_CRC_MAGIC;
use xfs_format::dir::block::{data_entsize, XFS_DIR2_DATA_FREE_TAG};
use xfs_format::inode::{Dinode, InodeTime, LITERAL_OFFSET, XFS_DINODE_MAGIC};
use xfs_format::BmbtIrec;
use zerocopy::FromBytes;

/// A timestamp as (seconds since the epoch, nanoseconds).
pub type Time = (i64, u32);

/// A parent pointer: the directory, its generation, the name in it.
pub type ParentPtr = (u64, u32, Vec<u8>);

/// The fields a freed inode keeps.
#[derive(Debug, Clone)]
pub struct FreedCore {
    pub ino: u64,
    pub gen: u32,
    pub uid: u32,
    pub gid: u32,
    pub projid: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub crtime: Time,
    /// The parent pointer left in the attribute area: (directory, its
    /// generation, name).
    pub pptr: Option<ParentPtr>,
    /// Where the attribute area that held it started (bytes into the inode).
    pub attr_off: Option<usize>,
}

/// Decodes a freed inode slot (`raw`, one inode, read from where inode
/// `ino` lives). `None` when the slot holds no inode of this filesystem
/// that was freed after use: wrong magic, a v5 inode naming another
/// number or filesystem, a mode that is not 0 (still in use), or no
/// timestamps at all (an inode never allocated since its chunk was made).
pub fn freed_core(geo: &Geometry, ino: u64, raw: &[u8]) -> Option<FreedCore> {
    let d = Dinode::ref_from_prefix(raw).ok()?.0;
    if d.di_mode.get() != 0 {
        return None;
    }
    freed_core_any_mode(geo, ino, raw)
}

/// [`freed_core`] without the test of the mode.
pub fn freed_core_any_mode(geo: &Geometry, ino: u64, raw: &[u8]) -> Option<FreedCore> {
    let d = Dinode::ref_from_prefix(raw).ok()?.0;
    if d.di_magic.get() != XFS_DINODE_MAGIC {
        return None;
    }
    if geo.v5 {
        if d.di_version != 3 || d.di_ino.get() != ino {
            return None;
        }
        let want = if geo.features.meta_uuid {
            geo.meta_uuid
        } else {
            geo.uuid
        };
        if d.di_uuid.0 != want {
            return None;
        }
    } else if d.di_version != 2 && d.di_version != 1 {
        return None;
    }
    let t = |w| d.time(w);
    let (ctime, crtime) = (t(InodeTime::Ctime), t(InodeTime::Crtime));
    let mtime = t(InodeTime::Mtime);
    if ctime == (0, 0) && mtime == (0, 0) && (!geo.v5 || crtime == (0, 0)) {
        return None;
    }
    let mut c = FreedCore {
        ino,
        gen: d.di_gen.get(),
        uid: d.di_uid.get(),
        gid: d.di_gid.get(),
        projid: d.projid(),
        atime: t(InodeTime::Atime),
        mtime,
        ctime,
        crtime: if geo.v5 { crtime } else { (0, 0) },
        pptr: None,
        attr_off: None,
    };
    if let Some((off, p)) = parent_remnant(geo, raw) {
        c.attr_off = Some(off);
        c.pptr = Some(p);
    }
    Some(c)
}

/// A short-form attribute area holding a parent pointer, looked for at
/// every 8-byte fork offset of the literal area (the fork offset was reset
/// when the inode was freed). Returns where it starts and the pointer.
fn parent_remnant(geo: &Geometry, raw: &[u8]) -> Option<(usize, ParentPtr)> {
    let end = raw.len();
    let mut off = LITERAL_OFFSET + 8;
    while off + 4 + 3 + 12 < end {
        if let Some(p) = sf_parent_at(geo, &raw[off..]) {
            return Some((off, p));
        }
        off += 8;
    }
    None
}

fn sf_parent_at(geo: &Geometry, area: &[u8]) -> Option<ParentPtr> {
    let totsize = usize::from(be16(area, 0));
    let count = area[2];
    if count == 0 || area[3] != 0 || totsize < 4 + 3 || totsize > area.len() {
        return None;
    }
    let mut pos = 4;
    let mut found = None;
    for _ in 0..count {
        let e = parse_attr_sf_entry(&area[..totsize], pos)?;
        if found.is_none() && e.flags & XFS_ATTR_PARENT != 0 && e.value.len() == 12 {
            let dir = be64(e.value, 0);
            if geo.ino_valid(Ino(dir)) && valid_name(e.name) {
                found = Some((dir, be32(e.value, 8), e.name.to_vec()));
            }
        }
        pos += e.size;
    }
    if pos != totsize {
        return None;
    }
    found
}

/// A name a directory entry may carry: 1 to 255 bytes, no '/' or NUL, not
/// "." or "..".
pub fn valid_name(n: &[u8]) -> bool {
    !n.is_empty()
        && n.len() <= 255
        && !n.contains(&b'/')
        && !n.contains(&0)
        && n != b"."
        && n != b".."
}

/// An extent record that fits the filesystem: inside one AG, not empty.
fn plausible(geo: &Geometry, r: &BmbtIrec) -> bool {
    // Past the largest file offset (bytes within an i64) is no mapping.
    let max_blocks = (i64::MAX as u64) >> geo.block_log;
    if r.blockcount == 0 || r.startoff.saturating_add(r.blockcount) > max_blocks {
        return false;
    }
    geo.fsb_range_valid(crate::geometry::FsBlock(r.startblock), r.blockcount)
}

fn to_extent(r: &BmbtIrec) -> Extent {
    Extent {
        offset: r.startoff,
        start: crate::geometry::FsBlock(r.startblock),
        len: r.blockcount,
        unwritten: r.unwritten,
    }
}

/// The extent records left at the start of a freed inode's literal area,
/// up to `end` (bytes into the inode): read while each is plausible and
/// lies after the one before.
pub fn literal_extents(geo: &Geometry, raw: &[u8], end: usize) -> Vec<Extent> {
    let mut v: Vec<Extent> = Vec::new();
    let mut off = LITERAL_OFFSET;
    while off + 16 <= end.min(raw.len()) {
        let r = BmbtIrec::unpack(be64(raw, off), be64(raw, off + 8));
        if !plausible(geo, &r) {
            break;
        }
        if let Some(p) = v.last() {
            if r.startoff < p.end() {
                break;
            }
        }
        v.push(to_extent(&r));
        off += 16;
    }
    v
}

/// The root of a block-mapping btree left in a freed inode's literal area
/// (a fork that was in btree format): its level and child pointers, read
/// as a root of `maxrecs` entries (which follows from the fork's size then,
/// not known any more).
pub fn literal_bmbt_root(raw: &[u8], maxrecs: usize) -> Option<(u16, Vec<u64>)> {
    let lit = raw.get(LITERAL_OFFSET..)?;
    let level = be16(lit, 0);
    let numrecs = usize::from(be16(lit, 2));
    if !(1..=5).contains(&level)
        || numrecs == 0
        || numrecs > maxrecs
        || 4 + maxrecs * 16 > lit.len()
    {
        return None;
    }
    let ptrs = 4 + maxrecs * 8;
    Some((
        level,
        (0..numrecs).map(|i| be64(lit, ptrs + i * 8)).collect(),
    ))
}

/// One block of a block-mapping btree read back from freed space: its
/// level and either its child pointers or its extent records. `None`
/// when it is not a bmbt block of inode `owner` at level `level`.
pub enum BmbtNode {
    Node(Vec<u64>),
    Leaf(Vec<Extent>),
}

impl BmbtNode {
    /// True when `self` is `older` with records taken off its end, as a
    /// truncation leaves a block (its last extent possibly shortened).
    pub fn truncates(&self, older: &BmbtNode) -> bool {
        match (self, older) {
            (BmbtNode::Node(a), BmbtNode::Node(b)) => a.len() < b.len() && b.starts_with(a),
            (BmbtNode::Leaf(a), BmbtNode::Leaf(b)) => a != b && truncation_of(a, b),
            _ => false,
        }
    }
}

/// True when the mapping `now` is `older` with extents taken off its end
/// (or equal to it), the last one kept possibly shortened: what a
/// truncation in progress leaves.
pub fn truncation_of(now: &[Extent], older: &[Extent]) -> bool {
    match now.split_last() {
        None => true,
        Some((last, init)) => {
            older.starts_with(init)
                && older.get(init.len()).is_some_and(|o| {
                    o.offset == last.offset
                        && o.start == last.start
                        && o.unwritten == last.unwritten
                        && last.len <= o.len
                })
        }
    }
}

pub fn bmbt_block(geo: &Geometry, buf: &[u8], owner: u64, level: u16) -> Option<BmbtNode> {
    let hdr = xfs_format::btree::BtreeBlockLong::ref_from_prefix(buf)
        .ok()?
        .0;
    let want = if geo.features.meta_uuid {
        geo.meta_uuid
    } else {
        geo.uuid
    };
    if hdr.bb_magic.get() != XFS_BMAP_CRC_MAGIC
        || hdr.bb_owner.get() != owner
        || hdr.bb_uuid.0 != want
        || hdr.bb_level.get() != level
        || !xfs_format::crc::verify(buf, xfs_format::btree::XFS_BTREE_LBLOCK_CRC_OFF)
    {
        return None;
    }
    let hl = xfs_format::btree::XFS_BTREE_LBLOCK_CRC_LEN;
    let n = usize::from(hdr.bb_numrecs.get());
    if level == 0 {
        if hl + n * 16 > buf.len() {
            return None;
        }
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let o = hl + i * 16;
            let r = BmbtIrec::unpack(be64(buf, o), be64(buf, o + 8));
            if !plausible(geo, &r) {
                return None;
            }
            v.push(to_extent(&r));
        }
        Some(BmbtNode::Leaf(v))
    } else {
        let maxrecs = (buf.len() - hl) / 16;
        if n == 0 || n > maxrecs {
            return None;
        }
        let ptrs = hl + maxrecs * 8;
        Some(BmbtNode::Node(
            (0..n).map(|i| be64(buf, ptrs + i * 8)).collect(),
        ))
    }
}

/// A short symlink target left in a freed inode's literal area.
pub fn literal_symlink(raw: &[u8], end: usize) -> Option<Vec<u8>> {
    let lit = raw.get(LITERAL_OFFSET..end.min(raw.len()))?;
    let n = lit.iter().position(|&b| b == 0).unwrap_or(lit.len());
    let t = &lit[..n];
    (n > 0 && t.iter().all(|&b| (0x20..0x7f).contains(&b) || b >= 0x80)).then(|| t.to_vec())
}

/// A name found in a directory block that no longer lists it, or still
/// listed in a block that was freed.
#[derive(Debug, Clone)]
pub struct DeadEntry {
    /// The inode number, or only its low 32 bits when the entry's first
    /// four bytes were overwritten by a free region's tag and length.
    pub ino: u64,
    pub low32_only: bool,
    pub name: Vec<u8>,
    pub ftype: Option<u8>,
    /// Still a live entry (of a block that was freed).
    pub live: bool,
}

/// Every entry of directory data block `buf` that can be read, from
/// `hdr` (the data header's size) to `end`: live ones (reported when
/// `want_live`) and the dead ones inside free regions.
pub fn block_entries(
    geo: &Geometry,
    buf: &[u8],
    hdr: usize,
    end: usize,
    want_live: bool,
) -> Vec<DeadEntry> {
    let ftype = geo.features.ftype;
    let end = end.min(buf.len());
    let mut out = Vec::new();
    let mut off = hdr;
    while off + 8 <= end {
        if be16(buf, off) == XFS_DIR2_DATA_FREE_TAG {
            let len = usize::from(be16(buf, off + 2));
            if len < 8 || !len.is_multiple_of(8) || off + len > end {
                // A damaged region: look for entries up to the end.
                dead_in(geo, buf, off, end, ftype, &mut out);
                break;
            }
            dead_in(geo, buf, off, off + len, ftype, &mut out);
            off += len;
            continue;
        }
        match entry_at(geo, buf, off, end, ftype, false) {
            Some((e, size)) => {
                if want_live && e.name != b"." && e.name != b".." {
                    out.push(DeadEntry { live: true, ..e });
                }
                off += size;
            }
            None => {
                // Not an entry where one should be: resynchronise.
                dead_in(geo, buf, off, end, ftype, &mut out);
                break;
            }
        }
    }
    out
}

/// Entries in `[start, end)` of a directory data block of which only some
/// bytes are known (the chunks a log item holds): wherever one can be read
/// whose tag holds its own offset, as a live entry's does.
pub fn entries_in(geo: &Geometry, buf: &[u8], start: usize, end: usize) -> Vec<DeadEntry> {
    let ftype = geo.features.ftype;
    let end = end.min(buf.len());
    let mut out = Vec::new();
    let mut off = start.next_multiple_of(8);
    while off + 16 <= end {
        match entry_at(geo, buf, off, end, ftype, false) {
            Some((e, size)) if usize::from(be16(buf, off + size - 2)) == off => {
                if e.name != b"." && e.name != b".." {
                    out.push(DeadEntry { live: true, ..e });
                }
                off += size;
            }
            _ => off += 8,
        }
    }
    out
}

/// Entries inside the free region `[start, end)`.
fn dead_in(
    geo: &Geometry,
    buf: &[u8],
    start: usize,
    end: usize,
    ftype: bool,
    out: &mut Vec<DeadEntry>,
) {
    let mut off = start;
    while off + 16 <= end {
        // The region's own first entry lost the high half of its inode
        // number to the free tag and length.
        let clobbered = be16(buf, off) == XFS_DIR2_DATA_FREE_TAG;
        match entry_at(geo, buf, off, end, ftype, clobbered) {
            Some((e, size)) => {
                // Its tag is its offset, or the region's start where the
                // region's tag overwrote it.
                if e.name != b"." && e.name != b".." {
                    out.push(e);
                }
                off += size;
            }
            None => off += 8,
        }
    }
}

fn entry_at(
    geo: &Geometry,
    buf: &[u8],
    off: usize,
    end: usize,
    ftype: bool,
    clobbered: bool,
) -> Option<(DeadEntry, usize)> {
    let namelen = usize::from(*buf.get(off + 8)?);
    if namelen == 0 {
        return None;
    }
    let size = data_entsize(namelen, ftype);
    if off + size > end {
        return None;
    }
    let name = &buf[off + 9..off + 9 + namelen];
    if !valid_name(name) && name != b"." && name != b".." {
        return None;
    }
    let ft = if ftype {
        let f = buf[off + 9 + namelen];
        if !(1..=7).contains(&f) {
            return None;
        }
        Some(f)
    } else {
        None
    };
    let tag = usize::from(be16(buf, off + size - 2));
    if tag != off && !(tag < off && tag.is_multiple_of(8)) {
        return None;
    }
    let (ino, low32_only) = if clobbered {
        (u64::from(be32(buf, off + 4)), true)
    } else {
        let i = be64(buf, off);
        if !geo.ino_valid(Ino(i)) {
            return None;
        }
        (i, false)
    };
    if clobbered && tag != off {
        return None;
    }
    Some((
        DeadEntry {
            ino,
            low32_only,
            name: name.to_vec(),
            ftype: ft,
            live: false,
        },
        size,
    ))
}

/// AG and AG block of filesystem block `fsb`, or `None` outside the
/// filesystem.
pub fn split(geo: &Geometry, fsb: u64) -> Option<(AgNumber, AgBlock)> {
    let f = crate::geometry::FsBlock(fsb);
    geo.fsb_valid(f).then(|| geo.fsb_split(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::FsBlock;

    fn e(offset: u64, start: u64, len: u64) -> Extent {
        Extent {
            offset,
            start: FsBlock(start),
            len,
            unwritten: false,
        }
    }

    #[test]
    fn a_truncation_takes_extents_off_the_end() {
        let old = [e(0, 100, 4), e(6, 200, 3), e(10, 300, 8)];
        assert!(truncation_of(&old, &old));
        assert!(truncation_of(&old[..2], &old));
        assert!(truncation_of(&[], &old));
        // The last one kept may be shortened, not moved or lengthened.
        assert!(truncation_of(&[e(0, 100, 4), e(6, 200, 1)], &old));
        assert!(!truncation_of(&[e(0, 100, 4), e(6, 201, 1)], &old));
        assert!(!truncation_of(&[e(0, 100, 5)], &old));
        // Another mapping, or one that grew, is not a truncation.
        assert!(!truncation_of(
            &[e(0, 100, 4), e(6, 200, 3), e(10, 300, 8), e(20, 9, 1)],
            &old
        ));
        assert!(!truncation_of(&[e(0, 900, 4)], &old));
        let leaf = |v: &[Extent]| BmbtNode::Leaf(v.to_vec());
        assert!(leaf(&old[..1]).truncates(&leaf(&old)));
        assert!(!leaf(&old).truncates(&leaf(&old)));
        assert!(BmbtNode::Node(vec![5]).truncates(&BmbtNode::Node(vec![5, 6])));
        assert!(!BmbtNode::Node(vec![6]).truncates(&BmbtNode::Node(vec![5, 6])));
    }
}

//! Writing fork mappings: allocating blocks for file ranges, punching,
//! truncating, unwritten extents, and the conversions between the
//! extents and btree (bmbt) formats.
//!
//! None of these functions logs the inode: they change `ip` (extent
//! counts, block counts, fork bytes, format) and the caller logs it.
//!
//! Every change reads a small window of records around the affected
//! range ([`fork::window`]), edits it in memory ([`edit`]) and writes
//! back the difference ([`fork::replace`]), which keeps the fork's
//! format, record count and bmbt blocks right.

pub(crate) mod bmbt;
mod cow;
mod edit;
pub mod exchmaps;
mod fork;
mod node;
pub(crate) mod rt;
mod space;
#[cfg(test)]
mod tests;

use self::space as alloc;
use crate::alloc::{AllocReq, Owner};
use crate::error::{Error, Result};
use crate::geometry::{FsBlock, Geometry};
use crate::inode::{Extent, Fork, ForkFormat, Inode};
use crate::trans::Trans;

pub use cow::{unshare_range, CowPiece};
pub(crate) use fork::rebuild_data_btree;

/// The whole mapping of a fork, as this transaction sees it.
pub fn extents(tp: &mut Trans<'_>, ip: &Inode, fork: Fork) -> Result<Vec<Extent>> {
    if fork == Fork::Attr && !ip.has_attr_fork() {
        return Ok(Vec::new());
    }
    fork::all(tp, ip, fork)
}

/// The extent covering file block `lblk`, if any.
pub fn lookup(tp: &mut Trans<'_>, ip: &Inode, fork: Fork, lblk: u64) -> Result<Option<Extent>> {
    if fork == Fork::Attr && !ip.has_attr_fork() {
        return Ok(None);
    }
    Ok(fork::seek(tp, ip, fork, lblk)?.filter(|e| e.offset <= lblk))
}

/// The first extent ending after file block `lblk` (covering it, or the
/// next one after a hole).
pub fn next_extent(
    tp: &mut Trans<'_>,
    ip: &Inode,
    fork: Fork,
    lblk: u64,
) -> Result<Option<Extent>> {
    if fork == Fork::Attr && !ip.has_attr_fork() {
        return Ok(None);
    }
    fork::seek(tp, ip, fork, lblk)
}

/// The end of `range` (`lblk + len`), refusing file offsets no record
/// can hold.
fn range_end(lblk: u64, len: u64) -> Result<u64> {
    let end = lblk.saturating_add(len);
    if end > xfs_format::types::BMBT_STARTOFF_MASK + 1 && len != u64::MAX {
        return Err(Error::Invalid(format!(
            "file blocks {lblk}+{len} beyond the largest file offset"
        )));
    }
    Ok(end)
}

/// Where to allocate for a hole at `pos`: after the previous extent, else
/// at `hint`, else near the inode.
fn target(tp: &Trans<'_>, ip: &Inode, prev: Option<&Extent>, hint: Option<FsBlock>) -> FsBlock {
    let geo = tp.geo();
    if let Some(p) = prev {
        let after = FsBlock(p.start.0 + p.len);
        if geo.fsb_valid(after) {
            return after;
        }
        return p.start;
    }
    if let Some(h) = hint.filter(|h| geo.fsb_valid(*h)) {
        return h;
    }
    geo.fsb_make(geo.ino_agno(ip.ino), geo.ino_agbno(ip.ino))
}

/// The AG of the filestream a regular file's first data allocation
/// follows, if it streams and its directory is known.
fn stream_ag(tp: &Trans<'_>, ip: &Inode) -> Option<u32> {
    let fs = tp.fs();
    let fsm = &fs.write_state().ok()?.alloc.filestreams;
    if !fsm.applies(ip.flags) {
        return None;
    }
    fsm.ag_for(fs, ip.ino)
}

/// Allocates blocks for every hole in file blocks `lblk..lblk+len` and
/// maps them (as unwritten extents when `unwritten`). `hint` is where the
/// data should go when nothing else decides (None: near the inode, after
/// the fork's last extent). Returns the mapping of the whole range, each
/// extent cut to the range.
pub fn alloc_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
    unwritten: bool,
    hint: Option<FsBlock>,
) -> Result<Vec<Extent>> {
    alloc_range_min(tp, ip, fork, lblk, len, unwritten, hint, 1)
}

/// Like [`alloc_range`], but every extent allocated is at least `minlen`
/// blocks long (or the whole hole, when shorter): a directory block of
/// several filesystem blocks must be one extent, and the allocator must
/// look past free pieces too short for it rather than return one.
#[allow(clippy::too_many_arguments)]
pub fn alloc_range_min(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
    unwritten: bool,
    hint: Option<FsBlock>,
    minlen: u32,
) -> Result<Vec<Extent>> {
    fork::check_mapped(tp.geo(), ip, fork)?;
    if len == u64::MAX {
        return Err(Error::Invalid(
            "cannot allocate to the end of file space".into(),
        ));
    }
    let end = range_end(lblk, len)?;
    if fork == Fork::Data && ip.is_realtime() {
        rt::alloc_range(tp, ip, lblk, len, unwritten)?;
        let win = fork::window(tp, ip, fork, lblk, end)?;
        return Ok(win
            .iter()
            .filter(|e| e.end() > lblk && e.offset < end)
            .map(|e| edit::clip(e, lblk, end))
            .collect());
    }
    let ag_log = tp.geo().ag_blk_log;
    let mut pos = lblk;
    while pos < end {
        let win = fork::window(tp, ip, fork, pos, end)?;
        if let Some(e) = win.iter().find(|e| e.offset <= pos && e.end() > pos) {
            pos = e.end();
            continue;
        }
        let hole_end = win
            .iter()
            .find(|e| e.offset > pos)
            .map_or(end, |e| e.offset.min(end));
        let prev = win.iter().rev().find(|e| e.end() <= pos);
        let want = (hole_end - pos)
            .min(edit::MAX_EXTLEN)
            .min(u64::from(u32::MAX)) as u32;
        let stream = if prev.is_none()
            && hint.is_none()
            && fork == Fork::Data
            && ip.file_type == crate::inode::FileType::File
        {
            stream_ag(tp, ip)
        } else {
            None
        };
        let req = AllocReq {
            target: match stream {
                Some(ag) => crate::alloc::filestream::target(tp.fs(), ip.ino, ag),
                None => target(tp, ip, prev, hint),
            },
            minlen: minlen.clamp(1, want),
            maxlen: want,
            alignment: 1,
            ag_only: false,
            owner: Owner::Inode {
                ino: ip.ino,
                attr_fork: fork == Fork::Attr,
                offset: pos,
                bmbt: false,
            },
        };
        // The new blocks' reverse mapping can join only this fork's
        // mapping of the blocks just before it (ending at `pos`) or just
        // after (starting where the new one could end). With neither, it
        // goes in as it is, without the neighbour searches (in the
        // overlapping tree of a reflink filesystem, two range queries).
        let next = win.iter().find(|e| e.offset > pos);
        let alone = prev.is_none_or(|e| e.end() < pos)
            && next.is_none_or(|e| e.offset > pos + u64::from(want));
        let (start, got) = if alone {
            alloc::alloc_extent_alone(tp, &req)?
        } else {
            alloc::alloc_extent(tp, &req)?
        };
        if got == 0 || got < req.minlen || got > want {
            return Err(Error::Invalid(format!(
                "allocator returned {got} blocks for a request of {}..={want}",
                req.minlen
            )));
        }
        if fork == Fork::Data && ip.file_type == crate::inode::FileType::File {
            data_blocks_claimed(tp, start, got)?;
        }
        if stream.is_some() {
            let ag = tp.geo().fsb_split(start).0 .0;
            if let Ok(ws) = tp.fs().write_state() {
                ws.alloc.filestreams.landed(ip.ino, ag);
            }
        }
        if unwritten {
            // The reverse mapping carries the unwritten flag too.
            crate::alloc::rmap_convert(tp, start, got, &req.owner, true)?;
        }
        let e = Extent {
            offset: pos,
            start,
            len: u64::from(got),
            unwritten,
        };
        let new = edit::insert(&win, e, ag_log);
        fork::replace(tp, ip, fork, &win, &new)?;
        ip.nblocks += u64::from(got);
        pos += u64::from(got);
    }
    let win = fork::window(tp, ip, fork, lblk, end)?;
    Ok(win
        .iter()
        .filter(|e| e.end() > lblk && e.offset < end)
        .map(|e| edit::clip(e, lblk, end))
        .collect())
}

/// Readies newly allocated blocks for file data, which is written in
/// place, unlogged: blocks freed since the last checkpoint still belong
/// to their old owner on disk until that checkpoint is written (the
/// kernel's busy extents), and the data must land before the checkpoint
/// that maps the blocks.
pub(crate) fn data_blocks_claimed(tp: &mut Trans<'_>, start: FsBlock, len: u32) -> Result<()> {
    let lo = tp.geo().fsb_to_daddr(start).bytes();
    let hi = lo + (u64::from(len) << tp.geo().block_log);
    if tp.freed_here(lo, hi) {
        // The old owner still maps these blocks on disk until this
        // transaction's checkpoint: writing them now could show its data
        // to the old owner after a crash. Callers allocate before freeing.
        return Err(Error::Invalid(format!(
            "file data allocated in blocks freed by the same transaction (bytes {lo}..{hi})"
        )));
    }
    let ws = tp.fs().write_state()?;
    if ws.busy(lo, hi) {
        tp.fs().force_log()?;
    }
    tp.note_data_alloc(lo, hi);
    Ok(())
}

/// Unmaps file blocks `lblk..lblk+len` and frees their blocks (punch a
/// hole; with `len == u64::MAX`, truncate the fork at `lblk`).
pub fn unmap_range(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
) -> Result<()> {
    unmap_inner(tp, ip, fork, lblk, len, true)
}

/// Unmaps file blocks `lblk..lblk+len` without freeing or releasing their
/// blocks (log recovery finishing a block-mapping intent, whose blocks a
/// separate intent frees or releases).
pub fn unmap_only(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
) -> Result<()> {
    unmap_inner(tp, ip, fork, lblk, len, false)
}

fn unmap_inner(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
    free: bool,
) -> Result<()> {
    if fork == Fork::Attr && !ip.has_attr_fork() {
        return Ok(());
    }
    fork::check_mapped(tp.geo(), ip, fork)?;
    let end = range_end(lblk, len)?;
    let realtime = fork == Fork::Data && ip.is_realtime();
    let mut rt_pieces = Vec::new();
    let mut pos = lblk;
    while pos < end {
        let Some(e) = fork::seek(tp, ip, fork, pos)? else {
            break;
        };
        if e.offset >= end {
            break;
        }
        let a = e.offset.max(pos);
        let b = e.end().min(end);
        let keep = edit::remove(&e, a, b);
        fork::replace(tp, ip, fork, &[e], &keep)?;
        let freed = edit::clip(&e, a, b);
        let owner = Owner::Inode {
            ino: ip.ino,
            attr_fork: fork == Fork::Attr,
            offset: a,
            bmbt: false,
        };
        if realtime {
            // The realtime rmap btree's record goes in either case (the
            // unmapping is the file's; freeing is the caller's choice).
            crate::alloc::rtrmap::unmap(
                tp,
                crate::alloc::rtrmap::RtMapping {
                    rtb: freed.start.0,
                    len: freed.len,
                    ino: ip.ino,
                    offset: a,
                    unwritten: freed.unwritten,
                },
            )?;
            if free {
                rt_pieces.push((freed.start.0, freed.len));
            }
        } else if !free {
            crate::alloc::rmap_apply(
                tp,
                freed.start,
                freed.len as u32,
                ip.ino.0,
                a,
                if fork == Fork::Attr {
                    xfs_format::btree::XFS_RMAP_OFF_ATTR_FORK
                } else {
                    0
                } | if freed.unwritten {
                    xfs_format::btree::XFS_RMAP_OFF_UNWRITTEN
                } else {
                    0
                },
                false,
            )?;
        } else if fork == Fork::Data && ip.may_share() {
            alloc::release_extent(tp, freed.start, freed.len as u32, &owner)?;
        } else {
            alloc::free_extent(tp, freed.start, freed.len as u32, &owner)?;
        }
        ip.nblocks = ip.nblocks.saturating_sub(freed.len);
        if realtime {
            tp.note_rt_blocks(ip.ino, -(freed.len as i64));
        }
        pos = b;
    }
    if !rt_pieces.is_empty() {
        rt::free_pieces(tp, ip.ino.0, rt_pieces)?;
    }
    Ok(())
}

/// Marks file blocks `lblk..lblk+len` as written (clears the unwritten
/// flag, splitting extents as needed).
pub fn convert_unwritten(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    len: u64,
) -> Result<()> {
    fork::check_mapped(tp.geo(), ip, fork)?;
    let end = range_end(lblk, len)?;
    let realtime = fork == Fork::Data && ip.is_realtime();
    let ag_log = if realtime {
        rt::rt_merge_log(tp.geo())
    } else {
        tp.geo().ag_blk_log
    };
    let mut pos = lblk;
    while pos < end {
        let Some(e) = fork::seek(tp, ip, fork, pos)? else {
            break;
        };
        if e.offset >= end {
            break;
        }
        let b = e.end().min(end);
        if e.unwritten && realtime {
            let a = pos.max(e.offset);
            crate::alloc::rtrmap::convert(
                tp,
                crate::alloc::rtrmap::RtMapping {
                    rtb: e.start.0 + (a - e.offset),
                    len: b - a,
                    ino: ip.ino,
                    offset: a,
                    unwritten: false,
                },
            )?;
            let win = fork::window(tp, ip, fork, e.offset, e.end())?;
            let new = edit::set_written(&win, pos.max(e.offset), b, ag_log);
            fork::replace(tp, ip, fork, &win, &new)?;
        } else if e.unwritten {
            let a = pos.max(e.offset);
            let owner = Owner::Inode {
                ino: ip.ino,
                attr_fork: fork == Fork::Attr,
                offset: a,
                bmbt: false,
            };
            let start = FsBlock(e.start.0 + (a - e.offset));
            crate::alloc::rmap_convert(tp, start, (b - a) as u32, &owner, false)?;
            let win = fork::window(tp, ip, fork, e.offset, e.end())?;
            let new = edit::set_written(&win, pos.max(e.offset), b, ag_log);
            fork::replace(tp, ip, fork, &win, &new)?;
        }
        pos = b;
    }
    Ok(())
}

/// Bytes the data fork needs at least in its current format (for
/// choosing an attr fork offset): a btree root's entries, or the extent
/// records. Local and device forks: their current contents' length is
/// the caller's business, 0 here.
pub fn data_fork_min_bytes(ip: &Inode) -> usize {
    match ip.format {
        ForkFormat::Btree => {
            let n = ip
                .data_fork
                .get(2..4)
                .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
            4 + n * 16
        }
        ForkFormat::Extents => ip.nextents as usize * 16,
        _ => 0,
    }
}

/// Moves the boundary between the forks to `forkoff` (8-byte units from
/// the literal area; 0: no attr fork), keeping the data fork valid: a
/// btree root is laid out again for its new size, extent records must
/// still fit. The attr fork's bytes are only resized (zero-filled at the
/// end): filling them is the caller's business.
pub fn set_forkoff(geo: &Geometry, ip: &mut Inode, forkoff: u8) -> Result<()> {
    let lit = Inode::literal_size(geo);
    let new_data = if forkoff == 0 {
        lit
    } else {
        usize::from(forkoff) * 8
    };
    if new_data > lit {
        return Err(Error::Invalid(format!(
            "fork offset {forkoff} past the inode"
        )));
    }
    if data_fork_min_bytes(ip) > new_data {
        return Err(Error::Invalid(format!(
            "data fork needs {} bytes, fork offset {forkoff} leaves {new_data}",
            data_fork_min_bytes(ip)
        )));
    }
    let old_size = fork::size(geo, ip, Fork::Data)?;
    if ip.format == ForkFormat::Btree {
        let mut cur = ip.data_fork.clone();
        cur.resize(old_size, 0);
        ip.data_fork = node::relayout_root(&cur, new_data)?;
    } else if ip.data_fork.len() > new_data {
        if ip.data_fork[new_data..].iter().any(|b| *b != 0) {
            return Err(Error::Invalid(
                "data fork contents do not fit the new fork offset".into(),
            ));
        }
        ip.data_fork.truncate(new_data);
    } else {
        ip.data_fork.resize(new_data, 0);
    }
    ip.forkoff = forkoff;
    if forkoff == 0 {
        ip.attr_fork.clear();
        ip.aformat = ForkFormat::Extents;
    } else {
        ip.attr_fork.resize(lit - new_data, 0);
    }
    Ok(())
}

/// Maps file blocks `lblk..lblk+len` of a fork, a hole, to the blocks from
/// `start`, which the caller allocated (for several files at once) and
/// now hands to this one. Like the mapping half of [`alloc_range`].
pub fn map_given(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    start: FsBlock,
    len: u64,
) -> Result<()> {
    map_given_as(tp, ip, fork, lblk, start, len, false)
}

/// [`map_given`], mapping the blocks as unwritten when `unwritten`.
pub fn map_given_as(
    tp: &mut Trans<'_>,
    ip: &mut Inode,
    fork: Fork,
    lblk: u64,
    start: FsBlock,
    len: u64,
    unwritten: bool,
) -> Result<()> {
    fork::check_mapped(tp.geo(), ip, fork)?;
    let end = range_end(lblk, len)?;
    if len == 0 || len > edit::MAX_EXTLEN {
        return Err(Error::Invalid(format!("mapping of {len} blocks")));
    }
    let win = fork::window(tp, ip, fork, lblk, end)?;
    if win.iter().any(|e| e.offset < end && e.end() > lblk) {
        return Err(Error::Invalid(format!(
            "inode {}: file blocks {lblk}+{len} are mapped already",
            ip.ino.0
        )));
    }
    let e = Extent {
        offset: lblk,
        start,
        len,
        unwritten,
    };
    let new = edit::insert(&win, e, tp.geo().ag_blk_log);
    fork::replace(tp, ip, fork, &win, &new)?;
    ip.nblocks += len;
    if fork == Fork::Data && ip.is_realtime() {
        tp.note_rt_blocks(ip.ino, len as i64);
    }
    Ok(())
}

/// Where a new file's data would go: near its inode.
pub fn new_file_target(tp: &Trans<'_>, ip: &Inode) -> FsBlock {
    target(tp, ip, None, None)
}

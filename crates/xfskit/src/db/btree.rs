//! Read-only walks of an AG's short-pointer btrees and reads of its
//! headers for the inspection commands: every block read through the
//! verified buffer cache, the records handed out leaf by leaf in key order
//! (memory: one block per level).

use crate::buf::verify::Verifier;
use crate::bytes::be32_or0;
use crate::error::{Error, Location, Result};
use crate::fs::Fs;
use crate::geometry::{AgBlock, AgNumber, Daddr};
use std::sync::Arc;

/// Deepest btree accepted (the kernel's limits are lower).
const MAX_LEVELS: u32 = 9;

/// The disk address of sector `sector` of AG `agno`.
pub(crate) fn hdr_daddr(fs: &Fs, agno: u32, sector: u64) -> Daddr {
    let geo = fs.geometry();
    let ag0 = geo.agb_to_daddr(AgNumber(agno), AgBlock(0));
    Daddr(ag0.0 + sector * u64::from(geo.sect_size / 512))
}

/// Reads a verified AG header sector.
pub(crate) fn read_hdr(fs: &Fs, agno: u32, sector: u64, v: &Verifier<'_>) -> Result<Arc<[u8]>> {
    let geo = fs.geometry();
    fs.read_meta(hdr_daddr(fs, agno, sector), geo.sect_size, v)
}

/// One btree of an AG: its name for messages, root, height, block magic
/// (the v5 one; the verifier maps it on v4) and record and key sizes.
pub(crate) struct Tree {
    pub what: &'static str,
    pub agno: u32,
    pub root: u32,
    pub levels: u32,
    pub magic: u32,
    pub rec_len: usize,
    pub key_len: usize,
}

/// Calls `f` with every leaf record of `t`, in key order.
pub(crate) fn walk(fs: &Fs, t: &Tree, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    walk_where(fs, t, &|_| true, f)
}

/// [`walk`] into only the subtrees whose node key (`key_len` bytes) `keep`
/// accepts: a range query reads the blocks on its way and no others.
pub(crate) fn walk_where(
    fs: &Fs,
    t: &Tree,
    keep: &dyn Fn(&[u8]) -> bool,
    f: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let loc = || Location::Other(format!("AG {} {} root", t.agno, t.what));
    if t.levels == 0 || t.levels > MAX_LEVELS {
        return Err(Error::corrupt(
            "AG header",
            loc(),
            format!("{} height {}", t.what, t.levels),
        ));
    }
    visit(fs, t, t.root, t.levels - 1, keep, f)
}

fn visit(
    fs: &Fs,
    t: &Tree,
    agbno: u32,
    level: u32,
    keep: &dyn Fn(&[u8]) -> bool,
    f: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let geo = fs.geometry();
    let agno = t.agno;
    if agbno == 0 || agbno >= geo.ag_len(AgNumber(agno)) {
        return Err(Error::corrupt(
            "btree pointer",
            Location::AgBlock { agno, agbno },
            format!("{} block pointer outside the AG", t.what),
        ));
    }
    let daddr = geo.agb_to_daddr(AgNumber(agno), AgBlock(agbno));
    let v = Verifier::ShortBtree {
        magic: t.magic,
        agno,
        level: Some(level as u16),
    };
    let blk = fs.read_meta(daddr, geo.block_size, &v)?;
    let hdr = geo.layout().sblock_hdr;
    let numrecs = usize::from(u16::from_be_bytes([blk[6], blk[7]]));
    let body = &blk[hdr..];
    let bad = |detail: String| Error::corrupt(t.what, Location::AgBlock { agno, agbno }, detail);
    if level == 0 {
        if numrecs * t.rec_len > body.len() {
            return Err(bad(format!("{numrecs} records do not fit in the block")));
        }
        for i in 0..numrecs {
            f(&body[i * t.rec_len..(i + 1) * t.rec_len])?;
        }
        return Ok(());
    }
    let maxrecs = body.len() / (t.key_len + 4);
    if numrecs == 0 || numrecs > maxrecs {
        return Err(bad(format!("node with {numrecs} pointers")));
    }
    let ptrs = &body[maxrecs * t.key_len..];
    for i in 0..numrecs {
        if keep(&body[i * t.key_len..(i + 1) * t.key_len]) {
            visit(fs, t, be32_or0(ptrs, i * 4), level - 1, keep, f)?;
        }
    }
    Ok(())
}

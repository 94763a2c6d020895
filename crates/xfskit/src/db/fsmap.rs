//! The reverse mappings of a range of blocks, as `xfs_db -c 'fsmap START
//! END'` lists them: every record of each AG's reverse-mapping btree that
//! overlaps the range, AG by AG, in the tree's order.
//!
//! Cost: the AGF of each AG in the range and the rmap btree blocks whose
//! keys overlap it (a node key holds the lowest and the highest block its
//! subtree maps), one block per level held.

use super::btree::{read_hdr, walk_where, Tree};
use crate::buf::verify::Verifier;
use crate::bytes::be32_or0;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::geometry::{AgNumber, FsBlock};
use serde_json::{json, Value};
use xfs_format::ag::XFS_AGF_SECTOR;
use xfs_format::btree::XFS_RMAP_CRC_MAGIC;

/// Offset flag: the mapping is of the attribute fork.
const OFF_ATTR_FORK: u64 = 1 << 63;
/// Offset flag: the block is a block of the inode's extent btree.
const OFF_BMBT_BLOCK: u64 = 1 << 62;
/// Offset flag: the extent is unwritten.
const OFF_UNWRITTEN: u64 = 1 << 61;
/// The file offset bits of `rm_offset`.
const OFF_MASK: u64 = (1 << 54) - 1;
/// Bytes of an rmap record and of one of a node's two keys.
const REC_LEN: usize = 24;
const KEY_LEN: usize = 20;

/// One reverse mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub agno: u32,
    pub agbno: u32,
    pub len: u32,
    /// An inode number, or a special owner (negative as xfs_db prints it).
    pub owner: i64,
    /// The file offset, in blocks.
    pub offset: u64,
    pub bmbt: bool,
    pub attr_fork: bool,
    pub unwritten: bool,
}

impl Mapping {
    /// The line xfs_db prints for the `n`th mapping listed.
    pub fn line(&self, n: u64) -> String {
        format!(
            "{n}: {}/{} len {} owner {} offset {} bmbt {} attrfork {} extflag {}",
            self.agno,
            self.agbno,
            self.len,
            self.owner,
            self.offset,
            u8::from(self.bmbt),
            u8::from(self.attr_fork),
            u8::from(self.unwritten)
        )
    }

    /// The mapping as JSON, the special owners by name.
    pub fn to_json(&self) -> Value {
        let owner = match special_owner(self.owner) {
            Some(name) => json!(name),
            None => json!(self.owner),
        };
        json!({
            "agno": self.agno, "agbno": self.agbno, "len": self.len, "owner": owner,
            "offset": self.offset, "bmbt": self.bmbt, "attr_fork": self.attr_fork,
            "unwritten": self.unwritten,
        })
    }
}

/// The name of a special owner (`XFS_RMAP_OWN_*`).
pub fn special_owner(owner: i64) -> Option<&'static str> {
    Some(match owner {
        -1 => "null",
        -2 => "unknown",
        -3 => "fs",
        -4 => "log",
        -5 => "ag",
        -6 => "inobt",
        -7 => "inodes",
        -8 => "refcount",
        -9 => "cow",
        _ => return None,
    })
}

/// Calls `f` with every mapping that overlaps filesystem blocks `start`
/// to `end` (AG-encoded, inclusive; the whole filesystem when not given),
/// as xfs_db's fsmap: in the first AG from `start`'s block, in the last
/// up to `end`'s. `start` must be a block of the filesystem (xfs_db takes
/// only numbers below the block count, which leaves out the later AGs'
/// blocks when the AG size is not a power of two); an `end` past the
/// filesystem is its last block.
pub fn scan(
    fs: &Fs,
    start: Option<u64>,
    end: Option<u64>,
    f: &mut dyn FnMut(&Mapping),
) -> Result<()> {
    let geo = fs.geometry();
    if !geo.features.rmapbt {
        return Err(Error::Unsupported(
            "fsmap: the filesystem has no reverse-mapping btree (mkfs.xfs -m rmapbt=1)".into(),
        ));
    }
    let valid = |fsb: u64, what: &str| -> Result<(u32, u32)> {
        let (a, b) = geo.fsb_split(FsBlock(fsb));
        if a.0 >= geo.ag_count || b.0 >= geo.ag_len(a) {
            return Err(Error::Invalid(format!(
                "fsmap: {what} block {fsb} (AG-encoded) is not a block of the filesystem"
            )));
        }
        Ok((a.0, b.0))
    };
    let (a0, b0) = valid(start.unwrap_or(0), "start")?;
    let last_ag = geo.ag_count - 1;
    let last = (last_ag, geo.ag_len(AgNumber(last_ag)) - 1);
    // An end past the filesystem is its last block, as xfs_db takes it; an
    // end past its AG's last block, that block.
    let (a1, b1) = match end.map(|e| geo.fsb_split(FsBlock(e))) {
        Some((a, b)) if a.0 < geo.ag_count => (a.0, b.0.min(geo.ag_len(a) - 1)),
        _ => last,
    };
    if (a1, b1) < (a0, b0) {
        return Err(Error::Invalid(format!(
            "fsmap: the end block comes before the start block ({}/{} before {a0}/{b0})",
            a1, b1
        )));
    }
    for agno in a0..=a1 {
        let low = if agno == a0 { b0 } else { 0 };
        let high = if agno == a1 { b1 } else { u32::MAX };
        let agf = read_hdr(fs, agno, XFS_AGF_SECTOR, &Verifier::Agf { agno })?;
        let t = Tree {
            what: "rmap btree",
            agno,
            root: be32_or0(&agf, 24),
            levels: be32_or0(&agf, 36),
            magic: XFS_RMAP_CRC_MAGIC,
            rec_len: REC_LEN,
            key_len: 2 * KEY_LEN,
        };
        // A node key: the lowest block the subtree maps, then (in the high
        // key) the highest.
        let keep = |k: &[u8]| be32_or0(k, 0) <= high && be32_or0(k, KEY_LEN) >= low;
        walk_where(fs, &t, &keep, &mut |r| {
            let agbno = be32_or0(r, 0);
            let len = be32_or0(r, 4);
            let last = u64::from(agbno) + u64::from(len.max(1)) - 1;
            if agbno > high || last < u64::from(low) {
                return Ok(());
            }
            let owner = u64::from_be_bytes(r[8..16].try_into().expect("8 bytes"));
            let off = u64::from_be_bytes(r[16..24].try_into().expect("8 bytes"));
            f(&Mapping {
                agno,
                agbno,
                len,
                owner: owner as i64,
                offset: off & OFF_MASK,
                bmbt: off & OFF_BMBT_BLOCK != 0,
                attr_fork: off & OFF_ATTR_FORK != 0,
                unwritten: off & OFF_UNWRITTEN != 0,
            });
            Ok(())
        })?;
    }
    Ok(())
}

//! Attribute leaf blocks (v5 magic 0x3bee).
//!
//! A leaf block starts with an 80-byte header: the 56-byte da3 block info
//! (sibling links, magic, CRC, block number, UUID, owner), then the entry
//! count, bytes used, start of the name area, a holes flag, a 3-slot free
//! map and padding. Fixed 8-byte entries (hash, name offset, flags) follow
//! the header and grow upward; names and values are packed from the end of
//! the block downward.

use super::{loc, namespace_of, RawEntry, ValueRef, FLAG_LOCAL};
pub(crate) use crate::bytes::{be16, be32};
use crate::error::{Error, Result};
use xfs_format::layout::Layout;

/// Offset of the forward sibling link (be32 attr-fork block, 0 = none).
pub(crate) const INFO_FORW: usize = 0;
/// Offset of the backward sibling link.
pub(crate) const INFO_BACK: usize = 4;
/// Offset of the 16-bit magic.
pub(crate) const INFO_MAGIC: usize = 8;
/// Magic of a v5 attribute leaf block.
pub(crate) const ATTR3_LEAF_MAGIC: u16 = xfs_format::attr::XFS_ATTR3_LEAF_MAGIC;

/// Offset of the entry count (be16).
pub(crate) const HDR_COUNT: usize = 56;
/// Offset of the first used byte of the name area (be16, 0 = block size).
pub(crate) const HDR_FIRSTUSED: usize = 60;
/// Size of the v5 leaf header.
pub(crate) const LEAF_HDR: usize = 80;
/// Size of one leaf entry.
pub(crate) const ENTRY_SIZE: usize = 8;
/// Offsets inside an entry.
pub(crate) const ENT_NAMEIDX: usize = 4;
pub(crate) const ENT_FLAGS: usize = 6;
/// Local name: value length be16, name length u8, then name and value.
pub(crate) const LOCAL_HDR: usize = 3;
/// Remote name: value block be32, value length be32, name length u8, name.
pub(crate) const REMOTE_HDR: usize = 9;

/// The entries and the forward sibling link of a verified leaf block.
pub(crate) struct Leaf {
    pub entries: Vec<RawEntry>,
    pub forw: u32,
    pub back: u32,
    /// Hash of the last entry (visible or not), if any.
    pub last_hash: Option<u32>,
}

/// Decodes the leaf at attr-fork block `dablk`. `buf` already passed the
/// da3 verifier (CRC, magic, identity), so it is at least 64 bytes long.
pub(crate) fn parse(l: &Layout, ino: u64, dablk: u64, buf: &[u8]) -> Result<Leaf> {
    let bad = |d: String| Error::corrupt("attr leaf block", loc(ino, dablk), d);
    // count, usedbytes, firstused follow the block info (v4: 12 bytes, v5: 56).
    let hdr_count = l.da_count();
    let (hdr_firstused, leaf_hdr) = (hdr_count + HDR_FIRSTUSED - HDR_COUNT, l.attr_leaf_hdr);
    if buf.len() < leaf_hdr {
        return Err(bad(format!(
            "block of {} bytes is shorter than the leaf header",
            buf.len()
        )));
    }
    if be16(buf, INFO_MAGIC) != l.attr_leaf_magic {
        return Err(bad(format!(
            "magic {:#06x} is not an attr leaf",
            be16(buf, INFO_MAGIC)
        )));
    }
    let count = usize::from(be16(buf, hdr_count));
    let firstused = match usize::from(be16(buf, hdr_firstused)) {
        0 => buf.len(),
        f => f,
    };
    let ents_end = leaf_hdr + count * ENTRY_SIZE;
    if firstused > buf.len() || (count > 0 && ents_end > firstused) || ents_end > buf.len() {
        return Err(bad(format!(
            "{count} entries end at byte {ents_end}, names start at {firstused} in a {}-byte block",
            buf.len()
        )));
    }
    // Bounded by the bytes the entries occupy (checked above).
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let e = &buf[leaf_hdr + i * ENTRY_SIZE..leaf_hdr + (i + 1) * ENTRY_SIZE];
        let hash = be32(e, 0);
        let nameidx = usize::from(be16(e, ENT_NAMEIDX));
        let flags = e[ENT_FLAGS];
        let Some(ns) = namespace_of(flags).map_err(|d| bad(format!("entry {i}: {d}")))? else {
            continue;
        };
        if nameidx < firstused || nameidx < ents_end || nameidx >= buf.len() {
            return Err(bad(format!(
                "entry {i} names byte {nameidx}, outside the name area {firstused}..{}",
                buf.len()
            )));
        }
        let rest = &buf[nameidx..];
        let entry = if flags & FLAG_LOCAL != 0 {
            if rest.len() < LOCAL_HDR {
                return Err(bad(format!(
                    "entry {i}: local name header at byte {nameidx} runs past the block"
                )));
            }
            let valuelen = usize::from(be16(rest, 0));
            let namelen = usize::from(rest[2]);
            let end = LOCAL_HDR + namelen + valuelen;
            if end > rest.len() || namelen == 0 {
                return Err(bad(format!(
                    "entry {i}: local name of {namelen} bytes and value of {valuelen} bytes at byte {nameidx} do not fit"
                )));
            }
            RawEntry {
                ns,
                name: rest[LOCAL_HDR..LOCAL_HDR + namelen].to_vec(),
                value: ValueRef::Local(rest[LOCAL_HDR + namelen..end].to_vec()),
                dablk,
                hash,
            }
        } else {
            if rest.len() < REMOTE_HDR {
                return Err(bad(format!(
                    "entry {i}: remote name header at byte {nameidx} runs past the block"
                )));
            }
            let blk = be32(rest, 0);
            let len = be32(rest, 4);
            let namelen = usize::from(rest[8]);
            if REMOTE_HDR + namelen > rest.len() || namelen == 0 {
                return Err(bad(format!(
                    "entry {i}: remote name of {namelen} bytes at byte {nameidx} does not fit"
                )));
            }
            RawEntry {
                ns,
                name: rest[REMOTE_HDR..REMOTE_HDR + namelen].to_vec(),
                value: ValueRef::Remote { blk, len },
                dablk,
                hash,
            }
        };
        entries.push(entry);
    }
    let last_hash = count
        .checked_sub(1)
        .map(|i| be32(buf, leaf_hdr + i * ENTRY_SIZE));
    Ok(Leaf {
        entries,
        forw: be32(buf, INFO_FORW),
        back: be32(buf, INFO_BACK),
        last_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1024-byte leaf with one local and one remote entry.
    fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[INFO_MAGIC..INFO_MAGIC + 2].copy_from_slice(&ATTR3_LEAF_MAGIC.to_be_bytes());
        b[HDR_COUNT..HDR_COUNT + 2].copy_from_slice(&2u16.to_be_bytes());
        // local "ab" = "xyz" at 1000
        b[1000..1003].copy_from_slice(&[0, 3, 2]);
        b[1003..1008].copy_from_slice(b"abxyz");
        // remote "r" at 980: blk 7, len 5000
        b[980..984].copy_from_slice(&7u32.to_be_bytes());
        b[984..988].copy_from_slice(&5000u32.to_be_bytes());
        b[988] = 1;
        b[989] = b'r';
        b[HDR_FIRSTUSED..HDR_FIRSTUSED + 2].copy_from_slice(&980u16.to_be_bytes());
        b[LEAF_HDR + 4..LEAF_HDR + 6].copy_from_slice(&1000u16.to_be_bytes());
        b[LEAF_HDR + 6] = FLAG_LOCAL;
        b[LEAF_HDR + 12..LEAF_HDR + 14].copy_from_slice(&980u16.to_be_bytes());
        b[LEAF_HDR + 14] = super::super::FLAG_ROOT;
        b
    }

    #[test]
    fn decodes_local_and_remote() {
        let l = parse(&xfs_format::layout::V5, 5, 0, &sample()).unwrap();
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[0].name, b"ab");
        assert!(matches!(&l.entries[0].value, ValueRef::Local(v) if v == b"xyz"));
        assert_eq!(l.entries[1].ns, super::super::Namespace::Trusted);
        assert!(matches!(
            l.entries[1].value,
            ValueRef::Remote { blk: 7, len: 5000 }
        ));
    }

    #[test]
    fn every_byte_flip_is_handled() {
        let good = sample();
        for i in 0..good.len() {
            for v in [0u8, 0xff, 0x80] {
                let mut b = good.clone();
                b[i] = v;
                let _ = parse(&xfs_format::layout::V5, 5, 0, &b);
            }
        }
        let mut b = good.clone();
        b[HDR_COUNT..HDR_COUNT + 2].copy_from_slice(&0xffffu16.to_be_bytes());
        assert!(matches!(
            parse(&xfs_format::layout::V5, 5, 0, &b),
            Err(Error::Corrupt {
                what: "attr leaf block",
                ..
            })
        ));
    }
}

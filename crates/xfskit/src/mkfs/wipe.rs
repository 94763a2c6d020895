//! Existing-content checks before formatting: find the signatures of
//! filesystems, swap and partition tables that mkfs must not destroy without
//! `-f`, and the old XFS secondary superblocks that must go when it does.

use super::io::{IoStats, Sink};
use crate::bytes::{be32, be64};
use std::io;

/// A signature found on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// What it is ("xfs", "ext4", "btrfs", "swap", "dos", "gpt").
    pub kind: &'static str,
    /// Byte offset where it was seen.
    pub offset: u64,
}

/// Geometry of an old XFS filesystem found on the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OldXfs {
    agblocks: u64,
    agcount: u64,
    blocksize: u64,
}

/// Parse an old XFS superblock well enough to find its secondaries.
fn old_xfs(sb: &[u8]) -> Option<OldXfs> {
    if &sb[..4] != b"XFSB" {
        return None;
    }
    let blocksize = u64::from(be32(sb, 4));
    let blocklog = sb[120];
    if !(9..=16).contains(&blocklog) || blocksize != 1 << blocklog {
        return None;
    }
    let dblocks = be64(sb, 8);
    let agblocks = u64::from(be32(sb, 84));
    let agcount = u64::from(be32(sb, 88));
    if agblocks == 0 || agcount == 0 {
        return None;
    }
    let full = agcount.checked_mul(agblocks)?;
    if dblocks > full || dblocks < (agcount - 1) * agblocks {
        return None;
    }
    Some(OldXfs {
        agblocks,
        agcount,
        blocksize,
    })
}

/// Look for known signatures in the first 72 KiB of a `len`-byte target.
pub(crate) fn detect(sink: &Sink<'_>, len: u64) -> io::Result<(Vec<Signature>, Option<OldXfs>)> {
    let want = (72 * 1024u64).min(len) as usize;
    let mut head = vec![0u8; want];
    if want > 0 {
        sink.read_at(&mut head, 0)?;
    }
    let mut found = Vec::new();
    let mut old = None;
    let at = |off: usize, sig: &[u8]| head.get(off..off + sig.len()) == Some(sig);
    if head.len() >= 512 {
        old = old_xfs(&head[..512]);
        if at(0, b"XFSB") {
            found.push(Signature {
                kind: "xfs",
                offset: 0,
            });
        }
    }
    if at(1080, &[0x53, 0xef]) {
        found.push(Signature {
            kind: "ext2/3/4",
            offset: 1080,
        });
    }
    if at(0x10040, b"_BHRfS_M") {
        found.push(Signature {
            kind: "btrfs",
            offset: 0x10040,
        });
    }
    for page in [4096usize, 8192, 16384, 65536] {
        if at(page - 10, b"SWAPSPACE2") || at(page - 10, b"SWAP-SPACE") {
            found.push(Signature {
                kind: "swap",
                offset: page as u64 - 10,
            });
        }
    }
    if at(512, b"EFI PART") {
        found.push(Signature {
            kind: "gpt",
            offset: 512,
        });
    } else if at(510, &[0x55, 0xaa]) && !found.iter().any(|s| s.kind == "xfs") {
        found.push(Signature {
            kind: "dos",
            offset: 510,
        });
    }
    Ok((found, old))
}

/// Zero the secondary superblocks of an old XFS filesystem (sector 0 of
/// each of its AGs that lies inside the target).
pub(crate) fn zero_old_secondaries(
    sink: &Sink<'_>,
    old: &OldXfs,
    len: u64,
    stats: &mut IoStats,
) -> io::Result<()> {
    for agno in 1..old.agcount {
        let off = agno * old.agblocks * old.blocksize;
        if off + 512 > len {
            break;
        }
        sink.zero_range(off, 512, stats)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_sb_parse() {
        let mut sb = [0u8; 512];
        sb[..4].copy_from_slice(b"XFSB");
        sb[4..8].copy_from_slice(&4096u32.to_be_bytes());
        sb[8..16].copy_from_slice(&262144u64.to_be_bytes());
        sb[84..88].copy_from_slice(&65536u32.to_be_bytes());
        sb[88..92].copy_from_slice(&4u32.to_be_bytes());
        sb[120] = 12;
        assert_eq!(
            old_xfs(&sb),
            Some(OldXfs {
                agblocks: 65536,
                agcount: 4,
                blocksize: 4096
            })
        );
        sb[120] = 11;
        assert_eq!(old_xfs(&sb), None);
    }
}

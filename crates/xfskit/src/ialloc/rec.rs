//! One inode btree record in memory: a 64-inode chunk with its holes
//! (sparse chunks), free mask and counts, and the bit logic on it.

use crate::error::{Error, Location, Result};
use xfs_format::btree::{XFS_INODES_PER_CHUNK, XFS_INODES_PER_HOLEMASK_BIT};

/// Bytes of one inobt/finobt record on disk.
pub(crate) const REC_LEN: usize = 16;

/// Every inode of a chunk free.
pub(crate) const ALL_FREE: u64 = u64::MAX;

/// An inobt/finobt record, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IRec {
    /// AG inode number of the chunk's first inode (multiple of 64).
    pub startino: u32,
    /// One bit per 4 inodes without disk space.
    pub holemask: u16,
    /// Inodes with disk space.
    pub count: u8,
    /// Free inodes among them.
    pub freecount: u8,
    /// One bit per inode that is free (holes are always marked free).
    pub free: u64,
}

/// Expands a holemask (one bit per 4 inodes) to one bit per inode.
pub(crate) fn holes_to_inodes(holemask: u16) -> u64 {
    let mut m = 0u64;
    for bit in 0..16 {
        if holemask & (1 << bit) != 0 {
            m |= 0xf << (bit * XFS_INODES_PER_HOLEMASK_BIT);
        }
    }
    m
}

impl IRec {
    /// A fully allocated, entirely free chunk.
    pub fn full_free(startino: u32) -> IRec {
        IRec {
            startino,
            holemask: 0,
            count: XFS_INODES_PER_CHUNK as u8,
            freecount: XFS_INODES_PER_CHUNK as u8,
            free: ALL_FREE,
        }
    }

    /// Inodes that exist (not in a hole), as a bit mask.
    pub fn present(&self) -> u64 {
        !holes_to_inodes(self.holemask)
    }

    /// Free inodes that exist.
    pub fn real_free(&self) -> u64 {
        self.free & self.present()
    }

    /// True when the chunk has holes.
    pub fn is_sparse(&self) -> bool {
        self.holemask != 0
    }

    /// Index of the lowest free inode that exists.
    pub fn first_free(&self) -> Option<u32> {
        let f = self.real_free();
        (f != 0).then(|| f.trailing_zeros())
    }

    /// Marks inode `idx` of the chunk used.
    pub fn take(&mut self, idx: u32) -> Result<()> {
        let bit = 1u64 << idx;
        if idx >= 64 || self.real_free() & bit == 0 || self.freecount == 0 {
            return Err(self.bad(format!("inode {idx} of the chunk is not free")));
        }
        self.free &= !bit;
        self.freecount -= 1;
        Ok(())
    }

    /// Marks inode `idx` of the chunk free.
    pub fn give(&mut self, idx: u32) -> Result<()> {
        let bit = 1u64 << idx;
        if idx >= 64 || self.present() & bit == 0 || self.free & bit != 0 {
            return Err(self.bad(format!("inode {idx} of the chunk is not in use")));
        }
        self.free |= bit;
        self.freecount += 1;
        Ok(())
    }

    /// True when every existing inode is free.
    pub fn all_free(&self) -> bool {
        self.free == ALL_FREE
    }

    /// True when `o` (a new sparse piece) can be merged into `self`: same
    /// chunk, both sparse, disjoint inodes.
    pub fn can_merge(&self, o: &IRec) -> bool {
        self.startino == o.startino
            && self.is_sparse()
            && o.is_sparse()
            && self.count != 0
            && o.count != 0
            && u32::from(self.count) + u32::from(o.count) <= XFS_INODES_PER_CHUNK
            && self.present() & o.present() == 0
    }

    /// Merges the sparse piece `o` into `self` (see [`IRec::can_merge`]).
    pub fn merge(&mut self, o: &IRec) {
        self.count += o.count;
        self.freecount += o.freecount;
        self.holemask &= o.holemask;
        self.free &= o.free;
    }

    /// Checks the record's internal consistency.
    pub fn check(&self) -> Result<()> {
        // Chunks are aligned to sb_inoalignmt blocks, not always to 64
        // inodes (2 KiB inodes without sparse inodes: 32 blocks aligned
        // to 16).
        if self.startino > u32::MAX - XFS_INODES_PER_CHUNK {
            return Err(self.bad("no room for 64 inodes after the chunk start".into()));
        }
        let present = self.present();
        if u32::from(self.count) != present.count_ones() {
            return Err(self.bad(format!("count {} does not match the holemask", self.count)));
        }
        if self.free | present != ALL_FREE {
            return Err(self.bad("holes not marked free".into()));
        }
        if u32::from(self.freecount) != self.real_free().count_ones() {
            return Err(self.bad(format!(
                "free count {} does not match the free mask",
                self.freecount
            )));
        }
        Ok(())
    }

    fn bad(&self, detail: String) -> Error {
        Error::corrupt(
            "inobt record",
            Location::Other(format!("chunk at agino {}", self.startino)),
            detail,
        )
    }

    /// Decodes a raw record (`sparse`: the filesystem has sparse inodes,
    /// so bytes 4..8 are holemask, count and freecount).
    pub fn decode(raw: &[u8], sparse: bool) -> Result<IRec> {
        if raw.len() < REC_LEN {
            return Err(Error::corrupt(
                "inobt record",
                Location::Other("short record".into()),
                "fewer than 16 bytes",
            ));
        }
        let startino = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let mut free = [0u8; 8];
        free.copy_from_slice(&raw[8..16]);
        let free = u64::from_be_bytes(free);
        let rec = if sparse {
            IRec {
                startino,
                holemask: u16::from_be_bytes([raw[4], raw[5]]),
                count: raw[6],
                freecount: raw[7],
                free,
            }
        } else {
            let fc = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]);
            IRec {
                startino,
                holemask: 0,
                count: XFS_INODES_PER_CHUNK as u8,
                freecount: fc.min(255) as u8,
                free,
            }
        };
        rec.check()?;
        Ok(rec)
    }

    /// Encodes the record into `raw` (16 bytes).
    pub fn encode(&self, raw: &mut [u8], sparse: bool) {
        raw[0..4].copy_from_slice(&self.startino.to_be_bytes());
        if sparse {
            raw[4..6].copy_from_slice(&self.holemask.to_be_bytes());
            raw[6] = self.count;
            raw[7] = self.freecount;
        } else {
            raw[4..8].copy_from_slice(&u32::from(self.freecount).to_be_bytes());
        }
        raw[8..16].copy_from_slice(&self.free.to_be_bytes());
    }

    /// The record's raw bytes.
    #[cfg(test)]
    pub fn encoded(&self, sparse: bool) -> [u8; REC_LEN] {
        let mut b = [0u8; REC_LEN];
        self.encode(&mut b, sparse);
        b
    }

    /// Runs of existing inodes as (first inode index, inode count), in
    /// order: the extents a chunk occupies on disk.
    pub fn present_runs(&self) -> Vec<(u32, u32)> {
        let p = self.present();
        let mut runs = Vec::new();
        let mut i = 0u32;
        while i < 64 {
            if p & (1u64 << i) == 0 {
                i += 1;
                continue;
            }
            let start = i;
            while i < 64 && p & (1u64 << i) != 0 {
                i += 1;
            }
            runs.push((start, i - start));
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_give_keep_counts() {
        let mut r = IRec::full_free(128);
        assert_eq!(r.first_free(), Some(0));
        r.take(0).unwrap();
        r.take(5).unwrap();
        assert_eq!(r.freecount, 62);
        assert_eq!(r.first_free(), Some(1));
        assert!(r.take(5).is_err(), "taking a used inode");
        r.give(5).unwrap();
        assert!(r.give(5).is_err(), "freeing a free inode");
        r.give(0).unwrap();
        assert!(r.all_free());
        r.check().unwrap();
    }

    #[test]
    fn sparse_pieces_merge() {
        // Lower 16 inodes present (holemask bits 4..15 set).
        let a = IRec {
            startino: 64,
            holemask: 0xfff0,
            count: 16,
            freecount: 16,
            free: ALL_FREE,
        };
        a.check().unwrap();
        let mut b = IRec {
            startino: 64,
            holemask: 0xff0f,
            count: 16,
            freecount: 16,
            free: ALL_FREE,
        };
        b.check().unwrap();
        assert!(a.can_merge(&b));
        assert!(!a.can_merge(&a), "overlap");
        b.take(16).unwrap();
        b.merge(&a);
        b.check().unwrap();
        assert_eq!(b.holemask, 0xff00);
        assert_eq!(b.count, 32);
        assert_eq!(b.freecount, 31);
        assert_eq!(b.present_runs(), vec![(0, 32)]);
        // A hole inode cannot be taken.
        assert!(b.take(40).is_err());
    }

    #[test]
    fn round_trip_both_layouts() {
        let mut r = IRec::full_free(192);
        r.take(3).unwrap();
        for sparse in [false, true] {
            let raw = r.encoded(sparse);
            assert_eq!(IRec::decode(&raw, sparse).unwrap(), r);
        }
        assert_eq!(&r.encoded(false)[4..8], &63u32.to_be_bytes());
        let s = IRec {
            startino: 0,
            holemask: 0x00ff,
            count: 32,
            freecount: 32,
            free: ALL_FREE,
        };
        assert_eq!(s.present_runs(), vec![(32, 32)]);
        let bad = IRec { count: 30, ..s };
        assert!(IRec::decode(&bad.encoded(true), true).is_err());
    }
}

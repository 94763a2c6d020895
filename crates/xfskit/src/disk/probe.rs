//! Which filesystem (or other content) a partition holds, by the magic
//! numbers at fixed offsets, as blkid finds them. Only XFS is opened; the
//! others are named so that `xfskit parts` and the errors can say what a
//! partition is.

/// A magic string at a byte offset.
struct Magic {
    name: &'static str,
    off: u64,
    bytes: &'static [u8],
}

/// Checked in order; the first that matches names the content.
const MAGICS: &[Magic] = &[
    Magic {
        name: "xfs",
        off: 0,
        bytes: b"XFSB",
    },
    Magic {
        name: "LVM2 member",
        off: 512 + 24,
        bytes: b"LVM2 001",
    },
    Magic {
        name: "LVM2 member",
        off: 24,
        bytes: b"LVM2 001",
    },
    Magic {
        name: "crypto_LUKS",
        off: 0,
        bytes: b"LUKS\xba\xbe",
    },
    Magic {
        name: "btrfs",
        off: 0x10040,
        bytes: b"_BHRfS_M",
    },
    Magic {
        name: "ext4",
        off: 0x438,
        bytes: &[0x53, 0xEF],
    },
    Magic {
        name: "swap",
        off: 4086,
        bytes: b"SWAPSPACE2",
    },
    Magic {
        name: "swap",
        off: 4086,
        bytes: b"SWAP-SPACE",
    },
    Magic {
        name: "ntfs",
        off: 3,
        bytes: b"NTFS    ",
    },
    Magic {
        name: "vfat",
        off: 82,
        bytes: b"FAT32   ",
    },
    Magic {
        name: "vfat",
        off: 54,
        bytes: b"FAT16   ",
    },
    Magic {
        name: "vfat",
        off: 54,
        bytes: b"FAT12   ",
    },
    Magic {
        name: "iso9660",
        off: 0x8001,
        bytes: b"CD001",
    },
    Magic {
        name: "squashfs",
        off: 0,
        bytes: b"hsqs",
    },
];

/// The name of what the bytes read by `read(offset, len)` hold, if known.
/// `read` returns None for bytes it cannot read (past the end).
pub(crate) fn probe(read: impl Fn(u64, usize) -> Option<Vec<u8>>) -> Option<&'static str> {
    let m = MAGICS
        .iter()
        .find(|m| read(m.off, m.bytes.len()).is_some_and(|b| b == m.bytes))?;
    if m.name == "ext4" {
        return Some(ext_flavour(&read));
    }
    Some(m.name)
}

/// ext2, ext3 or ext4, by the feature flags of the superblock at 1024.
fn ext_flavour(read: &impl Fn(u64, usize) -> Option<Vec<u8>>) -> &'static str {
    let Some(sb) = read(1024, 0x68) else {
        return "ext4";
    };
    let compat = u32::from_le_bytes([sb[0x5C], sb[0x5D], sb[0x5E], sb[0x5F]]);
    let incompat = u32::from_le_bytes([sb[0x60], sb[0x61], sb[0x62], sb[0x63]]);
    // Extents, 64bit, flex_bg: ext4; a journal alone: ext3.
    if incompat & (0x40 | 0x80 | 0x200) != 0 {
        "ext4"
    } else if compat & 0x4 != 0 {
        "ext3"
    } else {
        "ext2"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(img: Vec<u8>) -> impl Fn(u64, usize) -> Option<Vec<u8>> {
        move |off, len| {
            let s = usize::try_from(off).ok()?;
            img.get(s..s.checked_add(len)?).map(<[u8]>::to_vec)
        }
    }

    #[test]
    fn finds_xfs_swap_and_nothing() {
        let mut x = vec![0u8; 8192];
        x[..4].copy_from_slice(b"XFSB");
        assert_eq!(probe(reader(x)), Some("xfs"));
        let mut s = vec![0u8; 8192];
        s[4086..4096].copy_from_slice(b"SWAPSPACE2");
        assert_eq!(probe(reader(s)), Some("swap"));
        assert_eq!(probe(reader(vec![0u8; 100])), None);
    }

    #[test]
    fn tells_ext_versions_apart() {
        let mut e = vec![0u8; 4096];
        e[0x438..0x43A].copy_from_slice(&[0x53, 0xEF]);
        assert_eq!(probe(reader(e.clone())), Some("ext2"));
        e[1024 + 0x5C] = 4;
        assert_eq!(probe(reader(e.clone())), Some("ext3"));
        e[1024 + 0x60] = 0x40;
        assert_eq!(probe(reader(e)), Some("ext4"));
    }
}
